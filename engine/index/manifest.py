"""Versions of an index's saved states: one manifest names the files of one version.

Everything that must agree -- the search models and the search data, a grouping and its
classifier, a learned model and its representation -- is committed together, as one
*version* of the states, by replacing one small file atomically::

    states/MANIFEST.json
    {
      "format": "simile-states",      (this module's :data:`FORMAT`)
      "version": 1,                   (its layout, :data:`FORMAT_VERSION`; newer: refused)
      "generation": 42,               (+1 per commit)
      "catalog": "9c0f...",           (identity of the catalogue the states were made
                                       from, ``kv['catalog.id']``; states of another
                                       catalogue are never used)
      "states": {
        "search.models": {"scalars": {"n_fit": 500, ...},
                          "files": ["search.models.5d0c1e2f3a4b.npz"]},
        "search.data":   {"scalars": {"bow.n_words": 81234, ...},
                          "files": ["search.data.0a1b2c3d4e5f.npz",
                                    "search.data.77aa88bb99cc.npz"]},
        ...
      },
      "checksum": "..."               (BLAKE2b-128 of the rest, canonical JSON)
    }

A state is its JSON scalars and an ordered list of immutable array files (``np.savez``,
no pickle), each written once under a fresh random name and never changed: the first
holds the arrays saved with the state, the others parts written ahead
(:func:`engine.index.states.write_state_part`). A commit (:func:`commit`) writes the new
files, fsyncs them, then replaces the manifest (temporary file, fsync, rename, fsync of
the folder). A crash, a full disk or a power cut at any instant therefore leaves the
old manifest, naming the old files, which are all still there, or the new one, naming
only complete files. A reader reads the manifest ONCE (:func:`read_snapshot`), then
opens the files of the states it wants (:meth:`Snapshot.open`); holding them open it
keeps its version even when a writer commits the next one and deletes the old files
(POSIX; a reader that finds a file gone re-reads the manifest: it never mixes two
versions). Files that the manifest does not name are collected (:func:`collect`): right
after the commit that stopped naming them, or by the next writer's clean-up.

A segmented state (immutable segments plus a manifest naming the live ones, as Lucene's
commit points do; the search data, :mod:`engine.index.segments`) fits the same record: it
lists its segments' files as its ``files``, in order, and how many files each segment has
in its scalar :data:`~engine.index.states.SEGMENTS_KEY`; adding a segment is a commit
naming one more file (:meth:`StateVersions.save_states` with ``written``), merging
segments a commit naming the merged file instead of the old ones, and the old segments
are collected when no manifest names them. There is one design, not two: a state
without that scalar is the one-segment case.

Indexes written before the manifest kept one ``states/<name>.json`` per state; while
there is no manifest they are read as the states (:func:`read_snapshot`, ``legacy``),
and the first commit adopts them into the manifest and deletes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from engine.index import files as _files
from engine.index.files import STATE_NPZ_RE, TMP_RE, check_name, unlink
from engine.index.states import load_state_files, read_legacy_state, write_state_files
from engine.index.store_errors import IndexCorruptError, IndexVersionError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "SNAPSHOT_TRIES",
    "Snapshot",
    "StateEntry",
    "StateVersions",
    "collect",
    "commit",
    "read_snapshot",
]

#: The manifest's file name in the ``states`` folder.
MANIFEST_NAME = "MANIFEST.json"
FORMAT = "simile-states"
# 2: a state may be segmented (engine.index.states.SEGMENTS_KEY: the search data); a
# simile that reads 1 only would merge the segments' arrays, so it is told to upgrade
FORMAT_VERSION = 2
# a state's JSON written before the manifest (the clean-up deletes it only once a
# manifest exists, and only when it reads as such a state)
LEGACY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.json$")


@dataclass(frozen=True)
class StateEntry:
    """One state of a version: its JSON scalars and its array files, in order.

    Attributes
    ----------
    scalars : dict of str to int, float, str, bool or None
    files : tuple of str
        File names in the ``states`` folder (:data:`engine.index.files.STATE_NPZ_RE`).
    """

    scalars: Mapping[str, Any]
    files: tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """One version of the states, as read from the manifest at one instant.

    Attributes
    ----------
    states_dir : Path
        The ``states`` folder.
    generation : int
        The manifest's commit counter (0: no manifest yet).
    catalog : str or None
        Identity of the catalogue the states were made from (None: unknown).
    entries : mapping of str to StateEntry
        The readable states.
    legacy : bool
        Read from per-state JSON files (an index written before the manifest).
    damaged : mapping of str to str
        States whose legacy JSON is unreadable: name -> one-line reason.
    hidden : tuple of str
        States the manifest names but that belong to another catalogue
        (:meth:`disowned`); they are not readable.
    hidden_files : tuple of str
        Their files (kept until a commit stops naming them).
    """

    states_dir: Path
    generation: int
    catalog: str | None
    entries: Mapping[str, StateEntry]
    legacy: bool = False
    damaged: Mapping[str, str] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()

    def has(self, name: str) -> bool:
        """Whether state ``name`` is in this version (readable or damaged)."""
        return name in self.entries or name in self.damaged

    def files(self) -> set[str]:
        """Every array file this version names (hidden states' included)."""
        return {f for e in self.entries.values() for f in e.files} | set(self.hidden_files)

    def token(self, names: Iterable[str]) -> tuple:
        """What identifies the version of states ``names``: their file names (unique
        forever), None for an absent one."""
        return tuple(self.entries[n].files if n in self.entries else None for n in names)

    def disowned(self) -> Snapshot:
        """This version seen from another catalogue: no state readable, all hidden."""
        return Snapshot(
            self.states_dir, self.generation, self.catalog, {}, self.legacy, {},
            tuple(sorted({*self.entries, *self.damaged, *self.hidden})),
            tuple(sorted(self.files())),
        )  # fmt: skip

    def open(self, names: Iterable[str]) -> dict[str, dict[str, IO[bytes]]]:
        """Open the files of states ``names`` (each present): name -> file -> handle.

        Raises
        ------
        FileNotFoundError
            A file is gone: a writer committed a newer version and collected it (read
            the manifest again), or it was deleted.
        IndexCorruptError
            A state is damaged (its legacy JSON), or a file cannot be read.
        """
        out: dict[str, dict[str, IO[bytes]]] = {}
        try:
            for name in names:
                if name in self.damaged:
                    raise IndexCorruptError(self.damaged[name])
                out[name] = handles = {}
                for file in self.entries[name].files:
                    try:
                        handles[file] = open(self.states_dir / file, "rb")
                    except FileNotFoundError:
                        raise
                    except OSError as exc:
                        raise IndexCorruptError(
                            f"the saved state {name!r} of the index "
                            f"{self.states_dir.parent} cannot be read (states/{file}: {exc})",
                            path=self.states_dir / file,
                        ) from exc
        except BaseException:
            close_all(out)
            raise
        return out

    def load_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """States ``names`` of this version, each a dict of scalars and arrays.

        Raises
        ------
        KeyError
            A state is not in this version.
        FileNotFoundError
            A file is gone (see :meth:`open`).
        IndexCorruptError
            A state is damaged.
        """
        names = list(names)
        for name in names:
            check_name(name)
            if not self.has(name):
                raise KeyError(f"no state {name!r} in index {self.states_dir.parent}")
        handles = self.open(names)
        try:
            return {
                name: load_state_files(
                    self.states_dir, name, self.entries[name].scalars, handles[name]
                )
                for name in names
            }
        finally:
            close_all(handles)


def close_all(handles: Mapping[str, Mapping[str, IO[bytes]]]) -> None:
    """Close every handle of :meth:`Snapshot.open`."""
    for per_state in handles.values():
        for fh in per_state.values():
            fh.close()


def _digest(doc: Mapping[str, Any]) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _damaged(states: Path, why: str) -> IndexCorruptError:
    return IndexCorruptError(
        f"the states manifest of the index {states.parent} is damaged "
        f"(states/{MANIFEST_NAME}: {why})",
        path=states / MANIFEST_NAME,
    )


def _entry(states: Path, name: Any, raw: Any) -> StateEntry:
    ok = isinstance(name, str) and isinstance(raw, dict)
    scalars, files = (raw.get("scalars"), raw.get("files")) if ok else (None, None)
    if not (
        ok
        and isinstance(scalars, dict)
        and isinstance(files, list)
        and files
        and all(isinstance(f, str) and STATE_NPZ_RE.match(f) for f in files)
    ):
        raise _damaged(states, f"bad entry {name!r}")
    return StateEntry(scalars, tuple(files))


def read_snapshot(states: Path) -> Snapshot:
    """The current version of the states in the folder ``states`` (one read of the
    manifest; the legacy per-state JSON files when there is no manifest yet).

    Raises
    ------
    IndexCorruptError
        The manifest is damaged (unreadable, not JSON, bad checksum or entries).
    IndexVersionError
        The manifest was written by a newer simile.
    """
    path = states / MANIFEST_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return _legacy_snapshot(states)
    except OSError as exc:
        raise _damaged(states, str(exc)) from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _damaged(states, f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _damaged(states, "not a simile states manifest")
    version = doc.get("version")
    if not isinstance(version, int):
        raise _damaged(states, "no format version")
    if version > FORMAT_VERSION:
        raise IndexVersionError(
            f"the states of the index {states.parent} were written by a newer simile "
            f"(manifest version {version}); upgrade simile or rebuild the index"
        )
    checksum = doc.pop("checksum", None)
    if checksum != _digest(doc):
        raise _damaged(states, "checksum mismatch")
    generation, catalog, entries = doc.get("generation"), doc.get("catalog"), doc.get("states")
    if not isinstance(generation, int) or not isinstance(entries, dict):
        raise _damaged(states, "no generation or states")
    if catalog is not None and not isinstance(catalog, str):
        raise _damaged(states, "bad catalogue identity")
    return Snapshot(
        states, generation, catalog, {n: _entry(states, n, e) for n, e in entries.items()}
    )


def _legacy_snapshot(states: Path) -> Snapshot:
    """The states of an index written before the manifest: one JSON per state."""
    entries: dict[str, StateEntry] = {}
    damaged: dict[str, str] = {}
    try:
        names = sorted(e.name for e in os.scandir(states))
    except FileNotFoundError:
        names = []
    for file in names:
        if not LEGACY_RE.match(file) or file == MANIFEST_NAME:
            continue
        name = file[: -len(".json")]
        try:
            scalars, files = read_legacy_state(states / file)
        except IndexCorruptError as exc:
            damaged[name] = str(exc)
            continue
        entries[name] = StateEntry(scalars, tuple(files))
    return Snapshot(states, 0, None, entries, legacy=True, damaged=damaged)


def commit(
    states: Path,
    base: Snapshot,
    changes: Mapping[str, StateEntry | None],
    catalog: str | None,
    *,
    keep: bool = True,
) -> Snapshot:
    """Write the next version: ``base``'s states (when ``keep``) with ``changes`` applied
    (None deletes a state), made from catalogue ``catalog``; atomic.

    The files the changes name must be written (and synced) already. Nothing is
    deleted here: :func:`collect` does that once the commit has succeeded.

    Returns
    -------
    Snapshot
        The new version.

    Raises
    ------
    OSError
        The manifest could not be written (e.g. ENOSPC): ``base`` is still the current
        version, untouched.
    """
    entries = dict(base.entries) if keep else {}
    for name, entry in changes.items():
        check_name(name)
        if entry is None:
            entries.pop(name, None)
        else:
            entries[name] = entry
    generation = base.generation + 1
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "generation": generation,
        "catalog": catalog,
        "states": {
            n: {"scalars": dict(e.scalars), "files": list(e.files)}
            for n, e in sorted(entries.items())
        },
    }
    doc["checksum"] = _digest(doc)
    payload = json.dumps(doc, sort_keys=True, indent=1, allow_nan=True).encode("utf-8")
    _files.atomic_write(states / MANIFEST_NAME, lambda fh: fh.write(payload))
    return Snapshot(states, generation, catalog, entries)


def collect(states: Path, current: Snapshot | None = None) -> int:
    """Delete the files of the ``states`` folder that no version names: array files the
    manifest does not name, temporary files, and (once a manifest exists) the legacy
    JSON files it adopted. Returns the number of files deleted.

    Only the store's own file patterns are ever deleted. Nothing is deleted while the
    manifest (or a legacy JSON) is unreadable: which files it names is then unknown.

    Parameters
    ----------
    states : Path
    current : Snapshot, optional
        The version just committed (default: read it).
    """
    try:
        snap = read_snapshot(states) if current is None else current
    except (IndexCorruptError, IndexVersionError):
        snap = None
    removed = 0
    try:
        entries = list(os.scandir(states))
    except FileNotFoundError:
        return 0
    for entry in entries:
        name = entry.name
        if not entry.is_file(follow_symlinks=False):
            continue
        if TMP_RE.match(name):
            removed += unlink(entry.path)
        elif snap is None or snap.damaged:
            continue
        elif STATE_NPZ_RE.match(name) and name not in snap.files():
            removed += unlink(entry.path)
        elif not snap.legacy and LEGACY_RE.match(name) and name != MANIFEST_NAME:
            try:
                read_legacy_state(Path(entry.path))
            except IndexCorruptError:
                continue  # not one of ours (or unreadable): left alone
            removed += unlink(entry.path)
    return removed


# what re-reading the manifest may take when a writer keeps committing meanwhile
SNAPSHOT_TRIES = 5


class StateVersions:
    """The saved states of one index: read one version, commit the next.

    What :class:`engine.index.store.IndexStore` delegates its state methods to (it checks
    the writer lock first).

    Parameters
    ----------
    states_dir : Path
        The index's ``states`` folder.
    catalog_id : str or None
        Identity of the index's catalogue: the states a version names are used only
        when they were made from it.
    mutex : threading.RLock
        Serialises this process's commits.
    reread : callable, optional
        ``reread() -> str or None``: the catalogue's identity read again. Called while it
        is None and a manifest names one: a writer migrated the catalogue since.
    """

    def __init__(
        self,
        states_dir: Path,
        catalog_id: str | None,
        mutex: Any,
        reread: Callable[[], str | None] | None = None,
    ) -> None:
        self.states_dir = states_dir
        self.catalog_id = catalog_id
        self.mutex = mutex
        self.reread = reread

    def snapshot(self) -> Snapshot:
        """The current version (one read of the manifest); states made from another
        catalogue are hidden (:meth:`Snapshot.disowned`).

        Raises
        ------
        IndexCorruptError
            The manifest is damaged.
        """
        snap = read_snapshot(self.states_dir)
        if not snap.legacy and snap.catalog != self.catalog_id:
            if self.catalog_id is None and self.reread is not None:
                self.catalog_id = self.reread()
            if snap.catalog != self.catalog_id:
                return snap.disowned()
        return snap

    def load_states(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """States ``names``, all from ONE version (:meth:`load_version`)."""
        return self.load_version(names)[1]

    def load_version(self, names: Iterable[str]) -> tuple[Snapshot, dict[str, dict[str, Any]]]:
        """States ``names``, all from ONE version, and that version: a writer that commits
        meanwhile (and collects the files of the version read) makes this read the
        manifest again; two versions are never mixed.

        Returns
        -------
        snapshot : Snapshot
            The version read.
        states : dict of str to dict
            name -> the state's scalars and arrays, as saved.

        Raises
        ------
        KeyError
            A state is absent.
        IndexCorruptError
            A state (or the manifest) is damaged, or a file of it is missing.
        """
        names = list(names)
        seen = None
        missing: FileNotFoundError | None = None
        for _ in range(SNAPSHOT_TRIES):
            snap = self.snapshot()
            try:
                return snap, snap.load_states(names)
            except FileNotFoundError as exc:
                missing = exc
                if seen is not None and seen.token(names) == snap.token(names):
                    break  # the same version twice: the file is really gone
                seen = snap
        path = Path(getattr(missing, "filename", None) or "?")
        raise IndexCorruptError(
            f"a saved state of the index {self.states_dir.parent} is damaged "
            f"(states/{path.name}: missing)",
            path=path,
        )

    def save_states(
        self,
        states: Mapping[str, Mapping[str, Any] | None],
        *,
        parts: Mapping[str, Sequence[str]] | None = None,
        written: Mapping[str, tuple[Mapping[str, Any], Sequence[str]]] | None = None,
    ) -> int:
        """Commit several states together, atomically: readers see all of them or none.

        Parameters
        ----------
        states : mapping of str to state dict or None
            name -> a model's ``to_state()`` dict: scalars (int, float, str, bool, None)
            and arrays (no object dtype); None deletes the state. States not named keep
            their version (unless they were made from another catalogue: dropped).
        parts : mapping of str to sequence of str, optional
            name -> files of more arrays of that state, written before by
            :func:`engine.index.states.write_state_part`.
        written : mapping of str to (scalars, files), optional
            States made of files already written (:func:`write_state_part`, or named by
            the current version: a segmented state keeps its old segments and adds a
            new one, :mod:`engine.index.segments`): name -> its JSON scalars and files.

        Returns
        -------
        int
            The new version's generation.

        Raises
        ------
        OSError
            Writing failed (e.g. ENOSPC, a full disk): the previous version is intact
            and the new files are deleted again.
        IndexCorruptError
            The manifest is damaged (repair the index first).
        """
        parts = parts or {}
        given = written
        with self.mutex:
            base = read_snapshot(self.states_dir)
            mine = base.legacy or base.catalog == self.catalog_id
            written: list[str] = []
            try:
                changes: dict[str, StateEntry | None] = {}
                for name, state in states.items():
                    if state is None:
                        changes[name] = None
                        continue
                    scalars, files = write_state_files(
                        self.states_dir, name, state, parts.get(name, ())
                    )
                    written.append(files[0])
                    changes[name] = StateEntry(scalars, tuple(files))
                for name, (scalars, files) in (given or {}).items():
                    check_name(name)
                    files = tuple(str(f) for f in files)
                    for file in files:
                        if not (STATE_NPZ_RE.match(file) and file.startswith(f"{name}.")):
                            raise ValueError(f"{file!r} is not a file of state {name!r}")
                        if not (self.states_dir / file).is_file():
                            raise FileNotFoundError(f"state file {file} was not written")
                    if not files:
                        raise ValueError(f"state {name!r} names no file")
                    written.extend(f for f in files if f not in base.files())
                    changes[name] = StateEntry(dict(scalars), files)
                snap = commit(self.states_dir, base, changes, self.catalog_id, keep=mine)
            except BaseException:
                self._forget(written)
                raise
            collect(self.states_dir, snap)
            return snap.generation

    def _forget(self, written: list[str]) -> None:
        """After a failed commit: delete the files it wrote, unless the manifest names
        them (the failure came after the manifest was in place)."""
        try:
            named = read_snapshot(self.states_dir).files()
        except (IndexCorruptError, IndexVersionError, OSError):
            return  # (the next writer's clean-up decides)
        for file in written:
            if file not in named:
                unlink(os.fspath(self.states_dir / file))

    def adopt_legacy(self) -> bool:
        """Move the states of an index written before the manifest (one JSON each) into
        the manifest, as made from this catalogue; returns whether there were any. States
        whose JSON is damaged are left for the repair (nothing moves then)."""
        with self.mutex:
            try:
                base = read_snapshot(self.states_dir)
            except (IndexCorruptError, IndexVersionError):
                return False  # reported when the states are read
            if not base.legacy or base.damaged or not base.entries:
                return False
            snap = commit(self.states_dir, base, {}, self.catalog_id)
            collect(self.states_dir, snap)
            return True
