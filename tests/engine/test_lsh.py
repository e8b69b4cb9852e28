"""Tests for engine.hashing.lsh and its parts: hashed random vectors (keyed),
random-hyperplane (pyramid-match) hashing (lsh), banded index and S-curve parameter choice
(bands), L1 embedding of equal-size sets (l1) -- thesis Ch. 5 -- and SplitMix64 (core)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from engine.core.splitmix import splitmix64
from engine.hashing.bands import BandedIndex, band_keys, choose_params, s_curve
from engine.hashing.keyed import KeyedSparse, hashed_cauchy, hashed_gaussian
from engine.hashing.l1 import L1SetEmbedding, L1SetIndex, PStableHash, l1_distances
from engine.hashing.lsh import RandomHyperplaneHash
from engine.hashing.wta import hamming_distance


def _keyed_from_csr(M: sp.csr_matrix, key_map: np.ndarray) -> KeyedSparse:
    M = sp.csr_matrix(M)
    return KeyedSparse(M.indptr.astype(np.int64), key_map[M.indices], M.data.astype(np.float32))


def test_splitmix64_reference_value():
    # first output of the reference SplitMix64 generator seeded with 0
    assert int(splitmix64(np.zeros(1, np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_splitmix64_is_the_finaliser_after_the_golden_step():
    """One implementation: splitmix64(x) = mix64(x + GOLDEN) with wrapping uint64
    arithmetic, for uint64 and int64 (same bits) inputs, at the wraparound too."""
    from engine.core.splitmix import GOLDEN, mix64

    rng = np.random.default_rng(0)
    edge = np.array(
        [0, 1, 2**63, 2**64 - 1, 2**64 - int(GOLDEN), 2**64 - int(GOLDEN) - 1], np.uint64
    )
    x = np.concatenate([rng.integers(0, 2**64, 10_000, dtype=np.uint64), edge])
    np.testing.assert_array_equal(splitmix64(x), mix64(x + GOLDEN))
    np.testing.assert_array_equal(splitmix64(x.view(np.int64)), splitmix64(x))
    np.testing.assert_array_equal(mix64(x.view(np.int64)), mix64(x))
    # a bijection: no collisions among distinct inputs
    assert np.unique(mix64(x)).size == np.unique(x).size


def test_lsh_module_still_exports_the_names_of_its_parts():
    from engine.core import splitmix
    from engine.hashing import bands, keyed, l1, lsh

    for name in lsh.__all__:
        assert hasattr(lsh, name), name
    assert lsh.splitmix64 is splitmix.splitmix64
    assert lsh.BandedIndex is bands.BandedIndex and lsh.choose_params is bands.choose_params
    assert lsh.L1SetIndex is l1.L1SetIndex and lsh.PStableHash is l1.PStableHash
    assert lsh.KeyedSparse is keyed.KeyedSparse and lsh.hashed_gaussian is keyed.hashed_gaussian


def test_integer_arguments_are_checked():
    from engine.core.validate import check_int

    assert check_int(np.int32(5), "n", 1) == 5 and type(check_int(np.int64(5), "n", 1)) is int
    with pytest.raises(TypeError, match="n_bits must be an int"):
        RandomHyperplaneHash(n_bits=True)
    with pytest.raises(TypeError, match="band_size"):
        BandedIndex(4, 2.0)
    with pytest.raises(ValueError, match="n_levels must be >= 1"):
        L1SetEmbedding(0)


def test_hashed_gaussian_is_standard_normal_and_pure():
    keys = np.arange(-5000, 45000, dtype=np.int64) * 7919
    g = hashed_gaussian(3, np.arange(4), keys)
    assert g.shape == (4, keys.size) and g.dtype == np.float32
    for row in g:
        assert stats.kstest(row, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(g[0], g[1])[0, 1]) < 0.03  # cos / sin branches independent
    assert abs(np.corrcoef(g[1], g[2])[0, 1]) < 0.03
    # a coordinate depends only on (seed, row, key): subsets and reorderings agree
    sub = hashed_gaussian(3, np.array([2, 0]), keys[[10, 3, 999]])
    np.testing.assert_array_equal(sub, g[[2, 0]][:, [10, 3, 999]])
    assert not np.array_equal(hashed_gaussian(4, [0], keys[:50]), g[:1, :50])


def test_hashed_cauchy_distribution():
    c = hashed_cauchy(1, np.arange(2), np.arange(40000))
    assert np.isfinite(c).all()
    for row in c:
        assert stats.kstest(row, "cauchy").pvalue > 1e-3


def _pairs_with_overlap(n, dim, rng):
    """Random non-negative sparse pairs with a wide range of cosine similarities."""
    A = sp.random(n, dim, density=0.01, format="csr", random_state=rng, dtype=np.float32)
    N = sp.random(n, dim, density=0.01, format="csr", random_state=rng, dtype=np.float32)
    mix = sp.diags(rng.random(n).astype(np.float32) * 3)
    B = sp.csr_matrix(A + mix @ N)
    cos = np.asarray(A.multiply(B).sum(1)).ravel() / np.sqrt(
        np.asarray(A.multiply(A).sum(1)).ravel() * np.asarray(B.multiply(B).sum(1)).ravel()
    )
    return A, B, cos


def test_hyperplane_collision_rate_follows_angle():
    rng = np.random.default_rng(0)
    A, B, cos = _pairs_with_overlap(60, 3000, rng)
    h = RandomHyperplaneHash(2048, random_state=5)
    keys = rng.choice(2**62, 3000, replace=False).astype(np.int64)  # arbitrary stable keys
    ha = h.hash(_keyed_from_csr(A, keys))
    hb = h.hash(_keyed_from_csr(B, keys))
    assert ha.shape == (60, 256) and ha.dtype == np.uint8
    agree = 1.0 - np.diag(hamming_distance(ha, hb)) / 2048.0
    expected = h.collision_probability(cos)  # Eq. 5.4: 1 - arccos(cos)/pi
    assert expected.min() < 0.65 and expected.max() > 0.9  # a real range of similarities
    sigma = np.sqrt(expected * (1 - expected) / 2048)
    assert np.all(np.abs(agree - expected) < 4.5 * sigma + 1e-3)
    assert abs(np.mean(agree - expected)) < 3 * sigma.mean() / math.sqrt(60)


def test_hyperplane_input_forms_agree_and_state():
    rng = np.random.default_rng(1)
    X = np.where(rng.random((20, 300)) < 0.1, rng.random((20, 300)), 0).astype(np.float32)
    h = RandomHyperplaneHash(64, random_state=2)
    ident = np.arange(300, dtype=np.int64)
    dense = h.project(X)
    np.testing.assert_allclose(h.project(sp.csr_matrix(X)), dense, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        h.project(_keyed_from_csr(sp.csr_matrix(X), ident)), dense, rtol=1e-5, atol=1e-5
    )
    # hashing a row alone equals hashing it in a batch (coordinates are per key)
    np.testing.assert_array_equal(h.hash(X[3:4]), h.hash(X)[3:4])
    # explicit reference: r_b . x with the generated Gaussian matrix
    G = hashed_gaussian(2, np.arange(64), ident)
    np.testing.assert_allclose(dense, X @ G.T, rtol=1e-4, atol=1e-4)
    h2 = RandomHyperplaneHash.from_state(h.to_state())
    np.testing.assert_array_equal(h2.hash(X), h.hash(X))
    with pytest.raises(ValueError, match="multiple of 8"):
        RandomHyperplaneHash(12)


def test_hyperplane_cache_gives_the_same_projections():
    """Cached coordinates (a known key set) give the generated ones: single query rows
    (the gather path), batches, keys outside the cache, and the same bits."""
    rng = np.random.default_rng(7)
    X = np.where(rng.random((12, 400)) < 0.05, rng.random((12, 400)), 0).astype(np.float32)
    keys = rng.permutation(np.unique(rng.integers(-(10**12), 10**12, 500)))[:400]
    plain = RandomHyperplaneHash(128, random_state=3)
    cached = RandomHyperplaneHash(128, random_state=3).cache(keys[:300])  # 100 unknown
    for rows in (slice(0, 12), slice(4, 5)):
        x = _keyed_from_csr(sp.csr_matrix(X[rows]), keys)
        np.testing.assert_allclose(cached.project(x), plain.project(x), rtol=1e-4, atol=1e-5)
        agree = (cached.hash(x) == plain.hash(x)).mean()
        assert agree > 0.99
    G = hashed_gaussian(3, np.arange(128), keys[:300])
    np.testing.assert_array_equal(cached.coordinates(keys[:300]), G.T)
    # blocks generated on threads: the same cache
    many = rng.integers(-(10**12), 10**12, 5000)  # several key blocks
    one = RandomHyperplaneHash(64, random_state=3).cache(many)
    two = RandomHyperplaneHash(64, random_state=3).cache(many, threads=2)
    assert two.n_cached == one.n_cached == np.unique(many).size
    np.testing.assert_array_equal(two.coordinates(many), one.coordinates(many))
    want = hashed_gaussian(3, np.arange(64), many).T
    np.testing.assert_array_equal(two.coordinates(many), want)


def test_pyramid_match_hashing_follows_normalised_kernel():
    pyramid = pytest.importorskip("engine.kernels.pyramid")
    if not hasattr(pyramid.PyramidMatch, "embed"):
        pytest.skip("PyramidMatch.embed not available")
    rng = np.random.default_rng(3)
    base = [rng.random((int(rng.integers(20, 40)), 4)).astype(np.float32) for _ in range(12)]
    sets = base + [
        np.concatenate(
            [b[: len(b) // 2] + 0.01 * rng.random((len(b) // 2, 4)), rng.random((5, 4))]
        ).astype(np.float32)
        for b in base
    ]
    pm = pyramid.PyramidMatch(weights="global", normalize="self", random_state=0).fit(sets)
    emb = pm.embed(sets)
    K = pm.kernel(sets)
    norms = emb.norms()
    # Eq. 5.9/5.10: embedding dot products are the kernel, normalised by self-similarities
    M = sp.csr_matrix((emb.values, np.unique(emb.keys, return_inverse=True)[1], emb.indptr))
    cos = (M @ M.T).toarray() / np.outer(norms, norms)
    np.testing.assert_allclose(cos, K, atol=1e-3)
    h = RandomHyperplaneHash(1024, random_state=4)
    codes = h.hash(emb)
    agree = 1.0 - hamming_distance(codes) / 1024.0
    expected = h.collision_probability(K)  # Eq. 5.11
    sigma = np.sqrt(expected * (1 - expected) / 1024) + 1e-3
    assert np.mean(np.abs(agree - expected) < 4 * sigma) > 0.99


# ---------------------------------------------------------------------- banded index
def test_band_keys_equal_iff_band_equal():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, (500, 12)).astype(np.uint8)
    keys = band_keys(codes, 4, 3)
    bands = codes.reshape(500, 4, 3)
    for t in range(4):
        same_key = keys[:, t][:, None] == keys[:, t][None]
        same_band = (bands[:, t][:, None] == bands[:, t][None]).all(-1)
        np.testing.assert_array_equal(same_key, same_band)
    assert not np.any(keys[:, 0] == keys[:, 1])  # tables are salted apart
    with pytest.raises(ValueError, match="n_tables\\*band_size"):
        band_keys(codes, 5, 3)


def test_banded_index_votes_match_bruteforce():
    rng = np.random.default_rng(1)
    db = rng.integers(0, 3, (400, 24)).astype(np.uint8)
    q = db[:30].copy()
    q[:, ::5] = rng.integers(0, 3, q[:, ::5].shape)
    ids = np.arange(400) * 3 + 7
    index = BandedIndex(n_tables=8, band_size=3)
    index.add(ids, db)
    res = index.query(q, min_votes=2)
    bq, bd = q.reshape(30, 8, 3), db.reshape(400, 8, 3)
    votes = (bq[:, None] == bd[None]).all(-1).sum(-1)  # (30, 400)
    for i, (cid, cv) in enumerate(res):
        expect = np.flatnonzero(votes[i] >= 2)
        assert set(cid.tolist()) == set(ids[expect].tolist())
        np.testing.assert_array_equal(cv, votes[i][(cid - 7) // 3])
        assert np.all(np.diff(cv) <= 0)  # sorted by votes
        assert ids[i] in cid
    single = index.query(q[0])
    assert isinstance(single, tuple) and ids[0] in single[0]


def test_banded_index_remove_readd_and_state():
    rng = np.random.default_rng(2)
    db = rng.integers(0, 256, (100, 16)).astype(np.uint8)
    index = BandedIndex(4, 4)
    index.add(np.arange(100), db)
    assert index.remove([5, 6, 999]) == 2 and len(index) == 98
    assert 5 not in index.query(db[5])[0]
    index.add([5], db[6:7])  # re-add id 5 with other codes
    assert 5 in index.query(db[6])[0] and 6 not in index.query(db[6])[0]
    index.add([7], db[8:9])  # replacing an existing id
    assert len(index) == 99 and 7 not in index.query(db[7])[0]
    state = index.to_state()
    again = BandedIndex.from_state(state)
    for a, b in zip(again.query(db[:20]), index.query(db[:20]), strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    empty = BandedIndex(2, 2).query(db[:3])
    assert len(empty) == 3 and all(c.size == 0 for c, _ in empty)


def test_s_curve_matches_simulation():
    rng = np.random.default_rng(3)
    n, b, r = 4000, 6, 4
    for s in (0.3, 0.6, 0.85):
        a = rng.integers(0, 1 << 30, (n, b * r))
        other = np.where(rng.random((n, b * r)) < s, a, a + 1)
        collide = (a.reshape(n, b, r) == other.reshape(n, b, r)).all(-1).any(-1)
        assert abs(collide.mean() - s_curve(s, r, b)) < 4 * math.sqrt(0.25 / n)


def test_choose_params_hits_target_and_is_optimal():
    p = choose_params(10_000, 64, 0.95, s_near=0.7, s_far=0.3)
    assert p.recall >= 0.95 and p.n_tables * p.band_size <= 64
    assert p.recall == pytest.approx(float(s_curve(0.7, p.band_size, p.n_tables)))
    # brute force: no admissible pair has a smaller candidate fraction
    floor = 50 / 10_000
    best = min(
        max(float(s_curve(0.3, r, b)), floor)
        for r in range(1, 65)
        for b in range(1, 64 // r + 1)
        if s_curve(0.7, r, b) >= 0.95
    )
    assert max(p.candidate_fraction, floor) == pytest.approx(best)
    assert p.candidate_fraction < 0.1
    hard = choose_params(1000, 4, 0.999, s_near=0.2, s_far=0.1)  # unreachable target
    assert hard.recall < 0.999 and hard.recall == pytest.approx(1 - 0.8**4)
    with pytest.raises(ValueError, match="s_far"):
        choose_params(10, 8, 0.9, s_near=0.2, s_far=0.5)


def test_index_retrieves_neighbours_of_wta_codes():
    from engine.hashing.wta import WTAHash

    rng = np.random.default_rng(4)
    X = rng.random((3000, 64), dtype=np.float32)
    Q = X[:100] + 0.03 * rng.standard_normal((100, 64)).astype(np.float32)
    h = WTAHash(128, 4, random_state=1).fit(64)
    p = choose_params(3000, 128, 0.95, s_near=0.6, s_far=0.25)
    index = BandedIndex(p.n_tables, p.band_size)
    index.add(np.arange(3000), h.hash(X))
    res = index.query(h.hash(Q))
    recall = np.mean([i in c for i, (c, _) in enumerate(res)])
    frac = np.mean([c.size for c, _ in res]) / 3000
    assert recall >= 0.95 and frac < 0.2


# ---------------------------------------------------------------------- L1 embedding
def test_l1_embedding_tracks_optimal_bijective_matching():
    rng = np.random.default_rng(5)
    sets = [rng.random((25, 2)) * rng.uniform(0.2, 1.0) for _ in range(40)]
    emb = L1SetEmbedding(n_levels=9, random_state=0).fit(sets)
    E = emb.embed(sets)
    assert len(E) == 40 and E.values.dtype == np.float32
    # each level carries total mass 2^l (weights 1/n per feature, Procedure 1 step 4)
    first = E.values[E.indptr[0] : E.indptr[1]].sum()
    assert first == pytest.approx(sum(2.0**level for level in range(9)), rel=1e-5)
    approx, exact = [], []
    for i in range(1, 40):
        approx.append(
            l1_distances(
                KeyedSparse(E.indptr[:2], E.keys, E.values),
                KeyedSparse(
                    E.indptr[i : i + 2] - E.indptr[i],
                    E.keys[E.indptr[i] : E.indptr[i + 1]],
                    E.values[E.indptr[i] : E.indptr[i + 1]],
                ),
            )[0]
        )
        C = cdist(sets[0], sets[i], "cityblock")
        r, c = linear_sum_assignment(C)
        exact.append(C[r, c].mean())
    rho = stats.spearmanr(approx, exact).statistic
    assert rho > 0.8
    with pytest.raises(ValueError, match="equal size"):
        emb.embed([sets[0], sets[1][:10]])


def test_l1_set_index_procedures_1_2():
    rng = np.random.default_rng(6)
    sets = [rng.random((30, 3)) for _ in range(300)]
    queries = [s + 0.005 * rng.standard_normal(s.shape) for s in sets[:25]]
    emb = L1SetEmbedding(8, random_state=1).fit(sets)
    index = L1SetIndex(emb, n_tables=12, band_size=3, random_state=2)
    index.add(np.arange(300) + 1000, sets)
    hits = [index.query(q, top=5) for q in queries]
    top1 = np.mean([len(ids) > 0 and ids[0] == 1000 + i for i, (ids, _) in enumerate(hits)])
    assert top1 >= 0.9
    _, d = hits[0]
    assert np.all(np.diff(d) >= 0)
    state = emb.to_state()
    again = L1SetEmbedding.from_state(state).embed(sets[:3])
    ref = emb.embed(sets[:3])
    np.testing.assert_array_equal(again.keys, ref.keys)
    istate = index.to_state()
    assert all(isinstance(v, np.ndarray | int | float | str | bool) for v in istate.values())
    loaded = L1SetIndex.from_state(istate)
    for q in queries[:5]:
        a_ids, a_d = loaded.query(q, top=5)
        b_ids, b_d = index.query(q, top=5)
        np.testing.assert_array_equal(a_ids, b_ids)
        np.testing.assert_allclose(a_d, b_d)


def test_pstable_hash_collisions_decrease_with_distance():
    rng = np.random.default_rng(7)
    x = rng.random((1, 50))
    h = PStableHash(4000, width=1.0, random_state=3)
    base = h.hash(x)
    rates = []
    for eps in (0.05, 0.3, 1.5):
        y = x + eps * rng.standard_normal((1, 50)) / 50
        rates.append(np.mean(h.hash(y) == base))
    assert rates[0] > rates[1] > rates[2]
    assert PStableHash.from_state(h.to_state()).hash(x).tolist() == base.tolist()
