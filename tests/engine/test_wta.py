"""Tests for engine.wta: WTA (Alg. 1/2), MinHash equivalence, densified WTA (Eq. 7), codes."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp

from engine.hashing.wta import (
    DensifiedWTAHash,
    WTAHash,
    code_agreement,
    hamming_distance,
    minhash,
    pack_codes,
    sparsity,
    unpack_codes,
    wta_match_candidates,
)


def _reference_wta(X: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """Literal Algorithm 1/2 with Python loops (strict '>' keeps the first maximum)."""
    m, p, K = perms.shape
    out = np.zeros((X.shape[0], m), dtype=np.int64)
    for n, x in enumerate(X):
        for i in range(m):
            vals = [
                math.prod(float(x[perms[i, level, j]]) for level in range(p)) for j in range(K)
            ]
            c = 0
            for j in range(K):
                if vals[j] > vals[c]:
                    c = j
            out[n, i] = c
    return out


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("window", [2, 4, 7])
def test_matches_reference_algorithm(window, degree):
    rng = np.random.default_rng(window * 10 + degree)
    X = rng.standard_normal((12, 30)).astype(np.float32)
    X[0, :] = 0.0  # all ties -> code 0
    X[1, ::2] = X[1, 1::2]  # many ties
    h = WTAHash(n_codes=40, window=window, degree=degree, random_state=3).fit(30)
    codes = h.hash(X)
    assert codes.dtype == np.uint8 and codes.shape == (12, 40)
    np.testing.assert_array_equal(codes, _reference_wta(X, h.permutations_))


def test_permutations_are_distinct_uniform_and_seeded():
    h = WTAHash(n_codes=2000, window=5, random_state=7).fit(20)
    P = h.permutations_[:, 0, :]
    assert all(np.unique(row).size == 5 for row in P)  # without replacement
    counts = np.bincount(P[:, 0], minlength=20)  # each dimension equally likely first
    expected = 2000 / 20
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 45.0  # chi2(19) 99.9% quantile is 43.8
    again = WTAHash(n_codes=2000, window=5, random_state=7).fit(20)
    np.testing.assert_array_equal(again.permutations_, h.permutations_)
    other = WTAHash(n_codes=2000, window=5, random_state=8).fit(20)
    assert not np.array_equal(other.permutations_, h.permutations_)


def test_high_dimensional_fit_path():
    h = WTAHash(n_codes=300, window=4, random_state=1).fit(300_000)
    P = h.permutations_.reshape(300, 4)
    assert P.max() < 300_000 and all(np.unique(r).size == 4 for r in P)
    # the rejection path (D >= 64 K) is uniform over ordered samples without replacement:
    # every position of the window, and every value, equally likely; no repeats
    h = WTAHash(n_codes=20_000, window=4, random_state=3).fit(256)
    P = h.permutations_[:, 0, :]
    assert all(np.unique(r).size == 4 for r in P[:2000])
    assert (np.sort(P, axis=1)[:, 1:] != np.sort(P, axis=1)[:, :-1]).all()
    for pos in range(4):
        counts = np.bincount(P[:, pos], minlength=256)
        chi2 = ((counts - 20_000 / 256) ** 2 / (20_000 / 256)).sum()
        assert chi2 < 330.0  # chi2(255) 99.9 % quantile is 330.5


def test_invariant_to_monotone_transform():
    rng = np.random.default_rng(0)
    X = rng.random((50, 64), dtype=np.float32) + 0.1
    h = WTAHash(128, 4).fit(64)
    np.testing.assert_array_equal(h.hash(X), h.hash(np.exp(3 * X) - 2))


def test_collision_rate_matches_eq6():
    # Eq. 6: P(collision) = sum_i C(R_i, K-1) / C(n, K), R_i = |L(X,i) ∩ L(Y,i)|.
    rng = np.random.default_rng(5)
    n, K = 12, 3
    x = rng.standard_normal(n)
    y = x + 0.8 * rng.standard_normal(n)
    R = [int(np.sum((x < x[i]) & (y < y[i]))) for i in range(n)]
    expected = sum(math.comb(r, K - 1) for r in R) / math.comb(n, K)
    h = WTAHash(n_codes=20000, window=K, random_state=2).fit(n)
    codes = h.hash(np.stack([x, y]).astype(np.float32))
    rate = float(np.mean(codes[0] == codes[1]))
    sigma = math.sqrt(expected * (1 - expected) / 20000)
    assert abs(rate - expected) < 4 * sigma


def test_binary_wta_with_full_window_is_minhash():
    # Sec. 4.4: on binary vectors with K = n, WTA keeps the first 1 of the permutation.
    rng = np.random.default_rng(1)
    n = 40
    X = (rng.random((30, n)) < 0.2).astype(np.float32)
    X[X.sum(axis=1) == 0, 0] = 1.0
    h = WTAHash(n_codes=500, window=n, random_state=4).fit(n)
    codes = h.hash(X)
    mh = minhash(X, h.permutations_[:, 0, :])
    np.testing.assert_array_equal(codes.astype(np.int64), mh)
    # ... and so the collision rate is the Jaccard similarity of the supports
    a, b = X[0] > 0, X[1] > 0
    b[:5] = a[:5]  # make them overlap
    pair = np.stack([a, b]).astype(np.float32)
    h2 = WTAHash(n_codes=20000, window=n, random_state=9).fit(n)
    c = h2.hash(pair)
    jac = (a & b).sum() / (a | b).sum()
    assert abs(np.mean(c[0] == c[1]) - jac) < 4 * math.sqrt(jac * (1 - jac) / 20000) + 1e-3


def test_minhash_sparse_and_empty_rows():
    X = sp.csr_matrix(np.array([[0, 1, 0, 1], [0, 0, 0, 0]], dtype=np.float32))
    perms = np.array([[3, 2, 1, 0], [0, 1, 2, 3]])
    np.testing.assert_array_equal(minhash(X, perms), [[0, 1], [4, 4]])
    with pytest.raises(ValueError, match="permutations"):
        minhash(X, perms[:, :3])


def test_polynomial_wta_equals_wta_on_product_features():
    # Alg. 2 (p = 2) equals Alg. 1 on the explicit degree-2 products it samples.
    rng = np.random.default_rng(3)
    X = rng.random((20, 10), dtype=np.float32)
    h = WTAHash(n_codes=64, window=4, degree=2, random_state=0).fit(10)
    P = h.permutations_  # (m, 2, K)
    pair_index = P[:, 0, :] * 10 + P[:, 1, :]  # index into the 100-D outer product
    outer = (X[:, :, None] * X[:, None, :]).reshape(20, 100)
    expected = np.take_along_axis(
        outer[:, None, :], pair_index[None].repeat(20, 0), axis=2
    ).argmax(axis=2)
    np.testing.assert_array_equal(h.hash(X), expected)


def test_sparse_input_equals_dense_and_chunks():
    rng = np.random.default_rng(4)
    S = sp.random(700, 3000, density=0.05, format="csr", random_state=4, dtype=np.float32)
    h = WTAHash(n_codes=64, window=4, random_state=1).fit(3000)
    np.testing.assert_array_equal(h.hash(S), h.hash(S.toarray()))
    X = rng.random((9000, 50), dtype=np.float32)  # several chunks
    h2 = WTAHash(n_codes=600, window=8).fit(50)
    full = h2.hash(X)
    np.testing.assert_array_equal(full[8000:], h2.hash(X[8000:]))
    # a few sparse rows (densified internally) hash like the same rows in a big batch
    # (700 x 3000 > _DENSE_ROWS_ELEMENTS: column-sliced sparse path)
    d = DensifiedWTAHash(n_codes=64, window=8, random_state=2).fit(3000)
    batch = d.hash(S)
    for r in (0, 5, 699):
        np.testing.assert_array_equal(d.hash(S[r]), batch[r : r + 1])


def test_state_roundtrip_is_bit_identical():
    rng = np.random.default_rng(0)
    X = rng.random((10, 33), dtype=np.float32)
    for h in (
        WTAHash(32, 5, degree=2, random_state=11).fit(33),
        DensifiedWTAHash(32, 5, random_state=11, offset=9, range_mod=None).fit(33),
        DensifiedWTAHash(16, 300, random_state=1, range_mod=None).fit(400),
    ):
        if h.dim != X.shape[1]:
            X = np.random.default_rng(1).random((10, h.dim), dtype=np.float32)
        state = h.to_state()
        assert all(isinstance(v, np.ndarray | int | float | str | bool) for v in state.values())
        loaded = type(h).from_state(state)
        np.testing.assert_array_equal(loaded.hash(X), h.hash(X))
    with pytest.raises(ValueError, match="DensifiedWTAHash"):
        WTAHash.from_state(DensifiedWTAHash(8, 2).fit(4).to_state())


def test_validation_errors():
    with pytest.raises(ValueError, match="window"):
        WTAHash(8, window=10).fit(5)
    with pytest.raises(ValueError, match="n_codes"):
        WTAHash(0)
    with pytest.raises(RuntimeError, match="fit"):
        WTAHash(8).hash(np.zeros((2, 5)))
    h = WTAHash(8, 2).fit(5)
    with pytest.raises(ValueError, match="5 columns"):
        h.hash(np.zeros((2, 6)))
    with pytest.raises(ValueError, match="NaN"):
        h.hash(np.full((1, 5), np.nan))
    with pytest.raises(ValueError, match="offset"):
        DensifiedWTAHash(8, window=4, offset=2)


def test_hash_speed_is_vectorised():
    X = np.random.default_rng(0).random((2000, 1000), dtype=np.float32)
    h = WTAHash(256, 4).fit(1000)
    best = np.inf
    for _ in range(3):  # CPU time, best of 3: the shared 2-core test machine is busy
        t = time.process_time()
        h.hash(X)
        best = min(best, time.process_time() - t)
    # target: well under 1 s per 10,000 vectors, i.e. under 0.2 s per 2,000
    assert best < 0.2


# ---------------------------------------------------------------------- densified WTA
def test_densification_example_from_paper_fig3():
    # Chen & Shrivastava Fig. 2/3: x1 with windows (2,1,8) (5,3,9) (6,2,4) (8,9,1) (1,7,3)
    # (2,4,5) (1-based dims), K = 3; codes are 1-based in the paper.
    x1 = np.array([[0, 0, 5, 0, 0, 7, 6, 0, 0]], dtype=np.float32)
    x2 = np.array([[0, 0, 1, 0, 0, 0, 0, 0, 0]], dtype=np.float32)
    windows = np.array([[2, 1, 8], [5, 3, 9], [6, 2, 4], [8, 9, 1], [1, 7, 3], [2, 4, 5]]) - 1
    C = 10
    h = DensifiedWTAHash(6, window=3, offset=C, range_mod=None).fit(9)
    h.permutations_ = windows[:, None, :].astype(np.int32)
    c1, e1 = h.hash(x1, return_empty=True)
    c2 = h.hash(x2)
    # 0-based codes: x1 raw = [E, 1, 0, E, 1, E]; densified [1+C, 1, 0, 1+C, 1, 1+2C]
    np.testing.assert_array_equal(c1[0], [1 + C, 1, 0, 1 + C, 1, 1 + 2 * C])
    np.testing.assert_array_equal(e1[0], [True, False, False, True, False, True])
    # x2 raw = [E, 1, E, E, 2, E]; densified [1+C, 1, 2+2C, 2+C, 2, 1+2C]
    np.testing.assert_array_equal(c2[0], [1 + C, 1, 2 + 2 * C, 2 + C, 2, 1 + 2 * C])
    # the spurious collisions of vanilla WTA (samples 1, 3, 4, 6 in the paper) mostly vanish
    vanilla = WTAHash(6, 3).fit(9)
    vanilla.permutations_ = h.permutations_
    v1, v2 = vanilla.hash(x1), vanilla.hash(x2)
    assert np.sum(v1 == v2) == 5 and np.sum(c1 == c2) == 3


def test_densified_equals_wta_on_dense_data_and_range_reduction():
    rng = np.random.default_rng(2)
    X = rng.random((40, 100), dtype=np.float32) + 0.01
    d = DensifiedWTAHash(128, 4, random_state=5).fit(100)
    w = WTAHash(128, 4, random_state=5).fit(100)
    np.testing.assert_array_equal(d.hash(X), w.hash(X))
    d = DensifiedWTAHash(128, 4, random_state=5).fit(5000)
    S = sp.random(300, 5000, density=0.003, format="csr", random_state=1, dtype=np.float32)
    raw = DensifiedWTAHash(128, 4, random_state=5, range_mod=None).fit(5000).hash(S)
    red = DensifiedWTAHash(128, 4, random_state=5, range_mod=97).fit(5000).hash(S)
    all_empty = d.empty_windows(S).all(axis=1)  # rows whose windows all miss the support
    assert 0 < all_empty.sum() < 300
    np.testing.assert_array_equal(red[~all_empty], raw[~all_empty] % 97)
    assert (red[all_empty] == 96).all() and (raw[all_empty] == 5 * 128).all()


def test_densified_kernel_is_k_good():
    # Theorem 1: the DWTA collision probability is k_good, the probability that the two
    # window maxima agree given that the window is not empty for both (a window empty for
    # only one vector is a non-collision: the "easily fixable" spurious case of Sec. 3.1).
    rng = np.random.default_rng(8)
    D = 2000
    x = np.zeros(D, np.float32)
    y = np.zeros(D, np.float32)
    support = rng.choice(D, 60, replace=False)
    x[support] = rng.random(60)
    y[support[:40]] = x[support[:40]] + 0.1 * rng.random(40)
    y[rng.choice(D, 20, replace=False)] = rng.random(20)
    X = np.stack([x, y])
    rates, goods, wtas = [], [], []
    for seed in range(4):
        d = DensifiedWTAHash(4000, 8, random_state=seed, range_mod=None).fit(D)
        w = WTAHash(4000, 8, random_state=seed).fit(D)
        cw = w.hash(X)
        empty = w.empty_windows(X)
        informative = ~(empty[0] & empty[1])
        both = ~empty[0] & ~empty[1]
        goods.append(np.sum((cw[0] == cw[1]) & both) / informative.sum())
        wtas.append(np.mean(cw[0] == cw[1]))
        cd = d.hash(X)
        rates.append(np.mean(cd[0] == cd[1]))
        assert empty.mean() > 0.5
    k_good, k_dwta, k_wta = np.mean(goods), np.mean(rates), np.mean(wtas)
    assert k_wta > k_good + 0.3  # vanilla WTA is inflated by empty-empty collisions
    # densified codes reuse informative windows (~3x here), hence the wider tolerance
    sigma = math.sqrt(k_good * (1 - k_good) / (4 * 4000 * (1 - 0.7)))
    assert abs(k_dwta - k_good) < 5 * sigma


def test_sparsity_and_empty_ratio():
    S = sp.csr_matrix(np.array([[0, 0, 1, 0], [2, 0, 0, 0]], dtype=np.float32))
    assert sparsity(S) == pytest.approx(0.75)
    assert sparsity(S.toarray()) == pytest.approx(0.75)
    h = WTAHash(400, 2, random_state=0).fit(4)
    e = h.empty_windows(S)
    # window of 2 of 4 dims misses the single non-zero with probability C(3,2)/C(4,2) = 1/2
    assert abs(e.mean() - 0.5) < 0.08


# ---------------------------------------------------------------------- code utilities
@pytest.mark.parametrize("bits", [1, 2, 3, 8, 12])
def test_pack_unpack_roundtrip(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, size=(7, 37))
    packed = pack_codes(codes, bits)
    assert packed.dtype == np.uint8 and packed.shape == (7, math.ceil(37 * bits / 8))
    np.testing.assert_array_equal(unpack_codes(packed, bits, 37), codes)
    with pytest.raises(ValueError, match="codes must lie"):
        pack_codes(codes + (1 << bits), bits)


def test_code_agreement_paths_agree_with_bruteforce():
    rng = np.random.default_rng(0)
    A = rng.integers(0, 4, (300, 64)).astype(np.uint8)
    B = rng.integers(0, 4, (250, 64)).astype(np.uint8)
    B[:10] = A[:10]
    brute = (A[:, None, :] == B[None]).mean(axis=2)
    S = code_agreement(A, B, block=64)
    assert S.dtype == np.float32 and S.shape == (300, 250)
    np.testing.assert_allclose(S, brute, atol=1e-6)
    np.testing.assert_allclose(np.diag(S[:10, :10]), 1.0)
    A2 = rng.integers(0, 256, (120, 200)).astype(np.uint8)  # large alphabet path
    B2 = rng.integers(0, 256, (90, 200)).astype(np.uint8)
    np.testing.assert_allclose(
        code_agreement(A2, B2), (A2[:, None] == B2[None]).mean(axis=2), atol=1e-6
    )
    with pytest.raises(ValueError, match="same number of codes"):
        code_agreement(A, B[:, :10])


@pytest.mark.parametrize("m", [8, 64, 96])
@pytest.mark.parametrize("n_rows", [1, 3, 16])
def test_code_agreement_byte_path_is_exact(n_rows, m):
    """A few uint8 query rows take the 8-codes-per-word path (up to 64 codes the words
    added column by column): exact equal-code counts, for every byte value (0 and 255
    included) and non-contiguous inputs."""
    rng = np.random.default_rng(n_rows)
    B = rng.integers(0, 256, (500, m)).astype(np.uint8)
    B[:, :8] = rng.integers(0, 2, (500, 8)) * 255  # codes 0 and 255
    A = B[rng.choice(500, n_rows)].copy()
    A[:, ::3] = rng.integers(0, 256, (n_rows, len(range(0, m, 3))))
    brute = (A[:, None, :] == B[None]).sum(axis=2) / float(m)
    S = code_agreement(A, B)
    assert S.dtype == np.float32 and S.shape == (n_rows, 500)
    np.testing.assert_array_equal(S, brute.astype(np.float32))
    np.testing.assert_array_equal(code_agreement(A, B[::2]), S[:, ::2])
    assert np.all(code_agreement(B[:1], B[:1]) == 1.0)


def test_hamming_distance_matches_unpacked_bits():
    rng = np.random.default_rng(3)
    for nbytes in (5, 16):
        A = rng.integers(0, 256, (40, nbytes), dtype=np.uint8)
        B = rng.integers(0, 256, (30, nbytes), dtype=np.uint8)
        bits_a, bits_b = np.unpackbits(A, axis=1), np.unpackbits(B, axis=1)
        brute = (bits_a[:, None, :] != bits_b[None]).sum(axis=2)
        np.testing.assert_array_equal(hamming_distance(A, B), brute)


def test_wta_match_candidates_finds_perturbed_descriptors():
    rng = np.random.default_rng(6)
    a = rng.random((200, 128), dtype=np.float32)
    perm = rng.permutation(200)
    b = a[perm] + 0.02 * rng.standard_normal((200, 128)).astype(np.float32)
    h = WTAHash(256, 2).fit(128)
    pairs, agree = wta_match_candidates(h.hash(a), h.hash(b), 0.6, mutual=True)
    assert pairs.dtype == np.int64 and agree.dtype == np.float32
    truth = np.argsort(perm)  # a[i] == b[truth[i]]
    correct = np.mean(pairs[:, 1] == truth[pairs[:, 0]])
    assert len(pairs) > 190 and correct > 0.99
    none, _ = wta_match_candidates(h.hash(a), h.hash(b[:0]), 0.5)
    assert none.shape == (0, 2)
