"""Uniform bins with idf weights (Nistér & Stewénius 2006) and the L1-normalised
intersection (``normalize="l1"``): direct computations from the bins of every point,
nesting, persistence, Mercer, the ``"auto"`` rules."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kernels import codes as codes_module
from engine.kernels.binning import UniformBinning, path_weights
from engine.kernels.pyramid import IDF_MIN_SETS, PyramidMatch

FAST = settings(max_examples=20, deadline=None)


def clustered_sets(seed: int, n: int = 14, dim: int = 5, empty: bool = True) -> list[np.ndarray]:
    """Sets drawn around shared centres (so bins are shared by several sets), with
    repeated points (counts > 1) and, optionally, one empty set."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(8, dim)) * 3
    sets = []
    for _ in range(n):
        m = int(rng.integers(3, 30))
        x = centres[rng.integers(0, 8, m)] + rng.normal(scale=0.4, size=(m, dim))
        x[: m // 4] = x[m // 4 : 2 * (m // 4)]
        sets.append(x.astype(np.float32))
    if empty:
        sets.append(np.zeros((0, dim), np.float32))
    return sets


def histograms(pm: PyramidMatch, sets: list[np.ndarray]) -> list[dict]:
    """Per set: {(pyramid, level, bin): count} over the levels used."""
    out = []
    for s in sets:
        h: dict = {}
        for t, b in enumerate(pm.binnings_):
            if not len(s):
                continue
            bins = b.assign(pm.project(s))[0]
            for lev in range(pm.levels_of(b)):
                for x in bins[:, lev]:
                    h[(t, lev, int(x))] = h.get((t, lev, int(x)), 0) + 1
        out.append(h)
    return out


def direct_idf(pm: PyramidMatch, fit_sets: list[np.ndarray]) -> dict:
    """idf of every (pyramid, level, bin) the fit sets hold, counted directly."""
    hist = histograms(pm, fit_sets)
    n = sum(len(s) > 0 for s in fit_sets)
    df: dict = {}
    for h in hist:
        for k in h:
            df[k] = df.get(k, 0) + 1
    return {k: np.log(n / d) for k, d in df.items()}, n


def bin_idf(idf: dict, n: int, key: tuple) -> float:
    return idf.get(key, np.log(n))  # bins of no fit set: df 0 -> ln N (as df 1)


def test_idf_path_weights_are_nested_cumulative_idf():
    sets = clustered_sets(0)
    pm = PyramidMatch(weights="idf", n_sides=1, n_shifts=2).fit(sets)
    idf, n = direct_idf(pm, sets)
    assert n == len(sets) - 1
    unseen = np.random.default_rng(9).normal(size=(40, 5)).astype(np.float32) * 4
    for t, b in enumerate(pm.binnings_):
        assert b.weights == "idf" and b.n_documents_ == n
        for X in (np.concatenate(sets), unseen):  # fit points and new ones
            bins = b.assign(pm.project(X))[0]
            W = b.path_weights(bins)
            L = b.n_levels
            assert W.shape == (X.shape[0], L) and np.all(W[:, -1] == 0)  # top: idf 0
            assert np.all(np.diff(W, axis=1) <= 1e-12)  # non-increasing to the parent
            for i in range(0, X.shape[0], 7):
                cum = [bin_idf(idf, n, (t, lev, int(bins[i, lev]))) for lev in range(L)]
                expect = np.cumsum(cum[::-1])[::-1]
                np.testing.assert_allclose(W[i], expect, atol=1e-12)
            np.testing.assert_allclose(path_weights(b, bins, 3), W[:, :3])
        # a bin of >= 2 fit sets has a weight of its own; a bin of one set does not
        bins = b.assign(pm.project(np.concatenate(sets)))[0]
        W = b.path_weights(bins)
        shared = np.array([idf[(t, 1, int(x))] < np.log(n) for x in bins[:, 1]])
        np.testing.assert_allclose(b.bin_weights(1, bins[shared, 1]), W[shared, 1])
        with pytest.raises(ValueError, match="path_weights"):
            b.bin_weights(0, b.assign(pm.project(unseen))[0][:, 0])


def test_idf_kernel_is_the_idf_weighted_intersection():
    sets = clustered_sets(1)
    pm = PyramidMatch(weights="idf", normalize="none", n_sides=2, n_shifts=1).fit(sets)
    idf, n = direct_idf(pm, sets)
    hist = histograms(pm, sets)
    P = np.array(
        [[sum(bin_idf(idf, n, k) * min(c, hj[k]) for k, c in hi.items() if k in hj)
          for hj in hist] for hi in hist]
    ) / pm.n_pyramids  # fmt: skip
    np.testing.assert_allclose(pm.kernel(sets), P, atol=1e-9)
    # the explicit map reproduces it too
    emb = pm.embed(sets)
    assert emb.dot(2, 5) == pytest.approx(P[2, 5], rel=1e-5)


def l1_direct(pm: PyramidMatch, sets: list[np.ndarray], others: list[np.ndarray]) -> np.ndarray:
    """Dense brute force: each set's (w_bin - w_parent)-weighted histogram over all
    pyramids and levels scaled to unit L1 mass, then sum_b min."""
    keys = sorted({k for h in histograms(pm, sets + others) for k in h})
    col = {k: i for i, k in enumerate(keys)}

    def dense(group):
        H = np.zeros((len(group), len(keys)))
        for i, s in enumerate(group):
            for t, b in enumerate(pm.binnings_):
                if not len(s):
                    continue
                L = pm.levels_of(b)
                full = b.assign(pm.project(s))[0]
                W = np.c_[path_weights(b, full, L), np.zeros(len(s))]
                for p in range(len(s)):
                    for lev in range(L):
                        H[i, col[(t, lev, int(full[p, lev]))]] += W[p, lev] - W[p, lev + 1]
        mass = H.sum(axis=1, keepdims=True)
        return np.where(mass > 0, H / np.where(mass > 0, mass, 1), 0.0)

    A, B = dense(sets), dense(others)
    return np.minimum(A[:, None, :], B[None, :, :]).sum(axis=2)


@pytest.mark.parametrize("weights", ["idf", "global"])
def test_l1_normalisation_equals_a_dense_computation(weights, monkeypatch):
    sets = clustered_sets(2)
    pm = PyramidMatch(weights=weights, normalize="l1", n_sides=2, n_shifts=2).fit(sets)
    K = pm.kernel(sets)
    D = l1_direct(pm, sets, sets)
    np.fill_diagonal(D, [float(len(s) > 0) for s in sets])
    np.testing.assert_allclose(K, D, atol=1e-12)
    assert np.all(K[-1] == 0) and K[0, 0] == 1.0  # the empty set; self-similarity 1
    # two batches encoded apart (their bins unified by key), in small pair chunks
    monkeypatch.setattr(codes_module, "_PAIR_CHUNK", 5)
    a, b = sets[:9], sets[6:]
    Kab = pm.kernel(pm.encode(a), pm.encode(b))
    np.testing.assert_allclose(Kab, l1_direct(pm, a, b), atol=1e-12)
    np.testing.assert_allclose(pm.kernel(a[:2], b[:3]), K[:2, 6:9], atol=1e-12)
    assert pm.similarity(sets[0], sets[1]) == pytest.approx(K[0, 1])


@FAST
@given(seed=st.integers(0, 10_000), weights=st.sampled_from(["idf", "global"]))
def test_l1_kernel_is_psd(seed, weights):
    sets = clustered_sets(seed, n=12, dim=3)
    pm = PyramidMatch(weights=weights, normalize="l1").fit(sets)
    K = pm.kernel(sets)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-9
    assert np.all(K <= 1 + 1e-12) and np.all(K >= 0)


def test_state_round_trip_keeps_the_kernel():
    sets = clustered_sets(3)
    for kw in ({"weights": "idf"}, {"weights": "idf", "normalize": "l1"}, {}):
        pm = PyramidMatch(**kw).fit(sets)
        state = pm.to_state()
        buf = io.BytesIO()
        np.savez(buf, **state)  # plain arrays: no pickle needed
        buf.seek(0)
        with np.load(buf, allow_pickle=False) as z:
            back = PyramidMatch.from_state(dict(z))
        assert back.weights == pm.weights and back.normalize == pm.normalize
        np.testing.assert_array_equal(back.kernel(sets), pm.kernel(sets))
    # states from before idf weights existed load as global uniform bins
    pmg = PyramidMatch(weights="global", normalize="self").fit(sets)
    new_keys = (".weights", ".n_documents", ".idf_sizes", ".idf_bins", ".idf_cum")
    old = {k: v for k, v in pmg.to_state().items() if not k.endswith(new_keys)}
    np.testing.assert_array_equal(PyramidMatch.from_state(old).kernel(sets), pmg.kernel(sets))
    b = UniformBinning.from_state({k[len("binning0.") :]: v for k, v in old.items()
                                   if k.startswith("binning0.")})  # fmt: skip
    assert b.weights == "global" and b.n_documents_ is None


def test_auto_rules_and_errors():
    sets = clustered_sets(4, n=IDF_MIN_SETS, dim=20, empty=False)
    # a handful of sets: exactly the thesis-style settings (global weights, Eq. 3.12,
    # 2 sides x 2 shifts, 8-D PCA)
    few = PyramidMatch().fit(sets[: IDF_MIN_SETS - 1])
    assert (few.weights, few.normalize, few.n_sides, few.n_shifts) == ("global", "self", 2, 2)
    assert few.projection_.components.shape == (8, 20)
    assert [b.weights for b in few.binnings_] == ["global"] * 4
    pinned = dict(weights="global", normalize="self", n_sides=2, n_shifts=2, pca_dim=8)
    np.testing.assert_array_equal(
        few.kernel(sets), PyramidMatch(**pinned).fit(sets[: IDF_MIN_SETS - 1]).kernel(sets)
    )
    # a collection: idf weights, L1 scores, 3 sides x 2 shifts, 12-D PCA
    many = PyramidMatch().fit(sets)
    assert (many.weights, many.normalize, many.n_sides, many.n_pyramids) == ("idf", "l1", 3, 6)
    assert many.projection_.components.shape == (12, 20)
    assert all(b.n_documents_ == IDF_MIN_SETS for b in many.binnings_)
    # an empty set is no document
    assert PyramidMatch().fit([*sets[:-1], sets[0][:0]]).weights == "global"
    # fitted again on a handful of sets: back to the thesis' settings
    many.fit(sets[:2])
    assert (many.weights, many.normalize, many.n_sides) == ("global", "self", 2)
    # vocabulary bins keep Eq. 3.12 with idf; a Binning instance has one pyramid
    assert PyramidMatch("vocabulary").normalize == "self"
    with pytest.raises(ValueError, match="n_sides"):
        PyramidMatch(n_sides="many")
    # explicit choices are kept
    pm = PyramidMatch(weights="global", normalize="self").fit(sets)
    assert pm.weights == "global" and pm.normalize == "self"
    with pytest.raises(ValueError, match="at least 2 non-empty"):
        PyramidMatch(weights="idf").fit(sets[:1])
    with pytest.raises(ValueError, match="input_specific"):
        PyramidMatch(weights="input_specific", normalize="l1")
    with pytest.raises(ValueError, match="weights"):
        UniformBinning(weights="input_specific")
    b = UniformBinning(weights="idf").fit(np.concatenate(sets))
    with pytest.raises(RuntimeError, match="document frequencies"):
        b.path_weights(b.assign(sets[0])[0])
    with pytest.raises(ValueError, match="shape"):
        b.fit_document_frequencies(sets).path_weights(np.zeros((3, 1), np.int64))
    # a Binning instance built for idf weights gets them from "auto"
    inst = PyramidMatch(UniformBinning(weights="idf"), n_shifts=1, n_sides=1).fit(sets)
    assert inst.weights == "idf"
