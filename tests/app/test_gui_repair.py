"""The window and a damaged, busy, read-only or full index (pytest-qt, offscreen).

- a damaged index file: the banner names it and offers "Repair the index"; the repair
  runs in the background, then the folder is indexed and answers as before the damage;
- a folder another process is indexing: opened read-only, it says so, shows and
  searches what is there, follows the writer's commits and becomes writable once the
  writer has finished;
- an index on read-only media (a read-only bind mount; skipped without mount rights):
  opened read-only, searching works, indexing says in plain words that it cannot;
- a full disk while indexing: one plain line naming the folder, the previous index kept.

The indexing runs in a child process: the full disk is emulated there through
``app.gui.indexer.CHILD_SETUP`` (:mod:`tests.app._child_hooks`), which makes the engine's
write of the new states manifest fail with ``ENOSPC``, as a full disk does.
"""

from __future__ import annotations

import errno
import hashlib
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

import app.gui  # noqa: E402,F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import Qt  # noqa: E402

from app.gui.indexer import IndexingError  # noqa: E402
from app.gui.session import ActionRefused, Session  # noqa: E402
from app.gui.state import (  # noqa: E402
    disk_full_message,
    readonly_message,
    repair_offer,
    repaired_message,
)
from app.gui.window import REPAIR_LABEL  # noqa: E402
from tests.app._gui import INDEX_TIMEOUT, open_and_wait, query_and_wait  # noqa: E402
from tests.app.test_gui_window import make_folder  # noqa: E402

FOLLOW_TIMEOUT = 15_000  # "within a few seconds": the window looks every 2 s


def _photos_state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every photo's content digest and modification time: what must never change."""
    return {
        p.name: (hashlib.blake2b(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.glob("*.jpg"))
    }


def _top(qtbot, win, query: Path) -> tuple[str, str]:
    """The first two results of a search with ``query`` (itself, then its best match)."""
    query_and_wait(qtbot, win, lambda: win.query_photo(str(query)))
    res = win.results
    assert res.rowCount() >= 2, win.status_label.text()
    return Path(res.hits()[0].path).name, Path(res.best_other()).name


def _index_here(folder: Path, idx: Path):
    """Index ``folder`` in this process; the collection stays open (the writer lock held)."""
    from engine.collection import Collection

    col = Collection.open(folder, idx)
    for _ in col.update(jobs=1):
        pass
    return col


# ============================================================================ repair
DAMAGE = {
    "manifest": lambda idx: (idx / "states" / "MANIFEST.json").write_bytes(b"not json {"),
    "state npz": lambda idx: next((idx / "states").glob("search.data.*.npz")).write_bytes(
        b"junk" * 64
    ),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_index_offers_repair_and_answers_as_before(qtbot, window, tmp_path, kind):
    folder, idx = tmp_path / "photos", tmp_path / "idx"
    pairs = make_folder(folder, 3, seed=11)
    open_and_wait(qtbot, window, folder, idx)
    before = _top(qtbot, window, pairs[1][0])
    assert before[1] == pairs[1][1].name
    photos = _photos_state(folder)

    window.session.close()  # (the window lets go of the index: it is damaged "offline")
    DAMAGE[kind](idx)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, idx)
    banner = window.banner
    text = banner.label.text()
    assert banner.isVisible() and banner.action.isVisible(), text
    assert banner.action.text() == REPAIR_LABEL
    assert "\n" not in text and "Traceback" not in text
    assert str(idx) in text and "states/" in text  # names the index and the file
    assert "your photos are not touched" in text
    assert window.collection is None

    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        qtbot.mouseClick(banner.action, Qt.MouseButton.LeftButton)
    assert window.collection is not None and not window.collection.store.readonly
    assert banner.isVisible() and not banner.action.isVisible()
    assert banner.label.text().startswith("Repaired the index of photos: ")
    assert len(window.photos.paths()) == 6
    assert _top(qtbot, window, pairs[1][0]) == before
    assert _photos_state(folder) == photos  # the photos were never touched


# ============================================================================ another writer
def test_folder_indexed_by_another_process_opens_read_only_and_follows_it(qtbot, window, tmp_path):
    """The writer is this test: its store holds the index's writer lock (``flock`` on its
    own open file, so the window's process is refused the lock like any other), indexes
    a new photo, then closes."""
    folder, idx = tmp_path / "photos", tmp_path / "idx"
    pairs = make_folder(folder, 3, seed=5)
    writer = _index_here(folder, idx)
    try:
        open_and_wait(qtbot, window, folder, idx)
        s = window.session
        assert s.readonly == "locked"
        assert window.collection is not None and window.collection.store.readonly
        text = window.banner.label.text()
        assert window.banner.isVisible()
        assert text.startswith("Another Simile process is indexing this folder; showing what "
                               "it has finished — this view updates when it is done")  # fmt: skip
        assert window.access_label.isVisible() and "Read-only" in window.access_label.text()
        assert len(window.photos.paths()) == 6
        assert _top(qtbot, window, pairs[0][0])[1] == pairs[0][1].name  # search works

        # what would write says why
        with qtbot.waitSignal(window.error_shown, timeout=5000) as msg:
            window.mark_result(str(pairs[0][1]), True)
        assert "once the other Simile process has finished" in msg.args[0]
        assert s.marks.get(str(pairs[0][0]), str(pairs[0][1])) is None
        with qtbot.waitSignal(window.error_shown, timeout=5000) as msg:
            window.learn_from_marks()
        assert "once the other Simile process has finished" in msg.args[0]
        assert not window.learn_act.isEnabled()
        with pytest.raises(ActionRefused, match="another Simile process is indexing"):
            s.authorize("trash", pairs[0][1], among="photos")
        assert pairs[0][1].exists()

        # the writer commits a new photo: the window shows it, still read-only
        new = folder / "scene00_again.jpg"
        new.write_bytes(pairs[0][0].read_bytes())
        for _ in writer.update(jobs=1):
            pass
        qtbot.waitUntil(lambda: str(new) in window.photos.paths(), timeout=FOLLOW_TIMEOUT)
        assert s.readonly == "locked"
        assert _top(qtbot, window, new)[1] == "scene00.jpg"  # the reader's new version
    finally:
        writer.close()
    # the writer has finished: the window opens the index for writing
    qtbot.waitUntil(
        lambda: (
            s.readonly is None
            and window.collection is not None
            and not window.collection.store.readonly
        ),
        timeout=FOLLOW_TIMEOUT,
    )
    assert not window.access_label.isVisible()
    assert not (window.banner.isVisible() and "Another Simile" in window.banner.label.text())
    assert window.learn_act.isEnabled()
    assert len(window.photos.paths()) == 7
    qtbot.waitUntil(lambda: window.session.query.status == "done", timeout=60_000)
    with qtbot.waitSignal(window.marks_saved, timeout=10_000):  # it writes again
        window.mark_result(str(pairs[0][0]), True)


# ============================================================================ read-only media
def test_index_on_read_only_media_opens_read_only_and_says_so(qtbot, window, tmp_path):
    """The index folder bind-mounted read-only over itself (root's chmod would not stop
    writes); skipped where mounting is not allowed."""
    folder, idx = tmp_path / "photos", tmp_path / "idx"
    pairs = make_folder(folder, 3, seed=9)
    _index_here(folder, idx).close()
    if subprocess.run(["mount", "--bind", str(idx), str(idx)], capture_output=True).returncode:
        pytest.skip("bind mounts need root and mount rights")
    try:
        ro = subprocess.run(["mount", "-o", "remount,ro,bind", str(idx)], capture_output=True)
        if ro.returncode:
            pytest.skip("cannot remount read-only here")
        with pytest.raises(OSError):
            (idx / "probe").write_bytes(b"")
        open_and_wait(qtbot, window, folder, idx)
        s = window.session
        assert s.readonly == "media"
        text = window.banner.label.text()
        assert window.banner.isVisible() and "read-only media" in text, text
        assert "searching works, but new photos cannot be indexed" in text
        assert window.access_label.isVisible()
        assert len(window.photos.paths()) == 6
        assert _top(qtbot, window, pairs[2][0])[1] == pairs[2][1].name
        with qtbot.waitSignal(window.error_shown, timeout=5000) as msg:
            window.reindex()  # F5
        assert msg.args[0].startswith("New photos cannot be indexed here")
        assert not window.is_indexing()
        with qtbot.waitSignal(window.error_shown, timeout=5000) as msg:
            window.mark_result(str(pairs[2][1]), True)
        assert "on read-only media" in msg.args[0]
    finally:
        window.session.close()  # (lets go of the index before it is unmounted)
        subprocess.run(["umount", str(idx)], check=True)


# ============================================================================ full disk
def test_full_disk_while_indexing_is_one_line_and_keeps_the_previous_index(
    qtbot, window, tmp_path, monkeypatch
):
    """The real indexing child, whose engine write of the new states manifest fails with
    ENOSPC (:func:`tests.app._child_hooks.full_disk_at_commit`)."""
    from app.gui import indexer

    folder, idx = tmp_path / "photos", tmp_path / "idx"
    pairs = make_folder(folder, 3, seed=13)
    open_and_wait(qtbot, window, folder, idx)
    before = _top(qtbot, window, pairs[0][0])
    manifest = (idx / "states" / "MANIFEST.json").read_bytes()
    more = make_folder(tmp_path / "more", 1, seed=14)
    for p in more[0]:
        p.rename(folder / f"new_{p.name}")

    monkeypatch.setattr(indexer, "CHILD_SETUP", "tests.app._child_hooks:full_disk_at_commit")
    with qtbot.waitSignal(window.error_shown, timeout=INDEX_TIMEOUT) as msg:
        window.reindex()  # F5
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)
    text = msg.args[0]
    assert text == disk_full_message(folder.resolve())
    assert text.startswith(f"The disk is full: Simile could not save the index of {folder}")
    assert "\n" not in text and "Traceback" not in text and "Errno" not in text
    assert window.banner.isVisible() and window.banner.label.text() == text
    assert (idx / "states" / "MANIFEST.json").read_bytes() == manifest  # the previous version
    assert window.collection is not None  # ... open and searchable
    assert _top(qtbot, window, pairs[0][0]) == before

    monkeypatch.setattr(indexer, "CHILD_SETUP", None)  # space freed: F5 completes it
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.reindex()
    assert (idx / "states" / "MANIFEST.json").read_bytes() != manifest
    assert len(window.photos.paths()) == 8


def test_child_errors_say_what_the_window_can_do():
    """What the indexing child reports, classified (including a child that only sends
    its message and exception class, as ``("error", text, "OSError")``)."""
    bare = IndexingError("[Errno 28] No space left on device: '/x/.simile/states'", "OSError")
    assert bare.disk_full and not bare.locked and not bare.not_writable and bare.remedy is None
    full = IndexingError(
        "database or disk is full", "OperationalError", {"disk_full": True, "stage": "update"}
    )
    assert full.disk_full
    locked = IndexingError(
        "another simile process is updating this index (pid 7): /i",
        "IndexLockedError",
        {"stage": "open"},
    )
    assert locked.locked and not locked.disk_full
    ro = IndexingError(
        "[Errno 30] Read-only file system: '/i/lock'",
        "OSError",
        {"stage": "open", "errno": errno.EROFS, "disk_full": False},
    )
    assert ro.not_writable and not ro.disk_full
    late = IndexingError(
        "[Errno 13] Permission denied",
        "PermissionError",
        {"stage": "update", "errno": errno.EACCES},
    )
    assert not late.not_writable  # (the index opened: something else cannot be written)
    damaged = IndexingError(
        "the states manifest of the index /i is damaged (x)",
        "IndexCorruptError",
        {"remedy": "repair", "stage": "update"},
    )
    assert damaged.remedy == "repair" and not damaged.disk_full


def test_messages_are_one_plain_line(tmp_path):
    texts = [
        disk_full_message(tmp_path / "photos"),
        disk_full_message(tmp_path / "photos", kept=False),
        readonly_message("locked", tmp_path / "photos"),
        readonly_message("media", tmp_path / "photos", tmp_path / "idx"),
        readonly_message("permission", tmp_path / "photos", tmp_path / "idx"),
        repair_offer("the catalogue of the index /i is damaged (catalog.sqlite: not a db)\n"),
        repair_offer("x" * 500),
        repaired_message(tmp_path / "photos", ["one\nthing", "another"]),
        repaired_message(tmp_path / "photos", []),
    ]
    for t in texts:
        assert "\n" not in t and t == t.strip() and t[0].isupper(), t
        assert len(t) < 420, t
    assert texts[0].startswith(f"The disk is full: Simile could not save the index of "
                               f"{tmp_path / 'photos'}; free some space and press F5")  # fmt: skip
    assert repair_offer("the marker is damaged").startswith("The marker is damaged. Repairing")


def test_session_read_only_refuses_the_trash_and_says_why(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    photo = folder / "a.jpg"
    photo.write_bytes(b"x")
    s = Session()
    s.open_folder(folder)
    s.set_photos([folder.resolve() / "a.jpg"])
    seen = []
    s.events.access_changed.connect(lambda e: seen.append(e.readonly))
    assert s.authorize("trash", folder.resolve() / "a.jpg", among="photos")
    for reason, words in (("locked", "another Simile process"), ("media", "read-only media")):
        s.set_readonly(reason)
        with pytest.raises(ActionRefused, match=words):
            s.authorize("trash", folder.resolve() / "a.jpg", among="photos")
    assert s.authorize("copy", folder.resolve() / "a.jpg", among="photos")  # (reads only)
    with pytest.raises(ValueError):
        s.set_readonly("because")
    s.open_folder(folder)  # a new folder starts writable
    assert s.readonly is None and seen == ["locked", "media", None]
    assert photo.exists()


def test_session_sync_photos_adds_and_removes():
    s = Session()
    s.set_photos(["/p/a.jpg", "/p/c.jpg"])
    added, removed = [], []
    s.events.photos_added.connect(lambda e: added.extend(e.paths))
    s.events.photo_removed.connect(lambda e: removed.append(e.path))
    assert s.sync_photos(["/p/b.jpg", "/p/c.jpg"]) == (["/p/b.jpg"], ["/p/a.jpg"])
    assert s.photos == ["/p/b.jpg", "/p/c.jpg"] and added == ["/p/b.jpg"]
    assert removed == ["/p/a.jpg"]
