"""Persistent, crash-safe collection index: SQLite catalogue + memory-mapped feature chunks.

Layout of an index directory::

    SIMILE-INDEX                    marker: {"format": "simile-index", ...}, written first;
                                    a folder without it is never used (or cleaned) as an index
    catalog.sqlite (+ -wal, -shm)   catalogue: images, chunks, settings, kv (WAL mode)
    lock                            writer lock (flock / msvcrt), holds the writer's pid
    features/c<id>-<token>.npy      append-only feature chunks, one per ingest batch, each
                                    with its checksum in the catalogue
    arrays/<name>.npy               named arrays (``save_array``)
    states/MANIFEST.json            model states (``save_states``): one manifest names the
    states/<name>.<token>.npz       scalars and the immutable array files of every state
                                    of ONE consistent version (:mod:`engine.index.manifest`)

Crash safety rests on one ordering rule: every file is written to a temporary name in
the same directory, flushed, fsynced and atomically renamed into place BEFORE the SQLite
transaction, or the manifest, that references it commits. A crash (or a full disk) at
any moment therefore leaves either an unreferenced file (an orphan, deleted on the next
writer open by :meth:`IndexStore.gc`) or a committed catalogue and manifest whose every
reference points at a complete file: the previous version stays whole and usable.
States that must agree (the search models and data) are committed together
(:meth:`IndexStore.save_states`) and read from one version (:meth:`IndexStore.load_states`);
the manifest names the catalogue they were made from (``kv['catalog.id']``), so search
data is never paired with photos it was not made from. Nothing is ever loaded with
pickle. A damaged or missing file is an :class:`IndexCorruptError`, one line naming it,
mended by :func:`engine.index.repair.repair_index` (``simile index --repair``). An index
on read-only media opens read-only (:func:`engine.index.catalog.connect`).

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
files and path codecs (:mod:`engine.index.files`), named arrays and state files
(:mod:`engine.index.states`), the versions of the states (:mod:`engine.index.manifest`)
and the errors (:mod:`engine.index.store_errors`).
:class:`IndexStore` ties them together; the names below stay importable from here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index import manifest as _manifest
from engine.index import states as _states
from engine.index.catalog import (
    CATALOG_ID_KEY,
    CATALOG_NAME,
    CHUNK_TOTALS_SQL,
    CHUNK_USAGE_SQL,
    DEAD_CHUNKS_SQL,
    DUPLICATES_SQL,
    IMAGE_COLS,
    INDEX_DIRNAME,
    MARKER_NAME,
    SCHEMA_VERSION,
    TOUCH_SQL,
    UPSERT_FAILED_SQL,
    UPSERT_OK_SQL,
    ImageRecord,
    catalog_info,
    has_index_content,
    insert_chunk,
    open_reader,
    open_writer,
    read_marker,
    row_keys,
    signed_keys,
)
from engine.index.chunks import ChunkCache, PackedFeatures, descriptor_dim, write_chunk
from engine.index.feature_reads import FeatureReads
from engine.index.files import (
    CHUNK_RE,
    TMP_RE,
    check_name,
    db_path,
    display_path,
    file_digest,
    norm_path,
    py_path,
    resolved_path,
    unlink,
)
from engine.index.lock import WriterLock
from engine.index.manifest import Snapshot, StateVersions
from engine.index.metadata_rows import (
    delete_by_path,
    write_by_path,
)
from engine.index.store_errors import (
    IndexCorruptError,
    IndexFormatError,
    IndexLockedError,
    IndexNotFoundError,
    IndexVersionError,
    ReadOnlyIndexError,
    StoreError,
)
from engine.index.store_parts import StoreRows, StoreStates, UsableRows
from engine.io.metadata import PhotoMetadata

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
    "Snapshot",
    "StoreError",
    "UsableRows",
    "display_path",
    "row_keys",
]


class IndexStore(StoreStates, StoreRows):
    """An index directory: catalogue, feature chunks, named arrays and model states.

    Use :meth:`open`. A writable store holds the writer lock until :meth:`close`;
    read-only stores never lock and see committed snapshots (SQLite WAL, the states'
    manifest), so readers may run while one writer updates the index.

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
        self._verified: set[str] = set()  # chunk files whose checksum held
        self._has_metadata = False  # (schema 3: a writer may migrate while a reader reads)
        self._closed = False
        #: The catalogue's random identity (None: a catalogue written before it had one).
        self.catalog_id, self._checksums = catalog_info(conn)
        #: states held back by :meth:`hold_states` (name -> state), committed with the next
        #: :meth:`save_states` of other states; None when nothing is held back
        self._held: dict[str, dict[str, Any]] | None = None
        self._held_names: frozenset[str] = frozenset()
        self._states = StateVersions(
            index_dir / "states", self.catalog_id, self._mutex, self._current_catalog_id
        )
        self._reads = FeatureReads(index_dir, self._q, self._chunk)
        #: what holds files of the index open beyond a call (:meth:`close_with`)
        self._closables: weakref.WeakSet[Any] = weakref.WeakSet()

    def close_with(self, obj: Any) -> None:
        """Close ``obj`` (anything with a ``close()``, e.g. memory-mapped search data,
        :class:`engine.index.mapped.MappedSegments`) when this store is closed: nothing of
        the index stays open once it is (an unmount, a folder the person deletes)."""
        with self._mutex:
            self._closables.add(obj)

    def _current_catalog_id(self) -> str | None:
        """The catalogue's identity read again (a writer may have migrated it since)."""
        with self._mutex:
            return catalog_info(self._conn)[0]

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(
        cls,
        index_dir: str | os.PathLike,
        *,
        create: bool = True,
        readonly: bool = False,
        repair: bool = False,
        check_pages: bool = True,
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
            Works while another process writes, and on read-only media.
        repair : bool
            (Writers) accept a damaged marker and a missing catalogue
            (:func:`engine.index.repair.repair_index` calls it so).
        check_pages : bool
            (Writers) check every page of the catalogue
            (:func:`engine.index.catalog.check_pages`), then delete orphans
            (:meth:`gc`). An update of a few named photos skips both (about 60 ms at
            100,000 photos): it reads only their rows (SQLite reports damage in the pages
            it reads), and nothing is deleted on the word of a catalogue not checked.

        Raises
        ------
        IndexNotFoundError
            No catalogue and ``create`` is false or ``readonly`` is true.
        IndexLockedError
            ``readonly=False`` and another process holds the writer lock.
        IndexCorruptError, IndexFormatError, IndexVersionError
            Damaged (or missing: the folder holds states or chunks but no catalogue),
            foreign, or newer-schema catalogue.
        """
        index_dir = Path(os.path.abspath(os.fspath(index_dir)))
        catalog = index_dir / CATALOG_NAME
        if not catalog.is_file():
            if has_index_content(index_dir) and (readonly or not repair):
                raise IndexCorruptError(
                    f"the catalogue of the index {index_dir} is missing ({CATALOG_NAME})",
                    path=catalog,
                )
            if readonly or not create:
                raise IndexNotFoundError(f"no simile index in {index_dir}")
        if readonly:
            return cls(index_dir, open_reader(catalog), True, None)
        states = index_dir / "states"

        def disown(catalog_id: str) -> None:  # a new catalogue: older states are not its
            base = _manifest.read_snapshot(states)
            if base.legacy and (base.entries or base.damaged):
                _manifest.commit(states, base, {}, None)  # made from an unknown catalogue

        conn, lock = open_writer(
            index_dir, catalog, repair=repair, before_create=disown, check_pages=check_pages
        )
        store = cls(index_dir, conn, False, lock)
        try:
            store.adopt_legacy_states()
            if check_pages:  # (orphans are judged by a checked catalogue only)
                store.gc()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Close the catalogue, drop cached memory maps and release the writer lock."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._chunks.clear()
            for obj in list(self._closables):
                obj.close()
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

    @contextmanager
    def _sql_errors(self) -> Iterator[None]:
        """Raise SQLite's "malformed" errors (SQLITE_CORRUPT / NOTADB: a plain
        ``sqlite3.DatabaseError``) as :class:`IndexCorruptError` naming the catalogue."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if type(exc) is sqlite3.DatabaseError:
                raise IndexCorruptError(
                    f"the catalogue of the index {self.index_dir} is damaged "
                    f"({CATALOG_NAME}: {exc})",
                    path=self.index_dir / CATALOG_NAME,
                ) from exc
            raise

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._mutex:
            if self._closed:
                raise StoreError("the index store is closed")
            with self._sql_errors():
                return self._conn.execute(sql, params).fetchall()

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

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (committed with the generation bumped, or rolled back)."""
        with self._mutex, self._sql_errors():
            try:
                self._begin()
                yield self._conn
                self._commit()
            except BaseException:
                self._rollback()
                raise

    @property
    def generation(self) -> int:
        """Counter bumped by every committed catalogue write (for cache invalidation)."""
        rows = self._q("SELECT value FROM kv WHERE key = 'generation'")
        if not rows:
            raise IndexCorruptError(
                f"the catalogue of the index {self.index_dir} is damaged "
                f"({CATALOG_NAME}: its generation row is missing)",
                path=self.index_dir / CATALOG_NAME,
            )
        return int(rows[0][0])

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

    def known_stats(
        self, paths: Iterable[str] | None = None, *, under: str | None = None
    ) -> dict[str, tuple[int, int]]:
        """``path -> (size, mtime_ns)`` for every row, ok and failed (input of scan); with
        ``paths``, of those rows only, and with ``under``, of the rows below that folder
        (looked up through the path index: costs what they hold)."""
        if under is not None:
            # two ranges of the path index: the names stored as text, and those stored as
            # bytes (not UTF-8, :func:`db_path`; all of them when ``under`` is one)
            sql = "SELECT path, size, mtime_ns FROM images WHERE path >= ? AND path < ?"
            sep = os.fsencode(os.sep)
            lo_b = os.fsencode(under).rstrip(sep) + sep
            rows = self._q(sql, (lo_b, lo_b[:-1] + bytes([sep[0] + 1])))
            if isinstance(db_path(under), str):
                lo = under.rstrip(os.sep) + os.sep
                rows += self._q(sql, (lo, lo[:-1] + chr(ord(os.sep) + 1)))
            return {py_path(p): (s, m) for p, s, m in rows}
        if paths is None:
            rows = self._q("SELECT path, size, mtime_ns FROM images")
            return {py_path(p): (s, m) for p, s, m in rows}
        keys = [self.norm_path(p) for p in paths]
        out: dict[str, tuple[int, int]] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            sql = f"SELECT path, size, mtime_ns FROM images WHERE path IN ({marks})"
            out.update({py_path(p): (s, m) for p, s, m in self._q(sql, part)})
        return out

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
        """Rows of chunk ``file``, memory-mapped (:class:`engine.index.chunks.ChunkCache`);
        a file whose header cannot be parsed at all is a damaged chunk too. The first read
        of a chunk in this store checks its checksum (lazily: chunks nobody reads cost
        nothing; those this store wrote are known good)."""
        with self._mutex:
            try:
                if file not in self._verified:
                    self._verify_chunk(file)
                return self._chunks.get(file, n_rows)
            except (FileNotFoundError, StoreError):
                raise
            except Exception as exc:  # (numpy's header parser: SyntaxError, TokenError)
                raise IndexCorruptError(
                    f"the stored features of the index {self.index_dir} are damaged "
                    f"(features/{file}: {type(exc).__name__})",
                    path=self.index_dir / "features" / file,
                ) from exc

    def _verify_chunk(self, file: str) -> None:
        """Compare chunk ``file`` with its recorded checksum (none: a chunk written before
        checksums, recorded by the repair). ``FileNotFoundError`` when it is gone."""
        rows = self._checksums and self._q("SELECT checksum FROM chunks WHERE file = ?", (file,))
        if rows and rows[0][0] and file_digest(self.index_dir / "features" / file) != rows[0][0]:
            raise IndexCorruptError(
                f"the stored features of the index {self.index_dir} are damaged "
                f"(features/{file}: checksum mismatch)",
                path=self.index_dir / "features" / file,
            )
        self._verified.add(file)

    def get_features(self, key: int | str | os.PathLike) -> Features:
        """Stored features of image id or path ``key``
        (:meth:`engine.index.feature_reads.FeatureReads.get_features`)."""
        return self._reads.get_features(key)

    def iter_features(self, ids: Iterable[int] | None = None) -> Iterator[tuple[int, Features]]:
        """Yield ``(id, Features)`` for ``ids`` (default: every ok image, ascending id)
        (:meth:`engine.index.feature_reads.FeatureReads.iter_features`)."""
        return self._reads.iter_features(ids)

    def stacked_descriptors(
        self, ids: Iterable[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """All descriptors of ``ids`` stacked ``(N, D) float32``, with per-image offsets
        ``(n + 1,) int64`` (:meth:`~engine.index.feature_reads.FeatureReads.stacked_descriptors`
        of :class:`engine.index.feature_reads.FeatureReads`)."""
        return self._reads.stacked_descriptors(ids)

    # ------------------------------------------------------------------ writes

    def _write_chunk(
        self, feats: Sequence[Features | PackedFeatures]
    ) -> tuple[tuple[str, int, str, float], str] | None:
        """:func:`engine.index.chunks.write_chunk` into this index's ``features`` folder;
        the chunk and the checksum of its file (read back: what the disk holds)."""
        chunk = write_chunk(self.index_dir / "features", feats)
        if chunk is None:
            return None
        try:
            digest = file_digest(self.index_dir / "features" / chunk[0])
            self._verified.add(chunk[0])
            return chunk, digest
        except BaseException:
            unlink(os.fspath(self.index_dir / "features" / chunk[0]))
            raise

    def write_batch(
        self,
        ok: Iterable[tuple[str, int, int, str | None, Features | PackedFeatures]] = (),
        failed: Iterable[tuple[str, int, int, str | None, str]] = (),
        touched: Iterable[tuple[str, int, int]] = (),
        *,
        fkey: str | None = None,
        metadata: Mapping[str, PhotoMetadata] | None = None,
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
        metadata : mapping of str to PhotoMetadata, optional
            What the ``ok`` (or ``touched``) photos record about themselves, by path
            (:func:`engine.io.metadata.read_metadata`); replaces what was stored. A
            ``failed`` file's metadata is dropped.

        Rows are upserted by path (an existing path keeps its id). The whole batch is
        one SQLite transaction: after a crash either all of it or none of it is visible
        (a photo's metadata is never written without its row, or its row without it).
        """
        self._require_writer()
        ok = list(ok)
        failed = list(failed)
        touched = list(touched)
        now = time.time()
        with self._mutex, self._sql_errors():
            written = self._write_chunk([f for *_, f in ok])
            chunk = None if written is None else written[0]
            try:
                self._begin()
                chunk_id = None
                if chunk is not None:
                    chunk_id = insert_chunk(self._conn, chunk, now, written[1])
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
                # each row's key (images.row_key), which readers no longer compute
                keyed = [(r[0], r[3]) for r in ok] + [(r[0], r[3]) for r in failed]
                row_key = signed_keys((h, fkey) for _, h in keyed)
                self._conn.executemany(
                    "UPDATE images SET row_key = ? WHERE path = ?",
                    [(k, self.norm_path(w[0])) for k, w in zip(row_key, keyed, strict=True)],
                )
                if self._metadata_table():
                    keys = [self.norm_path(p) for p, *_ in failed]
                    delete_by_path(self._conn, keys)
                    write_by_path(self._conn, (metadata or {}).items(), self.norm_path)
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
        with self._transaction() as conn:
            if self._metadata_table():  # (first: the cascade would count in total_changes)
                delete_by_path(conn, [k for (k,) in keys])
            before = conn.total_changes
            conn.executemany("DELETE FROM images WHERE path = ?", keys)
            n = conn.total_changes - before
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
            if not force:  # the totals first: one pass over the catalogue, no grouping
                total, live = self._q(CHUNK_TOTALS_SQL)[0]
                if total - live <= live or total - live < min_dead_rows:
                    return False
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
            with self._transaction() as conn:
                for ids, feats, (chunk, digest) in new_chunks:
                    cid = insert_chunk(conn, chunk, now, digest)
                    offs = np.concatenate([[0], np.cumsum([len(f) for f in feats])[:-1]])
                    conn.executemany(
                        "UPDATE images SET feature_chunk = ?, feature_offset = ? WHERE id = ?",
                        [(cid, int(o), int(i)) for i, o in zip(ids, offs, strict=True)],
                    )
                conn.executemany("DELETE FROM chunks WHERE id = ?", [(c,) for c in victim_ids])
            self._chunks.clear()
        self.gc()
        return True

    def gc(self) -> int:
        """Delete orphans: temp files, chunk files the catalogue does not reference,
        chunk rows with no live image, and state files the manifest does not name
        (:func:`engine.index.manifest.collect`; nothing while it is unreadable).

        Only files whose names match the store's own patterns (chunk files, state array
        files, temporary files) are ever deleted, and only inside a marked index folder.

        Runs automatically when a writer opens the store. Returns files removed.
        """
        self._require_writer()
        removed = 0
        with self._mutex:
            dead_ids = [r[0] for r in self._q(DEAD_CHUNKS_SQL)]
            if dead_ids:
                with self._transaction() as conn:
                    conn.executemany("DELETE FROM chunks WHERE id = ?", [(c,) for c in dead_ids])
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
            removed += _manifest.collect(self.index_dir / "states")
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
        if key == "generation":  # (the catalogue's identity may be read: catalog.id)
            raise KeyError("'generation' is reserved; use IndexStore.generation")
        rows = self._q("SELECT value FROM kv WHERE key = ?", (key,))
        if not rows:
            return default
        value = rows[0][0]
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)

    def set_kv(self, key: str, value: bytes | str) -> None:
        """Store small metadata ``value`` (bytes, or str stored as UTF-8) under ``key``."""
        self._require_writer()
        if key in ("generation", CATALOG_ID_KEY):
            raise KeyError(f"{key!r} is reserved")
        blob = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        self._write_sql(
            "INSERT INTO kv(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, blob),
        )

    def _write_sql(self, sql: str, params: Sequence[Any]) -> None:
        with self._transaction() as conn:
            conn.execute(sql, params)

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
