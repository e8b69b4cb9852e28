"""Banding of hash codes: band keys, the S-curve and a banded inverted index.

A code row (WTA codes, packed random-hyperplane bytes, p-stable buckets) is cut into
``n_tables`` bands of ``band_size`` columns; two items become candidates when they agree
on a whole band in at least one table, which happens with probability
``1 - (1 - s**r)**b`` for a per-column agreement ``s`` (:func:`s_curve`; the "join" of
Yagnik et al. Sec. 5.1, the banding of the thesis Ch. 5). :func:`choose_params` picks
``(b, r)`` for a target recall and :class:`BandedIndex` answers batches of queries with
sorted key arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.core.splitmix import splitmix64
from engine.core.validate import check_int

__all__ = ["BandParams", "BandedIndex", "band_keys", "choose_params", "s_curve"]


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
    n_items = check_int(n_items, "n_items", 0)
    code_len = check_int(code_len, "code_len", 1)
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
        self.n_tables = check_int(n_tables, "n_tables", 1)
        self.band_size = check_int(band_size, "band_size", 1)
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
