"""Catalogue reads that cost what changed: the stored row keys (``images.row_key``), the
look-ups by path of an ingest's plan, and the chunk totals of compact and gc."""

from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from engine.features.keypoints import Features
from engine.index.catalog import (
    CHUNK_TOTALS_SQL,
    CHUNK_USAGE_SQL,
    DEAD_CHUNKS_SQL,
    row_keys,
)
from engine.index.store import IndexStore


def _feats(n, seed=0):
    rng = np.random.default_rng(seed)
    d = rng.random((n, 128), dtype=np.float32) ** 2
    d = np.sqrt(d / d.sum(1, keepdims=True))
    return Features(
        descriptors=d,
        xy=(rng.random((n, 2)) * 100).astype(np.float32),
        scale=(rng.random(n) * 5 + 1).astype(np.float32),
        angle=(rng.random(n) * 360).astype(np.float32),
        image_size=(320, 240),
        kind="sift",
    )


def _expected(store):
    """Ids and keys of the usable rows computed from their hash and feature key."""
    rows = store._q("SELECT id, content_hash, fkey FROM images WHERE status = 'ok' ORDER BY id")
    return np.array([r[0] for r in rows], np.int64), row_keys((r[1], r[2]) for r in rows)


def _drop_key_column(catalog):
    """Make ``catalog`` look written by a simile before the key column."""
    con = sqlite3.connect(catalog)
    con.execute("DROP TRIGGER images_row_key")
    con.execute("ALTER TABLE images DROP COLUMN row_key")
    con.commit()
    con.close()


@pytest.fixture
def filled(tmp_path):
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as s:
        s.write_batch(
            ok=[(f"/p/{i}", 1, 1, f"h{i}", _feats(4, i)) for i in range(6)],
            failed=[("/p/bad", 1, 1, "hb", "broken")],
            fkey="k1",
        )
        s.write_batch(ok=[("/p/\udcff", 1, 1, "hx", _feats(3, 9))], fkey="k1")
    return idx


def test_row_keys_are_stored_with_every_row_and_match_the_computed_ones(filled):
    with IndexStore.open(filled, readonly=True) as r:
        stored = r._q("SELECT count(*) FROM images WHERE row_key IS NULL")[0][0]
        assert stored == 0  # every row written with its key, the failed one too
        rows = r.usable_rows()
        ids, keys = _expected(r)
        np.testing.assert_array_equal(rows.ids, ids)
        np.testing.assert_array_equal(rows.keys, keys)
        assert rows.keys.dtype == np.uint64 and len(set(rows.keys.tolist())) == 7
        assert "/p/\udcff" in rows.paths  # a name that is not UTF-8
        cids, ckeys = r.content_keys()
        np.testing.assert_array_equal(cids, ids)
        np.testing.assert_array_equal(ckeys, keys)


def test_a_changed_row_gets_its_new_key(filled):
    with IndexStore.open(filled) as s:
        before = dict(zip(s.usable_rows().paths, s.usable_rows().keys.tolist(), strict=True))
        s.write_batch(ok=[("/p/1", 2, 2, "h1-new", _feats(4, 1))], fkey="k1")
        s.write_batch(ok=[("/p/2", 1, 1, "h2", _feats(4, 2))], fkey="k2")  # other settings
        after = s.usable_rows()
        np.testing.assert_array_equal(after.keys, _expected(s)[1])
        now = dict(zip(after.paths, after.keys.tolist(), strict=True))
        assert now["/p/1"] != before["/p/1"] and now["/p/2"] != before["/p/2"]
        assert now["/p/3"] == before["/p/3"]


def test_a_write_without_the_key_clears_it_and_readers_compute_it(filled):
    # what a simile before the key column does: change the hash, not the key
    con = sqlite3.connect(filled / "catalog.sqlite")
    con.execute("UPDATE images SET content_hash = 'other' WHERE path = '/p/4'")
    con.execute("UPDATE images SET fkey = 'k9' WHERE path = '/p/5'")
    con.execute("UPDATE images SET size = 7 WHERE path = '/p/0'")  # (keeps its key)
    con.commit()
    nulls = con.execute("SELECT path FROM images WHERE row_key IS NULL ORDER BY path").fetchall()
    con.close()
    assert nulls == [("/p/4",), ("/p/5",)]
    with IndexStore.open(filled, readonly=True) as r:
        keys = _expected(r)[1]
        np.testing.assert_array_equal(r.usable_rows().keys, keys)
        np.testing.assert_array_equal(r.content_keys()[1], keys)


def test_a_catalogue_without_the_key_column_is_read_and_migrated_by_a_writer(filled):
    with IndexStore.open(filled, readonly=True) as r:
        want = r.usable_rows()
    _drop_key_column(filled / "catalog.sqlite")
    with IndexStore.open(filled, readonly=True) as r:  # a reader computes every key
        assert not r._q("SELECT count(*) FROM pragma_table_info('images') WHERE name = 'row_key'")[
            0
        ][0]
        got = r.usable_rows()
        np.testing.assert_array_equal(got.keys, want.keys)
        assert got.paths == want.paths
    with IndexStore.open(filled) as s:  # a writer adds and fills the column
        assert s._q("SELECT count(*) FROM images WHERE row_key IS NULL")[0][0] == 0
        np.testing.assert_array_equal(s.usable_rows().keys, want.keys)
        s.write_batch(ok=[("/p/0", 3, 3, "h0-new", _feats(4, 0))], fkey="k1")
        np.testing.assert_array_equal(s.usable_rows().keys, _expected(s)[1])


def test_plan_reads_only_what_changed(filled):
    with IndexStore.open(filled) as s:
        assert s.stale_paths("k1") == set()
        assert s.stale_paths("k2") == {f"/p/{i}" for i in range(6)} | {"/p/bad", "/p/\udcff"}
        rows = s.file_rows(["/p/1", "/p/\udcff", "/p/unknown", "/p/bad"])
        assert rows == {"/p/1": ("h1", "k1"), "/p/\udcff": ("hx", "k1"), "/p/bad": ("hb", "k1")}
        many = s.file_rows([f"/p/{i % 6}" for i in range(1200)])  # more than one query's worth
        assert many == {f"/p/{i}": (f"h{i}", "k1") for i in range(6)}


def test_chunk_totals_and_dead_chunks_agree_with_the_usage(tmp_path):
    with IndexStore.open(tmp_path / "idx") as s:
        for b in range(3):
            s.write_batch(
                ok=[(f"/p/{b}_{i}", 1, 1, None, _feats(5, 10 * b + i)) for i in range(4)]
            )
        s.write_batch(ok=[("/p/empty", 1, 1, None, _feats(0))])
        s.remove([f"/p/1_{i}" for i in range(4)] + ["/p/0_0"])  # chunk 2 all dead
        usage = s._q(CHUNK_USAGE_SQL)
        total, live = s._q(CHUNK_TOTALS_SQL)[0]
        assert (total, live) == (sum(u[2] for u in usage), sum(u[3] for u in usage))
        assert (total, live) == (60, 35)
        dead = [r[0] for r in s._q(DEAD_CHUNKS_SQL)]
        assert dead == [u[0] for u in usage if u[3] == 0] and len(dead) == 1
        assert s.compact(min_dead_rows=1) is False  # dead rows do not outnumber live ones
        s.remove([f"/p/2_{i}" for i in range(4)])
        assert s.compact(min_dead_rows=1)
        assert not os.path.exists(s.index_dir / "features" / usage[1][1])
        assert sorted(s.paths()) == ["/p/0_1", "/p/0_2", "/p/0_3", "/p/empty"]


def test_image_sizes_are_read_by_id(filled):
    with IndexStore.open(filled, readonly=True) as r:
        recs = r.records()
        want = {rec.id: (rec.width, rec.height) for rec in recs}
        ids = [rec.id for rec in recs]
        assert r.image_sizes([*ids, 10**9]) == want  # (an unknown id is left out)
        assert r.image_sizes(ids[i % len(ids)] for i in range(1200)) == want  # (batches)
        assert r.image_sizes([]) == {}
