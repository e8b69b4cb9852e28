"""Results in the main grid (digiKam's "search results" album), pytest-qt, offscreen, as
a person uses it: search, *Show in grid*, read the ranks and labels, filter by the
calibrated score, search again from a tile, mark with the keys, Esc back to all photos
as they were; another folder leaves the results; the learned method answers a photo
from outside the folder.

The folder: four demo photo families in subfolders (coffee, astronaut, chelsea, brick),
one coffee photo kept outside; it is indexed and a similarity learned from the
subfolders once for the module.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("cv2")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QColor, QDropEvent

from app.gui.models import LABEL_ROLE, PATH_ROLE, PROBABILITY_ROLE, QUERY_ROLE, RANK_ROLE
from app.gui.results_grid import ALIKE_COLOUR, SAME_COLOUR, badge_text
from app.gui.results_state import SAME_OBJECT
from tests.app._gui import open_and_wait, query_and_wait

FAMILIES = ("coffee", "astronaut", "chelsea", "brick")
OUTSIDE = "coffee_light.jpg"


@pytest.fixture(scope="module")
def library(tmp_path_factory, demo_folder):
    """``(folder, index, outside photo, other folder, its index)``: the folder indexed and
    a similarity learned from its subfolders (``simile learn --from-subfolders``)."""
    from app.cli import main

    root = tmp_path_factory.mktemp("resgrid")
    folder = root / "photos"
    outside = root / "outside" / OUTSIDE
    outside.parent.mkdir()
    for fam in FAMILIES:
        (folder / fam).mkdir(parents=True)
        for src in sorted(demo_folder.glob(f"{fam}*.jpg")):
            shutil.copy(src, outside if src.name == OUTSIDE else folder / fam / src.name)
    index = root / "index"
    assert main(["index", str(folder), "--index", str(index)]) == 0
    assert main(["learn", str(folder), "--index", str(index), "--from-subfolders"]) == 0
    other = root / "other"
    other.mkdir()
    for src in sorted(demo_folder.glob("rocket*.jpg")):
        shutil.copy(src, other / src.name)
    return folder.resolve(), index, outside.resolve(), other.resolve(), root / "other_index"


def tiles(win) -> list[tuple]:
    """``(rank, name, label, probability)`` of every tile of the results grid."""
    m = win.results_grid_model
    out = []
    for r in range(m.rowCount()):
        i = m.index(r)
        out.append((
            "Query" if m.data(i, QUERY_ROLE) else m.data(i, RANK_ROLE),
            Path(m.data(i, PATH_ROLE)).name, m.data(i, LABEL_ROLE), m.data(i, PROBABILITY_ROLE),
        ))  # fmt: skip
    return out


def tile_rect(win, name: str):
    m = win.results_grid_model
    row = next(r for r in range(m.rowCount()) if Path(m.path(r)).name == name)
    win.results_grid.scrollTo(m.index(row))
    return m.index(row), win.results_grid.visualRect(m.index(row))


def has_colour(img, rect, colour: QColor, tol: int = 12) -> bool:
    """Whether a pixel of ``img`` in ``rect`` is within ``tol`` of ``colour``."""
    for y in range(rect.top(), rect.bottom(), 2):
        for x in range(rect.left(), rect.right(), 2):
            c = img.pixelColor(x, y)
            if (abs(c.red() - colour.red()) <= tol and abs(c.green() - colour.green()) <= tol
                    and abs(c.blue() - colour.blue()) <= tol):  # fmt: skip
                return True
    return False


def photo_tile_click(qtbot, win, path, double=False) -> None:
    """Click (``double``: double-click, whose first click selects) the photo ``path``."""
    row = win.photos.row_of(str(path))
    win.grid.scrollTo(win.photos.index(row))
    rect = win.grid.visualRect(win.photos.index(row))
    qtbot.mouseClick(win.grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    if double:
        qtbot.mouseDClick(win.grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def drop_file(win, path) -> None:
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(path))])
    ev = QDropEvent(QPointF(40, 40), Qt.DropAction.CopyAction, md, Qt.MouseButton.NoButton,
                    Qt.KeyboardModifier.NoModifier)  # fmt: skip
    win.dropEvent(ev)


def test_results_in_the_grid_ranked_filtered_searched_again_and_back(qtbot, window, library):
    folder, index, _outside, _other, _ = library
    win = window
    open_and_wait(qtbot, win, folder, index)
    # the person's own view of all photos: by name under folder headings, one selected
    win.sort_bar.set_sort("name")
    qtbot.mouseClick(win.sort_bar.group, Qt.MouseButton.LeftButton)
    before, headings = win.photos.paths(), win.photos.headings()
    assert len(headings) == len(FAMILIES)
    coffee = folder / "coffee" / "coffee.jpg"
    assert not win.find_btn.isEnabled()  # ("Find similar": once a photo is selected)
    photo_tile_click(qtbot, win, folder / "brick" / "brick_crop.jpg")
    assert win.find_btn.isEnabled()
    # nothing to show yet: the button cannot be pressed, Ctrl+G says why
    assert not win.results_panel.grid_btn.isEnabled()
    with qtbot.waitSignal(win.error_shown, timeout=5_000) as msg:
        qtbot.keyClick(win, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    assert "Search first" in msg.args[0] and not win.shown.in_grid

    query_and_wait(qtbot, win, lambda: photo_tile_click(qtbot, win, coffee, double=True))
    hits = win.session.query.hits
    assert Path(hits[0].path) == coffee  # (it matches itself best)
    selected = win.grid.currentIndex().row()
    assert selected == win.photos.row_of(str(coffee))
    qtbot.mouseClick(win.results_panel.grid_btn, Qt.MouseButton.LeftButton)
    assert win.shown.in_grid and win.library_stack.currentWidget() is win.results_page
    # one "Back to all photos", in the grid's heading (the panel's toggle is hidden)
    assert win.results_panel.grid_btn.isHidden()
    assert win.results_header.back_btn.isVisible()
    assert win.results_grid_act.isChecked()
    # the query first, then every hit in rank order with its calibrated percentage and label
    shown = tiles(win)
    assert shown[0][:2] == ("Query", "coffee.jpg")
    assert shown[1:] == [
        (k, Path(h.path).name, h.label, h.probability) for k, h in enumerate(hits[1:], 1)
    ]
    same = [t for t in shown[1:] if t[2] == SAME_OBJECT]
    assert {"coffee_crop.jpg", "coffee_perspective.jpg"} <= {t[1] for t in same}
    assert all(t[3] > 0.5 for t in same if t[1].startswith("coffee"))
    n = len(hits) - 1
    assert win.results_header.title.text() == f"{n} results for coffee.jpg · Best match"
    assert win.results_header.count.text() == f"All {n} shown"
    assert win.results_panel.query_hint.text().startswith(f"{n} results")
    # each tile is painted with its badge: green for the same object, grey for looks alike
    qtbot.waitUntil(lambda: win.thumbs.is_idle(), timeout=30_000)
    _, r_same = tile_rect(win, same[0][1])
    alike = next(t for t in shown[1:] if t[2] != SAME_OBJECT)
    _, r_alike = tile_rect(win, alike[1])
    img = win.results_grid.viewport().grab().toImage()
    badge = lambda r: r.adjusted(0, r.height() - 30, 0, 0)  # noqa: E731
    assert has_colour(img, badge(r_same), SAME_COLOUR)
    assert not has_colour(img, badge(r_same), ALIKE_COLOUR)
    assert has_colour(img, badge(r_alike), ALIKE_COLOUR)
    assert badge_text(same[0][3], SAME_OBJECT) == f"{100 * same[0][3]:.0f} % · {SAME_OBJECT}"

    # "At least 50 %": the hits below are hidden, in the grid and the side list alike
    assert shown[2][3] >= 0.5  # (the second result: one of the coffee photos)
    second, _ = tile_rect(win, shown[2][1])  # (a selected tile stays selected)
    win.results_grid.setCurrentIndex(second)
    spin = win.results_panel.min_percent
    spin.setFocus()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "50")
    assert spin.value() == 50
    kept = [t for t in shown[1:] if t[3] >= 0.5]
    assert tiles(win)[1:] == kept and 2 <= len(kept) < n
    side = [(r.rank, Path(r.path).name) for r in win.results.ranked() if not r.is_query]
    assert side == [t[:2] for t in kept]
    count = f"{len(kept)} of {n} shown (at least 50 %)"
    assert win.results_header.count.text() == win.results_panel.count_label.text() == count
    assert win.results_grid.currentIndex().row() == 2

    # a click selects (the info panel shows it); a double-click searches with it
    idx, rect = tile_rect(win, "coffee_crop.jpg")
    with qtbot.assertNotEmitted(win.results_changed, wait=300):
        qtbot.mouseClick(win.results_grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert win.results_grid.currentIndex() == idx
    assert win.info_panel.name.text() == "<b>coffee_crop.jpg</b>"
    # (the side list follows the grid's selection)
    assert Path(win.results_panel.selected_path()).name == "coffee_crop.jpg"
    query_and_wait(
        qtbot, win,
        lambda: qtbot.mouseDClick(win.results_grid.viewport(), Qt.MouseButton.LeftButton,
                                  pos=rect.center()),
    )  # fmt: skip
    assert win.shown.in_grid  # (the new results replace the old ones in the grid)
    assert tiles(win)[0][:2] == ("Query", "coffee_crop.jpg")
    assert win.results_header.title.text().split(" · ")[0].endswith("for coffee_crop.jpg")
    assert all(t[3] >= 0.5 for t in tiles(win)[1:])  # (the filter stays)
    # Space opens the selected photo large
    win.results_grid.setFocus()
    n_viewers = len(win._viewers)
    qtbot.keyClick(win.results_grid, Qt.Key.Key_Space)
    assert len(win._viewers) == n_viewers + 1
    current = win.results_grid_model.path(win.results_grid.currentIndex().row())
    assert win._viewers[-1].windowTitle() == Path(current).name
    win._viewers[-1].close()
    win.activateWindow()
    # ✓ / ✗ from the keyboard, as in the side list; the next tile is selected
    spin.setValue(0)
    win.results_grid.setFocus()
    first = win.results_grid.currentIndex()
    assert first.row() == 1  # (the best result is selected, not the query)
    query = win.shown.query
    with qtbot.waitSignal(win.marks_saved, timeout=20_000):
        qtbot.keyClick(win.results_grid, Qt.Key.Key_Y)
    assert win.marks.get(query, win.results_grid_model.path(1)) is True
    assert win.results_grid.currentIndex().row() == 2
    with qtbot.waitSignal(win.marks_saved, timeout=20_000):
        qtbot.keyClick(win.results_grid, Qt.Key.Key_N)
    assert win.marks.get(query, win.results_grid_model.path(2)) is False
    # the query's own tile cannot be marked
    win.results_grid.setCurrentIndex(win.results_grid_model.index(0))
    with qtbot.assertNotEmitted(win.marks_saved, wait=300):
        qtbot.keyClick(win.results_grid, Qt.Key.Key_Y)

    # Esc: all photos again, as they were (sorted by name, the same photo selected)
    qtbot.keyClick(win.results_grid, Qt.Key.Key_Escape)
    assert not win.shown.in_grid and win.library_stack.currentWidget() is win.photos_page
    assert not win.results_panel.grid_btn.isChecked() and not win.results_grid_act.isChecked()
    assert win.photos.sort_key == "name" and win.sort_bar.sort.currentData() == "name"
    assert win.photos.paths() == before and win.photos.headings() == headings
    assert win.sort_bar.group.isChecked() and not win.grid.gridSize().isValid()
    assert win.grid.currentIndex().row() == selected
    # Ctrl+G shows the results again; "Back to all photos" leaves them too
    qtbot.keyClick(win, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    assert win.shown.in_grid
    qtbot.mouseClick(win.results_header.back_btn, Qt.MouseButton.LeftButton)
    assert not win.shown.in_grid and win.photos.paths() == before


def test_a_new_search_updates_the_grid_and_another_folder_leaves_it(
    qtbot, window, library, tmp_path
):
    folder, index, outside, other, other_index = library
    win = window
    open_and_wait(qtbot, win, folder, index)
    query_and_wait(qtbot, win, lambda: win.query_photo(str(folder / "chelsea" / "chelsea.jpg")))
    assert win.show_results_in_grid()
    # a search from elsewhere (a photo dropped from outside the folder) updates the grid
    query_and_wait(qtbot, win, lambda: drop_file(win, outside))
    assert win.shown.in_grid
    shown = tiles(win)
    assert shown[0][:2] == ("Query", OUTSIDE)
    assert [t[0] for t in shown[1:]] == list(range(1, len(shown)))  # (the query is no hit)
    assert {t[1] for t in shown[1:3]} <= {"coffee.jpg", "coffee_crop.jpg",
                                          "coffee_perspective.jpg"}  # fmt: skip
    # the context menu works as on the photo grid: "Search Similar" on the selected tile
    acts = {a.text(): a for a in win.results_grid.actions()}
    assert {"Search Similar", "Open Full Size", "Why Do They Match?", "Copy Path"} <= set(acts)
    idx, _ = tile_rect(win, "coffee_crop.jpg")
    win.results_grid.setCurrentIndex(idx)
    query_and_wait(qtbot, win, acts["Search Similar"].trigger)
    assert tiles(win)[0][:2] == ("Query", "coffee_crop.jpg") and win.shown.in_grid
    # ... and the heading's "Find similar" button
    idx, _ = tile_rect(win, "coffee.jpg")
    win.results_grid.setCurrentIndex(idx)
    find = win.results_header.find_btn
    query_and_wait(qtbot, win, lambda: qtbot.mouseClick(find, Qt.MouseButton.LeftButton))
    assert tiles(win)[0][:2] == ("Query", "coffee.jpg")
    idx, _ = tile_rect(win, "coffee_crop.jpg")
    win.results_grid.setCurrentIndex(idx)
    query_and_wait(qtbot, win, lambda: qtbot.mouseClick(find, Qt.MouseButton.LeftButton))
    # export: the results shown, with query and method columns
    win.results_panel.set_min_percent(50)
    out = win.export_results(tmp_path / "res.csv")
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert {r["query"] for r in rows} == {str(folder / "coffee" / "coffee_crop.jpg")}
    assert {r["method"] for r in rows} == {"hybrid"}
    assert [Path(r["path"]).name for r in rows] == [t[1] for t in tiles(win)[1:]]
    assert all(float(r["probability"]) >= 0.5 for r in rows)
    assert "hidden by the filter" in win.status_label.text()

    # a search still running when another folder opens: its results never show
    win.query_photo(str(folder / "brick" / "brick.jpg"))
    open_and_wait(qtbot, win, other, other_index)
    qtbot.wait(500)
    assert not win.shown.in_grid and win.library_stack.currentWidget() is win.photos_page
    assert win.results_grid_model.rowCount() == 0 and win.results.rowCount() == 0
    assert win.shown.query is None and not win.results_panel.grid_btn.isEnabled()
    assert all(Path(p).parent == other for p in win.photos.paths())
    # (and Ctrl+G has nothing to show)
    with qtbot.waitSignal(win.error_shown, timeout=5_000):
        qtbot.keyClick(win, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    assert not win.shown.in_grid and win.results_grid_model.rowCount() == 0
    # a search in the new folder shows its own results only
    rocket = other / "rocket.jpg"
    query_and_wait(qtbot, win, lambda: win.query_photo(str(rocket)))
    assert win.show_results_in_grid()
    assert all(Path(win.results_grid_model.path(r)).parent == other
               for r in range(win.results_grid_model.rowCount()))  # fmt: skip


def test_learned_method_answers_a_photo_from_outside(qtbot, window, library):
    """The learned similarity (learned from the subfolders by the CLI) answers a photo
    dropped from outside the folder; the grid shows its labels without a percentage (so
    small a folder holds no photos aside to calibrate its scores on), and the minimum
    filter hides nothing."""
    folder, index, outside, _other, _ = library
    win = window
    open_and_wait(qtbot, win, folder, index)
    combo = win.results_panel.method
    assert combo.findData("learned") >= 0
    win.set_method("learned", rerun=False)
    query_and_wait(qtbot, win, lambda: drop_file(win, outside))
    assert win.session.query.status == "done" and win.results.method == "learned"
    assert win.results.query == str(outside)
    top3 = {Path(p).name for p in win.results.paths()[:3]}
    assert top3 == {"coffee.jpg", "coffee_crop.jpg", "coffee_perspective.jpg"}
    assert win.show_results_in_grid()
    shown = tiles(win)
    assert shown[0][:2] == ("Query", OUTSIDE)
    assert all(t[3] is None for t in shown[1:])
    assert badge_text(None, shown[1][2]) == shown[1][2]
    assert not win.results_panel.min_percent.isEnabled()
    assert "no calibrated percentage" in win.results_panel.min_percent.toolTip()


def test_headless_screenshot_of_the_results_grid(library, tmp_path):
    """``simile FOLDER --query IMAGE --view grid-results --screenshot PNG``: the window
    with the results in the main grid (their green "same object or place" badges on the
    left, where the photo grid has none)."""
    import os
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    folder, index, *_ = library
    out = tmp_path / "grid.png"
    cmd = [sys.executable, "-m", "app", str(folder), "--index", str(index), "--query",
           str(folder / "chelsea" / "chelsea.jpg"), "--view", "grid-results",
           "--screenshot", str(out), "--size", "1200x800"]  # fmt: skip
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1200, 800)
    left = img.rect().adjusted(0, 0, -img.width() // 3, 0)
    assert has_colour(img, left, SAME_COLOUR, tol=6)
    # the same without --view grid-results: the photo grid, no badges
    plain = tmp_path / "plain.png"
    cmd = [c for c in cmd if c not in ("--view", "grid-results")]
    cmd[cmd.index(str(out))] = str(plain)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not has_colour(QImage(str(plain)), left, SAME_COLOUR, tol=6)


def test_learned_method_chosen_before_the_folder_opens(qtbot, window, library):
    """``simile FOLDER --method learned``: the method is asked for before the folder can
    offer it; once the folder is open and indexed it is the one searched with (opening
    the folder forgot it: the search ran with 'Best match')."""
    folder, index, outside, _other, _ = library
    win = window
    win.set_method("learned", rerun=False)
    open_and_wait(qtbot, win, folder, index)
    assert win.results_panel.current_method() == "learned"
    query_and_wait(qtbot, win, lambda: drop_file(win, outside))
    assert win.results.method == "learned"


def test_a_result_rows_label_is_never_cut_only_its_folder(qtbot):
    """The second line of a result row ("✓ same object or place  ·  folder") keeps the
    verdict whole when the row is narrow and cuts the folder at its start; an unverified
    hit's line is its folder, cut the same way."""
    from PySide6.QtGui import QFont, QFontMetrics

    from app.gui.models import _label_line

    fm = QFontMetrics(QFont())
    folder = "holidays/2019/summer/Brittany/coast/exports"
    width = fm.horizontalAdvance("✓ same object or place  ·  ") + fm.horizontalAdvance("exports…")
    line = _label_line(fm, "same object or place", folder, width)
    assert line.startswith("✓ same object or place  ·  …") and line.endswith("ports")
    assert fm.horizontalAdvance(line) <= width
    whole = _label_line(fm, "same object or place", folder, 10_000)
    assert whole == f"✓ same object or place  ·  {folder}"
    assert _label_line(fm, "looks alike", folder, 10_000) == folder
    narrow = _label_line(fm, "looks alike", folder, width)
    assert narrow.startswith("…") and narrow.endswith("exports")
    assert _label_line(fm, "same object or place", "", 10_000) == "same object or place"
