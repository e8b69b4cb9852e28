"""The catalogue of an index folder: the SQLite schema, the marker file and opening.

``catalog.sqlite`` has four tables (:data:`SCHEMA_SQL`): ``images`` (one row per file,
indexed or failed, pointing into a feature chunk), ``chunks`` (one row per chunk file),
``settings`` (JSON values) and ``kv`` (small blobs, and the ``generation`` counter bumped
by every committed write). ``PRAGMA application_id`` (:data:`APPLICATION_ID`) marks a
simile catalogue and ``PRAGMA user_version`` its schema version (:data:`SCHEMA_VERSION`).

The marker file (:data:`MARKER_NAME`) is written first into a new index folder;
:func:`claim` refuses a non-empty folder that is not an index, so the store's clean-up
can never see a person's files.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from engine.index.files import atomic_write
from engine.index.lock import WriterLock
from engine.index.store_errors import (
    IndexCorruptError,
    IndexFormatError,
    IndexNotFoundError,
    IndexVersionError,
    StoreError,
)

__all__ = [
    "APPLICATION_ID",
    "CATALOG_NAME",
    "CHUNK_USAGE_SQL",
    "DUPLICATES_SQL",
    "FEATURE_SELECT_SQL",
    "IMAGE_COLS",
    "INDEX_DIRNAME",
    "LOCK_NAME",
    "MARKER_FORMAT",
    "MARKER_NAME",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "TABLES",
    "TOUCH_SQL",
    "UPSERT_FAILED_SQL",
    "UPSERT_OK_SQL",
    "ImageRecord",
    "check_schema",
    "claim",
    "connect",
    "init_schema",
    "insert_chunk",
    "is_empty",
    "open_reader",
    "open_writer",
    "read_marker",
    "write_marker",
]

#: Schema version written to ``PRAGMA user_version``; newer catalogues are refused.
SCHEMA_VERSION = 1
#: Name of the index folder inside (or for) a photo folder.
INDEX_DIRNAME = ".simile"
#: The catalogue's file name in the index folder.
CATALOG_NAME = "catalog.sqlite"
#: The writer lock's file name (:class:`engine.index.lock.WriterLock`).
LOCK_NAME = "lock"
#: Marker file of an index folder, written before anything else when it is created.
MARKER_NAME = "SIMILE-INDEX"
MARKER_FORMAT = "simile-index"
#: ``PRAGMA application_id`` of a simile catalogue ("SIML").
APPLICATION_ID = 0x53494D4C

#: The catalogue's tables and indexes (created by :func:`init_schema`).
SCHEMA_SQL = """
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
#: Tables every simile catalogue has.
TABLES = {"images", "chunks", "settings", "kv"}
#: Columns of ``images`` that make an :class:`ImageRecord`, in its field order.
IMAGE_COLS = (
    "id, path, size, mtime_ns, content_hash, status, error, n_features, width, height, kind, "
    "added_at"
)


#: Upsert of an indexed image, by path: ``(path, size, mtime_ns, content_hash, n_features,
#: feature_chunk, feature_offset, width, height, kind, dim, fkey, added_at)``.
UPSERT_OK_SQL = (
    "INSERT INTO images(path, size, mtime_ns, content_hash, status, error, "
    "n_features, feature_chunk, feature_offset, width, height, kind, dim, fkey, "
    "added_at) VALUES (?, ?, ?, ?, 'ok', NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(path) DO UPDATE SET size=excluded.size, "
    "mtime_ns=excluded.mtime_ns, content_hash=excluded.content_hash, "
    "status='ok', error=NULL, n_features=excluded.n_features, "
    "feature_chunk=excluded.feature_chunk, "
    "feature_offset=excluded.feature_offset, width=excluded.width, "
    "height=excluded.height, kind=excluded.kind, dim=excluded.dim, "
    "fkey=excluded.fkey, added_at=excluded.added_at"
)
#: Upsert of a file that could not be indexed (its old features dropped):
#: ``(path, size, mtime_ns, content_hash, error, fkey, added_at)``.
UPSERT_FAILED_SQL = (
    "INSERT INTO images(path, size, mtime_ns, content_hash, status, error, "
    "n_features, feature_chunk, feature_offset, fkey, added_at) "
    "VALUES (?, ?, ?, ?, 'failed', ?, 0, NULL, 0, ?, ?) "
    "ON CONFLICT(path) DO UPDATE SET size=excluded.size, "
    "mtime_ns=excluded.mtime_ns, content_hash=excluded.content_hash, "
    "status='failed', error=excluded.error, n_features=0, feature_chunk=NULL, "
    "feature_offset=0, width=0, height=0, kind=NULL, fkey=excluded.fkey, "
    "added_at=excluded.added_at"
)
#: New stat of a file whose content did not change: ``(size, mtime_ns, path)``.
TOUCH_SQL = "UPDATE images SET size = ?, mtime_ns = ? WHERE path = ?"
#: ``(chunk id, file, n_rows, live rows)`` of every chunk.
CHUNK_USAGE_SQL = (
    "SELECT c.id, c.file, c.n_rows, COALESCE(SUM(i.n_features), 0) FROM chunks c "
    "LEFT JOIN images i ON i.feature_chunk = c.id AND i.status = 'ok' "
    "GROUP BY c.id ORDER BY c.id"
)
#: ``(content_hash, path)`` of usable images whose content another usable image shares.
DUPLICATES_SQL = (
    "SELECT content_hash, path FROM images WHERE status = 'ok' AND content_hash IN "
    "(SELECT content_hash FROM images WHERE status = 'ok' AND content_hash IS NOT NULL "
    "GROUP BY content_hash HAVING count(*) > 1) ORDER BY content_hash, id"
)
#: What reading an image's features needs: ``(id, path, status, n_features,
#: feature_chunk, feature_offset, width, height, kind, dim, file, n_rows, desc_scale)``.
FEATURE_SELECT_SQL = (
    "SELECT i.id, i.path, i.status, i.n_features, i.feature_chunk, i.feature_offset, "
    "i.width, i.height, i.kind, i.dim, c.file, c.n_rows, c.desc_scale "
    "FROM images i LEFT JOIN chunks c ON c.id = i.feature_chunk"
)


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


def read_marker(index_dir: Path) -> dict | None:
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


def write_marker(index_dir: Path) -> None:
    """Write the marker of ``index_dir`` atomically (format, schema version, time)."""
    payload = json.dumps(
        {"format": MARKER_FORMAT, "schema": SCHEMA_VERSION, "created": time.time()},
        sort_keys=True,
    ).encode("utf-8")
    atomic_write(index_dir / MARKER_NAME, lambda fh: fh.write(payload))


def claim(index_dir: Path, catalog: Path) -> None:
    """Make sure ``index_dir`` is a simile index folder before writing anything there.

    A new or empty folder gets the marker; a folder with the marker, or an index
    written before markers existed (a catalogue with simile's ``application_id``),
    is accepted (the latter gets its marker now). Any other non-empty folder is
    refused: it holds someone else's files, which the clean-up must never see.
    """
    index_dir.mkdir(parents=True, exist_ok=True)
    if read_marker(index_dir) is not None:
        return
    try:
        with os.scandir(index_dir) as it:
            names = {e.name for e in it}
    except OSError as exc:
        raise StoreError(f"cannot read the index folder {index_dir}: {exc}") from exc
    own = {CATALOG_NAME, f"{CATALOG_NAME}-wal", f"{CATALOG_NAME}-shm", LOCK_NAME,
           "features", "arrays", "states"}  # fmt: skip
    if names and CATALOG_NAME in names and catalog.is_file():
        conn = connect(catalog, readonly=True)
        try:
            check_schema(conn, catalog)  # raises unless it is a simile catalogue
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
    write_marker(index_dir)


def connect(catalog: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection to ``catalog`` usable from any thread, in autocommit mode (the store
    opens its transactions itself).

    Parameters
    ----------
    catalog : Path
        The ``catalog.sqlite`` file.
    readonly : bool
        Open with ``mode=ro``; otherwise WAL journal and ``synchronous=FULL``.

    Raises
    ------
    IndexCorruptError
        SQLite cannot open the file.
    """
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


def is_empty(conn: sqlite3.Connection, catalog: Path) -> bool:
    """Whether the database has no table yet (a new catalogue). ``IndexCorruptError``
    when it cannot be read."""
    try:
        n = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise IndexCorruptError(f"index catalogue {catalog} is damaged: {exc}") from exc
    return n == 0


def init_schema(conn: sqlite3.Connection) -> None:
    """Create the tables of :data:`SCHEMA_SQL`, the ``application_id``, the schema version
    and the ``generation`` counter, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in SCHEMA_SQL.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("INSERT INTO kv(key, value) VALUES ('generation', 0)")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def check_schema(conn: sqlite3.Connection, catalog: Path) -> None:
    """Check that ``conn`` is a simile catalogue this version can use.

    Raises
    ------
    IndexNotFoundError
        An empty database (a creation interrupted before its first commit).
    IndexFormatError
        Another application's SQLite database.
    IndexVersionError
        Written by a newer simile.
    IndexCorruptError
        Unreadable, or tables are missing.
    """
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
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
    if version < 1 or not TABLES <= tables:
        raise IndexCorruptError(
            f"index catalogue {catalog} is damaged: missing tables "
            f"{sorted(TABLES - tables)} (schema version {version})"
        )


def open_reader(catalog: Path) -> sqlite3.Connection:
    """A read-only connection to ``catalog`` after :func:`check_schema` (closed again
    when the check fails).

    Raises
    ------
    IndexNotFoundError, IndexCorruptError, IndexFormatError, IndexVersionError
        As :func:`check_schema`.
    """
    conn = connect(catalog, readonly=True)
    try:
        check_schema(conn, catalog)
    except BaseException:
        conn.close()
        raise
    return conn


def open_writer(index_dir: Path, catalog: Path) -> tuple[sqlite3.Connection, WriterLock]:
    """Claim ``index_dir`` (:func:`claim`), take its writer lock, connect for writing and
    create (or check) the schema and the ``features``, ``arrays`` and ``states`` folders.

    Returns
    -------
    conn : sqlite3.Connection
        In WAL mode, autocommit (transactions are explicit).
    lock : WriterLock
        Held; released again (and ``conn`` closed) when a step fails.

    Raises
    ------
    IndexLockedError
        Another process holds the lock.
    IndexCorruptError, IndexFormatError, IndexVersionError, StoreError
        A damaged, foreign or newer catalogue, or a folder that is not an index.
    """
    claim(index_dir, catalog)
    lock = WriterLock(index_dir / LOCK_NAME)
    lock.acquire()
    try:
        conn = connect(catalog, readonly=False)
        try:
            if is_empty(conn, catalog):
                init_schema(conn)
            else:
                check_schema(conn, catalog)
            for sub in ("features", "arrays", "states"):
                (index_dir / sub).mkdir(exist_ok=True)
        except BaseException:
            conn.close()
            raise
    except BaseException:
        lock.release()
        raise
    return conn, lock


def insert_chunk(conn: sqlite3.Connection, chunk: tuple[str, int, str, float], now: float) -> int:
    """Add the catalogue row of a chunk file written by :func:`engine.index.chunks.write_chunk`
    (inside the caller's transaction).

    Parameters
    ----------
    conn : sqlite3.Connection
    chunk : (file, rows, codec, scale)
    now : float
        Unix time stored as ``created_at``.

    Returns
    -------
    int
        The chunk's id.
    """
    file, n_rows, codec, scale = chunk
    return conn.execute(
        "INSERT INTO chunks(file, n_rows, desc_codec, desc_scale, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (file, n_rows, codec, scale, now),
    ).lastrowid
