"""Feature extraction on a Dask cluster: ``simile index FOLDER --cluster SPEC``.

:func:`extract_on_cluster` is :func:`engine.index.extract.extract_parallel` on the
workers of a ``dask.distributed`` cluster: one task per photo (decode + SIFT + metadata,
:func:`engine.index.extract.extract_file`), results yielded as they complete, as the
same :class:`engine.index.extract.ExtractResult` records. The calling process keeps
everything else -- the catalogue, the feature store, fitting and encoding the search
models -- so one process commits, and :func:`engine.index.ingest.ingest` writes the
results in the work list's order whatever order they come back in: the index is the
one a serial run makes.

The cluster (:func:`parse_cluster`):

- ``local:N`` -- a ``LocalCluster`` of N worker processes on this machine (one thread
  each), started for the run and closed at its end;
- ``tcp://HOST:PORT`` (or ``tls://``) -- an existing scheduler (``dask scheduler``) and
  its workers (``dask worker tcp://HOST:PORT``), which are left running.

Workers that cannot see the folder are sent the bytes. Before the first task every
worker connected is asked (:func:`probe_worker`) whether it sees a few of the files with
the same size and modification time, and which Simile and OpenCV it runs (they must be
this process's, or the features would differ: :class:`ClusterError`). If every worker
sees them, tasks name the path and each worker reads the file itself; otherwise this
process reads each file (:func:`engine.index.extract.read_photo`) and sends its bytes.
A worker that, in a task naming a path, does not see that file as this process does
(another machine's disk, a later worker, a changed file) hands the task back, and the
file is sent as bytes. ``send_bytes=True``/``False`` forces either way. At most
:data:`BYTES_IN_FLIGHT` bytes are sent ahead of the workers.

Every worker process is set up once, as the local pool's are (:func:`setup_worker`: one
OpenCV thread per task, freed memory kept for the next photo), also on a scheduler's
workers started by hand.

Nothing stops the run for one file: a file that fails to decode is a failure record,
as in a local run; a worker that dies (killed, out of memory) has its tasks run again on
another worker by Dask (``distributed.scheduler.allowed-failures``, 3 by default), and a
file on which more workers died is reported as crashing the decoder
(:data:`engine.index.extract.CRASH_REASON`). Unlike the local pool's, a task has no time
limit: a read that never returns (a stalled network drive) holds its worker thread until
the run is cancelled. Cancel (or closing the iterator) cancels
every task in flight and returns at once. Losing the scheduler stops the run with
:class:`ClusterError` (an :class:`engine.index.extract.ExtractionStopped`: ``ingest``
writes the results yielded before it), and the next run completes the index, as after
any interruption.

Dask is an optional dependency (``pip install "simile[cluster]"``), imported only here
and only when a cluster is asked for.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.index.extract import (
    CRASH_REASON,
    ExtractionStopped,
    ExtractResult,
    PhotoBytes,
    extract_file,
    extract_photo,
    keep_heap_warm,
    read_photo,
)

if TYPE_CHECKING:  # pragma: no cover
    from distributed import Client, Future

    from engine.features.keypoints import Features

__all__ = [
    "DASK_MISSING",
    "ClusterError",
    "ClusterSpec",
    "DaskMissingError",
    "extract_on_cluster",
    "open_cluster",
    "parse_cluster",
    "probe_worker",
    "require_dask",
    "setup_worker",
]

#: what a run on a cluster says when Dask is not installed
DASK_MISSING = '--cluster needs Dask: pip install "simile[cluster]"'

#: seconds to wait for a scheduler to answer, and for a first worker to join it
CONNECT_TIMEOUT = 20.0
WORKER_WAIT = 60.0

#: files whose visibility every worker is asked about before the first task
PROBE_FILES = 3

#: seconds between two looks at the cancel event while tasks run
POLL = 0.2

#: bytes of files sent and not yet extracted (held by the scheduler until a worker is
#: free): at least one file is always in flight, whatever its size
BYTES_IN_FLIGHT = 512 * 2**20

_SCHEMES = ("tcp://", "tls://")


class DaskMissingError(ImportError):
    """A cluster was asked for but Dask (``distributed``) is not installed."""


class ClusterError(ExtractionStopped):
    """The Dask cluster cannot do the work: the scheduler cannot be reached or was lost,
    no worker joined it, or its workers run another Simile or OpenCV (the results
    yielded before are good: :func:`engine.index.ingest.ingest` keeps them)."""


@dataclass(frozen=True)
class ClusterSpec:
    """Which cluster to run on (:func:`parse_cluster`).

    Attributes
    ----------
    workers : int
        Worker processes of a local cluster started for the run; 0 for a scheduler's.
    address : str or None
        Address of an existing scheduler (``tcp://HOST:PORT``); None for a local one.
    """

    workers: int = 0
    address: str | None = None

    def __str__(self) -> str:
        return self.address if self.address is not None else f"local:{self.workers}"


def parse_cluster(spec: str | ClusterSpec) -> ClusterSpec:
    """Read a ``--cluster`` value: ``local:N`` or ``tcp://HOST:PORT`` (``tls://`` too).

    Parameters
    ----------
    spec : str or ClusterSpec

    Returns
    -------
    ClusterSpec

    Raises
    ------
    ValueError
        Anything else, with the forms accepted.
    """
    if isinstance(spec, ClusterSpec):
        return spec
    text = str(spec).strip()
    usage = (
        f"--cluster must be local:N (N worker processes on this machine) or "
        f"tcp://HOST:PORT (a running Dask scheduler), got {spec!r}"
    )
    if text.startswith("local:"):
        n = text[len("local:") :]
        if not n.isdigit() or int(n) < 1:
            raise ValueError(usage)
        return ClusterSpec(workers=int(n))
    if text.startswith(_SCHEMES):
        host, _, port = text.split("://", 1)[1].rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return ClusterSpec(address=text)
    raise ValueError(usage)


def require_dask() -> None:
    """Raise :class:`DaskMissingError` (:data:`DASK_MISSING`) unless
    ``dask.distributed`` can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError as exc:
        raise DaskMissingError(DASK_MISSING) from exc


@contextmanager
def open_cluster(spec: str | ClusterSpec) -> Iterator[Client]:
    """A Dask client of the cluster ``spec``, closed on exit (a local cluster with it:
    no process is left behind).

    Parameters
    ----------
    spec : str or ClusterSpec
        See :func:`parse_cluster`.

    Yields
    ------
    distributed.Client

    Raises
    ------
    DaskMissingError
        Dask is not installed.
    ClusterError
        The scheduler cannot be reached.
    """
    spec = parse_cluster(spec)
    require_dask()
    from distributed import Client, LocalCluster

    if spec.address is None:
        cluster = LocalCluster(
            n_workers=spec.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",  # nothing listens beyond this machine
            dashboard_address="127.0.0.1:0",  # any free port (Dask serves HTTP routes anyway)
            silence_logs=logging.CRITICAL,  # what matters comes back as results
            preload=[__name__],  # dask_setup below: each worker set up as ours are
        )
        try:
            with Client(cluster, set_as_default=False) as client:
                yield client
        finally:
            cluster.close()
        return
    try:
        client = Client(spec.address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach the Dask scheduler at {spec.address} ({exc}); start it with "
            "'dask scheduler' and its workers with "
            f"'dask worker {spec.address}'"
        ) from None
    try:
        yield client
    finally:
        with _quiet_dask_logs():  # a lost scheduler: no traceback of its reconnection
            client.close()


@contextmanager
def _quiet_dask_logs() -> Iterator[None]:
    """Dask's client logs nothing below CRITICAL inside the block."""
    loggers = [logging.getLogger(name) for name in ("distributed", "distributed.client")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def dask_setup(worker: Any) -> None:
    """Preload of the workers of a local cluster (:func:`open_cluster`): Ctrl-C is left
    to this process (which cancels the run), and the worker is set up for extraction
    (:func:`setup_worker`) before its first task."""
    import signal

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup_worker()


_SET_UP = False


def setup_worker() -> None:
    """Set up this worker process for extraction once, as the local run's workers are
    (:func:`engine.index.extract.init_worker`): one OpenCV thread per task thread (Dask
    runs one task per thread), freed memory kept for the next image
    (:func:`engine.index.extract.keep_heap_warm`). Called by every task: it runs on the
    workers of any cluster, also those of a scheduler started by hand."""
    global _SET_UP
    if _SET_UP:
        return
    _SET_UP = True
    keep_heap_warm()
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover
        pass


def probe_worker(sample: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Run on every worker before the first task: which Simile and OpenCV it runs, and
    whether it sees each ``(path, size, mtime_ns)`` of ``sample`` as this process does.

    Returns
    -------
    dict
        ``{"simile": version, "opencv": version, "sees": bool}``.
    """
    import cv2

    import engine

    return {
        "simile": engine.__version__,
        "opencv": cv2.__version__,
        "sees": all(_sees(path, size, mtime) for path, size, mtime in sample),
    }


def _sees(path: str, size: int, mtime_ns: int) -> bool:
    """Whether this process can read ``path`` and sees it with this size and mtime."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return st.st_size == size and st.st_mtime_ns == mtime_ns and os.access(path, os.R_OK)


def _path_task(
    path: str,
    size: int,
    mtime_ns: int,
    known_hash: str | None,
    feature_kwargs: Mapping[str, Any],
    extractor: Callable[..., Features] | None,
    pack: bool,
) -> ExtractResult | None:
    """Worker task naming a path: ``None`` when this worker does not see the file as the
    calling process does (it is then sent the bytes)."""
    if not _sees(path, size, mtime_ns):
        return None
    setup_worker()
    return extract_file(path, known_hash, feature_kwargs, extractor, pack)


def _bytes_task(
    photo: PhotoBytes,
    known_hash: str | None,
    feature_kwargs: Mapping[str, Any],
    extractor: Callable[..., Features] | None,
    pack: bool,
) -> ExtractResult:
    """Worker task carrying a file's bytes."""
    setup_worker()
    return extract_photo(photo, known_hash, feature_kwargs, extractor, pack)


def extract_on_cluster(
    paths: Iterable[str],
    *,
    cluster: str | ClusterSpec,
    cancel: threading.Event | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    known_hashes: Mapping[str, str] | None = None,
    stats: Mapping[str, tuple[int, int]] | None = None,
    extractor: Callable[..., Features] | None = None,
    pack: bool = False,
    send_bytes: bool | None = None,
    max_in_flight: int | None = None,
    retries: int = 2,
) -> Iterator[ExtractResult]:
    """Extract the features of ``paths`` on a Dask cluster, yielding results as they
    complete (:func:`engine.index.extract.extract_parallel` on Dask workers).

    The spec is checked and Dask imported at the call; the cluster is connected (or
    started) when the first result is asked for, and only if there is a path to do:
    a run with nothing to extract submits no task and starts nothing.

    Parameters
    ----------
    paths : iterable of str
        Files to process.
    cluster : str or ClusterSpec
        ``local:N`` or ``tcp://HOST:PORT`` (:func:`parse_cluster`).
    cancel : threading.Event, optional
        When set, the tasks in flight are cancelled and the iterator ends within
        :data:`POLL` seconds (results not yet yielded are dropped). Closing the iterator
        cancels them too.
    feature_kwargs, known_hashes, extractor, pack
        As in :func:`engine.index.extract.extract_parallel`; ``extractor`` must be a
        module-level function the workers can import.
    stats : mapping of str to (int, int), optional
        ``path -> (size, mtime_ns)`` as scanned; a worker runs a task naming a path only
        if it sees the file so (others are stat'ed here).
    send_bytes : bool, optional
        True: always send the files' bytes; False: always name paths (a worker that
        does not see a file still gets its bytes); None (default): decide by asking
        the workers (see the module docstring).
    max_in_flight : int, optional
        Bound on tasks submitted and not yet finished (default four per worker thread,
        at least 8): bounds this process's memory when it sends bytes.
    retries : int
        Times Dask runs a task again after it raised (``Client.submit(retries=...)``).

    Yields
    ------
    ExtractResult
        One per path (in completion order), unless cancelled.

    Raises
    ------
    ValueError
        A malformed ``cluster``.
    DaskMissingError
        Dask is not installed (:data:`DASK_MISSING`).
    ClusterError
        The scheduler cannot be reached or is lost, no worker joins it within
        :data:`WORKER_WAIT` seconds, or the workers run another Simile or OpenCV.
    """
    spec = parse_cluster(cluster)
    require_dask()
    job = _ClusterJob(
        deque(paths),
        cancel,
        (dict(feature_kwargs or {}), extractor, bool(pack)),
        dict(known_hashes or {}),
        dict(stats or {}),
    )
    return job.run(spec, send_bytes, max_in_flight, int(retries))


class _ClusterJob:
    """The state of one :func:`extract_on_cluster` run."""

    def __init__(
        self,
        todo: deque[str],
        cancel: threading.Event | None,
        common: tuple[dict[str, Any], Callable[..., Features] | None, bool],
        hashes: dict[str, str],
        stats: dict[str, tuple[int, int]],
    ) -> None:
        self.todo = todo
        self.cancel = cancel
        self.common = common
        self.hashes = hashes
        self.stats = stats
        self.as_bytes: set[str] = set()  # paths to send as bytes whatever the mode
        self.in_flight: dict[Future, str] = {}
        self.sent: dict[Future, int] = {}  # bytes sent with the task
        self.done: queue.Queue[Future] = queue.Queue()  # finished tasks, as they finish

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def run(
        self, spec: ClusterSpec, send_bytes: bool | None, max_in_flight: int | None, retries: int
    ) -> Iterator[ExtractResult]:
        """The iterator of :func:`extract_on_cluster`."""
        if not self.todo or self.cancelled():
            return
        with open_cluster(spec) as client:
            try:
                threads = self._wait_for_workers(client, spec)
                if threads == 0:  # cancelled while waiting
                    return
                if send_bytes is None:
                    send_bytes = not self._workers_see_files(client, spec)
                else:
                    self._workers_see_files(client, spec)  # the version check
                limit = max_in_flight or max(8, 4 * threads)
                yield from self._loop(client, bool(send_bytes), limit, retries)
            finally:  # cancel, close or an exception: nothing is left running
                if self.in_flight:
                    client.cancel(list(self.in_flight), force=True)
                    self.in_flight.clear()
                    self.sent.clear()

    def _wait_for_workers(self, client: Client, spec: ClusterSpec) -> int:
        """Threads of the cluster's workers once one has joined; 0 if cancelled first."""
        deadline = time.monotonic() + WORKER_WAIT
        while True:
            threads = sum(client.nthreads().values())
            if threads:
                return threads
            if self.cancelled():
                return 0
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"no Dask worker joined the scheduler at {spec} within {WORKER_WAIT:.0f} "
                    f"s; start workers with 'dask worker {spec}'"
                )
            time.sleep(POLL)

    def _workers_see_files(self, client: Client, spec: ClusterSpec) -> bool:
        """Ask every worker (:func:`probe_worker`); raise :class:`ClusterError` if one
        runs another Simile or OpenCV; whether all see the first files as we do."""
        import cv2

        import engine

        sample = []
        for path in list(self.todo)[:PROBE_FILES]:
            stat = self._stat(path)
            if stat is not None:
                sample.append((path, *stat))
        try:
            answers = client.run(probe_worker, sample)
        except ImportError as exc:
            raise ClusterError(
                f"the Dask workers of {spec} cannot run Simile ({exc}); install the same "
                f'version on every worker: pip install "simile[cluster]"=={engine.__version__}'
            ) from None
        ours = {"simile": engine.__version__, "opencv": cv2.__version__}
        for worker, answer in sorted(answers.items()):
            for name, version in ours.items():
                if answer[name] != version:
                    raise ClusterError(
                        f"the Dask worker {worker} runs {name} {answer[name]}, this process "
                        f"{version}: features would differ; install the same versions on "
                        "every worker"
                    )
        return bool(sample) and all(answer["sees"] for answer in answers.values())

    def _stat(self, path: str) -> tuple[int, int] | None:
        """``(size, mtime_ns)`` as scanned, or as this process sees it now."""
        if path in self.stats:
            return self.stats[path]
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        return st.st_size, st.st_mtime_ns

    def _loop(
        self, client: Client, send_bytes: bool, limit: int, retries: int
    ) -> Iterator[ExtractResult]:
        """Keep at most ``limit`` tasks in flight; yield their results."""
        while self.todo or self.in_flight:
            if self.cancelled():
                return
            while self.todo and len(self.in_flight) < limit and self._room():
                path = self.todo.popleft()
                failed = self._submit(client, path, send_bytes, retries)
                if failed is not None:  # unreadable here: never sent
                    yield failed
                    if self.cancelled():
                        return
            if not self.in_flight:
                continue
            for future in self._finished():
                path = self.in_flight.pop(future)
                self.sent.pop(future, None)
                result = self._result(future, path)
                if result is None:  # the worker does not see the file: send its bytes
                    self.as_bytes.add(path)
                    self.todo.appendleft(path)
                else:
                    yield result
                if self.cancelled():
                    return

    def _room(self) -> bool:
        """Whether another file's bytes may be sent (:data:`BYTES_IN_FLIGHT`)."""
        return not self.sent or sum(self.sent.values()) < BYTES_IN_FLIGHT

    def _finished(self) -> list[Future]:
        """The tasks finished so far, waiting up to :data:`POLL` s for a first one."""
        try:
            done = [self.done.get(timeout=POLL)]
        except queue.Empty:
            return []
        while True:
            try:
                done.append(self.done.get_nowait())
            except queue.Empty:
                return [future for future in done if future in self.in_flight]

    def _submit(
        self, client: Client, path: str, send_bytes: bool, retries: int
    ) -> ExtractResult | None:
        """Submit the task of ``path``; the failure record of a file this process was to
        send and cannot read (no task then)."""
        import dask

        known = self.hashes.get(path)
        stat = None if send_bytes or path in self.as_bytes else self._stat(path)
        if stat is None:
            photo = read_photo(path, self.common[1])
            if isinstance(photo, ExtractResult):
                return photo
            self.stats[path] = (photo.size, photo.mtime_ns)
            with dask.config.set({"distributed.admin.large-graph-warning-threshold": "64GiB"}):
                future = client.submit(  # (a photo is no "large graph" to warn about)
                    _bytes_task, photo, known, *self.common, pure=False, retries=retries
                )
            self.sent[future] = len(photo.data)
        else:
            self.stats[path] = stat
            future = client.submit(
                _path_task, path, *stat, known, *self.common, pure=False, retries=retries
            )
        self.in_flight[future] = path
        future.add_done_callback(self.done.put)  # (called in a thread of Dask's)
        return None

    def _result(self, future: Future, path: str) -> ExtractResult | None:
        """The result of a finished task, or the failure record of a failed one."""
        if future.status == "finished":
            return future.result()
        if future.status in ("cancelled", "lost"):  # not by us: the scheduler forgot it
            raise ClusterError(
                "the Dask scheduler lost the run's tasks (restarted or unreachable?); "
                "what is finished is kept: run again to complete the index"
            )
        exc = future.exception()
        from distributed import KilledWorker

        if isinstance(exc, KilledWorker):  # kept with its stat: retried once changed
            size, mtime = self.stats.get(path, (0, 0))
            return ExtractResult(path, None, CRASH_REASON, size, mtime)
        text = str(exc)
        reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return ExtractResult(path, None, f"failed on the Dask cluster: {reason}")
