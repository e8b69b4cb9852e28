"""Batch clean-up of duplicate groups (:mod:`engine.workflows.cleanup`): plan, run, log,
undo; the trash written by hand; nothing outside the open folder is ever touched."""

from __future__ import annotations

import csv
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.workflows import cleanup, trash
from engine.workflows.cleanup import (
    LOG_FIELDS,
    OutsideFolder,
    Plan,
    Step,
    TrashUnavailable,
    default_log_path,
    last_log,
    plan_cleanup,
    run_cleanup,
    undo_cleanup,
)


@dataclass
class Group:
    paths: list
    tier: str = "same_photo"
    apart: list = field(default_factory=list)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def photos(tmp_path):
    """``folder/holidays/a.jpg`` and its copies ``folder/exports/a copy.jpg`` (same bytes)
    and ``folder/exports/small/a.jpg`` (other bytes); ``folder/b.jpg`` with an identical
    ``folder/exports/b.jpg``."""
    f = tmp_path / "photos"
    files = {
        "a": write(f / "holidays" / "a.jpg", b"A" * 1000),
        "a_copy": write(f / "exports" / "a copy.jpg", b"A" * 1000),
        "a_small": write(f / "exports" / "small" / "a.jpg", b"a" * 300),
        "b": write(f / "b.jpg", b"B" * 500),
        "b_copy": write(f / "exports" / "b.jpg", b"B" * 500),
    }
    groups = [
        Group([files["a_copy"], files["a"], files["a_small"]], "same_photo"),
        Group([files["b"], files["b_copy"]], "identical"),
    ]
    return f, files, groups


def test_plan_says_what_will_happen_and_touches_nothing(photos, tmp_path):
    folder, files, groups = photos
    plan = plan_cleanup(groups, [1, 0], "move", tmp_path / "out", folder=folder)
    assert [s.path for s in plan.steps] == [str(files["a_copy"]), str(files["a_small"]),
                                            str(files["b_copy"])]  # fmt: skip
    assert plan.kept == [str(files["a"]), str(files["b"])]
    assert plan.total_bytes == 1000 + 300 + 500
    assert plan.steps[1].destination == str(tmp_path / "out" / "exports" / "small" / "a.jpg")
    assert plan.summary() == (f"Will move 3 photos (1.8 KB) to {tmp_path / 'out'}; keep 2 photos.")
    assert all(p.exists() for p in files.values()) and not (tmp_path / "out").exists()
    # keepers as Keeper-like objects or paths; None leaves the group alone
    keeper = type("K", (), {"index": 0})()
    plan = plan_cleanup(groups, [str(files["a"]), keeper], "trash", folder=folder)
    assert plan.kept == [str(files["a"]), str(files["b"])]
    plan = plan_cleanup(groups, [None, 0], "trash", folder=folder)
    assert [s.path for s in plan.steps] == [str(files["b_copy"])]
    assert len(plan.skipped) == 3 and "leave 3 alone" in plan.summary()
    with pytest.raises(ValueError, match="destination"):
        plan_cleanup(groups, [0, 0], "move", folder=folder)
    with pytest.raises(ValueError, match="action"):
        plan_cleanup(groups, [0, 0], "delete", folder=folder)


def test_move_keeps_subfolders_never_overwrites_logs_and_undoes(photos, tmp_path):
    folder, files, groups = photos
    out = tmp_path / "out"
    taken = write(out / "exports" / "b.jpg", b"already here")
    plan = plan_cleanup(groups, [1, 0], "move", out, folder=folder)
    log = default_log_path(tmp_path / "index")
    seen = []
    result = run_cleanup(plan, log, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert not result.failed and not result.cancelled and result.bytes_done == 1800
    assert (out / "exports" / "a copy.jpg").read_bytes() == b"A" * 1000
    assert (out / "exports" / "small" / "a.jpg").read_bytes() == b"a" * 300
    assert taken.read_bytes() == b"already here"  # never overwritten: a suffix instead
    assert (out / "exports" / "b (2).jpg").read_bytes() == b"B" * 500
    assert not files["a_copy"].exists() and not files["b_copy"].exists()
    assert files["a"].exists() and files["b"].exists()  # the kept copies stay

    assert log.parent == tmp_path / "index" / "cleanup" and last_log(tmp_path / "index") == log
    with open(log, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == LOG_FIELDS
    assert [(r["original"], r["action"], r["destination"], r["size"]) for r in rows] == [
        (str(files["a_copy"]), "move", str(out / "exports" / "a copy.jpg"), "1000"),
        (str(files["a_small"]), "move", str(out / "exports" / "small" / "a.jpg"), "300"),
        (str(files["b_copy"]), "move", str(out / "exports" / "b (2).jpg"), "500"),
    ]

    undo = undo_cleanup(log)
    assert sorted(undo.restored) == sorted(str(files[k]) for k in ("a_copy", "a_small", "b_copy"))
    assert not undo.failed
    assert files["a_copy"].read_bytes() == b"A" * 1000 and files["b_copy"].exists()
    assert taken.read_bytes() == b"already here"
    assert not log.exists() and last_log(tmp_path / "index") is None  # nothing left to undo


def test_undo_never_overwrites_what_appeared_since(photos, tmp_path):
    folder, files, groups = photos
    plan = plan_cleanup(groups, [1, 0], "move", tmp_path / "out", folder=folder)
    log = tmp_path / "logs" / "run.csv"
    run_cleanup(plan, log)
    write(files["b_copy"], b"a new photo")
    undo = undo_cleanup(log)
    assert [p for p, _ in undo.failed] == [str(files["b_copy"])]
    assert "nothing was overwritten" in undo.failed[0][1]
    assert files["b_copy"].read_bytes() == b"a new photo"
    assert (tmp_path / "out" / "exports" / "b.jpg").read_bytes() == b"B" * 500
    assert files["a_copy"].exists() and files["a_small"].exists()
    # the log keeps only what is still to undo
    assert [r["original"] for r in cleanup.read_log(log)] == [str(files["b_copy"])]
    files["b_copy"].unlink()
    assert undo_cleanup(log).restored == [str(files["b_copy"])]
    assert files["b_copy"].read_bytes() == b"B" * 500


def test_trash_follows_freedesktop_and_undo_restores(photos, tmp_path, monkeypatch):
    folder, files, groups = photos
    data = tmp_path / "xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    same_name = write(folder / "other" / "a copy.jpg", b"A" * 1000)
    groups = [*groups, Group([files["a"], same_name])]
    plan = plan_cleanup(groups, [1, 0, 0], "trash", folder=folder)
    assert plan.summary().startswith("Will move 4 photos (2.7 KB) to the trash; keep 2")
    result = run_cleanup(plan, tmp_path / "log.csv")
    assert not result.failed
    home_trash = data / "Trash"
    assert sorted(p.name for p in (home_trash / "files").iterdir()) == [
        "a copy.2.jpg", "a copy.jpg", "a.jpg", "b.jpg"]  # fmt: skip
    info = (home_trash / "info" / "a copy.jpg.trashinfo").read_text()
    lines = info.splitlines()
    assert lines[0] == "[Trash Info]"
    assert lines[1] == "Path=" + str(files["a_copy"]).replace(" ", "%20")
    assert lines[2].startswith("DeletionDate=") and len(lines[2]) == len("DeletionDate=") + 19
    assert (home_trash / "info" / "a copy.2.jpg.trashinfo").exists()
    assert not files["a_copy"].exists() and not same_name.exists()

    undo = undo_cleanup(tmp_path / "log.csv")
    assert len(undo.restored) == 4 and not undo.failed
    assert same_name.read_bytes() == b"A" * 1000 and files["a_copy"].exists()
    assert not any((home_trash / "files").iterdir()) and not any((home_trash / "info").iterdir())


def test_no_trash_raises_before_anything_moves(photos, tmp_path, monkeypatch):
    folder, files, groups = photos
    not_a_dir = write(tmp_path / "data-is-a-file", b"")
    monkeypatch.setenv("XDG_DATA_HOME", str(not_a_dir))  # no $XDG_DATA_HOME/Trash possible
    top = tmp_path / "volume"
    write(top / f".Trash-{os.getuid()}", b"")  # and no .Trash-$uid on the volume either
    monkeypatch.setattr(trash, "mount_point", lambda path: str(top))
    plan = plan_cleanup(groups, [1, 0], "trash", folder=folder)
    log = tmp_path / "index" / "cleanup" / "x.csv"
    with pytest.raises(TrashUnavailable, match="No trash can take") as err:
        run_cleanup(plan, log)
    assert err.value.path == str(files["a_copy"])
    assert all(p.exists() for p in files.values()) and not log.exists()


def test_trash_on_another_device_uses_the_volume_trash(photos, tmp_path, monkeypatch):
    folder, files, groups = photos
    monkeypatch.setenv("XDG_DATA_HOME", str(write(tmp_path / "nope", b"")))
    monkeypatch.setattr(trash, "mount_point", lambda path: str(folder))  # another volume
    where, topdir = trash.trash_dir(files["a_copy"])
    assert (where, topdir) == (str(folder / f".Trash-{os.getuid()}"), str(folder))
    plan = plan_cleanup(groups[:1], [1], "trash", folder=folder)
    run_cleanup(plan, tmp_path / "log.csv")
    info = Path(where, "info", "a copy.jpg.trashinfo").read_text()
    assert "Path=exports/a%20copy.jpg\n" in info  # relative to the volume's top
    undo_cleanup(tmp_path / "log.csv")
    assert files["a_copy"].exists() and files["a_small"].exists()


def test_nothing_outside_the_folder_is_touched(photos, tmp_path):
    folder, files, _ = photos
    outside = write(tmp_path / "elsewhere" / "a.jpg", b"A" * 1000)
    with pytest.raises(OutsideFolder, match="not inside the open folder"):
        plan_cleanup([Group([files["a"], outside])], [0], "trash", folder=folder)
    with pytest.raises(OutsideFolder):  # ".." leaves the folder, whatever it names
        plan_cleanup([Group([files["a"], folder / ".." / "elsewhere" / "a.jpg"])], [0],
                     "trash", folder=folder)  # fmt: skip
    # a photo reached through a symlinked sub-folder lives outside: refused
    (folder / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutsideFolder):
        plan_cleanup([Group([files["a"], folder / "linked" / "a.jpg"])], [0], "move",
                     tmp_path / "out", folder=folder)  # fmt: skip
    # a hand-made plan naming an outside path is refused before anything moves
    bad = Plan("move", str(folder), str(tmp_path / "out"), [
        Step(str(files["a_copy"]), "move", str(tmp_path / "out" / "1.jpg"), str(files["a"]), 1),
        Step(str(outside), "move", str(tmp_path / "out" / "2.jpg"), str(files["a"]), 1),
    ])  # fmt: skip
    with pytest.raises(OutsideFolder):
        run_cleanup(bad, tmp_path / "log.csv")
    assert files["a_copy"].exists() and outside.exists()
    # a symlinked photo is the link: the link moves, its target outside stays
    link = folder / "link to a.jpg"
    link.symlink_to(outside)
    plan = plan_cleanup([Group([files["a"], link])], [0], "move", tmp_path / "out2",
                        folder=folder)  # fmt: skip
    assert plan.total_bytes == 0  # moving a link frees nothing
    run_cleanup(plan, tmp_path / "log2.csv")
    moved = tmp_path / "out2" / "link to a.jpg"
    assert moved.is_symlink() and os.readlink(moved) == str(outside)
    assert outside.read_bytes() == b"A" * 1000 and not os.path.lexists(link)
    # an undo for another folder restores nothing here
    undo = undo_cleanup(tmp_path / "log2.csv", folder=tmp_path / "elsewhere")
    assert not undo.restored and "not inside the open folder" in undo.failed[0][1]
    assert undo_cleanup(tmp_path / "log2.csv", folder=folder).restored == [str(link)]
    assert link.is_symlink() and outside.read_bytes() == b"A" * 1000


def test_hard_links_only_for_identical_files(photos, tmp_path):
    folder, files, groups = photos
    plan = plan_cleanup(groups, [1, 0], "link", folder=folder)
    # the "same photo" group is left alone, and says why
    assert [s.path for s in plan.steps] == [str(files["b_copy"])]
    assert {p for p, _ in plan.skipped} == {str(files["a_copy"]), str(files["a_small"])}
    assert all("only replace identical files" in why for _, why in plan.skipped)
    assert plan.summary() == (
        "Will replace 1 photo (500 B) by hard links to the kept copies; keep 1 photo; "
        "leave 2 alone."
    )
    result = run_cleanup(plan, tmp_path / "log.csv")
    assert not result.failed
    assert os.path.samefile(files["b"], files["b_copy"])
    assert files["b_copy"].read_bytes() == b"B" * 500
    assert not [p for p in files["b_copy"].parent.iterdir() if p.name.startswith(".")]
    # a group said to be identical whose bytes differ: checked byte for byte, left alone
    c, c2 = write(folder / "c.jpg", b"C" * 100), write(folder / "c2.jpg", b"D" * 100)
    plan = plan_cleanup([Group([c, c2], "identical")], [0], "link", folder=folder)
    result = run_cleanup(plan, tmp_path / "log2.csv")
    assert result.failed == [(str(c2), "not identical to the kept copy, byte for byte")]
    assert c2.read_bytes() == b"D" * 100 and not os.path.samefile(c, c2)
    # undo gives the copy its own file again
    assert undo_cleanup(tmp_path / "log.csv").restored == [str(files["b_copy"])]
    assert not os.path.samefile(files["b"], files["b_copy"])
    assert files["b_copy"].read_bytes() == b"B" * 500


def test_cancel_stops_between_files(photos, tmp_path):
    folder, files, groups = photos
    stop = threading.Event()
    plan = plan_cleanup(groups, [1, 0], "move", tmp_path / "out", folder=folder)
    result = run_cleanup(plan, tmp_path / "log.csv", cancel=stop,
                         progress=lambda d, t: stop.set() if d == 1 else None)  # fmt: skip
    assert result.cancelled and len(result.done) == 1
    assert not files["a_copy"].exists() and files["a_small"].exists() and files["b_copy"].exists()
    assert len(cleanup.read_log(tmp_path / "log.csv")) == 1


def test_a_name_that_is_not_utf8_is_trashed_logged_and_put_back(photos, tmp_path, monkeypatch):
    """A file whose name is not UTF-8 (Latin-1 ``café``, as old cameras and Windows copies
    leave them) goes to the trash like any other: its ``.trashinfo`` has the name's
    bytes percent-encoded (freedesktop), the log holds it, and undo puts back exactly that
    name; it never stops the rest of the batch (it did: "surrogates not allowed")."""
    folder, files, groups = photos
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    raw = os.fsencode(folder) + b"/exports/caf\xe9.jpg"
    with open(raw, "wb") as fh:
        fh.write(b"A" * 1000)
    odd = os.fsdecode(raw)
    groups = [Group([files["a"], odd, files["a_copy"]]), groups[1]]
    plan = plan_cleanup(groups, [0, 0], "trash", folder=folder)
    result = run_cleanup(plan, tmp_path / "log.csv")
    assert not result.failed and len(result.done) == 3
    assert not os.path.lexists(raw) and not files["a_copy"].exists()
    info = tmp_path / "xdg" / "Trash" / "info" / os.fsdecode(b"caf\xe9.jpg.trashinfo")
    assert f"Path={os.fsdecode(folder)}/exports/caf%E9.jpg" in info.read_text()
    assert odd in [r["original"] for r in cleanup.read_log(tmp_path / "log.csv")]
    undo = undo_cleanup(tmp_path / "log.csv", folder)
    assert len(undo.restored) == 3 and not undo.failed
    with open(raw, "rb") as fh:
        assert fh.read() == b"A" * 1000


def test_one_files_odd_error_never_stops_the_batch(photos, tmp_path, monkeypatch):
    folder, files, groups = photos
    real = cleanup._run_step

    def step(plan, s):
        if s.path == str(files["a_copy"]):
            raise UnicodeEncodeError("utf-8", "\udce9", 0, 1, "surrogates not allowed")
        return real(plan, s)

    monkeypatch.setattr(cleanup, "_run_step", step)
    plan = plan_cleanup(groups, [1, 0], "move", folder=folder, destination=tmp_path / "out")
    result = run_cleanup(plan, tmp_path / "log.csv")
    assert [p for p, _ in result.failed] == [str(files["a_copy"])]
    assert len(result.done) == 2 and files["a_copy"].exists()
    assert not files["a_small"].exists() and not files["b_copy"].exists()


def test_a_log_that_cannot_be_written_puts_the_file_back(photos, tmp_path, monkeypatch):
    """A full disk while the log row of a moved file is written: that file is put back
    before the error stops the batch (no file ever moves without its row in the log)."""
    folder, files, groups = photos

    class FullDisk(csv.DictWriter):
        def writerow(self, row):
            if row.get("original") != "original":  # (the header goes through)
                raise OSError(28, "No space left on device")
            return super().writerow(row)

    monkeypatch.setattr(cleanup.csv, "DictWriter", FullDisk)
    plan = plan_cleanup(groups, [1, 0], "move", folder=folder, destination=tmp_path / "out")
    with pytest.raises(OSError, match="No space left"):
        run_cleanup(plan, tmp_path / "log.csv")
    assert all(p.exists() for p in files.values())
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_a_photo_found_not_to_be_a_copy_of_the_kept_one_is_left_in_place(tmp_path):
    # two shots from one spot, each cropped once: the crops join them in one group, and
    # the search knows the shots are not copies of each other
    f = tmp_path / "photos"
    shot_a = write(f / "a.jpg", b"A" * 900)
    shot_b = write(f / "b.jpg", b"B" * 900)
    crop_a = write(f / "exports" / "a crop.jpg", b"a" * 400)
    crop_b = write(f / "exports" / "b crop.jpg", b"b" * 400)
    group = Group([crop_a, shot_b, crop_b, shot_a], apart=[(shot_a, shot_b)])
    plan = plan_cleanup([group], [1], "trash", folder=f)  # (shot b kept)
    assert sorted(Path(s.path).name for s in plan.steps) == ["a crop.jpg", "b crop.jpg"]
    assert [(Path(p).name, why) for p, why in plan.skipped] == [("a.jpg", cleanup.APART_REASON)]
    assert "leave 1 alone" in plan.summary()
    # kept the other way round, the same
    plan = plan_cleanup([group], [3], "trash", folder=f)
    assert [Path(p).name for p, _why in plan.skipped] == ["b.jpg"]
    # without the knowledge, the other shot would go as a "copy"
    plan = plan_cleanup([Group(group.paths)], [1], "trash", folder=f)
    assert "a.jpg" in [Path(s.path).name for s in plan.steps]
