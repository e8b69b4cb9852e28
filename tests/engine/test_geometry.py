"""Tests for engine.geometry.verify on synthetic correspondences with known transforms."""

import numpy as np
import pytest

from engine.index.geometry import verify


def _warp(h, xy):
    p = np.c_[xy, np.ones(len(xy))] @ h.T
    return (p[:, :2] / p[:, 2:]).astype(np.float32)


@pytest.mark.parametrize("model", ["homography", "affine", "similarity"])
def test_recovers_inliers_among_outliers(model):
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 300, (120, 2)).astype(np.float32)
    c, s = np.cos(0.3) * 1.2, np.sin(0.3) * 1.2
    h = np.array([[c, -s, 20.0], [s, c, -10.0], [0, 0, 1]])
    if model == "homography":
        h[2, :2] = [1e-4, -2e-4]
    b = _warp(h, a)
    b += rng.normal(0, 0.5, b.shape).astype(np.float32)
    out = rng.random(120) < 0.4
    b[out] = rng.uniform(0, 300, (out.sum(), 2))
    r = verify(a, b, model=model, threshold=4.0)
    assert r
    assert r.inliers.shape == (120,)
    # nearly all true pairs found, almost no outliers accepted
    assert (r.inliers & ~out).sum() >= 0.95 * (~out).sum()
    assert (r.inliers & out).sum() <= 2
    assert r.n_inliers == r.inliers.sum()
    assert np.abs(_warp(r.model, a[~out]) - b[~out]).max() < 4.0


def test_too_few_points_is_a_result():
    a = np.zeros((3, 2), np.float32)
    r = verify(a, a + 1)
    assert not r and r.n_inliers == 0 and r.inliers.shape == (3,) and r.model is None
    r = verify(np.zeros((0, 2)), np.zeros((0, 2)))
    assert r.n_inliers == 0 and r.inliers.shape == (0,)


def test_random_pairs_give_no_model():
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 300, (40, 2))
    b = rng.uniform(0, 300, (40, 2))
    r = verify(a, b, model="similarity", threshold=3.0, min_inliers=8)
    assert r.n_inliers < 8


def test_degenerate_points():
    a = np.full((20, 2), 5.0)
    assert verify(a, a).n_inliers == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="model"):
        verify(np.zeros((5, 2)), np.zeros((5, 2)), model="projective")
    with pytest.raises(ValueError, match="shape"):
        verify(np.zeros((5, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="threshold"):
        verify(np.zeros((5, 2)), np.zeros((5, 2)), threshold=0)
