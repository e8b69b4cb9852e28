"""Tests of engine.store.IndexStore: catalogue, feature chunks, arrays, states, locking."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import engine.index.store as store_mod
from engine.features.keypoints import Features
from engine.index.store import (
    MARKER_NAME,
    SCHEMA_VERSION,
    IndexCorruptError,
    IndexFormatError,
    IndexLockedError,
    IndexNotFoundError,
    IndexStore,
    IndexVersionError,
    PackedFeatures,
    ReadOnlyIndexError,
    StoreError,
    display_path,
)


def _feats(n, seed=0, *, dim=128, rootsift=True, orient=True, size=(320, 240)):
    rng = np.random.default_rng(seed)
    if rootsift:
        d = rng.random((n, dim), dtype=np.float32) ** 2
        d = np.sqrt(d / d.sum(1, keepdims=True))
    else:
        d = rng.normal(0, 3, (n, dim)).astype(np.float32)
    xy = (rng.random((n, 2)) * [size[0], size[1]]).astype(np.float32)
    scale = (rng.random(n) * 20 + 1).astype(np.float32) if orient else None
    angle = (rng.random(n) * 360).astype(np.float32) if orient else None
    return Features(
        descriptors=d.astype(np.float32),
        xy=xy,
        scale=scale,
        angle=angle,
        image_size=size,
        kind="sift" if rootsift else "patch",
    )


def _assert_close(a: Features, b: Features, desc_atol):
    assert a.descriptors.dtype == np.float32 and a.descriptors.shape == b.descriptors.shape
    np.testing.assert_allclose(a.descriptors, b.descriptors, atol=desc_atol, rtol=0)
    np.testing.assert_array_equal(a.xy, b.xy)
    if b.scale is None:
        assert a.scale is None and a.angle is None
    else:
        np.testing.assert_allclose(a.scale, b.scale, rtol=1e-3)
        np.testing.assert_allclose(a.angle, b.angle, rtol=1e-3, atol=0.25)
    assert tuple(a.image_size) == tuple(b.image_size) and a.kind == b.kind


@pytest.fixture
def store(tmp_path):
    s = IndexStore.open(tmp_path / "idx")
    yield s
    s.close()


def test_create_layout_and_pragmas(tmp_path, store):
    idx = tmp_path / "idx"
    assert (idx / "catalog.sqlite").is_file() and (idx / "features").is_dir()
    con = sqlite3.connect(idx / "catalog.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
    assert store.count() == 0 and store.paths() == [] and store.ids().dtype == np.int64


def test_roundtrip_u8_f16_and_empty(store):
    f1, f2 = _feats(50, 1), _feats(7, 2, rootsift=False, orient=False)
    f0 = _feats(0, 3)
    store.write_batch(ok=[("/p/a.jpg", 10, 11, "h1", f1), ("/p/z.jpg", 5, 6, "h0", f0)])
    store.write_batch(ok=[("/p/b.jpg", 12, 13, "h2", f2)])
    # RootSIFT in [0, 1] -> uint8 codec: error <= 1/510
    _assert_close(store.get_features("/p/a.jpg"), f1, 1 / 510 + 1e-7)
    # other values -> float16: relative precision 2**-11
    got = store.get_features("/p/b.jpg")
    _assert_close(got, f2, desc_atol=np.abs(f2.descriptors).max() * 2**-10)
    empty = store.get_features("/p/z.jpg")
    assert len(empty) == 0 and empty.descriptors.shape == (0, 128)
    assert store.paths() == ["/p/a.jpg", "/p/z.jpg", "/p/b.jpg"]
    rec = store.record("/p/a.jpg")
    assert (rec.size, rec.mtime_ns, rec.content_hash, rec.n_features) == (10, 11, "h1", 50)
    assert (rec.width, rec.height, rec.status) == (320, 240, "ok")
    assert store.record(rec.id) == rec
    # chunks are compact: the u8 chunk stores 128 + 8 + 2 + 2 bytes per feature
    sizes = sorted(os.path.getsize(e.path) for e in os.scandir(store.index_dir / "features"))
    assert sizes[-1] < 50 * 140 + 512


def test_packed_features_store_the_same_bytes(tmp_path):
    """Features packed in a worker (the store's 8-bit codes) give the same chunk and
    catalogue as the features themselves; values outside [0, 1] are not packed, and a
    batch mixing both is stored from the values."""
    f1, f2, f0 = _feats(40, 1), _feats(9, 2), _feats(0, 3)
    other = _feats(6, 4, rootsift=False)
    p1, p2, p0 = (PackedFeatures.pack(f) for f in (f1, f2, f0))
    assert isinstance(p1, PackedFeatures) and p1.codes.dtype == np.uint8 and len(p1) == 40
    assert PackedFeatures.pack(other) is other
    plain = IndexStore.open(tmp_path / "plain")
    packed = IndexStore.open(tmp_path / "packed")
    rows = [
        ("/p/a.jpg", 1, 2, "h1", f1),
        ("/p/z.jpg", 3, 4, "h0", f0),
        ("/p/b.jpg", 5, 6, "h2", f2),
    ]
    plain.write_batch(ok=rows)
    packed.write_batch(ok=[(*r[:4], p) for r, p in zip(rows, (p1, p0, p2), strict=True)])
    for path in ("/p/a.jpg", "/p/z.jpg", "/p/b.jpg"):
        a, b = plain.get_features(path), packed.get_features(path)
        np.testing.assert_array_equal(a.descriptors, b.descriptors)
        np.testing.assert_array_equal(a.xy, b.xy)
        np.testing.assert_array_equal(a.scale, b.scale)
        ra, rb = plain.record(path), packed.record(path)
        assert replace(ra, added_at=0) == replace(rb, added_at=0)
    np.testing.assert_array_equal(p1.descriptors, plain.get_features("/p/a.jpg").descriptors)
    files = [
        sorted(os.scandir(s.index_dir / "features"), key=lambda e: e.name) for s in (plain, packed)
    ]
    assert [Path(e.path).read_bytes() for e in files[0]] == [
        Path(e.path).read_bytes() for e in files[1]
    ]
    # packed next to values outside [0, 1]: the chunk is encoded from the values
    packed.write_batch(ok=[("/p/c.jpg", 7, 8, "h3", p1), ("/p/d.jpg", 9, 10, "h4", other)])
    _assert_close(packed.get_features("/p/c.jpg"), f1, 1 / 510 + 2e-3)
    _assert_close(packed.get_features("/p/d.jpg"), other, np.abs(other.descriptors).max() * 2**-10)
    plain.close()
    packed.close()


def test_iter_and_stacked(store):
    feats = {f"/p/{i}.jpg": _feats(10 + i, i) for i in range(6)}
    items = list(feats.items())
    store.write_batch(ok=[(p, 1, 1, None, f) for p, f in items[:4]])
    store.write_batch(ok=[(p, 1, 1, None, f) for p, f in items[4:]])
    got = list(store.iter_features())
    assert [i for i, _ in got] == list(store.ids())
    for (_, f), (_, ref) in zip(got, items, strict=True):
        _assert_close(f, ref, 1 / 510 + 1e-7)
    ids = store.ids()[[4, 1]]
    X, indptr = store.stacked_descriptors(ids)
    assert X.dtype == np.float32 and indptr.tolist() == [0, 14, 14 + 11]
    np.testing.assert_allclose(X[:14], items[4][1].descriptors, atol=1 / 500)
    # a few ids are selected by id, many by one scan of the catalogue: the same rows,
    # in the order asked (repeats included); an unknown id is an error either way
    ask = store.ids()[[5, 0, 3, 0]]
    from engine.index import feature_reads  # (the store's feature reads live there)

    for limit in (feature_reads.ROWS_BY_ID, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(feature_reads, "ROWS_BY_ID", limit)
            X2, indptr2 = store.stacked_descriptors(ask)
            assert indptr2.tolist() == np.cumsum([0, 15, 10, 13, 10]).tolist()
            np.testing.assert_allclose(
                X2[10 + 15 : 10 + 15 + 13], items[3][1].descriptors, atol=1 / 500
            )
            assert [i for i, _ in store.iter_features(ask)] == ask.tolist()
            with pytest.raises(KeyError, match="not in the index"):
                store.stacked_descriptors([int(ask[0]), 10_000])
            with pytest.raises(KeyError, match="not in the index"):
                list(store.iter_features([10_000]))


def test_failed_upsert_keeps_id_and_generation(store):
    g0 = store.generation
    store.write_batch(ok=[("/p/a.jpg", 1, 1, "h", _feats(5))])
    aid = store.id_of("/p/a.jpg")
    store.write_batch(
        failed=[("/p/a.jpg", 2, 2, "h2", "truncated file"), ("/p/b", 3, 3, None, "x")]
    )
    assert store.generation == g0 + 2
    assert store.id_of("/p/a.jpg") == aid
    assert store.failures() == [("/p/a.jpg", "truncated file"), ("/p/b", "x")]
    assert store.count() == 0 and store.count("failed") == 2 and store.count(None) == 2
    with pytest.raises(StoreError, match="failed"):
        store.get_features("/p/a.jpg")
    with pytest.raises(KeyError):
        store.get_features("/p/nope.jpg")
    assert store.known_stats() == {"/p/a.jpg": (2, 2), "/p/b": (3, 3)}
    store.write_batch(ok=[("/p/a.jpg", 4, 4, "h3", _feats(3))], touched=[("/p/b", 9, 9)])
    assert store.id_of("/p/a.jpg") == aid and len(store.get_features(aid)) == 3
    assert store.known_stats()["/p/b"] == (9, 9)


def test_remove_and_duplicates(store):
    store.write_batch(
        ok=[(f"/p/{i}", 1, 1, "same" if i < 3 else f"h{i}", _feats(4, i)) for i in range(5)]
    )
    assert store.duplicate_files() == [["/p/0", "/p/1", "/p/2"]]
    assert store.remove(["/p/1", "/p/4", "/p/missing"]) == 2
    assert store.paths() == ["/p/0", "/p/2", "/p/3"]
    assert store.duplicate_files() == [["/p/0", "/p/2"]]


def test_compaction_keeps_features_and_drops_dead_chunks(store):
    ref = {}
    for b in range(4):
        batch = [(f"/p/{b}_{i}", 1, 1, None, _feats(20, 10 * b + i)) for i in range(5)]
        ref.update({p: f for p, *_, f in batch})
        store.write_batch(ok=batch)
    store.remove([p for p in ref if not p.endswith("_0")])  # 16 of 20 images die
    assert not store.compact()  # under min_dead_rows
    assert store.compact(min_dead_rows=1)
    files = list(os.scandir(store.index_dir / "features"))
    assert len(files) == 1
    for p in store.paths():
        _assert_close(store.get_features(p), ref[p], 1 / 510 + 1e-7)


def test_gc_removes_orphans_on_writer_open(tmp_path):
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.write_batch(ok=[("/p/a", 1, 1, None, _feats(5))])
        s.save_state("m", {"w": np.ones(3)})
    feat = idx / "features"
    (feat / "c0000000000999-0123456789ab.npy").write_bytes(b"x")  # an orphan chunk
    (feat / ".c0000000000001-0123456789ab.npy.abcdef012345.tmp").write_bytes(b"x")
    (idx / "states" / "m.deadbeef0123.npz").write_bytes(b"x")
    # files that are not the store's own: never deleted, whatever folder they sit in
    (feat / "holiday.jpg").write_bytes(b"photo")
    (feat / "c999-orphan.npy").write_bytes(b"x")
    (idx / "states" / "notes.npz").write_bytes(b"x")
    with IndexStore.open(idx, readonly=True) as r:  # readers never clean up
        assert len(list(feat.iterdir())) == 5
        assert len(r.get_features("/p/a")) == 5
    with IndexStore.open(idx) as s:
        assert sorted(p.name for p in feat.iterdir() if p.name.startswith("c1")) == [
            s._q("SELECT file FROM chunks")[0][0]
        ]
        assert sorted(p.name for p in feat.iterdir() if not p.name.startswith("c1")) == [
            "c999-orphan.npy", "holiday.jpg"
        ]  # fmt: skip
        assert len(s.get_features("/p/a")) == 5
        assert s.load_state("m")["w"].tolist() == [1, 1, 1]
        # m.json + the npz it names, and the foreign file
        assert len(os.listdir(idx / "states")) == 3
        assert (idx / "states" / "notes.npz").exists()


def test_a_folder_that_is_not_an_index_is_refused_and_untouched(tmp_path):
    album = tmp_path / "album"
    (album / "features").mkdir(parents=True)
    (album / "features" / "beach.jpg").write_bytes(b"photo")
    (album / "states").mkdir()
    (album / "states" / "x.0123456789ab.npz").write_bytes(b"mine")
    (album / "cat.jpg").write_bytes(b"photo")
    before = sorted(str(p.relative_to(album)) for p in album.rglob("*"))
    with pytest.raises(IndexFormatError, match="not a simile index and is not empty"):
        IndexStore.open(album)
    assert sorted(str(p.relative_to(album)) for p in album.rglob("*")) == before


def test_index_written_before_markers_is_adopted(tmp_path):
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.write_batch(ok=[("/p/a", 1, 1, None, _feats(5))])
    (idx / MARKER_NAME).unlink()  # as written by a simile without markers
    with IndexStore.open(idx) as s:
        assert s.paths() == ["/p/a"]
    assert (idx / MARKER_NAME).is_file()


def test_non_utf8_paths_are_stored_losslessly(tmp_path):
    name = os.fsdecode(b"/p/Urlaub_M\xfcnchen.jpg")
    with IndexStore.open(tmp_path / "idx") as s:
        s.write_batch(ok=[(name, 1, 1, "h", _feats(5)), ("/p/b.jpg", 1, 1, "h", _feats(5, 1))])
        assert s.paths() == [name, "/p/b.jpg"]
        assert s.record(name).path == name and s.id_of(name) == 1
        assert len(s.get_features(name)) == 5
        assert name in s.known_stats() and s.known_hashes()[name] == "h"
        assert s.duplicate_files() == [[name, "/p/b.jpg"]]
        assert s.remove([name]) == 1 and s.paths() == ["/p/b.jpg"]
    assert display_path(name) == "/p/Urlaub_M\ufffdnchen.jpg"


def test_failed_commit_leaves_no_trace(store, monkeypatch):
    store.write_batch(ok=[("/p/a", 1, 1, None, _feats(5))])
    before = sorted(os.listdir(store.index_dir / "features"))

    def boom():
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_commit", boom)
    with pytest.raises(sqlite3.OperationalError):
        store.write_batch(ok=[("/p/b", 1, 1, None, _feats(5, 1))])
    monkeypatch.undo()
    assert store.paths() == ["/p/a"]
    assert sorted(os.listdir(store.index_dir / "features")) == before


def test_writer_lock_in_process_and_readers(tmp_path):
    idx = tmp_path / "idx"
    w = IndexStore.open(idx)
    with pytest.raises(IndexLockedError, match=rf"another simile process .*pid {os.getpid()}"):
        IndexStore.open(idx)
    w.write_batch(ok=[("/p/a", 1, 1, None, _feats(5))])
    r = IndexStore.open(idx, readonly=True)  # no lock needed
    assert r.paths() == ["/p/a"]
    w.write_batch(ok=[("/p/b", 1, 1, None, _feats(5))])
    assert r.paths() == ["/p/a", "/p/b"]  # readers see each committed batch
    with pytest.raises(ReadOnlyIndexError):
        r.write_batch(ok=[("/p/c", 1, 1, None, _feats(5))])
    with pytest.raises(ReadOnlyIndexError):
        r.save_array("x", np.ones(2))
    w.close()
    IndexStore.open(idx).close()  # released
    r.close()


def test_writer_lock_across_processes(tmp_path):
    idx = tmp_path / "idx"
    IndexStore.open(idx).close()
    code = textwrap.dedent(
        f"""
        import sys, time
        from engine.index.store import IndexStore
        s = IndexStore.open({str(idx)!r})
        print("locked", flush=True)
        sys.stdin.readline()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout.readline().strip() == "locked"
            with pytest.raises(IndexLockedError) as err:
                IndexStore.open(idx)
            assert err.value.pid == proc.pid
        finally:
            proc.kill()
            proc.wait()
    IndexStore.open(idx).close()  # a killed holder releases the lock


_FORKED = """
import os, signal, sys, time
from engine.index.store import IndexStore, IndexLockedError
s = IndexStore.open(sys.argv[1])
pid = os.fork()
if pid == 0:  # a forked child (e.g. an extraction worker) closing what it inherited
    if sys.argv[2] == "close":
        s.close()
        os._exit(0)
    time.sleep(60)  # outlives its parent
    os._exit(0)
if sys.argv[2] == "close":
    os.waitpid(pid, 0)
    try:
        IndexStore.open(sys.argv[1])
    except IndexLockedError:
        print("still locked", flush=True)
else:
    print(pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_forked_children_neither_release_nor_keep_the_writer_lock(tmp_path):
    idx = tmp_path / "idx"
    run = [sys.executable, "-c", _FORKED, str(idx)]
    # a child closing the store does not unlock its parent (flock is per open file)
    out = subprocess.run([*run, "close"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "still locked"
    # a child outliving its killed parent does not keep the index locked
    out = subprocess.run([*run, "orphan"], capture_output=True, text=True)
    child = int(out.stdout.split()[0])
    try:
        os.kill(child, 0)  # still alive
        IndexStore.open(idx).close()
    finally:
        os.kill(child, signal.SIGKILL)


def test_open_errors(tmp_path):
    with pytest.raises(IndexNotFoundError):
        IndexStore.open(tmp_path / "none", create=False)
    with pytest.raises(IndexNotFoundError):
        IndexStore.open(tmp_path / "none", readonly=True)
    assert not (tmp_path / "none").exists()

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "catalog.sqlite").write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(IndexCorruptError):
        IndexStore.open(bad)
    with pytest.raises(IndexCorruptError):
        IndexStore.open(bad, readonly=True)

    empty = tmp_path / "empty"  # creation killed before the schema commit
    empty.mkdir()
    (empty / "catalog.sqlite").write_bytes(b"")
    with pytest.raises(IndexNotFoundError):
        IndexStore.open(empty, readonly=True)
    IndexStore.open(empty).close()  # a writer just creates it
    IndexStore.open(empty, readonly=True).close()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    con = sqlite3.connect(foreign / "catalog.sqlite")
    con.execute("CREATE TABLE photos (x)")
    con.commit()
    con.close()
    with pytest.raises(IndexFormatError):
        IndexStore.open(foreign)

    newer = tmp_path / "newer"
    IndexStore.open(newer).close()
    con = sqlite3.connect(newer / "catalog.sqlite")
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    with pytest.raises(IndexVersionError, match="newer"):
        IndexStore.open(newer)
    # a failed open does not keep the lock
    con = sqlite3.connect(newer / "catalog.sqlite")
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    con.commit()
    con.close()
    IndexStore.open(newer).close()


def test_damaged_chunk_is_a_clear_error(store):
    store.write_batch(ok=[("/p/a", 1, 1, None, _feats(5))])
    (chunk,) = list((store.index_dir / "features").iterdir())
    chunk.write_bytes(b"\x93NUMPY garbage")
    store._chunks.clear()
    with pytest.raises(IndexCorruptError, match="damaged"):
        store.get_features("/p/a")


def test_a_chunk_mapped_again_gives_the_same_rows(tmp_path):
    """A chunk dropped from the open maps is mapped again from its known layout (its
    header not parsed twice): the same read-only rows; emptied since, a clear error."""
    from engine.index.chunks import ChunkCache, write_chunk

    folder = tmp_path / "features"
    folder.mkdir()
    one, n1, *_ = write_chunk(folder, [_feats(7, 1), _feats(3, 2)])
    two, n2, *_ = write_chunk(folder, [_feats(5, 3)])
    cache = ChunkCache(folder, size=1)
    first = np.array(cache.get(one, n1))
    cache.get(two, n2)  # (drops the map of the first)
    again = cache.get(one, n1)
    assert again.dtype == first.dtype and not again.flags.writeable
    np.testing.assert_array_equal(again, first)
    cache.get(two, n2)
    (folder / one).write_bytes(b"")
    with pytest.raises(IndexCorruptError, match="damaged"):
        cache.get(one, n1)


def test_arrays(store):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    store.save_array("codes.wta", a)
    got = store.load_array("codes.wta")
    assert isinstance(got, np.memmap) and not got.flags.writeable
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(store.load_array("codes.wta", mmap=False), a)
    store.save_array("codes.wta", a * 2)  # atomic replace
    np.testing.assert_array_equal(store.load_array("codes.wta", mmap=False), a * 2)
    assert store.has_array("codes.wta") and not store.has_array("nope")
    with pytest.raises(KeyError):
        store.load_array("nope")
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="name"):
            store.save_array(bad, a)
    with pytest.raises(TypeError, match="object"):
        store.save_array("obj", np.array([{}, 1], dtype=object))
    store.delete_array("codes.wta")
    assert not store.has_array("codes.wta")


def test_states_no_pickle(store):
    state = {
        "W": np.eye(3, dtype=np.float32),
        "ids": np.arange(4),
        "n": 3,
        "lr": 0.5,
        "name": "oasis",
        "flag": True,
        "none": None,
        "np_scalar": np.float64(2.5),
    }
    store.save_state("oasis", state)
    got = store.load_state("oasis")
    assert set(got) == set(state)
    np.testing.assert_array_equal(got["W"], state["W"])
    assert got["W"].dtype == np.float32 and got["ids"].dtype == state["ids"].dtype
    assert (got["n"], got["lr"], got["name"], got["flag"], got["none"]) == (
        3, 0.5, "oasis", True, None
    )  # fmt: skip
    assert got["np_scalar"] == 2.5
    store.save_state("oasis", {"W": np.zeros(2)})
    assert list(store.load_state("oasis")) == ["W"]
    assert len([n for n in os.listdir(store.index_dir / "states") if n.endswith(".npz")]) == 1
    with pytest.raises(TypeError, match="only arrays"):
        store.save_state("bad", {"x": [1, 2]})
    with pytest.raises(TypeError, match="object"):
        store.save_state("bad", {"x": np.array([None])})
    with pytest.raises(KeyError):
        store.load_state("missing")
    store.delete_state("oasis")
    assert not store.has_state("oasis")


def test_state_parts_written_ahead(store):
    """Arrays written ahead (write_state_part) join the state that names them; replacing
    or deleting the state removes its parts, and gc removes a part no state names."""
    states = store.index_dir / "states"

    def npz_files():
        return sorted(n for n in os.listdir(states) if n.endswith(".npz"))

    part = store.write_state_part("data", {"u.values": np.arange(5.0), "u.ids": np.arange(3)})
    assert part.startswith("data.") and part in npz_files()
    store.save_state("data", {"ids": np.arange(3), "n_words": 7}, parts=[part])
    got = store.load_state("data")
    assert sorted(got) == ["ids", "n_words", "u.ids", "u.values"] and got["n_words"] == 7
    np.testing.assert_array_equal(got["u.values"], np.arange(5.0))
    assert len(npz_files()) == 2
    # a part that no state names yet (a run that stopped) is garbage; named ones are not
    orphan = store.write_state_part("data", {"x": np.zeros(2)})
    assert store.gc() == 1
    assert orphan not in npz_files() and part in npz_files() and len(npz_files()) == 2
    # saved again without parts: the old files go
    store.save_state("data", {"ids": np.arange(2)})
    assert sorted(store.load_state("data")) == ["ids"] and len(npz_files()) == 1
    with pytest.raises(ValueError, match="not a part of state"):
        store.save_state("data", {}, parts=["models.0123.npz"])
    with pytest.raises(FileNotFoundError):
        store.save_state("data", {}, parts=["data.0123456789ab.npz"])
    with pytest.raises(TypeError, match="arrays only"):
        store.write_state_part("data", {"n": 3})
    # an array stored twice is a damaged state
    twice = store.write_state_part("data", {"ids": np.arange(2)})
    store.save_state("data", {"ids": np.arange(2)}, parts=[twice])
    with pytest.raises(IndexCorruptError, match="stored twice"):
        store.load_state("data")
    store.delete_state("data")
    assert npz_files() == [] and not store.has_state("data")


def test_settings_and_kv(tmp_path, store):
    store.set_setting("feature_kwargs", {"kind": "sift", "max_side": 640})
    store.set_kv("vocab.meta", "branching=10")
    store.set_kv("blob", b"\x00\x01")
    with pytest.raises(KeyError):
        store.set_kv("generation", b"1")
    store.close()
    with IndexStore.open(tmp_path / "idx", readonly=True) as r:
        assert r.get_setting("feature_kwargs") == {"kind": "sift", "max_side": 640}
        assert r.get_setting("missing", 7) == 7
        assert r.get_kv("vocab.meta") == b"branching=10" and r.get_kv("blob") == b"\x00\x01"
        assert r.get_kv("nope") is None


def test_non_ascii_index_dir(tmp_path):
    with IndexStore.open(tmp_path / "índice 索引") as s:
        s.write_batch(ok=[("/fotos/café.jpg", 1, 1, None, _feats(3))])
    with IndexStore.open(tmp_path / "índice 索引", readonly=True) as r:
        assert r.paths() == ["/fotos/café.jpg"] and len(r.get_features("/fotos/café.jpg")) == 3


def test_store_module_still_exports_its_pieces():
    # the store's pieces moved to engine.index.{catalog,chunks,files,lock,states,
    # store_errors}; engine.index.store exports what it did before
    from engine.index import catalog, chunks, files, store_errors

    for name in store_mod.__all__:
        assert hasattr(store_mod, name), name
    assert store_mod.PackedFeatures is chunks.PackedFeatures
    assert store_mod.display_path is files.display_path
    assert store_mod.IndexLockedError is store_errors.IndexLockedError
    # (2: chunk checksums, the catalogue's identity, the states' manifest; 3: metadata)
    assert store_mod.SCHEMA_VERSION == catalog.SCHEMA_VERSION == 3
    assert IndexStore.norm_path("/a/b") == "/a/b"
    bad = os.fsdecode(b"/a/caf\xe9")
    assert IndexStore.norm_path(bad) == b"/a/caf\xe9"


# ---------------------------------------------------------------- versions of the states


def test_save_states_commits_together_or_not_at_all(store, monkeypatch):
    """Several states in one commit; a write that fails (a full disk at the second array
    file, or at the manifest) leaves the previous version and no new file."""
    import errno

    from engine.index import files
    from engine.index.manifest import MANIFEST_NAME

    states = store.index_dir / "states"
    gen = store.save_states({"a": {"g": 1, "x": np.arange(3)}, "b": {"g": 1}})
    assert store.snapshot().generation == gen
    before = sorted(os.listdir(states))
    for target in ("b.", MANIFEST_NAME):

        def full(where, path, target=target):
            if where == "before" and path.name.startswith(target):
                raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(files, "WRITE_HOOK", full)
        with pytest.raises(OSError, match="No space"):
            store.save_states({"a": {"g": 2, "x": np.arange(4)}, "b": {"g": 2}})
        monkeypatch.setattr(files, "WRITE_HOOK", None)
        assert sorted(os.listdir(states)) == before
        got = store.load_states(["a", "b"])
        assert got["a"]["g"] == got["b"]["g"] == 1 and got["a"]["x"].tolist() == [0, 1, 2]
    store.save_states({"a": None})  # deletes a, keeps b
    assert not store.has_state("a") and store.load_state("b")["g"] == 1
    snap, got = store.load_version(["b"])
    assert snap.generation == gen + 1 and got["b"]["g"] == 1


def test_states_of_another_catalogue_are_hidden_then_dropped(tmp_path):
    from engine.index.manifest import read_snapshot

    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.save_state("m", {"w": np.ones(2)})
        files = read_snapshot(idx / "states").files()
    os.remove(idx / "catalog.sqlite")
    with pytest.raises(IndexCorruptError, match="missing"):  # a catalogue lost: refused
        IndexStore.open(idx)
    with IndexStore.open(idx, repair=True) as s:  # a new catalogue, with a new identity
        snap = s.snapshot()
        assert not s.has_state("m") and snap.hidden == ("m",)
        with pytest.raises(KeyError):
            s.load_state("m")
        assert files <= set(os.listdir(idx / "states"))  # kept until a commit
        s.save_state("n", {"v": np.zeros(1)})
        assert sorted(s.snapshot().entries) == ["n"]
        assert not files & set(os.listdir(idx / "states"))


def test_manifest_damage_and_newer_versions_are_reported(store):
    import json

    from engine.index.manifest import MANIFEST_NAME

    store.save_state("m", {"w": np.ones(2)})
    path = store.index_dir / "states" / MANIFEST_NAME
    doc = json.loads(path.read_text())
    doc["states"]["m"]["scalars"]["extra"] = 1  # the checksum no longer holds
    path.write_text(json.dumps(doc))
    with pytest.raises(IndexCorruptError, match=r"MANIFEST\.json: checksum mismatch"):
        store.load_state("m")
    assert store.gc() == 0  # nothing is collected while the manifest is unreadable
    doc = {"format": "simile-states", "version": 99}
    path.write_text(json.dumps(doc))
    with pytest.raises(IndexVersionError, match="newer simile"):
        store.has_state("m")


def test_chunks_have_checksums_checked_on_first_read(tmp_path):
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.write_batch(ok=[("/p/a", 1, 1, "h", _feats(40))])
        ((cid, file, n_rows, checksum, used),) = s.chunk_table()
        assert len(checksum) == 32 and used == n_rows == 40
    with open(idx / "features" / file, "r+b") as fh:  # a bit flip in the descriptors
        fh.seek(-100, os.SEEK_END)
        fh.write(b"\x01\x02")
    with IndexStore.open(idx, readonly=True) as r:
        with pytest.raises(IndexCorruptError, match=f"{file}: checksum mismatch"):
            r.get_features("/p/a")
    with IndexStore.open(idx) as s:
        assert s.drop_features([cid], "damaged") == 1
        rec = s.record("/p/a")
        assert (rec.status, rec.error) == ("failed", "damaged")
        assert s.feature_keys()["/p/a"] is None  # the next ingest extracts it again


def test_a_version_1_catalogue_is_read_and_migrated(tmp_path):
    """Catalogues written before checksums, identities and the manifest: a reader uses
    them as they are (and keeps reading while a writer migrates them), a writer migrates
    them (schema version 2, the per-state JSON files adopted into the manifest)."""
    import json

    from engine.index.manifest import MANIFEST_NAME, read_snapshot

    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.write_batch(ok=[("/p/a", 1, 1, "h", _feats(5))])
        s.save_state("m", {"n": 7, "w": np.arange(3)})
    states = idx / "states"
    for name, e in read_snapshot(states).entries.items():  # the way version 1 kept them
        doc = {**e.scalars, "__npz__": e.files[0], "__parts__": list(e.files[1:])}
        (states / f"{name}.json").write_text(json.dumps(doc))
    os.remove(states / MANIFEST_NAME)
    con = sqlite3.connect(idx / "catalog.sqlite", isolation_level=None)
    con.execute("ALTER TABLE chunks DROP COLUMN checksum")
    con.execute("DELETE FROM kv WHERE key = 'catalog.id'")
    con.execute("PRAGMA user_version=1")
    con.close()
    with IndexStore.open(idx, readonly=True) as r:
        assert r.catalog_id is None and len(r.get_features("/p/a")) == 5
        assert r.snapshot().legacy and r.load_state("m")["n"] == 7
        with IndexStore.open(idx) as s:
            assert s.catalog_id and len(s.get_features("/p/a")) == 5
            assert [row[3] for row in s.chunk_table()] == [None]  # recorded by the repair
            assert not s.snapshot().legacy and s.load_state("m")["n"] == 7
        assert not r.snapshot().legacy and r.load_state("m")["w"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(states)) == sorted([MANIFEST_NAME, *read_snapshot(states).files()])
    con = sqlite3.connect(idx / "catalog.sqlite")
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    con.close()
