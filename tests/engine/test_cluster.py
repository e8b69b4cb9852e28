"""Tests for engine.cluster on synthetic kernels and point sets, and on small folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.cluster import (
    BinnedMatcher,
    Clustering,
    Refinement,
    choose_landmarks,
    clustering_accuracy,
    diagonal_dominance,
    discover_categories,
    discover_categories_iter,
    landmark_graph_sizes,
    masks_from_arrays,
    masks_to_arrays,
    merge_groups,
    move_constraints,
    ncut_embedding,
    normalized_cut_value,
    prepare_affinity,
    rank_groups,
    refine_with_masks,
    spatial_pyramid_kernel,
    split_group,
)
from engine.cluster.classify import CategoryClassifier


def topic_kernel(n_per, k, *, noise=0.6, dim=30, seed=0):
    """Normalised kernel from a topic model: every image mixes its class topic with shared
    background; returns (K, truth, features H)."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(k), n_per)
    rng.shuffle(truth)
    topics = rng.gamma(0.3, size=(k, dim))
    H = topics[truth] + noise * rng.gamma(0.3, size=(truth.size, dim))
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    return H @ H.T, truth, H


# ------------------------------------------------------------------------------ affinity
def test_prepare_affinity_power_lifts_offdiagonal_and_keeps_unit_diagonal():
    K, _, _ = topic_kernel(10, 3)
    K = K**4  # make the diagonal dominant
    before = diagonal_dominance(K)
    W = prepare_affinity(K, power=0.25)
    assert np.allclose(np.diag(W), 1.0)
    assert np.allclose(W, W.T)
    assert diagonal_dominance(W) < before
    E = prepare_affinity(K, empirical=True)
    assert np.allclose(np.diag(E), 1.0)
    assert np.all(np.linalg.eigvalsh(E) > -1e-9)  # K K^T stays positive semi-definite


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"power": 0.0}, "power"),
        ({"power": 1.5}, "power"),
    ],
)
def test_prepare_affinity_rejects_bad_power(kwargs, match):
    with pytest.raises(ValueError, match=match):
        prepare_affinity(np.eye(3), **kwargs)


def test_prepare_affinity_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        prepare_affinity(np.ones((3, 4)))
    with pytest.raises(ValueError, match="NaN"):
        prepare_affinity(np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="negative"):
        prepare_affinity(-np.ones((2, 2)))


def test_ncut_embedding_matches_dense_eigendecomposition():
    K, _, _ = topic_kernel(15, 3, seed=3)
    np.fill_diagonal(K, 0)
    vals, vecs = ncut_embedding(K, 4)
    d = K.sum(1)
    M = K / np.sqrt(np.outer(d, d))
    ref = np.sort(np.linalg.eigvalsh(M))[::-1][:4]
    assert np.allclose(vals, ref)
    assert vals[0] == pytest.approx(1.0)
    assert np.allclose(M @ vecs, vecs * vals)


# ------------------------------------------------------------------------------ grouping
@pytest.mark.parametrize("method", ["spectral", "recursive"])
@pytest.mark.parametrize("discretize", ["kmeans", "yu_shi"])
def test_recovers_planted_groups(method, discretize):
    K, truth, _ = topic_kernel(30, 4, seed=1)
    res = discover_categories(K, k=4, method=method, discretize=discretize)
    assert res.k == 4
    assert clustering_accuracy(truth, res.labels) >= 0.95
    assert res.labels.shape == truth.shape and res.labels.dtype == np.int64
    sizes = np.bincount(res.labels)
    assert np.all(np.diff(sizes) <= 0)  # numbered by decreasing size


def test_auto_k_finds_planted_number_and_explains_it():
    K, truth, _ = topic_kernel(25, 5, noise=0.4, seed=2)
    res = discover_categories(K, k="auto", k_max=10)
    assert res.k == 5
    assert "eigengap" in res.k_reason and "k=5" in res.k_reason
    mu = res.eigenvalues
    rel = (mu[1:10] - mu[2:11]) / mu[1:10]
    rel[mu[1:10] < 0.1 * mu[1]] = -np.inf  # noise floor is not eligible
    assert np.argmax(rel) + 2 == 5
    assert clustering_accuracy(truth, res.labels) >= 0.95
    given = discover_categories(K, k=3)
    assert given.k == 3 and "given" in given.k_reason


def test_ncut_value_is_lower_for_true_partition_than_random():
    K, truth, _ = topic_kernel(20, 3, seed=4)
    rng = np.random.default_rng(0)
    assert normalized_cut_value(K, truth) < normalized_cut_value(K, rng.permutation(truth))


def test_must_constraints_are_honoured():
    K, truth, _ = topic_kernel(20, 4, noise=0.5, seed=5)
    a = np.flatnonzero(truth == 0)
    b = np.flatnonzero(truth == 1)
    must = [(int(a[0]), int(b[0])), (int(a[1]), int(b[1]))]
    res = discover_categories(K, k=4, must=must)
    assert res.labels[a[0]] == res.labels[b[0]]
    assert res.labels[a[1]] == res.labels[b[1]]
    assert clustering_accuracy(truth, res.labels) >= 0.9  # the rest is undisturbed


def test_cannot_constraints_split_an_indistinguishable_group():
    # A and B are drawn from the same topic, C from another: without constraints a cut
    # of A+B into two is arbitrary; cannot-links between A and B decide it.
    rng = np.random.default_rng(11)
    topics = rng.gamma(0.3, size=(2, 30))
    truth = np.repeat([0, 1, 2], 15)
    H = topics[np.array([0, 0, 1])[truth]] + 0.6 * rng.gamma(0.3, size=(45, 30))
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    K = H @ H.T
    plain = discover_categories(K, k=3)
    assert clustering_accuracy(truth, plain.labels) < 0.9
    A, B = np.flatnonzero(truth == 0), np.flatnonzero(truth == 1)
    cannot = [(int(i), int(j)) for i in A for j in B]
    res = discover_categories(K, k=3, cannot=cannot)
    assert clustering_accuracy(truth, res.labels) == 1.0


def test_constraint_validation():
    K = np.eye(4)
    with pytest.raises(ValueError, match="must"):
        discover_categories(K, k=2, must=[(0, 9)])
    with pytest.raises(ValueError, match="cannot"):
        discover_categories(K, k=2, cannot=[(1, 1)])
    with pytest.raises(ValueError, match="k"):
        discover_categories(K, k=0)
    with pytest.raises(ValueError, match="k"):
        discover_categories(K, k="many")
    with pytest.raises(ValueError, match="larger"):
        discover_categories(K, k=5)
    with pytest.raises(ValueError, match="method"):
        discover_categories(K, k=2, method="kmeans")
    with pytest.raises(ValueError, match="empty"):
        discover_categories(np.zeros((0, 0)), k=1)


def test_generator_yields_progress_and_returns_result():
    K, _, _ = topic_kernel(10, 2)
    gen = discover_categories_iter(K, k=2)
    stages = []
    try:
        while True:
            stages.append(next(gen).stage)
    except StopIteration as stop:
        res = stop.value
    assert isinstance(res, Clustering)
    assert {"affinity", "spectrum", "discretize", "rank"} <= set(stages)


def test_prototypes_and_outliers():
    K, truth, _ = topic_kernel(20, 3, noise=0.3, seed=6)
    # plant an intruder: image 0 is made to look like group of image 1 only weakly
    res = discover_categories(K, k=3, prototype_percentile=25)
    for g in range(3):
        members = res.members(g)
        assert res.prototypes[members].sum() == int(np.ceil(members.size * 0.25))
        # prototypes are the highest-flow members
        assert res.prototypes[members[: res.prototypes[members].sum()]].all()
    assert not (res.prototypes & res.outliers).any()
    # an image placed in the wrong group is an outlier
    labels = truth.copy()
    intruder = int(np.flatnonzero(truth == 0)[0])
    labels[intruder] = 1
    _flow, _protos, outl = rank_groups(K, labels)
    assert outl[intruder]
    assert outl.sum() <= 0.1 * labels.size


def test_clustering_state_roundtrip():
    K, _, _ = topic_kernel(10, 3)
    res = discover_categories(K, k="auto")
    state = res.to_state()
    assert all(isinstance(v, np.ndarray | int | float | str | bool) for v in state.values())
    back = Clustering.from_state(state)
    assert back.k == res.k and back.k_reason == res.k_reason
    assert np.array_equal(back.labels, res.labels)
    assert np.array_equal(back.outliers, res.outliers)


# ------------------------------------------------------------------------------ Nystrom
def test_nystrom_agrees_with_exact_grouping():
    K, truth, _ = topic_kernel(150, 4, noise=0.5, seed=7)
    lm = choose_landmarks(len(truth), 80, random_state=0)
    res = discover_categories(K[:, lm], landmarks=lm, k="auto")
    exact = discover_categories(K, k=4)
    assert res.method == "nystrom" and res.k == 4
    assert clustering_accuracy(truth, res.labels) >= 0.95
    assert clustering_accuracy(exact.labels, res.labels) >= 0.95
    assert "Nystrom" in res.k_reason
    # eigenvalues approximate the exact spectrum
    W = K.copy()
    d = W.sum(1)
    ref = np.sort(np.linalg.eigvalsh(W / np.sqrt(np.outer(d, d))))[::-1][:4]
    assert np.allclose(res.eigenvalues[:4], ref, atol=0.05)


def test_landmark_graph_sizes_scale_with_the_sample():
    assert landmark_graph_sizes((20, 25, 30, 35), 1000, 500) == (10, 12, 15, 18)
    assert landmark_graph_sizes((20, 25, 30, 35), 10_000, 500) == (5,)  # at least 5
    assert landmark_graph_sizes(30, 100, 100) == (30,)
    assert landmark_graph_sizes((20, 35), 40, 8) == (5, 6)  # below m - 1


def test_nystrom_reads_k_among_the_landmarks_with_graphs():
    K, truth, _ = topic_kernel(50, 9, noise=0.5, seed=3)
    lm = choose_landmarks(len(truth), 150, random_state=0)
    res = discover_categories(K[:, lm], landmarks=lm, k="auto", k_max=30, eigengap_max=30,
                              k_graph=(20, 25, 30, 35))  # fmt: skip
    assert res.method == "nystrom" and res.k == 9
    assert clustering_accuracy(truth, res.labels) >= 0.95
    assert "among the 150 landmarks of 450 images" in res.k_reason
    # constraints are written into the landmarks' block too (at their block positions)
    a, b = np.flatnonzero(truth == 0)[0], np.flatnonzero(truth == 1)[0]
    lm = choose_landmarks(len(truth), 150, must=[(a, b)], random_state=0)
    res = discover_categories(K[:, lm], landmarks=lm, k="auto", k_max=30, eigengap_max=30,
                              k_graph=(20, 25, 30, 35), must=[(a, b)])  # fmt: skip
    assert res.k in (8, 9) and res.labels[a] == res.labels[b]


def test_nystrom_constraints_need_landmarks():
    K, truth, _ = topic_kernel(50, 2, seed=8)
    a, b = np.flatnonzero(truth == 0)[0], np.flatnonzero(truth == 1)[0]
    lm = choose_landmarks(len(truth), 20, cannot=[(a, b)], random_state=1)
    assert a in lm and b in lm
    res = discover_categories(K[:, lm], landmarks=lm, k=2, cannot=[(a, b)])
    assert res.labels[a] != res.labels[b]
    lm2 = np.setdiff1d(lm, [a])
    with pytest.raises(ValueError, match="landmark"):
        discover_categories(K[:, lm2], landmarks=lm2, k=2, must=[(a, b)])
    with pytest.raises(ValueError, match="landmarks"):
        discover_categories(K[:, lm], landmarks=lm[:-1], k=2)


# ------------------------------------------------------------------------------ masks
class _GridMatcher:
    """Toy partial matcher on 1-D integer 'descriptors': features with equal values match
    (one-to-one, first come first served)."""

    def match(self, a, b):
        a = np.asarray(a).ravel()
        b = np.asarray(b).ravel()
        pairs = []
        used = set()
        for i, v in enumerate(a):
            for j in np.flatnonzero(b == v):
                if j not in used:
                    used.add(int(j))
                    pairs.append((i, int(j)))
                    break
        p = np.array(pairs, np.int64).reshape(-1, 2)

        class R:
            pass

        r = R()
        r.pairs, r.weight = p, np.ones(len(p))
        return r


def test_masks_mark_consistently_matched_features_and_flag_outlier():
    rng = np.random.default_rng(0)
    # group of 8 images sharing "object" words 0..9 plus random background words; image 7
    # matches only on background words shared with image 0.
    sets = []
    for i in range(7):
        obj = np.arange(10)
        bg = rng.integers(100 + 50 * i, 140 + 50 * i, size=10)
        sets.append(np.concatenate([obj, bg]).astype(np.float32)[:, None])
    intruder = np.concatenate([sets[0][10:15, 0], rng.integers(1000, 2000, 15)])
    sets.append(intruder.astype(np.float32)[:, None])
    labels = np.zeros(8, np.int64)
    ref = refine_with_masks(sets, labels, _GridMatcher())
    assert isinstance(ref, Refinement)
    assert ref.n_matches == 28
    for i in range(7):
        assert ref.masks[i].shape == (20,)
        assert np.all(ref.masks[i][:10] == 1.0)  # object features always matched
        assert np.all(ref.masks[i][10:] == 0.0)  # background matched at most once
    assert ref.masks[7].max() == 0.0
    assert np.argmin(ref.flow) == 7
    assert ref.outliers[7]
    assert not ref.prototypes[7]
    back = Refinement.from_state(ref.to_state())
    assert all(np.array_equal(x, y) for x, y in zip(back.masks, ref.masks, strict=True))
    assert np.array_equal(back.outliers, ref.outliers)
    # mask-normalised affinities (Eq. 3.12 with mask masses): object features all match,
    # so members' affinities are exactly 1, the intruder's 0, and it is still the outlier
    refn = refine_with_masks(sets, labels, _GridMatcher(), normalize="mask")
    W = refn.extra["masked_affinity"].toarray()  # sparse over the matched pairs
    np.testing.assert_allclose(W[:7, :7][~np.eye(7, dtype=bool)], 1.0)
    assert np.all(W[7] == 0.0) and refn.outliers[7] and not refn.outliers[:7].any()
    with pytest.raises(ValueError, match="normalize"):
        refine_with_masks(sets, labels, _GridMatcher(), normalize="max")


def test_masks_partner_sampling_and_callable_matcher():
    rng = np.random.default_rng(1)
    sets = [rng.integers(0, 5, size=(12, 1)).astype(np.float32) for _ in range(30)]
    m = _GridMatcher()
    calls = []

    def f(i, j):
        calls.append((i, j))
        return m.match(sets[i], sets[j])

    ref = refine_with_masks(sets, np.zeros(30, np.int64), f, max_partners=5)
    assert len(calls) == ref.n_matches
    assert len(set(calls)) == len(calls)
    assert ref.n_matches <= 30 * 5
    with pytest.raises(ValueError, match="labels"):
        refine_with_masks(sets, np.zeros(3, np.int64), m)
    with pytest.raises(TypeError, match="matcher"):
        refine_with_masks(sets, np.zeros(30, np.int64), 42)


# ------------------------------------------------------------------------------ classifier
def test_classifier_predicts_held_out_images_with_confidence():
    K, truth, _ = topic_kernel(30, 3, noise=0.5, seed=9)
    train = np.arange(0, 90, 2)
    test = np.arange(1, 90, 2)
    clf = CategoryClassifier(C=10.0).fit(
        K[np.ix_(train, train)], truth[train], ids=train, names=["a", "b", "c"]
    )
    pred = clf.predict(K[np.ix_(test, train)])
    assert (pred.labels == truth[test]).mean() >= 0.9
    assert pred.confidence.shape == (45,)
    assert np.all((pred.confidence > 1 / 3) & (pred.confidence <= 1))
    assert pred.scores.shape == (45, 3)
    # persistence: arrays and scalars only, same predictions after a round trip
    state = clf.to_state()
    assert all(isinstance(v, np.ndarray | int | float | str | bool) for v in state.values())
    back = CategoryClassifier.from_state(state)
    assert back.names_ == ["a", "b", "c"]
    assert np.array_equal(back.train_ids_, train)
    assert np.array_equal(back.predict(K[np.ix_(test, train)]).labels, pred.labels)


@pytest.mark.parametrize("kwargs", [{"power": 0.5}, {"empirical": True}])
def test_classifier_kernel_transforms(kwargs):
    K, truth, _ = topic_kernel(20, 2, noise=0.5, seed=10)
    clf = CategoryClassifier(**kwargs).fit(K[:30, :30], truth[:30])
    pred = clf.predict(K[30:, :30])
    assert (pred.labels == truth[30:]).mean() >= 0.9
    back = CategoryClassifier.from_state(clf.to_state())
    assert np.allclose(back.predict(K[30:, :30]).scores, pred.scores)


def test_classifier_errors():
    clf = CategoryClassifier()
    with pytest.raises(RuntimeError, match="fit"):
        clf.predict(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="two groups"):
        clf.fit(np.eye(3), np.zeros(3))
    with pytest.raises(ValueError, match="square"):
        clf.fit(np.ones((2, 3)), np.zeros(2))
    clf.fit(np.eye(4) + 0.1, np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"\(q, 4\)"):
        clf.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="C"):
        CategoryClassifier(C=0)


def test_clustering_accuracy_is_permutation_invariant():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert clustering_accuracy(truth, np.array([2, 2, 0, 0, 1, 1])) == 1.0
    assert clustering_accuracy(truth, np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(4 / 6)


def test_user_edits_move_merge_split():
    K, truth, _ = topic_kernel(15, 3, noise=0.4, seed=12)
    res = discover_categories(K, k=3)
    img = int(res.members(0)[-1])
    must, cannot = move_constraints(res, img, 1, n_anchors=2)
    assert len(must) == 2 and all(res.labels[j] == 1 for _, j in must)
    assert len(cannot) == 2 and all(res.labels[j] == 0 for _, j in cannot)
    moved = discover_categories(K, k=3, must=must, cannot=cannot)
    assert moved.labels[img] == moved.labels[must[0][1]]
    merged = merge_groups(res.labels, [0, 2])
    assert np.unique(merged).size == 2
    assert len(set(merged[np.isin(res.labels, [0, 2])].tolist())) == 1
    split = split_group(K, merged, int(merged[np.flatnonzero(res.labels == 0)[0]]))
    assert clustering_accuracy(truth, split) >= 0.95
    # a group of its own (group k): only kept apart from its old group's best members
    must, cannot = move_constraints(res, img, 3, n_anchors=2)
    assert must == [] and len(cannot) == 2 and all(res.labels[j] == 0 for _, j in cannot)
    with pytest.raises(ValueError, match="group"):
        move_constraints(res, 0, 7)
    with pytest.raises(ValueError, match="two groups"):
        merge_groups(res.labels, [1])


def test_masks_from_pyramid_match_prefer_shared_object_features():
    from engine.kernels.pyramid import PyramidMatch

    rng = np.random.default_rng(0)
    objects = [rng.normal(size=(20, 8)) for _ in range(2)]
    sets = [
        np.concatenate(
            [objects[g] + 0.05 * rng.normal(size=(20, 8)), 2 * rng.normal(size=(20, 8))]
        ).astype(np.float32)
        for g in (0, 1)
        for _ in range(6)
    ]
    pm = PyramidMatch().fit(sets)
    res = discover_categories(pm.kernel(sets), k=2)
    assert clustering_accuracy(np.repeat([0, 1], 6), res.labels) == 1.0
    ref = refine_with_masks(sets, res.labels, pm)
    obj = np.mean([m[:20].mean() for m in ref.masks])
    background = np.mean([m[20:].mean() for m in ref.masks])
    assert obj > 3 * background


def _object_sets(seed=0):
    rng = np.random.default_rng(seed)
    objects = [rng.normal(size=(20, 8)) for _ in range(2)]
    return [
        np.concatenate(
            [objects[g] + 0.05 * rng.normal(size=(20, 8)), 2 * rng.normal(size=(20, 8))]
        ).astype(np.float32)
        for g in (0, 1)
        for _ in range(6)
    ]


@pytest.mark.parametrize("bins", ["uniform", "vocabulary"])
def test_binned_matcher_equals_pyramid_match_correspondences(bins):
    from engine.kernels.pyramid import PyramidMatch

    sets = _object_sets(1)
    sets[3] = sets[3][:25]  # unequal sizes
    pm = PyramidMatch(bins).fit(sets)
    bm = BinnedMatcher(pm, sets)
    assert len(bm) == len(sets)
    assert [b.shape for b in bm.bins] == [(len(s), pm.n_levels) for s in sets]
    for b in bm.bins:  # nested: points sharing a bin at level l share one at l + 1
        for lev in range(pm.n_levels - 1):
            _, first = np.unique(b[:, lev], return_index=True)
            parent = dict(zip(b[first, lev], b[first, lev + 1], strict=True))
            assert all(parent[x] == y for x, y in zip(b[:, lev], b[:, lev + 1], strict=True))
    for i, j in [(0, 1), (0, 3), (3, 7), (5, 2)]:
        ref = pm.match(sets[i], sets[j])
        got = bm(i, j)
        assert np.array_equal(got.pairs, ref.pairs)
        assert np.array_equal(got.level, ref.level)
        np.testing.assert_allclose(got.weight, ref.weight)
        assert got.score == pytest.approx(ref.weight.sum())


def test_binned_matcher_masks_prefer_object_features_and_handle_empty_sets():
    from engine.kernels.pyramid import PyramidMatch

    sets = _object_sets(2)
    pm = PyramidMatch().fit(sets)
    labels = np.repeat([0, 1], 6)
    ref = refine_with_masks(sets, labels, BinnedMatcher(pm, sets), max_partners=3)
    obj = np.mean([m[:20].mean() for m in ref.masks])
    background = np.mean([m[20:].mean() for m in ref.masks])
    assert obj > 3 * background
    assert ref.n_matches <= 12 * 3
    empty = BinnedMatcher(pm, [sets[0], np.zeros((0, 8), np.float32)])
    assert empty(0, 1).pairs.shape == (0, 2)
    with pytest.raises(ValueError, match="fitted"):
        BinnedMatcher(PyramidMatch(), sets)
    with pytest.raises(ValueError, match="common D"):
        BinnedMatcher(pm, [sets[0], np.zeros((3, 5), np.float32)])


def test_masks_pack_roundtrip_and_validation():
    masks = [np.array([0.5, 1.0], np.float32), np.zeros(0, np.float32), np.ones(3, np.float32)]
    flat, offsets = masks_to_arrays(masks)
    assert flat.dtype == np.float32 and offsets.tolist() == [0, 2, 2, 5]
    back = masks_from_arrays(flat, offsets)
    assert all(np.array_equal(a, b) for a, b in zip(back, masks, strict=True))
    with pytest.raises(ValueError, match="offsets"):
        masks_from_arrays(flat, np.array([0, 2, 4]))


def _brute_spatial_kernel(bins, xy, grid, word_level):
    """Reference: explicit per-level histogram intersections (dicts), same level order."""
    from collections import Counter

    def levels(b, p):
        out, g = [], grid
        while g >= 2:
            cell = np.minimum((np.clip(p, 0, 1) * g).astype(int), g - 1)
            pairs = zip(b[:, word_level], cell, strict=True)
            out.append([(w, g, cx, cy) for w, (cx, cy) in pairs])
            g //= 2
        return out + [list(b[:, lev]) for lev in range(b.shape[1])]

    hs = [[Counter(lv) for lv in levels(b, p)] for b, p in zip(bins, xy, strict=True)]
    n_lev = len(hs[0])
    w = 0.5 ** np.arange(n_lev)
    dw = w - np.append(w[1:], 0.0)
    n = len(bins)
    K = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            K[i, j] = sum(
                dw[lev] * sum(min(c, hs[j][lev][key]) for key, c in hs[i][lev].items())
                for lev in range(n_lev)
            )
    d = np.sqrt(np.diag(K))
    return K / np.outer(d, d)


def test_spatial_pyramid_kernel_matches_explicit_intersections():
    rng = np.random.default_rng(3)
    bins, xy = [], []
    for m in (30, 45, 12, 60):
        leaf = rng.integers(0, 40, m)
        bins.append(np.stack([leaf, leaf // 8, leaf // 40], axis=1).astype(np.int64))
        xy.append(rng.uniform(0, 1, (m, 2)))
    for grid, wl in ((4, 1), (2, 0), (8, 2)):
        K = spatial_pyramid_kernel(bins, xy, grid=grid, word_level=wl)
        np.testing.assert_allclose(K, _brute_spatial_kernel(bins, xy, grid, wl), atol=1e-12)
        np.testing.assert_allclose(np.diag(K), 1.0)
        assert np.linalg.eigvalsh(K).min() > -1e-9  # sum of intersection kernels: PSD


def test_spatial_pyramid_kernel_rewards_same_layout():
    rng = np.random.default_rng(0)
    words = rng.integers(0, 50, 80)
    b = np.stack([words, words // 10], axis=1).astype(np.int64)
    xy = rng.uniform(0, 1, (80, 2))
    moved = xy[rng.permutation(80)]  # same words, scrambled positions
    K = spatial_pyramid_kernel([b, b, b], [xy, xy, moved], grid=4, word_level=0)
    assert K[0, 1] == pytest.approx(1.0)
    assert K[0, 2] < 0.9


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"grid": 3}, "grid"),
        ({"grid": 1}, "grid"),
        ({"word_level": 5}, "word_level"),
    ],
)
def test_spatial_pyramid_kernel_validation(kwargs, match):
    b = [np.zeros((3, 2), np.int64)]
    with pytest.raises(ValueError, match=match):
        spatial_pyramid_kernel(b, [np.zeros((3, 2))], **kwargs)
    with pytest.raises(ValueError, match="positions"):
        spatial_pyramid_kernel(b, [np.zeros((2, 2))])


# --------------------------------------------------------------- dense categorisation channel
def test_category_features_dense_rootsift_with_white_frame_trimmed():
    from engine.cluster import category_features

    rng = np.random.default_rng(0)
    img = np.full((240, 320), 255, np.uint8)  # white frame around a textured object
    img[40:200, 60:260] = rng.integers(0, 200, (160, 200), dtype=np.uint8)
    f = category_features(img, side=120, max_features=150)
    assert f.descriptors.shape == (150, 128) and f.descriptors.dtype == np.float32
    assert f.descriptors.min() >= 0 and f.descriptors.max() <= 1  # RootSIFT
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-4)
    assert f.image_size == (320, 240)
    # windows lie on the object (the frame is cut off), in pixels of the image
    assert f.xy[:, 0].min() >= 60 and f.xy[:, 0].max() <= 260
    assert f.xy[:, 1].min() >= 40 and f.xy[:, 1].max() <= 200
    g = category_features(img, side=120, max_features=150, trim=0)
    assert g.xy[:, 0].min() < 60  # without trimming the windows cover the frame too
    np.testing.assert_array_equal(
        f.descriptors, category_features(img, side=120, max_features=150).descriptors
    )


def _brute_binned_kernel(bins):
    """sum_l (w_l - w_{l+1}) sum_b min(h_a, h_b), w_l = 2^-l, cosine-normalised."""
    L = bins[0].shape[1]
    w = 0.5 ** np.arange(L)
    dw = w - np.append(w[1:], 0)
    n = len(bins)
    K = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            for lev in range(L):
                ui, ci = np.unique(bins[i][:, lev], return_counts=True)
                uj, cj = np.unique(bins[j][:, lev], return_counts=True)
                _, a, b = np.intersect1d(ui, uj, return_indices=True)
                K[i, j] += dw[lev] * np.minimum(ci[a], cj[b]).sum()
    d = np.sqrt(np.diag(K))
    return K / np.outer(d, d)


def _random_bins(rng, n, L=3, b=4):
    out = []
    for _ in range(n):
        leaf = rng.integers(0, b**L, size=int(rng.integers(5, 40)))
        out.append(np.stack([leaf // b**lev for lev in range(L)], axis=1))
    return out


@pytest.mark.parametrize("dense_bins", [0, 256])  # sparse unary codes / dense histograms
def test_binned_kernel_matches_explicit_intersections(dense_bins, monkeypatch):
    import engine.cluster.binned
    from engine.cluster import binned_pyramid_kernel

    monkeypatch.setattr(engine.cluster.binned, "DENSE_LEVEL_BINS", dense_bins)
    rng = np.random.default_rng(1)
    bins = _random_bins(rng, 7)
    K = binned_pyramid_kernel(bins)
    np.testing.assert_allclose(K, _brute_binned_kernel(bins), atol=1e-6)
    np.testing.assert_allclose(np.diag(K), 1.0)
    cols = np.array([1, 4, 6])
    np.testing.assert_allclose(binned_pyramid_kernel(bins, columns=cols), K[:, cols], atol=1e-6)


def test_bin_correspondences_form_intersections_level_by_level():
    from engine.cluster import bin_correspondences

    rng = np.random.default_rng(2)
    a, b = _random_bins(rng, 2)
    r = bin_correspondences(a, b)
    assert np.unique(r.pairs[:, 0]).size == len(r.pairs)  # one-to-one
    assert np.unique(r.pairs[:, 1]).size == len(r.pairs)
    for lev in range(a.shape[1]):
        ua, ca = np.unique(a[:, lev], return_counts=True)
        ub, cb = np.unique(b[:, lev], return_counts=True)
        _, i, j = np.intersect1d(ua, ub, return_indices=True)
        # pairs formed at this level or finer = histogram intersection at this level
        assert (r.level <= lev).sum() == np.minimum(ca[i], cb[j]).sum()
        p = r.pairs[r.level == lev]
        assert np.all(a[p[:, 0], lev] == b[p[:, 1], lev])  # partners share the bin
    np.testing.assert_allclose(r.weight, 0.5**r.level)


def test_knn_graph_auto_k_on_groups_of_unequal_density():
    from engine.cluster import knn_graph

    rng = np.random.default_rng(3)
    truth = np.repeat([0, 1, 2, 3], [30, 30, 30, 30])
    within = np.array([0.8, 0.5, 0.35, 0.35])[truth]  # tight and loose groups
    K = np.where(truth[:, None] == truth[None, :], np.sqrt(np.outer(within, within)), 0.12)
    K = K + 0.1 * rng.random(K.shape)
    K = (K + K.T) / 2
    np.fill_diagonal(K, 1.0)
    G = knn_graph(K, 10)
    assert np.allclose(G, G.T) and np.all(np.diag(G) == 0)
    assert np.all((G > 0).sum(axis=1) >= 10)
    res = discover_categories(K, k="auto", k_graph=10)
    assert res.k == 4 and "nearest-neighbour graph" in res.k_reason
    assert clustering_accuracy(truth, res.labels) == 1.0
    with pytest.raises(ValueError, match="k_graph"):
        discover_categories(K, k="auto", k_graph=0)


def _scene(rng, size=160):
    import cv2

    img = np.full((size, size), 128, np.uint8)
    for _ in range(25):
        c = tuple(int(v) for v in rng.integers(0, size, 2))
        cv2.circle(img, c, int(rng.integers(4, 20)), int(rng.integers(0, 255)), -1)
        p = rng.integers(0, size, (2, 2))
        cv2.line(img, tuple(int(v) for v in p[0]), tuple(int(v) for v in p[1]),
                 int(rng.integers(0, 255)), int(rng.integers(1, 4)))  # fmt: skip
    return img


def _photo_folder(folder, n_groups=2, per_group=4, seed=0):
    """folder/g{i}/v{j}.png: slightly shifted / rescaled views of scene i."""
    import cv2

    rng = np.random.default_rng(seed)
    for g in range(n_groups):
        sub = folder / f"g{g}"
        sub.mkdir(parents=True, exist_ok=True)
        img = _scene(rng)
        for v in range(per_group):
            s = float(rng.uniform(0.85, 1.0))
            M = np.float32([[s, 0, rng.uniform(-6, 6)], [0, s, rng.uniform(-6, 6)]])
            cv2.imwrite(str(sub / f"v{v}.png"), cv2.warpAffine(img, M, img.shape[::-1],
                                                              borderValue=128))  # fmt: skip


@pytest.fixture()
def small_collection(tmp_path, monkeypatch):
    import engine.cluster.channel
    import engine.cluster.model
    from engine.collection import Collection

    channel = engine.cluster.channel
    monkeypatch.setattr(channel, "DENSE_CHUNK", 3)  # several chunks from a handful of photos
    monkeypatch.setitem(channel.CATEGORY_FEATURES, "side", 120)
    monkeypatch.setitem(channel.CATEGORY_FEATURES, "max_features", 120)
    monkeypatch.setitem(engine.cluster.model.CATEGORY_VOCAB, "branching", 4)
    photos = tmp_path / "photos"
    _photo_folder(photos)
    col = Collection.open(photos, tmp_path / "index")
    for _ in col.update(jobs=1):
        pass
    yield col
    col.close()


def _drain(gen):
    items = []
    while True:
        try:
            items.append(next(gen))
        except StopIteration as stop:
            return items, stop.value


def test_categorize_groups_folder_and_caches_dense_channel_incrementally(small_collection):
    from engine.cluster import (
        CategoryChannel,
        categorize_iter,
        category_features_of,
        category_kernel_rows,
        category_mask,
    )

    col = small_collection
    items, res = _drain(categorize_iter(col, k=2, jobs=1))
    feats = [p for p in items if p.stage == "features"]
    assert feats[0].total == 8 and feats[-1].done == 8  # all computed, with progress
    assert [p.total for p in items if p.stage == "scenes"][-1] == 8  # every photo queried
    assert "pair(s) the search finds of the same object or place" in res.k_reason
    truth = np.array([p.parent.name for p in res.paths])
    assert clustering_accuracy(truth, res.labels) == 1.0
    assert res.refinement is not None and len(res.refinement.masks) == 8
    for p, m in zip(res.paths, res.refinement.masks, strict=True):
        assert m.shape == (len(category_features_of(col, p)),)
    assert res.prototypes.any() and not (res.prototypes & res.outliers).any()
    # second run: nothing recomputed, same grouping
    items, res2 = _drain(categorize_iter(col, k="auto", jobs=1))
    assert [p.total for p in items if p.stage == "features"] == [0]
    assert [p.message for p in items if p.stage == "scenes"][-1].endswith("(remembered)")
    assert res2.k == 2 and clustering_accuracy(truth, res2.labels) == 1.0
    # a new photo is computed alone, a deleted one is dropped from the cache
    import shutil

    shutil.copy(res.paths[0], res.paths[0].parent / "copy_renamed.png")  # same content
    res.paths[-1].unlink()
    for _ in col.update(jobs=1):
        pass
    items, res3 = _drain(categorize_iter(col, k=2, jobs=1))
    assert [p.total for p in items if p.stage == "features"] == [0]  # content-keyed
    assert [p.total for p in items if p.stage == "scenes"] == [1]  # the copy: same content
    assert [p.done for p in items if p.stage == "scenes"] == [1]  # (nothing queried)
    ch = CategoryChannel(col.store)
    assert len(ch.manifest["items"]) == 7
    # kernel rows of an indexed photo against the others, with the stored vocabulary
    rows = category_kernel_rows(col, [res3.paths[0]], res3.paths)
    assert rows.shape == (1, 8) and rows[0, 0] == pytest.approx(1.0, abs=1e-6)
    f, mask = category_mask(col, res3.paths[0], res3.paths[1:4])
    assert mask.shape == (len(f),) and mask.max() == pytest.approx(1.0)


def test_scene_pairs_by_default_only_in_folders_up_to_a_size(small_collection, monkeypatch):
    """``scenes=None`` queries up to SCENES_AUTO_MAX photos; True: always (exact mode)."""
    import engine.cluster.pipeline as pipeline
    from engine.cluster import categorize_iter

    col = small_collection
    monkeypatch.setattr(pipeline, "SCENES_AUTO_MAX", 7)  # the folder holds 8
    items, res = _drain(categorize_iter(col, k=2, jobs=1))
    assert not [p for p in items if p.stage == "scenes"] and "same object" not in res.k_reason
    items, res = _drain(categorize_iter(col, k=2, jobs=1, scenes=True))
    assert [p for p in items if p.stage == "scenes"] and "same object" in res.k_reason


def test_queries_from_two_threads_answer_as_one_at_a_time(small_collection):
    """The app's grouping worker queries the collection for the scene pairs while the
    person may search from another worker: concurrent ``hybrid`` queries on one cold
    collection answer as sequential ones."""
    import threading

    from engine.collection import Collection

    def answers(col, paths):
        hits = {p: col.query(p, method="hybrid", top=5) for p in paths}
        return {str(p): [(str(h.path), round(h.score, 9), h.probability) for h in hs]
                for p, hs in hits.items()}  # fmt: skip

    paths = small_collection.paths()
    want = answers(small_collection, paths)
    for _ in range(3):
        got, errors = [], []
        with Collection.open(paths[0].parent.parent, small_collection.index_dir,
                             readonly=True) as col:  # fmt: skip

            def run(order, col=col, got=got, errors=errors):
                try:
                    got.append(answers(col, order))
                except Exception as exc:  # (reported below)
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=(o,)) for o in (paths, paths[::-1])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert errors == [] and got == [want, want]


def test_interrupted_dense_channel_keeps_finished_chunks(small_collection):
    from engine.cluster import CategoryChannel, categorize_iter

    col = small_collection
    gen = categorize_iter(col, k=2, jobs=1)
    for p in gen:
        if p.stage == "features" and p.done >= 4:
            break
    gen.close()  # the user cancels: finished chunks stay usable
    ch = CategoryChannel(col.store)
    assert 3 <= len(ch.manifest["items"]) < 8
    arrays = sorted(f.name for f in (col.index_dir / "arrays").glob("cluster.dense.*"))
    globals_ = (".app.npy", ".sem.npy")  # (appearance descriptors, semantic embeddings)
    chunk_files = [a for a in arrays if not a.endswith((".bins.npy", *globals_))]
    assert len(chunk_files) == 3 * len(ch.manifest["chunks"])  # no orphan chunk files
    for suffix in globals_:
        assert sum(a.endswith(suffix) for a in arrays) == len(ch.manifest["chunks"])
    items, res = _drain(categorize_iter(col, k=2, jobs=1))
    first = next(p for p in items if p.stage == "features")
    assert first.total == 8 - len(ch.manifest["items"])  # only the missing ones
    assert res.n == 8


def test_bins_matcher_batch_equals_pairwise_correspondences():
    from engine.cluster import BinsMatcher, bin_correspondences

    rng = np.random.default_rng(4)
    bins = _random_bins(rng, 9)
    bins[3] = bins[3][:0]  # an empty set
    m = BinsMatcher(bins)
    pairs = np.array([(0, 1), (1, 2), (0, 8), (3, 4), (5, 5), (7, 2)])
    for (i, j), (p, w) in zip(pairs, m.match_many(pairs), strict=True):
        r = bin_correspondences(bins[i], bins[j])
        got = sorted(zip(p[:, 0].tolist(), p[:, 1].tolist(), w.tolist(), strict=True))
        want = sorted(zip(r.pairs[:, 0].tolist(), r.pairs[:, 1].tolist(), r.weight.tolist(),
                          strict=True))  # fmt: skip
        assert got == want
    r = m(0, 1)
    assert r.pairs.shape[1] == 2 and r.score == pytest.approx(r.weight.sum())


# --------------------------------------------------------------- stored grouping, old paths
def _grouping(with_svm=True, masks=True):
    from engine.cluster import Grouping

    K, truth, _ = topic_kernel(6, 2, seed=3)
    labels = truth.astype(np.int64)
    protos = np.zeros(labels.size, bool)
    for g in (0, 1):  # two prototypes per group
        protos[np.flatnonzero(labels == g)[:2]] = True
    clf = None
    if with_svm:
        train = np.flatnonzero(protos)
        clf = CategoryClassifier().fit(K[np.ix_(train, train)], labels[train], ids=train)
    rng = np.random.default_rng(0)
    return Grouping(
        paths=[f"/photos/{i}.jpg" for i in range(labels.size)], labels=labels,
        prototypes=protos, outliers=~protos & (np.arange(labels.size) % 5 == 0),
        flow=rng.random(labels.size), features="index", method="vocabulary",
        masks=[rng.random(int(m)).astype(np.float32) for m in rng.integers(0, 9, labels.size)]
        if masks else None,
        classifier=clf, k_reason="given", n_matches=7,
    )  # fmt: skip


@pytest.mark.parametrize(("with_svm", "masks"), [(True, True), (False, False)])
def test_save_and_load_grouping_round_trip(tmp_path, with_svm, masks):
    from engine.cluster import load_grouping, save_grouping
    from engine.index import keys
    from engine.index.store import IndexStore

    g = _grouping(with_svm, masks)
    with IndexStore.open(tmp_path / "index") as store:
        save_grouping(store, _grouping(True, True))  # an older grouping is replaced
        save_grouping(store, g)
        back = load_grouping(store)
        assert store.has_state(keys.GROUPING_STATE)  # one state, no separate arrays
        names = sorted(f.name for f in (tmp_path / "index" / "arrays").glob("cluster.*"))
        assert names == []
        st = store.load_state(keys.GROUPING_STATE)
    assert [str(p) for p in back.paths] == g.paths
    for field in ("labels", "prototypes", "outliers", "flow"):
        got, want = getattr(back, field), getattr(g, field)
        assert got.dtype == want.dtype and np.array_equal(got, want), field
    assert (back.features, back.method, back.k) == ("index", "vocabulary", 2)
    assert (back.k_reason, back.n_matches) == ("given", 7)
    if masks:
        assert all(np.array_equal(a, b) for a, b in zip(back.masks, g.masks, strict=True))
    else:  # not refined: every image's mask is stored empty
        assert [m.size for m in back.masks] == [0] * len(g.paths)
    if with_svm:
        want = [Path(g.paths[i]) for i in np.flatnonzero(g.prototypes)]
        assert back.training_paths() == want
        np.testing.assert_array_equal(back.classifier.train_ids_, g.classifier.train_ids_)
        K = np.random.default_rng(1).random((3, len(want)))
        a, b = back.classifier.predict(K), g.classifier.predict(K)
        assert np.array_equal(a.labels, b.labels) and np.array_equal(a.confidence, b.confidence)
    else:  # the older grouping's classifier is gone
        assert back.classifier is None and not [k for k in st if k.startswith("svm.")]
    assert np.array_equal(back.members(0), g.members(0))
    assert load_grouping.__module__ == "engine.cluster.grouping"


def _save_legacy(store, grouping):
    """The writer of older versions: one named array per entry (``cluster.<name>``)."""
    prefix = "cluster."
    flat, offsets = masks_to_arrays(grouping.masks)
    store.save_array(prefix + "masks", flat)
    store.save_array(prefix + "mask_offsets", offsets)
    store.save_array(prefix + "flow", np.asarray(grouping.flow, np.float64))
    store.save_array(prefix + "paths", np.array([str(p) for p in grouping.paths], dtype=str))
    store.save_array(prefix + "labels", grouping.labels.astype(np.int64))
    store.save_array(prefix + "prototypes", grouping.prototypes.astype(bool))
    store.save_array(prefix + "outliers", grouping.outliers.astype(bool))
    store.save_array(prefix + "method", np.array(grouping.method))
    store.save_array(prefix + "features", np.array(grouping.features))
    for key, val in grouping.classifier.to_state().items():
        store.save_array(prefix + "svm." + key, np.asarray(val))


def test_load_grouping_of_an_old_index_and_of_none(tmp_path):
    """Indexes grouped by older versions keep the grouping as separate arrays (before
    masks and the dense channel without flow, masks and features): still read; the next
    save replaces them by the one state and deletes them, never the dense channel's."""
    from engine.cluster import load_grouping, save_grouping
    from engine.index import keys
    from engine.index.store import IndexStore

    g = _grouping()
    with IndexStore.open(tmp_path / "index") as store:
        with pytest.raises(KeyError):
            load_grouping(store)
        _save_legacy(store, g)
        store.save_array("cluster.dense.abc123.desc", np.zeros((2, 128), np.uint8))
        back = load_grouping(store)
        assert not store.has_state(keys.GROUPING_STATE)
        assert np.array_equal(back.labels, g.labels) and np.array_equal(back.flow, g.flow)
        assert all(np.array_equal(a, b) for a, b in zip(back.masks, g.masks, strict=True))
        np.testing.assert_array_equal(back.classifier.train_ids_, g.classifier.train_ids_)
        assert (back.k_reason, back.n_matches) == ("", 0)  # not stored then
        for name in ("flow", "masks", "mask_offsets", "features"):
            store.delete_array("cluster." + name)
        back = load_grouping(store)
        assert back.flow is None and back.masks is None and back.features == "index"
        assert back.classifier is not None and back.labels.dtype == np.int64
        save_grouping(store, g)
        left = sorted(f.name for f in (tmp_path / "index" / "arrays").glob("cluster.*"))
        assert left == ["cluster.dense.abc123.desc.npy"]
        assert np.array_equal(load_grouping(store).flow, g.flow)


def _crash_after_npz(monkeypatch, state):
    """Make the store's file writer fail right after it wrote the array file of ``state``
    (before anything names that file): a crash in the middle of saving."""
    import sys

    import engine.index.files

    original = engine.index.files.atomic_write

    def write_then_crash(final, write, *args, **kwargs):
        original(final, write, *args, **kwargs)
        name = Path(final).name
        if name.startswith(state + ".") and name.endswith(".npz"):
            raise OSError("injected crash after the array file was written")

    for mod in list(sys.modules.values()):  # wherever the store refers to the writer
        if getattr(mod, "__name__", "").startswith("engine.index") and (
            getattr(mod, "atomic_write", None) is original
        ):
            monkeypatch.setattr(mod, "atomic_write", write_then_crash)


@pytest.mark.parametrize("old_format", [False, True])
def test_a_crash_while_saving_keeps_the_old_grouping_and_its_classifier(
    tmp_path, monkeypatch, old_format
):
    """The grouping and its classifier are one version: a save that stops half-way leaves
    the previous grouping AND its classifier (never the new labels with the old SVM)."""
    from engine.cluster import Grouping, load_grouping, save_grouping
    from engine.index import keys
    from engine.index.store import IndexStore

    old = _grouping()
    K, truth, _ = topic_kernel(6, 2, seed=9)  # another grouping of the same photos
    new_labels = 1 - truth.astype(np.int64)
    protos = np.zeros(new_labels.size, bool)
    protos[[0, 1, 6, 7]] = True
    clf = CategoryClassifier().fit(K[np.ix_(protos, protos)], new_labels[protos],
                                   ids=np.flatnonzero(protos))  # fmt: skip
    new = Grouping(old.paths, new_labels, protos, ~protos, np.ones(new_labels.size), "index",
                   "uniform", masks=None, classifier=clf, k_reason="new")  # fmt: skip
    rows = np.random.default_rng(2).random((4, int(old.prototypes.sum())))
    with IndexStore.open(tmp_path / "index") as store:
        if old_format:
            _save_legacy(store, old)
        else:
            save_grouping(store, old)
        before = load_grouping(store)
        want = before.classifier.predict(rows)
        with monkeypatch.context() as m:
            _crash_after_npz(m, keys.GROUPING_STATE)
            with pytest.raises(OSError, match="injected crash"):
                save_grouping(store, new)
        back = load_grouping(store)
        assert [str(p) for p in back.paths] == old.paths
        assert np.array_equal(back.labels, old.labels)
        assert (back.method, back.k_reason) == (before.method, before.k_reason)
        assert np.array_equal(back.classifier.train_ids_, old.classifier.train_ids_)
        got = back.classifier.predict(rows)  # the old classifier, on the old labels
        assert np.array_equal(got.labels, want.labels)
        assert np.array_equal(got.confidence, want.confidence)
        save_grouping(store, new)  # the next save goes through
        back = load_grouping(store)
        assert np.array_equal(back.labels, new_labels) and back.k_reason == "new"
        assert np.array_equal(back.classifier.train_ids_, np.flatnonzero(protos))


# ------------------------------------------------------------------ the person's edits
def _editable(labels, flow=None, protos=None, outliers=None, names=None):
    from engine.cluster import EditableGrouping

    labels = np.asarray(labels, np.int64)
    n = labels.size
    return EditableGrouping(
        [f"/p/{i}.jpg" for i in range(n)], labels,
        np.arange(n, dtype=np.float64) if flow is None else np.asarray(flow, np.float64),
        np.zeros(n, bool) if protos is None else np.asarray(protos, bool),
        np.zeros(n, bool) if outliers is None else np.asarray(outliers, bool),
        "why", dict(names or {}),
    )  # fmt: skip


def test_editable_grouping_orders_members_and_compacts_labels():
    from engine.cluster import EditableGrouping, Grouping, compact_labels

    g = _editable([0, 0, 0, 1, 1], flow=[1.0, 5.0, 3.0, 2.0, 9.0],
                  protos=[0, 0, 1, 0, 0], outliers=[0, 1, 0, 0, 0], names={1: "Dogs"})  # fmt: skip
    assert g.k == 2 and g.name(0) == "Group 1" and g.name(1) == "Dogs"
    assert g.members(0).tolist() == [2, 0, 1]  # prototype first, outlier last
    assert g.members(1).tolist() == [4, 3] and g.group_of("/p/3.jpg") == 1
    assert g.to_clustering().k == 2
    # compact: empty groups removed, largest first, ties in label order
    assert compact_labels(np.array([5, 5, 2, 9, 9, 9])).tolist() == [1, 1, 2, 0, 0, 0]
    assert compact_labels(np.array([3, 1])).tolist() == [1, 0]
    K, truth, _ = topic_kernel(4, 2, seed=5)
    fl = EditableGrouping.from_labels([str(i) for i in range(8)], truth * 7, K, "r", {0: "x"})
    flow, protos, outl = rank_groups(K, compact_labels(truth * 7))
    assert np.array_equal(fl.flow, flow) and fl.names == {0: "x"}
    assert np.array_equal(fl.prototypes, protos) and np.array_equal(fl.outliers, outl)
    src = Grouping([Path("/a"), Path("/b")], np.array([1, 0]), np.ones(2, bool),
                   np.zeros(2, bool), None, "dense", "dense", k_reason="k=2")  # fmt: skip
    shown = EditableGrouping.from_grouping(src)
    assert shown.paths == ["/a", "/b"] and shown.flow.tolist() == [0.0, 0.0]
    assert shown.k_reason == "k=2" and EditableGrouping.from_grouping(src, "one").k_reason == "one"


def test_carry_names_and_pairs_to_rows():
    from engine.cluster import carry_names, pairs_to_rows

    paths = ["a", "b", "c", "d", "e"]
    old = np.array([0, 0, 0, 1, 1])
    new = np.array([1, 1, 0, 0, 0])  # renumbered, "c" moved over
    assert carry_names(paths, old, {0: "Cats", 1: "Dogs"}, paths, new) == {1: "Cats", 0: "Dogs"}
    assert carry_names(paths, old, {}, paths, new) == {}
    assert carry_names(paths, old, {0: "Cats"}, ["x"], np.array([0])) == {}
    assert pairs_to_rows(paths, [("a", "c"), ("b", "zz"), ("e", "d")]) == [(0, 2), (4, 3)]


def test_split_and_merge_edits():
    from engine.cluster import merge_edit, merge_ranks, split_edit, split_group_iter

    K, truth, _ = topic_kernel(5, 3, noise=0.4, seed=4)
    labels = np.where(truth == 2, 0, truth)  # groups 0 and 2 merged: a group to split
    g = _editable(labels, names={0: "Mixed", 1: "Single"})
    items, res = _drain(split_group_iter(None, g.paths, g.labels, 0, K))
    assert [p.stage for p in items] == ["split", "split"] and items[-1].done == 2
    assert np.array_equal(res.idx, np.flatnonzero(labels == 0)) and res.halves.size == 10
    assert clustering_accuracy(truth[res.idx], res.halves) == 1.0
    new, cannot = split_edit(g, 0, res, K)
    assert new.k == 3 and new.k_reason == "split Mixed by hand" and len(cannot) == 1
    a, b = cannot[0]
    assert new.group_of(a) != new.group_of(b) and {g.group_of(a), g.group_of(b)} == {0}
    assert clustering_accuracy(truth, new.labels) == 1.0 and "Single" in new.names.values()
    # without the full affinities the halves keep the split's own ranking
    alone, _ = split_edit(g, 0, res, None)
    assert np.array_equal(alone.flow[res.idx], res.flow)
    # merge: the union; must-group pair of the groups' first members; flows rescaled
    merged, must = merge_edit(new, 0, 2, None)
    assert merged.k == 2 and must == [(new.paths[new.members(0)[0]],
                                       new.paths[new.members(2)[0]])]  # fmt: skip
    flow, _, _ = merge_ranks(new, [0, 2])
    assert np.array_equal(merged.flow, flow)
    inside = np.isin(new.labels, [0, 2])
    assert np.allclose(flow[inside], new.flow[inside] / 4 * 9)  # 5 members each -> 10
    exact, _ = merge_edit(new, 0, 2, K)
    rows = np.flatnonzero(inside)  # the merged group is ranked again on its affinities
    assert np.allclose(exact.flow[rows], rank_groups(K, exact.labels)[0][rows])
    assert np.array_equal(exact.flow[~inside], new.flow[~inside])  # the rest is as it was
    with pytest.raises(ValueError, match="cannot split"):
        _drain(split_group_iter(None, g.paths, np.arange(g.labels.size), 0, K))
    _, two = _drain(split_group_iter(None, g.paths[:2], np.zeros(2, np.int64), 0, K))
    assert two.halves.tolist() == [0, 1]


def test_merge_and_split_change_only_the_groups_they_concern():
    """Seen in a real window: merging Group 5 into Group 4 renumbered the groups by size
    (the watches' "Group 3" became "Group 4") and flagged two photos of the untouched
    watches group as outliers. A merge or a split changes its own groups alone."""
    from engine.cluster import merge_edit, split_edit, split_group_iter

    K, truth, _ = topic_kernel(4, 4, noise=0.3, seed=7)  # 4 topics of 4 photos
    labels = truth.copy()
    labels[truth == 3] = 1  # group 1 holds topics 1 and 3: a group to split
    labels[truth == 2] = 2
    n = labels.size
    outl = np.zeros(n, bool)
    outl[np.flatnonzero(truth == 0)[-1]] = True  # a flag of group 0, which no edit touches
    g = _editable(labels, outliers=outl, names={0: "Zero", 2: "Two"})
    small = np.flatnonzero(truth == 2)[:2]
    g.labels[small] = 3  # a small fourth group, after the others: 0 (4), 1 (8), 2 (2), 3 (2)
    before = g.labels.copy()
    for K_ in (None, K):
        merged, _ = merge_edit(g, 2, 3, K_)  # two small groups, behind a larger one
        assert merged.k == 3
        assert np.array_equal(merged.labels, np.where(before == 3, 2, before))
        assert merged.names == {0: "Zero", 2: "Two"}
        rest = ~np.isin(before, [2, 3])
        assert np.array_equal(merged.flow[rest], g.flow[rest])
        assert np.array_equal(merged.outliers[rest], g.outliers[rest])
        merged0, _ = merge_edit(g, 3, 0, K_)  # into a later group: the earlier place goes
        assert np.array_equal(merged0.labels, np.where(before == 0, 3, before) - 1)
    _, res = _drain(split_group_iter(None, g.paths, g.labels, 1, K))
    for K_ in (None, K):
        cut, cannot = split_edit(g, 1, res, K_)
        assert cut.k == 5 and len(cannot) == 1
        assert cut.group_of(g.paths[g.members(1)[0]]) == 1  # the group keeps its first photo
        moved = np.flatnonzero((before == 1) & (cut.labels != 1))
        assert moved.size and set(cut.labels[moved].tolist()) == {4}  # the new half is last
        others = before != 1
        assert np.array_equal(cut.labels[others], before[others])
        assert np.array_equal(cut.flow[others], g.flow[others])
        assert np.array_equal(cut.outliers[others], g.outliers[others])
        assert cut.names == {0: "Zero", 2: "Two"}


def test_edits_are_stored_as_before_and_restored_in_the_collection_order(tmp_path):
    import json

    from engine.cluster import load_edits, save_edits, save_grouping
    from engine.index import keys
    from engine.index.store import IndexStore

    g = _editable([0, 1, 0], flow=[0.5, 1.0, 0.25], protos=[1, 1, 0], outliers=[0, 0, 1],
                  names={1: "Blue"})  # fmt: skip
    # the bytes the app always wrote (indexes keep their edits)
    want = ('{"paths": ["/p/0.jpg", "/p/1.jpg", "/p/2.jpg"], "labels": [0, 1, 0], "names": '
            '{"1": "Blue"}, "k_reason": "why", "flow": [0.5, 1.0, 0.25], "prototypes": [1, 1, '
            '0], "outliers": [0, 0, 1], "must": [["/p/0.jpg", "/p/2.jpg"]], "cannot": [], '
            '"k": "auto"}')  # fmt: skip
    with IndexStore.open(tmp_path / "index") as store:
        assert load_edits(store, g.paths) is None  # nothing stored
        save_edits(store, g, [("/p/0.jpg", "/p/2.jpg")], [], "auto")
        assert store.get_kv(keys.CATEGORY_EDITS_KEY).decode() == want
        order = ["/p/2.jpg", "/p/0.jpg", "/p/1.jpg"]
        saved = load_edits(store, order)
        assert saved.source == "edits" and saved.k == "auto" and saved.problem == ""
        assert saved.must == [("/p/0.jpg", "/p/2.jpg")] and saved.cannot == []
        s = saved.grouping
        assert s.paths == order and s.labels.tolist() == [0, 0, 1]
        assert s.flow.tolist() == [0.25, 0.5, 1.0] and s.names == {1: "Blue"}
        assert s.prototypes.tolist() == [False, True, True] and s.k_reason == "why"
        # the folder changed: /p/1 removed (it leaves its group), /p/9 added (to place);
        # the person's groups, names and constraints are kept
        other = load_edits(store, ["/p/0.jpg", "/p/9.jpg", "/p/2.jpg"])
        assert other.grouping.paths == ["/p/0.jpg", "/p/2.jpg"] and other.new_paths == ["/p/9.jpg"]
        assert other.grouping.labels.tolist() == [0, 0] and other.must == saved.must
        assert other.problem == "" and other.grouping.names == {}  # (Blue left with /p/1)
        gone = load_edits(store, ["/p/7.jpg"])
        assert gone.grouping is None and gone.new_paths == [] and gone.problem
        assert saved.placed == {}
        # photos Simile placed (marked "new" in the app) are kept with the edits, those
        # still in the folder; a damaged list of them loses the marks, not the grouping
        save_edits(store, g, [], [], "auto", {"/p/2.jpg": 0.75, "/p/1.jpg": 0.5})
        assert load_edits(store, order).placed == {"/p/2.jpg": 0.75, "/p/1.jpg": 0.5}
        assert load_edits(store, ["/p/0.jpg", "/p/2.jpg"]).placed == {"/p/2.jpg": 0.75}
        d = json.loads(store.get_kv(keys.CATEGORY_EDITS_KEY))
        store.set_kv(keys.CATEGORY_EDITS_KEY, json.dumps({**d, "placed": ["x"]}))
        odd = load_edits(store, order)
        assert odd.placed == {} and odd.grouping is not None and odd.problem == ""
        # damaged entries
        store.set_kv(keys.CATEGORY_EDITS_KEY, json.dumps({"k": 3, "paths": order}))
        bad = load_edits(store, order)
        assert bad.grouping is None and bad.k == 3 and "unusable" in bad.problem
        store.set_kv(keys.CATEGORY_EDITS_KEY, "{not json")
        with pytest.raises(ValueError):
            load_edits(store, order)
        # no edits: the last grouping of `simile cluster`, in the collection's order
        store.set_kv(keys.CATEGORY_EDITS_KEY, "")
        grouping = _grouping()
        save_grouping(store, grouping)
        rows = list(reversed(grouping.paths))
        saved = load_edits(store, rows)
        assert saved.source == "grouping" and saved.k is None and saved.must == []
        assert saved.grouping.paths == rows and saved.grouping.k_reason == "given"
        assert saved.grouping.labels.tolist() == grouping.labels[::-1].tolist()
        fewer = load_edits(store, rows[1:])  # a photo removed: it leaves its group
        assert fewer.grouping.paths == rows[1:] and fewer.new_paths == []
        assert load_edits(store, ["/elsewhere/x.jpg"]) is None  # another folder's grouping


def test_discovery_module_keeps_the_old_names():
    """engine.cluster.discovery (the module before the split) still exports every name,
    the very same objects, and the private names engine.workflows.feedback imports."""
    import engine.cluster
    import engine.cluster.discovery as old

    for name in old.__all__:
        assert getattr(old, name) is getattr(engine.cluster, name, getattr(old, name)), name
    for private in ("as_float", "collection_rows", "vocab_sample", "category_extractor",
                    "hash_of"):  # fmt: skip
        assert getattr(old, "_" + private) is getattr(engine.cluster, private)
    assert old.CATEGORY_FEATURES is engine.cluster.CATEGORY_FEATURES
    assert old.BinnedMatcher is engine.cluster.BinnedMatcher


def test_eigengap_k_averages_the_relative_gaps_of_several_spectra():
    from engine.cluster.ncut import eigengap_k

    # relative gaps at k = 2..5: a favours 3 (0.5), b favours 5 (0.4); both like 4 (0.3)
    a = np.array([1.0, 0.9, 0.88, 0.44, 0.308, 0.3, 0.29])
    b = np.array([1.0, 0.9, 0.88, 0.86, 0.602, 0.3612, 0.35])
    assert eigengap_k(a, 2, 5)[0] == 3 and eigengap_k(b, 2, 5)[0] == 5
    k, reason = eigengap_k(np.stack([a, b]), 2, 5)
    assert k == 4 and "2 spectra" in reason  # mean gaps .02, .26, .30, .21
    assert eigengap_k(a[None, :], 2, 5) == eigengap_k(a, 2, 5)  # one row: as a vector
    # a k below the noise floor of one spectrum is not eligible in the mean
    c = b.copy()
    c[4:] = [0.05, 0.001, 0.0005]
    assert eigengap_k(np.stack([b, c]), 2, 5)[0] != 5


def test_auto_k_from_several_graph_sizes():
    from engine.cluster.pipeline import K_GRAPH_SIZES, default_k_graph

    K, truth, _ = topic_kernel(25, 5, noise=0.4, seed=2)
    res = discover_categories(K, k="auto", k_max=10, k_graph=(10, 20, 500))
    assert res.k == 5 and "10, 20-nearest-neighbour graphs" in res.k_reason  # 500 > n
    assert clustering_accuracy(truth, res.labels) >= 0.95
    assert default_k_graph(1000) == K_GRAPH_SIZES
    assert default_k_graph(30) == (20, 25) and default_k_graph(12) == (10,)
    assert default_k_graph(4) == (2,)
    for bad in ((), (10, 0)):
        with pytest.raises(ValueError, match="k_graph"):
            discover_categories(K, k="auto", k_graph=bad)


def test_sparse_graph_spectrum_keeps_repeated_eigenvalues():
    from engine.cluster import knn_graph
    from engine.cluster.ncut import ncut_embedding, sparse_graph_spectrum

    rng = np.random.default_rng(4)
    truth = np.repeat(np.arange(6), 50)  # 300 images, 6 groups no neighbour graph joins
    X = rng.random((300, 20)) * 0.3 + 3.0 * np.eye(20)[truth]
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    G = knn_graph(X @ X.T, 15)
    dense = ncut_embedding(G, 9)[0]
    sparse = sparse_graph_spectrum(G, 9)
    np.testing.assert_allclose(sparse, dense, atol=1e-6)
    assert np.sum(sparse > 1 - 1e-6) == 6  # eigenvalue 1 once per connected component


def test_sparse_graph_spectrum_of_a_large_component_and_small_ones():
    """A component of more than DENSE_COMPONENT_MAX photos (Lanczos) beside three small
    ones (the dense solver): the same leading eigenvalues as the dense solver of the whole
    graph, eigenvalue 1 once per component."""
    from engine.cluster import knn_graph
    from engine.cluster.ncut import DENSE_COMPONENT_MAX, ncut_embedding, sparse_graph_spectrum

    rng = np.random.default_rng(5)
    sizes = [DENSE_COMPONENT_MAX + 100, 40, 40, 30]
    truth = np.repeat(np.arange(4), sizes)
    X = rng.random((truth.size, 30)) * 0.3 + 3.0 * np.eye(30)[truth]
    X[truth == 0, 4:] += rng.random((sizes[0], 26))  # (the large one has structure inside)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    G = knn_graph(X @ X.T, 12)
    dense = ncut_embedding(G, 20)[0]
    sparse = sparse_graph_spectrum(G, 20)
    np.testing.assert_allclose(sparse, dense, atol=1e-8)
    assert np.sum(sparse > 1 - 1e-8) == 4
