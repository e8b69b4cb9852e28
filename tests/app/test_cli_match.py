"""``simile match``: text and JSON output, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.cli import main


@pytest.fixture(scope="module")
def pair(demo_folder):
    a, b = demo_folder / "astronaut.jpg", demo_folder / "astronaut_rotate.jpg"
    if not (a.exists() and b.exists()):
        pytest.skip("demo images missing")
    return a, b


def test_json_last_line(pair, capsys):
    a, b = pair
    assert main(["match", str(a), str(b), "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    obj = json.loads(last)
    assert set(obj) == {"score", "matches"}
    assert isinstance(obj["score"], float) and 0.0 < obj["score"] <= 1.0
    assert obj["matches"], "expected correspondences"
    m = obj["matches"][0]
    assert set(m) == {"a", "b", "level", "weight"}
    assert len(m["a"]) == 2 and len(m["b"]) == 2
    assert isinstance(m["level"], int) and isinstance(m["weight"], float)
    levels = [x["level"] for x in obj["matches"]]
    assert levels == sorted(levels)


def test_same_image_scores_one_and_beats_other(pair, demo_folder, capsys):
    a, b = pair
    main(["match", str(a), str(a), "--json"])
    same = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert same["score"] == pytest.approx(1.0)
    assert all(m["a"] == m["b"] and m["level"] == 0 for m in same["matches"])
    main(["match", str(a), str(b), "--json"])
    view = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    other = demo_folder / "brick.jpg"
    main(["match", str(a), str(other), "--json"])
    unrelated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert view["score"] > unrelated["score"]


@pytest.mark.parametrize("method", ["uniform", "vocabulary"])
def test_text_output(pair, capsys, method):
    a, b = pair
    assert main(["match", str(a), str(b), "--method", method, "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "similarity" in out and "correspondences" in out and "level" in out


def test_unreadable_input_exit_2(tmp_path, pair, capsys):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    for argv, name in (
        ([str(pair[0]), str(bad)], "broken.jpg"),
        ([str(tmp_path / "missing.png"), str(pair[0])], "missing.png"),
    ):
        assert main(["match", *argv, "--json"]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and name in err[0] and err[0].startswith("simile: error:")
        assert captured.out == ""


def test_subprocess_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "app", "match", str(tmp_path / "nope.jpg"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "nope.jpg" in proc.stderr and "Traceback" not in proc.stderr
