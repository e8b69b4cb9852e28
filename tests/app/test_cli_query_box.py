"""``simile query FOLDER IMAGE --box x,y,w,h``: search by region from the command line."""

import json

import pytest

from app.cli import main
from tests._composite import H, region_folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory, demo_folder):
    folder, query, left, width = region_folder(tmp_path_factory.mktemp("cli_box"), demo_folder)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["index", str(folder), "--jobs", "1", "--json"]) == 0
    return folder, query, left, width


def _json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_box_json(setup, capsys):
    folder, query, left, width = setup
    argv = ["query", str(folder), str(query), "--top", "4", "--json"]
    assert main([*argv, "--box", f"{left},0,{width - left},{H}"]) == 0
    res = _json(capsys.readouterr().out)["results"][0]
    assert res["box"] == [left, 0, width - left, H]
    assert {h["path"].rsplit("/", 1)[-1].split("_")[0].removesuffix(".jpg")
            for h in res["hits"]} == {"coffee"}  # fmt: skip
    assert main([*argv, "--box", f"0,0,{left}.0,{H}"]) == 0
    res = _json(capsys.readouterr().out)["results"][0]
    assert res["box"] == [0, 0, left, H]
    assert res["hits"][0]["path"].rsplit("/", 1)[-1].startswith("astronaut")
    # without --box: "box" is null; a box partly off the photo is cut to it
    assert main(argv) == 0
    assert _json(capsys.readouterr().out)["results"][0]["box"] is None
    assert main([*argv, f"--box=-20,-10,{left + 20}.5,{H + 50}"]) == 0
    assert _json(capsys.readouterr().out)["results"][0]["box"] == [0, 0, left + 0.5, H]


def test_box_text(setup, capsys):
    folder, query, left, _width = setup
    assert main(["query", str(folder), str(query), "--top", "2", "--box", f"0,0,{left},{H}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{query}  (box 0,0,{left},{H})"
    assert "astronaut" in out[1]


@pytest.mark.parametrize(
    "box, message",
    [
        ("1,2,3", "--box: box must be x,y,w,h (4 numbers), got '1,2,3'"),
        ("a,b,c,d", "--box: box must be x,y,w,h (4 numbers)"),
        ("0,0,0,10", "--box: the box's width and height must be > 0"),
        ("0,0,nan,10", "--box: box must be finite numbers"),
        ("9000,0,10,10", "lies outside the photo"),
        ("3,3,5,5", "the box holds only"),
    ],
)
def test_box_errors_are_one_line(setup, capsys, box, message):
    folder, query, _left, _width = setup
    assert main(["query", str(folder), str(query), "--box", box, "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simile: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
