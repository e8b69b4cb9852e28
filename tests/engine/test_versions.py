"""Consistent versions of an index: crashes and full disks at every write, readers during
updates, interrupted first indexes, read-only media, the catalogue tie.

Crashes are injected with the store's write hook (``engine.index.files.WRITE_HOOK``): an
exception at the Nth file write of an update (the cleanup handlers then run, as after a
failed write), or ``os._exit`` in a child process (nothing runs: a ``kill -9``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import engine.index.catalog as catalog_mod
import engine.index.files as files
import engine.index.fit as fit
from engine.collection import Collection
from engine.index.encode import compatible
from engine.index.keys import DATA_STATE, MODELS_STATE
from engine.index.manifest import MANIFEST_NAME, read_snapshot
from engine.index.states import SEGMENTS_KEY
from engine.index.store import IndexCorruptError, IndexStore

FIRST = ("astronaut", "brick", "coffee", "camera", "chelsea", "rocket")
MORE = ("astronaut_crop", "brick_crop", "coffee_light", "camera_crop", "chelsea_crop",
        "rocket_crop", "coins")  # fmt: skip
SEARCH = [MODELS_STATE, DATA_STATE]
ROOT = Path(__file__).resolve().parents[2]


class Crash(Exception):
    """What the write hook raises: the program stops at that write."""


@pytest.fixture(scope="module")
def small(tmp_path_factory, demo_folder):
    """The demo photos at half size (the tests index the same folder many times)."""
    import cv2

    out = tmp_path_factory.mktemp("small_demo")
    for n in (*FIRST, *MORE):
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(out / f"{n}.jpg"), cv2.resize(img, None, fx=0.5, fy=0.5))
    return out


def _copy(demo, folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(demo / f"{n}.jpg", folder / f"{n}.jpg")


def _update(col, cancel_after=None):
    cancel = threading.Event()
    gen = col.update(jobs=1, cancel=cancel)
    k = 0
    while True:
        try:
            ev = next(gen)
        except StopIteration as stop:
            return stop.value
        if ev.status == "indexed":
            k += 1
            if cancel_after is not None and k >= cancel_after:
                cancel.set()


def _index(folder, **kw):
    with Collection.open(folder, **kw) as col:
        return _update(col)


def _states(folder):
    with IndexStore.open(folder / ".simile", readonly=True) as s:
        return s.load_states(SEARCH)


def _same_state(a, b):
    if set(a) != set(b):
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, list):  # a segmented state's segments
            if not (isinstance(w, list) and len(v) == len(w)):
                return False
            if not all(_same_state(x, y) for x, y in zip(v, w, strict=True)):
                return False
        elif isinstance(v, np.ndarray):
            if not (isinstance(w, np.ndarray) and v.dtype == w.dtype and np.array_equal(v, w)):
                return False
        elif v != w:
            return False
    return True


def _same(a, b):
    return all(_same_state(a[n], b[n]) for n in SEARCH)


def _answers(folder, names):
    with Collection.open(folder, readonly=True) as col:
        out = {}
        for n in names:
            for m in ("vocabulary", "uniform", "wta", "hybrid"):
                hits = col.query(folder / f"{n}.jpg", method=m, top=50)
                out[n, m] = sorted((h.path.name, h.score) for h in hits)
        return out


def _hook(stage, n, exc):
    """A write hook raising ``exc`` at the ``n``th write (``stage``: before / after it)."""
    seen = []

    def hook(where, path):
        if where == stage:
            seen.append(path)
            if len(seen) == n:
                raise exc

    return hook, seen


def _update_cancelled_in_refit(folder, monkeypatch):
    """An update of ``folder`` cancelled as its refit starts; its summary."""
    cancel = threading.Event()
    fit_binnings = fit.fit_binnings

    def cancelling(*args, **kw):
        cancel.set()
        return fit_binnings(*args, **kw)

    monkeypatch.setattr(fit, "fit_binnings", cancelling)
    try:
        with Collection.open(folder) as col:
            gen = col.update(jobs=1, cancel=cancel)
            while True:
                try:
                    next(gen)
                except StopIteration as stop:
                    return stop.value
    finally:
        monkeypatch.setattr(fit, "fit_binnings", fit_binnings)


def test_crash_or_full_disk_at_every_write_of_an_update(tmp_path, small, monkeypatch):
    """The update after which the models are refitted (the collection doubled): a crash
    after any write, or a full disk at any write, leaves a version a reader opens and
    queries -- the old one, the old models with the new photos (committed before the
    refit), or the new one, never a mix -- and the next update gives what an
    uninterrupted one does."""
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    old = _states(folder)
    backup = tmp_path / "old.simile"
    shutil.copytree(folder / ".simile", backup)
    _copy(small, folder, MORE)
    assert _update_cancelled_in_refit(folder, monkeypatch).cancelled
    mid = _states(folder)  # the new photos in a segment, encoded with the old models
    assert _same_state(mid[MODELS_STATE], old[MODELS_STATE]) and not _same(mid, old)
    shutil.rmtree(folder / ".simile")
    shutil.copytree(backup, folder / ".simile")

    hook, writes = _hook("after", 0, Crash())
    monkeypatch.setattr(files, "WRITE_HOOK", hook)
    _index(folder)
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    new = _states(folder)
    assert not _same_state(old[MODELS_STATE], new[MODELS_STATE])  # refitted
    answers = _answers(folder, ["brick_crop", "coins"])
    names = [p.name for p in writes]
    assert any(n.startswith("c") for n in names) and MANIFEST_NAME in names

    def restore():
        shutil.rmtree(folder / ".simile")
        shutil.copytree(backup, folder / ".simile")

    for n in range(1, len(writes) + 1):
        for stage, exc in (("after", Crash()), ("before", OSError(errno.ENOSPC, "No space"))):
            restore()
            monkeypatch.setattr(files, "WRITE_HOOK", _hook(stage, n, exc)[0])
            with pytest.raises(type(exc)), Collection.open(folder) as col:
                _update(col)
            monkeypatch.setattr(files, "WRITE_HOOK", None)
            got = _states(folder)
            assert any(_same(got, v) for v in (old, mid, new)), (stage, n, names[n - 1])
            with Collection.open(folder, readonly=True) as col:
                assert col.query(folder / "brick.jpg", top=1)[0].path.name == "brick.jpg"
                assert compatible(*col.searcher.ensure())
            _index(folder)  # completing the update: as if it had never been interrupted
            assert _same(_states(folder), new), (stage, n, names[n - 1])
    assert _answers(folder, ["brick_crop", "coins"]) == answers


def test_a_grown_collection_is_searchable_before_and_during_its_refit(
    tmp_path, small, monkeypatch
):
    """Photos that make a collection due a refit are committed first, encoded with the
    old models: a cancelled (or killed) refit leaves them searchable, a reader answers
    with the old models without refitting, and the next update refits to exactly what
    an uninterrupted update gives."""
    clean = tmp_path / "clean"
    _copy(small, clean, FIRST)
    _index(clean)
    _copy(small, clean, MORE)
    _index(clean)
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    old = _states(folder)
    _copy(small, folder, MORE)
    summary = _update_cancelled_in_refit(folder, monkeypatch)
    assert summary.cancelled and summary.indexed == len(MORE)
    mid = _states(folder)
    assert _same_state(mid[MODELS_STATE], old[MODELS_STATE])  # not refitted

    def no_refit(*args, **kw):
        raise AssertionError("a reader refitted the models")

    monkeypatch.setattr(fit, "refit", no_refit)
    with Collection.open(folder, readonly=True) as col:
        for name in MORE:  # every new photo is found, as its own best hit
            assert col.query(folder / f"{name}.jpg", method="vocabulary", top=1)[0].path.name == (
                f"{name}.jpg"
            )
        assert compatible(*col.searcher.ensure())
    monkeypatch.undo()
    _index(folder)  # the refit, completed
    new = _states(folder)
    assert not _same_state(new[MODELS_STATE], old[MODELS_STATE])
    assert _same(new, _states(clean))


def test_kill_at_the_commit_keeps_a_whole_version(tmp_path, small):
    """A real crash (``os._exit`` in a child, no cleanup at all) just before, and just
    after, the manifest of an update is written."""
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    old = _states(folder)
    _copy(small, folder, MORE[:3])
    script = textwrap.dedent(
        """
        import os, sys
        import engine.index.files as files
        from engine.collection import Collection
        stage = sys.argv[2]
        def hook(where, path):
            if where == stage and path.name == "MANIFEST.json":
                os._exit(137)
        files.WRITE_HOOK = hook
        with Collection.open(sys.argv[1]) as col:
            for _ in col.update(jobs=1):
                pass
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for stage, expect_new in (("before", False), ("after", True)):
        proc = subprocess.run(
            [sys.executable, "-c", script, str(folder), stage], env=env, capture_output=True
        )
        assert proc.returncode == 137, proc.stderr.decode()[-2000:]
        got = _states(folder)
        assert _same(got, old) != expect_new
        segments = got[DATA_STATE].get(SEGMENTS_KEY, [got[DATA_STATE]])
        assert sum(len(seg["ids"]) for seg in segments) == (9 if expect_new else 6)
        # the new photos were added as a segment of their own; the first one kept
        assert len(segments) == (2 if expect_new else 1)
        with Collection.open(folder, readonly=True) as col:
            hits = col.query(folder / "brick_crop.jpg", method="vocabulary", top=2)
            assert {h.path.name for h in hits} == {"brick.jpg", "brick_crop.jpg"}
    _index(folder)  # the writer's clean-up: nothing but the current version is left
    states = folder / ".simile" / "states"
    assert sorted(os.listdir(states)) == sorted([MANIFEST_NAME, *read_snapshot(states).files()])


def test_readers_never_see_two_versions_mixed(tmp_path):
    """Store level: many commits of two states that must agree, read in a loop."""
    idx = tmp_path / "idx"
    stop = threading.Event()
    errors = []
    with IndexStore.open(idx) as w:
        w.save_states({"a": {"g": 0, "x": np.zeros(3000)}, "b": {"g": 0, "y": np.zeros(7)}})

        def read():
            loads = 0
            with IndexStore.open(idx, readonly=True) as r:
                while not stop.is_set() or loads < 20:
                    st = r.load_states(["a", "b"])
                    g = st["a"]["g"]
                    if not (st["b"]["g"] == g and st["a"]["x"][0] == g == st["b"]["y"][-1]):
                        errors.append((g, st["b"]["g"]))
                    loads += 1
            errors.append(("loads", loads))

        reader = threading.Thread(target=read)
        reader.start()
        for g in range(1, 60):
            w.save_states(
                {"a": {"g": g, "x": np.full(3000, g)}, "b": {"g": g, "y": np.full(7, g)}}
            )
        stop.set()
        reader.join()
    assert errors[:-1] == [] and errors[-1][1] >= 20
    # nothing but the last version is left
    states = sorted(os.listdir(idx / "states"))
    assert states == sorted([MANIFEST_NAME, *read_snapshot(idx / "states").files()])


def test_held_states_are_committed_with_the_next_commit_or_dropped(tmp_path):
    """``hold_states``: a held state is seen by its writer only, committed in ONE version
    with the next other state, and dropped when the block ends without that commit."""
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as w, IndexStore.open(idx, readonly=True) as r:
        w.save_states({"vocab": {"v": 0}, "grouping": {"g": 0}})
        gen = w.snapshot().generation
        with w.hold_states(["vocab"]):
            w.save_state("vocab", {"v": 1, "x": np.arange(3)})
            assert w.snapshot().generation == gen  # nothing committed yet
            assert w.load_state("vocab")["v"] == 1 and w.has_state("vocab")
            assert r.load_state("vocab")["v"] == 0  # other readers: the previous version
            w.save_state("grouping", {"g": 1})
        snap = w.snapshot()
        assert snap.generation == gen + 1
        both = r.load_states(["vocab", "grouping"])
        assert both["vocab"]["v"] == 1 and both["grouping"]["g"] == 1
        assert np.array_equal(both["vocab"]["x"], np.arange(3))
        with w.hold_states(["vocab"]):
            w.save_state("vocab", {"v": 2})
        assert w.load_state("vocab")["v"] == 1 and w.snapshot().generation == gen + 1
        with pytest.raises(RuntimeError), w.hold_states(["a"]), w.hold_states(["b"]):
            pass


def test_readers_during_updates_see_models_and_data_that_agree(tmp_path, small):
    """The searcher of a reader (the app while the CLI indexes): every load pairs the
    models with the data made with them, and every query answers."""
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST[:3])
    _index(folder)
    stop = threading.Event()
    seen = []

    def read():
        while not stop.is_set():
            with Collection.open(folder, readonly=True) as col:
                seen.append(compatible(*col.searcher.ensure()))
                col.query(folder / "brick.jpg", method="vocabulary", top=1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for names in (FIRST, FIRST + MORE):  # the models are refitted each time
            _copy(small, folder, names)
            _index(folder)
    finally:
        stop.set()
        reader.join()
    assert seen and all(seen)


def test_interrupted_first_index_completes_into_a_clean_build(tmp_path, small, monkeypatch):
    """Cancelled after k files, or crashed at any write, then completed: the same models
    (arrays equal) and answers as an uninterrupted first index."""
    monkeypatch.setattr(fit, "PREFIT_SPREAD", 5)
    names = FIRST + MORE
    clean = tmp_path / "clean"
    _copy(small, clean, names)
    hook, writes = _hook("after", 0, Crash())
    monkeypatch.setattr(files, "WRITE_HOOK", hook)
    _index(clean)
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    ref, ref_answers = _states(clean), _answers(clean, ["brick", "coins"])
    runs = [("cancel", k) for k in (1, 6, 12)] + [("crash", n) for n in range(1, len(writes) + 1)]
    for kind, k in runs:
        folder = tmp_path / f"{kind}{k}"
        _copy(small, folder, names)
        with Collection.open(folder) as col:
            if kind == "cancel":
                _update(col, cancel_after=k)
            else:
                # (how many files a first index writes depends on timing: whether the
                # uniform pyramids were all encoded during extraction, and written ahead)
                monkeypatch.setattr(files, "WRITE_HOOK", _hook("after", k, Crash())[0])
                try:
                    _update(col)
                except Crash:
                    pass
                monkeypatch.setattr(files, "WRITE_HOOK", None)
        _index(folder)
        got = _states(folder)
        assert _same_state(got[MODELS_STATE], ref[MODELS_STATE]), (kind, k)
        assert _answers(folder, ["brick", "coins"]) == ref_answers, (kind, k)


def test_search_data_of_another_catalogue_is_never_used(tmp_path, small):
    """A catalogue lost and rebuilt gives new ids: the old data must not answer for them."""
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    idx = folder / ".simile"
    # the catalogue of another index of the same photos, indexed in another order
    other = tmp_path / "other"
    _copy(small, other, reversed(FIRST))
    _index(other, index_dir=tmp_path / "other.simile")
    for suffix in ("", "-wal", "-shm"):
        if (idx / f"catalog.sqlite{suffix}").exists():
            os.remove(idx / f"catalog.sqlite{suffix}")
    shutil.copy(tmp_path / "other.simile" / "catalog.sqlite", idx / "catalog.sqlite")
    shutil.rmtree(idx / "features")
    shutil.copytree(tmp_path / "other.simile" / "features", idx / "features")
    with IndexStore.open(idx, readonly=True) as s:
        snap = s.snapshot()
        assert not snap.has(MODELS_STATE) and set(snap.hidden) == set(SEARCH)
    with pytest.raises(IndexCorruptError, match="another catalogue"):
        with Collection.open(other, index_dir=idx, readonly=True) as col:
            col.query(other / "brick.jpg")
    _index(other, index_dir=idx)  # a writer refits and encodes for its own catalogue
    with Collection.open(other, index_dir=idx, readonly=True) as col:
        for n in FIRST:
            assert col.query(other / f"{n}.jpg", top=1)[0].path.name == f"{n}.jpg"


def test_a_changed_photo_gets_new_search_data(tmp_path, small):
    """A file whose content changed keeps its id: its row of search data is made again
    (the row keys tie each row to the content it was made from)."""
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    shutil.copy(small / "coins.jpg", folder / "brick.jpg")
    st = os.stat(folder / "brick.jpg")
    os.utime(folder / "brick.jpg", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    _index(folder)
    with Collection.open(folder, readonly=True) as col:
        hits = col.query(folder / "brick.jpg", method="vocabulary", top=1)  # stored features
        # (1 to the float16 precision of the stored pyramids: the row is the new content's)
        assert hits[0].path.name == "brick.jpg" and hits[0].score == pytest.approx(1.0, abs=1e-3)
        hits = col.query(small / "coins.jpg", method="vocabulary", top=1)  # a new extraction
        assert hits[0].path.name == "brick.jpg" and hits[0].score > 0.9


def test_index_on_read_only_media_opens_and_answers(tmp_path, small, capsys):
    """The folder mounted read-only over itself (a bind mount: root's chmod would not stop
    writes), with the ``-wal`` and ``-shm`` files a reader leaves, then without them (a
    copy of a closed index): SQLite cannot make a ``-shm`` there, so the catalogue opens
    ``immutable``. Queries answer as before, and indexing is one line, not a traceback."""
    from app.cli import main

    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    answers = _answers(folder, ["brick"])  # (a reader leaves an empty -wal and the -shm)
    idx = folder / ".simile"
    for case in ("with -shm", "without -shm"):
        if case == "without -shm":
            assert os.path.getsize(idx / "catalog.sqlite-wal") == 0
            os.remove(idx / "catalog.sqlite-wal")
            os.remove(idx / "catalog.sqlite-shm")
        mounted = subprocess.run(
            ["mount", "--bind", str(folder), str(folder)], capture_output=True
        )
        if mounted.returncode != 0:
            pytest.skip("bind mounts need root and mount rights")
        try:
            ro = subprocess.run(
                ["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True
            )
            if ro.returncode != 0:
                pytest.skip("cannot remount read-only here")
            with pytest.raises(OSError):
                (idx / "probe").write_bytes(b"")
            assert _answers(folder, ["brick"]) == answers, case
            assert main(["query", str(folder), str(folder / "brick.jpg"), "--json"]) == 0
            capsys.readouterr()
            assert main(["index", str(folder), "--jobs", "1"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "Read-only file system" in err, err
        finally:
            subprocess.run(["umount", str(folder)], check=True)


def test_read_only_fallback_is_taken_only_where_the_folder_is_read_only(tmp_path, monkeypatch):
    """What the bind mount test exercises, emulated: SQLite cannot open a WAL catalogue
    ``mode=ro`` without its ``-shm`` (read-only media); ``immutable`` is used then, and
    only then."""
    with IndexStore.open(tmp_path / "idx") as s:
        s.set_setting("k", 1)
    real = catalog_mod._connect_ro
    used = []

    def connect_ro(catalog, query):
        used.append(query)
        if "immutable" not in query:
            raise catalog_mod.sqlite3.OperationalError("unable to open database file")
        return real(catalog, query)

    monkeypatch.setattr(catalog_mod, "_connect_ro", connect_ro)
    with pytest.raises(IndexCorruptError, match="unable to open"):  # a writable folder
        IndexStore.open(tmp_path / "idx", readonly=True)
    real_access = os.access
    idx = tmp_path / "idx"
    monkeypatch.setattr(
        catalog_mod.os, "access", lambda p, m: False if Path(p) == idx else real_access(p, m)
    )
    with IndexStore.open(tmp_path / "idx", readonly=True) as r:
        assert r.get_setting("k") == 1
    assert used[-2:] == ["?mode=ro", "?mode=ro&immutable=1"]


def test_a_reader_opens_while_a_writer_holds_the_lock(tmp_path, small):
    folder = tmp_path / "photos"
    _copy(small, folder, FIRST)
    _index(folder)
    with Collection.open(folder) as writer:
        _copy(small, folder, MORE[:2])
        gen = writer.update(jobs=1)
        next(gen)
        with Collection.open(folder, readonly=True) as reader:
            assert reader.query(folder / "brick.jpg", top=1)[0].path.name == "brick.jpg"
        for _ in gen:
            pass


def test_legacy_states_are_read_then_adopted(tmp_path):
    """An index written before the manifest (one JSON per state) is read as it is; the
    first writer moves its states into the manifest and deletes the JSON files."""
    import json

    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.save_states({"m": {"n": 3, "w": np.arange(4.0)}, "d": {"ids": np.arange(2)}})
    states = idx / "states"
    snap = read_snapshot(states)
    for name, e in snap.entries.items():  # rewrite it the old way
        doc = {**e.scalars, "__npz__": e.files[0], "__parts__": list(e.files[1:])}
        (states / f"{name}.json").write_text(json.dumps(doc))
    os.remove(states / MANIFEST_NAME)
    with IndexStore.open(idx, readonly=True) as r:
        assert r.snapshot().legacy and r.load_state("m")["n"] == 3
    with IndexStore.open(idx) as s:
        assert not s.snapshot().legacy
        assert s.load_state("m")["w"].tolist() == [0, 1, 2, 3]
    assert sorted(os.listdir(states)) == sorted([MANIFEST_NAME, *snap.files()])
