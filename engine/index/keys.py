"""The one vocabulary of what an index stores: every persistent piece has its key here.

An index folder (:class:`engine.index.store.IndexStore`) holds, besides the catalogue of
photos and their feature chunks, four kinds of named pieces: *model states*
(``save_state``: scalars in JSON, arrays in npz, one atomic version per name), *named
arrays* (``save_array``), *kv* entries (small JSON/bytes values in the catalogue) and
*settings*. Every module that reads or writes one of them takes its key from this
module, and each kind has one reader / writer, so a newcomer finds here what an index
contains and who owns each piece:

============================  =======  ===============================================
key                           kind     written / read by
============================  =======  ===============================================
``search.models``             state    :mod:`engine.index.fit` (PCA, vocabulary trees,
                                       uniform bins, hash seeds): ``SearchModels``
``search.data``               state    :mod:`engine.index.encode` (pyramids, codes, hash
                                       bits of every photo): ``EncodedImages``
``learned.model``             state    :mod:`engine.workflows.feedback` (``learn`` /
                                       ``load_model``: OASIS / boosted model and its
                                       dense bag-of-words representation)
``learned.model.token``       kv       same: which model version the cached bags belong
                                       to
``feedback.marks``            kv       :mod:`engine.workflows.marks` (``add_marks`` /
                                       ``load_marks``: the person's thumbs up / down)
``cluster.grouping``          state    :mod:`engine.cluster.grouping` (``save_grouping``
                                       / ``load_grouping``: the last grouping, i.e.
                                       labels, prototypes, outliers, flow, masks and the
                                       SVM on the prototypes, committed as one version)
``cluster.<name>``            arrays   legacy: the same grouping as separate arrays
                                       (:data:`LEGACY_GROUPING_ARRAYS`), written before
                                       ``cluster.grouping``; ``load_grouping`` still
                                       reads them, ``save_grouping`` deletes them
``cluster.dense.vocab``       state    :mod:`engine.cluster.model` (the dense channel's
                                       vocabulary tree)
``<ns>.dense.manifest``       kv       :mod:`engine.cluster.channel` (the cached dense
                                       SIFT of each photo, in the arrays
                                       ``<ns>.dense.<chunk>.{desc,xy,off,bins}``; ``<ns>``
                                       is ``cluster`` for grouping, ``learn`` for the
                                       learned similarity)
``gui.categories``            kv       :mod:`engine.cluster.grouping` (``save_edits`` /
                                       ``load_edits``: the grouping as the person edited
                                       it in the app: names, moves, splits, merges, the
                                       chosen number of groups; JSON)
``gui.categories.history``    kv       :mod:`engine.cluster.history` (``save_history`` /
                                       ``load_history``: the states before the person's
                                       last edits, for undo after reopening; JSON)
``duplicates.reference``      kv       :mod:`app.gui.duplicates` (the folders whose
                                       photos are always kept; JSON list of paths)
``feature_kwargs``            setting  :mod:`engine.index.ingest` (feature settings of
                                       the stored keypoints)
``catalog.id``                kv       :mod:`engine.index.catalog` (the catalogue's random
                                       id: states made under another id are never used)
============================  =======  ===============================================

Model states are committed through ``states/MANIFEST.json`` (:mod:`engine.index.manifest`):
one file names the files of one consistent version of every state, so states that must
agree (the search models and data) are saved together with ``store.save_states({...})``
and read together with ``store.load_states([...])``.
"""

from __future__ import annotations

__all__ = [
    "CATALOG_ID_KEY",
    "CATEGORY_EDITS_KEY",
    "CATEGORY_HISTORY_KEY",
    "DATA_STATE",
    "DENSE_NAMESPACE",
    "DENSE_VOCAB_STATE",
    "DUPLICATE_REFERENCE_KEY",
    "FEATURE_SETTINGS",
    "GROUPING_PREFIX",
    "GROUPING_STATE",
    "LEARNED_MODEL_STATE",
    "LEARNED_MODEL_TOKEN",
    "LEARN_DENSE_NAMESPACE",
    "LEGACY_GROUPING_ARRAYS",
    "MARKS_KEY",
    "MODELS_STATE",
    "PATH_KV_KEYS",
    "dense_array_prefix",
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
#: The last grouping of the collection, with its classifier (state, one atomic version).
GROUPING_STATE = "cluster.grouping"
#: Prefix of the legacy arrays of a grouping (``cluster.labels``, ...; read-only now).
GROUPING_PREFIX = "cluster."
#: The legacy grouping arrays (after :data:`GROUPING_PREFIX`); the classifier's were
#: ``cluster.svm.<key>``, one per key of its ``to_state()``.
LEGACY_GROUPING_ARRAYS = (
    "paths",
    "labels",
    "prototypes",
    "outliers",
    "flow",
    "masks",
    "mask_offsets",
    "method",
    "features",
)
#: The dense categorisation channel's vocabulary tree (state).
DENSE_VOCAB_STATE = "cluster.dense.vocab"
#: Namespaces of the dense SIFT channel's cached arrays: grouping, learned similarity.
DENSE_NAMESPACE = "cluster"
LEARN_DENSE_NAMESPACE = "learn"
#: Reference folders whose photos are always the copy to keep in duplicate groups (kv,
#: JSON list of absolute folder paths; the app's Duplicates view).
DUPLICATE_REFERENCE_KEY = "duplicates.reference"
#: The person's edits of a grouping in the app (kv, JSON).
CATEGORY_EDITS_KEY = "gui.categories"
#: The states of the grouping before the person's last edits, for undo (kv, JSON).
CATEGORY_HISTORY_KEY = "gui.categories.history"

#: kv entries (JSON) that name photos by path: a photo moved or renamed in the folder
#: (:meth:`engine.index.store.IndexStore.rename`) is renamed in them too, so it keeps its
#: marks and its place in the person's grouping.
PATH_KV_KEYS = (MARKS_KEY, CATEGORY_EDITS_KEY, CATEGORY_HISTORY_KEY)
#: The catalogue's random id (kv): saved states name it, and are never used with another.
CATALOG_ID_KEY = "catalog.id"
#: Feature-extraction settings of the stored keypoint features (setting).
FEATURE_SETTINGS = "feature_kwargs"


def dense_array_prefix(namespace: str = DENSE_NAMESPACE) -> str:
    """Prefix of the array names of a dense SIFT channel cached under ``namespace``.

    Parameters
    ----------
    namespace : str
        :data:`DENSE_NAMESPACE` or :data:`LEARN_DENSE_NAMESPACE`.

    Returns
    -------
    str
        ``"<namespace>.dense."``; a chunk's arrays are ``<prefix><chunk>.desc`` etc.
    """
    return f"{namespace}.dense."


def dense_manifest_key(namespace: str = DENSE_NAMESPACE) -> str:
    """kv key of the manifest of a dense SIFT channel cached under ``namespace``.

    Parameters
    ----------
    namespace : str
        :data:`DENSE_NAMESPACE` or :data:`LEARN_DENSE_NAMESPACE`.

    Returns
    -------
    str
        ``"<namespace>.dense.manifest"``.
    """
    return f"{dense_array_prefix(namespace)}manifest"
