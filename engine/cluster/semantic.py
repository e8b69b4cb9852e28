"""The semantic channel of the grouping: what a photo shows, as a pretrained network sees it.

The other channels describe a photo by its own pixels: dense SIFT windows matched by a
vocabulary-guided pyramid (thesis Ch. 4 and 9, :mod:`engine.cluster.channel`) and a global
HOG (:mod:`engine.cluster.appearance`). On random subsets of Caltech-101 classes they
group at most about 0.65-0.71 of the photos right, whatever their settings (the docstrings
of :mod:`engine.cluster.appearance` and :mod:`engine.cluster.fisher` list what was tried).
Since the thesis, the field found that the activations of a convolutional network trained
to classify ImageNet describe the categories of other photos far better than hand-made
features do: "off-the-shelf" (Donahue et al., DeCAF, ICML 2014; Razavian et al., CVPR
Workshops 2014), and the usual input of deep clustering since.

:func:`semantic_embedding` runs EfficientNet-Lite0 (Tan & Le, ICML 2019; ImageNet-1k,
4.7 M parameters, 13.5 MB) through OpenCV's DNN module -- no new dependency -- on the
photo shrunk to 224 x 224 pixels, values scaled to [-1, 1], and averages its last
convolution's 7 x 7 positions: 1280 values, scaled to unit length. The model
file and its licence (Apache 2.0) are in ``engine/cluster/data``;
``tests/benchmarks/make_semantic_model.py`` made it. :func:`semantic_kernel` compares two
photos by the cosine of their embeddings (below 0 counted as 0), and :func:`mix_semantic`
mixes it into the grouping's affinities::

    C = (1 - a) [(1 - w) K_pyramid + w K_HOG] + a K_semantic,   a = SEMANTIC["weight"]

Each photo's embedding is computed once, beside its dense features and from the same file,
and kept in the index (:class:`engine.cluster.CategoryChannel`, about 6 ms a photo).

Measured (issue #22) on the pipeline's own affinities of every grouping task of
``tests/benchmarks/quality.py`` (full mode; 5 random 4- and 8-class and 3 20-class subsets
of Caltech-101 dev, Caltech-4, ETH-80 dev, 5 folders each of 10 and 18 Holidays scenes and
of 12 and 20 UKBench objects; search pairs on as by default); mean over the 9 families of
the accuracy with k given / automatic k, k within 1, NMI / ARI of automatic k::

    a (cosine)   given   auto    k+-1   NMI / ARI     4 classes   20 classes   ETH-80
    0 (before)   0.753   0.716   0.69   .706 / .598   .620        .488         .517
    0.5          0.915   0.856   0.71   .900 / .822   .981        .916         .625
    0.8          0.934   0.884   0.76   .929 / .853   .993        .938         .695
    0.9 (now)    0.941   0.884   0.76   .930 / .855   .993        .932         .757
    1.0          0.947   0.877   0.76   .924 / .844   .993        .926         .792

(4 classes, 20 classes, ETH-80: accuracy with k given.) A Gaussian kernel of the
embeddings' square roots instead of the cosine: within 0.01 either way. 0.9 keeps a tenth of
the local features: with the network alone (1.0) one folder of 18 Holidays scenes was cut
into too few groups (automatic k: accuracy 0.356, against 0.793 at 0.9). The eigengap
then also compares up to :data:`engine.cluster.AUTO_K_MAX` groups (it stopped at 12,
:data:`engine.cluster.EIGENGAP_K_MAX`, where the hand-made affinities had no reliable gap
above): 20-class subsets with automatic k 0.520 -> 0.938, nothing else moved.

What it does not separate: a category and its own kind. The worst of 15 random 4-class
subsets (0.683 with k given) is {brain, buddha, chair, windsor_chair}: the network calls 25
of the 28 Windsor chairs and 14 of the 31 other chairs "rocking chair", the other chairs are
less alike among themselves than they are to the Windsor chairs (mean cosine 0.44 against
0.45), and the cut that splits the brains instead is the better one by normalized cut (2.435
against 2.458 for the true classes) and by silhouette (0.153 against 0.116). Tried
(2026-11-28), in the grouping's own affinities: the classifier's 1,000 scores instead of the
embedding (0.683 on that subset) and the embedding centred on the folder's mean (0.719); on
the embeddings alone (spectral cut, k given, 15 4-class, 10 8-class and 5 20-class subsets):
the larger EfficientNet-Lite2 at 260 pixels (0.676; 4-class mean 0.950 -> 0.944) and the
means of earlier blocks' outputs, alone or added (0.62-0.70; the other subsets lower); the
maximum, a generalized mean (p = 3) or a 2 x 2 grid of means of the last convolution's 7 x 7
positions instead of their mean (0.70-0.71; 4-class mean 0.953-0.960 against 0.950). Tried
(2026-11-29), the same way: other views of the photo -- the mean embedding of the photo and
its mirror image (0.698; 4-, 8-, 20-class means 0.961 / 0.967 / 0.925 -> 0.960 / 0.971 /
0.931, at twice the cost), the centred square instead of the whole photo squeezed (0.669),
the photo padded to a square (0.683), 320 pixels (0.683), and means of these (0.683). With
k = 5 both kinds of chair get their own group.

Tried (2026-11-29) and not kept: the cut against the folder. The embeddings are means of
non-negative activations and share a large common part; k-means of them centred on the
folder's mean, unit length, tells the chairs apart (0.950). In the pipeline the cut took
``(1 + cos) / 2`` of the embeddings minus the folder's mean on its 32 principal directions
and then the partition of lowest normalized cut weighted kernel k-means found from the
spectral one and 10 seeded starts (the Ncut is weighted kernel k-means' objective,
Dhillon, Guan & Kulis, KDD 2004; both parts were needed: against the folder the true
classes have the lower cut, 2.661 against 2.666, but the spectral relaxation does not find
it). ``quality.py`` dev, mean of 9 families: k given 0.936 -> 0.949, automatic 0.927 ->
0.932, 4-class draws 0.961 (worst 0.683) -> 0.976 (0.810), ETH-80 0.757 -> 0.810; held-out
Caltech draws: 8 classes 0.961 -> 0.986, 20 classes 0.938 -> 0.947, but 4 classes 0.981
-> 0.968, draw 29 {bass, mayfly, stop_sign, umbrella} 0.915 -> 0.692 (the bass joined with
the mayflies). What decided it: folders that mix kinds of photo, 18 Holidays scenes with 3
Caltech-101 classes and 2 ETH-80 objects (6 folders, ``simile cluster --k 23``), fell from
0.790 (worst 0.722) to 0.728 (0.629), and the 89-photo walk folder of trips and objects from
0.886 to 0.807 with k = 29: one mean for a folder of several worlds makes every photo of
one world alike. Choosing per folder between the two cuts by their stability under
subsampling picked the failing cut on draw 29.

Caveat: ImageNet's 1,000 classes include many of these categories or close ones (airliner,
moped, daisy), so the network has seen other photos of such things; these photos it has
not, and the tasks measure what a person's folder of them gets. Classes far from ImageNet
(ETH-80's 8 objects on a plain background, 0.757) gain less.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SEMANTIC",
    "SEMANTIC_DIM",
    "SemanticModelError",
    "mix_semantic",
    "semantic_embedding",
    "semantic_kernel",
    "semantic_model_path",
]

#: Settings of the semantic channel: the network (``model``, a file of
#: ``engine/cluster/data``), its input side in pixels (``size``) and the ``weight`` of its
#: kernel in the grouping's affinities. ``model`` and ``size`` are part of the dense
#: channel's cache key (:class:`engine.cluster.CategoryChannel`).
SEMANTIC: dict[str, Any] = {"model": "efficientnet-lite0", "size": 224, "weight": 0.9}
#: Length of :func:`semantic_embedding`.
SEMANTIC_DIM = 1280

_LOCAL = threading.local()  # one network per thread (an OpenCV net is not thread-safe)


class SemanticModelError(RuntimeError):
    """The network file is missing or OpenCV cannot run it."""


def semantic_model_path(model: str = SEMANTIC["model"]) -> Path:
    """The ONNX file of ``model`` shipped with the engine (``engine/cluster/data``)."""
    return Path(__file__).resolve().parent / "data" / f"{model}.onnx"


def _network(model: str) -> Any:
    import cv2

    nets = getattr(_LOCAL, "nets", None)
    if nets is None:
        nets = _LOCAL.nets = {}
    if model not in nets:
        path = semantic_model_path(model)
        if not path.is_file():
            raise SemanticModelError(f"the grouping's network is missing: {path}")
        try:
            nets[model] = cv2.dnn.readNetFromONNX(str(path))
        except cv2.error as exc:
            raise SemanticModelError(f"OpenCV cannot load {path.name}: {exc}") from None
    return nets[model]


def semantic_embedding(
    rgb: np.ndarray, *, model: str = SEMANTIC["model"], size: int = SEMANTIC["size"]
) -> np.ndarray:
    """The network's embedding of one photo (module docstring).

    Parameters
    ----------
    rgb : (H, W, 3) or (H, W) uint8
        The photo, upright (:func:`engine.io.imageio.load_image`); grey is repeated into
        three channels.
    model : str
        Network file name without ``.onnx`` (:func:`semantic_model_path`).
    size : int
        Side of the square the photo is shrunk to (area interpolation), the network's input.

    Returns
    -------
    (1280,) float32
        Unit L2 norm (all zeros for an empty image).

    Raises
    ------
    SemanticModelError
        The network cannot be loaded.
    """
    import cv2

    img = np.asarray(rgb)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"rgb must be an (H, W, 3) uint8 image, got {img.shape} {img.dtype}")
    if img.shape[0] == 0 or img.shape[1] == 0:
        return np.zeros(SEMANTIC_DIM, np.float32)
    x = cv2.resize(np.ascontiguousarray(img), (size, size), interpolation=cv2.INTER_AREA)
    blob = (x.astype(np.float32) * (2.0 / 255.0) - 1.0).transpose(2, 0, 1)[None]
    net = _network(model)
    net.setInput(np.ascontiguousarray(blob))
    e = np.asarray(net.forward(), np.float64).reshape(-1)
    norm = float(np.linalg.norm(e))
    return (e / norm if norm > 0 else e).astype(np.float32)


def semantic_kernel(rows: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
    """Cosine of the embeddings of ``rows`` (r, 1280) and ``cols`` (c, 1280), in [0, 1].

    ``cols`` None: the rows' square kernel, with a unit diagonal (also for a photo without
    an embedding, whose other entries are 0).

    Returns
    -------
    (r, c) float64
    """
    R = np.asarray(rows, np.float64)
    square = cols is None
    Cm = R if square else np.asarray(cols, np.float64)
    if R.ndim != 2 or Cm.ndim != 2 or R.shape[1] != Cm.shape[1]:
        raise ValueError(f"embeddings must be (r, d) and (c, d): {R.shape}, {Cm.shape}")

    def unit(X: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(X, axis=1, keepdims=True)
        return np.divide(X, n, out=np.zeros_like(X), where=n > 0)

    S = np.clip(unit(R) @ unit(Cm).T, 0.0, 1.0)
    if square:
        np.fill_diagonal(S, 1.0)
    return S


def mix_semantic(C: np.ndarray, S: np.ndarray, weight: float = SEMANTIC["weight"]) -> np.ndarray:
    """``(1 - weight) C + weight S`` (n, m) float64: the grouping's affinities ``C`` with the
    semantic kernel ``S`` of the same photos (both unit-diagonal when square), as
    :func:`engine.cluster.combine_kernels` mixes its two (``ValueError`` for a weight
    outside [0, 1] or kernels of different shapes)."""
    from engine.cluster.appearance import combine_kernels

    return combine_kernels(C, S, weight=weight)
