"""Explicit approximate correspondences from histogram pyramids (thesis section 3.2.3).

The pyramid decomposes one big assignment problem into many small ones: going from the
finest level up, the still unmatched points of the two sets that share a bin are paired
by an *optimal* assignment computed only among the points of that bin; matched points
are flagged and take no part in coarser levels. The number of pairs formed in a bin
equals the pyramid match's count of new matches there, ``min(h_X, h_Y)`` minus the
matches of its children (Eqs. 3.9 and 4.2).

Grouping is vectorised (sorting by bin id); bins holding one point of either set are
resolved without calling the solver (1 x 1 bins directly, 1 x k bins by a segmented
argmin, which is the optimal assignment there). Only bins with several points on both
sides call :func:`scipy.optimize.linear_sum_assignment`.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from engine.core.validate import check_choice
from engine.kernels.optimal import CDIST_METRICS

__all__ = ["correspondences"]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for every (s, n)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offs = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return np.arange(total, dtype=np.int64) + offs


def _rowwise(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    diff = a.astype(np.float64) - b.astype(np.float64)
    if metric == "l1":
        return np.abs(diff).sum(axis=1)
    return np.sqrt(np.einsum("ij,ij->i", diff, diff))


def _one_to_many(single, many, seg_len, X_single, X_many, metric):
    """Bins with one point on one side: pair it with its nearest point on the other side.

    ``single`` (k,) point per bin; ``many`` the concatenated members, ``seg_len`` (k,)
    members per bin. Returns (single, chosen member) arrays.
    """
    seg = np.repeat(np.arange(single.shape[0]), seg_len)
    d = _rowwise(X_single[single[seg]], X_many[many], metric)
    order = np.lexsort((d, seg))
    starts = np.cumsum(seg_len) - seg_len
    return single, many[order[starts]]


def _assign_bin(ia, ib, X_a, X_b, metric, max_cells):
    """Optimal assignment inside one bin; huge bins are split into aligned chunks."""
    na, nb = ia.shape[0], ib.shape[0]
    if na * nb <= max_cells:
        dist = cdist(X_a[ia], X_b[ib], metric=CDIST_METRICS[metric])
        r, c = linear_sum_assignment(dist)
        return ia[r], ib[c]
    # Oversized bin (only at coarse levels of weak pyramids): order both sides along the
    # principal direction of their union and solve aligned chunks of at most max_cells.
    pts = np.concatenate([X_a[ia], X_b[ib]]).astype(np.float64)
    pts -= pts.mean(axis=0)
    direction = np.linalg.svd(pts[: min(pts.shape[0], 2000)], full_matrices=False)[2][0]
    pa = np.argsort(X_a[ia] @ direction)
    pb = np.argsort(X_b[ib] @ direction)
    n_chunks = max(1, int(np.ceil(np.sqrt(na * nb / max_cells))))
    ca = np.array_split(ia[pa], n_chunks)
    cb = np.array_split(ib[pb], n_chunks)
    ra, rb = [], []
    for xa, xb in zip(ca, cb, strict=True):
        dist = cdist(X_a[xa], X_b[xb], metric=CDIST_METRICS[metric])
        r1, r2 = linear_sum_assignment(dist)
        r1, r2 = xa[r1], xb[r2]
        ra.append(r1)
        rb.append(r2)
    return np.concatenate(ra), np.concatenate(rb)


def correspondences(
    bins_a: np.ndarray,
    bins_b: np.ndarray,
    X_a: np.ndarray,
    X_b: np.ndarray,
    weights_a: np.ndarray,
    *,
    metric: str = "l2",
    max_bin_cells: int = 250_000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair the points of two sets bin by bin, finest level first (section 3.2.3).

    Parameters
    ----------
    bins_a : (Ma, L) int64
        Nested bin ids of set a's points, finest level first (a :class:`Binning`'s
        ``assign`` output, possibly truncated to fewer levels, Eq. 3.13).
    bins_b : (Mb, L) int64
    X_a : (Ma, D) float
        Features used for the ground distance inside a bin.
    X_b : (Mb, D) float
    weights_a : (Ma, L) float64
        Similarity weight of each of set a's bins (the weight a pair formed there gets).
    metric : {"l2", "l1"}, default "l2"
    max_bin_cells : int, default 250_000
        Largest assignment solved exactly (``n_a * n_b`` points of a bin, i.e. 500 x 500,
        tens of milliseconds). Larger bins -- only at coarse levels -- are cut into
        chunks aligned along the bins' principal direction and each chunk is solved
        optimally, so the cost stays near-linear; this is documented approximation.

    Returns
    -------
    pairs : (P, 2) int64
        Indices into a and b; no index is used twice. ``P = min(Ma, Mb)`` when the top
        level is a single bin (uniform pyramids), else the number of matches found.
    level : (P,) int64
        Level at which each pair was formed.
    weight : (P,) float64
        ``weights_a`` at that level.
    """
    check_choice(metric, "metric", tuple(CDIST_METRICS))
    bins_a = np.asarray(bins_a, np.int64)
    bins_b = np.asarray(bins_b, np.int64)
    if bins_a.ndim != 2 or bins_b.ndim != 2 or bins_a.shape[1] != bins_b.shape[1]:
        raise ValueError(
            f"bins_a and bins_b must be (M, L) with equal L, got {bins_a.shape}, {bins_b.shape}"
        )
    if X_a.shape[0] != bins_a.shape[0] or X_b.shape[0] != bins_b.shape[0]:
        raise ValueError("X_a / X_b must have one row per row of bins_a / bins_b")
    if max_bin_cells < 1:
        raise ValueError(f"max_bin_cells must be >= 1, got {max_bin_cells!r}")
    Ma, L = bins_a.shape
    Mb = bins_b.shape[0]
    free_a = np.ones(Ma, bool)
    free_b = np.ones(Mb, bool)
    out_a: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    out_l: list[np.ndarray] = []
    for lev in range(L):
        ia = np.flatnonzero(free_a)
        ib = np.flatnonzero(free_b)
        if ia.size == 0 or ib.size == 0:
            break
        ka, kb = bins_a[ia, lev], bins_b[ib, lev]
        common = np.intersect1d(ka, kb)
        if common.size == 0:
            continue
        ia = ia[np.isin(ka, common)]
        ib = ib[np.isin(kb, common)]
        ia = ia[np.argsort(bins_a[ia, lev], kind="stable")]
        ib = ib[np.argsort(bins_b[ib, lev], kind="stable")]
        ka, kb = bins_a[ia, lev], bins_b[ib, lev]
        sa = np.searchsorted(ka, common, "left")
        na = np.searchsorted(ka, common, "right") - sa
        sb = np.searchsorted(kb, common, "left")
        nb = np.searchsorted(kb, common, "right") - sb
        got_a: list[np.ndarray] = []
        got_b: list[np.ndarray] = []
        one = (na == 1) & (nb == 1)
        got_a.append(ia[sa[one]])
        got_b.append(ib[sb[one]])
        sel = (na == 1) & (nb > 1)
        if sel.any():
            pa, pb = _one_to_many(
                ia[sa[sel]], ib[_ranges(sb[sel], nb[sel])], nb[sel], X_a, X_b, metric
            )
            got_a.append(pa)
            got_b.append(pb)
        sel = (nb == 1) & (na > 1)
        if sel.any():
            pb, pa = _one_to_many(
                ib[sb[sel]], ia[_ranges(sa[sel], na[sel])], na[sel], X_b, X_a, metric
            )
            got_a.append(pa)
            got_b.append(pb)
        for j in np.flatnonzero((na > 1) & (nb > 1)):
            pa, pb = _assign_bin(
                ia[sa[j] : sa[j] + na[j]], ib[sb[j] : sb[j] + nb[j]], X_a, X_b, metric,
                max_bin_cells,
            )  # fmt: skip
            got_a.append(pa)
            got_b.append(pb)
        pa = np.concatenate(got_a)
        pb = np.concatenate(got_b)
        free_a[pa] = False
        free_b[pb] = False
        out_a.append(pa)
        out_b.append(pb)
        out_l.append(np.full(pa.shape[0], lev, np.int64))
    if not out_a:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    pa = np.concatenate(out_a)
    pb = np.concatenate(out_b)
    level = np.concatenate(out_l)
    pairs = np.stack([pa, pb], axis=1).astype(np.int64)
    weight = np.asarray(weights_a, np.float64)[pa, level]
    return pairs, level, weight
