"""How long choosing the number of groups takes, against grouping with k given.

The grouping's exact mode handles folders of up to 3,000 photos
(:data:`engine.cluster.NYSTROM_AUTO_MIN`); automatic k reads the eigengap of four
nearest-neighbour graphs of the affinities (:func:`engine.cluster.default_k_graph`) among
k = 2-30, whose spectra :func:`engine.cluster.ncut.sparse_graph_spectrum` computes. This
times :func:`engine.cluster.discover_categories` on synthetic affinities (cosines of
``--groups`` noisy Gaussian clusters of 64 values, ``--spread`` apart), with k given and
automatic, in one process::

    python tests/benchmarks/bench_auto_k.py [--n 2880] [--groups 25] [--spread 1.2 0.4]

Measured on 2 cores (2026-11-28): n = 2,880, spread 1.2 (25 separate clusters, one graph
component each) and 0.4 (clusters that touch): automatic k 1.4 and 1.0 s (25 and 18
groups), k given 1.5 and 0.6 s. Beside a test run, automatic k took 2.3 and 2.7 s, and with
the spectra by LOBPCG on the whole graph, as before, 19.6 and 24.5 s for the same k and
groups (measured by swapping the old function in, in one process).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from engine.cluster import default_k_graph, discover_categories

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2880)
    ap.add_argument("--groups", type=int, default=25)
    ap.add_argument("--spread", type=float, nargs="+", default=[1.2, 0.4])
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for spread in args.spread:
        centres = rng.normal(size=(args.groups, 64)) * spread
        truth = rng.integers(0, args.groups, args.n)
        X = centres[truth] + rng.normal(size=(args.n, 64))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        W = np.clip(X @ X.T, 0, 1)
        kw = dict(k_graph=default_k_graph(args.n), k_max=30, eigengap_max=30)
        row = []
        for k in (args.groups, "auto"):
            t, c = time.perf_counter(), time.process_time()
            res = discover_categories(W, k=k, **kw)
            row.append(f"k={k}: {time.perf_counter() - t:.1f} s "
                       f"({time.process_time() - c:.1f} s CPU) -> {res.k} groups")  # fmt: skip
        print(f"n={args.n} spread {spread}: " + "; ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
