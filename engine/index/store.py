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
raw bytes and turned back into the same ``str`` when read.

Descriptors are stored per chunk with the smallest faithful codec: ``u8`` (``round(255 x)``)
when every value lies in ``[0, 1]`` — true of (Root)SIFT, whose raw OpenCV values are
already integers in 0..255 before normalisation — giving 128 B per 128-D descriptor instead
of 512 B (float32); the quantisation error (≤ 1/510 per component, ≈ 0.013 in L2 over 128
dims) is far below typical RootSIFT nearest-neighbour distances (0.3–0.6). Other values
(e.g. zero-mean patches) use ``f16`` when they fit, else ``f32``. ``xy`` stays float32 (pixel
accuracy for geometric verification); ``scale``/``angle`` are float16 (0.1 % relative
precision is ample for both).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

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

SCHEMA_VERSION = 1
INDEX_DIRNAME = ".simile"
CATALOG_NAME = "catalog.sqlite"
LOCK_NAME = "lock"
#: Marker file of an index folder, written before anything else when it is created.
MARKER_NAME = "SIMILE-INDEX"
MARKER_FORMAT = "simile-index"
#: ``PRAGMA application_id`` of a simile catalogue ("SIML").
APPLICATION_ID = 0x53494D4C

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_TMP_SUFFIX = ".tmp"
# the names the store itself writes (the clean-up touches nothing else)
_TOKEN = r"[0-9a-f]{12}"
_TMP_RE = re.compile(rf"^\.[A-Za-z0-9_][A-Za-z0-9_.-]*\.{_TOKEN}\.tmp$")
_CHUNK_RE = re.compile(rf"^c\d{{13}}-{_TOKEN}\.npy$")
_STATE_NPZ_RE = re.compile(rf"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.{_TOKEN}\.npz$")
_MAX_OPEN_CHUNKS = 64
# feature reads of at most this many ids select them by id, more scan the catalogue once
# (SQLite allows 999 parameters in old builds)
_ROWS_BY_ID = 500

_SCHEMA = """
CREATE TABLE images (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    content_hash TEXT,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error TEXT,
    n_features INTEGER NOT NULL DEFAULT 0,
    feature_chunk INTEGER REFERENCES chunks(id),
    feature_offset INTEGER NOT NULL DEFAULT 0,
    width INTEGER NOT NULL DEFAULT 0,
    height INTEGER NOT NULL DEFAULT 0,
    kind TEXT,
    dim INTEGER NOT NULL DEFAULT 0,
    fkey TEXT,
    added_at REAL NOT NULL
);
CREATE INDEX images_status ON images(status);
CREATE INDEX images_chunk ON images(feature_chunk);
CREATE INDEX images_hash ON images(content_hash);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    file TEXT NOT NULL UNIQUE,
    n_rows INTEGER NOT NULL,
    desc_codec TEXT NOT NULL,
    desc_scale REAL NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB);
"""
_TABLES = {"images", "chunks", "settings", "kv"}
_IMAGE_COLS = (
    "id, path, size, mtime_ns, content_hash, status, error, n_features, width, height, kind, "
    "added_at"
)


class StoreError(Exception):
    """Base class of every index-store error."""


class IndexLockedError(StoreError):
    """Another process holds the writer lock of the index.

    Attributes
    ----------
    pid : int or None
        Process id written in the lock file by the holder, when readable.
    """

    def __init__(self, index_dir: os.PathLike | str, pid: int | None) -> None:
        self.index_dir = str(index_dir)
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"another simile process is updating this index ({who}): {self.index_dir}"
        )


class IndexNotFoundError(StoreError, FileNotFoundError):
    """The directory holds no index and ``create`` was false (or the store is read-only)."""


class IndexCorruptError(StoreError):
    """The catalogue cannot be read (damaged SQLite file or missing tables)."""


class IndexFormatError(StoreError):
    """The catalogue is a SQLite database but not one written by simile."""


class IndexVersionError(StoreError):
    """The index was written by a newer simile (schema version too high)."""


class ReadOnlyIndexError(StoreError):
    """A write was attempted on a store opened with ``readonly=True``."""


@dataclass(frozen=True)
class ImageRecord:
    """One catalogue row.

    ``status`` is ``"ok"`` (features stored, possibly zero of them) or ``"failed"``
    (``error`` holds the reason). ``width``/``height`` are the loaded image size the
    feature coordinates refer to; ``added_at`` is the unix time of the last (re)index.
    """

    id: int
    path: str
    size: int
    mtime_ns: int
    content_hash: str | None
    status: str
    error: str | None
    n_features: int
    width: int
    height: int
    kind: str | None
    added_at: float


# --------------------------------------------------------------------------- file helpers


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (no-op where directories cannot be opened)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}{_TMP_SUFFIX}")


def _atomic_write(final: Path, write: Any) -> None:
    """Write through ``write(fileobj)`` to a temp file, fsync, and rename onto ``final``."""
    tmp = _tmp_path(final)
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(final.parent)


def _state_arrays(state: Mapping[str, Any], scalars: dict[str, Any]) -> dict[str, np.ndarray]:
    """Split a state dict: its arrays are returned, its scalars put in ``scalars``."""
    arrays: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if not isinstance(key, str) or key.startswith("__"):
            raise ValueError(f"state key {key!r} must be a str not starting with '__'")
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise TypeError(f"state[{key!r}] has object dtype")
            arrays[key] = value
        elif isinstance(value, np.generic):
            scalars[key] = value.item()
        elif value is None or isinstance(value, bool | int | float | str):
            scalars[key] = value
        else:
            raise TypeError(
                f"state[{key!r}] is {type(value).__name__}; only arrays and "
                "int/float/str/bool/None scalars can be stored"
            )
    return arrays


def _db_path(path: str) -> str | bytes:
    """The catalogue form of a path: the ``str`` when it is valid UTF-8, else its raw
    bytes (``os.fsencode``), stored as a BLOB, so no file name can stop a folder."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return path


def _py_path(value: str | bytes) -> str:
    """Inverse of :func:`_db_path`: the same ``str`` the file system gave us."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


def display_path(path: str | os.PathLike) -> str:
    """``path`` for showing to a person: undecodable bytes of a file name become
    U+FFFD (the name stays exact everywhere else).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str
        Valid UTF-8 text.
    """
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _read_marker(index_dir: Path) -> dict | None:
    """The marker of ``index_dir`` (a dict), ``None`` when there is no marker file."""
    marker = index_dir / MARKER_NAME
    try:
        data = json.loads(marker.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(
            f"index marker {marker} is damaged ({exc}); rebuild with `simile index --repair`"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT:
        raise IndexFormatError(f"{marker} is not a simile index marker")
    return data


def _write_marker(index_dir: Path) -> None:
    payload = json.dumps(
        {"format": MARKER_FORMAT, "schema": SCHEMA_VERSION, "created": time.time()},
        sort_keys=True,
    ).encode("utf-8")
    _atomic_write(index_dir / MARKER_NAME, lambda fh: fh.write(payload))


def _check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise ValueError(
            f"{what} must match [A-Za-z0-9_][A-Za-z0-9_.-]* (max 128 chars), got {name!r}"
        )
    return name


# --------------------------------------------------------------------------- writer lock


class _WriterLock:
    """Exclusive, non-blocking, process-level lock on ``index_dir/lock``.

    POSIX uses ``fcntl.flock`` (released by the kernel when the process dies, even on
    ``kill -9``); Windows uses ``msvcrt.locking`` on byte 0 and writes the pid after it.

    A flock belongs to the open file, which a forked child shares: a child that unlocked
    it would unlock the parent, and one that outlived a killed parent would keep the
    index locked. Every forked child therefore closes its copy at once
    (``os.register_at_fork``), without unlocking; the parent keeps the lock.
    """

    _PID_OFFSET = 16
    _held: ClassVar[weakref.WeakSet[_WriterLock]] = weakref.WeakSet()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def _forget_in_child(cls) -> None:
        """After a fork, in the child: close inherited lock files without unlocking."""
        for lock in list(cls._held):
            fd, lock._fd = lock._fd, None
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._lock(fd)
        except OSError:
            pid = self._read_pid(fd)
            os.close(fd)
            raise IndexLockedError(self.path.parent, pid) from None
        self._fd = fd
        self._held.add(self)
        data = f"{os.getpid()}\n".encode()
        os.lseek(fd, self._PID_OFFSET, os.SEEK_SET)
        os.write(fd, data)
        os.ftruncate(fd, self._PID_OFFSET + len(data))

    def release(self) -> None:
        fd, self._fd = self._fd, None
        self._held.discard(self)
        if fd is None:
            return
        try:
            self._unlock(fd)
        except OSError:
            pass
        os.close(fd)

    @classmethod
    def _read_pid(cls, fd: int) -> int | None:
        try:
            os.lseek(fd, cls._PID_OFFSET, os.SEEK_SET)
            return int(os.read(fd, 32).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    if os.name == "nt":  # pragma: no cover - exercised on Windows only

        @staticmethod
        def _lock(fd: int) -> None:
            import msvcrt

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

        @staticmethod
        def _unlock(fd: int) -> None:
            import msvcrt

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    else:

        @staticmethod
        def _lock(fd: int) -> None:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

        @staticmethod
        def _unlock(fd: int) -> None:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_UN)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WriterLock._forget_in_child)


# --------------------------------------------------------------------------- codecs


_U8_SCALE = 1.0 / 255.0  # the 8-bit descriptor codec: value = code * scale


def _encode_descriptors(desc: np.ndarray) -> tuple[np.ndarray, str, float]:
    """Choose the chunk codec for stacked descriptors ``(N, D)``.

    Returns ``(encoded, codec, scale)`` with ``decoded = encoded.astype(float32) * scale``.
    """
    desc = np.asarray(desc, dtype=np.float32)
    if desc.size == 0:
        return desc.astype(np.uint8), "u8", _U8_SCALE
    lo, hi = float(desc.min()), float(desc.max())
    if lo >= 0.0 and hi <= 1.0:
        return np.rint(desc * 255.0).astype(np.uint8), "u8", _U8_SCALE
    if max(-lo, hi) <= float(np.finfo(np.float16).max):
        return desc.astype(np.float16), "f16", 1.0
    return desc, "f32", 1.0


@dataclass(frozen=True)
class PackedFeatures:
    """Local features whose descriptors are already in the store's 8-bit codec.

    What the extraction workers of :func:`engine.ingest.ingest` send back instead of
    :class:`engine.features.Features` when every descriptor value is in [0, 1] (the SIFT
    kinds): ``codes`` are ``rint(255 * value)``, exactly the bytes
    :meth:`IndexStore.write_batch` would store, so the index is the same, and a quarter
    of the descriptor bytes cross the process boundary (on UKBench ~50 instead of 173 KB
    a photo, little enough to fit a pipe's buffer, so a worker no longer waits for the
    indexing process to read its result).

    Attributes
    ----------
    codes : (M, D) uint8 ndarray
    xy, scale, angle, image_size, kind
        As in :class:`engine.features.Features`.
    """

    codes: np.ndarray
    xy: np.ndarray
    scale: np.ndarray | None
    angle: np.ndarray | None
    image_size: tuple[int, int]
    kind: str

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def descriptors(self) -> np.ndarray:
        """(M, D) float32, the values the store gives back (``codes / 255``)."""
        return self.codes.astype(np.float32) * np.float32(_U8_SCALE)

    @classmethod
    def pack(cls, feats: Features) -> PackedFeatures | Features:
        """``feats`` in the 8-bit codec, or ``feats`` itself when a value is outside [0, 1]."""
        codes, codec, _ = _encode_descriptors(feats.descriptors)
        if codec != "u8":
            return feats
        return cls(codes, feats.xy, feats.scale, feats.angle, feats.image_size, feats.kind)


def _chunk_dtype(dim: int, desc_dtype: np.dtype, has_scale: bool, has_angle: bool) -> np.dtype:
    fields: list[tuple] = [("desc", desc_dtype, (dim,)), ("xy", "<f4", (2,))]
    if has_scale:
        fields.append(("scale", "<f2"))
    if has_angle:
        fields.append(("angle", "<f2"))
    return np.dtype(fields)


def _dim(f: Features | PackedFeatures) -> int:
    """Descriptor length of features (0 for a malformed, not 2-D, array)."""
    desc = f.codes if isinstance(f, PackedFeatures) else f.descriptors
    return int(desc.shape[1]) if np.ndim(desc) == 2 else 0


# --------------------------------------------------------------------------- the store


class IndexStore:
    """An index directory: catalogue, feature chunks, named arrays and model states.

    Use :meth:`open`. A writable store holds the writer lock until :meth:`close`;
    read-only stores never lock and see committed snapshots (SQLite WAL), so readers
    may run while one writer updates the index.

    Thread safety: one store may be used from several threads (e.g. a GUI worker
    thread running an ingest); calls are serialised by an internal lock.
    """

    def __init__(self, index_dir: Path, conn: sqlite3.Connection, readonly: bool,
                 lock: _WriterLock | None) -> None:  # fmt: skip
        self.index_dir = index_dir
        self.readonly = readonly
        self._conn = conn
        self._lock = lock
        self._mutex = threading.RLock()
        self._chunks: OrderedDict[str, np.ndarray] = OrderedDict()
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
            conn = cls._connect(catalog, readonly=True)
            try:
                cls._check_schema(conn, catalog)
            except BaseException:
                conn.close()
                raise
            return cls(index_dir, conn, True, None)

        cls._claim(index_dir, catalog)
        lock = _WriterLock(index_dir / LOCK_NAME)
        lock.acquire()
        try:
            conn = cls._connect(catalog, readonly=False)
            try:
                if cls._is_empty(conn, catalog):
                    cls._init_schema(conn)
                else:
                    cls._check_schema(conn, catalog)
                for sub in ("features", "arrays", "states"):
                    (index_dir / sub).mkdir(exist_ok=True)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            lock.release()
            raise
        store = cls(index_dir, conn, False, lock)
        store.gc()
        return store

    @classmethod
    def _claim(cls, index_dir: Path, catalog: Path) -> None:
        """Make sure ``index_dir`` is a simile index folder before writing anything there.

        A new or empty folder gets the marker; a folder with the marker, or an index
        written before markers existed (a catalogue with simile's ``application_id``),
        is accepted (the latter gets its marker now). Any other non-empty folder is
        refused: it holds someone else's files, which the clean-up must never see.
        """
        index_dir.mkdir(parents=True, exist_ok=True)
        if _read_marker(index_dir) is not None:
            return
        try:
            with os.scandir(index_dir) as it:
                names = {e.name for e in it}
        except OSError as exc:
            raise StoreError(f"cannot read the index folder {index_dir}: {exc}") from exc
        own = {CATALOG_NAME, f"{CATALOG_NAME}-wal", f"{CATALOG_NAME}-shm", LOCK_NAME,
               "features", "arrays", "states"}  # fmt: skip
        if names and CATALOG_NAME in names and catalog.is_file():
            conn = cls._connect(catalog, readonly=True)
            try:
                cls._check_schema(conn, catalog)  # raises unless it is a simile catalogue
            except IndexNotFoundError:  # an older creation stopped before its first commit
                if not names <= own:
                    raise IndexFormatError(
                        f"{index_dir} is not a simile index and is not empty; refusing to "
                        "use it (choose a new or empty folder for the index)"
                    ) from None
            finally:
                conn.close()
        elif names - {LOCK_NAME}:
            raise IndexFormatError(
                f"{index_dir} is not a simile index and is not empty; refusing to use it "
                "(choose a new or empty folder for the index)"
            )
        _write_marker(index_dir)

    @staticmethod
    def _connect(catalog: Path, *, readonly: bool) -> sqlite3.Connection:
        try:
            if readonly:
                uri = catalog.as_uri() + "?mode=ro"
                conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
            else:
                conn = sqlite3.connect(
                    os.fspath(catalog), check_same_thread=False, timeout=30, isolation_level=None
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            if readonly:
                conn.isolation_level = None
        except sqlite3.DatabaseError as exc:
            raise IndexCorruptError(f"cannot open index catalogue {catalog}: {exc}") from exc
        return conn

    @staticmethod
    def _is_empty(conn: sqlite3.Connection, catalog: Path) -> bool:
        try:
            n = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise IndexCorruptError(f"index catalogue {catalog} is damaged: {exc}") from exc
        return n == 0

    @staticmethod
    def _init_schema(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("INSERT INTO kv(key, value) VALUES ('generation', 0)")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _check_schema(conn: sqlite3.Connection, catalog: Path) -> None:
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as exc:
            raise IndexCorruptError(f"index catalogue {catalog} is damaged: {exc}") from exc
        if app_id == 0 and not tables:  # creation was interrupted before its first commit
            raise IndexNotFoundError(f"the index in {catalog.parent} is empty")
        if app_id != APPLICATION_ID:
            raise IndexFormatError(f"{catalog} is a SQLite database but not a simile index")
        if version > SCHEMA_VERSION:
            raise IndexVersionError(
                f"index {catalog.parent} has schema version {version}, newer than this "
                f"simile supports ({SCHEMA_VERSION}); upgrade simile or rebuild the index"
            )
        if version < 1 or not _TABLES <= tables:
            raise IndexCorruptError(
                f"index catalogue {catalog} is damaged: missing tables "
                f"{sorted(_TABLES - tables)} (schema version {version})"
            )

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

    # ------------------------------------------------------------------ internals

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

    @staticmethod
    def _resolved(path: str | os.PathLike) -> str | bytes | None:
        """``realpath(path)`` (catalogue form) when it differs from ``path``: lookups fall
        back to it, since indexes written before links were kept as links hold resolved
        paths. ``None`` when it does not differ."""
        raw = os.fspath(path)
        real = os.path.realpath(raw)
        return _db_path(real) if real != raw else None

    @staticmethod
    def _norm_path(path: str | os.PathLike) -> str | bytes:
        """The catalogue form of ``path`` (see :func:`_db_path`)."""
        text = path if isinstance(path, str) else os.fspath(Path(os.fsdecode(path)))
        return _db_path(text)

    # ------------------------------------------------------------------ catalogue reads

    def records(self, status: str | None = "ok") -> list[ImageRecord]:
        """All catalogue rows with ``status`` (``None``: every row), ascending id."""
        if status is None:
            rows = self._q(f"SELECT {_IMAGE_COLS} FROM images ORDER BY id")
        else:
            rows = self._q(
                f"SELECT {_IMAGE_COLS} FROM images WHERE status = ? ORDER BY id", (status,)
            )
        return [ImageRecord(r[0], _py_path(r[1]), *r[2:]) for r in rows]

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
        return [_py_path(r[0]) for r in rows]

    def record(self, key: int | str | os.PathLike) -> ImageRecord | None:
        """The row of image id ``key`` (int) or path ``key``; ``None`` when unknown.

        A path is looked up as given, then symlink-resolved (the catalogue stores the
        resolved absolute paths produced by :func:`engine.scan.scan_folder`).
        """
        if isinstance(key, int | np.integer):
            rows = self._q(f"SELECT {_IMAGE_COLS} FROM images WHERE id = ?", (int(key),))
        else:
            rows = self._q(
                f"SELECT {_IMAGE_COLS} FROM images WHERE path = ?", (self._norm_path(key),)
            )
            if not rows and self._resolved(key) is not None:
                rows = self._q(
                    f"SELECT {_IMAGE_COLS} FROM images WHERE path = ?", (self._resolved(key),)
                )
        if not rows:
            return None
        r = rows[0]
        return ImageRecord(r[0], _py_path(r[1]), *r[2:])

    def id_of(self, path: str | os.PathLike) -> int | None:
        """Image id of ``path`` or ``None``."""
        rows = self._q("SELECT id FROM images WHERE path = ?", (self._norm_path(path),))
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
        return [(_py_path(p), e or "unknown error") for p, e in rows]

    def known_stats(self) -> dict[str, tuple[int, int]]:
        """``path -> (size, mtime_ns)`` for every row, ok and failed (input of scan)."""
        rows = self._q("SELECT path, size, mtime_ns FROM images")
        return {_py_path(p): (s, m) for p, s, m in rows}

    def known_hashes(self) -> dict[str, str]:
        """``path -> content hash`` for every row that has one."""
        rows = self._q("SELECT path, content_hash FROM images WHERE content_hash IS NOT NULL")
        return {_py_path(p): h for p, h in rows}

    def feature_keys(self) -> dict[str, str | None]:
        """``path -> fkey`` (feature-settings key given to :meth:`write_batch`), every row."""
        return {_py_path(p): k for p, k in self._q("SELECT path, fkey FROM images")}

    def duplicate_files(self) -> list[list[str]]:
        """Groups (≥ 2) of usable images with byte-identical content, by content hash."""
        rows = self._q(
            "SELECT content_hash, path FROM images WHERE status = 'ok' AND content_hash IN "
            "(SELECT content_hash FROM images WHERE status = 'ok' AND content_hash IS NOT NULL "
            "GROUP BY content_hash HAVING count(*) > 1) ORDER BY content_hash, id"
        )
        groups: dict[str, list[str]] = {}
        for h, p in rows:
            groups.setdefault(h, []).append(_py_path(p))
        return list(groups.values())

    # ------------------------------------------------------------------ features

    def _chunk(self, file: str, n_rows: int) -> np.ndarray:
        """Memory-mapped structured array of chunk ``file`` (LRU cache keyed by file name,
        which is unique forever, so a cached map can never alias a newer chunk)."""
        with self._mutex:
            hit = self._chunks.get(file)
            if hit is not None:
                self._chunks.move_to_end(file)
                return hit
            path = self.index_dir / "features" / file
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise
            except (OSError, ValueError) as exc:
                raise IndexCorruptError(f"feature chunk {path} is damaged: {exc}") from exc
            if arr.ndim != 1 or arr.shape[0] != n_rows or arr.dtype.names is None:
                raise IndexCorruptError(
                    f"feature chunk {path} is damaged: shape {arr.shape}, expected ({n_rows},)"
                )
            # a plain array over the same mapping (which it keeps open): slicing a
            # np.memmap runs Python code for every view (~0.1 s per 500 images read)
            arr = arr.view(np.ndarray)
            self._chunks[file] = arr
            while len(self._chunks) > _MAX_OPEN_CHUNKS:
                self._chunks.popitem(last=False)
            return arr

    def _features_from_row(self, row: tuple) -> Features:
        from engine.features.keypoints import Features

        path, status, n, chunk_id, offset, width, height, kind, dim, file, n_rows, scale = row
        path = display_path(_py_path(path))
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
        rec = arr[offset : offset + n]
        desc = rec["desc"].astype(np.float32)
        if scale != 1.0:
            desc *= np.float32(scale)
        names = arr.dtype.names
        return Features(
            descriptors=desc,
            xy=np.ascontiguousarray(rec["xy"], dtype=np.float32),
            scale=rec["scale"].astype(np.float32) if "scale" in names else None,
            angle=rec["angle"].astype(np.float32) if "angle" in names else None,
            image_size=(int(width), int(height)),
            kind=kind,
        )

    _FEAT_SELECT = (
        "SELECT i.id, i.path, i.status, i.n_features, i.feature_chunk, i.feature_offset, "
        "i.width, i.height, i.kind, i.dim, c.file, c.n_rows, c.desc_scale "
        "FROM images i LEFT JOIN chunks c ON c.id = i.feature_chunk"
    )

    def _feature_rows(self, ids: list[int]) -> list[tuple]:
        """:data:`_FEAT_SELECT` rows of ``ids`` (any order; unknown ids have none): by id
        for a batch, one scan of the catalogue for many (an encoding batch of a large
        collection then reads its 64 rows, not every row)."""
        if len(ids) > _ROWS_BY_ID:
            return self._q(self._FEAT_SELECT)
        marks = ",".join("?" * len(ids))
        return self._q(f"{self._FEAT_SELECT} WHERE i.id IN ({marks})", tuple(ids))

    def _feature_row(self, key: int | str | os.PathLike) -> tuple:
        if isinstance(key, int | np.integer):
            rows = self._q(f"{self._FEAT_SELECT} WHERE i.id = ?", (int(key),))
        else:
            rows = self._q(f"{self._FEAT_SELECT} WHERE i.path = ?", (self._norm_path(key),))
            if not rows and self._resolved(key) is not None:
                rows = self._q(f"{self._FEAT_SELECT} WHERE i.path = ?", (self._resolved(key),))
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
            rows = self._q(f"{self._FEAT_SELECT} WHERE i.status = 'ok' ORDER BY i.id")
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
            rows = self._q(f"{self._FEAT_SELECT} WHERE i.status = 'ok' ORDER BY i.id")
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
        """Write the non-empty ``feats`` as one chunk file; returns (file, rows, codec, scale).

        Packed features keep their codes when all of the chunk's are packed; next to
        features outside [0, 1] (no SIFT kind is) the chunk is encoded from their values.
        """
        nonempty = [f for f in feats if len(f)]
        if not nonempty:
            return None
        dims = {_dim(f) for f in nonempty}
        if len(dims) != 1:
            raise ValueError(f"features of one batch have mixed descriptor sizes {sorted(dims)}")
        dim = dims.pop()
        has_scale = all(f.scale is not None for f in nonempty)
        has_angle = all(f.angle is not None for f in nonempty)
        if all(isinstance(f, PackedFeatures) for f in nonempty):
            enc, codec, scale = np.concatenate([f.codes for f in nonempty]), "u8", _U8_SCALE
        else:
            enc, codec, scale = _encode_descriptors(
                np.concatenate([f.descriptors for f in nonempty])
            )
        dtype = _chunk_dtype(dim, enc.dtype, has_scale, has_angle)
        rec = np.empty(len(enc), dtype=dtype)
        rec["desc"] = enc
        rec["xy"] = np.concatenate([np.asarray(f.xy, np.float32) for f in nonempty])
        if has_scale:
            rec["scale"] = np.concatenate([np.asarray(f.scale, np.float32) for f in nonempty])
        if has_angle:
            rec["angle"] = np.concatenate([np.asarray(f.angle, np.float32) for f in nonempty])
        file = f"c{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}.npy"
        _atomic_write(
            self.index_dir / "features" / file, lambda fh: np.save(fh, rec, allow_pickle=False)
        )
        return file, len(rec), codec, scale

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
                chunk_id = None
                if chunk is not None:
                    file, n_rows, codec, scale = chunk
                    cur = self._conn.execute(
                        "INSERT INTO chunks(file, n_rows, desc_codec, desc_scale, created_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (file, n_rows, codec, scale, now),
                    )
                    chunk_id = cur.lastrowid
                offset = 0
                ok_rows = []
                for path, size, mtime_ns, chash, f in ok:
                    n = len(f)
                    ok_rows.append(
                        (self._norm_path(path), int(size), int(mtime_ns), chash, n,
                         chunk_id if n else None, offset if n else 0,
                         int(f.image_size[0]), int(f.image_size[1]), str(f.kind),
                         _dim(f), fkey, now)
                    )  # fmt: skip
                    offset += n
                self._conn.executemany(
                    "INSERT INTO images(path, size, mtime_ns, content_hash, status, error, "
                    "n_features, feature_chunk, feature_offset, width, height, kind, dim, fkey, "
                    "added_at) VALUES (?, ?, ?, ?, 'ok', NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(path) DO UPDATE SET size=excluded.size, "
                    "mtime_ns=excluded.mtime_ns, content_hash=excluded.content_hash, "
                    "status='ok', error=NULL, n_features=excluded.n_features, "
                    "feature_chunk=excluded.feature_chunk, "
                    "feature_offset=excluded.feature_offset, width=excluded.width, "
                    "height=excluded.height, kind=excluded.kind, dim=excluded.dim, "
                    "fkey=excluded.fkey, added_at=excluded.added_at",
                    ok_rows,
                )
                self._conn.executemany(
                    "INSERT INTO images(path, size, mtime_ns, content_hash, status, error, "
                    "n_features, feature_chunk, feature_offset, fkey, added_at) "
                    "VALUES (?, ?, ?, ?, 'failed', ?, 0, NULL, 0, ?, ?) "
                    "ON CONFLICT(path) DO UPDATE SET size=excluded.size, "
                    "mtime_ns=excluded.mtime_ns, content_hash=excluded.content_hash, "
                    "status='failed', error=excluded.error, n_features=0, feature_chunk=NULL, "
                    "feature_offset=0, width=0, height=0, kind=NULL, fkey=excluded.fkey, "
                    "added_at=excluded.added_at",
                    [
                        (self._norm_path(p), int(s), int(m), h, str(reason), fkey, now)
                        for p, s, m, h, reason in failed
                    ],
                )
                self._conn.executemany(
                    "UPDATE images SET size = ?, mtime_ns = ? WHERE path = ?",
                    [(int(s), int(m), self._norm_path(p)) for p, s, m in touched],
                )
                self._commit()
            except BaseException:
                self._rollback()
                if chunk is not None:
                    self._unlink(os.fspath(self.index_dir / "features" / chunk[0]))
                raise

    def remove(self, paths: Iterable[str | os.PathLike]) -> int:
        """Delete the rows of ``paths`` in one transaction; returns the number deleted.

        Their features become dead rows in their chunks (reclaimed by :meth:`compact`).
        """
        self._require_writer()
        keys = [(self._norm_path(p),) for p in paths]
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
        return self._q(
            "SELECT c.id, c.file, c.n_rows, COALESCE(SUM(i.n_features), 0) FROM chunks c "
            "LEFT JOIN images i ON i.feature_chunk = c.id AND i.status = 'ok' "
            "GROUP BY c.id ORDER BY c.id"
        )

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
                    file, n_rows, codec, scale = chunk
                    cid = self._conn.execute(
                        "INSERT INTO chunks(file, n_rows, desc_codec, desc_scale, created_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (file, n_rows, codec, scale, now),
                    ).lastrowid
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
            if _read_marker(self.index_dir) is None:  # never clean an unmarked folder
                return removed
            referenced = {r[0] for r in self._q("SELECT file FROM chunks")}
            feat_dir = self.index_dir / "features"
            for entry in os.scandir(feat_dir):
                name = entry.name
                ours = _CHUNK_RE.match(name) or _TMP_RE.match(name)
                if ours and name not in referenced and entry.is_file(follow_symlinks=False):
                    removed += self._unlink(entry.path)
            for entry in os.scandir(self.index_dir / "arrays"):
                if _TMP_RE.match(entry.name) and entry.is_file(follow_symlinks=False):
                    removed += self._unlink(entry.path)
            states = self.index_dir / "states"
            named = set()
            for entry in os.scandir(states):
                if entry.name.endswith(".json"):
                    named.update(self._state_files(Path(entry.path)))
            for entry in os.scandir(states):
                name = entry.name
                orphan = _STATE_NPZ_RE.match(name) and name not in named
                if (orphan or _TMP_RE.match(name)) and entry.is_file(follow_symlinks=False):
                    removed += self._unlink(entry.path)
        return removed

    @staticmethod
    def _unlink(path: str) -> int:
        try:
            os.unlink(path)
            return 1
        except OSError:  # e.g. still mapped by a reader on Windows; retried next time
            return 0

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

    # ------------------------------------------------------------------ named arrays

    def save_array(self, name: str, arr: np.ndarray) -> None:
        """Atomically save ``arr`` (no object dtype) as ``arrays/<name>.npy``."""
        self._require_writer()
        _check_name(name)
        arr = np.asarray(arr)
        if arr.dtype.hasobject:
            raise TypeError(f"array {name!r} has object dtype; only plain arrays can be stored")
        _atomic_write(
            self.index_dir / "arrays" / f"{name}.npy",
            lambda fh: np.save(fh, arr, allow_pickle=False),
        )

    def load_array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        """Load array ``name`` (read-only memory map by default). ``KeyError`` if absent."""
        _check_name(name)
        path = self.index_dir / "arrays" / f"{name}.npy"
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError:
            raise KeyError(f"no array {name!r} in index {self.index_dir}") from None
        except ValueError as exc:
            raise IndexCorruptError(f"array file {path} is damaged: {exc}") from exc

    def has_array(self, name: str) -> bool:
        """Whether array ``name`` exists."""
        return (self.index_dir / "arrays" / f"{_check_name(name)}.npy").is_file()

    def delete_array(self, name: str) -> None:
        """Delete array ``name`` if present."""
        self._require_writer()
        self._unlink(os.fspath(self.index_dir / "arrays" / f"{_check_name(name)}.npy"))

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
        _check_name(name)
        scalars: dict[str, Any] = {}
        arrays = _state_arrays(state, scalars)
        parts = [str(p) for p in parts]
        for part in parts:
            ok = _NAME_RE.match(part) and part.startswith(f"{name}.") and part.endswith(".npz")
            if not ok:
                raise ValueError(f"{part!r} is not a part of state {name!r}")
            if not (self.index_dir / "states" / part).is_file():
                raise FileNotFoundError(f"state part {part} was not written")
        states = self.index_dir / "states"
        npz_name = f"{name}.{uuid.uuid4().hex[:12]}.npz"
        _atomic_write(states / npz_name, lambda fh: np.savez(fh, **arrays))
        scalars["__npz__"] = npz_name
        if parts:
            scalars["__parts__"] = parts
        payload = json.dumps(scalars, sort_keys=True).encode("utf-8")
        json_path = states / f"{name}.json"
        old = self._state_files(json_path)
        _atomic_write(json_path, lambda fh: fh.write(payload))
        for file in old - {npz_name, *parts}:
            self._unlink(os.fspath(states / file))

    def write_state_part(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        """Write (and sync) arrays of a state that :meth:`save_state` will name in
        ``parts``; returns the file's name. Until then no state refers to it: a run that
        stops before leaves a file that :meth:`gc` deletes."""
        self._require_writer()
        _check_name(name)
        scalars: dict[str, Any] = {}
        data = _state_arrays(arrays, scalars)
        if scalars:
            raise TypeError(f"state parts hold arrays only, got {sorted(scalars)}")
        part = f"{name}.{uuid.uuid4().hex[:12]}.npz"
        _atomic_write(self.index_dir / "states" / part, lambda fh: np.savez(fh, **data))
        return part

    @staticmethod
    def _state_files(json_path: Path) -> set[str]:
        """The npz files that state JSON ``json_path`` names (empty if unreadable)."""
        try:
            st = json.loads(json_path.read_text("utf-8"))
            files = {st["__npz__"], *st.get("__parts__", ())}
        except (OSError, ValueError, KeyError, TypeError):
            return set()
        return {f for f in files if isinstance(f, str) and _NAME_RE.match(f)}

    def load_state(self, name: str) -> dict[str, Any]:
        """Load a state saved by :meth:`save_state`. ``KeyError`` if absent."""
        _check_name(name)
        states = self.index_dir / "states"
        json_path = states / f"{name}.json"
        for attempt in range(2):
            try:
                scalars = json.loads(json_path.read_text("utf-8"))
            except FileNotFoundError:
                raise KeyError(f"no state {name!r} in index {self.index_dir}") from None
            except ValueError as exc:
                raise IndexCorruptError(f"state file {json_path} is damaged: {exc}") from exc
            npz = scalars.pop("__npz__", None)
            parts = scalars.pop("__parts__", [])
            if not isinstance(npz, str) or not _NAME_RE.match(npz):
                raise IndexCorruptError(f"state file {json_path} names no array file")
            if not isinstance(parts, list) or not all(
                isinstance(p, str) and _NAME_RE.match(p) for p in parts
            ):
                raise IndexCorruptError(f"state file {json_path} names bad array files")
            arrays: dict[str, np.ndarray] = {}
            try:
                for file in (npz, *parts):
                    with np.load(states / file, allow_pickle=False) as data:
                        for k in data.files:
                            if k in arrays or k in scalars:
                                raise ValueError(f"array {k!r} is stored twice")
                            arrays[k] = data[k]
            except FileNotFoundError:
                if attempt == 0:  # replaced by a concurrent save_state: re-read the JSON
                    continue
                raise IndexCorruptError(f"state {name!r}: array file {file} is missing") from None
            except ValueError as exc:
                raise IndexCorruptError(f"state {name!r}: {file} is damaged: {exc}") from exc
            scalars.update(arrays)
            return scalars
        raise AssertionError("unreachable")  # pragma: no cover

    def has_state(self, name: str) -> bool:
        """Whether state ``name`` exists."""
        return (self.index_dir / "states" / f"{_check_name(name)}.json").is_file()

    def delete_state(self, name: str) -> None:
        """Delete state ``name`` (JSON first, then its npz) if present."""
        self._require_writer()
        json_path = self.index_dir / "states" / f"{_check_name(name)}.json"
        files = self._state_files(json_path)
        self._unlink(os.fspath(json_path))
        for file in files:
            self._unlink(os.fspath(self.index_dir / "states" / file))
