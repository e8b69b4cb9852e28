"""The grouping of ``simile cluster``, and how it is stored in the index.

:func:`group_collection_iter` groups an indexed collection the way the command line offers:

- ``features="dense"`` (default): the shared pipeline of the command line and the app,
  :func:`engine.cluster.categorize_iter` (dense SIFT cached in the index, vocabulary-guided
  pyramid match, normalized cuts, feature masks, an SVM on the prototypes);
- ``features="index"``: the retrieval index's sparse keypoints. Affinities are the
  collection's ``method`` pyramid-match kernel (``Collection.kernel_matrix``), optionally
  with visual words matched within ``spatial x spatial`` and coarser image cells
  (:func:`engine.cluster.spatial_pyramid_kernel`); normalized cuts
  (:func:`engine.cluster.discover_categories_iter`); feature masks from correspondences in
  the collection's fitted pyramid without geometric verification
  (:class:`engine.cluster.BinnedMatcher`, :func:`engine.cluster.refine_with_masks_iter`);
  and an SVM (:class:`engine.cluster.classify.CategoryClassifier`) trained on the
  prototypes over the kernel.

:func:`grouping_kernel_rows` computes the rows that classifier needs for new images, the
way the grouping was computed (``simile classify``).

Storage
-------
:func:`save_grouping` writes and :func:`load_grouping` reads the grouping as ONE model
state of the index, :data:`engine.index.keys.GROUPING_STATE` (``IndexStore.save_state``:
its scalars in a JSON file, its arrays in one npz, renamed into place together), so a
reader (``simile classify``, the app) sees the old grouping and its classifier or the new
ones, never a mix, even after a crash while saving:

========================  =======================================================================
``paths``                 (n,) str: the grouped images, the row order of the arrays below
``labels``                (n,) int64: group of every image, numbered by decreasing size
``prototypes``            (n,) bool
``outliers``              (n,) bool
``flow``                  (n,) float64: within-group flow; members are listed by decreasing flow
``masks``                 (sum m_i,) float32: the images' feature masks, concatenated
``mask_offsets``          (n + 1,) int64: image i's mask is ``masks[off[i]:off[i + 1]]``
                          (:func:`engine.cluster.masks_from_arrays`); every mask is empty when
                          the grouping was not refined
``method``                str: ``"dense"``, ``"vocabulary"`` or ``"uniform"``: the kernel of the
                          classifier's rows
``features``              str: the features the masks refer to, ``"dense"``
                          (:func:`engine.cluster.category_features_of`) or ``"index"``
                          (``Collection.features``)
``k_reason``              str: why this number of groups
``n_matches``             int: pairwise matchings of the refinement
``svm.<key>``             the classifier's ``to_state()``, one entry per key of :data:`SVM_KEYS`;
                          absent when fewer than two groups had prototypes
``vocab_token``           str: the token of the grouping vocabulary
                          (:data:`engine.index.keys.DENSE_VOCAB_STATE`) the classifier's rows
                          need (``method="dense"``; absent in older indexes)
========================  =======================================================================

``simile cluster`` commits a vocabulary it refits together with the grouping made with it
(``IndexStore.hold_states``); :func:`grouping_kernel_rows` refuses a grouping whose
vocabulary has since been replaced (by a grouping in the app that was not saved).

Indexes grouped by older versions hold the same entries as separate named arrays
``cluster.<name>`` (:data:`engine.index.keys.LEGACY_GROUPING_ARRAYS`, ``cluster.svm.<key>``;
no ``k_reason`` / ``n_matches``; before feature masks no ``flow`` / ``masks`` /
``mask_offsets``, before the dense channel no ``features``): :func:`load_grouping` reads
them when the index has no grouping state, and :func:`save_grouping` deletes them once the
state is written.

The person's edits of a grouping in the app (names, moves, splits, merges, the chosen
number of groups; :class:`engine.cluster.edits.EditableGrouping`) are kept apart, in the
kv entry :data:`engine.index.keys.CATEGORY_EDITS_KEY` (JSON), written by
:func:`save_edits` and read by :func:`load_edits` (which falls back to
:func:`load_grouping` when the app never edited the folder).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.cluster.binned import BinnedMatcher, spatial_pyramid_kernel
from engine.cluster.classify import CategoryClassifier
from engine.cluster.edits import EditableGrouping
from engine.cluster.model import category_kernel_rows
from engine.cluster.partition import AUTO_K_MAX, discover_categories_iter
from engine.cluster.pipeline import categorize_iter
from engine.cluster.refine import masks_from_arrays, masks_to_arrays, refine_with_masks_iter
from engine.cluster.results import ClusterProgress, members_by_flow
from engine.index import keys

__all__ = [
    "PREFIX",
    "SVM_KEYS",
    "Grouping",
    "SavedEdits",
    "edits_json",
    "fitted",
    "group_collection_iter",
    "grouping_dict",
    "grouping_from_dict",
    "grouping_kernel_rows",
    "grouping_state",
    "load_edits",
    "load_grouping",
    "save_edits",
    "save_grouping",
]

#: Prefix of the legacy arrays of a stored grouping (:data:`engine.index.keys.GROUPING_PREFIX`).
PREFIX = keys.GROUPING_PREFIX
#: Keys of the stored classifier's state (``cluster.svm.<key>``).
SVM_KEYS = ("C", "power", "empirical", "class_weight", "kernel", "labels", "ids", "names")


@dataclass
class Grouping:
    """A grouping of a collection's images, as ``simile cluster`` finds and stores it.

    Attributes
    ----------
    paths : list of Path
        The grouped images (row order of every array).
    labels : (n,) int64
        Group of every image, groups numbered by decreasing size.
    prototypes, outliers : (n,) bool
        Members with the highest flow / members that fit their group badly (Sec. 9.4).
    flow : (n,) float64 or None
        Within-group flow (mask-weighted when refined); None when loaded from an index
        grouped before flows were stored.
    features : {"dense", "index"}
        Features grouped (and indexed by ``masks``).
    method : {"dense", "vocabulary", "uniform"}
        Kernel of the classifier's rows (:func:`grouping_kernel_rows`).
    masks : list of (m_i,) float32 or None
        Feature masks in [0, 1] (Sec. 9.3); None when not refined (a grouping found without
        refinement) or not stored.
    classifier : CategoryClassifier or None
        SVM trained on the prototypes (``train_ids_`` are rows of ``paths``); None when fewer
        than two groups had prototypes.
    k_reason : str
        Why this number of groups (empty when loaded from an index grouped before it was
        stored).
    n_matches : int
        Pairwise matchings of the refinement (0 when loaded from such an index).
    kernel : (n, n) float64 or None
        The affinities the images were grouped on, when exact (None in Nystrom mode and
        when loaded: not stored).
    vocab_token : str
        Token of the grouping vocabulary the classifier's rows were computed with (set by
        :func:`save_grouping` and :func:`load_grouping`; empty when not known).
    """

    paths: list[Path]
    labels: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    flow: np.ndarray | None
    features: str
    method: str
    masks: list[np.ndarray] | None = None
    classifier: CategoryClassifier | None = None
    k_reason: str = ""
    n_matches: int = 0
    kernel: np.ndarray | None = field(default=None, repr=False)
    vocab_token: str = ""

    @property
    def k(self) -> int:
        """Number of groups."""
        return int(self.labels.max()) + 1

    def members(self, group: int) -> np.ndarray:
        """Rows of ``group``'s members, highest flow first: (C,) int64."""
        return members_by_flow(self.labels, self.flow, group)

    def training_paths(self) -> list[Path]:
        """The images the classifier was trained on (its kernel columns), in its order."""
        if self.classifier is None:
            return []
        return [self.paths[i] for i in self.classifier.train_ids_.tolist()]


def group_collection_iter(
    collection: Any,
    *,
    features: str = "dense",
    method: str = "vocabulary",
    k: int | str = "auto",
    must: Iterable[Sequence[int]] = (),
    cannot: Iterable[Sequence[int]] = (),
    power: float | None = None,
    spatial: int = 0,
    k_max: int = AUTO_K_MAX,
    prototype_percentile: float = 25.0,
    partners: int = 8,
    refine: bool = True,
    relabel: bool = False,
    fisher: bool = False,
    scenes: bool | None = None,
    jobs: int | None = None,
    cancel: Any = None,
    nystrom: int | str = "auto",
) -> Generator[ClusterProgress, None, Grouping]:
    """Group the images of an indexed collection (``simile cluster``).

    Parameters
    ----------
    collection : engine.collection.Collection
        An indexed collection; ``features="dense"`` caches the dense channel in its store.
    features : {"dense", "index"}
        Dense SIFT computed for grouping (:func:`engine.cluster.categorize_iter`), or the
        retrieval index's keypoints (see the module docstring).
    method : {"vocabulary", "uniform"}
        ``features="index"``: the collection's pyramid match used.
    k, must, cannot, power, k_max, prototype_percentile
        As :func:`engine.cluster.discover_categories`; constraints are rows of
        ``collection.paths()``.
    spatial : int
        ``features="index"``: 0, or the finest grid side G (a power of two >= 2) of visual
        words matched within G x G and coarser cells.
    partners : int
        Group members matched per image by the refinement.
    refine : bool
        Feature masks and masked flow (else flow and prototypes from the affinities).
    relabel : bool
        ``features="dense"``: let the SVM on the prototypes reassign the images.
    fisher : bool
        ``features="dense"``: the consensus with a Fisher view
        (:func:`engine.cluster.categorize_iter`).
    scenes : bool or None
        ``features="dense"``: the search's same-object-or-place pairs join the affinities
        of the cut (:mod:`engine.cluster.scenes`; None: up to
        :data:`~engine.cluster.scenes.SCENES_AUTO_MAX` photos).
    jobs : int, optional
        Processes computing dense features.
    cancel : threading.Event, optional
        ``features="dense"``: stops the run (``InterruptedError``, see
        :func:`engine.cluster.categorize_iter`).
    nystrom : "auto", bool or int
        ``features="dense"``: the Nystrom approximation, as
        :func:`engine.cluster.categorize_iter` (``"auto"``: above
        :data:`~engine.cluster.NYSTROM_AUTO_MIN` photos; an int: forced, with that many
        landmarks).

    Yields
    ------
    ClusterProgress

    Returns
    -------
    Grouping
    """
    if features == "dense":
        res = yield from categorize_iter(
            collection, k=k, must=must, cannot=cannot, power=power, k_max=k_max,
            refine=refine, relabel=relabel, partners=partners, fisher=fisher, scenes=scenes,
            prototype_percentile=prototype_percentile, jobs=jobs, cancel=cancel,
            nystrom=nystrom,
        )  # fmt: skip
        ref = res.refinement
        return Grouping(
            paths=list(res.paths), labels=res.labels, prototypes=res.prototypes,
            outliers=res.outliers, flow=res.flow, features="dense", method="dense",
            masks=None if ref is None else ref.masks, classifier=res.classifier,
            k_reason=res.k_reason, n_matches=0 if ref is None else int(ref.n_matches),
            kernel=res.kernel,
        )  # fmt: skip
    grouping = yield from _group_on_index(
        collection, method, k, must, cannot, power, spatial, k_max, prototype_percentile,
        partners, refine,
    )  # fmt: skip
    return grouping


def _group_on_index(
    collection, method, k, must, cannot, power, spatial, k_max, prototype_percentile,
    partners, refine,
):  # fmt: skip
    """``features="index"`` of :func:`group_collection_iter` (same arguments)."""
    paths = [Path(p) for p in collection.paths()]
    n = len(paths)
    K = collection.kernel_matrix(method)
    feats = matcher = None
    A = K  # grouping affinities; the classifier keeps K (as `simile classify` computes it)
    if spatial and n > 1:
        feats, matcher = _stored_matcher(collection, paths, method)
        A = _spatial_kernel(feats, matcher, spatial)
    if n == 1:
        return Grouping(paths, np.zeros(1, np.int64), np.ones(1, bool), np.zeros(1, bool),
                        np.zeros(1), "index", method, k_reason="k=1: a single image")  # fmt: skip
    result = yield from discover_categories_iter(
        A, k=k, must=must, cannot=cannot, power=power, k_max=min(k_max, n - 1),
        k_min=min(2, n - 1), prototype_percentile=prototype_percentile,
    )  # fmt: skip
    labels = result.labels
    protos, outliers, flow = result.prototypes, result.outliers, result.flow
    refinement = None
    if refine:
        if matcher is None:
            feats, matcher = _stored_matcher(collection, paths, method)
        # masked affinities normalised by the mask masses: feature-rich images do not
        # dominate the flow
        refinement = yield from refine_with_masks_iter(
            feats, labels, matcher, max_partners=partners,
            prototype_percentile=prototype_percentile, normalize="mask",
        )  # fmt: skip
        protos, outliers = refinement.prototypes, refinement.outliers
        flow = refinement.flow
    reason = result.k_reason
    if spatial:
        reason += f"; affinities with {spatial}x{spatial} spatial cells"
    clf = None
    train = np.flatnonzero(protos)
    if np.unique(labels[train]).size >= 2:
        clf = CategoryClassifier(power=power).fit(
            K[np.ix_(train, train)], labels[train], ids=train
        )
    return Grouping(
        paths, labels, protos, outliers, flow, "index", method,
        masks=None if refinement is None else refinement.masks, classifier=clf,
        k_reason=reason, n_matches=0 if refinement is None else int(refinement.n_matches),
        kernel=A,
    )  # fmt: skip


def _stored_matcher(collection, paths, method):
    """The stored features of ``paths`` and a :class:`BinnedMatcher` on the collection's
    fitted ``method`` pyramid (every feature binned once)."""
    feats = [collection.features(p) for p in paths]
    return feats, BinnedMatcher(collection.pyramid(method), [f.descriptors for f in feats])


def _spatial_kernel(feats, matcher, grid: int) -> np.ndarray:
    """Pyramid match of visual words (the pyramid level above the finest) within
    ``grid x grid`` and coarser image cells, on top of the feature-space levels
    (:func:`spatial_pyramid_kernel`)."""
    xy = []
    for f in feats:
        size = np.maximum(np.asarray(f.image_size, np.float64), 1.0)
        xy.append(np.asarray(f.xy, np.float64).reshape(-1, 2) / size)
    word_level = min(1, matcher.n_levels - 1)
    return spatial_pyramid_kernel(matcher.bins, xy, grid=grid, word_level=word_level)


def grouping_state(grouping: Grouping) -> dict[str, Any]:
    """The model state :func:`save_grouping` stores (entries: see the module docstring).

    Parameters
    ----------
    grouping : Grouping

    Returns
    -------
    dict of str to array or scalar
        Ready for ``IndexStore.save_state``.
    """
    if grouping.masks is not None:
        flat, offsets = masks_to_arrays(grouping.masks)
    else:  # no masks: every image's mask is empty (never leave a stale one behind)
        flat, offsets = np.zeros(0, np.float32), np.zeros(len(grouping.paths) + 1, np.int64)
    state: dict[str, Any] = {
        "paths": np.array([str(p) for p in grouping.paths], dtype=str),
        "labels": grouping.labels.astype(np.int64),
        "prototypes": grouping.prototypes.astype(bool),
        "outliers": grouping.outliers.astype(bool),
        "flow": np.asarray(grouping.flow, np.float64),
        "masks": flat,
        "mask_offsets": offsets,
        "method": str(grouping.method),
        "features": str(grouping.features),
        "k_reason": str(grouping.k_reason),
        "n_matches": int(grouping.n_matches),
    }
    if grouping.classifier is not None:
        for key, val in grouping.classifier.to_state().items():
            state["svm." + key] = val
    return state


def save_grouping(store: Any, grouping: Grouping) -> None:
    """Store ``grouping`` and its classifier in the index as one version.

    One model state, :data:`engine.index.keys.GROUPING_STATE` (format: see the module
    docstring), replaced atomically: a reader sees the previous grouping and classifier
    or these, whole, even when the writer stops half-way. A previous classifier never
    outlives its grouping. The arrays of an index grouped by an older version (``cluster.*``)
    are deleted once the state is written. Raises ``OSError`` when the index cannot be
    written.

    Parameters
    ----------
    store : engine.index.store.IndexStore
        A writable store (``Collection.store``).
    grouping : Grouping
    """
    state = grouping_state(grouping)
    if grouping.method == "dense" and store.has_state(keys.DENSE_VOCAB_STATE):
        token = str(store.load_state(keys.DENSE_VOCAB_STATE).get("token", ""))
        state["vocab_token"] = grouping.vocab_token = token
    store.save_state(keys.GROUPING_STATE, state)
    legacy = (*keys.LEGACY_GROUPING_ARRAYS, *("svm." + key for key in SVM_KEYS))
    for name in legacy:
        if store.has_array(PREFIX + name):
            store.delete_array(PREFIX + name)


def load_grouping(store: Any, *, classifier: bool = True) -> Grouping:
    """The grouping stored by :func:`save_grouping` (format: see the module docstring), or
    the separate arrays of an index grouped by an older version.

    ``classifier`` is None unless every ``svm.<key>`` of :data:`SVM_KEYS` is stored;
    ``flow`` and ``masks`` are None when the index predates them.

    Parameters
    ----------
    store : engine.index.store.IndexStore
        Read-only stores work.
    classifier : bool
        Rebuild the classifier (an SVM fit on the stored prototype kernel); False leaves
        ``Grouping.classifier`` None.

    Returns
    -------
    Grouping

    Raises
    ------
    KeyError
        No grouping is stored in the index.
    engine.index.store_errors.IndexCorruptError
        The stored grouping is damaged.
    """
    if store.has_state(keys.GROUPING_STATE):
        st = store.load_state(keys.GROUPING_STATE)

        def load(key: str) -> Any:
            return st[key]

        def has(key: str) -> bool:
            return key in st

    else:  # an index grouped before the grouping was one state

        def load(key: str) -> Any:
            return np.asarray(store.load_array(PREFIX + key, mmap=False))

        def has(key: str) -> bool:
            return store.has_array(PREFIX + key)

    clf = None
    if classifier and all(has("svm." + key) for key in SVM_KEYS):
        state = {key: load("svm." + key) for key in SVM_KEYS}
        state = {k: (v.item() if np.ndim(v) == 0 and hasattr(v, "item") else v)
                 for k, v in state.items()}  # fmt: skip
        clf = CategoryClassifier.from_state(state)
    paths = [Path(p) for p in np.asarray(load("paths")).tolist()]
    method = str(load("method"))
    masks = None
    if has("masks") and has("mask_offsets"):
        masks = masks_from_arrays(load("masks"), load("mask_offsets"))
    return Grouping(
        paths=paths,
        labels=np.asarray(load("labels")).astype(np.int64),
        prototypes=np.asarray(load("prototypes")).astype(bool),
        outliers=np.asarray(load("outliers")).astype(bool),
        flow=np.asarray(load("flow")).astype(np.float64) if has("flow") else None,
        features=str(load("features")) if has("features") else (
            "dense" if method == "dense" else "index"),
        method=method,
        masks=masks,
        classifier=clf,
        k_reason=str(load("k_reason")) if has("k_reason") else "",
        n_matches=int(load("n_matches")) if has("n_matches") else 0,
        vocab_token=str(load("vocab_token")) if has("vocab_token") else "",
    )  # fmt: skip


# ----------------------------------------------------------------- the person's edits
@dataclass
class SavedEdits:
    """What :func:`load_edits` restores for the app.

    Attributes
    ----------
    grouping : EditableGrouping or None
        The grouping to show, rows in the order of the ``paths`` asked for; None when the
        saved one no longer fits the collection (see ``problem``).
    must, cannot : list of (str, str)
        The person's must-group / cannot-group path pairs (from moves, splits, merges).
    k : int, "auto" or None
        The number of groups the person chose; None when nothing was chosen (a grouping
        of ``simile cluster``).
    source : {"edits", "grouping"}
        Where it comes from: the person's edits (:func:`save_edits`) or, when the folder
        was never edited, the last grouping (:func:`load_grouping`).
    problem : str
        Why ``grouping`` is None (empty otherwise).
    new_paths : list of str
        Photos of the folder the saved grouping does not hold (added since): ``grouping``
        holds the others (photos removed since have left their groups,
        :func:`engine.cluster.restrict`); place them with
        :func:`engine.cluster.place_photos_iter`.
    placed : dict str -> float
        Photos Simile placed into the groups that the person has not moved since (path ->
        the classifier's confidence; the app marks them "new"), those still in the folder.
    """

    grouping: EditableGrouping | None
    must: list[tuple[str, str]]
    cannot: list[tuple[str, str]]
    k: int | str | None
    source: str
    problem: str = ""
    new_paths: list[str] = field(default_factory=list)
    placed: dict[str, float] = field(default_factory=dict)


def edits_json(
    grouping: EditableGrouping,
    must: Sequence[Sequence[str]],
    cannot: Sequence[Sequence[str]],
    k: int | str,
    placed: dict[str, float] | None = None,
) -> str:
    """The JSON text :func:`save_edits` stores (keys ``paths``, ``labels``, ``names``,
    ``k_reason``, ``flow``, ``prototypes``, ``outliers``, ``must``, ``cannot``, ``k``, and
    ``placed`` when there are placed photos to mark)."""
    extra = {"placed": {str(p): float(c) for p, c in placed.items()}} if placed else {}
    return json.dumps({**grouping_dict(grouping, must, cannot), "k": k, **extra})


def grouping_dict(
    grouping: EditableGrouping, must: Sequence[Sequence[str]], cannot: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """A grouping and the person's constraints as plain JSON values (the keys of
    :func:`edits_json` but ``k`` and ``placed``); :func:`grouping_from_dict` reads it."""
    return {
        "paths": list(grouping.paths),
        "labels": grouping.labels.tolist(),
        "names": {str(g): n for g, n in grouping.names.items()},
        "k_reason": grouping.k_reason,
        "flow": grouping.flow.tolist(),
        "prototypes": grouping.prototypes.astype(int).tolist(),
        "outliers": grouping.outliers.astype(int).tolist(),
        "must": [list(p) for p in must],
        "cannot": [list(p) for p in cannot],
    }


def grouping_from_dict(d: dict[str, Any]) -> EditableGrouping:
    """The grouping of :func:`grouping_dict` (``ValueError``, ``KeyError``, ``TypeError`` or
    ``IndexError`` when it is damaged: arrays of other lengths, missing keys)."""
    saved = EditableGrouping(
        [str(p) for p in d["paths"]], np.asarray(d["labels"], np.int64),
        np.asarray(d["flow"], np.float64), np.asarray(d["prototypes"], bool),
        np.asarray(d["outliers"], bool), str(d.get("k_reason", "")),
    )  # fmt: skip
    n = len(saved.paths)
    shapes = (saved.labels.shape, saved.flow.shape, saved.prototypes.shape, saved.outliers.shape)
    if any(shape != (n,) for shape in shapes):
        raise ValueError("its arrays do not have one entry per photo")
    saved.names = {int(a): str(b) for a, b in dict(d.get("names", {})).items() if b}
    return saved


def save_edits(
    store: Any,
    grouping: EditableGrouping,
    must: Sequence[Sequence[str]],
    cannot: Sequence[Sequence[str]],
    k: int | str,
    placed: dict[str, float] | None = None,
) -> None:
    """Keep the grouping as the person edited it, keyed by photo path, in the index.

    The kv entry :data:`engine.index.keys.CATEGORY_EDITS_KEY` (JSON, :func:`edits_json`).

    Parameters
    ----------
    store : engine.index.store.IndexStore
        A writable store.
    grouping : EditableGrouping
        With the person's group names.
    must, cannot : sequence of (str, str)
        The person's constraints (path pairs).
    k : int or "auto"
        The number of groups chosen.
    placed : dict str -> float, optional
        Photos Simile placed into the groups and the person has not moved yet (path ->
        confidence; :attr:`SavedEdits.placed`).
    """
    store.set_kv(keys.CATEGORY_EDITS_KEY, edits_json(grouping, must, cannot, k, placed))


def load_edits(store: Any, paths: Sequence[Any]) -> SavedEdits | None:
    """The grouping to show for the collection's photos ``paths``, with the person's edits.

    The edits saved by :func:`save_edits`; when there are none, the last grouping
    (:func:`load_grouping`, without its classifier). When the folder changed since, the
    photos removed leave their groups and the photos added are listed in
    ``SavedEdits.new_paths`` (the grouping is the person's: it is kept, not dropped).

    Parameters
    ----------
    store : engine.index.store.IndexStore
    paths : sequence of path
        The collection's photos, in row order.

    Returns
    -------
    SavedEdits or None
        None when nothing usable is stored. When the saved grouping is damaged or none
        of its photos is left, ``grouping`` is None and the constraints and ``k`` are
        still returned.

    Raises
    ------
    ValueError, TypeError
        The saved edits are not readable JSON, or their constraints are malformed.
    """
    paths = [str(p) for p in paths]
    raw = store.get_kv(keys.CATEGORY_EDITS_KEY)
    if not raw:
        try:
            saved = load_grouping(store, classifier=False)
        except KeyError:
            return None
        g, new = fitted(EditableGrouping.from_grouping(saved), paths)
        if g is None:
            return None
        return SavedEdits(g, [], [], None, "grouping", new_paths=new)
    d = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    if not isinstance(d, dict):
        raise ValueError("the saved edits are not a JSON object")
    must = [tuple(map(str, p)) for p in d.get("must", [])]
    cannot = [tuple(map(str, p)) for p in d.get("cannot", [])]
    k = d.get("k", "auto")
    try:
        g, new = fitted(grouping_from_dict(d), paths)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return SavedEdits(None, must, cannot, k, "edits", f"saved grouping unusable: {exc}")
    if g is None:
        return SavedEdits(None, must, cannot, k, "edits", "none of its photos is left")
    keep = set(paths)
    must = [p for p in must if p[0] in keep and p[1] in keep]
    cannot = [p for p in cannot if p[0] in keep and p[1] in keep]
    try:
        placed = {str(p): float(c) for p, c in dict(d.get("placed") or {}).items() if p in keep}
    except (TypeError, ValueError):  # (marks only: the grouping stands without them)
        placed = {}
    return SavedEdits(g, must, cannot, k, "edits", new_paths=new, placed=placed)


def fitted(saved: EditableGrouping, paths: list[str]) -> tuple[EditableGrouping | None, list[str]]:
    """``saved`` fitted to the folder's photos ``paths``: the rows of the photos still
    there, in the order of ``paths`` (the others leave their groups), and the photos it
    does not hold."""
    from engine.cluster.placement import restrict

    held = set(saved.paths)
    return restrict(saved, paths), [p for p in paths if p not in held]


def grouping_kernel_rows(collection: Any, grouping: Grouping, images: Sequence[Any]) -> np.ndarray:
    """Kernel rows of new images against the classifier's training images (its columns),
    computed the way the grouping was: on the dense categorisation channel and the stored
    grouping vocabulary (``method="dense"``, :func:`engine.cluster.category_kernel_rows`),
    or from the collection's ``method`` search scores.

    Parameters
    ----------
    collection : engine.collection.Collection
    grouping : Grouping
        With a classifier (:meth:`Grouping.training_paths` are the columns).
    images : sequence of paths
        Images to place (inside or outside the collection).

    Returns
    -------
    (q, t) float64
        Row i, column j: similarity of ``images[i]`` to training image j.

    Raises
    ------
    KeyError
        ``method="dense"``: the folder's dense features or vocabulary are missing, were
        computed with other settings, or the vocabulary is not the grouping's.
    engine.io.imageio.ImageLoadError
        An image cannot be read.
    """
    train_paths = grouping.training_paths()
    if grouping.method == "dense":
        if grouping.vocab_token:
            vocab = collection.store.load_state(keys.DENSE_VOCAB_STATE)
            if str(vocab.get("token", "")) != grouping.vocab_token:
                raise KeyError(keys.DENSE_VOCAB_STATE)
        return category_kernel_rows(collection, images, train_paths)
    col_of = {p: j for j, p in enumerate(train_paths)}
    n = len(collection.paths())
    rows = np.zeros((len(images), len(train_paths)))
    for i, path in enumerate(images):
        for h in collection.query(path, method=grouping.method, top=n):
            j = col_of.get(Path(h.path))
            if j is not None:
                rows[i, j] = h.score
    return rows
