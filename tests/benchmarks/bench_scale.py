"""Search at 10,000 images: latency, recall of hashed search vs exhaustive, memory.

Run (real views, the default)::

    nice python tests/benchmarks/bench_scale.py --source views [--per-image 20]
        [--views-dir /tmp/simile_scale_views] [--queries 100] [--jobs 2]

or the older synthetic collection::

    nice python tests/benchmarks/bench_scale.py --source synthetic [--n 10000]
        [--workdir /tmp/simile_scale] [--ukbench-index /tmp/simile_bench_ukbench]

``--source views`` (never committed, lives in /tmp): every one of the 500 UKBench dev
images gives ``--per-image`` random realistic VIEWS (:func:`random_view`: one homography
combining a crop of 65-100 %, rotation of +-20 deg and perspective corner jitter of
+-8 %; gamma, gain, colour cast, an illumination gradient and noise; Gaussian blur in half
of them; JPEG quality 40-95), written as JPEGs (320x240) to ``--views-dir`` and indexed
with the real ``simile index --jobs N`` (SIFT extraction included). The queries are
``--queries`` further views made with another seed (of distinct dev images), written to
``<views-dir>_queries`` and NOT indexed; their features are extracted before timing.

``--methods uniform`` / ``--kinds fused,hashes`` measure only some of the methods /
candidate generations (default: all).

``--source synthetic``: every image is one dev image's stored feature set, subsampled
(60-95 %), descriptors jittered (sigma 0.03) and positions moved; no pixels involved.

For each method the query process (a separate process, whose peak RSS is reported,
BLAS limited to one thread, set up as ``simile query``'s: ``keep_heap_warm``) reports
the search part of a query -- ``Collection._search`` from encoding the query's
features to the ranked hits, extraction excluded -- as wall time and as CPU time of the
process (``time.process_time``: on a loaded shared machine the wall time mostly
measures waiting for a core), the fraction of the collection scored
exactly, and recall@10 against the exhaustive pyramid match of the same method
(``wta``: the ``vocabulary`` score). ``fused`` is the default candidate generation of
:mod:`engine.collection` (rank fusion of the hash score -- z-scored hyperplane-bit
agreement plus a quarter of the z-scored WTA code agreement -- with the bag-of-words
inverted file); ``hashes`` is the hash score alone (the honest "hashed search" number),
and the banded WTA index (``bands``) is the older default; all are measured on the same
queries. ``scored`` is the fraction of the collection scored exactly (for ``uniform``:
by the vocabulary pyramid match -- above ``2 x UNIFORM_PRESCORE`` candidates after a
tf-idf cosine narrowing to ``UNIFORM_PRESCORE`` -- the best ``UNIFORM_RERANK`` of them
by the uniform one; ``engine.collection._candidate_fraction``: 2 % fused, 5 % from the
hashes alone).

An index built before :func:`engine.collection.rh_bits` (256 hyperplane bits) is
re-hashed to the bits the collection size asks for by ``simile index`` (no feature is
re-read); run it once on ``--views-dir`` before ``--skip-build``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def random_view(img: np.ndarray, rng: np.random.Generator, out_size=(320, 240)) -> bytes:
    """One realistic view of a BGR image as JPEG bytes (see the module docstring)."""
    import cv2

    h, w = img.shape[:2]
    W, H = out_size
    s = rng.uniform(0.65, 1.0)  # fraction kept: crop + zoom
    a = np.deg2rad(rng.uniform(-20, 20))
    cx = w / 2 + rng.uniform(-0.5, 0.5) * (1 - s) * w
    cy = h / 2 + rng.uniform(-0.5, 0.5) * (1 - s) * h
    base = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [s * w / 2, s * h / 2]
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    quad = base @ R.T + [cx, cy] + rng.uniform(-0.08, 0.08, (4, 2)) * [w, h]
    dst = np.array([[0, 0], [W, 0], [W, H], [0, H]], np.float32)
    M = cv2.getPerspectiveTransform(quad.astype(np.float32), dst)
    out = cv2.warpPerspective(img, M, (W, H), borderMode=cv2.BORDER_REFLECT101)
    x = (out.astype(np.float32) / 255.0) ** rng.uniform(0.7, 1.4)
    x *= rng.uniform(0.7, 1.25) * rng.uniform(0.92, 1.08, 3)
    gy, gx = np.mgrid[0:H, 0:W] / np.array([H, W])[:, None, None]
    grad = 1 + rng.uniform(-0.2, 0.2) * (gx - 0.5) + rng.uniform(-0.2, 0.2) * (gy - 0.5)
    x = np.clip(x * grad[..., None] + rng.normal(0, 0.01, x.shape), 0, 1)
    out = (x * 255 + 0.5).astype(np.uint8)
    if rng.random() < 0.5:
        out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.4, 1.3))
    _ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(40, 96))])
    return buf.tobytes()


def make_views(dst: Path, per_image: int, seed: int, images: np.ndarray | None = None) -> int:
    """Write ``per_image`` views of (some of) the dev images into ``dst``; returns count."""
    import cv2

    files = sorted((ROOT.parent / "shared" / "data" / "ukbench").glob("*.jpg"))
    dst.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    which = range(len(files)) if images is None else images
    n = 0
    for i in which:
        img = cv2.imread(str(files[i]), cv2.IMREAD_COLOR)
        for k in range(per_image):
            (dst / f"{files[i].stem}_v{seed}_{k:02d}.jpg").write_bytes(random_view(img, rng))
            n += 1
    return n


def build_views(args) -> None:
    views = Path(args.views_dir)
    qdir = Path(str(views) + "_queries")
    want = 500 * args.per_image
    have = len(list(views.glob("*.jpg"))) if views.is_dir() else 0
    t = time.perf_counter()
    if have != want:
        shutil.rmtree(views, ignore_errors=True)
        make_views(views, args.per_image, seed=1)
        print(f"wrote {want} views in {time.perf_counter() - t:.0f} s", flush=True)
    if len(list(qdir.glob("*.jpg"))) != args.queries:
        shutil.rmtree(qdir, ignore_errors=True)
        pick = np.random.default_rng(2).choice(500, args.queries, replace=False)
        make_views(qdir, 1, seed=2, images=np.sort(pick))
    cmd = ["simile", "index", str(views), "--index", str(views) + "_index"]
    cmd += ["--jobs", str(args.jobs), "--json"]
    print("$ " + " ".join(cmd), flush=True)
    t, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    print(f"index: {time.perf_counter() - t:.0f} s wall, {cpu:.0f} s CPU: {last}", flush=True)


def _view(f, rng, keep_lo=0.6, keep_hi=0.95, sigma=0.03):
    from engine.features.keypoints import Features

    m = len(f)
    keep = np.sort(rng.choice(m, max(1, int(m * rng.uniform(keep_lo, keep_hi))), replace=False))
    d = f.descriptors[keep] + rng.normal(0, sigma, (keep.size, f.descriptors.shape[1]))
    d = np.maximum(d, 0)
    d = (d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-6)).astype(np.float32)
    a, s = rng.uniform(-0.3, 0.3), rng.uniform(0.8, 1.25)
    R = s * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    xy = (f.xy[keep] @ R.T + rng.uniform(-20, 20, 2)).astype(np.float32)
    return Features(d, xy, None, None, f.image_size, f.kind)


def _base_features(ukb_index: str):
    from engine.collection import Collection

    data = ROOT.parent / "shared" / "data" / "ukbench"
    col = Collection.open(data, ukb_index)
    if len(col.store.ids()) < 500:
        for _ in col.update():
            pass
    feats = [f for _, f in col.store.iter_features()]
    col.close()
    return feats


def build(args) -> None:
    from engine.collection import Collection
    from engine.index.store import IndexStore

    base = _base_features(args.ukbench_index)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    photos = work / "photos"
    photos.mkdir(parents=True)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    with IndexStore.open(work / "index") as store:
        for s in range(0, args.n, 500):
            batch = []
            for j in range(s, min(args.n, s + 500)):
                b = j % len(base)
                batch.append(
                    (str(photos / f"syn{j:05d}_{b:03d}.jpg"), 1, 1, None, _view(base[b], rng))
                )
            store.write_batch(batch)
    print(f"wrote {args.n} synthetic feature sets in {time.perf_counter() - t:.1f} s", flush=True)
    col = Collection.open(photos, work / "index")
    t = time.perf_counter()
    col._refresh(save=True)
    print(f"models + search data for {args.n} images: {time.perf_counter() - t:.1f} s", flush=True)
    col.close()
    _write_synthetic_queries(args, base, rng)


def _write_synthetic_queries(args, base, rng) -> None:
    """Queries of the synthetic collection: new jittered views of dev images."""
    qs = [_view(base[b], rng) for b in rng.choice(len(base), args.queries, replace=False)]
    np.savez(
        Path(args.workdir) / "queries.npz",
        **{f"d{i}": q.descriptors for i, q in enumerate(qs)},
        **{f"x{i}": q.xy for i, q in enumerate(qs)},
    )


def _load_queries(args):
    from engine.features.keypoints import Features, extract_features

    if args.source == "views":
        qdir = Path(str(args.views_dir) + "_queries")
        return [extract_features(str(p)) for p in sorted(qdir.glob("*.jpg"))]
    if not (Path(args.workdir) / "queries.npz").exists():
        base = _base_features(args.ukbench_index)
        _write_synthetic_queries(args, base, np.random.default_rng(1))
    z = np.load(Path(args.workdir) / "queries.npz")
    nq = len(z.files) // 2
    return [Features(z[f"d{i}"], z[f"x{i}"], None, None, (320, 240), "sift") for i in range(nq)]


def query_phase(args) -> dict:
    from engine.collection import Collection
    from engine.core.blas import single_threaded_blas
    from engine.index import candidates as cand
    from engine.index.methods import REGISTRY

    qs = _load_queries(args)  # feature extraction: not part of the measured search
    if args.source == "views":
        folder, index = Path(args.views_dir), Path(str(args.views_dir) + "_index")
    else:
        folder, index = Path(args.workdir) / "photos", Path(args.workdir) / "index"
    col = Collection.open(folder, index, readonly=True)
    searcher = col.searcher
    t = time.perf_counter()
    models, data = searcher.ensure()
    load_s = time.perf_counter() - t
    n = len(data.ids)
    out = {"n": n, "queries": len(qs), "load_seconds": load_s}
    found, timing = {}, {}
    methods = list(args.methods) + (["hybrid"] if args.hybrid else [])
    with single_threaded_blas():
        # one-time structures of a query process (hyperplane cache, inverted file, key
        # directory, self-similarities, uniform pyramids): built by the first queries,
        # reported, not timed below
        t = time.perf_counter()
        for method in methods:
            for _ in range(2):
                REGISTRY[method].search(searcher, models, data, qs[0], 10)
        out["first_queries_seconds"] = time.perf_counter() - t
        for kind, label in (("fused", "fused"), ("hashes", "hashes"), ("wta", "bands")):
            if label not in args.kinds:
                continue
            cand.CANDIDATE_KIND = kind
            for method in methods:
                key = f"{method}/{label}"
                times, cpus, fracs = [], [], []
                for i, q in enumerate(qs):
                    t, c = time.perf_counter(), time.process_time()
                    found[key, i], _ = REGISTRY[method].search(searcher, models, data, q, 10)
                    times.append(time.perf_counter() - t)
                    cpus.append(time.process_time() - c)
                    fracs.append(searcher.last_scored / n)
                timing[key] = (times, cpus, fracs)
    # peak RSS of loading + searching, before the exhaustive ground truth below (whose
    # full-collection scoring structures a query process never builds)
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    truth = {}
    usx = searcher.uniform_self_similarity(data) if "uniform" in args.methods else None
    for i, q in enumerate(qs):
        enc = searcher.query_encoding(models, q, frozenset({"uniform"}))
        k, v = enc.vocab.row(0)
        ex = data.vocab.score(k, v)
        truth["vocabulary", i] = np.argsort(-ex, kind="stable")[:10]
        if usx is None:
            continue
        k, v = enc.uniform.row(0)
        exu = data.uniform.score(k, v) / np.sqrt(np.maximum(usx * v.sum(), 1e-30))
        truth["uniform", i] = np.argsort(-exu, kind="stable")[:10]
    for key, (times, cpus, fracs) in timing.items():
        method = key.split("/")[0]
        tr = "uniform" if method == "uniform" else "vocabulary"
        recalls = [np.intersect1d(found[key, i], truth[tr, i]).size / 10 for i in range(len(qs))]
        out[key] = {
            "median_ms": 1000 * float(np.median(times)),
            "p90_ms": 1000 * float(np.percentile(times, 90)),
            "cpu_median_ms": 1000 * float(np.median(cpus)),
            "cpu_p90_ms": 1000 * float(np.percentile(cpus, 90)),
            "recall_at_10": float(np.mean(recalls)),
            "recall_min": float(np.min(recalls)),
            "queries_below_0.9": int(np.sum(np.array(recalls) < 0.9)),
            "scored_fraction": float(np.mean(fracs)),
        }
        print(key, json.dumps(out[key]), flush=True)
    cand.CANDIDATE_KIND = "fused"
    out["max_rss_peak_with_truth_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    col.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--source", choices=("views", "synthetic"), default="views")
    ap.add_argument("--per-image", type=int, default=20)
    ap.add_argument("--views-dir", default="/tmp/simile_scale_views")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--workdir", default="/tmp/simile_scale")
    ap.add_argument("--ukbench-index", default="/tmp/simile_bench_ukbench")
    ap.add_argument("--query-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument(
        "--methods",
        type=lambda s: tuple(s.split(",")),
        default=("vocabulary", "uniform", "wta"),
        help="comma-separated subset of vocabulary,uniform,wta (default: all three)",
    )
    ap.add_argument(
        "--kinds",
        type=lambda s: tuple(s.split(",")),
        default=("fused", "hashes", "bands"),
        help="comma-separated candidate generations: fused,hashes,bands (default: all)",
    )
    ap.add_argument(
        "--hybrid",
        action="store_true",
        help="also time the hybrid method (recall against the vocabulary ranking: its "
        "geometric re-ranking reorders the head on purpose)",
    )
    args = ap.parse_args(argv)
    bad = set(args.methods) - {"vocabulary", "uniform", "wta"}
    bad |= set(args.kinds) - {"fused", "hashes", "bands"}
    if bad:
        ap.error(f"unknown method or kind: {', '.join(sorted(bad))}")
    if args.query_only:
        from engine.index.ingest import keep_heap_warm

        keep_heap_warm()  # as the simile command line (``simile query``) does
        res = query_phase(args)
        print("RESULT " + json.dumps(res))
        return 0
    if not args.skip_build:
        build_views(args) if args.source == "views" else build(args)
    cmd = [sys.executable, __file__, "--query-only", "--source", args.source]
    cmd += ["--workdir", args.workdir, "--views-dir", args.views_dir]
    cmd += ["--methods", ",".join(args.methods), "--kinds", ",".join(args.kinds)]
    cmd += ["--hybrid"] if args.hybrid else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-3000:])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return 1
    res = json.loads(line[7:])
    print(f"\n{args.source}: {res['n']} images, {res['queries']} held-out queries")
    print(
        f"load {res['load_seconds']:.1f} s; one-time query structures (first query of "
        f"each method) {res['first_queries_seconds']:.1f} s"
    )
    print(
        f"query process peak RSS: {res['max_rss_mb']:.0f} MB (target <= 1536; "
        f"{res['max_rss_peak_with_truth_mb']:.0f} MB after the exhaustive ground truth)"
    )
    print("search part of a query (ms; wall median/p90, CPU median/p90), recall@10, scored")
    for key in sorted(k for k in res if "/" in k):
        r = res[key]
        print(
            f"{key:18s} wall {r['median_ms']:6.1f} / {r['p90_ms']:6.1f}   "
            f"CPU {r['cpu_median_ms']:5.1f} / {r['cpu_p90_ms']:5.1f}   "
            f"recall@10 {r['recall_at_10']:.3f} (min {r['recall_min']:.1f}, "
            f"{r['queries_below_0.9']} queries < 0.9)   "
            f"scored {100 * r['scored_fraction']:.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
