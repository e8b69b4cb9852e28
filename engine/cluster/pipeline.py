"""The categorisation pipeline shared by ``simile cluster``, ``simile classify`` and the app.

:func:`categorize_iter` groups a whole collection: dense features and vocabulary
(:mod:`engine.cluster.model`), vocabulary-guided pyramid-match affinities
(:mod:`engine.cluster.binned`) mixed with a global appearance kernel
(:mod:`engine.cluster.appearance`) and a pretrained network's embeddings
(:mod:`engine.cluster.semantic`), normalized cuts (:mod:`engine.cluster.partition`), feature
masks (:mod:`engine.cluster.refine`) and an SVM on the prototypes
(:mod:`engine.cluster.classify`); :class:`CategoryResult` holds everything it found.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.cluster.binned import BinsMatcher
from engine.cluster.constraints import constraint_pairs, enforce_must, relabel_by_size
from engine.cluster.fisher import fisher_view
from engine.cluster.model import CategoryModel, category_model_iter
from engine.cluster.ncut import choose_landmarks
from engine.cluster.partition import AUTO_K_MAX, discover_categories_iter
from engine.cluster.refine import refine_with_masks_iter
from engine.cluster.results import Clustering, ClusterProgress, Refinement
from engine.cluster.scenes import (
    JOIN_LINK,
    SCENES_AUTO_MAX,
    scene_probabilities_iter,
    with_scenes,
)
from engine.cluster.semantic import SEMANTIC
from engine.core.progress import run_to_end

__all__ = [
    "K_GRAPH_SIZES",
    "NYSTROM_AUTO_MIN",
    "NYSTROM_LANDMARKS",
    "CategoryResult",
    "categorize",
    "categorize_iter",
    "default_k_graph",
    "gen_items",
]


#: ``nystrom="auto"`` switches to the Nystrom approximation above this many images.
NYSTROM_AUTO_MIN = 3000
#: Landmark images of the Nystrom approximation in :func:`categorize_iter`.
NYSTROM_LANDMARKS = 500
#: Neighbour counts of the nearest-neighbour graphs whose mean relative eigengap chooses k
#: (exact mode; issue #22). One graph's largest gap moves with its size: on the mixed
#: affinities, 40 neighbours put k within 1 of the truth on 10 of 15 random 4-class
#: Caltech-101 subsets and 4 of 10 8-class ones, 15 neighbours on 7 and 3; the mean over
#: 20-35 neighbours on 11 and 5, with the best mean accuracy over the task families.
#: Groups of fewer than half the smallest graph's neighbours are left to the stability
#: check (:func:`engine.cluster.finer_stable_k`).
K_GRAPH_SIZES = (20, 25, 30, 35)


@dataclass
class CategoryResult:
    """Result of :func:`categorize_iter` (rows = ``paths``).

    Attributes
    ----------
    paths : list of Path
    labels : (n,) int64
        Final group of every image, groups numbered by decreasing size.
    k : int
    k_reason : str
        Why this number of groups, and how the images were assigned.
    flow : (n,) float64
        Within-group flow used to order members (mask-weighted when refined).
    prototypes, outliers : (n,) bool
    clustering : Clustering
        The normalized cut before refinement.
    refinement : Refinement or None
        Feature masks (aligned with the dense features of :class:`CategoryChannel`).
    classifier : engine.cluster.classify.CategoryClassifier or None
        SVM trained on the prototypes (``train_ids_`` = rows of ``paths``).
    kernel : (n, n) float64 or None
        Exact affinities (None in Nystrom mode).
    model : CategoryModel
    seconds : dict of str to float
        Wall time per stage, ``"total"``, and ``"cpu"``: CPU seconds of this process
        (feature workers excluded), which a loaded machine does not inflate.
    """

    paths: list[Any]
    labels: np.ndarray
    k: int
    k_reason: str
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    clustering: Clustering
    refinement: Refinement | None
    classifier: Any
    kernel: np.ndarray | None
    model: CategoryModel
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])


def default_k_graph(n: int) -> tuple[int, ...]:
    """Neighbours of the graphs whose mean relative eigengap chooses k: the sizes of
    :data:`K_GRAPH_SIZES` below ``n - 1``, or ``min(10, n - 2)`` for fewer images."""
    sizes = tuple(m for m in K_GRAPH_SIZES if m < n - 1)
    return sizes or (max(1, min(10, n - 2)),)


def categorize_iter(
    collection: Any,
    *,
    k: int | str = "auto",
    must: Iterable[Sequence[int]] = (),
    cannot: Iterable[Sequence[int]] = (),
    power: float | None = None,
    k_min: int = 2,
    k_max: int = AUTO_K_MAX,
    refine: bool = True,
    relabel: bool = False,
    partners: int = 8,
    prototype_percentile: float = 25.0,
    nystrom: int | str = "auto",
    fisher: bool = False,
    scenes: bool | None = None,
    jobs: int | None = None,
    cancel: Any = None,
    random_state: int = 0,
) -> Generator[ClusterProgress, None, CategoryResult]:
    """Group a collection into categories: the pipeline of ``simile cluster`` and the app.

    1. Dense multi-scale SIFT per image and a global appearance descriptor (HOG of the
       whole photo; :class:`CategoryChannel`, computed once per image and cached in the
       index; the retrieval index keeps its sparse keypoints).
    2. Vocabulary-guided pyramid match (thesis Ch. 4) over a hierarchical k-means tree of
       those features (:func:`binned_pyramid_kernel`), mixed half and half with the
       appearance kernel (:meth:`CategoryModel.kernels`), exact below
       :data:`NYSTROM_AUTO_MIN` images, else Nystrom columns of
       :data:`NYSTROM_LANDMARKS` landmarks.
    3. Normalized cuts of the mixed affinities, plus the search's probability that two
       photos show the same object or place (``scenes``), with the user's constraints
       (:func:`discover_categories_iter`; with ``fisher=True``, in exact mode, the
       consensus of their cuts and those of a second view, Fisher vectors of the same
       dense features mixed with the same appearance kernel,
       :func:`engine.cluster.fisher.fisher_view`); with ``k="auto"`` the mean relative
       eigengap (k up to ``k_max``; up to 12 where k is read from the pyramid match alone,
       or without the semantic channel) of the ``default_k_graph(n)``-nearest-neighbour
       graphs of the same affinities (Nystrom mode: of the landmarks' own block, on
       graphs of proportionally fewer neighbours,
       :func:`engine.cluster.landmark_graph_sizes`; the approximate spectrum of the
       pyramid match alone without the semantic channel; fewer than 22 photos: the
       10-nearest-neighbour graph of the pyramid match alone), replaced by a finer k
       whose groups those graphs are too large to see if cuts of random subsamples agree
       on it at least 85 % as well
       (:func:`engine.cluster.finer_stable_k`; up to ``k_max``, folders of 22-300 photos).
    4. Feature masks from explicit within-group correspondences, masked flow, prototypes
       and outliers (Sec. 9.3-9.4; :func:`refine_with_masks_iter`).
    5. An SVM on the precomputed kernel trained on the prototypes (Sec. 9.4: the
       prototypes "train a classifier"): it places the photos added later
       (:func:`engine.cluster.place_photos_iter`, ``simile classify``). With
       ``relabel=True`` it also reassigns the collection's images, as the thesis does
       (must-group constraints kept); on the dev tasks that lowered the accuracy of every
       Caltech-101 family (15 random 4-class subsets 0.635 -> 0.620, 10 8-class 0.621 ->
       0.588, 5 20-class 0.480 -> 0.446, Caltech-4 0.925 -> 0.906; ETH-80 0.517 -> 0.525),
       so the cut's groups are kept by default.

    The function is long for its signature and this docstring; its body (about 70 lines)
    is the five steps in order, with the timing and cancellation checks between them, and
    keeps step 5 inline because it updates five of the result's fields at once.

    Parameters
    ----------
    collection : engine.collection.Collection
        An indexed collection (its store writable to cache the channel, else computed in
        memory).
    k, must, cannot, power, k_min, k_max, prototype_percentile
        As :func:`discover_categories` (constraints are row indices of
        ``collection.paths()``).
    refine : bool
        Step 4 (else prototypes and flow come from the affinities).
    relabel : bool
        Step 5 reassigns the images (default: the classifier is trained, the groups kept).
    partners : int
        Group members matched per image in step 4.
    nystrom : "auto", bool or int
        Nystrom mode: ``"auto"`` above :data:`NYSTROM_AUTO_MIN` images, ``True``/``False``,
        or the number of landmarks.
    fisher : bool
        The Fisher view's consensus in step 3 (exact mode only). Off by default: it
        raised the random Caltech-101 subsets but cost Caltech-4 nine photos of 160
        (:mod:`engine.cluster.fisher` has the measurement).
    scenes : bool or None
        Step 3 cuts the affinities plus the search's same-object-or-place probabilities
        (:mod:`engine.cluster.scenes`; exact mode only; one query per photo not queried by
        an earlier grouping, remembered in the index). Where the stability check chose a
        finer k, groups they link join back (:func:`engine.cluster.scenes.join_groups`).
        The SVM of step 5 and the returned ``kernel`` keep the affinities without them, so
        photos placed later are compared as before. None (default): on for folders of up
        to :data:`engine.cluster.scenes.SCENES_AUTO_MAX` photos, where it gained or tied on
        every dev family; True: up to :data:`NYSTROM_AUTO_MIN` (on the first 1,000 and
        2,900 Caltech-101 photos the automatic k then fell from 12 and 11 to 3 and 2).
    jobs, cancel
        Processes for the features and a ``threading.Event`` that stops the run (an
        ``InterruptedError`` is raised after the finished feature chunks are saved).

    Yields
    ------
    ClusterProgress
        Stages ``features``, ``vocabulary``, ``bins``, ``affinity``, ``scenes``, ``spectrum``,
        ``discretize``, ``rank``, ``match``, ``masks``, ``classify``.

    Returns
    -------
    CategoryResult
    """
    import time

    if partners < 1:
        raise ValueError(f"partners must be >= 1, got {partners}")
    t0 = time.perf_counter()
    c0 = time.process_time()
    seconds: dict[str, float] = {}
    model = yield from category_model_iter(
        collection, jobs=jobs, cancel=cancel, random_state=random_state
    )
    t1 = time.perf_counter()
    seconds["features"] = t1 - t0
    n = len(model.paths)
    if n == 0:
        raise ValueError("there are no indexed images to group")
    if isinstance(k, int | np.integer) and int(k) > n:
        raise ValueError(f"k={k} is larger than the number of images ({n})")

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise InterruptedError("cancelled")

    must = [tuple(int(v) for v in p) for p in must]
    cannot = [tuple(int(v) for v in p) for p in cannot]
    yield ClusterProgress("affinity", 0, 1, "pyramid-match affinities")
    landmarks, K, C, C_k = _affinities(model, nystrom, must, cannot, random_state)
    seconds["affinity"] = time.perf_counter() - t1
    check_cancel()
    kw = dict(k=k, must=must, cannot=cannot, power=power, k_min=min(k_min, max(n - 1, 1)),
              k_max=max(min(k_max, n - 1), 1), prototype_percentile=prototype_percentile,
              random_state=random_state)  # fmt: skip
    if landmarks is not None:
        kw["landmarks"] = landmarks
        if model.semantic is not None:
            # k as in exact mode, among the landmarks (engine.cluster.landmark_graph_sizes)
            kw["k_graph"] = default_k_graph(n)
        elif k == "auto" and C_k is not C:
            kw["k_kernel"] = C_k
    elif n > 2:
        kw["k_graph"] = default_k_graph(n)
        if k == "auto" and C_k is not C and n - 1 <= min(K_GRAPH_SIZES):
            # (a folder too small for those graphs: k from the pyramid match's 10-nearest-
            # neighbour graph, as before them; they were chosen on folders of 79 photos
            # and more, and on 18 photos of 2 scenes the mixed affinities found 3)
            kw["k_kernel"] = C_k
    if model.semantic is not None and "k_kernel" not in kw:
        # k read from affinities with the semantic channel: their gaps above 12 are reliable
        # (engine.cluster.semantic); from the pyramid match alone (no semantic channel,
        # tiny folders) the eigengap keeps to 2..12 as it was measured
        kw["eigengap_max"] = kw["k_max"]
    t_f = time.perf_counter()
    if fisher and landmarks is None and n > 2:
        yield ClusterProgress("affinity", 0, 1, "Fisher vectors")
        try:
            kw["views"] = [fisher_view(model.channel, model.hashes, model.appearance,
                                       random_state=random_state)]  # fmt: skip
        except ValueError:  # too few features in the folder to fit it: the cut alone
            pass
        check_cancel()
    seconds["fisher"] = time.perf_counter() - t_f
    t_s = time.perf_counter()
    C_cut, scene_note = C, ""
    if scenes is None:
        scenes = n <= SCENES_AUTO_MAX
    if scenes and landmarks is None and n > 2:
        P = yield from scene_probabilities_iter(
            collection, model.paths, hashes=model.hashes, cancel=cancel
        )
        C_cut = with_scenes(C, P)
        kw["join"] = P  # (groups a finer k split from one object or place join back)
        pairs = int(np.count_nonzero(np.triu(P >= JOIN_LINK, 1)))
        scene_note = f"; with {pairs} pair(s) the search finds of the same object or place"
    seconds["scenes"] = time.perf_counter() - t_s
    t2 = time.perf_counter()
    if n == 1:
        res = Clustering(np.zeros(1, np.int64), 1, "k=1: a single image", np.ones(1),
                         np.zeros(1), np.ones(1, bool), np.zeros(1, bool))  # fmt: skip
    else:
        res = yield from discover_categories_iter(C_cut, **kw)
    seconds["ncut"] = time.perf_counter() - t2
    check_cancel()
    labels, flow = res.labels.copy(), res.flow.copy()
    protos, outl = res.prototypes.copy(), res.outliers.copy()
    reason = res.k_reason + scene_note
    if model.semantic is not None:
        reason += (
            f"; {SEMANTIC['weight']:.0%} of each affinity is how alike a network trained on "
            f"ImageNet ({SEMANTIC['model']}) finds the two photos"
        )
    refinement = None
    t3 = time.perf_counter()
    if refine and res.k >= 1 and n > 1:
        refinement = yield from _refine_iter(
            model.bins, labels, partners, prototype_percentile, random_state, check_cancel
        )
        protos, outl, flow = refinement.prototypes, refinement.outliers, refinement.flow
    seconds["refine"] = time.perf_counter() - t3
    t4 = time.perf_counter()
    from engine.cluster.classify import CategoryClassifier

    classifier = None
    K_tt = None
    train = np.flatnonzero(protos)
    if landmarks is not None:  # the SVM needs kernel columns: prototypes among landmarks
        train = np.intersect1d(train, landmarks)
    if n > 2 and np.unique(labels[train]).size >= 2:
        yield ClusterProgress("classify", 0, 1, "SVM on the prototypes")
        K_tt, rows = _training_kernels(K, C, landmarks, train, rows=relabel)
        if relabel:
            clf = CategoryClassifier(C=10.0, power=power).fit(K_tt, labels[train], ids=train)
            new = clf.predict(rows).labels.astype(np.int64)
            new[train] = labels[train]  # the training images keep their group
            new = enforce_must(new, constraint_pairs(must, n, "must"))
            moved = new != labels
            if moved.any():
                reason += f"; {int(moved.sum())} image(s) reassigned by an SVM on the prototypes"
                # members that moved are ranked after the group's own members
                flow = np.where(moved, np.min(flow) - 1.0, flow) if flow.size else flow
                outl = outl & ~moved
                protos = protos & ~moved
            labels = new
        yield ClusterProgress("classify", 1, 1, "SVM on the prototypes")
    seconds["classify"] = time.perf_counter() - t4
    # groups numbered by decreasing size (empty ones removed); the SVM learns those numbers
    order = relabel_by_size(labels)
    if K_tt is not None:  # (it places the photos added later, `simile classify`)
        classifier = CategoryClassifier(C=10.0, power=power).fit(K_tt, order[train], ids=train)
    labels = order
    seconds["total"] = time.perf_counter() - t0
    seconds["cpu"] = time.process_time() - c0  # this process (not feature workers)
    return CategoryResult(
        paths=model.paths, labels=labels, k=int(labels.max()) + 1, k_reason=reason,
        flow=np.asarray(flow, np.float64), prototypes=protos, outliers=outl, clustering=res,
        refinement=refinement, classifier=classifier, kernel=K, model=model, seconds=seconds,
    )  # fmt: skip


def _affinities(
    model: CategoryModel,
    nystrom: int | str,
    must: list[tuple[int, ...]],
    cannot: list[tuple[int, ...]],
    random_state: int,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray]:
    """Step 2 of :func:`categorize_iter`: the affinities of the n images
    (:meth:`CategoryModel.kernel`), exact or (``nystrom``) as the columns of landmark
    images.

    Returns
    -------
    landmarks : (m,) int64 or None
    K : (n, n) float64 or None
        Exact affinities (None in Nystrom mode).
    C : (n, n) or (n, m) float64
        What the normalized cut takes: ``K``, or the landmark columns.
    C_k : (n, n) or (n, m) float64
        The pyramid match alone, in ``C``'s shape: what the number of groups is read
        from in Nystrom mode (``C`` itself when the model has no appearance descriptors).
    """
    n = len(model.bins)
    use_nystrom = (n > NYSTROM_AUTO_MIN) if nystrom == "auto" else bool(nystrom)
    m_land = nystrom if isinstance(nystrom, int) and not isinstance(nystrom, bool) else None
    m_land = int(m_land or NYSTROM_LANDMARKS)
    if use_nystrom and n > m_land:
        landmarks = choose_landmarks(n, m_land, must=must, cannot=cannot,
                                     random_state=random_state)  # fmt: skip
        C_k, C = model.kernels(columns=landmarks)
        K = None
    else:
        landmarks = None
        C_k, K = model.kernels()
        C = K
    return landmarks, K, C, C_k


def _refine_iter(
    bins: list[np.ndarray],
    labels: np.ndarray,
    partners: int,
    prototype_percentile: float,
    random_state: int,
    check_cancel: Any,
) -> Generator[ClusterProgress, None, Refinement]:
    """Step 4 of :func:`categorize_iter`: feature masks from within-group correspondences
    of the binned sets (:class:`BinsMatcher`), mask-normalised flow; ``check_cancel()``
    runs before every progress item is passed on."""
    gen = refine_with_masks_iter(
        bins, labels, BinsMatcher(bins),
        max_partners=partners, prototype_percentile=prototype_percentile,
        normalize="mask", random_state=random_state,
    )  # fmt: skip
    refinement = None
    for p in gen_items(gen):
        if isinstance(p, Refinement):
            refinement = p
        else:
            check_cancel()
            yield p
    return refinement


def _training_kernels(
    K: np.ndarray | None,
    C: np.ndarray,
    landmarks: np.ndarray | None,
    train: np.ndarray,
    *,
    rows: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Kernel among the SVM's training images (t, t) and, with ``rows``, of every image
    against them (n, t; else None: only a re-assignment predicts the folder's photos), from
    the exact affinities ``K`` or the landmark columns ``C`` (``train`` are landmarks
    then)."""
    if K is not None:
        return K[np.ix_(train, train)], K[:, train] if rows else None
    pos = np.searchsorted(landmarks, train)
    return C[np.ix_(train, pos)], C[:, pos] if rows else None


def gen_items(gen: Generator[Any, None, Any]) -> Iterable[Any]:
    """Iterate a progress generator, yielding its items and finally its return value."""
    while True:
        try:
            yield next(gen)
        except StopIteration as stop:
            yield stop.value
            return


def categorize(collection: Any, **kwargs: Any) -> CategoryResult:
    """Drain :func:`categorize_iter` (same arguments)."""
    return run_to_end(categorize_iter(collection, **kwargs))
