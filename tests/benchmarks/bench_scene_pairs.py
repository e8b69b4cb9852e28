"""What the same-scene pairs cost a grouping, first and remembered (issue #22).

Run by hand (not part of the test run)::

    python tests/benchmarks/bench_scene_pairs.py --folder F [--index I] [--limit N]

Indexes ``F`` (``Collection.update``), then groups it with
:func:`engine.cluster.categorize_iter` four times in one process, so the ratios come
from one run on one machine: without the pairs (the dense channel is computed here
first, so the runs compare the grouping alone), with the pairs and an empty cache (one
``hybrid`` query per photo), with the pairs remembered, and without them again.
Prints the seconds of each run and of its stages; the cache file is removed first.
``--limit N`` groups a folder of links to the first N photos of ``F`` instead (in
``--work``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _linked(folder: Path, work: Path, limit: int) -> Path:
    from engine.io.formats import IMAGE_SUFFIXES

    out = work / f"photos-{limit}"
    if out.is_dir():
        return out
    out.mkdir(parents=True)
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
    for i, p in enumerate(paths):
        os.symlink(p, out / f"{i:05d}{p.suffix.lower()}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", required=True, type=Path)
    ap.add_argument("--index", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_scene_pairs"))
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()

    from engine.cluster import categorize_iter
    from engine.cluster.scene_cache import SCENE_CACHE
    from engine.collection import Collection
    from engine.core.progress import run_to_end

    folder = args.folder
    if args.limit:
        folder = _linked(args.folder, args.work, args.limit)
    index = args.index or (args.work / f"index-{folder.name}")
    with Collection.open(folder, index) as col:
        t = time.perf_counter()
        run_to_end(col.update(jobs=args.jobs))
        n = len(col.paths())
        print(f"{n} photos indexed in {time.perf_counter() - t:.1f} s")
        (col.index_dir / SCENE_CACHE).unlink(missing_ok=True)
        rows = []
        for name, scenes in (("no pairs (first: dense features)", False),
                             ("pairs, none remembered", True), ("pairs, remembered", True),
                             ("no pairs", False)):  # fmt: skip
            t = time.perf_counter()
            res = run_to_end(categorize_iter(col, scenes=scenes, jobs=args.jobs))
            total = time.perf_counter() - t
            stages = ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items() if v >= 0.05)
            rows.append((name, total, res.k, stages))
            print(f"{name:34s} {total:7.1f} s  k={res.k:<3d} ({stages})", flush=True)
    first, remembered, plain = rows[1][1], rows[2][1], rows[3][1]
    print(
        f"pairs cost {first - plain:.1f} s the first time ({(first - plain) / n * 1000:.0f} "
        f"ms a photo), {remembered - plain:+.1f} s once remembered"
    )


if __name__ == "__main__":
    main()
