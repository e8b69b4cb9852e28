"""``simile index --cluster``: extraction on a Dask cluster (engine.index.distributed).

A ``local:2`` cluster indexes a 40-photo folder to exactly the index of a serial run
(stored features of every path, query results); a rerun with nothing changed submits no
task; a worker killed mid-run changes nothing; workers that do not see the files are sent
their bytes; without Dask, ``--cluster`` is one clear line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

import engine.index.distributed as dist
from app.cli import main
from engine.collection import Collection
from engine.index.extract import extract_parallel

N_PHOTOS = 40
FEATURE_KW = {"max_features": 120}
REAL_OPEN = dist.open_cluster


@pytest.fixture(scope="module")
def photos(tmp_path_factory, demo_folder) -> Path:
    """40 demo photos at half size (a few kB each: indexing them takes about a second)."""
    import cv2

    out = tmp_path_factory.mktemp("photos40")
    for src in sorted(demo_folder.glob("*.jpg"))[:N_PHOTOS]:
        img = cv2.imread(str(src))
        cv2.imwrite(str(out / src.name), cv2.resize(img, None, fx=0.5, fy=0.5))
    return out


def _index(photos: Path, index: Path, *options: str) -> None:
    code = main(["index", str(photos), "--index", str(index), *options])
    assert code == 0


@pytest.fixture(scope="module")
def serial(photos, tmp_path_factory) -> Path:
    """The index of a serial run (``--jobs 1``)."""
    index = tmp_path_factory.mktemp("serial") / "index"
    _index(photos, index, "--jobs", "1")
    return index


class Recorder:
    """Stands in for :func:`engine.index.distributed.open_cluster`: opens the real
    cluster, counts clusters opened and tasks submitted (by function), and keeps the
    client for the test."""

    def __init__(self) -> None:
        self.opened = 0
        self.tasks: list[str] = []
        self.client = None

    @contextmanager
    def __call__(self, spec):
        self.opened += 1
        with REAL_OPEN(spec) as client:
            submit = client.submit

            def counted(fn, *args, **kwargs):
                self.tasks.append(fn.__name__)
                return submit(fn, *args, **kwargs)

            client.submit = counted
            self.client = client
            try:
                yield client
            finally:
                self.client = None


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(dist, "open_cluster", rec)
    return rec


def stored(photos: Path, index: Path) -> dict[str, object]:
    """Stored features of every indexed photo, by file name."""
    col = Collection.open(photos, index, create=False, readonly=True)
    try:
        return {p.name: col.features(p) for p in col.paths()}
    finally:
        col.close()


def assert_same_features(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, f in want.items():
        g = got[name]
        for attr in ("descriptors", "xy", "scale", "angle"):
            a, b = getattr(g, attr), getattr(f, attr)
            assert (a is None) == (b is None), (name, attr)
            if a is not None:
                np.testing.assert_array_equal(a, b, err_msg=f"{name}: {attr}")
        assert g.image_size == f.image_size, name


def query(photos: Path, index: Path, capsys) -> list:
    """``simile query --json`` of three photos of the folder."""
    names = sorted(p.name for p in photos.glob("*.jpg"))[::15]
    capsys.readouterr()
    argv = ["query", str(photos), *(str(photos / n) for n in names)]
    assert main([*argv, "--index", str(index), "--top", "10", "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]


def test_local_cluster_index_equals_serial_and_rerun_sends_nothing(
    photos, serial, recorder, tmp_path, capsys
):
    index = tmp_path / "index"
    _index(photos, index, "--cluster", "local:2")
    assert recorder.opened == 1
    assert recorder.tasks == ["_path_task"] * N_PHOTOS  # a local cluster sees the files
    assert_same_features(stored(photos, index), stored(photos, serial))
    assert query(photos, index, capsys) == query(photos, serial, capsys)

    _index(photos, index, "--cluster", "local:2")  # nothing changed
    assert recorder.opened == 1  # no cluster started ...
    assert len(recorder.tasks) == N_PHOTOS  # ... and no task sent


def test_killed_worker_is_retried(photos, serial, recorder, tmp_path):
    index = tmp_path / "index"
    col = Collection.open(photos, index)
    killed = []
    try:
        gen = col.update(cluster="local:2")
        while True:
            try:
                event = next(gen)
            except StopIteration as stop:
                summary = stop.value
                break
            if event.status == "indexed" and not killed:  # mid-run: 39 photos to go
                client = recorder.client
                busy = [w for w, keys in client.processing().items() if keys]
                pid = client.run(os.getpid, workers=busy[:1])[busy[0]]
                os.kill(pid, signal.SIGKILL)  # while it has tasks
                killed.append(event.done)
    finally:
        col.close()
    assert killed and killed[0] < N_PHOTOS
    assert summary.indexed == N_PHOTOS and not summary.failed
    assert_same_features(stored(photos, index), stored(photos, serial))


def test_a_lost_cluster_keeps_what_was_finished(photos, tmp_path, monkeypatch):
    def lost_after_five(paths, **kw):
        kw = {k: v for k, v in kw.items() if k in ("feature_kwargs", "extractor", "pack")}
        results = extract_parallel(paths, jobs=1, **kw)
        for _ in range(5):
            yield next(results)
        raise dist.ClusterError("the Dask scheduler lost the run's tasks")

    monkeypatch.setattr(dist, "extract_on_cluster", lost_after_five)
    col = Collection.open(photos, tmp_path / "index")
    try:
        with pytest.raises(dist.ClusterError):
            for _ in col.update(cluster="local:2"):
                pass
        assert col.store.count("ok") == 5  # written, and not extracted again next time
    finally:
        col.close()


@pytest.fixture(scope="module")
def shared_cluster():
    """One local cluster for the engine-level tests."""
    with REAL_OPEN("local:2") as client:
        yield client


def _on(client, monkeypatch) -> list[str]:
    """Make :func:`extract_on_cluster` use ``client``; returns the names of the tasks
    it submits."""
    tasks: list[str] = []

    @contextmanager
    def reuse(spec):
        submit = client.submit

        def counted(fn, *args, **kwargs):
            tasks.append(fn.__name__)
            return submit(fn, *args, **kwargs)

        client.submit = counted
        try:
            yield client
        finally:
            del client.submit

    monkeypatch.setattr(dist, "open_cluster", reuse)
    return tasks


def _extract(paths, **kw) -> dict:
    got = dist.extract_on_cluster(paths, cluster="local:2", feature_kwargs=FEATURE_KW, **kw)
    return {r.path: r for r in got}


@pytest.fixture(scope="module")
def expected(photos) -> dict:
    paths = [str(p) for p in sorted(photos.glob("*.jpg"))[:12]]
    return {r.path: r for r in extract_parallel(paths, jobs=1, feature_kwargs=FEATURE_KW)}


def _assert_same_results(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for path, w in want.items():
        g = got[path]
        assert (g.error, g.size, g.mtime_ns, g.content_hash) == (
            w.error, w.size, w.mtime_ns, w.content_hash,
        )  # fmt: skip
        np.testing.assert_array_equal(g.features.descriptors, w.features.descriptors)
        np.testing.assert_array_equal(g.features.xy, w.features.xy)


def test_workers_that_do_not_see_the_files_get_their_bytes(expected, shared_cluster, monkeypatch):
    tasks = _on(shared_cluster, monkeypatch)
    paths = list(expected)
    # forced: every file is read here and sent
    _assert_same_results(_extract(paths, send_bytes=True), expected)
    assert tasks == ["_bytes_task"] * len(paths)
    # the workers see other files under these paths (another machine's disk): the
    # probe says so, and the bytes are sent
    tasks.clear()
    other = {p: (r.size, r.mtime_ns + 1) for p, r in expected.items()}
    _assert_same_results(_extract(paths, stats=other), expected)
    assert tasks == ["_bytes_task"] * len(paths)
    # told to name paths: each task a worker does not see comes back and is sent again
    tasks.clear()
    seen = {p: (r.size, r.mtime_ns) for p, r in expected.items()}
    seen[paths[0]] = other[paths[0]]
    _assert_same_results(_extract(paths, stats=seen, send_bytes=False), expected)
    assert sorted(tasks) == ["_bytes_task"] + ["_path_task"] * len(paths)


def test_broken_files_are_failure_records(photos, tmp_path, shared_cluster, monkeypatch):
    _on(shared_cluster, monkeypatch)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    gone = str(tmp_path / "gone.jpg")
    good = str(sorted(photos.glob("*.jpg"))[0])
    for send_bytes in (True, False):
        got = _extract([str(bad), gone, good], send_bytes=send_bytes)
        assert got[good].error is None and len(got[good].features)
        assert got[str(bad)].error and got[str(bad)].size == bad.stat().st_size
        assert got[gone].error.startswith("cannot read file")


def crashing_extractor(data: bytes, **kw):
    """Kills its worker process on a file that ends with ``CRASH`` (a segfaulting
    decoder); extracts the others."""
    from engine.features.keypoints import extract_features

    if data.endswith(b"CRASH"):
        os._exit(1)
    return extract_features(data, **kw)


def test_a_file_that_kills_its_workers_is_reported(photos, tmp_path, monkeypatch):
    import dask

    from engine.index.extract import CRASH_REASON

    good = [str(p) for p in sorted(photos.glob("*.jpg"))[:2]]
    crash = tmp_path / "crash.jpg"
    crash.write_bytes(Path(good[0]).read_bytes() + b"CRASH")
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        with REAL_OPEN("local:2") as client:
            _on(client, monkeypatch)
            got = _extract(  # one task in flight: only the crashing file is blamed
                [good[0], str(crash), good[1]], extractor=crashing_extractor, max_in_flight=1
            )
    assert got[str(crash)].error == CRASH_REASON
    assert got[str(crash)].size == crash.stat().st_size  # kept: retried once changed
    assert all(got[p].error is None and len(got[p].features) for p in good)


def test_workers_of_another_version_are_refused(expected, shared_cluster, monkeypatch):
    import engine

    tasks = _on(shared_cluster, monkeypatch)
    theirs = engine.__version__
    monkeypatch.setattr(engine, "__version__", "0.0.1")  # this process "runs" another one
    message = re.escape(f"runs simile {theirs}, this process 0.0.1")
    with pytest.raises(dist.ClusterError, match=message):
        _extract(list(expected))
    assert not tasks


def test_cancel_stops_promptly(photos, shared_cluster, monkeypatch):
    import threading

    _on(shared_cluster, monkeypatch)
    cancel = threading.Event()
    paths = [str(p) for p in sorted(photos.glob("*.jpg"))]
    seen = []
    for res in dist.extract_on_cluster(paths, cluster="local:2", cancel=cancel):
        seen.append(res)
        cancel.set()
    assert len(seen) == 1


@pytest.mark.parametrize(
    "spec", ["local:0", "local:x", "local", "tcp://host", "http://host:8786", "host:8786"]
)
def test_malformed_cluster_is_one_line(spec, photos, capsys):
    assert main(["index", str(photos), "--cluster", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simile: error: --cluster must be local:N")
    assert not (photos / ".simile").exists()


def test_parse_cluster():
    assert dist.parse_cluster("local:3") == dist.ClusterSpec(workers=3)
    assert dist.parse_cluster("tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    assert str(dist.parse_cluster("tls://[::1]:8786")) == "tls://[::1]:8786"


def test_without_dask_the_message_is_clear(photos, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    code = main(["index", str(photos), "--index", str(tmp_path / "i"), "--cluster", "local:2"])
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert err == 'simile: error: --cluster needs Dask: pip install "simile[cluster]"'
    with pytest.raises(dist.DaskMissingError, match="simile\\[cluster\\]"):
        dist.extract_on_cluster([], cluster="local:2")


def test_jobs_and_cluster_do_not_go_together(photos, capsys):
    assert main(["index", str(photos), "--jobs", "2", "--cluster", "local:2"]) == 2
    assert "--jobs and --cluster" in capsys.readouterr().err
