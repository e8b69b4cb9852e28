"""Optimal partial matching reference (Eqs. 3.2-3.4)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.kernels.optimal import optimal_partial_match


def brute_force(a, b):
    if len(a) > len(b):
        return brute_force(b, a)
    d = np.abs(a[:, None, :] - b[None, :, :]).sum(-1)
    return min(
        d[np.arange(len(a)), list(p)].sum() for p in itertools.permutations(range(len(b)), len(a))
    )


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(int(rng.integers(1, 5)), 3)).astype(np.float32)
    b = rng.normal(size=(int(rng.integers(1, 6)), 3)).astype(np.float32)
    cost, pairs = optimal_partial_match(a, b)
    assert cost == pytest.approx(brute_force(a, b), rel=1e-5)
    assert len(pairs) == min(len(a), len(b))
    assert np.unique(pairs[:, 0]).size == len(pairs) == np.unique(pairs[:, 1]).size
    recomputed = np.abs(a[pairs[:, 0]] - b[pairs[:, 1]]).sum()
    assert cost == pytest.approx(recomputed, rel=1e-5)


def test_l2_and_empty():
    a = np.array([[0, 0]], np.float32)
    b = np.array([[3, 4], [10, 10]], np.float32)
    assert optimal_partial_match(a, b, metric="l2")[0] == pytest.approx(5.0)
    assert optimal_partial_match(a, b)[0] == pytest.approx(7.0)
    cost, pairs = optimal_partial_match(np.zeros((0, 2)), b)
    assert cost == 0.0 and pairs.shape == (0, 2)
    with pytest.raises(ValueError, match="metric"):
        optimal_partial_match(a, b, metric="cosine")
    with pytest.raises(ValueError, match="columns"):
        optimal_partial_match(a, np.zeros((2, 3)))
