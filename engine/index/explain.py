"""Why a search hit matches its query: the ranking's own same-object check, shown.

The ``hybrid`` method ranks first the hits that pass its same-object check
(:func:`engine.index.verify.ranking_check`: nearest neighbours with Lowe's ratio test,
then a robust geometric fit; :func:`engine.index.verify.verified_scores` gives a hit the
check verifies its bonus). :func:`explain_pair` runs *that* check -- the function itself,
never a copy, so an explanation follows whatever the ranking does -- on the features the
ranking uses, and keeps what a person needs to see it: the putative correspondences with
their positions in both images, which of them the check accepted, and whether they are
enough for the ranking to call the pair the same object or place. It also keeps the
vocabulary-guided pyramid match's explicit correspondences (Grauman's thesis, Sec.
3.2.3; :func:`engine.index.verify.match_pair`), the looser "looks alike" evidence that
the ``vocabulary`` score counts.

:meth:`engine.collection.Collection.explain` picks the features as the ranking does (the
query's from :meth:`~engine.index.searcher.Searcher.query_features`, or
:meth:`~engine.collection.Collection.region_features` for a search by region; the hit's
stored ones) and adds the score the ``hybrid`` ranking gives the pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.index import verify as _verify

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.verify import Verification
    from engine.kernels.pyramid import MatchResult, PyramidMatch

__all__ = ["Explanation", "explain_pair"]


@dataclass(frozen=True)
class Explanation:
    """What the ranking's same-object check found between a query and a hit.

    Positions are in the pixels of the images the features were extracted from
    (``features_a.image_size``, ``features_b.image_size``: the loaded, possibly
    downsized, photos; ``(0, 0)`` the centre of the top-left pixel).

    Attributes
    ----------
    features_a, features_b : Features
        The query's features (the region's, for a search by region) and the hit's, as the
        ranking checked them.
    check : Verification
        :func:`engine.index.verify.ranking_check`'s result, as it returned it.
    pairs : (P, 2) int64
        The check's putative correspondences (indices into ``features_a`` and
        ``features_b``): ``check.pairs``.
    xy_a, xy_b : (P, 2) float32
        Their positions in image a and image b.
    similarity : (P,) float32
        Cosine similarity of the paired descriptors, in [-1, 1] (1: identical); the
        strength a view draws them by.
    inliers : (P,) bool
        The pairs the check accepted (consistent with one geometric fit): ``check.inliers``.
    n_inliers : int
        The check's count of accepted correspondences (distinct points; what the ranking
        compares with ``min_inliers``): ``check.n_inliers``.
    min_inliers : int
        :data:`engine.index.verify.VERIFY_MIN_INLIERS` when the check ran.
    pyramid : MatchResult or None
        The vocabulary-guided pyramid match's correspondences (thesis 3.2.3) with their
        ``inliers`` mask (:func:`engine.index.verify.match_pair`); None without a pyramid.
    score : float or None
        The ``hybrid`` score of the hit for this query, as the ranking computes it when it
        checks the hit (None: the hit is not in the collection).
    probability : float or None
        ``score``'s calibrated probability of showing the same object or place
        (:func:`engine.index.calibration.hit_probability`).
    label : str
        ``score``'s label (:func:`engine.index.calibration.hit_label`); "" without a score.
    """

    features_a: Features
    features_b: Features
    check: Verification
    pairs: np.ndarray
    xy_a: np.ndarray
    xy_b: np.ndarray
    similarity: np.ndarray
    inliers: np.ndarray
    n_inliers: int
    min_inliers: int
    pyramid: MatchResult | None = None
    score: float | None = None
    probability: float | None = None
    label: str = ""

    @property
    def verified(self) -> bool:
        """Whether the check calls the pair the same object or place (``check.verified``):
        the ``hybrid`` ranking's bonus."""
        return bool(self.check.verified)

    @property
    def accepted(self) -> np.ndarray:
        """(A,) int64 indices into :attr:`pairs` of the accepted correspondences."""
        return np.flatnonzero(self.inliers)

    def __len__(self) -> int:
        return int(self.pairs.shape[0])


def explain_pair(fa: Features, fb: Features, pm: PyramidMatch | None = None) -> Explanation:
    """Run the ranking's same-object check on query ``fa`` and hit ``fb`` and keep its
    correspondences.

    Parameters
    ----------
    fa : Features
        The query's features, as the ranking checks them (``descriptors (Ma, D) float32``,
        ``xy (Ma, 2) float32``).
    fb : Features
        The hit's stored features (``fb.image_size`` sets the check's threshold).
    pm : PyramidMatch, optional
        The collection's fitted vocabulary-guided pyramid match: its correspondences
        (thesis 3.2.3) are added as :attr:`Explanation.pyramid`.

    Returns
    -------
    Explanation
        ``score``, ``probability`` and ``label`` unset (the collection adds them).

    Notes
    -----
    The check is :func:`engine.index.verify.ranking_check`, looked up when called: the
    accepted pairs are exactly the ones the ranking counted.
    """
    check = _verify.ranking_check(fa, fb)
    pairs = np.asarray(check.pairs, dtype=np.int64).reshape(-1, 2)
    inliers = np.asarray(check.inliers, dtype=bool).reshape(-1)
    if inliers.shape[0] != pairs.shape[0]:
        raise ValueError(
            f"ranking_check returned {inliers.shape[0]} inlier flags for {pairs.shape[0]} pairs"
        )
    ia, ib = pairs[:, 0], pairs[:, 1]
    da, db = fa.descriptors[ia], fb.descriptors[ib]
    if da.shape[1] == db.shape[1]:
        dot = np.einsum("ij,ij->i", da, db, dtype=np.float64)
        norm = np.linalg.norm(da, axis=1) * np.linalg.norm(db, axis=1)
        sim = np.clip(dot / np.where(norm > 0, norm, 1.0), -1.0, 1.0)
    else:  # (descriptors of another kind: no similarity to draw by)
        sim = np.ones(len(pairs), np.float32)
    pyramid = _verify.match_pair(pm, fa, fb) if pm is not None else None
    return Explanation(
        features_a=fa,
        features_b=fb,
        check=check,
        pairs=pairs,
        xy_a=np.asarray(fa.xy[ia], np.float32).reshape(-1, 2),
        xy_b=np.asarray(fb.xy[ib], np.float32).reshape(-1, 2),
        similarity=np.asarray(sim, np.float32),
        inliers=inliers,
        n_inliers=int(check.n_inliers),
        min_inliers=int(_verify.VERIFY_MIN_INLIERS),
        pyramid=pyramid,
    )
