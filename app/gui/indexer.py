"""Indexing in a child process, so the window's Python thread never waits for it.

``Collection.update`` runs Python and numpy code (ingest bookkeeping, fitting the
search models) that holds the GIL for tens of milliseconds at a time; in a thread
of the GUI process that shows up as a frozen window. Here it runs in a ``spawn``
child process: progress comes back as plain tuples over a queue, cancellation is
a shared event, and the GUI process opens the finished index afterwards.

A failure in the child comes back as :class:`IndexingError`: its one-line message and
what the window needs to decide what to do about it (another process holds the writer
lock; the index cannot be written here, e.g. on read-only media; the disk is full; a
damaged index file that repairing mends). With ``repair=True`` the child first repairs
the index (:meth:`engine.collection.Collection.repair`), then indexes as usual.

Qt-free: this module is imported by the child.
"""

from __future__ import annotations

import errno
import importlib
import multiprocessing as mp
import os
import queue
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CHILD_SETUP", "IndexingError", "Progress", "Summary", "index_in_child"]

#: ``"module:function"`` the indexing child calls first, before it opens the index (None:
#: nothing). A test hook: the child is another process, so a test that must change what
#: the engine does there (e.g. emulate a full disk) names a function here.
CHILD_SETUP: str | None = None

#: errno values that mean "this place cannot be written" (read-only media, permissions)
NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class IndexingError(RuntimeError):
    """The indexing child failed: its one-line message and what is known about why.

    Attributes
    ----------
    kind : str
        The class name of the child's exception (``"IndexCorruptError"``, ``"OSError"``…).
    remedy : str or None
        ``"repair"`` when repairing the index mends it (``StoreError.remedy``).
    stage : str
        ``"open"`` (the index could not be opened) or ``"update"`` (it failed later).
    errno : int or None
        The ``OSError`` number, when it was one.
    """

    def __init__(self, message: str, kind: str = "", info: dict | None = None) -> None:
        super().__init__(message)
        info = dict(info or {})
        self.kind = kind or "RuntimeError"
        self.remedy: str | None = info.get("remedy")
        self.stage: str = info.get("stage") or "update"
        self.errno: int | None = info.get("errno")
        self._disk_full = info.get("disk_full")

    @property
    def locked(self) -> bool:
        """Another process holds the index's writer lock."""
        return self.kind == "IndexLockedError"

    @property
    def disk_full(self) -> bool:
        """The disk (of the index) is full."""
        if self._disk_full is not None:
            return bool(self._disk_full)
        text = str(self).lower()  # (a child that did not say: its message)
        return self.errno == errno.ENOSPC or "no space left" in text or "disk is full" in text

    @property
    def not_writable(self) -> bool:
        """The index could not be opened for writing because its place cannot be written
        (read-only media, no permission): it may still open read-only."""
        return self.stage == "open" and self.errno in NOT_WRITABLE


def _describe(exc: BaseException, stage: str) -> dict:
    """What the window needs to know of the child's exception (plain values only)."""
    from app.commands._collection import disk_full

    code = getattr(exc, "errno", None)
    return {
        "remedy": getattr(exc, "remedy", None),
        "stage": stage,
        "errno": code if isinstance(code, int) else None,
        "disk_full": disk_full(exc),
    }


def _run_setup(name: str | None) -> None:
    if name:
        module, _, func = name.partition(":")
        getattr(importlib.import_module(module), func)()


@dataclass(frozen=True)
class Progress:
    """One progress event (mirrors ``engine.collection.IndexProgress``)."""

    done: int
    total: int
    path: str | None
    status: str
    message: str


@dataclass(frozen=True)
class Summary:
    """Outcome of an indexing run (mirrors ``engine.collection.IndexSummary``)."""

    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: list = field(default_factory=list)
    total: int = 0
    seconds: float = 0.0
    cancelled: bool = False
    #: entries the scan passed over, ``(path, reason)``: links, FIFOs, unreadable folders
    skipped: list = field(default_factory=list)


def _child(
    folder: str, index_dir: str | None, q, cancel, jobs: int | None,
    repair: bool = False, setup: str | None = None, paths: list[str] | None = None,
) -> None:  # fmt: skip
    """Child process: (repair,) open, update, report; every failure becomes an
    ``("error", one line, exception class name, details)``."""
    if hasattr(os, "setsid"):
        os.setsid()  # own process group: the parent can always stop us and our pool
    stage = "open"
    try:
        from engine.collection import Collection
        from engine.index.ingest import keep_heap_warm

        _run_setup(setup)
        keep_heap_warm()  # this process exists to index (models and batches reuse memory)
        if repair:
            q.put(("repaired", list(Collection.repair(folder, index_dir))))
        coll = Collection.open(folder, index_dir)
        stage = "update"
        try:
            q.put(("opened", [str(p) for p in coll.paths()], str(coll.index_dir)))
            gen = coll.update(jobs=jobs, cancel=cancel, paths=paths)
            while True:
                try:
                    p = next(gen)
                except StopIteration as stop:
                    s = stop.value
                    break
                q.put(("progress", (p.done, p.total, p.path, p.status, p.message)))
            failed = [(str(a), str(b)) for a, b in getattr(s, "failed", [])]
            skipped = [
                (str(a), str(b))
                for a, b in [*getattr(s, "scan_errors", []), *getattr(s, "skipped", [])]
            ]
            q.put((
                "done",
                (s.indexed, s.unchanged, s.removed, failed, s.total, s.seconds,
                 bool(getattr(s, "cancelled", False)), skipped),
            ))  # fmt: skip
        finally:
            coll.close()
    except BaseException as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        q.put(("error", text, type(exc).__name__, _describe(exc, stage)))


def index_in_child(
    folder: Path,
    index_dir: Path | None,
    *,
    cancel: threading.Event,
    jobs: int | None = None,
    repair: bool = False,
    paths: list[str] | None = None,
) -> Iterator[tuple]:
    """Run the indexing child; yield ``("repaired", lines)`` (with ``repair``),
    ``("opened", paths, index_dir)`` and ``("progress", Progress)``; return a
    :class:`Summary`.

    ``paths``: update those files and folders of ``folder`` only (what the folder
    watcher saw change, :meth:`app.gui.watcher.FolderWatcher.take_changes`), not the
    whole folder (``Collection.update(paths=...)``).

    Raises :class:`IndexingError` (a ``RuntimeError``) with the child's message if it
    failed.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child_cancel = ctx.Event()
    idx = None if index_dir is None else str(index_dir)
    proc = ctx.Process(
        target=_child,
        args=(str(folder), idx, q, child_cancel, jobs, repair, CHILD_SETUP, paths),
        name="simile-indexer",
    )
    proc.start()
    wind_down = 10.0  # seconds the child may take to exit after its last message
    try:
        while True:
            if cancel.is_set():
                child_cancel.set()
            try:
                msg = q.get(timeout=0.05)  # blocks without the GIL
            except queue.Empty:
                if not proc.is_alive():
                    try:
                        msg = q.get(timeout=0.5)
                    except queue.Empty:
                        code = proc.exitcode
                        raise IndexingError(
                            f"the indexing process stopped unexpectedly (exit code {code})"
                        ) from None
                else:
                    continue
            kind = msg[0]
            if kind in ("opened", "repaired"):
                yield msg
            elif kind == "progress":
                yield ("progress", Progress(*msg[1]))
            elif kind == "done":
                summary = Summary(*msg[1])
                if summary.cancelled:
                    wind_down = 3.0  # a cancelled extraction pool can be slow to exit
                return summary
            elif kind == "error":
                raise IndexingError(*msg[1:4])
    finally:
        child_cancel.set()  # if the generator is closed early, stop the child as well
        proc.join(timeout=wind_down)  # everything is written; only process exit remains
        if proc.is_alive():
            _stop_group(proc)
        q.close()


def _stop_group(proc) -> None:
    """Terminate the child and the feature-extraction processes it started."""
    for sig in (signal.SIGTERM, getattr(signal, "SIGKILL", signal.SIGTERM)):
        try:
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, sig)
            else:  # pragma: no cover - Windows
                proc.terminate()
        except (ProcessLookupError, PermissionError):
            return
        proc.join(timeout=3)
        if not proc.is_alive():
            return
