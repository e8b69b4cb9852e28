"""The search data as segments (engine.index.segments): an update writes what changed,
and the segments always hold what one whole build would."""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest

from engine.collection import Collection
from engine.index import files, segments
from engine.index.encode import encode
from engine.index.keys import DATA_STATE, MODELS_STATE
from engine.index.manifest import read_snapshot
from engine.index.segments import live_masks, plan_merges
from engine.index.states import SEGMENTS_KEY, segment_files
from engine.index.uniform_rows import UniformRows

NAMES = (
    "astronaut", "brick", "coffee", "camera", "chelsea", "rocket", "coins", "grass",
    "gravel", "astronaut_crop", "brick_crop", "coffee_light", "camera_crop",
    "chelsea_crop", "coins_crop", "grass_crop",
)  # fmt: skip


@pytest.fixture(scope="module")
def small(tmp_path_factory, demo_folder):
    """Demo photos at a third of their size (indexed many times here)."""
    import cv2

    out = tmp_path_factory.mktemp("seg_demo")
    for n in NAMES:
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(out / f"{n}.jpg"), cv2.resize(img, None, fx=0.35, fy=0.35))
    return out


def _add(small, folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")


def _index(folder):
    with Collection.open(folder) as col:
        gen = col.update(jobs=1)
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return stop.value


def _entry(folder):
    snap = read_snapshot(folder / ".simile" / "states")
    e = snap.entries[DATA_STATE]
    return snap, segment_files(snap.states_dir, DATA_STATE, e.scalars, e.files)


def _check_whole(folder):
    """A reader's search data is exactly the stored features encoded with the models,
    one row per usable photo; queries answer."""
    with Collection.open(folder, readonly=True) as col:
        models, data = col.searcher.ensure()
        ids = col.store.ids("ok")
        want = encode(models, ids, [f.descriptors for _, f in col.store.iter_features(ids)])
        assert np.array_equal(data.ids, want.ids)
        for part in ("vocab", "uniform"):
            x, y = getattr(data, part), getattr(want, part)
            assert np.array_equal(x.indptr, y.indptr)
            np.testing.assert_allclose(x.values, y.values, rtol=1e-6)
            assert np.array_equal(x.row_keys(slice(None)), y.row_keys(slice(None)))
        assert abs(data.bow - want.bow).max() < 1e-6
        assert np.array_equal(data.wta, want.wta) and np.array_equal(data.rh, want.rh)
        first = col.paths()[0]
        assert col.query(first, method="vocabulary", top=1)[0].path == first
        return data


def test_adding_photos_writes_one_segment_and_keeps_the_others(tmp_path, small):
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:6])
    _index(folder)
    snap0, groups0 = _entry(folder)
    models0 = snap0.entries[MODELS_STATE].files
    _add(small, folder, NAMES[6:8])
    summary = _index(folder)
    assert summary.indexed == 2
    snap1, groups1 = _entry(folder)
    # the first segment's files are the same files; one new file of two rows; the
    # models were not written again
    assert groups1[0] == groups0[0] and len(groups1) == 2 and len(groups1[1]) == 1
    assert snap1.entries[MODELS_STATE].files == models0
    with Collection.open(folder, readonly=True) as col:
        st = col.store.load_state(DATA_STATE)
        assert [len(s["ids"]) for s in st[SEGMENTS_KEY]] == [6, 2]
    _check_whole(folder)
    # nothing changed: nothing is written at all
    before = sorted(os.listdir(folder / ".simile" / "states"))
    gen = snap1.generation
    assert _index(folder).indexed == 0
    assert read_snapshot(folder / ".simile" / "states").generation == gen
    assert sorted(os.listdir(folder / ".simile" / "states")) == before


def test_removing_and_changing_photos_need_no_rewrite(tmp_path, small):
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:8])
    _index(folder)
    snap0, groups0 = _entry(folder)
    (folder / f"{NAMES[2]}.jpg").unlink()
    _index(folder)
    snap1, groups1 = _entry(folder)
    assert groups1 == groups0 and snap1.generation == snap0.generation  # catalogue only
    data = _check_whole(folder)
    assert data.ids.size == 7
    # a photo changed: same id, new content; its new row is a new segment, the old row
    # is dead (and never answers)
    shutil.copy(small / "coins_crop.jpg", folder / f"{NAMES[3]}.jpg")
    os.utime(folder / f"{NAMES[3]}.jpg", ns=(10**9, 10**9))
    _index(folder)
    _, groups2 = _entry(folder)
    assert groups2[0] == groups0[0] and len(groups2) == 2
    data = _check_whole(folder)
    assert data.ids.size == 7 and np.unique(data.ids).size == 7


def test_merges_keep_few_segments_and_the_same_data(tmp_path, small, monkeypatch):
    monkeypatch.setattr(segments, "MERGE_FACTOR", 2)
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:4])
    _index(folder)
    counts = []
    for name in NAMES[4:]:
        _add(small, folder, [name])
        _index(folder)
        _, groups = _entry(folder)
        counts.append(len(groups))
        _check_whole(folder)
    # one segment per tier at most (factor 2): log2(16) + 1
    assert max(counts) <= 5 and min(counts[4:]) < max(counts)
    # only files of the current version are left
    snap, _ = _entry(folder)
    left = set(os.listdir(folder / ".simile" / "states")) - {"MANIFEST.json"}
    assert left == snap.files()


def test_dead_rows_are_compacted(tmp_path, small):
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:8])
    _index(folder)
    _add(small, folder, NAMES[8:12])
    _index(folder)
    _, groups = _entry(folder)
    assert len(groups) == 2
    for n in NAMES[8:11]:  # 3 of the second segment's 4 rows die: it is rewritten
        (folder / f"{n}.jpg").unlink()
    _add(small, folder, NAMES[12:13])
    _index(folder)
    _, groups2 = _entry(folder)
    assert groups2[0] == groups[0] and groups[1] not in groups2
    with Collection.open(folder, readonly=True) as col:
        st = col.store.load_state(DATA_STATE)
        assert sum(len(s["ids"]) for s in st[SEGMENTS_KEY]) == 10  # no dead row stored
    _check_whole(folder)


class Crash(Exception):
    pass


@pytest.mark.parametrize("stage", ["before", "after"])
def test_a_crash_at_any_write_of_an_update_with_a_merge(tmp_path, small, monkeypatch, stage):
    """A crash (or a full disk) at each file write of an update that adds a segment and
    merges: the index opens and answers, and the next run completes it."""
    monkeypatch.setattr(segments, "MERGE_FACTOR", 2)
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:4])
    _index(folder)
    _add(small, folder, NAMES[4:5])
    _index(folder)  # two segments (4 and 1 rows)
    backup = tmp_path / "backup"
    shutil.copytree(folder / ".simile", backup)
    _add(small, folder, NAMES[5:6])  # a third: tier 0 holds 2, they merge
    writes = []

    def count(where, path):
        if where == "before":
            writes.append(path.name)

    monkeypatch.setattr(files, "WRITE_HOOK", count)
    _index(folder)
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    assert any(w.startswith("search.data.") for w in writes)
    for n in range(1, len(writes) + 1):
        shutil.rmtree(folder / ".simile")
        shutil.copytree(backup, folder / ".simile")
        seen = []
        exc = Crash() if stage == "after" else OSError(errno.ENOSPC, "No space left")

        def hook(where, path, n=n, exc=exc, seen=seen):
            if where == stage:
                seen.append(path.name)
                if len(seen) == n:
                    raise exc

        monkeypatch.setattr(files, "WRITE_HOOK", hook)
        with pytest.raises(type(exc)):
            _index(folder)
        monkeypatch.setattr(files, "WRITE_HOOK", None)
        data = _check_whole(folder)
        assert data.ids.size in (5, 6)
        _index(folder)
        assert _check_whole(folder).ids.size == 6


def test_plan_merges():
    f = segments.MERGE_FACTOR
    assert plan_merges([], []) == []
    assert plan_merges([1000, 3, 2], [1000, 3, 2]) == []
    small = [1] * f
    assert plan_merges([1000, *small], [1000, *small]) == list(range(1, f + 1))
    # a segment mostly dead is rewritten, an all-dead one is dropped unread
    assert plan_merges([1000, 4, 0], [1000, 10, 5]) == [1]
    assert plan_merges([400, 1000], [1000, 1000]) == [0]


def test_live_masks_newest_live_row_wins():
    ids = np.array([1, 2, 3, 5], np.int64)
    keys = np.array([10, 20, 30, 50], np.uint64)
    seg_ids = [np.array([1, 2, 3, 4]), np.array([3, 5]), np.array([2])]
    seg_keys = [np.array([10, 20, 31, 40], np.uint64), np.array([30, 50], np.uint64), None]
    m = live_masks(seg_ids, seg_keys, ids, keys)
    # 1 live in the first; 2: the third segment (no keys) is newer; 3: the old row's key is
    # stale; 4 is gone
    assert [x.tolist() for x in m] == [
        [True, False, False, False],
        [True, True],
        [True],
    ]


def test_a_reader_makes_the_uniform_pyramids_only_when_a_query_needs_them(tmp_path, small):
    """The uniform pyramids are not stored (engine.index.uniform_rows): a reader makes
    them from the features, for a query that reads them only."""
    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:6])
    _index(folder)
    _add(small, folder, NAMES[6:8])
    _index(folder)
    for method, loaded in (("hybrid", False), ("vocabulary", False), ("uniform", True)):
        with Collection.open(folder, readonly=True) as col:
            hits = col.query(folder / f"{NAMES[7]}.jpg", method=method, top=3)
            assert hits[0].path.name == f"{NAMES[7]}.jpg"
            uniform = col.searcher.data.uniform
            assert isinstance(uniform, UniformRows)
            assert uniform.loaded == loaded, method
    # the pyramids made are the live rows', in the data's order
    data = _check_whole(folder)
    assert data.uniform.loaded


def _open_state_files(folder):
    states = str(folder / ".simile" / "states")
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(states):
            out.append(target)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_closing_the_collection_lets_go_of_every_file(tmp_path, small):
    """A reader that reads the data keeps none of its files open; closing the collection
    closes what is left (an unmount, a deleted folder: nothing stays open), and the
    uniform pyramids cannot be made after that."""
    from engine.index.store_errors import StoreError

    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:6])
    _index(folder)
    col = Collection.open(folder, readonly=True)
    _, data = col.searcher.ensure()
    assert _open_state_files(folder) == []
    col.close()
    assert _open_state_files(folder) == []
    with pytest.raises(StoreError, match="closed"):
        data.uniform.whole()


def test_a_one_shot_reader_maps_the_data_and_still_finds_damage(tmp_path, small):
    """``map_data`` (``simile query``): the segment is memory-mapped, not read; the
    queries answer as a reader that reads it; a damaged byte is found (CRC) before use."""
    from engine.index.mapped import SegmentedImages
    from engine.index.store_errors import IndexCorruptError

    folder = tmp_path / "photos"
    _add(small, folder, NAMES[:8])
    _index(folder)
    want = {}
    with Collection.open(folder, readonly=True) as col:
        for n in NAMES[:3]:
            want[n] = [(h.path, h.score) for h in col.query(folder / f"{n}.jpg", top=5)]
    col = Collection.open(folder, readonly=True)
    col.searcher.map_data = True
    _, data = col.searcher.ensure()
    assert isinstance(data, SegmentedImages)
    (part,) = data.vocab.parts
    (bow,) = data.bow.parts
    for arr in (part.values, part.stored_columns[1], bow[1], bow[2]):
        assert not arr.flags.owndata and not arr.flags.writeable  # (read-only maps)
    for n in NAMES[:3]:
        assert [(h.path, h.score) for h in col.query(folder / f"{n}.jpg", top=5)] == want[n]
    col.close()
    # a flipped byte inside the vocabulary pyramids' values
    snap, groups = _entry(folder)
    import zipfile

    target = next(
        f
        for f in groups[0]
        if "vocab.values.npy" in zipfile.ZipFile(snap.states_dir / f).namelist()
    )
    with zipfile.ZipFile(snap.states_dir / target) as z:
        info = z.getinfo("vocab.values.npy")
    with open(snap.states_dir / target, "r+b") as fh:
        fh.seek(info.header_offset + 30 + len(info.filename) + 200)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    col = Collection.open(folder, readonly=True)
    col.searcher.map_data = True
    with pytest.raises(IndexCorruptError, match="damaged"):  # before any score is made
        col.searcher.ensure()
        col.query(folder / f"{NAMES[0]}.jpg", method="vocabulary", top=5)
    col.close()
