"""WTA over SIFT vs plain SIFT with L2 for descriptor matching (Yagnik et al. Sec. 5.2).

Patch pairs with exact ground truth, in the spirit of the Winder & Brown benchmark the
paper uses:

* ``--images`` dev photos from ``../shared/data/ukbench`` (every 25th image, so they show
  different objects), each warped by ``--warps`` random homographies (rotation,
  anisotropic scale, shear, perspective) with ``cv2.warpPerspective``;
  ``--difficulty hard`` (default) uses 1.6x stronger warps and also changes illumination
  (gain, gamma, offset), blurs, adds noise and JPEG-compresses the warped image;
* SIFT keypoints are detected in the original; each is mapped through the homography
  (position, local scale ``sqrt|det J|``, orientation of the mapped direction) with a
  detector-like jitter (``--jitter``: +-1 px, +-10 % scale, +-8 degrees per unit) and
  both patches are described with OpenCV SIFT (L2-normalised, as in the paper);
* positives: the corresponding pairs; *random negatives* (the paper's protocol): random
  pairs of the same image pair more than 20 px apart, as many as positives; *near
  negatives* (harder): each keypoint against another one 5-30 px from its true location;
* distance: L2 for SIFT (and RootSIFT), ``1 - code agreement`` for WTA codes;
* reported: the false-match rate at 95 % recall (fraction of negatives closer than the
  95th percentile of positive distances). The paper reports SIFT 36.2 % -> WTA-SIFT
  24.7 % (10,000 codes, K = 2) on Liberty; also nearest-neighbour matching accuracy (the
  ``wta_match_candidates`` use): for each keypoint, is the best-scoring descriptor of the
  warped image (by L2 / by code agreement) the right one?

Run: ``nice python tests/benchmarks/bench_wta_sift.py`` (1-6 minutes on 2 cores,
depending on load).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np

from engine.hashing.wta import WTAHash, code_agreement

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ukbench"


def random_homography(rng: np.random.Generator, w: int, h: int, hard: bool) -> np.ndarray:
    """A random viewpoint change centred on the image (stronger when ``hard``)."""
    c = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]], float)
    k = 1.6 if hard else 1.0
    a = rng.uniform(-np.pi / 6, np.pi / 6) * k
    s = np.exp(rng.uniform(-0.3, 0.3) * k)
    aniso = np.exp(rng.uniform(-0.15, 0.15) * k)
    shear = rng.uniform(-0.15, 0.15) * k
    A = np.array([[s * aniso, shear, 0], [0, s / aniso, 0], [0, 0, 1]])
    R = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    P = np.eye(3)
    P[2, :2] = rng.uniform(-6e-4, 6e-4, 2) * k
    return np.linalg.inv(c) @ P @ R @ A @ c


def photometric(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    """Illumination change, blur, sensor noise and JPEG compression."""
    x = img.astype(np.float32) / 255.0
    x = rng.uniform(0.6, 1.3) * x ** rng.uniform(0.7, 1.4) + rng.uniform(-0.1, 0.1)
    if rng.random() < 0.5:
        x = cv2.GaussianBlur(x, (0, 0), rng.uniform(0.6, 1.2))
    x = x + rng.normal(0.0, rng.uniform(0.01, 0.03), x.shape).astype(np.float32)
    out = np.clip(x * 255.0, 0, 255).astype(np.uint8)
    _, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(40, 80))])
    return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)


def local_scale(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """sqrt(|det J|) of the homography at ``pts`` (N, 2)."""
    x, y = pts[:, 0], pts[:, 1]
    den = H[2, 0] * x + H[2, 1] * y + H[2, 2]
    u = (H[0, 0] * x + H[0, 1] * y + H[0, 2]) / den
    v = (H[1, 0] * x + H[1, 1] * y + H[1, 2]) / den
    J11 = (H[0, 0] - u * H[2, 0]) / den
    J12 = (H[0, 1] - u * H[2, 1]) / den
    J21 = (H[1, 0] - v * H[2, 0]) / den
    J22 = (H[1, 1] - v * H[2, 1]) / den
    return np.sqrt(np.abs(J11 * J22 - J12 * J21))


def predicted_angle(H: np.ndarray, xy: np.ndarray, angle_deg: np.ndarray) -> np.ndarray:
    """Orientation (degrees, OpenCV convention) of keypoint directions mapped by ``H``."""
    a = np.deg2rad(angle_deg)
    tip = xy + 3.0 * np.stack([np.cos(a), np.sin(a)], axis=1)
    p0 = cv2.perspectiveTransform(xy[None].astype(np.float64), H)[0]
    p1 = cv2.perspectiveTransform(tip[None].astype(np.float64), H)[0]
    d = p1 - p0
    return np.rad2deg(np.arctan2(d[:, 1], d[:, 0])) % 360.0


def sift(gray: np.ndarray, n: int):
    det = cv2.SIFT_create(nfeatures=n)
    kps, desc = det.detectAndCompute(gray, None)
    if desc is None:
        z = np.zeros(0, np.float32)
        return np.zeros((0, 2), np.float32), z, z, np.zeros((0, 128), np.float32)
    xy = np.array([k.pt for k in kps], np.float32)
    size = np.array([k.size for k in kps], np.float32)
    angle = np.array([k.angle for k in kps], np.float32)
    desc = desc.astype(np.float32)
    desc /= np.maximum(np.linalg.norm(desc, axis=1, keepdims=True), 1e-12)
    return xy, size, angle, desc


def build_pairs(args):
    rng = np.random.default_rng(args.seed)
    paths = sorted(DATA.glob("*.jpg"))[:: max(1, 500 // args.images)][: args.images]
    det = cv2.SIFT_create(nfeatures=args.features)
    pos_a, pos_b, neg_a, neg_b, near_a, near_b, nn_tasks = [], [], [], [], [], [], []
    hard = args.difficulty == "hard"
    for path in paths:
        img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        h, w = img.shape
        kps0, _ = det.detectAndCompute(img, None)
        for _ in range(args.warps):
            H = random_homography(rng, w, h, hard)
            warped = cv2.warpPerspective(img, H, (w, h), flags=cv2.INTER_LINEAR)
            if hard:
                warped = photometric(rng, warped)
            xy0 = np.array([k.pt for k in kps0], np.float64)
            s0 = np.array([k.size for k in kps0], np.float64)
            a0 = np.array([k.angle for k in kps0], np.float64)
            proj = cv2.perspectiveTransform(xy0[None], H)[0]
            inside = (
                (proj[:, 0] > 8) & (proj[:, 1] > 8) & (proj[:, 0] < w - 8) & (proj[:, 1] < h - 8)
            )
            idx = np.flatnonzero(inside)
            if idx.size < 10:
                continue
            # exact correspondence, plus detector-like jitter (position, scale, angle)
            j = args.jitter
            p1 = proj[idx] + rng.uniform(-j, j, (idx.size, 2))
            s1 = s0[idx] * local_scale(H, xy0[idx]) * np.exp(rng.uniform(-0.1, 0.1, idx.size) * j)
            ang1 = predicted_angle(H, xy0[idx], a0[idx]) + rng.uniform(-8, 8, idx.size) * j
            k0 = [
                cv2.KeyPoint(*xy0[i], float(s0[i]), float(a0[i]), 0, 0, int(t))
                for t, i in enumerate(idx)
            ]
            k1 = [
                cv2.KeyPoint(
                    float(p1[t, 0]), float(p1[t, 1]), float(s1[t]), float(ang1[t] % 360.0), 0, 0, t
                )
                for t in range(idx.size)
            ]
            k0, d0 = det.compute(img, k0)
            k1, d1 = det.compute(warped, k1)
            id0 = np.array([k.class_id for k in k0])
            id1 = np.array([k.class_id for k in k1])
            common, i0, i1 = np.intersect1d(id0, id1, return_indices=True)
            d0 = d0[i0].astype(np.float32)
            d1 = d1[i1].astype(np.float32)
            d0 /= np.maximum(np.linalg.norm(d0, axis=1, keepdims=True), 1e-12)
            d1 /= np.maximum(np.linalg.norm(d1, axis=1, keepdims=True), 1e-12)
            n = common.size
            pos_a.append(d0)
            pos_b.append(d1)
            loc = p1[common]
            dist = np.linalg.norm(loc[:, None] - loc[None], axis=2)
            # random negatives (the paper's protocol): pairs more than 20 px apart
            ra, rb = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
            far = dist[ra, rb] > 20
            neg_a.append(d0[ra[far][:n]])
            neg_b.append(d1[rb[far][:n]])
            # near negatives: a different keypoint 5-30 px from the true location
            cand = np.where((dist > 5) & (dist < 30), rng.random(dist.shape), -1.0)
            nb = cand.argmax(axis=1)
            ok = cand[np.arange(n), nb] >= 0
            near_a.append(d0[ok])
            near_b.append(d1[nb[ok]])
            nn_tasks.append((d0, d1, np.arange(n)))
    cat = np.concatenate
    return (
        cat(pos_a),
        cat(pos_b),
        cat(neg_a),
        cat(neg_b),
        cat(near_a),
        cat(near_b),
        nn_tasks,
        len(paths),
    )


def fpr_at_recall(pos_d: np.ndarray, neg_d: np.ndarray, recall: float = 0.95) -> float:
    thr = np.quantile(pos_d, recall, method="higher")
    return float(np.mean(neg_d <= thr))


def rootsift(d: np.ndarray) -> np.ndarray:
    r = np.sqrt(d / np.maximum(d.sum(axis=1, keepdims=True), 1e-12))
    return r


def speed(n: int = 100_000, dim: int = 1000, m: int = 256, K: int = 4) -> None:
    """Hash ``n`` random ``dim``-D vectors into ``m`` codes, 10,000 at a time."""
    rng = np.random.default_rng(0)
    h = WTAHash(m, K).fit(dim)
    times, cpu = [], []
    for _ in range(n // 10_000):
        X = rng.random((10_000, dim), dtype=np.float32)
        t, c = time.perf_counter(), time.process_time()
        h.hash(X)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    print(
        f"speed: {n} x {dim}-D -> {m} codes (K={K}): {sum(times):.2f} s wall "
        f"({sum(cpu):.2f} s CPU) total; per 10,000 vectors {1000 * np.median(times):.0f} ms "
        f"wall median, {1000 * np.median(cpu):.0f} ms CPU median"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--warps", type=int, default=3)
    ap.add_argument("--features", type=int, default=800)
    ap.add_argument(
        "--jitter",
        type=float,
        default=1.0,
        help="detector-noise scale: +-jitter px, +-10%% scale, +-8 deg per unit",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--difficulty",
        choices=("easy", "hard"),
        default="hard",
        help="hard: 1.6x stronger warps + illumination, blur, noise, JPEG",
    )
    ap.add_argument("--no-speed", action="store_true", help="skip the hashing speed test")
    args = ap.parse_args()
    if not args.no_speed:
        speed()
    if not DATA.is_dir():
        raise SystemExit(f"{DATA} not found")
    t0 = time.perf_counter()
    pa, pb, na, nb, ca, cb, tasks, n_img = build_pairs(args)
    n = min(len(pa), len(na))
    pa, pb, na, nb = pa[:n], pb[:n], na[:n], nb[:n]
    print(
        f"{n_img} images x {args.warps} {args.difficulty} homographies: "
        f"{n} positive / {n} random negative / {len(ca)} near negative pairs "
        f"({time.perf_counter() - t0:.1f} s to build)"
    )
    print(
        f"{'descriptor':26s} {'FPR@95% random':>14s} {'FPR@95% near':>12s} {'NN acc':>7s}"
        f" {'hash ms/1k':>10s}"
    )

    def l2(a, b):
        return np.linalg.norm(a - b, axis=1)

    nn_l2 = np.mean(
        np.concatenate(
            [
                ((da**2).sum(1)[:, None] - 2 * da @ db.T + (db**2).sum(1)).argmin(1) == t
                for da, db, t in tasks
            ]
        )
    )
    print(
        f"{'SIFT, L2':26s} {100 * fpr_at_recall(l2(pa, pb), l2(na, nb)):13.1f}% "
        f"{100 * fpr_at_recall(l2(pa, pb), l2(ca, cb)):11.1f}% {100 * nn_l2:6.1f}%"
    )
    ra, rb, rna, rnb, rca, rcb = map(rootsift, (pa, pb, na, nb, ca, cb))
    nn_rs = np.mean(
        np.concatenate([(rootsift(da) @ rootsift(db).T).argmax(1) == t for da, db, t in tasks])
    )
    print(
        f"{'RootSIFT, L2':26s} {100 * fpr_at_recall(l2(ra, rb), l2(rna, rnb)):13.1f}% "
        f"{100 * fpr_at_recall(l2(ra, rb), l2(rca, rcb)):11.1f}% {100 * nn_rs:6.1f}%"
    )
    for K, m in [
        (2, 256),
        (2, 1024),
        (2, 10000),
        (3, 1024),
        (4, 256),
        (4, 1024),
        (4, 4096),
        (8, 1024),
    ]:
        hsh = WTAHash(n_codes=m, window=K, random_state=args.seed).fit(128)
        t = time.perf_counter()
        cpa = hsh.hash(pa)
        ms = 1000 * (time.perf_counter() - t) / len(pa) * 1000
        cpb, cna, cnb = hsh.hash(pb), hsh.hash(na), hsh.hash(nb)
        pos_d = 1.0 - np.mean(cpa == cpb, axis=1)
        neg_d = 1.0 - np.mean(cna == cnb, axis=1)
        near_d = 1.0 - np.mean(hsh.hash(ca) == hsh.hash(cb), axis=1)
        if m <= 1024:
            nn_w = np.mean(
                np.concatenate(
                    [
                        code_agreement(hsh.hash(da), hsh.hash(db)).argmax(1) == tt
                        for da, db, tt in tasks
                    ]
                )
            )
            nn_txt = f"{100 * nn_w:6.1f}%"
        else:
            nn_txt = "     - "
        label = f"WTA-SIFT K={K} m={m}"
        print(
            f"{label:26s} {100 * fpr_at_recall(pos_d, neg_d):13.1f}% "
            f"{100 * fpr_at_recall(pos_d, near_d):11.1f}% {nn_txt} {ms:10.2f}"
        )
    print(f"total {time.perf_counter() - t0:.1f} s; paper (Liberty): SIFT 36.2% -> WTA 24.7%")


if __name__ == "__main__":
    main()
