"""Pyramid match kernels over sets of local features (Grauman, thesis chapters 3-4).

A point set ``X`` (M, D) is mapped to a multi-resolution histogram pyramid
``Psi(X) = [H_0(X), ..., H_{L-1}(X)]`` (Eq. 3.6) whose bins are *nested*: two points
sharing a bin at level ``l`` share one at every coarser level. The pyramid match
(Eqs. 3.7-3.10) counts the new matches ``N_i = I_i - I_{i-1}`` formed at every level,
``I_i`` being the histogram intersection (Eq. 3.8), and weights them by an estimate of
how close points in a bin of that level are. Rewritten per bin (Eqs. 3.16 and 4.4)::

    P(X, Y) = sum_levels sum_bins min(h_X[bin], h_Y[bin]) * (w[bin] - w[parent(bin)])

with ``w = 0`` above the top level used. :class:`PyramidMatch` implements that generic
form for any :class:`~engine.kernels.binning.Binning` (uniform, randomly shifted grids;
the vocabulary tree of :mod:`engine.kernels.vocabulary`) and computes whole kernel
matrices in bulk: with the unary encoding of Eq. 3.15,
``min(a, b) = sum_{t >= 1} [a >= t] [b >= t]``, so every bilinear form above is a sparse
matrix product (SciPy CSR @ CSR.T in C).

The parts live in sibling modules: the bins in :mod:`engine.kernels.binning`, the encoded
batches and their bulk products in :mod:`engine.kernels.codes`, the explicit feature map
and its stable keys in :mod:`engine.kernels.embedding`, the correspondences in
:mod:`engine.kernels.correspondences`. Their public names are importable from here too.

Public API: :class:`PyramidMatch`, :class:`MatchResult`, and from the sibling modules
:class:`UniformBinning`, :class:`Binning`, :class:`PyramidCodes`,
:class:`SparseEmbedding`, ``GOLDEN``, :func:`mix64`, :func:`level_salt`,
:func:`level_key`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.core.validate import as_point_set, check_choice, check_positive
from engine.kernels.binning import Binning, Projection, UniformBinning, path_weights
from engine.kernels.codes import (
    PyramidCodes,
    bilinear,
    encode_points,
    l1_intersection,
    self_similarity,
    unary,
)
from engine.kernels.embedding import (
    GOLDEN,
    SparseEmbedding,
    level_key,
    level_salt,
    mix64,
    unary_key,
)

__all__ = [
    "GOLDEN",
    "IDF_MIN_SETS",
    "Binning",
    "MatchResult",
    "PyramidCodes",
    "PyramidMatch",
    "SparseEmbedding",
    "UniformBinning",
    "level_key",
    "level_salt",
    "mix64",
]

_BINS = ("uniform", "vocabulary")
#: ``weights="auto"`` gives uniform and vocabulary bins idf weights when
#: :meth:`PyramidMatch.fit` is given at least this many non-empty sets, else the
#: thesis' global weights (and ``"auto"`` normalisation, sides, PCA follow): the
#: document frequencies of a handful of sets say little (fitted on the two sets
#: compared, every bin they share would weigh ``ln(2 / 2) = 0``).
IDF_MIN_SETS = 10
_WEIGHTS = ("auto", "global", "input_specific", "idf")
_NORMALIZE = ("auto", "self", "min", "none", "l1")
_INPUT_DISTANCE = ("max", "mean")


# --------------------------------------------------------------------------- results
@dataclass
class MatchResult:
    """Score and explicit approximate correspondences of two sets (thesis 3.2.3).

    Attributes
    ----------
    score : float
        Normalised pyramid-match similarity (as :meth:`PyramidMatch.kernel`).
    pairs : (P, 2) int64
        Indices into set a and set b; every index appears at most once per column.
    level : (P,) int64
        Pyramid level (0 = finest) at which the pair first shared a bin.
    weight : (P,) float64
        Similarity weight of that bin (larger = closer).
    xy_a, xy_b : (P, 2) float32 or None
        Image positions of the paired points, when positions were given.
    """

    score: float
    pairs: np.ndarray
    level: np.ndarray
    weight: np.ndarray
    xy_a: np.ndarray | None = None
    xy_b: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.pairs.shape[0])


# --------------------------------------------------------------------------- the match
class PyramidMatch:
    """Pyramid match kernel, cost and correspondences between sets of features.

    Parameters
    ----------
    bins : {"uniform", "vocabulary"} or Binning, default "uniform"
        Uniform randomly shifted grids (chapter 3) or a hierarchical k-means vocabulary
        (chapter 4, :class:`engine.kernels.vocabulary.VocabularyTree`); a fitted or unfitted
        :class:`Binning` instance is used as is (``n_shifts``, ``n_sides`` must then be 1).
    weights : {"auto", "global", "input_specific", "idf"}, default "auto"
        ``"auto"``: ``"idf"`` for uniform and vocabulary bins (and a Binning whose
        ``weights`` is ``"idf"``) fitted on at least :data:`IDF_MIN_SETS` non-empty sets,
        ``"global"`` otherwise (the attribute holds the resolved choice, set again by
        :meth:`fit`).
        Global per-bin weights (``1 / (D f 2**i)`` for uniform bins, Eq. 3.10; the
        tree's ``exp(-A/sigma)``, Eq. 4.3 (a)) or
        input-specific ones from the sets' largest distances to the bin centres
        (Eq. 4.3 (b)): cost ``d_ij(X) + d_ij(Y)``;
        similarity ``exp(-(d_ij(X) + d_ij(Y)) / sigma)`` when the binning has a
        ``sigma_`` (vocabulary), else ``w_ij exp(-(d_ij(X) + d_ij(Y)) / A_ij)`` with
        ``A_ij`` the bin's cost weight. Input-specific similarity is not guaranteed PSD
        (section 4.3). ``"idf"`` (uniform or vocabulary bins, or a Binning with a
        ``fit_document_frequencies`` method; NOT in the thesis): every bin ``b`` (tree
        node, grid cell) weighs its matches by its inverse document frequency
        ``ln(N / N_b)`` over the ``N`` non-empty sets given to :meth:`fit` (Nistér &
        Stewénius 2006), i.e. the bin's similarity weight is the sum of the idf on its
        path to the root (grid cells of at most one fit set: ``ln N``). Bins
        most sets share count little, distinctive ones much. Mercer; it needs at least
        2 non-empty fit sets and describes the collection fitted on -- fitting on just
        the two sets compared gives their shared bins idf 0 (use ``"global"`` then).
    input_distance : {"max", "mean"}, default "max"
        Per-bin statistic ``d_ij(X)`` of the set's distances to the bin centre used by
        ``weights="input_specific"``. ``"max"``: the largest distance, as in the thesis
        (Eq. 4.1 triple, Eq. 4.3 (b)); by the triangle inequality ``d_ij(X) + d_ij(Y)``
        bounds the distance of ANY two points of the bin. ``"mean"`` (NOT in the thesis):
        the mean distance ``dbar_ij(X)``; ``dbar_ij(X) + dbar_ij(Y)`` bounds the MEAN
        distance between a point of ``X`` and a point of ``Y`` in the bin (average the
        triangle inequality ``||x - y|| <= ||x - c|| + ||c - y||`` over all such pairs),
        so it bounds the expected cost per match of a random in-bin assignment (the
        thesis' "random assignment" correspondence field, section 6.5). It is an
        estimate, not a bound on every match, and far less sensitive to one outlying
        point: on ETH-80 SIFT its cost ranking follows the optimal matching much more
        closely (Spearman 0.955 vs 0.875 at 128-D, ``tests/benchmarks/bench_spearman.py``).
    normalize : {"auto", "self", "min", "none", "l1"}, default "auto"
        ``"auto"``: ``"l1"`` for uniform bins with idf weights, ``"self"`` otherwise
        (resolved again by :meth:`fit`, like ``weights``).
        ``"self"``: Eq. 3.12, ``P(X,Y) / sqrt(P(X,X) P(Y,Y))`` -- a Mercer kernel with
        self-similarity 1. ``"min"``: Eq. 3.11, the partial match normalised by the
        smaller set -- implemented as ``P(X,Y) / min(P(X,X), P(Y,Y))``, which for uniform
        bins is exactly ``P / (w_0 min(|X|, |Y|))``; unmatched extra features cost nothing.
        ``"l1"`` (NOT in the thesis; the L1 score of Nistér & Stewénius 2006): every
        set's weighted histogram over all pyramids and levels, ``(w_b - w_parent) h[b]``,
        is scaled to unit L1 mass before the intersection, so ``K = sum_b min(x_X[b],
        x_Y[b]) = 1 - ||x_X - x_Y||_1 / 2``; Mercer, self-similarity 1
        (:func:`engine.kernels.codes.l1_intersection`). Not with input-specific weights.
    n_shifts : int, default 2
        ``T`` randomly shifted pyramids; similarities are averaged, costs take the minimum
        over shifts (section 3.2.2). Vocabulary bins: ``T`` trees from different seeds.
    n_sides : int or "auto", default "auto"
        Uniform bins: pyramids with several finest side lengths ``f 2**(k / n_sides)``,
        ``k = 0 .. n_sides - 1`` (section 3.2.2: more gradations of match distances),
        each with ``n_shifts`` shifts; combined like the shifts. "auto": 3 with idf
        weights, else 2 (resolved again by :meth:`fit`; 1 for a Binning instance).
    finest_side : float or None, default None
        Uniform bins: side ``f`` of the finest bins in (projected) feature units;
        None = ``finest_scale`` x mean per-dimension std of the fit sample.
    finest_scale : float, default 0.25
        See ``finest_side``.
    pca_dim : int, "auto" or None, default "auto"
        Project features to this many principal components learned in :meth:`fit`.
        "auto": for uniform bins when ``D > 16``, 8 with global weights (uniform grids
        degrade with dimension, thesis Fig. 6-6; the thesis used 10-D PCA-SIFT, 8 ranked
        slightly better on UKBench) and 12 with idf weights (see Notes); none for
        vocabulary bins.
    max_level : int or None, default None
        Count new matches only up to this level (0 = finest): a partial matching limited
        to a distance (Eq. 3.13).
    branching, depth : int, default 10, 5
        Vocabulary bins: tree branching ``k`` and levels ``L`` (counting the root: at
        most ``k**(L-1)`` leaves).
    max_iter : int, default 10
        Vocabulary bins: Lloyd iterations of the k-means at every level of the tree.
    sample_size : int, default 200_000
        At most this many points (random) are used by :meth:`fit` (PCA: at most 50,000).
    random_state : int, default 0

    Notes
    -----
    Defaults were chosen on the mean over three dev tasks (RootSIFT, <= 500 per image):
    UKBench N-S (500 images, fitted on them; ``tests/benchmarks/bench_pyramid.py``),
    Holidays mAP (421-image dev subset, 149 queries) and N-S on UKBench of a model
    fitted on Holidays (unseen photos). Thesis-style uniform bins (Eqs. 3.10, 3.12:
    global weights, 8-D PCA, 2 finest sides x 2 shifts) score 3.27 / 0.531 / 3.24 (3.36
    UKBench with plain SIFT; about 3.0 for one 10-D pyramid; 3 x 3 pyramids 3.28). The
    uniform defaults for a collection (idf weights, Nistér & Stewénius 2006; their L1
    score, ``normalize="l1"``; 12-D PCA; 3 sides x 2 shifts) score 3.48 / 0.673 / 3.45
    (seeds 0-2: UKBench 3.46-3.49, Holidays 0.650-0.673, cross 3.45-3.48) at about
    2x the encoding + kernel cost (500 x 500: fit 0.8-1.7 s, encode 1.45 s, kernel 0.7 s
    against 0.2-0.5, 0.35-0.55, 0.5). Same pyramids with global weights: 3.21 / 0.552 /
    3.19; idf with Eq. 3.12: 3.41 / 0.676 / 3.40 -- idf gives most of the gain, L1 adds
    on UKBench. With idf, finer bins pay: 8-D PCA 3.41 / 0.627 / 3.42, 16-D 3.46 / 0.64
    / 3.48 (2 seeds); 2 x 2 pyramids 3.41 / 0.64 / 3.39, 3 x 3 3.50 / 0.678 / 3.48 at
    1.5x the cost. Below :data:`IDF_MIN_SETS` fit sets every ``"auto"`` gives the
    thesis-style settings. Vocabulary bins: 2 trees, ``k = 10``, ``L = 5`` with idf
    weights score 3.51 / 0.664 / 3.34 (fit about 2.6 s, encode 0.3 s, kernel 0.15 s)
    against 2.59 UKBench for ``L = 4`` with the thesis' diameter weights (2.88 at
    ``L = 5``; 3.28 with idf at ``L = 4``); ``normalize="l1"`` gives them 3.58 / 0.651 /
    3.40 at 2.5x the kernel time (not the default).

    Cost: encoding is ``O(T m L)`` per set (one sort over all entries of a batch); the
    bulk kernel is one sparse product over the unary coordinates (Eq. 3.15) plus a dense
    ``min`` for the few coarse bins shared by most sets (``"l1"``: real-valued, so the
    pairs of entries of every bin, and a dense ``min`` for the bins most pairs share).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> sets = [rng.normal(size=(50, 5)).astype(np.float32) for _ in range(4)]
    >>> pm = PyramidMatch().fit(sets)
    >>> K = pm.kernel(sets)
    >>> K.shape, bool(np.allclose(np.diag(K), 1.0))
    ((4, 4), True)
    """

    def __init__(
        self,
        bins: str | Binning = "uniform",
        *,
        weights: str = "auto",
        normalize: str = "auto",
        n_shifts: int = 2,
        n_sides: int | str = "auto",
        finest_side: float | None = None,
        finest_scale: float = 0.25,
        pca_dim: int | str | None = "auto",
        max_level: int | None = None,
        branching: int = 10,
        depth: int = 5,
        sample_size: int = 200_000,
        random_state: int = 0,
        input_distance: str = "max",
        max_iter: int = 10,
    ) -> None:
        if isinstance(bins, str):
            check_choice(bins, "bins", _BINS)
        elif not isinstance(bins, Binning):
            raise ValueError(f"bins must be 'uniform', 'vocabulary' or a Binning, got {bins!r}")
        check_choice(weights, "weights", _WEIGHTS)
        # (resolved again by fit: idf only with at least IDF_MIN_SETS sets to count in)
        self._auto_idf = weights == "auto" and isinstance(bins, str)
        if weights == "auto":  # a Binning instance built for idf weights keeps them
            idf = self._auto_idf or getattr(bins, "weights", None) == "idf"
            weights = "idf" if idf else "global"
        if weights == "idf" and not (
            isinstance(bins, str) or hasattr(bins, "fit_document_frequencies")
        ):
            raise ValueError(
                "weights='idf' needs uniform or vocabulary bins (or a Binning with "
                f"fit_document_frequencies), got bins={bins!r}"
            )
        check_choice(normalize, "normalize", _NORMALIZE)
        self._auto_norm = normalize == "auto"  # (resolved again by fit, like weights)
        if normalize == "auto":
            normalize = _default_normalize(bins, weights)
        if normalize == "l1" and weights == "input_specific":
            raise ValueError("normalize='l1' needs global or idf weights, not input_specific")
        check_choice(input_distance, "input_distance", _INPUT_DISTANCE)
        if int(n_shifts) != n_shifts or n_shifts < 1:
            raise ValueError(f"n_shifts must be an integer >= 1, got {n_shifts!r}")
        self._auto_sides = n_sides == "auto"
        if n_sides == "auto":
            n_sides = _default_sides(bins, weights)
        elif isinstance(n_sides, str) or int(n_sides) != n_sides or n_sides < 1:
            raise ValueError(f"n_sides must be an integer >= 1 or 'auto', got {n_sides!r}")
        if not isinstance(bins, str) and (n_shifts != 1 or n_sides != 1):
            raise ValueError("n_shifts and n_sides must be 1 when bins is a Binning instance")
        if finest_side is not None:
            check_positive(finest_side, "finest_side")
        check_positive(finest_scale, "finest_scale")
        if pca_dim not in (None, "auto") and (int(pca_dim) != pca_dim or pca_dim < 1):
            raise ValueError(
                f"pca_dim must be a positive integer, 'auto' or None, got {pca_dim!r}"
            )
        if max_level is not None and (int(max_level) != max_level or max_level < 0):
            raise ValueError(f"max_level must be an integer >= 0 or None, got {max_level!r}")
        check_positive(sample_size, "sample_size")
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
        self.max_iter = int(max_iter)
        self.bins = bins
        self.weights = weights
        self.normalize = normalize
        self.n_shifts = int(n_shifts)
        self.n_sides = int(n_sides)
        self.finest_side = finest_side
        self.finest_scale = float(finest_scale)
        self.pca_dim = pca_dim
        self.max_level = None if max_level is None else int(max_level)
        self.branching = int(branching)
        self.depth = int(depth)
        self.sample_size = int(sample_size)
        self.random_state = int(random_state)
        self.input_distance = input_distance
        self.binnings_: list[Binning] = []
        self.projection_: Projection | None = None
        self.dim_: int | None = None

    # ------------------------------------------------------------------ fitting
    @property
    def kind(self) -> str:
        return self.bins if isinstance(self.bins, str) else "custom"

    @property
    def n_pyramids(self) -> int:
        """Number of pyramids combined: ``n_sides * n_shifts`` (1 for vocabulary bins)."""
        return self.n_sides * self.n_shifts if self.bins == "uniform" else self.n_shifts

    def _make_binning(self, t: int) -> Binning:
        seed = self.random_state + 1000003 * t
        if self.bins == "uniform":
            factor = 2.0 ** ((t % self.n_sides) / self.n_sides)
            return UniformBinning(
                None if self.finest_side is None else self.finest_side * factor,
                finest_scale=self.finest_scale * factor,
                distances=self.weights == "input_specific",
                random_state=seed,
                weights="idf" if self.weights == "idf" else "global",
            )
        if self.bins == "vocabulary":
            from engine.kernels.vocabulary import VocabularyTree  # lazy: optional heavy module

            return VocabularyTree(
                branching=self.branching,
                levels=self.depth,
                weights=self.weights,
                max_iter=self.max_iter,
                random_state=seed,
            )
        return self.bins  # type: ignore[return-value]

    def fit(self, sets: Sequence[np.ndarray] | np.ndarray) -> PyramidMatch:
        """Learn the projection, value ranges / vocabulary from example sets.

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays, or one stacked (N, D) array
            Empty sets are allowed but at least one point is needed in total.

        Returns
        -------
        self
        """
        if isinstance(sets, np.ndarray):
            sets = [sets]
        arrays = [as_point_set(s, f"sets[{i}]") for i, s in enumerate(sets)]
        if not arrays:
            raise ValueError("sets must contain at least one set")
        dims = {a.shape[1] for a in arrays}
        if len(dims) != 1:
            raise ValueError(f"sets must all have the same dimension, got {sorted(dims)}")
        X = np.concatenate(arrays)
        if X.shape[0] == 0:
            raise ValueError("sets contain no points to fit on")
        n_docs = sum(a.shape[0] > 0 for a in arrays)
        if self._auto_idf:  # ("auto": the thesis' weights for a handful of sets)
            self.weights = "idf" if n_docs >= IDF_MIN_SETS else "global"
        if self._auto_norm:
            self.normalize = _default_normalize(self.bins, self.weights)
        if self._auto_sides:
            self.n_sides = _default_sides(self.bins, self.weights)
        if self.weights == "idf" and n_docs < 2:
            raise ValueError(
                "weights='idf' needs at least 2 non-empty fit sets (their document "
                "frequencies); pass them as a list, or use weights='global'"
            )
        rng = np.random.default_rng(self.random_state)
        if X.shape[0] > self.sample_size:
            X = X[np.sort(rng.choice(X.shape[0], self.sample_size, replace=False))]
        self.dim_ = int(X.shape[1])
        k = self._pca_components(self.dim_)
        pca_sample = X[rng.choice(X.shape[0], 50_000, replace=False)] if X.shape[0] > 50_000 else X
        self.projection_ = Projection.fit(pca_sample, k) if k else None
        if self.projection_ is not None:
            X = self.projection_.transform(X)
        if isinstance(self.bins, str):
            self.binnings_ = [self._make_binning(t).fit(X) for t in range(self.n_pyramids)]
        else:
            b = self.bins
            if getattr(b, "n_levels", 0) == 0 or not _is_fitted(b):
                b = b.fit(X)
            self.binnings_ = [b]
        if self.weights == "idf":  # every fit set is a document, not just the sample
            projected = [self.project(a) for a in arrays]
            for b in self.binnings_:
                b.fit_document_frequencies(projected)
        return self

    @property
    def _form(self) -> str:
        """Bilinear form of the weights: idf weights are global (per-bin) weights."""
        return "input_specific" if self.weights == "input_specific" else "global"

    def _pca_components(self, dim: int) -> int:
        if self.pca_dim is None:
            return 0
        if self.pca_dim == "auto":  # (idf weights gain from finer, more distinctive bins)
            if self.kind != "uniform" or dim <= 16:
                return 0
            return 12 if self.weights == "idf" else 8
        if self.pca_dim > dim:
            raise ValueError(f"pca_dim={self.pca_dim} exceeds the feature dimension {dim}")
        return int(self.pca_dim)

    def _check_fitted(self) -> None:
        if not self.binnings_:
            raise RuntimeError("PyramidMatch is not fitted; call fit(sets) first")

    def prepare(self, sets: Sequence[np.ndarray] | np.ndarray, name: str) -> list[np.ndarray]:
        """Validated ``sets`` for this fitted model: a list of ``(M_i, D)`` float arrays
        (``name`` names the argument in errors)."""
        self._check_fitted()
        if isinstance(sets, np.ndarray) and sets.ndim == 2:
            raise ValueError(f"{name} must be a list of (M, D) arrays, got one 2-D array")
        return [as_point_set(s, f"{name}[{i}]", dim=self.dim_) for i, s in enumerate(sets)]

    def project(self, X: np.ndarray) -> np.ndarray:
        """Points ``(M, D)`` through the fitted projection (PCA) into ``(M, d)``, or as
        they are when the model has none."""
        return self.projection_.transform(X) if self.projection_ is not None else X

    @property
    def n_levels(self) -> int:
        """Number of levels used of the first pyramid (``max_level + 1`` at most)."""
        self._check_fitted()
        return self.levels_of(self.binnings_[0])

    def levels_of(self, binning: Binning) -> int:
        """Number of pyramid levels used with ``binning`` (capped by ``max_level``)."""
        L = binning.n_levels
        return L if self.max_level is None else min(L, self.max_level + 1)

    # ------------------------------------------------------------------ encoding
    def encode(self, sets: Sequence[np.ndarray]) -> PyramidCodes:
        """Build every set's histogram pyramids once (Eq. 3.6), for all shifts.

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays

        Returns
        -------
        PyramidCodes
        """
        arrays = self.prepare(sets, "sets")
        return self._encode(arrays)

    def _encode(self, arrays: list[np.ndarray]) -> PyramidCodes:
        n = len(arrays)
        sizes = np.array([a.shape[0] for a in arrays], np.int64)
        X = np.concatenate(arrays) if n else np.zeros((0, self.dim_), np.float32)
        return encode_points(
            self.project(X),
            sizes,
            self.binnings_,
            [self.levels_of(b) for b in self.binnings_],
            input_specific=self.weights == "input_specific",
            input_distance=self.input_distance,
        )

    def _as_codes(self, sets: Any, name: str) -> PyramidCodes:
        if isinstance(sets, PyramidCodes):
            self._check_fitted()
            return sets
        return self._encode(self.prepare(sets, name))

    # ------------------------------------------------------------------ public scores
    def kernel(self, sets_a: Any, sets_b: Any = None) -> np.ndarray:
        """Normalised pyramid-match similarities of all pairs (higher = more similar).

        Parameters
        ----------
        sets_a : list of (M_i, D) float32 arrays, or PyramidCodes from :meth:`encode`
        sets_b : same, or None for ``sets_a`` against itself

        Returns
        -------
        (len(sets_a), len(sets_b)) float64
            Eq. 3.10 averaged over the ``T`` shifts and normalised per ``normalize``.
            Pairs involving an empty set are 0.
        """
        A, B, split = self._codes_for(sets_a, sets_b)
        if self.normalize == "l1":
            K = l1_intersection(A, B)
            return K if split is None else K[:split, split:]
        K = bilinear(A, B, "sim", self._form) / A.n_shifts
        if self.normalize == "none":
            return K if split is None else K[:split, split:]
        sa = self_similarity(A, self._form) / A.n_shifts
        sb = sa if B is None else self_similarity(B, self._form) / B.n_shifts
        if self.normalize == "self":
            den = np.sqrt(np.outer(sa, sb))
        else:
            den = np.minimum.outer(sa, sb)
        with np.errstate(divide="ignore", invalid="ignore"):
            K = np.where(den > 0, K / den, 0.0)
        if B is None:
            np.fill_diagonal(K, (sa > 0).astype(np.float64))
        return K if split is None else K[:split, split:]

    def cost_matrix(self, sets_a: Any, sets_b: Any = None) -> np.ndarray:
        """Unnormalised pyramid-match COSTS of all pairs (lower = more similar).

        Weights are distance estimates: ``D f 2**i`` for uniform bins (Lemma 1: never
        below the optimal L1 partial-matching cost on the fit range), the bin diameter
        ``A_ij`` (Eq. 4.3 a) or ``d_ij(X) + d_ij(Y)`` (Eq. 4.3 b). The minimum over the
        ``T`` shifts is returned (section 3.2.2).

        Returns
        -------
        (len(sets_a), len(sets_b)) float64
        """
        A, B, split = self._codes_for(sets_a, sets_b)
        C = bilinear(A, B, "cost", self._form, per_shift=True).min(axis=0)
        return C if split is None else C[:split, split:]

    def _codes_for(self, sets_a: Any, sets_b: Any) -> tuple[PyramidCodes, Any, int | None]:
        """Encode the inputs; a few raw sets on both sides are encoded as ONE batch (cheaper
        than two encodings plus key unification) and ``split`` says where b starts."""
        raw = not isinstance(sets_a, PyramidCodes) and not isinstance(sets_b, PyramidCodes)
        if raw and sets_b is not None and 0 < len(sets_a) + len(sets_b) <= 32:
            a = self.prepare(sets_a, "sets_a")
            b = self.prepare(sets_b, "sets_b")
            return self._encode(a + b), None, len(a)
        A = self._as_codes(sets_a, "sets_a")
        B = None if sets_b is None else self._as_codes(sets_b, "sets_b")
        return A, B, None

    def cost(self, set_a: np.ndarray, set_b: np.ndarray) -> float:
        """Pyramid-match cost of two sets (see :meth:`cost_matrix`)."""
        return float(self.cost_matrix([set_a], [set_b])[0, 0])

    def similarity(self, set_a: np.ndarray, set_b: np.ndarray) -> float:
        """Normalised similarity of two sets, ``kernel([a], [b])[0, 0]``."""
        return float(self.kernel([set_a], [set_b])[0, 0])

    # ------------------------------------------------------------------ correspondences
    def match(
        self,
        set_a: np.ndarray,
        set_b: np.ndarray,
        xy_a: np.ndarray | None = None,
        xy_b: np.ndarray | None = None,
        *,
        metric: str = "l2",
    ) -> MatchResult:
        """Score plus explicit approximate correspondences (thesis section 3.2.3).

        Going from the finest level up, the still unmatched points of the two sets that
        share a bin are paired by an optimal assignment inside that bin; each point is
        used at most once. Uses the first shift's pyramid; distances inside a bin are
        computed on the given (unprojected) features.

        Parameters
        ----------
        set_a : (Ma, D) float32
        set_b : (Mb, D) float32
        xy_a : (Ma, 2) float or None
        xy_b : (Mb, 2) float or None
        metric : {"l2", "l1"}
            Ground distance of the per-bin assignments.

        Returns
        -------
        MatchResult
            ``min(Ma, Mb)`` pairs for uniform bins (whose top level is one bin; fewer with
            ``max_level`` or vocabulary bins, whose top level has ``k`` bins), ordered by
            level.
        """
        from engine.kernels.correspondences import correspondences

        self._check_fitted()
        a = as_point_set(set_a, "set_a", dim=self.dim_)
        b = as_point_set(set_b, "set_b", dim=self.dim_)
        if xy_a is not None:
            xy_a = _check_xy(xy_a, "xy_a", a.shape[0])
        if xy_b is not None:
            xy_b = _check_xy(xy_b, "xy_b", b.shape[0])
        score = float(self.kernel([a], [b])[0, 0])
        pa, pb = self.project(a), self.project(b)
        binning = self.binnings_[0]
        L = self.n_levels
        full_a = binning.assign(pa)[0] if a.shape[0] else np.zeros((0, binning.n_levels), np.int64)
        bins_a = full_a[:, :L]
        bins_b = binning.assign(pb)[0][:, :L] if b.shape[0] else np.zeros((0, L), np.int64)
        wa = path_weights(binning, full_a, L)  # (whole paths: idf weights need them)
        pairs, level, weight = correspondences(bins_a, bins_b, a, b, wa, metric=metric)
        return MatchResult(
            score=score,
            pairs=pairs,
            level=level,
            weight=weight,
            xy_a=None if xy_a is None else xy_a[pairs[:, 0]],
            xy_b=None if xy_b is None else xy_b[pairs[:, 1]],
        )

    # ------------------------------------------------------------------ embedding
    def embed(self, sets: Any) -> SparseEmbedding:
        """Explicit sparse feature map whose dot products are the unnormalised kernel.

        Coordinates are the unary-encoded bins of all shifts (Eq. 3.15) with value
        ``sqrt((w_bin - w_parent) / T)``; keys are stable hashes of (shift, level, bin,
        t). Only for ``weights="global"`` or ``"idf"`` (input-specific weights are no
        inner product).

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays, or PyramidCodes

        Returns
        -------
        SparseEmbedding
        """
        if self._form != "global":
            raise ValueError(
                "embed() needs weights='global' or 'idf' (input-specific is no dot product)"
            )
        codes = self._as_codes(sets, "sets")
        idx, t = unary(codes.count, np.ones(codes.count.shape[0], bool))
        keys = unary_key(codes.key[idx], t)
        vals = np.sqrt(np.maximum(codes.w - codes.wp, 0.0) / codes.n_shifts)[idx]
        rows = codes.row[idx]
        order = np.lexsort((keys, rows))
        counts = np.bincount(rows, minlength=len(codes))
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return SparseEmbedding(indptr, keys[order], vals[order].astype(np.float32))

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only (``np.savez`` / JSON friendly, no pickle)."""
        self._check_fitted()
        if not isinstance(self.bins, str):
            raise ValueError("to_state() supports bins='uniform' or 'vocabulary' only")
        state: dict[str, Any] = {
            "bins": self.bins,
            "weights": self.weights,
            "normalize": self.normalize,
            "n_shifts": self.n_shifts,
            "n_sides": self.n_sides,
            "finest_scale": self.finest_scale,
            "finest_side": -1.0 if self.finest_side is None else float(self.finest_side),
            "pca_dim": {None: -1, "auto": 0}.get(self.pca_dim, self.pca_dim),  # type: ignore[arg-type]
            "max_level": -1 if self.max_level is None else self.max_level,
            "branching": self.branching,
            "depth": self.depth,
            "sample_size": self.sample_size,
            "random_state": self.random_state,
            "input_distance": self.input_distance,
            "max_iter": self.max_iter,
            "dim": int(self.dim_),  # type: ignore[arg-type]
            "has_projection": self.projection_ is not None,
        }
        if self.projection_ is not None:
            state["proj_mean"] = self.projection_.mean
            state["proj_components"] = self.projection_.components
        for t, b in enumerate(self.binnings_):
            for k, v in b.to_state().items():
                state[f"binning{t}.{k}"] = v
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PyramidMatch:
        """Rebuild a fitted PyramidMatch from :meth:`to_state` output."""

        def scalar(k: str) -> Any:
            v = state[k]
            return v.item() if isinstance(v, np.ndarray) else v

        pca = int(scalar("pca_dim"))
        fs = float(scalar("finest_side"))
        ml = int(scalar("max_level"))
        self = cls(
            str(scalar("bins")),
            weights=str(scalar("weights")),
            normalize=str(scalar("normalize")),
            n_shifts=int(scalar("n_shifts")),
            n_sides=int(scalar("n_sides")),
            finest_side=None if fs < 0 else fs,
            finest_scale=float(scalar("finest_scale")),
            pca_dim=None if pca < 0 else ("auto" if pca == 0 else pca),
            max_level=None if ml < 0 else ml,
            branching=int(scalar("branching")),
            depth=int(scalar("depth")),
            sample_size=int(scalar("sample_size")),
            random_state=int(scalar("random_state")),
            # states written before this option existed used the thesis' maximum
            input_distance=str(scalar("input_distance")) if "input_distance" in state else "max",
            max_iter=int(scalar("max_iter")) if "max_iter" in state else 10,
        )
        self.dim_ = int(scalar("dim"))
        if bool(scalar("has_projection")):
            self.projection_ = Projection(state["proj_mean"], state["proj_components"])
        binnings = []
        for t in range(self.n_pyramids):
            prefix = f"binning{t}."
            sub = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            proto = self._make_binning(t)
            binnings.append(type(proto).from_state(sub))
        self.binnings_ = binnings
        return self

    def __repr__(self) -> str:
        return (
            f"PyramidMatch(bins={self.bins!r}, weights={self.weights!r}, "
            f"normalize={self.normalize!r}, n_shifts={self.n_shifts})"
        )


# --------------------------------------------------------------------------- helpers
def _default_sides(bins: Any, weights: str) -> int:
    """``n_sides="auto"``: 3 finest sides for uniform bins with idf weights, else 2 (1 for
    other bins)."""
    if bins != "uniform":
        return 1 if not isinstance(bins, str) else 2
    return 3 if weights == "idf" else 2


def _default_normalize(bins: Any, weights: str) -> str:
    """``normalize="auto"``: L1 scores for uniform bins with idf weights, else Eq. 3.12."""
    return "l1" if bins == "uniform" and weights == "idf" else "self"


def _is_fitted(b: Any) -> bool:
    try:
        b.bin_weights(0, np.zeros(0, np.int64))
    except Exception:
        return False
    return True


def _check_xy(xy: np.ndarray, name: str, m: int) -> np.ndarray:
    arr = np.asarray(xy, np.float32)
    if arr.shape != (m, 2):
        raise ValueError(f"{name} must have shape ({m}, 2), got {arr.shape}")
    return arr
