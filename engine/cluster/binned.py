"""Pyramid match between feature sets given as nested bin ids (thesis Ch. 3-4, 9.3).

Every feature of an image is assigned once to its bins at every level of a pyramid
(vocabulary tree or uniform grid, finest level first); kernels and correspondences then need
only those ids:

- :func:`binned_pyramid_kernel`: normalised vocabulary-guided pyramid match of all pairs
  (Eqs. 3.12-3.13), as sparse unary codes (Sec. 5.1) and dense histograms;
- :func:`spatial_pyramid_kernel`: the same with visual words paired with coarse image cells;
- :func:`bin_correspondences` and :class:`BinsMatcher`: explicit correspondences (3.2.3),
  one pair or a batch;
- :class:`BinnedMatcher`: correspondences between stored descriptor sets binned with a
  fitted :class:`engine.kernels.pyramid.PyramidMatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.core.validate import check_choice
from engine.kernels.binning import path_weights

__all__ = [
    "DENSE_LEVEL_BINS",
    "BinnedMatcher",
    "BinsMatcher",
    "bin_correspondences",
    "binned_pyramid_kernel",
    "spatial_pyramid_kernel",
]


def _unary_embedding(
    levels: Sequence[np.ndarray], owner: np.ndarray, n: int, dw: np.ndarray | None = None
):
    """Sparse unary embedding of nested histograms: ``E[i] . E[j]`` is the pyramid match
    ``sum_l (w_l - w_{l+1}) I_l`` with ``w_l = 2^-l`` (thesis Eq. 3.13 and Sec. 5.1: the
    ``t``-th point of an image in a bin sets coordinate ``(bin, t)``, so a dot product of
    two such codes is the histogram intersection). ``levels`` finest first."""
    import scipy.sparse as sp

    if dw is None:
        w = 0.5 ** np.arange(len(levels))
        dw = w - np.append(w[1:], 0.0)
    rows, cols, vals = [], [], []
    offset = 0
    for lev, ids in enumerate(levels):
        if ids.size == 0:
            continue
        if ids.min() < 0 or ids.max() > 4 * ids.size:  # compact only sparse id ranges
            _, ids = np.unique(ids, return_inverse=True)
        order = np.lexsort((ids, owner))
        key = owner[order] * (int(ids.max()) + 1) + ids[order]
        start = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
        rank = np.arange(key.size) - np.repeat(start, np.diff(np.r_[start, key.size]))
        width = int(rank.max()) + 1
        rows.append(owner[order])
        cols.append(offset + ids[order] * width + rank)
        vals.append(np.full(key.size, np.sqrt(dw[lev]), np.float32))
        offset += (int(ids.max()) + 1) * width
    if not rows:
        return sp.csr_matrix((n, 1), dtype=np.float32)
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n, offset),
    )


def _as_bins(b: Any) -> np.ndarray:
    """(m, L) int64 view of one set's bins (a 1-D array is one level)."""
    b = np.asarray(b, np.int64)
    return b if b.ndim == 2 else b.reshape(-1, 1)


def _dense_intersections(
    ids: np.ndarray, owner: np.ndarray, n: int, cols: np.ndarray, n_bins: int
) -> np.ndarray:
    """``I[i, j] = sum_b min(h_i(b), h_cols[j](b))`` from dense (n, n_bins) histograms,
    in row chunks (levels with few bins, where nearly every image fills every bin)."""
    H = np.zeros((n, n_bins), np.float32)
    np.add.at(H, (owner, ids), 1.0)
    Hc = H[cols]
    out = np.empty((n, cols.size))
    step = max(1, int(4_000_000 // max(cols.size * n_bins, 1)))
    for s0 in range(0, n, step):
        out[s0 : s0 + step] = np.minimum(H[s0 : s0 + step, None, :], Hc[None, :, :]).sum(-1)
    return out


#: Levels with at most this many bins are intersected with dense histograms.
DENSE_LEVEL_BINS = 256


def binned_pyramid_kernel(
    bins: Sequence[np.ndarray], columns: np.ndarray | None = None
) -> np.ndarray:
    """Normalised vocabulary-guided pyramid match between binned sets (thesis Ch. 4).

    ``K(X, Y) = sum_l (w_l - w_{l+1}) I_l(X, Y)`` with level weights ``w_l = 2^-l`` from
    the finest level and ``I_l`` the histogram intersection of the bin counts at level l
    (Eq. 3.13), divided by ``sqrt(K(X, X) K(Y, Y)) = sqrt(|X| |Y|)`` (Eq. 3.12).

    Parameters
    ----------
    bins : sequence of (m_i, L) int arrays
        Nested bin ids per feature, finest level first, unique within a level.
    columns : (m,) int, optional
        Only the columns of these images (Nystrom landmarks): returns (n, m).

    Returns
    -------
    (n, n) or (n, m) float64
        Symmetric with unit diagonal for non-empty sets; empty sets give zero rows.

    Notes
    -----
    Fine levels (many bins, sparse counts) are intersected as sparse dot products of
    unary-encoded counts (Sec. 5.1); coarse levels (at most :data:`DENSE_LEVEL_BINS` bins,
    which nearly every image fills) as element-wise minima of dense histograms, where the
    unary code would be dense. No Python loop over images or points.
    """
    n = len(bins)
    cols = np.arange(n) if columns is None else np.asarray(columns, np.int64)
    if n == 0:
        return np.zeros((0, cols.size))
    B = [_as_bins(b) for b in bins]
    L = max(b.shape[1] for b in B)
    sizes = np.array([b.shape[0] for b in B], np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    allb = np.concatenate(B) if owner.size else np.zeros((0, L), np.int64)
    w = 0.5 ** np.arange(L)
    dw = w - np.append(w[1:], 0.0)
    K = np.zeros((n, cols.size))
    sparse_levels = []
    for lev in range(L):
        if owner.size == 0:
            break
        ids = allb[:, lev]
        if ids.min() >= 0 and ids.max() < DENSE_LEVEL_BINS:  # few bins: dense histograms
            K += dw[lev] * _dense_intersections(ids, owner, n, cols, int(ids.max()) + 1)
        else:
            sparse_levels.append(lev)
    if sparse_levels:
        E = _unary_embedding([allb[:, lev] for lev in sparse_levels], owner, n,
                             dw=dw[sparse_levels])  # fmt: skip
        K += np.asarray((E @ E[cols].T).todense(), np.float64)
    d = np.sqrt(sizes.astype(np.float64))  # K(X, X) = sum_l dw_l |X| = |X|
    d = np.where(d > 0, d, 1.0)
    return K / d[:, None] / d[cols][None, :]


def bin_correspondences(bins_a: np.ndarray, bins_b: np.ndarray):
    """Explicit correspondences of a pyramid match from bin ids alone (thesis 3.2.3, 9.3).

    From the finest level up, the r-th still unmatched point of A in a bin is paired with
    the r-th still unmatched point of B in that bin; a pair formed at level l weighs
    ``2^-l``. Vectorised per level (sort + join on (bin, rank)).

    Returns
    -------
    engine.kernels.pyramid.MatchResult
        ``pairs`` (P, 2) int64 indices into A and B, ``level`` (P,), ``weight`` (P,).
    """
    from engine.kernels.pyramid import MatchResult

    bins_a = np.asarray(bins_a, np.int64)
    bins_b = np.asarray(bins_b, np.int64)
    free_a = np.ones(bins_a.shape[0], bool)
    free_b = np.ones(bins_b.shape[0], bool)
    out_p, out_l = [], []
    n_levels = bins_a.shape[1] if bins_a.ndim == 2 else 0
    for lev in range(n_levels):
        ia, ib = np.flatnonzero(free_a), np.flatnonzero(free_b)
        if ia.size == 0 or ib.size == 0:
            break
        ka, kb = bins_a[ia, lev], bins_b[ib, lev]
        oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
        ia, ka, ib, kb = ia[oa], ka[oa], ib[ob], kb[ob]
        ra = np.arange(ka.size) - np.searchsorted(ka, ka, side="left")
        rb = np.arange(kb.size) - np.searchsorted(kb, kb, side="left")
        width = int(max(ra.max(), rb.max())) + 1
        _, pa, pb = np.intersect1d(ka * width + ra, kb * width + rb, assume_unique=True,
                                   return_indices=True)  # fmt: skip
        if pa.size:
            out_p.append(np.stack([ia[pa], ib[pb]], axis=1))
            out_l.append(np.full(pa.size, lev, np.int64))
            free_a[ia[pa]] = False
            free_b[ib[pb]] = False
    pairs = np.concatenate(out_p) if out_p else np.zeros((0, 2), np.int64)
    level = np.concatenate(out_l) if out_l else np.zeros(0, np.int64)
    weight = 0.5 ** level.astype(np.float64)
    return MatchResult(score=float(weight.sum()), pairs=pairs, level=level, weight=weight,
                       xy_a=None, xy_b=None)  # fmt: skip


class BinsMatcher:
    """Pyramid-match correspondences between binned sets, one pair or many at once.

    ``matcher(i, j)`` is :func:`bin_correspondences` of sets i and j;
    :meth:`match_many` computes a whole batch of pairs with a few sorts per level (no
    Python loop over pairs or points), which :func:`refine_with_masks_iter` uses when it
    is available. Results are identical.

    Parameters
    ----------
    bins : sequence of (m_i, L) int arrays
        Nested bin ids per feature, finest level first.
    """

    def __init__(self, bins: Sequence[np.ndarray]) -> None:
        B = [_as_bins(b) for b in bins]
        self.n_levels = max((b.shape[1] for b in B), default=0)
        self.sizes = np.array([b.shape[0] for b in B], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.all = (
            np.concatenate(B) if self.offsets[-1] else np.zeros((0, self.n_levels), np.int64)
        )
        self._bins = B
        owner = np.repeat(np.arange(len(B), dtype=np.int64), self.sizes)
        start = self.offsets[owner]
        self.width = [
            int(self.all[:, lev].max()) + 1 if self.all.shape[0] else 1
            for lev in range(self.n_levels)
        ]
        # per level: each image's local feature indices sorted by bin (stable), and the
        # bins in that order (contiguous, so a batch gathers each once)
        self.local_order, self.sorted_bins = [], []
        for lev in range(self.n_levels):
            col = np.ascontiguousarray(self.all[:, lev])
            order = np.argsort(owner * self.width[lev] + col, kind="stable")
            self.local_order.append(order - start)
            self.sorted_bins.append(col[order])

    def __len__(self) -> int:
        return len(self._bins)

    def __call__(self, i: int, j: int):
        return bin_correspondences(self._bins[i], self._bins[j])

    def _side(self, images: np.ndarray):
        """Slots of the features of ``images[q]`` (blocks in pair order): pair index,
        block start and global feature index, per slot."""
        cnt = self.sizes[images]
        q = np.repeat(np.arange(images.size, dtype=np.int64), cnt)
        blk = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
        blk_rep = np.repeat(blk, cnt)
        gidx = np.repeat(self.offsets[images] - blk, cnt) + np.arange(int(cnt.sum()))
        return q, blk_rep, gidx

    @staticmethod
    def _ranks(key: np.ndarray) -> np.ndarray:
        """Rank of every entry among equal keys of a SORTED key array (O(n))."""
        if key.size == 0:
            return key.copy()
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        return np.arange(key.size) - np.repeat(starts, np.diff(np.r_[starts, key.size]))

    def match_many(self, pairs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Correspondences of every ``(i, j)`` row of ``pairs`` (P, 2): a list of
        ``(pairs (c, 2) int64 local feature indices, weight (c,) float64 = 2^-level)``.

        Every image's features are pre-sorted by bin at every level, so the features of a
        batch of pairs come out sorted by (pair, bin) without sorting; ranks within a bin
        and the join on (pair, bin, rank) are linear passes and one binary search."""
        pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
        P = pairs.shape[0]
        sides = [self._side(pairs[:, 0]), self._side(pairs[:, 1])]
        free = [np.ones(sd[0].size, bool) for sd in sides]
        out_q, out_a, out_b, out_l = [], [], [], []
        for lev in range(self.n_levels):
            width = int(self.width[lev])
            keys, slots = [], []
            for sd, fr in zip(sides, free, strict=True):
                q, blk, gidx = sd
                pos = blk + self.local_order[lev][gidx]  # slot of the bin-sorted feature
                keep = fr[pos]
                keys.append(q[keep] * width + self.sorted_bins[lev][gidx[keep]])
                slots.append(pos[keep])
            if keys[0].size == 0 or keys[1].size == 0:
                break
            ra, rb = self._ranks(keys[0]), self._ranks(keys[1])
            rw = int(max(ra.max(), rb.max())) + 1
            ca, cb = keys[0] * rw + ra, keys[1] * rw + rb
            j = np.searchsorted(cb, ca)
            ok = j < cb.size
            ok[ok] = cb[j[ok]] == ca[ok]
            ia, ib = slots[0][ok], slots[1][j[ok]]
            if ia.size:
                out_q.append(sides[0][0][ia])
                out_a.append(ia)
                out_b.append(ib)
                out_l.append(np.full(ia.size, lev, np.int64))
                free[0][ia] = False
                free[1][ib] = False
        if not out_q:
            empty = (np.zeros((0, 2), np.int64), np.zeros(0))
            return [empty] * P
        q = np.concatenate(out_q)
        ia, ib = np.concatenate(out_a), np.concatenate(out_b)
        la, lb = ia - sides[0][1][ia], ib - sides[1][1][ib]  # slot - block start
        lev = np.concatenate(out_l)
        order = np.lexsort((la, lev, q))  # per pair: finest level first, then A's index
        q, la, lb, lev = q[order], la[order], lb[order], lev[order]
        bounds = np.searchsorted(q, np.arange(P + 1))
        w = 0.5 ** lev.astype(np.float64)
        pl = np.stack([la, lb], axis=1)
        return [(pl[bounds[t] : bounds[t + 1]], w[bounds[t] : bounds[t + 1]]) for t in range(P)]


class BinnedMatcher:
    """Explicit pyramid-match correspondences between stored feature sets, no geometry.

    The refinement of Sec. 9.3 needs each image's correspondences to the other members of
    its group. This matcher bins every feature of every image ONCE with a fitted
    :class:`engine.kernels.pyramid.PyramidMatch` (its first pyramid, finest level first, Eq. 3.13)
    and then, per pair, pairs the still unmatched points that share a bin, finest level
    first (thesis 3.2.3, :func:`engine.kernels.correspondences.correspondences`). Unlike
    ``Collection.match`` there is no homography verification, so a pair costs only the
    in-bin assignments (milliseconds).

    Parameters
    ----------
    pyramid : engine.kernels.pyramid.PyramidMatch
        A fitted pyramid match (e.g. the collection's vocabulary-guided one); its
        projection, first binning, ``n_levels`` and bin weights (``path_weights``) are used.
    sets : sequence of (m_i, D) float32 arrays or ``Features``
        The images' descriptors (``.descriptors`` is used when present).
    metric : {"l2", "l1"}
        Ground distance of the in-bin assignments.

    Notes
    -----
    Calling ``matcher(i, j)`` returns a :class:`engine.kernels.pyramid.MatchResult` whose
    ``pairs`` (P, 2) int64 index sets ``i`` and ``j``, ``level`` (P,) int64 and ``weight``
    (P,) float64 is the bin similarity weight of the level where the pair formed;
    ``score`` is ``weight.sum()`` (un-normalised pyramid-match similarity of the pairs).
    """

    def __init__(self, pyramid: Any, sets: Sequence[Any], *, metric: str = "l2") -> None:
        check_choice(metric, "metric", ("l2", "l1"))
        if not getattr(pyramid, "binnings_", None):
            raise ValueError("pyramid must be a fitted engine.pyramid.PyramidMatch")
        self.metric = metric
        self.sets = [
            np.ascontiguousarray(getattr(s, "descriptors", s), dtype=np.float32) for s in sets
        ]
        dims = {s.shape[1] for s in self.sets if s.ndim == 2 and s.shape[0]}
        if any(s.ndim != 2 for s in self.sets) or len(dims) > 1:
            raise ValueError("sets must be (m_i, D) arrays with one common D")
        sizes = np.array([s.shape[0] for s in self.sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])
        L = int(pyramid.n_levels)
        binning = pyramid.binnings_[0]
        if self.offsets[-1]:
            X = np.concatenate([s for s in self.sets if s.shape[0]])
            proj = getattr(pyramid, "projection_", None)
            P = proj.transform(X) if proj is not None else X
            full = np.asarray(binning.assign(P)[0], dtype=np.int64)
            bins = full[:, :L]
            w = path_weights(binning, full, L)  # level by level (idf: whole paths)
        else:
            bins, w = np.zeros((0, L), np.int64), np.zeros((0, L))
        self._bins, self._w, self.n_levels = bins, w, L

    def __len__(self) -> int:
        return len(self.sets)

    @property
    def bins(self) -> list[np.ndarray]:
        """Per-image (m_i, L) int64 bin ids, finest level first (views, do not modify)."""
        o = self.offsets
        return [self._bins[o[i] : o[i + 1]] for i in range(len(self.sets))]

    def __call__(self, i: int, j: int):
        from engine.kernels.correspondences import correspondences
        from engine.kernels.pyramid import MatchResult

        a0, a1 = self.offsets[i], self.offsets[i + 1]
        b0, b1 = self.offsets[j], self.offsets[j + 1]
        if a1 == a0 or b1 == b0:
            pairs, level, weight = np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0)
        else:
            pairs, level, weight = correspondences(
                self._bins[a0:a1], self._bins[b0:b1], self.sets[i], self.sets[j],
                self._w[a0:a1], metric=self.metric,
            )  # fmt: skip
        return MatchResult(
            score=float(np.sum(weight)), pairs=pairs, level=level, weight=weight,
            xy_a=None, xy_b=None,
        )  # fmt: skip


def spatial_pyramid_kernel(
    bins: Sequence[np.ndarray],
    xy: Sequence[np.ndarray],
    *,
    grid: int = 4,
    word_level: int = 1,
) -> np.ndarray:
    """Pyramid-match kernel over feature bins augmented with coarse image position.

    Every feature's bin at ``word_level`` (its "visual word") is paired with its cell in a
    ``g x g`` grid over the image for ``g = grid, grid/2, ..., 2``; these spatial levels
    are put below the feature-space levels, finest first, and the kernel is the
    pyramid match over the combined levels (thesis Eq. 3.13 with level weights
    ``w_l = 2^-l``)::

        K(X, Y) = sum_l (w_l - w_{l+1}) I_l(X, Y),     I_l = sum_b min(H_l^X(b), H_l^Y(b))

    cosine-normalised, ``K(X, Y) / sqrt(K(X, X) K(Y, Y))``. Each term is a histogram
    intersection with a non-negative coefficient, so ``K`` is positive semi-definite. Matches
    of the same word in the same region of the two images count most, as in the spatial
    pyramid match of Lazebnik et al. (2006), which suits object categories photographed in
    similar poses; for arbitrary layouts plain feature-space bins are the safer affinity.

    Parameters
    ----------
    bins : sequence of (m_i, L) int64 arrays
        Nested bin ids per feature, FINEST level first (as ``Binning.assign`` or
        :attr:`BinnedMatcher.bins`); ids unique within a level.
    xy : sequence of (m_i, 2) float arrays
        Feature positions normalised to ``[0, 1]`` by the image width and height.
    grid : int
        Finest grid side, a power of two >= 2 (4: 4x4 and 2x2 cells).
    word_level : int
        Level of ``bins`` whose bins are the words paired with positions (0 = finest).

    Returns
    -------
    (n, n) float64
        Symmetric kernel with unit diagonal (0 rows/columns for empty images).

    Notes
    -----
    Intersections are sparse dot products of unary-encoded bin counts (the ``t``-th point
    of an image in a bin sets coordinate ``(bin, t)``; thesis Sec. 5.1), one sparse product
    for all pairs; cost ~ ``n * nnz`` at worst, no Python loop over points or pairs.
    """

    if len(bins) != len(xy):
        raise ValueError(f"bins has {len(bins)} entries but xy has {len(xy)}")
    if grid < 2 or grid & (grid - 1):
        raise ValueError(f"grid must be a power of two >= 2, got {grid!r}")
    n = len(bins)
    if n == 0:
        return np.zeros((0, 0))
    B = [np.asarray(b, dtype=np.int64).reshape(len(b), -1) for b in bins]
    P = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in xy]
    L = {b.shape[1] for b in B if b.shape[0]}
    if len(L) > 1:
        raise ValueError("all bins arrays need the same number of levels")
    n_levels = L.pop() if L else max(b.shape[1] for b in B)
    if not 0 <= word_level < max(n_levels, 1):
        raise ValueError(f"word_level must be in [0, {n_levels - 1}], got {word_level!r}")
    for i, (b, p) in enumerate(zip(B, P, strict=True)):
        if b.shape[0] != p.shape[0]:
            raise ValueError(f"image {i}: {b.shape[0]} bins rows but {p.shape[0]} positions")
    sizes = np.array([b.shape[0] for b in B], dtype=np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    allb = np.concatenate(B) if owner.size else np.zeros((0, n_levels), np.int64)
    allp = np.clip(np.concatenate(P) if owner.size else np.zeros((0, 2)), 0.0, 1.0)
    word = allb[:, word_level] if owner.size else np.zeros(0, np.int64)
    levels = []
    g = grid
    while g >= 2:  # word x cell, finest grid first; nested since g halves
        cell = np.minimum((allp * g).astype(np.int64), g - 1)
        levels.append(word * (g * g) + cell[:, 0] * g + cell[:, 1])
        g //= 2
    levels += [allb[:, lev] for lev in range(n_levels)]
    if owner.size == 0:
        return np.zeros((n, n))
    E = _unary_embedding(levels, owner, n)
    K = np.asarray((E @ E.T).todense(), dtype=np.float64)
    d = np.sqrt(np.diag(K))
    d = np.where(d > 0, d, 1.0)
    return K / d[:, None] / d[None, :]
