"""UKBench dev benchmark: indexing cost and retrieval quality of every search method.

Run::

    nice python tests/benchmarks/bench_ukbench.py [--data ../shared/data/ukbench]
        [--index /tmp/simile_ukb] [--methods hybrid,vocabulary,uniform,wta] [--jobs 2]
        [--reps N] [--breakdown] [--in-process] [--skip-floor] [--reuse]

1. Floor: decode + SIFT (``extract_features`` with the index's settings) of every image,
   in the same number of processes as indexing, set up as the indexing workers are
   (``engine.index.extract.init_worker``: one OpenCV thread, heap kept warm) but forked, so the
   floor pays no interpreter start-up; in a fresh interpreter each time, so that it does
   not depend on what this process did before.
   ``--breakdown``: also the floor with spawned workers (as the GUI's indexing process
   starts them) and extraction + storage alone.
2. ``Collection.update()`` into a fresh index (``--index``, deleted first), in a fresh
   interpreter as ``simile index`` runs it (heap kept warm; not in this process, whose
   heap earlier reps have grown: a fork of it costs its workers and itself more): total
   time and ratio to the floor (target <= 1.3). ``--reps N`` alternates floor and index
   N times, then measures the floor once more; every index is reported against the floor
   just before it and against the mean of the floors before and after it (this
   machine's speed drifts by tens of percent within minutes, so one pair can mislead:
   the bracketing mean follows the drift), with the medians of both; CPU seconds (the
   indexing process and its workers) are printed too. ``--in-process``: index in this
   process instead (the older way of this benchmark).
3. Every image is a query against the whole collection: N-S score (target >= 3.5 with the
   default method), mAP, P@4, normalised average rank (thesis Eq. 6.4), 1-NN accuracy.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


# The floor runs in a fresh interpreter, so that it does not depend on this process's
# state (a fork inherits the parent's heap, which the indexing runs before it change).
_FLOOR = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from functools import partial

def extract(kw, path):
    from engine.features.keypoints import extract_features

    return len(extract_features(path, **kw))

if __name__ == "__main__":  # (spawned workers import this file: nothing heavy above)
    import engine.features.keypoints  # forked workers inherit it
    from engine.collection import FEATURE_KWARGS
    from engine.index.extract import init_worker

    files = open(sys.argv[1]).read().split("\\n")
    jobs = int(sys.argv[2])
    job = partial(extract, FEATURE_KWARGS)
    t = time.perf_counter()
    if jobs <= 1:
        init_worker()
        for f in files:
            job(f)
    else:
        ctx = multiprocessing.get_context(sys.argv[3])
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=init_worker) as ex:
            list(ex.map(job, files, chunksize=8))
    c = os.times()
    print(time.perf_counter() - t, c.children_user + c.children_system)
"""


def floor_seconds(files: list[Path], jobs: int, start: str = "fork") -> tuple[float, float]:
    """Decode + SIFT of ``files`` (``extract_features`` with the index's settings) in
    ``jobs`` processes set up as the indexing workers are (``init_worker``: one OpenCV
    thread, heap kept warm), forked from an interpreter that has imported everything, as
    the index's are from the ``simile`` command line and this benchmark
    (``engine.ingest.worker_context``), so neither pays an interpreter start-up.

    Returns wall seconds from the pool's creation to its end, and the workers' CPU
    seconds (with ``jobs == 1``: in-process, CPU not measured). ``start="spawn"``: the
    workers start as the index's do in a threaded process such as the GUI's indexing
    process (a fresh interpreter each, importing everything)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        listing, script = Path(tmp, "files.txt"), Path(tmp, "floor.py")
        listing.write_text("\n".join(map(str, files)))
        script.write_text(_FLOOR)  # a file: spawned workers import its functions
        out = subprocess.run(
            [sys.executable, str(script), str(listing), str(jobs), start],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    wall, cpu = map(float, out.stdout.split()[-2:])
    return wall, cpu


def ingest_seconds(data: Path, index: str, jobs: int) -> float:
    """Extraction and storage alone (``engine.ingest.ingest`` into a fresh store): the
    index without its models."""
    from engine.collection import FEATURE_KWARGS
    from engine.index.ingest import ingest
    from engine.index.store import IndexStore

    shutil.rmtree(index, ignore_errors=True)
    store = IndexStore.open(index)
    t = time.perf_counter()
    for _ in ingest(store, data, jobs=jobs, feature_kwargs=FEATURE_KWARGS):
        pass
    seconds = time.perf_counter() - t
    store.close()
    shutil.rmtree(index, ignore_errors=True)
    return seconds


_INDEX = """
import json, sys

if __name__ == "__main__":
    from engine.index.ingest import keep_heap_warm

    keep_heap_warm()  # as the simile command line does
    from bench_ukbench import index_here

    data, index, jobs, reuse = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    print(json.dumps(index_here(data, index, jobs, reuse)))
"""


def index_fresh(data: Path, index: str, jobs: int, reuse: bool) -> tuple[float, float, int, float]:
    """:func:`index_here` in a fresh interpreter running this checkout, its heap kept warm,
    as ``simile index`` runs."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "index.py")
        script.write_text(_INDEX)
        path = [str(ROOT), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
        out = subprocess.run(
            [sys.executable, str(script), str(data), index, str(jobs), "1" if reuse else "0"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env=env,
        )
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def index_here(data: Path, index: str, jobs: int, reuse: bool) -> tuple[float, float, int, float]:
    """``Collection.update()`` of ``data`` into ``index`` (deleted first unless ``reuse``)
    in this process: wall and CPU seconds (the process and its workers), images indexed,
    seconds after the last image."""
    from engine.collection import Collection

    if not reuse:
        shutil.rmtree(index, ignore_errors=True)
    col = Collection.open(data, index)
    c0 = _cpu()
    t = time.perf_counter()
    gen = col.update(jobs=jobs)
    t_final = None
    try:
        while True:
            p = next(gen)
            if p.status == "finalizing" and t_final is None and "fitting" in p.message:
                t_final = time.perf_counter()
    except StopIteration as stop:
        summary = stop.value
    total = time.perf_counter() - t
    cpu = _cpu() - c0
    col.close()
    return total, cpu, summary.indexed, t + total - (t_final or t)


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def score_matrix(col, method: str, paths: list[Path]) -> tuple[np.ndarray, float]:
    n = len(paths)
    row = {p: i for i, p in enumerate(paths)}
    S = np.full((n, n), -np.inf)
    t = time.perf_counter()
    for i, p in enumerate(paths):
        for h in col.query(p, method=method, top=n):
            S[i, row[h.path]] = h.score
    # unreturned items: below everything returned, tie-broken by order
    S[np.isinf(S)] = -1e9
    return S, (time.perf_counter() - t) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "ukbench"))
    ap.add_argument("--index", default="/tmp/simile_bench_ukbench")
    ap.add_argument("--methods", default="hybrid,vocabulary,uniform,wta")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="keep an existing index")
    ap.add_argument(
        "--in-process", action="store_true", help="index in this process, not a fresh one"
    )
    ap.add_argument("--reps", type=int, default=1, help="floor/index pairs (median ratio)")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="also time, each rep: the floor with spawned workers, and extraction +\n"
        "storage without the models (engine.ingest.ingest)",
    )
    args = ap.parse_args(argv)

    from engine import metrics
    from engine.collection import Collection
    from engine.index.ingest import keep_heap_warm

    keep_heap_warm()  # as the simile command line and the GUI's indexing process do

    data = Path(args.data)
    # every photo under the folder, as the index finds them (other folders than
    # UKBench's flat one can be timed too: --methods "" then, the measures need its names)
    files = sorted(p for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    print(f"{len(files)} images in {data}")
    ratios, bracketed, floors, totals = [], [], [], []
    reps = max(args.reps, 1)
    for _ in range(reps):
        if not args.skip_floor:
            fl, fl_cpu = floor_seconds(files, args.jobs)
            floors.append(fl)
            print(f"floor decode+SIFT ({args.jobs} procs): {fl:.2f} s, {fl_cpu:.1f} s CPU")
            if args.breakdown:
                sp, _ = floor_seconds(files, args.jobs, start="spawn")
                print(f"  floor with spawned workers: {sp:.2f} s ({sp / fl:.2f}x)")
                ing = ingest_seconds(data, args.index + "_ingest", args.jobs)
                print(f"  extraction + storage, no models: {ing:.2f} s ({ing / fl:.2f}x)")
        if args.in_process:
            total, cpu, indexed, tail = index_here(data, args.index, args.jobs, args.reuse)
        else:
            total, cpu, indexed, tail = index_fresh(data, args.index, args.jobs, args.reuse)
        totals.append(total)
        print(
            f"index: {total:.2f} s total, {cpu:.1f} s CPU, {indexed} indexed, "
            f"after the last image {tail:.2f} s"
        )
        if not args.skip_floor:
            ratios.append(total / fl)
            print(f"indexing / floor = {total / fl:.2f}  (target <= 1.3)", flush=True)
    if not args.skip_floor and reps > 1:
        fl, fl_cpu = floor_seconds(files, args.jobs)
        floors.append(fl)
        print(f"floor decode+SIFT ({args.jobs} procs): {fl:.2f} s, {fl_cpu:.1f} s CPU")
        pairs = itertools.pairwise(floors)
        bracketed = [t / ((a + b) / 2) for t, (a, b) in zip(totals, pairs, strict=True)]
        print(
            f"ratios to the floor before {' '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {np.median(ratios):.2f}"
        )
        print(
            f"ratios to the mean of the floors before and after "
            f"{' '.join(f'{r:.2f}' for r in bracketed)}; median {np.median(bracketed):.2f}"
        )
    col = Collection.open(data, args.index)
    paths = col.paths()
    labels = metrics.group_labels([p.name for p in paths], 4)
    for method in filter(None, args.methods.split(",")):
        S, per_q = score_matrix(col, method, paths)
        print(
            f"{method:10s} N-S {metrics.ns_score(S, labels):.3f}  "
            f"mAP {metrics.mean_average_precision(S, labels):.3f}  "
            f"P@4 {metrics.precision_at_k(S, labels, 4, exclude_self=False):.3f}  "
            f"nrank {metrics.normalized_average_rank(S, labels):.4f}  "
            f"1-NN {metrics.knn_accuracy(S, labels, 1):.3f}  "
            f"({per_q * 1000:.1f} ms/query)",
            flush=True,
        )
    col.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
