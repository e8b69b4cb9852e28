"""Retrieval and recognition measures on score matrices.

Every function takes a similarity matrix ``scores`` of shape ``(Q, N)`` (higher =
more similar; row ``q`` scores query ``q`` against the ``N`` database items) and
integer labels.  When the queries are the database items themselves (the usual
"every image is a query" protocol) pass the square ``(N, N)`` matrix and leave
``query_labels`` out; ``exclude_self`` then says whether a query's own row entry
takes part in its ranking.

Ties are broken by database order (a stable sort), so results are deterministic.

Protocols
---------
- UKBench (Nistér & Stewénius 2006): group = image number // 4; the N-S score is
  the mean number of the 4 group images (the query included) among the top 4.
- INRIA Holidays (Jégou et al. 2008): group = image number // 100; the query is
  removed from its own ranking and mAP is averaged over queries.
- Normalised average rank, Grauman thesis Eq. 6.4 (0 = perfect, 0.5 = random).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from os import PathLike

import numpy as np

__all__ = [
    "average_precision",
    "group_labels",
    "knn_accuracy",
    "mean_average_precision",
    "normalized_average_rank",
    "ns_score",
    "precision_at_k",
    "ranked_relevance",
]

_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def group_labels(names: Sequence[str | PathLike[str]], divisor: int) -> np.ndarray:
    """Group label of each file from the last number in its name: ``number // divisor``.

    ``divisor=4`` is the UKBench rule (``ukbench00017.jpg`` -> group 4) and
    ``divisor=100`` the INRIA Holidays rule (``100301.jpg`` -> group 1003).

    Parameters
    ----------
    names : sequence of str or path
        File names or paths; only the final path component is read.
    divisor : int
        Images per group number.

    Returns
    -------
    labels : (N,) int64

    Raises
    ------
    ValueError
        If a name contains no digits or ``divisor`` is not positive.
    """
    if divisor <= 0:
        raise ValueError(f"divisor must be > 0, got {divisor!r}")
    out = np.empty(len(names), dtype=np.int64)
    for i, name in enumerate(names):
        stem = str(name).replace("\\", "/").rsplit("/", 1)[-1]
        m = _NUMBER.search(stem.rsplit(".", 1)[0] if "." in stem else stem)
        if m is None:
            raise ValueError(f"names: {stem!r} contains no image number")
        out[i] = int(m.group(1)) // divisor
    return out


def ranked_relevance(
    scores: np.ndarray,
    labels: np.ndarray,
    query_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = True,
    queries_are_items: bool = False,
) -> np.ndarray:
    """Relevance of each query's database ranking, best first.

    Parameters
    ----------
    scores : (Q, N) float
        Similarities, higher = more similar.
    labels : (N,) int
        Database labels.
    query_labels : (Q,) int, optional
        Query labels; defaults to ``labels`` (requires ``Q == N``: query ``i`` is item ``i``).
    exclude_self : bool
        With the square protocol, drop item ``i`` from query ``i``'s ranking.
    queries_are_items : bool
        Query ``i`` is database item ``i`` (the ``Q <= N`` queries are the first
        database items) also when ``query_labels`` is given, so that ``exclude_self``
        applies to it.

    Returns
    -------
    relevant : (Q, N) or (Q, N - 1) bool
        ``relevant[q, r]`` is True when the item at rank ``r`` (0 = best) shares the query's label.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    if scores.ndim != 2:
        raise ValueError(f"scores must be a 2-D (Q, N) array, got shape {scores.shape}")
    q, n = scores.shape
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    square = query_labels is None
    if square:
        if q != n:
            raise ValueError(
                f"scores is {q}x{n}: pass query_labels when queries are not the database items"
            )
        query_labels = labels
    query_labels = np.asarray(query_labels)
    if query_labels.shape != (q,):
        raise ValueError(f"query_labels must have shape ({q},), got {query_labels.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contains NaN")
    if queries_are_items and q > n:
        raise ValueError(f"queries_are_items: {q} queries cannot be among {n} items")
    order = np.argsort(-scores, axis=1, kind="stable")
    if exclude_self and (square or queries_are_items):
        keep = order != np.arange(q)[:, None]
        order = order[keep].reshape(q, n - 1)
    return labels[order] == query_labels[:, None]


def ns_score(scores: np.ndarray, labels: np.ndarray, k: int = 4) -> float:
    """UKBench N-S score: mean number of same-group images among the top ``k``.

    The query itself takes part (it is one of its group's 4 images), so a
    perfect system scores ``k`` (4.0 on UKBench).

    Parameters
    ----------
    scores : (N, N) float
        Every image queried against the whole collection.
    labels : (N,) int
        Group of each image (``group_labels(names, 4)``).
    k : int
        Rank cut-off, 4 in the standard protocol.

    Returns
    -------
    float
        In ``[0, k]``.
    """
    rel = ranked_relevance(scores, labels, exclude_self=False)
    return float(rel[:, :k].sum(axis=1).mean())


def precision_at_k(
    scores: np.ndarray,
    labels: np.ndarray,
    k: int = 10,
    query_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = True,
    queries_are_items: bool = False,
    pooled: bool = False,
) -> float:
    """Mean fraction of relevant items among each query's top ``k`` (:func:`ranked_relevance`).

    Parameters
    ----------
    scores : (Q, N) float
        Similarities, higher = more similar.
    labels : (N,) int
        Database labels.
    k : int
        Rank cut-off; a ranking shorter than ``k`` is counted whole.
    query_labels : (Q,) int, optional
        Query labels (default ``labels``, square protocol).
    exclude_self, queries_are_items : bool
        As in :func:`ranked_relevance`.
    pooled : bool
        Count the relevant items of all queries' top ``k`` first and divide once
        (``hits / (Q k)``) instead of averaging the per-query precisions. The same
        mean, rounded once instead of per query (the form :mod:`engine.learn` used).

    Returns
    -------
    float
        In ``[0, 1]``; 0 without queries.
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k!r}")
    rel = ranked_relevance(
        scores,
        labels,
        query_labels,
        exclude_self=exclude_self,
        queries_are_items=queries_are_items,
    )
    if not rel.shape[0]:
        return 0.0
    if pooled:
        return float(np.mean(rel[:, :k]))
    return float(rel[:, :k].mean(axis=1).mean())


def average_precision(relevant: np.ndarray) -> np.ndarray:
    """Non-interpolated average precision of each ranked relevance row.

    ``AP = (1/R) sum_r P@r * rel(r)`` over the ranks ``r`` of the ``R`` relevant items.

    Parameters
    ----------
    relevant : (Q, N) bool
        Output of :func:`ranked_relevance`.

    Returns
    -------
    ap : (Q,) float64
        NaN for a query with no relevant item.
    """
    rel = np.asarray(relevant, dtype=bool)
    hits = np.cumsum(rel, axis=1)
    ranks = np.arange(1, rel.shape[1] + 1)
    n_rel = rel.sum(axis=1)
    num = np.where(rel, hits / ranks, 0.0).sum(axis=1)
    ap = np.full(rel.shape[0], np.nan)
    np.divide(num, n_rel, out=ap, where=n_rel > 0)
    return ap


def mean_average_precision(
    scores: np.ndarray,
    labels: np.ndarray,
    query_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = True,
    queries_are_items: bool = False,
) -> float:
    """Mean average precision over the queries that have at least one relevant item.

    With ``group_labels(names, 100)`` and the default ``exclude_self=True`` this is
    the INRIA Holidays protocol (the query is removed from its own ranking).
    Returns NaN when no query has a relevant item. ``queries_are_items``: as in
    :func:`ranked_relevance`.
    """
    ap = average_precision(
        ranked_relevance(
            scores,
            labels,
            query_labels,
            exclude_self=exclude_self,
            queries_are_items=queries_are_items,
        )
    )
    ap = ap[~np.isnan(ap)]
    return float(ap.mean()) if ap.size else float("nan")


def normalized_average_rank(
    scores: np.ndarray,
    labels: np.ndarray,
    query_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = True,
) -> float:
    r"""Grauman's normalised average rank (thesis Eq. 6.4), averaged over queries.

    .. math:: \bar r = \frac{1}{N N_R}\Big(\sum_{i=1}^{N_R} r_i - \frac{N_R (N_R - 1)}{2}\Big)

    with :math:`r_i` the 0-based rank of the :math:`i`-th relevant item, :math:`N_R` the
    number of relevant items and :math:`N` the number of ranked items.  0 when all
    relevant items come first, about 0.5 for a random ranking, approaching 1 at worst.
    Queries with no relevant item are skipped; NaN if none remain.
    """
    rel = ranked_relevance(scores, labels, query_labels, exclude_self=exclude_self)
    n = rel.shape[1]
    n_rel = rel.sum(axis=1)
    rank_sum = np.where(rel, np.arange(n), 0).sum(axis=1)
    ok = n_rel > 0
    if not ok.any():
        return float("nan")
    nr = n_rel[ok].astype(np.float64)
    r = (rank_sum[ok] - nr * (nr - 1) / 2) / (n * nr)
    return float(r.mean())


def knn_accuracy(
    scores: np.ndarray,
    labels: np.ndarray,
    k: int = 1,
    query_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = True,
) -> float:
    """Accuracy of the k-nearest-neighbour vote (leave-one-out with the square protocol).

    Each query is given the most frequent label among its ``k`` most similar items;
    a tied vote goes to the label whose best-ranked member comes first.

    Parameters
    ----------
    scores : (Q, N) float
    labels : (N,) int
    k : int
        Neighbours voting.
    query_labels : (Q,) int, optional
        True labels of the queries (default ``labels``, square protocol).

    Returns
    -------
    float
        Fraction of queries whose predicted label is correct.
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k!r}")
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    q, n = scores.shape if scores.ndim == 2 else (0, 0)
    if scores.ndim != 2 or labels.shape != (n,):
        raise ValueError(f"scores (Q, N) and labels (N,) disagree: {scores.shape}, {labels.shape}")
    square = query_labels is None
    qlab = labels if square else np.asarray(query_labels)
    if qlab.shape != (q,):
        raise ValueError(f"query_labels must have shape ({q},), got {qlab.shape}")
    order = np.argsort(-scores, axis=1, kind="stable")
    if square and exclude_self:
        order = order[order != np.arange(q)[:, None]].reshape(q, n - 1)
    top = labels[order[:, :k]]  # (Q, k)
    if k == 1:
        pred = top[:, 0]
    else:
        # votes[q, j] = how many of the top k share top[q, j]'s label; first maximum wins
        votes = (top[:, :, None] == top[:, None, :]).sum(axis=2)
        pred = top[np.arange(q), np.argmax(votes, axis=1)]
    return float((pred == qlab).mean()) if q else 0.0
