"""Optimal partial matching (thesis section 3.1, Eqs. 3.2-3.4): the reference the pyramid
match approximates, for tests and evaluation.

The smaller set is matched completely and one-to-one into the larger one so that the sum
of ground distances is minimal. Solved exactly with SciPy's ``linear_sum_assignment``
(a rectangular assignment problem) on the full distance matrix: ``O(m^2)`` memory and
roughly cubic time, so only for sets of up to a few thousand points.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from engine.core.validate import as_point_set, check_choice

__all__ = ["CDIST_METRICS", "optimal_partial_match"]

#: Ground distances of the exact and the per-bin assignments: name -> SciPy ``cdist`` metric.
CDIST_METRICS = {"l1": "cityblock", "l2": "euclidean"}


def optimal_partial_match(
    a: np.ndarray, b: np.ndarray, metric: str = "l1"
) -> tuple[float, np.ndarray]:
    """Minimum-cost partial matching of two point sets (Eq. 3.4).

    Parameters
    ----------
    a : (Ma, D) float32
    b : (Mb, D) float32
    metric : {"l1", "l2"}, default "l1"
        Ground distance; the thesis uses L1 (Eq. 3.3).

    Returns
    -------
    cost : float
        ``sum ||a_i - b_pi(i)||`` over the ``min(Ma, Mb)`` matched pairs (0 if a set is
        empty).
    pairs : (min(Ma, Mb), 2) int64
        Indices into ``a`` and ``b``, sorted by the index into ``a``.

    Examples
    --------
    >>> a = np.array([[0.0], [10.0]], np.float32)
    >>> b = np.array([[9.0], [1.0], [50.0]], np.float32)
    >>> cost, pairs = optimal_partial_match(a, b)
    >>> cost, pairs.tolist()
    (2.0, [[0, 1], [1, 0]])
    """
    check_choice(metric, "metric", tuple(CDIST_METRICS))
    a = as_point_set(a, "a")
    b = as_point_set(b, "b", dim=a.shape[1])
    if a.shape[0] == 0 or b.shape[0] == 0:
        return 0.0, np.zeros((0, 2), np.int64)
    dist = cdist(a.astype(np.float64), b.astype(np.float64), metric=CDIST_METRICS[metric])
    rows, cols = linear_sum_assignment(dist)
    pairs = np.stack([rows, cols], axis=1).astype(np.int64)
    return float(dist[rows, cols].sum()), pairs
