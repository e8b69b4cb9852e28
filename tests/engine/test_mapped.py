"""A one-shot reader maps every segment (engine.index.mapped) and answers exactly as a
reader that reads and concatenates them: same hits, same order, same scores."""

from __future__ import annotations

import os
import shutil
import struct
import zipfile

import numpy as np
import pytest

from engine.collection import Collection
from engine.index import candidates
from engine.index.encode import stored_query
from engine.index.keys import DATA_STATE
from engine.index.manifest import read_snapshot
from engine.index.mapped import SegmentedImages
from engine.index.states import segment_files
from engine.index.store_errors import IndexCorruptError

NAMES = (
    "astronaut", "brick", "coffee", "camera", "chelsea", "rocket", "coins", "grass",
    "gravel", "astronaut_crop", "brick_crop", "coffee_light", "camera_crop",
    "chelsea_crop", "coins_crop", "grass_crop",
)  # fmt: skip
METHODS = ("hybrid", "vocabulary", "uniform", "wta")


def _index(folder):
    with Collection.open(folder) as col:
        for _ in col.update(jobs=1):
            pass


def _groups(folder):
    snap = read_snapshot(folder / ".simile" / "states")
    e = snap.entries[DATA_STATE]
    return snap, segment_files(snap.states_dir, DATA_STATE, e.scalars, e.files)


@pytest.fixture(scope="module")
def segmented(tmp_path_factory, demo_folder):
    """An index of four segments made by adding photos in three batches, then removing
    one photo and changing another (its old row is dead, its new one a segment)."""
    import cv2

    root = tmp_path_factory.mktemp("mapped")
    small = root / "small"
    small.mkdir()
    for n in NAMES:
        img = cv2.imread(str(demo_folder / f"{n}.jpg"))
        cv2.imwrite(str(small / f"{n}.jpg"), cv2.resize(img, None, fx=0.35, fy=0.35))
    folder = root / "photos"
    folder.mkdir()
    for batch in (NAMES[:7], NAMES[7:11], NAMES[11:14]):
        for n in batch:
            shutil.copy(small / f"{n}.jpg", folder / f"{n}.jpg")
        _index(folder)
    (folder / f"{NAMES[2]}.jpg").unlink()
    shutil.copy(small / "grass_crop.jpg", folder / f"{NAMES[9]}.jpg")  # changed content
    os.utime(folder / f"{NAMES[9]}.jpg", ns=(10**9, 10**9))
    _index(folder)
    _, groups = _groups(folder)
    assert len(groups) == 4
    return folder, small


def _read(folder):
    return Collection.open(folder, readonly=True)


def _mapped(folder):
    col = Collection.open(folder, readonly=True)
    col.searcher.map_data = True
    return col


def _answers(col, queries, method, box=None, top=20):
    return [
        [(h.path, h.score, h.probability, h.label)
         for h in col.query(q, method=method, top=top, box=box)]
        for q in queries
    ]  # fmt: skip


@pytest.mark.parametrize("hashed", [False, True])
def test_mapped_segments_answer_exactly_as_the_read_data(segmented, monkeypatch, hashed):
    """Every method, photos inside and outside the folder, and a search by region: the
    same hits in the same order with the same scores, exhaustive and through candidates
    (a candidate set smaller than the collection)."""
    folder, small = segmented
    if hashed:
        monkeypatch.setattr(candidates, "EXHAUSTIVE_LIMIT", 0)
        monkeypatch.setattr(candidates, "MIN_CANDIDATES", 5)
        monkeypatch.setattr(candidates, "CANDIDATE_FRACTION", 0.3)
    queries = [
        folder / f"{NAMES[0]}.jpg",
        folder / f"{NAMES[9]}.jpg",  # the changed photo
        folder / f"{NAMES[12]}.jpg",
        small / f"{NAMES[15]}.jpg",  # not in the folder
        small / f"{NAMES[2]}.jpg",  # removed from the folder
    ]
    with _read(folder) as ref, _mapped(folder) as col:
        _, data = col.searcher.ensure()
        assert isinstance(data, SegmentedImages)
        assert len(data.vocab.parts) == 4 and data.ids.size == 13
        top = 5 if hashed else 20  # (hashed: 5 candidates of 13 scored)
        box = (40, 30, 120, 100)
        for method in METHODS:
            want = _answers(ref, queries, method, top=top)
            assert len(want[0]) == min(top, 13)
            assert _answers(col, queries, method, top=top) == want, method
            if hashed:
                assert col.searcher.last_scored < data.ids.size
            want = _answers(ref, queries[:2], method, box, top)
            assert _answers(col, queries[:2], method, box, top) == want, method


def test_the_mapped_data_is_the_read_data(segmented):
    """Row for row: ids, hash codes, bags of words, pyramid scores of any rows (in any
    order) and self-similarities are those of the concatenated data, bit for bit."""
    folder, _ = segmented
    rng = np.random.default_rng(0)
    with _read(folder) as ref, _mapped(folder) as col:
        _, want = ref.searcher.ensure()
        _, got = col.searcher.ensure()
        assert np.array_equal(got.ids, want.ids)
        assert np.array_equal(got.wta, want.wta) and np.array_equal(got.rh, want.rh)
        assert got.bow.shape == want.bow.shape and got.bow.nnz == want.bow.nnz
        x = rng.random(want.bow.shape[1]).astype(np.float32)
        assert np.array_equal(got.bow @ x, want.bow @ x)
        rows = rng.permutation(want.ids.size)[:7]
        assert (got.bow[rows] != want.bow[rows]).nnz == 0
        assert (got.bow.copy() != want.bow).nnz == 0  # (the whole matrix, when asked)
        for name in ("vocab", "uniform"):
            g, w = getattr(got, name), getattr(want, name)
            for i in range(want.ids.size):
                assert all(np.array_equal(a, b) for a, b in zip(g.row(i), w.row(i), strict=True))
                qk, qv = w.row(i)
                assert np.array_equal(g.score(qk, qv, rows), w.score(qk, qv, rows))
            self_sim = w.self_similarity()
            assert np.array_equal(g.self_similarity()[rows], self_sim[rows])
            assert np.array_equal(np.asarray(g.self_similarity()), self_sim)
        for i in range(want.ids.size):  # a photo's stored row as its query
            a, b = stored_query(got, i), stored_query(want, i)
            (ka, va), (kb, vb) = a.vocab.row(0), b.vocab.row(0)
            assert np.array_equal(ka, kb) and np.array_equal(va, vb)
            assert (a.bow != b.bow).nnz == 0 and a.bow.shape == (1, want.bow.shape[1])
            assert np.array_equal(a.wta, b.wta) and np.array_equal(a.rh, b.rh)


def _flip(path, at):
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))


def _member_at(folder, member, offset=200):
    """A byte inside ``member`` of the largest segment's files."""
    snap, groups = _groups(folder)
    for f in groups[0]:
        with zipfile.ZipFile(snap.states_dir / f) as z:
            if f"{member}.npy" in z.namelist():
                info = z.getinfo(f"{member}.npy")
                return snap.states_dir / f, info.header_offset + 30 + len(info.filename) + offset
    raise AssertionError(member)


@pytest.mark.parametrize(
    ("member", "method", "at_open"),
    [
        ("ids", "vocabulary", True),  # read whole when mapped: checked at once
        ("rh", "vocabulary", True),
        ("bow.data", "wta", False),  # checked before the candidate search reads it
        ("vocab.cols", "vocabulary", False),
        ("he.sigs", "hybrid", False),  # the hits' blocks, checked as they are gathered
        ("he.words", "hybrid", False),
    ],
)
def test_a_damaged_member_is_found_before_it_is_used(
    segmented, tmp_path, monkeypatch, member, method, at_open
):
    folder, _ = segmented
    monkeypatch.setattr(candidates, "EXHAUSTIVE_LIMIT", 0)  # (the bags are read then)
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    path, at = _member_at(copy, member)
    _flip(path, at)
    col = _mapped(copy)
    try:
        if at_open:
            with pytest.raises(IndexCorruptError, match=f"damaged .*{path.name}.*CRC"):
                col.searcher.ensure()
            return
        col.searcher.ensure()
        if method == "uniform":  # the others answer, unaware of the damage
            assert col.query(copy / f"{NAMES[0]}.jpg", method="vocabulary", top=3)
        with pytest.raises(IndexCorruptError, match=f"damaged .*{path.name}.*CRC"):
            col.query(copy / f"{NAMES[0]}.jpg", method=method, top=3)
    finally:
        col.close()


def test_a_mapped_reader_gathers_the_hits_words_and_signatures(segmented, monkeypatch):
    """The words and signatures of the stored descriptors, gathered from the mapped
    segments for any rows in any order, are those of the data read into memory; the
    Hamming stage of a mapped reader reads no descriptor and scores the same."""
    from engine.index import selective

    folder, _ = segmented
    with _read(folder) as ref, _mapped(folder) as col:
        models, data = col.searcher.ensure()
        _, mem = ref.searcher.ensure()
        assert isinstance(data, SegmentedImages) and data.words is not None
        assert np.array_equal(data.ids, mem.ids)
        rows = np.array([12, 0, 5, 7, 5])
        got, want = data.held_words(rows), mem.held_words(rows)
        assert got[0].shape[0] > 0 and got[0].dtype == np.int32
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a, b)
        reads = []
        store_type = type(col.searcher.store)
        real = store_type.stacked_descriptors

        def spy(self, ids):
            reads.append(len(ids))
            return real(self, ids)

        feats = col.searcher.query_features(folder / f"{NAMES[0]}.jpg")[0]
        every = np.arange(data.ids.size)
        monkeypatch.setattr(store_type, "stacked_descriptors", spy)
        h = selective.hamming_scores(models, col.searcher.store, data, feats, every)
        assert reads == [] and h.max() > 0
        assert np.array_equal(
            h, selective.hamming_scores(models, ref.searcher.store, mem, feats, every)
        )


def test_a_truncated_segment_is_found_when_it_is_mapped(segmented, tmp_path):
    folder, _ = segmented
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    snap, groups = _groups(copy)
    path = snap.states_dir / groups[-1][0]
    os.truncate(path, os.path.getsize(path) - 100)
    with _mapped(copy) as col, pytest.raises(IndexCorruptError, match=path.name):
        col.searcher.ensure()


def test_photos_the_data_lacks_are_encoded_in_memory(segmented, tmp_path):
    """An update interrupted between the catalogue's commit and the data's leaves photos
    the search data does not hold: a mapped reader encodes them in memory, as a reader
    that reads the data does, and answers the same."""
    folder, small = segmented
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    states = copy / ".simile" / "states"
    shutil.copytree(states, tmp_path / "states")
    shutil.copy(small / f"{NAMES[14]}.jpg", copy / f"{NAMES[14]}.jpg")  # (no refit due)
    _index(copy)
    shutil.rmtree(states)
    shutil.copytree(tmp_path / "states", states)  # the models and data as before
    queries = [copy / f"{NAMES[14]}.jpg", copy / f"{NAMES[0]}.jpg"]
    with _read(copy) as ref, _mapped(copy) as col:
        _, data = col.searcher.ensure()
        assert isinstance(data, SegmentedImages) and len(data.vocab.parts) == 5
        assert data.ids.size == 14
        for method in METHODS:
            assert _answers(col, queries, method) == _answers(ref, queries, method), method
        assert _answers(col, queries, "vocabulary")[0][0][0] == queries[0]


def _names(path):
    with zipfile.ZipFile(path) as z:
        return z.namelist()


def _entry_byte(folder, member, segment, row):
    """The file of segment ``segment`` holding ``member`` (a pyramid array) and the
    offset in it of the first entry of that segment's row ``row``."""
    snap, groups = _groups(folder)
    for f in groups[segment]:
        with np.load(snap.states_dir / f) as npz:
            if "vocab.indptr" in npz.files:
                indptr = npz["vocab.indptr"]
        with zipfile.ZipFile(snap.states_dir / f) as z:
            if f"{member}.npy" not in z.namelist():
                continue
            info = z.getinfo(f"{member}.npy")
            with open(snap.states_dir / f, "rb") as raw:
                raw.seek(info.header_offset + 26)
                name_len, extra_len = struct.unpack("<HH", raw.read(4))
            start = info.header_offset + 30 + name_len + extra_len
            with z.open(info) as fh:
                np.lib.format.read_magic(fh)
                np.lib.format.read_array_header_1_0(fh)
                header = fh.tell()
            return snap.states_dir / f, start + header + 4 * int(indptr[row])
    raise AssertionError(member)


@pytest.mark.parametrize("member", ["vocab.values", "vocab.cols"])
def test_a_damaged_block_is_found_when_a_query_reads_it(segmented, tmp_path, member):
    """The pyramids carry block checksums: a reader checks the blocks of the rows it
    scores, before it reads them; a damaged block it does not read is not looked at
    (a whole read, as the app's or a repair's, finds it)."""
    folder, _ = segmented
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    path, at = _entry_byte(copy, member, 0, 0)
    _flip(path, at)
    with _mapped(copy) as col:
        _, data = col.searcher.ensure()
        vocab = data.vocab
        hit = int(np.flatnonzero((vocab.seg == 0) & (vocab.pos == 0))[0])
        seg0 = np.flatnonzero(vocab.seg == 0)
        far = [int(seg0[np.argmax(vocab.pos[seg0])])]  # (its last row: another block)
        qk, qv = vocab.row(far[0])  # (its own block: intact)
        vocab.score(qk, qv, np.array(far))  # rows in other blocks: answered
        with pytest.raises(IndexCorruptError, match=f"damaged .*{path.name}.*block 0"):
            vocab.score(qk, qv, np.array([hit, *far]))
        with pytest.raises(IndexCorruptError, match=path.name):
            vocab.row(hit)
    with _read(copy) as col, pytest.raises(IndexCorruptError, match=path.name):
        col.searcher.ensure()  # (a reader that reads the data whole)


def test_a_header_changed_to_another_dtype_is_found(segmented, tmp_path):
    """The block checksums hold the dtype and shape the array was written with: a header
    whose type letter flipped (float16 read as int16, the same size) is damage."""
    folder, _ = segmented
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    path, at = _member_at(copy, "vocab.values", offset=0)
    raw = path.read_bytes()
    head = raw.index(b"'<f2'", at)
    path.write_bytes(raw[:head] + b"'<i2'" + raw[head + 5 :])
    with _mapped(copy) as col, pytest.raises(IndexCorruptError, match=path.name):
        col.searcher.ensure()


def test_segments_without_block_checksums_are_checked_whole_then_rewritten(
    segmented, tmp_path, monkeypatch
):
    """A segment written before block checksums: its readers check its pyramids whole
    (damage anywhere in them is found before a query answers), and the next update
    rewrites it with them."""
    from engine.index import searcher, segments

    folder, small = segmented
    copy = tmp_path / "photos"
    shutil.copytree(folder, copy)
    monkeypatch.setattr(segments, "block_checks", lambda st: {})
    monkeypatch.setattr(searcher, "block_checks", lambda st: {})
    import cv2

    cv2.imwrite(str(copy / "flipped.jpg"), cv2.imread(str(small / "brick.jpg"))[:, ::-1])
    _index(copy)
    monkeypatch.undo()
    snap, groups = _groups(copy)
    bare = [
        i
        for i, g in enumerate(groups)
        if not any(n.startswith("check.") for f in g for n in _names(snap.states_dir / f))
    ]
    assert bare  # (the segment written)
    path, at = _entry_byte(copy, "vocab.values", bare[0], 0)
    _flip(path, at + 4)
    with _mapped(copy) as col:
        with pytest.raises(IndexCorruptError, match=f"damaged .*{path.name}.*CRC"):
            col.query(copy / f"{NAMES[0]}.jpg", method="vocabulary", top=3)
    _flip(path, at + 4)  # (mended)
    with _read(copy) as col:
        before = _answers(col, [copy / f"{NAMES[0]}.jpg"], "vocabulary")
    _index(copy)  # rewrites the segment with block checksums
    snap, groups = _groups(copy)
    for g in groups:
        names = [n for f in g for n in _names(snap.states_dir / f)]
        assert "check.vocab.values.npy" in names and "check.vocab.cols.npy" in names
    with _mapped(copy) as col:
        assert _answers(col, [copy / f"{NAMES[0]}.jpg"], "vocabulary") == before
