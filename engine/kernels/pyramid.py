"""Pyramid match kernels over sets of local features (Grauman, thesis chapters 3-4).

A point set ``X`` (M, D) is mapped to a multi-resolution histogram pyramid
``Psi(X) = [H_0(X), ..., H_{L-1}(X)]`` (Eq. 3.6) whose bins are *nested*: two points
sharing a bin at level ``l`` share one at every coarser level. The pyramid match
(Eqs. 3.7-3.10) counts the new matches ``N_i = I_i - I_{i-1}`` formed at every level,
``I_i`` being the histogram intersection (Eq. 3.8), and weights them by an estimate of
how close points in a bin of that level are. Rewritten per bin (Eqs. 3.16 and 4.4)::

    P(X, Y) = sum_levels sum_bins min(h_X[bin], h_Y[bin]) * (w[bin] - w[parent(bin)])

with ``w = 0`` above the top level used. This module implements that generic form for any
:class:`Binning` (uniform, randomly shifted grids here; the vocabulary tree of
:mod:`engine.vocabulary`) and computes whole kernel matrices in bulk: with the unary
encoding of Eq. 3.15, ``min(a, b) = sum_{t >= 1} [a >= t] [b >= t]``, so every bilinear
form above is a sparse matrix product (SciPy CSR @ CSR.T in C).

Public API: :class:`PyramidMatch`, :class:`UniformBinning`, :class:`Binning`,
:class:`PyramidCodes`, :class:`MatchResult`, :class:`SparseEmbedding`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from engine.core.blas import single_threaded_blas
from engine.core.validate import as_point_set, check_choice, check_positive

__all__ = [
    "GOLDEN",
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
_WEIGHTS = ("global", "input_specific")
_NORMALIZE = ("self", "min", "none")
_INPUT_DISTANCE = ("max", "mean")
_DENSE_MIN_PAIRS = 4096  # batches smaller than this (na * nb) never use the dense path
_DENSE_MAX_BINS = 256  # at most this many bins go through the dense per-bin loop
_SMALL_DENSE_CELLS = 1 << 18  # (na + nb) * n_coordinates below this: dense rows, no scipy


# --------------------------------------------------------------------------- protocol
@runtime_checkable
class Binning(Protocol):
    """Maps points to NESTED bins, finest level first (the contract of CONTRACTS.md).

    Attributes
    ----------
    n_levels : int
        Number of pyramid levels ``L``.

    Notes
    -----
    Optional extras read by :class:`PyramidMatch` when present: ``bin_costs(level, bins)``
    or ``diameters(level, bins)`` -- (n,) float64 distance estimate used as the *cost*
    weight (default ``1 / bin_weights``), and ``sigma_`` (float) -- the scale of the
    input-specific similarity weights ``exp(-(d_X + d_Y) / sigma)``.
    """

    n_levels: int

    def fit(self, sample: np.ndarray) -> Binning:
        """Learn the binning from stacked features ``sample`` (N, D) float32."""
        ...

    def assign(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Bins (M, n_levels) int64 -- finest first, unique within a level, nested -- and
        distances (M, n_levels) float32 of every point to its bin centre, or None."""
        ...

    def bin_weights(self, level: int, bins: np.ndarray) -> np.ndarray:
        """(n,) float64 global similarity weights of ``bins`` at ``level``;
        non-increasing from a bin to its parent."""
        ...

    def to_state(self) -> dict[str, Any]: ...

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Binning: ...


# --------------------------------------------------------------------------- hashing
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: The 64-bit golden-ratio constant of SplitMix64, used to spread bin ids before mixing.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a bijection of uint64 (so it adds no collisions)."""
    x = np.asarray(x).astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def _combine(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Hash of the pair ``(a, b)`` of int64 arrays/scalars -> int64 (wrapping arithmetic)."""
    ua = np.asarray(a).astype(np.int64).view(np.uint64)
    ub = np.asarray(b, dtype=np.int64).astype(np.uint64)
    return mix64(ua * GOLDEN + mix64(ub + GOLDEN)).view(np.int64)


@lru_cache(maxsize=4096)
def level_salt(shift: int, level: int) -> np.uint64:
    salt = int(_combine(np.int64(shift), level))
    return np.uint64(mix64(np.asarray(salt, np.int64).astype(np.uint64) + GOLDEN))


def level_key(shift: int, level: int, bins: np.ndarray) -> np.ndarray:
    """STABLE int64 key of (shift, level, bin id): ``_combine(bins, salt(shift, level))``."""
    ua = np.asarray(bins, np.int64).view(np.uint64)
    return mix64(ua * GOLDEN + level_salt(shift, level)).view(np.int64)


def _unary_key(bin_keys: np.ndarray, t: np.ndarray) -> np.ndarray:
    """STABLE int64 key of (bin key, unary index t) -- a coordinate of Eq. 3.15."""
    return _combine(bin_keys, 0) ^ mix64(np.asarray(t, np.int64).astype(np.uint64)).view(np.int64)


# --------------------------------------------------------------------------- uniform bins
class UniformBinning:
    """Randomly shifted uniform grids of doubling side length (thesis section 3.2.2).

    Level ``i`` (0 = finest) partitions space into cubes of side ``f * 2**i``; every
    dimension of the grid is shifted by one random offset (drawn once in :meth:`fit`).
    The top level ``L - 1`` is a single bin holding everything, so
    ``L = ceil(log2(D / f)) + 1`` (``D`` = the largest per-dimension value range of the
    fit sample, the thesis' aspect ratio for ``f = 1``; at least 2 levels).

    Parameters
    ----------
    finest_side : float or None, default None
        ``f``, side of the finest bins in feature units. ``None``: ``finest_scale`` times
        the mean per-dimension standard deviation of the fit sample.
    finest_scale : float, default 0.25
        Used when ``finest_side`` is None. Tuned on UKBench PCA-SIFT (see
        ``tests/benchmarks/bench_pyramid.py``): finer bins rarely match across views,
        coarser ones cannot tell near from far.
    shift : bool, default True
        Randomly translate the grid (needed for the error bound of Lemma 2).
    distances : bool, default False
        Whether :meth:`assign` also returns the L1 distances of the points to their bin
        centres (for input-specific weights).
    random_state : int, default 0

    Notes
    -----
    Bin ids are the integer grid coordinates ``c`` hashed as ``sum_k c_k R_k`` with
    random odd int64 multipliers ``R`` and wrapping arithmetic (PyramidMatch then mixes
    them with the level and shift through a bijective SplitMix64 finaliser).
    Two distinct bins of one level collide only when
    ``sum_k (c_k - c'_k) R_k == 0 (mod 2**64)``, probability about ``2**-64`` per pair
    for random ``R``: with a million occupied bins per level the chance of any collision
    is about ``3e-8``, and a collision merely adds one spurious bin match.
    """

    def __init__(
        self,
        finest_side: float | None = None,
        *,
        finest_scale: float = 0.25,
        shift: bool = True,
        distances: bool = False,
        random_state: int = 0,
    ) -> None:
        if finest_side is not None:
            check_positive(finest_side, "finest_side")
        check_positive(finest_scale, "finest_scale")
        self.finest_side = None if finest_side is None else float(finest_side)
        self.finest_scale = float(finest_scale)
        self.shift = bool(shift)
        self.distances = bool(distances)
        self.random_state = int(random_state)
        self.n_levels = 0

    # -- fitting
    def fit(self, sample: np.ndarray) -> UniformBinning:
        """Learn the value range ``[lo, hi]``, ``f``, ``L``, the shift and the hash.

        Parameters
        ----------
        sample : (N, D) float32
            Stacked features (N >= 1).
        """
        X = as_point_set(sample, "sample")
        if X.shape[0] == 0:
            raise ValueError("sample must contain at least one point")
        lo = X.min(axis=0).astype(np.float64)
        hi = X.max(axis=0).astype(np.float64)
        span = float((hi - lo).max())
        if self.finest_side is not None:
            f = self.finest_side
        else:
            f = self.finest_scale * float(X.std(axis=0, dtype=np.float64).mean())
            if not f > 0:
                f = span if span > 0 else 1.0
        n_levels = max(2, math.ceil(math.log2(max(span / f, 1.0))) + 1)
        rng = np.random.default_rng(self.random_state)
        top_side = f * 2.0 ** (n_levels - 2)
        shift = rng.uniform(0.0, top_side, size=X.shape[1]) if self.shift else np.zeros(X.shape[1])
        mult = rng.integers(1, 2**62, size=X.shape[1], dtype=np.int64) * 2 + 1
        self.lo_, self.hi_, self.side_, self.shift_, self.mult_ = lo, hi, f, shift, mult
        self.dim_ = int(X.shape[1])
        self.n_levels = n_levels
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "lo_"):
            raise RuntimeError("UniformBinning is not fitted; call fit(sample) first")

    # -- binning
    def assign(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Grid cells of every point at every level, finest first.

        Parameters
        ----------
        X : (M, D) float32

        Returns
        -------
        bins : (M, n_levels) int64
            Hashed cell ids; the top level is the single bin 0.
        dist : (M, n_levels) float32 or None
            L1 distance to the cell centre (top level: to the centre of the fit range),
            when ``distances=True``.
        """
        self._check_fitted()
        X = as_point_set(X, "X", dim=self.dim_)
        m, L = X.shape[0], self.n_levels
        u = self._scaled(X)
        cells = np.floor(u).astype(np.int64)
        bins = np.zeros((m, L), np.int64)
        dist = np.zeros((m, L), np.float32) if self.distances else None
        for level in range(L - 1):
            c = cells >> level  # floor division by 2**level, also for negative cells
            raw = c @ self.mult_  # wraps mod 2**64 (an integer product: no BLAS, exact)
            bins[:, level] = raw
            if dist is not None:
                side = 2.0**level
                dist[:, level] = (np.abs(u - (c + 0.5) * side).sum(axis=1) * self.side_).astype(
                    np.float32
                )
        if dist is not None:
            centre = (self.lo_ + self.hi_) / 2
            dist[:, L - 1] = np.abs(X - centre).sum(axis=1)
        return bins, dist

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        """(M, D) float64 shifted coordinates in units of the finest side."""
        return (X.astype(np.float64) - self.lo_ + self.shift_) / self.side_

    def cells(self, X: np.ndarray) -> np.ndarray:
        """Finest grid cells of validated points ``X`` (M, D) float32: (M, D) int64.

        The cell of a point at ``level < n_levels - 1`` is ``cells(X) >> level`` (the
        cells are nested: a level's side is twice the one below), and its bin in
        :meth:`assign` is ``(cells(X) >> level) @ mult_`` (wrapping int64)."""
        self._check_fitted()
        return np.floor(self._scaled(X)).astype(np.int64)

    def bin_weights(self, level: int, bins: np.ndarray) -> np.ndarray:
        """Similarity weights ``1 / (D f 2**level)`` (thesis section 3.2: the inverse of the
        largest L1 distance of two points in a bin), constant per level."""
        return 1.0 / self.bin_costs(level, bins)

    def bin_costs(self, level: int, bins: np.ndarray) -> np.ndarray:
        """Cost weights ``D f 2**level``: the L1 diameter of a bin (Lemma 1)."""
        self._check_fitted()
        return np.full(np.shape(bins)[0], self.dim_ * self.side_ * 2.0**level, np.float64)

    # -- persistence
    def to_state(self) -> dict[str, Any]:
        self._check_fitted()
        return {
            "finest_scale": self.finest_scale,
            "shift": self.shift,
            "distances": self.distances,
            "random_state": self.random_state,
            "n_levels": self.n_levels,
            "lo": self.lo_,
            "hi": self.hi_,
            "side": float(self.side_),
            "shift_vec": self.shift_,
            "mult": self.mult_,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> UniformBinning:
        self = cls(
            float(state["side"]),
            finest_scale=float(state["finest_scale"]),
            shift=bool(state["shift"]),
            distances=bool(state["distances"]),
            random_state=int(state["random_state"]),
        )
        self.lo_ = np.asarray(state["lo"], np.float64)
        self.hi_ = np.asarray(state["hi"], np.float64)
        self.side_ = float(state["side"])
        self.shift_ = np.asarray(state["shift_vec"], np.float64)
        self.mult_ = np.asarray(state["mult"], np.int64)
        self.dim_ = int(self.lo_.shape[0])
        self.n_levels = int(state["n_levels"])
        return self

    def __repr__(self) -> str:
        if hasattr(self, "side_"):
            return f"UniformBinning(side={self.side_:.4g}, n_levels={self.n_levels})"
        return f"UniformBinning(finest_side={self.finest_side})"


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


@dataclass
class SparseEmbedding:
    """Sparse explicit feature map of the pyramid match (Eq. 3.15 with weights folded in).

    Row ``i`` holds ``values[indptr[i]:indptr[i+1]]`` at coordinates
    ``keys[indptr[i]:indptr[i+1]]`` (sorted, unique within a row). The keys are STABLE
    int64 hashes of (shift, level, bin, unary index), equal across calls and processes
    for the same fitted model, and the values are ``sqrt(w_bin - w_parent) / sqrt(T)``,
    so ``dot(row x, row y)`` is the unnormalised kernel (used by pyramid-match hashing,
    thesis Eqs. 5.8-5.11).

    Attributes
    ----------
    indptr : (n + 1,) int64
    keys : (nnz,) int64
    values : (nnz,) float32
    columns : tuple of (K,) int64 and (nnz,) int32, optional
        The sorted distinct keys and each entry's index in them, when already known
        (:meth:`engine.search.IntersectionIndex.columns`): hashing then needs no sort of
        the keys.
    """

    indptr: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    columns: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def norms(self) -> np.ndarray:
        """(n,) float64 Euclidean row norms = sqrt of each set's self-similarity."""
        sq = np.add.reduceat(np.append(self.values.astype(np.float64) ** 2, 0.0), self.indptr[:-1])
        sq[np.diff(self.indptr) == 0] = 0.0
        return np.sqrt(sq)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) of row ``i``."""
        s = slice(self.indptr[i], self.indptr[i + 1])
        return self.keys[s], self.values[s]

    def dot(self, i: int, j: int) -> float:
        """Dot product of rows ``i`` and ``j`` (the unnormalised kernel value)."""
        ki, vi = self.row(i)
        kj, vj = self.row(j)
        _, ia, ib = np.intersect1d(ki, kj, assume_unique=True, return_indices=True)
        return float(np.dot(vi[ia].astype(np.float64), vj[ib].astype(np.float64)))


@dataclass
class PyramidCodes:
    """The histogram pyramids of a batch of sets, built once by :meth:`PyramidMatch.encode`.

    One entry per non-empty (set, shift, level, bin) -- the sparse pyramid of the thesis
    (section 3.3), ``O(m L)`` entries per set.

    Attributes
    ----------
    sizes : (n,) int64
        Number of points per set.
    row : (G,) int64
        Set index of each entry.
    key : (G,) int64
        STABLE hash of (shift, level, bin).
    count : (G,) int64
        Number of the set's points in the bin.
    level : (G,) int64
    w, wp : (G,) float64
        Similarity weight of the bin and of its parent (0 above the top level used).
    c, cp : (G,) float64
        Cost weight (distance estimate) of the bin and of its parent (0 above the top).
    d, dp : (G,) float64 or None
        Largest (``input_distance="max"``, Eq. 4.3 (b)) or mean (``"mean"``) distance of
        the set's points in the bin / parent bin to the centre.
    col : (G,) int64
        Batch-local compact id of ``key`` (``0 .. n_cols-1``).
    n_shifts : int
        Number of pyramids combined (``n_sides * n_shifts`` of :class:`PyramidMatch`).
    shift : (G,) int64
        Pyramid index of each entry.
    """

    sizes: np.ndarray
    row: np.ndarray
    key: np.ndarray
    count: np.ndarray
    level: np.ndarray
    w: np.ndarray
    wp: np.ndarray
    c: np.ndarray
    cp: np.ndarray
    d: np.ndarray | None
    dp: np.ndarray | None
    col: np.ndarray
    n_cols: int
    n_shifts: int
    shift: np.ndarray
    es: np.ndarray | None = field(default=None, repr=False)
    esp: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.sizes.shape[0])


# --------------------------------------------------------------------------- small PCA
class _Projection:
    """Centring + PCA projection learned in :meth:`PyramidMatch.fit` (arrays only)."""

    def __init__(self, mean: np.ndarray, components: np.ndarray) -> None:
        self.mean = np.asarray(mean, np.float32)
        self.components = np.asarray(components, np.float32)  # (k, D)

    @classmethod
    def fit(cls, X: np.ndarray, k: int) -> _Projection:
        mean = X.mean(axis=0, dtype=np.float64)
        Xc = np.asarray(X, np.float64) - mean
        cov = (Xc.T @ Xc) / max(X.shape[0] - 1, 1)
        evals, evecs = np.linalg.eigh(np.atleast_2d(cov))
        order = np.argsort(evals)[::-1][:k]
        comps = evecs[:, order].T
        # deterministic sign: largest-magnitude entry positive
        signs = np.sign(comps[np.arange(comps.shape[0]), np.abs(comps).argmax(axis=1)])
        signs[signs == 0] = 1
        return cls(mean, comps * signs[:, None])

    def transform(self, X: np.ndarray) -> np.ndarray:
        # (X - mean) C^T without the (N, D) temporary, on one BLAS thread: a BLAS thread
        # pool waits ~8 ms for its threads on a busy machine, and einsum, which avoids
        # BLAS, is 4-8x slower than one BLAS thread (300 x 128 -> 32: 0.31 against 0.04
        # ms; 19,000 x 128 -> 32: 17 against 2 ms)
        with single_threaded_blas():
            out = X @ self.components.T
        out -= self.mean @ self.components.T
        return np.ascontiguousarray(out, dtype=np.float32)


# --------------------------------------------------------------------------- the match
class PyramidMatch:
    """Pyramid match kernel, cost and correspondences between sets of features.

    Parameters
    ----------
    bins : {"uniform", "vocabulary"} or Binning, default "uniform"
        Uniform randomly shifted grids (chapter 3) or a hierarchical k-means vocabulary
        (chapter 4, :class:`engine.vocabulary.VocabularyTree`); a fitted or unfitted
        :class:`Binning` instance is used as is (``n_shifts``, ``n_sides`` must then be 1).
    weights : {"global", "input_specific"}, default "global"
        Global per-bin weights (``1 / (D f 2**i)`` for uniform bins, Eq. 3.10; the tree's
        ``exp(-A/sigma)``, Eq. 4.3 (a)) or input-specific ones from the sets' largest
        distances to the bin centres (Eq. 4.3 (b)): cost ``d_ij(X) + d_ij(Y)``;
        similarity ``exp(-(d_ij(X) + d_ij(Y)) / sigma)`` when the binning has a
        ``sigma_`` (vocabulary), else ``w_ij exp(-(d_ij(X) + d_ij(Y)) / A_ij)`` with
        ``A_ij`` the bin's cost weight. Input-specific similarity is not guaranteed PSD
        (section 4.3).
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
    normalize : {"self", "min", "none"}, default "self"
        ``"self"``: Eq. 3.12, ``P(X,Y) / sqrt(P(X,X) P(Y,Y))`` -- a Mercer kernel with
        self-similarity 1. ``"min"``: Eq. 3.11, the partial match normalised by the
        smaller set -- implemented as ``P(X,Y) / min(P(X,X), P(Y,Y))``, which for uniform
        bins is exactly ``P / (w_0 min(|X|, |Y|))``; unmatched extra features cost nothing.
    n_shifts : int, default 2
        ``T`` randomly shifted pyramids; similarities are averaged, costs take the minimum
        over shifts (section 3.2.2).
    n_sides : int, default 2
        Uniform bins: pyramids with several finest side lengths ``f 2**(k / n_sides)``,
        ``k = 0 .. n_sides - 1`` (section 3.2.2: more gradations of match distances),
        each with ``n_shifts`` shifts; combined like the shifts.
    finest_side : float or None, default None
        Uniform bins: side ``f`` of the finest bins in (projected) feature units;
        None = ``finest_scale`` x mean per-dimension std of the fit sample.
    finest_scale : float, default 0.25
        See ``finest_side``.
    pca_dim : int, "auto" or None, default "auto"
        Project features to this many principal components learned in :meth:`fit`.
        "auto": 8 for uniform bins when ``D > 16`` (uniform grids degrade with dimension,
        thesis Fig. 6-6; the thesis used 10-D PCA-SIFT, 8 ranked slightly better on
        UKBench), none for vocabulary bins.
    max_level : int or None, default None
        Count new matches only up to this level (0 = finest): a partial matching limited
        to a distance (Eq. 3.13).
    branching, depth : int, default 10, 4
        Vocabulary bins: tree branching ``k`` and levels ``L``.
    max_iter : int, default 10
        Vocabulary bins: Lloyd iterations of the k-means at every level of the tree.
    sample_size : int, default 200_000
        At most this many points (random) are used by :meth:`fit` (PCA: at most 50,000).
    random_state : int, default 0

    Notes
    -----
    Defaults were chosen on UKBench (500 images, <= 500 SIFT each, N-S score of the
    kernel's ranking; ``tests/benchmarks/bench_pyramid.py``): 8-D PCA, 2 finest sides x 2
    shifts (4 pyramids) scored about 3.24 with RootSIFT vs about 3.0 for one 10-D
    pyramid; more pyramids (3 x 3, raw SIFT) reach about 3.40 at 2.25x the cost. The
    finest side barely matters (0.25-1 x std) as long as all levels are kept.

    Cost: encoding is ``O(T m L)`` per set (one sort over all entries of a batch); the
    bulk kernel is one sparse product over the unary coordinates (Eq. 3.15) plus a dense
    ``min`` for the few coarse bins shared by most sets.

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
        weights: str = "global",
        normalize: str = "self",
        n_shifts: int = 2,
        n_sides: int = 2,
        finest_side: float | None = None,
        finest_scale: float = 0.25,
        pca_dim: int | str | None = "auto",
        max_level: int | None = None,
        branching: int = 10,
        depth: int = 4,
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
        check_choice(normalize, "normalize", _NORMALIZE)
        check_choice(input_distance, "input_distance", _INPUT_DISTANCE)
        if int(n_shifts) != n_shifts or n_shifts < 1:
            raise ValueError(f"n_shifts must be an integer >= 1, got {n_shifts!r}")
        if int(n_sides) != n_sides or n_sides < 1:
            raise ValueError(f"n_sides must be an integer >= 1, got {n_sides!r}")
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
        self.projection_: _Projection | None = None
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
        rng = np.random.default_rng(self.random_state)
        if X.shape[0] > self.sample_size:
            X = X[np.sort(rng.choice(X.shape[0], self.sample_size, replace=False))]
        self.dim_ = int(X.shape[1])
        k = self._pca_components(self.dim_)
        pca_sample = X[rng.choice(X.shape[0], 50_000, replace=False)] if X.shape[0] > 50_000 else X
        self.projection_ = _Projection.fit(pca_sample, k) if k else None
        if self.projection_ is not None:
            X = self.projection_.transform(X)
        if isinstance(self.bins, str):
            self.binnings_ = [self._make_binning(t).fit(X) for t in range(self.n_pyramids)]
        else:
            b = self.bins
            if getattr(b, "n_levels", 0) == 0 or not _is_fitted(b):
                b = b.fit(X)
            self.binnings_ = [b]
        return self

    def _pca_components(self, dim: int) -> int:
        if self.pca_dim is None:
            return 0
        if self.pca_dim == "auto":
            return 8 if (self.kind == "uniform" and dim > 16) else 0
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
        X = self.project(X)
        owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
        need_d = self.weights == "input_specific"
        parts: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "row",
                "key",
                "count",
                "level",
                "w",
                "wp",
                "c",
                "cp",
                "d",
                "dp",
                "shift",
                "col",
            )
        }
        col_offset = 0
        for t, binning in enumerate(self.binnings_):
            if X.shape[0] == 0:
                break
            L = self.levels_of(binning)
            lean = None if need_d else getattr(binning, "assign_bins", None)
            # global weights need no distances: the tree's distance-free descent
            bins, dist = (lean(X), None) if lean is not None else binning.assign(X)
            bins = bins[:, :L]
            if need_d:
                if dist is None:
                    raise ValueError(
                        "input-specific weights need a binning that returns distances"
                    )
                dist = dist[:, :L].astype(np.float64)
            N = X.shape[0]
            keys = np.empty((N, L), np.int64)
            w = np.empty((N, L + 1))
            c = np.empty((N, L + 1))
            w[:, L] = 0.0
            c[:, L] = 0.0
            for lev in range(L):
                keys[:, lev] = level_key(t, lev, bins[:, lev])
                w[:, lev] = binning.bin_weights(lev, bins[:, lev])
                c[:, lev] = _bin_costs(binning, lev, bins[:, lev], w[:, lev])
            flat_key = keys.ravel()  # entry p * L + lev
            order, ks, os_ = _group_order(flat_key, owner, L, n)
            new_key = np.empty(ks.shape[0], bool)
            new_key[:1] = True
            np.not_equal(ks[1:], ks[:-1], out=new_key[1:])
            new_grp = new_key.copy()
            new_grp[1:] |= os_[1:] != os_[:-1]
            starts = np.flatnonzero(new_grp)
            counts = np.diff(np.append(starts, ks.shape[0]))
            first = order[starts]
            p_idx, lev_idx = np.divmod(first, L)
            parts["col"].append(np.cumsum(new_key)[starts] - 1 + col_offset)
            col_offset += int(new_key.sum())
            parts["row"].append(owner[p_idx])
            parts["key"].append(flat_key[first])
            parts["count"].append(counts)
            parts["shift"].append(np.full(counts.shape[0], t, np.int64))
            parts["level"].append(lev_idx)
            parts["w"].append(w[p_idx, lev_idx])
            parts["wp"].append(w[p_idx, lev_idx + 1])
            parts["c"].append(c[p_idx, lev_idx])
            parts["cp"].append(c[p_idx, lev_idx + 1])
            if need_d:  # d_ij(X) per entry: max (Eq. 4.3 b) or mean distance to the centre
                if self.input_distance == "max":
                    dmax = np.maximum.reduceat(dist.ravel()[order], starts)
                else:
                    dmax = np.add.reduceat(dist.ravel()[order], starts) / counts
                group_of = np.empty(N * L, np.int64)
                group_of[order] = np.repeat(np.arange(starts.shape[0]), counts)
                parent_entry = first + 1  # same point, next level
                has_parent = lev_idx < L - 1
                dp = np.zeros_like(dmax)
                dp[has_parent] = dmax[group_of[parent_entry[has_parent]]]
                parts["d"].append(dmax)
                parts["dp"].append(dp)
        cat = {
            k: (
                (np.concatenate(v) if len(v) > 1 else v[0])
                if v
                else np.zeros(0, np.float64 if k in "w wp c cp d dp" else np.int64)
            )
            for k, v in parts.items()
        }
        key = cat["key"].astype(np.int64, copy=False)
        codes = PyramidCodes(
            sizes=sizes,
            row=cat["row"].astype(np.int64, copy=False),
            key=key,
            count=cat["count"].astype(np.int64, copy=False),
            level=cat["level"].astype(np.int64, copy=False),
            w=cat["w"].astype(np.float64, copy=False),
            wp=cat["wp"].astype(np.float64, copy=False),
            c=cat["c"].astype(np.float64, copy=False),
            cp=cat["cp"].astype(np.float64, copy=False),
            d=cat["d"].astype(np.float64) if need_d else None,
            dp=cat["dp"].astype(np.float64) if need_d else None,
            col=cat["col"].astype(np.int64, copy=False),
            n_cols=col_offset,
            n_shifts=len(self.binnings_),
            shift=cat["shift"].astype(np.int64, copy=False),
        )
        if need_d:
            sigma = getattr(self.binnings_[0], "sigma_", None)
            if sigma is not None:
                codes.es = np.exp(-codes.d / sigma)
                # no parent above the top level used: its weight is 0 (like w_L = 0)
                codes.esp = np.where(codes.wp > 0, np.exp(-codes.dp / sigma), 0.0)
            else:
                codes.es = np.sqrt(codes.w) * np.exp(-codes.d / codes.c)
                with np.errstate(divide="ignore", invalid="ignore"):
                    esp = np.sqrt(codes.wp) * np.exp(-codes.dp / codes.cp)
                codes.esp = np.where(codes.cp > 0, esp, 0.0)
        return codes

    def _as_codes(self, sets: Any, name: str) -> PyramidCodes:
        if isinstance(sets, PyramidCodes):
            self._check_fitted()
            return sets
        return self._encode(self.prepare(sets, name))

    # ------------------------------------------------------------------ bulk products
    def _terms(self, mode: str, codes: PyramidCodes) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """Bilinear terms ``sum sign * min(h_X, h_Y) * u_X * v_Y`` of the requested form."""
        if mode == "sim":
            if self.weights == "global":
                v = np.sqrt(np.maximum(codes.w - codes.wp, 0.0))
                return [(v, v, 1.0)]
            return [(codes.es, codes.es, 1.0), (codes.esp, codes.esp, -1.0)]
        ones = np.ones_like(codes.w)
        if self.weights == "global":
            return [(ones, codes.c - codes.cp, 1.0)]
        dd = codes.d - codes.dp
        return [(dd, ones, 1.0), (ones, dd, 1.0)]

    def _bilinear(
        self, A: PyramidCodes, B: PyramidCodes | None, mode: str, per_shift: bool = False
    ) -> np.ndarray:
        """``sum over entries sign * min(h_a, h_b) u_a v_b`` for all pairs, in bulk.

        Unary encoding (Eq. 3.15): entry (set, bin, count) becomes ``count`` coordinates
        ``(bin, t)``, ``t = 1..count``; then ``min`` is a dot product. Bins whose unary
        columns are shared by many sets (coarse levels) are cheaper densely:
        ``sum_b min(H_a[:, b], H_b[:, b])`` on an (na, nb) grid per bin.
        """
        same = B is None
        if same:
            B = A
            colA, colB, ncol = A.col, A.col, A.n_cols
        else:
            ukeys, inv = np.unique(np.concatenate([A.key, B.key]), return_inverse=True)
            inv = inv.ravel()
            colA, colB, ncol = inv[: A.key.shape[0]], inv[A.key.shape[0] :], ukeys.shape[0]
        na, nb = len(A), len(B)
        n_out = A.n_shifts if per_shift else 1
        out = np.zeros((n_out, na, nb))
        if na == 0 or nb == 0 or A.key.shape[0] == 0 or B.key.shape[0] == 0:
            return out if per_shift else out[0]
        shiftA = A.shift if per_shift else np.zeros(A.key.shape[0], np.int64)
        shiftB = B.shift if per_shift else np.zeros(B.key.shape[0], np.int64)
        termsA = self._terms(mode, A)
        termsB = termsA if same else self._terms(mode, B)
        # -- decide dense vs sparse per bin: sparse cost ~ sum_t df_t^2 over unary columns
        dfA = np.bincount(colA, minlength=ncol)
        dfB = dfA if same else np.bincount(colB, minlength=ncol)
        maxcA = np.zeros(ncol, np.int64)
        np.maximum.at(maxcA, colA, A.count)
        if same:
            maxc = maxcA
        else:
            maxc = maxcA.copy()
            np.maximum.at(maxc, colB, B.count)
        # a bin is "heavy" when most pairs of sets share it with several points (coarse
        # levels); single-count bins are cheap in the sparse product; small batches and
        # too many heavy bins would make the per-bin Python loop the bottleneck.
        share = dfA.astype(np.float64) * dfB
        heavy = (share > 0.5 * na * nb) & (maxc > 1) & (na * nb >= _DENSE_MIN_PAIRS)
        if heavy.sum() > _DENSE_MAX_BINS:
            keep = np.argsort(np.where(heavy, share * maxc, -1.0))[-_DENSE_MAX_BINS:]
            heavy[:] = False
            heavy[keep] = True
        lightA = ~heavy[colA]
        lightB = ~heavy[colB]
        # unary expansion of the light entries
        offset = np.concatenate([[0], np.cumsum(np.where(heavy, 0, maxc))])
        ua = _unary(A.count, lightA)
        ub = ua if same else _unary(B.count, lightB)
        n_unary = int(offset[-1])
        for s in range(n_out):
            selA = ua[0] if not per_shift else ua[0][shiftA[ua[0]] == s]
            ta = ua[1] if not per_shift else ua[1][shiftA[ua[0]] == s]
            if same:
                selB, tb = selA, ta
            else:
                mB = shiftB[ub[0]] == s if per_shift else slice(None)
                selB, tb = ub[0][mB], ub[1][mB]
            small = (na + nb) * n_unary <= _SMALL_DENSE_CELLS
            ja = offset[colA[selA]] + ta - 1
            jb = offset[colB[selB]] + tb - 1
            for (ua_v, _, sign), (_, vb, _) in zip(termsA, termsB, strict=True):
                if small:  # a few sets: dense rows, no sparse-matrix overhead
                    Ma = np.zeros((na, n_unary))
                    Mb = np.zeros((nb, n_unary))
                    Ma[A.row[selA], ja] = ua_v[selA]
                    Mb[B.row[selB], jb] = vb[selB]
                    out[s] += sign * (Ma @ Mb.T)
                    continue
                Ma = sp.csr_matrix((ua_v[selA], (A.row[selA], ja)), shape=(na, n_unary))
                Mb = sp.csr_matrix((vb[selB], (B.row[selB], jb)), shape=(nb, n_unary))
                out[s] += sign * (Ma @ Mb.T).toarray()
            # heavy bins: dense min per bin
            hidx = np.flatnonzero(heavy)
            if hidx.size:
                remap = np.full(ncol, -1, np.int64)
                remap[hidx] = np.arange(hidx.size)
                ha = np.flatnonzero(heavy[colA] & ((shiftA == s) if per_shift else True))
                hb = np.flatnonzero(heavy[colB] & ((shiftB == s) if per_shift else True))
                for (ua_v, _, sign), (_, vb, _) in zip(termsA, termsB, strict=True):
                    out[s] += sign * _dense_min_terms(
                        A.row[ha], remap[colA[ha]], A.count[ha], ua_v[ha],
                        B.row[hb], remap[colB[hb]], B.count[hb], vb[hb],
                        na, nb, hidx.size,
                    )  # fmt: skip
        return out if per_shift else out[0]

    def _self_similarity(self, codes: PyramidCodes) -> np.ndarray:
        """(n,) unnormalised ``P(X, X)``: min(h, h) = h, so a weighted sum of counts."""
        total = np.zeros(len(codes))
        for u, v, sign in self._terms("sim", codes):
            np.add.at(total, codes.row, sign * codes.count * u * v)
        return total

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
        K = self._bilinear(A, B, "sim") / A.n_shifts
        if self.normalize == "none":
            return K if split is None else K[:split, split:]
        sa = self._self_similarity(A) / A.n_shifts
        sb = sa if B is None else self._self_similarity(B) / B.n_shifts
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
        C = self._bilinear(A, B, "cost", per_shift=True).min(axis=0)
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
        bins_a = binning.assign(pa)[0][:, :L] if a.shape[0] else np.zeros((0, L), np.int64)
        bins_b = binning.assign(pb)[0][:, :L] if b.shape[0] else np.zeros((0, L), np.int64)
        wa = np.empty(bins_a.shape)
        for lev in range(L):
            wa[:, lev] = binning.bin_weights(lev, bins_a[:, lev])
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
        t). Only for ``weights="global"`` (input-specific weights are no inner product).

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays, or PyramidCodes

        Returns
        -------
        SparseEmbedding
        """
        if self.weights != "global":
            raise ValueError("embed() needs weights='global' (input-specific is no dot product)")
        codes = self._as_codes(sets, "sets")
        idx, t = _unary(codes.count, np.ones(codes.count.shape[0], bool))
        keys = _unary_key(codes.key[idx], t)
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
            self.projection_ = _Projection(state["proj_mean"], state["proj_components"])
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
def _is_fitted(b: Any) -> bool:
    try:
        b.bin_weights(0, np.zeros(0, np.int64))
    except Exception:
        return False
    return True


def _group_order(
    flat_key: np.ndarray, owner: np.ndarray, L: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Order of the (point, level) entries grouping them by (bin key, set).

    Fast path: one unstable argsort of the key with its low bits replaced by the set
    index, so equal (key, set) entries end up adjacent. If two different keys share the
    truncated bits (probability ~ U^2 / 2^(65 - bits) for U distinct bins) the groups
    would mix; that is detected and the exact stable sort on the full key is used
    (entries are set-major, so stability keeps each bin's entries ordered by set).
    """
    bits = max(1, int(n - 1).bit_length())
    if bits <= 24:
        mask = np.int64((1 << bits) - 1)
        packed = (flat_key & ~mask) | owner[np.arange(flat_key.shape[0]) // L]
        order = np.argsort(packed)
        ks = flat_key[order]
        ps = packed[order]
        same_pack = ps[1:] == ps[:-1]
        if not np.any(same_pack & (ks[1:] != ks[:-1])):
            return order, ks, ps & mask
    order = np.argsort(flat_key, kind="stable")
    return order, flat_key[order], owner[order // L]


def _bin_costs(binning: Any, level: int, bins: np.ndarray, w: np.ndarray) -> np.ndarray:
    for name in ("bin_costs", "diameters"):
        fn = getattr(binning, name, None)
        if fn is not None:
            return np.asarray(fn(level, bins), np.float64)
    with np.errstate(divide="ignore"):
        return 1.0 / w


def _unary(count: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand entries (selected by ``mask``) into unary coordinates ``t = 1..count``.

    Returns the entry index and ``t`` (int64) of every coordinate.
    """
    idx = np.flatnonzero(mask)
    cnt = count[idx]
    rep = np.repeat(idx, cnt)
    starts = np.repeat(np.cumsum(cnt) - cnt, cnt)
    t = np.arange(rep.shape[0], dtype=np.int64) - starts + 1
    return rep, t


def _dense_min_terms(
    ra, ba, ca, ua, rb, bb, cb, vb, na: int, nb: int, nbins: int
) -> np.ndarray:  # fmt: skip
    """``sum_b min(h_a[i, b], h_b[j, b]) u_a[i, b] v_b[j, b]`` over a few dense bins."""
    out = np.zeros((na, nb))
    Ha = np.zeros((na, nbins), np.float32)
    Hb = np.zeros((nb, nbins), np.float32)
    Ua = np.zeros((na, nbins))
    Vb = np.zeros((nb, nbins))
    Ha[ra, ba] = ca
    Hb[rb, bb] = cb
    Ua[ra, ba] = ua
    Vb[rb, bb] = vb
    for k in range(nbins):
        m = np.minimum(Ha[:, k, None], Hb[None, :, k])
        out += m * np.outer(Ua[:, k], Vb[:, k])
    return out


def _check_xy(xy: np.ndarray, name: str, m: int) -> np.ndarray:
    arr = np.asarray(xy, np.float32)
    if arr.shape != (m, 2):
        raise ValueError(f"{name} must have shape ({m}, 2), got {arr.shape}")
    return arr
