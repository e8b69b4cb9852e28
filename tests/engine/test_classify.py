"""Tests of engine.classify: the SVM on a precomputed kernel and its parameter search."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cluster.classify import CategoryClassifier, select_parameters


def _blobs(n_per=12, k=4, dim=6, spread=0.6, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim)) * 2
    y = np.repeat(np.arange(k), n_per)
    X = centres[y] + spread * rng.normal(size=(y.size, dim))
    return X, y


def _rbf(A, B, gamma=0.2):
    d = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-gamma * d)


def test_classifier_predicts_held_out_points():
    X, y = _blobs(seed=1)
    Xt, yt = _blobs(n_per=5, seed=1)  # same centres (same seed), new noise draws differ
    rng = np.random.default_rng(5)
    Xt = Xt + 0.3 * rng.normal(size=Xt.shape)
    clf = CategoryClassifier(C=10).fit(_rbf(X, X), y)
    pred = clf.predict(_rbf(Xt, X))
    assert np.mean(pred.labels == yt) > 0.9
    assert pred.scores.shape == (len(yt), 4)
    assert np.all((pred.confidence > 0) & (pred.confidence <= 1))


def test_select_parameters_grid_and_determinism():
    X, y = _blobs(n_per=10, k=3, spread=1.2, seed=2)
    K = _rbf(X, X)
    sel = select_parameters(K, y, Cs=[1e-4, 1.0, 10.0], powers=[None, 0.5], n_folds=5)
    assert set(sel.scores) == {(c, p) for c in (1e-4, 1.0, 10.0) for p in (None, 0.5)}
    assert all(0.0 <= v <= 1.0 for v in sel.scores.values())
    assert sel.C in (1e-4, 1.0, 10.0) and sel.power in (None, 0.5)
    assert sel.scores[(sel.C, sel.power)] == max(sel.scores.values())
    # deterministic for a seed
    again = select_parameters(K, y, Cs=[1e-4, 1.0, 10.0], powers=[None, 0.5], n_folds=5)
    assert again == sel


def test_select_parameters_scores_match_manual_cross_validation():
    X, y = _blobs(n_per=6, k=3, spread=1.5, seed=4)
    K = _rbf(X, X)
    sel = select_parameters(K, y, Cs=[3.0], n_folds=3, random_state=7)
    # recompute with the same stratified folds
    rng = np.random.default_rng(7)
    fold = np.empty(y.size, np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        fold[idx] = (np.arange(idx.size) + rng.integers(3)) % 3
    accs = []
    for f in range(3):
        tr, va = fold != f, fold == f
        pred = CategoryClassifier(3.0).fit(K[np.ix_(tr, tr)], y[tr]).predict(K[np.ix_(va, tr)])
        accs.append(np.mean([np.mean(pred.labels[y[va] == c] == c) for c in np.unique(y[va])]))
    assert sel.scores[(3.0, None)] == pytest.approx(np.mean(accs))


def test_select_parameters_errors():
    K = np.eye(4)
    with pytest.raises(ValueError, match="n_folds"):
        select_parameters(K, np.array([0, 0, 1, 1]), n_folds=1)
    with pytest.raises(ValueError, match="kernel"):
        select_parameters(np.ones((3, 4)), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="Cs"):
        select_parameters(K, np.array([0, 0, 1, 1]), Cs=[])
