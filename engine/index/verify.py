"""Same-object verification: explicit correspondences checked by a robust homography,
and the re-ranking of search hits by it.

- :func:`descriptor_matches` / :func:`verify_pair` -- nearest neighbours with Lowe's
  ratio test, then a robust homography (:func:`engine.index.geometry.verify`): the
  "same object" check of the ``hybrid`` method and of near-duplicates.
- :func:`verified_scores` -- the ``hybrid`` method's re-ranking: the best
  ``VERIFY_TOP`` hits whose check finds at least ``VERIFY_MIN_INLIERS`` inliers get
  ``1 + inliers / (inliers + 40)`` added to their score.
- :func:`match_pair` -- the vocabulary-guided pyramid match's explicit correspondences
  of two images (thesis 3.2.3) with their inlier mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.index.geometry import verify
from engine.index.threads import thread_map

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.store import IndexStore
    from engine.kernels.pyramid import MatchResult, PyramidMatch

__all__ = [
    "VERIFY_MIN_INLIERS",
    "VERIFY_TOP",
    "Verification",
    "descriptor_matches",
    "match_pair",
    "ranking_check",
    "verified_scores",
    "verify_pair",
]

#: Hits of the ``hybrid`` method checked geometrically.
VERIFY_TOP = 30
#: Inliers a check needs to count as the same object.
VERIFY_MIN_INLIERS = 8


def descriptor_matches(
    desc_a: np.ndarray, desc_b: np.ndarray, *, ratio: float = 0.8
) -> np.ndarray:
    """Nearest-neighbour correspondences passing Lowe's ratio test.

    Parameters
    ----------
    desc_a : (Ma, D) float32, rows of unit L2 norm (SIFT / RootSIFT)
    desc_b : (Mb, D) float32
    ratio : float
        Keep ``a_i -> b_j`` when ``d(a_i, b_j) < ratio * d(a_i, second nearest b)``.

    Returns
    -------
    pairs : (P, 2) int64
        Indices into ``desc_a`` and ``desc_b``.
    """
    ma, mb = desc_a.shape[0], desc_b.shape[0]
    if ma == 0 or mb < 2:
        return np.zeros((0, 2), np.int64)
    sim = desc_a @ desc_b.T  # cosine = 1 - d^2 / 2 for unit vectors
    ar = np.arange(ma)
    best = sim.argmax(axis=1)
    s1 = sim[ar, best].copy()
    sim[ar, best] = -np.inf
    s2 = sim.max(axis=1)
    d1 = np.maximum(2.0 - 2.0 * s1, 0.0)
    d2 = np.maximum(2.0 - 2.0 * s2, 0.0)
    keep = d1 < (ratio * ratio) * d2
    ia = np.flatnonzero(keep)
    return np.stack([ia, best[ia]], axis=1).astype(np.int64)


@dataclass(frozen=True)
class Verification:
    """Outcome of :func:`verify_pair`.

    Attributes
    ----------
    pairs : (P, 2) int64
        Putative correspondences (indices into the two feature sets).
    inliers : (P,) bool
        Pairs consistent with the fitted homography.
    n_inliers : int
    """

    pairs: np.ndarray
    inliers: np.ndarray
    n_inliers: int


def verify_pair(
    desc_a: np.ndarray,
    xy_a: np.ndarray,
    desc_b: np.ndarray,
    xy_b: np.ndarray,
    *,
    ratio: float = 0.85,
    threshold: float | None = None,
    image_size: tuple[int, int] | None = None,
) -> Verification:
    """Same-object check: ratio-test correspondences, then a robust homography.

    Parameters
    ----------
    desc_a, desc_b : (M, D) float32
    xy_a, xy_b : (M, 2) float32
    ratio : float
        Lowe ratio.
    threshold : float, optional
        Reprojection threshold in pixels; default 1.5 % of the larger side of
        ``image_size`` (at least 3 px), 6 px without a size.
    image_size : (width, height), optional
        Size of image b.

    Returns
    -------
    Verification
    """
    pairs = descriptor_matches(desc_a, desc_b, ratio=ratio)
    if threshold is None:
        threshold = max(3.0, 0.015 * max(image_size)) if image_size else 6.0
    g = verify(xy_a[pairs[:, 0]], xy_b[pairs[:, 1]], model="homography", threshold=threshold)
    n = g.n_inliers
    if n:
        # many-to-one matches inflate the count: count distinct points on both sides, and
        # require the inliers to cover some area of image b (not a collapsed cluster)
        ia, ib = pairs[g.inliers, 0], pairs[g.inliers, 1]
        n = min(np.unique(ia).size, np.unique(ib).size)
        side = max(image_size) if image_size else float(np.ptp(xy_b, axis=0).max() or 1.0)
        spread = np.ptp(xy_b[ib], axis=0).min() if ib.size else 0.0
        if spread < 0.05 * side:
            n = 0
    return Verification(pairs, g.inliers if n else np.zeros(len(pairs), bool), int(n))


def ranking_check(fa: Features, fb: Features) -> Verification:
    """The ``hybrid`` method's same-object check of query ``fa`` against hit ``fb``.

    The one check the ranking applies (:func:`verified_scores`); the "why" view shows
    its accepted correspondences, so what a person sees is what ranked the hit.

    Parameters
    ----------
    fa, fb : Features
        The query's and the hit's features (``fb.image_size`` sets the threshold).

    Returns
    -------
    Verification
        ``n_inliers >= VERIFY_MIN_INLIERS`` means the hit was verified.
    """
    return verify_pair(fa.descriptors, fa.xy, fb.descriptors, fb.xy, image_size=fb.image_size)


def verified_scores(
    feats: Features, store: IndexStore, ids: np.ndarray, scores: np.ndarray
) -> np.ndarray:
    """Re-rank hits by geometric inliers (same object): the ``hybrid`` method.

    Parameters
    ----------
    feats : Features
        The query's features.
    store : IndexStore
        Where the hits' features are read (on the calling thread).
    ids : (k,) int64
        Store ids of the hits, best first; the first ``VERIFY_TOP`` are checked.
    scores : (k,) float64
        Scores of the hits; changed in place.

    Returns
    -------
    (k,) float64
        ``scores``, where each checked hit with ``n >= VERIFY_MIN_INLIERS`` inliers has
        ``1 + n / (n + 40)`` added. A query with fewer than 4 features is not checked.
    """
    if len(feats) < 4:
        return scores
    stored = [f for _i, f in store.iter_features(ids[:VERIFY_TOP])]  # not on the threads

    def inliers(f: Features) -> int:
        return ranking_check(feats, f).n_inliers

    # each check is one BLAS product and one OpenCV fit, both without the GIL: the
    # checks run side by side, each on one BLAS thread
    with single_threaded_blas():
        counts = thread_map(inliers, stored)
    for j, n_in in enumerate(counts):
        if n_in >= VERIFY_MIN_INLIERS:
            scores[j] += 1.0 + n_in / (n_in + 40.0)
    return scores


def match_pair(pm: PyramidMatch, fa: Features, fb: Features) -> MatchResult:
    """Explicit correspondences of two images and their geometric verification.

    Parameters
    ----------
    pm : PyramidMatch
        A fitted vocabulary-guided pyramid match (the collection's).
    fa, fb : Features

    Returns
    -------
    engine.kernels.pyramid.MatchResult
        Vocabulary-guided pyramid-match score and correspondences (thesis 3.2.3), with an
        extra ``inliers`` attribute: (P,) bool, pairs consistent with a robust homography
        (threshold 1.5 % of the larger side of image b, at least 3 px; 6 px without a
        size).
    """
    res = pm.match(fa.descriptors, fb.descriptors, fa.xy, fb.xy)
    size = max(fb.image_size) if fb.image_size else 0
    thr = max(3.0, 0.015 * size) if size else 6.0
    if len(res) >= 4:
        g = verify(res.xy_a, res.xy_b, model="homography", threshold=thr)
        res.inliers = g.inliers
    else:
        res.inliers = np.zeros(len(res), bool)
    return res
