"""The search's same-object-or-place pairs as a channel of the grouping (engine.cluster.scenes)."""

import threading

import numpy as np
import pytest

from engine.cluster.scenes import scene_probabilities_iter, with_scenes
from engine.core.progress import run_to_end
from tests._cluster import GRAPHS, FakeCollection, blobs


def test_probabilities_are_the_larger_direction_and_symmetric():
    paths = ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]
    col = FakeCollection({
        "a.jpg": [("a.jpg", 1.0), ("b.jpg", 0.9), ("c.jpg", 0.2)],
        "b.jpg": [("a.jpg", 0.6), ("elsewhere.jpg", 0.99)],
        "c.jpg": [("d.jpg", None)],  # no calibrated probability: no pair
    })  # fmt: skip
    P = run_to_end(scene_probabilities_iter(col, paths, top=3))
    assert P.shape == (4, 4) and np.array_equal(P, P.T)
    assert P[0, 1] == 0.9 and P[0, 2] == 0.2  # max of 0.9 and 0.6; one direction only
    assert np.all(np.diag(P) == 0) and P[2, 3] == 0 and P[3].sum() == 0
    assert {m for _, m, _ in col.calls} == {"hybrid"} and {t for *_, t in col.calls} == {3}


def test_a_failing_query_leaves_a_row_of_zeros_and_cancel_stops():
    paths = ["a.jpg", "bad.jpg", "c.jpg"]
    col = FakeCollection({"a.jpg": [("c.jpg", 0.8)]})
    P = run_to_end(scene_probabilities_iter(col, paths))
    assert P[1].sum() == 0 and P[0, 2] == 0.8
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        run_to_end(scene_probabilities_iter(col, paths, cancel=stop))


def test_with_scenes_adds_a_share_of_the_strongest_affinity():
    C = np.array([[1.0, 0.2, 0.1], [0.2, 1.0, 0.3], [0.1, 0.3, 1.0]])
    P = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.5], [0.0, 0.5, 0.0]])
    out = with_scenes(C, P, weight=0.2)
    np.testing.assert_allclose(out, C + 0.2 * P)
    np.testing.assert_array_equal(with_scenes(C, np.zeros_like(C)), C)
    with pytest.raises(ValueError, match="shape"):
        with_scenes(C, P[:2])
    with pytest.raises(ValueError, match="weight"):
        with_scenes(C, P, weight=-1)


def test_join_groups_joins_by_average_linkage_and_keeps_cannot_pairs():
    from engine.cluster.scenes import join_groups

    labels = np.array([0, 0, 1, 1, 2, 2, 3])
    P = np.zeros((7, 7))
    P[0, 2] = P[1, 3] = P[0, 3] = P[1, 2] = 0.8  # groups 0 and 1: the same place
    P[4, 6] = 0.9  # group 2 and photo 6: one strong pair of two -> mean 0.45
    P = np.maximum(P, P.T)
    out, joined, moved = join_groups(labels, P, threshold=0.5)
    assert joined == 1 and moved == 2 and out[0] == out[2] and len(np.unique(out)) == 3
    assert out.max() == 2 and out[4] != out[6]  # mean 0.45 < 0.5
    out, joined, moved = join_groups(labels, P, threshold=0.4)
    assert joined == 2 and moved == 3 and out[4] == out[6]
    out, joined, _ = join_groups(labels, P, threshold=0.4, cannot=np.array([[1, 3], [0, 2]]))
    assert joined == 1 and out[0] != out[2]  # a cannot pair spans groups 0 and 1
    assert join_groups(labels, np.zeros((7, 7)))[1:] == (0, 0)
    with pytest.raises(ValueError, match="P must be"):
        join_groups(labels, np.zeros((3, 3)))


def test_join_groups_moves_only_the_photos_the_search_pairs():
    """A leftover pair of unrelated photos gives its photo of a subject to that subject's
    group and keeps the other apart."""
    from engine.cluster.scenes import join_groups

    labels = np.array([0, 0, 0, 1, 1])  # photo 3 shows group 0's subject, photo 4 not
    P = np.zeros((5, 5))
    P[3, :3] = P[:3, 3] = 0.9
    out, joined, moved = join_groups(labels, P, threshold=0.25)
    assert (joined, moved) == (0, 1)
    assert out[3] == out[0] and out[4] != out[0] and len(np.unique(out)) == 2


def test_discovery_joins_only_what_a_finer_k_split():
    """Where the stability check made k finer than the eigengap's, groups the same-scene
    probabilities link are joined back; with k given nothing is joined."""
    from engine.cluster import discover_categories

    K, y = blobs(12, 4, 0.3, 2)  # the stability check alone makes 13 groups of it
    P = (y[:, None] == y[None]).astype(float) * 0.6
    np.fill_diagonal(P, 0)
    alone = discover_categories(K, k="auto", k_graph=GRAPHS)
    res = discover_categories(K, k="auto", k_graph=GRAPHS, join=P)
    assert alone.k == 13 and res.k == 12
    assert "1 photo(s) moved back to the group of the same object" in res.k_reason
    assert "1 group(s) joined entirely" in res.k_reason
    for g in range(12):
        assert np.unique(y[res.labels == g]).size == 1
    wrong = np.ones_like(P) - np.eye(len(y))  # links everything: but k was given
    assert discover_categories(K, k=12, join=wrong).k == 12
