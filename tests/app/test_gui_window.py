"""The main window end to end on a small generated folder (pytest-qt, offscreen).

The folder holds random "scenes" (coloured shapes, rich in SIFT keypoints) and,
for each, a rotated, rescaled copy: searching with a scene must rank its copy
first among the other photos.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from tests.app._gui import INDEX_TIMEOUT, open_and_wait, query_and_wait  # noqa: E402
from tests.app._gui import scene as _scene  # noqa: E402
from tests.app._gui import variant as _variant  # noqa: E402

N_SCENES = 5


def make_folder(folder: Path, n_scenes: int, seed: int = 0) -> list[tuple[Path, Path]]:
    """Write ``n_scenes`` scenes and their transformed copies; return the pairs."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = []
    for i in range(n_scenes):
        img = _scene(rng)
        a, b = folder / f"scene{i:02d}.jpg", folder / f"scene{i:02d}_copy.jpg"
        cv2.imwrite(str(a), img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
        var = _variant(img, float(rng.uniform(-20, 20)), float(rng.uniform(0.8, 0.95)))
        cv2.imwrite(str(b), var[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 85])
        pairs.append((a, b))
    return pairs


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("gui")
    folder = root / "photos"
    pairs = make_folder(folder, N_SCENES)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    return folder, root / "index", pairs


def test_open_folder_indexes_and_lists_skipped(qtbot, window, photo_folder):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    assert window.photos.rowCount() == 2 * N_SCENES
    assert sorted(Path(p).name for p in window.photos.paths()) == sorted(
        p.name for pair in pairs for p in pair
    )
    # the grid is in folder order, whatever order the index extracted the photos in
    assert window.photos.paths() == sorted(window.photos.paths())
    assert [Path(p).name for p, _ in window.problems] == ["broken.jpg"]
    assert window.problems_btn.isVisibleTo(window)
    assert "1 skipped" in window.problems_btn.text()
    window.show_problems()
    assert window._problems_dialog.table.rowCount() == 1
    # thumbnails of the visible cells get decoded in the background
    qtbot.waitUntil(
        lambda: window.thumbs.pixmap(window.photos.path(0)) is not None, timeout=30_000
    )


def test_click_selects_and_double_click_runs_query(qtbot, window, photo_folder):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    row = window.photos.row_of(pairs[1][0])
    rect = window.grid.visualRect(window.photos.index(row))
    assert rect.isValid()
    # a click selects (the details show), and searches nothing
    with qtbot.assertNotEmitted(window.results_changed, wait=500):
        qtbot.mouseClick(window.grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.grid.currentIndex().row() == row
    assert window.info_panel.name.text() == f"<b>{Path(pairs[1][0]).name}</b>"
    query_and_wait(
        qtbot,
        window,
        lambda: qtbot.mouseDClick(
            window.grid.viewport(), Qt.MouseButton.LeftButton, pos=rect.center()
        ),
    )
    res = window.results
    assert res.query == str(pairs[1][0])
    assert res.rowCount() > 1
    scores = [res.score(r) for r in range(res.rowCount())]
    assert scores == sorted(scores, reverse=True)
    assert Path(res.best_other()) == pairs[1][1]  # its transformed copy
    # every hit carries the calibrated probability the bars show, and a label in words
    from app.gui.models import LABEL_ROLE, PROBABILITY_ROLE

    row = res.row_of(str(pairs[1][1]))
    prob = res.data(res.index(row), PROBABILITY_ROLE)
    assert 0.5 < prob <= 1.0 and res.data(res.index(row), LABEL_ROLE) == "same object or place"
    probs = [res.data(res.index(r), PROBABILITY_ROLE) for r in range(res.rowCount())]
    assert probs == sorted(probs, reverse=True)
    tip = res.data(res.index(row), Qt.ItemDataRole.ToolTipRole)
    assert "likely the same object or place" in tip
    # "Only the same object or place": the hits that only look alike are hidden
    n_all = res.rowCount()
    box = window.results_panel.verified_box
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton)
    assert box.isChecked() and 0 < res.rowCount() < n_all
    labels = {res.data(res.index(r), LABEL_ROLE) for r in range(res.rowCount())}
    assert labels == {"same object or place"}
    assert f"({n_all - res.rowCount()} hidden)" in box.text()
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton)
    assert res.rowCount() == n_all


def test_results_as_links_or_copies_in_a_folder(qtbot, window, photo_folder, tmp_path):
    """Search ▸ Link / Copy Results into a Folder: the results shown, by rank, the query
    left out; the photos only read; nothing overwritten."""
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    query_and_wait(qtbot, window, lambda: window.query_photo(str(pairs[0][0])))
    before = {p: Path(p).read_bytes() for p in window.results.paths()}
    shown = [p for p in window.results.paths() if Path(p) != pairs[0][0]]
    with qtbot.waitSignal(window.results_copied, timeout=30_000) as done:
        window.copy_results(tmp_path / "links", "links")  # (in a worker)
    assert done.args == [len(shown)]
    made = sorted((tmp_path / "links").iterdir())
    assert [m.name[:2] for m in made] == [f"{r:02d}" for r in range(1, len(shown) + 1)]
    assert all(m.is_symlink() for m in made)
    assert [os.path.realpath(m) for m in made] == [os.path.realpath(p) for p in shown]
    with qtbot.waitSignal(window.results_copied, timeout=30_000) as done:
        window.copy_results(tmp_path / "links", "copies")  # again: beside the links
    assert done.args == [len(shown)]
    assert len(list((tmp_path / "links").iterdir())) == 2 * len(shown)
    assert {p: Path(p).read_bytes() for p in before} == before


def test_enter_key_and_method_switch_rerun(qtbot, window, photo_folder):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    window.grid.setFocus()
    window.grid.setCurrentIndex(window.photos.index(window.photos.row_of(pairs[2][0])))
    query_and_wait(qtbot, window, lambda: qtbot.keyClick(window.grid, Qt.Key.Key_Return))
    assert window.results.query == str(pairs[2][0])
    combo = window.results_panel.method
    # a small folder: "fast hashing" would rank exactly as "Looks alike": not offered
    assert combo.findData("wta") < 0 and not window.method_actions["wta"].isVisible()
    assert combo.itemText(combo.findData("hybrid")) == "Best match (recommended)"
    assert "geometrically" in combo.itemData(combo.findData("hybrid"), Qt.ItemDataRole.ToolTipRole)
    i = combo.findData("vocabulary")
    assert i >= 0
    query_and_wait(qtbot, window, lambda: combo.setCurrentIndex(i))
    assert window.results.method == "vocabulary"
    assert window.method_actions["vocabulary"].isChecked()
    assert Path(window.results.best_other()) == pairs[2][1]


def test_correspondence_view(qtbot, window, photo_folder):
    from app.gui.matches import ACCEPTED, DEFAULT_LINES

    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    query_and_wait(qtbot, window, lambda: window.query_photo(str(pairs[0][0])))
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        window.show_matches(None)  # the selected = best other result
    view = window.matches_view
    assert window.tabs.currentWidget() is view
    data = view.data
    assert Path(data.path_b) == pairs[0][1]
    assert data.verified and data.n_accepted > 10
    # by default only the correspondences the ranking's own check accepted
    shown = view.visible_count()
    assert shown == view.visible_count(ACCEPTED) == min(data.n_accepted, DEFAULT_LINES)
    assert view.header.text().startswith(f"✓ {data.n_inliers} matching details agree")
    view.lines_slider.setValue(view.lines_slider.maximum())
    assert view.visible_count() == data.n_accepted
    assert view.lines_label.text() == f"Lines shown: all {data.n_accepted}"
    view.lines_slider.setValue(10)
    assert view.visible_count() == int(np.ceil(data.n_accepted * 0.1))
    assert view.lines_label.text().startswith(f"Lines shown: {view.visible_count()} strongest")
    # the hit's number in the list is the number here
    hit = next(h for h in window.session.query.hits if Path(h.path) == Path(data.path_b))
    assert f"<b>{100 * hit.probability:.0f} %</b> likely" in view.info.text()
    view.show_lines.setChecked(False)
    assert view.visible_count() == 0
    # asking for result #1 (the query itself) shows its best other result instead
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        window.show_matches(str(pairs[0][0]))
    assert Path(view.data.path_b) == pairs[0][1]
    before = view.view.transform().m11()
    view.view.zoom(2.0)
    assert view.view.transform().m11() == pytest.approx(2 * before)


def test_cancel_indexing(qtbot, window, tmp_path):
    folder = tmp_path / "many"
    make_folder(folder, 12, seed=3)
    seen = []

    def on_progress(item):
        if item[0] == "progress" and getattr(item[1], "status", "") == "indexed":
            seen.append(item[1])
            window.cancel_indexing()

    window.open_folder(folder, tmp_path / "idx")
    window.session.jobs.get("index").handle.yielded.connect(on_progress)
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)
    assert seen, "indexing never reported progress"
    assert "cancel" in window.status_label.text().lower()
    assert window.photos.rowCount() < 24


def drop_url(window, url) -> None:
    """Drop ``url`` on the window as a file manager does (enter, then drop)."""
    md = QMimeData()
    md.setUrls([url])
    pos = QPointF(window.width() / 2, window.height() / 2)
    args = (
        Qt.DropAction.CopyAction,
        md,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    try:  # Qt >= 6.12 takes a QPointF (the QPoint overload is deprecated)
        enter = QDragEnterEvent(pos, *args)
    except TypeError:  # earlier Qt 6 releases take a QPoint only
        enter = QDragEnterEvent(pos.toPoint(), *args)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    ev = QDropEvent(
        pos,
        Qt.DropAction.CopyAction,
        md,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    # QApplication only routes drops during a real drag; deliver it like Qt would
    window.dropEvent(ev)
    assert ev.isAccepted()


def test_drop_file_queries_and_drop_folder_opens(qtbot, window, photo_folder, tmp_path):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    outside = tmp_path / "outside.png"
    img = cv2.imread(str(pairs[3][1]))
    cv2.imwrite(str(outside), img)

    def drop(path):
        drop_url(window, QUrl.fromLocalFile(str(path)))

    query_and_wait(qtbot, window, lambda: drop(outside))
    assert window.results.query == str(outside)
    top = [Path(window.results.path(r)) for r in range(2)]
    assert pairs[3][1] in top  # the same pixels, indexed

    other = tmp_path / "other"
    shutil.copytree(folder, other, ignore=shutil.ignore_patterns("scene0[1-4]*", "broken*"))
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        drop(other)
    assert window.folder == other.resolve()
    assert window.photos.rowCount() == 2


def test_paste_image_queries(qtbot, window, photo_folder):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    QApplication.clipboard().setImage(QImage(str(pairs[4][0])))
    query_and_wait(qtbot, window, window.paste_query)
    assert window.results.rowCount() > 0
    top2 = {Path(window.results.path(r)).name for r in range(2)}
    assert top2 == {pairs[4][0].name, pairs[4][1].name}


def test_export_and_thumbnail_size_and_settings(qtbot, window, photo_folder, tmp_path):
    folder, index, pairs = photo_folder
    open_and_wait(qtbot, window, folder, index)
    query_and_wait(qtbot, window, lambda: window.query_photo(str(pairs[0][0])))
    out = window.export_results(tmp_path / "res.json")
    assert out is not None and str(pairs[0][1]) in out.read_text()

    size = window.size_slider.value()
    qtbot.keyClick(window, Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier)
    assert window.size_slider.value() < size
    assert window.grid.gridSize().width() < size + 30
    # whole columns fill the grid's width: no strip wider than a column is left at the right
    grid = window.grid
    for width in (530, 700, 911):
        grid.resize(width, 400)
        cell, fitted = grid._cell, grid.gridSize()
        room = width - 2 * grid.frameWidth() - grid.verticalScrollBar().sizeHint().width()
        cols = max(1, room // cell.width())
        assert fitted.height() == cell.height() and fitted.width() >= cell.width()
        assert room // fitted.width() == cols and room - cols * fitted.width() < cols

    window.set_method("uniform", rerun=False)
    window.save_settings()
    from app.gui.window import MainWindow

    again = MainWindow(window.settings, persist=False)
    qtbot.addWidget(again)
    assert again.size_slider.value() == window.size_slider.value()
    assert again.results_panel.current_method() == "uniform"
    assert again.recent_folders()[0] == str(folder.resolve())


def test_errors_reach_the_user(qtbot, window, tmp_path):
    with qtbot.waitSignal(window.error_shown, timeout=5000) as b:
        window.open_folder(tmp_path / "does-not-exist")
    assert "is not a folder" in b.args[0]
    assert window.banner.isVisible()


def test_headless_screenshot(photo_folder, tmp_path):
    folder, index, _ = photo_folder
    out = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            str(folder),
            "--index",
            str(index),
            "--view",
            "matches",
            "--screenshot",
            str(out),
            "--size",
            "900x600",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    img = QImage(str(out))
    assert (img.width(), img.height()) == (900, 600)
    # not a blank window: many distinct colours (photos and lines are drawn)
    colours = {img.pixel(x, y) for x in range(0, 900, 15) for y in range(0, 600, 15)}
    assert len(colours) > 100


def test_duplicates_view_suggests_best_and_asks_before_trash(qtbot, window, tmp_path, monkeypatch):
    folder = tmp_path / "dups"
    pairs = make_folder(folder, 2, seed=7)
    big = cv2.imread(str(pairs[0][0]))
    small = cv2.resize(big, (big.shape[1] // 2, big.shape[0] // 2), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(folder / "scene00_small.jpg"), small)
    shutil.copy(pairs[0][0], folder / "scene00_again.jpg")  # byte-identical: always a duplicate
    open_and_wait(qtbot, window, folder, tmp_path / "idx")
    with qtbot.waitSignal(window.duplicates_shown, timeout=60_000):
        window.find_duplicates(0.5)
    view = window.dup_view
    assert window.tabs.currentWidget() is view
    names = [{Path(p).name for p in g.paths} for g in view.groups]
    group = next(g for g in names if "scene00_again.jpg" in g)
    assert {"scene00.jpg", "scene00_again.jpg"} <= group
    infos = view.infos
    assert {Path(i.path).name for i in infos} == group
    assert [c.objectName() for c in _cards(view)].count("bestCard") == 1
    # the suggested copy is a full-resolution one, never the half-size copy
    best_info = infos[[c.objectName() for c in _cards(view)].index("bestCard")]
    assert Path(best_info.path).name in {"scene00.jpg", "scene00_again.jpg"}

    # "Move to Trash…" asks first; dismissing the question keeps the file
    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setattr(QMessageBox, "exec", lambda self: 0)
    view._confirm_trash(str(folder / "scene00_again.jpg"))
    assert (folder / "scene00_again.jpg").exists()


def _cards(view):
    out = []
    for i in range(view.cards.count()):
        w = view.cards.itemAt(i).widget()
        if w is not None:
            out.append(w)
    return out


def test_photo_grid_inserts_arrivals_at_their_sorted_place(qtbot, window):
    model = window.photos
    model.set_paths(["/p/c.jpg", "/p/a.jpg"])
    inserted = []
    model.rowsInserted.connect(lambda _parent, first, last: inserted.append((first, last)))
    model.append_paths(["/p/b.jpg", "/p/d.jpg", "/p/a.jpg"])  # a.jpg is shown already
    assert model.paths() == ["/p/a.jpg", "/p/b.jpg", "/p/c.jpg", "/p/d.jpg"]
    assert inserted == [(1, 1), (3, 3)]
    assert [model.row_of(p) for p in model.paths()] == [0, 1, 2, 3]
    model.set_paths([])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs and byte file names")
def test_odd_names_and_entries_are_shown_and_searchable(qtbot, window, tmp_path, monkeypatch):
    """A file name that is not UTF-8 is indexed, shown with U+FFFD and searchable; a FIFO
    and a dangling link are listed as skipped with their reasons."""
    folder = tmp_path / "odd"
    pairs = make_folder(folder, 2, seed=3)
    odd = os.fsdecode(os.fsencode(folder) + b"/Urlaub_M\xfcnchen.jpg")
    shutil.copy(pairs[0][0], odd)
    os.mkfifo(folder / "pipe.jpg")
    os.symlink(tmp_path / "gone.jpg", folder / "dangling.jpg")
    open_and_wait(qtbot, window, folder, tmp_path / "odd_index")
    assert odd in window.photos.paths()
    row = window.photos.row_of(odd)
    shown = window.photos.data(window.photos.index(row), Qt.ItemDataRole.DisplayRole)
    assert shown == "Urlaub_M\ufffdnchen.jpg"
    # its thumbnail arrives under its exact name and its tile is drawn again (a str
    # signal lost the odd byte: the tile stayed blank)
    got, changed = [], []
    window.thumbs.ready.connect(got.append)
    window.photos.dataChanged.connect(lambda a, b, roles=(): changed.append(a.row()))
    window.thumbs.request(odd)
    qtbot.waitUntil(lambda: odd in got, timeout=20_000)
    assert row in changed and window.thumbs.pixmap(odd) is not None
    reasons = {Path(p).name: r for p, r in window.problems}
    assert reasons["pipe.jpg"] == "not a regular file: a FIFO (named pipe)"
    assert "dangling" in reasons["dangling.jpg"]
    # chosen in the grid and searched with Enter, as a person does (a str signal lost
    # the odd byte on the way: the query named no photo)
    window.grid.setCurrentIndex(window.photos.index(row))
    window.grid.setFocus()
    query_and_wait(qtbot, window, lambda: qtbot.keyClick(window.grid, Qt.Key.Key_Return))
    assert window.results.query == odd
    top = {window.results.path(r) for r in range(min(2, window.results.rowCount()))}
    assert str(pairs[0][0]) in top  # its byte-identical original
    # dropped from a file manager (its bytes percent-encoded in the URL): the same photo
    # is searched, not a name with U+FFFD that names no file
    from urllib.parse import quote

    url = QUrl.fromEncoded(b"file://" + quote(os.fsencode(odd)).encode("ascii"))
    query_and_wait(qtbot, window, lambda: drop_url(window, url))
    assert window.results.query == odd
    # "reveal" hands the file manager the folder's URL with its bytes
    from PySide6.QtGui import QDesktopServices

    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(opened.append))
    odd_dir = os.fsdecode(os.fsencode(tmp_path) + b"/Fotos_M\xfcnchen")
    os.mkdir(odd_dir)
    window.reveal(os.path.join(odd_dir, "a.jpg"))
    assert bytes(opened[0].toEncoded()).endswith(b"/Fotos_M%FCnchen")
    # "Why they match": the view's list of results names the query by its exact path
    with qtbot.waitSignal(window.match_shown, timeout=60_000):
        qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    view = window.matches_view
    assert odd in [view.choice_path(i) for i in range(view.result_combo.count())]
    # Space in the grid opens it at full size, named with U+FFFD in the title and caption
    from app.gui.dialogs import ImageViewer

    window.tabs.setCurrentIndex(0)
    window.grid.setFocus()
    qtbot.keyClick(window.grid, Qt.Key.Key_Space)
    viewer = window.findChildren(ImageViewer)[-1]
    assert viewer.windowTitle() == "Urlaub_M\ufffdnchen.jpg"
    qtbot.waitUntil(lambda: "\u00d7" in viewer.caption.text(), timeout=20_000)
    assert "Urlaub_M\ufffdnchen.jpg" in viewer.caption.text()
    viewer.close()


def test_first_start_keeps_the_demo_index_out_of_the_package(qtbot, window, tmp_path, monkeypatch):
    """A plain first ``simile`` opens the demo photos with their index in the user's cache
    folder (never inside the installed package) and welcomes the person with a way to
    open their own folder."""
    from app.gui.state import demo_folder

    demo = demo_folder()
    if demo is None:
        pytest.skip("the demo photos are not installed")
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    before = sorted(p.name for p in demo.iterdir())
    chosen = []
    monkeypatch.setattr(window, "open_folder_dialog", lambda: chosen.append(True))
    window.show_welcome()
    assert window.banner.isVisibleTo(window) and "demo photos" in window.banner.label.text()
    qtbot.mouseClick(window.banner.action, Qt.MouseButton.LeftButton)
    assert chosen == [True] and not window.banner.isVisibleTo(window)
    open_and_wait(qtbot, window, demo, None)
    assert sorted(p.name for p in demo.iterdir()) == before  # nothing written there
    assert window.session.index_dir is not None
    assert Path(window.session.index_dir).is_relative_to(cache)
    assert (Path(window.session.index_dir) / "catalog.sqlite").is_file()
