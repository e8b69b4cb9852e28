"""More of :class:`engine.index.store.IndexStore`: its model states (one consistent
version of every state, :mod:`engine.index.manifest`), the catalogue rows that repair and
readers need, and the photos' metadata. Mixed into ``IndexStore``; not used on its own
(the methods use the store's connection, lock and writer check)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from engine.index import keys
from engine.index import states as _states
from engine.index.catalog import CHUNK_TABLE_SQL, forget_chunks, row_keys
from engine.index.files import check_name, py_path
from engine.index.manifest import Snapshot
from engine.index.metadata_rows import (
    count_stored,
    has_metadata_table,
    read_by_id,
    read_by_path,
    read_missing,
    write_by_id,
)
from engine.io.metadata import PhotoMetadata

__all__ = ["StoreRows", "StoreStates", "UsableRows"]


class UsableRows(NamedTuple):
    """:meth:`IndexStore.usable_rows`: ``generation`` (int), ``ids`` ``(n,) int64``,
    ``keys`` ``(n,) uint64`` (:func:`row_keys`) and ``paths`` (n str)."""

    generation: int
    ids: np.ndarray
    keys: np.ndarray
    paths: Sequence[str]


#: ``images.row_key``, then the content hash and feature key of a row whose key is not
#: stored (NULL), which is computed.
_KEY_COLS = (
    "row_key, CASE WHEN row_key IS NULL THEN content_hash END, "
    "CASE WHEN row_key IS NULL THEN fkey END"
)


class _PathsOf(Sequence[str]):
    """The paths of the usable rows ``ids`` of a writer's store, read on first use (one
    query; the writer lock keeps them those of the ids)."""

    def __init__(self, store: Any, ids: np.ndarray) -> None:
        self._store, self._ids = store, ids
        self._paths: list[str] | None = None

    def _load(self) -> list[str]:
        if self._paths is None:
            rows = self._store._q(
                "SELECT id, path FROM images NOT INDEXED WHERE status = 'ok' ORDER BY id"
            )
            got = dict(rows)
            self._paths = [py_path(got[int(i)]) for i in self._ids]
        return self._paths

    def __len__(self) -> int:
        return int(self._ids.size)

    def __getitem__(self, i):  # type: ignore[override]
        return self._load()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())


class StoreStates:
    """The model-state methods of :class:`engine.index.store.IndexStore`."""

    # ------------------------------------------------------------------ model states

    @property
    def states_dir(self) -> Path:
        """The ``states`` folder."""
        return self.index_dir / "states"

    def snapshot(self) -> Snapshot:
        """The current version of the saved states: :meth:`StateVersions.snapshot
        <engine.index.manifest.StateVersions.snapshot>`."""
        return self._states.snapshot()

    def load_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """States ``names`` (name -> scalars and arrays), all from ONE version:
        :meth:`load_version` (states held back by :meth:`hold_states` as held)."""
        names = list(names)
        held = self._held or {}
        out = self._states.load_states([n for n in names if n not in held]) if names else {}
        return {n: dict(held[n]) if n in held else out[n] for n in names}

    def load_version(self, names: Iterable[str]) -> tuple[Snapshot, dict[str, dict[str, Any]]]:
        """States ``names``, all from ONE version, and that version
        (:meth:`engine.index.manifest.StateVersions.load_version`)."""
        return self._states.load_version(names)

    def save_states(
        self,
        states: Mapping[str, Mapping[str, Any] | None],
        *,
        parts: Mapping[str, Sequence[str]] | None = None,
        written: Mapping[str, tuple[Mapping[str, Any], Sequence[str]]] | None = None,
    ) -> int:
        """Commit several states together, atomically (readers see all of them or none):
        :meth:`StateVersions.save_states <engine.index.manifest.StateVersions.save_states>`
        (``written``: states made of files already written, e.g. segments).
        Returns the new version's generation."""
        self._require_writer()
        held = self._held
        if held is not None:
            states = dict(states)
            hold = {n: st for n, st in states.items() if n in self._held_names}
            if len(hold) == len(states) and not written:  # only held states: hold back
                for n, st in hold.items():
                    if st is None:
                        held.pop(n, None)
                    else:
                        held[n] = dict(st)
                return self.snapshot().generation
            states = {**held, **states}
        gen = self._states.save_states(states, parts=parts, written=written)
        if held is not None:
            held.clear()
        return gen

    @contextmanager
    def hold_states(self, names: Iterable[str]) -> Iterator[None]:
        """Hold back commits of states ``names``: until the block ends they are kept in
        memory (this store's :meth:`load_state` and :meth:`has_state` see them, other
        readers do not) and committed together with the next commit of any other state,
        in ONE version. What is still held when the block ends is dropped (a run that
        stopped before its commit leaves the previous version, whole).

        ``simile cluster`` holds the grouping vocabulary it refits until it commits the
        grouping made with it: a crash in between can no longer pair the old grouping
        and classifier with the new vocabulary (reliability issue, point 4).
        """
        if self._held is not None:
            raise RuntimeError("states are already held back")
        self._held, self._held_names = {}, frozenset(check_name(n) for n in names)
        try:
            yield
        finally:
            self._held, self._held_names = None, frozenset()

    def adopt_legacy_states(self) -> bool:
        """Move per-state JSON files of an older index into the manifest (done when a
        writer opens the store): :meth:`StateVersions.adopt_legacy
        <engine.index.manifest.StateVersions.adopt_legacy>`."""
        self._require_writer()
        return self._states.adopt_legacy()

    def save_state(self, name: str, state: dict[str, Any], *, parts: Sequence[str] = ()) -> None:
        """Atomically save one model state (``to_state()`` dict): scalars in the manifest,
        arrays in a new ``states/<name>.<token>.npz``; ``parts``: files of more of its
        arrays, written before (:meth:`write_state_part`). States that must agree with
        each other are saved with ONE call of :meth:`save_states`."""
        self.save_states({name: state}, parts={name: parts})

    def write_state_part(self, name: str, arrays: dict[str, np.ndarray]) -> str:
        """Write (and sync) arrays of a state that :meth:`save_state` will name in
        ``parts``; returns the file's name. Until then no state refers to it: a run that
        stops before leaves a file that :meth:`gc` deletes."""
        self._require_writer()
        return _states.write_state_part(self.states_dir, name, arrays)

    def load_state(self, name: str) -> dict[str, Any]:
        """Load a state saved by :meth:`save_state`. ``KeyError`` if absent; see
        :meth:`load_states` to read several from one version."""
        return self.load_states([name])[name]

    def has_state(self, name: str) -> bool:
        """Whether state ``name`` exists (in the current version)."""
        if self._held and name in self._held:
            return True
        return self.snapshot().has(check_name(name))

    def delete_state(self, name: str) -> None:
        """Delete state ``name`` (a commit without it; its files are then collected)."""
        self._require_writer()
        if self.has_state(name):
            self.save_states({name: None})

    # ------------------------------------------------------------------ repair support

    def content_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the usable images, ascending, and their :func:`row_keys`, read in one
        query: ``(n,) int64`` and ``(n,) uint64``."""
        rows = self._q(
            f"SELECT id, {self._key_cols()} FROM images NOT INDEXED WHERE status = 'ok' "
            "ORDER BY id"
        )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return ids, self._keys_of(rows)

    def usable_rows(self) -> UsableRows:
        """The usable images as ONE state of the catalogue: its generation, ids (ascending),
        :func:`row_keys` and paths, from one query (a writer committing meanwhile cannot
        make the ids and paths disagree). The generation is never newer than the rows."""
        gen = self.generation  # (read first: an older generation only refreshes again)
        if not self.readonly and self._key_cols() == _KEY_COLS:
            # a writer: no other process writes, so the paths can be read when needed
            # (an update of a few photos does not need them: it reads their ids and keys)
            got = self._q(
                "SELECT count(*), group_concat(id), group_concat(ifnull(row_key, 'n')) "
                "FROM images NOT INDEXED WHERE status = 'ok'"
            )[0]
            n, ids_s, keys_s = got
            if not n:
                return UsableRows(gen, np.zeros(0, np.int64), np.zeros(0, np.uint64), [])
            if "n" not in keys_s:
                ids = np.array(ids_s.split(","), np.int64)
                keys = np.array(keys_s.split(","), np.int64).view(np.uint64)
                if ids.size == n and keys.size == n and (ids[1:] > ids[:-1]).all():
                    return UsableRows(gen, ids, keys, _PathsOf(self, ids))
        # (NOT INDEXED: nearly every row is usable, and a scan of the table reads them in
        # id order at about 0.6x the cost of looking each up through the status index)
        rows = self._q(
            f"SELECT id, {self._key_cols()}, path, (SELECT value FROM kv WHERE key = "
            "'generation') FROM images NOT INDEXED WHERE status = 'ok' ORDER BY id"
        )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return UsableRows(
            int(rows[0][5]) if rows else gen,
            ids,
            self._keys_of(rows),
            [py_path(r[4]) for r in rows],
        )

    def _key_cols(self) -> str:
        """The columns to read a row's key from (:meth:`_keys_of`)."""
        if getattr(self, "_row_key_column", None) is None:
            cols = self._q("PRAGMA table_info(images)")
            self._row_key_column = any(c[1] == "row_key" for c in cols)
        return _KEY_COLS if self._row_key_column else "NULL, content_hash, fkey"

    @staticmethod
    def _keys_of(rows: Sequence[tuple]) -> np.ndarray:
        """The :func:`row_keys` ``(n,) uint64`` of rows read with :meth:`_key_cols` after
        their id: the stored ones (``images.row_key``: :func:`engine.index.catalog.
        add_row_keys`), the others (NULL) computed from the content hash and feature key."""
        keys = np.fromiter((r[1] or 0 for r in rows), dtype=np.int64, count=len(rows))
        keys = keys.view(np.uint64)
        missing = [i for i, r in enumerate(rows) if r[1] is None]
        if missing:
            keys[missing] = row_keys((rows[i][2], rows[i][3]) for i in missing)
        return keys

    def stale_paths(self, fkey: str) -> set[str]:
        """Paths of the rows not extracted with feature-settings key ``fkey`` (another
        key, or none: failed rows, forgotten chunks): :meth:`feature_keys` without
        reading the path of every row."""
        return {
            py_path(p) for (p,) in self._q("SELECT path FROM images WHERE fkey IS NOT ?", (fkey,))
        }

    def file_rows(
        self, paths: Iterable[str | os.PathLike]
    ) -> dict[str, tuple[str | None, str | None]]:
        """``path -> (content hash, fkey)`` of the rows of ``paths`` (unknown ones left
        out), looked up by path: costs what ``paths`` holds, not the whole catalogue."""
        keys = [self.norm_path(p) for p in paths]
        out: dict[str, tuple[str | None, str | None]] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            sql = f"SELECT path, content_hash, fkey FROM images WHERE path IN ({marks})"
            for p, h, k in self._q(sql, part):
                out[py_path(p)] = (h, k)
        return out

    def image_sizes(self, ids: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``id -> (width, height)`` of the catalogue rows of ``ids`` (unknown ids left
        out), looked up by id, 500 at a time: costs what ``ids`` holds."""
        keys = sorted({int(i) for i in ids})
        out: dict[int, tuple[int, int]] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            sql = f"SELECT id, width, height FROM images WHERE id IN ({marks})"
            for i, w, h in self._q(sql, part):
                out[int(i)] = (int(w), int(h))
        return out

    def chunk_table(self) -> list[tuple[int, str, int, str | None, int]]:
        """``(id, file, n_rows, checksum, rows used)`` of every chunk, ascending id
        (:data:`engine.index.catalog.CHUNK_TABLE_SQL`)."""
        return self._q(CHUNK_TABLE_SQL)

    def set_chunk_checksums(self, checksums: Mapping[int, str]) -> None:
        """Record the checksums of chunks (id -> :func:`engine.index.files.file_digest`)
        written before chunks had them."""
        self._require_writer()
        with self._transaction() as conn:
            rows = [(d, int(c)) for c, d in checksums.items()]
            conn.executemany("UPDATE chunks SET checksum = ? WHERE id = ?", rows)

    def drop_features(self, chunk_ids: Iterable[int], reason: str) -> int:
        """Forget damaged feature chunks, their images to be extracted again
        (:func:`engine.index.catalog.forget_chunks`); returns the number of images."""
        self._require_writer()
        with self._transaction() as conn:
            n = forget_chunks(conn, [int(c) for c in chunk_ids], reason)
        self._chunks.clear()
        return n


def _renamed(data: Any, renamed: Mapping[str, str]) -> Any:
    """``data`` (parsed JSON) with every string that is an old path replaced by the new."""
    if isinstance(data, str):
        return renamed.get(data, data)
    if isinstance(data, list):
        return [_renamed(v, renamed) for v in data]
    if isinstance(data, dict):
        return {k: _renamed(v, renamed) for k, v in data.items()}
    return data


class StoreRows:
    """The metadata and catalogue-row methods of :class:`engine.index.store.IndexStore`."""

    def rename(self, moves: Mapping[str, tuple[str, int, int]]) -> int:
        """Give photos that were moved or renamed their new path (old path -> ``(new
        path, size, mtime_ns)``) in one transaction: they keep their row id, features
        and metadata, and the kv entries that name photos (:data:`engine.index.keys.
        PATH_KV_KEYS`: marks, the person's grouping) name the new path. Returns the rows
        changed."""
        self._require_writer()
        rows = [
            (self.norm_path(new), int(size), int(mtime), self.norm_path(old))
            for old, (new, size, mtime) in moves.items()
        ]
        if not rows:
            return 0
        renamed = {}
        for old, (new, _size, _mtime) in moves.items():
            renamed[str(old)] = renamed[self.norm_path(old)] = self.norm_path(new)
        with self._transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                "UPDATE images SET path = ?, size = ?, mtime_ns = ? WHERE path = ?", rows
            )
            n = conn.total_changes - before
            for key in keys.PATH_KV_KEYS:  # the photo keeps its marks and its group
                got = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
                if got is None or not got[0]:
                    continue
                text = got[0].decode("utf-8") if isinstance(got[0], bytes) else str(got[0])
                try:
                    data = json.loads(text)
                except ValueError:
                    continue  # (a damaged entry: its owner reports it)
                new_text = json.dumps(_renamed(data, renamed))
                if new_text != text:
                    conn.execute("UPDATE kv SET value = ? WHERE key = ?", (new_text, key))
            return n

    # ------------------------------------------------------------------ metadata

    def _metadata_table(self) -> bool:
        """Whether the catalogue has its ``metadata`` table (schema 3; a reader of an
        older catalogue has none: no metadata)."""
        with self._mutex:
            self._has_metadata = self._has_metadata or has_metadata_table(self._q)
            return self._has_metadata

    def metadata(self, ids: Iterable[int] | None = None) -> dict[int, PhotoMetadata]:
        """What the usable photos ``ids`` (default: all) record about themselves, by id
        (:func:`engine.index.metadata_rows.read_by_id`; photos whose metadata was never
        read are absent)."""
        return read_by_id(self._q, ids) if self._metadata_table() else {}

    def path_metadata(self) -> dict[str, PhotoMetadata]:
        """:meth:`metadata` of every usable photo, by path."""
        return read_by_path(self._q) if self._metadata_table() else {}

    def missing_metadata(self) -> list[tuple[int, str]]:
        """``(id, path)`` of the usable photos whose metadata was never read (indexed
        before the catalogue kept it), ascending id."""
        return read_missing(self._q) if self._metadata_table() else []

    def set_metadata(self, items: Mapping[int, PhotoMetadata]) -> int:
        """Store the metadata of photos already indexed (id -> metadata) in one
        transaction; returns the rows written (ids no longer usable are skipped)."""
        self._require_writer()
        if not items or not self._metadata_table():
            return 0
        with self._transaction() as conn:
            return write_by_id(conn, items)

    def metadata_counts(self) -> dict[str, int]:
        """:func:`engine.index.metadata_rows.count_metadata` of :meth:`metadata`, counted
        in SQL (:func:`~engine.index.metadata_rows.count_stored`)."""
        if not self._metadata_table():
            return {"read": 0, "date_taken": 0, "camera": 0, "gps": 0}
        with self._sql_errors():
            return count_stored(self._q)
