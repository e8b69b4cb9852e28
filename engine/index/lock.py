"""The writer lock of an index folder: one writing process at a time."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import ClassVar

from engine.index.store_errors import IndexLockedError

__all__ = ["WriterLock"]


class WriterLock:
    """Exclusive, non-blocking, process-level lock on ``index_dir/lock``.

    POSIX uses ``fcntl.flock`` (released by the kernel when the process dies, even on
    ``kill -9``); Windows uses ``msvcrt.locking`` on byte 0 and writes the pid after it.

    A flock belongs to the open file, which a forked child shares: a child that unlocked
    it would unlock the parent, and one that outlived a killed parent would keep the
    index locked. Every forked child therefore closes its copy at once
    (``os.register_at_fork``), without unlocking; the parent keeps the lock.

    Parameters
    ----------
    path : Path
        The lock file (created when absent).
    """

    _PID_OFFSET = 16
    _held: ClassVar[weakref.WeakSet[WriterLock]] = weakref.WeakSet()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def _forget_in_child(cls) -> None:
        """After a fork, in the child: close inherited lock files without unlocking."""
        for lock in list(cls._held):
            fd, lock._fd = lock._fd, None
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def acquire(self) -> None:
        """Take the lock (never waits) and write this process's pid into the file.

        Raises
        ------
        IndexLockedError
            Another process holds it (with that process's pid when readable).
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._lock(fd)
        except OSError:
            pid = self._read_pid(fd)
            os.close(fd)
            raise IndexLockedError(self.path.parent, pid) from None
        self._fd = fd
        self._held.add(self)
        data = f"{os.getpid()}\n".encode()
        os.lseek(fd, self._PID_OFFSET, os.SEEK_SET)
        os.write(fd, data)
        os.ftruncate(fd, self._PID_OFFSET + len(data))

    def release(self) -> None:
        """Unlock and close the file (a no-op when not held)."""
        fd, self._fd = self._fd, None
        self._held.discard(self)
        if fd is None:
            return
        try:
            self._unlock(fd)
        except OSError:
            pass
        os.close(fd)

    @classmethod
    def _read_pid(cls, fd: int) -> int | None:
        try:
            os.lseek(fd, cls._PID_OFFSET, os.SEEK_SET)
            return int(os.read(fd, 32).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    if os.name == "nt":  # pragma: no cover - exercised on Windows only

        @staticmethod
        def _lock(fd: int) -> None:
            import msvcrt

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

        @staticmethod
        def _unlock(fd: int) -> None:
            import msvcrt

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    else:

        @staticmethod
        def _lock(fd: int) -> None:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

        @staticmethod
        def _unlock(fd: int) -> None:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_UN)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WriterLock._forget_in_child)
