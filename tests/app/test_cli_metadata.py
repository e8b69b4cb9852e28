"""``simile index --json`` and ``simile query --json`` carry the photos' metadata."""

import json

import pytest

from app.cli import main
from tests.engine.test_metadata import _exif, _jpeg


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "photos"
    _jpeg(root / "canon.jpg", 0, _exif(), size=128)
    _jpeg(root / "canon_copy.jpg", 0, _exif(), size=128)
    _jpeg(root / "plain.jpg", 5, size=128)
    return root


def test_index_and_query_json_carry_metadata(folder, capsys):
    assert main(["index", str(folder), "--json", "--jobs", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["metadata"] == {
        "read": 3, "date_taken": 2, "camera": 2, "gps": 2, "read_now": 3
    }  # fmt: skip
    q = folder / "canon.jpg"
    assert main(["query", str(folder), str(q), "--top", "3", "--json", "--method", "wta"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    hits = {h["path"].rsplit("/", 1)[-1]: h["metadata"] for h in res["results"][0]["hits"]}
    assert set(hits) == {"canon.jpg", "canon_copy.jpg", "plain.jpg"}
    canon = hits["canon.jpg"]
    assert canon["date_taken"] == "2021-06-05T14:03:22+02:00"
    assert (canon["make"], canon["model"], canon["iso"]) == ("Canon", "Canon EOS 5D Mark IV", 400)
    assert canon["latitude"] < 0 and canon["width"] == 128
    assert hits["plain.jpg"]["date_taken"] is None and hits["plain.jpg"]["height"] == 128
