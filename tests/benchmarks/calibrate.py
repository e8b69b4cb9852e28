"""Fit and check the calibration of hit scores (search issue, point 3): the probability
that a hit shows the same object or place as the query, from its score.

Through the product's own entry point (``Collection.query``), every photo of the UKBench
and Holidays dev sets queries its set (top 10, itself left out); a hit is relevant when
it shows the query's object (UKBench: groups of 4) or scene (Holidays: ``NNNN`` of
``NNNNxx.jpg``). A one-variable logistic regression ``p = 1 / (1 + exp(-(a s + b)))`` of
relevance on the score is fitted per method on the queries with an even number (each
set weighted equally) and checked on the odd ones, each set on its own: expected
calibration error (10 bins) and Brier score, next to the Brier score of always saying the
base rate. The fitted ``(a, b)`` go into :data:`engine.index.calibration.CALIBRATION`::

    python tests/benchmarks/calibrate.py [--work /tmp/calib]

Measured (2026-11-26, the defaults; ``hybrid`` again on 2026-11-27 after its check
gained the epipolar geometry and its query expansion, and once more for its
Hamming-embedding first stage, ``engine/index/selective.py``; held-out queries; before
that last refit: a 3.385, b -2.967, ECE 0.058 / 0.055):

======  ======  ======  =====  =====  ======  =====  =====  ======
method  a       b       UKBench              Holidays
------  ------  ------  -------------------  -------------------
..      ..      ..      ECE    Brier  Brier0  ECE    Brier  Brier0
hybrid  3.293   -2.728  0.064  0.043  0.218   0.051  0.054  0.169
vocab.  1.190   -1.435  0.070  0.206  0.209   0.066  0.140  0.140
unif.   0.243   -1.323  0.062  0.204  0.200   0.060  0.134  0.130
======  ======  ======  =====  =====  ======  =====  =====  ======

(``Brier0``: always saying the base rate; 2,250 UKBench and 1,666 Holidays held-out
hits; 44 s.)

Only the verified ``hybrid`` scores tell same from different well (Brier 0.040 against
0.216 for the base rate); the probabilities of the "looks alike" methods are calibrated
but say little more than the base rate, and the app labels their hits "looks alike".
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from engine.core.progress import run_to_end
from engine.index.calibration import expected_calibration_error as ece

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SETS = (("ukbench", 4), ("holidays", 100))
METHODS = ("hybrid", "vocabulary", "uniform")


def _number(p: Path) -> int:
    return int(re.findall(r"\d+", p.stem)[-1])


def collect(work: Path) -> dict[str, list[tuple[str, int, float, int]]]:
    """``set -> [(method, query number, score, relevant)]`` of every top-10 hit."""
    from engine.collection import Collection

    out: dict[str, list] = {}
    for name, div in SETS:
        rows = []
        with Collection.open(DATA / name, work / "idx" / name) as col:
            run_to_end(col.update())
            for q in col.paths():
                for method in METHODS:
                    for h in col.query(q, method=method, top=10):
                        if Path(h.path) == Path(q):
                            continue
                        rel = _number(Path(h.path)) // div == _number(Path(q)) // div
                        rows.append((method, _number(Path(q)), float(h.score), int(rel)))
        out[name] = rows
    return out


def fit(rows: dict[str, list]) -> dict[str, dict]:
    from sklearn.linear_model import LogisticRegression

    res = {}
    for method in METHODS:
        X, Y, W, S, odd = [], [], [], [], []
        for name, rs in rows.items():
            mine = [r for r in rs if r[0] == method]
            for _m, q, s, rel in mine:
                X.append(s)
                Y.append(rel)
                W.append(1.0 / len(mine))
                S.append(name)
                odd.append(q % 2 == 1)
        X, Y, W = np.array(X)[:, None], np.array(Y), np.array(W)
        S, odd = np.array(S), np.array(odd)
        lr = LogisticRegression(C=100.0).fit(X[~odd], Y[~odd], sample_weight=W[~odd])
        out = {"a": float(lr.coef_[0, 0]), "b": float(lr.intercept_[0])}
        for name in rows:
            m = odd & (S == name)
            p = lr.predict_proba(X[m])[:, 1]
            base = Y[m].mean()
            out[name] = {
                "ece": ece(p, Y[m]),
                "brier": float(np.mean((p - Y[m]) ** 2)),
                "brier_base_rate": float(np.mean((base - Y[m]) ** 2)),
                "hits": int(m.sum()),
            }
        res[method] = out
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/calib"))
    args = p.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return 0
    res = fit(collect(args.work))
    for method, r in res.items():
        parts = [f"{method}: a {r['a']:.4f} b {r['b']:.4f}"]
        for name, _ in SETS:
            q = r[name]
            parts.append(f"{name} ECE {q['ece']:.3f} Brier {q['brier']:.3f} "
                         f"(base rate {q['brier_base_rate']:.3f}, {q['hits']} hits)")  # fmt: skip
        print("; ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
