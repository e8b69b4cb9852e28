"""The one vocabulary of what an index stores: every persistent piece has its key here.

An index folder (:class:`engine.index.store.IndexStore`) holds, besides the catalogue of
photos and their feature chunks, four kinds of named pieces: *model states*
(``save_state``: scalars in JSON, arrays in npz, one atomic version per name), *named
arrays* (``save_array``), *kv* entries (small JSON/bytes values in the catalogue) and
*settings*. Every module that reads or writes one of them takes its key from this
module, so a newcomer finds here what an index contains and who owns each piece:

==========================  =======  =================================================
key                         kind     written / read by
==========================  =======  =================================================
``search.models``           state    :mod:`engine.index.fit` (PCA, vocabulary trees,
                                     uniform bins, hash seeds): ``SearchModels``
``search.data``             state    :mod:`engine.index.encode` (pyramids, codes, hash
                                     bits of every photo): ``EncodedImages``
``learned.model``           state    :mod:`engine.workflows.feedback` (OASIS / boosted
                                     model and its dense bag-of-words representation)
``learned.model.token``     kv       same: which model version the cached bags belong to
``feedback.marks``          kv       :mod:`engine.workflows.marks` (the person's ✓ / ✗)
``cluster.*``               arrays   :mod:`engine.cluster.grouping` (the last grouping:
                                     labels, prototypes, outliers, masks, SVM)
``cluster.dense.vocab``     state    :mod:`engine.cluster.model` (the dense channel's
                                     vocabulary tree)
``<ns>.dense.manifest``     kv       :mod:`engine.cluster.channel` (the cached dense
                                     SIFT of each photo, arrays ``<ns>.dense.*``; ``<ns>``
                                     is ``cluster`` for grouping, ``learn`` for learning)
``gui.categories``          kv       the person's edits of a grouping (names, moves,
                                     splits, merges), :mod:`engine.cluster.grouping`
``feature_kwargs``          setting  :mod:`engine.index.ingest` (feature settings of the
                                     stored keypoints)
==========================  =======  =================================================
"""

from __future__ import annotations

__all__ = [
    "CATEGORY_EDITS_KEY",
    "DATA_STATE",
    "DENSE_NAMESPACE",
    "DENSE_VOCAB_STATE",
    "FEATURE_SETTINGS",
    "GROUPING_PREFIX",
    "LEARNED_MODEL_STATE",
    "LEARNED_MODEL_TOKEN",
    "LEARN_DENSE_NAMESPACE",
    "MARKS_KEY",
    "MODELS_STATE",
    "dense_manifest_key",
]

#: Fitted search models (state).
MODELS_STATE = "search.models"
#: Encoded search data of every photo (state).
DATA_STATE = "search.data"
#: The learned similarity model (state) and the token of its version (kv).
LEARNED_MODEL_STATE = "learned.model"
LEARNED_MODEL_TOKEN = "learned.model.token"
#: The person's relevance marks (kv, JSON list).
MARKS_KEY = "feedback.marks"
#: Prefix of the arrays of the last grouping (arrays ``cluster.labels``, ...).
GROUPING_PREFIX = "cluster."
#: The dense categorisation channel's vocabulary tree (state).
DENSE_VOCAB_STATE = "cluster.dense.vocab"
#: Namespaces of the dense SIFT channel's cached arrays: grouping, learned similarity.
DENSE_NAMESPACE = "cluster"
LEARN_DENSE_NAMESPACE = "learn"
#: The person's edits of a grouping (kv, JSON).
CATEGORY_EDITS_KEY = "gui.categories"
#: Feature-extraction settings of the stored keypoint features (setting).
FEATURE_SETTINGS = "feature_kwargs"


def dense_manifest_key(namespace: str = DENSE_NAMESPACE) -> str:
    """kv key of the manifest of a dense SIFT channel cached under ``namespace``."""
    return f"{namespace}.dense.manifest"
