"""Reading the stored features of an index: one image, many, or their descriptors
stacked (what :class:`engine.index.store.IndexStore` delegates its feature reads to).

Rows of the catalogue (:data:`engine.index.catalog.FEATURE_SELECT_SQL`) say where each
image's features are: a feature chunk, an offset and a count; the chunks are memory-mapped
once (:class:`engine.index.chunks.ChunkCache`) and decoded
(:func:`engine.index.chunks.decode_features`). A chunk compacted away by a concurrent
writer after its row was read is read again from the fresh row; a chunk that is missing
is a damaged index (:class:`~engine.index.store_errors.IndexCorruptError`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.index.catalog import FEATURE_SELECT_SQL
from engine.index.chunks import decode_features
from engine.index.files import display_path, norm_path, py_path, resolved_path
from engine.index.store_errors import IndexCorruptError, StoreError

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features

__all__ = ["ROWS_BY_ID", "FeatureReads"]

#: Feature reads of at most this many ids select them by id, more scan the catalogue
#: once (SQLite allows 999 parameters in old builds).
ROWS_BY_ID = 500


class FeatureReads:
    """The feature reads of one index.

    Parameters
    ----------
    index_dir : Path
        The index folder (for messages).
    query : callable
        ``query(sql, params) -> list of tuple``: the store's serialised catalogue query.
    chunk : callable
        ``chunk(file, n_rows) -> (n_rows,) structured ndarray``: a chunk's rows,
        memory-mapped; raises ``FileNotFoundError`` when the file is gone.
    """

    def __init__(
        self,
        index_dir: Path,
        query: Callable[..., list[tuple]],
        chunk: Callable[[str, int], np.ndarray],
    ) -> None:
        self.index_dir = index_dir
        self.query = query
        self.chunk = chunk

    def missing(self, exc: FileNotFoundError) -> IndexCorruptError:
        """The error of a chunk file that is gone for good."""
        name = os.path.basename(exc.filename or "?")
        return IndexCorruptError(
            f"the stored features of the index {self.index_dir} are damaged "
            f"(features/{name}: missing)",
            path=exc.filename,
        )

    def features_from_row(self, row: tuple) -> Features:
        """The features a catalogue row (:data:`FEATURE_SELECT_SQL` without its id) points
        at; ``FileNotFoundError`` when its chunk is gone."""
        from engine.features.keypoints import Features

        path, status, n, chunk_id, offset, width, height, kind, dim, file, n_rows, scale = row
        path = display_path(py_path(path))
        if status != "ok":
            raise StoreError(f"{path} has no features: indexing it failed")
        if n == 0 or chunk_id is None:
            return Features(
                descriptors=np.zeros((0, int(dim)), np.float32),
                xy=np.zeros((0, 2), np.float32),
                scale=None,
                angle=None,
                image_size=(int(width), int(height)),
                kind=kind or "sift",
            )
        if file is None:
            raise IndexCorruptError(
                f"the stored features of the index {self.index_dir} are damaged (feature "
                f"chunk {chunk_id} of {path} is not in the catalogue)"
            )
        arr = self.chunk(file, int(n_rows))
        return decode_features(arr, offset, n, scale, (int(width), int(height)), kind)

    def feature_rows(self, ids: list[int]) -> list[tuple]:
        """``FEATURE_SELECT_SQL`` rows of ``ids`` (any order; unknown ids have none): by
        id for a batch, one scan of the catalogue for many (an encoding batch of a large
        collection then reads its 64 rows, not every row)."""
        if len(ids) > ROWS_BY_ID:
            return self.query(FEATURE_SELECT_SQL)
        marks = ",".join("?" * len(ids))
        return self.query(f"{FEATURE_SELECT_SQL} WHERE i.id IN ({marks})", tuple(ids))

    def feature_row(self, key: int | str | os.PathLike) -> tuple:
        """The :data:`FEATURE_SELECT_SQL` row (without its id) of image id or path ``key``;
        ``KeyError`` when unknown."""
        if isinstance(key, int | np.integer):
            rows = self.query(f"{FEATURE_SELECT_SQL} WHERE i.id = ?", (int(key),))
        else:
            rows = self.query(f"{FEATURE_SELECT_SQL} WHERE i.path = ?", (norm_path(key),))
            if not rows and resolved_path(key) is not None:
                rows = self.query(f"{FEATURE_SELECT_SQL} WHERE i.path = ?", (resolved_path(key),))
        if not rows:
            raise KeyError(f"image {key!r} is not in the index")
        return rows[0][1:]

    def get_features(self, key: int | str | os.PathLike) -> Features:
        """Stored features of image id or path ``key``.

        Returns
        -------
        Features
            ``descriptors (M, D) float32`` (dequantised), ``xy (M, 2) float32``,
            ``scale``/``angle`` ``(M,) float32`` or ``None``.

        Raises
        ------
        KeyError
            Unknown image. :class:`StoreError` if the image failed to index.
        """
        try:
            return self.features_from_row(self.feature_row(key))
        except FileNotFoundError:
            # A concurrent writer compacted the chunk away after we read the row: re-read.
            try:
                return self.features_from_row(self.feature_row(key))
            except FileNotFoundError as exc:
                raise self.missing(exc) from None

    def iter_features(self, ids: Iterable[int] | None = None) -> Iterator[tuple[int, Features]]:
        """Yield ``(id, Features)`` for ``ids`` (default: every ok image, ascending id).

        The rows come from one query and each chunk is mapped once, so iterating the
        whole collection is one sequential pass over the chunk files.

        Raises
        ------
        KeyError
            An id is unknown. :class:`StoreError` if one is a failed image.
        """
        if ids is None:
            rows = self.query(f"{FEATURE_SELECT_SQL} WHERE i.status = 'ok' ORDER BY i.id")
            order = [r[0] for r in rows]
        else:
            order = [int(i) for i in ids]
            rows = self.feature_rows(order)
        by_id = {r[0]: r[1:] for r in rows}
        for i in order:
            row = by_id.get(i)
            if row is None:
                raise KeyError(f"image {i!r} is not in the index")
            try:
                feats = self.features_from_row(row)
            except FileNotFoundError:
                feats = self.get_features(i)
            yield i, feats

    def stacked_descriptors(
        self, ids: Iterable[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """All descriptors of ``ids`` stacked, with per-image offsets.

        Returns
        -------
        X : (N, D) float32
            Descriptors of every image, concatenated in ``ids`` order.
        indptr : (n + 1,) int64
            Image ``k`` owns ``X[indptr[k]:indptr[k + 1]]``.
        """
        if ids is None:
            rows = self.query(f"{FEATURE_SELECT_SQL} WHERE i.status = 'ok' ORDER BY i.id")
        else:
            ids = [int(i) for i in ids]
            by_id = {r[0]: r for r in self.feature_rows(ids)}
            try:
                rows = [by_id[int(i)] for i in ids]
            except KeyError as exc:
                raise KeyError(f"image {exc.args[0]!r} is not in the index") from None
        for r in rows:
            if r[2] != "ok":
                raise StoreError(f"{r[1]} has no features: indexing it failed")
        counts = np.array([r[3] for r in rows], dtype=np.int64)
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        dims = {r[9] for r in rows if r[3]}
        if len(dims) > 1:
            raise StoreError("stored descriptors have mixed dimensions; re-index the folder")
        dim = dims.pop() if dims else max((r[9] for r in rows), default=0)
        X = np.empty((int(indptr[-1]), dim), dtype=np.float32)
        for k, row in enumerate(rows):
            _id, path, n, off, file, n_rows, scale = (row[i] for i in (0, 1, 3, 5, 10, 11, 12))
            if not n:
                continue
            if file is None:
                raise IndexCorruptError(
                    f"the stored features of the index {self.index_dir} are damaged (the "
                    f"feature chunk of {display_path(py_path(path))} is not in the catalogue)"
                )
            try:
                desc = self.chunk(file, int(n_rows))["desc"][off : off + n]
            except FileNotFoundError:  # compacted away meanwhile: take the fresh row
                desc = self.get_features(int(_id)).descriptors
                scale = 1.0
            np.multiply(desc, np.float32(scale), out=X[indptr[k] : indptr[k + 1]])
        return X, indptr
