"""Tests for engine.learn: OASIS, threshold rates, SSC, Boosted SSC, BoostPro."""

import numpy as np
import pytest
import scipy.sparse as sp

from engine.learn.oasis import OASIS
from engine.learn.ssc import (
    SSC,
    BoostedSSC,
    BoostPro,
    HammingEmbedding,
    threshold_rates,
    threshold_rates_semi,
)
from engine.learn.supervision import pairs_from_labels
from engine.metrics import precision_at_k


def _brute_rates(v1, v2, labels, w, thresholds):
    tp, fp = [], []
    for t in thresholds:
        same = (v1 <= t) == (v2 <= t)
        pos, neg = labels > 0, labels < 0
        tp.append(np.sum(w[pos] * same[pos]) / w[pos].sum())
        fp.append(np.sum(w[neg] * same[neg]) / w[neg].sum())
    return np.array(tp), np.array(fp)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_threshold_rates_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 40
    v1 = rng.integers(0, 8, n).astype(float)  # ties on purpose
    v2 = rng.integers(0, 8, n).astype(float)
    labels = np.where(rng.random(n) < 0.5, 1, -1)
    w = rng.random(n)
    t, tp, fp = threshold_rates(v1, v2, labels, w)
    btp, bfp = _brute_rates(v1, v2, labels, w, t)
    np.testing.assert_allclose(tp, btp, atol=1e-12)
    np.testing.assert_allclose(fp, bfp, atol=1e-12)
    # thresholds sit strictly between consecutive unique values
    u = np.unique(np.concatenate([v1, v2]))
    assert t[0] < u[0] and np.all((t[1:] > u[:-1]) & (t[1:] < u[1:]))


def test_threshold_rates_figure_3_1_gap():
    # Similar pairs close together, dissimilar pairs far apart: a perfect threshold exists.
    v1 = np.array([0.0, 0.1, 5.0, 5.1, 0.0, 0.2])
    v2 = np.array([0.05, 0.15, 5.05, 5.2, 5.0, 5.2])
    labels = np.array([1, 1, 1, 1, -1, -1])
    _, tp, fp = threshold_rates(v1, v2, labels)
    assert np.max(tp - fp) == pytest.approx(1.0)


def test_semi_supervised_fp_is_collision_probability():
    rng = np.random.default_rng(0)
    values = rng.standard_normal(2000)
    t, _, fp = threshold_rates_semi(values, values[:10], values[:10] + 1e-3)
    k = np.searchsorted(t, 0.0)
    # at the median, a random pair falls on the same side with probability ~1/2
    assert fp[k] == pytest.approx(0.5, abs=0.02)
    assert fp.min() >= 0.5 - 1e-9 and fp.max() <= 1.0


def _clusters(n_per=30, n_classes=4, dim=12, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_classes, dim)) * 2
    X = np.repeat(centres, n_per, axis=0) + noise * rng.standard_normal((n_classes * n_per, dim))
    # half the dimensions are pure noise with a large spread: L1 is misled by them
    X[:, dim // 2 :] = 6 * rng.standard_normal((X.shape[0], dim - dim // 2))
    y = np.repeat(np.arange(n_classes), n_per)
    return X, y


def _p10(sim, y):
    return precision_at_k(sim, y, 10)


@pytest.mark.parametrize("method", ["ssc", "boostssc", "boostpro"])
def test_embeddings_beat_l1_when_dimensions_mislead(method):
    X, y = _clusters()
    i, j, lab = pairs_from_labels(y, 3000, random_state=1)
    if method == "ssc":
        emb = SSC(gap=0.15).fit(X, i, j, lab).embedding_
    elif method == "boostssc":
        emb = BoostedSSC(n_bits=48).fit(X, i, j, lab).embedding_
    else:
        emb = BoostPro(n_bits=24, max_iter=30).fit(X, i, j, lab).embedding_
    codes = emb.transform(X)
    assert codes.dtype == np.uint8 and codes.shape == (len(X), emb.n_bits)
    learned = _p10(emb.similarity(codes), y)
    l1 = _p10(-np.abs(X[:, None, :] - X[None, :, :]).sum(-1), y)
    assert learned > l1 + 0.1, (learned, l1)


def test_boosted_ssc_semi_supervised_uses_only_similar_pairs():
    X, y = _clusters(seed=3)
    i, j, lab = pairs_from_labels(y, 2000, positive_fraction=1.0, random_state=2)
    assert np.all(lab == 1)
    emb = BoostedSSC(n_bits=32).fit(X, i, j, labels=None).embedding_
    l1 = _p10(-np.abs(X[:, None, :] - X[None, :, :]).sum(-1), y)
    assert _p10(emb.similarity(emb.transform(X)), y) > l1


def test_boostpro_semi_supervised_runs_and_helps():
    X, y = _clusters(seed=4)
    i, j, _ = pairs_from_labels(y, 2000, positive_fraction=1.0, random_state=2)
    emb = BoostPro(n_bits=16, max_iter=30).fit(X, i, j, labels=None).embedding_
    l1 = _p10(-np.abs(X[:, None, :] - X[None, :, :]).sum(-1), y)
    assert emb.n_bits > 0
    assert _p10(emb.similarity(emb.transform(X)), y) > l1


def test_boostpro_finds_oblique_direction():
    # Similarity depends on x0 + x1 only: no axis-parallel stump captures it well.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (400, 2))
    s = X[:, 0] + X[:, 1]
    y = np.digitize(s, [-1.0, -0.33, 0.33, 1.0])
    i, j, lab = pairs_from_labels(y, 4000, random_state=0)
    pro = BoostPro(n_bits=8).fit(X, i, j, lab).embedding_
    d = pro.projections[0] / np.linalg.norm(pro.projections[0])
    assert abs(abs(d[0]) - abs(d[1])) < 0.3, d  # close to the diagonal


def test_weighted_hamming_distance_and_state_roundtrip():
    emb = HammingEmbedding(
        projections=np.eye(3, dtype=np.float32),
        thresholds=np.array([0.0, 0.0, 0.0]),
        alpha=np.array([1.0, 2.0, 4.0]),
    )
    A = emb.transform(np.array([[-1.0, -1.0, -1.0], [1.0, -1.0, 1.0]]))
    np.testing.assert_array_equal(A, [[1, 1, 1], [0, 1, 0]])
    np.testing.assert_allclose(emb.distance(A), [[0, 5], [5, 0]])
    back = HammingEmbedding.from_state(emb.to_state())
    np.testing.assert_array_equal(back.transform(np.eye(3)), emb.transform(np.eye(3)))
    # sparse inputs give the same bits
    Xs = sp.random(20, 3, density=0.5, random_state=0, format="csr")
    np.testing.assert_array_equal(emb.transform(Xs), emb.transform(Xs.toarray()))


def _sparse_topics(n_per=40, n_classes=5, n_words=300, seed=0):
    """Bags of words: each class prefers its own words; a block of shared noisy
    words dominates raw cosine similarity."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_classes):
        own = np.arange(c * 20, c * 20 + 20)
        for _ in range(n_per):
            v = np.zeros(n_words, np.float32)
            v[rng.choice(own, 4)] += 1
            v[100 + rng.choice(200, 25)] += rng.random(25) * 2  # shared clutter
            rows.append(v)
    y = np.repeat(np.arange(n_classes), n_per)
    return sp.csr_matrix(np.array(rows)), y


def test_oasis_improves_precision_over_cosine():
    X, y = _sparse_topics()
    Xd = X.toarray()
    Xd /= np.linalg.norm(Xd, axis=1, keepdims=True)
    cos = Xd @ Xd.T
    base = precision_at_k(cos, y, 10)
    model = OASIS(n_steps=20_000, eval_every=2_000, random_state=0).fit(X, y)
    learned = precision_at_k(model.similarity(X), y, 10)
    assert learned > 1.2 * base, (learned, base)
    # W is persisted through arrays only
    state = model.to_state()
    assert all(isinstance(v, np.ndarray | int | float | str) for v in state.values())
    again = OASIS.from_state(state)
    np.testing.assert_allclose(again.similarity(X[:5], X), model.similarity(X[:5], X))


@pytest.mark.parametrize("variant", ["symmetric", "psd"])
def test_oasis_variants(variant):
    X, y = _sparse_topics(seed=1)
    model = OASIS(n_steps=4_000, eval_every=4_000, variant=variant).fit(X, y)
    W = model.W_
    np.testing.assert_allclose(W, W.T, atol=1e-5)
    if variant == "psd":
        assert np.linalg.eigvalsh(W.astype(np.float64)).min() > -1e-4


def test_oasis_rejects_bad_supervision():
    X, _ = _sparse_topics()
    with pytest.raises(ValueError, match="two classes"):
        OASIS().fit(X, np.zeros(X.shape[0], int))
    with pytest.raises(ValueError, match="rows"):
        OASIS().fit(X, np.zeros(3, int))
    with pytest.raises(ValueError, match="variant"):
        OASIS(variant="bogus")


def test_oasis_from_feedback_triplets():
    X, y = _sparse_topics(seed=2)
    rng = np.random.default_rng(0)
    q = rng.integers(0, len(y), 600)
    pos = np.array([rng.choice(np.flatnonzero((y == y[k]) & (np.arange(len(y)) != k))) for k in q])
    neg = np.array([rng.choice(np.flatnonzero(y != y[k])) for k in q])
    model = OASIS(n_steps=8_000, eval_every=2_000).fit_triplets(X, np.c_[q, pos, neg])
    assert model.history_[-1][1] >= model.history_[0][1]
    S = model.similarity(X)
    Xd = X.toarray()
    Xd /= np.linalg.norm(Xd, axis=1, keepdims=True)
    base = precision_at_k(Xd @ Xd.T, y, 10)
    assert precision_at_k(S, y, 10) > base
    with pytest.raises(ValueError, match="lie in"):
        OASIS().fit_triplets(X, [[0, 1, 10_000]])


def test_oasis_generalises_to_unseen_images():
    # The benchmark protocol in miniature: train on half of every class, rank the
    # other (unseen) half against itself.
    from engine.learn.supervision import train_test_split_by_class

    X, y = _sparse_topics(n_per=60, seed=5)
    train, test = train_test_split_by_class(y, 0.5, random_state=0)
    Xte = X[test].toarray()
    Xte /= np.linalg.norm(Xte, axis=1, keepdims=True)
    base = precision_at_k(Xte @ Xte.T, y[test], 10)
    model = OASIS(n_steps=6_000, eval_every=2_000, random_state=0).fit(X[train], y[train])
    learned = precision_at_k(model.similarity(X[test]), y[test], 10)
    assert learned > 1.2 * base, (learned, base)
    # early stopping kept the W with the best held-out score it reported
    assert model.best_score_ == max(s for _, s in model.history_)


def _hinge(W, p, pp, pn, margin):
    return max(0.0, margin - float(p @ W @ (pp - pn)))


@pytest.mark.parametrize("variant", ["plain", "symmetric"])
@pytest.mark.parametrize("margin", [1.0, 0.1])
def test_oasis_single_passive_aggressive_step_is_exact(variant, margin):
    # One triplet whose positive and negative share a word: with C large the update of
    # Eqs. 3-5 makes the hinge loss exactly zero, S_W(p, p+) - S_W(p, p-) = margin.
    X = sp.csr_matrix(
        np.array(
            [[1.0, 2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0, 3.0], [0.5, 0.0, 1.0, 2.0, 0.0]],
            np.float32,
        )
    )
    model = OASIS(C=100.0, margin=margin, n_steps=1, eval_every=1, variant=variant)
    model.fit_triplets(X, [[0, 2, 1]])  # image 2 is less similar to 0 than 1 is
    P = model.transform(X).toarray()
    assert _hinge(np.eye(5), P[0], P[2], P[1], margin) > 0.1  # the step was needed
    assert _hinge(model.W_, P[0], P[2], P[1], margin) == pytest.approx(0.0, abs=1e-5)
    S = model.similarity(X)
    assert S[0, 2] - S[0, 1] == pytest.approx(margin, abs=1e-5)
    if variant == "symmetric":
        np.testing.assert_allclose(model.W_, model.W_.T, atol=1e-6)
    # a small C caps the step size: tau = C, ‖ΔW‖_F = C‖p‖‖p+ − p−‖
    small = OASIS(C=1e-3, n_steps=1, eval_every=1, variant="plain").fit_triplets(X, [[0, 1, 2]])
    expected = 1e-3 * np.linalg.norm(P[0]) * np.linalg.norm(P[1] - P[2])
    assert np.linalg.norm(small.W_ - np.eye(5)) == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("solver", ["primal", "kernel"])
@pytest.mark.parametrize("variant", ["plain", "symmetric"])
def test_oasis_sparse_steps_match_dense_reference(variant, solver):
    # The row-wise sparse implementation must give exactly the W of the textbook dense
    # passive-aggressive loop (Eqs. 3-5), step by step, on a sequence of triplets.
    rng = np.random.default_rng(3)
    dense = rng.random((12, 30)) * (rng.random((12, 30)) < 0.3)
    dense[5] = 0.0  # an empty image: no update
    X = sp.csr_matrix(dense.astype(np.float32))
    trip = rng.integers(0, 12, (60, 3))
    C, margin = 0.7, 0.5
    model = OASIS(C=C, margin=margin, n_steps=60, eval_every=60, variant=variant, solver=solver)
    model.columns_ = np.arange(30)
    Ps = model.transform(X)
    # drive the training loop with this exact sequence of triplets; the rising score
    # makes it keep the final W
    rising = iter(range(10))
    sample = lambda n: (trip[:, 0], trip[:, 1], trip[:, 2])  # noqa: E731
    for _ in model._train(Ps, sample, lambda W: float(next(rising)), ""):
        pass
    assert model.best_step_ == 60
    P = Ps.toarray().astype(np.float64)
    W = np.eye(30)
    for q, a, b in trip:
        p, v = P[q], P[a] - P[b]
        loss = _hinge(W, p, P[a], P[b], margin)
        V = np.outer(p, v) if variant == "plain" else 0.5 * (np.outer(p, v) + np.outer(v, p))
        if loss > 0 and np.sum(V * V) > 1e-12:
            W += min(C, loss / np.sum(V * V)) * V
    np.testing.assert_allclose(model.W_, W, atol=1e-5)


@pytest.mark.parametrize("solver", ["primal", "kernel"])
def test_oasis_hardest_of_several_negatives_matches_dense_reference(solver):
    # n_negatives > 1: each step uses the candidate negative with the largest current
    # S_W(p, p-) (the largest hinge loss), then the plain passive-aggressive update.
    rng = np.random.default_rng(4)
    dense = rng.random((15, 25)) * (rng.random((15, 25)) < 0.4)
    X = sp.csr_matrix(dense.astype(np.float32))
    trip = rng.integers(0, 15, (80, 2))
    cands = rng.integers(0, 15, (80, 4))
    C, margin = 0.5, 0.3
    model = OASIS(C=C, margin=margin, n_steps=80, eval_every=80, n_negatives=4, solver=solver)
    model.columns_ = np.arange(25)
    Ps = model.transform(X)
    rising = iter(range(10))
    sample = lambda n: (trip[:, 0], trip[:, 1], cands)  # noqa: E731
    for _ in model._train(Ps, sample, lambda W: float(next(rising)), ""):
        pass
    P = Ps.toarray().astype(np.float64)
    W = np.eye(25)
    chosen_not_first = 0
    for (q, a), cand in zip(trip, cands, strict=True):
        p = P[q]
        b = cand[np.argmax(P[cand] @ W.T @ p)]
        chosen_not_first += b != cand[0]
        v = P[a] - P[b]
        loss = _hinge(W, p, P[a], P[b], margin)
        V = np.outer(p, v)
        if loss > 0 and np.sum(V * V) > 1e-12:
            W += min(C, loss / np.sum(V * V)) * V
    assert chosen_not_first > 20  # the choice mattered
    np.testing.assert_allclose(model.W_, W, atol=1e-5)


def test_oasis_hard_negatives_fit_from_labels():
    X, y = _sparse_topics(n_per=20, seed=2)
    model = OASIS(n_steps=2_000, eval_every=1_000, n_negatives=3, random_state=0).fit(X, y)
    assert model.n_updates_ > 0 and model.best_score_ >= model.history_[0][1]
    with pytest.raises(ValueError, match="n_negatives"):
        OASIS(n_negatives=0)


def test_mean_average_precision_matches_sklearn():
    from sklearn.metrics import average_precision_score

    from engine.learn import mean_average_precision  # the old argument order

    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 30)
    S = rng.random((30, 30))
    aps = []
    for q in range(30):
        m = np.arange(30) != q
        if np.any(y[m] == y[q]):
            aps.append(average_precision_score(y[m] == y[q], S[q, m]))
    assert mean_average_precision(S, y, exclude_self=True) == pytest.approx(np.mean(aps))
    with pytest.raises(ValueError, match="shape"):
        mean_average_precision(S[:5], y)


def test_oasis_margin_and_averaging_keep_identity_start():
    X, y = _sparse_topics(seed=6)
    model = OASIS(n_steps=6_000, eval_every=1_000, margin=0.1, average=True).fit(X, y)
    assert model.history_[0][0] == 0 and model.best_score_ >= model.history_[0][1]
    with pytest.raises(ValueError, match="margin"):
        OASIS(margin=0.0)
    with pytest.raises(ValueError, match="sampling"):
        OASIS(sampling="bogus")


def test_ssc_subsamples_thresholds_across_dimensions():
    # When more thresholds pass the gap than max_bits, keep a random sample of them
    # (thesis 3.2.2), not only the top gaps, which all sit on one dimension.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 6, 600)
    X = rng.standard_normal((600, 8)) * 0.3 + y[:, None] * np.linspace(1.0, 0.5, 8)
    i, j, lab = pairs_from_labels(y, 4000, random_state=0)
    full = SSC(gap=0.05, max_bits=100_000).fit(X, i, j, lab).embedding_
    few = SSC(gap=0.05, max_bits=64).fit(X, i, j, lab).embedding_
    assert full.n_bits > 64 and few.n_bits == 64
    dims = np.argmax(few.projections, axis=1)
    assert np.unique(dims).size == 8
    # every kept bit is one of the passing thresholds
    full_dims = np.argmax(full.projections, 1).tolist()
    pairs = set(zip(full_dims, full.thresholds.tolist(), strict=True))
    assert set(zip(dims.tolist(), few.thresholds.tolist(), strict=True)) <= pairs


def test_oasis_validation_split_is_held_out_and_stratified():
    from engine.learn.supervision import class_members, validation_split

    y = np.repeat(np.arange(4), [20, 10, 3, 1])
    train, val = validation_split(class_members(y), 0.2, np.random.default_rng(0))
    assert np.intersect1d(train, val).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), np.arange(y.size))
    # classes big enough give >= 2 held-out images (each has a held-out match) and
    # keep >= 2 for training; tiny classes stay in training
    np.testing.assert_array_equal(np.bincount(y[val], minlength=4), [4, 2, 0, 0])


@pytest.mark.parametrize("variant", ["plain", "symmetric"])
def test_oasis_kernel_and_primal_solvers_agree_end_to_end(variant):
    # Whole fits (labels with unlabeled rows, early stopping, iterate averaging, and
    # feedback triplets): the kernel form W = I + Pᵀ A P reproduces the primal iterates.
    X, y = _sparse_topics(n_per=20, seed=7)
    y = y.copy()
    y[::9] = -1  # unlabeled images take no part
    kw = dict(n_steps=3_000, eval_every=500, average=True, variant=variant, random_state=1)
    a = OASIS(solver="primal", **kw).fit(X, y)
    b = OASIS(solver="kernel", **kw).fit(X, y)
    assert a.n_updates_ == b.n_updates_ > 0
    assert a.best_step_ == b.best_step_
    np.testing.assert_allclose([s for _, s in a.history_], [s for _, s in b.history_], atol=1e-6)
    np.testing.assert_allclose(a.W_, b.W_, atol=2e-4)
    assert np.abs(a.W_ - np.eye(a.W_.shape[0])).max() > 0.01  # W moved away from I
    rng = np.random.default_rng(0)
    trip = rng.integers(0, X.shape[0], (200, 3))
    a = OASIS(solver="primal", **kw).fit_triplets(X, trip)
    b = OASIS(solver="kernel", **kw).fit_triplets(X, trip)
    np.testing.assert_allclose(a.W_, b.W_, atol=2e-4)
    with pytest.raises(ValueError, match="PSD"):
        OASIS(solver="kernel", variant="psd").fit(X, y)
    with pytest.raises(ValueError, match="solver"):
        OASIS(solver="bogus")


def test_oasis_kernel_model_is_stored_as_its_factors(monkeypatch):
    import engine.learn.oasis as learn

    X, y = _sparse_topics(n_per=10, seed=8)
    model = OASIS(n_steps=2_000, eval_every=500, solver="kernel", max_words=300).fit(X, y)
    state = model.to_state()
    assert "W" not in state and state["P_data"].size > 0
    size = sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray))
    assert size < model.W_.nbytes / 3
    again = OASIS.from_state(state)
    np.testing.assert_array_equal(again.W_, model.W_)
    np.testing.assert_array_equal(again.similarity(X[:7], X), model.similarity(X[:7], X))
    # many training images (or a primal model): the dense W is stored
    monkeypatch.setattr(learn, "FACTORED_MAX_IMAGES", 10)
    assert "W" in model.to_state()
    primal = OASIS(n_steps=500, eval_every=500, solver="primal").fit(X, y)
    assert "W" in primal.to_state() and "P_data" not in primal.to_state()


def test_old_module_path_still_gives_every_name():
    # engine.learn.models was the one module of engine.learn; its names stay importable
    import engine.learn
    import engine.learn.models as old
    from engine.learn import oasis, ssc, supervision

    for name in old.__all__:
        assert getattr(old, name) is not None
    assert old.OASIS is engine.learn.OASIS is oasis.OASIS
    assert old.BoostPro is ssc.BoostPro and old.pairs_from_labels is supervision.pairs_from_labels
    assert set(engine.learn.__all__) >= {
        "OASIS",
        "SSC",
        "BoostPro",
        "BoostedSSC",
        "HammingEmbedding",
        "LearnProgress",
        "mean_average_precision",
        "pairs_from_labels",
        "precision_at_k",
        "reduce_dimension",
        "threshold_rates",
        "threshold_rates_semi",
    }
