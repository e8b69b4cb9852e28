"""The catalogue of an index folder: the SQLite schema, the marker file and opening.

``catalog.sqlite`` has five tables (:data:`SCHEMA_SQL`): ``images`` (one row per file,
indexed or failed, pointing into a feature chunk), ``chunks`` (one row per chunk file,
with its checksum), ``settings`` (JSON values) and ``kv`` (small blobs, the
``generation`` counter bumped by every committed write and the catalogue's random
identity :data:`CATALOG_ID_KEY`, which the saved states name: search data is never paired
with a catalogue it was not made from) and ``metadata`` (what each photo records about
itself). ``PRAGMA application_id`` (:data:`APPLICATION_ID`)
marks a simile catalogue and ``PRAGMA user_version`` its schema version
(:data:`SCHEMA_VERSION`).

Schema versions: 1 had no chunk checksums, no catalogue identity and per-state JSON
files; 2 adds both and keeps the states in one manifest (:mod:`engine.index.manifest`);
3 (this one) adds the ``metadata`` table (:data:`METADATA_SQL`: date taken, camera, lens,
exposure, size and place of every usable photo, :class:`engine.io.metadata.PhotoMetadata`
as JSON, keyed by image id, deleted with its image). A writer migrates an older
catalogue when it opens it (:func:`migrate`; the checksums of old chunks are recorded
when ``--repair`` first verifies them; the metadata of photos indexed before is read by
the next :func:`engine.index.ingest.ingest`, without extracting their features again);
an older simile refuses a newer catalogue. A reader opens an older catalogue as it is
(no metadata table: no metadata).

The marker file (:data:`MARKER_NAME`) is written first into a new index folder;
:func:`claim` refuses a non-empty folder that is not an index, so the store's clean-up
can never see a person's files.

Read-only media: a WAL catalogue cannot be opened with ``mode=ro`` where its ``-shm``
file cannot be created; :func:`connect` then opens it ``immutable`` (the index is on a
read-only file system, so nothing can change it).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from engine.index import keys
from engine.index.files import CHUNK_RE, atomic_write
from engine.index.lock import WriterLock
from engine.index.row_key import ROW_KEY_TRIGGER_SQL, add_row_keys, row_keys, signed_keys
from engine.index.store_errors import (
    IndexCorruptError,
    IndexFormatError,
    IndexNotFoundError,
    IndexVersionError,
    StoreError,
)

__all__ = [
    "APPLICATION_ID",
    "CATALOG_ID_KEY",
    "CATALOG_NAME",
    "CHUNK_TABLE_SQL",
    "CHUNK_TOTALS_SQL",
    "CHUNK_USAGE_SQL",
    "DEAD_CHUNKS_SQL",
    "DUPLICATES_SQL",
    "FEATURE_SELECT_SQL",
    "IMAGE_COLS",
    "INDEX_DIRNAME",
    "LOCK_NAME",
    "MARKER_FORMAT",
    "MARKER_NAME",
    "METADATA_SQL",
    "ROW_KEY_TRIGGER_SQL",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "TABLES",
    "TOUCH_SQL",
    "UPSERT_FAILED_SQL",
    "UPSERT_OK_SQL",
    "ImageRecord",
    "add_row_keys",
    "catalog_info",
    "check_schema",
    "claim",
    "connect",
    "forget_chunks",
    "has_index_content",
    "init_schema",
    "insert_chunk",
    "is_empty",
    "migrate",
    "new_catalog_id",
    "open_reader",
    "open_writer",
    "read_marker",
    "row_keys",
    "signed_keys",
    "write_marker",
]

#: Schema version written to ``PRAGMA user_version``; newer catalogues are refused.
SCHEMA_VERSION = 3
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
#: kv key of the catalogue's random identity (hex), written when it is created.
CATALOG_ID_KEY = keys.CATALOG_ID_KEY

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
    created_at REAL NOT NULL,
    checksum TEXT
);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB);
"""
#: The ``metadata`` table (schema 3): one row per usable image whose metadata was read
#: (an empty ``data`` object when the file records nothing), written in the transaction
#: that writes the image's row; ``date_taken`` (ISO 8601) repeated as a column to sort and
#: filter by.
METADATA_SQL = """
CREATE TABLE IF NOT EXISTS metadata (
    image_id INTEGER PRIMARY KEY REFERENCES images(id) ON DELETE CASCADE,
    date_taken TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metadata_date ON metadata(date_taken);
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
#: ``(rows of every chunk, live rows)``: the sums of :data:`CHUNK_USAGE_SQL`'s columns.
CHUNK_TOTALS_SQL = (
    "SELECT (SELECT COALESCE(SUM(n_rows), 0) FROM chunks), (SELECT COALESCE(SUM("
    "i.n_features), 0) FROM images i JOIN chunks c ON i.feature_chunk = c.id "
    "WHERE i.status = 'ok')"
)
#: Ids of the chunks no usable image reads a feature from (:data:`CHUNK_USAGE_SQL`'s
#: chunks of no live row), found through the images' chunk index.
DEAD_CHUNKS_SQL = (
    "SELECT c.id FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM images i WHERE "
    "i.feature_chunk = c.id AND i.status = 'ok' AND i.n_features > 0) ORDER BY c.id"
)
#: ``(chunk id, file, n_rows, checksum, rows used)`` of every chunk, ascending id (rows
#: used: the end of the last feature an image reads from it).
CHUNK_TABLE_SQL = (
    "SELECT c.id, c.file, c.n_rows, c.checksum, "
    "COALESCE(MAX(i.feature_offset + i.n_features), 0) FROM chunks c "
    "LEFT JOIN images i ON i.feature_chunk = c.id GROUP BY c.id ORDER BY c.id"
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
    """The marker of ``index_dir`` (a dict), ``None`` when there is no marker file.

    Raises
    ------
    IndexCorruptError
        The marker cannot be read or is not a simile marker.
    """
    marker = index_dir / MARKER_NAME
    try:
        data = json.loads(marker.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(
            f"the marker of the index {index_dir} is damaged ({MARKER_NAME}: {exc})",
            path=marker,
        ) from exc
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT:
        raise IndexCorruptError(
            f"the marker of the index {index_dir} is damaged ({MARKER_NAME}: not a simile "
            "index marker)",
            path=marker,
        )
    return data


def has_index_content(index_dir: Path) -> bool:
    """Whether ``index_dir`` holds what only an index that had a catalogue holds (saved
    states or feature chunks): without its catalogue such a folder is a damaged index,
    not a new one."""
    for sub, wanted in (("states", lambda n: n.endswith(".json")), ("features", CHUNK_RE.match)):
        try:
            with os.scandir(index_dir / sub) as it:
                if any(wanted(e.name) for e in it):
                    return True
        except OSError:
            pass
    return False


def write_marker(index_dir: Path) -> None:
    """Write the marker of ``index_dir`` atomically (format, schema version, time)."""
    payload = json.dumps(
        {"format": MARKER_FORMAT, "schema": SCHEMA_VERSION, "created": time.time()},
        sort_keys=True,
    ).encode("utf-8")
    atomic_write(index_dir / MARKER_NAME, lambda fh: fh.write(payload))


def claim(index_dir: Path, catalog: Path, *, repair: bool = False) -> None:
    """Make sure ``index_dir`` is a simile index folder before writing anything there.

    A new or empty folder gets the marker; a folder with the marker, or an index
    written before markers existed (a catalogue with simile's ``application_id``),
    is accepted (the latter gets its marker now). Any other non-empty folder is
    refused: it holds someone else's files, which the clean-up must never see.

    With ``repair``, a damaged marker (or catalogue) in a folder that holds nothing but
    the index's own files is accepted and the marker written again.
    """
    index_dir.mkdir(parents=True, exist_ok=True)
    try:
        if read_marker(index_dir) is not None:
            return
    except IndexCorruptError:
        if not repair:
            raise
    try:
        with os.scandir(index_dir) as it:
            names = {e.name for e in it}
    except OSError as exc:
        raise StoreError(f"cannot read the index folder {index_dir}: {exc}") from exc
    own = {CATALOG_NAME, f"{CATALOG_NAME}-wal", f"{CATALOG_NAME}-shm", LOCK_NAME,
           "features", "arrays", "states", "cache"}  # fmt: skip
    if repair:
        own.add(MARKER_NAME)
    refused = IndexFormatError(
        f"{index_dir} is not a simile index and is not empty; refusing to use it "
        "(choose a new or empty folder for the index)"
    )
    if names and CATALOG_NAME in names and catalog.is_file():
        try:
            conn = connect(catalog, readonly=True)
            try:
                check_schema(conn, catalog)  # raises unless it is a simile catalogue
            finally:
                conn.close()
        except IndexNotFoundError:  # an older creation stopped before its first commit
            if not names <= own:
                raise refused from None
        except IndexCorruptError:
            if not (repair and names <= own):
                raise
    elif names - ({LOCK_NAME} | (own if repair else set())):
        raise refused
    write_marker(index_dir)


def catalog_info(conn: sqlite3.Connection) -> tuple[str | None, bool]:
    """The catalogue's identity (None: written before catalogues had one) and whether its
    chunks have checksums (a version-1 catalogue opened read-only has no such column)."""
    try:
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (CATALOG_ID_KEY,)).fetchone()
        cols = {r[1] for r in conn.execute("PRAGMA table_info(chunks)")}
    except sqlite3.DatabaseError:
        return None, False
    value = row[0] if row else None
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else value), (
        "checksum" in cols
    )


def new_catalog_id() -> str:
    """A fresh random catalogue identity (32 hex digits)."""
    return uuid.uuid4().hex


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
    OSError
        ENOSPC: the disk is full (:func:`disk_full`), so SQLite cannot make its
        ``-shm`` / ``-wal`` files (a reader whose catalogue has no write-ahead log left
        opens ``immutable=1`` instead).

    Notes
    -----
    A read-only connection to a WAL catalogue needs its ``-shm`` file; where that
    cannot be created (read-only media, whose folder is not writable, even for root)
    the catalogue is opened ``immutable=1``: nothing can change it there.
    """
    try:
        if readonly:
            try:
                conn = _connect_ro(catalog, "?mode=ro")
            except sqlite3.OperationalError:
                full = disk_full(catalog.parent)
                if os.access(catalog.parent, os.W_OK) and not full:
                    raise
                if full and not _wal_empty(catalog):  # (immutable would miss the log)
                    raise _no_space(catalog) from None
                conn = _connect_ro(catalog, "?mode=ro&immutable=1")
        else:
            try:
                conn = sqlite3.connect(
                    os.fspath(catalog), check_same_thread=False, timeout=30, isolation_level=None
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            except sqlite3.OperationalError:
                if disk_full(catalog.parent):
                    raise _no_space(catalog) from None
                raise
        conn.execute("PRAGMA foreign_keys=ON")
        if readonly:
            conn.isolation_level = None
    except sqlite3.DatabaseError as exc:
        raise IndexCorruptError(
            f"the catalogue of the index {catalog.parent} is damaged or unreadable "
            f"({catalog.name}: {exc})",
            path=catalog,
        ) from exc
    return conn


#: Free bytes below which a disk counts as full for SQLite (its ``-shm`` file is 32 KiB)
FULL_DISK_BYTES = 256 * 1024


def disk_full(folder: Path) -> bool:
    """Whether the disk holding ``folder`` has less than :data:`FULL_DISK_BYTES` free:
    SQLite then reports a full disk as SQLITE_IOERR ("disk I/O error"), when it cannot
    create or grow its ``-shm`` / ``-wal`` files, not as SQLITE_FULL."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):  # (no statvfs on Windows)
        return False
    return st.f_bavail * st.f_frsize < FULL_DISK_BYTES


def _wal_empty(catalog: Path) -> bool:
    """Whether the catalogue's write-ahead log is absent or empty (everything is in the
    main file, so an ``immutable=1`` reader misses nothing)."""
    try:
        return os.stat(os.fspath(catalog) + "-wal").st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _no_space(catalog: Path) -> OSError:
    return OSError(
        errno.ENOSPC,
        f"no space left on the disk of the index {catalog.parent} (SQLite cannot create "
        f"its -shm / -wal files next to {catalog.name}); free some space",
    )


def _connect_ro(catalog: Path, query: str) -> sqlite3.Connection:
    """A read-only connection with the URI parameters ``query``, tried with one read
    (SQLite opens files lazily)."""
    conn = sqlite3.connect(catalog.as_uri() + query, uri=True, check_same_thread=False, timeout=30)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _damaged(catalog: Path, why: object) -> IndexCorruptError:
    return IndexCorruptError(
        f"the catalogue of the index {catalog.parent} is damaged ({catalog.name}: {why})",
        path=catalog,
    )


def is_empty(conn: sqlite3.Connection, catalog: Path) -> bool:
    """Whether the database has no table yet (a new catalogue). ``IndexCorruptError``
    when it cannot be read."""
    try:
        n = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise _damaged(catalog, exc) from exc
    return n == 0


def init_schema(conn: sqlite3.Connection, catalog_id: str | None = None) -> str:
    """Create the tables of :data:`SCHEMA_SQL`, the ``application_id``, the schema version,
    the ``generation`` counter and the catalogue's identity, in one transaction.

    Parameters
    ----------
    conn : sqlite3.Connection
    catalog_id : str, optional
        The identity to record (default: :func:`new_catalog_id`).

    Returns
    -------
    str
        The catalogue's identity.
    """
    catalog_id = catalog_id or new_catalog_id()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in (SCHEMA_SQL + METADATA_SQL).split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("INSERT INTO kv(key, value) VALUES ('generation', 0)")
        conn.execute(
            "INSERT INTO kv(key, value) VALUES (?, ?)", (CATALOG_ID_KEY, catalog_id.encode())
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return catalog_id


def migrate(conn: sqlite3.Connection) -> None:
    """Bring an older catalogue to :data:`SCHEMA_VERSION` in one transaction. From
    version 1: the ``chunks.checksum`` column (empty for old chunks: recorded when
    ``--repair`` verifies them) and the catalogue's identity; from versions 1 and 2: the
    empty ``metadata`` table (:data:`METADATA_SQL`; the next ingest reads the metadata of
    the photos already indexed). A no-op on a current catalogue.

    Parameters
    ----------
    conn : sqlite3.Connection
        A writer's connection (autocommit; the transaction is opened here).
    """
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(chunks)")}
        if "checksum" not in cols:
            conn.execute("ALTER TABLE chunks ADD COLUMN checksum TEXT")
        conn.execute(
            "INSERT OR IGNORE INTO kv(key, value) VALUES (?, ?)",
            (CATALOG_ID_KEY, new_catalog_id().encode()),
        )
        for stmt in METADATA_SQL.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def check_schema(conn: sqlite3.Connection, catalog: Path, *, pages: bool = True) -> None:
    """Check that ``conn`` is a simile catalogue this version can use (``pages``: and
    that its pages are whole, :func:`check_pages`).

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
        raise _damaged(catalog, exc) from exc
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
        raise _damaged(
            catalog, f"missing tables {sorted(TABLES - tables)}, schema version {version}"
        )
    if pages:
        check_pages(conn, catalog)


def check_pages(conn: sqlite3.Connection, catalog: Path) -> None:
    """``PRAGMA quick_check``: the b-trees of every table and index are whole, and no
    column the schema needs is NULL. SQLite keeps no checksums; damage inside an index
    b-tree (say, of ``images.path``) would otherwise give answers that differ silently
    from a clean build. It reads every page once (about 2 ms per MB of catalogue: 60 ms
    for 100,000 photos).

    Raises
    ------
    IndexCorruptError
        With SQLite's first finding.
    """
    try:
        found = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        if type(exc) is not sqlite3.DatabaseError:  # (I/O: not a finding about the file)
            raise
        raise _damaged(catalog, exc) from exc
    if found != [("ok",)]:
        first = " ".join(str(found[0][0] if found else "no answer").split())
        raise _damaged(
            catalog, f"integrity check: {first.replace('*** in database main *** ', '')}"
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


def open_writer(
    index_dir: Path,
    catalog: Path,
    *,
    repair: bool = False,
    before_create=None,
    check_pages: bool = True,
) -> tuple[sqlite3.Connection, WriterLock]:
    """Claim ``index_dir`` (:func:`claim`), take its writer lock, connect for writing and
    create (or check and :func:`migrate`) the schema and the ``features``, ``arrays`` and
    ``states`` folders.

    Parameters
    ----------
    index_dir, catalog : Path
    repair : bool
        Passed to :func:`claim`.
    before_create : callable, optional
        ``before_create(catalog_id)`` is called (with the lock held) before a new
        catalogue with identity ``catalog_id`` is created: the store disowns the states
        an earlier catalogue left there.
    check_pages : bool
        Run :func:`check_pages` on an existing catalogue (reads every page). An update of
        a few named photos skips it: it reads only their rows, and SQLite reports damage
        in the pages it reads; every other update (a scan of the folder) checks.

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
    claim(index_dir, catalog, repair=repair)
    lock = WriterLock(index_dir / LOCK_NAME)
    lock.acquire()
    try:
        conn = connect(catalog, readonly=False)
        try:
            for sub in ("features", "arrays", "states"):
                (index_dir / sub).mkdir(exist_ok=True)
            if is_empty(conn, catalog):
                catalog_id = new_catalog_id()
                if before_create is not None:
                    before_create(catalog_id)
                init_schema(conn, catalog_id)
            else:
                check_schema(conn, catalog, pages=check_pages)
                migrate(conn)
            add_row_keys(conn)
        except BaseException:
            conn.close()
            raise
    except BaseException:
        lock.release()
        raise
    return conn, lock


def insert_chunk(
    conn: sqlite3.Connection,
    chunk: tuple[str, int, str, float],
    now: float,
    checksum: str | None = None,
) -> int:
    """Add the catalogue row of a chunk file written by :func:`engine.index.chunks.write_chunk`
    (inside the caller's transaction).

    Parameters
    ----------
    conn : sqlite3.Connection
    chunk : (file, rows, codec, scale)
    now : float
        Unix time stored as ``created_at``.
    checksum : str, optional
        :func:`engine.index.files.file_digest` of the file.

    Returns
    -------
    int
        The chunk's id.
    """
    file, n_rows, codec, scale = chunk
    return conn.execute(
        "INSERT INTO chunks(file, n_rows, desc_codec, desc_scale, created_at, checksum) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (file, n_rows, codec, scale, now, checksum),
    ).lastrowid


def forget_chunks(conn: sqlite3.Connection, chunk_ids: list[int], reason: str) -> int:
    """Forget damaged feature chunks (inside the caller's transaction): their images, and
    usable images whose chunk is gone, become failed rows with ``reason`` and no
    feature-settings key, which the next :func:`engine.index.ingest.ingest` extracts
    again (they keep their ids); the chunks' rows are deleted.

    Parameters
    ----------
    conn : sqlite3.Connection
    chunk_ids : list of int
    reason : str
        Shown as the images' error until they are extracted again.

    Returns
    -------
    int
        Images marked.
    """
    marks = ",".join("?" * len(chunk_ids)) or "NULL"
    before = conn.total_changes
    conn.execute(
        "UPDATE images SET status = 'failed', error = ?, n_features = 0, feature_chunk = NULL, "
        f"feature_offset = 0, fkey = NULL WHERE feature_chunk IN ({marks}) OR (status = 'ok' "
        "AND n_features > 0 AND (feature_chunk IS NULL OR feature_chunk NOT IN "
        "(SELECT id FROM chunks)))",
        (reason, *chunk_ids),
    )
    n = conn.total_changes - before
    conn.executemany("DELETE FROM chunks WHERE id = ?", [(c,) for c in chunk_ids])
    return n
