"""Persistent, crash-safe collection index: SQLite catalogue + memory-mapped feature chunks.

Layout of an index directory::

    SIMILE-INDEX                    marker: {"format": "simile-index", ...}, written first;
                                    a folder without it is never used (or cleaned) as an index
    catalog.sqlite (+ -wal, -shm)   catalogue: images, chunks, settings, kv (WAL mode)
    lock                            writer lock (flock / msvcrt), holds the writer's pid
    features/c<id>-<token>.npy      append-only feature chunks, one per ingest batch
    arrays/<name>.npy               named arrays (``save_array``)
    states/<name>.json + .npz       model states (``save_state``): scalars in JSON, arrays in npz
                                    (and in parts written ahead, ``write_state_part``)

Crash safety rests on one ordering rule: every file is written to a temporary name in
the same directory, flushed, fsynced and atomically renamed into place BEFORE the SQLite
transaction that references it commits. A crash at any moment therefore leaves either an
unreferenced file (an orphan, deleted on the next writer open by :meth:`IndexStore.gc`)
or a committed catalogue whose every reference points at a complete file. Nothing is
ever loaded with pickle (``allow_pickle=False`` everywhere).

Only a folder that carries the marker file (or an index written before the marker
existed, recognised by its catalogue's ``application_id``) is opened for writing: a
non-empty folder without either is refused, so ``--index ~/album`` can never make the
clean-up (:meth:`IndexStore.gc`) delete a person's files. The clean-up itself removes
only files whose names match the store's own patterns.

Paths are stored losslessly whatever bytes the file system hands us: a path that is not
valid UTF-8 (Python gives it lone surrogates, ``os.fsdecode``) is stored as a BLOB of its
raw bytes and turned back into the same ``str`` when read. Descriptors are stored per
chunk with the smallest faithful codec (8-bit for SIFT kinds; :mod:`engine.index.chunks`).

The pieces live beside this module: the catalogue's schema, marker and opening
(:mod:`engine.index.catalog`), the feature chunks and their codecs
(:mod:`engine.index.chunks`), the writer lock (:mod:`engine.index.lock`), crash-safe
files and path codecs (:mod:`engine.index.files`), named arrays and model states
(:mod:`engine.index.states`) and the errors (:mod:`engine.index.store_errors`).
:class:`IndexStore` ties them together; the names below stay importable from here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index import states as _states
from engine.index.catalog import (
    CATALOG_NAME,
    CHUNK_USAGE_SQL,
    DUPLICATES_SQL,
    FEATURE_SELECT_SQL,
    IMAGE_COLS,
    INDEX_DIRNAME,
    MARKER_NAME,
    SCHEMA_VERSION,
    TOUCH_SQL,
    UPSERT_FAILED_SQL,
    UPSERT_OK_SQL,
    ImageRecord,
    insert_chunk,
    open_reader,
    open_writer,
    read_marker,
)
from engine.index.chunks import (
    ChunkCache,
    PackedFeatures,
    decode_features,
    descriptor_dim,
    write_chunk,
)
from engine.index.files import (
    CHUNK_RE,
    STATE_NPZ_RE,
    TMP_RE,
    check_name,
    display_path,
    norm_path,
    py_path,
    resolved_path,
    unlink,
)
from engine.index.lock import WriterLock
from engine.index.store_errors import (
    IndexCorruptError,
    IndexFormatError,
    IndexLockedError,
    IndexNotFoundError,
    IndexVersionError,
    ReadOnlyIndexError,
    StoreError,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features


__all__ = [
    "INDEX_DIRNAME",
    "MARKER_NAME",
    "SCHEMA_VERSION",
    "ImageRecord",
    "IndexCorruptError",
    "IndexFormatError",
    "IndexLockedError",
    "IndexNotFoundError",
    "IndexStore",
    "IndexVersionError",
    "PackedFeatures",
    "ReadOnlyIndexError",
    "StoreError",
    "display_path",
]


# feature reads of at most this many ids select them by id, more scan the catalogue once
# (SQLite allows 999 parameters in old builds)
_ROWS_BY_ID = 500


class IndexStore:
    """An index directory: catalogue, feature chunks, named arrays and model states.

    Use :meth:`open`. A writable store holds the writer lock until :meth:`close`;
    read-only stores never lock and see committed snapshots (SQLite WAL), so readers
    may run while one writer updates the index.

    Thread safety: one store may be used from several threads (e.g. a GUI worker
    thread running an ingest); calls are serialised by an internal lock.
    """

    def __init__(self, index_dir: Path, conn: sqlite3.Connection, readonly: bool,
                 lock: WriterLock | None) -> None:  # fmt: skip
        self.index_dir = index_dir
        self.readonly = readonly
        self._conn = conn
        self._lock = lock
        self._mutex = threading.RLock()
        self._chunks = ChunkCache(index_dir / "features")
        self._closed = False

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(
        cls, index_dir: str | os.PathLike, *, create: bool = True, readonly: bool = False
    ) -> IndexStore:
        """Open (and with ``create`` make) the index in ``index_dir``.

        Parameters
        ----------
        index_dir : path-like
            Directory of the index (e.g. ``<folder>/.simile``).
        create : bool
            Create the directory and an empty catalogue when absent. Ignored when
            ``readonly``.
        readonly : bool
            Open without the writer lock; write methods raise :class:`ReadOnlyIndexError`.

        Raises
        ------
        IndexNotFoundError
            No catalogue and ``create`` is false or ``readonly`` is true.
        IndexLockedError
            ``readonly=False`` and another process holds the writer lock.
        IndexCorruptError, IndexFormatError, IndexVersionError
            Damaged, foreign, or newer-schema catalogue.
        """
        index_dir = Path(os.path.abspath(os.fspath(index_dir)))
        catalog = index_dir / CATALOG_NAME
        exists = catalog.is_file()
        if not exists and (readonly or not create):
            raise IndexNotFoundError(f"no simile index in {index_dir}")
        if readonly:
            return cls(index_dir, open_reader(catalog), True, None)
        conn, lock = open_writer(index_dir, catalog)
        store = cls(index_dir, conn, False, lock)
        store.gc()
        return store

    def close(self) -> None:
        """Close the catalogue, drop cached memory maps and release the writer lock."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._chunks.clear()
            try:
                self._conn.close()
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> IndexStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "readonly" if self.readonly else "writer"
        return f"IndexStore({str(self.index_dir)!r}, {mode})"

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._mutex:
            if self._closed:
                raise StoreError("the index store is closed")
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                if type(exc) is sqlite3.DatabaseError:  # SQLITE_CORRUPT / NOTADB
                    raise IndexCorruptError(
                        f"index catalogue in {self.index_dir} is damaged: {exc}"
                    ) from exc
                raise

    def _require_writer(self) -> None:
        if self.readonly:
            raise ReadOnlyIndexError(f"index {self.index_dir} was opened read-only")
        if self._closed:
            raise StoreError("the index store is closed")

    def _begin(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._conn.execute("UPDATE kv SET value = value + 1 WHERE key = 'generation'")
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    @property
    def generation(self) -> int:
        """Counter bumped by every committed catalogue write (for cache invalidation)."""
        return int(self._q("SELECT value FROM kv WHERE key = 'generation'")[0][0])

    #: The catalogue form of a path (:func:`engine.index.files.norm_path`).
    norm_path = staticmethod(norm_path)
    _resolved = staticmethod(resolved_path)

    # ------------------------------------------------------------------ catalogue reads

    def records(self, status: str | None = "ok") -> list[ImageRecord]:
        """All catalogue rows with ``status`` (``None``: every row), ascending id."""
        if status is None:
            rows = self._q(f"SELECT {IMAGE_COLS} FROM images ORDER BY id")
        else:
            rows = self._q(
                f"SELECT {IMAGE_COLS} FROM images WHERE status = ? ORDER BY id", (status,)
            )
        return [ImageRecord(r[0], py_path(r[1]), *r[2:]) for r in rows]

    def ids(self, status: str | None = "ok") -> np.ndarray:
        """Image ids ``(n,) int64`` with ``status``, ascending (the stable row order)."""
        if status is None:
            rows = self._q("SELECT id FROM images ORDER BY id")
        else:
            rows = self._q("SELECT id FROM images WHERE status = ? ORDER BY id", (status,))
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def paths(self, status: str | None = "ok") -> list[str]:
        """Absolute path strings with ``status``, in :meth:`ids` order."""
        if status is None:
            rows = self._q("SELECT path FROM images ORDER BY id")
        else:
            rows = self._q("SELECT path FROM images WHERE status = ? ORDER BY id", (status,))
        return [py_path(r[0]) for r in rows]

    def record(self, key: int | str | os.PathLike) -> ImageRecord | None:
        """The row of image id ``key`` (int) or path ``key``; ``None`` when unknown.

        A path is looked up as given, then symlink-resolved (the catalogue stores the
        resolved absolute paths produced by :func:`engine.scan.scan_folder`).
        """
        if isinstance(key, int | np.integer):
            rows = self._q(f"SELECT {IMAGE_COLS} FROM images WHERE id = ?", (int(key),))
        else:
            rows = self._q(
                f"SELECT {IMAGE_COLS} FROM images WHERE path = ?", (self.norm_path(key),)
            )
            if not rows and self._resolved(key) is not None:
                rows = self._q(
                    f"SELECT {IMAGE_COLS} FROM images WHERE path = ?", (self._resolved(key),)
                )
        if not rows:
            return None
        r = rows[0]
        return ImageRecord(r[0], py_path(r[1]), *r[2:])

    def id_of(self, path: str | os.PathLike) -> int | None:
        """Image id of ``path`` or ``None``."""
        rows = self._q("SELECT id FROM images WHERE path = ?", (self.norm_path(path),))
        if not rows and self._resolved(path) is not None:
            rows = self._q("SELECT id FROM images WHERE path = ?", (self._resolved(path),))
        return int(rows[0][0]) if rows else None

    def count(self, status: str | None = "ok") -> int:
        """Number of rows with ``status`` (``None``: all)."""
        if status is None:
            return int(self._q("SELECT count(*) FROM images")[0][0])
        return int(self._q("SELECT count(*) FROM images WHERE status = ?", (status,))[0][0])

    def failures(self) -> list[tuple[str, str]]:
        """``(path, reason)`` of every failed file, ascending id."""
        rows = self._q("SELECT path, error FROM images WHERE status = 'failed' ORDER BY id")
        return [(py_path(p), e or "unknown error") for p, e in rows]

    def known_stats(self) -> dict[str, tuple[int, int]]:
        """``path -> (size, mtime_ns)`` for every row, ok and failed (input of scan)."""
        rows = self._q("SELECT path, size, mtime_ns FROM images")
        return {py_path(p): (s, m) for p, s, m in rows}

    def known_hashes(self) -> dict[str, str]:
        """``path -> content hash`` for every row that has one."""
        rows = self._q("SELECT path, content_hash FROM images WHERE content_hash IS NOT NULL")
        return {py_path(p): h for p, h in rows}

    def feature_keys(self) -> dict[str, str | None]:
        """``path -> fkey`` (feature-settings key given to :meth:`write_batch`), every row."""
        return {py_path(p): k for p, k in self._q("SELECT path, fkey FROM images")}

    def duplicate_files(self) -> list[list[str]]:
        """Groups (≥ 2) of usable images with byte-identical content, by content hash."""
        rows = self._q(DUPLICATES_SQL)
        groups: dict[str, list[str]] = {}
        for h, p in rows:
            groups.setdefault(h, []).append(py_path(p))
        return list(groups.values())

    # ------------------------------------------------------------------ features

    def _chunk(self, file: str, n_rows: int) -> np.ndarray:
        """Rows of chunk ``file``, memory-mapped (:class:`engine.index.chunks.ChunkCache`)."""
        with self._mutex:
            return self._chunks.get(file, n_rows)

    def _features_from_row(self, row: tuple) -> Features:
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
            raise IndexCorruptError(f"feature chunk {chunk_id} of {path} is not in the catalogue")
        arr = self._chunk(file, int(n_rows))
        return decode_features(arr, offset, n, scale, (int(width), int(height)), kind)

    def _feature_rows(self, ids: list[int]) -> list[tuple]:
        """``FEATURE_SELECT_SQL`` rows of ``ids`` (any order; unknown ids have none): by
        id for a batch, one scan of the catalogue for many (an encoding batch of a large
        collection then reads its 64 rows, not every row)."""
        if len(ids) > _ROWS_BY_ID:
            return self._q(FEATURE_SELECT_SQL)
        marks = ",".join("?" * len(ids))
        return self._q(f"{FEATURE_SELECT_SQL} WHERE i.id IN ({marks})", tuple(ids))

    def _feature_row(self, key: int | str | os.PathLike) -> tuple:
        if isinstance(key, int | np.integer):
            rows = self._q(f"{FEATURE_SELECT_SQL} WHERE i.id = ?", (int(key),))
        else:
            rows = self._q(f"{FEATURE_SELECT_SQL} WHERE i.path = ?", (self.norm_path(key),))
            if not rows and self._resolved(key) is not None:
                rows = self._q(f"{FEATURE_SELECT_SQL} WHERE i.path = ?", (self._resolved(key),))
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
            return self._features_from_row(self._feature_row(key))
        except FileNotFoundError:
            # A concurrent writer compacted the chunk away after we read the row: re-read.
            return self._features_from_row(self._feature_row(key))

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
            rows = self._q(f"{FEATURE_SELECT_SQL} WHERE i.status = 'ok' ORDER BY i.id")
            order = [r[0] for r in rows]
        else:
            order = [int(i) for i in ids]
            rows = self._feature_rows(order)
        by_id = {r[0]: r[1:] for r in rows}
        for i in order:
            row = by_id.get(i)
            if row is None:
                raise KeyError(f"image {i!r} is not in the index")
            try:
                feats = self._features_from_row(row)
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
            rows = self._q(f"{FEATURE_SELECT_SQL} WHERE i.status = 'ok' ORDER BY i.id")
        else:
            ids = [int(i) for i in ids]
            by_id = {r[0]: r for r in self._feature_rows(ids)}
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
        for k, (
            _id,
            path,
            _st,
            n,
            _cid,
            off,
            _w,
            _h,
            _kind,
            _dim,
            file,
            n_rows,
            scale,
        ) in enumerate(rows):
            if not n:
                continue
            if file is None:
                raise IndexCorruptError(f"the feature chunk of {path} is not in the catalogue")
            try:
                desc = self._chunk(file, int(n_rows))["desc"][off : off + n]
            except FileNotFoundError:  # compacted away meanwhile: take the fresh row
                desc = self.get_features(int(_id)).descriptors
                scale = 1.0
            np.multiply(desc, np.float32(scale), out=X[indptr[k] : indptr[k + 1]])
        return X, indptr

    # ------------------------------------------------------------------ writes

    def _write_chunk(
        self, feats: Sequence[Features | PackedFeatures]
    ) -> tuple[str, int, str, float] | None:
        """:func:`engine.index.chunks.write_chunk` into this index's ``features`` folder."""
        return write_chunk(self.index_dir / "features", feats)

    def write_batch(
        self,
        ok: Iterable[tuple[str, int, int, str | None, Features | PackedFeatures]] = (),
        failed: Iterable[tuple[str, int, int, str | None, str]] = (),
        touched: Iterable[tuple[str, int, int]] = (),
        *,
        fkey: str | None = None,
    ) -> None:
        """Record one batch of results atomically.

        Parameters
        ----------
        ok : iterable of (path, size, mtime_ns, content_hash, Features or PackedFeatures)
            Indexed images; their features go into ONE new chunk file, written and
            renamed into place before the catalogue transaction commits.
        failed : iterable of (path, size, mtime_ns, content_hash or None, reason)
            Files that could not be indexed (old features of the path are dropped).
        touched : iterable of (path, size, mtime_ns)
            Files whose stat changed but whose content hash did not: stat updated only.
        fkey : str, optional
            Key of the feature-extraction settings used for ``ok`` and ``failed`` (see
            :meth:`feature_keys`); lets an interrupted re-extraction resume.

        Rows are upserted by path (an existing path keeps its id). The whole batch is
        one SQLite transaction: after a crash either all of it or none of it is visible.
        """
        self._require_writer()
        ok = list(ok)
        failed = list(failed)
        touched = list(touched)
        now = time.time()
        with self._mutex:
            chunk = self._write_chunk([f for *_, f in ok])
            try:
                self._begin()
                chunk_id = None if chunk is None else insert_chunk(self._conn, chunk, now)
                offset = 0
                ok_rows = []
                for path, size, mtime_ns, chash, f in ok:
                    n = len(f)
                    ok_rows.append(
                        (self.norm_path(path), int(size), int(mtime_ns), chash, n,
                         chunk_id if n else None, offset if n else 0,
                         int(f.image_size[0]), int(f.image_size[1]), str(f.kind),
                         descriptor_dim(f), fkey, now)
                    )  # fmt: skip
                    offset += n
                self._conn.executemany(UPSERT_OK_SQL, ok_rows)
                self._conn.executemany(
                    UPSERT_FAILED_SQL,
                    [
                        (self.norm_path(p), int(s), int(m), h, str(reason), fkey, now)
                        for p, s, m, h, reason in failed
                    ],
                )
                self._conn.executemany(
                    TOUCH_SQL, [(int(s), int(m), self.norm_path(p)) for p, s, m in touched]
                )
                self._commit()
            except BaseException:
                self._rollback()
                if chunk is not None:
                    unlink(os.fspath(self.index_dir / "features" / chunk[0]))
                raise

    def remove(self, paths: Iterable[str | os.PathLike]) -> int:
        """Delete the rows of ``paths`` in one transaction; returns the number deleted.

        Their features become dead rows in their chunks (reclaimed by :meth:`compact`).
        """
        self._require_writer()
        keys = [(self.norm_path(p),) for p in paths]
        if not keys:
            return 0
        with self._mutex:
            try:
                self._begin()
                before = self._conn.total_changes
                self._conn.executemany("DELETE FROM images WHERE path = ?", keys)
                n = self._conn.total_changes - before
                self._commit()
            except BaseException:
                self._rollback()
                raise
        return n

    def _chunk_usage(self) -> list[tuple[int, str, int, int]]:
        """``(chunk id, file, n_rows, live rows)`` of every chunk."""
        return self._q(CHUNK_USAGE_SQL)

    def compact(self, *, force: bool = False, min_dead_rows: int = 20_000) -> bool:
        """Rewrite chunks whose rows are mostly dead (deleted or re-indexed images).

        Runs when dead rows outnumber live ones overall and exceed ``min_dead_rows``
        (or always with ``force``). Live features of every chunk that is less than half
        alive are copied into new chunks; the pointers switch in one transaction, then
        the old files are deleted. Returns whether anything was rewritten.
        """
        self._require_writer()
        with self._mutex:
            usage = self._chunk_usage()
            total = sum(u[2] for u in usage)
            live = sum(u[3] for u in usage)
            dead = total - live
            if not force and (dead <= live or dead < min_dead_rows):
                return False
            victims = [u for u in usage if u[3] * 2 < u[2] or (force and u[3] < u[2])]
            if not victims:
                return False
            victim_ids = [u[0] for u in victims]
            marks = ",".join("?" * len(victim_ids))
            rows = self._q(
                f"SELECT id FROM images WHERE status = 'ok' AND feature_chunk IN ({marks}) "
                "ORDER BY id",
                victim_ids,
            )
            live_ids = [r[0] for r in rows]
            group = 256
            new_chunks = []
            for start in range(0, len(live_ids), group):
                ids = live_ids[start : start + group]
                feats = [self.get_features(i) for i in ids]
                new_chunks.append((ids, feats, self._write_chunk(feats)))
            now = time.time()
            try:
                self._begin()
                for ids, feats, chunk in new_chunks:
                    cid = insert_chunk(self._conn, chunk, now)
                    offs = np.concatenate([[0], np.cumsum([len(f) for f in feats])[:-1]])
                    self._conn.executemany(
                        "UPDATE images SET feature_chunk = ?, feature_offset = ? WHERE id = ?",
                        [(cid, int(o), int(i)) for i, o in zip(ids, offs, strict=True)],
                    )
                self._conn.executemany(
                    "DELETE FROM chunks WHERE id = ?", [(c,) for c in victim_ids]
                )
                self._commit()
            except BaseException:
                self._rollback()
                raise
            self._chunks.clear()
        self.gc()
        return True

    def gc(self) -> int:
        """Delete orphans: temp files, chunk files the catalogue does not reference,
        chunk rows with no live image, and state npz files no JSON names.

        Only files whose names match the store's own patterns (chunk files, state array
        files, temporary files) are ever deleted, and only inside a marked index folder.

        Runs automatically when a writer opens the store. Returns files removed.
        """
        self._require_writer()
        removed = 0
        with self._mutex:
            usage = self._chunk_usage()
            dead_ids = [u[0] for u in usage if u[3] == 0]
            if dead_ids:
                try:
                    self._begin()
                    self._conn.executemany(
                        "DELETE FROM chunks WHERE id = ?", [(c,) for c in dead_ids]
                    )
                    self._commit()
                except BaseException:
                    self._rollback()
                    raise
            if read_marker(self.index_dir) is None:  # never clean an unmarked folder
                return removed
            referenced = {r[0] for r in self._q("SELECT file FROM chunks")}
            feat_dir = self.index_dir / "features"
            for entry in os.scandir(feat_dir):
                name = entry.name
                ours = CHUNK_RE.match(name) or TMP_RE.match(name)
                if ours and name not in referenced and entry.is_file(follow_symlinks=False):
                    removed += unlink(entry.path)
            for entry in os.scandir(self.index_dir / "arrays"):
                if TMP_RE.match(entry.name) and entry.is_file(follow_symlinks=False):
                    removed += unlink(entry.path)
            states = self.index_dir / "states"
            named = set()
            for entry in os.scandir(states):
                if entry.name.endswith(".json"):
                    named.update(_states.state_files(Path(entry.path)))
            for entry in os.scandir(states):
                name = entry.name
                orphan = STATE_NPZ_RE.match(name) and name not in named
                if (orphan or TMP_RE.match(name)) and entry.is_file(follow_symlinks=False):
                    removed += unlink(entry.path)
        return removed

    # ------------------------------------------------------------------ settings / kv

    def get_setting(self, key: str, default: Any = None) -> Any:
        """JSON-decoded setting ``key`` or ``default``."""
        rows = self._q("SELECT value FROM settings WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def set_setting(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable ``value`` under ``key`` (one transaction)."""
        self._require_writer()
        text = json.dumps(value, sort_keys=True)
        self._write_sql(
            "INSERT INTO settings(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, text),
        )

    def get_kv(self, key: str, default: bytes | None = None) -> bytes | None:
        """Raw value of ``key`` in the generic key-value table, or ``default``."""
        if key == "generation":
            raise KeyError("'generation' is reserved; use IndexStore.generation")
        rows = self._q("SELECT value FROM kv WHERE key = ?", (key,))
        if not rows:
            return default
        value = rows[0][0]
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)

    def set_kv(self, key: str, value: bytes | str) -> None:
        """Store small metadata ``value`` (bytes, or str stored as UTF-8) under ``key``."""
        self._require_writer()
        if key == "generation":
            raise KeyError("'generation' is reserved")
        blob = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        self._write_sql(
            "INSERT INTO kv(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, blob),
        )

    def _write_sql(self, sql: str, params: Sequence[Any]) -> None:
        with self._mutex:
            try:
                self._begin()
                self._conn.execute(sql, params)
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def save_array(self, name: str, arr: np.ndarray) -> None:
        """Atomically save ``arr`` (no object dtype) as ``arrays/<name>.npy``."""
        self._require_writer()
        _states.save_array(self.index_dir / "arrays", name, arr)

    def load_array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        """Load array ``name`` (read-only memory map by default). ``KeyError`` if absent."""
        return _states.load_array(self.index_dir / "arrays", name, mmap=mmap)

    def has_array(self, name: str) -> bool:
        """Whether array ``name`` exists."""
        return (self.index_dir / "arrays" / f"{check_name(name)}.npy").is_file()

    def delete_array(self, name: str) -> None:
        """Delete array ``name`` if present."""
        self._require_writer()
        unlink(os.fspath(self.index_dir / "arrays" / f"{check_name(name)}.npy"))

    # ------------------------------------------------------------------ model states

    def save_state(self, name: str, state: dict[str, Any], *, parts: Sequence[str] = ()) -> None:
        """Atomically save a model state (``to_state()`` dict).

        Scalars (int, float, str, bool, None) go to ``states/<name>.json``; arrays to
        ``states/<name>.<token>.npz`` (``np.savez``, no pickle). The JSON, written last
        and renamed into place, names its npz, so readers see the old or the new pair.

        ``parts``: files of more arrays of this state, written before by
        :meth:`write_state_part` (e.g. while the rest was still being computed); the JSON
        names them too and :meth:`load_state` merges them in.
        """
        self._require_writer()
        _states.save_state(self.index_dir / "states", name, state, parts)

    def write_state_part(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        """Write (and sync) arrays of a state that :meth:`save_state` will name in
        ``parts``; returns the file's name. Until then no state refers to it: a run that
        stops before leaves a file that :meth:`gc` deletes."""
        self._require_writer()
        return _states.write_state_part(self.index_dir / "states", name, arrays)

    def load_state(self, name: str) -> dict[str, Any]:
        """Load a state saved by :meth:`save_state`. ``KeyError`` if absent."""
        return _states.load_state(self.index_dir / "states", name)

    def has_state(self, name: str) -> bool:
        """Whether state ``name`` exists."""
        return (self.index_dir / "states" / f"{check_name(name)}.json").is_file()

    def delete_state(self, name: str) -> None:
        """Delete state ``name`` (JSON first, then its npz) if present."""
        self._require_writer()
        _states.delete_state(self.index_dir / "states", name)
