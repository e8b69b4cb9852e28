"""Crash-safe files and lossless paths of the index store.

Every file of an index is written to a temporary name in the same directory, flushed,
fsynced and atomically renamed into place (:func:`atomic_write`) before the catalogue
transaction or the states manifest that references it commits. :data:`WRITE_HOOK` lets a
test stop the program at any of these writes (a crash or a full disk at that instant).
The store's own file names follow fixed patterns
(:data:`TMP_RE`, :data:`CHUNK_RE`, :data:`STATE_NPZ_RE`): the clean-up deletes nothing
else. Paths are kept losslessly whatever bytes the file system hands us
(:func:`db_path`, :func:`py_path`) and shown to a person with :func:`display_path`.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CHUNK_RE",
    "NAME_RE",
    "STATE_NPZ_RE",
    "TMP_RE",
    "TMP_SUFFIX",
    "WRITE_HOOK",
    "atomic_write",
    "check_name",
    "db_path",
    "display_path",
    "file_digest",
    "fsync_dir",
    "json_text",
    "norm_path",
    "py_path",
    "resolved_path",
    "tmp_path",
    "unlink",
]

#: Names of arrays, states and their files: no path separators, no leading dot.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: Suffix of the temporary files of :func:`atomic_write`.
TMP_SUFFIX = ".tmp"
# the names the store itself writes (the clean-up touches nothing else): temporary
# files, feature chunks and state array files, each with a 12-hex-digit token
TOKEN = r"[0-9a-f]{12}"
TMP_RE = re.compile(rf"^\.[A-Za-z0-9_][A-Za-z0-9_.-]*\.{TOKEN}\.tmp$")
CHUNK_RE = re.compile(rf"^c\d{{13}}-{TOKEN}\.npy$")
STATE_NPZ_RE = re.compile(rf"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.{TOKEN}\.npz$")


def fsync_dir(path: Path) -> None:
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


def tmp_path(final: Path) -> Path:
    """A fresh temporary name beside ``final``: ``.<name>.<12 hex digits>.tmp``
    (:data:`TMP_RE`)."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


#: Test hook: when set, every :func:`atomic_write` calls ``WRITE_HOOK("before", final)``
#: before it writes and ``WRITE_HOOK("after", final)`` once the file is in place: raising
#: there (or ending the process) emulates a full disk or a crash at that instant.
WRITE_HOOK: Callable[[str, Path], None] | None = None


def atomic_write(final: Path, write: Any) -> None:
    """Write through ``write(fileobj)`` to a temp file, fsync, and rename onto ``final``.

    A failure (e.g. ``OSError`` ENOSPC, a full disk) leaves ``final`` as it was and no
    temporary file behind.
    """
    if WRITE_HOOK is not None:
        WRITE_HOOK("before", final)
    tmp = tmp_path(final)
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
    fsync_dir(final.parent)
    if WRITE_HOOK is not None:
        WRITE_HOOK("after", final)


def read_cache(path: Path, version: int, names: Sequence[str]) -> dict[str, Any] | None:
    """The arrays ``names`` of a cache file written by :func:`write_cache`, or None when
    there is none, it cannot be read (damaged, not a zip of arrays) or it was written at
    another ``version``. Nothing in it can execute code (``allow_pickle=False``).

    Parameters
    ----------
    path : Path
        The cache file (``<index>/cache/<name>.npz``).
    version : int
        The version its writer stamps now.
    names : sequence of str
        The arrays to read (a file lacking one is unusable: None).

    Returns
    -------
    dict of str to ndarray, or None
    """
    import zipfile

    import numpy as np

    try:  # (our own handle: np.load leaks its file when the zip is damaged)
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as npz:
            if int(npz["version"]) != int(version):
                return None
            return {k: npz[k] for k in names}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def write_cache(path: Path, version: int, arrays: dict[str, Any]) -> bool:
    """Write a cache file of plain ``arrays`` stamped with ``version``, atomically
    (:func:`atomic_write`); False, writing nothing, when its folder is not writable (a
    read-only index) or the disk is full. A cache is never part of the index's versions:
    losing it only costs the work it remembers."""
    import numpy as np

    try:
        path.parent.mkdir(exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            return False
        atomic_write(path, lambda fh: np.savez(fh, version=np.int64(version), **arrays))
    except OSError:
        return False
    return True


def file_digest(path: Path | str) -> str:
    """BLAKE2b-128 hex digest of a file's bytes (the checksum of a feature chunk).

    Raises
    ------
    OSError
        The file cannot be read.
    """
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def unlink(path: str) -> int:
    """Delete ``path``; returns 1, or 0 when it could not be deleted (gone already, or
    still mapped by a reader on Windows: retried by the next clean-up)."""
    try:
        os.unlink(path)
        return 1
    except OSError:  # e.g. still mapped by a reader on Windows; retried next time
        return 0


def db_path(path: str) -> str | bytes:
    """The catalogue form of a path: the ``str`` when it is valid UTF-8, else its raw
    bytes (``os.fsencode``), stored as a BLOB, so no file name can stop a folder."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return path


def py_path(value: str | bytes) -> str:
    """Inverse of :func:`db_path`: the same ``str`` the file system gave us."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


def norm_path(path: str | os.PathLike) -> str | bytes:
    """The catalogue form of ``path``: the ``str`` as given, or its raw bytes when it is
    not valid UTF-8 (:func:`db_path`).

    Parameters
    ----------
    path : str or os.PathLike (of str or bytes)

    Returns
    -------
    str or bytes
        What the catalogue's ``images.path`` column holds for this file.
    """
    text = path if isinstance(path, str) else os.fspath(Path(os.fsdecode(path)))
    return db_path(text)


def resolved_path(path: str | os.PathLike) -> str | bytes | None:
    """``realpath(path)`` (catalogue form) when it differs from ``path``: lookups fall
    back to it, since indexes written before links were kept as links hold resolved
    paths. ``None`` when it does not differ."""
    raw = os.fspath(path)
    real = os.path.realpath(raw)
    return db_path(real) if real != raw else None


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


#: A lone surrogate: one undecodable byte of a file name (``os.fsdecode``).
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, **kwargs)`` that is valid UTF-8 whatever the
    file names in ``obj``: an undecodable byte of a name (a lone surrogate) is written as
    its ``\\udcXX`` escape, which reads back as the same ``str`` (``os.fsencode`` then
    gives the name's bytes back).

    Parameters
    ----------
    obj : object
        JSON-serialisable.
    **kwargs
        Passed on to :func:`json.dumps` (``indent``, ``separators``...).

    Returns
    -------
    str
    """
    import json

    text = json.dumps(obj, ensure_ascii=False, **kwargs)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def check_name(name: str, what: str = "name") -> str:
    """``name`` when it is a valid array or state name (:data:`NAME_RE`, no ``..``).

    Raises
    ------
    ValueError
        Naming ``what`` and the rule.
    """
    if not isinstance(name, str) or not NAME_RE.match(name) or ".." in name:
        raise ValueError(
            f"{what} must match [A-Za-z0-9_][A-Za-z0-9_.-]* (max 128 chars), got {name!r}"
        )
    return name
