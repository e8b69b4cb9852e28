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
