"""The Duplicates view as a person uses it (pytest-qt, offscreen): find the copies in a
folder of demo photos with an ``exports/`` folder, keep / discard with the keys, clean up
every group at once after a summary, undo it; and the fallback when there is no trash.

Screenshots go to ``$SIMILE_SHOTS`` (default ``/tmp/shots``): ``dups_view.png``,
``dups_summary.png``, ``dups_compare.png``, ``dups_no_trash.png``.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QFileDialog  # noqa: E402

from tests.app._gui import INDEX_TIMEOUT, open_and_wait  # noqa: E402

SHOTS = Path(os.environ.get("SIMILE_SHOTS", "/tmp/shots"))


def photo_folder(root: Path, demo: Path) -> tuple[Path, dict[str, Path]]:
    """``root/photos``: three demo photos, an exact copy of one in ``exports/`` and a
    half-size quality-60 re-export of another; ``root/outside.jpg`` lies beside it."""
    folder = root / "photos"
    (folder / "exports").mkdir(parents=True)
    files = {}
    for name in ("chelsea", "coffee", "rocket"):
        files[name] = folder / f"{name}.jpg"
        shutil.copy(demo / f"{name}.jpg", files[name])
    files["chelsea_copy"] = folder / "exports" / "chelsea copy.jpg"
    shutil.copy(files["chelsea"], files["chelsea_copy"])
    img = cv2.imread(str(files["coffee"]))
    small = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)
    files["coffee_small"] = folder / "exports" / "coffee_small.jpg"
    cv2.imwrite(str(files["coffee_small"]), small, [cv2.IMWRITE_JPEG_QUALITY, 60])
    files["outside"] = root / "outside.jpg"
    shutil.copy(files["chelsea"], files["outside"])
    return folder, files


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def find(qtbot, window) -> None:
    with qtbot.waitSignal(window.duplicates_shown, timeout=60_000):
        window.find_duplicates(None)
    view = window.dup_view
    qtbot.waitUntil(lambda: len(view.infos) >= 2 and len(view.cards_list()) >= 2, timeout=30_000)


def open_summary(qtbot, view):
    shown = view.summary.text()
    qtbot.mouseClick(view.keep_all_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: view.cleanup_dialog is not None and view.cleanup_dialog.isVisible(),
        timeout=30_000,
    )
    # the line says again what was found, not "Choosing the copy to keep…" (it did)
    assert view.summary.text() == shown
    return view.cleanup_dialog


def test_keep_suggested_moves_to_a_folder_logs_and_undoes(
    qtbot, window, tmp_path, demo_folder, monkeypatch
):
    folder, files = photo_folder(tmp_path, demo_folder)
    index = tmp_path / "index"
    open_and_wait(qtbot, window, folder, index)
    find(qtbot, window)
    view = window.dup_view
    groups = {frozenset(Path(p).name for p in g.paths): g for g in view.groups}
    assert frozenset({"chelsea.jpg", "chelsea copy.jpg"}) in groups
    assert frozenset({"coffee.jpg", "coffee_small.jpg"}) in groups
    assert "rocket.jpg" not in {n for names in groups for n in names}
    identical = groups[frozenset({"chelsea.jpg", "chelsea copy.jpg"})]
    assert getattr(identical, "tier", "identical") == "identical"

    # the cards: uncropped pictures, folder, date, size, tier; one suggested copy
    cards = view.cards_list()
    assert [c.state for c in cards].count("suggested") == 1
    texts = [" ".join(lbl.text() for lbl in c.findChildren(type(view.summary))) for c in cards]
    assert all("in photos" in t and "KB" in t for t in texts), texts
    assert all(
        ("taken " if c.info.taken else "modified ") in t for c, t in zip(cards, texts, strict=True)
    )
    assert all(c.pic.image is not None for c in cards)
    SHOTS.mkdir(parents=True, exist_ok=True)
    qtbot.wait(50)  # (laid out)
    window.grab().save(str(SHOTS / "dups_view.png"))

    # keys: → K keeps the other copy, D discards it again (the suggestion is back), N next
    view.setFocus()
    row = view.group_list.currentRow()
    before = [c.state for c in view.cards_list()]
    suggested = before.index("suggested")
    other = 1 - suggested if len(before) == 2 else (suggested + 1) % len(before)
    view._focus = suggested
    for _ in range((other - suggested) % len(before)):
        qtbot.keyClick(view, Qt.Key.Key_Right)
    qtbot.keyClick(view, Qt.Key.Key_K)
    states = [c.state for c in view.cards_list()]
    assert states[other] == "kept" and states[suggested] == "copy"
    qtbot.keyClick(view, Qt.Key.Key_D)
    states = [c.state for c in view.cards_list()]
    assert states[other] == "discard" and states[suggested] == "kept"
    view.choices.clear()  # back to the suggestions for the clean-up below
    view._rerender()
    qtbot.keyClick(view, Qt.Key.Key_N)
    assert view.group_list.currentRow() == min(row + 1, view.group_list.count() - 1)
    # the re-export beside its original, at the same zoom, then flickered
    view.group_list.setCurrentRow(
        next(i for i, g in enumerate(view.groups) if files["coffee"] in map(Path, g.paths))
    )
    qtbot.waitUntil(lambda: len(view.infos) == 2 and len(view.cards_list()) == 2, timeout=30_000)
    qtbot.keyClick(view, Qt.Key.Key_C)
    dlg = view.compare_dialog
    qtbot.waitUntil(dlg.isVisible, timeout=5_000)
    qtbot.wait(50)
    a, b = (v.item.sceneBoundingRect() for v in dlg.views)
    assert a.width() == pytest.approx(b.width())  # the half-size copy drawn as wide
    dlg.set_zoom(2.0)
    assert all(v.transform().m11() == pytest.approx(2.0) for v in dlg.views)
    dlg.grab().save(str(SHOTS / "dups_compare.png"))
    dlg.flicker_btn.click()
    assert dlg.views[1].isHidden() and dlg.timer.isActive()
    dlg.accept()

    # "Keep the suggested copy in every group…": a summary first, nothing moved yet
    before_files = snapshot(folder)
    dest = tmp_path / "moved"
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(dest))
    dialog = open_summary(qtbot, view)
    assert dialog.trash_rb.isChecked()
    assert dialog.link_rb.isEnabled() == any(
        getattr(g, "tier", "") == "identical" for g in view.groups
    )
    include_every_tier(qtbot, dialog, view)
    qtbot.mouseClick(dialog.choose_btn, Qt.MouseButton.LeftButton)
    assert dialog.move_rb.isChecked() and dialog.destination == str(dest)
    plan = dialog.plan()
    assert len(plan.steps) == 2 and len(plan.kept) == 2
    assert dialog.summary.text().startswith("Will move 2 photos (")
    assert f"to {dest}; keep 2 photos." in dialog.summary.text()
    assert dialog.run_btn.text() == "Move 2 photos"
    dialog.grab().save(str(SHOTS / "dups_summary.png"))
    assert snapshot(folder) == before_files and not dest.exists()

    kept = set(plan.kept)
    gone = {s.path for s in plan.steps}
    assert {Path(p).name for p in gone} | {Path(p).name for p in kept} == {
        "chelsea.jpg", "chelsea copy.jpg", "coffee.jpg", "coffee_small.jpg"}  # fmt: skip
    assert str(files["coffee_small"]) in gone  # the half-size re-export never kept
    with qtbot.waitSignal(view.cleaned, timeout=30_000) as moved:
        qtbot.mouseClick(dialog.run_btn, Qt.MouseButton.LeftButton)
    assert sorted(moved.args[0]) == sorted(gone)
    for p in gone:
        assert not os.path.lexists(p)
        target = dest / Path(p).relative_to(folder)
        assert target.read_bytes() == before_files[p]
    assert all(Path(p).read_bytes() == before_files[p] for p in kept)
    assert Path(str(files["rocket"])).read_bytes() == before_files[str(files["rocket"])]
    assert files["outside"].exists()
    logs = list((index / "cleanup").glob("*.csv"))
    assert len(logs) == 1
    assert "Log: " in view.notice.text() and "Undo last clean-up" in view.notice.text()
    assert view.notice.isVisible() and view.group_list.count() == 0  # (found again later)
    window.grab().save(str(SHOTS / "dups_after_cleanup.png"))
    rows = logs[0].read_text().splitlines()
    assert rows[0] == "original,action,destination,time,size,kept" and len(rows) == 3

    # the index forgets the moved files; then "Undo last clean-up" puts them back
    qtbot.waitUntil(lambda: view.undo_btn.isEnabled(), timeout=INDEX_TIMEOUT)
    with qtbot.waitSignal(view.restored, timeout=30_000):
        qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    assert snapshot(folder) == before_files
    assert not any(dest.rglob("*.jpg"))
    assert not logs[0].exists() and view.notice.text() == "Put back 2 photos."
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)


def test_no_trash_offers_a_folder_instead(qtbot, window, tmp_path, demo_folder, monkeypatch):
    from PySide6.QtWidgets import QMessageBox, QPushButton

    from engine.workflows import trash

    folder, files = photo_folder(tmp_path, demo_folder)
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    before_files = snapshot(folder)

    # one copy: its card's "Trash…", answered yes; the trash refuses; a folder is offered
    def no_trash(path):
        raise trash.TrashUnavailable(f"No trash can take {Path(path).name} (tried …).", path)

    monkeypatch.setattr(trash, "trash_dir", no_trash)
    monkeypatch.setattr(QMessageBox, "exec", lambda box: 0)
    destructive = QMessageBox.ButtonRole.DestructiveRole
    monkeypatch.setattr(QMessageBox, "clickedButton", lambda box: next(
        b for b in box.buttons() if box.buttonRole(b) == destructive))  # fmt: skip
    row = next(i for i, g in enumerate(view.groups) if files["chelsea_copy"] in map(Path, g.paths))
    view.group_list.setCurrentRow(row)
    qtbot.waitUntil(lambda: len(view.infos) == 2 and len(view.cards_list()) == 2, timeout=30_000)
    card = next(c for c in view.cards_list() if c.info.path == str(files["chelsea_copy"]))
    trash_btn = next(b for b in card.findChildren(QPushButton) if b.text() == "Trash…")
    qtbot.mouseClick(trash_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.fallback_box is not None and view.fallback_box.isVisible(),
                    timeout=5_000)  # fmt: skip
    assert snapshot(folder) == before_files
    assert window.banner.isVisible() and "could not move" in window.banner.label.text().lower()
    one = tmp_path / "one"
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(one))
    move = next(b for b in view.fallback_box.buttons() if b.text() == "Move to a folder…")
    with qtbot.waitSignal(view.cleaned, timeout=30_000) as moved:
        qtbot.mouseClick(move, Qt.MouseButton.LeftButton)
    assert moved.args[0] == [str(files["chelsea_copy"])]
    assert (one / "exports" / "chelsea copy.jpg").read_bytes() == before_files[
        str(files["chelsea_copy"])]  # fmt: skip
    assert files["chelsea"].exists()
    assert not window.banner.isVisible()  # (the move the banner's failure led to succeeded)
    # the index forgets it and the groups are found again: only the coffee pair is left
    qtbot.waitUntil(lambda: not window.is_indexing() and len(view.groups) == 1
                    and len(view.infos) == 2, timeout=INDEX_TIMEOUT)  # fmt: skip

    # the batch: the trash cannot be used here; nothing moves; a folder is offered
    before_files = snapshot(folder)
    dialog = open_summary(qtbot, view)
    include_every_tier(qtbot, dialog, view)
    assert dialog.trash_rb.isChecked() and "to the trash" in dialog.summary.text()
    qtbot.mouseClick(dialog.run_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.fallback_box is not None and view.fallback_box.isVisible(),
                    timeout=30_000)  # fmt: skip
    box = view.fallback_box
    assert "Nothing was moved" in box.text() and snapshot(folder) == before_files
    box.grab().save(str(SHOTS / "dups_no_trash.png"))

    dest = tmp_path / "instead"
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(dest))
    move = next(b for b in box.buttons() if b.text() == "Move to a folder…")
    qtbot.mouseClick(move, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.cleanup_dialog is not dialog and view.cleanup_dialog.isVisible(),
                    timeout=5_000)  # fmt: skip
    dialog = view.cleanup_dialog
    assert dialog.move_rb.isChecked() and dialog.destination == str(dest)
    with qtbot.waitSignal(view.cleaned, timeout=30_000) as moved:
        qtbot.mouseClick(dialog.run_btn, Qt.MouseButton.LeftButton)
    assert moved.args[0] == [str(files["coffee_small"])]
    assert [p.name for p in dest.rglob("*.jpg")] == ["coffee_small.jpg"]
    assert files["outside"].exists() and files["rocket"].exists() and files["coffee"].exists()
    # two clean-ups, two logs; the last is undone first
    assert len(list((tmp_path / "index" / "cleanup").glob("*.csv"))) == 2
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)


def include_every_tier(qtbot, dialog, view) -> None:
    """Check the tiers the summary leaves out by default (similar shots: different
    photos, the person opts in), as a person who wants every group cleaned would."""
    tiers = {getattr(g, "tier", "same_photo") for g in view.groups}
    for tier, box in dialog.tier_boxes.items():
        assert tier in tiers
        assert box.isChecked() == (tier != "similar_shots")
        if not box.isChecked():
            box.click()  # (the check box's own click: toggles it, as a mouse click does)
            assert box.isChecked()


def test_search_shows_progress_and_can_be_cancelled(qtbot, window, tmp_path, demo_folder):
    folder, _ = photo_folder(tmp_path, demo_folder)
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    view = window.dup_view
    started = threading.Event()

    def slow(threshold, *, cancel=None, progress=None):
        progress(3, 8)
        started.set()
        cancel.wait(30)
        raise InterruptedError("cancelled")

    window.collection.duplicates = slow
    window.find_duplicates(None)
    qtbot.waitUntil(started.is_set, timeout=10_000)
    qtbot.waitUntil(lambda: view.progress.maximum() == 8, timeout=5_000)
    assert view.progress.isVisible() and view.progress.value() == 3
    assert view.cancel_btn.isVisible() and not view.find_btn.isEnabled()
    qtbot.mouseClick(view.cancel_btn, Qt.MouseButton.LeftButton)
    assert view.summary.text().startswith("Search cancelled")
    assert view.find_btn.isEnabled() and not view.progress.isVisible()
    assert not window.session.jobs.running("duplicates")
    qtbot.wait(100)  # the worker ends; its InterruptedError is dropped, not shown
    assert not window.banner.isVisible()


def test_moves_are_refused_while_the_index_is_read_only(tmp_path):
    from app.gui.session import ActionRefused, Session

    folder = tmp_path / "photos"
    folder.mkdir()
    a, b = folder / "a.jpg", folder / "b.jpg"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    s = Session()
    s.open_folder(folder)
    group = type("G", (), {"paths": [a, b], "scores": [1.0, 1.0]})()
    s.duplicates.set_groups([group], 0.5)
    assert s.authorize("move", b) == str(b)
    s.set_readonly("media")
    with pytest.raises(ActionRefused, match="read-only media"):
        s.authorize("move", b)
    assert s.authorize("link", b) == str(b)  # a hard link leaves the photo where it is


def test_photos_indexed_after_a_search_are_announced_and_the_next_search_includes_them(
    qtbot, window, tmp_path, demo_folder
):
    """The groups shown say when photos came in since they were found; the next search
    (which re-checks only pairs involving the new photo) groups the new copy."""
    folder, _ = photo_folder(tmp_path, demo_folder)
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    view = window.dup_view
    find(qtbot, window)
    before = view.summary.text()
    assert "since" not in before
    img = cv2.imread(str(demo_folder / "rocket.jpg"))
    cv2.imwrite(str(folder / "rocket_blurred.jpg"), cv2.GaussianBlur(img, (0, 0), 1.5))
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.reindex()
    assert view.summary.text().startswith(before.split(" · ")[0])
    assert "1 photo added, changed or removed since" in view.summary.text()
    find(qtbot, window)
    assert "since" not in view.summary.text()
    grouped = {p.name for g in view.groups for p in g.paths}
    assert {"rocket.jpg", "rocket_blurred.jpg"} <= grouped


def test_the_batch_leaves_similar_shots_out_unless_asked(qtbot, tmp_path):
    """Similar shots are different photos (a burst, a bracket): the batch summary starts
    with their tier unchecked; checking it adds their groups."""
    from app.gui.duplicates import CleanupDialog
    from engine.workflows.duplicates import DuplicateGroup

    folder = tmp_path / "photos"
    folder.mkdir()
    paths = []
    for name in ("a.jpg", "a copy.jpg", "b1.jpg", "b2.jpg"):
        (folder / name).write_bytes(name.encode())
        paths.append(folder / name)
    groups = [
        DuplicateGroup(paths[:2], [1.0, 0.9], tier="same_photo"),
        DuplicateGroup(paths[2:], [1.0, 0.4], tier="similar_shots"),
    ]
    dialog = CleanupDialog(groups, [0, 0], folder, tmp_path / "logs")
    qtbot.addWidget(dialog)
    assert dialog.tier_boxes["same_photo"].isChecked()
    assert not dialog.tier_boxes["similar_shots"].isChecked()
    assert dialog.chosen_rows() == [0]
    dialog.tier_boxes["similar_shots"].setChecked(True)
    assert dialog.chosen_rows() == [0, 1]


def test_a_long_file_name_is_shortened_in_the_group_list(qtbot, window, tmp_path):
    """The list of groups does not scroll sideways for a long name: it is shortened in
    the middle (seen in the real window: "astronaut.jp" cut off at the edge, a scroll
    bar below)."""
    from engine.workflows.duplicates import DuplicateGroup

    long_name = tmp_path / ("a_very_long_photo_name_from_a_phone_export_" * 3 + "1.jpg")
    groups = [DuplicateGroup([long_name, tmp_path / "b.jpg"], [1.0, 0.9], "same_photo")]
    window.resize(1100, 700)
    window.show()
    window.show_view("duplicates")  # (a hidden list has no visible scroll bar to find)
    view = window.dup_view
    view.set_groups(groups, 0.2)
    qtbot.wait(50)
    lst = view.group_list
    assert lst.isVisible() and not lst.horizontalScrollBar().isVisible()
    assert lst.visualItemRect(lst.item(0)).right() <= lst.viewport().width()
    assert "…" in lst.item(0).text() and lst.item(0).text().endswith("1.jpg")
    assert str(long_name) in lst.item(0).toolTip()
    SHOTS.mkdir(parents=True, exist_ok=True)
    lst.grab().save(str(SHOTS / "dups_long_name.png"))


def test_rows_too_long_for_the_group_list_end_in_an_ellipsis(qtbot, window, tmp_path):
    """The README's screenshot (1360 x 840, 14 groups: a vertical scroll bar narrows the
    list): "4 photos · ≥ 0.40 · astronaut.jp" ran past the list's edge above a sideways
    scroll bar, names of 18 characters or less being left whole. The rows now fit the
    list and a line too long ends in "…"."""
    from engine.workflows.duplicates import DuplicateGroup

    groups = [DuplicateGroup([tmp_path / f"camera_crop_{i:02d}.jpg", tmp_path / f"b{i}.jpg"],
                             [1.0, 0.4], "same_photo") for i in range(40)]  # fmt: skip
    window.resize(1360, 840)
    window.show()
    window.show_view("duplicates")
    view = window.dup_view
    view.set_groups(groups, 0.2)
    from PySide6.QtGui import QIcon, QPixmap

    lst = view.group_list
    for i in range(lst.count()):  # (the thumbnails of the groups' first photos)
        pm = QPixmap(56, 56)
        pm.fill(Qt.GlobalColor.gray)
        lst.item(i).setIcon(QIcon(pm))
    qtbot.wait(50)
    assert lst.isVisible() and lst.verticalScrollBar().isVisible()
    assert not lst.horizontalScrollBar().isVisible()
    for i in range(lst.count()):
        assert lst.visualItemRect(lst.item(i)).right() <= lst.viewport().width()
    assert lst.item(0).text().endswith("camera_crop_00.jpg")  # (the whole name is kept)
    lst.grab().save(str(SHOTS / "dups_list_fits.png")) if SHOTS.is_dir() else None


def test_a_name_that_is_not_utf8_is_shown_and_gets_its_icon(qtbot, window, tmp_path, demo_folder):
    """A group whose first photo's name is not UTF-8 (an old archive): the list shows
    the name with U+FFFD for the odd byte, and the row gets that photo's thumbnail (Qt
    drops such bytes from any text it holds, so the path is not looked up through it)."""
    import os

    from engine.workflows.duplicates import DuplicateGroup

    odd = tmp_path / os.fsdecode(b"caf\xe9.jpg")
    shutil.copy(demo_folder / "coffee.jpg", odd)
    other = tmp_path / "coffee.jpg"
    shutil.copy(demo_folder / "coffee.jpg", other)
    view = window.dup_view
    asked = []
    real = view.thumbs.pixmap
    view.thumbs.pixmap = lambda p: asked.append(p) or real(p)
    view.set_groups([DuplicateGroup([odd, other], [1.0, 1.0], "identical")], 0.2)
    item = view.group_list.item(0)
    assert item.text().endswith("caf\ufffd.jpg")
    assert "caf\ufffd.jpg" in item.toolTip()
    assert asked[0] == str(odd)  # (the exact name, its byte kept)
    qtbot.waitUntil(lambda: not view.group_list.item(0).icon().isNull(), timeout=20_000)
    # its card's buttons name it exactly: "Keep" keeps that copy (a str signal lost the
    # byte, and "Trash…" was refused: "not one of the duplicate groups shown")
    from PySide6.QtWidgets import QPushButton

    from app.gui.duplicates import CopyInfo

    model = window.session.duplicates
    model.set_groups([DuplicateGroup([odd, other], [1.0, 1.0], "identical")], 0.2)
    model.select(0)
    model.set_copies([CopyInfo(str(p), 64, 48, 1000, 1.0, 1.0, None) for p in (odd, other)], 1)
    card = next(c for c in view.cards_list() if c.info.path == str(odd))
    assert card.state == "copy"
    keep = next(b for b in card.findChildren(QPushButton) if b.text() == "Keep")
    qtbot.mouseClick(keep, Qt.MouseButton.LeftButton)
    card = next(c for c in view.cards_list() if c.info.path == str(odd))
    assert card.state == "kept"


def test_a_copy_whose_name_is_not_utf8_goes_to_the_trash(
    qtbot, window, tmp_path, demo_folder, monkeypatch
):
    """Trash… on a copy whose name is not UTF-8 moves that very file to the trash (Qt's
    trash cannot name it: the freedesktop trash of the engine takes it, its name's bytes
    kept in the .trashinfo), after the person's yes."""
    import os

    from PySide6.QtWidgets import QMessageBox, QPushButton

    folder = tmp_path / "photos"
    (folder / "exports").mkdir(parents=True)
    shutil.copy(demo_folder / "chelsea.jpg", folder / "chelsea.jpg")
    shutil.copy(demo_folder / "rocket.jpg", folder / "rocket.jpg")
    odd = os.fsdecode(os.fsencode(folder) + b"/exports/Urlaub_M\xfcnchen.jpg")
    shutil.copy(demo_folder / "chelsea.jpg", odd)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    monkeypatch.setattr(QMessageBox, "exec", lambda box: 0)
    destructive = QMessageBox.ButtonRole.DestructiveRole
    monkeypatch.setattr(QMessageBox, "clickedButton", lambda box: next(
        b for b in box.buttons() if box.buttonRole(b) == destructive))  # fmt: skip
    card = next(c for c in view.cards_list() if c.info.path == odd)
    trash_btn = next(b for b in card.findChildren(QPushButton) if b.text() == "Trash…")
    with qtbot.waitSignal(view.trashed, timeout=10_000) as sent:
        qtbot.mouseClick(trash_btn, Qt.MouseButton.LeftButton)
    assert sent.args == [odd] and not os.path.lexists(odd)
    trashed = tmp_path / "data" / "Trash" / "files" / os.fsdecode(b"Urlaub_M\xfcnchen.jpg")
    assert trashed.read_bytes() == (folder / "chelsea.jpg").read_bytes()
    info = (tmp_path / "data" / "Trash" / "info" / (trashed.name + ".trashinfo")).read_text()
    assert "Urlaub_M%FCnchen.jpg" in info
    assert not window.banner.isVisible()
    assert (folder / "chelsea.jpg").exists() and (folder / "rocket.jpg").exists()
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)
    # the one-copy trash is logged like a batch: "Undo last clean-up" puts it back
    qtbot.waitUntil(view.undo_btn.isEnabled, timeout=10_000)
    with qtbot.waitSignal(view.restored, timeout=10_000):
        qtbot.mouseClick(view.undo_btn, Qt.MouseButton.LeftButton)
    assert os.path.lexists(odd) and not trashed.exists()


def test_a_shot_of_a_copy_in_no_group_is_named_with_the_group(
    qtbot, window, tmp_path, demo_folder, monkeypatch
):
    """A heavily recompressed copy the same-photo test cannot confirm, linked only to a
    photo of a group of identical files, is in no group; the group's header names it (a
    link that opens it) and a clean-up of the group leaves it alone."""
    import dataclasses

    import engine.workflows.duplicates as dups

    # (the 3/4-size quality-18 copy is confirmed once its kept frame allows its 0.47 px
    # feature residual: without that, the same-photo test cannot confirm it)
    flat = dups.DEFAULT_RULE.same_photo_residual_px
    rule = dataclasses.replace(dups.DEFAULT_RULE, same_photo_residual_px_frame=flat)
    monkeypatch.setattr(dups, "DEFAULT_RULE", rule)
    folder = tmp_path / "photos"
    (folder / "exports").mkdir(parents=True)
    for name in ("chelsea", "chelsea_jpeg", "coffee", "rocket"):
        shutil.copy(demo_folder / f"{name}.jpg", folder / f"{name}.jpg")
    shutil.copy(demo_folder / "chelsea.jpg", folder / "exports" / "chelsea copy.jpg")
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    jpeg = str(folder / "chelsea_jpeg.jpg")
    row = next(i for i, g in enumerate(view.groups) if g.tier == "identical")
    group = view.groups[row]
    assert jpeg not in {str(p) for g in view.groups for p in g.paths}
    assert [str(p) for p, _s in group.related] == [jpeg]
    view.group_list.setCurrentRow(row)
    qtbot.waitUntil(lambda: "chelsea_jpeg.jpg" in view.group_header.text(), timeout=30_000)
    header = view.group_header.text()
    assert "not in this group" in header and "in no group" in header
    assert "chelsea_jpeg.jpg" in view.group_list.item(row).toolTip()
    with qtbot.waitSignal(view.open_requested, timeout=5_000) as opened:
        view.group_header.linkActivated.emit("related:0")  # (its name clicked)
    assert str(opened.args[0]) == jpeg
    dialog = open_summary(qtbot, view)
    steps = [s.path for s in dialog.plan().steps]
    assert steps == [str(folder / "exports" / "chelsea copy.jpg")]
    dialog.reject()


def test_a_group_of_shots_is_not_called_copies(qtbot, window, tmp_path, demo_folder):
    """Similar shots are other photos, not copies: their group's header counts shots and
    their cards say "Other shot" (seen in the real window: "3 copies", "Copy")."""
    from PySide6.QtWidgets import QLabel

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("rocket", "rocket_crop", "rocket_perspective", "astronaut", "astronaut_light"):
        shutil.copy(demo_folder / f"{name}.jpg", folder / f"{name}.jpg")
    open_and_wait(qtbot, window, folder, tmp_path / "index")
    find(qtbot, window)
    view = window.dup_view
    tiers = [g.tier for g in view.groups]
    assert "similar_shots" in tiers and "same_photo" in tiers

    def badges() -> list[str]:
        cards = [view.cards.itemAt(i).widget() for i in range(view.cards.count())]
        return [next(lb.text() for lb in c.findChildren(QLabel) if lb.text()) for c in cards]

    for row, tier in enumerate(tiers):
        view.group_list.setCurrentRow(row)
        n = len(view.groups[row].paths)
        noun = "shots" if tier == "similar_shots" else "copies"
        qtbot.waitUntil(lambda n=n, noun=noun: f"{n} {noun} —" in view.group_header.text())
        qtbot.waitUntil(lambda n=n: len(badges()) == n)
        others = badges()[1:]
        assert others == ["Other shot" if tier == "similar_shots" else "Copy"] * (n - 1)


def test_a_burst_suggests_its_sharp_frame_not_the_first_taken(qtbot, window, tmp_path):
    """Of a group of similar shots the suggested card is the best shot (here the sharp
    frame of a burst, taken second), with the shot rule's reason, not the copies' rule
    ("original: taken ..., the other was taken later": the shaken first frame)."""
    from PySide6.QtWidgets import QLabel

    from engine.workflows.duplicates import DuplicateGroup
    from tests._burst import burst_folder

    paths = burst_folder(tmp_path / "burst")
    window.show_view("duplicates")
    view = window.dup_view
    window.session.duplicates.set_groups([DuplicateGroup(paths, [1.0, 0.5], "similar_shots")])
    view.group_list.setCurrentRow(0)

    def cards():
        return [view.cards.itemAt(i).widget() for i in range(view.cards.count())]

    def texts(card) -> list[str]:
        return [lb.text() for lb in card.findChildren(QLabel)]

    qtbot.waitUntil(lambda: any(t.startswith("Why: ") for c in cards() for t in texts(c)))
    suggested = [c for c in cards() if any(t.startswith("Why: ") for t in texts(c))]
    assert len(suggested) == 1
    why = next(t for t in texts(suggested[0]) if t.startswith("Why: "))
    assert why.startswith("Why: sharpest ("), why
    assert "IMG_0002.jpg" in " ".join([*texts(suggested[0]), suggested[0].toolTip()])


def test_two_shots_joined_through_their_crops_are_named_and_kept(qtbot, window, tmp_path):
    """A group whose members include two photos found not to be copies of each other
    (two shots from one spot, each cropped once) says so in its header, and the batch
    clean-up leaves the shot that is not kept in place, saying why."""
    from app.gui.duplicates import CleanupDialog
    from engine.workflows.cleanup import APART_REASON
    from engine.workflows.duplicates import DuplicateGroup

    folder = tmp_path / "photos"
    (folder / "exports").mkdir(parents=True)
    names = ["exports/a crop.jpg", "b.jpg", "exports/b crop.jpg", "a.jpg"]
    paths = []
    for name in names:
        (folder / name).write_bytes(name.encode() * 50)
        paths.append(folder / name)
    group = DuplicateGroup(paths, [1.0, 0.55, 0.55, 0.46], "same_photo",
                           apart=[(paths[3], paths[1])])  # fmt: skip
    window.show_view("duplicates")
    view = window.dup_view
    window.session.duplicates.set_groups([group])
    view.group_list.setCurrentRow(0)
    qtbot.waitUntil(lambda: "Not copies of each other" in view.group_header.text())
    assert "a.jpg ~ b.jpg" in view.group_header.text()

    dialog = CleanupDialog([group], [1], folder, tmp_path / "logs")  # (b.jpg kept)
    qtbot.addWidget(dialog)
    plan = dialog.plan()
    assert sorted(Path(s.path).name for s in plan.steps) == ["a crop.jpg", "b crop.jpg"]
    assert [(Path(p).name, why) for p, why in plan.skipped] == [("a.jpg", APART_REASON)]
    assert "leave 1 alone" in dialog.summary.text()
    assert APART_REASON.split(" (")[0] in dialog.summary.text()
