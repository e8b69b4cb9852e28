"""Automatic k checked by the stability of cuts under subsampling (engine.cluster.stability)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cluster import AUTO_K_MAX, discover_categories
from engine.cluster.evaluation import clustering_accuracy
from engine.cluster.stability import adjusted_rand, finer_stable_k, subsample_stability
from tests._cluster import GRAPHS, blobs


def test_stability_peaks_at_the_true_number_of_groups():
    K, _ = blobs(6, 5, 0.3, 0)
    ks = list(range(2, 11))
    s = subsample_stability(K, ks)
    assert s.shape == (len(ks),)
    assert ks[int(np.argmax(s))] == 6
    assert s[ks.index(6)] > 0.95
    assert s[ks.index(3)] < s[ks.index(6)] and s[ks.index(9)] < s[ks.index(6)]


def test_stability_is_deterministic_for_a_seed():
    K, _ = blobs(5, 4, 0.8, 1)
    a = subsample_stability(K, [2, 5, 8], random_state=3)
    b = subsample_stability(K, [2, 5, 8], random_state=3)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ks": [2, 3], "n_subsamples": 1}, "n_subsamples"),
        ({"ks": [2, 3], "fraction": 0.0}, "fraction"),
        ({"ks": [1, 3]}, "each k"),
        ({"ks": [2, 16]}, "each k"),
    ],
)
def test_stability_rejects_bad_options(kwargs, message):
    K, _ = blobs(4, 5, 0.3, 0)  # 20 photos: subsamples of 16
    with pytest.raises(ValueError, match=message):
        subsample_stability(K, **kwargs)


@pytest.mark.parametrize("seed", range(4))
def test_small_groups_the_graphs_cannot_see_are_found(seed):
    """48 photos of 12 subjects (4 each): 20-35-neighbour graphs join them into fewer
    groups; the stability check finds all 12 (the demo folder's shape)."""
    K, y = blobs(12, 4, 0.3, seed)
    blind = discover_categories(K, k="auto", k_graph=GRAPHS, k_stability=False)
    res = discover_categories(K, k="auto", k_graph=GRAPHS, k_max=12)
    assert blind.k < 10
    assert res.k == 12
    assert "instead" in res.k_reason and "adjusted Rand" in res.k_reason
    # every group is one subject
    for g in range(12):
        assert np.unique(y[res.labels == g]).size == 1
    # up to AUTO_K_MAX (30) finer cuts compete too: at most one subject is cut in two
    # (seed 2: 13 groups, whose cuts agree 0.991 against 0.987 for 12)
    wide = discover_categories(K, k="auto", k_graph=GRAPHS)
    assert wide.k in (12, 13) and clustering_accuracy(y, wide.labels) >= 47 / 48


@pytest.mark.parametrize("seed", range(2))
def test_twenty_small_subjects_need_more_than_twelve_groups(seed):
    """80 photos of 20 subjects (4 each): the default k_max (AUTO_K_MAX = 30) lets the
    stability check find them; capped at 12 it cannot."""
    K, y = blobs(20, 4, 0.3, seed)
    res = discover_categories(K, k="auto", k_graph=GRAPHS)
    capped = discover_categories(K, k="auto", k_graph=GRAPHS, k_max=12)
    assert AUTO_K_MAX == 30 and res.k == 20 and clustering_accuracy(y, res.labels) == 1.0
    assert capped.k <= 12 and clustering_accuracy(y, capped.labels) <= 0.6
    assert "eigengap among k in 2..12" in res.k_reason  # the eigengap's range is unchanged


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), max_size=40))
def test_adjusted_rand_equals_scikit_learns(pairs):
    from sklearn.metrics import adjusted_rand_score

    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    assert adjusted_rand(a, b) == pytest.approx(adjusted_rand_score(a, b), abs=1e-12)
    assert adjusted_rand(a, a) == 1.0


def test_the_eigengaps_k_is_kept_when_it_is_the_most_stable():
    K, _ = blobs(2, 12, 0.3, 0)  # 24 photos; with 10-neighbour graphs k = 5..9 are finer
    k, reason = finer_stable_k(K, 2, 10, 12)
    assert k == 2
    assert reason.startswith("; kept over finer partitions") and "k=5..9" in reason


def test_tiny_folders_and_tiny_groups_are_not_compared(monkeypatch):
    """Below 22 photos nothing is compared; no k whose groups would average fewer than 2
    photos of a subsample is a candidate."""
    import engine.cluster.stability as stability

    compared = []

    def spy(W, ks, **kwargs):
        compared.append(list(ks))
        return np.r_[1.0, np.zeros(len(ks) - 1)]  # (k itself the stablest)

    monkeypatch.setattr(stability, "subsample_stability", spy)
    K, _ = blobs(4, 5, 0.3, 0)  # 20 photos
    assert finer_stable_k(K, 2, 10, 12) == (2, "") and compared == []
    K, _ = blobs(11, 2, 0.05, 0)  # 22 photos in pairs: subsamples of 18, so k <= 9
    assert finer_stable_k(K, 2, 10, 12)[0] == 2
    assert compared == [[2, 5, 6, 7, 8, 9]]  # 22 / k <= 10 / 2 from k = 5


@pytest.mark.parametrize(
    ("agreement", "chosen"),
    [
        ([0.93, 0.50, 0.87, 0.60], 7),  # 0.87 >= 0.85 * 0.93: the finer one
        ([0.93, 0.50, 0.70, 0.60], 2),  # 0.70 < 0.85 * 0.93: kept
        ([0.50, 0.52, 0.51, 0.90], 8),  # the most stable finer one
        ([0.50, 0.46, 0.45, 0.44], 2),  # 85 % of an unstable k, but below the floor 0.7
    ],
)
def test_a_finer_partition_needs_most_of_the_coarse_ones_agreement(monkeypatch, agreement, chosen):
    """Stability favours coarse cuts (a folder's dominant split is stable whatever the
    truth), so a finer k replaces k when it keeps 85 % of its agreement -- and agrees at
    least 0.7 itself."""
    import engine.cluster.stability as stability

    monkeypatch.setattr(stability, "subsample_stability", lambda W, ks, **kw: np.array(agreement))
    K, _ = blobs(8, 4, 0.3, 0)  # 32 photos: with 12-neighbour graphs, k = 6..8 are finer
    k, reason = finer_stable_k(K, 2, 12, 8)
    assert k == chosen
    assert ("instead" in reason) == (chosen != 2)


def test_large_groups_are_not_second_guessed():
    """Groups of 40 photos: no k up to k_max gives groups of <= 10, so nothing runs."""
    K, _ = blobs(4, 40, 0.5, 0)
    assert finer_stable_k(K, 4, 20, 12) == (4, "")
    res = discover_categories(K, k="auto", k_graph=GRAPHS)
    assert res.k == 4 and "adjusted Rand" not in res.k_reason


def test_no_check_without_graphs_or_with_k_given():
    K, _ = blobs(12, 4, 0.3, 0)
    assert "adjusted Rand" not in discover_categories(K, k="auto").k_reason
    assert discover_categories(K, k=5, k_graph=GRAPHS).k == 5


def test_the_eigengap_reaches_past_twelve_only_when_asked():
    """16 subjects of 30 photos, the eigengap alone (no stability check): it compares up to
    EIGENGAP_K_MAX (12) by default, up to k_max with ``eigengap_max`` (the pipeline's choice
    with the semantic channel)."""
    from engine.cluster import EIGENGAP_K_MAX

    K, y = blobs(16, 30, 0.3, 0)
    kw = dict(k="auto", k_graph=GRAPHS, k_stability=False)
    default = discover_categories(K, **kw)
    wide = discover_categories(K, eigengap_max=AUTO_K_MAX, **kw)
    assert default.k <= EIGENGAP_K_MAX < 16
    assert wide.k == 16 and clustering_accuracy(y, wide.labels) == 1.0
    assert f"among k in 2..{AUTO_K_MAX}" in wide.k_reason
