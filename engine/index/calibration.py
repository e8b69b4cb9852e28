"""Calibrated hit probabilities: how likely a hit shows the same object or place as the
query, from its score (search issue, point 3).

One logistic curve per method, ``p = 1 / (1 + exp(-(a s + b)))`` (:data:`CALIBRATION`),
fitted by ``tests/benchmarks/calibrate.py`` on the UKBench and Holidays dev sets through
``Collection.query`` (even-numbered queries, each set weighted equally) and checked on
the odd ones: expected calibration error 0.058 / 0.055 for ``hybrid`` (UKBench /
Holidays; refitted 2026-11-27 for its epipolar check and query expansion), 0.060–0.070
for the others. The curve is monotone, so the ranking is the method's own. A ``hybrid``
hit whose score is at least 1 passed the geometric check
(:func:`engine.index.verify.hybrid_scores`: verified hits score in [1, 2), the others in
[0, 1)): it is labelled :data:`SAME`; every other hit :data:`LOOKS_ALIKE`.

The probabilities of the methods without a geometric check are calibrated but say little
more than how often a top-10 hit is right on those sets (their Brier score is that of
the base rate); ``wta`` uses the ``vocabulary`` curve (the same ranking below 3,000
photos, candidates only above). ``learned`` has no curve (``None``): its scores depend
on what the person taught.
"""

from __future__ import annotations

import math

__all__ = ["CALIBRATION", "LOOKS_ALIKE", "SAME", "hit_label", "hit_probability", "verified"]

#: method -> (a, b) of its logistic curve (``tests/benchmarks/calibrate.py``, 2026-11-26;
#: ``hybrid`` 2026-11-27)
CALIBRATION: dict[str, tuple[float, float]] = {
    "hybrid": (3.3851, -2.9667),
    "vocabulary": (1.1895, -1.4351),
    "wta": (1.1895, -1.4351),
    "uniform": (0.2434, -1.3226),
}
#: Label of a hit that passed the geometric check.
SAME = "same object or place"
#: Label of every other hit.
LOOKS_ALIKE = "looks alike"


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
    ab = CALIBRATION.get(method)
    if ab is None or not math.isfinite(score):
        return None
    z = ab[0] * float(score) + ab[1]
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def verified(method: str, score: float) -> bool:
    """Whether the hit passed the geometric check (``hybrid`` scores >= 1)."""
    return method == "hybrid" and float(score) >= 1.0


def hit_label(method: str, score: float) -> str:
    """:data:`SAME` for a verified hit, else :data:`LOOKS_ALIKE`."""
    return SAME if verified(method, score) else LOOKS_ALIKE
