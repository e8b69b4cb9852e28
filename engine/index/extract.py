"""Parallel feature extraction in worker processes, one file never stopping the batch.

:func:`extract_parallel` runs :func:`engine.features.extract_features` in worker
processes (:class:`engine.index.workers.WorkerPool`) with a bounded number of files in
flight. The workers are forked on Linux when the calling process runs no other Python
thread and has not loaded Qt (the ``simile`` command line): they then start at once with
everything imported. Otherwise (a GUI, any threaded caller, other systems) they are
spawned, which is safe everywhere (:func:`worker_context`).

No file stops the batch, and nothing hangs it:

- A worker that dies (segfaulting decoder, OOM killer) is replaced; the file it was on is
  retried alone, with nothing else running, and reported as failed (:data:`CRASH_REASON`)
  if its worker dies again, while every other file is still indexed.
- A file not finished within :data:`FILE_TIMEOUT` seconds plus :data:`FILE_TIMEOUT_PER_MB`
  per MiB (a read blocked on a stalled network share or FUSE file, a decoder that loops)
  has its worker killed and is reported as failed (:func:`timeout_reason`); it is retried
  by the next run.
- Closing the iterator, Ctrl-C in the caller or its ``cancel`` event kill the workers at
  once; a worker never sees Ctrl-C itself, and ends by itself within a second when its
  parent is killed.

Each file is opened without blocking (a FIFO put in its place never hangs the open),
checked to be a regular file below :data:`engine.io.imageio.MAX_FILE_BYTES`, and sniffed
from its first bytes before it is read whole.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.index.workers import (
    FILE_TIMEOUT,
    FILE_TIMEOUT_PER_MB,
    Done,
    Failed,
    Lost,
    Returned,
    WorkerPool,
    worker_context,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.store import PackedFeatures
    from engine.io.metadata import PhotoMetadata

__all__ = [
    "CRASH_REASON",
    "FILE_TIMEOUT",
    "FILE_TIMEOUT_PER_MB",
    "ExtractResult",
    "ExtractionStopped",
    "PhotoBytes",
    "default_jobs",
    "extract_file",
    "extract_parallel",
    "extract_photo",
    "keep_heap_warm",
    "outcome",
    "read_photo",
    "timeout_reason",
    "worker_context",
]

CRASH_REASON = "the decoder crashed on this file (worker process died)"


class ExtractionStopped(RuntimeError):
    """Extraction cannot go on for a reason that is no file's (a Dask cluster that was
    lost): the results yielded so far are good, and
    :func:`engine.index.ingest.ingest` writes them before the error goes on."""


@dataclass(frozen=True)
class ExtractResult:
    """Outcome of extracting one file.

    Attributes
    ----------
    path : str
    features : Features, PackedFeatures or None
        ``None`` when ``error`` is set or ``same_content`` is true; packed (the store's
        8-bit codes) when :func:`extract_parallel` was asked to ``pack``.
    error : str or None
        Human-readable reason the file could not be indexed.
    size, mtime_ns : int
        File stat taken BEFORE reading it (a later edit is seen as a change next run).
    content_hash : str or None
        :func:`engine.scan.content_hash` of the file, ``None`` if it could not be read.
    same_content : bool
        The hash equals the known hash given for this path: extraction was skipped.
    metadata : PhotoMetadata or None
        What the photo records about itself (:func:`engine.io.metadata.read_metadata`,
        read from the same bytes), when its features were extracted.
    """

    path: str
    features: Features | PackedFeatures | None
    error: str | None
    size: int = 0
    mtime_ns: int = 0
    content_hash: str | None = None
    same_content: bool = False
    metadata: PhotoMetadata | None = None


def default_jobs() -> int:
    """Number of worker processes: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


#: files per worker task of :func:`ingest` (see ``extract_parallel(files_per_task=...)``)
INGEST_FILES_PER_TASK = 4

#: glibc ``mallopt`` parameters (malloc.h) and the values our workers use.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_WORKER_MMAP_THRESHOLD = 32 * 1024 * 1024  # the largest glibc accepts on 64-bit
_WORKER_TRIM_THRESHOLD = 512 * 1024 * 1024


def keep_heap_warm() -> bool:
    """Let this process reuse freed memory instead of returning it to the OS (glibc).

    Decoding and SIFT allocate and free the same large buffers for every image (the
    upsampled Gaussian and DoG pyramids, ~100 MB at 1024 pixels a side). glibc serves
    blocks above its mmap threshold with fresh ``mmap`` calls and trims the heap on free,
    so every image page-faults all of those pages in again: on UKBench 1 M minor faults
    for 500 images, ~35 % of the extraction's CPU time (42 against 27 ms per image in
    one process). Raising the mmap and trim thresholds keeps the buffers in the heap
    for the next image. The index's own work in the calling process (fitting the
    vocabulary trees, encoding every image's pyramids in batches of megabytes) gains
    as much: on UKBench its CPU time falls from 6.5-7.8 to 4.6-5.8 s, its page faults
    from 110,000-435,000 to 18,000-31,000.

    All threads also share one malloc arena. glibc otherwise gives each thread that
    allocates its own arena, whose heaps are unmapped as soon as they are empty, whatever
    the trim threshold; the model-fitting and encoding threads of a first index then
    fault their blocks in again and again. With one arena a first UKBench index makes
    35,000-39,000 page faults in the calling process instead of 70,000-75,000 (14,000 of
    them are the imports) and spends 0.5-0.6 instead of 0.7-1.1 s in the kernel.
    Numpy's allocations are large and few, so sharing the arena's lock costs nothing
    measurable.

    Numpy is also told not to ask for transparent huge pages (``madvise(MADV_HUGEPAGE)``
    on every array of 4 MB or more, its default): where the kernel grants them on
    request only (``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``, the
    usual setting), faulting them in costs more kernel time than the fewer TLB misses
    save. On this project's 2-core machine a first UKBench index's process spent 0.31
    instead of 0.73 s in the kernel (3.47 against 3.71 s of CPU, medians of 6 alternating
    pairs), and a query process at 10,000 images loaded its index in 1.2-1.5 instead of
    3.0-3.4 s, queries no slower.

    Process-wide and for good (glibc has no way back to its dynamic thresholds), the
    heap then stays at its peak until the process exits: only for processes that exist
    to do this work -- the extraction workers, the ``simile`` command line (every
    sub-command) and the GUI's indexing process, not the GUI itself or a library user's
    process. Returns False where it does not apply (not glibc).
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "sched_getaffinity"):  # glibc / Linux only
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # pragma: no cover - musl and others
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, _WORKER_MMAP_THRESHOLD)
    ok &= mallopt(_M_TRIM_THRESHOLD, _WORKER_TRIM_THRESHOLD)
    ok &= mallopt(_M_ARENA_MAX, 1)
    numpy_huge_pages(False)
    return bool(ok)


def numpy_huge_pages(enable: bool) -> bool:
    """Set whether numpy advises huge pages for its large arrays; returns the old setting
    (numpy's own switch, also read from ``NUMPY_MADVISE_HUGEPAGE`` at import)."""
    try:
        from numpy._core import multiarray
    except ImportError:  # pragma: no cover - numpy < 2
        from numpy.core import multiarray
    return bool(multiarray._set_madvise_hugepage(bool(enable)))


def init_worker() -> None:
    """Worker set-up: leave Ctrl-C to the parent, one OpenCV thread per process, keep
    freed memory for the next image (:func:`keep_heap_warm`)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_heap_warm()
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover
        pass


def _describe(exc: BaseException) -> str:
    from engine.io.imageio import ImageLoadError

    if isinstance(exc, ImageLoadError):
        return exc.reason
    if isinstance(exc, MemoryError):
        return "out of memory while decoding"
    if isinstance(exc, OSError):
        return f"cannot read file: {exc.strerror or exc}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class PhotoBytes:
    """A file read whole for extraction (:func:`read_photo`).

    Attributes
    ----------
    path : str
    data : bytes
        The file's bytes.
    size, mtime_ns : int
        Its stat, taken before it was read.
    """

    path: str
    data: bytes
    size: int
    mtime_ns: int


def read_photo(
    path: str,
    extractor: Callable[..., Features] | None = None,
    report: Callable[..., None] | None = None,
) -> PhotoBytes | ExtractResult:
    """Stat and read one file whole for extraction; never raises.

    The file is opened without blocking, checked to be a regular file below
    :data:`engine.io.imageio.MAX_FILE_BYTES` and (unless a replacement ``extractor`` is
    given) sniffed from its first bytes before it is read whole.

    Parameters
    ----------
    path : str
    extractor : callable, optional
        A replacement extractor: the file is then read whatever its first bytes.
    report : callable, optional
        In a worker, told when the read starts, with the file's stat
        (:data:`engine.index.workers.PHASES`).

    Returns
    -------
    PhotoBytes or ExtractResult
        The bytes, or the failure record of a file that cannot be read.
    """
    from engine.io.imageio import MAX_FILE_BYTES, sniff_format

    try:  # O_NONBLOCK: a FIFO put in the file's place never blocks the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return ExtractResult(path, None, f"cannot read file: {exc.strerror or exc}")
    with open(fd, "rb", closefd=True) as fh:
        try:
            st = os.fstat(fd)
        except OSError as exc:
            return ExtractResult(path, None, f"cannot read file: {exc.strerror or exc}")
        size, mtime = st.st_size, st.st_mtime_ns
        if not stat_mod.S_ISREG(st.st_mode):
            return ExtractResult(path, None, "not a regular file", size, mtime)
        if size > MAX_FILE_BYTES:
            reason = (
                f"file too large for an image ({size / 2**30:.1f} GiB; the limit is "
                f"{MAX_FILE_BYTES / 2**30:.0f} GiB)"
            )
            return ExtractResult(path, None, reason, size, mtime)
        if report is not None:
            report("read", size, mtime)
        try:
            head = fh.read(32)
            if extractor is None and sniff_format(head) is None:  # not read whole
                reason = (
                    "not a supported image: the file does not start like any image format "
                    "Simile reads (JPEG, PNG, GIF, BMP, TIFF, WebP, HEIC/HEIF, AVIF, RAW)"
                    if head
                    else "empty file (0 bytes)"
                )
                return ExtractResult(path, None, reason, size, mtime)
            data = head + fh.read()
        except OSError as exc:
            reason = f"cannot read file: {exc.strerror or exc}"
            return ExtractResult(path, None, reason, size, mtime)
        except MemoryError:
            return ExtractResult(path, None, "out of memory while reading the file", size, mtime)
    return PhotoBytes(path, data, size, mtime)


def extract_photo(
    photo: PhotoBytes,
    known_hash: str | None,
    feature_kwargs: Mapping[str, Any],
    extractor: Callable[..., Features] | None,
    pack: bool = False,
) -> ExtractResult:
    """Hash and (unless the hash is ``known_hash``) extract the features and read the
    metadata of a file read by :func:`read_photo`; never raises.

    Wherever it runs (this process, a worker process, a Dask worker that was sent the
    bytes), the same bytes give the same result.

    Parameters
    ----------
    photo : PhotoBytes
    known_hash : str or None
        The content hash already indexed for this path: extraction is skipped if equal.
    feature_kwargs : mapping
        Keyword arguments of :func:`engine.features.extract_features`.
    extractor : callable or None
        Replacement for ``extract_features``, called as ``extractor(data, **kw)``.
    pack : bool
        Features in the store's 8-bit codec (:class:`engine.store.PackedFeatures`).

    Returns
    -------
    ExtractResult
    """
    path, data, size, mtime = photo.path, photo.data, photo.size, photo.mtime_ns
    chash = hashlib.blake2b(data, digest_size=16).hexdigest()  # == scan.content_hash(path)
    if known_hash is not None and chash == known_hash:
        return ExtractResult(path, None, None, size, mtime, chash, True)
    if extractor is None:
        from engine.features.keypoints import extract_features as extractor
    try:
        feats = extractor(data, **feature_kwargs)
        if pack:
            from engine.index.store import PackedFeatures

            feats = PackedFeatures.pack(feats)
    except Exception as exc:  # bad input never stops the run
        return ExtractResult(path, None, _describe(exc), size, mtime, chash)
    from engine.io.metadata import read_metadata

    meta = read_metadata(data)  # (headers only, from the bytes in memory; never raises)
    return ExtractResult(path, feats, None, size, mtime, chash, metadata=meta)


def extract_file(
    path: str,
    known_hash: str | None,
    feature_kwargs: Mapping[str, Any],
    extractor: Callable[..., Features] | None,
    pack: bool = False,
    report: Callable[..., None] | None = None,
) -> ExtractResult:
    """Stat, read, hash and (unless the hash is known) extract one file and read its
    metadata; never raises.

    The file is read once (:func:`read_photo`): the same bytes are hashed and handed to
    the extractor (:func:`extract_photo`; :func:`engine.features.extract_features`
    accepts encoded bytes). ``pack``: features in the store's 8-bit codec where it
    applies (:class:`engine.store.PackedFeatures`). ``report``: in a worker, told when
    the read starts (with the file's stat) and ends (:data:`engine.index.workers.PHASES`),
    which sets and explains its time limit.
    """
    photo = read_photo(path, extractor, report)
    if isinstance(photo, ExtractResult):
        return photo
    if report is not None:
        report("extract")
    return extract_photo(photo, known_hash, feature_kwargs, extractor, pack)


def outcome(res: ExtractResult) -> tuple[str, str]:
    """Progress ``(status, message)`` of one extraction result."""
    if res.error is not None:
        return "failed", res.error
    if res.same_content:
        return "unchanged", "content unchanged"
    return "indexed", f"{len(res.features)} features"


def timeout_reason(phase: str, seconds: float) -> str:
    """Failure reason of a file abandoned after ``seconds`` in ``phase``
    (:data:`engine.index.workers.PHASES`)."""
    if phase == "extract":
        return f"extracting features did not finish within {seconds:.0f} s (abandoned)"
    return (
        f"reading the file did not finish within {seconds:.0f} s "
        "(abandoned; a stalled network drive?)"
    )


def extract_parallel(
    paths: Iterable[str],
    *,
    jobs: int | None = None,
    cancel: threading.Event | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    known_hashes: Mapping[str, str] | None = None,
    max_in_flight: int | None = None,
    extractor: Callable[..., Features] | None = None,
    mp_context: Any = None,
    files_per_task: int = 1,
    pack: bool = False,
    timeout: float | None = FILE_TIMEOUT,
    timeout_per_mb: float = FILE_TIMEOUT_PER_MB,
) -> Iterator[ExtractResult]:
    """Extract features of ``paths`` in parallel, yielding results as they complete.

    Parameters
    ----------
    paths : iterable of str
        Files to process.
    jobs : int, optional
        Worker processes (default :func:`default_jobs`, capped at ``len(paths)``).
        ``1`` runs in this process, without ``timeout``: a read that never returns blocks
        the caller (used by tests and tiny updates).
    cancel : threading.Event, optional
        When set, no new file is submitted, the workers are killed whatever they are
        doing and the iterator ends after at most ~0.2 s (results already finished are
        not yielded). Closing the iterator (or an exception in its consumer, such as
        Ctrl-C's ``KeyboardInterrupt``) kills them as well.
    feature_kwargs : mapping, optional
        Keyword arguments of :func:`engine.features.extract_features`.
    known_hashes : mapping of str to str, optional
        ``path -> content hash`` already indexed: a file whose hash matches is not
        extracted (``same_content=True``).
    max_in_flight : int, optional
        Bound on submitted-but-unfinished files (default ``4 * jobs * files_per_task``,
        at most two tasks per worker), which bounds memory whatever the number of paths.
    extractor : callable, optional
        Replacement for ``extract_features``, called as ``extractor(data: bytes, **kw)``
        (a module-level function, so that worker processes can import it).
    mp_context : multiprocessing context, optional
        Default :func:`worker_context`. A worker started to replace a lost one is forked
        only if :func:`worker_context` allows it then, whatever this says.
    files_per_task : int
        Files sent to a worker at once (each result still comes back on its own). Each
        task is a round trip between this process and the worker, which on a busy
        machine can leave a worker waiting: for decode + SIFT (~25 ms a photo) 4 files
        per task cost about 0.4 s less on UKBench's 500 photos than 1 (a floor run with
        ``ProcessPoolExecutor.map``'s chunks of 1 against 8). When a worker dies, the
        files of its tasks it had not started are not blamed: they go back in the queue.
    pack : bool
        Return features whose values are all in [0, 1] as
        :class:`engine.store.PackedFeatures` (the store's 8-bit codes: what
        :meth:`engine.store.IndexStore.write_batch` keeps of them anyway, a quarter of
        the bytes to send between processes).
    timeout, timeout_per_mb : float
        A file not read and extracted within ``timeout + timeout_per_mb * size / 2**20``
        seconds (default :data:`FILE_TIMEOUT` = 120 s + :data:`FILE_TIMEOUT_PER_MB` =
        1 s per MiB) is abandoned: its worker is killed and replaced, and the file is
        reported as failed (:func:`timeout_reason`) without its stat, so that the next
        run tries it again. Only time spent waiting for the workers counts, not the
        time the consumer takes between results. ``timeout=None``: no limit.

    Yields
    ------
    ExtractResult
        One per path (in completion order), unless cancelled.
    """
    todo = deque(paths)
    kw = dict(feature_kwargs or {})
    hashes = known_hashes or {}
    n_jobs = default_jobs() if jobs is None else int(jobs)
    if n_jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs!r}")
    n_jobs = min(n_jobs, max(1, len(todo)))
    if jobs == 1 or not todo:
        for path in todo:
            if cancel is not None and cancel.is_set():
                return
            yield extract_file(path, hashes.get(path), kw, extractor, pack)
        return
    per_task = max(1, int(files_per_task))
    limit = max_in_flight or 4 * n_jobs * per_task
    if extractor is None:
        # the extraction's modules (OpenCV, the image readers), imported here rather than
        # with the index's (an update that extracts nothing does without them): a forked
        # worker then starts with them
        import engine.features.dense
        import engine.features.keypoints  # noqa: F401
    pool = WorkerPool(
        n_jobs,
        extract_file,
        (kw, extractor, pack),
        mp_context=mp_context,
        initializer=init_worker,
        timeout=timeout,
        timeout_per_mb=timeout_per_mb,
    )
    finished = False
    try:
        yield from _extract_in_pool(pool, todo, hashes, per_task, limit, cancel)
        finished = True
    finally:  # never waits for work: on cancel, close or an exception workers are killed
        pool.close(kill=not finished)


def _extract_in_pool(
    pool: WorkerPool,
    todo: deque[str],
    hashes: Mapping[str, str],
    per_task: int,
    limit: int,
    cancel: threading.Event | None,
) -> Iterator[ExtractResult]:
    """:func:`extract_parallel` in ``pool``: at most ``limit`` files in flight,
    ``per_task`` per task; a file whose worker died is retried alone (nothing else in
    flight), and reported as crashing if its worker dies then too."""
    suspects: deque[str] = deque()  # files on which a worker died: retried alone
    while todo or suspects or pool.n_items:
        if cancel is not None and cancel.is_set():
            return
        if suspects:
            if not pool.n_items:
                path = suspects.popleft()
                pool.submit([(path, hashes.get(path))])
        else:
            n_files = pool.n_items
            while todo and n_files < limit and pool.can_take():
                # no more than a fair share of what is left per task, so that every
                # worker gets files to the end
                size = min(per_task, limit - n_files, -(-len(todo) // pool.n_jobs))
                chunk = [todo.popleft() for _ in range(size)]
                pool.submit([(path, hashes.get(path)) for path in chunk])
                n_files += size
        alone = pool.n_items == 1  # a crash now is this file's fault
        for event in pool.poll(0.2):
            if isinstance(event, Done):
                yield event.result
            elif isinstance(event, Failed):  # e.g. a result that cannot be pickled
                yield ExtractResult(event.item[0], None, event.error)
            elif isinstance(event, Returned):  # not started by a lost worker
                todo.extendleft(reversed([path for path, _ in event.items]))
            elif isinstance(event, Lost):
                result = _lost_result(event, alone)
                if result is None:
                    suspects.append(event.item[0])
                else:
                    yield result


def _lost_result(event: Lost, alone: bool) -> ExtractResult | None:
    """Result of a file whose worker was lost, ``None`` if it is to be retried alone."""
    path = event.item[0]
    if event.cause == "timeout" and event.phase != "start":
        # no stat: the next run tries it again (the share may be back)
        return ExtractResult(path, None, timeout_reason(event.phase, event.allowed))
    if not alone:
        return None
    if event.cause == "timeout":  # the worker never started
        reason = f"the worker process did not start within {event.allowed:.0f} s"
        return ExtractResult(path, None, reason)
    # record the stat so it is retried only once changed
    return ExtractResult(path, None, CRASH_REASON, event.size, event.mtime_ns)
