"""Worker processes that can always be stopped: a pool that never hangs its caller.

:class:`WorkerPool` runs a module-level function on work items in worker processes, for
:func:`engine.index.extract.extract_parallel`. It replaces
:class:`concurrent.futures.ProcessPoolExecutor`, which can hang its caller for good:

- Its workers share one result pipe. A worker killed while it writes a result (the
  out-of-memory killer picks the process that holds the most memory) leaves half a message
  in it; the executor's manager thread then waits forever for the rest, since the other
  workers and the parent still hold the pipe's write end, and no future ever completes.
- A task cannot be cancelled once running, and the interpreter waits at exit for every
  running task: a read that blocks (a stalled network share, a FUSE file) blocks Ctrl-C.
- Its workers know nothing of their parent: after a ``kill -9`` of the parent they wait
  for work forever, holding the parent's stdout (``simile index … | tail`` never ends).

Here each worker has its own pipe, used by nobody else, so a worker's death or a half
message concerns that worker alone: it is seen (its process sentinel, EOF on its pipe),
its files are handed back (:class:`Lost`, :class:`Returned`) and a new worker is started
when there is work, however often that happens. Workers report the phases of each item
(:data:`PHASES`), so the parent knows which item a worker is on, since when, and its size;
one that has not finished its item within ``timeout + timeout_per_mb * MiB`` seconds is
killed (:class:`Lost` with ``cause="timeout"``). Only the time the caller spends waiting on the
pool counts: a slow consumer of the results never makes a worker look stuck. Stopping
(:meth:`WorkerPool.close`) kills the workers without waiting for any work.

Workers never see Ctrl-C (SIGINT is blocked in them from their first instruction: the
parent decides), and each runs a watchdog thread that ends it within
:data:`PARENT_POLL` seconds of its parent's death (:func:`watch_parent`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# (multiprocessing is imported by the functions that start and talk to workers: an update
# that extracts nothing, a removal, does without it)

__all__ = [
    "FILE_TIMEOUT",
    "FILE_TIMEOUT_PER_MB",
    "PARENT_POLL",
    "PHASES",
    "STARTUP_TIMEOUT",
    "Done",
    "Failed",
    "Lost",
    "Returned",
    "WorkerPool",
    "watch_parent",
    "worker_context",
]

#: seconds an item may take (read + extract) before its worker is abandoned ...
FILE_TIMEOUT = 120.0
#: ... plus this many seconds per MiB of the file (a slow network share reads ~1 MB/s)
FILE_TIMEOUT_PER_MB = 1.0
#: seconds a new worker may take to start (spawned: a fresh interpreter imports numpy,
#: OpenCV and the engine) before it is abandoned as if it had died
STARTUP_TIMEOUT = 120.0
#: seconds between a worker's checks that its parent is still alive
PARENT_POLL = 0.5
#: where a worker is, in order: ``"start"`` (its process is starting), ``"open"`` (on an
#: item: the file is being opened), ``"read"`` (``report("read", size, mtime_ns)``: its
#: stat is known, its bytes are being read), ``"extract"`` (``report("extract")``: read,
#: being processed)
PHASES = ("start", "open", "read", "extract")
#: tasks sent to one worker ahead of its results (one runs, one waits in its pipe)
TASKS_PER_WORKER = 2

_QT_MODULES = ("PySide6", "PyQt6", "PySide2", "PyQt5")
_EXIT_ORPHANED = 70  # exit status of a worker whose parent died


# --------------------------------------------------------------------------- events
@dataclass(frozen=True)
class Done:
    """``item`` finished: ``result`` is what the function returned."""

    item: Any
    result: Any


@dataclass(frozen=True)
class Failed:
    """The function raised on ``item``, or its result could not be sent back (``error``:
    ``"Type: message"``). The worker goes on with its next item."""

    item: Any
    error: str


@dataclass(frozen=True)
class Lost:
    """The worker busy with ``item`` died (``cause="died"``) or was abandoned after
    ``allowed`` seconds without finishing it (``cause="timeout"``).

    Attributes
    ----------
    item : object
    cause : {"died", "timeout"}
    phase : str
        Where the worker was (:data:`PHASES`): ``"start"`` when it never became ready.
    size, mtime_ns : int
        The file's stat as the worker reported it (``0`` when it had not yet).
    allowed : float
        Seconds the item was allowed (``timeout``) or had run (``died``).
    """

    item: Any
    cause: str
    phase: str
    size: int
    mtime_ns: int
    allowed: float


@dataclass(frozen=True)
class Returned:
    """Items sent to a worker that was lost before it started them: not their fault."""

    items: list


# --------------------------------------------------------------------------- start-up
def worker_context() -> Any:
    """The ``multiprocessing`` context workers are started with.

    ``fork`` on Linux when this process runs no other Python thread and has not loaded a
    Qt binding, else ``spawn``. A forked worker starts at once with every module already
    imported, where a spawned one starts a fresh interpreter and imports numpy, OpenCV
    and the engine again (UKBench: the decode + SIFT floor is 1.03-1.14x slower with
    spawned workers, ``bench_ukbench.py --breakdown``). Forking is only safe when no
    other thread can hold a lock at that moment (and Qt's threads are invisible to
    :mod:`threading`); numpy's OpenBLAS threads are made fork-safe by OpenBLAS itself.
    Checked again for every worker started to replace one, so a replacement started
    while other threads run is spawned. OpenCV's own thread pool does not survive a
    fork: it is stopped while workers are forked. The index's writer lock is not
    inherited usefully: a forked child closes its copy (:mod:`engine.store`).
    """
    import multiprocessing

    qt = any(name in sys.modules for name in _QT_MODULES)
    if sys.platform.startswith("linux") and threading.active_count() == 1 and not qt:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


@contextmanager
def _opencv_single_threaded(fork: bool) -> Iterator[None]:
    """While forking: OpenCV's thread pool (started by any parallel OpenCV call in this
    process) does not survive a fork, and a child that reconfigures it waits forever for
    threads it does not have. One thread stops the pool; the setting is then restored."""
    cv2 = sys.modules.get("cv2") if fork else None
    threads = cv2.getNumThreads() if cv2 is not None else None
    if cv2 is not None:
        cv2.setNumThreads(1)
    try:
        yield
    finally:
        if cv2 is not None:
            cv2.setNumThreads(threads)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread meanwhile: a child started now inherits the blocked
    mask (through ``exec`` too), so Ctrl-C never reaches a worker, not even while a
    spawned interpreter starts. A Ctrl-C meanwhile reaches this process afterwards."""
    mask = getattr(signal, "pthread_sigmask", None)
    old = mask(signal.SIG_BLOCK, {signal.SIGINT}) if mask is not None else None
    try:
        yield
    finally:
        if mask is not None:
            mask(signal.SIG_SETMASK, old)


def watch_parent(parent_pid: int, interval: float = PARENT_POLL) -> threading.Thread:
    """Start a daemon thread that ends this process as soon as ``parent_pid`` is no longer
    its parent (the parent died: the process was re-parented).

    Polling ``os.getppid`` every ``interval`` seconds rather than Linux's
    ``prctl(PR_SET_PDEATHSIG)``: that signal fires when the *thread* that started the
    child ends, not the process (a pool started from a GUI worker thread would lose its
    workers with the thread), it is Linux-only, and a spawned child would set it too late
    to see a parent that died during its start-up. A process ended this way exits with
    ``os._exit`` (status 70) at once: nothing of its work is wanted any more.
    """

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(_EXIT_ORPHANED)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="simile-parent-watch", daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- worker side
def _text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _send(conn: Any, message: Any) -> None:
    """Send to the parent; a parent gone (broken pipe) ends this worker."""
    from multiprocessing.reduction import ForkingPickler

    try:
        conn.send_bytes(ForkingPickler.dumps(message))
    except OSError:
        os._exit(_EXIT_ORPHANED)


def _serve(conn: Any, parent_pid: int, initializer: Callable[[], None] | None) -> None:
    """Worker main loop: run each task's items in order, sending their phases and results.

    A task is ``(items, payload)``: ``payload`` is the pickled ``(func, common)`` and each
    item is called as ``func(*item, *common, report=report)``.
    """
    from multiprocessing.reduction import ForkingPickler

    watch_parent(parent_pid)
    if initializer is not None:
        initializer()
    _send(conn, ("ready",))

    def report(phase: str, size: int = 0, mtime_ns: int = 0) -> None:
        _send(conn, (phase, size, mtime_ns))

    cached: tuple[bytes | None, Any] = (None, None)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent closed the pipe or is gone
            return
        if task is None:
            return
        items, payload = task
        try:
            if payload != cached[0]:
                cached = (payload, ForkingPickler.loads(payload))
            func, common = cached[1]
        except Exception as exc:  # e.g. the function cannot be imported here
            for _ in items:
                _send(conn, ("failed", _text(exc)))
            continue
        for item in items:
            try:
                message = ("done", func(*item, *common, report=report))
                data = ForkingPickler.dumps(message)
            except Exception as exc:  # raised, or a result that cannot be pickled
                data = ForkingPickler.dumps(("failed", _text(exc)))
            try:
                conn.send_bytes(data)
            except OSError:
                os._exit(_EXIT_ORPHANED)


# --------------------------------------------------------------------------- parent side
class _Worker:
    """A worker process, its pipe, and what it was given (in order: ``items[0]`` is the
    item it is on)."""

    def __init__(self, proc: Any, conn: Any, now: float) -> None:
        self.proc = proc
        self.conn = conn
        self.ready = False
        self.items: deque[Any] = deque()
        self.tasks: deque[int] = deque()  # item count of each task not finished
        self.since = now  # start of the current item (or of the start-up), pool clock
        self.phase = "start"
        self.size = 0
        self.mtime_ns = 0

    def next_item(self, now: float) -> Any:
        """The current item is finished: pop it, start the clock of the next one."""
        item = self.items.popleft()
        self.tasks[0] -= 1
        if not self.tasks[0]:
            self.tasks.popleft()
        self.since, self.phase, self.size, self.mtime_ns = now, "open", 0, 0
        return item


class WorkerPool:
    """Up to ``n_jobs`` worker processes running ``func(*item, *common, report=...)``.

    Parameters
    ----------
    n_jobs : int
        Worker processes (all started at once; one that is lost is replaced when there
        is work for it).
    func : callable
        Module-level function (spawned workers import it), called in a worker as
        ``func(*item, *common, report=report)``; ``report(phase, size=0, mtime_ns=0)``
        tells the parent it reached ``phase`` (:data:`PHASES`).
    common : tuple
        Arguments shared by every item (pickled once per pool).
    mp_context : multiprocessing context, optional
        Default :func:`worker_context`. Replacements of lost workers are forked only if
        :func:`worker_context` allows it then.
    initializer : callable, optional
        Module-level function each worker calls once before its first item.
    timeout, timeout_per_mb : float or None
        An item not finished within ``timeout + timeout_per_mb * size / 2**20`` seconds of
        its start (``size``: as reported with the ``"read"`` phase) gets its worker
        killed (:class:`Lost`, ``cause="timeout"``). ``None``: no limit.

    Notes
    -----
    Not thread-safe: one thread drives a pool (:meth:`submit`, :meth:`poll`,
    :meth:`close`). Always :meth:`close` it (``try``/``finally``).
    """

    def __init__(
        self,
        n_jobs: int,
        func: Callable[..., Any],
        common: Sequence[Any] = (),
        *,
        mp_context: Any = None,
        initializer: Callable[[], None] | None = None,
        timeout: float | None = FILE_TIMEOUT,
        timeout_per_mb: float = FILE_TIMEOUT_PER_MB,
    ) -> None:
        from multiprocessing.reduction import ForkingPickler

        if n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1, got {n_jobs!r}")
        self.n_jobs = int(n_jobs)
        self.timeout = timeout
        self.timeout_per_mb = float(timeout_per_mb)
        self._payload = bytes(ForkingPickler.dumps((func, tuple(common))))
        self._ctx = mp_context
        self._initializer = initializer
        self._workers: list[_Worker] = []
        self._dying: list[Any] = []  # killed processes not reaped yet
        self._away = 0.0  # seconds spent outside poll(): not counted against workers
        self._left: float | None = None  # when the last poll() returned
        self._closed = False
        try:
            self._start(self.n_jobs, first=True)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ state
    @property
    def n_items(self) -> int:
        """Items sent and not finished."""
        return sum(len(w.items) for w in self._workers)

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        return [w.proc.pid for w in self._workers]

    def can_take(self) -> bool:
        """A task sent now would go to a worker at once (or to one started for it)."""
        if len(self._workers) < self.n_jobs:
            return True
        return any(len(w.tasks) < TASKS_PER_WORKER for w in self._workers)

    def _now(self) -> float:
        """The pool's clock: seconds spent in :meth:`poll`, frozen in between."""
        if self._left is not None:
            return self._left - self._away
        return time.monotonic() - self._away

    def _deadline(self, w: _Worker) -> float:
        if not w.ready:
            return w.since + STARTUP_TIMEOUT
        if self.timeout is None:
            return float("inf")
        return w.since + self.timeout + self.timeout_per_mb * w.size / 2**20

    # ------------------------------------------------------------------ start / submit
    def _start(self, count: int, first: bool = False) -> None:
        """Start ``count`` workers (forked together, SIGINT blocked meanwhile)."""
        ctx = self._ctx
        if ctx is None or (not first and ctx.get_start_method() == "fork"):
            ctx = worker_context()
        fork = ctx.get_start_method() == "fork"
        if not fork and hasattr(signal, "pthread_sigmask"):
            # started by the first spawned process, multiprocessing's resource tracker
            # unblocks SIGINT in this thread on its way: start it before blocking
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        with _opencv_single_threaded(fork), _sigint_blocked():
            for _ in range(count):
                parent_end, child_end = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=_serve,
                    args=(child_end, os.getpid(), self._initializer),
                    name="simile-worker",
                    daemon=True,
                )
                try:
                    proc.start()
                finally:
                    child_end.close()  # the worker's end lives in the worker alone
                self._workers.append(_Worker(proc, parent_end, self._now()))

    def submit(self, items: Sequence[Any]) -> None:
        """Send ``items`` (one task, run in order by one worker) to the least busy worker,
        starting one if fewer than ``n_jobs`` run. Check :meth:`can_take` first."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        idle = [w for w in self._workers if not w.tasks]
        if not idle and len(self._workers) < self.n_jobs:
            try:
                self._start(1)
            except OSError:  # cannot start a process now (memory): use the others
                if not self._workers:
                    raise
        w = min(self._workers, key=lambda w: len(w.tasks))
        if not w.items and w.ready:  # an idle worker starts this item now
            w.since, w.phase, w.size, w.mtime_ns = self._now(), "open", 0, 0
        w.items.extend(items)
        w.tasks.append(len(items))
        try:
            w.conn.send((list(items), self._payload))
        except OSError:
            pass  # the worker died: poll() sees it and hands its items back

    # ------------------------------------------------------------------ poll
    def poll(self, timeout: float) -> list[Done | Failed | Lost | Returned]:
        """Wait up to ``timeout`` seconds for work to finish; return what happened.

        Messages of every worker are read, lost workers (dead, or past their item's
        deadline: killed now) are dropped with their items handed back, and killed
        processes are reaped. Returns at once when something happened.
        """
        if self._left is not None:  # the clock was frozen since the last poll
            self._away += time.monotonic() - self._left
            self._left = None
        try:
            return self._poll(timeout)
        finally:
            self._left = time.monotonic()

    def _poll(self, timeout: float) -> list[Done | Failed | Lost | Returned]:
        from multiprocessing.connection import wait as wait_for_ready

        events: list[Done | Failed | Lost | Returned] = []
        busy = [w for w in self._workers if w.items or not w.ready]
        if busy:
            wait = min(self._deadline(w) for w in busy) - self._now()
            timeout = max(0.0, min(timeout, wait))
        handles = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
        ready = set(wait_for_ready(handles, timeout)) if handles else set()
        if not handles:
            time.sleep(timeout)
        for w in list(self._workers):
            dead = w.proc.sentinel in ready
            if w.conn in ready or dead:
                dead = not self._read(w, events, dead) or dead
            if dead:
                self._lose(w, "died", events)
        now = self._now()
        for w in list(self._workers):
            if (w.items or not w.ready) and now > self._deadline(w):
                self._lose(w, "timeout", events)
        self._dying = [p for p in self._dying if not _reaped(p, 0)]
        return events

    def _read(self, w: _Worker, events: list, dead: bool) -> bool:
        """Read every message ``w`` has sent; False when its pipe is closed (it died).

        The pipe of a dead worker is read without blocking: a message it was killed in
        the middle of sending is never completed."""
        conn = w.conn
        if dead:
            try:
                os.set_blocking(conn.fileno(), False)
            except (OSError, ValueError):
                return False
            except AttributeError:  # pragma: no cover - Windows: a dead pipe is broken
                pass
        while True:
            try:
                if not conn.poll():
                    return True
                message = conn.recv()
            except (EOFError, OSError):  # closed, reset, or a half message of the dead
                return False
            except Exception as exc:  # a result that cannot be unpickled here
                message = ("failed", _text(exc))
            self._handle(w, message, events)

    def _handle(self, w: _Worker, message: tuple, events: list) -> None:
        kind = message[0]
        if kind == "ready":
            w.ready = True
            w.since, w.phase = self._now(), "open"
        elif not w.items:  # nothing is expected from an idle worker
            return
        elif kind in ("done", "failed"):
            item = w.next_item(self._now())
            events.append(Done(item, message[1]) if kind == "done" else Failed(item, message[1]))
        elif kind in PHASES:
            w.phase = kind
            if kind == "read":
                w.size, w.mtime_ns = int(message[1]), int(message[2])

    def _lose(self, w: _Worker, cause: str, events: list) -> None:
        """Drop ``w`` (killing it): its current item is :class:`Lost`, the others are
        :class:`Returned`."""
        self._workers.remove(w)
        _kill(w.proc)
        self._dying.append(w.proc)
        w.conn.close()
        if not w.items:
            return
        items = list(w.items)
        seconds = self._deadline(w) - w.since if cause == "timeout" else self._now() - w.since
        events.append(Lost(items[0], cause, w.phase, w.size, w.mtime_ns, seconds))
        if len(items) > 1:
            events.append(Returned(items[1:]))

    # ------------------------------------------------------------------ close
    def close(self, *, kill: bool = True, grace: float = 2.0) -> None:
        """Stop every worker and reap it within ``grace`` seconds.

        ``kill``: at once (SIGKILL), whatever they are doing; else idle workers are asked
        to exit and the others killed. Never waits for work. A process the kernel does
        not let die (stuck in an uninterruptible read) is left behind after ``grace``.
        """
        if self._closed:
            return
        self._closed = True
        workers, self._workers = self._workers, []
        for w in workers:
            if kill or w.items:
                _kill(w.proc)
            else:
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + grace
        for w in workers:
            if not _reaped(w.proc, max(0.0, deadline - time.monotonic())):
                _kill(w.proc)
                _reaped(w.proc, max(0.0, deadline - time.monotonic()))
            w.conn.close()
        for proc in self._dying:
            _reaped(proc, max(0.0, deadline - time.monotonic()))
        self._dying = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)


def _kill(proc: Any) -> None:
    try:
        proc.kill()
    except (OSError, ValueError, AttributeError):  # gone already
        pass


def _reaped(proc: Any, timeout: float) -> bool:
    """Join ``proc`` for up to ``timeout`` seconds; True if it has exited."""
    try:
        proc.join(timeout)
        return proc.exitcode is not None
    except (OSError, ValueError, AssertionError):
        return True
