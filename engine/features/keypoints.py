"""Local image features: SIFT keypoints, dense SIFT, raw patches, and a PCA projection.

An image becomes an unordered *set* of local descriptors (thesis Ch. 2-3: the pyramid match
compares such sets). Three kinds are offered by :func:`extract_features`:

``"sift"``
    Lowe's difference-of-Gaussians keypoints with their SIFT descriptors (OpenCV), the
    ``max_features`` strongest by detector response, strongest first.
``"dense_sift"``
    SIFT descriptors computed at fixed, upright keypoints on a regular grid every ``step``
    pixels, each describing a ``patch_size`` x ``patch_size`` window -- the Caltech-101
    set-up of thesis Sec. 8.2.3 (grid every 8 px, regions about 16 px across).
``"patch"``
    Raw grey-level patches on the same grid, resampled to 8 x 8 and normalised to zero mean
    and unit L2 norm (64-D): the simplest appearance descriptor.

SIFT descriptors are RootSIFT-normalised by default (Arandjelovic & Zisserman 2012):
``d <- sqrt(d / ||d||_1)``, so that the Euclidean distance between RootSIFT vectors equals
the Hellinger distance between the original histograms; every row then has unit L2 norm.
With ``rootsift=False`` rows are simply L2-normalised.

Optionally the normalised image position is appended to each descriptor, as in the thesis'
Caltech-101 experiments ("each appearance descriptor concatenated with its corresponding
positional feature (image position normalized by image dimensions)").

:class:`PCA` learns a linear projection from a sample of descriptors, e.g. SIFT -> 10-D for
low-dimensional uniform-bin pyramids (thesis Secs. 6.2, 7.1, 8.2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO

import numpy as np

from engine.core.validate import check_choice

# OpenCV and engine.features.dense (which imports it and the image readers) are imported
# by the functions that extract: importing this module for :class:`Features` (the index,
# a removal) does not load them

__all__ = ["KINDS", "PCA", "SIFT_CONTRAST", "Features", "extract_features"]

#: Feature kinds understood by :func:`extract_features`.
KINDS: tuple[str, ...] = ("sift", "dense_sift", "patch")
#: OpenCV's (Lowe's) SIFT contrast threshold: the default of :func:`extract_features`.
SIFT_CONTRAST = 0.04

_PATCH_CELLS = 8  # "patch" descriptors are 8 x 8 samples of the window
_FLAT_STD = 0.5  # grey levels: a patch whose std is below this has no appearance to describe


@dataclass(frozen=True, eq=False)
class Features:
    """A set of local features extracted from one image.

    Attributes
    ----------
    descriptors : (M, D) float32 ndarray
        One row per feature (D = 128 for SIFT kinds, 64 for ``"patch"``, + 2 with
        ``append_xy``).
    xy : (M, 2) float32 ndarray
        Pixel position ``(x, y)`` of each feature in the *loaded* (possibly downsized)
        image; ``(0, 0)`` is the centre of the top-left pixel.
    scale : (M,) float32 ndarray or None
        Side in pixels of the square window each descriptor summarises (for SIFT keypoints
        ``6 x`` OpenCV's keypoint size, see :func:`extract_features`).
    angle : (M,) float32 ndarray or None
        Dominant orientation in degrees, ``[0, 360)``, as OpenCV reports it: when the image
        content turns counter-clockwise on screen by t degrees, the angles decrease by t
        (``"sift"`` only; grid kinds are upright and have ``None``).
    image_size : tuple of int
        ``(width, height)`` of the loaded image the positions refer to.
    kind : str
        The kind that produced them, e.g. ``"sift"`` (see :data:`KINDS`).
    """

    descriptors: np.ndarray
    xy: np.ndarray
    scale: np.ndarray | None
    angle: np.ndarray | None
    image_size: tuple[int, int]
    kind: str

    def __post_init__(self) -> None:
        m = self.descriptors.shape[0] if self.descriptors.ndim == 2 else -1
        if m < 0 or self.descriptors.dtype != np.float32:
            raise ValueError(
                f"descriptors must be a (M, D) float32 array, got {self.descriptors.shape} "
                f"{self.descriptors.dtype}"
            )
        if self.xy.shape != (m, 2) or self.xy.dtype != np.float32:
            raise ValueError(f"xy must be ({m}, 2) float32, got {self.xy.shape} {self.xy.dtype}")
        for name in ("scale", "angle"):
            arr = getattr(self, name)
            if arr is not None and (arr.shape != (m,) or arr.dtype != np.float32):
                raise ValueError(f"{name} must be ({m},) float32 or None, got {arr.shape}")

    def __len__(self) -> int:
        return int(self.descriptors.shape[0])

    @property
    def dim(self) -> int:
        """Descriptor dimension D."""
        return int(self.descriptors.shape[1])

    def to_state(self) -> dict[str, np.ndarray | int | float | str | bool]:
        """Arrays and scalars only (``np.savez`` / JSON friendly, no pickle)."""
        state: dict[str, np.ndarray | int | float | str | bool] = {
            "descriptors": self.descriptors,
            "xy": self.xy,
            "image_width": int(self.image_size[0]),
            "image_height": int(self.image_size[1]),
            "kind": self.kind,
        }
        if self.scale is not None:
            state["scale"] = self.scale
        if self.angle is not None:
            state["angle"] = self.angle
        return state

    @classmethod
    def from_state(cls, state: dict) -> Features:
        """Rebuild from :meth:`to_state` output (also accepts an ``np.load`` archive)."""

        def opt(key: str) -> np.ndarray | None:
            return np.asarray(state[key], np.float32) if key in state else None

        return cls(
            descriptors=np.ascontiguousarray(state["descriptors"], np.float32),
            xy=np.ascontiguousarray(state["xy"], np.float32),
            scale=opt("scale"),
            angle=opt("angle"),
            image_size=(int(state["image_width"]), int(state["image_height"])),
            kind=str(state["kind"]),
        )


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _sift_keypoints(
    gray: np.ndarray,
    max_features: int | None,
    rootsift: bool,
    mask: np.ndarray | None = None,
    contrast_threshold: float = SIFT_CONTRAST,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    import cv2

    from engine.features.dense import SIFT_DIM, SIFT_WINDOW_PER_SIZE, normalise_sift

    # (OpenCV keeps its nfeatures strongest before it applies the mask: with a mask, all
    # are detected and the strongest inside are kept below)
    n = 0 if max_features is None or mask is not None else int(max_features)
    sift = cv2.SIFT_create(nfeatures=n, contrastThreshold=contrast_threshold)
    kps, desc = sift.detectAndCompute(gray, mask)
    if not kps or desc is None:
        empty = np.empty(0, np.float32)
        return np.empty((0, SIFT_DIM), np.float32), np.empty((0, 2), np.float32), empty, empty
    xy = cv2.KeyPoint_convert(kps).reshape(-1, 2).astype(np.float32)
    n = len(kps)
    size = np.fromiter((k.size for k in kps), np.float32, n)
    angle = np.fromiter((k.angle for k in kps), np.float32, n)
    response = np.fromiter((k.response for k in kps), np.float32, n)
    # Strongest first; the remaining keys make ties (and OpenCV's thread order) deterministic.
    order = np.lexsort((angle, size, xy[:, 0], xy[:, 1], -response))
    if max_features is not None:
        order = order[:max_features]
    desc = normalise_sift(desc[order], rootsift)
    return desc, xy[order], size[order] * SIFT_WINDOW_PER_SIZE, np.mod(angle[order], 360.0)


def _dense_sift(
    gray: np.ndarray, step: int, patch_size: int, rootsift: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``"dense_sift"``: OpenCV SIFT of upright windows on the centred grid, flat ones
    left out (:func:`engine.features.dense.dense_sift`)."""
    from engine.features.dense import dense_sift

    f = dense_sift(gray, windows=((patch_size, step),), rootsift=rootsift, drop_empty=True)
    return f.descriptors, f.xy


def _raw_patches(
    gray: np.ndarray, centres: np.ndarray, patch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """8 x 8 bilinear samples of each (anti-alias blurred) window, zero mean, unit norm."""
    import cv2

    dim = _PATCH_CELLS * _PATCH_CELLS
    if len(centres) == 0:
        return np.empty((0, dim), np.float32), centres
    img = gray.astype(np.float32)
    cell = patch_size / _PATCH_CELLS
    if cell > 1.0:
        img = cv2.GaussianBlur(img, (0, 0), sigmaX=0.5 * cell, borderType=cv2.BORDER_REFLECT)
    offs = ((np.arange(_PATCH_CELLS) + 0.5) * cell - patch_size / 2).astype(np.float32)
    ox = np.tile(offs, _PATCH_CELLS)  # row-major 8 x 8 sample grid, x varies fastest
    oy = np.repeat(offs, _PATCH_CELLS)
    out = np.empty((len(centres), dim), np.float32)
    chunk = 30_000  # cv2.remap needs map sides < 32767
    for i in range(0, len(centres), chunk):
        c = centres[i : i + chunk]
        mx = np.ascontiguousarray(c[:, :1] + ox[None, :], np.float32)
        my = np.ascontiguousarray(c[:, 1:] + oy[None, :], np.float32)
        out[i : i + chunk] = cv2.remap(
            img, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT
        )
    out -= out.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(out, axis=1)
    keep = norm > _FLAT_STD * np.sqrt(dim)  # std below _FLAT_STD grey levels: flat
    return out[keep] / norm[keep, None], centres[keep]


# --------------------------------------------------------------------------------------------
# public
# --------------------------------------------------------------------------------------------


def extract_features(
    image_or_path: np.ndarray | str | os.PathLike | bytes | IO[bytes],
    kind: str = "sift",
    *,
    max_features: int | None = 500,
    max_side: int | None = 1024,
    rootsift: bool = True,
    step: int = 8,
    patch_size: int = 16,
    append_xy: bool = False,
    xy_weight: float = 1.0,
    within: tuple[float, float, float, float] | None = None,
    contrast_threshold: float = SIFT_CONTRAST,
) -> Features:
    """Extract a set of local features from an image.

    Parameters
    ----------
    image_or_path : ndarray, path, bytes or binary file object
        An image array -- ``(H, W)`` or ``(H, W, 3|4)`` RGB(A), uint8 (or float in ``[0, 1]``)
        -- or anything :func:`engine.io.imageio.load_gray` accepts (loaded straight to grey).
    kind : {"sift", "dense_sift", "patch"}, optional
        See the module docstring.
    max_features : int or None, optional
        ``"sift"`` only: keep at most this many keypoints, strongest detector response
        first (``None``: all). Grid kinds return every grid window with some texture;
        their count is set by ``step``.
    max_side : int or None, optional
        Images (loaded or given as arrays) whose longest side exceeds this are shrunk to it
        first; positions refer to the shrunk image. ``None`` keeps full resolution.
    rootsift : bool, optional
        SIFT kinds: RootSIFT (``sqrt`` of the L1-normalised histogram) if True, else L2
        normalisation. Either way each row has unit L2 norm.
    step : int, optional
        Grid kinds: distance in pixels between neighbouring windows.
    patch_size : int, optional
        Grid kinds: side in pixels of the square window each descriptor summarises (for
        ``"dense_sift"`` the 4 x 4 SIFT cells are ``patch_size / 4`` pixels wide; OpenCV's
        keypoint size is ``patch_size / 6``).
    append_xy : bool, optional
        Append two columns ``xy_weight * (x / width, y / height)`` to every descriptor,
        the position normalised by the image size (thesis Sec. 8.2.3).
    xy_weight : float, optional
        Scale of the appended position columns relative to the (unit-norm) descriptors.
    within : (left, top, right, bottom) of float, optional
        ``"sift"`` only: keep only keypoints detected inside this rectangle, given as
        fractions of the image's width and height (``(0, 0, 1, 1)``: all of it), and the
        ``max_features`` strongest of *those* (a region described as fully as a whole
        image; search by region, :mod:`engine.index.region`). Descriptors still see the
        pixels around their keypoint; positions stay in the whole (loaded) image.
    contrast_threshold : float, optional
        ``"sift"`` only: OpenCV's contrast threshold of the detector (0.04, Lowe's; lower
        keeps fainter extrema: the haze, stars or JPEG noise of a photo that has almost
        no features otherwise, :func:`engine.workflows.appearance.low_contrast_features`).

    Returns
    -------
    Features
        ``descriptors (M, D) float32`` etc. An image without any detectable feature (e.g. a
        flat colour) gives an empty ``(0, D)`` set, not an error: windows with no texture
        (no gradient for dense SIFT, grey-level std < 0.5 for patches) are left out.

    Raises
    ------
    engine.io.imageio.ImageLoadError
        If a path / bytes input cannot be loaded.
    ValueError
        For an unknown ``kind`` or a non-positive ``step``, ``patch_size``,
        ``max_features``, ``contrast_threshold`` or a bad image array.

    Notes
    -----
    OpenCV's SIFT (Lowe 2004) is run with its default parameters (3 layers per octave,
    contrast threshold 0.04, edge threshold 10, sigma 1.6, input upsampled once). Ties in
    detector response are broken by position, so the output is deterministic.

    Examples
    --------
    >>> import cv2
    >>> rng = np.random.default_rng(0)
    >>> img = cv2.GaussianBlur(rng.integers(0, 256, (120, 160), dtype=np.uint8), (0, 0), 2)
    >>> f = extract_features(img, "dense_sift", step=8, patch_size=16)
    >>> f.descriptors.shape, f.descriptors.dtype
    ((266, 128), dtype('float32'))
    """
    check_choice(kind, "kind", KINDS)
    for name, value in (("step", step), ("patch_size", patch_size)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if max_features is not None and (
        not isinstance(max_features, (int, np.integer)) or max_features < 1
    ):
        raise ValueError(f"max_features must be a positive integer or None, got {max_features!r}")
    if not np.isfinite(xy_weight):
        raise ValueError(f"xy_weight must be finite, got {xy_weight!r}")
    if not (np.isfinite(contrast_threshold) and contrast_threshold > 0):
        raise ValueError(f"contrast_threshold must be positive, got {contrast_threshold!r}")
    if within is not None and (
        kind != "sift" or len(within) != 4 or not np.isfinite(np.asarray(within, float)).all()
    ):
        raise ValueError(f"within must be 4 finite fractions, for kind 'sift', got {within!r}")
    from engine.features.dense import centred_grid, gray_image

    gray = gray_image(image_or_path, max_side)
    h, w = gray.shape
    scale: np.ndarray | None
    angle: np.ndarray | None = None
    if kind == "sift":
        mask = None
        if within is not None:
            left, top, right, bottom = (float(v) for v in within)
            mask = np.zeros((h, w), np.uint8)
            x0, x1 = max(0, int(np.floor(left * w))), min(w, int(np.ceil(right * w)))
            y0, y1 = max(0, int(np.floor(top * h))), min(h, int(np.ceil(bottom * h)))
            mask[y0:y1, x0:x1] = 255
        desc, xy, scale, angle = _sift_keypoints(
            gray, max_features, rootsift, mask, contrast_threshold
        )
    else:
        if kind == "dense_sift":
            desc, xy = _dense_sift(gray, int(step), int(patch_size), rootsift)
        else:
            centres = centred_grid(w, h, int(step), int(patch_size))
            desc, xy = _raw_patches(gray, centres, int(patch_size))
        scale = np.full(len(xy), patch_size, np.float32)
    if append_xy:
        pos = xy / np.array([w, h], np.float32) * np.float32(xy_weight)
        desc = np.concatenate([desc, pos.astype(np.float32)], axis=1)
    return Features(
        descriptors=np.ascontiguousarray(desc, np.float32),
        xy=np.ascontiguousarray(xy, np.float32),
        scale=None if scale is None else np.ascontiguousarray(scale, np.float32),
        angle=None if angle is None else np.ascontiguousarray(angle, np.float32),
        image_size=(int(w), int(h)),
        kind=kind,
    )


class PCA:
    """Principal components of a sample of descriptors, as a linear projection.

    ``transform(X) = (X - mean) @ components.T``: coordinates of each row in the subspace
    of the ``n_components`` directions of largest variance (the principal axes, i.e. the
    leading eigenvectors of the sample covariance, found with numpy's SVD). Used for
    low-dimensional PCA-SIFT-style features (thesis Secs. 6.2, 7.1, 8.2).

    Parameters
    ----------
    n_components : int or None, optional
        Output dimension k (``None``: keep all D).
    whiten : bool, optional
        Divide each output coordinate by its standard deviation (off by default: the pyramid
        match wants distances in the original descriptor units).

    Attributes
    ----------
    mean_ : (D,) float32 ndarray
    components_ : (k, D) float32 ndarray
        Orthonormal rows, largest variance first; each row's largest-magnitude entry is
        positive (a deterministic sign).
    explained_variance_ : (k,) float64 ndarray
        Variance of the sample along each component (non-increasing).
    """

    def __init__(self, n_components: int | None = 10, *, whiten: bool = False) -> None:
        if n_components is not None and (
            not isinstance(n_components, (int, np.integer)) or n_components < 1
        ):
            raise ValueError(
                f"n_components must be a positive integer or None, got {n_components!r}"
            )
        self._k = None if n_components is None else int(n_components)
        self.whiten = bool(whiten)
        self.mean_: np.ndarray | None = None
        self.components_: np.ndarray | None = None
        self.explained_variance_: np.ndarray | None = None

    @property
    def n_components(self) -> int:
        """Output dimension k (after :meth:`fit`; before it, the requested value)."""
        if self.components_ is not None:
            return int(self.components_.shape[0])
        if self._k is None:
            raise ValueError("n_components=None is only known after fit()")
        return self._k

    @property
    def n_features(self) -> int:
        """Input dimension D."""
        self._check_fitted()
        return int(self.components_.shape[1])

    def fit(self, X: np.ndarray) -> PCA:
        """Learn the mean and principal axes of ``X``.

        Parameters
        ----------
        X : (N, D) array_like
            A sample of descriptors, N >= 2 (e.g. a random subset of a collection's
            features; draw it with a seeded generator for reproducibility).

        Returns
        -------
        self
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D (N, D) array, got shape {X.shape}")
        n, d = X.shape
        if n < 2:
            raise ValueError(f"X must have at least 2 rows to fit a PCA, got {n}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        k = d if self._k is None else self._k
        if k > d:
            raise ValueError(f"n_components={k} exceeds the descriptor dimension {d}")
        mean = X.mean(axis=0)
        Xc = X - mean
        if n > 4 * d:  # SVD of the D x D scatter matrix: O(N D^2) time, O(D^2) memory
            _, s2, vt = np.linalg.svd(Xc.T @ Xc, hermitian=True)
            var = s2 / (n - 1)
        else:
            _, s, vt = np.linalg.svd(Xc, full_matrices=False)
            var = s**2 / (n - 1)
        vt = vt[:k]
        if vt.shape[0] < k:  # N - 1 < k: pad with an orthonormal completion
            q, _ = np.linalg.qr(np.concatenate([vt.T, np.eye(d)], axis=1))
            vt = q[:, :k].T
            var = np.concatenate([var, np.zeros(k - len(var))])
        idx = np.argmax(np.abs(vt), axis=1)
        vt = vt * np.sign(vt[np.arange(k), idx])[:, None]
        self.mean_ = mean.astype(np.float32)
        self.components_ = np.ascontiguousarray(vt, np.float32)
        self.explained_variance_ = np.asarray(var[:k], np.float64)
        return self

    def _check_fitted(self) -> None:
        if self.components_ is None:
            raise RuntimeError("PCA is not fitted; call fit() first")

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Project ``X (N, D)`` to ``(N, k) float32`` principal coordinates."""
        self._check_fitted()
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.components_.shape[1]:
            raise ValueError(f"X must be (N, {self.components_.shape[1]}), got shape {X.shape}")
        Y = (X - self.mean_) @ self.components_.T
        if self.whiten:
            Y /= np.sqrt(np.maximum(self.explained_variance_, 1e-12)).astype(np.float32)
        return np.ascontiguousarray(Y, np.float32)

    def inverse_transform(self, Y: np.ndarray) -> np.ndarray:
        """Map ``(N, k)`` coordinates back to ``(N, D) float32`` descriptor space."""
        self._check_fitted()
        Y = np.asarray(Y, dtype=np.float32)
        if Y.ndim != 2 or Y.shape[1] != self.components_.shape[0]:
            raise ValueError(f"Y must be (N, {self.components_.shape[0]}), got shape {Y.shape}")
        if self.whiten:
            Y = Y * np.sqrt(np.maximum(self.explained_variance_, 1e-12)).astype(np.float32)
        return np.ascontiguousarray(Y @ self.components_ + self.mean_, np.float32)

    def to_state(self) -> dict[str, np.ndarray | int | float | str | bool]:
        """Arrays and scalars only (``np.savez`` / JSON friendly, no pickle)."""
        self._check_fitted()
        return {
            "mean": self.mean_,
            "components": self.components_,
            "explained_variance": self.explained_variance_,
            "whiten": self.whiten,
        }

    @classmethod
    def from_state(cls, state: dict) -> PCA:
        """Rebuild a fitted PCA from :meth:`to_state` output."""
        components = np.ascontiguousarray(state["components"], np.float32)
        pca = cls(components.shape[0], whiten=bool(state["whiten"]))
        pca.mean_ = np.ascontiguousarray(state["mean"], np.float32)
        pca.components_ = components
        pca.explained_variance_ = np.asarray(state["explained_variance"], np.float64)
        return pca
