"""Collection: incremental index, queries of every method, duplicates, matrices, recovery."""

import os
import shutil
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

import engine.index.candidates as cand
import engine.index.codes as codes
import engine.index.fit as fit
import engine.index.methods as methods
import engine.workflows.duplicates as dup
from engine.collection import (
    METHODS,
    Collection,
    DuplicateGroup,
    Hit,
    available_methods,
    default_index_dir,
    register_method,
)
from engine.index.encode import DATA_STATE, INDEX_PARTS, encode, stored_query
from engine.index.search import IntersectionIndex, code_values, histograms_from_codes
from engine.io.imageio import load_image
from engine.workflows.pair_cache import CACHE_FILE as PAIR_CACHE_FILE

GROUPS = ("astronaut", "brick", "coffee")


def _run(gen):
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return stop.value, events


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("photos")
    (root / "sub").mkdir()
    for name in sorted(os.listdir(demo_folder)):
        if name.split("_")[0].split(".")[0] in GROUPS and name.endswith(".jpg"):
            dest = root / ("sub" if "crop" in name else "") / name
            shutil.copy(demo_folder / name, dest)
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (root / "notes.txt").write_text("not an image")
    return root


@pytest.fixture(scope="module")
def indexed(photo_dir):
    col = Collection.open(photo_dir)
    summary, events = _run(col.update(jobs=1))
    yield col, summary, events
    col.close()


def test_index_summary_and_failures(indexed, photo_dir):
    col, summary, events = indexed
    n_images = len([p for p in photo_dir.rglob("*.jpg")]) - 1
    assert summary.indexed == n_images and summary.unchanged == 0
    assert summary.total == n_images + 1
    assert [Path(p).name for p, _ in summary.failed] == ["broken.jpg"]
    assert col.failures()[0][0].name == "broken.jpg" and col.failures()[0][1]
    assert {e.status for e in events} >= {"scanning", "indexed", "failed", "finalizing"}
    paths = col.paths()
    assert len(paths) == n_images == len(col)
    assert all(p.is_absolute() and p.suffix == ".jpg" for p in paths)
    assert col.index_dir == photo_dir / ".simile"
    assert len(col.features(paths[0])) > 50


@pytest.mark.parametrize("method", ["hybrid", "vocabulary", "uniform", "wta"])
def test_every_image_finds_itself_and_its_group(indexed, method):
    col, _, _ = indexed
    paths = col.paths()
    group_hits = 0
    for p in paths:
        hits = col.query(p, method=method, top=4)
        assert all(isinstance(h, Hit) for h in hits) and len(hits) == 4
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert hits[0].path == p
        g = p.name.split("_")[0].split(".")[0]
        group_hits += sum(h.path.name.startswith(g) for h in hits)
    # 4 images per group: a perfect method scores 4 per query
    floor = {"uniform": 2.5}.get(method, 3.0)
    assert group_hits / len(paths) >= floor


def test_hybrid_verifies_same_object(indexed):
    col, _, _ = indexed
    q = next(p for p in col.paths() if p.name == "astronaut_rotate.jpg")
    hits = col.query(q, method="hybrid", top=len(col))
    names = [h.path.name.split("_")[0].split(".")[0] for h in hits]
    assert names[:4] == ["astronaut"] * 4
    # verified hits get the geometric bonus (> 1), unrelated ones do not
    assert hits[3].score > 1.0 > hits[4].score


def test_query_outside_collection_array_and_features(indexed, demo_folder):
    col, _, _ = indexed
    img = load_image(demo_folder / "coffee.jpg")
    crop = np.ascontiguousarray(img[40:330, 60:520])
    hits = col.query(crop, method="hybrid", top=3)
    assert hits[0].path.name.startswith("coffee")
    feats = col.features(hits[0].path)
    assert col.query(feats, method="vocabulary", top=1)[0].path == hits[0].path


def test_method_errors(indexed):
    col, _, _ = indexed
    p = col.paths()[0]
    with pytest.raises(ValueError, match="method"):
        col.query(p, method="nope")
    with pytest.raises(ValueError, match="top"):
        col.query(p, top=0)
    # "learned" is listed but provided by a higher layer: a collection handed only the
    # built-in methods says where it comes from; once engine.workflows.feedback is
    # imported (it registers the method) it asks for a learned model
    bare = Collection(col.folder, col.store, methods=methods.BUILTIN_METHODS)
    with pytest.raises(LookupError, match=r"engine\.workflows\.feedback"):
        bare.query(p, method="learned")
    import engine.workflows.feedback  # noqa: F401

    with pytest.raises(LookupError, match="simile learn"):
        col.query(p, method="learned")
    assert "learned" in METHODS and available_methods()[: len(METHODS)] == METHODS


def test_collection_is_handed_its_methods(indexed):
    """Collection.query dispatches to the methods it was handed (default: the registry,
    read at each query), with the query exactly as given."""
    col, _, _ = indexed
    p = col.paths()[0]
    calls = []

    def fake(collection, image, top):
        calls.append((collection, image, top))
        return [Hit(Path(image), 0.5)]

    handed = Collection(col.folder, col.store, methods={**methods.BUILTIN_METHODS, "fake": fake})
    got = handed.query(p, method="fake", top=3)
    assert [(h.path, h.score) for h in got] == [(p, 0.5)]
    assert got[0].probability is None and got[0].label == "looks alike"  # (no curve)
    assert calls == [(handed, p, 3)]
    assert handed.query(p, method="vocabulary", top=2) == col.query(p, method="vocabulary", top=2)
    with pytest.raises(ValueError, match="method"):
        col.query(p, method="fake")  # not registered: the default registry does not have it
    late = Collection(col.folder, col.store)  # handed the registry
    register_method("fake", fake)  # registered after the collection was opened
    try:
        assert available_methods() == (*METHODS, "fake")
        assert [(h.path, h.score) for h in late.query(p, method="fake", top=1)] == [(p, 0.5)]
    finally:
        methods.REGISTRY.unregister("fake")
    assert "fake" not in available_methods()


def test_matrices(indexed):
    col, _, _ = indexed
    n = len(col)
    for method in ("vocabulary", "uniform"):
        K = col.kernel_matrix(method)
        assert K.shape == (n, n)
        np.testing.assert_allclose(K, K.T)
        np.testing.assert_allclose(np.diag(K), 1.0)
        assert K.min() >= 0 and K.max() <= 1 + 1e-9
        # kernel rows agree with the query scores of the same method (exhaustive)
        hits = col.query(col.paths()[2], method=method, top=n)
        row = {h.path: h.score for h in hits}
        got = np.array([row[p] for p in col.paths()])
        others = np.arange(n) != 2
        np.testing.assert_allclose(got[others], K[2][others], rtol=1e-5, atol=1e-6)
        if method == "vocabulary":
            # the query's score with itself is the sum of its pyramid's values, which
            # are L1-normalised, then kept to float16 precision (as the index stores
            # them): 1 to within that precision, where K's diagonal is 1 by definition
            _, data = col.searcher.ensure()
            own = float(np.sum(data.vocab.row(2)[1], dtype=np.float64))
            assert got[2] == pytest.approx(own, rel=1e-6)
            assert abs(got[2] - 1.0) < 1e-3
        else:
            assert got[2] == pytest.approx(K[2, 2], rel=1e-5)
    B = col.bow_matrix()
    assert B.shape[0] == n and B.dtype == np.float32
    np.testing.assert_allclose(np.sqrt(B.multiply(B).sum(axis=1)).A.ravel(), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="method"):
        col.kernel_matrix("wta")


def test_match_has_inlier_mask(indexed, photo_dir):
    col, _, _ = indexed
    a, b = photo_dir / "brick.jpg", photo_dir / "brick_light.jpg"
    r = col.match(a, b)
    assert r.inliers.dtype == bool and r.inliers.shape == (len(r),)
    assert r.inliers.sum() >= 20
    unrelated = col.match(a, photo_dir / "coffee.jpg")
    assert unrelated.inliers.sum() < r.inliers.sum() / 2


def test_save_load_array(indexed):
    col, _, _ = indexed
    col.save_array("test.clusters", np.arange(5))
    np.testing.assert_array_equal(col.load_array("test.clusters"), np.arange(5))


def test_duplicates(tmp_path, demo_folder, monkeypatch):
    for name in ("camera.jpg", "camera_jpeg.jpg", "coins.jpg", "rocket.jpg", "grass.jpg"):
        shutil.copy(demo_folder / name, tmp_path / name)
    shutil.copy(demo_folder / "coins.jpg", tmp_path / "coins_copy.jpg")
    with Collection.open(tmp_path) as col:
        _run(col.update(jobs=1))
        remembered = col.index_dir / PAIR_CACHE_FILE

        def checked_afresh():  # (the remembered pair checks would answer otherwise)
            remembered.unlink(missing_ok=True)
            return col.duplicates()

        groups = checked_afresh()
        assert remembered.exists()
        again = col.duplicates()  # from the remembered checks
        # chunks of pairs smaller than the feature cache's reach: the same groups and
        # scores as one chunk with every image cached
        monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 3)
        monkeypatch.setattr(dup, "DUPLICATE_CACHE", 2)
        small = checked_afresh()
        monkeypatch.setattr(dup, "DUPLICATE_BLOCK", 10_000)
        monkeypatch.setattr(dup, "DUPLICATE_CACHE", 10_000)
        one = checked_afresh()
        monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", 0)  # neighbours from the WTA bands,
        monkeypatch.setattr(cand, "MIN_CANDIDATES", 2)  # few enough that the bands decide
        hashed = checked_afresh()
    assert [(g.paths, g.scores) for g in again] == [(g.paths, g.scores) for g in one]
    assert [(g.paths, g.scores) for g in small] == [(g.paths, g.scores) for g in one]
    assert [(g.paths, g.scores) for g in hashed] == [(g.paths, g.scores) for g in one]
    assert [(g.paths, g.scores) for g in groups] == [(g.paths, g.scores) for g in one]
    assert all(isinstance(g, DuplicateGroup) for g in groups)
    found = sorted(sorted(p.name for p in g.paths) for g in groups)
    assert ["coins.jpg", "coins_copy.jpg"] in found
    assert ["camera.jpg", "camera_jpeg.jpg"] in found
    assert len(found) == 2
    for g in groups:
        assert g.scores[0] == 1.0 and all(0 < s <= 1 for s in g.scores)
    with pytest.raises(ValueError, match="threshold"):
        col.duplicates(threshold=0)


def test_incremental_update_and_interrupted_run(tmp_path, demo_folder):
    names = ["astronaut.jpg", "astronaut_light.jpg", "brick.jpg", "brick_crop.jpg", "coffee.jpg"]
    for name in names[:4]:
        shutil.copy(demo_folder / name, tmp_path / name)
    with Collection.open(tmp_path) as col:
        s1, _ = _run(col.update(jobs=1))
        assert (s1.indexed, s1.unchanged, s1.removed) == (4, 0, 0)
        s2, _ = _run(col.update(jobs=1))
        assert (s2.indexed, s2.unchanged, s2.removed) == (0, 4, 0)
        (tmp_path / "brick_crop.jpg").unlink()
        shutil.copy(demo_folder / "coffee.jpg", tmp_path / "coffee.jpg")
        s3, _ = _run(col.update(jobs=1))
        assert (s3.indexed, s3.unchanged, s3.removed) == (1, 3, 1)
        assert sorted(p.name for p in col.paths()) == sorted(
            ["astronaut.jpg", "astronaut_light.jpg", "brick.jpg", "coffee.jpg"]
        )
        assert col.query(tmp_path / "coffee.jpg", top=1)[0].path.name == "coffee.jpg"
        # a run cancelled before finalizing: new images are held and still queryable
        shutil.copy(demo_folder / "brick_light.jpg", tmp_path / "brick_light.jpg")
        cancel = threading.Event()
        gen = col.update(jobs=1, cancel=cancel)
        for ev in gen:
            if ev.status == "indexed":
                cancel.set()
        # the generator returned the summary at StopIteration; reopen read-only
    with Collection.open(tmp_path, readonly=True) as ro:
        paths = [p.name for p in ro.paths()]
        assert "brick_light.jpg" in paths
        hits = ro.query(tmp_path / "brick_light.jpg", method="vocabulary", top=2)
        assert hits[0].path.name == "brick_light.jpg"
        assert hits[1].path.name == "brick.jpg"


def test_default_index_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    photos = tmp_path / "photos"
    photos.mkdir()
    assert default_index_dir(photos) == photos / ".simile"
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == photos else real_access(p, mode)
    )
    d = default_index_dir(photos)
    assert d.parent == tmp_path / "cache" / "simile" and len(d.name) == 16
    assert default_index_dir(photos) == default_index_dir(str(photos) + "/")


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        Collection.open(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        Collection.open(tmp_path, readonly=True)


def test_public_pyramid_and_bow_vector(indexed):
    from engine.kernels.pyramid import PyramidMatch

    coll = indexed[0]
    X = coll.bow_matrix()
    p = coll.paths()[3]
    v = coll.bow_vector(p)
    assert v.shape == (1, X.shape[1])
    np.testing.assert_allclose(v.toarray()[0], X[3].toarray()[0], atol=1e-6)
    pm = coll.pyramid("uniform")
    assert isinstance(pm, PyramidMatch) and isinstance(coll.pyramid(), PyramidMatch)
    f = coll.features(p)
    assert pm.kernel([f.descriptors])[0, 0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="vocabulary"):
        coll.pyramid("wta")


def test_reopened_index_is_compact_and_answers_the_same(indexed, monkeypatch):
    """A reader loads the saved search data in arrays it owns -- the vocabulary pyramids
    by column, without the (nnz,) keys; the uniform ones by key, without columns -- and
    answers every method -- exhaustive and hashed -- exactly as the writer does."""
    col, _, _ = indexed
    other = Collection.open(col.folder, col.index_dir, readonly=True)
    try:
        _, data = other.searcher.ensure()
        assert not data.vocab.holds_keys and data.vocab.values.flags.owndata
        assert data.uniform.stored_columns is None and data.uniform.keys.flags.owndata
        assert data.uniform.values.flags.owndata
        for limit in (cand.EXHAUSTIVE_LIMIT, 0):  # 0: every method takes hashed candidates
            monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", limit)
            for method in ("vocabulary", "uniform", "wta"):
                for p in col.paths()[:3]:
                    a = col.query(p, method=method, top=5)
                    b = other.query(p, method=method, top=5)
                    assert [h.path for h in a] == [h.path for h in b]
                    np.testing.assert_allclose([h.score for h in a], [h.score for h in b])
        assert other.kernel_matrix("uniform").shape == (len(col), len(col))
        assert data.uniform.stored_columns is None  # no query needed collection-wide columns
    finally:
        other.close()


@pytest.mark.parametrize("top_bits", [0, 8, 40])
def test_key_major_order_is_the_exact_sort(top_bits):
    """The packed sort of batch_codes orders entries by (key, set) and marks the start
    of every group as the exact two-key sort does, also when keys share their top bits
    within a set or across sets in the opposite order (it must fall back then)."""
    rng = np.random.default_rng(top_bits)
    n_sets, E = 13, 3000
    top = rng.integers(0, 6, E).astype(np.uint64) << np.uint64(60)  # few distinct top bits
    cases = {
        "random": rng.integers(0, 2**63, E).astype(np.uint64) * np.uint64(2),
        "shared top bits": top | rng.integers(0, 50, E).astype(np.uint64),
        "few keys": rng.integers(0, 40, E).astype(np.uint64) << np.uint64(20),
    }
    # random keys but a few pairs that differ in their low bits only (the runs that
    # are sorted again)
    near = rng.integers(0, 2**63, E).astype(np.uint64) * np.uint64(2)
    near[rng.integers(0, E, 5)] = near[rng.integers(0, E, 5)] ^ np.uint64(3)
    cases["a few near collisions"] = near
    for name, sk in cases.items():
        entry_set = rng.integers(0, n_sets, E).astype(np.int64)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(codes, "PACK_KEY_BITS", top_bits)
            order, ks, new, rs = codes.key_major_order(sk, entry_set, 4)
        want = np.lexsort((entry_set, sk))
        np.testing.assert_array_equal(order, want, err_msg=name)
        np.testing.assert_array_equal(ks, sk[want], err_msg=name)
        np.testing.assert_array_equal(rs, entry_set[want], err_msg=name)
        ref_new = np.r_[True, (ks[1:] != ks[:-1]) | (entry_set[want][1:] != entry_set[want][:-1])]
        np.testing.assert_array_equal(new, ref_new, err_msg=name)


@pytest.mark.parametrize("grouped", [True, False], ids=["nested-groups", "entry-sort"])
@pytest.mark.parametrize("packed", [True, False], ids=["packed-sort", "exact-sort"])
def test_batch_codes_equal_the_pyramid_encoding(indexed, packed, grouped, monkeypatch):
    """The lean encoder of the index and of queries gives exactly the keys, counts and
    levels of PyramidMatch.encode, sorted by (set, key), with the batch's columns; and
    for the uniform pyramid the same weighted histograms. Batches with empty and
    one-point sets, a single set, an empty batch, and a point far outside the fitted
    range (its cells do not fit the grouped path's sort key) included; both with the
    (set, bin) groups of the nested binnings and with the sort of all entries."""
    if not packed:  # the exact two-key sort (used when packed keys would collide)
        monkeypatch.setattr(codes, "PACK_KEY_BITS", 65)
    monkeypatch.setattr(codes, "GROUPED_MIN_POINTS", 1)  # these batches are small
    calls = []
    nested = codes.nested_groups

    def spy(*args, **kw):
        out = nested(*args, **kw)
        calls.append(out is not None)
        return out if grouped else None

    monkeypatch.setattr(codes, "nested_groups", spy)
    col, _, _ = indexed
    models, _ = col.searcher.ensure()
    d = [col.features(p).descriptors for p in col.paths()[:3]]
    far = d[1][:5].copy()
    far[0] *= 1e6
    batches = [
        [d[0]],
        [d[0][:1]],
        [d[0][:0]],
        [d[0], d[1][:0], d[1], d[2][:1], d[2]],
        [d[2], far],
        [],
    ]
    for sets in batches:
        for pm, weights in ((models.vocab, False), (models.uniform, True)):
            got = codes.batch_codes(pm, sets, weights=weights)
            # the stacked sets read from the store give the same codes
            X = np.concatenate(sets) if sets else np.zeros((0, pm.dim_), np.float32)
            stack = codes.StackedSets(X, np.array([len(s) for s in sets], np.int64))
            assert [len(s) for s in stack.sets()] == [len(s) for s in sets]
            same = codes.batch_codes(pm, stack, weights=weights)
            assert vars(same).keys() == vars(got).keys()
            for name, value in vars(got).items():
                np.testing.assert_array_equal(getattr(same, name), value, err_msg=name)
            assert got.n == len(sets)
            assert got.sizes.tolist() == [len(s) for s in sets]
            if sum(len(s) for s in sets) == 0:
                assert got.key.size == 0 and got.ukeys.size == 0
                continue
            ref = pm.encode(sets)
            o = np.lexsort((ref.key, ref.row))
            np.testing.assert_array_equal(got.row, ref.row[o])
            np.testing.assert_array_equal(got.key, ref.key[o])
            np.testing.assert_array_equal(got.count, ref.count[o])
            np.testing.assert_array_equal(got.level, ref.level[o])
            np.testing.assert_array_equal(got.ukeys, np.unique(ref.key))
            np.testing.assert_array_equal(got.ukeys[got.col], got.key)
            if weights:  # what the uniform score reads
                ix = codes.intersection_index(got, code_values(got, weighting="pm"))
                want = histograms_from_codes(ref, weighting="pm")
                for a, b in zip((ix.indptr, ix.keys, ix.values), want, strict=True):
                    np.testing.assert_array_equal(a, b)
                uk, cols = ix.columns()
                np.testing.assert_array_equal(uk, np.unique(want[1]))
                np.testing.assert_array_equal(uk[cols], want[1])
    # both vocabulary trees and every uniform grid were grouped, except the far point's
    # uniform grids (batch codes computed twice: from the list and from the stack)
    assert calls.count(False) == len(models.uniform.binnings_) * 2
    # a query-sized batch sorts all pairs (grouping costs more there)
    monkeypatch.setattr(codes, "GROUPED_MIN_POINTS", 4096)
    n_calls = len(calls)
    codes.batch_codes(models.uniform, [d[0]], weights=True)
    assert len(calls) == n_calls
    # a query of an indexed image is encoded as the index encoded it
    _, data = col.searcher.ensure()
    path = col.paths()[1]
    q = col.searcher.query_encoding(models, col.features(path), frozenset())
    want = data.vocab.row(col.searcher.row_of_id[int(data.ids[1])])
    for a, b in zip(q.vocab.row(0), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_more_hyperplanes_migrate_the_stored_bits(tmp_path, demo_folder, monkeypatch):
    """When rh_bits asks for more bits than the index holds, a writer re-hashes the
    stored pyramids (no feature is read) and saves them; the old bits are a prefix of
    the new ones; a reader keeps what is stored."""
    import engine.index.searcher as searcher_module

    folder = tmp_path / "p"
    folder.mkdir()
    for name in sorted(os.listdir(demo_folder))[:8]:
        if name.endswith(".jpg"):
            shutil.copy(demo_folder / name, folder / name)
    with Collection.open(folder) as col:
        _run(col.update(jobs=1))
        old = col.searcher.data.rh.copy()
        assert col.searcher.models.rh.n_bits == cand.rh_bits(len(col)) == old.shape[1] * 8
    monkeypatch.setattr(cand, "rh_bits", lambda n: 1024)
    with Collection.open(folder, readonly=True) as reader:
        _, data = reader.searcher.ensure()
        np.testing.assert_array_equal(data.rh, old)  # readers never re-hash
    with Collection.open(folder) as col:
        models, data = col.searcher.ensure()
        assert models.rh.n_bits == old.shape[1] * 8  # only update() migrates
        monkeypatch.setattr(
            searcher_module, "stacked", lambda store, ids: pytest.fail("read features")
        )
        summary, _ = _run(col.update(jobs=1))
        assert summary.unchanged == len(col)
        models, data = col.searcher.ensure()
        assert models.rh.n_bits == 1024 and data.rh.shape == (len(col), 128)
        np.testing.assert_array_equal(data.rh[:, : old.shape[1]], old)
        # the query side hashes with the same hyperplanes: an image finds its own bits
        q = col.searcher.query_encoding(models, col.features(col.paths()[2]), frozenset({"rh"}))
        assert (np.unpackbits(q.rh ^ data.rh[2]).mean()) < 0.02
    monkeypatch.undo()
    with Collection.open(folder, readonly=True) as reader:
        models, data = reader.searcher.ensure()
        assert models.rh.n_bits == 1024 and data.rh.shape[1] == 128


@pytest.mark.parametrize("kind", ["fused", "hashes", "wta"])
def test_scored_fraction_follows_method_and_candidate_kind(indexed, monkeypatch, kind):
    """Hashed queries score CANDIDATE_FRACTION of the collection exactly; ``uniform``
    scores CANDIDATE_FRACTION_UNIFORM unless its candidates come from the fused ranking
    (whose inverted file already finds the uniform neighbours at the smaller fraction)."""
    col, _, _ = indexed
    n = len(col)
    monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", 0)
    monkeypatch.setattr(cand, "MIN_CANDIDATES", 1)
    monkeypatch.setattr(cand, "CANDIDATE_FRACTION", 0.25)
    monkeypatch.setattr(cand, "CANDIDATE_FRACTION_UNIFORM", 0.75)
    monkeypatch.setattr(cand, "CANDIDATE_KIND", kind)
    searcher = col.searcher
    searcher.cache = {}
    models, data = searcher.ensure()
    feats = col.features(col.paths()[0])
    for method in ("vocabulary", "wta", "uniform"):
        frac = 0.75 if method == "uniform" and kind != "fused" else 0.25
        rows, scores = methods.BUILTIN_METHODS[method].search(searcher, models, data, feats, 1)
        assert searcher.last_scored == int(np.ceil(frac * n)), (method, kind)
        assert rows.size == 1 and np.isfinite(scores).all()
    searcher.cache = {}


def test_a_large_collection_scores_at_most_candidate_cap_rows(indexed, monkeypatch):
    """The fused candidates' exact scoring stops growing with the collection: at most
    CANDIDATE_CAP rows (at least MIN_CANDIDATES); ``uniform`` from the hashes alone keeps
    its fraction."""
    col, _, _ = indexed
    n = len(col)
    monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", 0)
    monkeypatch.setattr(cand, "MIN_CANDIDATES", 2)
    monkeypatch.setattr(cand, "CANDIDATE_FRACTION", 0.5)
    monkeypatch.setattr(cand, "CANDIDATE_CAP", 3)
    assert n > 6  # (the fraction alone would score more)
    assert cand.candidate_count("vocabulary", "fused", n, 1) == 3
    assert cand.candidate_count("vocabulary", "fused", n, 5) == 5  # (top asks for more)
    uniform = min(n, max(2, int(np.ceil(cand.CANDIDATE_FRACTION_UNIFORM * n))))
    assert cand.candidate_count("uniform", "hashes", n, 1) == uniform  # (no cap)
    searcher = col.searcher
    searcher.cache = {}
    models, data = searcher.ensure()
    feats = col.features(col.paths()[0])
    rows, _ = methods.BUILTIN_METHODS["vocabulary"].search(searcher, models, data, feats, 1)
    assert searcher.last_scored == 3 and rows.size == 1
    searcher.cache = {}


def _same_encoding(a, b):
    """Two one-row query encodings hold the same pyramid, bag of words and codes."""
    (ka, va), (kb, vb) = a.vocab.row(0), b.vocab.row(0)
    assert np.array_equal(ka, kb) and np.array_equal(va, vb)
    assert a.bow.shape == b.bow.shape and (a.bow != b.bow).nnz == 0
    assert np.array_equal(a.wta, b.wta) and np.array_equal(a.rh, b.rh)


@pytest.mark.parametrize("hashed", [False, True])
def test_a_photo_of_the_collection_is_queried_by_its_stored_row(indexed, monkeypatch, hashed):
    """A query by the path of a photo of the collection takes its stored row as its
    encoding (no feature read, no encoding): it is what encoding its features gives, and
    the hits are those of the same query given as Features (which are encoded)."""
    col, _, _ = indexed
    if hashed:
        monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", 0)
        monkeypatch.setattr(cand, "MIN_CANDIDATES", 3)
        monkeypatch.setattr(cand, "CANDIDATE_FRACTION", 0.3)
    searcher = col.searcher
    searcher.cache = {}
    models, data = searcher.ensure()
    reads, read = [], searcher.query_features
    monkeypatch.setattr(searcher, "query_features", lambda im: reads.append(im) or read(im))
    for path in col.paths():
        row = searcher.query_row(path)
        assert row is not None and data.ids[row] == col.store.record(path).id
        want = searcher.query_encoding(models, col.features(path), INDEX_PARTS)
        _same_encoding(stored_query(data, row), want)
        for method in ("vocabulary", "wta"):
            got = col.query(path, method=method, top=5)
            assert got == col.query(col.features(path), method=method, top=5), method
    assert not any(isinstance(r, Path) for r in reads)  # (paths were never read)
    assert searcher.query_row(col.features(col.paths()[0])) is None
    assert searcher.query_row(col.folder / "not-there.jpg") is None
    searcher.cache = {}


def test_uniform_cascade_keeps_the_exact_best(indexed, monkeypatch):
    """Many hashed candidates for ``uniform`` pass through the cosine -> vocabulary ->
    uniform cascade; each stage is exact on what it keeps, so an image of the collection
    still finds itself first, with its exhaustive uniform score."""
    col, _, _ = indexed
    n = len(col)
    exhaustive = {p: col.query(p, method="uniform", top=n) for p in col.paths()[:4]}
    monkeypatch.setattr(cand, "EXHAUSTIVE_LIMIT", 0)
    monkeypatch.setattr(cand, "CANDIDATE_KIND", "hashes")
    monkeypatch.setattr(cand, "CANDIDATE_FRACTION_UNIFORM", 1.0)
    monkeypatch.setattr(methods, "UNIFORM_RERANK", 2)
    monkeypatch.setattr(methods, "UNIFORM_PRESCORE", 2)
    assert n > 2 * 4  # top=1: 4 re-scored rows, the cosine step narrows n to 4
    calls = []
    real = IntersectionIndex.score

    def spy(self, k, v, rows=None):
        calls.append(None if rows is None else len(rows))
        return real(self, k, v, rows)

    monkeypatch.setattr(IntersectionIndex, "score", spy)
    for p, ref in exhaustive.items():
        calls.clear()
        hits = col.query(p, method="uniform", top=1)
        assert calls == [4, 4]  # vocabulary pyramid of 4 rows, uniform pyramid of 4
        assert hits[0].path == ref[0].path == Path(p)
        exact = {h.path: h.score for h in ref}
        assert hits[0].score == pytest.approx(exact[hits[0].path], rel=1e-6)


def _encoded_from_store(col):
    """The search data recomputed from the stored features with the collection's models."""
    models = col.searcher.models
    ids = col.store.ids("ok")
    sets = [f.descriptors for _, f in col.store.iter_features(ids)]
    return encode(models, ids, sets)


def _assert_same_data(a, b):
    assert np.array_equal(a.ids, b.ids)
    for part in ("vocab", "uniform"):
        x, y = getattr(a, part), getattr(b, part)
        assert np.array_equal(x.indptr, y.indptr)
        np.testing.assert_allclose(x.values, y.values, rtol=1e-6)
        if part == "vocab":
            uk, cols = x.columns()  # merged batch by batch: still the sorted unique keys
            assert np.array_equal(uk[cols], y.keys) and np.all(np.diff(uk) > 0)
        else:  # by key, no columns
            assert x.stored_columns is None and np.array_equal(x.keys, y.keys)
    assert abs(a.bow - b.bow).max() < 1e-6
    assert np.array_equal(a.wta, b.wta) and np.array_equal(a.rh, b.rh)


@pytest.mark.parametrize("jobs", [1, 2])
def test_first_index_fits_models_while_extracting(tmp_path, demo_folder, monkeypatch, jobs):
    monkeypatch.setattr(fit, "PREFIT_SPREAD", 4)
    monkeypatch.setattr(fit, "SAMPLE_DESCRIPTORS", 1500)  # a sample from the spread files only
    names = sorted(n for n in os.listdir(demo_folder) if n.endswith(".jpg"))[:12]
    for name in names:
        shutil.copy(demo_folder / name, tmp_path / name)
    # a featureless image (usable, no features) is encoded during extraction too
    cv2.imwrite(str(tmp_path / "flat.png"), np.full((64, 64), 128, np.uint8))
    calls = {"fit": [], "prepared": []}
    fit_binnings, finish = fit.fit_binnings, fit.Prefit.finish

    def spy_fit(sets, n_images, **kw):
        calls["fit"].append(threading.current_thread().name)
        return fit_binnings(sets, n_images, **kw)

    def spy_finish(self):
        out = finish(self)
        calls["prepared"].append(out)
        return out

    monkeypatch.setattr(fit, "fit_binnings", spy_fit)
    monkeypatch.setattr(fit.Prefit, "finish", spy_finish)
    models = []
    for k in range(2):  # two first builds of the same folder: the same models
        with Collection.open(tmp_path, index_dir=tmp_path / f"idx{k}") as col:
            summary, events = _run(col.update(jobs=jobs))
            assert summary.indexed == len(names) + 1
            assert len(col.features(tmp_path / "flat.png")) == 0
            indexed = [Path(e.path).name for e in events if e.status == "indexed"]
            if jobs == 1:  # the spread files are extracted first
                spread = [sorted([*names, "flat.png"])[i] for i in (0, 4, 8, 12)]
                assert indexed[:4] == spread
            pre = calls["prepared"][-1]
            assert pre is not None and set(pre.ids) == set(col.store.ids("ok"))
            data = col.searcher.data
            assert np.array_equal(data.ids, col.store.ids("ok"))
            _assert_same_data(data, _encoded_from_store(col))
            # one file of search data: the uniform pyramids are not stored (they are made
            # from the stored features when a query needs them)
            assert len(col.store.snapshot().entries["search.data"].files) == 1
            with Collection.open(tmp_path, index_dir=tmp_path / f"idx{k}", readonly=True) as r:
                _assert_same_data(r.searcher.ensure()[1], data)
            assert col.query(tmp_path / names[5], top=1)[0].path.name == names[5]
            models.append(col.searcher.models.vocab.binnings_[0].centers(2))
    # fitted once per build, on the prefit thread, never again in the refresh
    assert calls["fit"] == ["simile-prefit"] * 2
    assert np.array_equal(models[0], models[1])


def test_prefit_leaves_changed_files_to_the_refresh(tmp_path, demo_folder, monkeypatch):
    """After an interrupted first build, a file that changed keeps its id while its
    features are replaced: the prefit thread must not encode its old features."""
    monkeypatch.setattr(fit, "PREFIT_SPREAD", 3)
    names = ["astronaut.jpg", "brick.jpg", "coffee.jpg", "brick_crop.jpg", "coffee_light.jpg"]
    for name in names[:3]:
        shutil.copy(demo_folder / name, tmp_path / name)
    with Collection.open(tmp_path) as col:
        cancel = threading.Event()
        for ev in col.update(jobs=1, cancel=cancel):
            if ev.status == "indexed":
                cancel.set()  # features of the first file stored, no models
        assert not col.store.has_state(fit.MODELS_STATE)
        first = col.store.paths("ok")
        assert len(first) == 1
        shutil.copy(demo_folder / "astronaut_light.jpg", first[0])  # same path, new content
        os.utime(first[0], ns=(1, 1))
        for name in names[3:]:
            shutil.copy(demo_folder / name, tmp_path / name)
        summary, _ = _run(col.update(jobs=1))
        assert summary.indexed == 5 and col.store.has_state(fit.MODELS_STATE)
        _assert_same_data(col.searcher.data, _encoded_from_store(col))


def test_a_failing_prefit_leaves_the_work_to_the_refresh(tmp_path, demo_folder, monkeypatch):
    def boom(self):
        raise RuntimeError("prefit failed")

    monkeypatch.setattr(fit.Prefit, "_fit", boom)
    for name in ["astronaut.jpg", "brick.jpg", "coffee.jpg"]:
        shutil.copy(demo_folder / name, tmp_path / name)
    with Collection.open(tmp_path) as col:
        summary, _ = _run(col.update(jobs=1))
        assert summary.indexed == 3 and col.store.has_state(fit.MODELS_STATE)
        _assert_same_data(col.searcher.data, _encoded_from_store(col))
        assert col.query(tmp_path / "brick.jpg", top=1)[0].path.name == "brick.jpg"


def test_uniform_pyramids_saved_with_columns_still_load_and_update(tmp_path, demo_folder):
    """Indexes written before the uniform pyramids were made from the stored features hold
    them (older ones as columns, ``uniform.ukeys`` / ``uniform.cols``): such an index
    opens and answers as before, and the next update that adds an image leaves them out
    (engine/index/uniform_rows.py)."""
    for name in ["astronaut.jpg", "astronaut_light.jpg", "brick.jpg", "brick_crop.jpg"]:
        shutil.copy(demo_folder / name, tmp_path / name)
    with Collection.open(tmp_path) as col:
        _run(col.update(jobs=1))
        want = {p: col.query(p, method="uniform", top=4) for p in col.paths()}
        _, data = col.searcher.ensure()
        st = data.to_state()
        assert not any(k.startswith("uniform.") for k in st)  # not stored any more
        uk, cols = data.uniform.columns()  # the layout of older indexes
        st["uniform.ukeys"], st["uniform.cols"] = uk, cols
        st["uniform.values"], st["uniform.indptr"] = data.uniform.values, data.uniform.indptr
        col.store.save_state(DATA_STATE, st)
    with Collection.open(tmp_path, readonly=True) as ro:
        for p, hits in want.items():
            got = ro.query(p, method="uniform", top=4)
            assert [h.path for h in got] == [h.path for h in hits]
            np.testing.assert_allclose([h.score for h in got], [h.score for h in hits])
    shutil.copy(demo_folder / "coffee.jpg", tmp_path / "coffee.jpg")
    with Collection.open(tmp_path) as col:
        summary, _ = _run(col.update(jobs=1))
        assert (summary.indexed, summary.unchanged) == (1, 4)
    with Collection.open(tmp_path, readonly=True) as ro:
        _, data = ro.searcher.ensure()
        assert len(data.uniform) == 5
        assert ro.query(tmp_path / "coffee.jpg", method="uniform", top=1)[0].path.name == (
            "coffee.jpg"
        )
        for p, hits in want.items():  # the old rows' pyramids are unchanged
            got = [h for h in ro.query(p, method="uniform", top=5) if h.path.name != "coffee.jpg"]
            assert [h.path for h in got] == [h.path for h in hits]
            np.testing.assert_allclose([h.score for h in got], [h.score for h in hits])


def test_hits_carry_a_calibrated_probability_and_a_label(indexed):
    """The probability is a monotone function of the score (the ranking is the method's),
    in [0, 1]; a verified hybrid hit is "same object or place", other hits "looks alike"."""
    from engine.index.calibration import LOOKS_ALIKE, SAME, hit_probability

    col, _, _ = indexed
    p = col.paths()[0]
    hits = col.query(p, method="hybrid", top=5)
    probs = [h.probability for h in hits]
    assert all(0.0 <= q <= 1.0 for q in probs) and probs == sorted(probs, reverse=True)
    assert hits[0].label == SAME and hits[0].probability > 0.5  # itself, verified
    assert all(h.label == (SAME if h.score >= 1 else LOOKS_ALIKE) for h in hits)
    voc = col.query(p, method="vocabulary", top=5)
    assert all(h.label == LOOKS_ALIKE for h in voc)
    assert voc[0].probability == hit_probability("vocabulary", voc[0].score)
    assert hit_probability("learned", 0.9) is None
