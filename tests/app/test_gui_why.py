"""“Why do they match?” explains the ranking (issue #21, point 4): by default only the
correspondences the hybrid ranking's own check accepted, the others on request, a slider
whose label says what it shows, the result's own number, and never the query itself as
the default pair (pytest-qt, offscreen, on the demo photos)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt

from app.gui.matches import (
    ACCEPTED,
    DEFAULT_LINES,
    PYRAMID,
    REJECTED,
    CorrespondenceView,
    compute_match,
)
from app.gui.models import PATH_ROLE, item_data
from engine.collection import VERIFY_MIN_INLIERS, Collection
from engine.index.calibration import SAME
from tests.app._gui import open_and_wait, query_and_wait

SUBJECTS = ("astronaut", "brick", "coffee", "chelsea")


def _run(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


@pytest.fixture(scope="module")
def demo_subset(tmp_path_factory, demo_folder):
    """Four demo subjects, each with three altered copies; the folder and an index of it."""
    root = tmp_path_factory.mktemp("why")
    folder = root / "photos"
    folder.mkdir()
    for p in sorted(demo_folder.glob("*.jpg")):
        if p.name.startswith(SUBJECTS):
            shutil.copy(p, folder / p.name)
    col = Collection.open(folder, root / "index")
    _run(col.update(jobs=1))
    yield folder, root / "index", col
    col.close()


def _view(qtbot, col, a: Path, b: Path) -> CorrespondenceView:
    view = CorrespondenceView()
    qtbot.addWidget(view)
    view.resize(1200, 700)
    view.show()
    view.set_match(compute_match(col, str(a), str(b)))
    return view


def _click(qtbot, box) -> None:
    """Click a check box on its indicator, as a person would."""
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))


def _visible(view, kind: int) -> np.ndarray:
    return np.array(
        [i for i, ln in enumerate(view._lines) if ln.isVisible() and view.data.kind[i] == kind],
        dtype=np.int64,
    )


def _label_counts(view) -> tuple[int, int]:
    """(shown, available) as the slider's label says them."""
    text = view.lines_label.text()
    if text == "Lines shown: none":
        return 0, 0
    words = text.removeprefix("Lines shown: ").split()
    if words[0] == "all":
        return int(words[1]), int(words[1])
    assert words[1:3] == ["strongest", "of"], text
    return int(words[0]), int(words[3])


def test_a_true_pair_shows_its_accepted_matches_prominently(qtbot, demo_subset):
    folder, _index, col = demo_subset
    a, b = folder / "brick.jpg", folder / "brick_perspective.jpg"
    view = _view(qtbot, col, a, b)
    data = view.data
    e = col.explain(a, b)
    assert data.verified and data.n_inliers == e.n_inliers >= VERIFY_MIN_INLIERS
    assert data.count(ACCEPTED) == int(e.inliers.sum())
    assert data.count(REJECTED) == len(e) - int(e.inliers.sum()) > 0
    assert data.count(PYRAMID) == len(e.pyramid) > 0
    # by default: the accepted correspondences only, solid and thick
    shown = _visible(view, ACCEPTED)
    assert view.visible_count() == shown.size == min(data.count(ACCEPTED), DEFAULT_LINES)
    assert _label_counts(view) == (shown.size, data.count(ACCEPTED))
    pens = [view._lines[i].pen() for i in shown]
    assert all(p.style() == Qt.PenStyle.SolidLine and p.widthF() >= 2 for p in pens)
    assert view.header.isVisible()
    assert view.header.text().startswith(f"✓ {e.n_inliers} matching details agree")
    # no list number passed: the pair's own (the hybrid ranking's) number
    assert f"<b>{100 * e.probability:.0f} %</b> likely" in view.info.text()

    # "Show all correspondences" adds the rejected ones, dashed and thin
    _click(qtbot, view.show_all)
    assert view.show_all.isChecked()
    assert _visible(view, ACCEPTED).size == shown.size  # (the accepted ones stay)
    rejected = _visible(view, REJECTED)
    assert rejected.size > 0
    assert all(
        view._lines[i].pen().style() == Qt.PenStyle.DashLine and view._lines[i].pen().widthF() < 2
        for i in rejected
    )
    assert _label_counts(view) == (view.visible_count(), data.count(ACCEPTED, REJECTED))
    assert "dashed: rejected" in view.info.text()
    _click(qtbot, view.show_all)
    assert _visible(view, REJECTED).size == 0
    # the pyramid match's pairs, dotted, on request too
    _click(qtbot, view.show_pyramid)
    dotted = _visible(view, PYRAMID)
    assert dotted.size > 0
    assert all(view._lines[i].pen().style() == Qt.PenStyle.DotLine for i in dotted)
    _click(qtbot, view.show_pyramid)
    assert _visible(view, PYRAMID).size == 0

    # "Lines" and "Keypoints"
    _click(qtbot, view.show_lines)
    assert view.visible_count() == 0 and view.lines_label.text() == "Lines shown: none"
    _click(qtbot, view.show_lines)
    assert view.visible_count() == shown.size
    assert not view._keys.isVisible()
    _click(qtbot, view.show_keys)
    assert view._keys.isVisible()
    before = view.view.transform().m11()
    view.view.zoom(2.0)
    assert view.view.transform().m11() == pytest.approx(2 * before)


def test_the_slider_shows_more_lines_to_the_right(qtbot, demo_subset):
    folder, _index, col = demo_subset
    view = _view(qtbot, col, folder / "coffee.jpg", folder / "coffee_light.jpg")
    data = view.data
    _click(qtbot, view.show_all)  # two kinds of line: the slider keeps each one's strongest
    slider = view.lines_slider
    slider.setFocus()
    qtbot.keyClick(slider, Qt.Key.Key_Home)
    assert slider.value() == slider.minimum()
    seen = []
    for _ in range(12):
        shown, avail = _label_counts(view)
        assert shown == view.visible_count(), view.lines_label.text()
        assert avail == data.count(ACCEPTED, REJECTED)
        seen.append(shown)
        qtbot.keyClick(slider, Qt.Key.Key_PageUp)
    qtbot.keyClick(slider, Qt.Key.Key_End)
    seen.append(view.visible_count())
    assert seen == sorted(seen) and seen[0] < seen[-1]
    assert view.lines_label.text() == f"Lines shown: all {data.count(ACCEPTED, REJECTED)}"
    # at the left end, the strongest of each kind are the ones shown
    qtbot.keyClick(slider, Qt.Key.Key_Home)
    for kind in (ACCEPTED, REJECTED):
        on = _visible(view, kind)
        off = np.setdiff1d(np.flatnonzero(data.kind == kind), on)
        assert on.size >= 1
        if off.size:
            assert data.strength[on].min() >= data.strength[off].max()


def test_a_wrong_hit_shows_few_and_says_so(qtbot, demo_subset):
    folder, _index, col = demo_subset
    a, b = folder / "brick.jpg", folder / "coffee.jpg"
    view = _view(qtbot, col, a, b)
    data = view.data
    assert not data.verified
    assert view.visible_count() == data.count(ACCEPTED) < VERIFY_MIN_INLIERS
    assert view.header.text().startswith("✗ No consistent set of matches")
    assert f"({data.n_putative} loose matches)" in view.header.text()
    if data.count(ACCEPTED) == 0:
        assert view.lines_label.text() == "Lines shown: none"
    assert "“Show all correspondences”" in view.info.text()
    _click(qtbot, view.show_all)
    assert view.visible_count() == data.count(ACCEPTED) + data.count(REJECTED) > 0


def test_the_why_view_explains_the_list(qtbot, window, demo_subset, tmp_path):
    """Ctrl+M on a search: the pair is not the query itself, and the view says what the
    list says of the result (its number and whether it passed the check)."""
    folder, _index, _col = demo_subset
    open_and_wait(qtbot, window, folder, tmp_path / "idx")
    query = folder / "chelsea.jpg"
    query_and_wait(qtbot, window, lambda: window.query_photo(str(query)))
    view = window.matches_view
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert window.tabs.currentWidget() is view

    def check() -> None:
        data = view.data
        assert Path(data.path_b) != query
        hit = next(h for h in window.session.query.hits if Path(h.path) == Path(data.path_b))
        assert f"<b>{100 * hit.probability:.0f} %</b> likely" in view.info.text()
        assert data.verified is (hit.label == SAME)
        assert data.score == pytest.approx(hit.score)

    check()
    assert view.data.verified  # chelsea's best other result is one of its copies
    # the view's list of results numbers them as the result list does: the query "Q"
    rank = {r.hit.path: r.rank for r in window.shown.ranked()}
    combo = view.result_combo
    for i in range(combo.count()):
        r = rank[view.choice_path(i)]
        assert combo.itemText(i).split()[0] == ("Q" if r is None else f"#{r}")
    assert combo.currentText().split()[0] == f"#{rank[view.data.path_b]}"
    # another result, picked in the view's list of results: an unverified one
    combo = view.result_combo
    hits = window.session.query.hits
    k = next(i for i, h in enumerate(hits) if h.label != SAME)
    combo.setFocus()
    while combo.currentIndex() < k:
        with qtbot.waitSignal(window.match_shown, timeout=60_000):
            qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert Path(view.data.path_b) == Path(hits[k].path)
    check()
    assert not view.data.verified
    assert view.header.text().startswith("✗ No consistent set of matches")


@pytest.mark.parametrize("how", ["ctrl_m", "double_click", "enter"])
def test_the_query_itself_is_never_the_pair(qtbot, window, demo_subset, tmp_path, how):
    """Result #1 is the query itself: choosing it (or nothing) explains the best other."""
    folder, _index, _col = demo_subset
    open_and_wait(qtbot, window, folder, tmp_path / "idx")
    query = folder / "brick.jpg"
    query_and_wait(qtbot, window, lambda: window.query_photo(str(query)))
    lst = window.results_panel.list
    first = window.results.index(0)
    assert Path(item_data(first, PATH_ROLE)) == query  # (result #1: the query itself)
    lst.setCurrentIndex(first)  # result #1, the query itself, selected
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        if how == "ctrl_m":
            qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
        elif how == "double_click":
            assert lst.isVisible()
            at = lst.visualRect(first).center()
            # (a double click is a press and release, then the double-click event)
            qtbot.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, pos=at)
            qtbot.mouseDClick(lst.viewport(), Qt.MouseButton.LeftButton, pos=at)
        else:
            lst.setFocus()
            qtbot.keyClick(lst, Qt.Key.Key_Return)
    data = window.matches_view.data
    assert not os.path.samefile(data.path_b, query)
    assert Path(data.path_b) == Path(window.results.best_other())


def test_a_hard_link_of_the_query_is_not_the_pair(qtbot, window, demo_subset, tmp_path):
    folder, _index, _col = demo_subset
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("brick.jpg", "brick_light.jpg", "coffee.jpg", "chelsea.jpg"):
        shutil.copy(folder / name, photos / name)
    os.link(photos / "brick.jpg", photos / "brick_linked.jpg")
    open_and_wait(qtbot, window, photos, tmp_path / "idx")
    query = photos / "brick.jpg"
    query_and_wait(qtbot, window, lambda: window.query_photo(str(query)))
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert not os.path.samefile(window.matches_view.data.path_b, query)
