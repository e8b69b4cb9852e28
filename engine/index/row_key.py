"""What ties a row of search data to the catalogue row it was made from
(:func:`row_keys`), and the ``images.row_key`` column that stores it
(:func:`add_row_keys`), so that a reader does not hash every row again on every open."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable

import numpy as np

__all__ = ["ROW_KEY_TRIGGER_SQL", "add_row_keys", "row_keys", "signed_keys"]


def row_keys(rows: Iterable[tuple[str | None, str | None]]) -> np.ndarray:
    """What ties a row of search data to the catalogue row it was made from: a 64-bit
    digest of the image's content hash and feature-settings key (a file whose content
    or features changed gets another key, and its search data is made again).

    Parameters
    ----------
    rows : iterable of (content_hash, fkey)
        ``images.content_hash`` and ``images.fkey`` (None allowed).

    Returns
    -------
    (n,) uint64
    """
    blake2b = hashlib.blake2b
    digests = b"".join(
        [
            blake2b(f"{h}\0{k}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
            for h, k in rows
        ]
    )  # (the little-endian integers of the digests)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


#: Keeps ``images.row_key`` (:func:`add_row_keys`) true: a statement that changes a
#: row's content hash or feature key without setting its key (as simile before the
#: column does) sets the key to NULL, which readers compute again (:func:`row_keys`).
ROW_KEY_TRIGGER_SQL = (
    "CREATE TRIGGER IF NOT EXISTS images_row_key AFTER UPDATE OF content_hash, fkey ON "
    "images WHEN NEW.row_key IS OLD.row_key AND (NEW.content_hash IS NOT "
    "OLD.content_hash OR NEW.fkey IS NOT OLD.fkey) BEGIN UPDATE images SET row_key = NULL "
    "WHERE id = NEW.id; END"
)


def signed_keys(rows: Iterable[tuple[str | None, str | None]]) -> list[int]:
    """:func:`row_keys` as the signed 64-bit integers ``images.row_key`` holds."""
    return row_keys(rows).view(np.int64).tolist()


def add_row_keys(conn: sqlite3.Connection) -> None:
    """Give ``images`` its ``row_key`` column if it has none: each row's :func:`row_keys`
    value (signed 64-bit), so that a reader need not hash every row's content hash and
    feature key again on every open; filled for every row, with the trigger that keeps
    it true (:data:`ROW_KEY_TRIGGER_SQL`), in one transaction. A NULL key is computed
    when read. A no-op when the column is there.

    Parameters
    ----------
    conn : sqlite3.Connection
        A writer's connection (autocommit; the transaction is opened here).
    """
    if any(r[1] == "row_key" for r in conn.execute("PRAGMA table_info(images)")):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE images ADD COLUMN row_key INTEGER")
        conn.execute(ROW_KEY_TRIGGER_SQL)
        rows = conn.execute("SELECT id, content_hash, fkey FROM images").fetchall()
        keys = signed_keys((h, k) for _, h, k in rows)
        conn.executemany(
            "UPDATE images SET row_key = ? WHERE id = ?",
            [(k, r[0]) for k, r in zip(keys, rows, strict=True)],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
