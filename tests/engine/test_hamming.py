"""Hamming embedding (engine.kernels.hamming): signatures and the selective match kernel."""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels.hamming import HammingEmbedding, selective_scores


def _data(seed: int = 0, n: int = 600, d: int = 128, n_words: int = 12):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d), dtype=np.float32)
    words = rng.integers(0, n_words, (n, 2))
    return X, words, [n_words, n_words]


def test_signatures_split_every_word_at_its_medians():
    X, words, n_words = _data()
    he = HammingEmbedding().fit(X, words, n_words)
    sig = he.signatures(X, words)
    assert sig.shape == (len(X), 2) and sig.dtype == np.uint64
    col = np.ascontiguousarray(sig[:, 0])
    bits = np.unpackbits(col.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    for w in range(n_words[0]):
        inside = words[:, 0] == w
        # about half of a word's descriptors lie above each median
        assert abs(bits[inside].mean() - 0.5) < 0.1


def test_state_round_trip():
    X, words, n_words = _data(1)
    he = HammingEmbedding(random_state=3).fit(X, words, n_words)
    again = HammingEmbedding.from_state(he.to_state())
    assert np.array_equal(he.projection_, again.projection_)
    # thresholds are stored as float16: signatures agree on almost every bit
    a, b = he.signatures(X, words), again.signatures(X, words)
    assert np.bitwise_count(a ^ b).mean() < 1.0


def test_bits_other_than_64_are_refused():
    with pytest.raises(ValueError):
        HammingEmbedding(n_bits=32)


def _brute(qw, qs, w, s, owner, n_sets, idf, max_distance, sigma):
    out = np.zeros(n_sets)
    for t in range(qw.shape[1]):
        votes: dict = {}
        for i in range(len(qw)):
            for j in range(len(w)):
                if qw[i, t] != w[j, t]:
                    continue
                h = int(np.bitwise_count(qs[i, t] ^ s[j, t]))
                if h <= max_distance:
                    votes[i, j] = np.exp(-(h * h) / sigma**2) * idf[t][qw[i, t]]
        per_q: dict = {}
        per_x: dict = {}
        for i, j in votes:
            per_q[i, owner[j]] = per_q.get((i, owner[j]), 0) + 1
            per_x[j] = per_x.get(j, 0) + 1
        raw = np.zeros(n_sets)
        for (i, j), v in votes.items():
            raw[owner[j]] += v / np.sqrt(per_q[i, owner[j]] * per_x[j])
        qn = np.sqrt(idf[t][qw[:, t]].sum())
        xn = np.sqrt(np.bincount(owner, idf[t][w[:, t]], minlength=n_sets))
        out += raw / (qn * xn)
    return out / qw.shape[1]


def test_selective_scores_match_a_brute_force_sum():
    rng = np.random.default_rng(2)
    n_words = 5
    qw = rng.integers(0, n_words, (30, 2))
    w = rng.integers(0, n_words, (80, 2))
    qs = rng.integers(0, 2**63, (30, 2), dtype=np.uint64)
    s = rng.integers(0, 2**63, (80, 2), dtype=np.uint64)
    s[:10] = qs[:10]  # some exact matches
    owner = np.sort(rng.integers(0, 4, 80))
    idf = [rng.random(n_words) + 0.5, rng.random(n_words) + 0.5]
    got = selective_scores(qw, qs, w, s, owner, 4, idf, max_distance=30, sigma=14.0)
    want = _brute(qw, qs, w, s, owner, 4, idf, 30, 14.0)
    assert np.allclose(got, want)


def test_a_set_scores_about_one_against_itself_and_little_against_noise():
    X, words, n_words = _data(4, n=400)
    he = HammingEmbedding().fit(X, words, n_words)
    sig = he.signatures(X, words)
    owner = np.repeat([0, 1], 200)
    idf = [np.ones(n_words[0]), np.ones(n_words[1])]
    q = slice(0, 200)  # the query is set 0
    got = selective_scores(words[q], sig[q], words, sig, owner, 2, idf)
    assert got[0] > 0.5 and got[1] < 0.5 * got[0]
    empty = selective_scores(words[:0], sig[:0], words, sig, owner, 2, idf)
    assert np.array_equal(empty, np.zeros(2))


def test_the_embedded_rows_kept_are_the_most_recently_used(monkeypatch):
    from engine.index import selective

    monkeypatch.setattr(selective, "HE_CACHE_DESCRIPTORS", 10)
    cache = selective._RowCache()

    def row(n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((n, 2), np.int32), np.zeros((n, 2), np.uint64)

    cache.put({1: row(4), 2: row(4)})
    assert set(cache.get([1])) == {1}  # (1 is now the most recent)
    cache.put({3: row(4)})  # 12 > 10: the least recently used (2) goes
    assert set(cache.rows) == {1, 3} and cache.size == 8
    cache.put({4: row(11)})  # more than the whole limit: nothing older stays
    assert cache.size <= 10 and 1 not in cache.rows


def test_an_index_from_before_the_embedding_gets_it_at_its_next_update(tmp_path, demo_folder):
    """Models saved without the Hamming embedding (an older index): a reader searches as
    before; the next update fits it into the models, and the search data is the same."""
    import shutil

    from engine.collection import Collection
    from engine.index.keys import MODELS_STATE

    folder = tmp_path / "photos"
    folder.mkdir()
    for p in sorted(demo_folder.glob("*.jpg"))[:16]:
        shutil.copy(p, folder)
    with Collection.open(folder, tmp_path / "idx") as col:
        for _ in col.update():
            pass
        store = col.searcher.store
        models, data = col.searcher.ensure()
        assert models.he is not None
        fresh = col.query(folder / "brick.jpg", top=5)
        old = {k: v for k, v in models.to_state().items() if not k.startswith("he.")}
        store.save_states({MODELS_STATE: old})
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        assert reader.searcher.ensure()[0].he is None
        assert reader.query(folder / "brick.jpg", top=5)[0].path == fresh[0].path
    with Collection.open(folder, tmp_path / "idx") as col:
        for _ in col.update():
            pass
        models2, data2 = col.searcher.ensure()
        assert models2.he is not None
        assert np.array_equal(np.asarray(data2.ids), np.asarray(data.ids))
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        assert reader.searcher.ensure()[0].he is not None  # (saved)
        assert [h.path for h in reader.query(folder / "brick.jpg", top=3)] == [
            h.path for h in fresh[:3]
        ]
