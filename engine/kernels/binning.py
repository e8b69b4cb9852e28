"""Bins of the pyramid match: the :class:`Binning` protocol and uniform shifted grids.

A pyramid match (:mod:`engine.kernels.pyramid`) needs a *binning*: a map of points to
nested bins, finest level first, with a similarity weight per bin. This module defines
the protocol (:class:`Binning`), the randomly shifted uniform grids of the thesis
chapter 3 (:class:`UniformBinning`) and the small PCA (:class:`Projection`) that reduces
features before they are binned. The data-shaped bins of chapter 4 are
:class:`engine.kernels.vocabulary.VocabularyTree`; the spatial pyramid's are
:class:`engine.kernels.spatial.SpatialPyramidBinning`.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.core.validate import as_point_set, check_positive

__all__ = ["Binning", "Projection", "UniformBinning"]


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
    Optional extras read by :class:`engine.kernels.pyramid.PyramidMatch` when present:
    ``bin_costs(level, bins)`` or ``diameters(level, bins)`` -- (n,) float64 distance
    estimate used as the *cost* weight (default ``1 / bin_weights``), and ``sigma_``
    (float) -- the scale of the input-specific similarity weights
    ``exp(-(d_X + d_Y) / sigma)``.
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


# --------------------------------------------------------------------------- small PCA
class Projection:
    """Centring + PCA projection learned in :meth:`engine.kernels.pyramid.PyramidMatch.fit`.

    Parameters
    ----------
    mean : (D,) float
        Centre subtracted before projecting.
    components : (k, D) float
        Principal directions, one per row (largest variance first).
    """

    def __init__(self, mean: np.ndarray, components: np.ndarray) -> None:
        self.mean = np.asarray(mean, np.float32)
        self.components = np.asarray(components, np.float32)  # (k, D)

    @classmethod
    def fit(cls, X: np.ndarray, k: int) -> Projection:
        """The ``k`` leading eigenvectors of the covariance of ``X`` (N, D) float32.

        Each component's largest-magnitude entry is made positive (a deterministic sign).
        """
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
        """``(X - mean) @ components.T``: (M, D) float32 -> (M, k) float32 C-contiguous."""
        # (X - mean) C^T without the (N, D) temporary, on one BLAS thread: a BLAS thread
        # pool waits ~8 ms for its threads on a busy machine, and einsum, which avoids
        # BLAS, is 4-8x slower than one BLAS thread (300 x 128 -> 32: 0.31 against 0.04
        # ms; 19,000 x 128 -> 32: 17 against 2 ms)
        with single_threaded_blas():
            out = X @ self.components.T
        out -= self.mean @ self.components.T
        return np.ascontiguousarray(out, dtype=np.float32)
