"""Collection.explain: the "why" of a hit is the hybrid ranking's own same-object check
(engine.index.explain; issue #21, point 4)."""

import shutil

import numpy as np
import pytest

import engine.index.verify as verify_mod
from engine.collection import VERIFY_MIN_INLIERS, Collection
from engine.index.calibration import hit_label, hit_probability, verified
from engine.index.explain import Explanation
from engine.index.verify import Verification, ranking_check
from tests._composite import H, region_folder

GROUPS = ("astronaut", "brick", "coffee", "chelsea")


def _run(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


@pytest.fixture(scope="module")
def collection(tmp_path_factory, demo_folder):
    """The demo photos of four subjects (each with three altered copies), and a photo of
    astronaut and coffee side by side outside the folder."""
    root = tmp_path_factory.mktemp("explain")
    folder, query, left, width = region_folder(root, demo_folder)
    for p in sorted(demo_folder.glob("chelsea*.jpg")):
        shutil.copy(p, folder / p.name)
    col = Collection.open(folder, root / "index")
    _run(col.update(jobs=1))
    yield col, query, left, width
    col.close()


def _same(e: Explanation, ref: Verification) -> None:
    np.testing.assert_array_equal(e.pairs, ref.pairs)
    np.testing.assert_array_equal(e.inliers, ref.inliers)
    assert e.n_inliers == ref.n_inliers
    assert e.verified == ref.verified


def test_accepted_pairs_are_the_ranking_checks_inliers(collection):
    col, _q, _l, _w = collection
    a = col.folder / "brick.jpg"
    for b, same in (("brick_perspective.jpg", True), ("coffee.jpg", False)):
        b = col.folder / b
        e = col.explain(a, b)
        # the ranking checks the query's features as query_features gives them and the
        # hit's stored ones
        fa, _ = col.searcher.query_features(a)
        ref = ranking_check(fa, col.features(b))
        _same(e, ref)
        assert e.verified is same
        p = len(e)
        assert e.pairs.shape == (p, 2) and e.pairs.dtype == np.int64
        assert e.xy_a.shape == e.xy_b.shape == (p, 2) and e.xy_a.dtype == np.float32
        assert e.similarity.shape == (p,) and e.similarity.dtype == np.float32
        assert e.inliers.shape == (p,) and e.inliers.dtype == bool
        np.testing.assert_array_equal(e.xy_a, fa.xy[e.pairs[:, 0]])
        np.testing.assert_array_equal(e.xy_b, col.features(b).xy[e.pairs[:, 1]])
        np.testing.assert_array_equal(e.accepted, np.flatnonzero(ref.inliers))
        # descriptors of the paired details: the nearest ones, alike
        assert (e.similarity <= 1.0 + 1e-5).all() and (e.similarity > 0.3).all()
    # the true pair has many accepted correspondences, the wrong one fewer than needed
    true, wrong = col.explain(a, col.folder / "brick_perspective.jpg"), e
    assert true.n_inliers >= 3 * VERIFY_MIN_INLIERS > 3 * wrong.n_inliers
    # the pyramid match's correspondences ride along (the "looks alike" evidence)
    assert true.pyramid is not None and len(true.pyramid) > 0
    assert true.pyramid.inliers.shape == (len(true.pyramid),)


def test_a_box_query_is_explained_by_the_boxs_features(collection):
    col, query, left, width = collection
    box = (left, 0, width - left, H)  # the coffee cup, right half of a photo outside
    target = col.folder / "coffee_light.jpg"
    e = col.explain(query, target, box=box)
    region = col.region_features(query, box)
    _same(e, ranking_check(region, col.features(target)))
    assert e.verified and len(e.features_a) == len(region)
    assert (e.xy_a[:, 0] >= left * region.image_size[0] / width - 1).all()  # all in the box
    # the whole photo's explanation is another one (both halves)
    whole = col.explain(query, target)
    assert len(whole.features_a) != len(region)


@pytest.mark.parametrize("boxed", [False, True])
def test_explanations_agree_with_the_hybrid_ranking(collection, boxed):
    """Every hit of a hybrid search: verified in the list iff its explanation is
    verified (with VERIFY_MIN_INLIERS accepted correspondences or more); the same score,
    probability and label."""
    col, query, left, width = collection
    if boxed:
        cases = [(query, (left, 0, width - left, H))]
    else:
        cases = [(col.folder / f"{g}.jpg", None) for g in ("astronaut", "brick")]
    kinds = set()
    for q, box in cases:
        hits = col.query(q, method="hybrid", top=len(col), box=box)
        for h in hits:
            e = col.explain(q, h.path, box=box)
            is_verified = verified("hybrid", h.score)
            kinds.add(is_verified)
            assert e.verified is is_verified, h.path.name
            if is_verified:
                assert e.n_inliers >= VERIFY_MIN_INLIERS
            assert e.score == pytest.approx(h.score, rel=1e-6, abs=1e-9), h.path.name
            assert e.probability == pytest.approx(h.probability)
            assert e.label == h.label
    assert kinds == {True, False}  # both kinds of hit were explained


def test_the_explanation_follows_the_ranking_check(collection, monkeypatch):
    """The explanation calls the ranking's check itself: a changed check changes both
    the ranking and the explanation, the same way."""
    col, _q, _l, _w = collection
    a, b = col.folder / "brick.jpg", col.folder / "coffee.jpg"
    calls = []

    def stub(fa, fb):
        calls.append((len(fa), len(fb)))
        m = min(len(fa), len(fb), 20)
        pairs = np.stack([np.arange(m), np.arange(m)], axis=1).astype(np.int64)
        inl = np.arange(m) % 2 == 0  # every other pair "accepted"
        return Verification(pairs, inl, int(inl.sum()), True, "homography")

    monkeypatch.setattr(verify_mod, "ranking_check", stub)
    e = col.explain(a, b)
    assert calls and len(e) == 20 and e.n_inliers == 10 and e.verified
    np.testing.assert_array_equal(e.accepted, np.arange(0, 20, 2))
    hit = next(h for h in col.query(a, method="hybrid", top=len(col)) if h.path == b)
    assert verified("hybrid", hit.score) and e.score == pytest.approx(hit.score)


def test_a_photo_outside_the_collection_has_no_score(collection):
    col, query, _l, _w = collection
    e = col.explain(col.folder / "coffee.jpg", query)
    assert e.score is None and e.probability is None and e.label == ""
    assert len(e.features_b) > 0  # (extracted: it is not indexed)
    # the pair's own number, for a photo of the collection not in any list
    e = col.explain(query, col.folder / "brick_light.jpg")
    assert e.score is not None
    assert e.probability == pytest.approx(hit_probability("hybrid", e.score))
    assert e.label == hit_label("hybrid", e.score)


def test_match_is_unchanged(collection):
    """``Collection.match`` still gives the pyramid match's correspondences (the CLI's)."""
    col, _q, _l, _w = collection
    a, b = col.folder / "brick.jpg", col.folder / "brick_light.jpg"
    r = col.match(a, b)
    e = col.explain(a, b)
    np.testing.assert_array_equal(r.pairs, e.pyramid.pairs)
    np.testing.assert_array_equal(r.inliers, e.pyramid.inliers)
    assert r.score == pytest.approx(e.pyramid.score)
