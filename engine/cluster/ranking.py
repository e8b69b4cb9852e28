"""Members of a group ranked by flow: prototypes and outliers (thesis Sec. 9.4)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["flag_members", "rank_groups"]


def rank_groups(
    W: np.ndarray,
    labels: np.ndarray,
    *,
    prototype_percentile: float = 25.0,
    outlier_z: float = 3.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flow, prototypes and outliers of a grouping (thesis Sec. 9.4).

    Parameters
    ----------
    W : (n, n) float64
        Affinities (the diagonal is ignored).
    labels : (n,) int
        Group per image.
    prototype_percentile : float in (0, 100]
        The top this-percent of every group by flow are prototypes (at least one per group).
    outlier_z : float
        A member is an outlier when its mean affinity to its own group is lower than its
        mean affinity to some other group, or lower than the group median by more than
        ``outlier_z`` robust standard deviations (1.4826 MAD).

    Returns
    -------
    flow : (n,) float64
        ``sum_{j in g(i), j != i} W_ij``.
    prototypes, outliers : (n,) bool
    """
    if not 0 < prototype_percentile <= 100:
        raise ValueError(f"prototype_percentile must be in (0, 100], got {prototype_percentile}")
    n = W.shape[0]
    labels = np.asarray(labels, dtype=np.int64)
    k = int(labels.max()) + 1 if n else 0
    onehot = np.zeros((n, k))
    onehot[np.arange(n), labels] = 1.0
    Wz = W - np.diag(np.diag(W))
    to_group = Wz @ onehot  # (n, k) affinity sums to every group
    sizes = onehot.sum(0)
    flow = to_group[np.arange(n), labels]
    own_count = sizes[labels] - 1
    mean_own = flow / np.where(own_count > 0, own_count, 1)
    other = to_group / np.where(sizes > 0, sizes, 1)[None, :]
    other[np.arange(n), labels] = -np.inf
    best_other = other.max(axis=1) if k > 1 else np.full(n, -np.inf)
    prototypes, outliers = flag_members(
        labels, k, flow, mean_own, best_other, prototype_percentile, outlier_z
    )
    return flow, prototypes, outliers


def flag_members(
    labels: np.ndarray,
    k: int,
    flow: np.ndarray,
    mean_own: np.ndarray,
    best_other: np.ndarray,
    prototype_percentile: float,
    outlier_z: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Prototypes (top ``prototype_percentile`` % of each group by flow, at least one)
    and outliers (mean affinity to the own group ``outlier_z`` robust standard deviations
    below the group's median, or below the best other group's); (n,) bool each.

    Parameters
    ----------
    labels : (n,) int64
        Group per image, in ``[0, k)``.
    k : int
        Number of groups.
    flow : (n,) float64
        Ranks the members of a group (highest first).
    mean_own : (n,) float64
        Mean affinity of every image to the other members of its group.
    best_other : (n,) float64
        Largest mean affinity of every image to another group (``-inf`` when k = 1).
    prototype_percentile, outlier_z : float
        As :func:`rank_groups`.

    Returns
    -------
    prototypes, outliers : (n,) bool
        No image is both.
    """
    n = labels.shape[0]
    prototypes = np.zeros(n, bool)
    outliers = np.zeros(n, bool)
    for g in range(k):
        idx = np.flatnonzero(labels == g)
        if idx.size == 0:
            continue
        order = idx[np.argsort(-flow[idx], kind="stable")]
        n_proto = max(1, math.ceil(idx.size * prototype_percentile / 100.0))
        prototypes[order[:n_proto]] = True
        if idx.size >= 3:
            vals = mean_own[idx]
            med = np.median(vals)
            scale = max(1.4826 * np.median(np.abs(vals - med)), 0.1 * abs(med))
            low = vals < med - outlier_z * scale
            outliers[idx] = low | (vals < best_other[idx])
    outliers &= ~prototypes
    return prototypes, outliers
