"""Search by region: the query's features inside a box drawn on the query photo.

A person who wants "this object" rather than "this photo" draws a box around it (the app)
or passes ``--box x,y,w,h`` (``simile query``). Only the query's features whose keypoints
lie inside the box are used -- detected afresh inside it, the box's own strongest
(:func:`region_features`), so that a small object is described by more than the few of
the whole photo's strongest that fall on it -- and they are searched and explained
exactly as a whole photo's are (:meth:`Collection.query
<engine.collection.Collection.query>` and :meth:`Collection.match
<engine.collection.Collection.match>` with ``box=``). Measured in
``tests/benchmarks/bench_region.py``.

Why it works with the pyramid match
-----------------------------------
The pyramid match is a *partial* matching (Grauman's thesis, Sec. 3.2.4, "Partial Match
Correspondences"; normalisation Eq. 3.11): the features of the smaller set are matched
to *some subset* of the larger set, and "superfluous data points from the larger set are
entirely ignored". The boxed query is the small set -- the object's features only -- and
a collection photo in which the object is small is the large set: its other features
(the table the DVD lies on, the shelf, the room) find no partner among the query's and
cost nothing, instead of the query's own background pulling the ranking towards photos
of *that* background. The geometric check of the ``hybrid`` method then fits one
homography to the object alone. The index's scores are not the pure partial match of
Eq. 3.11, though: the ``vocabulary`` score normalises each photo's pyramid by its mass
(as the product normalisation of Eq. 3.12 weighs both sets' sizes), so a collection
photo's own clutter still lowers its score. What the box removes is the *query's*
clutter; photos that show the object small are found less well than photos that show it
large (the ``ukbench_small`` case of the benchmark).

Coordinates
-----------
A box is ``(x, y, w, h)`` in pixels of the photo *as it is displayed*: EXIF orientation
applied, at its full size (:func:`engine.io.imageio.image_size`), ``(0, 0)`` the top-left
corner of the top-left pixel. Features are positioned in the *loaded* image, whose
longest side is capped (``Features.image_size``; ``(0, 0)`` the centre of the top-left
pixel): the box is scaled by ``loaded size / full size`` on each axis
(:func:`features_in_box`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.features.keypoints import Features, extract_features

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.searcher import Searcher

__all__ = [
    "MIN_REGION_FEATURES",
    "REGION_MAX_FEATURES",
    "Box",
    "check_box",
    "clip_box",
    "displayed_size",
    "features_in_box",
    "parse_box",
    "region_features",
    "region_pixels",
]

#: A box must hold at least this many of the query's features (the geometric check needs
#: 4 correspondences, :data:`engine.index.verify.VERIFY_MIN_INLIERS` = 8 inliers to call
#: a hit the same object).
MIN_REGION_FEATURES = 8

#: Keypoints detected inside a box, at most (the strongest; None: the index's
#: ``max_features``, 500). Fewer than a whole photo's: a collection photo in which the
#: object is small holds only its strongest features on it, and a query of many weak
#: ones then finds chance partners in every photo's clutter. Measured on the dev data
#: (``tests/benchmarks/bench_region.py``, hybrid, mAP): 100 / 200 / 300 / 500 keypoints
#: give 0.74 / 0.82 / 0.82 / 0.81 where the object's other photos show it large
#: (UKBench), 0.39 / 0.38 / 0.35 / 0.29 where they show it small in clutter.
REGION_MAX_FEATURES: int | None = 200

Box = tuple[float, float, float, float]


def check_box(box: Any) -> Box:
    """``box`` as ``(x, y, w, h)`` floats, or ``ValueError`` naming what is wrong.

    Parameters
    ----------
    box : sequence of 4 real numbers
        ``(x, y, w, h)``: the top-left corner and the size, in pixels; ``w, h > 0``.

    Returns
    -------
    tuple of 4 float

    Examples
    --------
    >>> check_box([10, 20, 30.5, 40])
    (10.0, 20.0, 30.5, 40.0)
    """
    if isinstance(box, str | bytes) or not hasattr(box, "__len__") or len(box) != 4:
        raise ValueError(f"box must be 4 numbers (x, y, w, h), got {box!r}")
    try:
        x, y, w, h = (float(v) for v in box)
    except (TypeError, ValueError):
        raise ValueError(f"box must be 4 numbers (x, y, w, h), got {box!r}") from None
    if not all(math.isfinite(v) for v in (x, y, w, h)):
        raise ValueError(f"box must be finite numbers, got {box!r}")
    if w <= 0 or h <= 0:
        raise ValueError(f"the box's width and height must be > 0, got w={w:g}, h={h:g}")
    return x, y, w, h


def parse_box(text: str) -> Box:
    """``"x,y,w,h"`` (integers or decimals, spaces allowed) as a checked box.

    Raises
    ------
    ValueError
        Not four comma-separated numbers, or a bad box (:func:`check_box`).

    Examples
    --------
    >>> parse_box("10, 20, 300, 200.5")
    (10.0, 20.0, 300.0, 200.5)
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"box must be x,y,w,h (4 numbers), got {text!r}")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"box must be x,y,w,h (4 numbers), got {text!r}") from None
    return check_box(values)


def clip_box(box: Box, size: tuple[int, int]) -> Box:
    """``box`` cut to the photo ``size = (width, height)``; ``ValueError`` when nothing of
    it lies on the photo."""
    x, y, w, h = box
    W, H = size
    x0, y0 = max(x, 0.0), max(y, 0.0)
    x1, y1 = min(x + w, float(W)), min(y + h, float(H))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(
            f"the box ({x:g}, {y:g}, {w:g}, {h:g}) lies outside the photo ({W} x {H} pixels)"
        )
    return x0, y0, x1 - x0, y1 - y0


def displayed_size(image: Any) -> tuple[int, int]:
    """``(width, height)`` of a query as displayed at its full size: a path's header
    (:func:`engine.io.imageio.image_size`, EXIF orientation applied; no pixel is
    decoded), an array's shape, or for :class:`Features` their ``image_size`` (the full
    size is unknown then: a box on Features is in the loaded image's pixels).

    Raises
    ------
    engine.io.imageio.ImageLoadError
        A path that cannot be read.
    """
    if isinstance(image, Features):
        return int(image.image_size[0]), int(image.image_size[1])
    if isinstance(image, np.ndarray):
        if image.ndim < 2:
            raise ValueError(f"image must be an (H, W[, 3]) array, got shape {image.shape}")
        return int(image.shape[1]), int(image.shape[0])
    from engine.io.imageio import image_size

    return image_size(Path(os.path.abspath(os.fspath(image))))


def features_in_box(feats: Features, box: Any, size: tuple[int, int]) -> Features:
    """The features of ``feats`` whose keypoint lies inside ``box``.

    Parameters
    ----------
    feats : Features
        ``xy : (M, 2) float32`` in the loaded image (``feats.image_size``; ``(0, 0)`` the
        centre of the top-left pixel).
    box : (x, y, w, h)
        In pixels of the photo at ``size`` (``(0, 0)`` the top-left pixel's corner);
        clipped to it (:func:`clip_box`).
    size : (width, height)
        Full size of the photo the box was drawn on; the box is scaled to the loaded image
        by ``feats.image_size / size`` on each axis.

    Returns
    -------
    Features
        The ``K <= M`` features inside, in their original order, with the same
        ``image_size`` and ``kind`` (positions stay in the loaded image).

    Raises
    ------
    ValueError
        A malformed box, a box off the photo, or fewer than :data:`MIN_REGION_FEATURES`
        features inside ("draw a larger box").

    Examples
    --------
    >>> xy = np.array([[10, 10], [100, 50], [150, 90]], np.float32)
    >>> f = Features(np.eye(3, 4, dtype=np.float32), xy, None, None, (200, 100), "sift")
    >>> box_mask(f, (0, 0, 260, 140), (400, 200)).tolist()  # the full size is 2x
    [True, True, False]
    """
    mask = box_mask(feats, box, size)
    n = int(mask.sum())
    if n < MIN_REGION_FEATURES:
        raise ValueError(f"the box holds only {n} features; draw a larger box")
    return subset(feats, mask)


def box_mask(feats: Features, box: Any, size: tuple[int, int]) -> np.ndarray:
    """(M,) bool: which of ``feats`` lie inside ``box`` (see :func:`features_in_box`)."""
    W, H = int(size[0]), int(size[1])
    if W < 1 or H < 1:
        raise ValueError(f"size must be (width, height) > 0, got {size!r}")
    x, y, w, h = clip_box(check_box(box), (W, H))
    sx, sy = feats.image_size[0] / W, feats.image_size[1] / H
    # a keypoint at u (pixel centres) lies at u + 0.5 in pixel-corner coordinates
    cx = (feats.xy[:, 0].astype(np.float64) + 0.5) / sx
    cy = (feats.xy[:, 1].astype(np.float64) + 0.5) / sy
    return (cx >= x) & (cx < x + w) & (cy >= y) & (cy < y + h)


def subset(feats: Features, mask: np.ndarray) -> Features:
    """The features of ``feats`` where ``mask`` ((M,) bool) is true."""

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(a[mask])

    return Features(
        descriptors=np.ascontiguousarray(feats.descriptors[mask]),
        xy=np.ascontiguousarray(feats.xy[mask]),
        scale=pick(feats.scale),
        angle=pick(feats.angle),
        image_size=feats.image_size,
        kind=feats.kind,
    )


def region_features(searcher: Searcher, image: Any, box: Any) -> Features:
    """The query's features inside ``box``, as a search by region uses them.

    For a path or an array the keypoints are detected afresh inside the box (SIFT with
    the index's settings, :data:`~engine.index.searcher.FEATURE_KWARGS`, and
    ``extract_features(..., within=box)``): the :data:`REGION_MAX_FEATURES` strongest
    *of the box*, not only those of the whole photo's 500 strongest that fall in it -- an
    object that fills an eighth of a busy photo keeps about 50 to 90 of those (often
    fewer than 8 for a smooth object among textured things) but gets up to 200 of its
    own. Descriptors still see the pixels around their keypoints, as the whole photo's
    do. For :class:`Features` (no pixels to look at) those inside the box
    are kept (:func:`features_in_box`; the box is then in their ``image_size``'s pixels).

    Parameters
    ----------
    searcher : Searcher
        The collection's searcher (its ``query_features`` for Features).
    image : path, (H, W[, 3]) uint8 ndarray or Features
    box : (x, y, w, h)
        In pixels of the photo as displayed at its full size (:func:`displayed_size`).

    Returns
    -------
    Features
        ``descriptors (K, D) float32``, ``xy (K, 2) float32`` in the loaded image,
        ``MIN_REGION_FEATURES <= K``.

    Raises
    ------
    ValueError
        A bad box, or one holding fewer than :data:`MIN_REGION_FEATURES` features.
    engine.io.imageio.ImageLoadError
        The query cannot be read.
    """
    from engine.index.searcher import FEATURE_KWARGS

    box = check_box(box)
    size = displayed_size(image)
    if isinstance(image, Features):
        feats, _row = searcher.query_features(image)
        return features_in_box(feats, box, size)
    x, y, w, h = clip_box(box, size)
    W, H = size
    within = (x / W, y / H, (x + w) / W, (y + h) / H)
    src = image if isinstance(image, np.ndarray) else Path(os.path.abspath(os.fspath(image)))
    kwargs = {"kind": "sift", **FEATURE_KWARGS, "within": within}
    if REGION_MAX_FEATURES is not None:
        kwargs["max_features"] = REGION_MAX_FEATURES
    return features_in_box(extract_features(src, **kwargs), box, size)


def region_pixels(image: Any, box: Any, *, max_side: int = 1024) -> np.ndarray:
    """The box's pixels, for search methods that read the image rather than keypoint
    features (``learned``).

    Parameters
    ----------
    image : path or (H, W[, 3]) uint8 ndarray
    box : (x, y, w, h)
        In pixels of the photo as displayed at its full size.
    max_side : int
        The photo is loaded with its longest side capped (as for indexing) before the
        box is cut out.

    Returns
    -------
    (h, w, 3) or (h, w) uint8 ndarray
    """
    from engine.io.imageio import load_image

    if isinstance(image, Features):
        raise TypeError("region_pixels needs the image (a path or an array), not Features")
    box = check_box(box)
    size = displayed_size(image)
    x, y, w, h = clip_box(box, size)
    if isinstance(image, np.ndarray):
        arr = image
    else:
        arr = load_image(Path(os.path.abspath(os.fspath(image))), max_side=max_side)
    sx, sy = arr.shape[1] / size[0], arr.shape[0] / size[1]
    x0, y0 = math.floor(x * sx), math.floor(y * sy)
    x1 = max(x0 + 1, math.ceil((x + w) * sx))
    y1 = max(y0 + 1, math.ceil((y + h) * sy))
    return np.ascontiguousarray(arr[y0:y1, x0:x1])
