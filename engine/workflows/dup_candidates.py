"""The candidate pairs of a duplicate search: every photo and its best ``vocabulary``
neighbours, found through the banded WTA hash index of the collection.

For a collection of more than :data:`engine.index.candidates.EXHAUSTIVE_LIMIT` photos,
each photo's neighbours are chosen among the ``MIN_CANDIDATES`` rows the banded WTA index
proposes for it (:func:`engine.index.candidates.candidate_rows`: the rows sharing the
most hash bands with it, ties by row; when too few share one, the rows of best code
agreement). :func:`neighbour_pairs` finds those candidates for a block of photos at once
(one sparse product of the rows' band memberships gives every photo's shared-band
counts), not one photo at a time, with the same result; the candidates are then ranked by
their exact ``vocabulary`` score, row by row, as a query ranks them. Smaller collections
are ranked exhaustively.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from engine.index import candidates

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.encode import EncodedImages
    from engine.index.searcher import Searcher

__all__ = ["CANDIDATE_BLOCK", "band_candidates", "neighbour_blocks", "neighbour_pairs"]

#: Photos whose band candidates are found by one sparse product.
CANDIDATE_BLOCK = 512


def neighbour_pairs(
    searcher: Searcher,
    data: EncodedImages,
    k: int,
    *,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> np.ndarray:
    """(i, j), i < j, of every row and its ``k`` best ``vocabulary`` neighbours.

    Parameters
    ----------
    searcher : Searcher
        Its cache holds the banded WTA index (built here when absent).
    data : EncodedImages
        The collection's search data (``n`` rows).
    k : int
        Neighbours per row.
    cancel : threading.Event, optional
        When set: :class:`InterruptedError` (checked between blocks of rows).
    progress : callable, optional
        ``progress(rows_done, n)`` between blocks of rows.

    Returns
    -------
    (m, 2) int64
        Unique pairs, sorted by first then second row.
    """
    found = list(neighbour_blocks(searcher, data, k, cancel=cancel, progress=progress))
    if not found:
        return np.zeros((0, 2), np.int64)
    return np.unique(np.concatenate(found), axis=0)


def neighbour_blocks(
    searcher: Searcher,
    data: EncodedImages,
    k: int,
    *,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> Iterator[np.ndarray]:
    """The pairs of :func:`neighbour_pairs` as they are found, a block of
    :data:`CANDIDATE_BLOCK` rows at a time (so that they can be checked meanwhile).

    Parameters
    ----------
    searcher, data, k, cancel, progress
        As :func:`neighbour_pairs` (``progress`` after each block).

    Yields
    ------
    (m, 2) int64
        (i, j), i < j, of the block's rows and their neighbours, sorted and unique within
        the block; a pair can come again in a later block (from its other row).
    """
    n = len(data.ids)
    k_nb = min(n, k + 1)
    hashed = n > candidates.EXHAUSTIVE_LIMIT
    for b0 in range(0, n, CANDIDATE_BLOCK):
        if cancel is not None and cancel.is_set():
            raise InterruptedError("the duplicate search was cancelled")
        rows = np.arange(b0, min(n, b0 + CANDIDATE_BLOCK))
        want = candidates.MIN_CANDIDATES
        cands = band_candidates(searcher, data, rows, want) if hashed else None
        found = []
        for r, i in enumerate(rows.tolist()):
            kk, v = data.vocab.row(i)
            c = None if cands is None else cands[r]
            s = data.vocab.score(kk, v, c)
            best = np.argsort(-s, kind="stable")[:k_nb]
            best = best if c is None else c[best]
            best = best[best != i]
            found.append(np.stack([np.minimum(best, i), np.maximum(best, i)], 1))
        if progress is not None:
            progress(int(rows[-1]) + 1, n)
        yield np.unique(np.concatenate(found).astype(np.int64).reshape(-1, 2), axis=0)


def band_candidates(
    searcher: Searcher, data: EncodedImages, rows: np.ndarray, n_want: int
) -> list[np.ndarray]:
    """The ``wta`` candidates of each of ``rows``, as
    ``searcher.candidates("wta", <row's codes>, data, n_want)`` gives them, for all the
    rows at once.

    Parameters
    ----------
    searcher : Searcher
    data : EncodedImages
    rows : (b,) int64
        Rows of ``data`` as queries.
    n_want : int
        Candidates per row (at most ``n``).

    Returns
    -------
    list of (n_want,) int64
        Per row, its candidate rows in the order of
        :func:`engine.index.candidates.candidate_rows`.
    """
    from engine.hashing.wta import code_agreement

    n = len(data.ids)
    take = min(int(n_want), n)
    member, bands_t = _band_members(searcher, data)
    votes = member[rows] @ bands_t  # (b, n) bands shared (CSR, ids unsorted in a row)
    counts = np.diff(votes.indptr)
    v, ix_all, ptr = votes.data, votes.indices, votes.indptr
    # each row's best ``take`` by (most votes, lowest id) without sorting all its
    # entries: v*, its take-th largest vote (np.partition; 0 when all fit), the entries
    # above v* by (votes, id), then at v* the lowest ids, as many as fill up to ``take``
    # (row by row: a row of a large library shares a band with tens of thousands)
    best_of: list[np.ndarray] = []
    for r in range(len(rows)):
        seg, ids = v[ptr[r] : ptr[r + 1]], ix_all[ptr[r] : ptr[r + 1]]
        if seg.size <= take:
            cut = 0
        else:
            cut = seg[np.argpartition(seg, seg.size - take)[seg.size - take]]
        hi = seg > cut
        ih, vh = ids[hi], seg[hi]
        ih = ih[np.lexsort((ih, -vh.astype(np.int64)))]
        if cut and ih.size < take:
            ia = np.sort(ids[seg == cut])[: take - ih.size]
            ih = np.concatenate([ih, ia])
        best_of.append(ih.astype(np.int64))
    few = counts < int(n_want)
    agree = code_agreement(data.wta[rows[few]], data.wta) if few.any() else None
    out: list[np.ndarray] = []
    f = 0
    for r in range(len(rows)):
        mine = best_of[r]
        if not few[r]:
            out.append(mine[:take])
            continue
        # too few collide: those first (by row), then the rest by code agreement (best
        # first, ties by row), as a stable sort of the agreements with theirs set to inf
        rank = np.unique(agree[f], return_inverse=True)[1].reshape(-1).astype(np.int64)
        f += 1
        rank = rank.max() + 1 - rank  # (1: the best agreement)
        rank[mine] = 0
        key = rank * n + np.arange(n)
        top = np.argpartition(key, take - 1)[:take] if take < n else np.arange(n)
        out.append(top[np.argsort(key[top], kind="stable")])
    return out


def _band_members(searcher: Searcher, data: EncodedImages):
    """((n, n_buckets) CSR of each row's bucket in every band table, its transpose as
    CSR), built once per search data (kept in ``searcher.cache``) with the tables of
    the banded WTA index."""
    import scipy.sparse as sp

    from engine.hashing.lsh import band_keys

    cache = searcher.cache
    if "dup_members" in cache:
        return cache["dup_members"]
    n = len(data.ids)
    if "wta" not in cache:  # (the banded index and its parameters, as a query builds them)
        searcher.candidates("wta", SimpleNamespace(wta=data.wta[:1]), data, 1)
    p = cache["wta"][0]
    keys = band_keys(np.asarray(data.wta), p.n_tables, p.band_size)  # (n, T)
    cols = np.empty(keys.shape, np.int64)
    offset = 0
    for t in range(keys.shape[1]):
        uniq, inv = np.unique(keys[:, t], return_inverse=True)
        cols[:, t] = inv.reshape(-1) + offset
        offset += uniq.size
    t_n = keys.shape[1]
    member = sp.csr_matrix(
        (np.ones(n * t_n, np.int16), cols.reshape(-1), np.arange(0, n * t_n + 1, t_n)),
        shape=(n, offset),
    )
    cache["dup_members"] = (member, member.T.tocsr())
    return cache["dup_members"]
