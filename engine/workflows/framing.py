"""A second shot zoomed in on a scene, told from a cut of a photo (the duplicate pixel
test, :func:`engine.workflows.pixels.pixel_evidence`, asks it of a pair where one
picture lies within the other).

A copy is the photo or a part of it, resampled: it never holds finer detail than the
photo it was made from. When the picture that shows more pixels per unit of the scene
(the finer one) shows only a part of what the other shows, a copy would be that part
cut out and enlarged, and an enlargement adds no detail: its fine detail is what the
coarser picture's, enlarged the same way, has. A second shot taken from the same spot
with a longer focal length (or a step closer) is sharp at its own scale: its detail
there is several times what the coarser picture, enlarged, can show (measured on
``tests/benchmarks/bench_duplicates.py``'s 75-scene draw: 2.1-18 times for such shots
of Holidays scenes, whose pixel detail otherwise agrees at up to 0.97).

Not told: two copies of one photo, one cut from the full-size original and one resized
from it, compared with each other without the original (each is still grouped with
the original when it is there).

:func:`frame_offset` tells the other side: a copy edited in place (blurred, re-toned,
resized or turned by quarter turns as a whole) keeps its frame, so its corners land on
the other picture's corners; a second shot, even from a hand held still, lands some
pixels off.
"""

from __future__ import annotations

import numpy as np

from engine.core.arrays import median_of

__all__ = [
    "ZOOM_DETAIL",
    "ZOOM_MAGNIFICATION",
    "ZOOM_OUTSIDE",
    "frame_corners",
    "frame_offset",
    "frame_residual",
    "frame_share",
    "inside_frame",
    "map_points",
    "zoomed_shot",
]

#: Least magnification (finer picture's pixels per pixel of the coarser one, each side)
#: of a zoomed-in shot.
ZOOM_MAGNIFICATION = 1.3
#: Least share of the coarser picture lying outside the finer one: the finer one shows
#: clearly less of the scene (a copy resized as a whole lies within it all but for a
#: border of a pixel or two).
ZOOM_OUTSIDE = 0.2
#: Least ratio of the finer picture's fine detail (energy) to that of the coarser picture
#: enlarged onto it: detail an enlargement cannot make.
ZOOM_DETAIL = 2.0


def frame_offset(
    homography: np.ndarray, size_a: tuple[int, int], size_b: tuple[int, int]
) -> float:
    """How far the frame of a picture of ``size_a`` lands from the frame of one of
    ``size_b`` under ``homography``: the largest distance of a corner from its partner,
    for the best of the four quarter turns, in pixels of the smaller picture.

    About the feature fit's own error (a pixel or two at the corners) for a whole
    picture kept in its frame: edited in place, resized, turned by quarter turns; tens
    of pixels or more for a cut or another shot.

    Parameters
    ----------
    homography : (3, 3) float64
        Maps positions in a picture of ``size_a`` to positions in one of ``size_b``.
    size_a, size_b : (width, height)

    Returns
    -------
    float
        ``inf`` when a corner maps to infinity or behind the picture.
    """
    (wa, ha), (wb, hb) = size_a, size_b
    ca, cb = frame_corners(wa, ha), frame_corners(wb, hb)
    q = ca @ homography[:2, :2].T + homography[:2, 2]
    z = ca @ homography[2, :2] + homography[2, 2]
    if not (z > 0).all():
        return float("inf")
    q = q / z[:, None]
    # (a quarter turn maps each corner onto the next one round the frame: turn k puts
    # corner i on cb[i - k], np.roll(cb, k); the four turns' distances at once, the
    # same numbers as np.linalg.norm's sqrt(dx * dx + dy * dy))
    d = q - cb[_TURNS]  # (4 turns, 4 corners, 2)
    d *= d
    off = float(np.sqrt(d[..., 0] + d[..., 1]).max(axis=1).min())
    return off * min(1.0, max(wa, ha) / max(wb, hb, 1))


def frame_residual(
    xy_a: np.ndarray, xy_b: np.ndarray, size_a: tuple[int, int], size_b: tuple[int, int]
) -> float:
    """How well the map of a whole frame onto the other (a resize, best quarter turn)
    explains matched points: their median distance from where it puts them, in pixels of
    the smaller picture.

    :func:`frame_offset` judges the frame by the corners of a fitted homography, which
    a fit to a dozen features can put several pixels off (a blurred copy of a dusk photo:
    12-31 features, corners 6-13 px off, every feature within a pixel of its place in the
    same frame). This asks the points themselves.

    Parameters
    ----------
    xy_a, xy_b : (P, 2) float
        Matched positions in a picture of ``size_a`` and one of ``size_b``.
    size_a, size_b : (width, height)

    Returns
    -------
    float
        ``inf`` without points.
    """
    if len(xy_a) == 0:
        return float("inf")
    (wa, ha), (wb, hb) = size_a, size_b
    ca, cb = frame_corners(wa, ha), frame_corners(wb, hb)
    pa, pb = np.asarray(xy_a, np.float64), np.asarray(xy_b, np.float64)
    # (corner i of a onto corner turn[i] of b: the four turns' affine maps, (4, 3, 2),
    # [x y 1] @ m, in one solve; a pair's check asks this of every verified pair)
    src = np.c_[ca[[0, 1, 3]], np.ones(3)]
    maps = np.linalg.solve(np.broadcast_to(src, (4, 3, 3)), cb[_TURNS][:, [0, 1, 3]])
    best = min(float(median_of(np.linalg.norm(pa @ m[:2] + m[2] - pb, axis=1))) for m in maps)
    return best * min(1.0, max(wa, ha) / max(wb, hb, 1))


def map_points(h: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """(P, 2) points mapped by the 3x3 homography ``h`` (points at infinity -> nan)."""
    p = xy @ h[:, :2].T + h[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        return p[:, :2] / p[:, 2:3]


def inside_frame(xy: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """(P,) bool: the points inside an image of ``size`` (w, h) (all, without a size)."""
    if not size:
        return np.ones(len(xy), bool)
    w, h = size
    with np.errstate(invalid="ignore"):
        return (
            (xy[:, 0] >= -0.5) & (xy[:, 0] <= w - 0.5) & (xy[:, 1] >= -0.5) & (xy[:, 1] <= h - 0.5)
        )


def frame_corners(w: float, h: float) -> np.ndarray:
    """(4, 2) corners of a ``w`` x ``h`` picture's frame (pixel edges: -0.5 to w - 0.5),
    clockwise from the top left."""
    return np.array([[-0.5, -0.5], [w - 0.5, -0.5], [w - 0.5, h - 0.5], [-0.5, h - 0.5]])


#: ``_TURNS[k, i]``: the corner of the other frame that corner ``i`` meets under the
#: ``k``-th quarter turn (``np.roll(corners, k, axis=0)[i]``).
_TURNS = (np.arange(4)[None, :] - np.arange(4)[:, None]) % 4


def frame_share(shape: tuple[int, int], m: np.ndarray, other: tuple[int, int]) -> float:
    """The share of a picture of ``shape`` (h, w) whose pixels ``m`` (3x3) maps inside a
    picture of shape ``other`` (a grid of about 64 x 64 points)."""
    h, w = shape
    step = max(1, max(h, w) // 64)
    ys, xs = np.mgrid[0:h:step, 0:w:step]
    p = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)]).astype(np.float64)
    q = m @ p
    with np.errstate(divide="ignore", invalid="ignore"):
        x, y = q[0] / q[2], q[1] / q[2]
        ok = (q[2] > 0) & (x >= -0.5) & (x <= other[1] - 0.5) & (y >= -0.5) & (y <= other[0] - 0.5)
    return float(ok.mean())


def zoomed_shot(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
) -> bool:
    """Whether the finer of two aligned pictures shows part of the coarser one's scene
    with detail no enlargement of it has: another shot, zoomed in (module docstring).

    Parameters
    ----------
    gray_a, gray_b : (H, W) float32
        The two pictures in gray levels, any size.
    homography : (3, 3) float64
        Maps positions in a picture of ``size_a`` to positions in one of ``size_b``.
    size_a, size_b : (width, height)
        The sizes ``homography`` refers to.

    Returns
    -------
    bool
    """
    import cv2

    ga, gb = np.asarray(gray_a, np.float32), np.asarray(gray_b, np.float32)
    sa, sb = ga.shape[1] / size_a[0], gb.shape[1] / size_b[0]
    m = np.diag([sb, sb, 1.0]) @ homography @ np.diag([1 / sa, 1 / sa, 1.0])  # a -> b px
    det = abs(float(np.linalg.det(m[:2, :2])))
    if not np.isfinite(det) or det <= 0:
        return False
    fine, coarse, to_coarse = (ga, gb, m) if det < 1 else (gb, ga, np.linalg.inv(m))
    if abs(float(np.linalg.det(to_coarse[:2, :2]))) ** -0.5 < ZOOM_MAGNIFICATION:
        return False
    to_fine = np.linalg.inv(to_coarse)
    if frame_share(coarse.shape, to_fine, fine.shape) > 1 - ZOOM_OUTSIDE:
        return False
    h, w = fine.shape
    up = cv2.warpPerspective(coarse, to_fine, (w, h), flags=cv2.INTER_LINEAR)
    ones = np.ones(coarse.shape, np.uint8)
    inside = cv2.warpPerspective(ones, to_fine, (w, h), flags=cv2.INTER_NEAREST)
    inside = cv2.erode(inside, np.ones((9, 9), np.uint8)) > 0
    if inside.sum() < 256:
        return False
    e_fine = float(np.mean((fine - cv2.GaussianBlur(fine, (0, 0), 1.0))[inside] ** 2))
    e_up = float(np.mean((up - cv2.GaussianBlur(up, (0, 0), 1.0))[inside] ** 2))
    return e_fine > ZOOM_DETAIL * max(e_up, 1e-6)
