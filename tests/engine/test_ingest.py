"""Tests of engine.ingest: parallel extraction and incremental, crash-safe ingestion."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import numpy as np
import pytest
from PIL import Image

from engine.features.keypoints import extract_features
from engine.index.ingest import (
    CRASH_REASON,
    IngestSummary,
    extract_parallel,
    ingest,
)
from engine.index.store import IndexStore, ReadOnlyIndexError

FEAT_KW = {"max_features": 60}
CRASH_MARKER = b"SIMILE-CRASH-ME"


def _img(path, seed=0, size=96):
    """A textured image with plenty of SIFT keypoints."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size // 8, size // 8), dtype=np.uint8)
    img = np.kron(small, np.ones((8, 8), np.uint8))
    Image.fromarray(np.stack([img, img[::-1], img[:, ::-1]], -1)).save(path)
    return path


def _png_header_only(path, width, height):
    """A PNG whose header claims ``width x height`` (refused before any decoding)."""

    def chunk(tag, data):
        return (
            struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path


def _run(gen):
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return stop.value, events


def _touched(events):
    """Paths actually read and extracted in a run."""
    return sorted(e.path for e in events if e.status in ("indexed", "failed"))


def crashing_extractor(data, **kw):
    """Module-level (importable by spawned workers): kills its process on a marker."""
    if CRASH_MARKER in data:
        os._exit(13)
    return extract_features(data, **kw)


def slow_extractor(data, **kw):
    """Module-level: finishes files carrying SLOW_MARKER last."""
    if SLOW_MARKER in data:
        time.sleep(1.0)
    return extract_features(data, **kw)


SLOW_MARKER = b"SIMILE-TEST-SLOW"


def _r(p):
    return os.path.realpath(p)


@pytest.fixture
def folder(tmp_path):
    f = tmp_path / "photos"
    for i in range(6):
        _img(f / ("sub" if i % 2 else "") / f"img{i}.png", i)
    return f


def test_ingest_then_incremental(tmp_path, folder):
    idx = tmp_path / "index"
    with IndexStore.open(idx) as store:
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert isinstance(summary, IngestSummary)
        assert (summary.indexed, summary.unchanged, summary.removed) == (6, 0, 0)
        assert summary.failed == [] and summary.total == 6 and not summary.cancelled
        assert events[0].status == "scanning" and events[-1].status == "finalizing"
        assert [e.done for e in events if e.status == "indexed"] == list(range(1, 7))
        assert all(e.total == 6 for e in events[1:])
        # stored features are the extractor's (up to the uint8 descriptor codec)
        p = _r(folder / "img0.png")
        ref = extract_features(p, **FEAT_KW)
        got = store.get_features(p)
        assert len(got) == len(ref) > 10
        np.testing.assert_allclose(got.descriptors, ref.descriptors, atol=1 / 510 + 1e-6)
        np.testing.assert_array_equal(got.xy, ref.xy)
        assert got.image_size == ref.image_size

        # nothing changed: nothing is read
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert (summary.indexed, summary.unchanged, summary.removed) == (0, 6, 0)
        assert _touched(events) == []

        # add, change, delete, and touch (mtime only)
        _img(folder / "new" / "img9.png", 9)
        _img(folder / "img0.png", 100)
        (folder / "sub" / "img1.png").unlink()
        os.utime(folder / "img2.png", ns=(10**9, 10**9))
        ids_before = {p: store.id_of(p) for p in store.paths()}
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert _touched(events) == sorted([_r(folder / "new/img9.png"), _r(folder / "img0.png")])
        assert [e.path for e in events if e.status == "unchanged"] == [_r(folder / "img2.png")]
        assert (summary.indexed, summary.unchanged, summary.removed) == (2, 4, 1)
        assert summary.total == 6 and store.count() == 6
        assert store.id_of(_r(folder / "img0.png")) == ids_before[_r(folder / "img0.png")]
        assert store.known_stats()[_r(folder / "img2.png")][1] == 10**9
        np.testing.assert_allclose(
            store.get_features(_r(folder / "img0.png")).descriptors,
            extract_features(_r(folder / "img0.png"), **FEAT_KW).descriptors,
            atol=1 / 510 + 1e-6,
        )
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert (summary.indexed, summary.unchanged) == (0, 6) and _touched(events) == []


def test_broken_files_recorded_and_retried_only_when_changed(tmp_path, folder):
    good = (folder / "img0.png").read_bytes()
    (folder / "truncated.png").write_bytes(good[: len(good) // 3])
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("I am not a picture")
    _png_header_only(folder / "huge.png", 20_000, 20_000)  # 400 Mpx: refused from header
    with IndexStore.open(tmp_path / "index") as store:
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        failed = dict(summary.failed)
        names = {os.path.basename(p) for p in failed}
        assert names == {"truncated.png", "empty.jpg", "text.jpg", "huge.png"}
        assert all(isinstance(r, str) and r for r in failed.values())
        assert "pixel" in failed[_r(folder / "huge.png")].lower()
        assert (summary.indexed, summary.total) == (6, 10)
        assert store.failures() == sorted(summary.failed, key=lambda x: store.id_of(x[0]))

        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert _touched(events) == []  # failed files are not retried while unchanged
        assert len(summary.failed) == 4 and summary.unchanged == 6

        (folder / "truncated.png").write_bytes(good)  # repaired
        (folder / "empty.jpg").unlink()
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert _touched(events) == [_r(folder / "truncated.png")]
        assert summary.indexed == 1 and summary.removed == 1 and len(summary.failed) == 2
        assert store.record(_r(folder / "truncated.png")).status == "ok"
        assert summary.to_json()["failed"][0].keys() == {"path", "reason"}


def test_feature_settings_change_reextracts(tmp_path, folder):
    with IndexStore.open(tmp_path / "index") as store:
        _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs={"max_features": 20}))
        assert summary.indexed == 6 and len(_touched(events)) == 6
        assert max(r.n_features for r in store.records()) <= 20
        assert store.get_setting("feature_kwargs") == {"max_features": 20}


def test_cancel_keeps_finished_batches_and_next_run_completes(tmp_path, folder):
    cancel = threading.Event()
    with IndexStore.open(tmp_path / "index") as store:
        gen = ingest(store, folder, jobs=1, cancel=cancel, feature_kwargs=FEAT_KW, batch_size=2)
        n = 0
        while True:
            try:
                ev = next(gen)
            except StopIteration as stop:
                summary = stop.value
                break
            if ev.status == "indexed":
                n += 1
                if n == 3:
                    cancel.set()
        assert summary.cancelled and summary.indexed == 3 and store.count() == 3
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.indexed == 3 and summary.unchanged == 3 and len(_touched(events)) == 3


def test_closing_the_generator_keeps_finished_work(tmp_path, folder):
    with IndexStore.open(tmp_path / "index") as store:
        gen = ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW, batch_size=100)
        for ev in gen:
            if ev.status == "indexed" and ev.done == 4:
                break
        gen.close()
        assert store.count() == 4


def test_non_ascii_paths_and_readonly_folder_with_index_elsewhere(tmp_path):
    folder = tmp_path / "fotos ñ 写真"
    a = _img(folder / "café" / "é 1.png", 1)
    _img(folder / "b.png", 2)
    before = sorted(os.walk(folder))
    mode = folder.stat().st_mode
    folder.chmod(0o555)
    (folder / "café").chmod(0o555)
    try:
        with IndexStore.open(tmp_path / "elsewhere" / "índice") as store:
            summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
            assert summary.indexed == 2 and summary.failed == []
            assert _r(a) in store.paths() and len(store.get_features(_r(a))) > 0
    finally:
        (folder / "café").chmod(mode)
        folder.chmod(mode)
    assert sorted(os.walk(folder)) == before  # nothing written into the photo folder


@pytest.mark.skipif(os.name != "posix", reason="symlinks")
def test_lookup_through_symlinked_folder(tmp_path, folder):
    alias = tmp_path / "alias"
    os.symlink(folder, alias)
    with IndexStore.open(tmp_path / "index") as store:
        _run(ingest(store, alias, jobs=1, feature_kwargs=FEAT_KW))
        assert all(p.startswith(_r(folder)) for p in store.paths())  # stored resolved
        via_alias = alias / "img0.png"
        assert store.id_of(via_alias) == store.id_of(_r(via_alias)) is not None
        assert store.record(str(via_alias)).path == _r(via_alias)
        assert len(store.get_features(via_alias)) > 0


def test_index_inside_folder_is_not_scanned(tmp_path, folder):
    with IndexStore.open(folder / ".simile") as store:
        _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert not any(".simile" in p for p in store.paths())
    with IndexStore.open(folder / "my_index") as store:  # visible name: excluded anyway
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.total == 6


_START_METHODS = ["spawn", "fork"] if sys.platform.startswith("linux") else ["spawn"]


@pytest.mark.parametrize(("per_task", "start"), [(1, "spawn"), (3, _START_METHODS[-1])])
def test_parallel_matches_serial_and_survives_worker_crash(tmp_path, folder, per_task, start):
    # with several files per task the crash takes its task's other files with it: they
    # are retried alone, and only the culprit is recorded as crashing
    paths = sorted(_r(p) for p in folder.rglob("*.png"))
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes((folder / "img0.png").read_bytes() + CRASH_MARKER)
    work = [*paths[:3], str(bomb), *paths[3:]]
    results = list(
        extract_parallel(
            work,
            jobs=2,
            feature_kwargs=FEAT_KW,
            extractor=crashing_extractor,
            files_per_task=per_task,
            mp_context=multiprocessing.get_context(start),
        )
    )
    assert len(results) == len(work)
    assert sorted(r.path for r in results) == sorted(work)
    by_path = {r.path: r for r in results}
    assert by_path[str(bomb)].error == CRASH_REASON and by_path[str(bomb)].features is None
    assert by_path[str(bomb)].size == bomb.stat().st_size  # so it is retried only once changed
    for p in paths:
        r = by_path[p]
        assert r.error is None
        ref = extract_features(p, **FEAT_KW)
        np.testing.assert_array_equal(r.features.descriptors, ref.descriptors)
        assert r.content_hash and r.size == os.path.getsize(p)


_CONTEXT = """
import sys, threading
if "qt" in sys.argv[1:]:
    sys.modules["PySide6"] = type(sys)("PySide6")  # as if the GUI had loaded Qt
if "thread" in sys.argv[1:]:
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
from engine.index.ingest import worker_context
print(worker_context().get_start_method())
"""


@pytest.mark.parametrize("situation", ["alone", "thread", "qt"])
def test_workers_are_forked_only_from_a_single_threaded_process_without_qt(situation):
    out = subprocess.run(
        [sys.executable, "-c", _CONTEXT, situation], capture_output=True, text=True, check=True
    )
    alone = situation == "alone" and sys.platform.startswith("linux")
    assert out.stdout.strip() == ("fork" if alone else "spawn")


_AFTER_OPENCV = """
import sys
import cv2
from engine.features.keypoints import extract_features
from engine.index.ingest import extract_parallel, worker_context
paths = sys.argv[1:]
extract_features(paths[0])  # OpenCV's thread pool now runs in this process
threads = cv2.getNumThreads()
assert threads > 1 and worker_context().get_start_method() == "fork"
res = list(extract_parallel(paths, jobs=2, feature_kwargs={"max_features": 80}))
assert sorted(r.path for r in res) == sorted(paths) and all(r.error is None for r in res)
assert cv2.getNumThreads() == threads
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")
def test_workers_fork_from_a_process_that_ran_opencv_threads(folder):
    # a forked child that reconfigured OpenCV's inherited thread pool would wait forever
    paths = sorted(str(p) for p in folder.rglob("*.png"))
    out = subprocess.run(
        [sys.executable, "-c", _AFTER_OPENCV, *paths],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_extract_parallel_cancel_and_bad_jobs(folder):
    paths = sorted(str(p) for p in folder.rglob("*.png"))
    cancel = threading.Event()
    cancel.set()
    assert list(extract_parallel(paths, jobs=1, cancel=cancel)) == []
    with pytest.raises(ValueError, match="jobs"):
        list(extract_parallel(paths, jobs=0))
    res = list(extract_parallel([str(folder / "missing.png")], jobs=1))
    assert res[0].error.startswith("cannot read file")


def test_readonly_store_refused(tmp_path, folder):
    IndexStore.open(tmp_path / "index").close()
    with IndexStore.open(tmp_path / "index", readonly=True) as r:
        with pytest.raises(ReadOnlyIndexError):
            next(ingest(r, folder, jobs=1))


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from engine.index.ingest import ingest
    from engine.index.store import IndexStore, ReadOnlyIndexError
    store = IndexStore.open(sys.argv[2])
    for ev in ingest(store, sys.argv[1], jobs=1, batch_size=3,
                     feature_kwargs={"max_features": 60}):
        if ev.status == "indexed":
            print(ev.done, flush=True)
    print("done", flush=True)
    """
)


@pytest.mark.parametrize(("kill_after", "delay"), [(4, 0.0), (11, 0.03)])
def test_sigkill_mid_ingest_leaves_consistent_index(tmp_path, kill_after, delay):
    folder = tmp_path / "photos"
    n = 30
    for i in range(n):
        _img(folder / f"{i:02d}.png", i, size=160)
    idx = tmp_path / "index"
    with subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(folder), str(idx)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            for line in proc.stdout:
                if line.strip() == "done" or int(line) >= kill_after:
                    break
            time.sleep(delay)  # land somewhere inside a later file / batch
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    # the index opens (the kernel released the lock) and holds a consistent subset
    with IndexStore.open(idx, readonly=True) as r:
        held = r.paths()
        assert 0 < len(held) <= n  # (== n only if the child outran the kill)
        assert set(held) <= {_r(p) for p in folder.iterdir()}
        for p in held:
            f = r.get_features(p)
            assert len(f) == r.record(p).n_features > 0
    with IndexStore.open(idx) as store:
        referenced = {
            row[0] for row in store._q("SELECT file FROM chunks")
        }  # orphans (e.g. a half-written chunk) were collected on writer open
        assert set(os.listdir(idx / "features")) == referenced
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.indexed == n - len(held) and summary.unchanged == len(held)
        assert store.count() == n and summary.failed == []


_FAULTS = """
import ctypes, resource, sys
# count 4 KiB pages: transparent huge pages (when the kernel has them free) would fault
# in 512 pages at once, making the cold count depend on the machine's memory state
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
import numpy as np
from engine.features.keypoints import extract_features
from engine.index.ingest import keep_heap_warm
if sys.argv[1] == "warm":
    assert keep_heap_warm()
else:  # glibc's initial thresholds, held: its dynamic raising of them after the first
    # large free makes the default case depend on the allocation history
    libc = ctypes.CDLL(None)
    assert libc.mallopt(-3, 128 * 1024) and libc.mallopt(-1, 128 * 1024)
rng = np.random.default_rng(0)
import cv2
img = cv2.GaussianBlur((rng.random((768, 1024)) * 255).astype(np.uint8), (0, 0), 2)
img = cv2.imencode(".jpg", img)[1].tobytes()  # decoded for every image, as in a worker
extract_features(img)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    extract_features(img)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 4)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_workers_keep_freed_memory_for_the_next_image():
    # Decode + SIFT frees and reallocates its image pyramids for every image; with
    # glibc's initial thresholds each image page-faults them in again (about a third of
    # the extraction's CPU time; glibc raises them after some large frees, depending on
    # the allocation history). Workers keep that memory in the heap instead.
    def faults(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
        )
        return int(out.stdout.split()[-1])

    cold, warm = faults("cold"), faults("warm")
    assert cold > 2000, cold  # thousands of 4 KiB pages per image
    assert warm < cold / 5, (cold, warm)


_THREAD_FAULTS = """
import ctypes, resource, sys, threading
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: count 4 KiB pages
import numpy as np
from engine.index.ingest import keep_heap_warm
if sys.argv[1] == "warm":
    assert keep_heap_warm()
else:  # keep_heap_warm's thresholds, but glibc's arena per thread
    libc = ctypes.CDLL(None)
    assert libc.mallopt(-3, 32 * 1024 * 1024) and libc.mallopt(-1, 512 * 1024 * 1024)
def work():  # as a fitting or encoding thread: ~76 MB of arrays, then freed
    for _ in range(3):
        a = [np.ones(n) for n in (3_000_000, 2_000_000, 3_500_000, 1_000_000)]
        del a
def run():
    t = threading.Thread(target=work)
    t.start()
    t.join()
run()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    run()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 4)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_threads_of_a_warm_process_reuse_freed_memory():
    # A thread's own glibc arena unmaps its heaps once they are empty, whatever the trim
    # threshold, so every new fitting / encoding thread faulted its arrays in again;
    # keep_heap_warm puts all threads on the main arena, which keeps them.
    def faults(mode: str) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _THREAD_FAULTS, mode],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.split()[-1])

    per_thread, shared = faults("cold"), faults("warm")
    assert per_thread > 5000, per_thread  # ~76 MB of 4 KiB pages, faulted in every run
    assert shared < per_thread / 10, (per_thread, shared)


def test_warm_processes_do_not_ask_numpy_for_huge_pages():
    # numpy advises transparent huge pages for large arrays by default; faulting them in
    # cost more kernel time than it saved on the indexing and query processes measured
    code = (
        "from engine.index.extract import numpy_huge_pages, keep_heap_warm\n"
        "numpy_huge_pages(True)\n"
        "keep_heap_warm()\n"
        "print(numpy_huge_pages(True))\n"  # the setting keep_heap_warm left
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == ("False" if sys.platform.startswith("linux") else "True")


def test_catalogue_order_does_not_depend_on_which_worker_finishes_first(tmp_path, folder):
    # rows are stored in scan order even when the first files finish last, so every
    # result that depends on row order (groupings, learned models) is reproducible
    with IndexStore.open(tmp_path / "serial") as store:
        _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        order = [r.path for r in store.records(None)]
    with open(order[0], "ab") as fh:  # the first file in scan order: now the slowest
        fh.write(SLOW_MARKER)
    with IndexStore.open(tmp_path / "parallel") as store:
        summary, events = _run(
            ingest(store, folder, jobs=2, feature_kwargs=FEAT_KW, extractor=slow_extractor)
        )
        assert summary.indexed == len(order)
        finished = [e.path for e in events if e.status == "indexed"]
        assert finished[0] != order[0]  # it really finished out of order
        assert [r.path for r in store.records(None)] == order


HANG_MARKER = b"SIMILE-TEST-HANG"


def hanging_extractor(data, **kw):
    """Module-level: never returns on files carrying HANG_MARKER (a stalled read)."""
    if HANG_MARKER in data:
        time.sleep(3600)
    return extract_features(data, **kw)


def test_file_that_hangs_is_reported_and_retried_by_the_next_run(tmp_path, folder, monkeypatch):
    import functools

    import engine.index.ingest as ingest_mod

    hang = _img(folder / "hang.png", 9)
    with open(hang, "ab") as fh:
        fh.write(HANG_MARKER)
    short = functools.partial(extract_parallel, timeout=1.5, timeout_per_mb=0.0)
    monkeypatch.setattr(ingest_mod, "extract_parallel", short)
    with IndexStore.open(tmp_path / "index") as store:
        t0 = time.monotonic()
        summary, _ = _run(
            ingest(store, folder, jobs=2, feature_kwargs=FEAT_KW, extractor=hanging_extractor)
        )
        assert time.monotonic() - t0 < 30
        assert summary.indexed == 6 and summary.total == 7
        assert summary.failed == [
            (_r(hang), "extracting features did not finish within 2 s (abandoned)")
        ]
        # its stat was not recorded: the next run tries it again (the share is back)
        summary, _ = _run(ingest(store, folder, jobs=2, feature_kwargs=FEAT_KW))
        assert (summary.indexed, summary.unchanged, summary.failed) == (1, 6, [])
