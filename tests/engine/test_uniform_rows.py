"""The uniform pyramids are not stored (engine.index.uniform_rows): a reader makes those
a query reads from the stored features, with the scores stored ones gave, to the last
bit; indexes of an earlier version, which stored them, answer the same and drop them on
their next update, whatever crash interrupts it."""

from __future__ import annotations

import shutil
import zipfile

import numpy as np
import pytest

from engine.collection import Collection
from engine.index import candidates, files
from engine.index.encode import pyramid_state, stacked, uniform_index
from engine.index.keys import DATA_STATE
from engine.index.manifest import read_snapshot
from engine.index.segments import commit_segments, holds_uniform, read_layout
from engine.index.uniform_rows import UniformRows

NAMES = (
    "astronaut", "brick", "coffee", "camera", "chelsea", "rocket", "coins", "grass",
    "gravel", "astronaut_crop", "brick_crop", "coffee_light",
)  # fmt: skip


@pytest.fixture(scope="module")
def small(tmp_path_factory, demo_folder):
    """Demo photos at a third of their size."""
    import cv2

    out = tmp_path_factory.mktemp("uniform_demo")
    for n in NAMES:
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(out / f"{n}.jpg"), cv2.resize(img, None, fx=0.35, fy=0.35))
    return out


def _index(folder):
    with Collection.open(folder) as col:
        gen = col.update(jobs=1)
        messages = []
        while True:
            try:
                messages.append(next(gen).message)
            except StopIteration as stop:
                return stop.value, messages


def _folder(small, path, names=NAMES):
    path.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(small / f"{n}.jpg", path / f"{n}.jpg")
    return path


def _members(folder):
    """Array names of every file of the search data."""
    snap = read_snapshot(folder / ".simile" / "states")
    out = []
    for f in snap.entries[DATA_STATE].files:
        with zipfile.ZipFile(snap.states_dir / f) as z:
            out += [n[: -len(".npy")] for n in z.namelist()]
    return out


def _data_bytes(folder):
    """Bytes of the files of the search data."""
    snap = read_snapshot(folder / ".simile" / "states")
    return sum((snap.states_dir / f).stat().st_size for f in snap.entries[DATA_STATE].files)


def _bits(a):
    return np.asarray(a).view(np.uint8).tobytes()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, small):
    folder = _folder(small, tmp_path_factory.mktemp("indexed") / "photos", NAMES[:8])
    _index(folder)
    _folder(small, folder, NAMES[8:])  # a second segment
    _index(folder)
    return folder


def test_no_uniform_pyramid_is_stored_and_the_column_indices_are_uint16(indexed):
    """(Fewer than 65,536 words and bins: the bags' and the pyramids' column indices are
    stored as uint16, the pyramids' values as float16.)"""
    members = _members(indexed)
    assert "ids" in members and "vocab.values" in members
    assert not [m for m in members if m.startswith("uniform.")]
    snap = read_snapshot(indexed / ".simile" / "states")
    assert not holds_uniform(snap)
    for f in snap.entries[DATA_STATE].files:
        with np.load(snap.states_dir / f) as z:
            assert z["bow.indices"].dtype == np.uint16 and z["bow.indptr"].dtype == np.int64
            assert z["vocab.cols"].dtype == np.uint16 and z["vocab.values"].dtype == np.float16


@pytest.mark.parametrize("mapped", [False, True])
def test_pyramids_made_when_read_are_the_encoded_ones_to_the_last_bit(indexed, mapped):
    """Every row, a few rows, one row, their sums, the kernel matrix: the same bits as
    :func:`uniform_index` of all the stored features in one batch."""
    with Collection.open(indexed, readonly=True) as col:
        col.searcher.map_data = mapped
        models, data = col.searcher.ensure()
        u = data.uniform
        assert isinstance(u, UniformRows) and len(u) == len(data.ids) == len(NAMES)
        want = uniform_index(models, stacked(col.store, data.ids))
        rows = np.array([5, 1])  # (fewer than a quarter of the rows: scored alone)
        got = u.encode_rows(rows)
        sub = want.subset(rows)
        assert _bits(got.indptr) == _bits(sub.indptr) and _bits(got.keys) == _bits(sub.keys)
        assert _bits(got.values) == _bits(sub.values)
        qk, qv = want.row(3)
        assert _bits(u.score(qk, qv, rows)) == _bits(want.score(qk, qv, rows))
        assert _bits(u.self_similarity()[rows]) == _bits(want.self_similarity()[rows])
        k, v = u.row(4)
        assert _bits(k) == _bits(want.row(4)[0]) and _bits(v) == _bits(want.row(4)[1])
        assert not u.loaded  # (a few rows: only those were encoded)
        assert _bits(u.score(qk, qv)) == _bits(want.score(qk, qv))
        assert u.loaded
        assert _bits(u.pairwise()) == _bits(want.pairwise())
        assert _bits(u.subset(rows).score(qk, qv)) == _bits(want.subset(rows).score(qk, qv))


def test_queries_other_than_uniform_encode_no_uniform_pyramid(indexed, monkeypatch):
    monkeypatch.setattr(candidates, "EXHAUSTIVE_LIMIT", 0)  # hashed: the candidates only
    # (12 photos: every row is one of the uniform method's 40 re-scored candidates)
    for method, loaded in (("hybrid", False), ("vocabulary", False), ("uniform", True)):
        with Collection.open(indexed, readonly=True) as col:
            hits = col.query(indexed / f"{NAMES[7]}.jpg", method=method, top=3)
            assert hits[0].path.name == f"{NAMES[7]}.jpg"
            assert col.searcher.data.uniform.loaded == loaded, method
    with Collection.open(indexed, readonly=True) as col:
        assert col.kernel_matrix("uniform").shape == (len(NAMES), len(NAMES))
        assert col.searcher.data.uniform.loaded


def _with_stored_uniform(folder, mixed=False):
    """Make ``folder``'s index one of the earlier version: every segment's uniform
    pyramids stored (in a file of their own, as a refit wrote them; with ``mixed``, the
    last segment rewritten with them among its arrays, as an update wrote it)."""
    with Collection.open(folder) as col:
        models, _ = col.searcher.ensure()
        snap = col.store.snapshot()
        layout = read_layout(snap)
        groups = []
        for i, ids in enumerate(layout.ids):
            ix = uniform_index(models, stacked(col.store, ids))
            if mixed and i == len(layout.ids) - 1:
                with np.load(snap.states_dir / layout.files[i][0]) as z:
                    arrays = {k: z[k] for k in z.files}
                arrays.update(pyramid_state("uniform", ix))
                groups.append((col.store.write_state_part(DATA_STATE, arrays),))
            else:
                part = col.store.write_state_part(DATA_STATE, pyramid_state("uniform", ix))
                groups.append((*layout.files[i], part))
        new = type(layout)(groups, *[getattr(layout, f) for f in ("ids", "keys")],
                           layout.n_words, layout.wta_codes, layout.rh_bytes)  # fmt: skip
        commit_segments(col.store, new, range(len(groups)), [])
    assert holds_uniform(read_snapshot(folder / ".simile" / "states"))


def _answers(folder, mapped=False):
    out = {}
    with Collection.open(folder, readonly=True) as col:
        col.searcher.map_data = mapped
        for method in ("uniform", "vocabulary", "hybrid", "wta"):
            for n in NAMES[:4]:
                hits = col.query(folder / f"{n}.jpg", method=method, top=6)
                out[method, n] = [(h.path.name, h.score) for h in hits]
    return out


@pytest.mark.parametrize("mixed", [False, True])
def test_an_index_of_the_earlier_version_answers_the_same_then_drops_them(
    indexed, tmp_path, mixed
):
    folder = tmp_path / "photos"
    shutil.copytree(indexed, folder)
    _index(folder)  # (the photos moved: the catalogue follows them)
    want = _answers(folder)
    _with_stored_uniform(folder, mixed)
    size = _data_bytes(folder)
    assert _answers(folder) == want and _answers(folder, mapped=True) == want  # read as it is
    summary, messages = _index(folder)  # migrated: no feature extracted again
    assert summary.indexed == 0 and summary.unchanged == len(NAMES)
    assert any("layout" in m for m in messages)
    assert not [m for m in _members(folder) if m.startswith("uniform.")]
    assert _data_bytes(folder) < size / 2
    assert _answers(folder) == want and _answers(folder, mapped=True) == want
    _, messages = _index(folder)  # nothing more to do
    assert not any("layout" in m for m in messages)


class Crash(Exception):
    pass


def test_a_crash_at_any_write_of_the_migration_leaves_an_index_that_answers(
    indexed, tmp_path, monkeypatch
):
    base = tmp_path / "base"
    shutil.copytree(indexed, base)
    _index(base)  # (the photos moved: the catalogue follows them)
    want = _answers(base)
    _with_stored_uniform(base, mixed=True)
    writes = []
    monkeypatch.setattr(files, "WRITE_HOOK", lambda where, path: writes.append((where, path)))
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    _index(probe)
    monkeypatch.setattr(files, "WRITE_HOOK", None)
    n_writes = sum(1 for where, _ in writes if where == "after")
    assert n_writes >= 2  # the rewritten segment, the manifest
    for k in range(1, n_writes + 1):
        folder = tmp_path / f"crash{k}"
        shutil.copytree(base, folder)
        seen = []

        def hook(where, path, k=k, seen=seen):
            if where == "after":
                seen.append(path)
                if len(seen) == k:
                    raise Crash

        monkeypatch.setattr(files, "WRITE_HOOK", hook)
        with pytest.raises(Crash):
            _index(folder)
        monkeypatch.setattr(files, "WRITE_HOOK", None)
        assert _answers(folder) == want, k  # the old version or the new one
        _index(folder)
        assert not holds_uniform(read_snapshot(folder / ".simile" / "states")), k
        assert _answers(folder) == want, k
