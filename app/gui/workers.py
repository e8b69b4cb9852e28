"""The one threading helper of the desktop app (modelled on superqt's ``_qthreading``).

All numeric work — indexing, queries, matching, duplicate search, thumbnail
decoding — runs in a :class:`Worker` on a :class:`QThreadPool`. A worker wraps a
plain function or a generator function:

* ``started`` is emitted when the function begins,
* ``yielded(value)`` for every value a generator yields,
* ``returned(value)`` with the return value (``StopIteration.value`` for generators),
* ``errored(exception)`` when it raises — exceptions never vanish,
* ``aborted`` when a generator stopped because :meth:`Worker.quit` was called,
* ``finished`` always, last.

Cancellation is cooperative: :meth:`Worker.quit` sets :attr:`Worker.cancel_event`;
a generator worker checks it between yields (and the function can pass the same
event down, e.g. to ``Collection.update(cancel=...)``).

Tests can force synchronous mode (``set_synchronous(True)`` or the environment
variable ``SIMILE_SYNC_WORKERS=1``): :meth:`Worker.start` then runs the function
in the calling thread and the signals are delivered directly.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

__all__ = ["Worker", "WorkerSignals", "create_worker", "is_synchronous", "set_synchronous"]

log = logging.getLogger(__name__)

_SYNC = os.environ.get("SIMILE_SYNC_WORKERS", "") not in ("", "0")
# Python references to running workers: a QRunnable handed to the pool must outlive run().
_ACTIVE: set[Worker] = set()
_ACTIVE_LOCK = threading.Lock()


def set_synchronous(value: bool) -> None:
    """Run every worker started from now on in the calling thread (for tests)."""
    global _SYNC
    _SYNC = bool(value)


def is_synchronous() -> bool:
    return _SYNC


class WorkerSignals(QObject):
    """Signals of one :class:`Worker`; lives in the thread that created the worker."""

    started = Signal()
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)
    aborted = Signal()
    finished = Signal()


class Worker(QRunnable):
    """Run ``func(*args, **kwargs)`` off the GUI thread and report through signals.

    Parameters
    ----------
    func : callable
        A function or a generator function. It must not touch widgets.
    *args, **kwargs
        Passed to ``func``.
    pass_cancel : bool
        If true, ``func`` receives ``cancel=<threading.Event>`` (this worker's
        :attr:`cancel_event`), so it can stop long inner loops early.
    pool : QThreadPool, optional
        Pool to run in; the global pool by default.
    abort_on_quit : bool
        True (default): after :meth:`quit`, a generator is closed at its next yield and
        ``aborted`` is emitted. False: :meth:`quit` only sets :attr:`cancel_event`; the
        generator winds down by itself and its return value is still delivered.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *args: Any,
        pass_cancel: bool = False,
        pool: QThreadPool | None = None,
        abort_on_quit: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self._abort_on_quit = abort_on_quit
        self.setAutoDelete(False)
        self._func = func
        self._args = args
        self._kwargs = kwargs
        self._pool = pool
        self.cancel_event = threading.Event()
        if pass_cancel:
            self._kwargs["cancel"] = self.cancel_event
        self.signals = WorkerSignals()
        self.is_generator = inspect.isgeneratorfunction(func)
        self._running = False
        self._done = threading.Event()

    # -- convenience accessors (read like superqt) --------------------------------------
    @property
    def started(self):
        return self.signals.started

    @property
    def yielded(self):
        return self.signals.yielded

    @property
    def returned(self):
        return self.signals.returned

    @property
    def errored(self):
        return self.signals.errored

    @property
    def aborted(self):
        return self.signals.aborted

    @property
    def finished(self):
        return self.signals.finished

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def abort_requested(self) -> bool:
        return self.cancel_event.is_set()

    def quit(self) -> None:
        """Ask the worker to stop at its next yield (or wherever it checks the event)."""
        self.cancel_event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the function has finished running (for tests and shutdown)."""
        return self._done.wait(timeout)

    def start(self) -> Worker:
        """Queue the worker in the thread pool (or run it now in synchronous mode)."""
        with _ACTIVE_LOCK:
            _ACTIVE.add(self)
        # Released on the GUI thread (the signals object lives there), never in the pool thread.
        self.signals.finished.connect(self._release)
        self._running = True
        if _SYNC:
            self.run()
        else:
            (self._pool or QThreadPool.globalInstance()).start(self)
        return self

    # -- thread side -----------------------------------------------------------------------
    def run(self) -> None:  # executed in a pool thread
        sig = self.signals
        try:
            sig.started.emit()
            if self.is_generator:
                gen = self._func(*self._args, **self._kwargs)
                result = None
                aborted = False
                while True:
                    if self._abort_on_quit and self.cancel_event.is_set():
                        gen.close()
                        aborted = True
                        break
                    try:
                        value = next(gen)
                    except StopIteration as stop:
                        result = stop.value
                        break
                    sig.yielded.emit(value)
                if aborted:
                    sig.aborted.emit()
                else:
                    sig.returned.emit(result)
            else:
                sig.returned.emit(self._func(*self._args, **self._kwargs))
        except Exception as exc:  # every error reaches the user through `errored`
            log.debug("worker %r failed", self._func, exc_info=True)
            sig.errored.emit(exc)
        finally:
            self._running = False
            self._done.set()
            sig.finished.emit()

    def _release(self) -> None:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(self)


def create_worker(
    func: Callable[..., Any],
    *args: Any,
    pass_cancel: bool = False,
    pool: QThreadPool | None = None,
    abort_on_quit: bool = True,
    connect: dict[str, Callable[..., Any]] | None = None,
    start: bool = True,
    **kwargs: Any,
) -> Worker:
    """Make a :class:`Worker`, connect ``connect={"returned": cb, ...}`` and start it.

    Connections are made before the worker starts, so no signal is missed.
    """
    worker = Worker(
        func, *args, pass_cancel=pass_cancel, pool=pool, abort_on_quit=abort_on_quit, **kwargs
    )
    for name, callback in (connect or {}).items():
        if not hasattr(WorkerSignals, name):
            raise ValueError(f"connect: unknown worker signal {name!r}")
        getattr(worker.signals, name).connect(callback)
    if start:
        worker.start()
    return worker


def wait_all(timeout_ms: int = 30_000) -> bool:
    """Wait for every worker in the global pool (used at shutdown and in tests)."""
    return QThreadPool.globalInstance().waitForDone(timeout_ms)
