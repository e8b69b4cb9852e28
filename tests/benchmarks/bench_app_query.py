"""What a query costs in the app on a large library, and whether its candidates hold the
exhaustive top 10.

Run (on a library made by ``bench_library.py``, which is only read)::

    nice python tests/benchmarks/bench_app_query.py
        --library /tmp/simile_library_100000 --index /tmp/simile_library_100000.index
        --extra /tmp/simile_library_100000_extra --code OLD --code NEW --repeat 2

Each ``--code`` checkout answers in a process of its own, as the app does: the index
opened read-only, its search data read into memory, one BLAS and one OpenCV thread. After
warm-up queries (two photos of the library, two new ones) it measures the CPU time per
query (the machine is shared: CPU time is what its load changes least) of:

- ``search part, library photo``: the ``vocabulary`` method's search of a photo of the
  library (candidates and their exact scores; a checkout that can, takes the photo's
  stored row as its query, as a click in the app does);
- ``search part, new photo``: the same for photos outside the library, their features
  extracted before the clock starts (the query's encoding is timed);
- ``vocabulary`` / ``hybrid``: whole ``Collection.query`` calls of library photos (the
  hybrid method reads their features and checks the best hits geometrically);

and, in the first round, the recall@10 of the candidates at 1,000, 250 and 100 rows
against the exhaustive ``vocabulary`` score, for the library photos and the new ones.
The checkouts alternate ``--repeat`` times; the best CPU time of each is reported. A
checkout that cannot read ``--index`` (one from before the index's current layout) is
given an index it built, as ``--code CODE:INDEX``; one from before the calls the recall
uses is measured without it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def child(code: str, library: str, index: str, extra: str, n_queries: int, recall: bool) -> dict:
    """Measure in this process (``code`` first on the path)."""
    sys.path.insert(0, code)
    import threadpoolctl

    threadpoolctl.threadpool_limits(1)
    import cv2

    cv2.setNumThreads(1)
    import engine
    from engine.collection import Collection
    from engine.index import methods

    assert engine.__file__.startswith(code), engine.__file__
    col = Collection.open(library, index, readonly=True)
    searcher = col.searcher
    models, data = searcher.ensure()
    n = len(data.ids)
    lib = col.paths()[:: max(1, n // n_queries)][:n_queries]
    new = sorted(Path(extra).glob("*.jpg"))[:n_queries]
    new_feats = [_features(searcher.query_features(p)) for p in new]
    vm = methods.BUILTIN_METHODS["vocabulary"]

    import inspect

    takes_row = "query_row" in inspect.signature(vm.search).parameters  # (older checkouts)

    def search_library(p):
        row = searcher.query_row(p) if takes_row and hasattr(searcher, "query_row") else None
        if row is not None:
            return vm.search(searcher, models, data, None, 20, query_row=row)
        got = searcher.query_features(p)
        feats, row = got if isinstance(got, tuple) else (got, None)
        if not takes_row:
            return vm.search(searcher, models, data, feats, 20)
        return vm.search(searcher, models, data, feats, 20, query_row=row)

    def per_query(fn, items) -> float:
        t = time.process_time()
        for it in items:
            fn(it)
        return (time.process_time() - t) / len(items) * 1000

    # warm-up (what the app's first queries pay once): the inverted file, the codes'
    # prefixes, the hyperplane coordinates of every bin (cached at the second encoding)
    col.query(lib[0], method="vocabulary", top=20)
    col.query(lib[1], method="hybrid", top=20)
    for f in new_feats[-2:]:
        vm.search(searcher, models, data, f, 20)
    out = {
        "photos": n,
        "search part, library photo (ms)": per_query(search_library, lib),
        "search part, new photo (ms)": per_query(
            lambda f: vm.search(searcher, models, data, f, 20), new_feats
        ),
        "vocabulary query (ms)": per_query(
            lambda p: col.query(p, method="vocabulary", top=20), lib
        ),
        "hybrid query (ms)": per_query(lambda p: col.query(p, method="hybrid", top=20), lib),
        # (before the recall's exhaustive scores, which hold arrays the app never makes)
        "peak RSS (GB)": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }
    if recall:
        try:
            _recall(out, searcher, models, data, n, lib, new_feats)
        except (AttributeError, TypeError) as exc:  # (a checkout from before these calls)
            print(f"recall not measured: {exc}", file=sys.stderr)
    return out


def _recall(out, searcher, models, data, n, lib, new_feats) -> None:
    """recall@10 of the candidates at 1,000, 250 and 100 rows against the exhaustive
    ``vocabulary`` score, for the library photos ``lib`` and the new ones, into ``out``."""
    import numpy as np

    for label, feats_of in (
        ("library", [_features(searcher.query_features(p)) for p in lib]),
        ("new", new_feats),
    ):
        hits = {k: [] for k in (1000, 250, 100)}
        for f in feats_of:
            q = searcher.query_encoding(models, f, frozenset({"wta", "rh"}))
            qk, qv = q.vocab.row(0)
            full = data.vocab.score(qk, qv, None)
            top = np.lexsort((np.arange(n), -full))[:10]
            for k in hits:
                rows = searcher.candidates("fused", q, data, k)
                hits[k].append(float(np.isin(top, rows).mean()))
        for k, v in hits.items():
            out[f"recall@10 {label}, {k} rows"] = float(np.mean(v))


def _features(got):
    """The features of ``Searcher.query_features`` (a tuple with the row since then)."""
    return got[0] if isinstance(got, tuple) else got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--extra", required=True, help="photos outside the library")
    ap.add_argument(
        "--code",
        action="append",
        help="checkouts, oldest first (required); CODE:INDEX answers from an index of its own"
        " (a checkout that cannot read the --index)",
    )
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--recall", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        got = child(args.child, args.library, args.index, args.extra, args.queries, args.recall)
        print(json.dumps(got))
        return 0
    if not args.code:
        ap.error("--code is required")
    index_of = {}
    for c in args.code:
        code, _, own = c.partition(":")
        index_of[str(Path(code).resolve())] = own or args.index
    codes = list(index_of)
    best: dict[str, dict[str, float]] = {c: {} for c in codes}
    for r in range(args.repeat):
        for code in codes:
            cmd = [
                sys.executable, __file__, "--child", code, "--library", args.library,
                "--index", index_of[code], "--extra", args.extra, "--queries", str(args.queries),
                *(["--recall"] if r == 0 else []),
            ]  # fmt: skip
            done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"round {r + 1}, {code}: {got}", flush=True)
            for k, v in got.items():
                keep = max if k.startswith("recall") or k == "peak RSS (GB)" else min
                best[code][k] = keep(best[code].get(k, v), v)
    keys = list(best[codes[0]])
    print("| measure | " + " | ".join(Path(c).name for c in codes) + " |")
    print("|---|" + "---:|" * len(codes))
    for k in keys:
        vals = [best[c].get(k) for c in codes]
        cells = ["-" if v is None else (f"{v:.3f}" if "recall" in k else f"{v:.1f}") for v in vals]
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
