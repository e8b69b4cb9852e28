"""Damaged index files: a one-line error naming the file and the remedy, then
``simile index --repair`` gives the answers of a clean build (the CLI end to end)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import engine.index.files as files
from app.cli import main
from engine.index.keys import DATA_STATE, MODELS_STATE
from engine.index.manifest import MANIFEST_NAME, read_snapshot
from engine.index.store import IndexStore

NAMES = ("astronaut", "astronaut_crop", "brick", "brick_crop", "coffee", "coffee_light",
         "camera", "chelsea")  # fmt: skip
QUERIES = ("brick", "coffee", "chelsea")


@pytest.fixture(scope="module")
def small(tmp_path_factory, demo_folder):
    """Half-size copies of a few demo photos."""
    import cv2

    out = tmp_path_factory.mktemp("small_photos")
    for n in NAMES:
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(out / f"{n}.jpg"), cv2.resize(img, None, fx=0.5, fy=0.5))
    return out


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.strip()


def _indexed(tmp_path, small, name="photos"):
    folder = tmp_path / name
    shutil.copytree(small, folder)
    assert main(["index", str(folder), "--jobs", "1"]) == 0
    return folder


def _answers(capsys, folder):
    code, out, err = _cli(
        capsys, "query", folder, *[folder / f"{n}.jpg" for n in QUERIES], "--json", "--top", "8"
    )
    if code:
        return code, err
    results = json.loads(out.strip().splitlines()[-1])["results"]
    return [[(Path(h["path"]).name, h["score"]) for h in r["hits"]] for r in results]


@pytest.fixture(scope="module")
def clean(tmp_path_factory, small):
    """What a clean build answers."""
    folder = _indexed(tmp_path_factory.mktemp("clean"), small)
    code = main(["query", str(folder), *[str(folder / f"{n}.jpg") for n in QUERIES], "--json",
                 "--top", "8"])  # fmt: skip
    assert code == 0
    return folder


def _overwrite(path, at, data=b"garbage!"):
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


def _largest(folder, pattern):
    return max(folder.glob(pattern), key=os.path.getsize)


def _data_file(idx, member):
    """The search data file holding array ``member``."""
    import zipfile

    for f in sorted((idx / "states").glob("search.data.*.npz")):
        with zipfile.ZipFile(f) as z:
            if f"{member}.npy" in z.namelist():
                return f
    raise AssertionError(member)


def _to_legacy(idx):
    """Rewrite the states the way indexes before the manifest kept them."""
    states = idx / "states"
    for name, e in read_snapshot(states).entries.items():
        doc = {**e.scalars, "__npz__": e.files[0], "__parts__": list(e.files[1:])}
        (states / f"{name}.json").write_text(json.dumps(doc))
    os.remove(states / MANIFEST_NAME)


DAMAGE = {
    "catalog": lambda i: _overwrite(i / "catalog.sqlite", 0, b"this is no SQLite file"),
    "catalog missing": lambda i: os.remove(i / "catalog.sqlite"),
    "chunk bytes": lambda i: _overwrite(_largest(i / "features", "c*.npy"), 400),
    "chunk header": lambda i: _overwrite(_largest(i / "features", "c*.npy"), 10, b"x" * 16),
    "chunk missing": lambda i: os.remove(_largest(i / "features", "c*.npy")),
    "data npz": lambda i: _overwrite(_data_file(i, "vocab.values"), 3000),
    "data npz truncated": lambda i: os.truncate(_largest(i / "states", "search.data.*.npz"), 600),
    "models npz missing": lambda i: os.remove(next((i / "states").glob("search.models.*.npz"))),
    "manifest": lambda i: _overwrite(i / "states" / MANIFEST_NAME, 40, b"}}"),
    "manifest bit": lambda i: _overwrite(i / "states" / MANIFEST_NAME, 120, b"7"),
    "legacy state json": lambda i: (
        _to_legacy(i),
        _overwrite(i / "states" / f"{DATA_STATE}.json", 0, b"{{"),
    ),
    "marker": lambda i: _overwrite(i / "SIMILE-INDEX", 0, b"xx"),
}


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_file_is_one_line_then_repair_answers_like_a_clean_build(
    kind, tmp_path, small, clean, capsys
):
    reference = _answers(capsys, clean)
    folder = _indexed(tmp_path, small)
    idx = folder / ".simile"
    DAMAGE[kind](idx)
    got = _answers(capsys, folder)
    if kind == "marker":  # readers do not need the marker
        assert got == reference
    else:
        code, err = got
        assert code != 0 and len(err.splitlines()) == 1, err
        assert err.startswith("simile: error: ") and str(idx) in err
        assert f"run 'simile index {folder} --repair'" in err
        assert "Traceback" not in err
    code, _, err = _cli(capsys, "index", folder, "--jobs", "1")
    assert "Traceback" not in err and (code == 0 or len(err.splitlines()) == 1), err
    code, _, err = _cli(capsys, "index", folder, "--repair", "--jobs", "1")
    assert code == 0, err
    assert all(line.startswith("simile: repair: ") for line in err.splitlines()), err
    assert _answers(capsys, folder) == reference


def test_a_lost_catalogue_never_answers_with_the_wrong_photos(tmp_path, small, clean, capsys):
    """Losing only catalog.sqlite of an index built in two steps (so a rebuilt catalogue
    numbers the photos otherwise): queries are refused until it is repaired, and the old
    search data never answers for the new ids."""
    reference = _answers(capsys, clean)
    folder = tmp_path / "photos"
    folder.mkdir()
    for step in (NAMES[::2], NAMES[1::2]):
        for n in step:
            shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")
        assert main(["index", str(folder), "--jobs", "1"]) == 0
    idx = folder / ".simile"
    os.remove(idx / "catalog.sqlite")
    code, err = _answers(capsys, folder)
    assert code == 2 and "catalogue" in err and "missing" in err and "--repair" in err
    code, _, err = _cli(capsys, "index", folder, "--jobs", "1")
    assert code == 2 and "--repair" in err
    assert _cli(capsys, "index", folder, "--repair", "--jobs", "1")[0] == 0
    assert _answers(capsys, folder) == reference  # a clean build of the same photos
    with IndexStore.open(idx, readonly=True) as s:
        snap = s.snapshot()
        assert snap.catalog == s.catalog_id and snap.has(DATA_STATE)


def test_full_disk_during_index_is_one_line_and_keeps_the_previous_version(
    tmp_path, small, capsys, monkeypatch
):
    folder = tmp_path / "photos"
    folder.mkdir()
    for n in NAMES[:5]:
        shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")
    assert main(["index", str(folder), "--jobs", "1"]) == 0
    with IndexStore.open(folder / ".simile", readonly=True) as s:
        old = s.load_states([MODELS_STATE, DATA_STATE])
    for n in NAMES[5:]:
        shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")

    def full(where, path):
        if where == "before" and path.name == MANIFEST_NAME:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(files, "WRITE_HOOK", full)
    code, _, err = _cli(capsys, "index", folder, "--jobs", "1")
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "no space left" in err and str(folder / ".simile") in err
    with IndexStore.open(folder / ".simile", readonly=True) as s:  # the previous version
        now = s.load_states([MODELS_STATE, DATA_STATE])
    for name in (MODELS_STATE, DATA_STATE):
        assert set(now[name]) == set(old[name])
        for key, value in old[name].items():
            same = np.array_equal(value, now[name][key]) if isinstance(value, np.ndarray) else None
            assert same if same is not None else value == now[name][key], (name, key)
    answers = _answers(capsys, folder)  # it answers, the new photos encoded in memory
    assert answers[0][0] == ("brick.jpg", pytest.approx(answers[0][0][1]))
    assert {h[0] for h in answers[0]} == {f"{n}.jpg" for n in NAMES}
    assert main(["index", str(folder), "--jobs", "1"]) == 0
