"""The index / query / duplicates / eval sub-commands end to end (headless, no Qt)."""

import json
import os
import shutil

import pytest

from app.cli import main

NAMES = (
    "astronaut.jpg",
    "astronaut_light.jpg",
    "astronaut_rotate.jpg",
    "brick.jpg",
    "brick_crop.jpg",
    "brick_light.jpg",
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("cli_photos")
    for n in NAMES:
        shutil.copy(demo_folder / n, root / n)
    shutil.copy(demo_folder / "brick.jpg", root / "brick_copy.jpg")
    (root / "empty.png").write_bytes(b"")
    (root / "bad.jpg").write_bytes(b"\xff\xd8\xff garbage")
    return root


def _json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.strip().splitlines()]


@pytest.fixture(scope="module")
def indexed(folder):
    capture = pytest.MonkeyPatch()  # module-scoped: capture by hand
    import io
    import sys

    buf = io.StringIO()
    capture.setattr(sys, "stdout", buf)
    try:
        code = main(["index", str(folder), "--json", "--jobs", "1"])
    finally:
        capture.undo()
    return code, buf.getvalue()


def test_index_json_summary(indexed, folder):
    code, out = indexed
    assert code == 0
    lines = _json_lines(out)
    last = lines[-1]
    assert set(last) == {
        "indexed",
        "unchanged",
        "removed",
        "failed",
        "skipped",
        "total",
        "seconds",
        "metadata",
    }
    assert last["indexed"] == len(NAMES) + 1 and last["unchanged"] == 0
    # (the demo photos carry no EXIF: their sizes only)
    assert last["metadata"] == {
        "read": len(NAMES) + 1, "date_taken": 0, "camera": 0, "gps": 0, "read_now": len(NAMES) + 1
    }  # fmt: skip
    assert sorted(f["path"].rsplit("/", 1)[-1] for f in last["failed"]) == ["bad.jpg", "empty.png"]
    assert all(f["reason"] for f in last["failed"])
    assert last["total"] == len(NAMES) + 3
    assert all("progress" in line for line in lines[:-1])
    assert (folder / ".simile").is_dir()


def test_index_again_is_incremental(indexed, folder, capsys):
    assert main(["index", str(folder), "--json"]) == 0
    last = _json_lines(capsys.readouterr().out)[-1]
    assert last["indexed"] == 0 and last["unchanged"] == len(NAMES) + 1


def test_query_json(indexed, folder, capsys):
    q1, q2 = folder / "astronaut_rotate.jpg", folder / "brick_crop.jpg"
    assert main(["query", str(folder), str(q1), str(q2), "--top", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["method"] == "hybrid"
    assert [r["query"] for r in res["results"]] == [str(q1), str(q2)]
    for r in res["results"]:
        hits = r["hits"]
        assert len(hits) == 3 and hits[0]["path"] == r["query"]
        assert all(h["path"].startswith("/") for h in hits)
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert all("astronaut" in h["path"] for h in res["results"][0]["hits"])


def test_query_outside_and_methods(indexed, folder, demo_folder, capsys):
    outside = demo_folder / "brick_perspective.jpg"
    for method in ("vocabulary", "uniform", "wta"):
        assert main(["query", str(folder), str(outside), "--method", method, "--json"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["method"] == method
        assert "brick" in res["results"][0]["hits"][0]["path"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--method", "nope"], "unknown method"),
        (["--top", "0"], "--top"),
        (["--method", "learned"], "simile learn"),
    ],
)
def test_query_errors(indexed, folder, capsys, argv, message):
    code = main(["query", str(folder), str(folder / "brick.jpg"), *argv, "--json"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_query_unreadable_image_and_missing_index(indexed, folder, tmp_path, capsys):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"nope")
    assert main(["query", str(folder), str(bad), "--json"]) != 0
    out, err = capsys.readouterr()
    assert out == "" and "bad.jpg" in err and len(err.strip().splitlines()) == 1
    assert main(["query", str(folder), str(tmp_path / "missing.jpg")]) != 0
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    assert main(["query", str(empty), str(folder / "brick.jpg")]) != 0
    err = capsys.readouterr().err
    assert "simile index" in err and len(err.strip().splitlines()) == 1
    assert not (empty / ".simile").exists()


def test_duplicates_json(indexed, folder, capsys):
    assert main(["duplicates", str(folder), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    groups = [sorted(p.rsplit("/", 1)[-1] for p in g["paths"]) for g in res["groups"]]
    # edited copies of one picture (identical file, relit, cropped) group together
    assert any({"brick.jpg", "brick_copy.jpg", "brick_light.jpg"} <= set(g) for g in groups)
    assert not any("astronaut.jpg" in g and "brick.jpg" in g for g in groups)
    assert main(["duplicates", str(folder), "--threshold", "2"]) == 2


def test_eval_folders(indexed, folder, capsys):
    assert (
        main(["eval", str(folder), "--protocol", "folders", "--method", "vocabulary", "--json"])
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    for key in ("ns_score", "map", "normalized_rank", "knn_accuracy_1", "precision_at_4"):
        assert key in res
    # one folder = one label: every item is relevant
    assert res["map"] == pytest.approx(1.0) and res["normalized_rank"] == pytest.approx(0.0)
    assert main(["eval", str(folder), "--protocol", "ukbench", "--json"]) == 2
    assert "number" in capsys.readouterr().err


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_index_into_a_photo_folder_is_refused_and_deletes_nothing(tmp_path, demo_folder, capsys):
    album = tmp_path / "album"
    (album / "features").mkdir(parents=True)
    shutil.copy(demo_folder / "brick.jpg", album / "brick.jpg")
    shutil.copy(demo_folder / "astronaut.jpg", album / "features" / "astronaut.jpg")
    code, _out, err = _run(["index", str(album), "--index", str(album)], capsys)
    assert code == 2
    assert "not a simile index and is not empty" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in album.rglob("*")) == ["astronaut.jpg", "brick.jpg", "features"]


def test_empty_folder_argument_is_refused(capsys):
    code, _out, err = _run(["index", ""], capsys)
    assert code == 2 and "folder argument is empty" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_odd_entries_never_stop_a_folder(tmp_path, demo_folder, capsys):
    """A non-UTF-8 name is indexed, listed and queryable; a FIFO, a dangling link and a
    junk .jpg are reported with reasons, none stops the batch or hangs."""
    root = tmp_path / "odd"
    root.mkdir()
    raw = os.fsencode(root) + b"/Urlaub_M\xfcnchen.jpg"
    odd = os.fsdecode(raw)
    shutil.copy(demo_folder / "brick.jpg", odd)
    shutil.copy(demo_folder / "astronaut.jpg", root / "astronaut.jpg")
    os.mkfifo(root / "pipe.jpg")
    os.symlink(tmp_path / "missing.jpg", root / "dangling.jpg")
    (root / "junk.jpg").write_bytes(b"not an image at all" * 100)
    code, out, _err = _run(["index", str(root), "--json", "--jobs", "1"], capsys)
    assert code == 0
    last = _json_lines(out)[-1]
    assert last["indexed"] == 2
    assert [f["path"].rsplit("/", 1)[-1] for f in last["failed"]] == ["junk.jpg"]
    assert "does not start like" in last["failed"][0]["reason"]
    skipped = {f["path"].rsplit("/", 1)[-1]: f["reason"] for f in last["skipped"]}
    assert skipped == {
        "dangling.jpg": "dangling link (its target is missing)",
        "pipe.jpg": "not a regular file: a FIFO (named pipe)",
    }
    code, out, _err = _run(["query", str(root), odd, "--top", "2", "--json"], capsys)
    assert code == 0
    hits = json.loads(out.strip().splitlines()[-1])["results"][0]["hits"]
    assert os.fsencode(hits[0]["path"]) == raw  # exact bytes back through JSON
    code, out, _err = _run(["query", str(root), odd, "--top", "1"], capsys)
    assert code == 0 and "Urlaub_M" in out
