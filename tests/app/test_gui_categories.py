"""The Categories view as a person uses it (pytest-qt, offscreen).

The folder holds two sub-folders, each with one "scene" (random coloured shapes, rich in
SIFT keypoints) photographed four times (rotated, rescaled, cropped): grouping must find
the two sub-folders, and a photo dragged to the other group must end up there.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pytestqt")
cv2 = pytest.importorskip("cv2")

import app.gui  # noqa: E402,F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import QPointF, Qt  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402

from tests.app._gui import INDEX_TIMEOUT, make_grouped_folder  # noqa: E402

N_PER_GROUP = 4


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    root = tmp_path_factory.mktemp("cats")
    folder = root / "photos"
    groups = make_grouped_folder(folder)
    return folder, root / "index", groups


def open_and_group(qtbot, win, folder, index):
    with qtbot.waitSignal(win.indexing_finished, timeout=INDEX_TIMEOUT):
        win.open_folder(folder, index)
    view = win.views["categories"]
    if view.grouping is None:
        with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
            win.show_view("categories")
    else:
        win.show_view("categories")
    return view


def shown_groups(view) -> list[list[str]]:
    """What the person sees: the photos of every row, in row order."""
    return [row.model.paths() for row in view.rows]


def assert_partition(view, photos: list[str]) -> None:
    rows = shown_groups(view)
    flat = [p for r in rows for p in r]
    assert sorted(flat) == sorted(photos)  # every photo in exactly one group
    assert all(rows), "no empty group rows"


def test_group_rename_drag_split_merge_export(qtbot, window, grouped, tmp_path):
    from engine.workflows.feedback import Mark  # noqa: F401  (engine importable in the test env)

    folder, index, groups = grouped
    view = open_and_group(qtbot, window, folder, index)
    photos = window.photos.paths()
    assert len(photos) == 2 * N_PER_GROUP
    assert_partition(view, photos)
    # the two sub-folders are found, with the reason for k shown
    truth = {str(p): name for name, ps in groups.items() for p in ps}
    assert sorted(sorted(truth[p] for p in r) for r in shown_groups(view)) == [
        ["g0"] * N_PER_GROUP,
        ["g1"] * N_PER_GROUP,
    ]
    assert "2 groups" in view.reason.text() and "comparing what is in" in view.reason.text()
    # the technical reason behind "Details"
    assert view.details.isHidden() and "k=2" in view.details.text()
    qtbot.mouseClick(view.details_btn, Qt.MouseButton.LeftButton)
    assert not view.details.isHidden()
    # prototypes first in every row
    g = view.grouping
    for row in view.rows:
        flags = row.model.proto
        assert flags[0] and flags == sorted(flags, reverse=True)

    # rename the first group like a person: click the name, type, press Enter
    row0 = view.rows[0]
    was = view.grouping.name(0)
    qtbot.mouseClick(row0.name, Qt.MouseButton.LeftButton)
    row0.name.selectAll()
    qtbot.keyClicks(row0.name, "Blue things")
    qtbot.keyClick(row0.name, Qt.Key.Key_Return)
    assert view.grouping.name(0) == "Blue things"
    assert window.status_label.text() == f"Renamed “{was}” to “Blue things” (Ctrl+Z undoes it)."
    from engine.index import keys

    assert window.session.writes.wait()  # (written in the background, in order)
    saved = json.loads(window.collection.store.get_kv(keys.CATEGORY_EDITS_KEY))
    assert saved["names"]["0"] == "Blue things"
    first_members = set(row0.model.paths())

    # drag the last photo of group 0 onto group 1's strip
    moved = row0.model.path(row0.model.rowCount() - 1)
    src_index = row0.model.index(row0.model.rowCount() - 1)
    md = row0.model.mimeData([src_index])
    target = view.rows[1]
    anchors = set(target.model.paths())
    drop = QDropEvent(
        QPointF(20, 20), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )  # fmt: skip
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        target.strip.dropEvent(drop)
    assert_partition(view, photos)
    g = view.grouping
    gm = g.group_of(moved)
    assert all(g.group_of(a) == gm for a in anchors), "moved photo joins the target group"
    assert any(moved in pair for pair in view.must) and view.cannot
    # the renamed group keeps its name (it still holds the rest of its members)
    rest = first_members - {moved}
    named = [k for k in range(g.k) if g.name(k) == "Blue things"]
    assert len(named) == 1 and all(g.group_of(p) == named[0] for p in rest)

    # the context menu offers the same move, to every other group
    menu = view.photo_menu(moved)
    move = next(a.menu() for a in menu.actions() if a.text() == "Move to group")
    sizes = np.bincount(g.labels, minlength=g.k)
    groups = [a.text() for a in move.actions() if not a.isSeparator()]
    assert groups[-1] == "New group"  # (last, after a separator)
    assert sorted(groups[:-1]) == sorted(
        f"{g.name(k)} ({sizes[k]} photo{'s' if sizes[k] != 1 else ''})" for k in range(g.k)
    )

    # feature mask of a photo: one weight in [0, 1] per dense grouping feature, drawn
    from engine.cluster import category_features_of

    with qtbot.waitSignal(view.mask_shown, timeout=60_000):
        view.show_mask(moved)
    data = view.mask.data
    n_feat = len(category_features_of(window.collection, moved))
    assert data.weight.shape == (n_feat,) and data.xy.shape == (n_feat, 2)
    assert 0.0 <= data.weight.min() and data.weight.max() == pytest.approx(1.0)
    assert view.mask.image.pixmap() is not None and not view.mask.image.pixmap().isNull()

    # split the larger group, then merge it back
    k0 = view.grouping.k
    big = int(np.argmax(np.bincount(view.grouping.labels)))
    before = view.grouping.labels.copy()
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        view.rows[big].split_btn.click()  # computed in a worker
    assert view.grouping.k == k0 + 1
    assert_partition(view, photos)
    assert len(view.rows) == k0 + 1
    # only the split group changed: the others keep their places, the new half is last
    after = view.grouping.labels
    assert np.array_equal(after[before != big], before[before != big])
    assert set(after[before == big].tolist()) == {big, k0}
    assert window.status_label.text().startswith(f"Split {view.grouping.name(big)}: ")
    assert "no other group changed" in window.status_label.text()
    merge_menu = view.rows[k0].merge_menu  # the new half, merged with the group it left
    g = view.grouping
    merge_menu.actions()[big].trigger()
    assert view.grouping.k == k0
    assert_partition(view, photos)
    assert np.array_equal(view.grouping.labels, before)  # as it was, in its place
    assert window.status_label.text().startswith(
        f"Merged {g.name(k0)} and {g.name(big)} into {view.grouping.name(big)}: "
    )

    # export: links and copies in folders (originals untouched), and CSV
    before = sorted(os.listdir(folder / "g0")) + sorted(os.listdir(folder / "g1"))
    n = view.export(tmp_path / "links", "links")
    assert n == len(photos)
    links = [p for p in (tmp_path / "links").rglob("*") if p.is_symlink()]
    assert sorted(os.path.realpath(p) for p in links) == sorted(
        os.path.realpath(p) for p in photos
    )
    assert any("Blue things" in p.parent.name for p in links)
    assert view.export(tmp_path / "copies", "copies") == len(photos)
    copies = [p for p in (tmp_path / "copies").rglob("*.jpg") if p.is_file()]
    assert len(copies) == len(photos) and not any(p.is_symlink() for p in copies)
    view.export(tmp_path / "groups.csv", "csv")
    with (tmp_path / "groups.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["path"] for r in rows) == sorted(photos)
    assert {r["name"] for r in rows} == {view.grouping.name(k) for k in range(view.grouping.k)}
    assert sorted(os.listdir(folder / "g0")) + sorted(os.listdir(folder / "g1")) == before


def test_split_merge_large_folder(qtbot, window, tmp_path, monkeypatch):
    """A folder grouped with the Nystrom approximation (no full affinities kept): merge is
    the union of two groups, split cuts one group on its own sub-kernel in a worker (with
    Nystrom landmarks inside a large group), can be cancelled, and finds the two scenes
    again in a merged group."""
    import engine.cluster.edits as edits

    # a small folder takes the large-folder code paths (wherever the engine keeps the
    # thresholds: the package re-exports them from its pipeline module); the split of a
    # group is the engine's (engine.cluster.split_group_iter, run in a worker)
    for name in ("engine.cluster", "engine.cluster.pipeline"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for attr, value in (("NYSTROM_AUTO_MIN", 4), ("NYSTROM_LANDMARKS", 6)):
            if hasattr(mod, attr):
                monkeypatch.setattr(mod, attr, value)
    monkeypatch.setattr(edits, "SPLIT_NYSTROM_MIN", 5)
    monkeypatch.setattr(edits, "SPLIT_LANDMARKS", 6)
    drawn = []  # landmark draws of the split (Nystrom inside the group)
    choose = edits.choose_landmarks
    monkeypatch.setattr(edits, "choose_landmarks",
                        lambda n, m, **kw: drawn.append((n, m)) or choose(n, m, **kw))  # fmt: skip
    errors = []
    monkeypatch.setattr(window, "show_error", lambda msg, **kw: errors.append(msg))
    folder = tmp_path / "photos"
    groups = make_grouped_folder(folder, seed=4)
    truth = {str(p): name for name, ps in groups.items() for p in ps}
    view = open_and_group(qtbot, window, folder, tmp_path / "index")
    photos = window.photos.paths()
    assert view.K is None, "Nystrom grouping keeps no (n, n) affinities"
    assert "Nystrom" in view.grouping.k_reason
    assert_partition(view, photos)
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        view.regroup(k=2)
    assert view.K is None
    k0 = view.grouping.k
    assert k0 == 2

    # merge: the union of the two groups, prototypes kept, nothing else changes
    g = view.grouping
    a, b = g.k - 2, g.k - 1
    union = {g.paths[i] for i in np.flatnonzero(np.isin(g.labels, [a, b]))}
    protos = {g.paths[i] for i in np.flatnonzero(g.prototypes)}
    view.rows[a].merge_menu.actions()[-1].trigger()  # merge the last group into a
    assert view.grouping.k == k0 - 1
    assert_partition(view, photos)
    g = view.grouping
    merged = g.group_of(next(iter(union)))
    assert {g.paths[i] for i in np.flatnonzero(g.labels == merged)} == union
    assert {g.paths[i] for i in np.flatnonzero(g.prototypes)} == protos
    assert view.rows[merged].model.proto[0]  # prototypes still first
    assert any(set(pair) <= union for pair in view.must)

    # a split can be cancelled: busy state while it runs, groups unchanged afterwards
    view.rows[merged].split_btn.click()
    assert view._busy and view.cancel_btn.isVisibleTo(view) and view.progress.isVisibleTo(view)
    assert not view.rows[merged].isEnabled()
    view.cancel_btn.click()
    assert not view._busy and not view.cancel_btn.isVisibleTo(view)
    assert view.grouping is g and view.grouping.k == k0 - 1

    # split the merged group (8 photos > SPLIT_NYSTROM_MIN: Nystrom inside the group)
    drawn.clear()
    view.rows[merged].split_btn.click()
    qtbot.waitUntil(lambda: not view._busy, timeout=60_000)
    assert view.grouping is not g, errors
    assert drawn == [(2 * N_PER_GROUP, 6)]
    assert view.grouping.k == k0
    assert_partition(view, photos)
    g = view.grouping
    halves = sorted(sorted(truth[g.paths[i]] for i in np.flatnonzero(g.labels == h))
                    for h in {g.group_of(p) for p in union})  # fmt: skip
    # the merged group held both scenes: the cut finds them again
    assert halves == [["g0"] * N_PER_GROUP, ["g1"] * N_PER_GROUP]
    assert "split" in g.k_reason and view.cannot  # the halves stay apart when regrouping
    for h in {g.group_of(p) for p in union}:
        assert view.rows[h].model.proto[0], "each half has a prototype, shown first"

    # the exact path (a group under the threshold) needs no full affinities either
    monkeypatch.setattr(edits, "SPLIT_NYSTROM_MIN", 3000)
    big = int(np.argmax(np.bincount(g.labels)))
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        view.rows[big].split_btn.click()
    assert view.grouping.k == k0 + 1 and not errors
    assert_partition(view, photos)
    assert len(drawn) == 1, "a small group is split on its exact sub-kernel"


def test_saved_grouping_and_fixed_k(qtbot, window, grouped):
    folder, index, _ = grouped
    view = open_and_group(qtbot, window, folder, index)
    # reopening restores the saved grouping (names, constraints) without regrouping
    assert view.grouping is not None
    names = [view.grouping.name(k) for k in range(view.grouping.k)]
    assert "Blue things" in names
    assert view.must
    must = list(view.must)
    view.forget_constraints()
    qtbot.waitUntil(lambda: not view._busy, timeout=60_000)
    assert not view.must and not view.cannot
    # one Ctrl+Z brings the moves back with the groups (the regrouping left them out)
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert view.must == must
    assert window.status_label.text() == "Undid the last “Forget my moves”."
    view.forget_constraints()
    qtbot.waitUntil(lambda: not view._busy, timeout=60_000)
    assert not view.must and not view.cannot
    from engine.cluster import AUTO_K_MAX

    # the chooser offers every k that "automatic" may make
    assert view.k_combo.findData(AUTO_K_MAX) == view.k_combo.count() - 1
    i = view.k_combo.findData(3)
    view.k_combo.setCurrentIndex(i)
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        view.regroup()
    assert view.grouping.k == 3
    assert_partition(view, window.photos.paths())
    assert "3 groups" in view.reason.text() and "k=3" in view.details.text()


def test_the_app_shows_and_makes_the_grouping_of_simile_cluster(qtbot, window, tmp_path):
    """A folder grouped by ``simile cluster`` (never in the app) opens on that grouping,
    loaded through the engine's reader; grouping it again in the app runs the same engine
    function and finds the very same groups."""
    from app.cli import main
    from engine.cluster import EditableGrouping, load_grouping

    folder, index = tmp_path / "photos", tmp_path / "index"
    make_grouped_folder(folder, seed=2)
    assert main(["cluster", str(folder), "--index", str(index), "--k", "2", "--json"]) == 0
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    view = window.views["categories"]
    g = view.grouping
    assert g is not None and not view.must and not view.cannot
    stored = load_grouping(window.collection.store)
    want = EditableGrouping.from_grouping(stored)
    order = [want.paths.index(p) for p in g.paths]
    assert sorted(g.paths) == sorted(want.paths) and g.k == 2
    for field in ("labels", "flow", "prototypes", "outliers"):
        assert np.array_equal(getattr(g, field), getattr(want, field)[order]), field
    assert g.k_reason == stored.k_reason and "k=2" in g.k_reason
    with qtbot.waitSignal(view.grouping_shown, timeout=60_000):
        view.regroup(k=2)
    again = view.grouping
    assert again is not g and again.paths == g.paths
    for field in ("labels", "flow", "prototypes", "outliers"):
        assert np.array_equal(getattr(again, field), getattr(g, field)), field


def test_headless_clusters_screenshot(grouped, tmp_path):
    folder, index, _ = grouped
    out = tmp_path / "clusters.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-m", "app", str(folder), "--index", str(index),
         "--view", "clusters", "--screenshot", str(out), "--size", "1000x700"],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert (img.width(), img.height()) == (1000, 700)


def test_names_follow_groups_and_export_never_overwrites(tmp_path):
    from app.gui.categories import Grouping, carry_names, export_grouping

    old_paths = ["a", "b", "c", "d", "e"]
    old = np.array([0, 0, 0, 1, 1])
    # regrouped: groups renumbered, "c" moved over; names follow the larger overlap
    new = np.array([1, 1, 0, 0, 0])
    names = carry_names(old_paths, old, {0: "Cats", 1: "Dogs"}, old_paths, new)
    assert names == {1: "Cats", 0: "Dogs"}
    assert carry_names(old_paths, old, {}, old_paths, new) == {}

    # two photos with the same name from different folders, and an existing file
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    srcs = [tmp_path / "x" / "p.jpg", tmp_path / "y" / "p.jpg"]
    for i, s in enumerate(srcs):
        s.write_bytes(bytes([i]) * 10)
    g = Grouping([str(s) for s in srcs], np.array([0, 0]), np.ones(2), np.array([True, False]),
                 np.zeros(2, bool), names={0: "A/B: c"})  # fmt: skip
    out = tmp_path / "out"
    (out / "01 A_B_ c").mkdir(parents=True)
    (out / "01 A_B_ c" / "p.jpg").write_bytes(b"keep me")
    assert export_grouping(out, g, "copies") == 2
    files = sorted(p.name for p in (out / "01 A_B_ c").iterdir())
    assert files == ["p.jpg", "p_1.jpg", "p_2.jpg"]
    assert (out / "01 A_B_ c" / "p.jpg").read_bytes() == b"keep me"
    assert all(s.is_file() for s in srcs)
    with pytest.raises(ValueError, match="mode"):
        export_grouping(out, g, "move")
    # a photo whose name is not UTF-8: the CSV holds its name's own bytes
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.jpg")
    g = Grouping([odd, str(srcs[0])], np.array([0, 0]), np.ones(2), np.array([True, False]),
                 np.zeros(2, bool))  # fmt: skip
    assert export_grouping(tmp_path / "g.csv", g, "csv") == 2
    assert os.fsencode(tmp_path) + b"/caf\xe9.jpg," in (tmp_path / "g.csv").read_bytes()


def test_a_tile_names_a_photo_that_is_not_utf8_with_ufffd(qtbot):
    """A Categories tile shows a name that is not UTF-8 with U+FFFD (Qt dropped the byte:
    "Rose_t.jpg" for "Rose_\\xe9t\\xe9.jpg", seen in the real window) and keeps the exact
    path for dragging."""
    from app.gui.categories import GroupModel
    from app.gui.models import PATH_ROLE
    from app.gui.thumbnails import ThumbnailProvider

    odd = os.fsdecode(b"/photos/Rose_\xe9t\xe9.jpg")
    model = GroupModel(ThumbnailProvider(), 0)
    model.set_members([odd], [False], [False])
    idx = model.index(0)
    assert model.data(idx, Qt.ItemDataRole.DisplayRole) == "Rose_\ufffdt\ufffd.jpg"
    assert model.data(idx, PATH_ROLE) == odd


def test_a_menu_names_a_group_with_its_size_and_shows_an_ampersand(qtbot):
    """The "Merge with" and "Move to group" menus name each group with its size, and a "&"
    in a name the person typed ("Tom & Jerry") is shown, not taken for a shortcut mark."""
    from PySide6.QtWidgets import QMenu

    from app.gui.categories import Grouping, group_label

    g = Grouping(["a", "b", "c"], np.array([0, 0, 1]), np.ones(3), np.zeros(3, bool),
                 np.zeros(3, bool), names={0: "Tom & Jerry"})  # fmt: skip
    assert group_label(g, 0) == "Tom && Jerry (2 photos)"
    assert group_label(g, 1) == "Group 2 (1 photo)"
    menu = QMenu()
    qtbot.addWidget(menu)
    action = menu.addAction(group_label(g, 0))
    assert action.iconText() == "Tom & Jerry (2 photos)"  # what Qt shows: one "&"
