"""Indexing in a child process, so the window's Python thread never waits for it.

``Collection.update`` runs Python and numpy code (ingest bookkeeping, fitting the
search models) that holds the GIL for tens of milliseconds at a time; in a thread
of the GUI process that shows up as a frozen window. Here it runs in a ``spawn``
child process: progress comes back as plain tuples over a queue, cancellation is
a shared event, and the GUI process opens the finished index afterwards.

Qt-free: this module is imported by the child.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Progress", "Summary", "index_in_child"]


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


def _child(folder: str, index_dir: str | None, q, cancel, jobs: int | None) -> None:
    """Child process: open, update, report; every failure becomes an ("error", text)."""
    if hasattr(os, "setsid"):
        os.setsid()  # own process group: the parent can always stop us and our pool
    try:
        from engine.collection import Collection
        from engine.index.ingest import keep_heap_warm

        keep_heap_warm()  # this process exists to index (models and batches reuse memory)
        coll = Collection.open(folder, index_dir)
        try:
            q.put(("opened", [str(p) for p in coll.paths()], str(coll.index_dir)))
            gen = coll.update(jobs=jobs, cancel=cancel)
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
        q.put(("error", f"{exc}" or type(exc).__name__, type(exc).__name__))


def index_in_child(
    folder: Path, index_dir: Path | None, *, cancel: threading.Event, jobs: int | None = None
) -> Iterator[tuple]:
    """Run the indexing child; yield ``("opened", paths, index_dir)`` and
    ``("progress", Progress)``; return a :class:`Summary`.

    Raises RuntimeError with the child's message if it failed.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child_cancel = ctx.Event()
    proc = ctx.Process(
        target=_child,
        args=(str(folder), None if index_dir is None else str(index_dir), q, child_cancel, jobs),
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
                        raise RuntimeError(
                            f"the indexing process stopped unexpectedly (exit code {code})"
                        ) from None
                else:
                    continue
            kind = msg[0]
            if kind == "opened":
                yield msg
            elif kind == "progress":
                yield ("progress", Progress(*msg[1]))
            elif kind == "done":
                summary = Summary(*msg[1])
                if summary.cancelled:
                    wind_down = 3.0  # a cancelled extraction pool can be slow to exit
                return summary
            elif kind == "error":
                raise RuntimeError(msg[1])
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
