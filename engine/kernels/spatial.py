"""Spatial pyramid matching: multi-scale dense SIFT and a pyramid match in image space.

Lazebnik, Schmid & Ponce (2006) apply the pyramid match kernel (thesis Ch. 3, Eq. 3.10)
to the *positions* of features that have been quantised to visual words: for every word
``m`` the positions of its features are binned in ``g x g`` grids (``g = 2**G, ..., 2,
1``) and the match counts, per level, the histogram intersection of the two images'
(word, cell) counts. This module provides

* :func:`dense_sift` -- PHOW-like dense SIFT at several bin sizes (VLFeat ``dsift``
  with a flat window) and :func:`grid_sift` -- OpenCV SIFT on a coarse grid of large
  windows: two presets of :func:`engine.features.dense.dense_sift`;
* :class:`SpatialPyramidBinning` -- a :class:`engine.kernels.binning.Binning` whose nested bins
  are (visual word, grid cell) pairs, finest grid first, optionally followed by coarser
  vocabulary levels (the feature-space pyramid of thesis Ch. 4 on top of the spatial
  one). Plugged into :class:`engine.kernels.pyramid.PyramidMatch` it gives the spatial pyramid
  match kernel, Eq. 3.10 with level weights ``w_l = 2**-l`` (finest first), i.e. the
  weights ``1/2**(L-l)`` of Lazebnik et al. Eq. (3);
* :func:`with_positions` -- stack descriptors and normalised positions into the
  ``(M, D + 2)`` points the binning expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.validate import as_point_set, check_positive
from engine.features.dense import SIFT_DIM, DenseSift
from engine.features.dense import dense_sift as _dense_sift

if TYPE_CHECKING:
    from engine.kernels.pyramid import PyramidCodes

__all__ = [
    "DenseSift",
    "SpatialPyramidBinning",
    "SpatialPyramidMatch",
    "dense_sift",
    "grid_sift",
    "with_positions",
]

DIM = SIFT_DIM  # 128


# --------------------------------------------------------------------------------------------
# dense SIFT presets (engine.features.dense)
# --------------------------------------------------------------------------------------------


def dense_sift(
    gray: np.ndarray,
    *,
    bin_sizes: tuple[int, ...] = (4, 6, 8, 10),
    step: int = 4,
    max_side: int | None = 300,
    magnif: float = 6.0,
    contrast_threshold: float = 0.005,
    rootsift: bool = True,
) -> DenseSift:
    """Dense SIFT on a regular grid at several scales (PHOW, Bosch et al. 2007).

    :func:`engine.features.dense.dense_sift` with ``method="phow"`` and windows of
    ``4 b`` pixels every ``step`` pixels for every bin size ``b``: for every bin size the
    image is smoothed with a Gaussian of ``sigma = sqrt((b / magnif)**2 - 0.25)``,
    gradient magnitudes are split between the two nearest of 8 orientations and spread
    over space with the bilinear (triangular) kernel of a ``b``-pixel cell; a descriptor
    then reads the 4 x 4 cells x 8 orientations at cell centres ``b`` pixels apart
    (VLFeat ``vl_dsift`` with a flat window). Descriptors are L2-normalised, clipped at
    0.2 and renormalised (Lowe 2004), then mapped to RootSIFT (L1-normalise, square root;
    Arandjelovic & Zisserman 2012).

    Parameters
    ----------
    gray : (H, W) uint8 or float array
        Grey image (uint8 0..255 or float 0..1).
    bin_sizes : tuple of int, default (4, 6, 8, 10)
        Spatial bin sizes in pixels (windows of ``4 b`` pixels), as VLFeat PHOW.
    step : int, default 4
        Grid step in pixels between window centres (same for every scale).
    max_side : int or None, default 300
        Downscale (area interpolation) so the longer side is at most this; None keeps it.
    magnif : float, default 6.0
        Smoothing ``sigma = b / magnif`` (VLFeat's magnification factor).
    contrast_threshold : float, default 0.005
        Windows whose mean gradient magnitude (grey levels in ``[0, 1]`` per pixel) is
        below this get an all-zero descriptor (kept: flat regions are informative too).
    rootsift : bool, default True

    Returns
    -------
    DenseSift
        Windows of every scale fully inside the image, finest scale first; ``size`` is
        the bin size ``b``.
    """
    g = np.asarray(gray)
    if g.ndim != 2:
        raise ValueError(f"gray must be a 2-D (H, W) array, got shape {g.shape}")
    if int(step) != step or step < 1:
        raise ValueError(f"step must be an integer >= 1, got {step!r}")
    if not bin_sizes or any(int(b) != b or b < 1 for b in bin_sizes):
        raise ValueError(f"bin_sizes must be positive integers, got {bin_sizes!r}")
    return _dense_sift(
        g,
        method="phow",
        windows=tuple((4 * int(b), int(step)) for b in bin_sizes),
        max_side=max_side,
        magnif=magnif,
        contrast_threshold=contrast_threshold,
        rootsift=rootsift,
    )


def grid_sift(
    gray: np.ndarray,
    *,
    scales: tuple[tuple[int, int], ...] = ((12, 8), (24, 12)),
    max_features: int | None = 400,
    max_side: int | None = 300,
    trim_border: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV SIFT descriptors on a regular keypoint grid with large windows.

    Complements :func:`dense_sift` with wide context: keypoints of OpenCV ``size`` ``s``
    (descriptor window ``6 s`` pixels: 72 and 144 px for the defaults on a 300 px image)
    every ``step`` pixels, RootSIFT-normalised: :func:`engine.features.dense.dense_sift`
    with ``grid="corner"``, windows of ``6 s`` pixels and keypoint angle -1 (OpenCV's
    default).

    Parameters
    ----------
    gray : (H, W) uint8
    scales : tuple of (size, step)
        OpenCV keypoint size and grid step per scale, in pixels of the resized image.
    max_features : int or None, default 400
        Evenly spaced subsample (over the scale-major grid order) of at most this many.
    max_side : int or None, default 300
        Downscale (area) so the longer side is at most this (after border trimming).
    trim_border : bool, default True
        First crop uniform white frames (grey level 245 and above; many Caltech-101
        images have them).

    Returns
    -------
    descriptors : (M, 128) float32
        RootSIFT.
    xy : (M, 2) float32
        Keypoint positions divided by the (trimmed, resized) image width and height.
    """
    g = np.asarray(gray)
    if g.ndim != 2 or g.dtype != np.uint8:
        raise ValueError(f"gray must be a 2-D uint8 array, got {g.dtype} {g.shape}")
    f = _dense_sift(
        g,
        windows=tuple((6 * size, step) for size, step in scales),
        grid="corner",
        angle=-1.0,
        max_side=max_side,
        trim=245 if trim_border else 0,
        max_features=max_features,
    )
    return f.descriptors, f.normalized_xy()


# --------------------------------------------------------------------------------------------
# spatial pyramid binning
# --------------------------------------------------------------------------------------------


def with_positions(words: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Stack word ids and normalised positions into the points of :class:`SpatialPyramidBinning`.

    Parameters
    ----------
    words : (M,) or (M, F) int
        Visual word of every feature, or its vocabulary bins at ``F`` levels, finest
        first (as ``VocabularyTree.assign(...)[0]``); ids must be below ``2**24`` (exact
        in float32).
    xy : (M, 2) float
        Feature positions divided by the image width and height, in ``[0, 1)``.

    Returns
    -------
    (M, F + 2) float32
    """
    w = np.asarray(words)
    if w.ndim == 1:
        w = w[:, None]
    p = np.asarray(xy, np.float32)
    if w.ndim != 2 or p.shape != (w.shape[0], 2):
        raise ValueError(f"words (M, F) and xy (M, 2) disagree: {w.shape} vs {p.shape}")
    if w.size and (w.min() < 0 or w.max() >= 1 << 24):
        raise ValueError("words must be ids in [0, 2**24)")
    return np.concatenate([w.astype(np.float32), p], axis=1)


class SpatialPyramidBinning:
    """Nested (visual word, image cell) bins: the spatial pyramid as a pyramid binning.

    Points are rows ``(word_0, ..., word_{F-1}, x, y)`` (see :func:`with_positions`): the
    feature's vocabulary bins at ``F`` levels, finest first, and its position normalised
    to ``[0, 1)``. Levels, finest first:

    * ``l = 0 .. G-1``: ``(word_0, cell of the 2**(G-1-l) x 2**(G-1-l) grid)`` -- the
      spatial pyramid of Lazebnik et al. (2006), finest grid first, ending with the whole
      image (a bag of words);
    * ``l = G .. G+F-2``: ``word_1, ..., word_{F-1}`` over the whole image -- coarser
      vocabulary bins (the vocabulary-guided feature-space pyramid, thesis Ch. 4), so
      features with similar but not identical words still match, at a lower weight.

    Every bin lies inside one bin of the next level, as the pyramid match requires.
    Global weights ``w_l = ratio**l`` (Eq. 3.10 with ``1/2**l`` for ``ratio = 0.5``); the
    pyramid match then weighs the histogram intersections ``I_l`` by
    ``w_l - w_{l+1}`` (``w_L = 0``): for ``G = 3, F = 1`` that is ``I_0 / 2 + I_1 / 4 +
    I_2 / 4``, Lazebnik et al. Eq. (3) with ``L = 2``.

    Parameters
    ----------
    grid_levels : int, default 3
        ``G``: grids ``2**(G-1)`` (finest), ..., 2, 1.
    feature_levels : int, default 1
        ``F``: word columns used (1 = the plain spatial pyramid match).
    ratio : float in (0, 1), default 0.5
        Weight ratio between consecutive levels.

    Examples
    --------
    >>> b = SpatialPyramidBinning(grid_levels=2)
    >>> pts = with_positions(np.array([3, 3]), np.array([[0.1, 0.1], [0.9, 0.1]]))
    >>> b.assign(pts)[0].tolist()   # word 3 in cells 0 and 1 of the 2 x 2 grid, then 1 x 1
    [[12, 3], [13, 3]]
    """

    def __init__(self, grid_levels: int = 3, feature_levels: int = 1, ratio: float = 0.5):
        if int(grid_levels) != grid_levels or grid_levels < 1:
            raise ValueError(f"grid_levels must be an integer >= 1, got {grid_levels!r}")
        if int(feature_levels) != feature_levels or feature_levels < 1:
            raise ValueError(f"feature_levels must be an integer >= 1, got {feature_levels!r}")
        if not 0 < ratio < 1:
            raise ValueError(f"ratio must be in (0, 1), got {ratio!r}")
        self.grid_levels = int(grid_levels)
        self.feature_levels = int(feature_levels)
        self.ratio = float(ratio)
        self.n_levels = self.grid_levels + self.feature_levels - 1

    @property
    def dim(self) -> int:
        """Columns of a point: ``feature_levels + 2``."""
        return self.feature_levels + 2

    def fit(self, sample: np.ndarray) -> SpatialPyramidBinning:
        """Nothing to learn (the vocabulary is upstream); checks the point layout."""
        as_point_set(sample, "sample", dim=self.dim)
        return self

    def assign(self, X: np.ndarray) -> tuple[np.ndarray, None]:
        """Nested bins of word points, finest level first.

        Parameters
        ----------
        X : (M, feature_levels + 2) float32
            Rows ``(word_0, ..., word_{F-1}, x, y)``.

        Returns
        -------
        bins : (M, n_levels) int64
        dist : None
            No distances to bin centres (global weights only).
        """
        X = as_point_set(X, "X", dim=self.dim)
        words = X[:, : self.feature_levels].astype(np.int64)
        xy = np.clip(X[:, -2:].astype(np.float64), 0.0, 1.0)
        bins = np.empty((X.shape[0], self.n_levels), np.int64)
        for lev in range(self.grid_levels):
            g = 1 << (self.grid_levels - 1 - lev)
            cell = np.minimum((xy * g).astype(np.int64), g - 1)
            bins[:, lev] = (words[:, 0] * g + cell[:, 1]) * g + cell[:, 0]
        bins[:, self.grid_levels :] = words[:, 1:]
        return bins, None

    def bin_weights(self, level: int, bins: np.ndarray) -> np.ndarray:
        """``ratio**level`` for every bin (global weights, non-increasing to the parent)."""
        if int(level) != level or not 0 <= level < self.n_levels:
            raise ValueError(f"level must be an integer in [0, {self.n_levels}), got {level!r}")
        return np.full(np.shape(bins)[0], self.ratio**level, np.float64)

    def to_state(self) -> dict[str, Any]:
        return {
            "kind": "spatial_pyramid",
            "grid_levels": self.grid_levels,
            "feature_levels": self.feature_levels,
            "ratio": self.ratio,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SpatialPyramidBinning:
        return cls(int(state["grid_levels"]), int(state["feature_levels"]), float(state["ratio"]))

    def __repr__(self) -> str:
        return (
            f"SpatialPyramidBinning(grid_levels={self.grid_levels}, "
            f"feature_levels={self.feature_levels}, ratio={self.ratio})"
        )


# --------------------------------------------------------------------------------------------
# spatial pyramid match kernel
# --------------------------------------------------------------------------------------------


class SpatialPyramidMatch:
    """Spatial pyramid match kernel over a learned vocabulary (Lazebnik et al. 2006).

    A :class:`engine.kernels.vocabulary.VocabularyTree` quantises descriptors to visual words
    (``branching**depth`` leaves; ``depth=1`` is flat k-means); every image becomes a set
    of word points (:func:`with_positions`) and the kernel is
    :class:`engine.kernels.pyramid.PyramidMatch` over :class:`SpatialPyramidBinning`, normalised
    as thesis Eq. 3.12, ``P(X, Y) / sqrt(P(X, X) P(Y, Y))`` (self-similarity 1; a Mercer
    kernel since every term is a histogram intersection with a non-negative weight).

    Parameters
    ----------
    branching : int, default 400
        Tree branching ``k``.
    depth : int, default 1
        Tree levels below the root; words = leaves, ``k**depth`` at most.
    grid_levels : int, default 3
        Grids 4 x 4, 2 x 2, 1 x 1 for 3.
    feature_levels : int, default 1
        Vocabulary levels used, finest first (``<= depth + 1``); more than 1 adds coarser
        word bins above the whole-image level (feature-space pyramid).
    ratio : float, default 0.5
        Level weight ratio (see :class:`SpatialPyramidBinning`).
    sample_size : int, default 200_000
        Descriptors (random) the vocabulary is fitted on.
    random_state : int, default 0

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> descs = [rng.random((60, 16), dtype=np.float32) for _ in range(3)]
    >>> xys = [rng.random((60, 2), dtype=np.float32) for _ in range(3)]
    >>> spm = SpatialPyramidMatch(branching=8).fit(descs)
    >>> K = spm.kernel(spm.encode(descs, xys))
    >>> K.shape, bool(np.allclose(np.diag(K), 1.0))
    ((3, 3), True)
    """

    def __init__(
        self,
        branching: int = 400,
        depth: int = 1,
        *,
        grid_levels: int = 3,
        feature_levels: int = 1,
        ratio: float = 0.5,
        sample_size: int = 200_000,
        random_state: int = 0,
    ) -> None:
        if int(depth) != depth or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        if int(feature_levels) != feature_levels or not 1 <= feature_levels <= depth + 1:
            raise ValueError(
                f"feature_levels must be an integer in [1, depth + 1 = {depth + 1}], "
                f"got {feature_levels!r}"
            )
        check_positive(sample_size, "sample_size")
        self.branching = int(branching)
        self.depth = int(depth)
        self.sample_size = int(sample_size)
        self.random_state = int(random_state)
        self.binning = SpatialPyramidBinning(grid_levels, feature_levels, ratio)
        self.vocabulary_: Any = None
        self.pm_: Any = None

    def _new_pm(self) -> Any:
        from engine.kernels.pyramid import PyramidMatch

        return PyramidMatch(
            self.binning, weights="global", normalize="self", n_shifts=1, n_sides=1,
            pca_dim=None,
        )  # fmt: skip

    def fit(self, descriptor_sets: Sequence[np.ndarray] | np.ndarray) -> SpatialPyramidMatch:
        """Learn the vocabulary from training descriptors.

        Parameters
        ----------
        descriptor_sets : list of (M_i, D) float arrays, or one stacked (N, D) array
            At most ``sample_size`` random rows are clustered.

        Returns
        -------
        self
        """
        from engine.kernels.vocabulary import VocabularyTree

        if isinstance(descriptor_sets, np.ndarray):
            descriptor_sets = [descriptor_sets]
        sizes = np.array([len(d) for d in descriptor_sets], np.int64)
        if sizes.sum() == 0:
            raise ValueError("descriptor_sets contain no descriptors to fit on")
        rng = np.random.default_rng(self.random_state)
        total = int(sizes.sum())
        pick = np.sort(rng.choice(total, min(total, self.sample_size), replace=False))
        owner = np.searchsorted(np.cumsum(sizes), pick, side="right")
        local = pick - (np.cumsum(sizes) - sizes)[owner]
        sample = np.empty((pick.size, np.shape(descriptor_sets[0])[1]), np.float32)
        for i in np.unique(owner):  # gather without stacking all descriptors
            sel = owner == i
            sample[sel] = np.asarray(descriptor_sets[i], np.float32)[local[sel]]
        self.vocabulary_ = VocabularyTree(
            self.branching, self.depth + 1, random_state=self.random_state
        ).fit(sample)
        self.pm_ = self._new_pm().fit([np.zeros((1, self.binning.dim), np.float32)])
        return self

    def _check_fitted(self) -> None:
        if self.vocabulary_ is None:
            raise RuntimeError("SpatialPyramidMatch is not fitted; call fit() first")

    def words(self, descriptors: np.ndarray) -> np.ndarray:
        """(M, feature_levels) int64 vocabulary bins of ``(M, D)`` descriptors, finest first."""
        self._check_fitted()
        bins, _ = self.vocabulary_.assign(np.asarray(descriptors, np.float32))
        return bins[:, : self.binning.feature_levels]

    def points(
        self, descriptor_sets: Sequence[np.ndarray], xy_sets: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        """Word points ``(M_i, feature_levels + 2)`` float32 per image (:func:`with_positions`).

        ``xy_sets[i]`` are positions normalised to ``[0, 1)`` by the image width and height.
        """
        if len(descriptor_sets) != len(xy_sets):
            raise ValueError(
                f"descriptor_sets has {len(descriptor_sets)} entries, xy_sets {len(xy_sets)}"
            )
        return [
            with_positions(self.words(d), p) for d, p in zip(descriptor_sets, xy_sets, strict=True)
        ]

    def encode(
        self, descriptor_sets: Sequence[np.ndarray], xy_sets: Sequence[np.ndarray] | None = None
    ) -> PyramidCodes:
        """Histogram pyramids of images, for :meth:`kernel`.

        Parameters
        ----------
        descriptor_sets : list of (M_i, D) arrays
            Descriptors; or word points from :meth:`points` when ``xy_sets`` is None.
        xy_sets : list of (M_i, 2) arrays, optional
            Normalised positions.
        """
        self._check_fitted()
        pts = descriptor_sets if xy_sets is None else self.points(descriptor_sets, xy_sets)
        return self.pm_.encode(pts)

    def kernel(self, a: Any, b: Any = None) -> np.ndarray:
        """(len a, len b) float64 normalised spatial pyramid match (codes or word points)."""
        self._check_fitted()
        return self.pm_.kernel(a, b)

    def to_state(self) -> dict[str, Any]:
        """Parameters and the vocabulary's state (prefixed ``vocabulary.``)."""
        self._check_fitted()
        state: dict[str, Any] = {
            "branching": self.branching,
            "depth": self.depth,
            "sample_size": self.sample_size,
            "random_state": self.random_state,
            **{f"binning.{k}": v for k, v in self.binning.to_state().items()},
        }
        state.update({f"vocabulary.{k}": v for k, v in self.vocabulary_.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SpatialPyramidMatch:
        from engine.kernels.vocabulary import VocabularyTree

        obj = cls(
            int(state["branching"]),
            int(state["depth"]),
            grid_levels=int(state["binning.grid_levels"]),
            feature_levels=int(state["binning.feature_levels"]),
            ratio=float(state["binning.ratio"]),
            sample_size=int(state["sample_size"]),
            random_state=int(state["random_state"]),
        )
        voc = {k[len("vocabulary.") :]: v for k, v in state.items() if k.startswith("vocabulary.")}
        obj.vocabulary_ = VocabularyTree.from_state(voc)
        obj.pm_ = obj._new_pm().fit([np.zeros((1, obj.binning.dim), np.float32)])
        return obj
