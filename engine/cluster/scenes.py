"""Same object or place: the search's verified pairs as a channel of the grouping (#22).

The grouping's affinities (dense pyramid match and a global HOG, :mod:`engine.cluster.model`)
compare what kind of thing a photo shows; the search (:meth:`engine.collection.Collection.query`,
``hybrid``: pyramid-match candidates checked by epipolar geometry) knows whether two photos
show the very same object or place, with a calibrated probability
(:func:`engine.index.calibration.hit_probability`). A photographer's folder is mostly the
second kind: scenes of a trip, a few photos each. :func:`scene_probabilities_iter` queries
every photo and keeps, for each pair, the larger of the two directions' probabilities,
``P_ij = max(p(j | i), p(i | j))`` (0 where neither query returned the other among its
``top`` hits); :func:`with_scenes` adds it to the affinities,

    ``C' = C + w * max(C) * P``,

so that a pair the search is sure of gains ``w`` of the strongest affinity. Where the
stability check chose a finer k than the eigengap's, :func:`join_groups` moves back the
photos such a finer cut split from their object or place.

``w = 0.15`` was screened on the cut alone (issue #22): every ``w`` in 0.1-0.25 gained or
tied on every dev family, and at ``w = 0.35`` Caltech-4 fell from 0.931 to 0.819 (its
near-duplicate faces and cars formed cliques that took over the cut). As constraints
instead (``must`` pairs at ``P >= 0.7``) the same pairs lowered Caltech-4 to 0.87 and
ETH-80 to 0.39. End to end (``quality.py``; k given / automatic): Holidays 10 scenes 0.758
/ 0.646 -> 0.824 / 0.822, UKBench 12 objects 0.946 -> 0.979, 4 random Caltech-101 classes
0.610 / 0.578 -> 0.620 / 0.585, 20 classes 0.478 / 0.254 -> 0.488 / 0.308, Caltech-4 0.925
-> 0.931, ETH-80 unchanged; no family got worse (the README, "Grouping", has the table with
the finer k and the join). It costs one query per photo (15-60 ms each), remembered in the
index by content (:mod:`engine.cluster.scene_cache`), so a folder grouped again queries
only its new photos. On by default since 2026-11-28 in folders of up to
:data:`SCENES_AUTO_MAX` photos (``simile cluster --no-scenes`` and
``categorize(scenes=False)`` leave it out, ``--scenes`` forces it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from engine.cluster.results import ClusterProgress
from engine.cluster.scene_cache import RememberedScenes, scene_keys

__all__ = [
    "JOIN_LINK",
    "JOIN_THRESHOLD",
    "SCENES_AUTO_MAX",
    "SCENE_TOP",
    "SCENE_WEIGHT",
    "join_groups",
    "scene_probabilities_iter",
    "with_scenes",
]

#: Hits per query kept as pairs.
SCENE_TOP = 30
#: ``w`` of :func:`with_scenes`: the middle of the range 0.1-0.25 that gained or tied on
#: every dev family (the module docstring).
SCENE_WEIGHT = 0.15
#: Largest folder whose grouping uses the pairs by default (``scenes=None``). The dev
#: tasks that gained reach 557 photos (20 Caltech-101 classes: 0.478 / 0.254 -> 0.488 /
#: 0.308). On the first 1,000 and 2,900 photos of Caltech-101 dev (32 and 96 classes) they
#: cost 34 s and 133 s the first time (``tests/benchmarks/bench_scene_pairs.py``) and
#: lowered the automatic k from 12 and 11 to 3 and 2 (NMI 0.412 -> 0.142, 0.259 ->
#: 0.082); choosing k on the affinities without them kept those k but cost the small
#: folders (automatic k: 10 Holidays scenes 0.841 -> 0.739, 12 UKBench objects 0.979 ->
#: 0.971, 4 draws of 20 UKBench objects 0.978 -> 0.953), so the pairs stop at this size.
SCENES_AUTO_MAX = 600
#: Probability with which a photo must be paired with one of the group it moves to
#: (:func:`join_groups`; that of the pairs counted in ``k_reason``).
JOIN_LINK = 0.5
#: Mean same-scene probability between two groups that :func:`join_groups` joins: the
#: middle of 0.1-0.4, every value of which gained on the four families of small subjects
#: (the function's docstring).
JOIN_THRESHOLD = 0.25


def scene_probabilities_iter(
    collection: Any,
    paths: Sequence[Any],
    *,
    hashes: Sequence[str] | None = None,
    top: int = SCENE_TOP,
    cancel: Any = None,
) -> Generator[ClusterProgress, None, np.ndarray]:
    """The probability that two photos show the same object or place, from the search.

    Every photo of ``paths`` (indexed photos of ``collection``, whose stored features the
    query uses) queries the collection (``hybrid``, ``top`` hits); ``P[i, j]`` is the
    larger calibrated probability of the two directions (0 where neither query returned
    the other). A photo whose query fails (an unreadable file) keeps a row of zeros. With
    ``hashes``, the queries are remembered in the index by content
    (:mod:`engine.cluster.scene_cache`): a photo queried by an earlier grouping is not
    queried again, and the queries finished before a cancel are kept.

    Parameters
    ----------
    collection : engine.collection.Collection
    paths : sequence of path-like, length n
        The rows, as ``collection.paths()`` names them.
    hashes : sequence of str, length n, optional
        Content key of every row (:func:`engine.cluster.channel.collection_rows`); None
        remembers nothing.
    top : int
        Hits per query.
    cancel : threading.Event, optional
        Stops the run between queries (``InterruptedError``).

    Yields
    ------
    ClusterProgress
        Stage ``"scenes"``.

    Returns
    -------
    (n, n) float64
        Symmetric, zero diagonal, values in [0, 1].
    """
    from engine.index.calibration import CALIBRATION
    from engine.io.imageio import ImageLoadError

    n = len(paths)
    settings = (float(top), *CALIBRATION["hybrid"])
    if hashes is None:
        keys, cache = scene_keys(f"path:{p}" for p in paths), RememberedScenes(None, settings)
    else:
        if len(hashes) != n:
            raise ValueError(f"hashes must name the {n} paths, got {len(hashes)}")
        store = getattr(collection, "store", None)
        index_dir = getattr(store, "index_dir", None)
        writable = not getattr(store, "readonly", True)
        keys, cache = scene_keys(hashes), RememberedScenes.load(index_dir, settings,
                                                                writable=writable)  # fmt: skip
    row = {str(p): i for i, p in enumerate(paths)}
    todo = np.flatnonzero(~cache.known(keys))
    k = int(min(top, max(n - 1, 1)))
    note = "same object or place: the search's pairs"
    try:
        for done, i in enumerate(todo.tolist(), 1):
            if cancel is not None and cancel.is_set():
                raise InterruptedError("cancelled")
            try:
                hits = collection.query(paths[i], method="hybrid", top=k)
            except (ImageLoadError, LookupError, ValueError, OSError):
                hits = None  # (not remembered: asked again next time)
            if hits is not None:
                found = [(row.get(str(h.path)), h.probability) for h in hits]
                found = [(j, p) for j, p in found if j is not None and j != i and p is not None]
                cache.add(keys[i], keys[[j for j, _ in found]], [p for _, p in found])
            if done % 64 == 0:
                cache.save(keys)
            if done % 16 == 0 or done == todo.size:
                yield ClusterProgress("scenes", done, int(todo.size), note)
    finally:
        if todo.size or not np.isin(cache.queried, keys).all():
            cache.save(keys)  # (also when photos left the folder: their pairs are dropped)
    if not todo.size:
        yield ClusterProgress("scenes", 1, 1, note + " (remembered)")
    P = cache.matrix(keys)
    return np.maximum(P, P.T)


def with_scenes(C: np.ndarray, P: np.ndarray, weight: float = SCENE_WEIGHT) -> np.ndarray:
    """``C + weight * max(C) * P`` (module docstring): (n, n) affinities ``C`` and same-scene
    probabilities ``P`` of the same rows, float64."""
    C = np.asarray(C, np.float64)
    P = np.asarray(P, np.float64)
    if C.shape != P.shape or C.ndim != 2:
        raise ValueError(f"P must have the affinities' shape {C.shape}, got {P.shape}")
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    return C + float(weight) * float(C.max(initial=0.0)) * P


def join_groups(
    labels: np.ndarray,
    P: np.ndarray,
    threshold: float = JOIN_THRESHOLD,
    cannot: np.ndarray | None = None,
    link: float = JOIN_LINK,
) -> tuple[np.ndarray, int, int]:
    """Join groups whose photos the search finds show the same object or place.

    Average linkage on the same-scene probabilities: while two groups ``A, B`` have
    ``L(A, B) = sum_{i in A, j in B} P_ij / (|A| |B|) >= threshold``, the pair of highest
    ``L`` is joined (never two groups a cannot-group pair spans): the photos of the smaller
    group ``B`` that the search pairs with a photo of ``A`` (``max_{j in A} P_ij >= link``)
    move to ``A``; the others stay as their own group (all move when none is paired). So a
    leftover pair of two unrelated photos gives its photo of ``A``'s subject to ``A`` and
    keeps the other apart, instead of bringing it along (the first form of this function,
    which joined whole groups: a photo of books ended up with a toy box).

    :func:`engine.cluster.discover_categories_iter` applies it only where the stability
    check (:func:`engine.cluster.finer_stable_k`) chose a k finer than the eigengap's: the
    stability of cuts rises to a plateau past the true k (an object of 4 photos cut 2 + 2
    the same way by every subsample), and its most stable k over-split folders of many
    small subjects. Measured on the pipeline's own affinities and pairs (issue #22, mean
    accuracy with automatic k, without -> with at ``threshold = 0.25``): 10 Holidays scenes
    (5 draws) 0.810 -> 0.841, 18 Holidays scenes (4) 0.845 -> 0.902, 12 UKBench objects (5)
    0.967 -> 0.979, 20 UKBench objects (3) 0.854 -> 0.950 joining whole groups; every
    threshold in 0.1-0.4 gained on all four. Moving only the paired photos then gave 0.855,
    0.902, 0.979 and 0.954 (NMI higher on all four), the same for every ``link`` in
    0.3-0.7. The Caltech-101 and ETH-80 tasks never reach it (their k is the
    eigengap's); joining there as well would bring back what hard must-links of the same
    pairs did to Caltech-4 (near-duplicate faces and cars made into one group).

    Parameters
    ----------
    labels : (n,) int
    P : (n, n) float
        Symmetric probabilities (:func:`scene_probabilities_iter`).
    threshold : float
        Smallest mean probability that joins two groups.
    cannot : (m, 2) int, optional
        Pairs of rows that must stay in different groups.
    link : float
        Probability with which a photo of ``B`` must be paired with one of ``A`` to move.

    Returns
    -------
    labels : (n,) int64
        Groups numbered ``0..k'-1`` in order of first appearance of their old labels.
    joined : int
        Groups joined into others entirely (``k - k'``).
    moved : int
        Photos moved to another group.
    """
    labels = np.unique(np.asarray(labels), return_inverse=True)[1].astype(np.int64)
    P = np.asarray(P, np.float64)
    n = labels.size
    if P.shape != (n, n):
        raise ValueError(f"P must be ({n}, {n}), got {P.shape}")
    cannot = np.zeros((0, 2), np.int64) if cannot is None else np.asarray(cannot, np.int64)
    joined = moved = 0
    while True:
        k = int(labels.max(initial=-1)) + 1
        if k < 2:
            break
        H = np.zeros((n, k))
        H[np.arange(n), labels] = 1.0
        size = H.sum(axis=0)
        L = (H.T @ P @ H) / np.outer(size, size)
        np.fill_diagonal(L, -np.inf)
        if cannot.size:
            a, b = labels[cannot[:, 0]], labels[cannot[:, 1]]
            L[a, b] = L[b, a] = -np.inf
        a, b = np.unravel_index(int(np.argmax(L)), L.shape)
        if not L[a, b] >= threshold:
            break
        if (size[b], -b) > (size[a], -a):  # (b: the smaller group, or the later of two)
            a, b = b, a
        in_a, in_b = np.flatnonzero(labels == a), np.flatnonzero(labels == b)
        go = in_b[P[np.ix_(in_b, in_a)].max(axis=1) >= link]
        if go.size in (0, in_b.size):  # the whole group
            labels[in_b] = a
            labels[labels > b] -= 1
            joined += 1
            moved += in_b.size
        else:
            labels[go] = a
            moved += go.size
    return labels, joined, moved
