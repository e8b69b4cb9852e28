"""The hybrid ranking's same-object-or-place check (engine.index.verify.ranking_check):
a 3-D scene seen from two places fits no homography but one epipolar geometry, and is
verified; accidental matches are not; weak epipolar evidence is kept apart."""

from __future__ import annotations

import numpy as np
import pytest

from engine.features.keypoints import Features
from engine.index.verify import (
    EPIPOLAR_MIN_INLIERS,
    VERIFY_MIN_INLIERS,
    ranking_check,
    verify_pair,
    wgc_peak,
)

SIZE = (1024, 768)


def _project(X: np.ndarray, R: np.ndarray, t: np.ndarray, f: float = 800.0) -> np.ndarray:
    Xc = X @ R.T + t
    return np.stack([f * Xc[:, 0] / Xc[:, 2] + 512, f * Xc[:, 1] / Xc[:, 2] + 384], 1)


def _rot_y(deg: float) -> np.ndarray:
    a = np.deg2rad(deg)
    return np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])


def _views(n: int, seed: int, deep: bool):
    """Two photos of n 3-D points (a deep scene, 2 to 12 m away, or a wall at 4 m), the
    second taken 1.5 m to the side and turned; each point has one descriptor, seen in
    both (slightly noisy)."""
    rng = np.random.default_rng(seed)
    depth = 1.0 / rng.uniform(1 / 12, 1 / 2, n) if deep else np.full(n, 4.0)
    X = np.column_stack([rng.uniform(-2, 2, n), rng.uniform(-1.5, 1.5, n), depth])
    xa = _project(X, np.eye(3), np.zeros(3))
    X[:, :2] *= depth[:, None] / 4  # (spread across the view at every depth)
    xb = _project(X, _rot_y(12), np.array([-1.5, 0.0, 0.1]))
    d = rng.normal(size=(n, 128)).astype(np.float32)
    da = d / np.linalg.norm(d, axis=1, keepdims=True)
    db = d + 0.05 * rng.normal(size=d.shape).astype(np.float32)
    db /= np.linalg.norm(db, axis=1, keepdims=True)

    def feats(xy, desc):
        return Features(
            desc.astype(np.float32), xy.astype(np.float32), np.full(n, 12, np.float32),
            np.full(n, 30, np.float32), SIZE, "sift",
        )  # fmt: skip

    return feats(xa, da), feats(xb, db)


def test_a_scene_from_another_place_is_verified_by_its_epipolar_geometry():
    fa, fb = _views(40, seed=1, deep=True)
    homography = verify_pair(fa.descriptors, fa.xy, fb.descriptors, fb.xy, image_size=SIZE)
    assert not homography.verified  # the parallax of a deep scene fits no homography
    v = ranking_check(fa, fb)
    assert v.verified and v.geometry == "fundamental"
    assert v.n_inliers >= max(EPIPOLAR_MIN_INLIERS, 2 * homography.n_inliers)


def test_a_flat_scene_is_verified_by_a_homography():
    fa, fb = _views(120, seed=2, deep=False)
    v = ranking_check(fa, fb)
    assert v.verified and v.geometry == "homography" and v.n_inliers >= 0.8 * 120


def test_accidental_matches_are_not_verified():
    fa, fb = _views(120, seed=3, deep=True)
    rng = np.random.default_rng(3)
    # the same descriptors at unrelated places, turned and scaled every which way
    xy = rng.uniform([0, 0], SIZE, size=(120, 2)).astype(np.float32)
    scramble = Features(
        fb.descriptors, xy, rng.uniform(2, 60, 120).astype(np.float32),
        rng.uniform(0, 360, 120).astype(np.float32), SIZE, "sift",
    )  # fmt: skip
    assert wgc_peak(fa, scramble, np.stack([np.arange(120)] * 2, 1)) < 0.2 * 120
    v = ranking_check(fa, scramble)
    # an epipolar geometry fits a dozen of 120 accidental matches: not enough of them
    assert not v.verified and v.n_inliers < 0.25 * 120


@pytest.mark.parametrize("n_true", [10, 11])
def test_few_epipolar_inliers_are_weak_evidence_not_a_verification(n_true):
    """Between VERIFY_MIN_INLIERS and EPIPOLAR_MIN_INLIERS epipolar inliers the hit is
    moved up a little (verified_scores) but not called the same place."""
    from engine.index.verify import hybrid_scores, verified_scores

    fa, fb = _views(n_true, seed=4, deep=True)
    v = ranking_check(fa, fb)
    assert not v.verified and v.geometry == "fundamental"
    assert VERIFY_MIN_INLIERS <= v.n_inliers < EPIPOLAR_MIN_INLIERS

    class Store:
        def iter_features(self, ids):
            return [(int(i), fb) for i in ids]

    s = verified_scores(fa, Store(), np.array([0]), np.array([0.5]))
    unchecked = hybrid_scores(np.array([0.5]), [])
    assert unchecked[0] < s[0] < 1.0  # moved up, below every verified hit


def test_hybrid_scores_keep_verified_hits_first_and_the_expansion_moves_the_rest():
    from engine.index.verify import Verification, hybrid_scores

    none = np.zeros((0, 2), np.int64)
    verified = Verification(none, np.zeros(0, bool), 40, True, "homography")
    weak = Verification(none, np.zeros(0, bool), 9, False, "fundamental")
    nothing = Verification(none, np.zeros(0, bool), 0)
    s = np.array([0.2, 0.9, 0.5, 0.5, 0.5])
    out = hybrid_scores(s, [verified, nothing, weak, nothing])  # (the last not checked)
    assert 1.0 <= out[0] < 2.0 and (out[1:] < 1.0).all()  # a score >= 1 means verified
    assert out[1] > out[2] > out[3] == out[4]  # weak evidence moves a hit up a little
    # the expansion: a hit like the verified ones moves up among the unverified
    e = np.array([1.0, 0.0, 0.0, 0.0, 0.6])
    out = hybrid_scores(s, [verified, nothing, weak, nothing], e, 2.0)
    assert 1.0 <= out[0] < 2.0 and (out[1:] < 1.0).all()
    assert out[4] > out[1] > out[3]


def test_the_expansion_is_the_mean_likeness_to_the_verified_hits_and_1_for_the_query():
    from engine.index.methods import expansion_scores

    K = np.array([[1.0, 0.2, 0.4], [0.2, 1.0, 0.6], [0.4, 0.6, 1.0]])

    class Vocab:
        def row(self, v):
            return v, None

        def score(self, v, _values, rows):
            return K[v][rows]

    class Data:
        vocab = Vocab()

    rows = np.array([0, 1, 2])
    assert expansion_scores(Data(), np.array([], np.int64), rows) is None
    np.testing.assert_allclose(expansion_scores(Data(), np.array([1, 2]), rows), [0.3, 0.8, 0.8])
    got = expansion_scores(Data(), np.array([1, 2]), rows, query_row=0)
    np.testing.assert_allclose(got, [1.0, 0.8, 0.8])  # the query's own photo: 1


def test_hybrid_checks_the_best_verify_top_hits(monkeypatch):
    """The same object near the end of the checked hits (of a 100-hit shortlist) is
    checked, verified and ranked first; one just past them is not checked (and stays
    unverified: no check, no expansion)."""
    from engine.index import methods, verify
    from engine.index.verify import VERIFY_TOP, Verification

    none = np.zeros((0, 2), np.int64)
    checked: list[int] = []
    inside, outside = VERIFY_TOP - 5, VERIFY_TOP + 10

    def fake_check(_fa, fb):  # fb: the hit's store id
        checked.append(int(fb))
        n = 40 if fb in (100 + inside, 100 + outside) else 0
        return Verification(none, np.zeros(0, bool), n, n > 0, "homography" if n else "")

    class Store:
        def iter_features(self, ids):
            return ((int(i), int(i)) for i in ids)

    class Vocab:
        def row(self, v):
            return v, None

        def score(self, _v, _values, rows):
            return np.zeros(len(rows))

    class Data:
        ids = np.arange(100, 200)
        vocab = Vocab()

    class Searcher:
        store = Store()

    monkeypatch.setattr(verify, "ranking_check", fake_check)
    rows = np.arange(100)
    scores = np.linspace(0.9, 0.1, 100)
    out = methods.HybridSearch().final_scores(Searcher(), Data(), [0] * 10, rows, scores)
    assert checked[:VERIFY_TOP] == list(range(100, 100 + VERIFY_TOP))
    assert 100 + outside not in checked
    assert out[inside] >= 1.0 and int(np.argmax(out)) == inside
    assert (np.delete(out, inside) < 1.0).all()
