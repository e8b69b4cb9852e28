"""Extraction never hangs and can always be stopped (engine.index.extract / .workers).

A file that blocks (a FIFO; a read or a decoder that never returns) is abandoned and
reported; workers that die, however often, are replaced without deadlock; closing the
iterator, a cancel event or Ctrl-C stop everything within a few seconds; the workers of a
parent killed with ``kill -9`` exit on their own.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import engine.index.extract as extract_mod
from engine.features.keypoints import Features, extract_features
from engine.index.extract import CRASH_REASON, extract_parallel, timeout_reason
from engine.index.workers import Lost, WorkerPool

ROOT = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
FORK = "fork" if LINUX else "spawn"
FEAT_KW = {"max_features": 30}
HANG = b"SIMILE-TEST-HANG"
KILL = b"SIMILE-TEST-KILL"
SLOW = b"SIMILE-TEST-SLOW"


# ----------------------------------------------------------- test-only extractors
# module level, so that spawned workers can import them


def hanging_extractor(data, **kw):
    """Never returns on files carrying HANG (a decoder stuck in a loop)."""
    if HANG in data:
        while True:
            time.sleep(1)
    return extract_features(data, **kw)


def big_result_extractor(data, **kw):
    """A 4 MB result (sending it takes a while: a kill can land in the middle); the
    worker SIGKILLs itself on files carrying KILL, as the out-of-memory killer would."""
    if KILL in data:
        os.kill(os.getpid(), signal.SIGKILL)
    m = 8000
    xy = np.zeros((m, 2), np.float32)
    return Features(np.zeros((m, 128), np.float32), xy, None, None, (8, 8), "sift")


def slow_extractor(data, **kw):
    """Takes 0.3 s a file (files carrying SLOW: a minute)."""
    time.sleep(60 if SLOW in data else 0.3)
    return extract_features(data, **kw)


def stuck_in_read(path, known, *common, report):
    """For :class:`WorkerPool` directly: announces a 5 MiB file, then its read blocks."""
    report("read", 5 * 2**20, 123)
    time.sleep(3600)


# ----------------------------------------------------------- helpers
def _img(path, seed=0, size=64, tail=b""):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size // 8, size // 8), dtype=np.uint8)
    Image.fromarray(np.kron(small, np.ones((8, 8), np.uint8))).save(path)
    if tail:
        with open(path, "ab") as fh:
            fh.write(tail)
    return str(path)


@pytest.fixture
def images(tmp_path):
    return [_img(tmp_path / f"img{i}.png", i) for i in range(6)]


def _state(pid: int) -> str | None:
    """Process state letter (``Z``: a zombie, dead), ``None`` when gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _alive(pids) -> list[int]:
    return [p for p in pids if _state(p) not in (None, "Z", "X")]


def _workers(parent: int) -> list[int]:
    """Live worker processes of ``parent``: its forked or spawned children, not the
    resource tracker nor other commands (Linux only)."""
    found = []
    for task in os.listdir(f"/proc/{parent}/task"):
        try:
            with open(f"/proc/{parent}/task/{task}/children") as fh:
                found += [int(x) for x in fh.read().split()]
        except OSError:
            pass
    with open(f"/proc/{parent}/cmdline", "rb") as fh:
        forked = fh.read()  # a forked worker runs the parent's command line
    out = []
    for pid in found:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if cmdline == forked or b"spawn_main" in cmdline:
            out.append(pid)
    return _alive(out)


def _wait_gone(pids, seconds) -> list[int]:
    end = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < end:
        time.sleep(0.05)
    return _alive(pids)


# ----------------------------------------------------------- blocking files
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("jobs", [1, 2])
def test_fifo_never_blocks(tmp_path, images, jobs):
    # a FIFO in a photo's place, with and without a writer that never writes
    fifos = [tmp_path / "pipe.jpg", tmp_path / "held.jpg"]
    for f in fifos:
        os.mkfifo(f)
    writer = os.open(fifos[1], os.O_RDWR)  # keeps it open: a blocking read would wait
    try:
        t0 = time.monotonic()
        paths = [str(fifos[0]), *images, str(fifos[1])]
        res = {r.path: r for r in extract_parallel(paths, jobs=jobs, feature_kwargs=FEAT_KW)}
        assert time.monotonic() - t0 < 20
    finally:
        os.close(writer)
    assert sorted(res) == sorted(paths)
    assert all(res[str(f)].error == "not a regular file" for f in fifos)
    assert all(res[p].error is None for p in images)


@pytest.mark.parametrize("start", sorted({FORK, "spawn"}))
def test_file_that_never_finishes_is_abandoned_and_reported(tmp_path, images, start):
    hang = _img(tmp_path / "hang.png", 9, tail=HANG)
    paths = [*images[:3], hang, *images[3:]]
    t0 = time.monotonic()
    res = list(
        extract_parallel(
            paths,
            jobs=2,
            feature_kwargs=FEAT_KW,
            extractor=hanging_extractor,
            files_per_task=2,
            mp_context=multiprocessing.get_context(start),
            timeout=1.5,
            timeout_per_mb=0.0,
        )
    )
    took = time.monotonic() - t0
    by_path = {r.path: r for r in res}
    assert sorted(by_path) == sorted(paths) and len(res) == len(paths)
    assert by_path[hang].error == timeout_reason("extract", 1.5)
    assert by_path[hang].error.startswith("extracting features did not finish within 2 s")
    assert (by_path[hang].size, by_path[hang].mtime_ns) == (0, 0)  # tried again next run
    for p in images:  # the others of the stuck worker's tasks were retried
        assert by_path[p].error is None
        np.testing.assert_array_equal(
            by_path[p].features.descriptors, extract_features(p, **FEAT_KW).descriptors
        )
    assert took < 15, took


def _blocking_open(file, *args, **kw):
    """``open`` for the worker's file descriptor, whose reads block on hang.png."""
    fh = open(file, *args, **kw)
    if isinstance(file, int) and os.readlink(f"/proc/self/fd/{file}").endswith("hang.png"):

        class Stalled:  # a read from a stalled network share
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()

            def read(self, *a):
                time.sleep(3600)

        return Stalled()
    return fh


@pytest.mark.skipif(not LINUX, reason="forked workers inherit the patched open")
def test_stalled_read_is_abandoned_and_reported(tmp_path, images, monkeypatch):
    monkeypatch.setattr(extract_mod, "open", _blocking_open, raising=False)
    hang = _img(tmp_path / "hang.png", 9)
    t0 = time.monotonic()
    res = list(
        extract_parallel(
            [hang, *images],
            jobs=2,
            feature_kwargs=FEAT_KW,
            mp_context=multiprocessing.get_context("fork"),
            timeout=1.0,
            timeout_per_mb=100.0,  # + 100 s per MiB: ~0.1 s for this small file
        )
    )
    by_path = {r.path: r for r in res}
    assert sorted(by_path) == sorted([hang, *images])
    allowed = 1.0 + 100.0 * os.path.getsize(hang) / 2**20
    assert by_path[hang].error == timeout_reason("read", allowed)
    assert "reading the file did not finish within" in by_path[hang].error
    assert "stalled network drive" in by_path[hang].error
    assert all(by_path[p].error is None for p in images)
    assert time.monotonic() - t0 < 15


def test_pool_timeout_counts_the_file_size_and_only_time_spent_waiting():
    pool = WorkerPool(1, stuck_in_read, timeout=0.5, timeout_per_mb=0.2)
    try:
        pool.submit([("a", None), ("b", None)])
        t0 = time.monotonic()
        events = []
        while not events and time.monotonic() - t0 < 30:
            events = pool.poll(0.2)
            if not events:
                time.sleep(0.3)  # time away from the pool: not counted
        waited = time.monotonic() - t0
    finally:
        pool.close()
    lost, returned = events
    assert isinstance(lost, Lost) and lost.item == ("a", None) and lost.cause == "timeout"
    assert (lost.phase, lost.size, lost.mtime_ns) == ("read", 5 * 2**20, 123)
    assert lost.allowed == pytest.approx(0.5 + 0.2 * 5)
    assert returned.items == [("b", None)]  # not started: handed back
    assert waited > 1.5 * lost.allowed  # half of the wall time was spent away


def test_slow_consumer_never_makes_workers_look_stuck(tmp_path, images):
    res = []
    for r in extract_parallel(
        images[:3],
        jobs=2,
        feature_kwargs=FEAT_KW,
        extractor=slow_extractor,
        mp_context=multiprocessing.get_context(FORK),
        timeout=1.0,
    ):
        res.append(r)
        time.sleep(1.3)  # longer than the timeout, between results
    assert len(res) == 3 and all(r.error is None for r in res)


# ----------------------------------------------------------- dying workers
@pytest.mark.skipif(not LINUX, reason="/proc lists the workers")
def test_workers_killed_again_and_again_never_deadlock(tmp_path):
    # files whose worker kills itself, plus workers killed from outside while they send
    # their 4 MB results: every run ends, with every file indexed or reported
    paths = [_img(tmp_path / f"f{i}.png", i, 16, KILL if i % 8 == 3 else b"") for i in range(40)]
    bombs = {p for i, p in enumerate(paths) if i % 8 == 3}
    me = os.getpid()
    killed = 0
    t0 = time.monotonic()
    res = []
    gen = extract_parallel(
        paths,
        jobs=2,
        extractor=big_result_extractor,
        files_per_task=3,
        mp_context=multiprocessing.get_context(FORK),
    )
    due = 3  # (a kill every third result; one due while no worker is alive waits)
    for r in gen:
        res.append(r)
        workers = _workers(me)
        if len(res) >= due and workers and killed < 12:
            os.kill(workers[len(res) % len(workers)], signal.SIGKILL)
            killed += 1
            due = len(res) + 3
    took = time.monotonic() - t0
    assert killed >= 8
    assert sorted(r.path for r in res) == sorted(paths) and len(res) == len(paths)
    by_path = {r.path: r for r in res}
    assert all(by_path[p].error == CRASH_REASON for p in bombs)
    innocent = [by_path[p].error for p in paths if p not in bombs]
    assert set(innocent) <= {None, CRASH_REASON}  # reported, never lost
    # only a file killed twice, the second time alone, is reported though innocent
    assert innocent.count(CRASH_REASON) <= killed // 2
    assert _wait_gone(_workers(me), 5) == []
    assert took < 30, took


@pytest.mark.parametrize("start", sorted({FORK, "spawn"}))
def test_every_worker_dying_at_once_repeatedly(tmp_path, start):
    # every file kills its worker: each is retried alone once, then reported
    paths = [_img(tmp_path / f"k{i}.png", i, 16, KILL) for i in range(4)]
    res = list(
        extract_parallel(
            paths,
            jobs=2,
            extractor=big_result_extractor,
            files_per_task=2,
            mp_context=multiprocessing.get_context(start),
        )
    )
    assert sorted(r.path for r in res) == sorted(paths)
    assert all(r.error == CRASH_REASON and r.size == os.path.getsize(r.path) for r in res)


# ----------------------------------------------------------- stopping
def test_close_and_cancel_kill_busy_workers_at_once(tmp_path, images):
    slow = _img(tmp_path / "slow.png", 7, tail=SLOW)
    for how in ("close", "cancel"):
        cancel = threading.Event()
        gen = extract_parallel(
            [slow, *images],
            jobs=2,
            cancel=cancel,
            feature_kwargs=FEAT_KW,
            extractor=slow_extractor,
            mp_context=multiprocessing.get_context(FORK),
        )
        next(gen)  # workers run: one of them on the minute-long file
        pids = _workers(os.getpid()) if LINUX else []
        t0 = time.monotonic()
        if how == "close":
            gen.close()
        else:
            cancel.set()
            assert all(r.path != slow for r in gen)  # at most what had finished
        assert time.monotonic() - t0 < 3
        assert _wait_gone(pids, 3) == []


_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    from engine.index.extract import extract_parallel

    def slow(data, **kw):
        time.sleep(60)

    if __name__ == "__main__":
        paths = sys.argv[2:]
        ctx = multiprocessing.get_context(sys.argv[1])
        print("started", flush=True)
        for r in extract_parallel(paths, jobs=2, extractor=slow, mp_context=ctx):
            print(r.path, flush=True)
    """
)


def _run_script(tmp_path, images, start):
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), start, *images],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group, as a shell job is
        # Ctrl-C as a terminal delivers it, also when the test run itself was started
        # in the background of a shell without job control (which ignores SIGINT, and
        # an ignored signal stays ignored across exec)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline() == b"started\n"
    end = time.monotonic() + 30
    while len(_workers(proc.pid)) < 2 and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are in the minute-long extraction
    workers = _workers(proc.pid)
    assert len(workers) == 2
    return proc, workers


@pytest.mark.skipif(not LINUX, reason="/proc lists the workers")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_workers_of_a_killed_parent_exit_and_release_its_pipes(tmp_path, images, start):
    proc, workers = _run_script(tmp_path, images, start)
    proc.kill()  # kill -9: no clean-up code runs in the parent
    proc.wait()
    t0 = time.monotonic()
    assert _wait_gone(workers, 5) == []
    # `simile index … | tail` ends: nobody holds the parent's stdout any more
    ready, _, _ = select.select([proc.stdout], [], [], max(0.1, 5 - (time.monotonic() - t0)))
    assert ready and proc.stdout.read() == b""
    proc.stderr.close()
    proc.stdout.close()


@pytest.mark.skipif(not LINUX, reason="/proc lists the workers")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_ctrl_c_ends_the_run_within_seconds(tmp_path, images, start):
    proc, workers = _run_script(tmp_path, images, start)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets it
    try:
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.stdout.close()
    assert took < 3, took
    assert err.count("KeyboardInterrupt") == 1, err  # the parent's; workers ignore it
    assert _wait_gone(workers, 3) == []
