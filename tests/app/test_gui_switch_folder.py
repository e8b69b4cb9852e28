"""Opening a second folder leaves nothing of the first one on screen or within reach
(pytest-qt, offscreen).

The bug this guards against: after opening folder B, the Duplicates tab still listed
folder A's groups with live "Move to Trash…" buttons, so a person tidying B could trash
A's files. The window's session model now resets every view in one place and drops late
results of A; the trash is refused for any path outside the open folder or outside the
duplicate groups shown.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

import app.gui  # noqa: E402,F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtWidgets import QLabel, QListWidget, QMessageBox  # noqa: E402

from engine.workflows import trash  # noqa: E402
from tests.app._gui import open_and_wait  # noqa: E402
from tests.app.test_gui_window import make_folder  # noqa: E402


def folder_with_duplicates(folder: Path, prefix: str, seed: int) -> list[Path]:
    """Two scenes with transformed copies, plus a byte-identical copy of the first scene
    (always a duplicate); every file name starts with ``prefix``."""
    pairs = make_folder(folder, 2, seed=seed)
    for p in [x for pair in pairs for x in pair]:
        p.rename(p.with_name(prefix + p.name))
    first = folder / f"{prefix}scene00.jpg"
    shutil.copy(first, folder / f"{prefix}scene00_again.jpg")
    return sorted(folder.iterdir())


def shown_texts(widget) -> list[str]:
    """Every text and tooltip a person can see in ``widget`` (labels, list rows)."""
    out = []
    for lab in widget.findChildren(QLabel):
        if lab.isVisibleTo(widget):
            out += [lab.text(), lab.toolTip()]
    for lst in widget.findChildren(QListWidget):
        for i in range(lst.count()):
            out += [lst.item(i).text(), lst.item(i).toolTip()]
    return out


def cards(view) -> list:
    return [
        view.cards.itemAt(i).widget()
        for i in range(view.cards.count())
        if view.cards.itemAt(i).widget() is not None
    ]


@pytest.fixture
def no_real_trash(monkeypatch):
    """Record every question and trash call; nothing is ever moved. ``answer["move"]``
    says whether the question is answered with "Move to Trash"."""
    calls = {"asked": [], "trashed": []}
    answer = {"move": False}

    def exec_(box):
        calls["asked"].append(box.text())
        return 0

    def clicked(box):
        if not answer["move"]:
            return None
        return next(b for b in box.buttons()
                    if box.buttonRole(b) == QMessageBox.ButtonRole.DestructiveRole)  # fmt: skip

    def trash_dir(path, *a):
        calls["trashed"].append(str(path))
        # "no trash here": nothing moves, nothing is re-indexed
        raise trash.TrashUnavailable(f"No trash can take {path} (a test).", path)

    monkeypatch.setattr(QMessageBox, "exec", exec_)
    monkeypatch.setattr(QMessageBox, "clickedButton", clicked)
    monkeypatch.setattr(trash, "trash_dir", trash_dir)
    return calls, answer


def test_second_folder_shows_and_trashes_nothing_of_the_first(
    qtbot, window, tmp_path, no_real_trash
):
    calls, answer = no_real_trash
    folder_a, folder_b = tmp_path / "A", tmp_path / "B"
    files_a = folder_with_duplicates(folder_a, "a_", seed=7)
    files_b = folder_with_duplicates(folder_b, "b_", seed=11)
    names_a = [p.name for p in files_a]

    # folder A: its duplicates are found and shown with trash buttons
    open_and_wait(qtbot, window, folder_a, tmp_path / "idx_a")
    with qtbot.waitSignal(window.duplicates_shown, timeout=60_000):
        window.find_duplicates(0.5)
    view = window.dup_view
    dup_a = str(folder_a / "a_scene00_again.jpg")
    assert any(dup_a in map(str, g.paths) for g in view.groups)
    assert cards(view) and any("a_scene00" in t for t in shown_texts(view))
    with qtbot.waitSignal(window.results_changed, timeout=60_000):
        window.query_photo(str(files_a[0]))
    assert window.results.rowCount() > 0

    # a duplicate search of A still running when B is opened: its groups arrive late
    groups_a = list(view.groups)
    release, delivered = threading.Event(), threading.Event()

    def slow_duplicates(threshold, *, cancel=None, progress=None):  # (the engine's signature)
        release.wait(30)
        delivered.set()
        return groups_a

    window.collection.duplicates = slow_duplicates
    window.find_duplicates(0.5)
    assert "Looking for near-duplicates" in view.summary.text()

    # folder B
    with qtbot.waitSignal(window.indexing_finished, timeout=180_000):
        window.open_folder(folder_b, tmp_path / "idx_b")
        release.set()  # A's late result reaches the event loop while B is indexing
    qtbot.waitUntil(delivered.is_set, timeout=30_000)
    qtbot.wait(100)  # let the queued result of A be delivered (and dropped)

    # no view shows any of A's files
    s = window.session
    assert s.folder == folder_b.resolve()
    assert s.duplicates.groups == [] and view.groups == [] and view.infos == []
    assert view.group_list.count() == 0 and cards(view) == []
    assert view.summary.text() == "No duplicates searched in B yet: press Find duplicates."
    assert view.find_btn.isEnabled()
    texts = " ".join(shown_texts(view))
    assert not any(n in texts for n in names_a), texts
    assert sorted(window.photos.paths()) == sorted(str(p) for p in files_b)
    assert window.results.rowCount() == 0 and window.results.query is None
    assert s.query.source is None and window.matches_view.data is None
    cats = window.views.get("categories")
    if cats is not None:
        assert all(not any(str(folder_a) in p for p in r.model.paths()) for r in cats.rows)
        assert cats.mask.data is None

    # ... and none can act on them: trashing A's duplicate is refused before asking
    view._confirm_trash(dup_a)
    assert calls == {"asked": [], "trashed": []}
    assert Path(dup_a).exists()
    assert "not inside the open folder" in window.status_label.text()
    assert window.banner.isVisible()

    # B's own duplicates: only a photo of the groups shown can be trashed
    with qtbot.waitSignal(window.duplicates_shown, timeout=60_000):
        window.find_duplicates(0.5)
    dup_b = str(folder_b / "b_scene00_again.jpg")
    in_groups = {str(p) for g in view.groups for p in g.paths}
    assert dup_b in in_groups and not any(str(folder_a) in p for p in in_groups)
    lonely = next(str(p) for p in files_b if str(p) not in in_groups)
    view._confirm_trash(lonely)  # inside B, but in no duplicate group
    assert calls == {"asked": [], "trashed": []}
    assert "not one of the duplicate groups" in window.status_label.text()
    # a path that leaves B through ".." is outside it, whatever it names
    view._confirm_trash(str(folder_b / ".." / "A" / "a_scene00_again.jpg"))
    assert calls == {"asked": [], "trashed": []}

    view._confirm_trash(dup_b)  # asked; the person says no
    assert len(calls["asked"]) == 1 and calls["trashed"] == []
    answer["move"] = True
    view._confirm_trash(dup_b)  # asked; the person says yes: exactly that file
    qtbot.waitUntil(lambda: calls["trashed"] == [dup_b], timeout=10_000)
    qtbot.waitUntil(lambda: not view.is_busy(), timeout=10_000)
    assert all(p.exists() for p in files_a + files_b)


def test_export_links_only_inside_the_open_folder(qtbot, window, tmp_path):
    """Links / copies of the grouping are written only for photos inside the open folder;
    a symlinked photo is exported as the link (the new link points at it, not at its
    target)."""
    import numpy as np

    from app.gui.categories import Grouping

    view = window.views.get("categories")
    if view is None:
        pytest.skip("the categories view is not available")
    folder, elsewhere = tmp_path / "photos", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    inside = folder / "a.jpg"
    inside.write_bytes(b"a")
    target = elsewhere / "t.jpg"
    target.write_bytes(b"t")
    link = folder / "link.jpg"
    link.symlink_to(target)
    window.session.open_folder(folder)  # (the model only: nothing is indexed)

    def grouping(paths):
        n = len(paths)
        return Grouping([str(p) for p in paths], np.zeros(n, np.int64), np.ones(n),
                        np.ones(n, bool), np.zeros(n, bool), "by hand")  # fmt: skip

    window.session.grouping.set_grouping(grouping([inside, target]))
    assert view.export(tmp_path / "out", "links") is None
    assert view.export(tmp_path / "out", "copies") is None
    assert not (tmp_path / "out").exists()
    assert "not inside the open folder" in window.status_label.text()

    window.session.grouping.set_grouping(grouping([inside, link]))
    assert view.export(tmp_path / "out", "links") == 2
    made = {p.name: p for p in (tmp_path / "out").rglob("*.jpg")}
    assert os.readlink(made["link.jpg"]) == str(link)  # the link, never its target
    assert os.readlink(made["a.jpg"]) == str(inside)
    assert target.read_bytes() == b"t" and link.is_symlink()
