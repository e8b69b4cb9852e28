"""Tests for engine.metrics: retrieval measures against hand-worked and brute-force values."""

import numpy as np
import pytest

from engine import metrics as M


def _perfect(n_groups=5, size=4, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n_groups), size)
    noise = rng.random((labels.size, labels.size)) * 0.1
    scores = (labels[:, None] == labels[None, :]).astype(float) + noise
    return scores, labels


def test_group_labels_rules():
    names = ["ukbench00000.jpg", "/x/y/ukbench00007.jpg", "100301.jpg", "a/b/117500.JPG"]
    assert M.group_labels(names[:2], 4).tolist() == [0, 1]
    assert M.group_labels(names[2:], 100).tolist() == [1003, 1175]
    with pytest.raises(ValueError, match="names"):
        M.group_labels(["nodigits.jpg"], 4)
    with pytest.raises(ValueError, match="divisor"):
        M.group_labels(names, 0)


def test_perfect_ranking_scores():
    s, y = _perfect()
    assert M.ns_score(s, y) == pytest.approx(4.0)
    assert M.mean_average_precision(s, y) == pytest.approx(1.0)
    assert M.precision_at_k(s, y, k=3) == pytest.approx(1.0)
    assert M.normalized_average_rank(s, y) == pytest.approx(0.0)
    assert M.knn_accuracy(s, y, k=1) == 1.0
    assert M.knn_accuracy(s, y, k=3) == 1.0


def test_inverted_ranking_is_worst():
    s, y = _perfect()
    bad = -s
    # only the query itself can be near the top (it scores lowest now): it is last
    assert M.ns_score(bad, y) == pytest.approx(0.0)
    nr = M.normalized_average_rank(bad, y)
    # relevant items occupy the last N_R of N ranks: r_bar = (N - N_R) / N
    n, nr_ = 19, 3
    assert nr == pytest.approx((n - nr_) / n)


def test_random_ranking_near_half():
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(50), 4)
    s = rng.random((200, 200))
    assert abs(M.normalized_average_rank(s, y) - 0.5) < 0.05
    assert M.ns_score(s, y) < 1.3  # self (~1/200 chance of top) is random here too


def test_average_precision_hand_worked():
    rel = np.array([[True, False, True, False], [False, True, False, False], [False] * 4])
    ap = M.average_precision(rel)
    assert ap[0] == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert ap[1] == pytest.approx(0.5)
    assert np.isnan(ap[2])


def test_map_matches_bruteforce_and_sklearn():
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(3)
    y = rng.integers(0, 6, 40)
    s = rng.normal(size=(40, 40))
    got = M.mean_average_precision(s, y)
    aps = []
    for q in range(40):
        keep = np.arange(40) != q
        t = y[keep] == y[q]
        if t.any():
            aps.append(average_precision_score(t, s[q, keep]))
    assert got == pytest.approx(np.mean(aps))


def test_ns_counts_self_and_k_cut():
    y = np.array([0, 0, 1, 1])
    s = np.array(
        [[1.0, 0.1, 0.9, 0.0], [0.2, 1.0, 0.3, 0.4], [0, 0, 1, 0.5], [0, 0, 0.9, 1]],
    )
    # top-2 per row: [0,2]->1, [1,3]->1, [2,3]->2, [3,2]->2
    assert M.ns_score(s, y, k=2) == pytest.approx(1.5)


def test_rectangular_queries_and_knn_vote():
    db = np.array([0, 0, 1, 1, 1])
    s = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.9, 0.1, 0.8, 0.7, 0.0]])
    q = np.array([1, 1])
    # query 0: top-3 labels 0,0,1 -> predicts 0 (wrong); query 1: top-3 0,1,1 -> 1
    assert M.knn_accuracy(s, db, k=3, query_labels=q) == pytest.approx(0.5)
    assert M.knn_accuracy(s, db, k=1, query_labels=q) == pytest.approx(0.0)
    assert M.precision_at_k(s, db, k=2, query_labels=q) == pytest.approx((0 + 0.5) / 2)


def test_validation_errors():
    with pytest.raises(ValueError, match="query_labels"):
        M.ns_score(np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError, match="labels"):
        M.mean_average_precision(np.zeros((3, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        M.mean_average_precision(np.full((2, 2), np.nan), np.zeros(2))
    with pytest.raises(ValueError, match="k must"):
        M.precision_at_k(np.zeros((2, 2)), np.zeros(2), k=0)


def test_queries_are_items_drops_self_from_rectangular_rankings():
    rng = np.random.default_rng(4)
    db = rng.integers(0, 3, 12)
    s = rng.random((5, 12))  # the queries are items 0..4
    rel = M.ranked_relevance(s, db, db[:5], queries_are_items=True)
    assert rel.shape == (5, 11)
    for q in range(5):
        keep = np.arange(12) != q
        order = np.argsort(-s[q, keep], kind="stable")
        np.testing.assert_array_equal(rel[q], db[keep][order] == db[q])
    # without the flag the given query labels keep every item in the ranking
    assert M.ranked_relevance(s, db, db[:5]).shape == (5, 12)
    assert M.ranked_relevance(s, db, db[:5], queries_are_items=True, exclude_self=False).shape == (
        5,
        12,
    )
    with pytest.raises(ValueError, match="queries_are_items"):
        M.ranked_relevance(s.T, db[:5], db, queries_are_items=True)


def test_pooled_precision_is_the_same_mean_rounded_once():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 4, 30)
    s = rng.random((30, 30))
    for k in (1, 3, 10, 100):
        per_query = M.precision_at_k(s, y, k)
        pooled = M.precision_at_k(s, y, k, pooled=True)
        rel = M.ranked_relevance(s, y)[:, :k]
        assert pooled == rel.sum() / rel.size  # one division of the hit count
        assert pooled == pytest.approx(per_query, abs=1e-12)


def test_learn_argument_order_calls_the_same_measures():
    # engine.learn keeps precision_at_k / mean_average_precision with query labels
    # first; they are these measures (queries = the first Q items, pooled hits).
    import engine.learn as L

    rng = np.random.default_rng(6)
    y = rng.integers(0, 4, 30)
    s = rng.random((30, 30))
    for ex in (False, True):
        assert L.mean_average_precision(s, y, exclude_self=ex) == M.mean_average_precision(
            s, y, exclude_self=ex
        )
        assert L.precision_at_k(s, y, y, 10, exclude_self=ex) == M.precision_at_k(
            s, y, 10, exclude_self=ex, pooled=True
        )
        # rectangular: the 8 queries are the first 8 items
        r = s[:8]
        expected = M.ranked_relevance(r, y, y[:8], exclude_self=ex, queries_are_items=True)
        assert L.precision_at_k(r, y[:8], y, 4, exclude_self=ex) == np.mean(expected[:, :4])
        ap = M.average_precision(expected)
        assert L.mean_average_precision(r, y[:8], y, exclude_self=ex) == np.mean(ap[~np.isnan(ap)])
    # k beyond the ranking counts the whole ranking
    assert L.precision_at_k(s, y, y, 1000, exclude_self=True) == M.precision_at_k(
        s, y, 29, pooled=True
    )
