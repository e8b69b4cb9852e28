"""Hashed random vectors over sparse int64 keys, and the sparse rows they project.

The hashing encoders of this package project sparse vectors whose coordinates are named
by int64 keys over an unbounded key space (the pyramid match's bin keys, ``engine.kernels
.embedding``). Random vectors over such a space are never materialised: the coordinate of
random vector ``b`` on key ``k`` is a pure function of ``(seed, b, k)`` (a splitmix64
counter hash, :mod:`engine.core.splitmix`, -> two uniforms -> Box-Muller Gaussian, or ->
Cauchy), so any key, including one seen for the first time at query time, gets the same
coordinate in every process and on every NumPy version.

:func:`as_keyed` turns the accepted inputs (:class:`KeyedSparse` rows, SciPy sparse
matrices, dense arrays) into one CSR matrix over the distinct keys.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from engine.core.arrays import unique_values
from engine.core.splitmix import splitmix64
from engine.kernels.embedding import SparseEmbedding

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

__all__ = [
    "KEY_BLOCK",
    "KeyedSparse",
    "SparseRows",
    "as_keyed",
    "cauchy_key_major",
    "gaussian_key_major",
    "hashed_cauchy",
    "hashed_gaussian",
]

_TWO_PI = 2.0 * math.pi
KEY_BLOCK = 2048  # keys per block of generated coordinates (keeps temporaries in cache)


_MASK64 = (1 << 64) - 1
_INV32 = 1.0 / float(1 << 32)


def _pair_uniforms(seed: int, rows: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, ...]:
    """Uniforms for ``(seed, row, key)``: one splitmix64 per (key, row pair).

    Rows ``2i`` and ``2i + 1`` share one 64-bit hash of ``(seed, i, key)`` whose two 32-bit
    halves give ``u1`` in (0, 1] and ``u2`` in [0, 1).

    Returns
    -------
    u1, u2 : (J, P) float32 over the keys and the unique row pairs ``P``;
    columns : (B,) int64 column of each requested row in the interleaved ``(J, 2P)``
    layout, or None when that is the identity.
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    keys = np.asarray(keys).astype(np.int64).reshape(-1)
    if rows.size and rows.min() < 0:
        raise ValueError("rows must be >= 0")
    pairs, inverse = np.unique(rows // 2, return_inverse=True)
    salt = np.uint64((int(seed) * 0x94D049BB133111EB + 0x2545F4914F6CDD1D) & _MASK64)
    r = splitmix64(pairs.astype(np.uint64) ^ salt)
    k = splitmix64(keys.view(np.uint64))
    h = splitmix64(k[:, None] ^ r[None, :])
    # float32 keeps 24 of the 32 bits: plenty for hyperplanes, and 4x faster log/trig
    u1 = ((h >> np.uint64(32)) + np.uint64(1)).astype(np.float32) * np.float32(_INV32)
    u2 = (h & np.uint64(0xFFFFFFFF)).astype(np.float32) * np.float32(_INV32)
    columns = 2 * inverse.reshape(-1) + (rows % 2)
    if columns.size == 2 * pairs.size and np.array_equal(columns, np.arange(columns.size)):
        columns = None
    return u1, u2, columns


def gaussian_key_major(seed: int, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(J, B) float32 Gaussian coordinates, key-major: ``hashed_gaussian(seed, rows,
    keys).T`` (see :func:`hashed_gaussian`) without the transpose.

    Parameters
    ----------
    seed : int
    rows : (B,) int64
        Random-vector (hyperplane) indices, >= 0.
    keys : (J,) int64
    """
    u1, u2, columns = _pair_uniforms(seed, rows, keys)
    rad = np.sqrt(np.float32(-2.0) * np.log(u1))
    ang = np.float32(_TWO_PI) * u2
    both = np.empty((*u1.shape, 2), dtype=np.float32)
    np.multiply(rad, np.cos(ang), out=both[..., 0])
    np.multiply(rad, np.sin(ang), out=both[..., 1])
    flat = both.reshape(u1.shape[0], -1)
    return flat if columns is None else flat[:, columns]


def cauchy_key_major(seed: int, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(J, B) float32 Cauchy coordinates, key-major: ``hashed_cauchy(seed, rows,
    keys).T`` (see :func:`hashed_cauchy`) without the transpose.

    Parameters
    ----------
    seed : int
    rows : (B,) int64
        Random-vector indices, >= 0.
    keys : (J,) int64
    """
    u1, u2, columns = _pair_uniforms(seed, rows, keys)
    # both halves in (0, 1); clip away the float32 rounding to exactly 1
    both = np.minimum(np.stack([u1 - np.float32(_INV32), u2], axis=2), np.float32(1 - 2**-24))
    both = np.maximum(both, np.float32(2**-32))
    flat = np.tan(np.float32(math.pi) * (both.reshape(u1.shape[0], -1) - np.float32(0.5)))
    return flat if columns is None else flat[:, columns]


def hashed_gaussian(seed: int, rows: Any, keys: Any) -> np.ndarray:
    """Standard-normal coordinates ``g[b, j] = N(seed, rows[b], keys[j])``, deterministic.

    Box-Muller on two 32-bit uniforms from a splitmix64 counter hash of
    ``(seed, rows[b] // 2, keys[j])``: even rows take the cosine branch, odd rows the sine
    branch, so rows ``2i`` and ``2i + 1`` are independent normals from one hash.

    Parameters
    ----------
    seed : int
    rows : (B,) int
        Hyperplane indices (>= 0).
    keys : (J,) int64
        Embedding keys.

    Returns
    -------
    (B, J) float32
    """
    return gaussian_key_major(seed, np.atleast_1d(rows), np.atleast_1d(keys)).T


def hashed_cauchy(seed: int, rows: Any, keys: Any) -> np.ndarray:
    """Standard Cauchy coordinates ``tan(π (u - 1/2))`` from the same counter hash.

    Returns
    -------
    (B, J) float32
    """
    return cauchy_key_major(seed, np.atleast_1d(rows), np.atleast_1d(keys)).T


class SparseRows(Protocol):
    """Anything shaped like :class:`engine.kernels.embedding.SparseEmbedding`: CSR rows
    (``indptr`` (n + 1,) int64) over int64 ``keys`` with ``values`` (nnz,) float32."""

    indptr: np.ndarray
    keys: np.ndarray
    values: np.ndarray


# CSR-like rows over stable int64 keys: the pyramid engine's type serves every embedding here.
KeyedSparse = SparseEmbedding


def as_keyed(x: Any, name: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """Return ``(M, unique_keys)``: rows as CSR over local columns, and the key of each column.

    ``M`` is an (n, K) float32 CSR matrix and ``unique_keys`` the (K,) int64 key of each of
    its columns; ``name`` names the argument in errors.

    Accepts a SparseEmbedding-like object (``indptr``, ``keys``, ``values``, and its
    ``columns`` when known), a scipy sparse matrix or a dense 2-D array (column index =
    key).
    """
    import scipy.sparse as sp

    if all(hasattr(x, a) for a in ("indptr", "keys", "values")) and not sp.issparse(x):
        indptr = np.asarray(x.indptr, dtype=np.int64)
        keys = np.asarray(x.keys, dtype=np.int64)
        values = np.asarray(x.values, dtype=np.float32)
        if indptr.ndim != 1 or indptr.size == 0 or indptr[0] != 0 or indptr[-1] != keys.size:
            raise ValueError(f"{name}.indptr is not a valid CSR pointer for {keys.size} keys")
        if keys.shape != values.shape:
            raise ValueError(f"{name}.keys and {name}.values differ in shape")
        columns = getattr(x, "columns", None)
        if columns is not None and np.shape(columns[1]) == keys.shape:
            # the sorted distinct keys and every entry's position in them, known already
            # (engine.index.search.IntersectionIndex.columns): no sort of the keys
            uniq, local = np.asarray(columns[0], np.int64), columns[1]
        else:
            uniq, local = np.unique(keys, return_inverse=True)
        M = sp.csr_matrix((values, local.reshape(-1), indptr), shape=(indptr.size - 1, uniq.size))
        return M, uniq
    if sp.issparse(x):
        M = sp.csr_matrix(x, dtype=np.float32)
    else:
        arr = np.asarray(x, dtype=np.float32)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n, D) or a SparseEmbedding, got {arr.shape}")
        M = sp.csr_matrix(arr)
    M.sum_duplicates()
    used = unique_values(M.indices)
    M = M[:, used].tocsr()
    return M, used.astype(np.int64)
