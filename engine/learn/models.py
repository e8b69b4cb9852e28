"""The former single module of :mod:`engine.learn`, kept so that old imports still work.

The learners now live in :mod:`engine.learn.oasis` (OASIS), :mod:`engine.learn.ssc`
(threshold rates, SSC, Boosted SSC, BoostPro, the Hamming embedding) and
:mod:`engine.learn.supervision` (progress reports, pairs and splits from labels); the
retrieval measures in :mod:`engine.metrics`. This module re-exports those names and
keeps :func:`precision_at_k` and :func:`mean_average_precision` with the argument
order they had here (query labels before database labels), as thin calls of the
:mod:`engine.metrics` functions.
"""

from __future__ import annotations

import numpy as np

from engine import metrics
from engine.learn.oasis import FACTORED_MAX_IMAGES, KERNEL_MAX_IMAGES, OASIS
from engine.learn.ssc import (
    SSC,
    BoostedSSC,
    BoostPro,
    HammingEmbedding,
    reduce_dimension,
    threshold_rates,
    threshold_rates_semi,
)
from engine.learn.supervision import (
    LearnProgress,
    State,
    class_members,
    pairs_from_labels,
    train_test_split_by_class,
    validation_split,
)

__all__ = [
    "FACTORED_MAX_IMAGES",
    "KERNEL_MAX_IMAGES",
    "OASIS",
    "SSC",
    "BoostPro",
    "BoostedSSC",
    "HammingEmbedding",
    "LearnProgress",
    "State",
    "class_members",
    "mean_average_precision",
    "pairs_from_labels",
    "precision_at_k",
    "reduce_dimension",
    "threshold_rates",
    "threshold_rates_semi",
    "train_test_split_by_class",
    "validation_split",
]


def precision_at_k(
    similarity: np.ndarray,
    query_labels: np.ndarray,
    db_labels: np.ndarray,
    k: int = 10,
    *,
    exclude_self: bool = False,
) -> float:
    """Mean precision@k of rankings by ``similarity`` (higher = more similar).

    :func:`engine.metrics.precision_at_k` with this module's argument order: query
    labels first, the queries are the first ``Q`` database items, and the hits are
    counted over all queries before dividing (``pooled=True``). ``k`` larger than the
    ranking counts the whole ranking; ties at the ``k``-th place go to the earlier
    database item.

    Parameters
    ----------
    similarity : (Q, N) float ndarray
    query_labels : (Q,) int ndarray
    db_labels : (N,) int ndarray
    k : int
    exclude_self : bool
        Ignore the diagonal (queries are the first Q database items).

    Returns
    -------
    float
        In ``[0, 1]``.
    """
    return metrics.precision_at_k(
        similarity,
        db_labels,
        k,
        query_labels,
        exclude_self=exclude_self,
        queries_are_items=True,
        pooled=True,
    )


def mean_average_precision(
    similarity: np.ndarray,
    query_labels: np.ndarray,
    db_labels: np.ndarray | None = None,
    *,
    exclude_self: bool = False,
) -> float:
    """Mean (over queries with at least one relevant item) average precision.

    :func:`engine.metrics.mean_average_precision` with this module's argument order
    (query labels first; the queries are the first ``Q`` database items).

    Parameters
    ----------
    similarity : (Q, N) float ndarray, higher = more similar
    query_labels : (Q,) int ndarray
    db_labels : (N,) int ndarray, optional (default ``query_labels``)
    exclude_self : bool
        Ignore the diagonal (queries are the first Q database items).

    Returns
    -------
    float
        ``mean_q (1/R_q) Σ_{k relevant} precision@k`` (ties broken by index order).
    """
    return metrics.mean_average_precision(
        similarity,
        query_labels if db_labels is None else db_labels,
        query_labels,
        exclude_self=exclude_self,
        queries_are_items=True,
    )
