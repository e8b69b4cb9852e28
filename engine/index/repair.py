"""Repairing a damaged index: rebuild what is damaged from what is intact.

:func:`repair_index` (``simile index FOLDER --repair``) checks every file of an index
folder and puts the index back into a state that the next update
(:meth:`engine.collection.Collection.update`) completes into what a clean build gives:

- the marker (``SIMILE-INDEX``): written again, when the folder holds nothing but the
  index's own files;
- the catalogue (``catalog.sqlite``): checked (``PRAGMA quick_check``); a damaged one is
  replaced by a new catalogue holding every row that can still be read (the same ids,
  the same identity: the saved states stay usable), or, when its rows cannot be read,
  by an empty one (every photo is extracted again; the states, made from the old
  catalogue, are dropped);
- the states manifest: a damaged one is replaced by an empty one (the saved states are
  dropped: the search models and data are fitted and encoded again by the update);
- every saved state: read whole (the zip CRC of every array is checked); a damaged one
  is dropped (the search data with its models), as are states made from another
  catalogue;
- every feature chunk: its file must load with the shape the catalogue gives and match
  its checksum (chunks written before checksums get theirs recorded now); the images of
  a damaged chunk are marked to be extracted again, keeping their ids, so the search
  data made from their intact features still applies;
- named arrays: a damaged one is deleted (its owner computes it again).

Stored features whose checksums hold are re-used; search data is never paired with a
catalogue it was not made from (:mod:`engine.index.manifest`: the catalogue identity;
:func:`engine.index.catalog.row_keys`: each row).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np

from engine.index import manifest
from engine.index.catalog import (
    CATALOG_ID_KEY,
    CATALOG_NAME,
    LOCK_NAME,
    MARKER_NAME,
    check_schema,
    claim,
    connect,
    has_index_content,
    init_schema,
    read_marker,
)
from engine.index.files import NAME_RE, file_digest, fsync_dir, tmp_path, unlink
from engine.index.keys import DATA_STATE, MODELS_STATE
from engine.index.lock import WriterLock
from engine.index.store import IndexStore
from engine.index.store_errors import IndexCorruptError, IndexNotFoundError, StoreError

__all__ = ["REEXTRACT_REASON", "repair_index"]

#: The error of images whose stored features were damaged, until they are extracted again.
REEXTRACT_REASON = "its stored features were damaged; the next 'simile index' extracts them"


def repair_index(index_dir: str | os.PathLike) -> list[str]:
    """Repair the index in ``index_dir`` (see the module docstring); the next update
    re-extracts and re-encodes what was dropped.

    Parameters
    ----------
    index_dir : path-like
        The index folder (e.g. ``<folder>/.simile``).

    Returns
    -------
    list of str
        What was repaired, one line each (empty: nothing was damaged).

    Raises
    ------
    IndexLockedError
        Another process is updating the index.
    IndexFormatError
        The folder is not an index (and holds files that are not the index's).
    IndexVersionError
        The index was written by a newer simile.
    OSError
        The folder cannot be written (e.g. read-only media, a full disk).
    """
    index_dir = Path(os.path.abspath(os.fspath(index_dir)))
    actions: list[str] = []
    if not index_dir.is_dir():
        return actions
    catalog = index_dir / CATALOG_NAME
    try:
        read_marker(index_dir)
    except IndexCorruptError:
        actions.append(f"the marker ({MARKER_NAME}) was damaged: written again")
    claim(index_dir, catalog, repair=True)
    lock = WriterLock(index_dir / LOCK_NAME)
    lock.acquire()
    try:
        actions += _repair_catalog(index_dir, catalog)
        actions += _repair_manifest(index_dir / "states")
    finally:
        lock.release()
    with IndexStore.open(index_dir, repair=True) as store:
        actions += _repair_states(store)
        actions += _repair_chunks(store)
        actions += _repair_arrays(store)
        store.gc()
    return actions


def _detail(exc: BaseException) -> str:
    """What an error says about the file: the parenthesis of an
    :class:`IndexCorruptError` (``states/x.npz: bad zip``), or the missing file's name."""
    if isinstance(exc, FileNotFoundError):
        return f"{Path(exc.filename or '?').name}: missing"
    text = str(exc)
    start = text.find(" (")
    return text[start + 2 : -1] if start >= 0 and text.endswith(")") else text


def _catalog_ok(catalog: Path) -> bool:
    """Whether the catalogue opens, is a simile catalogue and passes ``quick_check``
    (an empty one, left by an interrupted creation, is fine)."""
    try:
        conn = connect(catalog, readonly=True)
    except IndexCorruptError:
        return False
    try:
        check_schema(conn, catalog)
        return conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    except IndexNotFoundError:
        return True
    except (IndexCorruptError, sqlite3.DatabaseError):
        return False
    finally:
        conn.close()


def _salvage(catalog: Path) -> dict[str, tuple[list[str], list[tuple]]] | None:
    """Every row of the damaged catalogue's tables, when they can all be read: table ->
    (columns, rows); None otherwise."""
    try:
        conn = sqlite3.connect(catalog.as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        out = {}
        for table in ("images", "chunks", "settings", "kv"):
            cur = conn.execute(f"SELECT * FROM {table}")
            out[table] = ([d[0] for d in cur.description], cur.fetchall())
        return out
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def _repair_catalog(index_dir: Path, catalog: Path) -> list[str]:
    """Replace a damaged catalogue by one with every row that can be read (or none)."""
    if not catalog.is_file():
        if has_index_content(index_dir):
            return [
                f"the catalogue ({CATALOG_NAME}) was missing: every photo is indexed again "
                "(the saved states, made from the lost catalogue, are dropped)"
            ]
        return []
    if _catalog_ok(catalog):
        return []
    rows = _salvage(catalog)
    tmp = tmp_path(catalog)
    dropped = 0
    if rows is not None:
        dropped = _rebuild(tmp, rows)
    for suffix in ("-wal", "-shm") if rows is not None else ("", "-wal", "-shm"):
        unlink(os.fspath(catalog) + suffix)  # (a stale log must not meet the new file)
    if rows is None:
        fsync_dir(index_dir)
        return [
            f"the catalogue ({CATALOG_NAME}) was damaged beyond reading: every photo is "
            "indexed again (the saved states, made from it, are dropped)"
        ]
    os.replace(tmp, catalog)
    fsync_dir(index_dir)
    n = len(rows["images"][1])
    lost = f" ({dropped} damaged row(s) were dropped: their photos are indexed again)"
    return [
        f"the catalogue ({CATALOG_NAME}) was damaged: its {n} photo rows were copied"
        + (lost if dropped else "")
    ]


def _rebuild(path: Path, rows: dict[str, tuple[list[str], list[tuple]]]) -> int:
    """A new catalogue at ``path`` holding ``rows`` (same ids, same identity); returns the
    number of rows dropped because the damage left them incomplete (a NULL where the
    schema needs a value, or a second row with a path or file already taken): their
    photos are indexed again, images whose feature chunk row is gone are extracted again
    (:func:`_repair_chunks`)."""
    kv = dict(zip(*_column(rows["kv"], "key", "value"), strict=True))
    old_id = kv.get(CATALOG_ID_KEY)
    if isinstance(old_id, bytes):
        old_id = old_id.decode("utf-8", "replace")
    conn = sqlite3.connect(os.fspath(path), isolation_level=None)
    dropped = 0
    try:
        init_schema(conn, old_id if isinstance(old_id, str) and old_id else None)
        conn.execute("BEGIN IMMEDIATE")
        for table in ("chunks", "images", "settings", "kv"):
            cols, data = rows[table]
            info = {r[1]: bool(r[3]) for r in conn.execute(f"PRAGMA table_info({table})")}
            keep = [i for i, c in enumerate(cols) if c in info]
            needed = [j for j, i in enumerate(keep) if info[cols[i]]]
            names = ", ".join(cols[i] for i in keep)
            marks = ", ".join("?" * len(keep))
            skip = {"generation", CATALOG_ID_KEY} if table == "kv" else set()
            for r in data:
                if skip and r[0] in skip:
                    continue
                values = tuple(r[i] for i in keep)
                if any(values[j] is None for j in needed):
                    dropped += 1
                    continue
                try:  # (OR IGNORE: a damaged row may repeat a unique path or file)
                    cur = conn.execute(
                        f"INSERT OR IGNORE INTO {table}({names}) VALUES ({marks})", values
                    )
                except sqlite3.IntegrityError:  # (a CHECK the damaged value fails)
                    dropped += 1
                    continue
                dropped += cur.rowcount == 0
        conn.execute("COMMIT")
    finally:
        conn.close()
    return dropped


def _column(table: tuple[list[str], list[tuple]], *names: str) -> list[list]:
    cols, data = table
    return [[r[cols.index(n)] for r in data] for n in names]


def _repair_manifest(states: Path) -> list[str]:
    """Replace a damaged manifest by an empty one (with the writer lock held)."""
    try:
        manifest.read_snapshot(states)
        return []
    except IndexCorruptError as exc:
        why = _detail(exc)
    states.mkdir(exist_ok=True)
    empty = manifest.Snapshot(states, 0, None, {})
    manifest.commit(states, empty, {}, None, keep=False)
    return [
        f"the states manifest was damaged ({why}): the saved states were dropped (the search "
        "models and data are made again; a learned model must be learned again)"
    ]


def _repair_states(store: IndexStore) -> list[str]:
    """Drop the states that cannot be read whole, or that another catalogue made."""
    states = store.states_dir
    raw = manifest.read_snapshot(states)
    if not raw.legacy and raw.catalog != store.catalog_id:
        names = sorted({*raw.entries, *raw.damaged})
        store.save_states(dict.fromkeys(names))  # (a commit keeps none of them)
        if not names:
            return []
        return [f"saved states made from another catalogue were dropped: {', '.join(names)}"]
    bad = {name: _detail(IndexCorruptError(why)) for name, why in raw.damaged.items()}
    for name in raw.entries:
        try:
            raw.load_states([name])
        except (IndexCorruptError, FileNotFoundError) as exc:
            bad[name] = _detail(exc)
    if MODELS_STATE in bad and DATA_STATE in raw.entries:
        bad.setdefault(DATA_STATE, "made with the damaged search models")
    if not bad:
        return []
    store.save_states(dict.fromkeys(bad))
    for name in raw.damaged:  # unreadable legacy JSON files, which nothing names now
        unlink(os.fspath(states / f"{name}.json"))
    return [f"the saved state {name!r} was damaged ({why}): dropped" for name, why in bad.items()]


def _repair_chunks(store: IndexStore) -> list[str]:
    """Check every feature chunk; mark the images of damaged ones for re-extraction."""
    features = store.index_dir / "features"
    damaged: list[int] = []
    checksums: dict[int, str] = {}
    for cid, file, n_rows, checksum, used in store.chunk_table():
        path = features / file
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            ok = arr.ndim == 1 and arr.shape[0] == n_rows and arr.dtype.names is not None
            ok = ok and used <= n_rows
            del arr
            digest = file_digest(path)
        except Exception:  # (a header numpy cannot parse: SyntaxError, TokenError, ...)
            ok, digest = False, None
        if ok and checksum is not None and digest != checksum:
            ok = False
        if not ok:
            damaged.append(int(cid))
        elif checksum is None:
            checksums[int(cid)] = digest
    if checksums:
        store.set_chunk_checksums(checksums)
    n = store.drop_features(damaged, REEXTRACT_REASON)
    if not n and not damaged:
        return []
    return [
        f"{len(damaged)} feature chunk(s) were damaged: the features of {n} photo(s) are "
        "extracted again"
    ]


def _repair_arrays(store: IndexStore) -> list[str]:
    """Delete named arrays that cannot be read (their owners compute them again)."""
    folder = store.index_dir / "arrays"
    out = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name = entry.name
        if not (name.endswith(".npy") and NAME_RE.match(name) and entry.is_file()):
            continue
        try:
            store.load_array(name[: -len(".npy")])
        except StoreError:
            unlink(entry.path)
            out.append(f"the array {name} was damaged and deleted")
    return out
