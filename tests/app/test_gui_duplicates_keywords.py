"""Duplicates ▸ Keywords… (formats issue, point 3): the duplicate groups go into XMP
sidecars as keywords, after asking; the category keywords written before stay, the
photos are not changed."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("cv2")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from engine.io.xmp import merge_keywords, read_keywords
from tests.app._gui import open_and_wait
from tests.app.test_gui_duplicates_cleanup import find, photo_folder, snapshot


def test_duplicate_groups_as_keywords(qtbot, window, tmp_path, demo_folder, monkeypatch):
    folder, files = photo_folder(tmp_path, demo_folder)
    merge_keywords(files["chelsea"], ["Simile|Category|Cats"], "Simile|Category")
    photos_before = {p: b for p, b in snapshot(folder).items() if not p.endswith(".xmp")}
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    asked = []

    def yes(*args):
        asked.append(args[2])
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", yes)
    with qtbot.waitSignal(view.cleanup_finished, timeout=30_000):
        qtbot.mouseClick(view.keywords_btn, Qt.MouseButton.LeftButton)
    assert asked and "XMP sidecar" in asked[0], view.notice.text()
    kw = read_keywords(files["chelsea"])
    assert "Simile|Category|Cats" in kw  # the categories stay
    assert "Simile|Duplicates|Identical files" in kw
    copy_kw = read_keywords(files["chelsea_copy"])
    roles = {
        k
        for k in (*kw, *copy_kw)
        if k.startswith("Simile|Duplicates|") and k.endswith(("keep", "copy"))
    }
    assert roles == {"Simile|Duplicates|Copy to keep", "Simile|Duplicates|Extra copy"}
    assert "Simile|Duplicates|Copy to keep" in kw  # (the original, not the export)
    assert not read_keywords(files["rocket"])
    after = {p: b for p, b in snapshot(folder).items() if not p.endswith(".xmp")}
    assert after == photos_before  # the photos are not changed
    assert "into" in view.notice.text() and "XMP sidecar" in view.notice.text()


def test_reference_folders_are_always_kept(qtbot, window, tmp_path, demo_folder):
    """Duplicates ▸ Reference folders: the copy in the person's folder of originals is
    the one to keep, even when the other is better by every other rule; kept in the
    index; a folder outside the open one is refused."""
    folder, files = photo_folder(tmp_path, demo_folder)
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    names = [[str(p) for p in g.paths] for g in view.groups]
    row = next(i for i, ps in enumerate(names) if str(files["coffee_small"]) in ps)

    def keeper_now() -> str:
        with qtbot.waitSignal(window.session.duplicates.events.copies, timeout=30_000):
            window._show_group(row)
        return view.infos[window.session.duplicates.best].path

    assert keeper_now() == str(files["coffee"])  # larger: the original
    with qtbot.waitSignal(view.reference_changed, timeout=5_000):
        assert view.set_reference_folders([folder / "exports"])
    assert view.reference_folders() == [str(folder / "exports")]
    assert keeper_now() == str(files["coffee_small"])
    assert "reference" in view.infos[window.session.duplicates.best].reason
    assert not view.set_reference_folders([tmp_path]) or view.reference_folders() == []
