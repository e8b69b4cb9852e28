"""Locality-sensitive hashing for sets of features: pyramid-match hashing and the L1 embedding.

References
----------
.. [1] K. Grauman. "Matching Sets of Features for Efficient Retrieval and Recognition",
   PhD thesis, MIT 2006, Ch. 5. Sec. 5.1 and Procedures 1-2 (L1 embedding of equal-size
   sets + LSH); Sec. 5.2, Eqs. 5.3-5.11 (random-hyperplane hashing of the pyramid-match
   embedding: collision probability ``1 - θ/π`` with ``cos θ`` the normalised pyramid
   match).
.. [2] M. Charikar. "Similarity estimation techniques from rounding algorithms", STOC 2002
   (random hyperplanes); M. Datar et al., "Locality-sensitive hashing scheme based on
   p-stable distributions", SoCG 2004 (Cauchy projections for L1).

This module holds the random-hyperplane hash of the pyramid-match embedding
(:class:`RandomHyperplaneHash`). Its parts live in sibling modules, whose public names
are importable from here too: the hashed random vectors over sparse keys
(:mod:`engine.hashing.keyed`), the banding of codes into tables
(:mod:`engine.hashing.bands`) and the L1 embedding with its p-stable index
(:mod:`engine.hashing.l1`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.arrays import unique_values
from engine.core.splitmix import splitmix64
from engine.core.validate import check_int
from engine.hashing.bands import BandedIndex, BandParams, band_keys, choose_params, s_curve
from engine.hashing.keyed import (
    KEY_BLOCK,
    KeyedSparse,
    SparseRows,
    as_keyed,
    gaussian_key_major,
    hashed_cauchy,
    hashed_gaussian,
)
from engine.hashing.l1 import L1SetEmbedding, L1SetIndex, PStableHash, l1_distances

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

__all__ = [
    "BandParams",
    "BandedIndex",
    "KeyedSparse",
    "L1SetEmbedding",
    "L1SetIndex",
    "PStableHash",
    "RandomHyperplaneHash",
    "band_keys",
    "choose_params",
    "hashed_cauchy",
    "hashed_gaussian",
    "l1_distances",
    "s_curve",
    "splitmix64",
]


class RandomHyperplaneHash:
    """Sign-of-random-projection bits ``h_r(u) = [r·u >= 0]`` (thesis Eq. 5.3).

    Applied to the pyramid-match embedding ``f(X)`` (Eq. 5.8, ``PyramidMatch.embed``), whose
    dot product is the unnormalised pyramid match (Eq. 5.9) and whose squared norm is the
    self-similarity (Eq. 5.10), two sets collide on a bit with probability
    ``1 - arccos(P_Δ(Y, Z)) / π`` where ``P_Δ`` is the pyramid match normalised by both
    self-similarities (Eq. 5.11). Only the coordinates of ``r`` on the keys present are
    generated (deterministically from ``(seed, bit, key)``), as the thesis notes after
    Eq. 5.11. Values are used as given, so the embedding need not be unary-expanded: any
    sparse vector whose dot product is the kernel works.

    Parameters
    ----------
    n_bits : int
        Number of hyperplanes (a multiple of 8).
    random_state : int

    Examples
    --------
    >>> import numpy as np
    >>> h = RandomHyperplaneHash(64, random_state=1)
    >>> bits = h.hash(np.eye(3, 50, dtype=np.float32))
    >>> bits.shape, bits.dtype.name
    ((3, 8), 'uint8')
    """

    def __init__(self, n_bits: int = 256, random_state: int = 0) -> None:
        self.n_bits = check_int(n_bits, "n_bits", 8)
        if self.n_bits % 8:
            raise ValueError(f"n_bits must be a multiple of 8, got {n_bits}")
        self.random_state = check_int(random_state, "random_state", 0)
        self._cache_keys = np.zeros(0, np.int64)
        self._cache = np.zeros((0, self.n_bits), np.float32)
        #: rows hashed so far by their owner (it decides when a :meth:`cache` pays off)
        self.rows_hashed = 0

    def cache(self, keys: Any, threads: int = 1) -> RandomHyperplaneHash:
        """Precompute the hyperplane coordinates of a known key set (e.g. every bin of a
        vocabulary tree): projecting rows over those keys then costs one gather and one
        small product instead of generating ``n_bits`` Gaussians per key (the query-time
        cost of hashing a pyramid, about 3 ms for 1,500 keys x 256 bits, drops to well
        under 1 ms). Keys outside the cache are generated as before; results are the same
        up to float32 summation order. Memory: ``4 * n_bits`` bytes per key.

        Parameters
        ----------
        keys : (K,) int64
            Any order, duplicates allowed; replaces the previous cache.
        threads : int, default 1
            Generate the blocks of coordinates on this many threads (numpy releases the
            GIL; the result does not depend on it).

        Returns
        -------
        self
        """
        k = unique_values(np.asarray(keys).astype(np.int64))
        bits = np.arange(self.n_bits)
        G = np.empty((k.size, self.n_bits), np.float32)

        def fill(s: int) -> None:
            G[s : s + KEY_BLOCK] = gaussian_key_major(
                self.random_state, bits, k[s : s + KEY_BLOCK]
            )

        starts = range(0, k.size, KEY_BLOCK)
        if threads > 1 and len(starts) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(threads, len(starts))) as ex:
                list(ex.map(fill, starts))
        else:
            for s in starts:
                fill(s)
        self._cache_keys, self._cache = k, G
        return self

    @property
    def n_cached(self) -> int:
        """Number of keys whose coordinates are cached (:meth:`cache`)."""
        return int(self._cache_keys.size)

    def coordinates(self, keys: np.ndarray) -> np.ndarray:
        """The hyperplanes' coordinates on ``keys``: from the cache (:meth:`cache`) where
        known, else generated (:func:`engine.hashing.keyed.gaussian_key_major`).

        Parameters
        ----------
        keys : (J,) int64

        Returns
        -------
        (J, n_bits) float32
            Row ``j`` holds the coordinate of every hyperplane on ``keys[j]``.
        """
        bits = np.arange(self.n_bits)
        ck = self._cache_keys
        if ck.size == 0:
            return gaussian_key_major(self.random_state, bits, keys)
        pos = np.minimum(np.searchsorted(ck, keys), ck.size - 1)
        known = ck[pos] == keys
        if known.all():
            return self._cache[pos]
        G = np.empty((keys.size, self.n_bits), np.float32)
        G[known] = self._cache[pos[known]]
        G[~known] = gaussian_key_major(self.random_state, bits, keys[~known])
        return G

    def project(self, x: SparseRows | sp.spmatrix | np.ndarray) -> np.ndarray:
        """Raw projections ``r_b · x`` for every row and hyperplane.

        Parameters
        ----------
        x : SparseEmbedding-like, scipy.sparse matrix or (n, D) array

        Returns
        -------
        (n, n_bits) float32
        """
        import scipy.sparse as sp

        M, keys = as_keyed(x, "x")
        if M.shape[0] == 1 and self._cache_keys.size:
            # one query row: a sparse row times the cached coordinates (streams the
            # cached rows of its keys, no gathered copy), plus generated unknown keys
            ck = self._cache_keys
            k = keys[M.indices]
            v = M.data.astype(np.float32)
            pos = np.minimum(np.searchsorted(ck, k), ck.size - 1)
            known = ck[pos] == k
            row = (
                sp.csr_matrix(
                    (v[known], pos[known], np.array([0, int(known.sum())])), shape=(1, ck.size)
                )
                @ self._cache
            )
            if not known.all():
                row = row + v[~known] @ self.coordinates(k[~known])
            return np.asarray(row, np.float32).reshape(1, self.n_bits)
        M = M.tocsc()  # cheap column blocks
        out = np.zeros((M.shape[0], self.n_bits), dtype=np.float64)
        for s in range(0, keys.size, KEY_BLOCK):
            G = self.coordinates(keys[s : s + KEY_BLOCK])  # (J, B)
            out += M[:, s : s + KEY_BLOCK] @ G
        return out.astype(np.float32)

    def hash(self, x: SparseRows | sp.spmatrix | np.ndarray) -> np.ndarray:
        """Packed hash bits (bit ``b`` set iff ``r_b · x >= 0``).

        Returns
        -------
        (n, n_bits // 8) uint8
            ``np.packbits(..., bitorder="little")``; compare with
            :func:`engine.hashing.wta.hamming_distance`. An all-zero row hashes to all ones.
        """
        return np.packbits(self.project(x) >= 0, axis=1, bitorder="little")

    def to_state(self) -> dict[str, Any]:
        """Scalars only: the hyperplanes are a pure function of the seed (splitmix64)."""
        return {"kind": "RandomHyperplaneHash", "n_bits": self.n_bits, "seed": self.random_state}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RandomHyperplaneHash:
        """Rebuild from :meth:`to_state` (bit-identical hashes)."""
        return cls(int(state["n_bits"]), int(state["seed"]))

    @staticmethod
    def collision_probability(cos_sim: Any) -> np.ndarray:
        """``1 - arccos(cos_sim) / π`` (Eq. 5.4 / 5.11)."""
        c = np.clip(np.asarray(cos_sim, dtype=np.float64), -1.0, 1.0)
        return 1.0 - np.arccos(c) / math.pi
