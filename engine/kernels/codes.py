"""Histogram pyramids of batches of sets, and the bulk products that compare them.

:class:`engine.kernels.pyramid.PyramidMatch` encodes a batch of point sets once
(:func:`encode_points`): every non-empty (set, pyramid, level, bin) becomes one entry of
a :class:`PyramidCodes` -- the sparse pyramid of the thesis, section 3.3, ``O(m L)``
entries per set -- with the bin's count, weights and (for input-specific weights) the
set's distances to its centre. Kernel and cost matrices of two batches are then bilinear
forms over those entries (:func:`bilinear`): with the unary encoding of Eq. 3.15,
``min(a, b) = sum_{t >= 1} [a >= t] [b >= t]``, so each form is one sparse matrix
product (SciPy CSR @ CSR.T in C), plus a dense ``min`` for the few coarse bins shared
by most sets. The L1-normalised intersection of real-valued weighted pyramids
(:func:`l1_intersection`, ``PyramidMatch(normalize="l1")``) pairs the entries of every
bin instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.core.arrays import key_owner_order
from engine.kernels.binning import path_weights
from engine.kernels.embedding import level_key

__all__ = [
    "PyramidCodes",
    "bilinear",
    "encode_points",
    "l1_intersection",
    "l1_masses",
    "self_similarity",
    "terms",
    "unary",
]

_DENSE_MIN_PAIRS = 4096  # batches smaller than this (na * nb) never use the dense path
_DENSE_MAX_BINS = 256  # at most this many bins go through the dense per-bin loop
_SMALL_DENSE_CELLS = 1 << 18  # (na + nb) * n_coordinates below this: dense rows, no scipy


@dataclass
class PyramidCodes:
    """The histogram pyramids of a batch of sets, built once by :meth:`PyramidMatch.encode`
    (:func:`encode_points`).

    One entry per non-empty (set, shift, level, bin) -- the sparse pyramid of the thesis
    (section 3.3), ``O(m L)`` entries per set.

    Attributes
    ----------
    sizes : (n,) int64
        Number of points per set.
    row : (G,) int64
        Set index of each entry.
    key : (G,) int64
        STABLE hash of (shift, level, bin).
    count : (G,) int64
        Number of the set's points in the bin.
    level : (G,) int64
    w, wp : (G,) float64
        Similarity weight of the bin and of its parent (0 above the top level used).
    c, cp : (G,) float64
        Cost weight (distance estimate) of the bin and of its parent (0 above the top).
    d, dp : (G,) float64 or None
        Largest (``input_distance="max"``, Eq. 4.3 (b)) or mean (``"mean"``) distance of
        the set's points in the bin / parent bin to the centre.
    col : (G,) int64
        Batch-local compact id of ``key`` (``0 .. n_cols-1``).
    n_shifts : int
        Number of pyramids combined (``n_sides * n_shifts`` of :class:`PyramidMatch`).
    shift : (G,) int64
        Pyramid index of each entry.
    """

    sizes: np.ndarray
    row: np.ndarray
    key: np.ndarray
    count: np.ndarray
    level: np.ndarray
    w: np.ndarray
    wp: np.ndarray
    c: np.ndarray
    cp: np.ndarray
    d: np.ndarray | None
    dp: np.ndarray | None
    col: np.ndarray
    n_cols: int
    n_shifts: int
    shift: np.ndarray
    es: np.ndarray | None = field(default=None, repr=False)
    esp: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.sizes.shape[0])


# --------------------------------------------------------------------------- encoding
def encode_points(
    X: np.ndarray,
    sizes: np.ndarray,
    binnings: Sequence[Any],
    levels: Sequence[int],
    *,
    input_specific: bool,
    input_distance: str,
) -> PyramidCodes:
    """Histogram pyramids (Eq. 3.6) of a batch of sets, under every binning at once.

    Parameters
    ----------
    X : (N, d) float32
        The sets' points, stacked in set order (already projected).
    sizes : (n,) int64
        Points per set (``sizes.sum() == N``).
    binnings : sequence of fitted Binning
        One per pyramid (shift).
    levels : sequence of int
        Levels used of each binning (``PyramidMatch.levels_of``).
    input_specific : bool
        Also collect the per-bin distances ``d_ij(X)`` of Eq. 4.3 (b) (binnings must then
        return distances from ``assign``).
    input_distance : {"max", "mean"}
        Statistic of the distances to the bin centre used for ``d_ij(X)``.

    Returns
    -------
    PyramidCodes
    """
    n = sizes.shape[0]
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    need_d = input_specific
    parts: dict[str, list[np.ndarray]] = {
        k: []
        for k in ("row", "key", "count", "level", "w", "wp", "c", "cp", "d", "dp", "shift", "col")
    }
    col_offset = 0
    for t, binning in enumerate(binnings):
        if X.shape[0] == 0:
            break
        entries, n_keys = _pyramid_entries(
            t, binning, X, owner, n, levels[t], need_d, input_distance, col_offset
        )
        col_offset += n_keys
        for k, v in entries.items():
            parts[k].append(v)
    cat = {
        k: (
            (np.concatenate(v) if len(v) > 1 else v[0])
            if v
            else np.zeros(0, np.float64 if k in "w wp c cp d dp" else np.int64)
        )
        for k, v in parts.items()
    }
    key = cat["key"].astype(np.int64, copy=False)
    codes = PyramidCodes(
        sizes=sizes,
        row=cat["row"].astype(np.int64, copy=False),
        key=key,
        count=cat["count"].astype(np.int64, copy=False),
        level=cat["level"].astype(np.int64, copy=False),
        w=cat["w"].astype(np.float64, copy=False),
        wp=cat["wp"].astype(np.float64, copy=False),
        c=cat["c"].astype(np.float64, copy=False),
        cp=cat["cp"].astype(np.float64, copy=False),
        d=cat["d"].astype(np.float64) if need_d else None,
        dp=cat["dp"].astype(np.float64) if need_d else None,
        col=cat["col"].astype(np.int64, copy=False),
        n_cols=col_offset,
        n_shifts=len(binnings),
        shift=cat["shift"].astype(np.int64, copy=False),
    )
    if need_d:
        sigma = getattr(binnings[0], "sigma_", None)
        if sigma is not None:
            codes.es = np.exp(-codes.d / sigma)
            # no parent above the top level used: its weight is 0 (like w_L = 0)
            codes.esp = np.where(codes.wp > 0, np.exp(-codes.dp / sigma), 0.0)
        else:
            codes.es = np.sqrt(codes.w) * np.exp(-codes.d / codes.c)
            with np.errstate(divide="ignore", invalid="ignore"):
                esp = np.sqrt(codes.wp) * np.exp(-codes.dp / codes.cp)
            codes.esp = np.where(codes.cp > 0, esp, 0.0)
    return codes


def _pyramid_entries(
    t: int,
    binning: Any,
    X: np.ndarray,
    owner: np.ndarray,
    n: int,
    L: int,
    need_d: bool,
    input_distance: str,
    col_offset: int,
) -> tuple[dict[str, np.ndarray], int]:
    """The entries of pyramid ``t`` of the points ``X`` (N, D) owned by sets ``owner``
    (N,): one per non-empty (set, level, bin) of the ``L`` levels used, grouped by bin
    key, and the number of distinct bin keys (the entries' ``col`` count on from
    ``col_offset``)."""
    lean = None if need_d else getattr(binning, "assign_bins", None)
    # global weights need no distances: the tree's distance-free descent
    bins, dist = (lean(X), None) if lean is not None else binning.assign(X)
    weights = path_weights(binning, bins, L)  # (N, L): whole paths (idf: cumulative)
    bins = bins[:, :L]
    if need_d:
        if dist is None:
            raise ValueError("input-specific weights need a binning that returns distances")
        dist = dist[:, :L].astype(np.float64)
    N = X.shape[0]
    keys = np.empty((N, L), np.int64)
    w = np.empty((N, L + 1))
    c = np.empty((N, L + 1))
    w[:, L] = 0.0
    c[:, L] = 0.0
    w[:, :L] = weights
    for lev in range(L):
        keys[:, lev] = level_key(t, lev, bins[:, lev])
        c[:, lev] = _bin_costs(binning, lev, bins[:, lev], w[:, lev])
    flat_key = keys.ravel()  # entry p * L + lev
    order, ks, os_ = _group_order(flat_key, owner, L, n)
    new_key = np.empty(ks.shape[0], bool)
    new_key[:1] = True
    np.not_equal(ks[1:], ks[:-1], out=new_key[1:])
    new_grp = new_key.copy()
    new_grp[1:] |= os_[1:] != os_[:-1]
    starts = np.flatnonzero(new_grp)
    counts = np.diff(np.append(starts, ks.shape[0]))
    first = order[starts]
    p_idx, lev_idx = np.divmod(first, L)
    out = {
        "col": np.cumsum(new_key)[starts] - 1 + col_offset,
        "row": owner[p_idx],
        "key": flat_key[first],
        "count": counts,
        "shift": np.full(counts.shape[0], t, np.int64),
        "level": lev_idx,
        "w": w[p_idx, lev_idx],
        "wp": w[p_idx, lev_idx + 1],
        "c": c[p_idx, lev_idx],
        "cp": c[p_idx, lev_idx + 1],
    }
    if need_d:  # d_ij(X) per entry: max (Eq. 4.3 b) or mean distance to the centre
        if input_distance == "max":
            dmax = np.maximum.reduceat(dist.ravel()[order], starts)
        else:
            dmax = np.add.reduceat(dist.ravel()[order], starts) / counts
        group_of = np.empty(N * L, np.int64)
        group_of[order] = np.repeat(np.arange(starts.shape[0]), counts)
        parent_entry = first + 1  # same point, next level
        has_parent = lev_idx < L - 1
        dp = np.zeros_like(dmax)
        dp[has_parent] = dmax[group_of[parent_entry[has_parent]]]
        out["d"] = dmax
        out["dp"] = dp
    return out, int(new_key.sum())


def _group_order(
    flat_key: np.ndarray, owner: np.ndarray, L: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Order of the (point, level) entries grouping them by bin key, then set
    (:func:`engine.core.arrays.key_owner_order`: every key's entries contiguous, so
    each key gets one column); the sorted keys and the sets of the sorted entries."""
    set_of = owner[np.arange(flat_key.shape[0]) // L]
    order = key_owner_order(flat_key, set_of, n)
    return order, flat_key[order], set_of[order]


def _bin_costs(binning: Any, level: int, bins: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(n,) float64 cost weights of ``bins``: the binning's ``bin_costs`` or ``diameters``
    when it has them, else ``1 / w``."""
    for name in ("bin_costs", "diameters"):
        fn = getattr(binning, name, None)
        if fn is not None:
            return np.asarray(fn(level, bins), np.float64)
    with np.errstate(divide="ignore"):
        return 1.0 / w


# --------------------------------------------------------------------------- products
def terms(
    mode: str, codes: PyramidCodes, weights: str
) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Bilinear terms ``sum sign * min(h_X, h_Y) * u_X * v_Y`` of the requested form.

    Parameters
    ----------
    mode : {"sim", "cost"}
        Similarity (Eqs. 3.10, 4.4: ``w - w_parent`` folded into ``u v``) or cost.
    codes : PyramidCodes
    weights : {"global", "input_specific"}

    Returns
    -------
    list of (u (G,) float64, v (G,) float64, sign float)
    """
    if mode == "sim":
        if weights == "global":
            v = np.sqrt(np.maximum(codes.w - codes.wp, 0.0))
            return [(v, v, 1.0)]
        return [(codes.es, codes.es, 1.0), (codes.esp, codes.esp, -1.0)]
    ones = np.ones_like(codes.w)
    if weights == "global":
        return [(ones, codes.c - codes.cp, 1.0)]
    dd = codes.d - codes.dp
    return [(dd, ones, 1.0), (ones, dd, 1.0)]


def bilinear(
    A: PyramidCodes, B: PyramidCodes | None, mode: str, weights: str, per_shift: bool = False
) -> np.ndarray:
    """``sum over entries sign * min(h_a, h_b) u_a v_b`` for all pairs, in bulk.

    Unary encoding (Eq. 3.15): entry (set, bin, count) becomes ``count`` coordinates
    ``(bin, t)``, ``t = 1..count``; then ``min`` is a dot product. Bins whose unary
    columns are shared by many sets (coarse levels) are cheaper densely:
    ``sum_b min(H_a[:, b], H_b[:, b])`` on an (na, nb) grid per bin.

    Parameters
    ----------
    A : PyramidCodes
    B : PyramidCodes or None
        None: ``A`` against itself (its columns are reused, no key unification).
    mode : {"sim", "cost"}
        See :func:`terms`.
    weights : {"global", "input_specific"}
    per_shift : bool, default False
        One result per pyramid (shift) instead of their sum.

    Returns
    -------
    (len(A), len(B)) float64, or (n_shifts, len(A), len(B)) with ``per_shift``
    """
    import scipy.sparse as sp

    same = B is None
    if same:
        B = A
        colA, colB, ncol = A.col, A.col, A.n_cols
    else:
        ukeys, inv = np.unique(np.concatenate([A.key, B.key]), return_inverse=True)
        inv = inv.ravel()
        colA, colB, ncol = inv[: A.key.shape[0]], inv[A.key.shape[0] :], ukeys.shape[0]
    na, nb = len(A), len(B)
    n_out = A.n_shifts if per_shift else 1
    out = np.zeros((n_out, na, nb))
    if na == 0 or nb == 0 or A.key.shape[0] == 0 or B.key.shape[0] == 0:
        return out if per_shift else out[0]
    shiftA = A.shift if per_shift else np.zeros(A.key.shape[0], np.int64)
    shiftB = B.shift if per_shift else np.zeros(B.key.shape[0], np.int64)
    termsA = terms(mode, A, weights)
    termsB = termsA if same else terms(mode, B, weights)
    # -- decide dense vs sparse per bin: sparse cost ~ sum_t df_t^2 over unary columns
    dfA = np.bincount(colA, minlength=ncol)
    dfB = dfA if same else np.bincount(colB, minlength=ncol)
    maxcA = np.zeros(ncol, np.int64)
    np.maximum.at(maxcA, colA, A.count)
    if same:
        maxc = maxcA
    else:
        maxc = maxcA.copy()
        np.maximum.at(maxc, colB, B.count)
    # a bin is "heavy" when most pairs of sets share it with several points (coarse
    # levels); single-count bins are cheap in the sparse product; small batches and
    # too many heavy bins would make the per-bin Python loop the bottleneck.
    share = dfA.astype(np.float64) * dfB
    heavy = (share > 0.5 * na * nb) & (maxc > 1) & (na * nb >= _DENSE_MIN_PAIRS)
    if heavy.sum() > _DENSE_MAX_BINS:
        keep = np.argsort(np.where(heavy, share * maxc, -1.0))[-_DENSE_MAX_BINS:]
        heavy[:] = False
        heavy[keep] = True
    lightA = ~heavy[colA]
    lightB = ~heavy[colB]
    # unary expansion of the light entries
    offset = np.concatenate([[0], np.cumsum(np.where(heavy, 0, maxc))])
    ua = unary(A.count, lightA)
    ub = ua if same else unary(B.count, lightB)
    n_unary = int(offset[-1])
    for s in range(n_out):
        selA = ua[0] if not per_shift else ua[0][shiftA[ua[0]] == s]
        ta = ua[1] if not per_shift else ua[1][shiftA[ua[0]] == s]
        if same:
            selB, tb = selA, ta
        else:
            mB = shiftB[ub[0]] == s if per_shift else slice(None)
            selB, tb = ub[0][mB], ub[1][mB]
        small = (na + nb) * n_unary <= _SMALL_DENSE_CELLS
        ja = offset[colA[selA]] + ta - 1
        jb = offset[colB[selB]] + tb - 1
        for (ua_v, _, sign), (_, vb, _) in zip(termsA, termsB, strict=True):
            if small:  # a few sets: dense rows, no sparse-matrix overhead
                Ma = np.zeros((na, n_unary))
                Mb = np.zeros((nb, n_unary))
                Ma[A.row[selA], ja] = ua_v[selA]
                Mb[B.row[selB], jb] = vb[selB]
                out[s] += sign * (Ma @ Mb.T)
                continue
            Ma = sp.csr_matrix((ua_v[selA], (A.row[selA], ja)), shape=(na, n_unary))
            Mb = sp.csr_matrix((vb[selB], (B.row[selB], jb)), shape=(nb, n_unary))
            out[s] += sign * (Ma @ Mb.T).toarray()
        # heavy bins: dense min per bin
        hidx = np.flatnonzero(heavy)
        if hidx.size:
            remap = np.full(ncol, -1, np.int64)
            remap[hidx] = np.arange(hidx.size)
            ha = np.flatnonzero(heavy[colA] & ((shiftA == s) if per_shift else True))
            hb = np.flatnonzero(heavy[colB] & ((shiftB == s) if per_shift else True))
            for (ua_v, _, sign), (_, vb, _) in zip(termsA, termsB, strict=True):
                out[s] += sign * _dense_min_terms(
                    A.row[ha], remap[colA[ha]], A.count[ha], ua_v[ha],
                    B.row[hb], remap[colB[hb]], B.count[hb], vb[hb],
                    na, nb, hidx.size,
                )  # fmt: skip
    return out if per_shift else out[0]


def self_similarity(codes: PyramidCodes, weights: str) -> np.ndarray:
    """(n,) float64 unnormalised ``P(X, X)``: min(h, h) = h, so a weighted sum of counts."""
    total = np.zeros(len(codes))
    for u, v, sign in terms("sim", codes, weights):
        np.add.at(total, codes.row, sign * codes.count * u * v)
    return total


def unary(count: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand entries (selected by ``mask``) into unary coordinates ``t = 1..count``.

    Parameters
    ----------
    count : (G,) int64
        Points per entry.
    mask : (G,) bool

    Returns
    -------
    entry : (C,) int64
        Index of the entry of every coordinate.
    t : (C,) int64
        Its unary index ``1 .. count[entry]``.
    """
    idx = np.flatnonzero(mask)
    cnt = count[idx]
    rep = np.repeat(idx, cnt)
    starts = np.repeat(np.cumsum(cnt) - cnt, cnt)
    t = np.arange(rep.shape[0], dtype=np.int64) - starts + 1
    return rep, t


def _dense_min_terms(
    ra, ba, ca, ua, rb, bb, cb, vb, na: int, nb: int, nbins: int
) -> np.ndarray:  # fmt: skip
    """``sum_b min(h_a[i, b], h_b[j, b]) u_a[i, b] v_b[j, b]`` over a few dense bins."""
    out = np.zeros((na, nb))
    Ha = np.zeros((na, nbins), np.float32)
    Hb = np.zeros((nb, nbins), np.float32)
    Ua = np.zeros((na, nbins))
    Vb = np.zeros((nb, nbins))
    Ha[ra, ba] = ca
    Hb[rb, bb] = cb
    Ua[ra, ba] = ua
    Vb[rb, bb] = vb
    for k in range(nbins):
        m = np.minimum(Ha[:, k, None], Hb[None, :, k])
        out += m * np.outer(Ua[:, k], Vb[:, k])
    return out


# --------------------------------------------------------------------------- L1 scores
_PAIR_CHUNK = 1 << 22  # (entry a, entry b) pairs per bincount of l1_intersection
_L1_DENSE_SHARE = 0.01  # bins shared by more than this fraction of pairs: dense


def l1_masses(codes: PyramidCodes) -> np.ndarray:
    """(n,) float64 L1 mass ``sum_b (w_b - w_parent) h[b]`` of every set's weighted
    histograms over all pyramids (the unnormalised ``P(X, X)`` of global weights)."""
    return self_similarity(codes, "global")


def l1_intersection(A: PyramidCodes, B: PyramidCodes | None = None) -> np.ndarray:
    """Histogram intersection of L1-normalised weighted pyramids, for all pairs.

    ``K[i, j] = sum_b min(x_i[b], x_j[b])`` over every (pyramid, level, bin), with
    ``x_i[b] = (w_b - w_parent(b)) h_i[b] / m_i`` and ``m_i`` the set's mass
    (:func:`l1_masses`), so ``sum_b x_i[b] = 1`` and ``K = 1 - ||x_i - x_j||_1 / 2``
    (Nistér & Stewénius 2006). Real-valued, so no unary encoding: bins most pairs
    share are compared densely (``min`` on an (na, nb) grid per bin), the others pair
    by pair (every pair of entries of a bin: ``sum_b df_a[b] df_b[b]`` pairs, fine bins
    hold few sets). Exact; Mercer (the intersection of non-negative vectors is).

    Parameters
    ----------
    A : PyramidCodes
        Global (or idf) weights.
    B : PyramidCodes or None
        None: ``A`` against itself.

    Returns
    -------
    (len(A), len(B)) float64
        Rows or columns of empty sets are 0; the diagonal of ``A`` against itself is 1
        for non-empty sets.
    """
    same = B is None
    B = A if same else B
    na, nb = len(A), len(B)
    out = np.zeros((na, nb))
    xa, xb = _l1_values(A), None if same else _l1_values(B)
    xb = xa if xb is None else xb
    if same:
        col_a, col_b, ncol = A.col, A.col, A.n_cols
    else:
        ukeys, inv = np.unique(np.concatenate([A.key, B.key]), return_inverse=True)
        inv = inv.ravel()
        col_a, col_b, ncol = inv[: A.key.shape[0]], inv[A.key.shape[0] :], ukeys.shape[0]
    ka, kb = np.flatnonzero(xa > 0), np.flatnonzero(xb > 0)  # idf 0 bins add nothing
    df_a = np.bincount(col_a[ka], minlength=ncol)
    df_b = df_a if same else np.bincount(col_b[kb], minlength=ncol)
    # dense bins cost ~0.6 ns per (a, b) cell, listed pairs ~60 ns per pair
    heavy = df_a.astype(np.float64) * df_b > _L1_DENSE_SHARE * na * nb
    hidx = np.flatnonzero(heavy)
    if hidx.size:  # one (na, nb) minimum per bin, bins in rows (contiguous)
        remap = np.full(ncol, -1, np.int64)
        remap[hidx] = np.arange(hidx.size)
        ha = ka[heavy[col_a[ka]]]
        Ha = np.zeros((hidx.size, na))
        Ha[remap[col_a[ha]], A.row[ha]] = xa[ha]
        if same:
            Hb = Ha
        else:
            hb = kb[heavy[col_b[kb]]]
            Hb = np.zeros((hidx.size, nb))
            Hb[remap[col_b[hb]], B.row[hb]] = xb[hb]
        tmp = np.empty((na, nb))
        for k in range(hidx.size):
            np.minimum(Ha[k][:, None], Hb[k][None, :], out=tmp)
            out += tmp
    # light bins: every pair of entries sharing a bin (against itself: each pair once)
    lb = kb[~heavy[col_b[kb]]]
    lb = lb[np.argsort(col_b[lb], kind="stable")]
    start_b = np.concatenate([[0], np.cumsum(np.bincount(col_b[lb], minlength=ncol))])
    if same:
        la = lb
        first = np.arange(la.shape[0])  # partners: this entry and the later ones of its bin
        n_partners = start_b[col_a[la] + 1] - first
    else:
        la = ka[~heavy[col_a[ka]]]
        first = start_b[col_a[la]]
        n_partners = start_b[col_a[la] + 1] - first
    light = np.zeros(na * nb)
    ends = np.cumsum(n_partners)
    s = 0
    while s < la.shape[0]:
        e = max(
            int(np.searchsorted(ends, (ends[s - 1] if s else 0) + _PAIR_CHUNK, "right")), s + 1
        )
        cnt = n_partners[s:e]
        ia = np.repeat(la[s:e], cnt)
        ib = lb[np.arange(ia.shape[0]) + np.repeat(first[s:e] - (np.cumsum(cnt) - cnt), cnt)]
        light += np.bincount(
            A.row[ia] * nb + B.row[ib], np.minimum(xa[ia], xb[ib]), minlength=na * nb
        )
        s = e
    light = light.reshape(na, nb)
    out += light + light.T if same else light
    if same:  # exactly 1 (sum_b x_i[b]), up to rounding otherwise
        np.fill_diagonal(out, (l1_masses(A) > 0).astype(np.float64))
    return out


def _l1_values(codes: PyramidCodes) -> np.ndarray:
    """(G,) float64 ``(w - w_parent) count / mass`` of every entry (0 in empty sets)."""
    mass = l1_masses(codes)
    u = np.maximum(codes.w - codes.wp, 0.0) * codes.count
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mass[codes.row] > 0, u / mass[codes.row], 0.0)
