"""CPU time of the index's own work (beyond decode + SIFT) on the UKBench dev images.

Run after ``bench_ukbench.py`` (which leaves its index, with the stored features, at
``--index``)::

    python tests/benchmarks/bench_index_parts.py [--index /tmp/simile_bench_ukbench]
        [--reps 7]

Every part runs on one thread (single-threaded BLAS), in a fresh interpreter with glibc's
default heap and again in one whose heap is kept warm (``engine.ingest.keep_heap_warm``,
as the ``simile`` command line and the GUI's indexing process set it); the minimum of
``--reps`` runs is printed (this machine is shared and noisy):

- the two vocabulary trees of the collection (the fit sample of ``engine.collection``)
  with 5 and with 2 Lloyd iterations per level (``TREE_ITERATIONS``);
- the vocabulary pyramids of all images, by ``PyramidMatch.encode`` (the general encoder)
  and by ``engine.collection._batch_codes`` (what the index uses);
- the uniform pyramids as the search data holds them (weighted histograms with their
  columns), by both.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _parts(index: str, reps: int) -> dict[str, float]:
    import numpy as np

    import engine.collection as C
    from engine.index.search import IntersectionIndex, histograms_from_codes, single_threaded_blas
    from engine.index.store import IndexStore
    from engine.kernels.pyramid import PyramidMatch

    store = IndexStore.open(index, create=False, readonly=True)
    ids = store.ids("ok")
    n_feat = np.array([r.n_features for r in store.records("ok")])
    sample = C._descriptor_sets(store, C._sample_ids(ids, n_feat[:200]))
    batches = [
        C._descriptor_sets(store, ids[s : s + C.ENCODE_BATCH])
        for s in range(0, ids.size, C.ENCODE_BATCH)
    ]

    def tree(iters: int) -> PyramidMatch:
        return PyramidMatch(
            "vocabulary",
            branching=10,
            depth=5,
            sample_size=C.TREE_SAMPLE,
            random_state=0,
            max_iter=iters,
            n_shifts=C.VOCAB_TREES,
        )

    vocab = tree(C.TREE_ITERATIONS).fit(sample)
    uniform = PyramidMatch(  # as engine.index.fit pins it
        "uniform",
        weights="global",
        normalize="self",
        n_sides=2,
        n_shifts=2,
        sample_size=C.SAMPLE_DESCRIPTORS,
        random_state=0,
    )
    uniform.fit(sample)

    def uniform_general(sets):
        ix = IntersectionIndex(*histograms_from_codes(uniform.encode(sets), weighting="pm"))
        ix.columns()
        return ix

    def uniform_lean(sets):
        codes = C._batch_codes(uniform, sets, weights=True)
        return C._intersection_index(codes, C.code_values(codes, weighting="pm"))

    jobs = {
        "vocabulary trees, 5 iterations": lambda: tree(5).fit(sample),
        "vocabulary trees, 2 iterations": lambda: tree(2).fit(sample),
        "vocabulary pyramids, PyramidMatch.encode": lambda: [vocab.encode(b) for b in batches],
        "vocabulary pyramids, _batch_codes": lambda: [C._batch_codes(vocab, b) for b in batches],
        "uniform pyramids, encode + histograms": lambda: [uniform_general(b) for b in batches],
        "uniform pyramids, _batch_codes": lambda: [uniform_lean(b) for b in batches],
    }
    best: dict[str, float] = {}
    with single_threaded_blas():
        for _ in range(reps):
            for name, job in jobs.items():
                t = time.process_time()
                job()
                best[name] = min(best.get(name, np.inf), time.process_time() - t)
    store.close()
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--index", default="/tmp/simile_bench_ukbench")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--child", choices=["cold", "warm"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child == "warm":
            from engine.index.ingest import keep_heap_warm

            keep_heap_warm()
        for name, sec in _parts(args.index, args.reps).items():
            print(f"{sec:.4f}\t{name}")
        return 0
    rows: dict[str, dict[str, float]] = {}
    for heap in ("cold", "warm"):
        cmd = [sys.executable, __file__, "--index", args.index, "--reps", str(args.reps)]
        out = subprocess.run(
            [*cmd, "--child", heap],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        for line in out.stdout.splitlines():
            sec, name = line.split("\t")
            rows.setdefault(name, {})[heap] = float(sec)
    print(f"CPU seconds, minimum of {args.reps} (one thread)")
    print(f"{'part':45s} {'default heap':>12s} {'warm heap':>10s}")
    for name, r in rows.items():
        print(f"{name:45s} {r['cold']:12.3f} {r['warm']:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
