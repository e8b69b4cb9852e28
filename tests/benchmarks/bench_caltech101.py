"""Caltech-101 classification with the pyramid-match SVM (engine.classify).

Protocol (../shared/data/README): 101 classes (BACKGROUND_Google excluded), 15 training
images per class from the dev split, test on the remaining dev images, mean per-class
accuracy. Run::

    nice python tests/benchmarks/bench_caltech101.py [--kind dense:400] [--spatial 8]
        [--branching 20] [--keep-levels 4] [--C 10] [--powers 0.5 1]
        [--cache caltech101_dense8_s320]

Default vocabulary 20^3 = 8000 words (measured: mean per-class accuracy 0.528 / 0.532 on
seeds 0 / 1, against 0.508 / 0.517 with 10^3 words; 16^3: 0.517-0.520, 25^3: 0.520,
32^3: 0.508; the denser single-scale engine dense_sift cache, step 8: 0.479).

Kernel: the vocabulary-guided pyramid match of bench_discovery.VGPyramid (hierarchical
k-means tree, optional spatial levels), normalised; features cached in
/tmp/simile_bench_cache.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_discovery import DATA, VGPyramid, caltech_paths, load_features


def _load_cache(name: str, paths: list[Path]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Descriptors and xy normalised to [0, 1] (per image, by the grid's extent) from an
    existing cache written with pixel coordinates."""
    from bench_discovery import CACHE

    z = np.load(CACHE / f"{name}.npz", allow_pickle=False)
    if z["paths"].tolist() != [str(q) for q in paths]:
        raise SystemExit(f"{name}: cached paths differ from the Caltech-101 dev list")
    off, d, xy = z["offsets"], z["desc"], z["xy"]
    descs = [d[off[i] : off[i + 1]] for i in range(len(paths))]
    xys = []
    for i in range(len(paths)):
        q = xy[off[i] : off[i + 1]]
        ext = q.max(axis=0) + q.min(axis=0) if len(q) else np.ones(2, np.float32)
        xys.append((q / np.maximum(ext, 1.0)).astype(np.float32))
    return descs, xys


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="dense:400")
    p.add_argument("--branching", type=int, default=20)
    p.add_argument("--levels", type=int, default=3)
    p.add_argument("--spatial", type=int, nargs="+", default=[8])
    p.add_argument("--C", type=float, nargs="+", default=[10.0])
    p.add_argument("--powers", type=float, nargs="+", default=[0.5, 1.0])
    p.add_argument(
        "--keep-levels",
        type=int,
        default=4,
        help="keep this many finest pyramid levels (drops coarse vocabulary levels)",
    )
    p.add_argument(
        "--cache",
        help="use this existing feature cache in /tmp/simile_bench_cache (npz with paths, "
        "offsets, desc, xy in pixels, same image order), e.g. caltech101_dense8_s320 "
        "(engine dense_sift, step 8, max side 320, ~900 features/image) instead of --kind",
    )
    p.add_argument("--train", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from engine.classify import CategoryClassifier

    kind, mf = args.kind.split(":")[0], int(args.kind.split(":")[1])
    classes = sorted(
        q.name
        for q in (DATA / "caltech101").iterdir()
        if q.is_dir() and q.name != "BACKGROUND_Google"
    )
    paths, y = caltech_paths(classes)
    print(f"Caltech-101 dev: {len(paths)} images, {len(classes)} classes")
    t0 = time.time()
    if args.cache:
        descs, xys = _load_cache(args.cache, paths)
        kind = args.cache
    else:
        descs, xys = load_features(f"c101_{kind}", paths, kind, mf)
    print(f"features {kind} <= {mf}/image: {time.time() - t0:.0f}s")
    rng = np.random.default_rng(args.seed)
    train = np.concatenate(
        [
            rng.choice(np.flatnonzero(y == c), args.train, replace=False)
            for c in range(len(classes))
        ]
    )
    test = np.setdiff1d(np.arange(len(y)), train)
    for spatial in args.spatial:
        t0 = time.time()
        vg = VGPyramid(args.branching, args.levels, spatial=spatial).fit([descs[i] for i in train])
        bins = [vg.assign(d, xy)[:, : args.keep_levels] for d, xy in zip(descs, xys, strict=True)]
        Ktr = vg.kernel([bins[i] for i in train])
        Kte = vg.kernel([bins[i] for i in test], [bins[i] for i in train])
        print(f"[VG-PM b={args.branching} L={args.levels} spatial={spatial}] kernel "
              f"{time.time() - t0:.0f}s")  # fmt: skip
        for power in args.powers:
            for C in args.C:
                clf = CategoryClassifier(C=C, power=None if power == 1.0 else power)
                clf.fit(Ktr, y[train])
                pred = clf.predict(Kte).labels
                per_class = [np.mean(pred[y[test] == c] == c) for c in range(len(classes))]
                print(f"  p={power} C={C}: mean per-class accuracy {np.mean(per_class):.3f} "
                      f"(overall {np.mean(pred == y[test]):.3f}, {len(test)} test images)",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
