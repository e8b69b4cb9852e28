"""A path-limited update (``Collection.update(paths=...)``, ``simile index FOLDER --only``)
looks at the paths it is told of only, and leaves the index a whole rescan would."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from engine.collection import Collection
from engine.core.progress import run_to_end
from engine.index import files
from engine.index.ingest import OutsideFolderError

NAMES = (
    "astronaut", "brick", "coffee", "camera", "chelsea", "rocket", "coins", "grass",
    "gravel", "retina",
)  # fmt: skip
EXTRA = ("astronaut_crop", "coins_crop")


def _update(folder, paths=None):
    with Collection.open(folder) as col:
        return run_to_end(col.update(jobs=1, paths=paths))


def _state(folder):
    """What the index answers, with paths relative to ``folder``: the usable photos,
    their search rows' keys and the hits of two queries (paths and scores)."""
    with Collection.open(folder, readonly=True) as col:
        paths = [p.relative_to(folder).as_posix() for p in col.paths()]
        col.searcher.ensure()
        keys = col.searcher.data_keys.tolist()
        hits = []
        for q in ("astronaut.jpg", "coffee.jpg"):
            for method in ("hybrid", "vocabulary"):
                hs = col.query(folder / q, method=method, top=5)
                hits.append([(h.path.relative_to(folder).as_posix(), h.score) for h in hs])
    return paths, keys, hits


@pytest.fixture(scope="module")
def small(tmp_path_factory, demo_folder):
    """Small copies of some demo photos (fast to index)."""
    import cv2

    root = tmp_path_factory.mktemp("paths")
    out = root / "small"
    out.mkdir()
    for n in (*NAMES, *EXTRA):
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(out / f"{n}.jpg"), cv2.resize(img, None, fx=0.35, fy=0.35))
    base = root / "base"
    base.mkdir()
    for n in NAMES:
        shutil.copy(out / f"{n}.jpg", base / f"{n}.jpg")
    _update(base)
    return out, base


def _copy(base, to):
    """A copy of the indexed folder ``base``, its index made its own (the photos found
    moved: their rows keep their features)."""
    shutil.copytree(base, to)
    assert _update(to).indexed == 0
    return to


def _change(folder, small):
    """Add two photos, remove one, change one; returns the paths touched."""
    for n in EXTRA:
        shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")
    (folder / "brick.jpg").unlink()
    shutil.copy(small / "grass.jpg", folder / "gravel.jpg")  # new content
    return [folder / f"{n}.jpg" for n in (*EXTRA, "brick", "gravel")]


def test_a_path_limited_update_gives_what_a_rescan_gives(small, tmp_path):
    out, base = small
    whole = _copy(base, tmp_path / "whole")
    only = _copy(base, tmp_path / "only")
    _change(whole, out)
    touched = _change(only, out)
    s_whole = _update(whole)
    s_only = _update(only, touched)
    assert (s_only.indexed, s_only.removed) == (s_whole.indexed, s_whole.removed) == (3, 1)
    assert s_only.total == s_whole.total
    assert _state(only) == _state(whole)
    # nothing else changed: a rescan of the path-limited index finds nothing to do
    again = _update(only)
    assert (again.indexed, again.removed) == (0, 0)


def test_removing_through_the_path_limited_route(small, tmp_path):
    _, base = small
    folder = _copy(base, tmp_path / "photos")
    (folder / "camera.jpg").unlink()
    (folder / "rocket.jpg").unlink()
    summary = _update(folder, [folder / "camera.jpg", str(folder / "rocket.jpg")])
    assert summary.removed == 2 and summary.indexed == 0
    paths, _, hits = _state(folder)
    assert "camera.jpg" not in paths and "rocket.jpg" not in paths
    assert len(paths) == len(NAMES) - 2
    assert all(p not in ("camera.jpg", "rocket.jpg") for hs in hits for p, _ in hs)
    # a path the index does not know, and that is not there, changes nothing
    summary = _update(folder, [folder / "never_there.jpg"])
    assert (summary.indexed, summary.removed) == (0, 0)


def test_a_folder_given_is_scanned(small, tmp_path):
    out, base = small
    folder = _copy(base, tmp_path / "photos")
    sub = folder / "trip"
    sub.mkdir()
    for n in EXTRA:
        shutil.copy(out / f"{n}.jpg", sub / f"{n}.jpg")
    assert _update(folder, [sub]).indexed == 2
    shutil.rmtree(sub)
    assert _update(folder, [sub]).removed == 2


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
def test_names_that_are_not_utf8_come_and_go_through_the_path_limited_route(small, tmp_path):
    """A file and a folder whose names are not UTF-8 (stored as bytes): indexed when
    given, forgotten when given once gone (the Duplicates view's Trash… gives the index
    the file it moved; it stopped the whole update with "surrogates not allowed")."""
    out, base = small
    folder = _copy(base, tmp_path / "photos")
    odd = os.fsdecode(os.fsencode(folder) + b"/caf\xe9.jpg")
    sub = os.fsdecode(os.fsencode(folder) + b"/M\xfcnchen")
    shutil.copy(out / "astronaut_crop.jpg", odd)
    os.mkdir(sub)
    shutil.copy(out / "coins_crop.jpg", os.path.join(sub, "x.jpg"))
    assert _update(folder, [odd, sub]).indexed == 2
    with Collection.open(folder, readonly=True) as col:
        below = col.searcher.store.known_stats(under=str(folder))
    assert odd in below and os.path.join(sub, "x.jpg") in below
    os.unlink(odd)
    shutil.rmtree(sub)
    summary = _update(folder, [odd, sub])
    assert (summary.indexed, summary.removed) == (0, 2)
    assert _update(folder).removed == 0  # (a rescan agrees)


def test_a_path_outside_the_folder_is_refused(small, tmp_path):
    out, base = small
    folder = _copy(base, tmp_path / "photos")
    with Collection.open(folder) as col:
        gen0 = col.store.generation
        with pytest.raises(OutsideFolderError, match="not inside the folder"):
            for _ in col.update(jobs=1, paths=[out / "astronaut_crop.jpg"]):
                pass
        with pytest.raises(ValueError, match="not inside the folder"):
            for _ in col.update(jobs=1, paths=[folder / ".." / "small" / "coins_crop.jpg"]):
                pass
        assert col.store.generation == gen0  # nothing written


def test_a_crash_mid_update_leaves_an_index_that_opens_and_completes(small, tmp_path, monkeypatch):
    """A crash as the new segment of the search data is written (after the catalogue's
    commit): the index opens and answers for what it holds, and the next path-limited
    update completes it into what an uninterrupted one gives."""
    out, base = small
    done = _copy(base, tmp_path / "done")
    crashed = _copy(base, tmp_path / "crashed")
    _update(done, _change(done, out))
    touched = _change(crashed, out)

    def crash(when, final):
        if when == "before" and final.name.startswith("search.data"):
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(files, "WRITE_HOOK", crash)
    with pytest.raises(KeyboardInterrupt):
        _update(crashed, touched)
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    with Collection.open(crashed, readonly=True) as col:  # opens, and answers
        assert col.query(crashed / "astronaut_crop.jpg", method="vocabulary", top=3)
    summary = _update(crashed, touched)  # the catalogue was done: only the data is left
    assert (summary.indexed, summary.removed) == (0, 0)
    assert _state(crashed) == _state(done)


def test_the_cli_only_option(small, tmp_path, capsys):
    from app.cli import main

    out, base = small
    folder = _copy(base, tmp_path / "photos")
    touched = _change(folder, out)
    rc = main(["index", str(folder), "--jobs", "1", "--json", "--only", *map(str, touched)])
    assert rc == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (last["indexed"], last["removed"]) == (3, 1)
    rc = main(["index", str(folder), "--only", str(out / "coins_crop.jpg")])
    assert rc != 0
    assert "not inside the folder" in capsys.readouterr().err


def test_keys_of_a_path_limited_update_are_the_catalogue_s(small, tmp_path):
    out, base = small
    folder = _copy(base, tmp_path / "photos")
    _update(folder, _change(folder, out))
    with Collection.open(folder, readonly=True) as col:
        col.searcher.ensure()
        ids, keys = col.store.content_keys()
        assert np.array_equal(col.searcher.data.ids, ids)
        assert np.array_equal(col.searcher.data_keys, keys)


def test_only_skips_the_catalogue_wide_upkeep(small, tmp_path, monkeypatch, capsys):
    """``simile index --only`` reads the rows of its photos only: no check of every page
    of the catalogue, no deletion of orphans (judged by a catalogue not checked), no
    compaction; the next whole run does them. The index it leaves is the same."""
    from app.cli import main
    from engine.index import catalog, store

    out, base = small
    folder = _copy(base, tmp_path / "photos")
    checks, cleanups = [], []
    monkeypatch.setattr(catalog, "check_pages", lambda conn, cat: checks.append(cat))
    gc = store.IndexStore.gc
    monkeypatch.setattr(store.IndexStore, "gc", lambda self: cleanups.append(1) or gc(self))
    compact = store.IndexStore.compact
    compacts = []
    monkeypatch.setattr(
        store.IndexStore, "compact", lambda self, **kw: compacts.append(1) or compact(self, **kw)
    )
    orphan = files.tmp_path(folder / ".simile" / "features" / "chunk.npy")  # (a crash's)
    orphan.write_bytes(b"left by a crash")
    touched = _change(folder, out)
    assert main(["index", str(folder), "--jobs", "1", "--only", *map(str, touched)]) == 0
    assert (checks, cleanups, compacts) == ([], [], [])
    assert orphan.exists()
    assert main(["index", str(folder), "--jobs", "1"]) == 0
    assert len(checks) == 1 and cleanups and compacts
    assert not orphan.exists()
    capsys.readouterr()
    other = _copy(base, tmp_path / "whole")
    _update(other, _change(other, out))
    assert _state(folder)[0] == _state(other)[0]
