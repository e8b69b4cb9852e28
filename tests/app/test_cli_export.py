"""``simile export FOLDER --xmp`` and ``simile learn --from-keywords`` (formats issue,
point 3), through the command line as a person runs them."""

from __future__ import annotations

import hashlib
import json

import pytest

from app.cli import main
from engine.io.xmp import merge_keywords, read_keywords, sidecar_path
from tests.app._gui import make_grouped_folder

pytest.importorskip("cv2")


def _digest(p) -> str:
    with open(p, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _out(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_export_categories_as_keywords_then_learn_from_keywords(tmp_path, capsys):
    folder = tmp_path / "photos"
    groups = make_grouped_folder(folder, per_group=3, seed=5)
    photos = sorted(str(p) for ps in groups.values() for p in ps)
    digests = {p: _digest(p) for p in photos}
    first = photos[0]
    merge_keywords(first, ["Familie|Oma"], "Familie")  # the person's own sidecar
    assert main(["export", str(folder), "--xmp"]) == 2  # no index yet: one line
    assert "no index" in capsys.readouterr().err
    assert main(["cluster", str(folder), "--k", "2", "--json"]) == 0
    capsys.readouterr()

    assert main(["export", str(folder), "--xmp", "--dry-run", "--json"]) == 0
    dry = _out(capsys)
    assert dry["dry_run"] and len(dry["changed"]) == len(photos) and not dry["refused"]
    assert [p.name for p in folder.rglob("*.xmp")] == [sidecar_path(first).name]

    assert main(["export", str(folder), "--xmp", "--json"]) == 0
    done = _out(capsys)
    assert len(done["changed"]) == len(photos)
    cats = {p: [k for k in read_keywords(p) if k.startswith("Simile|Category|")] for p in photos}
    assert all(len(v) == 1 for v in cats.values())
    by_folder = {}
    for name, ps in groups.items():
        by_folder[name] = {cats[str(p)][0] for p in ps}
    assert all(len(v) == 1 for v in by_folder.values())  # a subfolder is one category
    assert by_folder["g0"] != by_folder["g1"]
    assert "Familie|Oma" in read_keywords(first)  # the person's keyword is kept
    assert all(_digest(p) == d for p, d in digests.items())

    assert main(["export", str(folder), "--xmp"]) == 0  # again: nothing to change
    assert "changed 0 sidecar(s); 6 already up to date" in capsys.readouterr().out
    assert main(["export", str(folder), "--xmp", "--root", "A|B"]) == 2
    assert "--root" in capsys.readouterr().err

    # the person's keywords teach the learned similarity (Simile's own are ignored)
    assert main(["learn", str(folder), "--from-keywords", "--json"]) == 2
    assert "needs at least two keywords" in capsys.readouterr().err
    for name, ps in groups.items():
        for p in ps:
            merge_keywords(p, [f"Orte|{'Strand' if name == 'g0' else 'Berge'}"], "Orte")
    assert main(["learn", str(folder), "--from-keywords", "--json"]) == 0
    res = _out(capsys)
    assert res["source"] == "keywords" and res["images"] == len(photos)
