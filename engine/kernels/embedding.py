"""The pyramid match's explicit sparse feature map and its stable keys.

With the unary encoding of thesis Eq. 3.15 (``min(a, b) = sum_{t >= 1} [a >= t] [b >= t]``)
the pyramid match is a dot product: every (shift, level, bin, unary index ``t``) of a set's
pyramid is one coordinate with value ``sqrt((w_bin - w_parent) / T)``.
:class:`SparseEmbedding` holds such rows; pyramid-match hashing (thesis Eqs. 5.8-5.11,
:mod:`engine.hashing.lsh`) and the inverted index use them.

Coordinates are named by STABLE int64 keys, equal across calls, processes and NumPy
versions for the same fitted model: SplitMix64 (:mod:`engine.core.splitmix`) hashes of
(shift, level) into a salt (:func:`level_salt`), of (salt, bin id) into a bin key
(:func:`level_key`) and of (bin key, ``t``) into a coordinate key (:func:`unary_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.core.splitmix import GOLDEN, mix64

__all__ = [
    "GOLDEN",
    "SparseEmbedding",
    "combine",
    "level_key",
    "level_salt",
    "mix64",
    "unary_key",
]


# --------------------------------------------------------------------------- keys
def combine(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Hash of the pair ``(a, b)`` of int64 arrays/scalars -> int64 (wrapping arithmetic).

    ``mix64(a * GOLDEN + mix64(b + GOLDEN))`` elementwise (broadcast), as int64.
    """
    ua = np.asarray(a).astype(np.int64).view(np.uint64)
    ub = np.asarray(b, dtype=np.int64).astype(np.uint64)
    return mix64(ua * GOLDEN + mix64(ub + GOLDEN)).view(np.int64)


@lru_cache(maxsize=4096)
def level_salt(shift: int, level: int) -> np.uint64:
    """Salt of pyramid ``shift``'s level ``level``: ``splitmix64(combine(shift, level))``.

    Returns
    -------
    numpy.uint64
        Cached (the same few (shift, level) pairs are asked for on every encoding).
    """
    salt = int(combine(np.int64(shift), level))
    return np.uint64(mix64(np.asarray(salt, np.int64).astype(np.uint64) + GOLDEN))


def level_key(shift: int, level: int, bins: np.ndarray) -> np.ndarray:
    """STABLE int64 key of (shift, level, bin id): ``combine(bins, salt(shift, level))``.

    Parameters
    ----------
    shift, level : int
        Pyramid (shift) index and level (0 = finest).
    bins : (n,) int64
        Bin ids at that level (as a binning's ``assign`` gives them).

    Returns
    -------
    (n,) int64
        ``mix64(bins * GOLDEN + level_salt(shift, level))``.
    """
    ua = np.asarray(bins, np.int64).view(np.uint64)
    return mix64(ua * GOLDEN + level_salt(shift, level)).view(np.int64)


def unary_key(bin_keys: np.ndarray, t: np.ndarray) -> np.ndarray:
    """STABLE int64 key of (bin key, unary index t) -- a coordinate of Eq. 3.15.

    Parameters
    ----------
    bin_keys : (n,) int64
        :func:`level_key` keys.
    t : (n,) int64
        Unary index ``1 .. count`` of every coordinate.

    Returns
    -------
    (n,) int64
    """
    return combine(bin_keys, 0) ^ mix64(np.asarray(t, np.int64).astype(np.uint64)).view(np.int64)


# --------------------------------------------------------------------------- rows
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
        (:meth:`engine.index.search.IntersectionIndex.columns`): hashing then needs no sort of
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
