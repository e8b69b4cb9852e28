"""Geometric verification of point correspondences ("is this the same thing?").

Given putative correspondences between two images (from the explicit pyramid-match
correspondences, thesis Sec. 3.2.3, or from descriptor nearest neighbours), a robust
fit of a homography or a similarity / affine transform separates the geometrically
consistent pairs (inliers) from accidental ones.  The inlier count is the standard
re-ranking signal for same-object / same-place retrieval.

Too few correspondences (or a degenerate configuration) is a *result* — no model,
no inliers — never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.core.validate import check_choice, check_positive

__all__ = ["GeometryResult", "verify"]

MODELS = ("homography", "affine", "similarity", "fundamental")
_MIN_POINTS = {"homography": 4, "affine": 3, "similarity": 2, "fundamental": 8}
_ROBUST = getattr(cv2, "USAC_MAGSAC", cv2.RANSAC)


@dataclass(frozen=True)
class GeometryResult:
    """Outcome of :func:`verify`.

    Attributes
    ----------
    inliers : (P,) bool
        Correspondences consistent with the fitted model.
    n_inliers : int
        ``inliers.sum()``, 0 when no model was found.
    model : (3, 3) float64 or None
        Transform mapping ``xy_a`` to ``xy_b`` in homogeneous coordinates
        (affine models have last row ``[0, 0, 1]``; for ``"fundamental"`` the matrix
        ``F`` with ``[x_b, 1] F [x_a, 1]^T = 0``), None when none was found.
    kind : str
        The model family that was fitted.
    """

    inliers: np.ndarray
    n_inliers: int
    model: np.ndarray | None
    kind: str

    def __bool__(self) -> bool:
        return self.model is not None


def _none(p: int, kind: str) -> GeometryResult:
    return GeometryResult(np.zeros(p, dtype=bool), 0, None, kind)


def verify(
    xy_a: np.ndarray,
    xy_b: np.ndarray,
    *,
    model: str = "homography",
    threshold: float = 6.0,
    confidence: float = 0.995,
    max_iters: int = 2000,
    min_inliers: int | None = None,
    max_scale: float = 8.0,
    random_state: int = 0,
) -> GeometryResult:
    """Fit a transform to correspondences ``xy_a[i] <-> xy_b[i]`` robustly.

    Uses OpenCV's ``findHomography`` with ``USAC_MAGSAC`` (RANSAC on builds without
    USAC) for ``model="homography"``, ``estimateAffine2D`` for ``"affine"``,
    ``estimateAffinePartial2D`` (rotation, uniform scale, translation) for
    ``"similarity"``, and ``findFundamentalMat`` with ``USAC_MAGSAC`` for
    ``"fundamental"``: the epipolar geometry of two views of a 3-D scene (Hartley &
    Zisserman, ch. 9), which a homography fits only for a plane or a rotating camera.

    Parameters
    ----------
    xy_a, xy_b : (P, 2) float
        Pixel coordinates of the matched points in image a and image b.
    model : {"homography", "affine", "similarity", "fundamental"}
        Transform family.  Homography suits planar scenes and rotations of the camera;
        similarity is the most robust with few matches; fundamental suits any rigid
        scene seen from two places (an inlier only has to lie near its epipolar line, so
        it needs more inliers to mean as much).
    threshold : float
        Maximum reprojection error in pixels for an inlier (for ``"fundamental"``: the
        distance to the epipolar line).
    confidence : float
        RANSAC confidence in ``(0, 1)``.
    max_iters : int
        RANSAC iteration cap.
    min_inliers : int, optional
        Fewer inliers than this count as "no model" (default: the minimal sample size
        plus 2, so a model is supported by more points than it needs).
    max_scale : float
        Fits whose local area change at an inlier exceeds ``max_scale**2`` (or below its
        inverse), reflections and perspective folds are rejected as degenerate (not
        for ``"fundamental"``, which maps points to lines).
    random_state : int
        Seeds OpenCV's RNG so results are reproducible.

    Returns
    -------
    GeometryResult

    Raises
    ------
    ValueError
        For mismatched shapes or an unknown ``model``.
    """
    check_choice(model, "model", MODELS)
    check_positive(threshold, "threshold")
    a = np.asarray(xy_a, dtype=np.float32)
    b = np.asarray(xy_b, dtype=np.float32)
    if a.ndim != 2 or a.shape[1:] != (2,) or b.shape != a.shape:
        raise ValueError(f"xy_a and xy_b must both have shape (P, 2), got {a.shape} and {b.shape}")
    p = a.shape[0]
    need = _MIN_POINTS[model]
    floor = need + 2 if min_inliers is None else int(min_inliers)
    if p < max(need, floor) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return _none(p, model)
    # Degenerate: all points (nearly) coincide in either image.
    if np.ptp(a, axis=0).max() < 1e-3 or np.ptp(b, axis=0).max() < 1e-3:
        return _none(p, model)
    cv2.setRNGSeed(int(random_state))
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    try:
        if model == "homography":
            m, mask = cv2.findHomography(
                a, b, _ROBUST, threshold, maxIters=max_iters, confidence=confidence
            )
        elif model == "fundamental":
            m, mask = cv2.findFundamentalMat(a, b, _ROBUST, threshold, confidence, max_iters)
        else:
            fn = cv2.estimateAffine2D if model == "affine" else cv2.estimateAffinePartial2D
            m, mask = fn(
                a,
                b,
                method=cv2.RANSAC,
                ransacReprojThreshold=threshold,
                maxIters=max_iters,
                confidence=confidence,
            )
    except cv2.error:
        return _none(p, model)
    if m is None or mask is None:
        return _none(p, model)
    inliers = mask.ravel().astype(bool)
    n = int(inliers.sum())
    if n < floor or not np.isfinite(m).all():
        return _none(p, model)
    if model == "fundamental":  # (several solutions stacked: not one geometry)
        if m.shape != (3, 3):
            return _none(p, model)
        return GeometryResult(inliers, n, np.asarray(m, dtype=np.float64), model)
    if m.shape == (2, 3):
        m = np.vstack([m, [0.0, 0.0, 1.0]])
    m = np.asarray(m, dtype=np.float64)
    if not _plausible(m, a[inliers], max_scale):
        return _none(p, model)
    return GeometryResult(inliers, n, m, model)


def _plausible(m: np.ndarray, pts: np.ndarray, max_scale: float) -> bool:
    """Reject degenerate fits: a reflection, an extreme scale change, or a perspective
    that folds the inliers' own region (the local Jacobian must keep a positive
    determinant within ``[1 / max_scale**2, max_scale**2]`` at every inlier)."""
    if abs(m[2, 2]) < 1e-12:
        return False
    m = m / m[2, 2]
    x, y = pts[:, 0].astype(np.float64), pts[:, 1].astype(np.float64)
    w = m[2, 0] * x + m[2, 1] * y + 1.0
    if (w <= 1e-6).any():
        return False
    # det of the Jacobian of the projective map at each point = det(H) / w^3
    det = np.linalg.det(m) / w**3
    lo, hi = 1.0 / max_scale**2, max_scale**2
    return bool(((det > lo) & (det < hi)).all())
