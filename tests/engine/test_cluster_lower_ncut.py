"""Lowering a partition's normalized cut by weighted kernel k-means
(engine.cluster.ncut.lower_ncut; Dhillon, Guan & Kulis, KDD 2004)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cluster import clustering_accuracy, discover_categories
from engine.cluster.ncut import lower_ncut, normalized_cut_value


def _blocks(sizes, within, links) -> tuple[np.ndarray, np.ndarray]:
    """Affinities of groups of ``sizes``: ``within`` inside a group, ``links[(a, b)]``
    between groups a and b (0.05 otherwise), zero diagonal; and the groups."""
    truth = np.repeat(np.arange(len(sizes)), sizes)
    W = np.full((truth.size, truth.size), 0.05)
    for a in range(len(sizes)):
        W[np.ix_(truth == a, truth == a)] = within
    for (a, b), v in links.items():
        W[np.ix_(truth == a, truth == b)] = v
        W[np.ix_(truth == b, truth == a)] = v
    np.fill_diagonal(W, 0.0)
    return W, truth


def test_a_spread_group_and_two_close_ones():
    """Groups 0 and 1 are the two halves of one spread-out category (linked 0.5), groups 2
    and 3 two categories of one kind (linked 0.45). Into three groups, keeping the
    category whole and the two kinds apart has the lower normalized cut; started from the
    partition that splits the category instead (what a spectral discretisation may give),
    the kernel k-means finds it."""
    W, sub = _blocks([10, 10, 12, 12], 0.9, {(0, 1): 0.5, (2, 3): 0.45})
    truth = np.array([0, 0, 1, 2])[sub]
    wrong = np.array([0, 1, 2, 2])[sub]
    assert normalized_cut_value(W, truth) < normalized_cut_value(W, wrong)
    got = lower_ncut(W, wrong, 3, restarts=10, seed=0)
    assert clustering_accuracy(truth, got) == 1.0
    assert normalized_cut_value(W, got) <= normalized_cut_value(W, truth) + 1e-12


def test_the_best_partition_is_kept_and_trivial_cases_are_left_alone():
    W, truth = _blocks([8, 8, 8], 0.9, {})
    np.testing.assert_array_equal(lower_ncut(W, truth, 3), truth)
    np.testing.assert_array_equal(lower_ncut(W, np.zeros(24, np.int64), 1), np.zeros(24))
    few = np.array([0, 1, 0])
    np.testing.assert_array_equal(lower_ncut(W[:3, :3], few, 3), few)  # (n <= k)
    isolated = W.copy()
    isolated[0, :] = isolated[:, 0] = 0.0  # (a photo linked to none: left as it was)
    np.testing.assert_array_equal(lower_ncut(isolated, truth, 3), truth)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(6, 30),
    k=st.integers(2, 5),
    seed=st.integers(0, 10_000),
)
def test_never_raises_the_cut_and_keeps_every_group(n, k, seed):
    rng = np.random.default_rng(seed)
    A = rng.random((n, n))
    W = (A + A.T) / 2
    np.fill_diagonal(W, 0.0)
    labels = np.concatenate([np.arange(k), rng.integers(0, k, n - k)])
    rng.shuffle(labels)
    got = lower_ncut(W, labels, k, restarts=3, seed=seed)
    assert got.shape == (n,) and got.dtype == np.int64
    assert set(got.tolist()) == set(range(k))
    assert normalized_cut_value(W, got) <= normalized_cut_value(W, labels) + 1e-12


def test_discover_categories_polishes_its_cut_on_request():
    """With ``polish``, the cut's discretisation is followed by the search for a lower
    normalized cut; the result's ``ncut`` is never higher than without it."""
    W, sub = _blocks([10, 10, 12, 12], 0.9, {(0, 1): 0.5, (2, 3): 0.45})
    K = W.copy()
    np.fill_diagonal(K, 1.0)
    plain = discover_categories(K, k=3)
    polished = discover_categories(K, k=3, polish=10)
    assert polished.ncut <= plain.ncut + 1e-12
    assert clustering_accuracy(np.array([0, 0, 1, 2])[sub], polished.labels) == 1.0
