"""Search ▸ Learn From My Keywords (formats issue, point 3), as a person: without keywords
the app says what it needs; with the keywords they gave in digiKam (XMP sidecars) it
learns, and the learned method is offered."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("pytestqt")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from engine.io.xmp import merge_keywords
from tests.app._gui import INDEX_TIMEOUT


def test_learn_from_my_keywords(qtbot, window, tmp_path, demo_folder):
    folder = tmp_path / "photos"
    folder.mkdir()
    names = {"brick": "Wand", "brick_crop": "Wand", "brick_light": "Wand",
             "coffee": "Kaffee", "coffee_crop": "Kaffee", "coffee_light": "Kaffee"}  # fmt: skip
    for n in names:
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, tmp_path / "index")
    errors = []
    window.error_shown.connect(errors.append)
    with qtbot.waitSignal(window.learning_finished, timeout=60_000) as blocker:
        window.learn_keywords_act.trigger()
    assert blocker.args == [None]
    assert errors and "needs at least two keywords" in errors[-1]
    for n, kw in names.items():
        merge_keywords(folder / f"{n}.jpg", [f"Orte|{kw}"], "Orte")
    with qtbot.waitSignal(window.learning_finished, timeout=120_000) as blocker:
        window.learn_keywords_act.trigger()
    summary = blocker.args[0]
    assert summary is not None and summary.source == "keywords" and summary.n_images == 6
    assert "learned" in window.session.methods
