"""Indexing cost vs the floor of decoding + SIFT extraction alone (issue 3, section 6).

Usage::

    nice python tests/benchmarks/bench_ingest.py [--folder DIR] [--jobs 1 2] [--repeat 1]

For each ``jobs`` value it times, on the same images and feature settings:

* ``floor``: ``engine.features.extract_features(path)`` on every image and nothing else
  (in-process for ``jobs=1``; a spawn ``ProcessPoolExecutor.map`` otherwise, pool start
  included, as in the indexer);
* ``ingest``: :func:`engine.ingest.ingest` into a fresh index (scan, hashing, parallel
  extraction, chunk files, SQLite transactions, fsyncs, compaction check);
* ``noop``: a second ``ingest`` with nothing changed.

and prints ``ingest / floor`` (target <= 1.3) for wall time and for CPU time (this
process + its reaped worker processes), the latter being robust to load from other
processes on a shared machine. Repeats alternate the order of floor and ingest; the
minimum over repeats is kept.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from engine.features.keypoints import extract_features
from engine.index.extract import init_worker
from engine.index.ingest import ingest
from engine.index.store import IndexStore
from engine.io.scan import scan_folder

DEFAULT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ukbench"


def _cpu() -> float:
    """CPU seconds of this process plus its finished (reaped) children."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def _floor(paths: list[str], jobs: int) -> tuple[float, float]:
    t, c = time.perf_counter(), _cpu()
    if jobs == 1:
        n = sum(len(extract_features(p)) for p in paths)
    else:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=init_worker) as pool:
            n = sum(len(f) for f in pool.map(extract_features, paths, chunksize=4))
    dt, dc = time.perf_counter() - t, _cpu() - c
    print(f"  floor  jobs={jobs}: wall {dt:7.2f} s  cpu {dc:7.2f} s  ({n} features)", flush=True)
    return dt, dc


def _ingest(folder: Path, jobs: int) -> tuple[float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        with IndexStore.open(tmp / "index") as store:
            t, c = time.perf_counter(), _cpu()
            gen = ingest(store, folder, jobs=jobs)
            while True:
                try:
                    next(gen)
                except StopIteration as stop:
                    summary = stop.value
                    break
            dt, dc = time.perf_counter() - t, _cpu() - c
            t = time.perf_counter()
            for _ in ingest(store, folder, jobs=jobs):
                pass
            noop = time.perf_counter() - t
            size = sum(f.stat().st_size for f in (tmp / "index").rglob("*") if f.is_file())
        print(
            f"  ingest jobs={jobs}: wall {dt:7.2f} s  cpu {dc:7.2f} s  (indexed "
            f"{summary.indexed}, failed {len(summary.failed)}; no-op re-run {noop:.3f} s; "
            f"index {size / 2**20:.1f} MiB)",
            flush=True,
        )
        return dt, dc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=DEFAULT)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"no folder {args.folder}", file=sys.stderr)
        return 1
    scan = scan_folder(args.folder)
    paths = [f.path for f in scan.new]
    mib = sum(f.size for f in scan.new) / 2**20
    print(f"{len(paths)} images ({mib:.1f} MiB) in {args.folder}; cpus={os.cpu_count()}")
    for jobs in args.jobs:
        floors, ingests = [], []
        for r in range(args.repeat):  # alternate the order so drifting load hits both
            if r % 2:
                ingests.append(_ingest(args.folder, jobs))
                floors.append(_floor(paths, jobs))
            else:
                floors.append(_floor(paths, jobs))
                ingests.append(_ingest(args.folder, jobs))
        fw, fc = min(f[0] for f in floors), min(f[1] for f in floors)
        iw, ic = min(i[0] for i in ingests), min(i[1] for i in ingests)
        print(
            f"jobs={jobs}: floor wall {fw:.2f} s / cpu {fc:.2f} s "
            f"({1000 * fc / len(paths):.1f} cpu-ms/img); ingest wall {iw:.2f} s / "
            f"cpu {ic:.2f} s; ratio ingest/floor: wall {iw / fw:.3f}, cpu {ic / fc:.3f}  "
            "(target <= 1.3)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
