"""Metadata in the window: the info panel, result cards, sorting by date taken, folder
headings and the date filter (pytest-qt, offscreen)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PIL import Image
from PySide6.QtCore import QDate, Qt

from engine.io.metadata import PhotoMetadata
from tests.app._gui import open_and_wait, query_and_wait, scene
from tests.engine.test_metadata import _exif

SHOTS = Path(os.environ.get("SIMILE_SHOTS", "/tmp/shots"))

#: sub-folder/name -> date taken (None: no EXIF)
PHOTOS = {
    "beach/b1.jpg": "2023:08:01 10:00:00",
    "beach/b2.jpg": "2021:01:02 09:30:00",
    "beach/b3.jpg": None,
    "city/a1.jpg": "2022:05:05 18:45:00",
    "city/a2.jpg": "2020:03:03 12:00:00",
}


@pytest.fixture(scope="module")
def dated_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("dated")
    folder = root / "photos"
    rng = np.random.default_rng(3)
    for name, date in PHOTOS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        im = Image.fromarray(scene(rng, 240, 320))
        if date is None:
            im.save(path, quality=90)
        else:
            im.save(path, quality=90, exif=_exif(date=date, make="FUJIFILM", model="X-T4"))
    return folder, root / "index"


def _names(model) -> list[str]:
    return [Path(p).name for p in model.paths()]


def test_sort_group_and_filter_the_model(qtbot):
    from app.gui.models import HEADING_ROLE, PhotoListModel
    from app.gui.thumbnails import ThumbnailProvider

    thumbs = ThumbnailProvider(None)
    model = PhotoListModel(thumbs)
    paths = ["/f/x/c.jpg", "/f/x/A.jpg", "/f/y/b.jpg", "/f/y/d.jpg"]
    model.root = Path("/f")
    model.set_paths(paths)
    model.set_metadata({
        "/f/x/c.jpg": PhotoMetadata(date_taken="2020-01-01T00:00:00"),
        "/f/y/b.jpg": PhotoMetadata(date_taken="2019-05-05T00:00:00"),
        "/f/x/A.jpg": PhotoMetadata(),
    })  # fmt: skip
    assert _names(model) == ["A.jpg", "c.jpg", "b.jpg", "d.jpg"]  # by folder (path)
    model.set_order("name")
    assert _names(model) == ["A.jpg", "b.jpg", "c.jpg", "d.jpg"]
    model.set_order("date")
    assert _names(model) == ["b.jpg", "c.jpg", "A.jpg", "d.jpg"]  # undated last
    model.set_order(grouped=True)
    assert model.headings() == ["x  ·  2 photos", "y  ·  2 photos"]
    assert model.rowCount() == 6 and model.is_heading(0) and model.is_heading(3)
    assert model.data(model.index(0), HEADING_ROLE) == "x  ·  2 photos"
    assert not model.flags(model.index(0)) & Qt.ItemFlag.ItemIsSelectable
    assert model.row_of("/f/y/b.jpg") == 4
    model.set_order(date_range=("2019-12-31", None))
    assert _names(model) == ["c.jpg"] and model.headings() == ["x  ·  1 photo"]
    model.append_paths(["/f/y/e.jpg"])  # arrives while filtered: kept, not shown
    assert _names(model) == ["c.jpg"] and "/f/y/e.jpg" in model.all_paths()
    model.set_order("folder", False, None)
    assert _names(model) == ["A.jpg", "c.jpg", "b.jpg", "d.jpg", "e.jpg"]


def test_info_panel_sorting_headings_and_date_filter(qtbot, window, dated_folder):
    folder, index = dated_folder
    open_and_wait(qtbot, window, folder, index)
    s = window.session
    assert len(s.metadata) == len(PHOTOS)
    grid, photos, bar = window.grid, window.photos, window.sort_bar
    assert _names(photos) == ["b1.jpg", "b2.jpg", "b3.jpg", "a1.jpg", "a2.jpg"]

    # select a photo: the info panel shows its camera and date
    row = photos.row_of(str(folder / "city" / "a1.jpg"))
    rect = grid.visualRect(photos.index(row))
    qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    query_and_wait(  # (a double-click: press, release, then the double-click)
        qtbot, window, lambda: qtbot.mouseDClick(grid.viewport(), Qt.MouseButton.LeftButton,
                                                 pos=rect.center())
    )  # fmt: skip
    info = dict(window.info_panel.rows())
    assert info["Camera"] == "FUJIFILM X-T4"
    assert info["Taken"] == "2022-05-05 18:45:00 (UTC+02:00)"
    assert info["Size"].startswith("320 × 240") and "Place" in info
    assert window.info_panel.name.text() == "<b>a1.jpg</b>"
    # ... and the result cards carry the date (drawn under the name)
    hits = window.results.paths()
    assert str(folder / "city" / "a1.jpg") in hits
    assert window.results_panel.delegate.metadata[hits[0]].date_taken
    # an undated photo says so
    window._show_info(str(folder / "beach" / "b3.jpg"))
    assert "Camera" not in dict(window.info_panel.rows())
    assert window.info_panel.hint.isVisibleTo(window)

    # "Sort by date taken": oldest first, the photo without a date last
    bar.sort.setCurrentIndex(bar.sort.findText("Sort by date taken"))
    assert _names(photos) == ["a2.jpg", "b2.jpg", "a1.jpg", "b1.jpg", "b3.jpg"]
    SHOTS.mkdir(parents=True, exist_ok=True)

    # folder headings: a heading row spans the grid, above its folder's photos
    qtbot.mouseClick(bar.group, Qt.MouseButton.LeftButton)
    assert bar.group.isChecked()
    assert photos.headings() == ["beach  ·  3 photos", "city  ·  2 photos"]
    qtbot.waitUntil(lambda: grid.visualRect(photos.index(0)).isValid())
    head = grid.visualRect(photos.index(0))
    first = grid.visualRect(photos.index(1))
    assert head.width() > 2 * first.width() and first.top() >= head.bottom()
    second_head = grid.visualRect(photos.index(4))
    assert second_head.left() == head.left() and second_head.top() > first.top()
    qtbot.wait(300)  # (thumbnails)
    window.grab().save(str(SHOTS / "metadata_sorted.png"))
    window._show_info(str(folder / "city" / "a1.jpg"))
    qtbot.wait(50)  # (the new rows are shown by the event loop)
    window.info_panel.grab().save(str(SHOTS / "metadata_info.png"))

    # the date filter: first all dated photos, then a range of days
    qtbot.mouseClick(bar.filter, Qt.MouseButton.LeftButton)
    assert sorted(_names(photos)) == ["a1.jpg", "a2.jpg", "b1.jpg", "b2.jpg"]
    bar.set_date_range(QDate(2021, 1, 1), QDate(2022, 12, 31))
    assert _names(photos) == ["b2.jpg", "a1.jpg"]
    assert bar.count.text() == "2 of 5 photos"
    qtbot.mouseClick(bar.filter, Qt.MouseButton.LeftButton)
    assert len(photos.paths()) == len(PHOTOS)
    qtbot.mouseClick(bar.group, Qt.MouseButton.LeftButton)  # back to fixed cells
    assert photos.headings() == [] and grid._cell.width() > 0
    assert grid.gridSize().height() == grid._cell.height()
    assert grid.gridSize().width() >= grid._cell.width()  # (widened to fill the row)


def test_session_holds_metadata_until_another_folder_opens(tmp_path):
    from app.gui.session import Session

    s = Session()
    seen = []
    s.events.metadata_changed.connect(lambda e: seen.append(dict(e.metadata)))
    s.open_folder(tmp_path)
    s.set_metadata({tmp_path / "a.jpg": PhotoMetadata(iso=100)})
    assert s.metadata == {str(tmp_path / "a.jpg"): PhotoMetadata(iso=100)}
    s.open_folder(tmp_path)
    assert s.metadata == {} and seen[-1] == {}
