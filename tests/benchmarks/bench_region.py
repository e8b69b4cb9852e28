"""Search by region: does a box around the object find its other photos better than the
whole photo? (issue #21, point 5; :mod:`engine.index.region`)

Run::

    nice python tests/benchmarks/bench_region.py [--cases demo,ukbench] [--groups 60]
        [--methods hybrid,vocabulary] [--work /tmp/simile_bench_region] [--jobs 2]

The "DVD cover on a cluttered table" case, built from real photos: an object photographed
small among other things. Each query is a photo of a cluttered scene -- a 2 x 2 mosaic of
four other photos of the collection (640 x 480) -- with the object pasted into it at a
random place, its width ``--scales`` of the mosaic's (0.5: a quarter of the area; 0.35:
about an eighth). The box is the pasted object's rectangle. The query photos are outside
the indexed folder; the folder holds the object's *other* photos and everything the
clutter came from (the person's photos of their living room), so the whole photo's
background has true matches of its own in the folder.

``demo`` (always available)
    ``assets/demo``: 12 scenes x 4 photos (an original and three edited views). Object =
    a scene's original; clutter = originals of four other scenes; relevant = the
    object's 4 photos in the folder (the original included: pasted small it is still
    another photo). Every scene, at every scale, 2 placements: 48 queries a scale.
``ukbench`` (needs ``../shared/data``; skipped when absent)
    UKBench groups of 4 photos of one object. Object = the first photo of a group
    (``--groups`` of them); the folder holds the group's 3 other photos, all 4 photos of
    the other UKBench groups among the first 500 and the 421 INRIA Holidays photos;
    clutter = 4 Holidays photos (they, and the other photos of their scenes, are in the
    folder). Relevant = the 3 other photos of the object.
``ukbench_small`` (with ``ukbench``)
    As ``ukbench``, but the object's 3 other photos are themselves small in clutter:
    each pasted (width 0.45) into a mosaic of 4 Holidays photos. The pyramid match's
    partial matching is what should find them.

Reported per case, scale, method and query (``--modes``: the whole photo; ``box``, the
keypoints detected inside the box, what the app and ``simile query --box`` do; ``filter``,
only those of the whole photo's 500 that lie inside the box): mAP over the whole
ranking, recall@4 and @10 (fraction of the relevant photos in the first k), and top-1
(the first hit is relevant); the number of features the box kept (median); the query
time (median). Features of the composites and the index are cached under ``--work``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
DEMO = ROOT / "assets" / "demo"
CANVAS = (640, 480)  # mosaic width, height


def _load(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    import cv2

    from engine.io.imageio import load_image

    img = load_image(path, max_side=None)
    if size is not None:
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    return img


def mosaic(tiles: list[Path]) -> np.ndarray:
    """(480, 640, 3) uint8: four photos in a 2 x 2 grid, each squeezed to 320 x 240."""
    w, h = CANVAS[0] // 2, CANVAS[1] // 2
    t = [_load(p, (w, h)) for p in tiles]
    return np.concatenate([np.concatenate(t[:2], 1), np.concatenate(t[2:], 1)], 0)


def paste(
    canvas: np.ndarray, obj_path: Path, scale: float, rng: np.random.Generator
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """``canvas`` with the object photo pasted at width ``scale * canvas width``, at a
    random place; and the box ``(x, y, w, h)`` it covers."""
    import cv2

    obj = _load(obj_path)
    H, W = canvas.shape[:2]
    w = round(scale * W)
    h = round(obj.shape[0] * w / obj.shape[1])
    if h > 0.9 * H:
        h = int(0.9 * H)
        w = round(obj.shape[1] * h / obj.shape[0])
    small = cv2.resize(obj, (w, h), interpolation=cv2.INTER_AREA)
    x = int(rng.integers(0, W - w + 1))
    y = int(rng.integers(0, H - h + 1))
    out = canvas.copy()
    out[y : y + h, x : x + w] = small
    return out, (x, y, w, h)


def save(img: np.ndarray, path: Path) -> None:
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])


def link(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        dest.symlink_to(src.resolve())


# ----------------------------------------------------------------------------- the cases
def demo_case(work: Path, scales: list[float]):
    """Folder (the demo photos), queries [(path, box, relevant names, scale)]."""
    import json

    rng = np.random.default_rng(0)
    folder = work / "demo" / "photos"
    for p in sorted(DEMO.glob("*.jpg")):
        link(p, folder / p.name)
    views = json.loads((DEMO / "views.json").read_text())
    scenes = sorted({v["source"] for v in views.values()})
    queries = []
    for scale in scales:
        for scene in scenes:
            others = [s for s in scenes if s != scene]
            rel = {scene} | {n for n, v in views.items() if v["source"] == scene}
            for k in range(2):
                tiles = [DEMO / others[i] for i in rng.choice(len(others), 4, replace=False)]
                img, box = paste(mosaic(tiles), DEMO / scene, scale, rng)
                q = work / "demo" / "queries" / f"{Path(scene).stem}_{scale:.2f}_{k}.jpg"
                save(img, q)
                queries.append((q, box, rel, scale))
    return folder, queries


def ukbench_case(work: Path, scales: list[float], n_groups: int, small: bool):
    # (the folder's composites and the queries draw from their own generators: the
    # queries are the same whether the folder was made in this run or an earlier one)
    rng_folder = np.random.default_rng(1)
    rng = np.random.default_rng(3 if small else 2)
    ukb = sorted((DATA / "ukbench").glob("*.jpg"))
    hol = sorted((DATA / "holidays").glob("*.jpg"))
    name = "ukbench_small" if small else "ukbench"
    folder = work / name / "photos"
    groups = [ukb[4 * g : 4 * g + 4] for g in range(len(ukb) // 4)]
    for p in hol:
        link(p, folder / "holidays" / p.name)
    for g, paths in enumerate(groups):
        for j, p in enumerate(paths):
            if g < n_groups and j == 0:
                continue  # the query's object photo: only in the query
            if g < n_groups and small:
                # the object's other photos: small in a cluttered scene of their own
                dest = folder / "objects" / f"g{g:03d}_{j}.jpg"
                tiles = [hol[i] for i in rng_folder.choice(len(hol), 4, replace=False)]
                img, _ = paste(mosaic(tiles), p, 0.45, rng_folder)
                if not dest.exists():  # (an unchanged file is not indexed again)
                    save(img, dest)
            else:
                link(p, folder / "ukbench" / p.name)
    queries = []
    for scale in scales:
        for g in range(n_groups):
            tiles = [hol[i] for i in rng.choice(len(hol), 4, replace=False)]
            img, box = paste(mosaic(tiles), groups[g][0], scale, rng)
            q = work / name / "queries" / f"g{g:03d}_{scale:.2f}.jpg"
            save(img, q)
            if small:
                rel = {f"g{g:03d}_{j}.jpg" for j in (1, 2, 3)}
            else:
                rel = {p.name for p in groups[g][1:]}
            queries.append((q, box, rel, scale))
    return folder, queries


# ----------------------------------------------------------------------------- measuring
def index(folder: Path, idx: Path, jobs: int):
    from engine.collection import Collection

    col = Collection.open(folder, idx)
    t = time.perf_counter()
    gen = col.update(jobs=jobs)
    try:
        while True:
            next(gen)
    except StopIteration:
        pass
    print(f"  indexed {len(col)} photos of {folder} in {time.perf_counter() - t:.1f} s")
    return col


def evaluate(col, queries, method: str, mode: str) -> dict[str, float]:
    """``mode``: ``whole`` (no box), ``box`` (``Collection.query(path, box=)``: keypoints
    detected inside the box) or ``filter`` (the whole photo's 500 features, those inside
    the box kept: ``Collection.query(Features, box=)``)."""
    from engine.collection import FEATURE_KWARGS
    from engine.features.keypoints import extract_features

    n = len(col)
    aps, r4, r10, top1, kept, secs = [], [], [], [], [], []
    for q, box, rel, _scale in queries:
        # (the composites are at most 1024 pixels long: Features' pixels are the photo's)
        image = extract_features(q, **FEATURE_KWARGS) if mode == "filter" else q
        t = time.perf_counter()
        try:
            hits = col.query(image, method=method, top=n, box=None if mode == "whole" else box)
        except ValueError as exc:  # a box with too few features: counts as a miss
            print(f"    {q.name} ({mode}): {exc}")
            aps.append(0.0), r4.append(0.0), r10.append(0.0), top1.append(0.0)
            continue
        secs.append(time.perf_counter() - t)
        if mode != "whole":
            kept.append(len(col.region_features(image, box)))
        names = [h.path.name for h in hits]
        is_rel = np.array([nm in rel for nm in names], bool)
        ranks = np.flatnonzero(is_rel) + 1
        aps.append(float(np.mean(np.arange(1, ranks.size + 1) / ranks)) if ranks.size else 0.0)
        aps[-1] *= ranks.size / len(rel)  # relevant photos never ranked count as misses
        r4.append(is_rel[:4].sum() / len(rel))
        r10.append(is_rel[:10].sum() / len(rel))
        top1.append(float(is_rel[0]))
    return {
        "mAP": float(np.mean(aps)),
        "R@4": float(np.mean(r4)),
        "R@10": float(np.mean(r10)),
        "top1": float(np.mean(top1)),
        "feats": float(np.median(kept)) if kept else float("nan"),
        "ms": 1000 * float(np.median(secs)) if secs else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="demo,ukbench,ukbench_small")
    p.add_argument("--methods", default="hybrid,vocabulary")
    p.add_argument("--scales", default="0.5,0.35")
    p.add_argument(
        "--modes",
        default="whole,box,filter",
        help="whole photo; box (keypoints detected in the box); filter (the whole "
        "photo's keypoints inside the box)",
    )
    p.add_argument("--groups", type=int, default=60, help="UKBench objects queried")
    p.add_argument("--work", type=Path, default=Path("/tmp/simile_bench_region"))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--fresh", action="store_true", help="rebuild the photos and the indexes")
    args = p.parse_args(argv)
    scales = [float(s) for s in args.scales.split(",")]
    methods = args.methods.split(",")
    modes = args.modes.split(",")
    if args.fresh and args.work.exists():
        shutil.rmtree(args.work)
    print("case           scale  method      query   mAP    R@4    R@10   top1  feats   ms")
    for case in args.cases.split(","):
        if case.startswith("ukbench") and not (DATA / "ukbench").is_dir():
            print(f"{case}: skipped ({DATA} is absent)")
            continue
        if case == "demo":
            folder, queries = demo_case(args.work, scales)
        elif case in ("ukbench", "ukbench_small"):
            folder, queries = ukbench_case(
                args.work, scales, args.groups, small=case == "ukbench_small"
            )
        else:
            p.error(f"unknown case {case!r}")
        col = index(folder, args.work / case / "index", args.jobs)
        try:
            for scale in scales:
                qs = [q for q in queries if q[3] == scale]
                for method in methods:
                    for mode in modes:
                        r = evaluate(col, qs, method, mode)
                        print(
                            f"{case:<14} {scale:4.2f}  {method:<10}  "
                            f"{mode:<6} {r['mAP']:.3f}  {r['R@4']:.3f}"
                            f"  {r['R@10']:.3f}  {r['top1']:.2f}  {r['feats']:5.0f}  "
                            f"{r['ms']:4.0f}   ({len(qs)} queries)",
                            flush=True,
                        )
        finally:
            col.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
