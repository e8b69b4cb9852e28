"""Explicit approximate correspondences (thesis 3.2.3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kernels.correspondences import correspondences
from engine.kernels.pyramid import PyramidMatch


def _pm_pairs(a, b, **kw):
    pm = PyramidMatch(**kw).fit([a, b])
    return pm, pm.match(a, b)


point_sets = (
    st.integers(0, 40)
    .flatmap(
        lambda m: st.lists(
            st.lists(st.floats(-3, 3, width=32), min_size=2, max_size=2), min_size=m, max_size=m
        )
    )
    .map(lambda rows: np.array(rows, np.float32).reshape(-1, 2))
)


@settings(max_examples=30, deadline=None)
@given(point_sets, point_sets, st.integers(0, 3))
def test_no_point_used_twice_and_partial_match_complete(a, b, seed):
    if len(a) + len(b) == 0:
        return
    pm = PyramidMatch(finest_side=0.05, random_state=seed).fit([a, b])
    r = pm.match(a, b)
    assert np.unique(r.pairs[:, 0]).size == len(r)
    assert np.unique(r.pairs[:, 1]).size == len(r)
    # uniform pyramids end in one bin: the smaller set is matched completely
    assert len(r) == min(len(a), len(b))
    # each pair shares its bin at its level, and not at any finer level (first shared bin
    # for at least one of the two points is that level)
    b0 = pm.binnings_[0]
    ba, bb = b0.assign(a)[0], b0.assign(b)[0]
    if len(r):
        i, j, lev = r.pairs[:, 0], r.pairs[:, 1], r.level
        assert np.all(ba[i, lev] == bb[j, lev])
        assert np.all(np.diff(r.level) >= 0)
        assert np.all(r.weight > 0)


def test_identical_sets_pair_each_point_with_itself_at_level_0():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 5)).astype(np.float32)
    perm = rng.permutation(200)
    _pm, r = _pm_pairs(a, a[perm])
    assert len(r) == 200 and np.all(r.level == 0)
    np.testing.assert_array_equal(perm[r.pairs[:, 1]], r.pairs[:, 0])
    assert r.score == pytest.approx(1.0)


def test_pairs_in_one_bin_are_optimal():
    # two tight clusters far apart: each cluster is matched internally and optimally
    a = np.array([[0, 0], [1, 0], [100, 0], [101, 0]], np.float32)
    b = np.array([[1.2, 0], [0.1, 0], [100.1, 0], [101.2, 0], [50, 0]], np.float32)
    bins_a = np.array([[1, 9], [1, 9], [2, 9], [2, 9]])
    bins_b = np.array([[1, 9], [1, 9], [2, 9], [2, 9], [3, 9]])
    w = np.tile([1.0, 0.5], (4, 1))
    pairs, level, weight = correspondences(bins_a, bins_b, a, b, w)
    got = {tuple(p) for p in pairs.tolist()}
    assert got == {(0, 1), (1, 0), (2, 2), (3, 3)}
    assert level.tolist() == [0, 0, 0, 0] and weight.tolist() == [1.0] * 4


def test_one_to_many_bins_pick_nearest():
    a = np.array([[0.0], [10.0]], np.float32)
    b = np.array([[3.0], [0.5], [9.0], [12.0], [10.4]], np.float32)
    bins_a = np.array([[1], [2]])
    bins_b = np.array([[1], [1], [2], [2], [2]])
    pairs, _level, _ = correspondences(bins_a, bins_b, a, b, np.ones((2, 1)))
    assert sorted(pairs.tolist()) == [[0, 1], [1, 4]]
    # many-to-one in the other direction
    pairs, _, _ = correspondences(bins_b, bins_a, b, a, np.ones((5, 1)))
    assert sorted(pairs.tolist()) == [[1, 0], [4, 1]]


def test_oversized_bin_is_chunked_but_valid():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(300, 3))
    b = rng.normal(size=(250, 3))
    bins_a = np.zeros((300, 1), np.int64)
    bins_b = np.zeros((250, 1), np.int64)
    pairs, _, _ = correspondences(bins_a, bins_b, a, b, np.ones((300, 1)), max_bin_cells=5000)
    assert len(pairs) == 250
    assert np.unique(pairs[:, 0]).size == 250 and np.unique(pairs[:, 1]).size == 250


def test_match_500_points_is_fast():
    import time

    rng = np.random.default_rng(2)
    a = rng.normal(size=(500, 10)).astype(np.float32)
    b = np.concatenate([a[:400] + 0.05 * rng.normal(size=(400, 10)), rng.normal(size=(100, 10))])
    pm = PyramidMatch().fit([a, b])
    t = time.perf_counter()
    r = pm.match(a, b.astype(np.float32))
    assert time.perf_counter() - t < 2.0  # generous: the box is shared
    # near-duplicates are mostly paired with their originals
    good = r.pairs[r.pairs[:, 1] < 400]
    assert np.mean(good[:, 0] == good[:, 1]) > 0.9


def test_xy_carried_along():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(20, 4)).astype(np.float32)
    xy = rng.random((20, 2)).astype(np.float32)
    pm, _ = _pm_pairs(a, a)
    r = pm.match(a, a[::-1], xy_a=xy, xy_b=xy[::-1])
    np.testing.assert_array_equal(r.xy_a, r.xy_b)


def test_bad_input():
    with pytest.raises(ValueError, match="metric"):
        correspondences(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 2)),
                        np.zeros((1, 2)), np.ones((1, 1)), metric="cos")  # fmt: skip
    with pytest.raises(ValueError, match="equal L"):
        correspondences(np.zeros((1, 1)), np.zeros((1, 2)), np.zeros((1, 2)),
                        np.zeros((1, 2)), np.ones((1, 1)))  # fmt: skip
