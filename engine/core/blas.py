"""Process-wide switches for BLAS and OpenCV threading, shared by the engine's hot loops."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_CONTROLLER = None
_LOCK = threading.Lock()
_DEPTH = 0  # open single_threaded_blas contexts, in all threads
_LIMITER = None  # threadpoolctl's limiter of the outermost one
_CV_DEPTH = 0  # open single_threaded_opencv contexts, in all threads
_CV_SAVED = 0  # OpenCV's thread count before the outermost one


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Context limiting BLAS to one thread.

    The engine's hot loops (vocabulary-tree descent, per-pair matching, OASIS steps) are
    many small products; handing each to a BLAS thread pool costs far more than it saves,
    above all on a loaded machine (an OASIS step on 2,048 words took 34 ms instead of
    ~1 ms with 2 cores busy). threadpoolctl's limit is process-wide while the context is
    open, so it must never be held across a generator's ``yield``.

    Contexts nest, also across threads: the first one opened sets the limit and the last
    one closed restores what was there before (threadpoolctl's own contexts, interleaved
    by two threads, could restore one thread's saved limit after the other's and leave
    BLAS on one thread for good). A nested context costs no threadpoolctl call.

    The libraries limited are the BLAS libraries loaded when the switch is first used
    (numpy's, which the engine's loops call); one loaded later (another package's own
    OpenBLAS) is left alone, as finding the loaded libraries again on every context
    would cost ~0.7 ms.

    threadpoolctl >= 3.8 lets only one "controlling" thread change OpenBLAS's
    process-wide pool (the first one that does, while it lives); others are silently
    ignored. Every limit and restore here releases that control at once, so that any
    thread can open the outermost context: otherwise, once the main thread had opened
    one, a context opened by the indexing thread limited nothing (BLAS ran the model fit
    on two threads beside the extraction workers, and two builds of one folder fitted
    models that differed in the last bits).
    """
    global _CONTROLLER, _DEPTH, _LIMITER
    with _LOCK:
        if _DEPTH == 0:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
                ThreadpoolController = None
            if ThreadpoolController is not None:
                if _CONTROLLER is None:
                    _CONTROLLER = ThreadpoolController()
                _release_control()
                _LIMITER = _CONTROLLER.limit(limits=1, user_api="blas")
                _release_control()
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _LIMITER is not None:
                _release_control()
                _LIMITER.restore_original_limits()
                _release_control()
                _LIMITER = None


def _release_control() -> None:
    """Let any thread set OpenBLAS's limit next (threadpoolctl >= 3.8, see above; the
    switch's own lock orders its changes)."""
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:  # pragma: no cover - no threadpoolctl, or an older one
        return
    clear = getattr(OpenBLASController, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


@contextlib.contextmanager
def single_threaded_opencv() -> Iterator[None]:
    """Context running OpenCV's functions on one thread (``cv2.setNumThreads(1)``).

    For work done beside processes that already keep every core busy (the appearance
    checks of a duplicate search, in a thread of the process whose worker processes
    check the pairs): OpenCV's own thread pool then only adds CPU time. Measured on the
    100,000-photo library's 2,208 appearance checks: 40 s of CPU in 26 s with OpenCV's
    threads, 25 s in 25 s without.

    OpenCV's setting is process-wide; contexts nest across threads as
    :func:`single_threaded_blas` does, the last one closed restoring the count the first
    one found.
    """
    global _CV_DEPTH, _CV_SAVED
    import cv2

    with _LOCK:
        if _CV_DEPTH == 0:
            _CV_SAVED = cv2.getNumThreads()
            cv2.setNumThreads(1)
        _CV_DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _CV_DEPTH -= 1
            if _CV_DEPTH == 0:
                cv2.setNumThreads(_CV_SAVED)
