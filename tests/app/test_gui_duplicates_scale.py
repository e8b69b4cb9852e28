"""The Duplicates view's search with its pairs checked in worker processes (as at library
scale), clicked through as a person does (pytest-qt, offscreen): the bar counts the pairs,
Cancel stops the search at once and its worker processes end; a search to the end shows
the groups. Screenshot: ``$SIMILE_SHOTS/dups_search_progress.png`` (default
``/tmp/shots``)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

from PySide6.QtCore import Qt  # noqa: E402

from tests.app._gui import open_and_wait  # noqa: E402

SHOTS = Path(os.environ.get("SIMILE_SHOTS", "/tmp/shots"))


def test_search_in_processes_shows_pairs_and_cancels_at_once(
    qtbot, window, tmp_path, demo_folder, monkeypatch
):
    from engine.workflows import dup_verify
    from engine.workflows import duplicates as dup

    folder = tmp_path / "photos"
    folder.mkdir()
    for p in sorted(demo_folder.glob("*.jpg"))[:24]:
        shutil.copy(p, folder / p.name)
    shutil.copy(demo_folder / "brick.jpg", folder / "brick copy.jpg")
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    monkeypatch.setattr(dup_verify, "PROCESS_MIN_PAIRS", 1)  # (two worker processes)
    monkeypatch.setattr(dup_verify, "VERIFY_WORKERS", 2)
    monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 2)  # (small steps: a search that lasts)
    view = window.dup_view
    window.show_view("duplicates")
    qtbot.mouseClick(view.find_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: view.progress.maximum() > 0 and view.progress.value() > 0, timeout=60_000
    )
    assert view.progress.isVisible() and view.cancel_btn.isVisible()
    assert view.progress.text().endswith(f"/ {view.progress.maximum()} pairs")
    SHOTS.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(SHOTS / "dups_search_progress.png"))
    assert multiprocessing.active_children()  # (the checks run in worker processes)
    t0 = time.monotonic()
    qtbot.mouseClick(view.cancel_btn, Qt.MouseButton.LeftButton)
    assert view.summary.text().startswith("Search cancelled")
    qtbot.waitUntil(lambda: not window.session.jobs.running("duplicates"), timeout=5_000)
    qtbot.waitUntil(lambda: not multiprocessing.active_children(), timeout=5_000)
    assert time.monotonic() - t0 < 5.0
    assert view.find_btn.isEnabled() and not window.banner.isVisible()
    # a search to the end: the groups are shown
    monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 64)
    with qtbot.waitSignal(window.duplicates_shown, timeout=120_000):
        qtbot.mouseClick(view.find_btn, Qt.MouseButton.LeftButton)
    assert any({"brick copy.jpg", "brick.jpg"} <= {p.name for p in g.paths} for g in view.groups)
    assert not view.progress.isVisible()
