"""Tests for engine.kernels.vocabulary (hierarchical k-means bins, thesis chapter 4), its
batched k-means (engine.kernels.kmeans) and bags of words (engine.kernels.words)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist

from engine.kernels import vocabulary
from engine.kernels.kmeans import kmeans_level
from engine.kernels.vocabulary import VocabularyTree
from engine.kernels.words import bag_of_words, fit_idf, word_counts


def _blobs(n: int, dim: int, n_centers: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(n_centers, dim))
    x = centers[rng.integers(0, n_centers, n)] + rng.normal(size=(n, dim))
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return _blobs(3000, 6, 12, seed=1)


K, L = 4, 4  # root + three clustered levels: at most 64 leaves


@pytest.fixture(scope="module")
def tree(data) -> VocabularyTree:
    return VocabularyTree(branching=K, levels=L, random_state=3).fit(data)


def _brute_force_descent(tree: VocabularyTree, X: np.ndarray) -> np.ndarray:
    """Per point, per level: nearest child of the current node (plain loops)."""
    n_lev = tree.n_levels
    out = np.zeros((X.shape[0], n_lev), dtype=np.int64)  # finest first; root column 0
    for i, x in enumerate(X.astype(np.float64)):
        node = 0  # the root
        for lvl in range(n_lev - 2, -1, -1):  # from below the root down to the leaves
            children = np.flatnonzero(tree.parents(lvl) == node)
            c = tree.centers(lvl)[children].astype(np.float64)
            node = children[np.argmin(((c - x) ** 2).sum(axis=1))]
            out[i, lvl] = node
    return out


def test_tree_shape(data, tree):
    k = K
    sizes = tree.sizes  # finest first
    assert len(sizes) == L and tree.n_levels == L
    assert sizes[-1] == 1  # the root
    np.testing.assert_allclose(tree.centers(L - 1)[0], data.mean(axis=0), atol=1e-5)
    for lvl in range(L):
        assert 1 <= sizes[lvl] <= k ** (L - 1 - lvl)
        assert tree.centers(lvl).shape == (sizes[lvl], 6)
    for lvl in range(L - 1):
        parents = tree.parents(lvl)
        assert parents.shape == (sizes[lvl],)
        assert np.all(np.diff(parents) >= 0)  # children of a node are contiguous
        n_child = np.bincount(parents, minlength=sizes[lvl + 1])
        assert n_child.min() >= 1 and n_child.max() <= k
    assert tree.n_leaves == sizes[0]
    # clustered data of 3000 points fills nearly all 4**3 leaves
    assert tree.n_leaves >= 0.8 * k ** (L - 1)
    with pytest.raises(ValueError, match="root"):
        tree.parents(L - 1)


def test_nesting(tree):
    X = _blobs(500, 6, 12, seed=9)
    bins, dist = tree.assign(X)
    assert bins.shape == (500, L) and bins.dtype == np.int64
    assert dist.shape == (500, L) and dist.dtype == np.float32
    assert np.all(bins[:, -1] == 0)  # everything shares the root
    for lvl in range(L - 1):
        assert np.array_equal(tree.parents(lvl, bins[:, lvl]), bins[:, lvl + 1])
    # points sharing a bin at level l share one at level l + 1
    for lvl in range(L - 1):
        pairs = np.unique(bins[:, lvl : lvl + 2], axis=0)
        assert np.unique(pairs[:, 0]).size == pairs.shape[0]


@pytest.mark.parametrize("gather_max", [0, 10**6], ids=["grouped", "gathered"])
def test_assign_matches_brute_force_descent(tree, gather_max, monkeypatch):
    # both descents: points grouped by node (batches) and candidates gathered (queries)
    monkeypatch.setattr(vocabulary, "_GATHER_DESCENT_MAX", gather_max)
    X = _blobs(300, 6, 12, seed=5)
    bins, dist = tree.assign(X)
    expected = _brute_force_descent(tree, X)
    assert np.array_equal(bins, expected)
    for lvl in range(L):
        d = np.linalg.norm(X - tree.centers(lvl)[bins[:, lvl]], axis=1)
        np.testing.assert_allclose(dist[:, lvl], d, rtol=1e-5, atol=1e-5)
    assert np.array_equal(tree.leaf_ids(X), bins[:, 0])
    assert np.array_equal(tree.assign_bins(X), expected)  # the distance-free query path
    assert tree.assign_bins(X[:0]).shape == (0, L)


def test_assign_large_segments_uses_same_rule(monkeypatch):
    # enough points per node to take the per-node BLAS path as well as the gather path;
    # and the same bins from the small-input descent
    X = _blobs(4000, 5, 3, seed=2)
    tree = VocabularyTree(branching=3, levels=3, random_state=0).fit(X)
    Q = _blobs(2400, 5, 3, seed=8)
    grouped = tree.assign(Q)
    assert np.array_equal(grouped[0], _brute_force_descent(tree, Q))
    assert np.array_equal(tree.assign_bins(Q), grouped[0])
    monkeypatch.setattr(vocabulary, "_GATHER_DESCENT_MAX", 10**6)
    gathered = tree.assign(Q)
    assert np.array_equal(gathered[0], grouped[0])
    np.testing.assert_allclose(gathered[1], grouped[1], rtol=1e-6)


def test_statistics_cover_training_points(data, tree):
    bins, dist = tree.assign(data)
    for lvl in range(L):
        b = bins[:, lvl]
        n = tree.sizes[lvl]
        assert np.array_equal(tree.counts(lvl), np.bincount(b, minlength=n))
        radius = tree.radii(lvl)
        assert np.all(dist[:, lvl] <= radius[b] + 1e-4)
        np.testing.assert_allclose(
            radius,
            np.maximum.reduceat(
                dist[np.argsort(b), lvl], np.r_[0, np.cumsum(np.bincount(b, minlength=n))[:-1]]
            ),
            rtol=1e-5,
        )
        diam = tree.diameters(lvl)
        # diameter estimate: between half and all of the true largest pairwise distance,
        # never below a child's; exact here for most bins
        true = np.zeros(n)
        for j in range(n):
            pts = data[b == j].astype(np.float64)
            true[j] = pdist(pts).max() if len(pts) > 1 else 0.0
        if lvl > 0:  # parents are raised to their widest child
            child_max = np.zeros(n)
            np.maximum.at(child_max, tree.parents(lvl - 1), tree.diameters(lvl - 1))
            true = np.maximum(true, child_max)
        assert np.all(diam <= true + 1e-3)
        assert np.all(diam >= 0.5 * true - 1e-3)
        small = tree.counts(lvl) <= 64  # exact below this size
        assert small.any() or lvl > 0
        np.testing.assert_allclose(diam[small], true[small], rtol=1e-5, atol=1e-5)


def test_weights_are_mercer_monotone(tree):
    for lvl in range(L - 1):
        child = np.arange(tree.sizes[lvl])
        w_child = tree.bin_weights(lvl, child)
        w_parent = tree.bin_weights(lvl + 1, tree.parents(lvl, child))
        assert np.all(w_child >= w_parent)
        assert np.all(tree.diameters(lvl) <= tree.diameters(lvl + 1)[tree.parents(lvl)])
    w = tree.bin_weights(0, np.arange(tree.n_leaves))
    assert w.dtype == np.float64 and np.all((w > 0) & (w <= 1))
    np.testing.assert_allclose(w, np.exp(-tree.diameters(0) / tree.sigma_))


def test_sigma_is_mean_sample_distance(data, tree):
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, len(data), (2, 5000))
    mean = np.linalg.norm(data[i] - data[j], axis=1).mean()
    assert tree.sigma_ == pytest.approx(mean, rel=0.05)
    fixed = VocabularyTree(branching=4, levels=3, sigma=2.5).fit(data)
    assert fixed.sigma_ == 2.5


def test_determinism(data):
    a = VocabularyTree(branching=K, levels=L, random_state=7).fit(data)
    b = VocabularyTree(branching=K, levels=L, random_state=7).fit(data)
    c = VocabularyTree(branching=K, levels=L, random_state=8).fit(data)
    for lvl in range(L):
        assert np.array_equal(a.centers(lvl), b.centers(lvl))
        assert np.array_equal(a.diameters(lvl), b.diameters(lvl))
    assert not np.array_equal(a.centers(0), c.centers(0))


def test_state_round_trip(tmp_path, data, tree):
    state = tree.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "tree.npz", **arrays)
    (tmp_path / "tree.json").write_text(json.dumps(scalars))
    with np.load(tmp_path / "tree.npz", allow_pickle=False) as npz:
        loaded = {**dict(npz), **json.loads((tmp_path / "tree.json").read_text())}
    back = VocabularyTree.from_state(loaded)
    X = data[:200]
    for got, want in zip(back.assign(X), tree.assign(X), strict=True):
        assert np.array_equal(got, want)
    for lvl in range(L):
        bins = np.arange(tree.sizes[lvl])
        assert np.array_equal(back.bin_weights(lvl, bins), tree.bin_weights(lvl, bins))
        assert np.array_equal(back.counts(lvl), tree.counts(lvl))
    assert back.sigma_ == tree.sigma_ and back.weights == tree.weights
    broken = dict(state)
    del broken["diameter"]
    with pytest.raises(ValueError, match="diameter"):
        VocabularyTree.from_state(broken)
    broken = dict(state, centers=state["centers"][:-1])
    with pytest.raises(ValueError, match="centers"):
        VocabularyTree.from_state(broken)


@pytest.mark.parametrize("k", [3, 10, 11])
def test_kmeans_level_is_lloyd_inside_every_segment(k):
    # segments of many sizes (padding groups mix sizes around k), duplicates included
    rng = np.random.default_rng(k)
    sizes = np.array([1, 2, k - 1, k, k + 1, 12, 13, 40, 41, 200, 7, 300])
    X = rng.normal(size=(int(sizes.sum()), 5)).astype(np.float32)
    X[5:9] = X[5]
    starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    centers, labels, kk = kmeans_level(X, starts, k, np.random.default_rng(0), 50, 0.0)
    assert np.array_equal(kk, np.minimum(sizes, k))
    for s, (a, b) in enumerate(itertools.pairwise(starts)):
        C = centers[s * k : s * k + kk[s]]
        lab = labels[a:b] - s * k
        assert lab.min() >= 0 and lab.max() < kk[s]
        d = ((X[a:b, None, :] - C[None]) ** 2).sum(-1)
        # every point is with its nearest centre (ties: the first) ...
        np.testing.assert_array_equal(lab, np.argmin(d, 1))
        if sizes[s] <= k:  # ... every point its own centre in small segments
            np.testing.assert_array_equal(C[: sizes[s]], X[a:b])
        else:  # ... and, converged, every used centre is the mean of its points
            for j in np.unique(lab):
                np.testing.assert_allclose(C[j], X[a:b][lab == j].mean(0), atol=1e-5)


def test_small_and_degenerate_samples():
    # fewer points than leaves, and duplicates: every point still gets a leaf
    X = np.repeat(np.arange(5, dtype=np.float32)[:, None], 3, axis=0) * np.ones((1, 2), np.float32)
    tree = VocabularyTree(branching=3, levels=4).fit(X)
    _, dist = tree.assign(X)
    assert tree.n_leaves == 5  # five distinct points
    assert np.all(dist[:, 0] == 0)
    assert np.array_equal(tree.diameters(0), np.zeros(5))
    one = VocabularyTree(branching=2, levels=3).fit(np.ones((1, 4), np.float32))
    assert one.sizes == (1, 1, 1)
    empty_bins, empty_dist = tree.assign(np.empty((0, 2), np.float32))
    assert empty_bins.shape == (0, 4) and empty_dist.shape == (0, 4)


def test_progress_and_sample_size(data):
    tree = VocabularyTree(branching=4, levels=3, sample_size=500)
    steps = list(tree.fit_iter(data))
    assert [s.done for s in steps] == [1, 2, 3] and all(s.total == 3 for s in steps)
    assert tree.counts(2).tolist() == [500]


def test_errors(data, tree):
    with pytest.raises(ValueError, match="branching"):
        VocabularyTree(branching=1)
    with pytest.raises(ValueError, match="levels"):
        VocabularyTree(levels=1)
    with pytest.raises(ValueError, match="weights"):
        VocabularyTree(weights="diameter")
    with pytest.raises(RuntimeError, match="not fitted"):
        VocabularyTree().assign(data)
    with pytest.raises(ValueError, match="sample"):
        VocabularyTree().fit(np.empty((0, 3), np.float32))
    with pytest.raises(ValueError, match="X must have 6 columns"):
        tree.assign(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="level"):
        tree.bin_weights(L, np.array([0]))
    with pytest.raises(ValueError, match="bins"):
        tree.bin_weights(0, np.array([tree.n_leaves]))


def test_bag_of_words(data, tree):
    sets = [data[:100], data[100:400], np.empty((0, 6), np.float32), data[400:450]]
    counts = word_counts(sets, tree)
    assert counts.shape == (4, tree.n_leaves)
    np.testing.assert_array_equal(np.asarray(counts.sum(axis=1)).ravel(), [100, 300, 0, 50])
    idf = fit_idf(sets, tree)
    assert idf.shape == (tree.n_leaves,) and idf.dtype == np.float32
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    expected = np.where(df > 0, np.log(4 / np.maximum(df, 1)), 0)
    np.testing.assert_allclose(idf, expected, rtol=1e-6)
    np.testing.assert_allclose(fit_idf(counts), idf)
    bow = bag_of_words(sets, tree, idf)
    assert sp.isspmatrix_csr(bow) and bow.dtype == np.float32 and bow.shape == counts.shape
    norms = np.sqrt(np.asarray(bow.multiply(bow).sum(axis=1)).ravel())
    assert norms[2] == 0
    np.testing.assert_allclose(norms[[0, 1, 3]], 1, rtol=1e-5)
    tf = bag_of_words(sets, tree, norm="none")
    dense = counts.toarray()
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(
            tf.toarray()[[0, 1, 3]], (dense / dense.sum(1, keepdims=True))[[0, 1, 3]], rtol=1e-6
        )
    l1 = bag_of_words(sets, tree, idf, norm="l1")
    np.testing.assert_allclose(np.asarray(abs(l1).sum(axis=1)).ravel()[[0, 1, 3]], 1, rtol=1e-5)
    with pytest.raises(ValueError, match="idf"):
        bag_of_words(sets, tree, idf[:-1])


def _vg_kernel(tree: VocabularyTree, sets: list[np.ndarray]) -> np.ndarray:
    """Eq. 4.4 with global weights: sum over bins of (w_ij - p_ij) min(n_X, n_Y)."""
    n_lev = tree.n_levels
    feats = []
    for X in sets:
        bins, _ = tree.assign(X)
        parts = []
        for lvl in range(n_lev):
            n = np.bincount(bins[:, lvl], minlength=tree.sizes[lvl]).astype(np.float64)
            w = tree.bin_weights(lvl, np.arange(tree.sizes[lvl]))
            p = (
                tree.bin_weights(lvl + 1, tree.parents(lvl))
                if lvl + 1 < n_lev
                else np.zeros_like(w)
            )
            parts.append((n, w - p))
        feats.append(parts)
    K = np.zeros((len(sets), len(sets)))
    for a in range(len(sets)):
        for b in range(len(sets)):
            K[a, b] = sum(
                (d * np.minimum(na, nb)).sum()
                for (na, d), (nb, _) in zip(feats[a], feats[b], strict=True)
            )
    return K


def test_vocabulary_guided_match_is_mercer(tree):
    rng = np.random.default_rng(4)
    sets = [_blobs(int(rng.integers(5, 80)), 6, 12, seed=s) for s in range(12)]
    K = _vg_kernel(tree, sets)
    Kn = K / np.sqrt(np.outer(np.diag(K), np.diag(K)))
    np.testing.assert_allclose(np.diag(Kn), 1)
    assert np.allclose(Kn, Kn.T)
    assert np.linalg.eigvalsh(Kn).min() > -1e-9


def test_pyramid_match_with_vocabulary(data):
    pyramid = pytest.importorskip("engine.kernels.pyramid")
    if not hasattr(pyramid, "PyramidMatch"):
        pytest.skip("engine.pyramid.PyramidMatch not available yet")
    rng = np.random.default_rng(6)
    sets = [_blobs(int(rng.integers(10, 60)), 6, 12, seed=20 + s) for s in range(10)]
    pm = pyramid.PyramidMatch(bins="vocabulary").fit(
        [data[i : i + 300] for i in range(0, 3000, 300)]
    )
    K = pm.kernel(sets)
    np.testing.assert_allclose(np.diag(K), 1, rtol=1e-6)
    assert np.allclose(K, K.T)
    assert np.linalg.eigvalsh(K).min() > -1e-8
