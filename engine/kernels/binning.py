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

from engine.core.arrays import key_owner_order
from engine.core.blas import single_threaded_blas
from engine.core.validate import as_documents, as_point_set, check_choice, check_positive

__all__ = ["Binning", "Projection", "UniformBinning", "path_weights"]

_UNIFORM_WEIGHTS = ("global", "idf")


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
    estimate used as the *cost* weight (default ``1 / bin_weights``), ``sigma_``
    (float) -- the scale of the input-specific similarity weights
    ``exp(-(d_X + d_Y) / sigma)``, and ``path_weights(bins)`` -- the (M, n_levels)
    similarity weights of whole paths of bins, for binnings whose weight of a bin cannot
    be looked up from its id alone (:func:`path_weights` reads it).
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
    weights : {"global", "idf"}, default "global"
        Similarity weights: ``"global"``, the thesis' ``1 / (D f 2**i)`` (Eq. 3.10);
        ``"idf"`` (NOT in the thesis; Nistér & Stewénius 2006), a bin's weight is the sum
        of the inverse document frequencies ``ln(N / N_b)`` on its path to the top, counted
        by :meth:`fit_document_frequencies` -- read them with :meth:`path_weights`.

    Notes
    -----
    Bin ids are the integer grid coordinates ``c`` hashed as ``sum_k c_k R_k`` with
    random odd int64 multipliers ``R`` and wrapping arithmetic (PyramidMatch then mixes
    them with the level and shift through a bijective SplitMix64 finaliser).
    Two distinct bins of one level collide only when
    ``sum_k (c_k - c'_k) R_k == 0 (mod 2**64)``, probability about ``2**-64`` per pair
    for random ``R``: with a million occupied bins per level the chance of any collision
    is about ``3e-8``, and a collision merely adds one spurious bin match.

    Hashed ids do not tell a bin's parent, so idf weights are stored only for the bins
    found in at least 2 fit sets, with their *cumulative* weight (idf summed up the path,
    from the fit points' nested paths); every other bin has idf ``ln N`` (``N_b <= 1``)
    and its cumulative weight is ``ln N`` plus its parent's, so :meth:`path_weights`
    walks a point's path from the top down. Bins of one set only are not stored: memory
    grows with the bins that sets share, not with the points.
    """

    def __init__(
        self,
        finest_side: float | None = None,
        *,
        finest_scale: float = 0.25,
        shift: bool = True,
        distances: bool = False,
        random_state: int = 0,
        weights: str = "global",
    ) -> None:
        if finest_side is not None:
            check_positive(finest_side, "finest_side")
        check_positive(finest_scale, "finest_scale")
        check_choice(weights, "weights", _UNIFORM_WEIGHTS)
        self.finest_side = None if finest_side is None else float(finest_side)
        self.finest_scale = float(finest_scale)
        self.shift = bool(shift)
        self.distances = bool(distances)
        self.random_state = int(random_state)
        self.weights = weights
        self.n_levels = 0
        self.n_documents_: int | None = None
        # per level below the top: sorted ids of the bins of >= 2 fit sets, cumulative idf
        self._idf_bins: list[np.ndarray] | None = None
        self._idf_cum: list[np.ndarray] | None = None

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
        self.n_documents_, self._idf_bins, self._idf_cum = None, None, None
        return self

    def fit_document_frequencies(self, sets: list[np.ndarray]) -> UniformBinning:
        """Count in how many of ``sets`` every bin occurs (the ``"idf"`` weights).

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays
            Example sets ("documents") in the binning's (projected) feature space, e.g.
            the sets fitted on; empty sets are skipped. At least two must be non-empty.

        Returns
        -------
        self

        Notes
        -----
        ``N_b`` is the number of the ``N`` non-empty sets with a point in bin ``b``;
        ``idf_b = ln(N / N_b)`` (the top bin holds every set: idf 0). Stored per level:
        the bins with ``N_b >= 2`` (sorted int64 ids) and their cumulative weights
        ``sum of idf_b`` over the bin and its ancestors (float64), non-increasing
        towards the top since every idf is ``>= 0``. Cost: one :meth:`assign` of all
        the points plus one sort per level.
        """
        self._check_fitted()
        points, owner, n = as_documents(sets, dim=self.dim_)
        bins = self.assign(points)[0]
        L = self.n_levels
        ids: list[np.ndarray] = [np.zeros(0, np.int64)] * (L - 1)
        cum: list[np.ndarray] = [np.zeros(0)] * (L - 1)
        for lev in range(L - 2, -1, -1):
            b = bins[:, lev]
            order = key_owner_order(b, owner, n)
            bs, os_ = b[order], owner[order]
            new_pair = np.ones(bs.shape[0], bool)
            new_pair[1:] = (bs[1:] != bs[:-1]) | (os_[1:] != os_[:-1])
            new_bin = np.ones(bs.shape[0], bool)
            new_bin[1:] = bs[1:] != bs[:-1]
            starts = np.flatnonzero(new_bin)
            df = np.add.reduceat(new_pair.astype(np.int64), starts)
            keep = df >= 2
            ids[lev] = bs[starts[keep]]  # ascending
            rep = order[starts[keep]]  # a point of every kept bin, for its parent
            if lev == L - 2:  # the parent is the top bin: idf ln(N / N) = 0
                parent = np.zeros(rep.shape[0])
            else:  # N_parent >= N_b >= 2: stored
                parent = _lookup(
                    ids[lev + 1], cum[lev + 1], bins[rep, lev + 1], np.zeros(rep.size)
                )
            cum[lev] = np.log(n / df[keep]) + parent
        self.n_documents_, self._idf_bins, self._idf_cum = n, ids, cum
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
        largest L1 distance of two points in a bin), constant per level.

        With ``weights="idf"`` only bins of at least 2 fit sets (and the top bin) have a
        weight of their own: any other raises ValueError, use :meth:`path_weights`."""
        if self.weights != "idf":
            return 1.0 / self.bin_costs(level, bins)
        self._check_idf()
        bins = np.asarray(bins, np.int64)
        if level >= self.n_levels - 1:
            return np.zeros(bins.shape[0])
        nan = np.full(bins.shape[0], np.nan)
        w = _lookup(self._idf_bins[level], self._idf_cum[level], bins, nan)  # type: ignore[index]
        if np.isnan(w).any():
            raise ValueError(
                "idf weights of bins of fewer than 2 fit sets depend on their parent: "
                "use path_weights(bins) on whole paths"
            )
        return w

    def path_weights(self, bins: np.ndarray) -> np.ndarray:
        """Similarity weights of whole paths of nested bins.

        Parameters
        ----------
        bins : (M, n_levels) int64
            Every point's bins at every level, finest first (from :meth:`assign`).

        Returns
        -------
        (M, n_levels) float64
            ``"global"``: ``1 / (D f 2**level)`` per column. ``"idf"``: the sum of
            ``ln(N / N_b)`` over the bin and its ancestors -- the stored cumulative weight
            of a bin of at least 2 fit sets, else ``ln N`` plus its parent's weight (the
            top bin weighs 0). Non-increasing along each row, so ``w - w_parent`` is the
            bin's idf ``>= 0`` and the pyramid match stays a Mercer kernel.
        """
        self._check_fitted()
        bins = np.asarray(bins, np.int64)
        if bins.ndim != 2 or bins.shape[1] != self.n_levels:
            raise ValueError(f"bins must have shape (M, {self.n_levels}), got {bins.shape}")
        L = self.n_levels
        if self.weights != "idf":
            lw = 1.0 / (self.dim_ * self.side_ * 2.0 ** np.arange(L))
            return np.broadcast_to(lw, bins.shape).copy()
        self._check_idf()
        w = np.zeros(bins.shape)
        log_n = math.log(self.n_documents_)  # type: ignore[arg-type]
        # the child of a bin of at most one fit set has at most one too: only points whose
        # parent bin is stored need a look-up (top-down, fewer at every level)
        stored = np.arange(bins.shape[0])
        for lev in range(L - 2, -1, -1):
            w[:, lev] = w[:, lev + 1] + log_n
            ids, cum = self._idf_bins[lev], self._idf_cum[lev]  # type: ignore[index]
            if stored.size == 0 or ids.size == 0:
                stored = stored[:0]
                continue
            pos = np.minimum(np.searchsorted(ids, bins[stored, lev]), ids.shape[0] - 1)
            hit = ids[pos] == bins[stored, lev]
            stored = stored[hit]
            w[stored, lev] = cum[pos[hit]]
        return w

    def _check_idf(self) -> None:
        self._check_fitted()
        if self._idf_bins is None:
            raise RuntimeError(
                "weights='idf' needs document frequencies; call fit_document_frequencies(sets)"
            )

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
            "weights": self.weights,
            "n_documents": -1 if self.n_documents_ is None else self.n_documents_,
            # per level below the top: how many bins, their ids and cumulative idf
            "idf_sizes": np.array([b.shape[0] for b in self._idf_bins or []], np.int64),
            "idf_bins": _cat(self._idf_bins, np.int64),
            "idf_cum": _cat(self._idf_cum, np.float64),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> UniformBinning:
        self = cls(
            float(state["side"]),
            finest_scale=float(state["finest_scale"]),
            shift=bool(state["shift"]),
            distances=bool(state["distances"]),
            random_state=int(state["random_state"]),
            # states written before idf weights existed are global
            weights=str(np.asarray(state["weights"])) if "weights" in state else "global",
        )
        self.lo_ = np.asarray(state["lo"], np.float64)
        self.hi_ = np.asarray(state["hi"], np.float64)
        self.side_ = float(state["side"])
        self.shift_ = np.asarray(state["shift_vec"], np.float64)
        self.mult_ = np.asarray(state["mult"], np.int64)
        self.dim_ = int(self.lo_.shape[0])
        self.n_levels = int(state["n_levels"])
        n_docs = int(state["n_documents"]) if "n_documents" in state else -1
        if n_docs >= 0:
            sizes = np.asarray(state["idf_sizes"], np.int64)
            ids = np.asarray(state["idf_bins"], np.int64)
            cum = np.asarray(state["idf_cum"], np.float64)
            total = (int(sizes.sum()),)
            if sizes.shape != (self.n_levels - 1,) or ids.shape != total or cum.shape != total:
                raise ValueError("uniform binning state: inconsistent idf arrays")
            cuts = np.cumsum(sizes)[:-1]
            self.n_documents_ = n_docs
            self._idf_bins, self._idf_cum = np.split(ids, cuts), np.split(cum, cuts)
        return self

    def __repr__(self) -> str:
        if hasattr(self, "side_"):
            return f"UniformBinning(side={self.side_:.4g}, n_levels={self.n_levels})"
        return f"UniformBinning(finest_side={self.finest_side})"


def _cat(parts: list[np.ndarray] | None, dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def _lookup(ids: np.ndarray, values: np.ndarray, b: np.ndarray, default: np.ndarray) -> np.ndarray:
    """``values`` of ``b`` (M,) int64 in the sorted ``ids``; ``default`` (M,) where absent."""
    if ids.shape[0] == 0:
        return default
    pos = np.minimum(np.searchsorted(ids, b), ids.shape[0] - 1)
    return np.where(ids[pos] == b, values[pos], default)


def path_weights(binning: Binning, bins: np.ndarray, n_levels: int | None = None) -> np.ndarray:
    """Similarity weights of every point's bins at every level, finest first.

    Parameters
    ----------
    binning : Binning
        Fitted. Its ``path_weights(bins)`` is used when it has one (weights that depend
        on the bin's ancestors, e.g. :class:`UniformBinning` with idf weights), else
        ``bin_weights`` level by level.
    bins : (M, binning.n_levels) int64
        Every point's nested bins from ``binning.assign`` (all levels).
    n_levels : int or None
        Return the first ``n_levels`` levels only (default: all).

    Returns
    -------
    (M, n_levels) float64
        Non-increasing along each row.
    """
    bins = np.asarray(bins, np.int64)
    L = bins.shape[1] if n_levels is None else int(n_levels)
    fn = getattr(binning, "path_weights", None)
    if fn is not None:
        return np.asarray(fn(bins), np.float64)[:, :L]
    w = np.empty((bins.shape[0], L))
    for lev in range(L):
        w[:, lev] = binning.bin_weights(lev, bins[:, lev])
    return w


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
