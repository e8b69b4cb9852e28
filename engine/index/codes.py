"""Pyramids of a batch of images as the search data holds them: the unique bin keys of
every image with their counts and levels, sorted by (image, key), with the batch's
columns.

:func:`batch_codes` is the encoder of the index and of queries: the keys and counts of
:meth:`engine.kernels.pyramid.PyramidMatch.encode` (thesis Eq. 3.6), without the per-entry
bin costs, columns and shifts that encoding computes for other weightings and kernels.
It is built from the pyramid's public pieces (``PyramidMatch.prepare``, ``project``,
``levels_of`` and the key helpers ``GOLDEN``, ``level_salt``, ``mix64``, ``level_key``),
so its keys are exactly the pyramid's. The points of the nested binnings of the index
(uniform grids, vocabulary trees) are grouped by one sort per binning
(:func:`nested_groups`); the groups, or every (point, level) pair for other binnings, are
then ordered by (key, set) with one packed sort (:func:`key_major_order`).
:func:`intersection_index` turns the codes with their values into an
:class:`~engine.index.search.IntersectionIndex`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index.search import IntersectionIndex

if TYPE_CHECKING:  # pragma: no cover
    from engine.kernels.pyramid import PyramidMatch

__all__ = [
    "GROUPED_MIN_POINTS",
    "PACK_KEY_BITS",
    "StackedSets",
    "batch_codes",
    "intersection_index",
    "key_major_order",
    "nested_groups",
]


@dataclass(frozen=True)
class StackedSets:
    """Descriptor sets of a batch stacked: set ``k`` is ``X[start_k : start_k + sizes[k]]``
    (what :func:`batch_codes` concatenates anyway; read from the store in one pass).

    Attributes
    ----------
    X : (N, D) float32
        C-contiguous and finite.
    sizes : (n,) int64
        Points of every set, ``sum(sizes) == N``.
    """

    X: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return int(self.sizes.size)

    def sets(self) -> list[np.ndarray]:
        """The sets as views of ``X``."""
        return np.split(self.X, np.cumsum(self.sizes)[:-1]) if self.sizes.size else []


PACK_KEY_BITS = 32  # key_major_order: the key's top bits kept above the set and entry
# batch_codes groups the points of nested binnings (nested_groups) from this many points
# on: below, its fixed cost per binning and level outweighs the smaller sort (one UKBench
# image, ~500 points: uniform pyramid 1.3 ms by the entry sort against 4.2 ms grouped,
# vocabulary 2.0 against 2.4 ms; even at ~3,400 points, faster from ~6,000)
GROUPED_MIN_POINTS = 4096


def key_major_order(
    sk: np.ndarray, entry_set: np.ndarray, set_bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Entries of :func:`batch_codes` ordered by (key, set), for counting them.

    One sort of values (no argsort, no gather) does it when the set and the entry's
    index fit below at least ``PACK_KEY_BITS`` of the key's top bits: each entry is
    packed as (the key's top bits, its set, its index) and the index and set read back
    from the sorted values (about 3x faster than an argsort of the keys with their set on
    UKBench batches). Where distinct keys share those top bits (one UKBench batch in four
    of the uniform pyramids' ~290,000 entries has such a pair), the runs of equal top bits
    are sorted again by (key, set); if there are many, the exact two-key sort of all
    entries is used instead.

    Parameters
    ----------
    sk : (E,) uint64
        Keys in an order-preserving unsigned form.
    entry_set : (E,) int64
        Set of every entry, ``< 2**set_bits``.
    set_bits : int

    Returns
    -------
    order : (E,) int64
        Entries sorted by key, then set.
    ks : (E,) uint64
        ``sk[order]``.
    new : (E,) bool
        Where a (key, set) group starts.
    rs : (E,) int64
        ``entry_set[order]``.
    """
    E = sk.size
    new = np.empty(E, bool)
    new[:1] = True
    entry_bits = max(1, int(E - 1).bit_length())
    low = set_bits + entry_bits
    if low <= 64 - PACK_KEY_BITS:
        packed = (sk >> np.uint64(low)) << np.uint64(low)
        packed |= entry_set.view(np.uint64) << np.uint64(entry_bits)
        packed |= np.arange(E, dtype=np.uint64)
        packed.sort()  # the values are distinct: any sort gives the same order
        order = (packed & np.uint64((1 << entry_bits) - 1)).view(np.int64)
        ks = sk[order]
        group = packed >> np.uint64(entry_bits)  # the key's top bits and the set
        np.not_equal(group[1:], group[:-1], out=new[1:])
        rs = (group & np.uint64((1 << set_bits) - 1)).view(np.int64)
        top = group >> np.uint64(set_bits)
        # exact but where distinct keys share the top bits: those runs, ordered by set
        # and index, are sorted again
        mixed = np.flatnonzero((ks[1:] != ks[:-1]) & (top[1:] == top[:-1]))
        if mixed.size == 0:
            return order, ks, new, rs
        if mixed.size <= 64:
            bounds = np.append(np.flatnonzero(np.append(True, top[1:] != top[:-1])), E)
            for run in np.unique(np.searchsorted(bounds, mixed, side="right")):
                a, b = bounds[run - 1], bounds[run]
                sub = order[a:b]
                order[a:b] = sub[np.lexsort((entry_set[sub], sk[sub]))]
                ks[a:b] = sk[order[a:b]]
                rs[a:b] = entry_set[order[a:b]]
                k, r = ks[a:b], rs[a:b]
                new[a + 1 : b] = (k[1:] != k[:-1]) | (r[1:] != r[:-1])
            return order, ks, new, rs
    order = np.lexsort((entry_set, sk))
    ks = sk[order]
    rs = entry_set[order]
    new[1:] = (ks[1:] != ks[:-1]) | (rs[1:] != rs[:-1])
    return order, ks, new, rs


def nested_groups(
    binning: Any,
    X: np.ndarray,
    n_levels: int,
    owner: np.ndarray,
    set_bits: int,
    bins_all: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None:
    """The (set, bin) groups of a batch's points at every level of one nested binning,
    from one sort of the points.

    The bins of a :class:`~engine.kernels.pyramid.UniformBinning` and of a
    :class:`~engine.kernels.vocabulary.VocabularyTree` are nested: a bin is a union of bins of the
    level below. Points sorted by set, then by their finest bin in an order that keeps
    every coarser bin together -- the Morton (Z-) order of the grid cells, the tree's
    leaf id -- make every level's (set, bin) groups runs of that one order, found by
    comparing neighbours, instead of a sort of all (point, level) entries.

    Parameters
    ----------
    binning : UniformBinning or VocabularyTree
    X : (m, D) float32
        The batch's (projected) points, ``m >= 1``, stacked by set.
    n_levels : int
        Levels used (finest first).
    owner : (m,) int64
        Set of every point (ascending), ``< 2**set_bits``.
    set_bits : int
    bins_all : (m, levels) int64, optional
        A tree's ``binning.assign_bins(X)``, when the caller has it already.

    Returns
    -------
    list of (rep, count, bins, sets), one per level, or None
        ``rep`` (G,) int64 a point of every group, ``count`` (G,) int64 its points,
        ``bins`` (G,) int64 its bin id as ``binning.assign`` numbers it, ``sets`` (G,)
        int64 its set; groups in (set, order) order. None when the binning is of another
        kind, or the batch's cells need more bits than a 64-bit sort key holds (the caller
        then sorts entries).
    """
    from engine.kernels.pyramid import UniformBinning
    from engine.kernels.vocabulary import VocabularyTree

    m = X.shape[0]
    if isinstance(binning, UniformBinning):
        cells = binning.cells(X)
        top = binning.n_levels - 1  # the single bin 0 (UniformBinning.assign)
        nested = min(n_levels, top)  # levels whose bins are cells >> level
        # an offset that is a multiple of every used level's side keeps cells >> level
        # nested; B bits per dimension then hold every cell of the batch
        g = 1 << max(nested - 1, 0)
        off = -(int(cells.min()) // g) * g
        B = max(1, (int(cells.max()) + off).bit_length())
        D = cells.shape[1]
        if D * B + set_bits > 63:
            return None
        # bit i of dimension d at bit i * D + d: the cells at level l are the bits >= l * D
        spread = np.zeros(1 << B, np.uint64)
        v = np.arange(1 << B, dtype=np.uint64)
        for i in range(B):
            spread |= ((v >> np.uint64(i)) & np.uint64(1)) << np.uint64(i * D)
        code = owner.astype(np.uint64) << np.uint64(D * B)
        for d in range(D):
            code |= spread[cells[:, d] + off] << np.uint64(d)
        perm = np.argsort(code)
        s = code[perm]
        ct = np.ascontiguousarray(cells.T)  # (D, m): each dimension's cells contiguous
        mult = [np.int64(x) for x in binning.mult_]
        levels = []
        for lev in range(n_levels):
            shift = np.uint64(D * (lev if lev < top else B))  # top: the set alone
            new = np.empty(m, bool)
            new[0] = True
            np.not_equal(s[1:] >> shift, s[:-1] >> shift, out=new[1:])
            starts = np.flatnonzero(new)
            rep = perm[starts]
            if lev < top:  # (cells[rep] >> lev) @ mult_ as assign (wraps), without
                # numpy's integer matmul (not vectorised: 3x the time of these passes)
                bins = (ct[0][rep] >> lev) * mult[0]
                for d in range(1, D):
                    bins += (ct[d][rep] >> lev) * mult[d]
            else:
                bins = np.zeros(starts.size, np.int64)
            owners = (s[starts] >> np.uint64(D * B)).view(np.int64)
            levels.append((rep, np.diff(np.append(starts, m)), bins, owners))
        return levels
    if isinstance(binning, VocabularyTree) and binning.ids_follow_parents:
        if bins_all is None:
            bins_all = binning.assign_bins(X)  # (m, levels) finest first
        leaf_bits = max(1, int(binning.n_leaves - 1).bit_length())
        if leaf_bits + set_bits > 63:
            return None
        code = (owner << leaf_bits) | bins_all[:, 0]
        perm = np.argsort(code)
        other_set = np.empty(m, bool)
        other_set[0] = True
        so = owner[perm]
        np.not_equal(so[1:], so[:-1], out=other_set[1:])
        levels = []
        for lev in range(n_levels):
            b = bins_all[perm, lev]
            new = other_set.copy()
            new[1:] |= b[1:] != b[:-1]
            starts = np.flatnonzero(new)
            levels.append((perm[starts], np.diff(np.append(starts, m)), b[starts], so[starts]))
        return levels
    return None


def batch_codes(
    pm: PyramidMatch,
    sets: Sequence[np.ndarray] | StackedSets,
    *,
    weights: bool = False,
    words_level: int | None = None,
) -> SimpleNamespace:
    """Pyramids of a batch of sets as the search data needs them: the unique bin keys of
    every set with their counts (Eq. 3.6) and levels -- the keys and counts of
    ``pm.encode(sets)``, without the per-entry bin costs, columns and shifts that
    encoding computes for other weightings and kernels (the index encodes every image
    with this: half the time of ``encode`` on UKBench).

    Entries come out sorted by (set, key), as :class:`~engine.index.search.IntersectionIndex`
    holds its rows, and with the batch's columns: one sort of the entries by key and set
    (:func:`key_major_order`), then a stable radix sort by set. The entries sorted are
    the (set, bin) groups of every level, found from one sort of the points per binning
    (:func:`nested_groups`; the index's grids and trees are nested), or, for other
    binnings and cells too far out for that sort's key, all (point, level) pairs.
    Batches of fewer than ``GROUPED_MIN_POINTS`` points (a query) sort all pairs.
    On UKBench's 500 images (batches of 64, one thread, 12 interleaved runs) the uniform
    pyramids take a median 0.49 s against 0.77 s with the sort of all entries, the
    vocabulary pyramids 0.34 s against 0.36 s (their tree descent is most of it).

    Parameters
    ----------
    pm : PyramidMatch
        Fitted, with global bin weights.
    sets : list of (M_i, D) float32 or StackedSets
        A list of arrays (validated), or a :class:`StackedSets` read from the store
        (taken as it is).
    weights : bool
        Also the bins' global weights (uniform binnings, or any binning through the
        sort of all entries).
    words_level : int, optional
        Also every point's bin at this level (finest first) of each binning, as
        ``words``: the words of the Hamming embedding, which the index stores
        (:mod:`engine.index.selective`), found by the same descent.

    Returns
    -------
    SimpleNamespace
        ``row, key, count, level`` (U,) int64 / int64 / int32 / int8; ``sizes`` (n,)
        int64; ``n``; ``ukeys`` (K,) int64 the sorted distinct keys and ``col`` (U,)
        int32 each entry's position in them; with ``weights`` also ``w, wp`` (U,)
        float64, the global weights of each bin and of its parent (0 above the top
        level), and ``n_shifts`` (what ``histograms_from_codes(..., "pm")`` reads); with
        ``words_level`` also ``words`` (m, n_binnings) int64 (None when a binning has
        no bins of its points at that level, a grid's).
    """
    from engine.kernels.pyramid import GOLDEN, level_salt, mix64

    if isinstance(sets, StackedSets):
        if sets.X.ndim != 2 or sets.X.shape[1] != pm.dim_:
            raise ValueError(f"sets must have {pm.dim_} columns, got shape {sets.X.shape}")
        X, sizes = sets.X, np.asarray(sets.sizes, np.int64)
    else:
        arrays = pm.prepare(list(sets), "sets")
        sizes = np.array([a.shape[0] for a in arrays], np.int64)
        X = np.concatenate(arrays) if arrays else None
    n = int(sizes.size)
    m = int(sizes.sum())
    set_bits = max(1, int(n - 1).bit_length())
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)  # set of every point
    lean_bins: list[np.ndarray | None] = [None] * len(pm.binnings_)
    if m:
        X = pm.project(X)
        if words_level is not None:  # (each tree's descent, done once for both uses)
            lean_bins = [getattr(b, "assign_bins", lambda _: None)(X) for b in pm.binnings_]
        grouped_ok = not weights or all(_level_constant(b) for b in pm.binnings_)
        if m >= GROUPED_MIN_POINTS and grouped_ok:
            grouped = [
                nested_groups(b, X, pm.levels_of(b), owner, set_bits, bins_all=lb)
                for b, lb in zip(pm.binnings_, lean_bins, strict=True)
            ]
            if all(g is not None for g in grouped):
                out = _codes_from_groups(pm, grouped, n, sizes, weights)
                return _with_words(out, lean_bins, words_level, m)
    blocks: list[tuple[int, int]] = []  # (shift, level) of every run of m entries
    keys, all_bins = [], []
    if m:
        for t, binning in enumerate(pm.binnings_):
            L = pm.levels_of(binning)
            lean = getattr(binning, "assign_bins", None)  # VocabularyTree: no distances
            if lean_bins[t] is not None:
                bins = lean_bins[t]
            else:
                bins = lean(X) if lean is not None else binning.assign(X)[0]
                lean_bins[t] = bins
            # engine.kernels.pyramid.level_key of every level at once (same keys, one call)
            salt = np.array([level_salt(t, lev) for lev in range(L)], np.uint64)
            ua = np.ascontiguousarray(bins[:, :L].T, np.int64).view(np.uint64)  # (L, m)
            keys.append(mix64(ua * GOLDEN + salt[:, None]).ravel())
            blocks += [(t, lev) for lev in range(L)]
            all_bins.append(bins)
    # every (point, level) pair an entry of its own: entry (block b, point p) at b * m + p
    E = len(blocks) * m
    out = _codes_from_entries(
        pm,
        blocks,
        (np.concatenate(keys) if keys else np.zeros(0, np.uint64)) ^ np.uint64(1 << 63),
        np.tile(owner, len(blocks)),
        np.ones(E, np.int64),
        np.repeat(np.arange(len(blocks)), m),
        n,
        sizes,
        weights,
        point=np.tile(np.arange(m), len(blocks)),
        all_bins=all_bins,
    )
    return _with_words(out, lean_bins, words_level, m)


def _with_words(
    out: SimpleNamespace, bins: list[np.ndarray | None], level: int | None, m: int
) -> SimpleNamespace:
    """``out`` with ``words`` (m, T) int64, every point's bin at ``level`` in each of the
    binnings' ``bins`` (:func:`batch_codes`), when asked for."""
    if level is not None:
        if m == 0:
            out.words = np.zeros((0, len(bins)), np.int64)
        elif all(b is not None and b.shape[1] > level for b in bins):
            out.words = np.stack([b[:, level] for b in bins], axis=1)
        else:
            out.words = None
    return out


def _codes_from_groups(
    pm: PyramidMatch,
    grouped: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]],
    n: int,
    sizes: np.ndarray,
    weights: bool,
) -> SimpleNamespace:
    """:func:`batch_codes` from the (set, bin) groups of every binning and level
    (:func:`nested_groups`): the same keys, counts and layout, with the sort over the
    groups instead of over every (point, level) entry (UKBench batches: 0.58 as many
    uniform entries, 0.37 as many vocabulary ones)."""
    from engine.kernels.pyramid import level_key

    U = sum(g[0].size for levels in grouped for g in levels)
    blocks = [(t, lev) for t, levels in enumerate(grouped) for lev in range(len(levels))]
    sk = np.empty(U, np.uint64)
    entry_set = np.empty(U, np.int64)
    cnt = np.empty(U, np.int64)
    blk_all = np.empty(U, np.uint8 if len(blocks) <= 256 else np.int64)
    at = b = 0
    for t, levels in enumerate(grouped):
        for lev, (rep, count, bins, sets) in enumerate(levels):
            part = slice(at, at + rep.size)
            sk[part] = level_key(t, lev, bins).view(np.uint64) ^ np.uint64(1 << 63)
            entry_set[part] = sets
            cnt[part] = count
            blk_all[part] = b
            at, b = at + rep.size, b + 1
    # weights: uniform binnings only (batch_codes), constant per level: no point needed
    return _codes_from_entries(pm, blocks, sk, entry_set, cnt, blk_all, n, sizes, weights)


def _codes_from_entries(
    pm: PyramidMatch,
    blocks: list[tuple[int, int]],
    sk: np.ndarray,
    entry_set: np.ndarray,
    cnt: np.ndarray,
    blk_all: np.ndarray,
    n: int,
    sizes: np.ndarray,
    weights: bool,
    *,
    point: np.ndarray | None = None,
    all_bins: list[np.ndarray] | None = None,
) -> SimpleNamespace:
    """The layout of :func:`batch_codes` from its entries: (U,) ``sk`` keys in the
    order-preserving unsigned form, ``entry_set`` sets, ``cnt`` point counts, ``blk_all``
    indices into ``blocks`` ((binning, level) pairs), laid out block after block, with
    ``point`` (a point of every entry) and ``all_bins`` (every binning's (m, L) bins) for
    the weights of other than uniform binnings. Entries of one set with one key (every
    level's points when each is an entry, or a hash collision of two bins) become one,
    their counts summed, its block the first's."""
    flip = np.uint64(1 << 63)  # the order-preserving unsigned form of the keys and back
    out = SimpleNamespace(sizes=sizes, n=n)
    if sk.size == 0:
        out.row, out.key = np.zeros(0, np.int64), np.zeros(0, np.int64)
        out.count, out.level = np.zeros(0, np.int32), np.zeros(0, np.int8)
        out.ukeys, out.col = np.zeros(0, np.int64), np.zeros(0, np.int32)
        if weights:
            out.w, out.wp, out.n_shifts = np.zeros(0), np.zeros(0), len(pm.binnings_)
        return out
    order, ks, new, rs = key_major_order(sk, entry_set, max(1, int(n - 1).bit_length()))
    if new.all():
        src, merged = order, None
    else:
        starts = np.flatnonzero(new)
        src, merged = order[starts], np.add.reduceat(cnt[order], starts)
        ks, rs = ks[starts], rs[starts]
    new_key = np.empty(ks.size, bool)
    new_key[0] = True
    np.not_equal(ks[1:], ks[:-1], out=new_key[1:])
    col = np.cumsum(new_key) - 1
    out.ukeys = (ks[new_key] ^ flip).view(np.int64)  # ascending: the sort was key-major
    # set-major order, keys ascending within a set: a stable (radix) sort by set
    rdtype = np.uint8 if n <= 1 << 8 else np.uint16 if n <= 1 << 16 else np.int64
    by_row = np.argsort(rs.astype(rdtype), kind="stable")
    out.row = np.repeat(np.arange(n, dtype=np.int64), np.bincount(rs, minlength=n))
    out.key = (ks[by_row] ^ flip).view(np.int64)
    idx = src[by_row]  # the (first) entry of every output position
    out.count = (cnt[idx] if merged is None else merged[by_row]).astype(np.int32)
    blk = blk_all[idx]
    out.level = np.array([lev for _, lev in blocks], np.int8)[blk]
    out.col = col[by_row].astype(np.int32)
    if weights:
        p = None if point is None else point[idx]
        out.w, out.wp = _entry_weights(pm, blocks, all_bins or [], blk, p)
        out.n_shifts = len(pm.binnings_)
    return out


def _entry_weights(
    pm: PyramidMatch,
    blocks: list[tuple[int, int]],
    all_bins: list[np.ndarray],
    blk: np.ndarray,
    p: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Global weights of the bins of entries (block ``blk``, point ``p``) and of their
    parents (0 above the top level), for :func:`batch_codes` (uniform binnings: by
    block alone, ``p`` is not read)."""
    from engine.kernels.binning import path_weights

    if all(_level_constant(b) for b in pm.binnings_):
        # weights constant per level (Lemma 1): a lookup by block
        lut = np.zeros(len(blocks) + 1)
        for b, (t, lev) in enumerate(blocks):
            lut[b] = pm.binnings_[t].bin_weights(lev, np.zeros(1, np.int64))[0]
        top = np.array([lev + 1 == pm.levels_of(pm.binnings_[t]) for t, lev in blocks] + [True])
        lut_p = np.where(top[:-1], 0.0, lut[1:])  # the parent is the next block
        return lut[blk], lut_p[blk]
    w = np.zeros(blk.size)
    wp = np.zeros(blk.size)
    # idf weights of uniform bins depend on the whole path: every point's weights at
    # every level, once per binning (engine.kernels.binning.path_weights); other
    # binnings (the index's vocabulary trees) look up only the entries' bins
    pw = [
        path_weights(b, bins, pm.levels_of(b))
        if bins is not None and hasattr(b, "path_weights")
        else None
        for b, bins in zip(pm.binnings_, all_bins, strict=False)
    ]
    for b, (t, lev) in enumerate(blocks):
        at = np.flatnonzero(blk == b)
        if at.size == 0:
            continue
        binning, bins, weights = pm.binnings_[t], all_bins[t], pw[t]
        parent = lev + 1 < pm.levels_of(binning)
        if weights is not None:
            w[at] = weights[p[at], lev]
            if parent:
                wp[at] = weights[p[at], lev + 1]
        else:
            w[at] = binning.bin_weights(lev, bins[p[at], lev])
            if parent:
                wp[at] = binning.bin_weights(lev + 1, bins[p[at], lev + 1])
    return w, wp


def _level_constant(binning: Any) -> bool:
    """Whether ``binning``'s weights are constant per level (uniform bins, global)."""
    from engine.kernels.binning import UniformBinning

    return isinstance(binning, UniformBinning) and binning.weights == "global"


def intersection_index(
    codes: SimpleNamespace, values: np.ndarray, *, columns: bool = True
) -> IntersectionIndex:
    """Histograms of :func:`batch_codes` with entry ``values`` (zeros dropped) as an
    :class:`~engine.index.search.IntersectionIndex`, with its columns (from the codes'
    own) unless ``columns`` is False.

    Parameters
    ----------
    codes : SimpleNamespace
        From :func:`batch_codes`, ``n`` sets, ``U`` entries.
    values : (U,) float64
        Value of every entry (e.g. :func:`engine.index.search.code_values`).
    columns : bool
        Keep the codes' columns (renumbered to the bins left).

    Returns
    -------
    IntersectionIndex
        ``n`` rows; values float32.
    """
    keep = values > 0
    row = codes.row[keep]
    indptr = np.zeros(codes.n + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=codes.n), out=indptr[1:])
    if not columns:
        return IntersectionIndex(indptr, codes.key[keep], values[keep].astype(np.float32))
    col = codes.col[keep]
    used = np.zeros(codes.ukeys.size, bool)
    used[col] = True
    renum = (np.cumsum(used) - 1).astype(np.int32)
    return IntersectionIndex(
        indptr,
        codes.key[keep],
        values[keep].astype(np.float32),
        columns=(codes.ukeys[used], renum[col]),
    )
