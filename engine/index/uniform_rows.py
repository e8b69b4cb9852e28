"""The uniform pyramids of the search data, made from the stored features when read.

The uniform-bin pyramids (:func:`~engine.index.encode.uniform_index`) were three quarters
of the search data's bytes -- about 43 KB a photo of the 54 KB, as ``(nnz,) int64`` hashed
bin keys and ``float32`` values -- and only the ``uniform`` method reads them (with
:meth:`Searcher.kernel_matrix("uniform") <engine.index.searcher.Searcher.kernel_matrix>`
and what is built on it). The index no longer stores them: a photo's uniform pyramid is a
function of its stored descriptors and the fitted models alone (no collection-wide
weight), so :class:`UniformRows` stands for the pyramids of a reader's rows and encodes
those a query reads from their stored features, with the same function that encoded
them for the index -- the same keys and values, to the last bit, whatever batch a row
is encoded in.

A hashed ``uniform`` query reads the pyramids of its ``UNIFORM_RERANK`` (40) best
candidates only: they are encoded when asked (about 0.1-0.3 s), with the self-similarity
of those rows (:meth:`UniformRows.self_similarity`). What needs every row (the exhaustive
scoring of a small collection, the kernel matrix) encodes them all once, in batches on
the encoding threads, and keeps them (:meth:`UniformRows.whole`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index.encode import ENCODE_BATCH, stacked, uniform_index
from engine.index.search import IntersectionIndex, row_sums
from engine.index.segmented import RowSums
from engine.index.threads import thread_map

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.fit import SearchModels
    from engine.index.store import IndexStore

__all__ = ["UniformRows"]


class UniformRows:
    """The uniform pyramids of rows ``ids``, encoded from their stored features when read:
    stands for the :class:`~engine.index.search.IntersectionIndex` that
    :func:`~engine.index.encode.uniform_index` gives for all of them (every attribute
    this class lacks is that index's, made on first use: :meth:`whole`), and scores as
    it does, to the last bit.

    Parameters
    ----------
    store : IndexStore
        The store whose features are read (``stacked``).
    models : SearchModels
        The fitted models (``models.uniform`` is read).
    ids : (n,) int64
        Store ids of the rows, in row order.
    """

    def __init__(
        self,
        store: IndexStore,
        models: SearchModels,
        ids: np.ndarray,
    ) -> None:
        self.store, self.models = store, models
        self.ids = np.asarray(ids, np.int64)
        self._whole: IntersectionIndex | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def loaded(self) -> bool:
        """Whether every row's pyramid was encoded (:meth:`whole`)."""
        return self._whole is not None

    def encode_rows(self, rows: np.ndarray) -> IntersectionIndex:
        """The pyramids of ``rows`` ((k,) int64 positions), in that order, encoded now
        from their stored features (or taken from :meth:`whole` once made)."""
        rows = np.asarray(rows, np.int64)
        if self._whole is not None:
            return self._whole.subset(rows)
        return _encode(self.store, self.models, self.ids[rows])

    def whole(self, progress: Callable[[int, int], None] | None = None) -> IntersectionIndex:
        """Every row's pyramid (encoded once, in batches of
        :data:`~engine.index.encode.ENCODE_BATCH` on the encoding threads;
        ``progress(done, total)`` after each batch)."""
        with self._lock:
            if self._whole is None:
                self._whole = _encode(self.store, self.models, self.ids, progress)
            return self._whole

    def __getattr__(self, name: str) -> Any:
        # (what this object lacks is the whole index's: pairwise, keys, values, ...)
        if name.startswith("__") or name in ("store", "models", "ids", "_whole", "_lock"):
            raise AttributeError(name)
        return getattr(self.whole(), name)

    def score(
        self, q_keys: np.ndarray, q_values: np.ndarray, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`IntersectionIndex.score` of the whole index, to the last bit: a few
        candidate rows (fewer than a quarter) are encoded alone and scored row by row, as
        the whole index scores a few rows (each row's sum from its own entries); all
        rows, or many, are scored by the whole index."""
        n = len(self)
        if self._whole is not None or rows is None or len(rows) >= n // 4:
            return self.whole().score(q_keys, q_values, rows)
        rows = np.asarray(rows, np.int64)
        sub = self.encode_rows(rows)  # (a new index: scored row by row)
        return sub.score(q_keys, q_values, np.arange(rows.shape[0], dtype=np.int64))

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values of row ``i``."""
        return self.encode_rows(np.array([i])).row(0)

    def row_sums(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) float64 ``sum_b x_b`` of ``rows`` (their self-similarities)."""
        sub = self.encode_rows(np.asarray(rows, np.int64))
        return row_sums(sub.values, sub.indptr)

    def self_similarity(self) -> RowSums:
        """(n,) float64 ``sum_b x_b`` of every row, computed for the rows asked
        (:class:`~engine.index.segmented.RowSums`)."""
        return RowSums(self)

    def subset(self, rows: np.ndarray) -> UniformRows:
        """Rows ``rows`` (in that order); nothing is encoded."""
        out = UniformRows(self.store, self.models, self.ids[np.asarray(rows, np.int64)])
        if self._whole is not None:
            out._whole = self._whole.subset(rows)
        return out


def _encode(
    store: IndexStore,
    models: SearchModels,
    ids: np.ndarray,
    progress: Callable[[int, int], None] | None = None,
) -> IntersectionIndex:
    """:func:`~engine.index.encode.uniform_index` of the stored features of ``ids``."""
    if ids.size == 0:
        return IntersectionIndex(
            np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        )
    if ids.size <= ENCODE_BATCH:
        return uniform_index(models, stacked(store, ids))
    batches = [ids[s : s + ENCODE_BATCH] for s in range(0, ids.size, ENCODE_BATCH)]
    done = [0]
    lock = threading.Lock()

    def one(batch: np.ndarray) -> IntersectionIndex:
        ix = uniform_index(models, stacked(store, batch))
        if progress is not None:
            with lock:
                done[0] += batch.size
                progress(done[0], int(ids.size))
        return ix

    return IntersectionIndex.concat(thread_map(one, batches))
