"""Pyramid match (thesis ch. 3-4): bulk kernel vs a direct implementation of Eq. 3.10,
Mercer / normalisation / partial-match properties, cost bound (Lemma 1), persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kernels.binning import Binning, UniformBinning
from engine.kernels.embedding import SparseEmbedding
from engine.kernels.optimal import optimal_partial_match
from engine.kernels.pyramid import IDF_MIN_SETS, PyramidMatch

FAST = settings(max_examples=25, deadline=None)


def random_sets(rng, n, dim=4, lo=0, hi=40, dup=True):
    sets = []
    for _ in range(n):
        m = int(rng.integers(lo, hi))
        x = rng.normal(size=(m, dim)).astype(np.float32)
        if dup and m > 3:  # repeated points -> bin counts > 1 at the finest level
            x[: m // 4] = x[m // 4 : 2 * (m // 4)]
        sets.append(x)
    return sets


def naive_pm(pm: PyramidMatch, x: np.ndarray, y: np.ndarray, mode: str = "sim") -> float:
    """Eq. 3.10 literally, per pyramid: sum_i w_i (I_i - I_{i-1}); averaged (sim) or the
    minimum (cost) over pyramids. Weights from the binning, constant per level."""
    vals = []
    for b in pm.binnings_:
        L = pm.levels_of(b)
        px, py = pm.project(x), pm.project(y)
        bx, by = b.assign(px)[0], b.assign(py)[0]
        total, prev = 0.0, 0
        for lev in range(L):
            ux, cx = np.unique(bx[:, lev], return_counts=True)
            uy, cy = np.unique(by[:, lev], return_counts=True)
            _, ix, iy = np.intersect1d(ux, uy, return_indices=True)
            inter = int(np.minimum(cx[ix], cy[iy]).sum())
            one = np.zeros(1, np.int64)
            w = b.bin_weights(lev, one)[0] if mode == "sim" else b.bin_costs(lev, one)[0]
            total += w * (inter - prev)
            prev = inter
        vals.append(total)
    return float(np.mean(vals) if mode == "sim" else np.min(vals))


@pytest.fixture(scope="module")
def sets():
    return random_sets(np.random.default_rng(1), 12)


def test_binning_protocol():
    b = UniformBinning(random_state=3).fit(np.random.default_rng(0).normal(size=(100, 3)))
    assert isinstance(b, Binning)
    bins, dist = b.assign(np.zeros((5, 3), np.float32))
    assert bins.shape == (5, b.n_levels) and bins.dtype == np.int64 and dist is None
    assert np.all(bins[:, -1] == bins[0, -1])  # single top bin


def test_uniform_bins_are_nested():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 3)).astype(np.float32)
    b = UniformBinning(finest_side=0.1, random_state=1).fit(X)
    bins, _ = b.assign(X)
    for lev in range(b.n_levels - 1):
        # every bin at lev maps to exactly one parent at lev + 1
        pairs = np.unique(np.stack([bins[:, lev], bins[:, lev + 1]], 1), axis=0)
        assert np.unique(pairs[:, 0]).size == pairs.shape[0]
    # points in one finest cell are within one cell side per dimension
    same = bins[:, 0] == bins[0, 0]
    assert np.all(np.ptp(X[same], axis=0) <= 0.1 + 1e-6)


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(n_shifts=2, n_sides=2), dict(max_level=2), dict(finest_scale=2.0)],
)
def test_bulk_kernel_equals_eq_3_10(sets, kw):
    pm = PyramidMatch(weights="global", normalize="none", **kw).fit(sets)
    K = pm.kernel(sets)
    for i, j in [(1, 2), (3, 3), (4, 7), (10, 5), (0, 11)]:
        assert K[i, j] == pytest.approx(naive_pm(pm, sets[i], sets[j]), rel=1e-9, abs=1e-12)


def test_cost_equals_eq_3_10_with_cost_weights(sets):
    pm = PyramidMatch(n_shifts=3).fit(sets)
    C = pm.cost_matrix(sets[:5], sets[5:9])
    for i in range(5):
        for j in range(4):
            assert C[i, j] == pytest.approx(naive_pm(pm, sets[i], sets[5 + j], "cost"), rel=1e-9)


def test_cross_batch_equals_joint(sets):
    pm = PyramidMatch(n_shifts=2).fit(sets)
    K = pm.kernel(sets)
    np.testing.assert_allclose(pm.kernel(sets[:5], sets[5:]), K[:5, 5:], atol=1e-12)
    codes = pm.encode(sets[5:])
    np.testing.assert_allclose(pm.kernel(sets[:5], codes), K[:5, 5:], atol=1e-12)


def test_many_sets_dense_bins_path():
    # 60 sets sharing their coarse bins: exercises the dense min path for heavy bins
    rng = np.random.default_rng(5)
    sets = [rng.normal(size=(30, 3)).astype(np.float32) for _ in range(60)]
    pm = PyramidMatch(weights="global", normalize="none").fit(sets)
    K = pm.kernel(sets)
    for i, j in [(0, 1), (17, 42), (59, 59)]:
        assert K[i, j] == pytest.approx(naive_pm(pm, sets[i], sets[j]), rel=1e-9)


point_sets = st.lists(
    st.lists(st.floats(-5, 5, width=32), min_size=3, max_size=3),
    min_size=0,
    max_size=25,
).map(lambda rows: np.array(rows, np.float32).reshape(-1, 3))


@FAST
@given(st.lists(point_sets, min_size=2, max_size=6), st.integers(0, 3))
def test_kernel_symmetric_psd_self_one(sets, seed):
    if sum(len(s) for s in sets) == 0:
        sets[0] = np.zeros((1, 3), np.float32)
    pm = PyramidMatch(n_shifts=2, random_state=seed).fit(sets)
    K = pm.kernel(sets)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    assert np.linalg.eigvalsh(K).min() >= -1e-8 * max(1.0, np.abs(K).max())
    nonempty = np.array([len(s) > 0 for s in sets])
    np.testing.assert_allclose(np.diag(K)[nonempty], 1.0)
    assert np.all(K[~nonempty] == 0) and np.all(K[:, ~nonempty] == 0)
    assert np.all(K <= 1 + 1e-12) and np.all(K >= 0)


@FAST
@given(point_sets, point_sets, st.integers(0, 100))
def test_point_order_does_not_matter(a, b, seed):
    if len(a) + len(b) == 0:
        return
    pm = PyramidMatch(normalize="none").fit([a, b])
    rng = np.random.default_rng(seed)
    k1 = pm.kernel([a], [b])[0, 0]
    k2 = pm.kernel([a[rng.permutation(len(a))]], [b[rng.permutation(len(b))]])[0, 0]
    assert k1 == pytest.approx(k2, rel=1e-12, abs=1e-15)
    assert pm.cost(a, b) == pytest.approx(pm.cost(b, a), rel=1e-12, abs=1e-12)


@FAST
@given(point_sets, point_sets, st.integers(0, 5), st.sampled_from([1, 2, 3]))
def test_cost_never_below_optimal_lemma_1(a, b, seed, n_shifts):
    if len(a) == 0 or len(b) == 0:
        return
    pm = PyramidMatch(n_shifts=n_shifts, random_state=seed).fit([a, b])
    opt, _ = optimal_partial_match(a, b, metric="l1")
    assert pm.cost(a, b) >= opt - 1e-4 * max(1.0, opt)


def test_empty_sets_give_zero():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(20, 3)).astype(np.float32)
    e = np.zeros((0, 3), np.float32)
    pm = PyramidMatch().fit([a])
    assert pm.kernel([a, e]).tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert pm.similarity(e, e) == 0.0 and pm.cost(a, e) == 0.0
    assert pm.kernel([], [a]).shape == (0, 1)
    r = pm.match(a, e)
    assert r.pairs.shape == (0, 2) and r.score == 0.0


def test_clutter_tolerance_of_partial_match():
    """Eq. 3.11 ("min") ignores extra far-away features; Eq. 3.12 ("self") does not."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(80, 4)).astype(np.float32)
    y = (x + rng.normal(scale=0.05, size=x.shape)).astype(np.float32)
    clutter = rng.normal(loc=8.0, size=(160, 4)).astype(np.float32)
    y_cluttered = np.concatenate([y, clutter])
    unrelated = rng.normal(size=(80, 4)).astype(np.float32) * 1.5
    fit = [x, y_cluttered, unrelated]
    part = PyramidMatch(normalize="min", n_shifts=2).fit(fit)
    s_clean, s_clutter = part.similarity(x, y), part.similarity(x, y_cluttered)
    assert abs(s_clutter - s_clean) < 0.02 * s_clean
    assert s_clutter > 1.5 * part.similarity(x, unrelated)
    full = PyramidMatch(normalize="self", n_shifts=2).fit(fit)
    assert full.similarity(x, y_cluttered) < 0.75 * full.similarity(x, y)


def test_max_level_limits_match_distance():
    """Eq. 3.13: with fewer levels, far-apart points no longer count as matches."""
    rng = np.random.default_rng(4)
    a = rng.normal(size=(50, 3)).astype(np.float32)
    pm_full = PyramidMatch(normalize="none", finest_side=0.1).fit([a, a + 50])
    pm_part = PyramidMatch(normalize="none", finest_side=0.1, max_level=3).fit([a, a + 50])
    assert pm_full.kernel([a], [a + 50])[0, 0] > 0
    assert pm_part.kernel([a], [a + 50])[0, 0] == 0.0
    assert pm_part.n_levels == 4
    r = pm_part.match(a, a + 50)
    assert len(r) == 0


def test_embed_dot_is_kernel_and_keys_stable(sets):
    pm = PyramidMatch(normalize="none", n_shifts=2).fit(sets)
    emb = pm.embed(sets)
    assert isinstance(emb, SparseEmbedding) and len(emb) == len(sets)
    assert emb.keys.dtype == np.int64 and emb.values.dtype == np.float32
    K = pm.kernel(sets)
    for i, j in [(1, 2), (4, 4), (6, 9)]:
        assert emb.dot(i, j) == pytest.approx(K[i, j], rel=1e-5)
    np.testing.assert_allclose(emb.norms(), np.sqrt(np.diag(K)), rtol=1e-5)
    # same set embedded alone, in another call and another batch: identical row
    alone = pm.embed([sets[4]])
    np.testing.assert_array_equal(alone.row(0)[0], emb.row(4)[0])
    again = PyramidMatch.from_state(pm.to_state()).embed([sets[4]])
    np.testing.assert_array_equal(again.row(0)[0], emb.row(4)[0])


def test_state_round_trip_is_arrays_and_scalars(sets):
    pm = PyramidMatch(n_shifts=2, n_sides=2, pca_dim=3, max_level=4).fit(sets)
    state = pm.to_state()
    for k, v in state.items():
        assert isinstance(v, (np.ndarray, int, float, str, bool)), k
    # survives np.savez without pickle
    import io

    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        loaded = {k: z[k] for k in z.files}
    pm2 = PyramidMatch.from_state(loaded)
    np.testing.assert_allclose(pm2.kernel(sets), pm.kernel(sets), atol=1e-12)
    json.dumps({k: v for k, v in state.items() if not isinstance(v, np.ndarray)})


def test_pca_auto_for_high_dimensional_uniform():
    rng = np.random.default_rng(0)
    sets = [rng.random((30, 128), dtype=np.float32) for _ in range(3)]
    pm = PyramidMatch().fit(sets)
    assert pm.projection_ is not None and pm.projection_.components.shape == (8, 128)
    K = pm.kernel(sets)
    np.testing.assert_allclose(np.diag(K), 1.0)


def test_input_specific_cost_eq_4_3b(sets):
    """Cost with d_ij(X) + d_ij(Y) per new match (Eq. 4.2 with weights 4.3 b)."""
    pm = PyramidMatch(weights="input_specific", finest_side=0.5).fit(sets)
    b = pm.binnings_[0]
    L = pm.n_levels
    x, y = sets[2], sets[7]
    bx, dx = b.assign(x)
    by, dy = b.assign(y)
    total = 0.0
    prev_min: dict[int, int] = {}
    for lev in range(L):
        cur: dict[int, int] = {}
        for key in set(bx[:, lev]) & set(by[:, lev]):
            mx, my = bx[:, lev] == key, by[:, lev] == key
            cur[key] = min(mx.sum(), my.sum())
            # children of this bin at lev - 1 already matched some points
            if lev:
                kids = set(bx[mx, lev - 1]) | set(by[my, lev - 1])
                done = sum(prev_min.get(k, 0) for k in kids)
            else:
                done = 0
            total += (cur[key] - done) * (dx[mx, lev].max() + dy[my, lev].max())
        prev_min = cur
    assert pm.cost(x, y) == pytest.approx(total, rel=1e-6)
    K = pm.kernel(sets)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(K)[[len(s) > 0 for s in sets]], 1.0)
    with pytest.raises(ValueError, match="global"):
        pm.embed(sets)


def test_vocabulary_bins_plug_in():
    pytest.importorskip("engine.kernels.vocabulary")
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(6, 16)) * 3
    sets = [
        (centres[rng.integers(0, 6, 40)] + rng.normal(scale=0.3, size=(40, 16))).astype(np.float32)
        for _ in range(8)
    ]
    pm = PyramidMatch(bins="vocabulary", branching=3, depth=3).fit(sets)
    assert pm.projection_ is None
    K = pm.kernel(sets)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(K), 1.0)
    assert np.linalg.eigvalsh(K).min() > -1e-8
    r = pm.match(sets[0], sets[1])
    assert len(np.unique(r.pairs[:, 0])) == len(r) == len(np.unique(r.pairs[:, 1]))
    pm2 = PyramidMatch.from_state(pm.to_state())
    np.testing.assert_allclose(pm2.kernel(sets), K, atol=1e-12)
    # input-specific weights (Eq. 4.3 b): normalised, symmetric, cost = naive Eq. 4.2
    pmi = PyramidMatch(bins="vocabulary", weights="input_specific", branching=3, depth=3)
    Ki = pmi.fit(sets).kernel(sets)
    np.testing.assert_allclose(Ki, Ki.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(Ki), 1.0)
    assert np.all(Ki > 0) and np.all(Ki <= 1 + 1e-12)


def test_validation_errors(sets):
    with pytest.raises(ValueError, match="bins"):
        PyramidMatch(bins="grid")
    with pytest.raises(ValueError, match="normalize"):
        PyramidMatch(normalize="max")
    with pytest.raises(ValueError, match="n_shifts"):
        PyramidMatch(n_shifts=0)
    with pytest.raises(RuntimeError, match="fit"):
        PyramidMatch().kernel(sets)
    pm = PyramidMatch().fit(sets)
    with pytest.raises(ValueError, match=r"sets_a\[0\]"):
        pm.kernel([np.zeros((3, 5), np.float32)])
    with pytest.raises(ValueError, match="xy_a"):
        pm.match(sets[1], sets[2], xy_a=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="no points"):
        PyramidMatch().fit([np.zeros((0, 4), np.float32)])


def _naive_eq_4_2(pm, x, y, stat):
    """Eq. 4.2 literally: new matches per bin times ``stat(dX) + stat(dY)`` of the bin."""
    b = pm.binnings_[0]
    bx, dx = b.assign(pm.project(x))
    by, dy = b.assign(pm.project(y))
    total = 0.0
    prev_min: dict[int, int] = {}
    for lev in range(pm.n_levels):
        cur: dict[int, int] = {}
        for key in set(bx[:, lev]) & set(by[:, lev]):
            mx, my = bx[:, lev] == key, by[:, lev] == key
            cur[key] = min(mx.sum(), my.sum())
            kids = (set(bx[mx, lev - 1]) | set(by[my, lev - 1])) if lev else set()
            done = sum(prev_min.get(k, 0) for k in kids)
            total += (cur[key] - done) * (stat(dx[mx, lev]) + stat(dy[my, lev]))
        prev_min = cur
    return total


def test_input_distance_mean_option():
    """input_distance='mean': Eq. 4.2 with dbar_ij(X) + dbar_ij(Y) (documented non-thesis
    estimate); never above the thesis' max-distance cost (same new-match counts)."""
    pytest.importorskip("engine.kernels.vocabulary")
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(5, 12)) * 3
    sets = [
        (centres[rng.integers(0, 5, m)] + rng.normal(scale=0.5, size=(m, 12))).astype(np.float32)
        for m in (30, 45, 20, 38, 50, 25)
    ]
    # one tree (the default combines 2 seeds by the minimum cost)
    kw = dict(bins="vocabulary", weights="input_specific", branching=3, depth=3, n_shifts=1)
    pm_max = PyramidMatch(**kw).fit(sets)
    pm_mean = PyramidMatch(**kw, input_distance="mean").fit(sets)
    C_max, C_mean = pm_max.cost_matrix(sets), pm_mean.cost_matrix(sets)
    for i, j in [(0, 1), (2, 4), (3, 5), (1, 1)]:
        assert C_max[i, j] == pytest.approx(_naive_eq_4_2(pm_max, sets[i], sets[j], np.max))
        assert C_mean[i, j] == pytest.approx(_naive_eq_4_2(pm_mean, sets[i], sets[j], np.mean))
    np.testing.assert_allclose(C_mean, C_mean.T, rtol=1e-12)
    assert np.all(C_mean <= C_max + 1e-9) and np.any(C_mean < C_max - 1e-6)
    K = pm_mean.kernel(sets)
    np.testing.assert_allclose(np.diag(K), 1.0)
    state = pm_mean.to_state()
    assert state["input_distance"] == "mean"
    np.testing.assert_allclose(PyramidMatch.from_state(state).cost_matrix(sets), C_mean)
    old = {k: v for k, v in pm_max.to_state().items() if k != "input_distance"}
    assert PyramidMatch.from_state(old).input_distance == "max"  # states from before
    with pytest.raises(ValueError, match="input_distance"):
        PyramidMatch(input_distance="median")


def test_vocabulary_tree_iterations_reach_the_trees_and_persist(sets):
    pm = PyramidMatch("vocabulary", branching=3, depth=3, n_shifts=2, max_iter=2).fit(sets)
    assert [b.max_iter for b in pm.binnings_] == [2, 2]
    back = PyramidMatch.from_state(pm.to_state())
    assert back.max_iter == 2 and [b.max_iter for b in back.binnings_] == [2, 2]
    np.testing.assert_allclose(back.kernel(sets[:3]), pm.kernel(sets[:3]))
    old = {k: v for k, v in pm.to_state().items() if k != "max_iter"}  # older states
    assert PyramidMatch.from_state(old).max_iter == 10
    with pytest.raises(ValueError, match="max_iter"):
        PyramidMatch("vocabulary", max_iter=-1)


def test_pyramid_module_still_exports_the_names_of_its_parts():
    """engine.kernels.pyramid keeps exporting what moved to binning, codes and embedding
    (collection and index import GOLDEN, level_salt, mix64, level_key from there)."""
    from engine.core import splitmix
    from engine.kernels import binning, codes, embedding, pyramid

    assert pyramid.UniformBinning is binning.UniformBinning and pyramid.Binning is binning.Binning
    assert pyramid.PyramidCodes is codes.PyramidCodes
    assert pyramid.SparseEmbedding is embedding.SparseEmbedding
    for name in ("level_key", "level_salt"):
        assert getattr(pyramid, name) is getattr(embedding, name)
    assert pyramid.mix64 is splitmix.mix64 and pyramid.GOLDEN == splitmix.GOLDEN
    assert set(pyramid.__all__) <= set(dir(pyramid))


def test_stable_keys_are_splitmix64():
    """level_salt is one SplitMix64 step of the (shift, level) pair's hash and level_key
    the finaliser of bin * GOLDEN + salt (wrapping): the keys saved indexes hold."""
    from engine.core.splitmix import GOLDEN, mix64, splitmix64
    from engine.kernels.embedding import combine, level_key, level_salt

    salt = level_salt(3, 2)
    assert salt == splitmix64(np.asarray(combine(np.int64(3), 2)))
    bins = np.array([0, 1, -1, 2**62, -(2**63)], np.int64)
    want = mix64(bins.view(np.uint64) * GOLDEN + salt).view(np.int64)
    np.testing.assert_array_equal(level_key(3, 2, bins), want)
    assert level_key(3, 2, bins).dtype == np.int64


def _vocab_sets(seed, n=10, m=40, dim=16):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, dim)) * 3
    return [
        (centres[rng.integers(0, 6, m)] + rng.normal(scale=0.3, size=(m, dim))).astype(np.float32)
        for _ in range(n)
    ]


def test_vocabulary_idf_weights_are_the_idf_weighted_intersection():
    pytest.importorskip("engine.kernels.vocabulary")
    sets = [*_vocab_sets(7), np.zeros((0, 16), np.float32)]
    pm = PyramidMatch(bins="vocabulary", branching=3, depth=3, n_shifts=1)
    assert pm.weights == "idf" and pm.depth == 3  # "auto" resolves to idf for vocabulary
    assert PyramidMatch("vocabulary").depth == 5 and pm.normalize == "self"
    # uniform bins resolve "auto" to idf too (fit may fall back to global)
    assert PyramidMatch().weights == "idf" and PyramidMatch(weights="global").weights == "global"
    pm.fit(sets)
    tree = pm.binnings_[0]
    n_docs = 10  # non-empty sets
    assert tree.n_documents_ == n_docs
    # direct: P(X, Y) = sum over all tree nodes of idf_b min(h_X[b], h_Y[b])
    hist = []
    for s in sets:
        bins = tree.assign(s)[0] if len(s) else np.zeros((0, 3), np.int64)
        h = {}
        for lev in range(3):
            for b in bins[:, lev]:
                h[(lev, int(b))] = h.get((lev, int(b)), 0) + 1
        hist.append(h)
    for lev in range(3):  # idf from the document frequencies of the fit sets
        for b in range(tree.sizes[lev]):
            df = sum((lev, b) in h for h in hist)
            assert tree.idf(lev, np.array([b]))[0] == pytest.approx(np.log(n_docs / max(df, 1)))
    P = np.zeros((len(sets), len(sets)))
    for i, hi in enumerate(hist):
        for j, hj in enumerate(hist):
            P[i, j] = sum(
                tree.idf(lev, np.array([b]))[0] * min(c, hj[(lev, b)])
                for (lev, b), c in hi.items()
                if (lev, b) in hj
            )
    raw = PyramidMatch.from_state({**pm.to_state(), "normalize": "none"})
    np.testing.assert_allclose(raw.kernel(sets), P, atol=1e-9)
    K = pm.kernel(sets)
    d = np.sqrt(np.diag(P)[:10])
    np.testing.assert_allclose(K[:10, :10], P[:10, :10] / np.outer(d, d), atol=1e-9)
    assert np.all(K[10] == 0) and np.linalg.eigvalsh(K).min() > -1e-8  # Mercer
    # the root is shared by every set: idf 0
    assert tree.idf(2)[0] == 0.0
    # persistence keeps the document frequencies; the explicit map reproduces the kernel
    back = PyramidMatch.from_state(pm.to_state())
    assert back.weights == "idf" and back.binnings_[0].n_documents_ == n_docs
    np.testing.assert_allclose(back.kernel(sets), K, atol=1e-12)
    emb = pm.embed(sets)
    for i, j in [(0, 1), (3, 3), (5, 9)]:
        assert emb.dot(i, j) == pytest.approx(P[i, j], rel=1e-5)


def test_vocabulary_idf_weights_errors_and_old_states():
    pytest.importorskip("engine.kernels.vocabulary")
    sets = _vocab_sets(8, n=4)
    from engine.kernels.spatial import SpatialPyramidBinning

    with pytest.raises(ValueError, match="vocabulary bins"):  # no document frequencies
        PyramidMatch(SpatialPyramidBinning(), weights="idf", n_shifts=1, n_sides=1)
    idf = {"weights": "idf", "branching": 3, "depth": 3}
    with pytest.raises(ValueError, match="at least 2 non-empty"):
        PyramidMatch("vocabulary", **idf).fit(np.concatenate(sets))
    with pytest.raises(ValueError, match="at least 2 non-empty"):
        PyramidMatch("vocabulary", **idf).fit([sets[0], sets[0][:0]])
    # the default ("auto") falls back to the thesis' weights for a handful of sets: two
    # sets compared by a tree fitted on them alone still match (idf would make it 0)
    few = PyramidMatch("vocabulary", branching=3, depth=3).fit(sets[:2])
    assert few.weights == "global" and few.kernel(sets[:2])[0, 1] > 0
    assert PyramidMatch("vocabulary", **idf).fit(sets[:2]).kernel(sets[:2])[0, 1] == 0
    many = [*sets, *_vocab_sets(9, n=6)]
    assert len(many) >= IDF_MIN_SETS
    assert PyramidMatch("vocabulary", branching=3, depth=3).fit(many).weights == "idf"
    assert few.fit(many).weights == "idf"  # (fitted again on a collection: idf)
    # global weights need no document frequencies; states from before idf still load
    pmg = PyramidMatch("vocabulary", weights="global", branching=3, depth=3).fit(sets)
    assert pmg.binnings_[0].n_documents_ is None
    state = pmg.to_state()
    old = {k: v for k, v in state.items() if not k.endswith((".n_documents", ".df"))}
    np.testing.assert_allclose(PyramidMatch.from_state(old).kernel(sets), pmg.kernel(sets))
    # the tree alone: idf weights before fit_document_frequencies are an error
    from engine.kernels.vocabulary import VocabularyTree

    tree = VocabularyTree(3, 3, weights="idf").fit(np.concatenate(sets))
    with pytest.raises(RuntimeError, match="document frequencies"):
        tree.bin_weights(0, np.array([0]))
    w = tree.fit_document_frequencies(sets).bin_weights(0, np.arange(tree.sizes[0]))
    parents = tree.parents(0)
    np.testing.assert_allclose(
        w - tree.bin_weights(1, parents), tree.idf(0), atol=1e-12
    )  # w_b - w_parent(b) = idf_b >= 0
    assert np.all(tree.idf(0) >= 0)
    # a tree instance built for idf weights: "auto" keeps them and fit counts the sets
    pmt = PyramidMatch(VocabularyTree(3, 3, weights="idf"), n_shifts=1, n_sides=1)
    assert pmt.weights == "idf"
    assert pmt.fit(sets).binnings_[0].n_documents_ == len(sets)
