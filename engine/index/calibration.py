"""Calibrated hit probabilities: how likely a hit shows the same object or place as the
query, from its score (search issue, point 3).

One logistic curve per method, ``p = 1 / (1 + exp(-(a s + b)))`` (:data:`CALIBRATION`),
fitted by ``tests/benchmarks/calibrate.py`` on the UKBench and Holidays dev sets through
``Collection.query`` (even-numbered queries, each set weighted equally) and checked on
the odd ones: expected calibration error 0.064 / 0.051 for ``hybrid`` (UKBench /
Holidays; refitted 2026-11-27 for its Hamming-embedding first stage), 0.060–0.070
for the others. The curve is monotone, so the ranking is the method's own. A ``hybrid``
hit whose score is at least 1 passed the geometric check
(:func:`engine.index.verify.hybrid_scores`: verified hits score in [1, 2), the others in
[0, 1)): it is labelled :data:`SAME`; every other hit :data:`LOOKS_ALIKE`.

The probabilities of the methods without a geometric check are calibrated but say little
more than how often a top-10 hit is right on those sets (their Brier score is that of
the base rate); ``wta`` uses the ``vocabulary`` curve (the same ranking below 3,000
photos, candidates only above). ``learned`` has no curve here: its scores depend on what
the person taught, so its curve is fitted when it learns (:func:`fit_curve` on the
photos or marks it held aside, :func:`expected_calibration_error` on the other half of
them) and stored with the model; its probability is that a hit is of the kind the
person taught (the same subfolder, keyword or marked relevance), labelled
:data:`TAUGHT`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "CALIBRATION",
    "LOOKS_ALIKE",
    "SAME",
    "TAUGHT",
    "curve_probability",
    "expected_calibration_error",
    "fit_curve",
    "hit_label",
    "hit_probability",
    "verified",
]

#: method -> (a, b) of its logistic curve (``tests/benchmarks/calibrate.py``, 2026-11-26;
#: ``hybrid`` 2026-11-27, again for its Hamming-embedding first stage)
CALIBRATION: dict[str, tuple[float, float]] = {
    "hybrid": (3.2928, -2.7278),
    "vocabulary": (1.1895, -1.4351),
    "wta": (1.1895, -1.4351),
    "uniform": (0.2434, -1.3226),
}
#: Label of a hit that passed the geometric check.
SAME = "same object or place"
#: Label of every other hit.
LOOKS_ALIKE = "looks alike"
#: Label of a ``learned`` hit (its probability: of the kind the person taught).
TAUGHT = "like what you taught"


def hit_probability(method: str, score: float) -> float | None:
    """The probability that a hit of ``method`` with ``score`` shows the same object or
    place as the query, in [0, 1]; None for a method without a curve.

    Parameters
    ----------
    method : str
    score : float

    Returns
    -------
    float or None
    """
    return curve_probability(CALIBRATION.get(method), score)


def curve_probability(curve: tuple[float, float] | None, score: float) -> float | None:
    """``1 / (1 + exp(-(a score + b)))`` of ``curve = (a, b)``, in [0, 1]; None without a
    curve or a finite score."""
    if curve is None or not math.isfinite(score):
        return None
    z = curve[0] * float(score) + curve[1]
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def fit_curve(scores: np.ndarray, relevant: np.ndarray) -> tuple[float, float] | None:
    """The logistic curve ``(a, b)`` of relevance on score (Platt scaling: a
    one-variable logistic regression, as ``tests/benchmarks/calibrate.py`` fits the
    methods' curves); None when the examples cannot give one (fewer than 10, or all
    relevant, or none) or the curve would fall with the score.

    Parameters
    ----------
    scores : (n,) float
    relevant : (n,) bool or {0, 1}

    Returns
    -------
    (float, float) or None
    """
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(scores, np.float64).reshape(-1, 1)
    y = np.asarray(relevant).astype(bool).ravel()
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{x.shape[0]} scores but {y.shape[0]} relevance values")
    ok = np.isfinite(x[:, 0])
    x, y = x[ok], y[ok]
    if y.size < 10 or y.all() or not y.any():
        return None
    lr = LogisticRegression(C=100.0).fit(x, y)
    a, b = float(lr.coef_[0, 0]), float(lr.intercept_[0])
    return (a, b) if a > 0 else None


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: the mean ``|mean p - frequency|`` over equal-width
    bins of ``p``, weighted by their share of the examples.

    Parameters
    ----------
    p : (n,) float in [0, 1]
        Predicted probabilities.
    y : (n,) bool or {0, 1}
        What happened.
    bins : int

    Returns
    -------
    float
        In [0, 1]; nan for no examples.
    """
    p = np.asarray(p, np.float64).ravel()
    y = np.asarray(y, np.float64).ravel()
    if p.size == 0:
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1]), 0, bins - 1)
    return float(sum((idx == b).mean() * abs(p[idx == b].mean() - y[idx == b].mean())
                     for b in range(bins) if (idx == b).any()))  # fmt: skip


def verified(method: str, score: float) -> bool:
    """Whether the hit passed the geometric check (``hybrid`` scores >= 1)."""
    return method == "hybrid" and float(score) >= 1.0


def hit_label(method: str, score: float) -> str:
    """:data:`SAME` for a verified hit, :data:`TAUGHT` for a ``learned`` one, else
    :data:`LOOKS_ALIKE`."""
    if method == "learned":
        return TAUGHT
    return SAME if verified(method, score) else LOOKS_ALIKE
