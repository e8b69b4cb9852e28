"""Several :class:`~engine.index.search.IntersectionIndex` parts scored as one, without
concatenating them: the pyramids of a search data held in several (memory-mapped)
segments (:mod:`engine.index.mapped`). A query touches only the entries of the rows it
scores, and scores them exactly as the concatenation would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.index import search
from engine.index.search import IntersectionIndex, entry_positions, row_sums

__all__ = ["RowSums", "SegmentedIndex"]


class SegmentedIndex:
    """The rows of several :class:`IntersectionIndex` parts as one index, without
    concatenating them: stands for :meth:`IntersectionIndex.concat` of the parts' rows,
    taken in the order of a row map, and scores exactly as that concatenation does.

    A query touches only the entries of the rows it scores (the parts may be memory
    maps of files: their other pages are never read). What the concatenation alone can
    do (the exhaustive scoring of every row, :meth:`IntersectionIndex.pairwise`, ...) is
    done by the concatenation itself, made on first use (:meth:`whole`); every attribute
    this class lacks is that concatenation's.

    Parameters
    ----------
    parts : sequence of IntersectionIndex
        The indexes the rows lie in (all of them: the columns of the concatenation are
        the union of every part's, whatever rows are used).
    seg : (n,) int
        Part of every row.
    pos : (n,) int64
        Its row in that part.
    ready : callable, optional
        Called before any entry of the parts is read (e.g. waits for, or makes, the
        check of the files they map; raises when one is damaged).
    ready_rows : callable, optional
        ``ready_rows(k, positions)``: called instead, before the entries of rows
        ``positions`` of part ``k`` alone are read (a check of the blocks that hold
        them); ``ready`` is then called only before every entry is read.
    """

    def __init__(
        self,
        parts: Sequence[IntersectionIndex],
        seg: np.ndarray,
        pos: np.ndarray,
        *,
        ready: Callable[[], None] | None = None,
        ready_rows: Callable[[int, np.ndarray], None] | None = None,
    ) -> None:
        self.parts = list(parts)
        self.seg = np.asarray(seg, np.int32)
        self.pos = np.asarray(pos, np.int64)
        self._ready = ready
        self._ready_rows = ready_rows
        self._whole: IntersectionIndex | None = None
        self._n_columns: int | None = None
        self._scorer = IntersectionIndex(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.seg.shape[0])

    def ready(self) -> None:
        """Make sure the parts can be read (see ``ready``)."""
        if self._ready is not None:
            self._ready()

    def _ready_for(self, k: int, positions: np.ndarray) -> None:
        """Make sure rows ``positions`` of part ``k`` can be read (see ``ready_rows``)."""
        if self._ready_rows is not None:
            self._ready_rows(k, positions)
        else:
            self.ready()

    @property
    def columns_mode(self) -> bool:
        """Whether the concatenation scores through columns (every part holds them)."""
        return all(p.stored_columns is not None for p in self.parts)

    def _columns_size(self) -> int:
        """Columns of the concatenation: the union of the parts' keys."""
        if self._n_columns is None:
            uks = [p.stored_columns[0] for p in self.parts]
            union = uks[0] if len(uks) == 1 else np.unique(np.concatenate(uks))
            self._n_columns = int(union.size)
        return self._n_columns

    def whole(self) -> IntersectionIndex:
        """The concatenation itself (made once)."""
        with self._lock:
            if self._whole is None:
                self.ready()
                n = len(self)
                if len(self.parts) == 1 and np.array_equal(self.pos, np.arange(n)):
                    if len(self.parts[0]) == n:  # (one part, every row in order: itself)
                        self._whole = self.parts[0]
                        return self._whole
                glob = [np.flatnonzero(self.seg == k) for k in range(len(self.parts))]
                cat = IntersectionIndex.concat(
                    [p.subset(self.pos[g]) for p, g in zip(self.parts, glob, strict=True)]
                )
                inv = np.argsort(np.concatenate(glob), kind="stable")
                if not np.array_equal(inv, np.arange(inv.size)):
                    cat = cat.subset(inv)
                self._whole = cat
            return self._whole

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in (
            "parts", "seg", "pos", "_ready", "_ready_rows", "_whole", "_lock"
        ):  # fmt: skip
            raise AttributeError(name)
        return getattr(self.whole(), name)

    def subset(self, rows: np.ndarray) -> SegmentedIndex:
        """A new index holding only ``rows`` (in that order): no entry is copied."""
        rows = np.asarray(rows, np.int64)
        return SegmentedIndex(
            self.parts, self.seg[rows], self.pos[rows],
            ready=self._ready, ready_rows=self._ready_rows,
        )  # fmt: skip

    def with_part(self, part: IntersectionIndex, order: np.ndarray) -> SegmentedIndex:
        """These rows and those of one more ``part`` (all of them, after these), in
        ``order`` (positions in that sequence)."""
        m = len(part)
        seg = np.concatenate([self.seg, np.full(m, len(self.parts), np.int32)])[order]
        pos = np.concatenate([self.pos, np.arange(m, dtype=np.int64)])[order]
        return SegmentedIndex(
            [*self.parts, part], seg, pos, ready=self._ready, ready_rows=self._ready_rows
        )

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values of row ``i``."""
        if self._whole is not None:
            return self._whole.row(i)
        k, p = int(self.seg[i]), int(self.pos[i])
        self._ready_for(k, np.array([p]))
        return self.parts[k].row(p)

    def _per_row(
        self, rows: np.ndarray, reduce: Callable[[int, np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """(len(rows),) float64: for the rows of each part, ``reduce(k, their (m + 1,)
        indptr, positions of their entries in part k)``, placed at their rows.

        Every reduction here (:func:`row_sums`, :meth:`IntersectionIndex._filter_sums`)
        gives a row a value that depends on its own entries alone -- not on where they
        lie among others' -- so each part's rows are reduced apart and the values are
        those of the concatenation's rows, bit for bit.
        """
        seg, pos = self.seg[rows], self.pos[rows]
        out = np.zeros(rows.shape[0])
        for k, part in enumerate(self.parts):
            sel = np.flatnonzero(seg == k)
            if sel.size:
                self._ready_for(k, pos[sel])
                sub, at = entry_positions(part.indptr, pos[sel])
                if at.size:
                    out[sel] = reduce(k, sub, at)
        return out

    def score(
        self, q_keys: np.ndarray, q_values: np.ndarray, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`IntersectionIndex.score` of the concatenation, to the last bit.

        Candidate rows are scored from their own entries, read from their parts (the
        same values, compared with the same query values and summed the same way as the
        concatenation's, :meth:`_per_row`); the exhaustive scoring of every row
        (``rows`` None: small collections) and a concatenation whose columns would be
        too many for a dense query are left to the concatenation (:meth:`whole`).
        """
        if self._whole is not None or rows is None:
            return self.whole().score(q_keys, q_values, rows)
        q_keys = np.asarray(q_keys, np.int64)
        q_values = np.asarray(q_values, np.float32)
        rows = np.asarray(rows, np.int64)
        if self.columns_mode:
            if self._columns_size() >= search.DENSE_QUERY_MAX:
                return self.whole().score(q_keys, q_values, rows)
            # the query's value at every entry, looked up in each part's own columns
            dense = []
            for part in self.parts:
                qd = np.zeros(part.stored_columns[0].shape[0], np.float32)
                pos, hit = part.lookup(q_keys)
                qd[pos[hit]] = q_values[hit]
                dense.append(qd)

            def by_columns(k: int, sub: np.ndarray, at: np.ndarray) -> np.ndarray:
                part = self.parts[k]  # (fancy indexing: np.take copies a misaligned map)
                qx = dense[k][part.stored_columns[1][at]]
                return row_sums(np.minimum(part.values[at], qx), sub)

            return self._per_row(rows, by_columns)
        if q_keys.size == 0:
            return np.zeros(rows.shape[0])

        def by_keys(k: int, sub: np.ndarray, at: np.ndarray) -> np.ndarray:
            part = self.parts[k]
            if part.holds_keys:
                keys = part.keys[at]
            else:
                uk, cols = part.stored_columns
                keys = uk[cols[at]]
            return self._scorer._filter_sums(keys, part.values[at], sub, q_keys, q_values)

        return self._per_row(rows, by_keys)

    def self_similarity(self) -> RowSums:
        """(n,) float64 ``sum_b x_b`` of every row, computed for the rows asked
        (:class:`RowSums`)."""
        return RowSums(self)

    def row_sums(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) float64 ``sum_b x_b`` of ``rows``."""
        if self._whole is not None:
            return self._whole.self_similarity()[rows]
        rows = np.asarray(rows, np.int64)
        return self._per_row(rows, lambda k, sub, at: row_sums(self.parts[k].values[at], sub))


class RowSums:
    """(n,) float64 sums of the rows of a :class:`SegmentedIndex`, each computed when
    asked for: indexing with rows (``s[rows]``) sums those rows only (e.g. the uniform
    self-similarities of a query's candidates, without reading every row's pyramid);
    ``np.asarray(s)`` sums all of them. The values are those of
    :meth:`IntersectionIndex.self_similarity`."""

    def __init__(self, index: SegmentedIndex) -> None:
        self._index = index
        self._all: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._index)

    @property
    def shape(self) -> tuple[int]:
        return (len(self._index),)

    def __getitem__(self, rows: Any) -> np.ndarray:
        if self._all is not None:
            return self._all[rows]
        if isinstance(rows, np.ndarray) and rows.dtype.kind in "iu":
            return self._index.row_sums(rows.ravel()).reshape(rows.shape)
        return np.asarray(self)[rows]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._all is None:
            self._all = self._index.row_sums(np.arange(len(self._index)))
        return self._all if dtype is None else self._all.astype(dtype)

    def __mul__(self, other: Any) -> np.ndarray:
        return np.asarray(self) * other

    __rmul__ = __mul__
