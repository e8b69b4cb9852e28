"""A folder on an unplugged drive (or an unmounted share: its mount point is an empty
folder) never empties its index (formats issue, point 4)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from app.cli import main
from engine.collection import Collection
from engine.core.progress import run_to_end
from engine.index.ingest import FolderOfflineError


def test_an_empty_mount_point_keeps_the_index(tmp_path, demo_folder, capsys):
    folder, index, away = tmp_path / "drive", tmp_path / "index", tmp_path / "away"
    folder.mkdir()
    for n in ("brick", "coffee", "chelsea"):
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
    with Collection.open(folder, index) as col:
        run_to_end(col.update(jobs=1))
        assert len(col.paths()) == 3
    shutil.move(folder, away)
    folder.mkdir()  # the mount point, empty while the drive is away
    with Collection.open(folder, index) as col:
        with pytest.raises(FolderOfflineError, match="none of the 3 indexed photos"):
            run_to_end(col.update(jobs=1))
        assert len(col.paths()) == 3  # nothing removed
    assert main(["index", str(folder), "--index", str(index)]) == 1
    err = capsys.readouterr().err
    assert "unplugged drive" in err and len(err.strip().splitlines()) == 1
    assert main(["query", str(folder), str(away / "brick.jpg"), "--index", str(index)]) == 0
    capsys.readouterr()
    # one photo still there: an ordinary update (the others were deleted)
    shutil.copy(away / "brick.jpg", folder / "brick.jpg")
    assert main(["index", str(folder), "--index", str(index), "--json"]) == 0
    capsys.readouterr()
    (folder / "brick.jpg").unlink()
    # the person really emptied the folder: they say so
    assert main(["index", str(folder), "--index", str(index), "--allow-empty"]) == 0
    with Collection.open(folder, index, readonly=True) as col:
        assert col.paths() == []


def test_a_moved_photo_keeps_its_row_and_features(tmp_path, demo_folder):
    """Moved or renamed in the file manager: the same row (id, features, metadata), found
    by size and content, never extracted again; a copy is still a new photo."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for n in ("brick", "coffee", "chelsea"):
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
    from engine.cluster import (
        EditableGrouping,
        HistoryEntry,
        load_edits,
        load_history,
        save_edits,
        save_history,
    )
    from engine.workflows.marks import Mark, add_marks, load_marks

    with Collection.open(folder) as col:
        run_to_end(col.update(jobs=1))
        before = col.store.record(folder / "brick.jpg")
        paths = [str(p) for p in col.paths()]
        add_marks(col, [Mark(str(folder / "coffee.jpg"), str(folder / "brick.jpg"), False)])
        g = EditableGrouping(paths, np.arange(3) % 2, np.zeros(3), np.zeros(3, bool),
                             np.zeros(3, bool), names={0: "Mine"})  # fmt: skip
        save_edits(col.store, g, [(paths[0], paths[2])], [], 2)
        before_move = EditableGrouping(paths, np.zeros(3, np.int64), np.zeros(3),
                                       np.zeros(3, bool), np.zeros(3, bool))  # fmt: skip
        save_history(col.store, [HistoryEntry("move", before_move, [], [(paths[0], paths[1])])])
        (folder / "sub").mkdir()
        shutil.move(folder / "brick.jpg", folder / "sub" / "my wall.jpg")
        shutil.copy(folder / "coffee.jpg", folder / "coffee copy.jpg")
        summary = run_to_end(col.update(jobs=1))
        after = col.store.record(folder / "sub" / "my wall.jpg")
        assert after is not None and after.id == before.id
        assert after.n_features == before.n_features and after.status == "ok"
        assert summary.indexed == 1 and summary.removed == 0  # (the copy)
        assert col.store.record(folder / "brick.jpg") is None
        hits = col.query(folder / "sub" / "my wall.jpg", method="vocabulary", top=1)
        assert hits[0].path.name == "my wall.jpg"
        # it keeps its marks and its place in the person's grouping
        moved = str(folder / "sub" / "my wall.jpg")
        assert [m.result for m in load_marks(col)] == [moved]
        now = [str(p) for p in col.paths()]
        saved = load_edits(col.store, now)
        old_group = g.group_of(str(folder / "brick.jpg"))
        assert saved.grouping.group_of(moved) == old_group
        assert saved.new_paths == [str(folder / "coffee copy.jpg")]
        # and in the undo history (the states before the person's edits)
        (undo,) = load_history(col.store, now)
        assert moved in undo.grouping.paths
        assert str(folder / "brick.jpg") not in undo.grouping.paths
        assert moved in {p for pair in undo.cannot for p in pair}
