"""L1 embedding of equal-size point sets and its p-stable LSH index (thesis Sec. 5.1).

Procedures 1-2 of Grauman's thesis, chapter 5: the Indyk-Thaper embedding
(:class:`L1SetEmbedding`) maps a set of ``n`` features to a sparse vector whose L1
distances approximate the optimal bijective matching cost; p-stable hashes
(:class:`PStableHash`, Datar et al. 2004: Cauchy projections for L1) banded into tables
(:class:`engine.hashing.bands.BandedIndex`) find candidates, re-ranked by the exact
embedding distance (:class:`L1SetIndex`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.core.splitmix import splitmix64
from engine.core.validate import check_int
from engine.hashing.bands import BandedIndex
from engine.hashing.keyed import KEY_BLOCK, KeyedSparse, as_keyed, cauchy_key_major

__all__ = ["L1SetEmbedding", "L1SetIndex", "PStableHash", "l1_distances"]


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
        self.n_hashes = check_int(n_hashes, "n_hashes", 1)
        if not width > 0:
            raise ValueError(f"width must be > 0, got {width!r}")
        self.width = float(width)
        self.random_state = check_int(random_state, "random_state", 0)
        rng = np.random.default_rng(self.random_state)
        self.offsets_ = rng.uniform(0.0, self.width, self.n_hashes)

    def hash(self, x: Any) -> np.ndarray:
        """Integer bucket of every row under every hash.

        Returns
        -------
        (n, n_hashes) int64
        """
        M, keys = as_keyed(x, "x")
        M = M.tocsc()
        proj = np.zeros((M.shape[0], self.n_hashes), dtype=np.float64)
        rows = np.arange(self.n_hashes)
        for s in range(0, keys.size, KEY_BLOCK):
            C = cauchy_key_major(self.random_state, rows, keys[s : s + KEY_BLOCK])
            proj += M[:, s : s + KEY_BLOCK] @ C
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
        self.n_levels = check_int(n_levels, "n_levels", 1)
        self.random_state = check_int(random_state, "random_state", 0)
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
    import scipy.sparse as sp

    M, _ = as_keyed(
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
