"""The folder watcher (formats issue, point 4): a burst of changes is one signal, Simile's
own writes are ignored, an unplugged folder goes offline and comes back."""

from __future__ import annotations

import shutil
import threading

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("watchdog")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from app.gui.watcher import FolderWatcher, relevant
from engine.core.progress import run_to_end


def test_relevant_changes(tmp_path):
    idx = tmp_path / ".simile"
    assert relevant(str(tmp_path / "a.jpg"), idx)
    assert relevant(str(tmp_path / "sub" / "IMG_1.HEIC"), idx)
    for p in (idx / "catalog.sqlite-wal", tmp_path / "a.jpg.xmp", tmp_path / ".a.jpg.tmp",
              tmp_path / "a.jpg.part"):  # fmt: skip
        assert not relevant(str(p), idx)
    # the default index (and its thumbnails) in a hidden folder of the photo folder, also
    # before the window knows where the index is: ignored (the app re-indexed forever)
    for p in (tmp_path / ".simile" / "states" / "MANIFEST.json",
              tmp_path / ".simile" / "thumbnails" / "ab" / "cd.png",
              tmp_path / "sub" / ".git" / "index"):  # fmt: skip
        assert not relevant(str(p), None, tmp_path)
    assert relevant(str(tmp_path / "sub" / "b.jpg"), None, tmp_path)


def test_a_burst_is_one_change_and_own_writes_are_ignored(qtbot, tmp_path, demo_folder):
    folder = tmp_path / "photos"
    (folder / ".simile").mkdir(parents=True)
    w = FolderWatcher(quiet_ms=300, rescan_ms=60_000)
    w.watch(folder, folder / ".simile")
    try:
        assert w.mode in ("native", "polling")
        seen = []
        w.changed.connect(lambda: seen.append(1))
        with qtbot.waitSignal(w.changed, timeout=10_000):
            for n in ("brick", "coffee", "chelsea"):
                shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
        qtbot.wait(600)
        assert len(seen) == 1  # one signal for the burst
        with qtbot.assertNotEmitted(w.changed, wait=1200):
            (folder / ".simile" / "catalog.sqlite").write_bytes(b"x")
            (folder / "brick.jpg.xmp").write_text("<x/>")
        with qtbot.waitSignal(w.changed, timeout=10_000):
            (folder / "coffee.jpg").rename(folder / "coffee moved.jpg")
    finally:
        w.stop()


def test_an_unplugged_folder_goes_offline_and_comes_back(qtbot, tmp_path):
    folder = tmp_path / "drive"
    folder.mkdir()
    w = FolderWatcher(quiet_ms=200, rescan_ms=60_000)
    w.watch(folder, None)
    try:
        folder.rename(tmp_path / "away")
        with qtbot.waitSignal(w.offline, timeout=5_000):
            w.check()
        assert w.is_offline and w.mode == "off"
        (tmp_path / "away").rename(folder)
        with qtbot.waitSignals([w.online, w.changed], timeout=5_000):
            w.check()
        assert not w.is_offline
    finally:
        w.stop()


def test_the_window_indexes_what_changes_in_the_open_folder(qtbot, window, tmp_path, demo_folder):
    """As a person: open a folder, then copy photos into it, move one and delete one in
    the file manager; the grid follows by itself, and a moved photo is not a new one."""
    from tests.app._gui import INDEX_TIMEOUT

    folder = tmp_path / "photos"
    folder.mkdir()
    for n in ("brick", "coffee"):
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
    assert not window.watch_act.isChecked()  # (off in tests unless asked)
    window.watch_act.trigger()  # File ▸ Watch the Folder for Changes
    assert window.settings.value("watchFolder") == "true"
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder)  # the index in folder/.simile, as for most people
    assert window.watcher.mode in ("native", "polling")

    def shown() -> set[str]:
        return {p.rsplit("/", 1)[-1] for p in window.photos.paths()}

    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        shutil.copy(demo_folder / "chelsea.jpg", folder / "chelsea.jpg")
    qtbot.waitUntil(lambda: "chelsea.jpg" in shown(), timeout=10_000)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        (folder / "sub").mkdir()
        (folder / "coffee.jpg").rename(folder / "sub" / "coffee.jpg")
        (folder / "brick.jpg").unlink()
    qtbot.waitUntil(lambda: shown() == {"chelsea.jpg", "coffee.jpg"}, timeout=10_000)
    # the index's own writes (and its thumbnails) never count as a change: no endless
    # re-indexing (the index is in folder/.simile)
    with qtbot.assertNotEmitted(window.watcher.changed, wait=3000):
        thumbs = folder / ".simile" / "thumbnails" / "ab"
        thumbs.mkdir(parents=True, exist_ok=True)
        (thumbs / "cd.png").write_bytes(b"png")  # (as a thumbnail cache in the index)
    assert not window.is_indexing()
    window.watch_act.trigger()  # off again
    assert window.watcher.mode == "off"


def test_the_window_indexes_only_the_paths_the_watcher_names(
    qtbot, window, tmp_path, demo_folder, monkeypatch
):
    """The watcher's run is told what changed (Collection.update(paths=...)), not a scan
    of the whole folder; a run that does not complete gives its paths back."""
    import app.gui.indexer as indexer
    from tests.app._gui import INDEX_TIMEOUT

    seen = []
    real = indexer.index_in_child

    def spy(*args, **kw):
        seen.append(kw.get("paths"))
        return real(*args, **kw)

    monkeypatch.setattr(indexer, "index_in_child", spy)
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(demo_folder / "brick.jpg", folder / "brick.jpg")
    window.watch_act.trigger()
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder)
    assert seen == [None]  # opening: the whole folder
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        shutil.copy(demo_folder / "chelsea.jpg", folder / "chelsea.jpg")
    qtbot.waitUntil(lambda: any(p.endswith("chelsea.jpg") for p in window.photos.paths()))
    assert seen[-1] is not None and str(folder / "chelsea.jpg") in seen[-1]
    assert str(folder / "brick.jpg") not in seen[-1]
    window.watcher.give_back([str(folder / "brick.jpg")])  # (as after a cancelled run)
    assert window.watcher.take_changes() == [str(folder / "brick.jpg")]
    window.watch_act.trigger()
    # not watching (or no event named a path): the whole folder
    window._on_folder_changed_on_disk()
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)
    assert seen[-1] is None


def test_a_late_event_of_the_folder_watched_before_is_ignored(qtbot, tmp_path):
    """Found in a real window: opening another folder while the first one's index was
    being written delivered that write's event (queued from the old observer's thread)
    to the new watch; the update was then told a path outside the new folder and
    failed ("... is not inside the folder ...")."""
    first, second = tmp_path / "first", tmp_path / "second"
    for f in (first, second):
        (f / ".simile").mkdir(parents=True)
    w = FolderWatcher(quiet_ms=300, rescan_ms=60_000)
    w.watch(first, first / ".simile")
    w.watch(second, second / ".simile")
    try:
        with qtbot.assertNotEmitted(w.changed, wait=600):
            w._event.emit(str(first / ".simile" / "catalog.sqlite"))
            w._event.emit(str(first / "photo.jpg"))
        assert w.take_changes() is None
        with qtbot.waitSignal(w.changed, timeout=5_000):
            w._event.emit(str(second / "photo.jpg"))
        assert w.take_changes() == [str(second / "photo.jpg")]
    finally:
        w.stop()


def test_the_watcher_tells_which_paths_changed(qtbot, tmp_path, demo_folder):
    """What the events named is what the update looks at (take_changes); when they may
    not tell everything, the whole folder is scanned (None)."""
    folder = tmp_path / "photos"
    folder.mkdir()
    w = FolderWatcher(quiet_ms=300, rescan_ms=60_000)
    w.watch(folder, folder / ".simile")
    try:
        with qtbot.waitSignal(w.changed, timeout=10_000):
            for n in ("brick", "coffee"):
                shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
            (folder / "brick.jpg.xmp").write_text("<x/>")  # (a sidecar: not named)
        qtbot.wait(400)
        got = w.take_changes()
        assert got is not None
        assert {str(folder / "brick.jpg"), str(folder / "coffee.jpg")} <= set(got)
        assert not any(p.endswith(".xmp") for p in got)
        assert w.take_changes() is None  # (taken: collected anew; none named: a scan)
        with qtbot.waitSignal(w.changed, timeout=10_000):
            (folder / "coffee.jpg").rename(folder / "coffee moved.jpg")
        qtbot.wait(400)
        got = w.take_changes()
        assert {str(folder / "coffee.jpg"), str(folder / "coffee moved.jpg")} <= set(got)
        w.mode = "polling"  # a periodic check without native events: everything
        w.check()
        assert w.take_changes() is None
    finally:
        w.stop()


def test_the_indexing_child_updates_the_paths_it_is_given(tmp_path, demo_folder):
    """index_in_child(paths=...): the child looks at those paths only (a photo added
    meanwhile elsewhere in the folder waits for the next whole scan)."""
    from app.gui.indexer import index_in_child
    from engine.collection import Collection

    folder = tmp_path / "photos"
    folder.mkdir()
    for n in ("brick", "coffee", "chelsea"):
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")

    def run(paths=None):
        return run_to_end(
            index_in_child(folder, None, cancel=threading.Event(), jobs=1, paths=paths)
        )

    assert run().indexed == 3
    shutil.copy(demo_folder / "rocket.jpg", folder / "rocket.jpg")
    shutil.copy(demo_folder / "coins.jpg", folder / "coins.jpg")
    (folder / "brick.jpg").unlink()
    s = run([str(folder / "rocket.jpg"), str(folder / "brick.jpg")])
    assert (s.indexed, s.removed) == (1, 1)
    with Collection.open(folder, readonly=True) as col:
        names = sorted(p.name for p in col.paths())
    assert names == ["chelsea.jpg", "coffee.jpg", "rocket.jpg"]
    assert run().indexed == 1  # (coins.jpg: found by the whole scan)
