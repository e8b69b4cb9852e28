"""Vocabulary tree: hierarchical k-means bins for the vocabulary-guided pyramid match.

Implements the data-dependent partition of Grauman's thesis, chapter 4: a sample of
features is clustered with k-means into ``k`` groups, each group recursively into ``k``
more, for ``L`` levels counting the root (section 4.1). Every node (bin) records its
centre, its parent, the number of training points it holds, their largest distance to
the centre (radius) and their largest pairwise distance (the bin *diameter* ``A_ij`` of
Eq. 4.3 (a)).

:class:`VocabularyTree` implements the :class:`engine.pyramid.Binning` protocol, so it
plugs into ``PyramidMatch(bins="vocabulary")``:

* :meth:`VocabularyTree.assign` pushes points down the tree (``k`` distances per level,
  section 4.1) and returns the bin of every point at every level, *finest first*, plus
  the distance to each bin centre. Those distances give the input-specific weights of
  Eq. 4.3 (b), ``d_ij(X) + d_ij(Y)`` with ``d_ij(X)`` the largest distance of ``X``'s
  points in bin ``j`` to its centre (the pyramid engine takes the per-bin maximum).
* :meth:`VocabularyTree.bin_weights` gives the global similarity weights
  ``w_ij = exp(-A_ij / sigma)`` of thesis section 8.2.2 (Table 8.1), with ``sigma`` the
  mean distance between sample features. Because diameters never decrease from a bin to
  its parent, these weights never increase, which makes Eq. 4.4 a Mercer kernel
  (section 4.3).

:func:`bag_of_words` and :func:`fit_idf` turn the leaves into a tf-idf bag of visual
words (Nistér & Stewénius) for the index, WTA hashing and similarity learning.

Speed: every level is clustered for all its nodes at once. k-means++ seeding is
vectorised across nodes (one random draw per node and step through segment-wise
cumulative sums); Lloyd iterations use ``||x||^2 - 2 x.c + ||c||^2`` distances with one
BLAS product per large node and a batched gather for the many small ones; centres are
updated with one sparse-matrix product. 100,000 128-D SIFT descriptors with ``k = 10``,
``L = 4`` (or ``L = 5``, 10,000 leaves) build in seconds on two cores
(``tests/benchmarks/bench_vocabulary.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from engine.core.blas import single_threaded_blas as _single_threaded_blas
from engine.core.validate import as_point_set, check_choice, check_positive

__all__ = [
    "VocabularyProgress",
    "VocabularyTree",
    "bag_of_words",
    "fit_idf",
    "tfidf",
    "word_counts",
]

_WEIGHTS = ("global", "input_specific")
# Segments with at least this many points get their own BLAS product; smaller ones are
# handled together by a batched gather (cheaper than thousands of tiny calls). On 32-D
# (PCA) trees a product per segment pays off only for large segments: the vocabulary
# pyramids of UKBench's 500 images (batches of 64) took a median 0.34 s with 48, 0.27 s
# with 512 (the same bins; one thread, 8 interleaved runs)
_BLAS_MIN_SEGMENT = 512
_GATHER_CHUNK = 8192
_ROWWISE_BLOCK = 2048  # rows per block of _rowwise_sqdist
# _descend: up to this many points (a query image), each point's candidate centres are
# gathered (m, k, D) instead of grouping the points by node: fewer, larger numpy calls
# (one UKBench image: 2.4-3.2 -> 1.0-1.1 ms a tree)
_GATHER_DESCENT_MAX = 1024
_SIGMA_PAIRS = 20_000
# k-means of a node runs on at most this many random points per child, then every
# point of the node is assigned to the resulting centres.
_NODE_SAMPLE_PER_CHILD = 256
# Bins with at most this many training points get their exact diameter; larger ones
# the farthest-point estimate.
_EXACT_DIAMETER_MAX_POINTS = 64


class VocabularyProgress(NamedTuple):
    """Progress of :meth:`VocabularyTree.fit_iter`: ``done`` of ``total`` steps."""

    done: int
    total: int
    message: str


# --------------------------------------------------------------------------- helpers


def _segment_starts(node: np.ndarray, n_nodes: int) -> np.ndarray:
    """(n_nodes + 1,) offsets of each node's run in ``node`` (sorted ascending)."""
    return np.searchsorted(node, np.arange(n_nodes + 1), side="left").astype(np.int64)


def _runs(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layout of consecutive non-empty runs of ``sizes`` (S,) int64 points: the first
    position of every run (S,) and the run of every position (sum(sizes),)."""
    starts = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts, np.repeat(np.arange(sizes.size), sizes)


def _segment_argmin(
    Xs: np.ndarray,
    seg_starts: np.ndarray,
    cand_lo: np.ndarray,
    cand_n: np.ndarray,
    centers: np.ndarray,
    csq: np.ndarray,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Nearest candidate centre for points grouped in segments.

    Parameters
    ----------
    Xs : (N, D) float32
        Points sorted so that segment ``s`` is ``Xs[seg_starts[s]:seg_starts[s + 1]]``,
        or with ``rows`` (N,) int64: ``Xs[rows[seg_starts[s]:seg_starts[s + 1]]]`` (each
        segment's rows are then gathered where they are used, never the whole array).
    seg_starts : (S + 1,) int64
    cand_lo, cand_n : (S,) int64
        Segment ``s`` chooses among ``centers[cand_lo[s]:cand_lo[s] + cand_n[s]]``;
        ``cand_n >= 1`` for non-empty segments.
    centers : (C, D) float32
    csq : (C,) float32
        Squared norms of ``centers``.

    Returns
    -------
    (N,) int64
        Row of ``centers`` nearest to every point, in segment order (ties: lowest
        index). Distances are
        compared as ``||c||^2 - 2 x.c``, the point norm being constant per point.
    """
    n = Xs.shape[0]
    out = np.empty(n, dtype=np.int64)
    sizes = np.diff(seg_starts)
    big = sizes >= _BLAS_MIN_SEGMENT
    for s in np.flatnonzero(big):
        a, b = seg_starts[s], seg_starts[s + 1]
        lo, m = cand_lo[s], cand_n[s]
        P = Xs[a:b] if rows is None else Xs[rows[a:b]]
        d = csq[lo : lo + m] - 2.0 * (P @ centers[lo : lo + m].T)
        out[a:b] = lo + np.argmin(d, axis=1)
    if big.all():
        return out
    # Small segments, batched by padded size (next power of two; padding repeats the
    # segment's first point): one (S, P, D) @ (S, D, k) product per bucket. Each point is
    # gathered about once and each candidate centre once per segment (gathering the k
    # candidate centres of every point instead moves k times more memory).
    small = np.flatnonzero(~big & (sizes > 0))
    kmax = int(cand_n[small].max(initial=1))
    slots_k = np.arange(kmax)
    pad = 1 << np.ceil(np.log2(sizes[small])).astype(np.int64)
    for size in np.unique(pad):
        segs_all = small[pad == size]
        step = max(1, _GATHER_CHUNK // int(size))
        slots_p = np.arange(size)
        for c0 in range(0, segs_all.size, step):
            segs = segs_all[c0 : c0 + step]
            first = seg_starts[segs][:, None]
            inside = slots_p < sizes[segs][:, None]
            pidx = np.where(inside, first + slots_p, first)  # (S, P)
            lo = cand_lo[segs][:, None]
            valid = slots_k < cand_n[segs][:, None]
            cidx = np.where(valid, lo + slots_k, lo)  # (S, kmax)
            P = np.take(Xs, pidx if rows is None else rows[pidx], axis=0)
            d = np.take(csq, cidx)[:, None, :] - 2.0 * np.matmul(
                P, np.take(centers, cidx, axis=0).transpose(0, 2, 1)
            )  # (S, P, kmax)
            d[np.broadcast_to(~valid[:, None, :], d.shape)] = np.inf
            best = np.take_along_axis(cidx, np.argmin(d, axis=2), axis=1)  # (S, P)
            out[pidx[inside]] = best[inside]
    return out


def _rowwise_sqdist(
    X: np.ndarray,
    C: np.ndarray,
    rows: np.ndarray | None = None,
    xrows: np.ndarray | None = None,
) -> np.ndarray:
    """(N,) float32 ``||X[xrows[i]] - C[rows[i]]||^2`` (``X[i]``, ``C[i]`` without
    ``xrows``, ``rows``).

    Computed in blocks of ``_ROWWISE_BLOCK`` rows, so that the differences stay in cache
    and no (N, D) array of gathered rows is made (about 3x faster at 40,000 x 128 than
    one subtraction of whole arrays; the same result, row by row).
    """
    n = X.shape[0] if xrows is None else xrows.shape[0]
    out = np.empty(n, dtype=np.result_type(X, C))
    for a in range(0, n, _ROWWISE_BLOCK):
        b = min(n, a + _ROWWISE_BLOCK)
        diff = X[a:b] if xrows is None else X[xrows[a:b]]
        diff = diff - (C[a:b] if rows is None else C[rows[a:b]])
        np.einsum("nd,nd->n", diff, diff, out=out[a:b])
    return out


def _segment_argmax(values: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Position of the largest entry of every segment (the last one among ties).

    Parameters
    ----------
    values : (N,) float
        Grouped in non-empty segments ``values[starts[s]:starts[s + 1]]``.
    starts : (S,) int64
        First position of every segment, ascending, ``starts[0] == 0``.
    seg : (N,) int64
        Segment of every position.

    Returns
    -------
    (S,) int64
    """
    top = np.maximum.reduceat(values, starts)
    hit = np.flatnonzero(values == top[seg])
    s = seg[hit]
    last = np.empty(hit.size, bool)
    last[-1:] = True
    np.not_equal(s[1:], s[:-1], out=last[:-1])
    return hit[last]


def _small_bin_diameters(
    X: np.ndarray,
    b: np.ndarray,
    count: np.ndarray,
    max_points: int,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact diameters (largest pairwise distance) of bins with 2..max_points points.

    Bins are batched by padded size (:func:`_pad_size`, at most ~14 % padding, which
    repeats the bin's first point and so leaves the maximum unchanged) and their float32
    Gram matrices computed at once; the farthest pair's distance is then recomputed
    directly.

    Returns
    -------
    bins : (n,) int64
        The bins handled.
    diameters : (n,) float32
    """
    if order is None:  # the points grouped by bin
        order = np.argsort(b, kind="stable")
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    todo = np.flatnonzero((count >= 2) & (count <= max_points))
    out = np.zeros(todo.size, dtype=np.float32)
    if todo.size == 0:
        return todo, out
    pad = _pad_size(count[todo])
    for size in np.unique(pad):
        where = np.flatnonzero(pad == size)
        step = max(1, (1 << 21) // int(size * size))
        for c0 in range(0, where.size, step):
            w = where[c0 : c0 + step]
            bins = todo[w]
            slots = np.arange(size)
            first = starts[bins][:, None]
            idx = np.where(slots < count[bins][:, None], first + slots, first)
            P = X[order[idx]]  # (n, size, D)
            sq = np.einsum("nsd,nsd->ns", P, P)
            d2 = sq[:, :, None] + sq[:, None, :] - 2.0 * (P @ P.transpose(0, 2, 1))
            far = d2.reshape(w.size, -1).argmax(axis=1)  # farthest pair, then exact distance
            i, j = np.divmod(far, size)
            rows = np.arange(w.size)
            out[w] = np.sqrt(_rowwise_sqdist(P[rows, i], P[rows, j]))
    return todo, out


def _pad_size(size: np.ndarray) -> np.ndarray:
    """Padded segment sizes for :func:`_kmeans_level` and :func:`_small_bin_diameters`:
    rounded up to a multiple of an eighth of their power of two (at most ~14 % padding)."""
    bit_length = np.frexp(size)[1]  # exact for integers below 2**53
    step = np.int64(1) << np.maximum(0, bit_length - 3).astype(np.int64)
    return -(-size // step) * step


def _padded_sqdist(P: np.ndarray, xsq: np.ndarray, valid: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(S, P) float64 squared distances of padded segment points ``P`` (S, P, D) with
    squared norms ``xsq`` to one point ``c[s]`` (S, D) each; 0 at padding."""
    d2 = xsq + np.einsum("sd,sd->s", c, c)[:, None] - 2.0 * np.matmul(P, c[:, :, None])[:, :, 0]
    return np.where(valid, np.maximum(d2, 0.0), 0.0).astype(np.float64)


def _kmeans_level(
    Xs: np.ndarray,
    seg_starts: np.ndarray,
    k: int,
    rng: np.random.Generator,
    max_iter: int,
    tol: float,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-means with k-means++ seeding, run independently inside every segment at once.

    Segments are grouped by padded size and each group is copied once into a
    ``(segments, padded size, D)`` block (padding repeats the segment's first point and
    never counts): the k-means++ draws (Arthur & Vassilvitskii), the assignments and the
    centre updates of a group are then batched products over that block, instead of a
    gather of every point's centre for each of them.

    Parameters
    ----------
    Xs : (N, D) float32
        Points grouped by parent node (segments given by ``seg_starts``); with ``rows``
        (N,) int64 the points are ``Xs[rows]`` (gathered block by block, not at once).
    seg_starts : (S + 1,) int64
        Every segment non-empty.

    Returns
    -------
    centers : (S * k, D) float32
        Slot ``s * k + t`` is centre ``t`` of segment ``s`` (unused slots are zero).
    labels : (N,) int64
        Slot of each point's nearest centre, consistent with the returned centres.
    n_centers : (S,) int64
        Number of centres per segment (``min(size, k)``).
    """
    n = Xs.shape[0] if rows is None else rows.shape[0]
    dim = Xs.shape[1]
    n_seg = seg_starts.size - 1
    sizes = np.diff(seg_starts)
    kk = np.minimum(sizes, k)
    centers = np.zeros((n_seg * k, dim), dtype=np.float32)
    labels = np.empty(n, dtype=np.int64)
    pad = _pad_size(sizes)
    slots_k = np.arange(k)

    def nearest(P: np.ndarray, C: np.ndarray, n_c: np.ndarray) -> np.ndarray:
        """(S, P) slot of the nearest of the first ``n_c[s]`` centres ``C[s]``."""
        d = np.einsum("skd,skd->sk", C, C)[:, None, :] - 2.0 * np.matmul(
            P, C.transpose(0, 2, 1)
        )  # (S, P, k)
        d[np.broadcast_to((slots_k >= n_c[:, None])[:, None, :], d.shape)] = np.inf
        return np.argmin(d, axis=2)

    groups = []  # per padded size: the segments, their blocks and the seeded part
    for size in np.unique(pad):
        g = SimpleNamespace(segs=np.flatnonzero(pad == size))
        first = seg_starts[g.segs][:, None]
        slots = np.arange(size)
        g.valid = slots < sizes[g.segs][:, None]  # (S, P)
        g.pidx = np.where(g.valid, first + slots, first)
        g.P = Xs[g.pidx if rows is None else rows[g.pidx]]  # (S, P, D)
        g.C = np.zeros((g.segs.size, k, dim), dtype=np.float32)
        own = sizes[g.segs] <= k  # every point is its own centre
        if own.any():
            m = min(int(size), k)
            g.C[own, :m] = g.P[own, :m] * g.valid[own, :m, None]
        g.seed = np.flatnonzero(~own)  # the rest: k-means++, then Lloyd
        g.every = g.seed.size == g.segs.size  # (usually all or none of a group)
        if g.seed.size:
            Pb = g.P if g.every else g.P[g.seed]
            vb, nb = g.valid[g.seed], sizes[g.segs[g.seed]]
            xb = np.einsum("spd,spd->sp", Pb, Pb)
            seg_rows = np.arange(g.seed.size)
            c = Pb[seg_rows, np.floor(rng.random(g.seed.size) * nb).astype(np.int64)]
            g.C[g.seed, 0] = c
            d2 = _padded_sqdist(Pb, xb, vb, c)
            for t in range(1, k):
                cs = np.cumsum(d2, axis=1)
                tot = cs[:, -1]
                r = rng.random(g.seed.size) * tot
                pick = np.minimum(np.count_nonzero(cs <= r[:, None], axis=1), nb - 1)
                pick[~(tot > 0)] = 0  # all points coincide with chosen centres
                c = Pb[seg_rows, pick]
                g.C[g.seed, t] = c
                if t < k - 1:
                    np.minimum(d2, _padded_sqdist(Pb, xb, vb, c), out=d2)
            g.Pb, g.vb = Pb, vb
        g.labels = nearest(g.P, g.C, kk[g.segs])
        groups.append(g)

    for _ in range(max_iter):
        changed = 0
        for g in groups:
            if g.seed.size == 0:
                continue
            lab = g.labels if g.every else g.labels[g.seed]
            lab = np.where(g.vb, lab, k)  # padding: a column of its own
            M = (lab[:, None, :] == slots_k[None, :, None]).astype(np.float32)
            counts = M.sum(axis=2)  # (S, k)
            sums = np.matmul(M, g.Pb)  # (S, k, D)
            filled = counts > 0
            Cs = g.C if g.every else g.C[g.seed]
            Cs[filled] = sums[filled] / counts[filled][:, None]
            new = nearest(g.Pb, Cs, np.full(g.seed.size, k))
            if g.every:
                changed += np.count_nonzero((new != g.labels) & g.valid)
                g.labels = new
            else:
                g.C[g.seed] = Cs
                changed += np.count_nonzero((new != g.labels[g.seed]) & g.vb)
                g.labels[g.seed] = new
        if changed <= tol * n:
            break
    for g in groups:
        centers[(g.segs[:, None] * k + slots_k).ravel()] = g.C.reshape(-1, dim)
        labels[g.pidx[g.valid]] = (g.segs[:, None] * k + g.labels)[g.valid]
    return centers, labels, kk


# --------------------------------------------------------------------------- the tree


class VocabularyTree:
    """Hierarchical k-means vocabulary: nested, data-shaped bins (thesis chapter 4).

    Parameters
    ----------
    branching : int, default 10
        ``k``, number of children per node.
    levels : int, default 4
        ``L``, number of pyramid levels *including the root*, as in thesis section 4.1
        (level ``i`` holds at most ``k**i`` bins: ``i = 0`` is the root, a single bin
        around the sample mean, ``i = L - 1`` the at most ``k**(L - 1)`` leaves; libpmk
        counts the same way). The root level lets every point of the smaller set find
        a match, so pyramid-match costs count all ``min(|X|, |Y|)`` pairs.
    weights : {"global", "input_specific"}, default "global"
        Which weighting of Eq. 4.3 a vocabulary-guided pyramid match built on this tree
        should use; read by :class:`engine.pyramid.PyramidMatch`. (a) ``"global"``:
        bin diameters, ``exp(-A_ij / sigma)`` as similarity (Mercer); (b)
        ``"input_specific"``: ``d_ij(X) + d_ij(Y)`` from the distances of
        :meth:`assign`.
    max_iter : int, default 10
        Maximum Lloyd iterations per level.
    tol : float, default 1e-3
        Lloyd stops when at most this fraction of the level's points changes cluster.
    sample_size : int or None, default None
        If given, :meth:`fit` clusters a random subset of at most this many points.
    sigma : float or None, default None
        Scale of the global weights; ``None`` = mean distance between random pairs of
        the sample's features (thesis section 8.2.2).
    random_state : int, default 0
        Seed; equal seeds and samples give identical trees.

    Attributes
    ----------
    n_levels : int
        ``levels`` (Binning protocol).
    dim : int
        Feature dimension ``D`` (after :meth:`fit`).
    sigma_ : float
        Scale used by :meth:`bin_weights`.
    n_leaves : int
        Number of (non-empty) leaves; leaf ids are ``0 .. n_leaves - 1``.

    Notes
    -----
    Node ids are indices within their level, ordered by parent, so the children of a
    node are contiguous. Level indices in :meth:`assign`, :meth:`bin_weights` and
    :meth:`diameters` count from the finest level (0 = leaves), as the Binning protocol
    requires; the thesis counts from the root (its level ``i`` is ``L - 1 - level``).

    Diameter ``A_ij`` (Eq. 4.3 (a)) is the largest distance between two training points
    of the bin. It is exact for bins of at most 64 training points (all pairs); larger
    bins use two farthest-point sweeps (from the point farthest from the centre to the
    point farthest from it, and once more), a lower bound within a factor 2 and usually
    close. Then every parent's diameter is raised to at least its children's, which the
    true diameters satisfy and which keeps the global weights non-increasing towards
    the root (section 4.3).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((2000, 8), dtype=np.float32)
    >>> tree = VocabularyTree(branching=4, levels=3).fit(X)
    >>> bins, dist = tree.assign(X[:5])
    >>> bins.shape, dist.shape
    ((5, 3), (5, 3))
    >>> bool(np.all(tree.bin_weights(0, bins[:, 0]) >= tree.bin_weights(1, bins[:, 1])))
    True
    """

    def __init__(
        self,
        branching: int = 10,
        levels: int = 4,
        weights: str = "global",
        *,
        max_iter: int = 10,
        tol: float = 1e-3,
        sample_size: int | None = None,
        sigma: float | None = None,
        random_state: int = 0,
    ) -> None:
        if int(branching) != branching or branching < 2:
            raise ValueError(f"branching must be an integer >= 2, got {branching!r}")
        if int(levels) != levels or levels < 2:
            raise ValueError(f"levels must be an integer >= 2, got {levels!r}")
        check_choice(weights, "weights", _WEIGHTS)
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
        if not 0 <= tol < 1:
            raise ValueError(f"tol must be in [0, 1), got {tol!r}")
        if sample_size is not None and (int(sample_size) != sample_size or sample_size < 1):
            raise ValueError(
                f"sample_size must be a positive integer or None, got {sample_size!r}"
            )
        if sigma is not None:
            check_positive(sigma, "sigma")
        self.branching = int(branching)
        self.levels = int(levels)
        self.n_levels = int(levels)
        self.weights = weights
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.sample_size = None if sample_size is None else int(sample_size)
        self.sigma = None if sigma is None else float(sigma)
        self.random_state = int(random_state)
        self._fitted = False

    # ------------------------------------------------------------------ fitting
    def fit(self, sample: np.ndarray) -> VocabularyTree:
        """Build the tree from ``sample`` (N, D) float32 stacked features. Returns self."""
        for _ in self.fit_iter(sample):
            pass
        return self

    def fit_iter(self, sample: np.ndarray) -> Iterator[VocabularyProgress]:
        """Build the tree level by level, yielding progress (cancel between yields).

        Parameters
        ----------
        sample : (N, D) float32
            Representative features, ``N >= 1``.

        Yields
        ------
        VocabularyProgress
            ``done`` of ``levels`` steps (one per level below the root, one for the bin
            statistics).
        """
        X = as_point_set(sample, "sample")
        if X.shape[0] == 0:
            raise ValueError("sample must contain at least one feature, got 0 rows")
        rng = np.random.default_rng(self.random_state)
        if self.sample_size is not None and X.shape[0] > self.sample_size:
            X = X[np.sort(rng.choice(X.shape[0], self.sample_size, replace=False))]
        n, dim = X.shape
        k, L = self.branching, self.levels
        total = L  # L - 1 clustered levels, then the bin statistics

        # level 0 (thesis numbering) is the root: one bin holding everything, centred on
        # the sample mean; levels 1 .. L-1 come from k-means inside their parents.
        centers = [X.mean(axis=0, dtype=np.float64)[None].astype(np.float32)]
        parents = [np.zeros(1, dtype=np.int64)]
        bins = np.zeros((n, L), dtype=np.int64)  # training points' bins, coarsest first
        cap = _NODE_SAMPLE_PER_CHILD * k
        perm = np.arange(n)  # the points grouped by node (never moved themselves)
        node = np.zeros(n, dtype=np.int64)
        n_nodes = 1
        for lvl in range(1, L):
            with _single_threaded_blas():  # not held across the yield
                seg_starts = _segment_starts(node, n_nodes)
                sizes = np.diff(seg_starts)
                if sizes.max() > cap:
                    # Cluster at most `cap` random points per node, then assign all.
                    order = np.lexsort((rng.random(n), node))
                    rank = np.arange(n) - seg_starts[node[order]]
                    sub = np.sort(order[rank < cap])
                    flat_c, _, kk = _kmeans_level(
                        X,
                        _segment_starts(node[sub], n_nodes),
                        k,
                        rng,
                        self.max_iter,
                        self.tol,
                        rows=perm[sub],
                    )
                    csq = np.einsum("nd,nd->n", flat_c, flat_c)
                    cand_lo = np.arange(n_nodes, dtype=np.int64) * k
                    labels = _segment_argmin(X, seg_starts, cand_lo, kk, flat_c, csq, perm)
                else:
                    flat_c, labels, _ = _kmeans_level(
                        X, seg_starts, k, rng, self.max_iter, self.tol, rows=perm
                    )
                present, new_node = np.unique(labels, return_inverse=True)
                centers.append(np.ascontiguousarray(flat_c[present]))
                parents.append(present // k)
                bins[perm, lvl] = new_node
                order = np.argsort(new_node, kind="stable")
                node, perm = new_node[order], perm[order]
                n_nodes = present.size
            yield VocabularyProgress(lvl, total, f"level {lvl}/{L - 1}: {n_nodes} bins")

        self.dim = dim
        self._set_structure(centers, parents)
        with _single_threaded_blas():
            self._compute_statistics(X, bins, rng)
        self._fitted = True
        yield VocabularyProgress(total, total, "bin diameters")

    def _set_structure(self, centers: list[np.ndarray], parents: list[np.ndarray]) -> None:
        """Store per-level arrays, coarsest level first (thesis order)."""
        self._centers = [np.ascontiguousarray(c, dtype=np.float32) for c in centers]
        self._csq = [np.einsum("nd,nd->n", c, c) for c in self._centers]
        self._parent = [np.asarray(p, dtype=np.int64) for p in parents]
        # children of level-l node j: rows child_start[l][j] : +n_child[l][j] of level l+1
        self._child_start: list[np.ndarray] = []
        self._n_child: list[np.ndarray] = []
        for lvl in range(1, self.levels):
            n_prev = self._centers[lvl - 1].shape[0]
            self._n_child.append(np.bincount(self._parent[lvl], minlength=n_prev))
            self._child_start.append(np.searchsorted(self._parent[lvl], np.arange(n_prev)))
        self._child_blocks: list[tuple[np.ndarray, np.ndarray]] | None = None

    def _compute_statistics(
        self, X: np.ndarray, bins: np.ndarray, rng: np.random.Generator
    ) -> None:
        """Counts, radii and diameters of every bin from training points ``X`` and their
        ``bins`` (N, L), coarsest first (the same nearest-child descent as :meth:`assign`).
        """
        self._count, self._radius, self._diameter = [], [], []
        for lvl in range(self.levels):
            n_l = self._centers[lvl].shape[0]
            b = bins[:, lvl]
            count = np.bincount(b, minlength=n_l)
            # maxima per bin over the points grouped by bin (stable: ties go to the
            # point that comes last in X)
            order = np.argsort(b, kind="stable")
            has = np.flatnonzero(count)
            sizes = count[has]
            starts, seg = _runs(sizes)  # seg: the bin (of `has`) at every position
            dist_l = np.sqrt(_rowwise_sqdist(X, self._centers[lvl], b))[order]
            radius = np.zeros(n_l, dtype=np.float32)
            radius[has] = np.maximum.reduceat(dist_l, starts)
            # bins of up to _EXACT_DIAMETER_MAX_POINTS points get their exact diameter
            # (0 for one point); larger ones two farthest-point sweeps: from the point
            # farthest from the centre to the one farthest from it, and once more
            diam = np.zeros(n_l, dtype=np.float32)
            exact, value = _small_bin_diameters(
                X, b, count, _EXACT_DIAMETER_MAX_POINTS, order=order
            )
            diam[exact] = value
            wide = sizes > _EXACT_DIAMETER_MAX_POINTS
            if wide.any():
                w_sizes = sizes[wide]
                w_starts, w_seg = _runs(w_sizes)
                keep = wide[seg]  # sorted positions inside the wide bins
                Xw = X[order[keep]]  # gathered once for both sweeps
                start = _segment_argmax(dist_l[keep], w_starts, w_seg)
                widest = np.zeros(w_sizes.size, dtype=np.float32)
                for sweep in range(2):
                    d = np.sqrt(_rowwise_sqdist(Xw, Xw[start], w_seg))
                    np.maximum(widest, np.maximum.reduceat(d, w_starts), out=widest)
                    if sweep == 0:
                        start = _segment_argmax(d, w_starts, w_seg)
                diam[has[wide]] = widest
            self._count.append(count.astype(np.int64))
            self._radius.append(radius)
            self._diameter.append(diam)
        for lvl in range(self.levels - 1, 0, -1):  # parents at least as wide as children
            np.maximum.at(self._diameter[lvl - 1], self._parent[lvl], self._diameter[lvl])
        if self.sigma is not None:
            self.sigma_ = self.sigma
        else:
            i = rng.integers(0, X.shape[0], _SIGMA_PAIRS)
            j = rng.integers(0, X.shape[0], _SIGMA_PAIRS)
            mean = float(np.sqrt(_rowwise_sqdist(X[i], X, j)).mean())
            self.sigma_ = mean if mean > 0 else 1.0

    # ------------------------------------------------------------------ encoding
    def _check_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError("VocabularyTree is not fitted; call fit(sample) first")

    def _descend(self, X: np.ndarray, need_dist: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Push points down the tree; bins and distances (M, L), COARSEST first
        (``need_dist=False``: the distances are left uninitialised, not computed)."""
        m = X.shape[0]
        L = self.levels
        bins = np.empty((m, L), dtype=np.int64)
        dist = np.empty((m, L), dtype=np.float32)
        if m == 0:
            return bins, dist
        bins[:, 0] = 0  # the root
        if need_dist:
            dist[:, 0] = np.sqrt(_rowwise_sqdist(X, self._centers[0], np.zeros(m, np.int64)))
        if m <= _GATHER_DESCENT_MAX:
            node = np.zeros(m, dtype=np.int64)
            for lvl in range(1, L):
                node = self._nearest_child(X, node, lvl)
                bins[:, lvl] = node
                if need_dist:
                    dist[:, lvl] = np.sqrt(_rowwise_sqdist(X, self._centers[lvl], node))
            return bins, dist
        perm = np.arange(m)  # the points grouped by their bin (never moved themselves)
        node = np.zeros(m, dtype=np.int64)
        for lvl in range(1, L):
            n_prev = self._child_start[lvl - 1].size
            seg_starts = _segment_starts(node, n_prev)
            chosen = _segment_argmin(
                X,
                seg_starts,
                self._child_start[lvl - 1],
                self._n_child[lvl - 1],
                self._centers[lvl],
                self._csq[lvl],
                rows=None if lvl == 1 else perm,
            )
            bins[perm, lvl] = chosen
            if need_dist:
                dist[perm, lvl] = np.sqrt(_rowwise_sqdist(X, self._centers[lvl], chosen, perm))
            if lvl + 1 < L:
                order = np.argsort(chosen, kind="stable")
                perm, node = perm[order], chosen[order]
        return bins, dist

    def _nearest_child(self, X: np.ndarray, node: np.ndarray, lvl: int) -> np.ndarray:
        """(M,) int64 the nearest level-``lvl`` child of every point's node (each point's
        candidate centres gathered: the small-input path of :meth:`_descend`, same rule)."""
        if self._child_blocks is None:
            # every node's children as one padded block: (nodes, k, D) centres and their
            # squared norms (inf in the padding), built once
            blocks = []
            for lv in range(1, self.levels):
                n_c = self._n_child[lv - 1]
                slots = np.arange(int(n_c.max(initial=1)))
                valid = slots < n_c[:, None]
                cidx = np.where(valid, self._child_start[lv - 1][:, None] + slots, 0)
                csq = np.where(valid, self._csq[lv][cidx], np.float32(np.inf))
                blocks.append((self._centers[lv][cidx], csq.astype(np.float32)))
            self._child_blocks = blocks
        C, csq = self._child_blocks[lvl - 1]
        d = csq[node] - 2.0 * np.einsum("mkd,md->mk", C[node], X)  # (M, k)
        return self._child_start[lvl - 1][node] + np.argmin(d, axis=1)

    def assign(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bins of every point at every level, finest first, and distances to bin centres.

        At each level a point is compared with the (at most ``k``) children of its
        current bin and descends into the nearest (section 4.1; ``kL`` distances).

        Parameters
        ----------
        X : (M, D) float32

        Returns
        -------
        bins : (M, levels) int64
            ``bins[:, 0]`` are leaves, ``bins[:, -1]`` the top-level bins; ids are unique
            within a level and nested (the bin at ``l + 1`` is the parent of the one at
            ``l``).
        dist : (M, levels) float32
            Euclidean distance of each point to the centre of its bin at that level; the
            per-bin maximum over a set is ``d_ij(X)`` of Eq. 4.3 (b).
        """
        self._check_fitted()
        X = as_point_set(X, "X", dim=self.dim)
        with _single_threaded_blas():
            bins, dist = self._descend(X)
        return np.ascontiguousarray(bins[:, ::-1]), np.ascontiguousarray(dist[:, ::-1])

    def assign_bins(self, X: np.ndarray) -> np.ndarray:
        """``assign(X)[0]`` without the distances (the query path of a collection needs
        only the bins: one gather and product per level less).

        Returns
        -------
        (M, levels) int64
            Finest level first, as :meth:`assign`.
        """
        self._check_fitted()
        X = as_point_set(X, "X", dim=self.dim)
        with _single_threaded_blas():
            bins, _ = self._descend(X, need_dist=False)
        return np.ascontiguousarray(bins[:, ::-1])

    def leaf_ids(self, X: np.ndarray) -> np.ndarray:
        """(M,) int64 leaf (visual word) index of every point, in ``[0, n_leaves)``."""
        return self.assign(X)[0][:, 0].copy()

    # ------------------------------------------------------------------ bin data
    def _level(self, level: int) -> int:
        """Thesis (coarsest-first) index of a finest-first ``level``."""
        self._check_fitted()
        if int(level) != level or not 0 <= level < self.levels:
            raise ValueError(f"level must be an integer in [0, {self.levels}), got {level!r}")
        return self.levels - 1 - int(level)

    def _bins(self, lvl: int, bins: np.ndarray) -> np.ndarray:
        b = np.asarray(bins)
        n_l = self._centers[lvl].shape[0]
        if b.size and (not np.issubdtype(b.dtype, np.integer) or b.min() < 0 or b.max() >= n_l):
            raise ValueError(f"bins must be integer bin ids in [0, {n_l}) for this level")
        return b.astype(np.int64, copy=False)

    @property
    def n_leaves(self) -> int:
        """Number of leaves (visual words)."""
        self._check_fitted()
        return int(self._centers[-1].shape[0])

    @property
    def ids_follow_parents(self) -> bool:
        """Whether every level's bin ids ascend with their parents' (as :meth:`fit`
        numbers them): points sorted by leaf are then sorted by their bin at every level,
        so each level's bins are runs of that order."""
        self._check_fitted()
        return all(bool(np.all(p[1:] >= p[:-1])) for p in self._parent[1:])

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of bins per level, finest first."""
        self._check_fitted()
        return tuple(int(c.shape[0]) for c in self._centers[::-1])

    def centers(self, level: int) -> np.ndarray:
        """(n_bins, D) float32 bin centres at ``level`` (0 = leaves)."""
        return self._centers[self._level(level)]

    def parents(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) int64 parent ids at ``level + 1`` (all bins if ``bins`` is None).

        ``level`` must be below the root (``level < levels - 1``).
        """
        lvl = self._level(level)
        if lvl == 0:
            raise ValueError(f"level {level} is the root, which has no parent")
        p = self._parent[lvl]
        return p.copy() if bins is None else p[self._bins(lvl, bins)]

    def diameters(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) float64 bin diameters ``A_ij`` (Eq. 4.3 (a)) at ``level`` (0 = leaves).

        Cost weight of the global weighting; non-decreasing from a bin to its parent.
        """
        lvl = self._level(level)
        d = self._diameter[lvl]
        return (d if bins is None else d[self._bins(lvl, bins)]).astype(np.float64)

    def radii(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) float64 largest distance of a training point to its bin centre."""
        lvl = self._level(level)
        r = self._radius[lvl]
        return (r if bins is None else r[self._bins(lvl, bins)]).astype(np.float64)

    def counts(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) int64 number of training points per bin."""
        lvl = self._level(level)
        c = self._count[lvl]
        return (c if bins is None else c[self._bins(lvl, bins)]).copy()

    def bin_weights(self, level: int, bins: np.ndarray) -> np.ndarray:
        """Global similarity weights ``w_ij = exp(-A_ij / sigma)`` (thesis section 8.2.2).

        Parameters
        ----------
        level : int
            0 = leaves.
        bins : (n,) int
            Bin ids at that level.

        Returns
        -------
        (n,) float64
            In ``(0, 1]``; never larger than the child's weight (``A`` grows towards the
            root), so ``w_ij - p_ij >= 0`` in Eq. 4.4 and the match is a Mercer kernel.
        """
        return np.exp(-self.diameters(level, bins) / self.sigma_)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only (``np.savez`` / JSON friendly, no pickle)."""
        self._check_fitted()
        sizes = np.array([c.shape[0] for c in self._centers], dtype=np.int64)
        return {
            "kind": "vocabulary_tree",
            "branching": self.branching,
            "levels": self.levels,
            "weights": self.weights,
            "max_iter": self.max_iter,
            "tol": self.tol,
            "sample_size": -1 if self.sample_size is None else self.sample_size,
            "sigma": -1.0 if self.sigma is None else self.sigma,
            "sigma_": float(self.sigma_),
            "random_state": self.random_state,
            "dim": int(self.dim),
            "level_sizes": sizes,
            "centers": np.concatenate(self._centers),
            "parent": np.concatenate(self._parent),
            "count": np.concatenate(self._count),
            "radius": np.concatenate(self._radius),
            "diameter": np.concatenate(self._diameter),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> VocabularyTree:
        """Rebuild a fitted tree from :meth:`to_state` output."""
        try:
            kind = str(np.asarray(state["kind"]))
            if kind != "vocabulary_tree":
                raise ValueError(f"state['kind'] must be 'vocabulary_tree', got {kind!r}")
            sample_size = int(state["sample_size"])
            sigma = float(state["sigma"])
            tree = cls(
                branching=int(state["branching"]),
                levels=int(state["levels"]),
                weights=str(np.asarray(state["weights"])),
                max_iter=int(state["max_iter"]),
                tol=float(state["tol"]),
                sample_size=None if sample_size < 0 else sample_size,
                sigma=None if sigma < 0 else sigma,
                random_state=int(state["random_state"]),
            )
            dim = int(state["dim"])
            sizes = np.asarray(state["level_sizes"], dtype=np.int64)
            arrays = {
                key: np.asarray(state[key])
                for key in ("centers", "parent", "count", "radius", "diameter")
            }
            sigma_ = float(state["sigma_"])
        except KeyError as exc:
            raise ValueError(f"vocabulary tree state is missing key {exc.args[0]!r}") from None
        total = int(sizes.sum())
        if sizes.shape != (tree.levels,) or (sizes < 1).any() or sizes[0] != 1:
            raise ValueError(
                f"state['level_sizes'] must hold {tree.levels} positive sizes, the first 1"
            )
        if arrays["centers"].shape != (total, dim):
            raise ValueError(
                f"state['centers'] must have shape ({total}, {dim}), got {arrays['centers'].shape}"
            )
        for key in ("parent", "count", "radius", "diameter"):
            if arrays[key].shape != (total,):
                raise ValueError(f"state[{key!r}] must have shape ({total},)")
        cuts = np.cumsum(sizes)[:-1]
        split = {key: np.split(a, cuts) for key, a in arrays.items()}
        parents = split["parent"]
        for lvl in range(1, tree.levels):
            p = parents[lvl]
            if (np.diff(p) < 0).any() or p.min() < 0 or p.max() >= sizes[lvl - 1]:
                raise ValueError(f"state['parent'] is not a valid tree at level {lvl}")
        tree.dim = dim
        tree._set_structure(split["centers"], parents)
        tree._count = [c.astype(np.int64) for c in split["count"]]
        tree._radius = [r.astype(np.float32) for r in split["radius"]]
        tree._diameter = [d.astype(np.float32) for d in split["diameter"]]
        tree.sigma_ = sigma_
        tree._fitted = True
        return tree

    def __repr__(self) -> str:
        fitted = f", sizes={self.sizes}" if self._fitted else ""
        return (
            f"VocabularyTree(branching={self.branching}, levels={self.levels}, "
            f"weights={self.weights!r}{fitted})"
        )


# --------------------------------------------------------------------------- bag of words


def word_counts(sets: Sequence[np.ndarray], tree: VocabularyTree) -> sp.csr_matrix:
    """(n_sets, n_leaves) float32 csr matrix of visual-word counts, one row per set.

    All sets are encoded with one :meth:`VocabularyTree.leaf_ids` call.
    """
    tree._check_fitted()
    arrays = [as_point_set(s, f"sets[{i}]", dim=tree.dim) for i, s in enumerate(sets)]
    lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    stacked = np.concatenate(arrays) if arrays else np.empty((0, tree.dim), np.float32)
    words = tree.leaf_ids(stacked)
    rows = np.repeat(np.arange(lengths.size), lengths)
    counts = sp.csr_matrix(
        (np.ones(words.size, dtype=np.float32), (rows, words)),
        shape=(lengths.size, tree.n_leaves),
    )
    counts.sum_duplicates()
    return counts


def fit_idf(
    sets: Sequence[np.ndarray] | sp.spmatrix, tree: VocabularyTree | None = None
) -> np.ndarray:
    """Inverse document frequencies ``idf_j = ln(N / N_j)`` (Nistér & Stewénius, 2006).

    Parameters
    ----------
    sets : list of (M_i, D) float32 arrays, or (N, n_leaves) sparse word counts
    tree : VocabularyTree
        Needed when ``sets`` are point sets.

    Returns
    -------
    (n_leaves,) float32
        ``N`` = number of sets, ``N_j`` = number of sets containing word ``j``; words
        seen in no set get 0 (they cannot match anything in this corpus).
    """
    if sp.issparse(sets):
        counts = sp.csr_matrix(sets)
    else:
        if tree is None:
            raise ValueError("tree is required when sets are point sets")
        counts = word_counts(sets, tree)
    n = counts.shape[0]
    if n == 0:
        raise ValueError("sets must contain at least one set to fit idf")
    df = np.bincount(counts.indices[counts.data > 0], minlength=counts.shape[1])
    idf = np.zeros(counts.shape[1], dtype=np.float32)
    seen = df > 0
    idf[seen] = np.log(n / df[seen])
    return idf


def bag_of_words(
    sets: Sequence[np.ndarray],
    tree: VocabularyTree,
    idf: np.ndarray | None = None,
    *,
    norm: str = "l2",
) -> sp.csr_matrix:
    """tf-idf bag of visual words of every set over the tree's leaves.

    Parameters
    ----------
    sets : list of (M_i, D) float32
    tree : VocabularyTree
        Fitted; its leaves are the words.
    idf : (n_leaves,) float, optional
        From :func:`fit_idf` on the database; ``None`` = plain term frequencies.
    norm : {"l2", "l1", "none"}
        Row normalisation after weighting (``"l2"``: dot products are cosines).

    Returns
    -------
    scipy.sparse.csr_matrix (n_sets, n_leaves) float32
        ``tf_ij * idf_j`` with ``tf_ij`` = count of word ``j`` in set ``i`` / set size;
        empty sets give all-zero rows.
    """
    check_choice(norm, "norm", ("l2", "l1", "none"))
    return tfidf(word_counts(sets, tree), idf, norm=norm)


def tfidf(
    counts: sp.spmatrix, idf: np.ndarray | None = None, *, norm: str = "l2"
) -> sp.csr_matrix:
    """tf-idf rows of visual-word ``counts`` (what :func:`bag_of_words` weights).

    Parameters
    ----------
    counts : (n_sets, n_words) sparse, e.g. from :func:`word_counts`
    idf : (n_words,) float, optional
        ``None`` = plain term frequencies.
    norm : {"l2", "l1", "none"}

    Returns
    -------
    scipy.sparse.csr_matrix (n_sets, n_words) float32
        ``tf_ij * idf_j``, ``tf_ij`` = count / row total, rows normalised; empty rows
        stay zero.
    """
    check_choice(norm, "norm", ("l2", "l1", "none"))
    counts = sp.csr_matrix(counts)
    counts.sum_duplicates()
    sizes = np.diff(counts.indptr)
    tot = np.asarray(counts.sum(axis=1)).ravel()
    data = counts.data / np.repeat(np.maximum(tot, 1), sizes)
    if idf is not None:
        idf = np.asarray(idf, dtype=np.float32)
        if idf.shape != (counts.shape[1],):
            raise ValueError(f"idf must have shape ({counts.shape[1]},), got {idf.shape}")
        data = data * idf[counts.indices]
    if norm != "none":
        row_of_nnz = np.repeat(np.arange(sizes.size), sizes)
        mass = data**2 if norm == "l2" else np.abs(data)
        row = np.bincount(row_of_nnz, weights=mass, minlength=sizes.size)
        if norm == "l2":
            row = np.sqrt(row)
        data = data / np.where(row > 0, row, 1.0)[row_of_nnz]
    out = sp.csr_matrix(
        (data.astype(np.float32), counts.indices.copy(), counts.indptr.copy()),
        shape=counts.shape,
    )
    out.eliminate_zeros()
    return out
