"""The grouping's Fisher view (engine.cluster.fisher) and the consensus of cuts (#22)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cluster.fisher import FisherEncoder, fisher_kernel, fisher_vectors
from engine.cluster.partition import consensus_cut, discover_categories


def _descriptors(rng: np.random.Generator, n: int = 3000) -> np.ndarray:
    """Clustered non-negative unit 128-D vectors (RootSIFT-like)."""
    centres = rng.random((6, 128)) ** 4
    X = centres[rng.integers(0, 6, n)] + 0.05 * rng.random((n, 128))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def encoder():
    rng = np.random.default_rng(0)
    return FisherEncoder.fit(_descriptors(rng), components=4, dim=8, fit=2000)


def test_posteriors_are_the_mixtures_responsibilities(encoder):
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(1)
    Y = (_descriptors(rng, 50) - encoder.mean) @ encoder.basis.T
    P = encoder.posteriors(Y)
    dens = np.stack(
        [
            w * multivariate_normal(m, np.diag(v)).pdf(Y)
            for w, m, v in zip(encoder.weights, encoder.means, encoder.variances, strict=True)
        ],
        axis=1,
    )
    np.testing.assert_allclose(P, dens / dens.sum(1, keepdims=True), atol=1e-8)


def test_encode_is_the_improved_fisher_vector_of_eq_gradients(encoder):
    rng = np.random.default_rng(2)
    D = _descriptors(rng, 40)
    Y = (D.astype(np.float64) - encoder.mean) @ encoder.basis.T
    G = encoder.posteriors(Y)
    mu, sd, w = encoder.means, np.sqrt(encoder.variances), encoder.weights
    g_mu, g_sd = [], []
    for k in range(len(w)):  # the module docstring's two gradients, one Gaussian at a time
        z = (Y - mu[k]) / sd[k]
        g_mu.append((G[:, k, None] * z).sum(0) / (len(D) * np.sqrt(w[k])))
        g_sd.append((G[:, k, None] * (z**2 - 1)).sum(0) / (len(D) * np.sqrt(2 * w[k])))
    v = np.concatenate([np.ravel(g_mu), np.ravel(g_sd)])
    v = np.sign(v) * np.sqrt(np.abs(v))
    v /= np.linalg.norm(v)
    f = encoder.encode(D)
    assert f.dtype == np.float32 and f.shape == (encoder.length,) == (2 * 4 * 8,)
    np.testing.assert_allclose(f, v, atol=1e-6)
    assert not encoder.encode(np.zeros((0, 128), np.float32)).any()


def test_fisher_kernel_has_a_unit_diagonal_and_ranks_like_sets(encoder):
    rng = np.random.default_rng(3)
    base = _descriptors(rng, 400)
    sets = [base[:200], base[:200] + 0.001, base[200:], np.zeros((0, 128), np.float32)]
    F = fisher_vectors(encoder, sets)
    K = fisher_kernel(F)
    np.testing.assert_allclose(np.diag(K), 1.0)
    np.testing.assert_allclose(K, K.T)
    assert K[0, 1] > K[0, 2] > 0
    with pytest.raises(ValueError, match="need at least"):
        FisherEncoder.fit(base[:5], components=8, dim=8)


def _block(truth: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    A = np.where(truth[:, None] == truth[None, :], 0.6, 0.1)
    A = A + noise * rng.random(A.shape)
    A = (A + A.T) / 2
    np.fill_diagonal(A, 0.0)
    return A


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(((a[:, None] == a[None, :]) == (b[:, None] == b[None, :])).all())


def test_consensus_keeps_the_groups_the_views_agree_on():
    rng = np.random.default_rng(4)
    truth = np.repeat([0, 1, 2], 15)
    views = [_block(truth, rng, 0.05), _block(truth, rng, 0.05)]
    assert _same_partition(consensus_cut(views, 3), truth)
    assert _same_partition(consensus_cut(views[:1], 3, runs=2), truth)


def test_a_view_that_disagrees_is_outvoted_where_the_others_agree():
    rng = np.random.default_rng(5)
    truth = np.repeat([0, 1], 20)
    cue = np.tile([0, 1], 20)  # another cue that cuts across the two groups
    views = [_block(truth, rng, 0.05), _block(truth, rng, 0.05), _block(cue, rng, 0.05)]
    labels = consensus_cut(views, 2, runs=2)
    assert _same_partition(labels, truth)


def test_discover_categories_with_views_keeps_constraints_and_reports_them():
    rng = np.random.default_rng(6)
    truth = np.repeat([0, 1, 2], 12)
    K = _block(truth, rng, 0.05)
    np.fill_diagonal(K, 1.0)
    V = _block(truth, rng, 0.05)
    np.fill_diagonal(V, 1.0)
    res = discover_categories(K, k=3, views=[V], must=[(0, 12)])
    assert "consensus of 3 cuts of each of 2 views" in res.k_reason
    assert res.labels[0] == res.labels[12]
    plain = discover_categories(K, k=3)
    assert "consensus" not in plain.k_reason
    with pytest.raises(ValueError, match="shape"):
        discover_categories(K, k=3, views=[V[:5, :5]])
    with pytest.raises(ValueError, match="landmarks"):
        discover_categories(K[:, :10], k=3, views=[V], landmarks=np.arange(10))


def test_the_pipeline_cuts_both_views_in_exact_mode_only(tmp_path, monkeypatch):
    import cv2

    import engine.cluster.channel
    import engine.cluster.model
    from engine.cluster import categorize
    from engine.collection import Collection

    monkeypatch.setitem(engine.cluster.channel.CATEGORY_FEATURES, "side", 120)
    monkeypatch.setitem(engine.cluster.channel.CATEGORY_FEATURES, "max_features", 100)
    monkeypatch.setitem(engine.cluster.model.CATEGORY_VOCAB, "branching", 4)
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(7)
    for i in range(6):
        img = np.full((140, 140), 128, np.uint8)
        for _ in range(20):
            c = tuple(int(v) for v in rng.integers(0, 140, 2))
            cv2.circle(img, c, int(rng.integers(4, 18)), int(rng.integers(0, 255)), -1)
        cv2.imwrite(str(folder / f"p{i}.png"), img)
    with Collection.open(folder, tmp_path / "index") as col:
        for _ in col.update(jobs=1):
            pass
        res = categorize(col, k=2, jobs=1, refine=False, fisher=True)
        assert "consensus" in res.k_reason and res.seconds["fisher"] > 0
        # by default the cut's groups are kept, and the SVM is trained to place new photos
        cut = res.clustering.labels
        assert ((res.labels[:, None] == res.labels) == (cut[:, None] == cut)).all()
        assert "reassigned" not in res.k_reason
        clf = res.classifier
        assert clf is not None
        train = clf.train_ids_
        assert (clf.predict(res.kernel[np.ix_(train, train)]).labels == res.labels[train]).all()
        off = categorize(col, k=2, jobs=1, refine=False)  # (off by default)
        assert "consensus" not in off.k_reason
        ny = categorize(col, k=2, jobs=1, refine=False, fisher=True, nystrom=3)
        assert "consensus" not in ny.k_reason


def test_views_that_agree_exactly_keep_their_groups():
    """Every cut agreeing gives a co-association of two blocks that share nothing: its
    leading eigenvalues cluster at 1, where LAPACK's subset driver returned one vector of
    the three asked for and the consensus put every photo in one group."""
    from engine.cluster.ncut import ncut_embedding

    truth = np.repeat([0, 1], 9)
    A = (truth[:, None] == truth[None, :]).astype(float) + 1e-6
    np.fill_diagonal(A, 0.0)
    values, vectors = ncut_embedding(A, 3)
    assert values.shape == (3,) and vectors.shape == (18, 3)
    rng = np.random.default_rng(8)
    views = [_block(truth, rng, 0.0), _block(truth, rng, 0.0)]
    assert _same_partition(consensus_cut(views, 2), truth)
