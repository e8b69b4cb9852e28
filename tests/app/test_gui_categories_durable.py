"""The person's grouping is durable (categories issue, point 2), clicked through as a
person: a dragged photo moves alone, Undo brings the groups back, and after photos were
added to the folder, reopening it keeps the groups and their names and places the new
photos into them instead of grouping from scratch."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("cv2")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QDropEvent, QKeySequence

from tests.app._gui import INDEX_TIMEOUT, make_grouped_folder


def _drop(view, src_row, path, target_row) -> None:
    i = src_row.model.paths().index(path)
    _drop_data(src_row.model.mimeData([src_row.model.index(i)]), target_row)


def _drop_data(md, target_row) -> None:
    """Drop what a drag carries (``md``) on ``target_row``'s photos."""
    drop = QDropEvent(
        QPointF(20, 20), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )  # fmt: skip
    target_row.strip.dropEvent(drop)


def _open_and_group(qtbot, window, folder, index):
    """Open ``folder`` and show its Categories once they are grouped; the view."""
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    view = window.views["categories"]
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        window.show_view("categories")
    return view


def _rename(qtbot, row, name: str) -> None:
    """Rename a group as a person does: click its name, type, press Enter."""
    qtbot.mouseClick(row.name, Qt.MouseButton.LeftButton)
    row.name.selectAll()
    qtbot.keyClicks(row.name, name)
    qtbot.keyClick(row.name, Qt.Key.Key_Return)


def test_move_alone_undo_and_new_photos_placed_on_reopen(qtbot, window, tmp_path, monkeypatch):
    folder, index = tmp_path / "photos", tmp_path / "index"
    groups = make_grouped_folder(folder, per_group=5, seed=4)
    aside = tmp_path / "aside"
    aside.mkdir()
    later = {}
    for name, paths in groups.items():
        shutil.move(paths[-1], aside / paths[-1].name)
        later[str(paths[-1])] = name
    view = _open_and_group(qtbot, window, folder, index)
    g = view.grouping
    assert g.k == 2 and view.undo_btn.isEnabled() is False
    assert view.undo_shortcut.key() == QKeySequence(QKeySequence.StandardKey.Undo)
    scene = {p: p.rsplit("/", 2)[-2] for p in g.paths}

    # rename the first group as a person does
    row0 = view.rows[0]
    _rename(qtbot, row0, "Sea")
    assert view.grouping.name(0) == "Sea" and view.undo_btn.isEnabled()

    # drag a photo of group 1 onto group 0: it moves, nothing else does
    before = {p: view.grouping.group_of(p) for p in g.paths}
    moved = view.rows[1].model.path(0)
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        _drop(view, view.rows[1], moved, view.rows[0])
    after = {p: view.grouping.group_of(p) for p in g.paths}
    assert [p for p in before if before[p] != after[p]] == [moved]
    assert after[moved] == 0 and view.grouping.name(0) == "Sea"
    assert moved in view.rows[0].model.paths()
    assert "no other photo moved" in window.status_label.text()
    assert any(moved in pair for pair in view.must)

    # Undo: the photo is back in its group, the constraints of the move are gone
    qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    assert {p: view.grouping.group_of(p) for p in g.paths} == before
    assert not any(moved in pair for pair in view.must)
    assert "Undid the last move" in window.status_label.text()
    assert view.grouping.name(0) == "Sea"  # (the rename is older than the move)

    # new photos arrive; the folder is opened again: the groups stay, the new photos join
    for dst in later:
        shutil.copy(aside / dst.rsplit("/", 1)[-1], dst)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    qtbot.waitUntil(
        lambda: view.grouping is not None and len(view.grouping.paths) == 10, timeout=60_000
    )
    qtbot.waitUntil(lambda: not view._busy, timeout=60_000)
    g2 = view.grouping
    assert g2.name(0) == "Sea" and g2.k == 2
    for p, grp in before.items():
        assert g2.group_of(p) == grp, "an old photo changed group"
    for p, name in later.items():
        mate = next(q for q in before if scene[q] == name)
        assert g2.group_of(p) == before[mate], "a new photo joined its own scene's group"
    assert "placed into your groups" in window.status_label.text()
    shown = sorted(p for row in view.rows for p in row.model.paths())
    assert shown == sorted(g2.paths)
    # the new photos are marked "new" with the classifier's confidence, for the person to
    # check; the old ones are not
    for row in view.rows:
        for i, p in enumerate(row.model.paths()):
            conf = row.model.placed[i]
            assert (conf is not None) == (p in later)
            tip = row.model.data(row.model.index(i), Qt.ItemDataRole.ToolTipRole)
            assert ("new: placed here by Simile (confidence" in tip) == (p in later)
    n_new = {r: sum(p in later for p in row.model.paths()) for r, row in enumerate(view.rows)}
    for r, row in enumerate(view.rows):
        assert (f"{n_new[r]} new" in row.info.text()) == (n_new[r] > 0)
    # the person moves a new photo: it is theirs now, no longer marked
    first_new = next(iter(later))
    src = next(r for r in view.rows if first_new in r.model.paths())
    dst = next(r for r in view.rows if r is not src)
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        _drop(view, src, first_new, dst)
    i = dst.model.paths().index(first_new)
    assert dst.model.placed[i] is None
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    g2 = view.grouping

    # Export ▸ Keywords in XMP sidecars: asked first, then every photo's sidecar names its
    # group; the photos are not changed
    from PySide6.QtWidgets import QMessageBox

    from engine.io.xmp import read_keywords

    asked = []

    def yes(*args):
        asked.append(args[2])
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", yes)
    size = {p: (folder / p).stat().st_size for p in g2.paths}
    action = next(a for a in view.export_btn.menu().actions() if "XMP" in a.text())
    with qtbot.waitSignal(view.keywords_written, timeout=30_000):
        action.trigger()
    assert asked and "10 XMP sidecars (10 new)" in asked[0]
    for p in g2.paths:
        assert f"Simile|Category|{g2.name(g2.group_of(p))}" in read_keywords(p)
        assert (folder / p).stat().st_size == size[p]
    assert "Simile|Category|Sea" in read_keywords(next(iter(before)))
    assert "into 10 XMP sidecars" in window.status_label.text()


def test_opening_another_folder_on_the_categories_tab_shows_no_stale_error(
    qtbot, window, tmp_path
):
    """Found in a real window: with the Categories tab shown, opening folder B said
    "Grouping the photos failed: the index store is closed" (a grouping of B's first
    opening, whose index was opened again after indexing). The race depends on timing
    (it showed on a loaded machine), so this walks the workflow and the rule that drops
    such failures is checked on its own below."""
    a, b = tmp_path / "A", tmp_path / "B"
    make_grouped_folder(a, per_group=3, seed=7)
    make_grouped_folder(b, per_group=3, seed=8)
    errors = []
    window.error_shown.connect(errors.append)
    window.show_view("categories")
    view = window.views["categories"]
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(a, tmp_path / "ia")
    qtbot.waitUntil(lambda: view.grouping is not None and not view._busy, timeout=60_000)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(b, tmp_path / "ib")
    qtbot.waitUntil(lambda: view.grouping is not None and not view._busy, timeout=60_000)
    assert all(p.startswith(str(b)) for p in view.grouping.paths)
    assert errors == []


def test_a_job_whose_index_was_closed_under_it_is_not_an_error():
    from app.gui.categories import _reopened
    from engine.index.store_errors import StoreError

    a, b = object(), object()
    assert _reopened(StoreError("the index store is closed"), a, a)
    assert _reopened(ValueError("anything"), a, b)  # another collection now
    assert not _reopened(ValueError("too few features"), a, a)


def test_an_empty_folder_shows_an_empty_state_and_groups_wrap(qtbot, window, tmp_path):
    """An empty folder is an empty state, not a red error; a group shows all its photos
    in rows that wrap, not one strip that scrolls sideways, and a big group its
    representative photos large above them."""
    from app.gui.categories import NO_PHOTOS_TEXT

    errors = []
    window.error_shown.connect(errors.append)
    empty = tmp_path / "empty"
    empty.mkdir()
    window.show_view("categories")
    view = window.views["categories"]
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(empty, tmp_path / "ie")
    view.regroup()
    assert view.reason.text() == NO_PHOTOS_TEXT and errors == []

    folder = tmp_path / "many"
    make_grouped_folder(folder, n_groups=2, per_group=9, seed=9)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, tmp_path / "im")
    qtbot.waitUntil(lambda: view.grouping is not None and not view._busy, timeout=60_000)
    row = view.rows[0]
    strip = row.strip
    strip.resize(500, strip.height())  # (narrow: 9 photos need more than one row)
    qtbot.waitUntil(lambda: strip.height() > 1.5 * strip._cell.height(), timeout=5_000)
    last = strip.visualRect(row.model.index(row.model.rowCount() - 1))
    first = strip.visualRect(row.model.index(0))
    assert last.top() > first.top()  # wrapped onto another row
    # a big group shows its first (prototype) photos large above its grid
    assert not row.reps.isHidden() and row.rep_model.paths() == row.model.paths()[:3]
    assert row.reps._cell.width() > 1.5 * strip._cell.width()
    small = [r for r in view.rows if r.model.rowCount() <= 8]
    assert all(r.reps.isHidden() for r in small)
    assert errors == []


def test_a_move_can_be_undone_after_the_folder_changed_on_disk(qtbot, window, tmp_path):
    """Found in a real window: the watcher indexed new photos and the Undo of a move made
    just before was greyed (the re-opened index emptied the undo history). The move is
    undone alone: the new photos stay where they were placed, the names stay."""
    folder, index = tmp_path / "photos", tmp_path / "index"
    groups = make_grouped_folder(folder, per_group=5, seed=4)
    aside = tmp_path / "aside"
    aside.mkdir()
    later = []
    for paths in groups.values():
        shutil.move(paths[-1], aside / paths[-1].name)
        later.append(paths[-1])
    view = _open_and_group(qtbot, window, folder, index)
    row0 = view.rows[0]
    _rename(qtbot, row0, "Sea")
    before = {p: view.grouping.group_of(p) for p in view.grouping.paths}
    moved = view.rows[1].model.path(0)
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        _drop(view, view.rows[1], moved, view.rows[0])
    assert view.grouping.group_of(moved) == 0

    # photos arrive while the app runs: what the watcher does when the folder changes
    for dst in later:
        shutil.copy(aside / dst.name, dst)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window._on_folder_changed_on_disk()
    qtbot.waitUntil(
        lambda: view.grouping is not None and len(view.grouping.paths) == 10, timeout=60_000
    )
    qtbot.waitUntil(lambda: not view._busy, timeout=60_000)
    placed = {str(p): view.grouping.group_of(str(p)) for p in later}
    assert view.grouping.group_of(moved) == 0, "the move survived the re-index"
    assert view.undo_btn.isEnabled(), "the move can still be undone"

    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: "Undid the last move" in window.status_label.text(), timeout=5_000)
    g = view.grouping
    assert len(g.paths) == 10
    assert {p: g.group_of(p) for p in before} == before, "only the move was undone"
    assert {p: g.group_of(p) for p in placed} == placed, "the new photos stayed placed"
    assert g.name(0) == "Sea"
    assert sorted(p for row in view.rows for p in row.model.paths()) == sorted(g.paths)


def test_photos_simile_is_unsure_of_wait_in_to_review(qtbot, window, tmp_path, monkeypatch):
    """New photos the classifier is unsure of are collected in "To review", marked new,
    and the status line says so; that group claims no prototypes it does not have."""
    import engine.cluster.placement as placement

    folder, index = tmp_path / "photos", tmp_path / "index"
    make_grouped_folder(folder, per_group=3, seed=12)
    view = _open_and_group(qtbot, window, folder, index)
    assert view.grouping.k == 2
    monkeypatch.setattr(placement, "UNSURE_CONFIDENCE", 1.01)  # unsure of every photo
    extra = make_grouped_folder(tmp_path / "more", n_groups=1, per_group=2, seed=99)["g0"]
    (folder / "new").mkdir()
    for p in extra:
        shutil.copy(p, folder / "new" / p.name)
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    qtbot.waitUntil(
        lambda: view.grouping is not None and len(view.grouping.paths) == 8 and not view._busy,
        timeout=60_000,
    )
    g = view.grouping
    assert g.k == 3 and g.name(2) == placement.REVIEW_NAME
    review = view.rows[2]
    assert sorted(review.model.paths()) == sorted(str(folder / "new" / p.name) for p in extra)
    assert all(c is not None for c in review.model.placed)
    assert review.info.text() == "2 photos  ·  2 new"
    assert "2 to review in “To review”" in window.status_label.text()
    # the marks are kept with the groups: the folder opened again still shows them
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    qtbot.waitUntil(lambda: view.grouping is not None and not view._busy, timeout=60_000)
    assert view.grouping.k == 3 and view.rows[2].info.text() == "2 photos  ·  2 new"
    assert all(c is not None for c in view.rows[2].model.placed)
    assert not any(c is not None for row in view.rows[:2] for c in row.model.placed)


def test_undo_outlives_reopening_and_undoes_a_regroup_from_the_command_line(
    qtbot, window, tmp_path
):
    """Found in a real window: after reopening a folder Undo was greyed (its history lived
    as long as the window). The history is kept in the index: reopened, Ctrl+Z undoes the
    move, then the rename. ``simile cluster --regroup`` replaces the edited groups (the
    next ``simile cluster`` and the app show the new ones, names carried over) and Ctrl+Z
    in the app brings the edited ones back."""
    from app.cli import main

    folder, index = tmp_path / "photos", tmp_path / "index"
    make_grouped_folder(folder, per_group=4, seed=21)
    other = tmp_path / "other"
    make_grouped_folder(other, per_group=3, seed=22)
    view = _open_and_group(qtbot, window, folder, index)
    first = {p: view.grouping.group_of(p) for p in view.grouping.paths}
    row0 = view.rows[0]
    _rename(qtbot, row0, "Sea")
    moved = view.rows[1].model.path(0)
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        _drop(view, view.rows[1], moved, view.rows[0])
    edited = {p: view.grouping.group_of(p) for p in view.grouping.paths}
    assert edited[moved] == 0 and edited != first

    def reopen(path, idx=None) -> None:
        with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
            window.open_folder(path, idx)
        window.show_view("categories")
        qtbot.waitUntil(lambda: view.grouping is not None and not view._busy, timeout=60_000)

    reopen(other, tmp_path / "other_index")
    assert not view.undo_btn.isEnabled(), "another folder has its own (empty) history"
    reopen(folder, index)
    assert {p: view.grouping.group_of(p) for p in view.grouping.paths} == edited
    assert view.undo_btn.isEnabled(), "the edits can still be undone after reopening"
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: "Undid the last move" in window.status_label.text(), timeout=5_000)
    assert view.grouping.group_of(moved) == first[moved] and view.grouping.name(0) == "Sea"
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: "Undid the last rename" in window.status_label.text(), timeout=5_000)
    assert view.grouping.name(0) == "Group 1"
    assert not view.undo_btn.isEnabled()

    # edit again, leave the folder, regroup it on the command line into 3 groups
    row0 = view.rows[0]
    _rename(qtbot, row0, "Sea")
    reopen(other, tmp_path / "other_index")
    argv = ["cluster", str(folder), "--index", str(index), "--json", "--no-update"]
    assert main([*argv, "--regroup", "--k", "3"]) == 0
    assert main(argv) == 0  # (kept: the new grouping, not the edited one)
    reopen(folder, index)
    assert view.grouping.k == 3 and "Sea" in [view.grouping.name(g) for g in range(3)]
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(
        lambda: "Undid the last grouping again" in window.status_label.text(), timeout=5_000
    )
    assert view.grouping.k == 2 and view.grouping.name(0) == "Sea"
    assert {p: view.grouping.group_of(p) for p in view.grouping.paths} == first


def test_several_photos_selected_move_together_and_undo_in_one_step(qtbot, window, tmp_path):
    """Ctrl-click picks several photos of a group; dragged (or moved from the context
    menu) they all go to the other group, nothing else moves, and one Ctrl+Z brings them
    all back."""
    folder, index = tmp_path / "photos", tmp_path / "index"
    make_grouped_folder(folder, per_group=5, seed=4)
    view = _open_and_group(qtbot, window, folder, index)
    g = view.grouping
    assert g.k == 2
    before = {p: g.group_of(p) for p in g.paths}
    src, dst = view.rows[1], view.rows[0]
    strip = src.strip
    # click the first photo, Ctrl-click the third, as a person picks them
    for row, mods in (
        (0, Qt.KeyboardModifier.NoModifier),
        (2, Qt.KeyboardModifier.ControlModifier),
    ):
        rect = strip.visualRect(src.model.index(row))
        qtbot.mouseClick(strip.viewport(), Qt.MouseButton.LeftButton, mods, rect.center())
    chosen = [src.model.path(0), src.model.path(2)]
    assert strip.selected_paths() == chosen
    # a right-click on one of them offers to move both
    asked = []
    strip.menu_requested.disconnect(view._photo_menu)  # (its menu would wait for a click)
    strip.menu_requested.connect(lambda paths, _pos: asked.append(paths))
    strip._menu(strip.visualRect(src.model.index(2)).center())
    assert asked == [[chosen[1], chosen[0]]]
    menu = view.photo_menu(asked[0][0], asked[0])
    assert any(a.text() == "Move 2 photos to group" for a in menu.actions())

    # drag them (what Qt puts in the drag: the selected cells) onto the other group
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        _drop_data(src.model.mimeData(strip.selectedIndexes()), dst)
    after = {p: view.grouping.group_of(p) for p in g.paths}
    assert sorted(p for p in before if before[p] != after[p]) == sorted(chosen)
    assert all(after[p] == before[view.rows[0].model.path(0)] for p in chosen)
    assert window.status_label.text().startswith("Moved 2 photos to ")
    assert "no other photo moved" in window.status_label.text()
    assert "moved 2 photos by hand" in view.grouping.k_reason
    assert all(any(p in pair for pair in view.must) for p in chosen)

    # one Undo brings both back
    qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    assert {p: view.grouping.group_of(p) for p in g.paths} == before
    assert not any(p in pair for pair in view.must for p in chosen)

    # "New group" in the context menu: the two get a group of their own, the rest stays
    menu = view.photo_menu(chosen[0], chosen)
    move = next(a.menu() for a in menu.actions() if a.text() == "Move 2 photos to group")
    new_group = next(a for a in move.actions() if a.text() == "New group")
    assert new_group.isEnabled()
    with qtbot.waitSignal(view.grouping_shown, timeout=10_000):
        new_group.trigger()
    g3 = view.grouping
    assert g3.k == 3 and g3.group_of(chosen[0]) == g3.group_of(chosen[1]) == 2
    assert sorted(g3.paths[i] for i in g3.members(2)) == sorted(chosen)
    assert all(g3.group_of(p) == before[p] for p in before if p not in chosen)
    assert len(view.rows) == 3
    assert window.focusWidget() is view.rows[2].name  # its name is ready to be typed
    qtbot.keyClicks(view.rows[2].name, "Pair")
    qtbot.keyClick(view.rows[2].name, Qt.Key.Key_Return)
    assert view.grouping.name(2) == "Pair"
    qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)  # (the rename)
    # all of a group's photos cannot leave it for a new group (nothing would change)
    whole = [g3.paths[i] for i in g3.members(2)]
    menu = view.photo_menu(whole[0], whole)
    move = next(a.menu() for a in menu.actions() if a.text().startswith("Move 2 photos"))
    assert not next(a for a in move.actions() if a.text() == "New group").isEnabled()
    qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    assert view.grouping.k == 2
    assert {p: view.grouping.group_of(p) for p in g.paths} == before

    # the second of three photos leaves a group empty (it disappears and the groups after
    # it move up): the third still goes where the person put them
    import numpy as np

    from engine.cluster import EditableGrouping

    n = len(g.paths)
    labels = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])[:n]
    four = EditableGrouping(list(g.paths), labels, np.linspace(1, 0, n), np.zeros(n, bool),
                            np.zeros(n, bool), "four groups")  # fmt: skip
    view.model.set_grouping(four)
    a, b, c = g.paths[0], g.paths[3], g.paths[4]
    view.move_photos([a, b, c], 3)
    g4 = view.grouping
    assert g4.k == 3  # (group 1 is gone)
    assert g4.group_of(a) == g4.group_of(b) == g4.group_of(c) == g4.group_of(g.paths[9])
    assert [g4.group_of(p) for p in g.paths[1:3]] == [0, 0] and g4.group_of(g.paths[5]) == 1
