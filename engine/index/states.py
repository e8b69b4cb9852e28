"""What models keep beside the catalogue: named arrays, and the files of model states.

A named array ``name`` is ``arrays/<name>.npy`` (:func:`save_array`, :func:`load_array`).

A state (a model's ``to_state()`` dict) is split into its scalars (int, float, str,
bool, None) and its arrays (:func:`state_arrays`). The arrays go to immutable files
``states/<name>.<token>.npz`` (``np.savez``, no pickle): :func:`write_state_files` writes
the main one, :func:`write_state_part` parts written ahead. Which files and scalars make
the current version of every state is recorded in one manifest
(:mod:`engine.index.manifest`); :func:`load_state_files` reads a state back from them.

Indexes written before the manifest kept one ``states/<name>.json`` per state (its
scalars, ``__npz__`` and ``__parts__``): :func:`read_legacy_state` reads one of them (the
manifest adopts them on its first write).

These functions work on the ``arrays`` and ``states`` folders; the store
(:class:`engine.index.store.IndexStore`) checks the writer lock before calling them.
"""

from __future__ import annotations

import json
import uuid
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from engine.index import files as _files
from engine.index.files import NAME_RE, STATE_NPZ_RE, check_name
from engine.index.store_errors import IndexCorruptError

__all__ = [
    "SEGMENTS_KEY",
    "damaged_file",
    "header_retried",
    "live_masks",
    "load_array",
    "load_state_files",
    "read_arrays",
    "read_legacy_state",
    "save_array",
    "segment_files",
    "state_arrays",
    "write_state_files",
    "write_state_part",
]

#: Scalar of a *segmented* state (:func:`segment_files`): how many files each of its
#: segments has, in order (``"2 1 1"``). A ``__`` key: no model's state can hold it.
SEGMENTS_KEY = "__segments__"

# what reading a damaged npz raises: a bad zip (or CRC), a truncated member, a bad header
NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError)


T = TypeVar("T")


def header_retried(read: Callable[[], T]) -> T:
    """``read()`` again (at most twice more) when CPython raises its spurious
    ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905,
    seen on 3.11.7): numpy parses every ``.npy`` header with ``ast.literal_eval``, and
    threads reading an index at once (the app's readers during an update) hit it now and
    then. Any other error is raised at once."""
    for attempt in range(3):
        try:
            return read()
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def save_array(arrays: Path, name: str, arr: np.ndarray) -> None:
    """Atomically save ``arr`` (no object dtype) as ``<arrays>/<name>.npy``."""
    check_name(name)
    arr = np.asarray(arr)
    if arr.dtype.hasobject:
        raise TypeError(f"array {name!r} has object dtype; only plain arrays can be stored")
    _files.atomic_write(arrays / f"{name}.npy", lambda fh: np.save(fh, arr, allow_pickle=False))


def load_array(arrays: Path, name: str, *, mmap: bool = True) -> np.ndarray:
    """Array ``name`` of the folder ``arrays`` (a read-only memory map with ``mmap``).

    Raises
    ------
    KeyError
        No such array.
    IndexCorruptError
        The file is not a readable ``.npy`` array.
    """
    check_name(name)
    path = arrays / f"{name}.npy"
    try:
        return header_retried(
            lambda: np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        )
    except FileNotFoundError:
        raise KeyError(f"no array {name!r} in index {arrays.parent}") from None
    except (ValueError, OSError, EOFError) as exc:
        raise IndexCorruptError(
            f"the array {name!r} of the index {arrays.parent} is damaged "
            f"(arrays/{path.name}: {exc})",
            path=path,
        ) from exc


def state_arrays(state: Mapping[str, Any], scalars: dict[str, Any]) -> dict[str, np.ndarray]:
    """Split a state dict: its arrays are returned, its scalars put in ``scalars``.

    Raises
    ------
    ValueError
        A key is not a str or starts with ``__`` (reserved for the store's own entries).
    TypeError
        A value is an object array or neither an array nor a plain scalar.
    """
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


def _npz_name(name: str) -> str:
    return f"{name}.{uuid.uuid4().hex[:12]}.npz"


def write_state_files(
    states: Path, name: str, state: Mapping[str, Any], parts: Sequence[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """Write the arrays of state ``name`` to a new file of the folder ``states``.

    Parameters
    ----------
    states : Path
        The index's ``states`` folder.
    name : str
        The state's name.
    state : mapping of str to ndarray or scalar
        A model's ``to_state()`` dict.
    parts : sequence of str
        Files of more arrays of this state, written before by :func:`write_state_part`.

    Returns
    -------
    scalars : dict
        The state's scalars.
    files : list of str
        Its array files: the new one, then ``parts``. Nothing names them yet: the caller
        commits them in the manifest (or deletes them).

    Raises
    ------
    ValueError, TypeError
        A key or value that cannot be stored (:func:`state_arrays`), or a part that is
        not one of this state.
    FileNotFoundError
        A part was not written.
    """
    check_name(name)
    scalars: dict[str, Any] = {}
    arrays = state_arrays(state, scalars)
    parts = [str(p) for p in parts]
    for part in parts:
        ok = NAME_RE.match(part) and part.startswith(f"{name}.") and part.endswith(".npz")
        if not ok:
            raise ValueError(f"{part!r} is not a part of state {name!r}")
        if not (states / part).is_file():
            raise FileNotFoundError(f"state part {part} was not written")
    npz_name = _npz_name(name)
    _files.atomic_write(states / npz_name, lambda fh: np.savez(fh, **arrays))
    return scalars, [npz_name, *parts]


def write_state_part(states: Path, name: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Write (and sync) arrays of state ``name`` ahead of its commit; returns the file's
    name (:meth:`engine.index.store.IndexStore.write_state_part`)."""
    check_name(name)
    scalars: dict[str, Any] = {}
    data = state_arrays(arrays, scalars)
    if scalars:
        raise TypeError(f"state parts hold arrays only, got {sorted(scalars)}")
    part = _npz_name(name)
    _files.atomic_write(states / part, lambda fh: np.savez(fh, **data))
    return part


def load_state_files(
    states: Path, name: str, scalars: Mapping[str, Any], handles: Mapping[str, IO[bytes]]
) -> dict[str, Any]:
    """State ``name``: its ``scalars`` and the arrays of its files, read from ``handles``
    (file name -> open binary file, opened by the caller while one version named them).

    Raises
    ------
    IndexCorruptError
        A file is damaged (bad zip, CRC, truncated, bad array header) or an array is
        stored twice.
    """
    out = dict(scalars)
    if SEGMENTS_KEY in scalars:
        segments = segment_files(states, name, scalars, list(handles))
        out[SEGMENTS_KEY] = [
            read_arrays(states, name, {f: handles[f] for f in seg}) for seg in segments
        ]
        return out
    out.update(read_arrays(states, name, handles, out))
    return out


def damaged_file(states: Path, name: str, file: str, exc: BaseException) -> IndexCorruptError:
    """The one-line error of a damaged array file ``file`` of state ``name``."""
    return IndexCorruptError(
        f"the saved state {name!r} of the index {states.parent} is damaged (states/{file}: {exc})",
        path=states / file,
    )


def read_arrays(
    states: Path,
    name: str,
    handles: Mapping[str, IO[bytes]],
    taken: Mapping[str, Any] = {},
    *,
    keep: Callable[[str], bool] | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of the files ``handles`` of state ``name`` (file name -> open binary
    file) in one dict; with ``keep``, only those whose key it accepts.

    Raises
    ------
    IndexCorruptError
        A file is damaged, or a key is in ``taken`` or stored twice.
    """
    arrays: dict[str, np.ndarray] = {}
    for file, fh in handles.items():
        try:
            fh.seek(0)
            with np.load(fh, allow_pickle=False) as data:
                for k in data.files:
                    if keep is not None and not keep(k):
                        continue
                    if k in arrays or k in taken:
                        raise ValueError(f"array {k!r} is stored twice")
                    arrays[k] = header_retried(lambda k=k: data[k])
        except NPZ_ERRORS as exc:
            raise damaged_file(states, name, file, exc) from exc
    return arrays


def segment_files(
    states: Path, name: str, scalars: Mapping[str, Any], files: Sequence[str]
) -> list[tuple[str, ...]]:
    """The files of each segment of state ``name`` (its manifest ``scalars`` and
    ``files``): a state without :data:`SEGMENTS_KEY` is one segment of all its files.

    A segmented state (the search data, :mod:`engine.index.segments`) is loaded by
    :func:`load_state_files` as its scalars and, under :data:`SEGMENTS_KEY`, a list of one
    dict of arrays per segment.

    Raises
    ------
    IndexCorruptError
        The segment counts do not add up to the files.
    """
    spec = scalars.get(SEGMENTS_KEY)
    if spec is None:
        return [tuple(files)]
    try:
        counts = [int(c) for c in str(spec).split()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or sum(counts) != len(files):
        raise IndexCorruptError(
            f"the saved state {name!r} of the index {states.parent} is damaged (its "
            f"segments {spec!r} do not match its {len(files)} files)",
            path=states,
        )
    ends = np.cumsum(counts).tolist()
    return [tuple(files[e - c : e]) for c, e in zip(counts, ends, strict=True)]


def read_legacy_state(json_path: Path) -> tuple[dict[str, Any], list[str]]:
    """Scalars and array files of a state saved before the manifest (``<name>.json``).

    Raises
    ------
    IndexCorruptError
        The JSON is unreadable or names no (or bad) array files.
    """
    where = f"the saved state {json_path.stem!r} of the index {json_path.parent.parent}"
    try:
        scalars = json.loads(json_path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(
            f"{where} is damaged (states/{json_path.name}: {exc})", path=json_path
        ) from exc
    if not isinstance(scalars, dict):
        raise IndexCorruptError(
            f"{where} is damaged (states/{json_path.name}: not a state)", path=json_path
        )
    npz = scalars.pop("__npz__", None)
    parts = scalars.pop("__parts__", [])
    files = [npz, *parts] if isinstance(parts, list) else [None]
    if not all(isinstance(f, str) and STATE_NPZ_RE.match(f) for f in files):
        raise IndexCorruptError(
            f"{where} is damaged (states/{json_path.name}: names no valid array file)",
            path=json_path,
        )
    return scalars, files


def live_masks(
    seg_ids: Sequence[np.ndarray],
    seg_keys: Sequence[np.ndarray | None],
    ids: np.ndarray,
    keys: np.ndarray,
) -> list[np.ndarray]:
    """Which rows of each segment are live.

    A row is live when its id is one of the catalogue's usable ``ids`` with the same row
    key (a segment without keys, ``None``: the id alone), and no later segment holds a
    live row of the same id (the newest encoding of a photo wins).

    Parameters
    ----------
    seg_ids : sequence of (m_s,) int64
    seg_keys : sequence of (m_s,) uint64 or None
    ids : (n,) int64
        The catalogue's usable ids, ascending.
    keys : (n,) uint64
        Their row keys.

    Returns
    -------
    list of (m_s,) bool
    """
    sizes = [int(s.size) for s in seg_ids]
    if not sizes:
        return []
    every = np.concatenate(seg_ids) if sum(sizes) else np.zeros(0, np.int64)
    pos = np.minimum(np.searchsorted(ids, every), max(ids.size - 1, 0))
    ok = ids[pos] == every if ids.size else np.zeros(every.shape, bool)
    start = 0
    for sk, m in zip(seg_keys, sizes, strict=True):
        if sk is not None:
            part = slice(start, start + m)
            ok[part] &= keys[pos[part]] == sk if ids.size else False
        start += m
    cand = np.flatnonzero(ok)[::-1]  # newest first: np.unique keeps the first
    _, first = np.unique(every[cand], return_index=True)
    live = np.zeros(every.size, bool)
    live[cand[first]] = True
    return np.split(live, np.cumsum(sizes)[:-1])
