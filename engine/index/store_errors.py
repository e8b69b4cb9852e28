"""The exceptions of the index store (:mod:`engine.index.store`), one base class
:class:`StoreError` for every failure to open, read or write an index.

Every message is one line that names the index folder (and the damaged file, when one
is); :attr:`StoreError.remedy` says what a person can do about it, so that a front end
(the CLI, the app) can add the command that does it: ``"repair"`` for
``simile index FOLDER --repair`` (:func:`engine.index.repair.repair_index`).
"""

from __future__ import annotations

import os

__all__ = [
    "IndexCorruptError",
    "IndexFormatError",
    "IndexLockedError",
    "IndexNotFoundError",
    "IndexVersionError",
    "ReadOnlyIndexError",
    "StoreError",
    "one_line",
]


def one_line(text: object) -> str:
    """``text`` on one line: line breaks and runs of blanks become one space."""
    return " ".join(str(text).split())


class StoreError(Exception):
    """Base class of every index-store error.

    Attributes
    ----------
    remedy : str or None
        ``"repair"`` when repairing the index (``simile index FOLDER --repair``) mends it;
        ``None`` when the message says what to do, or nothing can be done here.
    """

    remedy: str | None = None


class IndexLockedError(StoreError):
    """Another process holds the writer lock of the index.

    Attributes
    ----------
    pid : int or None
        Process id written in the lock file by the holder, when readable.
    """

    def __init__(self, index_dir: os.PathLike | str, pid: int | None) -> None:
        self.index_dir = str(index_dir)
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"another simile process is updating this index ({who}): {self.index_dir}"
        )


class IndexNotFoundError(StoreError, FileNotFoundError):
    """The directory holds no index and ``create`` was false (or the store is read-only)."""


class IndexCorruptError(StoreError):
    """A file of the index is damaged or missing (the catalogue, a feature chunk, a saved
    state, the states manifest, the marker), or two of them do not belong together.

    Parameters
    ----------
    message : str
        One line naming the index and the file (see :func:`one_line`).
    path : path-like, optional
        The damaged (or missing) file.
    """

    remedy = "repair"

    def __init__(self, message: str, *, path: os.PathLike | str | None = None) -> None:
        super().__init__(one_line(message))
        self.path = None if path is None else os.fspath(path)


class IndexFormatError(StoreError):
    """The catalogue is a SQLite database but not one written by simile."""


class IndexVersionError(StoreError):
    """The index was written by a newer simile (schema version too high)."""


class ReadOnlyIndexError(StoreError):
    """A write was attempted on a store opened with ``readonly=True``."""
