"""The rows of the catalogue's ``metadata`` table (schema 3,
:data:`engine.index.catalog.METADATA_SQL`): what each usable photo records about itself
(:class:`engine.io.metadata.PhotoMetadata`), as JSON of its known fields, with the date
taken repeated as a column to sort and filter by. Used by
:class:`engine.index.store.IndexStore`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engine.index.files import py_path
from engine.io.metadata import PhotoMetadata

#: A store's query function: ``q(sql, params) -> rows``.
Query = Callable[[str, Sequence[Any]], list[tuple]]

__all__ = [
    "METADATA_BY_ID_SQL",
    "METADATA_BY_PATH_SQL",
    "count_metadata",
    "count_stored",
    "delete_by_path",
    "has_metadata_table",
    "metadata_of",
    "metadata_row",
    "read_by_id",
    "read_by_path",
    "read_missing",
    "write_by_id",
    "write_by_path",
]

_SELECT = (
    "SELECT m.image_id, m.data FROM metadata m JOIN images i ON i.id = m.image_id "
    "WHERE i.status = 'ok'"
)
#: Upsert of one image's metadata, by path: ``(date_taken, data, path)``.
METADATA_BY_PATH_SQL = (
    "INSERT INTO metadata(image_id, date_taken, data) SELECT id, ?, ? FROM images "
    "WHERE path = ? AND status = 'ok' ON CONFLICT(image_id) DO UPDATE SET "
    "date_taken = excluded.date_taken, data = excluded.data"
)
#: Upsert of one image's metadata, by id: ``(date_taken, data, id)``.
METADATA_BY_ID_SQL = (
    "INSERT INTO metadata(image_id, date_taken, data) SELECT id, ?, ? FROM images "
    "WHERE id = ? AND status = 'ok' ON CONFLICT(image_id) DO UPDATE SET "
    "date_taken = excluded.date_taken, data = excluded.data"
)


def metadata_row(m: PhotoMetadata) -> tuple[str | None, str]:
    """The ``(date_taken, data)`` columns of a photo's row: its date taken and the JSON of
    the fields that are known.

    Parameters
    ----------
    m : PhotoMetadata

    Returns
    -------
    (str or None, str)
    """
    known = {k: v for k, v in m.to_json().items() if v is not None}
    return m.date_taken, json.dumps(known, sort_keys=True, ensure_ascii=False)


def metadata_of(data: str | bytes | None) -> PhotoMetadata:
    """The metadata of a stored ``data`` column (empty when the JSON is damaged).

    Parameters
    ----------
    data : str or bytes or None

    Returns
    -------
    PhotoMetadata
    """
    try:
        return PhotoMetadata.from_json(json.loads(data or "{}"))
    except (ValueError, TypeError):
        return PhotoMetadata()


def count_metadata(metas: Iterable[PhotoMetadata]) -> dict[str, int]:
    """How many photos have metadata (``"read"``), and of them a date taken, a camera and
    a place.

    Parameters
    ----------
    metas : iterable of PhotoMetadata

    Returns
    -------
    dict
        ``{"read": n, "date_taken": n, "camera": n, "gps": n}``.
    """
    out = {"read": 0, "date_taken": 0, "camera": 0, "gps": 0}
    for m in metas:
        out["read"] += 1
        out["date_taken"] += m.date_taken is not None
        out["camera"] += m.camera is not None
        out["gps"] += m.has_gps
    return out


#: :func:`count_metadata` in SQL: the rows were written from validated metadata
#: (:func:`metadata_row`), so a field is known when its JSON value is there and not empty
#: (CASE, not AND: SQLite may evaluate both sides, and damaged JSON raises)
_COUNT_SQL = """
SELECT count(*),
  coalesce(sum(CASE WHEN json_valid(m.data) THEN m.date_taken IS NOT NULL ELSE 0 END), 0),
  coalesce(sum(CASE WHEN json_valid(m.data) THEN
    coalesce(json_extract(m.data, '$.make'), '') != ''
    OR coalesce(json_extract(m.data, '$.model'), '') != '' ELSE 0 END), 0),
  coalesce(sum(CASE WHEN json_valid(m.data) THEN
    json_extract(m.data, '$.latitude') IS NOT NULL
    AND json_extract(m.data, '$.longitude') IS NOT NULL ELSE 0 END), 0)
FROM metadata m JOIN images i ON i.id = m.image_id WHERE i.status = 'ok'
"""


def count_stored(q: Query) -> dict[str, int]:
    """:func:`count_metadata` of every usable photo's stored metadata, counted by SQLite
    (one query, no row parsed in Python: 100,000 photos' summary in milliseconds).

    Parameters
    ----------
    q : callable
        The store's query function.

    Returns
    -------
    dict
        ``{"read": n, "date_taken": n, "camera": n, "gps": n}``.
    """
    read, date, camera, gps = q(_COUNT_SQL, ())[0]
    return {"read": read, "date_taken": date, "camera": camera, "gps": gps}


def has_metadata_table(q: Query) -> bool:
    """Whether the catalogue has the ``metadata`` table (schema 3)."""
    return bool(q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'metadata'", ()))


def read_by_id(q: Query, ids: Iterable[int] | None = None) -> dict[int, PhotoMetadata]:
    """The stored metadata of the usable images ``ids`` (default: all), by id.

    Parameters
    ----------
    q : callable
        The store's query function.
    ids : iterable of int, optional

    Returns
    -------
    dict of int to PhotoMetadata
        Images whose metadata was never read are absent; one that records nothing maps
        to an empty :class:`PhotoMetadata`.
    """
    if ids is None:
        rows = q(_SELECT + " ORDER BY m.image_id", ())
    else:
        wanted = [int(i) for i in ids]
        rows = []
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            rows += q(f"{_SELECT} AND m.image_id IN ({','.join('?' * len(part))})", part)
    return {int(i): metadata_of(d) for i, d in rows}


def read_by_path(q: Query) -> dict[str, PhotoMetadata]:
    """The stored metadata of every usable image, by path."""
    rows = q(
        "SELECT i.path, m.data FROM metadata m JOIN images i ON i.id = m.image_id "
        "WHERE i.status = 'ok'",
        (),
    )
    return {py_path(p): metadata_of(d) for p, d in rows}


def read_missing(q: Query) -> list[tuple[int, str]]:
    """``(id, path)`` of the usable images without a metadata row, ascending id."""
    rows = q(
        "SELECT id, path FROM images WHERE status = 'ok' AND id NOT IN "
        "(SELECT image_id FROM metadata) ORDER BY id",
        (),
    )
    return [(int(i), py_path(p)) for i, p in rows]


def write_by_path(
    conn: sqlite3.Connection,
    items: Iterable[tuple[str, PhotoMetadata]],
    norm: Callable[[str], Any],
) -> None:
    """Upsert the metadata of ``(path, metadata)`` pairs (inside the caller's
    transaction); ``norm``: the catalogue form of a path."""
    conn.executemany(METADATA_BY_PATH_SQL, [(*metadata_row(m), norm(p)) for p, m in items])


def write_by_id(conn: sqlite3.Connection, items: Mapping[int, PhotoMetadata]) -> int:
    """Upsert the metadata of images by id (inside the caller's transaction); returns
    the rows written."""
    before = conn.total_changes
    conn.executemany(METADATA_BY_ID_SQL, [(*metadata_row(m), int(i)) for i, m in items.items()])
    return conn.total_changes - before


def delete_by_path(conn: sqlite3.Connection, keys: Iterable[Any]) -> None:
    """Delete the metadata of the images at the catalogue paths ``keys`` (inside the
    caller's transaction)."""
    conn.executemany(
        "DELETE FROM metadata WHERE image_id = (SELECT id FROM images WHERE path = ?)",
        [(k,) for k in keys],
    )
