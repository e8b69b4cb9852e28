"""engine._blas: the process-wide single-thread switch for BLAS."""

from __future__ import annotations

import threading

import numpy as np
import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")

from engine.core.blas import single_threaded_blas  # noqa: E402
from engine.kernels.binning import Projection  # noqa: E402


def _blas_threads() -> list[int]:
    """Threads of the BLAS libraries the switch controls (those loaded when it was first
    used, numpy's among them; a library loaded later, e.g. by another test's import,
    is not)."""
    import engine.core.blas as B

    with single_threaded_blas():  # the controller exists from here on
        pass
    paths = {lib.filepath for lib in B._CONTROLLER.lib_controllers}
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["filepath"] in paths]


class _FakeController:
    """Stands for threadpoolctl's controller: one process-wide BLAS thread count."""

    def __init__(self) -> None:
        self.threads = 2

    def limit(self, limits: int, user_api: str):
        ctrl, saved = self, self.threads
        self.threads = limits

        class Limiter:
            def restore_original_limits(self) -> None:
                ctrl.threads = saved

        return Limiter()


def test_contexts_interleaved_by_two_threads_restore_the_limit(monkeypatch):
    # A enters, B enters, A leaves (B still holds: one thread), B leaves (restored).
    # threadpoolctl's own contexts would restore A's saved limit while B still ran and
    # then B's (one thread) for good.
    import engine.core.blas as B

    fake = _FakeController()
    monkeypatch.setattr(B, "_CONTROLLER", fake)
    step = [threading.Event() for _ in range(3)]
    seen = {}

    def a():
        with single_threaded_blas():
            seen["A in"] = fake.threads
            step[0].set()
            step[1].wait(5)
        step[2].set()

    def b():
        step[0].wait(5)
        with single_threaded_blas():
            step[1].set()
            step[2].wait(5)
            seen["after A left"] = fake.threads
        seen["after both left"] = fake.threads

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"A in": 1, "after A left": 1, "after both left": 2}


def test_nested_contexts_in_one_thread():
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        assert before  # numpy's BLAS at least
        with single_threaded_blas():
            with single_threaded_blas():
                assert all(n == 1 for n in _blas_threads())
            assert all(n == 1 for n in _blas_threads())
        assert _blas_threads() == before


def test_any_thread_can_open_the_outermost_context():
    """threadpoolctl >= 3.8 lets only the first thread that set OpenBLAS's limit change it
    again while that thread lives: after the main thread has used the switch, a context
    opened on another thread (the indexing thread's) must still limit BLAS, and its end
    restore the limit, for the main thread too."""
    before = _blas_threads()
    assert before
    with single_threaded_blas():  # the main thread first
        assert all(n == 1 for n in _blas_threads())
    assert _blas_threads() == before
    seen = {}

    def other() -> None:
        with single_threaded_blas():
            seen["inside"] = _blas_threads()
        seen["after"] = _blas_threads()

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert seen == {"inside": [1] * len(before), "after": before}
    with single_threaded_blas():  # and the main thread again, the other one still alive
        assert all(n == 1 for n in _blas_threads())
    assert _blas_threads() == before


def test_projection_transform_matches_the_centred_product():
    rng = np.random.default_rng(0)
    X = rng.random((3000, 128), dtype=np.float32)
    proj = Projection.fit(X, 32)
    for n in (1, 300, 3000):
        got = proj.transform(X[:n])
        want = (X[:n].astype(np.float64) - proj.mean) @ proj.components.T.astype(np.float64)
        assert got.dtype == np.float32 and got.shape == (n, 32)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_opencv_contexts_nest_across_threads_and_restore_the_count():
    """OpenCV runs on one thread while any context is open, in any thread; the last one
    closed gives back the count the first one found (not 1, not the default)."""
    cv2 = pytest.importorskip("cv2")
    from engine.core.blas import single_threaded_opencv

    before = cv2.getNumThreads()
    cv2.setNumThreads(3)
    try:
        inner_open, outer_may_close = threading.Event(), threading.Event()
        seen = []

        def other():
            with single_threaded_opencv():
                inner_open.set()
                outer_may_close.wait(5)
                seen.append(cv2.getNumThreads())
            seen.append(cv2.getNumThreads())

        with single_threaded_opencv():
            t = threading.Thread(target=other)
            t.start()
            inner_open.wait(5)
            assert cv2.getNumThreads() == 1
        assert cv2.getNumThreads() == 1  # (the other thread's context is still open)
        outer_may_close.set()
        t.join(5)
        assert seen == [1, 3]
        assert cv2.getNumThreads() == 3
    finally:
        cv2.setNumThreads(before)
