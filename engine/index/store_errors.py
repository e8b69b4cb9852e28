"""The exceptions of the index store (:mod:`engine.index.store`), one base class
:class:`StoreError` for every failure to open, read or write an index."""

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
]


class StoreError(Exception):
    """Base class of every index-store error."""


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
    """The catalogue cannot be read (damaged SQLite file or missing tables)."""


class IndexFormatError(StoreError):
    """The catalogue is a SQLite database but not one written by simile."""


class IndexVersionError(StoreError):
    """The index was written by a newer simile (schema version too high)."""


class ReadOnlyIndexError(StoreError):
    """A write was attempted on a store opened with ``readonly=True``."""
