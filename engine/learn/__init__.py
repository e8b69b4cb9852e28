"""Learned similarity: OASIS (Chechik et al., :mod:`engine.learn.oasis`) and the
similarity-sensitive embeddings of Shakhnarovich — SSC, Boosted SSC and BoostPro
(:mod:`engine.learn.ssc`) — with what they share (:mod:`engine.learn.supervision`).

:mod:`engine.learn.models` is the former single module, kept for old imports; the
retrieval measures live in :mod:`engine.metrics` (``engine.learn`` still exports
``precision_at_k`` and ``mean_average_precision`` with their old argument order).
"""

from engine.learn.models import mean_average_precision, precision_at_k
from engine.learn.oasis import OASIS
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
    class_members,
    pairs_from_labels,
    train_test_split_by_class,
    validation_split,
)

__all__ = [
    "OASIS",
    "SSC",
    "BoostPro",
    "BoostedSSC",
    "HammingEmbedding",
    "LearnProgress",
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
