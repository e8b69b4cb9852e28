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

so that a pair the search is sure of gains ``w`` of the strongest affinity.

Measured (issue #22; the cut alone on the pipeline's own affinities, mean accuracy with k
given / automatic; ``w = 0`` is the default pipeline): 10 Holidays scenes (5 draws) 0.758 /
0.646 -> 0.824 / 0.822 at ``w = 0.15``, 12 UKBench objects 0.946 -> 0.979, Caltech-4 0.925 ->
0.931, 5 random 4-class Caltech-101 subsets 0.610 / 0.578 -> 0.620 / 0.585, 3 8-class ones
0.626 / 0.635 -> 0.627 / 0.632, ETH-80 unchanged; gains or ties for every ``w`` in 0.1-0.25,
but at ``w = 0.35`` Caltech-4 fell to 0.819 (its near-duplicate faces and cars formed
cliques that took over the cut). As constraints instead (``must`` pairs at ``P >= 0.7``) the
same pairs lowered Caltech-4 to 0.87 and ETH-80 to 0.39. It costs one query per photo
(15-60 ms each), remembered in the index by content (:mod:`engine.cluster.scene_cache`), so
a folder grouped again queries only its new photos; on by default since 2026-11-28
(``simile cluster --no-scenes`` and ``categorize(scenes=False)`` leave it out). End to end
(``quality.py``, with the masks and the classifier; k given / automatic): Holidays 10
scenes 0.758 / 0.646 -> 0.824 / 0.822, UKBench 12 objects 0.946 -> 0.979, 4 random
Caltech-101 classes 0.610 / 0.578 -> 0.620 / 0.585, 20 classes 0.478 / 0.254 -> 0.488 /
0.308, Caltech-4 0.925 -> 0.931, ETH-80 unchanged; no family got worse.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from engine.cluster.results import ClusterProgress
from engine.cluster.scene_cache import RememberedScenes, scene_keys

__all__ = ["SCENE_TOP", "SCENE_WEIGHT", "scene_probabilities_iter", "with_scenes"]

#: Hits per query kept as pairs.
SCENE_TOP = 30
#: ``w`` of :func:`with_scenes`: the middle of the range 0.1-0.25 that gained or tied on
#: every dev family (the module docstring).
SCENE_WEIGHT = 0.15


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
        keys, cache = scene_keys(hashes), RememberedScenes.load(index_dir, settings)
        if getattr(store, "readonly", True):
            cache.path = None  # (read, never written)
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
