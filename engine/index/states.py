"""What models keep beside the catalogue: named arrays and model states.

A named array ``name`` is ``arrays/<name>.npy`` (:func:`save_array`, :func:`load_array`).
A state (a model's ``to_state()`` dict) ``name`` is ``states/<name>.json`` with its
scalars (int, float, str, bool, None) and the names of its array files:
``states/<name>.<token>.npz`` (``np.savez``, no pickle) and the parts written ahead
(:func:`write_state_part`). The JSON is written last and renamed into place, so readers
see the old or the new state whole. These functions work on the ``arrays`` and ``states``
folders; the store (:class:`engine.index.store.IndexStore`) checks the writer lock before
calling them.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.index.files import NAME_RE, atomic_write, check_name, unlink
from engine.index.store_errors import IndexCorruptError

__all__ = [
    "delete_state",
    "load_array",
    "load_state",
    "save_array",
    "save_state",
    "state_arrays",
    "state_files",
    "write_state_part",
]


def save_array(arrays: Path, name: str, arr: np.ndarray) -> None:
    """Atomically save ``arr`` (no object dtype) as ``<arrays>/<name>.npy``."""
    check_name(name)
    arr = np.asarray(arr)
    if arr.dtype.hasobject:
        raise TypeError(f"array {name!r} has object dtype; only plain arrays can be stored")
    atomic_write(arrays / f"{name}.npy", lambda fh: np.save(fh, arr, allow_pickle=False))


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
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise KeyError(f"no array {name!r} in index {arrays.parent}") from None
    except ValueError as exc:
        raise IndexCorruptError(f"array file {path} is damaged: {exc}") from exc


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


def save_state(
    states: Path, name: str, state: Mapping[str, Any], parts: Sequence[str] = ()
) -> None:
    """Atomically save state ``name`` in the folder ``states``
    (:meth:`engine.index.store.IndexStore.save_state`)."""
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
    npz_name = f"{name}.{uuid.uuid4().hex[:12]}.npz"
    atomic_write(states / npz_name, lambda fh: np.savez(fh, **arrays))
    scalars["__npz__"] = npz_name
    if parts:
        scalars["__parts__"] = parts
    payload = json.dumps(scalars, sort_keys=True).encode("utf-8")
    json_path = states / f"{name}.json"
    old = state_files(json_path)
    atomic_write(json_path, lambda fh: fh.write(payload))
    for file in old - {npz_name, *parts}:
        unlink(os.fspath(states / file))


def write_state_part(states: Path, name: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Write (and sync) arrays of state ``name`` ahead of :func:`save_state`; returns the
    file's name (:meth:`engine.index.store.IndexStore.write_state_part`)."""
    check_name(name)
    scalars: dict[str, Any] = {}
    data = state_arrays(arrays, scalars)
    if scalars:
        raise TypeError(f"state parts hold arrays only, got {sorted(scalars)}")
    part = f"{name}.{uuid.uuid4().hex[:12]}.npz"
    atomic_write(states / part, lambda fh: np.savez(fh, **data))
    return part


def state_files(json_path: Path) -> set[str]:
    """The npz files that state JSON ``json_path`` names (empty if unreadable)."""
    try:
        st = json.loads(json_path.read_text("utf-8"))
        files = {st["__npz__"], *st.get("__parts__", ())}
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {f for f in files if isinstance(f, str) and NAME_RE.match(f)}


def load_state(states: Path, name: str) -> dict[str, Any]:
    """State ``name`` of the folder ``states``, scalars and arrays in one dict.

    Raises
    ------
    KeyError
        No such state.
    IndexCorruptError
        Its JSON or an array file is damaged or missing.
    """
    check_name(name)
    json_path = states / f"{name}.json"
    for attempt in range(2):
        try:
            scalars = json.loads(json_path.read_text("utf-8"))
        except FileNotFoundError:
            raise KeyError(f"no state {name!r} in index {states.parent}") from None
        except ValueError as exc:
            raise IndexCorruptError(f"state file {json_path} is damaged: {exc}") from exc
        npz = scalars.pop("__npz__", None)
        parts = scalars.pop("__parts__", [])
        if not isinstance(npz, str) or not NAME_RE.match(npz):
            raise IndexCorruptError(f"state file {json_path} names no array file")
        if not isinstance(parts, list) or not all(
            isinstance(p, str) and NAME_RE.match(p) for p in parts
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


def delete_state(states: Path, name: str) -> None:
    """Delete state ``name`` (JSON first, then its npz files) if present."""
    json_path = states / f"{check_name(name)}.json"
    files = state_files(json_path)
    unlink(os.fspath(json_path))
    for file in files:
        unlink(os.fspath(states / file))
