"""Search by region in the window: drag a box on the query photo (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

from PySide6.QtCore import QPoint, Qt  # noqa: E402

from tests._composite import H  # noqa: E402
from tests._composite import region_folder as make_region_folder  # noqa: E402
from tests.app._gui import open_and_wait, query_and_wait  # noqa: E402


@pytest.fixture(scope="module")
def region_folder(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("gui_region")
    folder, query, left, width = make_region_folder(root, demo_folder)
    return folder, root / "index", query, left, width


def _groups(window, k: int = 4) -> set[str]:
    res = window.results
    names = [Path(res.path(r)).name for r in range(min(k, res.rowCount()))]
    return {n.split("_")[0].removesuffix(".jpg") for n in names}


def _drag(qtbot, widget, a: QPoint, b: QPoint) -> None:
    """Press at ``a``, move through the middle to ``b``, release there."""
    qtbot.mousePress(widget, Qt.MouseButton.LeftButton, pos=a)
    qtbot.mouseMove(widget, (a + b) / 2)
    qtbot.mouseMove(widget, b)
    qtbot.mouseRelease(widget, Qt.MouseButton.LeftButton, pos=b)


def test_drag_a_box_on_the_query_photo(qtbot, window, region_folder):
    folder, index, query, left, width = region_folder
    open_and_wait(qtbot, window, folder, index)
    s = window.session
    query_and_wait(qtbot, window, lambda: window.query_photo(str(query)))
    assert s.query.box is None and s.query.size == (width, H)
    assert _groups(window, 8) >= {"astronaut", "coffee"}
    pic = window.results_panel.query_pic
    qtbot.waitUntil(lambda: pic.pixmap() is not None, timeout=30_000)
    assert pic.is_drawable() and not window.results_panel.whole_btn.isVisible()

    # drag over the right half (the coffee cup): its photos come first
    r = pic.photo_rect()
    a = QPoint(round(r.left() + r.width() * left / width) + 2, round(r.top()) + 1)
    b = QPoint(round(r.right()) - 1, round(r.bottom()) - 1)
    query_and_wait(qtbot, window, lambda: _drag(qtbot, pic, a, b))
    box = s.query.box
    assert box is not None and s.query.hits_box == box
    x, y, w, h = box
    # (one pixel on screen is about 4 of the photo)
    assert abs(x - left) < 16 and y < 8 and abs(x + w - width) < 8 and abs(y + h - H) < 8
    assert _groups(window) == {"coffee"}
    assert pic.box() is not None and window.results_panel.whole_btn.isVisibleTo(window)
    assert "Region" in window.results_panel.region_hint.text()

    # the "why" view explains the region: only its features, the box outlined
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        window.show_matches(None)
    data = window.matches_view.data
    assert Path(data.path_b).name.startswith("coffee")
    assert "box" in data.extra and data.n >= 8
    bx = data.extra["box"][0]
    assert (data.xy_a[:, 0] >= bx - 2).all() and (data.keys_a[:, 0] >= bx - 2).all()
    window.show_view("library")

    # Esc on the photo: the whole photo again
    pic.setFocus()
    query_and_wait(qtbot, window, lambda: qtbot.keyClick(pic, Qt.Key.Key_Escape))
    assert s.query.box is None and s.query.hits_box is None and pic.box() is None
    assert _groups(window, 8) >= {"astronaut", "coffee"}
    assert not window.results_panel.whole_btn.isVisibleTo(window)

    # the left half, then "Whole photo"
    a = QPoint(round(r.left()) + 1, round(r.top()) + 1)
    b = QPoint(round(r.left() + r.width() * left / width) - 2, round(r.bottom()) - 1)
    query_and_wait(qtbot, window, lambda: _drag(qtbot, pic, a, b))
    assert _groups(window) == {"astronaut"}
    whole = window.results_panel.whole_btn
    query_and_wait(qtbot, window, lambda: qtbot.mouseClick(whole, Qt.MouseButton.LeftButton))
    assert s.query.box is None

    # a click is not a box; another query, or another folder, clears the box
    with qtbot.assertNotEmitted(window.results_changed, wait=300):
        qtbot.mouseClick(pic, Qt.MouseButton.LeftButton, pos=a)
    query_and_wait(qtbot, window, lambda: window.search_region((0, 0, left, H)))
    assert s.query.box == (0.0, 0.0, float(left), float(H))
    query_and_wait(qtbot, window, lambda: window.query_photo(str(folder / "brick.jpg")))
    assert s.query.box is None and s.query.size is not None
    query_and_wait(qtbot, window, lambda: window.search_region((0, 0, 200, 200)))
    assert s.query.box is not None
    s.open_folder(folder, index)
    assert s.query.box is None and s.query.source is None


def test_a_box_with_too_few_features_keeps_the_results(qtbot, window, region_folder):
    folder, index, query, _left, _width = region_folder
    open_and_wait(qtbot, window, folder, index)
    s = window.session
    query_and_wait(qtbot, window, lambda: window.query_photo(str(query)))
    hits = list(s.query.hits)
    with qtbot.waitSignal(window.error_shown, timeout=30_000) as blocker:
        window.search_region((1, 1, 4, 4))
    assert "draw a larger box" in blocker.args[0]
    qtbot.waitUntil(lambda: s.query.status == "done", timeout=30_000)
    assert s.query.box is None and s.query.hits == hits


def test_the_session_holds_the_box_with_the_query():
    """Qt-free: the query model keeps the region searched, in pixels of the photo."""
    from app.gui.session import Hit, Session
    from app.gui.state import SearchSettings

    s = Session()
    seen = []
    s.query.events.changed.connect(lambda e: seen.append(e.box))
    st = SearchSettings("hybrid", 5)
    s.query.searching("/p/a.jpg", st)
    s.query.set_results("/p/a.jpg", "hybrid", [Hit("/p/b.jpg", 1.0)], size=(800, 600))
    assert s.query.box is None and s.query.size == (800, 600)
    box = s.query.box_from_fractions((0.25, 0.5, 0.5, 0.25))
    assert box == (200.0, 300.0, 400.0, 150.0)
    s.query.searching("/p/a.jpg", st, box)
    assert s.query.box == box and s.query.size == (800, 600) and seen[-1] == box
    s.query.set_results("/p/a.jpg", "hybrid", [Hit("/p/c.jpg", 1.0)], box=box)
    assert s.query.hits_box == box and s.query.box_fractions() == (0.25, 0.5, 0.5, 0.25)
    # a region that cannot be searched: the hits shown stay, with their region
    s.query.searching("/p/a.jpg", st, (0, 0, 2, 2))
    s.query.region_refused()
    assert s.query.box == box and s.query.status == "done"
    with pytest.raises(ValueError, match="width and height"):
        s.query.searching("/p/a.jpg", st, (0, 0, 0, 5))
    # another photo: no box, its size unknown until searched
    s.query.searching("/p/other.jpg", st)
    assert s.query.box is None and s.query.size is None
    with pytest.raises(ValueError, match="not known yet"):
        s.query.box_from_fractions((0, 0, 1, 1))
    s.query.searching("/p/a.jpg", st, box)
    s.query.reset()
    assert s.query.box is None and s.query.hits_box is None and seen[-1] is None
