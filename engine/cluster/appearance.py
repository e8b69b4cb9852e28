"""The global appearance channel of the grouping: a HOG of the whole photo (issue #22).

The dense channel (:mod:`engine.cluster.channel`) describes a photo by a bag of local
SIFT windows matched with a vocabulary-guided pyramid; it knows nothing of the photo's
overall layout. :func:`appearance_descriptor` adds one global vector per photo: the
histograms of oriented gradients (Dalal & Triggs 2005, ``skimage.feature.hog``) of the
photo's grey levels (white frame trimmed, as the dense channel does) warped to
``size x size`` pixels -- 9 orientations in 4 x 4 cells of 16 pixels, blocks of 2 x 2
cells, L2-Hys, 324 values of unit length. :func:`appearance_kernel` compares two of them
with a Gaussian kernel ``exp(-gamma ||a - b||^2)`` and :func:`combine_kernels` mixes it
with the pyramid-match kernel: ``(1 - w) K_dense + w K_appearance`` (both have a unit
diagonal; so has the mix). The descriptor is computed with the dense features, in the
same worker and from the same decoded image, and cached beside them in the index
(:class:`engine.cluster.CategoryChannel`).

Measurement (the grouping tasks of ``tests/benchmarks/quality.py``, full mode; the whole
pipeline -- normalized cut, feature masks, SVM on the prototypes -- with the kernel
replaced; accuracy with k given, mean (worst) over each family's tasks; auto: accuracy of
the 4-class tasks with automatic k and the k hits of the 4- and 8-class ones)::

    kernel                    C-4   4 classes    8 classes    20 classes   ETH   mean  auto  hit
    pyramid match (before)    .925  .559 (.396)  .490 (.386)  .402 (.388)  .378  .551  .434  3/10
    + HOG w .5 gamma 2 (now)  .919  .593 (.440)  .578 (.508)  .470 (.455)  .520  .616  .562  6/10
    + HOG, adaptive gamma     .919  .602 (.440)  .582 (.537)  .454 (.444)  .497  .611  .562  6/10
    + HOG, w .6               .919  .591 (.457)  .579 (.535)  .463 (.439)  .477  .606  .544  4/10
    + HOG, gamma 3            .919  .567 (.381)  .576 (.545)  .434 (.423)  .525  .604  .559  6/10
    + HOG .4 + HSV .15        .963  .569 (.381)  .569 (.476)  .425 (.396)  .490  .603  .556  7/10

(Adaptive gamma: ``1 / mean ||a - b||^2`` of the collection, 0.41-0.63 on these tasks;
the fixed ``gamma = 2`` lets new photos be compared without collection statistics.)
Screened with the normalized cut alone on the same tasks: HOG of 64 px in 8 px cells,
128 px in 16 px cells, a pyramid of oriented gradients (PHOG, chi-square), GIST-like Gabor
energies, uniform LBP histograms and HSV / Lab colour histograms (chi-square or
intersection, with and without a 2 x 2 grid). On their own, colour and LBP group far
worse than the pyramid match (family mean 0.40 against 0.56); HOG of 64 px in 16 px
cells was the best single addition (0.631 against 0.563 there) and colour, which helps
Caltech-4 and ETH-80, lowers the 4- and 20-class families, so it is left out.

The number of groups (``k="auto"``) is read from the pyramid match alone
(:meth:`engine.cluster.CategoryModel.kernels`, ``k_kernel`` of
:func:`engine.cluster.discover_categories`): the mix's spectrum finds k better on the 4-
and 8-class subsets (k hit 6/10 against 3/10) but favours 2-3 coarse groups on the
20-class ones (automatic-k accuracy 0.15 against 0.25, NMI 0.14 against 0.30). With k read
from the pyramid match no family's automatic-k accuracy drops (end to end: 4 classes
0.434 -> 0.485, 8 classes 0.421 -> 0.480, 20 classes 0.245 -> 0.249, ETH-80 0.445 ->
0.465; Caltech-4 0.925 -> 0.919, as with k given).

Since then (issue #22, point 1) exact mode reads k from the mix after all, as the mean
relative eigengap of its 20-, 25-, 30- and 35-nearest-neighbour graphs
(:data:`engine.cluster.pipeline.K_GRAPH_SIZES`); one graph's largest gap moves with its
size (40 neighbours: 4-class hit 0.93 of 15 tasks but 8-class 0.10 of 10; 15: 0.47 and
0.30), the mean over sizes does not collapse the 20-class subsets as the full mix did.
End to end, automatic k before -> after: mean accuracy 0.519 -> 0.559, NMI 0.488 ->
0.499, ARI 0.355 -> 0.372, k hit 0.52 -> 0.72 (4 classes 1/5 -> 4/5, 8 classes 2/5 ->
4/5); accuracy 4 classes 0.485 -> 0.568, 8 classes 0.480 -> 0.553, 20 classes 0.249 ->
0.293, Caltech-4 and ETH-80 unchanged; the worst task falls 0.196 -> 0.115 (a 20-class
subset cut in 2). Nystrom mode keeps the pyramid match's approximate spectrum.

End to end (``quality.py --only caltech,eth80``, full mode, before -> after): mean over
the five families with k given 0.551 -> 0.614 (worst task 0.378 -> 0.444; Caltech-4
0.925 -> 0.919, 4 classes 0.559 -> 0.595, 8 classes 0.490 -> 0.579, 20 classes 0.402 ->
0.460, ETH-80 0.378 -> 0.520), automatic k 0.494 -> 0.519 (k hit rate 0.52 both). The
descriptor costs about 1-2 ms of CPU per photo beside the dense SIFT's 12-17 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "APPEARANCE",
    "APPEARANCE_DIM",
    "appearance_descriptor",
    "appearance_kernel",
    "combine_kernels",
]

#: Settings of the appearance channel: the HOG (``size``, ``cell``; part of the channel's
#: cache key through ``CategoryChannel.key``), the Gaussian kernel's ``gamma`` and the
#: ``weight`` of the appearance kernel in the grouping's affinities.
APPEARANCE: dict[str, Any] = {"size": 64, "cell": 16, "gamma": 2.0, "weight": 0.5}
#: Length of :func:`appearance_descriptor` with the settings of :data:`APPEARANCE` (324):
#: 9 orientations in 2 x 2-cell blocks, ``(size / cell - 1) ** 2`` block positions.
APPEARANCE_DIM = 9 * 4 * (APPEARANCE["size"] // APPEARANCE["cell"] - 1) ** 2


def appearance_descriptor(gray: np.ndarray, *, size: int = 64, cell: int = 16) -> np.ndarray:
    """HOG of a whole (trimmed) grey image warped to ``size x size`` pixels.

    Parameters
    ----------
    gray : (H, W) uint8
        The photo's grey levels (white frame already cut off).
    size : int
        Side in pixels of the square the photo is warped to (area interpolation).
    cell : int
        HOG cell side in pixels (``size`` must be a multiple; blocks of 2 x 2 cells).

    Returns
    -------
    (d,) float32
        Unit L2 norm (all zeros for an image without gradients); d = 324 with the
        defaults: ``9 * 4 * (size / cell - 1) ** 2``.
    """
    import cv2
    from skimage.feature import hog

    g = np.asarray(gray)
    if g.ndim != 2 or g.dtype != np.uint8:
        raise ValueError(f"gray must be an (H, W) uint8 image, got {g.shape} {g.dtype}")
    if size % cell or size // cell < 2:
        raise ValueError(f"size must be a multiple of cell, at least 2 cells: {size}, {cell}")
    if g.size == 0:
        g = np.zeros((size, size), np.uint8)
    small = cv2.resize(g, (size, size), interpolation=cv2.INTER_AREA)
    v = hog(small, orientations=9, pixels_per_cell=(cell, cell), cells_per_block=(2, 2),
            block_norm="L2-Hys", feature_vector=True)  # fmt: skip
    v = np.asarray(v, np.float64)
    norm = float(np.linalg.norm(v))
    return (v / norm if norm > 0 else v).astype(np.float32)


def appearance_kernel(
    a: np.ndarray, b: np.ndarray | None = None, *, gamma: float = 2.0
) -> np.ndarray:
    """Gaussian kernel ``exp(-gamma ||a_i - b_j||^2)`` between appearance descriptors.

    Parameters
    ----------
    a : (n, d) float
    b : (m, d) float, optional
        Default ``a`` (the square kernel, unit diagonal).
    gamma : float

    Returns
    -------
    (n, m) float64
    """
    A = np.asarray(a, np.float64)
    B = A if b is None else np.asarray(b, np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[1]:
        raise ValueError(f"descriptors must be (n, d) and (m, d), got {A.shape}, {B.shape}")
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    K = np.exp(-float(gamma) * np.maximum(d2, 0.0))
    if b is None:
        np.fill_diagonal(K, 1.0)
    return K


def combine_kernels(
    dense: np.ndarray, appearance: np.ndarray, *, weight: float = 0.5
) -> np.ndarray:
    """The grouping's affinities: ``(1 - weight) dense + weight appearance``.

    Parameters
    ----------
    dense : (n, m) float
        Normalised pyramid-match kernel (unit diagonal).
    appearance : (n, m) float
        :func:`appearance_kernel` of the same images.
    weight : float in [0, 1]

    Returns
    -------
    (n, m) float64
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {weight!r}")
    D = np.asarray(dense, np.float64)
    A = np.asarray(appearance, np.float64)
    if D.shape != A.shape:
        raise ValueError(f"kernels differ in shape: {D.shape} and {A.shape}")
    return (1.0 - weight) * D + weight * A
