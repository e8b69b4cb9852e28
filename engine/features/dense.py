"""Dense SIFT: SIFT descriptors on a regular grid of windows, at one or several sizes.

One function, :func:`dense_sift`, serves every dense-SIFT channel of the engine; each
channel is a set of its options:

* ``extract_features(kind="dense_sift")`` (:mod:`engine.features.keypoints`): whole
  windows on a centred grid, OpenCV descriptors of upright keypoints, textureless windows
  dropped -- the Caltech-101 set-up of the thesis, Sec. 8.2.3;
* :func:`engine.kernels.spatial.grid_sift` and the categorisation features of
  :mod:`engine.cluster`: a white frame trimmed off, the image shrunk, large windows on a
  grid from the corner, evenly subsampled;
* :func:`engine.kernels.spatial.dense_sift`: PHOW (Bosch et al. 2007), the multi-scale
  dense SIFT of VLFeat's ``vl_dsift`` with a flat window, computed here with NumPy and
  OpenCV filters (``method="phow"``).

Windows are given by their side in pixels (the square each descriptor summarises) and
the grid step. Two descriptor implementations exist because they differ in their numbers,
not only in speed: ``"opencv"`` is OpenCV's SIFT descriptor (Lowe 2004) of a keypoint of
size ``side / 6`` (OpenCV's descriptor spans 4 x 4 cells of ``1.5 size`` pixels);
``"phow"`` smooths the whole image once per size and reads all descriptors of that size
with one gather (:func:`_phow_scale`).

Descriptors are SIFT-normalised and by default mapped to RootSIFT (Arandjelovic &
Zisserman 2012): ``d <- sqrt(d / ||d||_1)``, so that Euclidean distances between RootSIFT
vectors are Hellinger distances between the histograms.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, Any

import cv2
import numpy as np

from engine.core.validate import check_choice, check_positive
from engine.io.imageio import load_gray

__all__ = [
    "GRIDS",
    "METHODS",
    "SIFT_DIM",
    "SIFT_WINDOW_PER_SIZE",
    "DenseSift",
    "centred_grid",
    "dense_sift",
    "gray_image",
    "normalise_sift",
    "trim_box",
]

#: Dimension of a SIFT descriptor: 4 x 4 cells x 8 orientations.
SIFT_DIM = 128
#: OpenCV's SIFT descriptor spans 4 x 4 cells of width 3 * (keypoint size / 2) pixels
#: (SIFT_DESCR_SCL_FCTR = 3), i.e. a window of 6 x the keypoint size.
SIFT_WINDOW_PER_SIZE = 6.0
#: Descriptor implementations of :func:`dense_sift`.
METHODS: tuple[str, ...] = ("opencv", "phow")
#: Window layouts of :func:`dense_sift` (``method="opencv"``).
GRIDS: tuple[str, ...] = ("centred", "corner")

_N_ORI = 8
_N_CELLS = 4


class DenseSift:
    """Dense SIFT descriptors of one image (:func:`dense_sift`).

    Attributes
    ----------
    descriptors : (M, 128) float32
        RootSIFT (or L2-normalised SIFT) descriptors, one row per window.
    xy : (M, 2) float32
        Window centres in pixels of the described image (the input after trimming and
        shrinking; ``(0, 0)`` is the centre of its top-left pixel).
    size : (M,) float32
        Width in pixels of one of the window's 4 x 4 spatial cells (the window is
        ``4 * size`` pixels wide; PHOW's bin size).
    image_size : tuple of int
        ``(width, height)`` of the described image.
    input_size : tuple of int
        ``(width, height)`` of the input image (as loaded, before trimming).
    scale : float
        Shrink factor from the trimmed input to the described image (1.0: not shrunk).
    offset : tuple of int
        ``(x, y)`` of the trimmed region's top-left pixel in the input image.
    """

    __slots__ = ("descriptors", "image_size", "input_size", "offset", "scale", "size", "xy")

    def __init__(
        self,
        descriptors: np.ndarray,
        xy: np.ndarray,
        size: np.ndarray,
        image_size: tuple,
        *,
        input_size: tuple | None = None,
        scale: float = 1.0,
        offset: tuple = (0, 0),
    ) -> None:
        self.descriptors = descriptors
        self.xy = xy
        self.size = size
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.input_size = self.image_size if input_size is None else tuple(map(int, input_size))
        self.scale = float(scale)
        self.offset = (int(offset[0]), int(offset[1]))

    def __len__(self) -> int:
        return int(self.descriptors.shape[0])

    def normalized_xy(self) -> np.ndarray:
        """(M, 2) float32 positions divided by the image width and height, in ``[0, 1)``."""
        w, h = self.image_size
        return (self.xy / np.array([w, h], np.float32)).astype(np.float32)

    def input_xy(self) -> np.ndarray:
        """(M, 2) float32 window centres in pixels of the input image:
        ``xy / scale + offset``."""
        return self.xy / np.float32(self.scale) + np.array(self.offset, np.float32)


# --------------------------------------------------------------------------------------------
# shared steps
# --------------------------------------------------------------------------------------------


def gray_image(
    image_or_path: np.ndarray | str | os.PathLike | bytes | IO[bytes], max_side: int | None
) -> np.ndarray:
    """``(H, W) uint8`` grey image from a path / bytes (via the loader) or an array.

    Parameters
    ----------
    image_or_path : ndarray, path, bytes or binary file object
        An array ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3|4)`` RGB(A), uint8, bool or float
        in ``[0, 1]`` (scaled by 255 and rounded); anything else goes to
        :func:`engine.io.imageio.load_gray`.
    max_side : int or None
        Shrink (area interpolation) so the longer side is at most this; None keeps it.

    Returns
    -------
    (H, W) uint8, C-contiguous
    """
    if not isinstance(image_or_path, np.ndarray):
        return load_gray(image_or_path, max_side=max_side)
    img = image_or_path
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[..., 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (3, 4)):
        raise ValueError(f"image must be (H, W), (H, W, 3) or (H, W, 4), got shape {img.shape}")
    if img.dtype == np.uint8:
        pass
    elif np.issubdtype(img.dtype, np.floating):
        img = np.clip(np.rint(np.nan_to_num(img) * 255.0), 0, 255).astype(np.uint8)
    elif img.dtype == np.bool_:
        img = img.astype(np.uint8) * 255
    else:
        raise ValueError(f"image must be uint8, bool or float in [0, 1], got dtype {img.dtype}")
    if img.ndim == 3:
        img = cv2.cvtColor(np.ascontiguousarray(img[..., :3]), cv2.COLOR_RGB2GRAY)
    h, w = img.shape
    if max_side is not None and max(h, w) > max_side:
        s = max_side / max(h, w)
        size = (max(1, round(w * s)), max(1, round(h * s)))
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img)


def trim_box(gray: np.ndarray, thresh: int) -> tuple[int, int, int, int]:
    """``(r0, r1, c0, c1)`` of ``gray`` without a uniform white frame.

    Rows and columns with fewer than 2 % pixels darker than ``thresh`` are the frame;
    many Caltech photos have one and the thesis removed it too (Sec. 9.5).

    Parameters
    ----------
    gray : (H, W) uint8
    thresh : int
        Grey level from which a pixel counts as white.

    Returns
    -------
    tuple of int
        The kept rows ``r0:r1`` and columns ``c0:c1``; the whole image when fewer than 16
        rows or columns would remain.
    """
    dark = gray < thresh
    keep_r = np.flatnonzero(dark.mean(axis=1) > 0.02)
    keep_c = np.flatnonzero(dark.mean(axis=0) > 0.02)
    h, w = gray.shape
    if keep_r.size < 16 or keep_c.size < 16:
        return 0, h, 0, w
    return int(keep_r[0]), int(keep_r[-1]) + 1, int(keep_c[0]), int(keep_c[-1]) + 1


def centred_grid(width: int, height: int, step: int, patch_size: int) -> np.ndarray:
    """Centres ``(M, 2) float32`` of a grid of whole ``patch_size`` windows, row-major.

    Windows start every ``step`` pixels; the grid is centred in the image so the unused
    margin is split evenly. A window whose top-left pixel is ``x0`` has centre
    ``x0 + (patch_size - 1) / 2``.
    """

    def axis(n: int) -> np.ndarray:
        if n < patch_size:
            return np.empty(0, np.float32)
        count = (n - patch_size) // step + 1
        start = ((n - patch_size) - (count - 1) * step) // 2
        return (start + step * np.arange(count) + (patch_size - 1) / 2).astype(np.float32)

    xs, ys = axis(width), axis(height)
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([gx.ravel(), gy.ravel()], axis=1).astype(np.float32)


def normalise_sift(desc: np.ndarray, rootsift: bool) -> np.ndarray:
    """RootSIFT ``sqrt(d / ||d||_1)`` or plain ``d / ||d||_2``; all-zero rows stay zero.

    Parameters
    ----------
    desc : (M, 128) float or uint8
        Raw SIFT histograms (negative entries are clipped to 0).
    rootsift : bool

    Returns
    -------
    (M, 128) float32
        Unit L2 norm rows (except all-zero ones).
    """
    desc = np.maximum(desc.astype(np.float32, copy=False), 0.0)
    if rootsift:
        l1 = desc.sum(axis=1, keepdims=True)
        return np.sqrt(desc / np.maximum(l1, np.float32(1e-12)))
    l2 = np.linalg.norm(desc, axis=1, keepdims=True)
    return desc / np.maximum(l2, np.float32(1e-12))


# --------------------------------------------------------------------------------------------
# the one entry point
# --------------------------------------------------------------------------------------------


def dense_sift(
    image: np.ndarray | str | os.PathLike | bytes | IO[bytes],
    *,
    windows: Sequence[Sequence[int]] = ((16, 8),),
    method: str = "opencv",
    grid: str = "centred",
    max_side: int | None = None,
    load_max_side: int | None = 1024,
    trim: int = 0,
    max_features: int | None = None,
    rootsift: bool = True,
    drop_empty: bool = False,
    angle: float = 0.0,
    octaves: bool = False,
    magnif: float = 6.0,
    contrast_threshold: float = 0.005,
) -> DenseSift:
    """Dense SIFT descriptors of one image on regular grids of square windows.

    Steps: the image is made grey (paths, bytes and files are loaded, at most
    ``load_max_side`` a side), a white frame is cut off (``trim``), the rest is shrunk so
    its longer side is at most ``max_side``, and every ``(side, step)`` of ``windows``
    lays a grid of windows, described by ``method``; the windows of all sizes are then
    evenly subsampled to ``max_features``.

    Parameters
    ----------
    image : ndarray, path, bytes or binary file object
        A grey or RGB(A) array (see :func:`gray_image`; ``method="phow"`` takes a 2-D
        float array in ``[0, 1]`` as it is, a uint8 one divided by 255), or anything
        :func:`engine.io.imageio.load_gray` accepts.
    windows : sequence of (side, step)
        Window side and grid step in pixels of the described image, one pair per scale,
        finest first. ``"phow"`` needs sides that are multiples of 4.
    method : {"opencv", "phow"}, default "opencv"
        ``"opencv"``: OpenCV's SIFT descriptor of a keypoint of size ``side / 6`` at every
        window centre. ``"phow"``: VLFeat's flat-window dense SIFT (PHOW): the image is
        smoothed with a Gaussian of ``sigma = sqrt((b / magnif)**2 - 0.25)`` (``b =
        side / 4``, the cell width), gradient magnitudes are split between the two
        nearest of 8 orientations and spread over space with the bilinear (triangular)
        kernel of a ``b``-pixel cell; a descriptor reads 4 x 4 cells b pixels apart;
        windows whose mean gradient magnitude is below ``contrast_threshold`` get an
        all-zero descriptor. Its windows lie inside the image from the top-left corner,
        cell centres at least ``b // 2`` from the border (``grid`` does not apply).
    grid : {"centred", "corner"}, default "centred"
        ``"opencv"`` layout. ``"centred"``: whole windows every ``step`` pixels, the grid
        centred in the image (the unused margin split evenly). ``"corner"``: centres every
        ``step`` pixels from half a keypoint size (``side / 12``, floored) off the
        top-left corner to that far from the opposite border; windows overhang the
        border (OpenCV describes the missing pixels as flat).
    max_side : int or None, default None
        Shrink (area interpolation) so the longer side is at most this, after trimming.
    load_max_side : int or None, default 1024
        Paths, bytes and files are loaded at most this large; arrays are taken as given.
    trim : int, default 0
        Cut a uniform white frame first (:func:`trim_box` with this grey level, on uint8
        images); 0 keeps the whole image.
    max_features : int or None, default None
        Keep at most this many windows, evenly spaced over the grids in their order
        (window sizes in ``windows`` order, rows top to bottom); None keeps all.
    rootsift : bool, default True
        RootSIFT; else L2-normalised SIFT (``"phow"``: L2, clipped at 0.2 and
        renormalised, Lowe 2004, before either).
    drop_empty : bool, default False
        ``"opencv"``: leave out windows whose descriptor is all zero (no gradient).
    angle : float, default 0.0
        ``"opencv"``: orientation in degrees of every keypoint (0 = upright). OpenCV's
        descriptor reads -1, its ``KeyPoint`` default, not as upright but as 361 degrees;
        the grid and categorisation channels have always passed it.
    octaves : bool, default False
        ``"opencv"``: describe a window of keypoint size ``z`` on the pyramid octave
        ``max(floor(log2(z / 6)), 0)`` (the image shrunk that many times): the same
        SIFT window from ~5x fewer pixels. False: every window at full resolution.
    magnif : float, default 6.0
        ``"phow"``: smoothing ``sigma = b / magnif`` (VLFeat's magnification factor).
    contrast_threshold : float, default 0.005
        ``"phow"``: mean gradient magnitude per pixel (grey levels in ``[0, 1]``) below
        which a window's descriptor is all zero (kept: flat regions are informative too).

    Returns
    -------
    DenseSift
        ``descriptors`` (M, 128) float32, window centres ``xy`` in pixels of the
        described image, cell widths ``size`` (``side / 4``), finest scale first (then
        subsampled), and the map back to the input image (``input_xy()``).

    Raises
    ------
    ValueError
        For an unknown ``method`` or ``grid``, bad ``windows``, ``max_side``,
        ``max_features``, ``magnif``, ``trim`` on a float image, or a bad image array.
    engine.io.imageio.ImageLoadError
        If a path / bytes input cannot be loaded.

    Examples
    --------
    >>> img = (np.random.default_rng(0).random((120, 160)) * 255).astype(np.uint8)
    >>> f = dense_sift(img, windows=((16, 8), (32, 16)))
    >>> f.descriptors.shape, f.image_size
    ((343, 128), (160, 120))
    """
    check_choice(method, "method", METHODS)
    check_choice(grid, "grid", GRIDS)
    if method == "phow" and grid != "centred":
        raise ValueError("grid applies to method='opencv' only (PHOW lays out its own)")
    windows = _check_windows(windows, method)
    if max_side is not None:
        check_positive(max_side, "max_side")
    if max_features is not None and (int(max_features) != max_features or max_features < 1):
        raise ValueError(f"max_features must be a positive integer or None, got {max_features!r}")
    check_positive(magnif, "magnif")

    if method == "phow" and isinstance(image, np.ndarray) and image.ndim == 2:
        g = np.asarray(image)
    else:
        g = gray_image(image, None if isinstance(image, np.ndarray) else load_max_side)
    H, W = g.shape
    if trim and g.dtype != np.uint8:
        raise ValueError(f"trim needs a uint8 image, got {g.dtype}")
    r0, r1, c0, c1 = trim_box(g, int(trim)) if trim else (0, H, 0, W)
    img = g[r0:r1, c0:c1]
    if method == "phow":
        img = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 else 1.0)
    h, w = img.shape
    s = 1.0 if max_side is None else min(1.0, max_side / max(h, w, 1))
    if s < 1.0:
        size = (max(1, round(w * s)), max(1, round(h * s)))
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    h, w = img.shape
    if method == "phow":
        desc, xy, cell = _phow(img, windows, magnif, contrast_threshold, rootsift)
    else:
        desc, xy, cell = _opencv(
            img, windows, grid, max_features, rootsift, drop_empty, angle, octaves
        )
    return DenseSift(desc, xy, cell, (w, h), input_size=(W, H), scale=s, offset=(c0, r0))


def _check_windows(windows: Sequence[Sequence[int]], method: str) -> list[tuple[Any, int]]:
    """``windows`` as a list of ``(side, step)``; raises ``ValueError`` on bad pairs."""
    out = []
    for pair in windows:
        if len(pair) != 2:
            raise ValueError(f"windows must hold (side, step) pairs, got {pair!r}")
        side, step = pair
        if int(step) != step or step < 1:
            raise ValueError(f"window steps must be integers >= 1, got {step!r}")
        if not side > 0 or (method == "phow" and (int(side) != side or side % 4)):
            raise ValueError(
                f"window sides must be > 0 (PHOW: multiples of 4 pixels), got {side!r}"
            )
        out.append((side, int(step)))
    return out


# --------------------------------------------------------------------------------------------
# OpenCV descriptors
# --------------------------------------------------------------------------------------------


def _opencv(
    gray: np.ndarray,
    windows: list[tuple[Any, int]],
    grid: str,
    max_features: int | None,
    rootsift: bool,
    drop_empty: bool,
    angle: float,
    octaves: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV SIFT on the grid of every window size: descriptors (M, 128) float32,
    centres (M, 2) float32 and cell widths (M,) float32 (see :func:`dense_sift`)."""
    h, w = gray.shape
    centres, sizes, cells = [], [], []
    for side, step in windows:
        z = side / SIFT_WINDOW_PER_SIZE  # OpenCV keypoint size
        if grid == "centred":
            c = centred_grid(w, h, step, side)
        else:
            m = int(z // 2)
            ys, xs = np.mgrid[m : h - m : step, m : w - m : step]
            c = np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float32)
        centres.append(c)
        sizes.append(np.full(len(c), z))
        cells.append(np.full(len(c), side / 4, np.float32))
    P = np.concatenate(centres) if centres else np.zeros((0, 2), np.float32)
    S = np.concatenate(sizes) if sizes else np.zeros(0)
    cell = np.concatenate(cells) if cells else np.zeros(0, np.float32)
    if max_features is not None and P.shape[0] > max_features:
        sel = np.linspace(0, P.shape[0] - 1, max_features).astype(np.int64)
        P, S, cell = P[sel], S[sel], cell[sel]
    empty = (np.zeros((0, SIFT_DIM), np.float32), np.zeros((0, 2), np.float32))
    if P.shape[0] == 0:
        return (*empty, np.zeros(0, np.float32))
    kps = [cv2.KeyPoint(x, y, z, angle) for (x, y), z in zip(P.tolist(), S.tolist(), strict=True)]
    if octaves:
        # Describe a window of size z on the pyramid octave o = floor(log2(z / 6)) (image
        # shrunk 2^o times): the same SIFT window, 5x fewer pixels to sample than octave 0.
        octs = np.maximum(np.floor(np.log2(S / 6.0)), 0).astype(int).tolist()
        for kp, o in zip(kps, octs, strict=True):
            kp.octave = o & 255
    kps_out, desc = cv2.SIFT_create().compute(gray, kps)
    if desc is None or len(kps_out) == 0:
        return (*empty, np.zeros(0, np.float32))
    if len(kps_out) != len(kps):  # pragma: no cover - OpenCV keeps given keypoints
        raise RuntimeError("OpenCV dropped keypoints of the dense grid")
    xy = cv2.KeyPoint_convert(kps_out).reshape(-1, 2).astype(np.float32)
    if drop_empty:
        keep = desc.any(axis=1)  # no gradient at all (flat window): nothing to describe
        desc, xy, cell = desc[keep], xy[keep], cell[keep]
    return normalise_sift(desc, rootsift), xy, cell


# --------------------------------------------------------------------------------------------
# PHOW (VLFeat dsift, flat window)
# --------------------------------------------------------------------------------------------


def _phow(
    img: np.ndarray,
    windows: list[tuple[Any, int]],
    magnif: float,
    contrast_threshold: float,
    rootsift: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PHOW descriptors of a float32 ``[0, 1]`` image at every window size: descriptors
    (M, 128) float32, centres (M, 2) float32 and cell widths (M,) float32."""
    descs, xys, sizes = [], [], []
    for side, step in windows:
        b = int(side) // 4
        found = _phow_scale(img, b, step, magnif, contrast_threshold, rootsift)
        if found is not None:
            descs.append(found[0])
            xys.append(found[1])
            sizes.append(np.full(len(found[1]), b, np.float32))
    if not descs:
        return (
            np.zeros((0, SIFT_DIM), np.float32),
            np.zeros((0, 2), np.float32),
            np.zeros(0, np.float32),
        )
    return np.concatenate(descs), np.concatenate(xys), np.concatenate(sizes)


def _triangle(b: int) -> np.ndarray:
    """Bilinear spatial-binning kernel of a ``b``-pixel cell: ``1 - |t| / b``, ``|t| < b``."""
    t = np.arange(-b + 1, b, dtype=np.float32)
    return (1.0 - np.abs(t) / b).astype(np.float32)


def _phow_scale(
    img: np.ndarray, b: int, step: int, magnif: float, contrast_threshold: float, rootsift: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Descriptors (n, 128) and centres (n, 2) of PHOW's windows of cell width ``b``
    (None when no window fits). All of them come from a handful of whole-image filters
    and one gather: no loop over points."""
    h, w = img.shape
    span = (_N_CELLS - 1) * b  # first to last cell centre
    # cell centres at least b/2 from the border
    x0 = np.arange(b // 2, w - span - b // 2, step)
    y0 = np.arange(b // 2, h - span - b // 2, step)
    if x0.size == 0 or y0.size == 0:
        return None
    sigma2 = (b / magnif) ** 2 - 0.25
    sm = cv2.GaussianBlur(img, (0, 0), np.sqrt(sigma2)) if sigma2 > 0 else img
    gy, gx = np.gradient(sm)
    mag = np.hypot(gx, gy)
    t = np.arctan2(gy, gx) * (_N_ORI / (2 * np.pi))  # in (-4, 4]
    t = np.mod(t, _N_ORI)
    o0 = np.floor(t).astype(np.int64)
    frac = (t - o0).astype(np.float32)
    o0 %= _N_ORI
    o1 = (o0 + 1) % _N_ORI
    chan = np.zeros((_N_ORI, h, w), np.float32)
    rr, cc = np.indices((h, w))
    chan[o0, rr, cc] = mag * (1.0 - frac)  # o0 != o1: no index repeats in each
    chan[o1, rr, cc] = mag * frac
    k = _triangle(b)
    for o in range(_N_ORI):
        chan[o] = cv2.sepFilter2D(chan[o], -1, k, k, borderType=cv2.BORDER_CONSTANT)
    cells = np.arange(_N_CELLS) * b
    rows = y0[:, None] + cells[None, :]  # (ny, 4)
    cols = x0[:, None] + cells[None, :]  # (nx, 4)
    # (8, ny, nx, 4, 4) -> (ny, nx, 4 (y cell), 4 (x cell), 8)
    d = chan[:, rows[:, None, :, None], cols[None, :, None, :]]
    d = np.ascontiguousarray(d.transpose(1, 2, 3, 4, 0)).reshape(-1, SIFT_DIM)
    mass = d.sum(axis=1) / (_N_CELLS * _N_CELLS * b * b)  # mean gradient per pixel
    cx = x0 + span / 2.0
    cy = y0 + span / 2.0
    xy = np.stack(np.meshgrid(cx, cy), axis=-1).reshape(-1, 2).astype(np.float32)
    return _phow_normalise(d, mass < contrast_threshold, rootsift), xy


def _phow_normalise(d: np.ndarray, flat: np.ndarray, rootsift: bool) -> np.ndarray:
    """SIFT normalisation (L2, clip 0.2, L2) then optionally RootSIFT; ``flat`` rows -> 0."""
    n = np.linalg.norm(d, axis=1, keepdims=True)
    d = d / np.maximum(n, 1e-12)
    np.minimum(d, 0.2, out=d)
    d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
    if rootsift:
        d /= np.maximum(d.sum(axis=1, keepdims=True), 1e-12)
        np.sqrt(d, out=d)
    d[flat] = 0.0
    return d.astype(np.float32, copy=False)
