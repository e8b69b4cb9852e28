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

Random vectors over an unbounded, sparse key space are never materialised: the
coordinate of hyperplane ``b`` on key ``k`` is a pure function of ``(seed, b, k)``
(splitmix64 counter hash -> two uniforms -> Box-Muller Gaussian, or -> Cauchy), so any
key, including one seen for the first time at query time, gets the same coordinate in
every process and on every NumPy version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from engine.core.arrays import unique_values
from engine.kernels.pyramid import SparseEmbedding

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

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TWO_PI = 2.0 * math.pi


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser applied elementwise (wrapping uint64 arithmetic).

    Parameters
    ----------
    x : ndarray of uint64 (other integer dtypes are reinterpreted as uint64)

    Returns
    -------
    ndarray of uint64, same shape
    """
    z = np.asarray(x).astype(np.uint64, copy=True) + _GOLDEN
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


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


def _gaussian_kb(seed: int, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(J, B) float32 Gaussian coordinates, key-major (see :func:`hashed_gaussian`)."""
    u1, u2, columns = _pair_uniforms(seed, rows, keys)
    rad = np.sqrt(np.float32(-2.0) * np.log(u1))
    ang = np.float32(_TWO_PI) * u2
    both = np.empty((*u1.shape, 2), dtype=np.float32)
    np.multiply(rad, np.cos(ang), out=both[..., 0])
    np.multiply(rad, np.sin(ang), out=both[..., 1])
    flat = both.reshape(u1.shape[0], -1)
    return flat if columns is None else flat[:, columns]


def _cauchy_kb(seed: int, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(J, B) float32 Cauchy coordinates, key-major (see :func:`hashed_cauchy`)."""
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
    return _gaussian_kb(seed, np.atleast_1d(rows), np.atleast_1d(keys)).T


def hashed_cauchy(seed: int, rows: Any, keys: Any) -> np.ndarray:
    """Standard Cauchy coordinates ``tan(π (u - 1/2))`` from the same counter hash.

    Returns
    -------
    (B, J) float32
    """
    return _cauchy_kb(seed, np.atleast_1d(rows), np.atleast_1d(keys)).T


class SparseRows(Protocol):
    """Anything shaped like ``engine.pyramid.SparseEmbedding`` (CSR rows over int64 keys)."""

    indptr: np.ndarray
    keys: np.ndarray
    values: np.ndarray


# CSR-like rows over stable int64 keys: the pyramid engine's type serves every embedding here.
KeyedSparse = SparseEmbedding


def _as_keyed(x: Any, name: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """Return ``(M, unique_keys)``: rows as CSR over local columns, and the key of each column.

    Accepts a SparseEmbedding-like object (``indptr``, ``keys``, ``values``, and its
    ``columns`` when known), a scipy sparse matrix or a dense 2-D array (column index =
    key).
    """
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
            # (engine.search.IntersectionIndex.columns): no sort of the keys
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


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


_KEY_BLOCK = 2048  # keys per block of generated coordinates (keeps temporaries in cache)


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
        self.n_bits = _check_int(n_bits, "n_bits", 8)
        if self.n_bits % 8:
            raise ValueError(f"n_bits must be a multiple of 8, got {n_bits}")
        self.random_state = _check_int(random_state, "random_state", 0)
        self._cache_keys = np.zeros(0, np.int64)
        self._cache = np.zeros((0, self.n_bits), np.float32)

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
            G[s : s + _KEY_BLOCK] = _gaussian_kb(self.random_state, bits, k[s : s + _KEY_BLOCK])

        starts = range(0, k.size, _KEY_BLOCK)
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

    def _coordinates(self, keys: np.ndarray) -> np.ndarray:
        """(J, n_bits) float32 coordinates of ``keys`` (J,) int64 (cache, else generated)."""
        bits = np.arange(self.n_bits)
        ck = self._cache_keys
        if ck.size == 0:
            return _gaussian_kb(self.random_state, bits, keys)
        pos = np.minimum(np.searchsorted(ck, keys), ck.size - 1)
        known = ck[pos] == keys
        if known.all():
            return self._cache[pos]
        G = np.empty((keys.size, self.n_bits), np.float32)
        G[known] = self._cache[pos[known]]
        G[~known] = _gaussian_kb(self.random_state, bits, keys[~known])
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
        M, keys = _as_keyed(x, "x")
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
                row = row + v[~known] @ self._coordinates(k[~known])
            return np.asarray(row, np.float32).reshape(1, self.n_bits)
        M = M.tocsc()  # cheap column blocks
        out = np.zeros((M.shape[0], self.n_bits), dtype=np.float64)
        for s in range(0, keys.size, _KEY_BLOCK):
            G = self._coordinates(keys[s : s + _KEY_BLOCK])  # (J, B)
            out += M[:, s : s + _KEY_BLOCK] @ G
        return out.astype(np.float32)

    def hash(self, x: SparseRows | sp.spmatrix | np.ndarray) -> np.ndarray:
        """Packed hash bits (bit ``b`` set iff ``r_b · x >= 0``).

        Returns
        -------
        (n, n_bits // 8) uint8
            ``np.packbits(..., bitorder="little")``; compare with
            :func:`engine.wta.hamming_distance`. An all-zero row hashes to all ones.
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


class PStableHash:
    """LSH for the L1 distance: ``h(v) = floor((a·v + b) / w)`` with Cauchy ``a`` (1-stable).

    Two vectors at L1 distance ``c`` collide with a probability decreasing in ``c / w``.
    Coordinates of ``a`` are generated from ``(seed, hash index, key)`` like the hyperplanes.

    Parameters
    ----------
    n_hashes : int
    width : float
        Bucket width ``w`` (in the units of the L1 distance).
    random_state : int
    """

    def __init__(self, n_hashes: int = 64, width: float = 1.0, random_state: int = 0) -> None:
        self.n_hashes = _check_int(n_hashes, "n_hashes", 1)
        if not width > 0:
            raise ValueError(f"width must be > 0, got {width!r}")
        self.width = float(width)
        self.random_state = _check_int(random_state, "random_state", 0)
        rng = np.random.default_rng(self.random_state)
        self.offsets_ = rng.uniform(0.0, self.width, self.n_hashes)

    def hash(self, x: Any) -> np.ndarray:
        """Integer bucket of every row under every hash.

        Returns
        -------
        (n, n_hashes) int64
        """
        M, keys = _as_keyed(x, "x")
        M = M.tocsc()
        proj = np.zeros((M.shape[0], self.n_hashes), dtype=np.float64)
        rows = np.arange(self.n_hashes)
        for s in range(0, keys.size, _KEY_BLOCK):
            C = _cauchy_kb(self.random_state, rows, keys[s : s + _KEY_BLOCK])
            proj += M[:, s : s + _KEY_BLOCK] @ C
        return np.floor((proj + self.offsets_) / self.width).astype(np.int64)

    def to_state(self) -> dict[str, Any]:
        """Scalars plus the offsets ``b`` (so buckets never depend on the NumPy RNG)."""
        return {
            "n_hashes": self.n_hashes,
            "width": self.width,
            "seed": self.random_state,
            "offsets": self.offsets_.copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PStableHash:
        obj = cls(int(state["n_hashes"]), float(state["width"]), int(state["seed"]))
        if "offsets" in state:
            offsets = np.asarray(state["offsets"], dtype=np.float64).reshape(-1)
            if offsets.size != obj.n_hashes:
                raise ValueError(f"state['offsets'] must have {obj.n_hashes} values")
            obj.offsets_ = offsets
        return obj


# ---------------------------------------------------------------------- banding
def band_keys(codes: Any, n_tables: int, band_size: int) -> np.ndarray:
    """Hash each band of ``band_size`` consecutive code columns into one int64 key.

    Parameters
    ----------
    codes : (n, m) integer array
        WTA codes, packed hyperplane bytes or p-stable buckets; ``m >= n_tables*band_size``.
    n_tables, band_size : int

    Returns
    -------
    (n, n_tables) int64
        Key of band ``t`` = splitmix64 chain over its columns, salted with ``t`` so equal
        bands in different tables do not share keys (64-bit: collisions are negligible).
    """
    codes = np.asarray(codes)
    if codes.ndim != 2 or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes must be a 2-D integer array, got {codes.dtype} {codes.shape}")
    need = n_tables * band_size
    if codes.shape[1] < need:
        raise ValueError(f"codes has {codes.shape[1]} columns, need n_tables*band_size = {need}")
    c = codes[:, :need].astype(np.int64).view(np.uint64).reshape(-1, n_tables, band_size)
    h = np.broadcast_to(splitmix64(np.arange(n_tables, dtype=np.uint64))[None], c.shape[:2]).copy()
    for j in range(band_size):
        h = splitmix64(h ^ c[:, :, j])
    return h.view(np.int64)


def s_curve(s: Any, band_size: int, n_tables: int) -> np.ndarray:
    """Probability that two items with per-code collision rate ``s`` share at least one band.

    ``P(s) = 1 - (1 - s**r)**b`` with ``r = band_size`` and ``b = n_tables``.
    """
    s = np.asarray(s, dtype=np.float64)
    return 1.0 - (1.0 - s**band_size) ** n_tables


@dataclass(frozen=True)
class BandParams:
    """Result of :func:`choose_params`.

    Attributes
    ----------
    n_tables, band_size : int
    recall : float
        ``P(s_near)``, expected fraction of true neighbours retrieved.
    candidate_fraction : float
        ``P(s_far)``, expected fraction of unrelated items returned as candidates.
    """

    n_tables: int
    band_size: int
    recall: float
    candidate_fraction: float


def choose_params(
    n_items: int,
    code_len: int,
    target_recall: float = 0.95,
    *,
    s_near: float = 0.6,
    s_far: float = 0.3,
    min_candidates: int = 50,
) -> BandParams:
    """Pick ``(n_tables b, band_size r)`` from the S-curve ``1 - (1 - s^r)^b``.

    Among all ``b * r <= code_len``, keep those whose recall ``P(s_near)`` reaches
    ``target_recall``; among them take the smallest expected candidate fraction
    ``P(s_far)`` as long as it stays >= the fraction needed for ``min_candidates`` items
    (tiny collections do not need aggressive pruning); ties (all below that floor) go to
    the cheapest pair: fewest code columns, then fewest tables. If no pair reaches the
    target, the pair with the highest recall is returned (its ``recall`` field says so).

    ``s_near`` / ``s_far`` are the per-column collision rates of a true neighbour and of
    an unrelated item. For packed random-hyperplane bits a column is a byte of 8
    independent bits, so ``s = (1 - arccos(k) / π)**8`` for normalised pyramid match
    ``k`` (Eq. 5.11); for WTA codes ``s`` is the code agreement (about ``1/K`` for
    unrelated vectors, estimate both from a sample of the collection).

    Examples
    --------
    >>> p = choose_params(10_000, 32, 0.95, s_near=0.9**8, s_far=0.5**8)
    >>> p.recall >= 0.95, p.n_tables * p.band_size <= 32
    (True, True)

    Parameters
    ----------
    n_items : int
        Collection size.
    code_len : int
        Number of code columns available.
    target_recall : float
        In (0, 1].
    s_near, s_far : float
        In (0, 1), ``s_far < s_near``.
    min_candidates : int
        Do not prune below this many expected candidates.

    Returns
    -------
    BandParams
    """
    n_items = _check_int(n_items, "n_items", 0)
    code_len = _check_int(code_len, "code_len", 1)
    if not 0.0 < target_recall <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
    if not 0.0 < s_far < s_near < 1.0:
        raise ValueError(f"need 0 < s_far < s_near < 1, got s_far={s_far}, s_near={s_near}")
    floor_frac = min(1.0, min_candidates / max(n_items, 1))
    best: tuple[tuple[float, ...], BandParams] | None = None
    for r in range(1, code_len + 1):
        b = np.arange(1, code_len // r + 1)
        rec = 1.0 - (1.0 - s_near**r) ** b
        frac = 1.0 - (1.0 - s_far**r) ** b
        for bi, rc, fr in zip(b, rec, frac, strict=True):
            ok = rc >= target_recall
            # rank: reach the target first, then smallest fraction above the floor,
            # then fewer tables; without the target, highest recall.
            key = (
                0.0 if ok else 1.0,
                max(fr, floor_frac) if ok else -rc,
                float(bi * r),
                float(bi),
            )
            if best is None or key < best[0]:
                best = (key, BandParams(int(bi), int(r), float(rc), float(fr)))
    assert best is not None
    return best[1]


class BandedIndex:
    """Banded inverted index over hash codes: ``n_tables`` tables, one band per table.

    Band ``t`` of an item is columns ``[t*band_size, (t+1)*band_size)`` of its code row,
    hashed to an int64 key (:func:`band_keys`). Each table is a sorted key array with the
    item ids in the same order, so a batch of queries is answered with
    ``np.searchsorted``; candidates are the items sharing at least ``min_votes`` bands with
    the query, with the number of shared bands as vote count (the "join" of
    Yagnik et al. Sec. 5.1).

    Parameters
    ----------
    n_tables : int
    band_size : int
    """

    def __init__(self, n_tables: int, band_size: int) -> None:
        self.n_tables = _check_int(n_tables, "n_tables", 1)
        self.band_size = _check_int(band_size, "band_size", 1)
        self._ids = np.empty(0, dtype=np.int64)
        self._keys = np.empty((0, self.n_tables), dtype=np.int64)
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self._ids.size)

    @property
    def ids(self) -> np.ndarray:
        """(n,) int64 ids currently indexed, in insertion order."""
        return self._ids.copy()

    def add(self, ids: Any, codes: Any) -> None:
        """Insert items (re-adding an id replaces its previous codes).

        Parameters
        ----------
        ids : (n,) int
        codes : (n, m) integer codes, ``m >= n_tables * band_size``
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[0] != ids.size:
            raise ValueError(f"codes must be ({ids.size}, m), got shape {codes.shape}")
        if np.unique(ids).size != ids.size:
            raise ValueError("ids must be unique within one add() call")
        keys = band_keys(codes, self.n_tables, self.band_size)
        if self._ids.size:
            self.remove(ids)
        self._ids = np.concatenate([self._ids, ids])
        self._keys = np.concatenate([self._keys, keys])
        self._sorted = None

    def remove(self, ids: Any) -> int:
        """Remove items by id; unknown ids are ignored. Returns the number removed."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        keep = ~np.isin(self._ids, ids)
        removed = int((~keep).sum())
        if removed:
            self._ids = self._ids[keep]
            self._keys = self._keys[keep]
            self._sorted = None
        return removed

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if self._sorted is None:
            order = np.argsort(self._keys, axis=0, kind="stable")  # (n, T)
            self._sorted = (
                np.take_along_axis(self._keys, order, axis=0).T.copy(),  # (T, n) sorted keys
                self._ids[order].T.copy(),  # (T, n) ids in the same order
            )
        return self._sorted

    def query(
        self, codes: Any, *, min_votes: int = 1
    ) -> list[tuple[np.ndarray, np.ndarray]] | tuple[np.ndarray, np.ndarray]:
        """Candidates sharing at least ``min_votes`` bands with each query.

        Parameters
        ----------
        codes : (q, m) or (m,) integer codes
        min_votes : int

        Returns
        -------
        list of (ids (k,) int64, votes (k,) int64), one per query row, sorted by votes
        (descending) then id; a single tuple for 1-D input.
        """
        single = np.ndim(codes) == 1
        codes2 = np.atleast_2d(np.asarray(codes))
        qkeys = band_keys(codes2, self.n_tables, self.band_size)  # (q, T)
        nq = qkeys.shape[0]
        if self._ids.size == 0:
            empty = [(np.empty(0, np.int64), np.empty(0, np.int64)) for _ in range(nq)]
            return empty[0] if single else empty
        skeys, sids = self._tables()
        q_parts, id_parts = [], []
        for t in range(self.n_tables):
            lo = np.searchsorted(skeys[t], qkeys[:, t], side="left")
            hi = np.searchsorted(skeys[t], qkeys[:, t], side="right")
            cnt = hi - lo
            total = int(cnt.sum())
            if total == 0:
                continue
            qidx = np.repeat(np.arange(nq), cnt)
            starts = np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
            pos = np.arange(total) + starts
            q_parts.append(qidx)
            id_parts.append(sids[t][pos])
        if not q_parts:
            res = [(np.empty(0, np.int64), np.empty(0, np.int64)) for _ in range(nq)]
            return res[0] if single else res
        qa = np.concatenate(q_parts)
        ia = np.concatenate(id_parts)
        pairs, votes = np.unique(np.stack([qa, ia], axis=1), axis=0, return_counts=True)
        keep = votes >= min_votes
        pairs, votes = pairs[keep], votes[keep].astype(np.int64)
        order = np.lexsort((pairs[:, 1], -votes, pairs[:, 0]))
        pairs, votes = pairs[order], votes[order]
        bounds = np.searchsorted(pairs[:, 0], np.arange(nq + 1))
        res = [
            (pairs[bounds[i] : bounds[i + 1], 1].copy(), votes[bounds[i] : bounds[i + 1]].copy())
            for i in range(nq)
        ]
        return res[0] if single else res

    def to_state(self) -> dict[str, Any]:
        """Ids and band keys in insertion order; the sorted tables are rebuilt on load."""
        return {
            "kind": "BandedIndex",
            "n_tables": self.n_tables,
            "band_size": self.band_size,
            "ids": self._ids.copy(),
            "band_keys": self._keys.copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BandedIndex:
        """Rebuild an index saved with :meth:`to_state`."""
        obj = cls(int(state["n_tables"]), int(state["band_size"]))
        ids = np.asarray(state["ids"], dtype=np.int64).reshape(-1)
        keys = np.asarray(state["band_keys"], dtype=np.int64).reshape(ids.size, obj.n_tables)
        obj._ids, obj._keys = ids, keys
        return obj


# ---------------------------------------------------------------------- L1 embedding
class L1SetEmbedding:
    """Indyk-Thaper L1 embedding of equal-mass point sets (thesis Sec. 5.1, Procedure 1).

    Randomly translated nested grids with cell sides ``s_l = s_0 * 2^l`` (``l = 0..L-1``,
    one random translation in ``[0, s_{L-1})^d`` shared by all levels) histogram the
    features, each feature weighted ``1/n``; level ``l`` is scaled by ``2^l``:
    ``E(X) = [H_0(X), ..., 2^l H_l(X), ...]`` (Procedure 1, step 4). ``s_0 * ||E(X) -
    E(Y)||_1`` approximates the optimal bijective matching cost between the two sets with
    ``O(d log Δ)`` distortion. Cells are keyed by a 64-bit hash of (level, cell
    coordinates), giving one sparse vector per set.

    Parameters
    ----------
    n_levels : int
        ``L``; the coarsest side ``s_{L-1}`` is at least twice the data extent.
    random_state : int
    """

    def __init__(self, n_levels: int = 10, random_state: int = 0) -> None:
        self.n_levels = _check_int(n_levels, "n_levels", 1)
        self.random_state = _check_int(random_state, "random_state", 0)
        self.origin_: np.ndarray | None = None
        self.finest_side_: float | None = None
        self.shift_: np.ndarray | None = None

    def fit(self, sets: list[np.ndarray]) -> L1SetEmbedding:
        """Fix the grid from the extent of the training features.

        Parameters
        ----------
        sets : list of (n_i, d) float arrays
        """
        X = np.concatenate([np.asarray(s, dtype=np.float64) for s in sets], axis=0)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError("sets must contain at least one (n, d) feature")
        lo = X.min(axis=0)
        extent = float((X.max(axis=0) - lo).max())
        top = 2.0 * max(extent, 1e-12)
        self.origin_ = lo
        self.finest_side_ = top / 2.0 ** (self.n_levels - 1)
        rng = np.random.default_rng(self.random_state)
        self.shift_ = rng.uniform(0.0, top, X.shape[1])
        return self

    def embed(self, sets: list[np.ndarray]) -> KeyedSparse:
        """One sparse vector per set (Procedure 1, step 4).

        Parameters
        ----------
        sets : list of (n_i, d) float arrays, all with the same ``n_i``

        Returns
        -------
        KeyedSparse
            ``len(sets)`` rows; values ``2^l / n`` times the counts.
        """
        if self.shift_ is None or self.origin_ is None or self.finest_side_ is None:
            raise RuntimeError("L1SetEmbedding is not fitted; call fit(sets) first")
        d = self.shift_.size
        arrs = [np.asarray(s, dtype=np.float64) for s in sets]
        for i, a in enumerate(arrs):
            if a.ndim != 2 or a.shape[1] != d:
                raise ValueError(f"sets[{i}] must have shape (n, {d}), got {a.shape}")
        sizes = np.array([a.shape[0] for a in arrs], dtype=np.int64)
        if sizes.size and np.unique(sizes).size > 1:
            raise ValueError(
                "L1SetEmbedding needs sets of equal size (Sec. 5.1); got sizes "
                f"{sorted(set(sizes.tolist()))[:5]}; use pyramid-match hashing instead"
            )
        n = len(arrs)
        if n == 0 or sizes.sum() == 0:
            z = np.zeros(n + 1, dtype=np.int64)
            return KeyedSparse(z, np.empty(0, np.int64), np.empty(0, np.float32))
        X = np.concatenate(arrs, axis=0)
        owner = np.repeat(np.arange(n), sizes)
        rel = X - self.origin_ + self.shift_
        key_parts, own_parts, val_parts = [], [], []
        for level in range(self.n_levels):
            side = self.finest_side_ * 2.0**level
            cell = np.floor(rel / side).astype(np.int64).view(np.uint64)
            h = np.full(X.shape[0], splitmix64(np.array([level], dtype=np.uint64))[0])
            for j in range(d):
                h = splitmix64(h ^ cell[:, j])
            key_parts.append(h.view(np.int64))
            own_parts.append(owner)
            val_parts.append(np.full(X.shape[0], 2.0**level / sizes[0]))
        keys = np.concatenate(key_parts)
        own = np.concatenate(own_parts)
        vals = np.concatenate(val_parts)
        # aggregate (owner, key) duplicates
        order = np.lexsort((keys, own))
        own, keys, vals = own[order], keys[order], vals[order]
        new = np.ones(own.size, dtype=bool)
        new[1:] = (own[1:] != own[:-1]) | (keys[1:] != keys[:-1])
        starts = np.flatnonzero(new)
        agg = np.add.reduceat(vals, starts)
        own_u, keys_u = own[starts], keys[starts]
        indptr = np.searchsorted(own_u, np.arange(n + 1)).astype(np.int64)
        return KeyedSparse(indptr, keys_u.astype(np.int64), agg.astype(np.float32))

    def to_state(self) -> dict[str, Any]:
        """Grid origin, finest side and random translation (arrays and scalars)."""
        if self.shift_ is None:
            raise RuntimeError("L1SetEmbedding is not fitted")
        return {
            "n_levels": self.n_levels,
            "random_state": self.random_state,
            "origin": self.origin_.copy(),  # type: ignore[union-attr]
            "finest_side": float(self.finest_side_),  # type: ignore[arg-type]
            "shift": self.shift_.copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> L1SetEmbedding:
        """Rebuild a fitted embedding saved with :meth:`to_state`."""
        obj = cls(int(state["n_levels"]), int(state["random_state"]))
        obj.origin_ = np.asarray(state["origin"], dtype=np.float64)
        obj.finest_side_ = float(state["finest_side"])
        obj.shift_ = np.asarray(state["shift"], dtype=np.float64)
        return obj


def l1_distances(query: KeyedSparse, rows: KeyedSparse) -> np.ndarray:
    """L1 distance between the single row of ``query`` and every row of ``rows``.

    Returns
    -------
    (n,) float64
    """
    M, _ = _as_keyed(
        KeyedSparse(
            np.concatenate([query.indptr[:2], rows.indptr[1:] + query.indptr[1]]),
            np.concatenate([query.keys[: query.indptr[1]], rows.keys]),
            np.concatenate([query.values[: query.indptr[1]], rows.values]),
        ),
        "rows",
    )
    q = M[0]
    R = M[1:]
    ones = sp.csr_matrix(np.ones((R.shape[0], 1), dtype=np.float32))
    diff = R - ones @ q
    return np.asarray(abs(diff).sum(axis=1)).reshape(-1).astype(np.float64)


class L1SetIndex:
    """Procedures 1-2 of the thesis: L1 embedding + p-stable LSH tables + exact re-ranking.

    Parameters
    ----------
    embedding : L1SetEmbedding
        Fitted embedding.
    n_tables, band_size : int
        Banding of the ``n_tables * band_size`` p-stable hashes.
    width : float or None
        Bucket width in embedding-L1 units; default: median L1 distance between the first
        items added divided by 2 (set at the first :meth:`add`).
    random_state : int
    """

    def __init__(
        self,
        embedding: L1SetEmbedding,
        *,
        n_tables: int = 16,
        band_size: int = 2,
        width: float | None = None,
        random_state: int = 0,
    ) -> None:
        self.embedding = embedding
        self.index = BandedIndex(n_tables, band_size)
        self.width = width
        self.random_state = random_state
        self._hash: PStableHash | None = None
        self._rows: list[KeyedSparse] = []
        self._ids: list[np.ndarray] = []
        self._flat: tuple[np.ndarray, KeyedSparse] | None = None

    def _hasher(self, emb: KeyedSparse) -> PStableHash:
        if self._hash is None:
            if self.width is None:
                k = min(len(emb), 64)
                sub = KeyedSparse(
                    emb.indptr[: k + 1], emb.keys[: emb.indptr[k]], emb.values[: emb.indptr[k]]
                )
                d = np.concatenate(
                    [l1_distances(_row(sub, i), sub)[i + 1 :] for i in range(k - 1)] or [[1.0]]
                )
                self.width = float(max(np.median(d) / 2.0, 1e-9))
            self._hash = PStableHash(
                self.index.n_tables * self.index.band_size, self.width, self.random_state
            )
        return self._hash

    def add(self, ids: Any, sets: list[np.ndarray]) -> None:
        """Procedure 1: embed the sets and insert them into the hash tables."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        emb = self.embedding.embed(sets)
        codes = self._hasher(emb).hash(emb)
        self.index.add(ids, codes)
        self._rows.append(emb)
        self._ids.append(ids)
        self._flat = None

    def _stored(self) -> tuple[np.ndarray, KeyedSparse]:
        if self._flat is None:
            self._flat = (np.concatenate(self._ids), _concat(self._rows))
            self._rows, self._ids = [self._flat[1]], [self._flat[0]]
        return self._flat

    def query(self, features: np.ndarray, top: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Procedure 2: candidates from the shared buckets, ranked by exact embedding L1.

        Returns
        -------
        ids : (k,) int64, distances : (k,) float64, nearest first (``k <= top``).
        """
        q = self.embedding.embed([features])
        cand, _ = self.index.query(self._hasher(q).hash(q)[0])
        if cand.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        all_ids, rows = self._stored()
        pos = np.flatnonzero(np.isin(all_ids, cand))
        d = l1_distances(q, _take(rows, pos))
        order = np.argsort(d, kind="stable")[:top]
        return all_ids[pos[order]], d[order]

    def to_state(self) -> dict[str, Any]:
        """Embedding grid, hash width, band keys and stored embeddings (arrays only)."""
        state: dict[str, Any] = {f"embedding_{k}": v for k, v in self.embedding.to_state().items()}
        state.update({f"index_{k}": v for k, v in self.index.to_state().items()})
        ids, rows = self._stored() if self._ids else (np.empty(0, np.int64), _concat([]))
        if self._hash is not None:
            state["pstable_offsets"] = self._hash.offsets_.copy()
        state.update(
            width=-1.0 if self.width is None else float(self.width),
            random_state=int(self.random_state),
            ids=ids,
            rows_indptr=rows.indptr,
            rows_keys=rows.keys,
            rows_values=rows.values,
        )
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> L1SetIndex:
        """Rebuild an index saved with :meth:`to_state` (same candidates and distances)."""
        emb = L1SetEmbedding.from_state(
            {k[len("embedding_") :]: v for k, v in state.items() if k.startswith("embedding_")}
        )
        index = BandedIndex.from_state(
            {k[len("index_") :]: v for k, v in state.items() if k.startswith("index_")}
        )
        width = float(state["width"])
        obj = cls(
            emb,
            n_tables=index.n_tables,
            band_size=index.band_size,
            width=None if width < 0 else width,
            random_state=int(state["random_state"]),
        )
        obj.index = index
        if "pstable_offsets" in state and obj.width is not None:
            obj._hash = PStableHash.from_state(
                {
                    "n_hashes": index.n_tables * index.band_size,
                    "width": obj.width,
                    "seed": obj.random_state,
                    "offsets": state["pstable_offsets"],
                }
            )
        ids = np.asarray(state["ids"], dtype=np.int64)
        if ids.size:
            obj._ids = [ids]
            obj._rows = [
                KeyedSparse(
                    np.asarray(state["rows_indptr"], np.int64),
                    np.asarray(state["rows_keys"], np.int64),
                    np.asarray(state["rows_values"], np.float32),
                )
            ]
        return obj


def _row(e: KeyedSparse, i: int) -> KeyedSparse:
    a, b = e.indptr[i], e.indptr[i + 1]
    return KeyedSparse(np.array([0, b - a], np.int64), e.keys[a:b], e.values[a:b])


def _concat(parts: list[KeyedSparse]) -> KeyedSparse:
    if not parts:
        return KeyedSparse(np.zeros(1, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))
    indptr = [np.zeros(1, np.int64)]
    off = 0
    for p in parts:
        indptr.append(p.indptr[1:] + off)
        off += int(p.indptr[-1])
    return KeyedSparse(
        np.concatenate(indptr),
        np.concatenate([p.keys for p in parts]),
        np.concatenate([p.values for p in parts]),
    )


def _take(e: KeyedSparse, rows: np.ndarray) -> KeyedSparse:
    lens = np.diff(e.indptr)[rows]
    starts = e.indptr[:-1][rows]
    idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    return KeyedSparse(
        np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), e.keys[idx], e.values[idx]
    )
