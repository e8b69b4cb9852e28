"""The search's same-scene pairs remembered in the index (engine.cluster.scene_cache)."""

import numpy as np
import pytest

from engine.cluster.scene_cache import SCENE_CACHE, RememberedScenes, scene_keys
from engine.cluster.scenes import scene_probabilities_iter
from engine.core.progress import run_to_end
from tests._cluster import FakeCollection

TABLE = {
    "a.jpg": [("b.jpg", 0.9), ("c.jpg", 0.25)],
    "b.jpg": [("a.jpg", 0.6)],
    "c.jpg": [],
    "d.jpg": [("a.jpg", 0.7)],  # a photo added later: its query finds a
}


def _run(col, paths, **kw):
    hashes = [f"h-{p}" for p in paths]
    return run_to_end(scene_probabilities_iter(col, paths, hashes=hashes, top=5, **kw))


def test_a_second_grouping_queries_only_the_photos_it_has_not_seen(tmp_path):
    col = FakeCollection(TABLE, tmp_path)
    P1 = _run(col, ["a.jpg", "b.jpg", "c.jpg"])
    assert sorted(col.asked) == ["a.jpg", "b.jpg", "c.jpg"]
    assert (tmp_path / SCENE_CACHE).is_file()
    assert P1[0, 1] == 0.9 and P1[0, 2] == 0.25 and np.array_equal(P1, P1.T)
    col.asked.clear()
    P2 = _run(col, ["a.jpg", "b.jpg", "c.jpg"])
    assert col.asked == [] and np.array_equal(P1, P2)  # all remembered
    # a photo added: only it is queried; its pair with a comes from its own query
    P3 = _run(col, ["a.jpg", "b.jpg", "d.jpg", "c.jpg"])
    assert col.asked == ["d.jpg"]
    assert P3[2, 0] == P3[0, 2] == 0.7 and P3[0, 1] == 0.9 and P3[0, 3] == 0.25
    # a photo removed: its pairs leave the cache when it is saved
    col.asked.clear()
    P4 = _run(col, ["b.jpg", "d.jpg", "c.jpg"])
    assert col.asked == [] and P4[0, 1] == 0 and P4.sum() == 0
    cache = RememberedScenes.load(tmp_path, (5.0, *_curve()))
    left = scene_keys(["h-b.jpg", "h-d.jpg", "h-c.jpg"])
    assert set(cache.queried.tolist()) == set(left.tolist())
    assert not np.isin(scene_keys(["h-a.jpg"]), cache.key_a).any()
    assert not np.isin(scene_keys(["h-a.jpg"]), cache.key_b).any()


def _curve():
    from engine.index.calibration import CALIBRATION

    return CALIBRATION["hybrid"]


def test_an_unusable_or_foreign_cache_is_ignored_and_rewritten(tmp_path):
    col = FakeCollection(TABLE, tmp_path)
    paths = ["a.jpg", "b.jpg"]
    P = _run(col, paths)
    (tmp_path / SCENE_CACHE).write_bytes(b"not a zip file")
    col.asked.clear()
    assert np.array_equal(_run(col, paths), P) and len(col.asked) == 2
    col.asked.clear()  # other settings (hits per query): asked again
    run_to_end(scene_probabilities_iter(col, paths, hashes=["h-a.jpg", "h-b.jpg"], top=9))
    assert len(col.asked) == 2
    with np.load(tmp_path / SCENE_CACHE, allow_pickle=False) as npz:  # plain arrays
        assert npz["settings"][0] == 9.0 and npz["queried"].dtype == np.uint64


def test_a_cancelled_run_keeps_the_queries_it_finished(tmp_path):
    paths = [f"p{i}.jpg" for i in range(5)]
    col = FakeCollection({}, tmp_path, stop_after=2)
    with pytest.raises(InterruptedError):
        _run(col, paths, cancel=col.stop)
    assert len(col.asked) == 2
    col = FakeCollection({}, tmp_path)
    _run(col, paths)
    assert col.asked == paths[2:]  # the first two were remembered


def test_a_read_only_index_reads_the_cache_but_writes_nothing(tmp_path):
    col = FakeCollection(TABLE, tmp_path, readonly=True)
    _run(col, ["a.jpg", "b.jpg"])
    assert not (tmp_path / SCENE_CACHE).exists()
    _run(FakeCollection(TABLE, tmp_path), ["a.jpg", "b.jpg"])  # written by a writer
    ro = FakeCollection(TABLE, tmp_path, readonly=True)
    before = (tmp_path / SCENE_CACHE).stat().st_mtime_ns
    _run(ro, ["a.jpg", "b.jpg", "c.jpg"])
    assert ro.asked == ["c.jpg"] and (tmp_path / SCENE_CACHE).stat().st_mtime_ns == before


def test_copies_of_one_file_share_their_hits_and_are_paired():
    cache = RememberedScenes(None, (5.0, 0.0, 0.0))
    ka, kb, kc = scene_keys(["x", "y", "z"])
    cache.add(ka, np.array([kc]), np.array([0.8]))
    P = cache.matrix(np.array([ka, kb, ka, kc], np.uint64))  # rows 0 and 2: one content
    assert P[0, 2] == P[2, 0] == 1.0 and P[0, 3] == P[2, 3] == 0.8
    assert np.all(np.diag(P) == 0) and P[1].sum() == 0 and P[3].sum() == 0  # one direction
    assert cache.matrix(np.zeros(0, np.uint64)).shape == (0, 0)
