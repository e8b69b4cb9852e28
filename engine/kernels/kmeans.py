"""Batched k-means and the segment arithmetic behind the vocabulary tree.

:class:`engine.kernels.vocabulary.VocabularyTree` clusters every level of the tree for
all its nodes at once: the points are grouped in *segments*, one per node, and
:func:`kmeans_level` runs an independent k-means (k-means++ seeding, Arthur &
Vassilvitskii 2007, then Lloyd iterations) inside every segment with a handful of
batched array operations. k-means++ seeding is vectorised across segments (one random
draw per segment and step through segment-wise cumulative sums); Lloyd iterations use
``||x||^2 - 2 x.c + ||c||^2`` distances on padded ``(segments, points, D)`` blocks;
:func:`segment_argmin` assigns points to the nearest of their segment's candidate
centres (one BLAS product per large segment, a batched gather for the many small ones).
The remaining helpers compute the bins' statistics (:func:`small_bin_diameters`,
:func:`rowwise_sqdist`, :func:`segment_argmax`) and segment layouts.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

__all__ = [
    "kmeans_level",
    "pad_size",
    "rowwise_sqdist",
    "runs",
    "segment_argmax",
    "segment_argmin",
    "segment_starts",
    "small_bin_diameters",
]

# Segments with at least this many points get their own BLAS product; smaller ones are
# handled together by a batched gather (cheaper than thousands of tiny calls). On 32-D
# (PCA) trees a product per segment pays off only for large segments: the vocabulary
# pyramids of UKBench's 500 images (batches of 64) took a median 0.34 s with 48, 0.27 s
# with 512 (the same bins; one thread, 8 interleaved runs)
_BLAS_MIN_SEGMENT = 512
_GATHER_CHUNK = 8192
_ROWWISE_BLOCK = 2048  # rows per block of rowwise_sqdist


def segment_starts(node: np.ndarray, n_nodes: int) -> np.ndarray:
    """(n_nodes + 1,) offsets of each node's run in ``node`` (sorted ascending)."""
    return np.searchsorted(node, np.arange(n_nodes + 1), side="left").astype(np.int64)


def runs(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layout of consecutive non-empty runs of ``sizes`` (S,) int64 points: the first
    position of every run (S,) and the run of every position (sum(sizes),)."""
    starts = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts, np.repeat(np.arange(sizes.size), sizes)


def segment_argmin(
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


def rowwise_sqdist(
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


def segment_argmax(values: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> np.ndarray:
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


def small_bin_diameters(
    X: np.ndarray,
    b: np.ndarray,
    count: np.ndarray,
    max_points: int,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact diameters (largest pairwise distance) of bins with 2..max_points points.

    Bins are batched by padded size (:func:`pad_size`, at most ~14 % padding, which
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
    pad = pad_size(count[todo])
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
            out[w] = np.sqrt(rowwise_sqdist(P[rows, i], P[rows, j]))
    return todo, out


def pad_size(size: np.ndarray) -> np.ndarray:
    """Padded segment sizes for :func:`kmeans_level` and :func:`small_bin_diameters`:
    rounded up to a multiple of an eighth of their power of two (at most ~14 % padding)."""
    bit_length = np.frexp(size)[1]  # exact for integers below 2**53
    step = np.int64(1) << np.maximum(0, bit_length - 3).astype(np.int64)
    return -(-size // step) * step


def _padded_sqdist(P: np.ndarray, xsq: np.ndarray, valid: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(S, P) float64 squared distances of padded segment points ``P`` (S, P, D) with
    squared norms ``xsq`` to one point ``c[s]`` (S, D) each; 0 at padding."""
    d2 = xsq + np.einsum("sd,sd->s", c, c)[:, None] - 2.0 * np.matmul(P, c[:, :, None])[:, :, 0]
    return np.where(valid, np.maximum(d2, 0.0), 0.0).astype(np.float64)


def kmeans_level(
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
    pad = pad_size(sizes)
    slots_k = np.arange(k)
    # per padded size: the segments, their blocks and the seeded part
    groups = [
        _padded_group(Xs, rows, seg_starts, sizes, kk, np.flatnonzero(pad == size), size, k, rng)
        for size in np.unique(pad)
    ]
    for _ in range(max_iter):
        changed = sum(_lloyd_step(g, k, slots_k) for g in groups if g.seed.size)
        if changed <= tol * n:
            break
    for g in groups:
        centers[(g.segs[:, None] * k + slots_k).ravel()] = g.C.reshape(-1, dim)
        labels[g.pidx[g.valid]] = (g.segs[:, None] * k + g.labels)[g.valid]
    return centers, labels, kk


def _nearest_slots(
    P: np.ndarray, C: np.ndarray, n_c: np.ndarray, slots_k: np.ndarray
) -> np.ndarray:
    """(S, P) slot of the nearest of the first ``n_c[s]`` centres ``C[s]`` (S, k, D) of
    every padded segment point ``P`` (S, P, D); ``slots_k = arange(k)``."""
    d = np.einsum("skd,skd->sk", C, C)[:, None, :] - 2.0 * np.matmul(
        P, C.transpose(0, 2, 1)
    )  # (S, P, k)
    d[np.broadcast_to((slots_k >= n_c[:, None])[:, None, :], d.shape)] = np.inf
    return np.argmin(d, axis=2)


def _padded_group(
    Xs: np.ndarray,
    rows: np.ndarray | None,
    seg_starts: np.ndarray,
    sizes: np.ndarray,
    kk: np.ndarray,
    segs: np.ndarray,
    size: int,
    k: int,
    rng: np.random.Generator,
) -> SimpleNamespace:
    """The segments ``segs`` of one padded ``size`` copied into a block, seeded.

    Segments of at most ``k`` points take every point as a centre; the others draw
    ``k`` centres by k-means++ (one ``rng`` draw per segment and centre). Returns the
    group: ``segs``, ``valid`` (S, P), ``pidx`` (S, P), the block ``P`` (S, P, D), the
    centres ``C`` (S, k, D), the k-means++ segments ``seed`` (with their block ``Pb`` and
    ``vb``), ``every`` (all segments seeded) and the initial ``labels`` (S, P).
    """
    dim = Xs.shape[1]
    slots_k = np.arange(k)
    g = SimpleNamespace(segs=segs)
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
    g.labels = _nearest_slots(g.P, g.C, kk[g.segs], slots_k)
    return g


def _lloyd_step(g: SimpleNamespace, k: int, slots_k: np.ndarray) -> int:
    """One Lloyd iteration on the k-means++ segments of a group (see
    :func:`_padded_group`), in place: centres to their points' means, points to the
    nearest centre. Returns the number of points that changed centre."""
    lab = g.labels if g.every else g.labels[g.seed]
    lab = np.where(g.vb, lab, k)  # padding: a column of its own
    M = (lab[:, None, :] == slots_k[None, :, None]).astype(np.float32)
    counts = M.sum(axis=2)  # (S, k)
    sums = np.matmul(M, g.Pb)  # (S, k, D)
    filled = counts > 0
    Cs = g.C if g.every else g.C[g.seed]
    Cs[filled] = sums[filled] / counts[filled][:, None]
    new = _nearest_slots(g.Pb, Cs, np.full(g.seed.size, k), slots_k)
    if g.every:
        changed = np.count_nonzero((new != g.labels) & g.valid)
        g.labels = new
    else:
        g.C[g.seed] = Cs
        changed = np.count_nonzero((new != g.labels[g.seed]) & g.vb)
        g.labels[g.seed] = new
    return changed
