"""The pair checks of a duplicate search, run side by side in worker processes.

:func:`verify_pairs` hands the pairs of rows to check (sorted by their first row) to
:data:`VERIFY_WORKERS` processes, in consecutive chunks of :data:`VERIFY_CHUNK` pairs;
given an iterator of blocks of pairs (the candidate search's, block by block), it hands
out the chunks of the first blocks and reads the next ones meanwhile, so that the checks
run while the candidates are still being found.

Each process opens the index read-only once and keeps, per row, the features
(memory-mapped feature chunks, decoded on first use, at most :data:`FEATURE_CACHE` rows),
the gray pixels the pixel test compares (:data:`GRAY_CACHE` rows, at most
:data:`GRAY_CACHE_BYTES`; read-only arrays, so that :mod:`engine.workflows.pixels`
remembers what it derives from them) and the EXIF capture
time (:class:`PairContext`): a photo compared with several neighbours is read once
per process, not once per pair. The answer does not depend on how the pairs are split:
each pair's check reads only its two photos (OpenCV's robust fits are seeded per call).

Processes, not threads: a pair's check is a few hundred small numpy and OpenCV calls, so
threads of one process wait for each other's interpreter lock; two processes use both
cores. Few pairs (fewer than :data:`PROCESS_MIN_PAIRS`) are checked in the calling
process (starting a process costs about a second of imports).

Cancelling (``cancel`` set) raises :class:`InterruptedError` at once: the chunks not
started are dropped and the worker processes exit after the chunk they are in (a
fraction of a second). The pairs checked until then are returned with the error
(:attr:`VerifyInterrupted.done`) so that the caller can remember them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features

__all__ = [
    "FEATURE_CACHE",
    "GRAY_CACHE",
    "GRAY_CACHE_BYTES",
    "PROCESS_MIN_PAIRS",
    "STREAM_QUEUE",
    "VERIFY_CHUNK",
    "VERIFY_WORKERS",
    "PairContext",
    "VerifyInterrupted",
    "verify_pairs",
]

#: Worker processes of :func:`verify_pairs` (the machine's cores, at most 8).
VERIFY_WORKERS = max(1, min(8, os.cpu_count() or 1))
#: Pairs handed to a worker at a time (about a second of checks).
VERIFY_CHUNK = 128
#: Fewer pairs than this are checked in the calling process.
PROCESS_MIN_PAIRS = 400
#: Chunks queued per worker while the pairs are still being found (the calling process
#: then spends a second or so on the next block of candidates between hand-outs).
STREAM_QUEUE = 6
#: Rows whose features a :class:`PairContext` keeps (~128 KB each at 500 features).
FEATURE_CACHE = 1024
#: Rows whose gray pixels (at ``PIXEL_SIDE``) a :class:`PairContext` keeps at most
#: (0.3 MB each at 320 x 240, 3 MB at 1024 x 768) ...
GRAY_CACHE = 1024
#: ... and at most this many bytes of them.
GRAY_CACHE_BYTES = 128 * 2**20

#: A check: ``check(ctx, i, j) -> evidence`` (or None when the pair is not checkable).
Check = Callable[["PairContext", int, int], Any]


class VerifyInterrupted(InterruptedError):
    """:func:`verify_pairs` was cancelled; :attr:`done` holds the pairs checked."""

    def __init__(self, done: dict[tuple[int, int], Any]) -> None:
        super().__init__("the duplicate search was cancelled")
        self.done = done


class PairContext:
    """What the checks of one process read, per row, kept while they run.

    Parameters
    ----------
    get_features : callable
        ``get_features(row) -> Features`` (e.g. ``store.get_features(ids[row])``).
    paths : sequence of Path
        The file of each row.
    feature_cache : int
        Rows whose features are kept.
    """

    def __init__(
        self,
        get_features: Callable[[int], Features],
        paths: Sequence[Path],
        feature_cache: int = FEATURE_CACHE,
    ) -> None:
        self.paths = paths
        self.feature_cache = feature_cache
        self._get = get_features
        self._features: OrderedDict[int, Features] = OrderedDict()
        self._gray: OrderedDict[int, np.ndarray | None] = OrderedDict()
        self._gray_bytes = 0
        self._taken: dict[int, str | None] = {}
        self._jpeg: dict[int, Any] = {}

    def features(self, row: int) -> Features:
        """The stored features of ``row`` (at most ``feature_cache`` rows kept)."""
        return _cached(self._features, row, self.feature_cache, self._get)

    def gray(self, row: int, max_side: int) -> np.ndarray | None:
        """(H, W) float32 gray levels of ``row``'s file loaded at ``max_side`` (None when
        it cannot be read; at most :data:`GRAY_CACHE` rows and :data:`GRAY_CACHE_BYTES`
        kept)."""
        cache = self._gray
        if row in cache:
            cache.move_to_end(row)
            return cache[row]
        gray = cache[row] = self._load(max_side, row)
        self._gray_bytes += 0 if gray is None else gray.nbytes
        while len(cache) > 1 and (len(cache) > GRAY_CACHE or self._gray_bytes > GRAY_CACHE_BYTES):
            _, old = cache.popitem(last=False)
            self._gray_bytes -= 0 if old is None else old.nbytes
        return gray

    def jpeg(self, row: int):
        """:func:`engine.workflows.pixels.jpeg_facts` of ``row``'s file (its luminance
        quantisation table and size; None for another format), read once."""
        if row not in self._jpeg:
            from engine.workflows.pixels import jpeg_facts

            self._jpeg[row] = jpeg_facts(self.paths[row])
        return self._jpeg[row]

    def taken(self, row: int) -> str | None:
        """EXIF capture time of ``row``'s file (:func:`engine.workflows.keeper.capture_time`)."""
        if row not in self._taken:
            from engine.workflows.keeper import capture_time

            self._taken[row] = capture_time(self.paths[row])
        return self._taken[row]

    def _load(self, max_side: int, row: int) -> np.ndarray | None:
        from engine.io.imageio import load_image
        from engine.workflows.pixels import gray_levels

        try:
            rgb = load_image(str(self.paths[row]), max_side=max_side)
        except Exception:  # a file changed or gone since indexing
            return None
        gray = gray_levels(rgb)
        gray.flags.writeable = False  # (shared by the checks of every pair of the row)
        return gray


def _cached(cache: OrderedDict, key: int, size: int, make: Callable[[int], Any]) -> Any:
    """``make(key)``, remembered in the LRU ``cache`` of ``size`` entries."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = make(key)
    if len(cache) > size:
        cache.popitem(last=False)
    return value


def _check_all(
    ctx: PairContext, check: Check, pairs: Sequence[tuple[int, int]]
) -> list[tuple[int, int, Any]]:
    out = []
    for i, j in pairs:
        ev = check(ctx, int(i), int(j))
        if ev is not None:
            out.append((int(i), int(j), ev))
    return out


# ------------------------------------------------------------------ worker processes
_WORKER: dict[str, Any] = {}


def _worker_init(
    index_dir: str, ids: np.ndarray, paths: list[str], check: Check, feature_cache: int
) -> None:
    """Open the index in a worker process (once)."""
    import cv2

    from engine.index.store import IndexStore

    cv2.setNumThreads(1)
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    store = IndexStore.open(index_dir, readonly=True)
    _WORKER.update(
        ctx=PairContext(
            lambda r: store.get_features(int(ids[r])), [Path(p) for p in paths], feature_cache
        ),
        check=check,
        store=store,
    )


def _exit_with(parent: int) -> None:
    """End this worker process when its parent is gone (killed: no shutdown to wait for)."""
    import time

    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _worker_chunk(pairs: np.ndarray) -> list[tuple[int, int, Any]]:
    from engine.core.blas import single_threaded_blas

    with single_threaded_blas():  # (BLAS products of one pair: one thread, as in a query)
        return _check_all(_WORKER["ctx"], _WORKER["check"], pairs.tolist())


def verify_pairs(
    todo: Sequence[tuple[int, int]] | Iterator[np.ndarray],
    check: Check,
    *,
    index_dir: Path,
    ids: np.ndarray,
    paths: Sequence[Path],
    get_features: Callable[[int], Features],
    workers: int | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[[int], object] | None = None,
    chunk: int = VERIFY_CHUNK,
    feature_cache: int = FEATURE_CACHE,
) -> dict[tuple[int, int], Any]:
    """``check`` of every pair of rows in ``todo``, in worker processes.

    Parameters
    ----------
    todo : sequence of (int, int), or iterator of (m, 2) int arrays
        Pairs of rows, best sorted by their first row (neighbouring pairs share photos).
        An iterator of blocks of pairs (e.g. as a candidate search finds them,
        :func:`engine.workflows.dup_candidates.neighbour_blocks`) is checked as it
        goes: the worker processes check the pairs of the first blocks while the
        iterator makes the next ones (it runs in this process, between the hand-outs).
    check : callable
        ``check(ctx, i, j) -> evidence or None`` with ``ctx`` a :class:`PairContext`;
        picklable (a module-level function or a ``functools.partial`` of one).
    index_dir : Path
        The index the workers open read-only.
    ids : (n,) int64
        The image id of each row.
    paths : sequence of Path
        The file of each row.
    get_features : callable
        ``get_features(row) -> Features`` for checks in this process.
    workers : int, optional
        Processes (default :data:`VERIFY_WORKERS`); 0 or 1: all in this process. Fewer
        than :data:`PROCESS_MIN_PAIRS` pairs are checked here whatever ``workers``.
    cancel : threading.Event, optional
        When set: :class:`VerifyInterrupted` (checked between chunks).
    progress : callable, optional
        ``progress(n_done)`` after each chunk.
    chunk : int
        Pairs handed to a worker at a time.
    feature_cache : int
        Rows whose features each process keeps (:class:`PairContext`).

    Returns
    -------
    dict
        ``(i, j) -> evidence`` for the pairs whose check returned one (in any order).

    Raises
    ------
    VerifyInterrupted
        When ``cancel`` is set; its ``done`` holds the pairs checked until then.
    """
    workers = VERIFY_WORKERS if workers is None else int(workers)
    chunk = max(1, int(chunk))
    chunks = _Chunks(todo, chunk)
    done: dict[tuple[int, int], Any] = {}
    try:
        # (few pairs: no processes; the first blocks of a stream are read to know)
        here = workers <= 1 or not chunks.at_least(PROCESS_MIN_PAIRS)
        if here:
            from engine.core.blas import single_threaded_blas

            ctx = PairContext(get_features, paths, feature_cache)
            n = 0
            with single_threaded_blas():
                while (part := chunks.next()) is not None:
                    if cancel is not None and cancel.is_set():
                        raise VerifyInterrupted(done)
                    pairs = part.tolist()
                    done.update(((i, j), ev) for i, j, ev in _check_all(ctx, check, pairs))
                    n += len(part)
                    if progress is not None:
                        progress(n)
            return done
    except VerifyInterrupted:
        raise
    except InterruptedError:  # (cancelled while the pairs were being found)
        raise VerifyInterrupted(done) from None
    init = (str(index_dir), np.asarray(ids), [str(p) for p in paths], check, feature_cache)
    return _in_processes(chunks, init, workers, cancel, progress)


class _Chunks:
    """Chunks of ``chunk`` pairs from a sequence of pairs or an iterator of blocks of
    pairs, the blocks read as the chunks are asked for."""

    def __init__(self, todo: Sequence[tuple[int, int]] | Iterable[np.ndarray], chunk: int):
        if isinstance(todo, Sequence | np.ndarray):  # (one block: all the pairs)
            todo = [np.asarray(todo, np.int64).reshape(-1, 2)]
        self._blocks = iter(todo)
        self._ready: deque[np.ndarray] = deque()  # chunks made, not handed out
        self._held = 0  # pairs in them
        self.chunk = chunk
        self.exhausted = False

    def read(self) -> bool:
        """Read the next block into chunks (False when there is none)."""
        block = next(self._blocks, None)
        if block is None:
            self.exhausted = True
            return False
        block = np.asarray(block, np.int64).reshape(-1, 2)
        self._ready.extend(block[s : s + self.chunk] for s in range(0, len(block), self.chunk))
        self._held += len(block)
        return True

    def at_least(self, n: int) -> bool:
        """Whether ``n`` pairs or more are to come (reading blocks until known)."""
        while self._held < n and self.read():
            pass
        return self._held >= n

    def pending(self) -> int:
        """Chunks made and not handed out yet."""
        return len(self._ready)

    def next(self) -> np.ndarray | None:
        """The next chunk (None when no pair is left)."""
        while not self._ready and self.read():
            pass
        if not self._ready:
            return None
        part = self._ready.popleft()
        self._held -= len(part)
        return part


def _in_processes(chunks: _Chunks, init, workers, cancel, progress) -> dict[tuple[int, int], Any]:
    """:func:`verify_pairs` in ``workers`` processes opened by ``_worker_init(*init)``;
    while blocks of pairs are still to come, this process reads the next one when every
    worker has its chunks queued (:data:`STREAM_QUEUE` of them)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    done: dict[tuple[int, int], Any] = {}
    ctx = multiprocessing.get_context("spawn")  # (safe beside Qt's and other threads)
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=init
    )
    # at most two chunks queued per worker once all are known (a cancel drops the rest
    # at once); more while this process is busy finding the next blocks
    pending: dict[Any, int] = {}
    n_done = 0
    try:
        while True:
            queue = 2 * workers if chunks.exhausted else STREAM_QUEUE * workers
            while len(pending) < queue and (part := chunks.next()) is not None:
                pending[pool.submit(_worker_chunk, part)] = len(part)
            if not pending:
                break
            timeout = 0.2
            if not chunks.exhausted:  # (the workers have their chunks: find the next pairs)
                try:
                    chunks.read()
                except InterruptedError:  # (cancelled while finding them)
                    raise VerifyInterrupted(done) from None
                timeout = 0.0
            finished, _ = wait(list(pending), timeout=timeout, return_when=FIRST_COMPLETED)
            if cancel is not None and cancel.is_set():
                raise VerifyInterrupted(done)
            for fut in finished:
                n_done += pending.pop(fut)
                for i, j, ev in fut.result():
                    done[(i, j)] = ev
            if finished and progress is not None:
                progress(n_done)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return done
