"""engine.index.search (exact intersection scoring, pyramid histograms),
engine.index.candidates (fused candidates) and engine.index.verify (correspondences)."""

import numpy as np
import pytest

from engine.index.candidates import WTA_FUSION_WEIGHT, bit_agreement, fused_candidates
from engine.index.search import IntersectionIndex, fit_key_idf, histograms_from_codes
from engine.index.verify import descriptor_matches, verify_pair
from engine.kernels.pyramid import PyramidMatch


def _random_rows(rng, n, n_keys=300, max_len=40):
    indptr, keys, vals = [0], [], []
    for _ in range(n):
        k = np.sort(rng.choice(n_keys, rng.integers(0, max_len), replace=False))
        keys.append(k)
        vals.append(rng.random(k.size).astype(np.float32))
        indptr.append(indptr[-1] + k.size)
    return np.array(indptr), np.concatenate(keys).astype(np.int64), np.concatenate(vals)


def _dense(indptr, keys, vals, n_keys=300):
    D = np.zeros((len(indptr) - 1, n_keys))
    for i in range(len(indptr) - 1):
        D[i, keys[indptr[i] : indptr[i + 1]]] = vals[indptr[i] : indptr[i + 1]]
    return D


@pytest.mark.parametrize("max_heavy", [0, 5, 2048])
def test_intersection_matches_bruteforce(max_heavy):
    rng = np.random.default_rng(0)
    indptr, keys, vals = _random_rows(rng, 120, n_keys=60)
    ix = IntersectionIndex(indptr, keys, vals, max_heavy=max_heavy)
    D = _dense(indptr, keys, vals, 60)
    qk = np.array([1, 5, 7, 30, 59], np.int64)
    qv = rng.random(5).astype(np.float32)
    q = np.zeros(60)
    q[qk] = qv
    want = np.minimum(D, q).sum(axis=1)
    np.testing.assert_allclose(ix.score(qk, qv), want, rtol=1e-5)
    rows = np.array([3, 100, 7])
    np.testing.assert_allclose(ix.score(qk, qv, rows), want[rows], rtol=1e-5)
    np.testing.assert_allclose(ix.self_similarity(), D.sum(axis=1), rtol=1e-5)
    K = ix.pairwise()
    np.testing.assert_allclose(K[4], np.minimum(D[4], D).sum(axis=1), rtol=1e-5)
    sub = ix.subset(np.array([5, 2]))
    np.testing.assert_allclose(sub.score(qk, qv), want[[5, 2]], rtol=1e-5)
    cat = IntersectionIndex.concat([sub, ix.subset(np.array([9]))])
    np.testing.assert_allclose(cat.score(qk, qv), want[[5, 2, 9]], rtol=1e-5)
    assert ix.score(np.zeros(0, np.int64), np.zeros(0, np.float32)).sum() == 0


def test_concat_merges_the_parts_columns():
    rng = np.random.default_rng(3)
    parts = [IntersectionIndex(*_random_rows(rng, n, n_keys=80)) for n in (7, 1, 12)]
    empty = np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    parts.insert(2, IntersectionIndex(*empty))  # a part without rows
    plain = IntersectionIndex.concat(parts)  # no part has columns: computed on demand
    assert plain.stored_columns is None
    for p in parts:
        p.columns()
    merged = IntersectionIndex.concat(parts)
    assert merged.stored_columns is not None
    uk, cols = merged.columns()
    want_uk, want_cols = plain.columns()
    assert np.array_equal(uk, want_uk) and np.array_equal(cols, want_cols)
    assert np.array_equal(merged.keys, plain.keys)  # gathered from the columns
    assert np.array_equal(merged.indptr, plain.indptr)
    qk, qv = np.array([0, 9, 40, 79], np.int64), rng.random(4).astype(np.float32)
    np.testing.assert_allclose(merged.score(qk, qv), plain.score(qk, qv), rtol=1e-6)
    # a subset keeps the columns (possibly with unused ones) and scores the same
    sub = merged.subset(np.array([19, 0, 8]))
    assert sub.stored_columns is not None
    np.testing.assert_allclose(sub.score(qk, qv), plain.score(qk, qv)[[19, 0, 8]], rtol=1e-6)


@pytest.mark.parametrize("compact", [False, True], ids=["keys", "columns"])
def test_subset_takes_the_rows_in_order(compact):
    """A subset holds exactly the rows asked for, in that order: all but a few rows (a
    few runs of consecutive rows, copied as spans), a shuffled selection (gathered entry
    by entry), a single row, repeated rows and none."""
    rng = np.random.default_rng(11)
    ix = IntersectionIndex(*_random_rows(rng, 150, n_keys=500))
    if compact:
        ix = IntersectionIndex.concat([ix])
        ix.columns()
        ix = IntersectionIndex(ix.indptr, None, ix.values, columns=ix.columns())
    selections = [
        np.delete(np.arange(150), [0, 17, 18, 90]),
        rng.permutation(150)[:100],
        np.array([42]),
        np.array([5, 5, 6, 7, 7]),
        np.zeros(0, np.int64),
    ]
    for rows in selections:
        sub = ix.subset(rows)
        assert sub.indptr.tolist() == np.r_[0, np.cumsum(np.diff(ix.indptr)[rows])].tolist()
        for i, r in enumerate(rows):
            a, b = ix.indptr[r], ix.indptr[r + 1]
            c, d = sub.indptr[i], sub.indptr[i + 1]
            np.testing.assert_array_equal(sub.values[c:d], ix.values[a:b])
            np.testing.assert_array_equal(sub.row_keys(slice(c, d)), ix.row_keys(slice(a, b)))


@pytest.mark.parametrize("big_at", [0, 1])
def test_concat_of_a_large_part_and_a_few_rows(big_at, monkeypatch):
    """An incremental update (a whole collection plus a few new rows) inserts the new
    rows' keys into the large part's columns instead of sorting all keys again: the same
    columns as computed from scratch, with new keys below, among and above the large
    part's, with keys it already has, and with a part that brings no new key."""
    rng = np.random.default_rng(7 + big_at)
    big = IntersectionIndex(*_random_rows(rng, 300, n_keys=4000, max_len=60))
    small = [
        IntersectionIndex(np.array([0, 4]), np.array([-5, 10, 2500, 99_999]), np.ones(4)),
        IntersectionIndex(*_random_rows(rng, 2, n_keys=4000, max_len=60)),
        IntersectionIndex(np.array([0, 1]), big.keys[:1].copy(), np.ones(1, np.float32)),
    ]
    parts = [*small[:big_at], big, *small[big_at:]]
    plain = IntersectionIndex.concat(parts)  # no columns: from scratch
    for part in parts:
        part.columns()
    import engine.index.search as es

    calls = []
    fast = es._merged_columns
    monkeypatch.setattr(es, "_merged_columns", lambda *a: calls.append(a[1]) or fast(*a))
    merged = IntersectionIndex.concat(parts)
    assert calls == [big_at]  # the large part's keys were not sorted again
    uk, cols = merged.columns()
    want_uk, want_cols = plain.columns()
    assert np.array_equal(uk, want_uk)
    assert cols.dtype == np.int32 and np.array_equal(cols, want_cols)
    # nothing new: the large part's columns are taken as they are
    again = IntersectionIndex.concat([big, small[2]])
    assert np.array_equal(again.columns()[0], big.columns()[0])
    assert np.array_equal(again.columns()[1][: big.columns()[1].size], big.columns()[1])


@pytest.mark.parametrize("bins", ["uniform", "vocabulary"])
def test_pm_histograms_reproduce_the_pyramid_match(bins):
    rng = np.random.default_rng(1)
    sets = [rng.normal(size=(rng.integers(5, 60), 8)).astype(np.float32) for _ in range(12)]
    pm = PyramidMatch(bins, normalize="none", branching=4, depth=3).fit(sets)
    codes = pm.encode(sets)
    ix = IntersectionIndex(*histograms_from_codes(codes, weighting="pm"))
    np.testing.assert_allclose(ix.pairwise(), pm.kernel(codes), rtol=1e-4, atol=1e-6)


def test_idf_histograms_are_l1_normalised():
    rng = np.random.default_rng(2)
    centres = 3 * rng.normal(size=(6, 8))
    sets = [(c + rng.normal(size=(30, 8))).astype(np.float32) for c in centres]
    pm = PyramidMatch("vocabulary", branching=3, depth=3).fit(sets)
    codes = pm.encode(sets)
    keys, idf = fit_key_idf(codes)
    assert np.all(np.diff(keys) > 0) and np.all(idf >= 0)
    # the root bin is in every set: idf 0
    assert np.isclose(idf.min(), 0.0)
    indptr, k, v = histograms_from_codes(codes, weighting="idf", idf=idf, idf_keys=keys)
    assert np.all(np.diff(indptr) > 0)
    sums = np.bincount(np.repeat(np.arange(6), np.diff(indptr)), weights=v)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    K = IntersectionIndex(indptr, k, v).pairwise()
    np.testing.assert_allclose(np.diag(K), 1.0, rtol=1e-5)
    assert K.max() <= 1 + 1e-5


def test_descriptor_matches_bruteforce_ratio():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(50, 16)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = np.concatenate([a[:30] + 0.02 * rng.normal(size=(30, 16)), rng.normal(size=(40, 16))])
    b = (b / np.linalg.norm(b, axis=1, keepdims=True)).astype(np.float32)
    pairs = descriptor_matches(a, b, ratio=0.8)
    d = np.linalg.norm(a[:, None] - b[None], axis=2)
    srt = np.sort(d, axis=1)
    want = np.flatnonzero(srt[:, 0] < 0.8 * srt[:, 1])
    np.testing.assert_array_equal(pairs[:, 0], want)
    np.testing.assert_array_equal(pairs[:, 1], d[want].argmin(axis=1))
    assert set(range(30)) <= set(pairs[:, 0].tolist())
    assert descriptor_matches(a[:0], b).shape == (0, 2)


def test_verify_pair_finds_a_warped_copy():
    rng = np.random.default_rng(4)
    n = 80
    desc = rng.normal(size=(n, 32)).astype(np.float32)
    desc /= np.linalg.norm(desc, axis=1, keepdims=True)
    xy = rng.uniform(0, 400, (n, 2)).astype(np.float32)
    h = np.array([[0.9, 0.1, 15.0], [-0.1, 0.9, 5.0], [0.0, 0.0, 1.0]])
    xy2 = (np.c_[xy, np.ones(n)] @ h.T)[:, :2].astype(np.float32)
    perm = rng.permutation(n)
    v = verify_pair(desc, xy, desc[perm], xy2[perm], image_size=(400, 400))
    assert v.n_inliers >= 0.95 * n and v.inliers.sum() >= 0.95 * n
    other = rng.uniform(0, 400, (n, 2)).astype(np.float32)
    assert verify_pair(desc, xy, desc[perm], other, image_size=(400, 400)).n_inliers == 0


@pytest.mark.parametrize("dense_max", [1 << 20, 0])
def test_row_scoring_paths_match_bruteforce(monkeypatch, dense_max):
    """Few-row scoring is exact on both paths: the reusable dense buffer (vocabulary
    pyramids) and the filter + sorted lookup used when bins are too many (uniform)."""
    import engine.index.search as search

    monkeypatch.setattr(search, "DENSE_QUERY_MAX", dense_max)
    rng = np.random.default_rng(3)
    indptr, keys, vals = _random_rows(rng, 80, n_keys=60)
    ix = IntersectionIndex(indptr, keys, vals)
    D = _dense(indptr, keys, vals, 60)
    for _ in range(3):  # the buffers must be clean between queries
        qk = np.sort(rng.choice(60, 9, replace=False)).astype(np.int64)
        qv = rng.random(9).astype(np.float32)
        q = np.zeros(60)
        q[qk] = qv
        rows = rng.choice(80, 7, replace=False)
        want = np.minimum(D[rows], q).sum(axis=1)
        np.testing.assert_allclose(ix.score(qk, qv, rows), want, rtol=1e-5)


def _hash_score(q, wta, rh):
    from engine.hashing.wta import code_agreement

    def z(x):
        x = np.asarray(x, np.float64)
        return (x - x.mean()) / x.std()

    return z(bit_agreement(q.rh, rh)) + WTA_FUSION_WEIGHT * z(code_agreement(q.wta, wta)[0])


def test_fused_candidates_hash_score_is_standardised_sum():
    """Without postings the candidates are the best rows by z(bit agreement) + w *
    z(WTA agreement): a row agreeing on every bit comes first, a row agreeing on every
    WTA code is proposed, and the selection equals the full ranking's head."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    n, m = 200, 64
    wta = rng.integers(0, 4, (n, m)).astype(np.uint8)
    rh = rng.integers(0, 256, (n, 16)).astype(np.uint8)
    q = SimpleNamespace(wta=wta[:1].copy(), rh=rh[:1].copy())
    q.wta[0] = wta[17]  # row 17 agrees perfectly on the WTA codes
    q.rh[0] = rh[42]  # row 42 agrees perfectly on the hyperplane bits
    data = SimpleNamespace(ids=np.arange(n), wta=wta, rh=rh)
    cand = fused_candidates(q, data, 20)
    assert cand.shape == (20,) and np.unique(cand).size == 20
    assert cand[0] == 42 and 17 in cand.tolist()
    score = _hash_score(q, wta, rh)
    want = np.lexsort((np.arange(n), -score))[:20]
    np.testing.assert_array_equal(cand, want)
    # a row perfect on both beats a row perfect on the bits alone
    q.wta[0] = wta[42]
    assert fused_candidates(q, data, 5)[0] == 42


def test_fused_candidates_with_inverted_file_matches_full_ranking():
    """With the bag-of-words postings a second ranking joins the hash score: its best
    row is proposed too, and the partial selection equals the fusion of full rankings."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    rng = np.random.default_rng(1)
    n, m, nw = 300, 64, 50
    wta = rng.integers(0, 4, (n, m)).astype(np.uint8)
    rh = rng.integers(0, 256, (n, 16)).astype(np.uint8)
    bow = sp.random(n, nw, density=0.1, random_state=2, format="csr", dtype=np.float32)
    norms = np.sqrt(np.asarray(bow.multiply(bow).sum(axis=1)).ravel())
    bow = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ bow, dtype=np.float32)
    q = SimpleNamespace(wta=wta[:1].copy(), rh=rh[:1].copy(), bow=bow[7] * 1.0)
    q.wta[0] = wta[42]
    q.rh[0] = rh[42]
    data = SimpleNamespace(ids=np.arange(n), wta=wta, rh=rh, bow=bow)
    cand = fused_candidates(q, data, 30, bow.T.tocsr())
    assert cand.shape == (30,) and np.unique(cand).size == 30
    assert {7, 42} == set(cand[:2].tolist())
    # reference: full stable rankings, fused rank = min over rankings (interleaved)
    ags = [_hash_score(q, wta, rh), (q.bow @ bow.T).toarray().ravel()]
    fused = np.full(n, np.iinfo(np.int64).max)
    for j, a in enumerate(ags):
        rank = np.empty(n, np.int64)
        rank[np.argsort(-a, kind="stable")] = np.arange(n)
        fused = np.minimum(fused, rank * 2 + (1 - j))
    want = np.argsort(fused, kind="stable")[:30]
    # the same set up to ties at the selection boundary of a ranking
    assert np.intersect1d(cand, want).size >= 28
    # a one-shot query scores the bags directly (no inverted file built): same rows
    np.testing.assert_array_equal(fused_candidates(q, data, 30, True), cand)


def test_fused_candidates_of_a_large_collection_read_prefixes_of_the_codes(monkeypatch):
    """Above FUSED_PREFIX_ABOVE rows (with the inverted file) the hash score reads the
    first FUSED_RH_BITS bits and FUSED_WTA_CODES codes: the candidates are those of the
    same data cut to those prefixes; below it, all of them."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    import engine.index.candidates as cand

    rng = np.random.default_rng(4)
    n, nw = 400, 60
    wta = rng.integers(0, 4, (n, 32)).astype(np.uint8)
    rh = rng.integers(0, 256, (n, 32)).astype(np.uint8)
    bow = sp.random(n, nw, density=0.1, random_state=5, format="csr", dtype=np.float32)
    q = SimpleNamespace(wta=wta[9:10] ^ 1, rh=rh[9:10].copy(), bow=bow[9] * 1.0)
    q.rh[0, :8] = rh[11, :8]  # row 11 agrees on the first 64 bits, row 9 on the rest
    data = SimpleNamespace(ids=np.arange(n), wta=wta, rh=rh, bow=bow)
    cut = SimpleNamespace(ids=data.ids, wta=wta[:, :16].copy(), rh=rh[:, :8].copy(), bow=bow)
    qcut = SimpleNamespace(wta=q.wta[:, :16].copy(), rh=q.rh[:, :8].copy(), bow=q.bow)
    post = bow.T.tocsr()
    whole = fused_candidates(q, data, 40, post)
    monkeypatch.setattr(cand, "FUSED_RH_BITS", 64)
    monkeypatch.setattr(cand, "FUSED_WTA_CODES", 16)
    assert np.array_equal(fused_candidates(q, data, 40, post), whole)  # (n below the limit)
    monkeypatch.setattr(cand, "FUSED_PREFIX_ABOVE", n - 1)
    cache = {}
    got = fused_candidates(q, data, 40, post, cache)
    assert np.array_equal(got, fused_candidates(qcut, cut, 40, post))
    assert not np.array_equal(got, whole)
    assert np.array_equal(fused_candidates(q, data, 40, post, cache), got)  # (kept copies)
    assert [a.shape[1] for a in next(iter(cache.values()))] == [8, 16]
    # without the inverted file the hash score is the whole ranking: all of the codes
    hashes_only = fused_candidates(q, data, 40)
    assert not np.array_equal(hashes_only, fused_candidates(qcut, cut, 40))
    monkeypatch.setattr(cand, "FUSED_PREFIX_ABOVE", 10**9)
    assert np.array_equal(hashes_only, fused_candidates(q, data, 40))


def test_fused_candidates_of_a_large_collection_read_the_heaviest_words(monkeypatch):
    """Above FUSED_PREFIX_ABOVE rows the inverted file reads the postings of the query's
    FUSED_QUERY_WORDS heaviest words: the candidates are those of the query cut to them,
    through the inverted file and through the bags directly (a one-shot query)."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    import engine.index.candidates as cand

    rng = np.random.default_rng(6)
    n, nw = 300, 80
    bow = sp.random(n, nw, density=0.3, random_state=7, format="csr", dtype=np.float32)
    wta = rng.integers(0, 4, (n, 16)).astype(np.uint8)
    rh = rng.integers(0, 256, (n, 8)).astype(np.uint8)
    qbow = sp.csr_matrix(rng.random((1, nw)).astype(np.float32))
    q = SimpleNamespace(wta=wta[:1].copy(), rh=rh[:1].copy(), bow=qbow)
    heavy = np.sort(np.argsort(-qbow.toarray()[0])[:10])
    cut = qbow.toarray()
    cut[0, np.setdiff1d(np.arange(nw), heavy)] = 0
    qcut = SimpleNamespace(wta=q.wta, rh=q.rh, bow=sp.csr_matrix(cut))
    data = SimpleNamespace(ids=np.arange(n), wta=wta, rh=rh, bow=bow)
    post = bow.T.tocsr()
    monkeypatch.setattr(cand, "FUSED_QUERY_WORDS", 10)
    whole = fused_candidates(q, data, 30, post)
    assert not np.array_equal(whole, fused_candidates(qcut, data, 30, post))
    monkeypatch.setattr(cand, "FUSED_PREFIX_ABOVE", n - 1)
    monkeypatch.setattr(cand, "FUSED_RH_BITS", 64)  # (all of the bits and codes)
    monkeypatch.setattr(cand, "FUSED_WTA_CODES", 16)
    got = fused_candidates(q, data, 30, post)
    assert np.array_equal(got, fused_candidates(qcut, data, 30, post))
    assert np.array_equal(fused_candidates(q, data, 30, True), got)


def test_lookup_directory_matches_binary_search():
    """Above _DIRECTORY_MIN_KEYS columns the key -> column lookup goes through the
    bucket directory: same columns as a binary search, hits and misses, and exact
    scores through it."""
    import engine.index.search as es

    rng = np.random.default_rng(3)
    K = es._DIRECTORY_MIN_KEYS + 5000
    uk = np.unique(rng.integers(-(2**63), 2**63 - 1, K + 10, dtype=np.int64))[:K]
    uk[0], uk[-1] = -(2**63), 2**63 - 1  # the extreme keys are found too
    n, per = 40, 300
    cols = np.sort(rng.choice(K, (n, per)), axis=1)
    cols = [np.unique(c) for c in cols]
    indptr = np.concatenate([[0], np.cumsum([c.size for c in cols])])
    cols = np.concatenate(cols).astype(np.int32)
    vals = rng.random(cols.size).astype(np.float32)
    ix = es.IntersectionIndex(indptr, None, vals, columns=(uk, cols))
    q = np.concatenate([uk[rng.choice(K, 500, replace=False)], uk[[0, K - 1]]])
    q = np.unique(np.concatenate([q, rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64)]))
    pos, hit = ix.lookup(q)
    assert ix._directory is not None
    want = np.minimum(np.searchsorted(uk, q), K - 1)
    np.testing.assert_array_equal(hit, uk[want] == q)
    np.testing.assert_array_equal(pos[hit], want[hit])
    assert hit.sum() >= 502
    qv = rng.random(q.size).astype(np.float32)
    rows = np.array([3, 17, 29])
    dense_q = dict(zip(q.tolist(), qv.tolist(), strict=True))
    for r, got in zip(rows, ix.score(q, qv, rows), strict=True):
        s = slice(indptr[r], indptr[r + 1])
        exp = sum(
            min(v, dense_q.get(int(k), 0.0)) for k, v in zip(uk[cols[s]], vals[s], strict=True)
        )
        assert got == pytest.approx(exp, rel=1e-5)


def test_compact_index_without_keys():
    """keys=None with columns: scoring, rows, self-similarity and subsets are identical
    to the index holding its keys, and keys materialise only on demand."""
    rng = np.random.default_rng(4)
    indptr, keys, vals = _random_rows(rng, 60, n_keys=80)
    full = IntersectionIndex(indptr, keys, vals)
    compact = IntersectionIndex(indptr, None, vals, columns=full.columns())
    assert not compact.holds_keys
    D = _dense(indptr, keys, vals, 80)
    np.testing.assert_allclose(compact.self_similarity(), D.sum(axis=1), rtol=1e-5)
    for i in (0, 5, 59):
        np.testing.assert_array_equal(compact.row(i)[0], full.row(i)[0])
    rows = np.array([3, 1, 40, 7])
    qk, qv = full.row(11)
    np.testing.assert_allclose(compact.score(qk, qv, rows), full.score(qk, qv, rows))
    sub = compact.subset(rows)
    assert not sub.holds_keys
    np.testing.assert_allclose(sub.score(qk, qv), full.subset(rows).score(qk, qv))
    assert not compact.holds_keys  # nothing above needed the keys
    np.testing.assert_array_equal(compact.keys, keys)
    np.testing.assert_allclose(compact.score(qk, qv), full.score(qk, qv))
    with pytest.raises(ValueError, match="keys may be None"):
        IntersectionIndex(indptr, None, vals)


@pytest.mark.parametrize("n_bytes", [32, 5, 64, 256])
def test_bit_agreement_matches_unpacked_bits(n_bytes):

    rng = np.random.default_rng(n_bytes)
    codes = rng.integers(0, 256, (50, n_bytes)).astype(np.uint8)
    q = codes[3:4].copy()
    q[0, 0] ^= 7
    want = 1.0 - np.unpackbits(codes ^ q, axis=1).sum(axis=1) / (8.0 * n_bytes)
    np.testing.assert_allclose(bit_agreement(q, codes), want)
    np.testing.assert_allclose(bit_agreement(q, codes[::2]), want[::2])  # not contiguous
    assert bit_agreement(q, codes)[3] == 1.0 - 3 / (8.0 * n_bytes)
    # (64 and 256 bytes: the row sums fold 8 popcounts into 16-bit lanes; the extremes)
    ones = np.full((2, n_bytes), 255, np.uint8)
    np.testing.assert_array_equal(bit_agreement(np.zeros((1, n_bytes), np.uint8), ones), 0.0)
    np.testing.assert_array_equal(bit_agreement(ones[:1], ones), 1.0)


def test_unique_values_is_np_unique():
    from engine.core.arrays import unique_values

    rng = np.random.default_rng(4)
    for x in (
        rng.integers(-(2**62), 2**62, 5000),
        rng.integers(0, 7, (40, 30)),
        np.zeros(0, np.int64),
        np.array([5, 5, 5]),
    ):
        got = unique_values(x)
        assert np.array_equal(got, np.unique(x)) and got.dtype == x.dtype


@pytest.mark.parametrize("dense_max", [None, 0])
def test_rows_scored_by_key_equal_the_exact_sum(monkeypatch, dense_max):
    """Candidate rows of an index without columns (the uniform pyramids) are matched to
    the query by key through the filter table: exact where query keys share a slot
    (thousands of random 64-bit keys, negative ones too), for keys the query lacks and
    for empty rows, the table clean for the next query -- and equal to the columns path
    (``dense_max=0``: its filter table too, not the dense query vector)."""
    import engine.index.search as es

    if dense_max is not None:
        monkeypatch.setattr(es, "DENSE_QUERY_MAX", dense_max)
    rng = np.random.default_rng(5)
    pool = np.unique(rng.integers(-(2**63), 2**63 - 1, 100_000, dtype=np.int64))
    n = 40
    sets = [np.sort(rng.choice(pool, rng.integers(1, 3000), replace=False)) for _ in range(n)]
    sets[7] = sets[7][:0]
    indptr = np.concatenate([[0], np.cumsum([k.size for k in sets])])
    keys = np.concatenate(sets)
    vals = rng.random(keys.size).astype(np.float32)
    by_key = IntersectionIndex(indptr, keys, vals)
    by_col = IntersectionIndex(
        indptr, None, vals, columns=IntersectionIndex(indptr, keys, vals).columns()
    )
    rows = np.array([3, 7, 0, 39, 3, 20])
    for r in (3, 20):  # half of a row's keys, random keys of the pool, keys of no row
        q = np.unique(
            np.concatenate(
                [
                    sets[r][::2],
                    rng.choice(pool, 8000, replace=False),
                    rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64),
                ]
            )
        )
        assert np.unique(q & (es._FILTER_SLOTS - 1)).size < q.size  # shared slots
        qv = rng.random(q.size).astype(np.float32)
        qd = dict(zip(q.tolist(), qv.tolist(), strict=True))
        want = [
            sum(
                min(v, qd.get(k, 0.0))
                for k, v in zip(
                    sets[i].tolist(), vals[indptr[i] : indptr[i + 1]].tolist(), strict=True
                )
            )
            for i in rows
        ]
        got = by_key.score(q, qv, rows)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert got[1] == 0.0 and got[0] > 0 and got[0] == got[4]
        np.testing.assert_allclose(by_col.score(q, qv, rows), got, rtol=1e-6)
    assert by_key.stored_columns is None  # scored without any collection-wide table
    assert by_key.score(q[:0], qv[:0], rows).sum() == 0
