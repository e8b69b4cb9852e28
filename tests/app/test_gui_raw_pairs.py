"""A camera RAW file beside its camera JPEG is one photo in the grid (formats issue,
point 1): the JPEG, labelled with the RAW's type; View ▸ RAW + JPEG Pairs as One shows
both again."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import Qt


def test_raw_and_jpeg_pairs_show_as_one(window, tmp_path):
    f = tmp_path / "shoot"
    paths = [f / "IMG_1.NEF", f / "IMG_1.JPG", f / "IMG_2.CR3", f / "IMG_3.jpg",
             f / "other" / "IMG_1.NEF"]  # fmt: skip
    photos = window.photos
    photos.set_paths([str(p) for p in paths])
    shown = photos.paths()
    assert str(f / "IMG_1.NEF") not in shown  # (shown through its JPEG)
    assert str(f / "IMG_2.CR3") in shown and str(f / "other" / "IMG_1.NEF") in shown
    row = photos.row_of(str(f / "IMG_1.JPG"))
    assert photos.data(photos.index(row), Qt.ItemDataRole.DisplayRole) == "IMG_1.JPG + NEF"
    assert "RAW file (NEF)" in photos.data(photos.index(row), Qt.ItemDataRole.ToolTipRole)
    window.pairs_act.trigger()  # View ▸ RAW + JPEG Pairs as One: off
    assert str(f / "IMG_1.NEF") in photos.paths() and len(photos.paths()) == 5
    assert photos.data(photos.index(photos.row_of(str(f / "IMG_1.JPG")))) == "IMG_1.JPG"
    assert window.settings.value("pairsAsOne") == "false"
    window.pairs_act.trigger()
    photos.append_paths([str(f / "IMG_3.ORF")])  # arriving while indexing
    assert str(f / "IMG_3.ORF") not in photos.paths()
    row = photos.row_of(str(f / "IMG_3.jpg"))
    assert photos.data(photos.index(row)) == "IMG_3.jpg + ORF"
