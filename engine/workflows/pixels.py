"""The pixel test of a duplicate pair: do two pictures, aligned by the homography of
their features, show the same fine detail? (:mod:`engine.workflows.duplicates` asks it
of the pairs that pass the geometric part of its same-photo rule.)"""

from __future__ import annotations

import numpy as np

__all__ = ["PIXEL_PATCH", "PIXEL_SIDE", "pixel_agreement"]

#: Tile side (pixels) of :func:`pixel_agreement`.
PIXEL_PATCH = 8
#: Longest side (pixels) pictures are loaded at for :func:`pixel_agreement`.
PIXEL_SIDE = 1024


def pixel_agreement(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
    *,
    patch: int = PIXEL_PATCH,
) -> float:
    """How well the fine detail of two aligned pictures agrees.

    The picture with more pixels is shrunk to about the other's scale and warped onto
    it; both are high-passed (minus a Gaussian blur of sigma 2 px) and compared by
    normalised cross-correlation in ``patch`` x ``patch`` tiles wholly inside the
    overlap; the result is the median over the more textured half of the tiles.

    Parameters
    ----------
    gray_a, gray_b : (H, W) float32
        The two pictures in gray levels, any size.
    homography : (3, 3) float64
        Maps positions in a picture of ``size_a`` to positions in one of ``size_b``.
    size_a, size_b : (width, height)
        The sizes ``homography`` refers to (e.g. ``Features.image_size``).
    patch : int
        Tile side in pixels.

    Returns
    -------
    float
        In [-1, 1]; ``nan`` when fewer than 4 textured tiles overlap.
    """
    import cv2

    ga, gb = np.asarray(gray_a, np.float32), np.asarray(gray_b, np.float32)
    sa, sb = ga.shape[1] / size_a[0], gb.shape[1] / size_b[0]
    m = np.diag([sb, sb, 1.0]) @ homography @ np.diag([1 / sa, 1 / sa, 1.0])  # a -> b pixels
    if ga.size < gb.size:
        ga, gb, m = gb, ga, np.linalg.inv(m)
    scale = abs(np.linalg.det(m[:2, :2])) ** 0.5
    if 0 < scale < 0.9:  # shrink first: no aliasing in the warp
        ga = cv2.resize(ga, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        m = m @ np.diag([1 / scale, 1 / scale, 1.0])
    h, w = gb.shape
    warped = cv2.warpPerspective(ga, m, (w, h), flags=cv2.INTER_LINEAR)
    inside = cv2.warpPerspective(np.ones_like(ga), m, (w, h), flags=cv2.INTER_NEAREST)
    inside = cv2.erode((inside > 0.5).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    hp_a = warped - cv2.GaussianBlur(warped, (0, 0), 2.0)
    hp_b = gb - cv2.GaussianBlur(gb, (0, 0), 2.0)
    th, tw = h // patch, w // patch
    if th == 0 or tw == 0:
        return float("nan")

    def tiles(x: np.ndarray) -> np.ndarray:
        x = x[: th * patch, : tw * patch].reshape(th, patch, tw, patch)
        return x.transpose(0, 2, 1, 3).reshape(th * tw, patch * patch)

    ok = tiles(inside.astype(np.float32)).min(axis=1) > 0
    u, v = tiles(hp_a)[ok], tiles(hp_b)[ok]
    u = u - u.mean(axis=1, keepdims=True)
    v = v - v.mean(axis=1, keepdims=True)
    su, sv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
    texture = np.minimum(su, sv)
    good = texture > 1e-3
    if good.sum() < 4:
        return float("nan")
    ncc = (u * v).sum(axis=1)[good] / (su * sv)[good]
    textured = texture[good] >= np.median(texture[good])
    return float(np.median(ncc[textured]))
