"""Hamming embedding (engine.kernels.hamming): signatures and the selective match kernel."""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels.hamming import HammingEmbedding, selective_scores

# EncodedImages' fields in order (the last: the signatures)
_FIELDS = ("ids", "vocab", "uniform", "bow", "wta", "rh", "words", "words_indptr", "sigs")


def _data(seed: int = 0, n: int = 600, d: int = 128, n_words: int = 12):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d), dtype=np.float32)
    words = rng.integers(0, n_words, (n, 2))
    return X, words, [n_words, n_words]


def _add_photos(folder, demo_folder, lo: int, hi: int):
    """Copy the demo photos ``lo:hi`` (sorted by name) into ``folder`` (made if need be)."""
    import shutil

    folder.mkdir(exist_ok=True)
    for p in sorted(demo_folder.glob("*.jpg"))[lo:hi]:
        shutil.copy(p, folder)
    return folder


def _assert_rows_embedded(searcher, models, data) -> None:
    """Every row's stored words and signatures are those its stored descriptors give."""
    from engine.index.encode import he_words

    for r, i in enumerate(data.ids):
        X, _ = searcher.store.stacked_descriptors([int(i)])
        words = he_words(models.vocab, X)
        assert np.array_equal(data.row_words(r), words)
        a, b = data.words_indptr[r], data.words_indptr[r + 1]
        assert np.array_equal(data.sigs[a:b], models.he.signatures(X, words))


def _update(col) -> None:
    """Bring the open collection ``col`` up to date with its folder."""
    for _ in col.update():
        pass


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
    from engine.collection import Collection
    from engine.index.keys import MODELS_STATE

    folder = _add_photos(tmp_path / "photos", demo_folder, 0, 16)
    with Collection.open(folder, tmp_path / "idx") as col:
        _update(col)
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
        _update(col)
        models2, data2 = col.searcher.ensure()
        assert models2.he is not None
        assert np.array_equal(np.asarray(data2.ids), np.asarray(data.ids))
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        assert reader.searcher.ensure()[0].he is not None  # (saved)
        assert [h.path for h in reader.query(folder / "brick.jpg", top=3)] == [
            h.path for h in fresh[:3]
        ]


def test_the_index_stores_the_words_and_a_query_uses_them(tmp_path, demo_folder, monkeypatch):
    """Every stored descriptor's word is in the search data (the descent of the trees at
    indexing, as a query would find it), kept through a removal and the segments'
    merge; the Hamming scores are the same from the stored words as from a descent, and
    a query descends the trees for none of them (only for rows without stored words)."""
    from engine.collection import Collection
    from engine.index import encode, selective
    from engine.index.encode import EncodedImages

    folder = _add_photos(tmp_path / "photos", demo_folder, 0, 12)
    with Collection.open(folder, tmp_path / "idx") as col:
        _update(col)
        _add_photos(folder, demo_folder, 12, 16)  # a second segment
        _update(col)
        (folder / "brick.jpg").unlink()  # a deletion: rows leave the loaded data
        _update(col)
    with Collection.open(folder, tmp_path / "idx", readonly=True) as col:
        searcher = col.searcher
        models, data = searcher.ensure()
        assert isinstance(data, EncodedImages) and data.words is not None
        assert data.words.dtype == np.uint16 and len(data.ids) == 15
        assert data.sigs is not None and data.sigs.dtype == np.uint64
        assert data.sigs.shape == data.words.shape
        _assert_rows_embedded(searcher, models, data)
        feats = searcher.query_features(folder / "camera.jpg")[0]
        rows = np.arange(len(data.ids))
        descents, reads = [], []
        real = encode.he_words
        read = type(searcher.store).stacked_descriptors

        def spy(m, X):
            descents.append(len(X))
            return real(m, X)

        def spy_read(self, ids):
            reads.append(len(ids))
            return read(self, ids)

        monkeypatch.setattr(selective, "he_words", spy)
        monkeypatch.setattr(type(searcher.store), "stacked_descriptors", spy_read)
        stored = selective.hamming_scores(models, searcher.store, data, feats, rows)
        assert descents == [len(feats)]  # the query's own descriptors only
        assert reads == []  # (the hits' words and signatures: from the search data)
        bare = EncodedImages(data.ids, data.vocab, None, data.bow, data.wta, data.rh)
        descents.clear()
        again = selective.hamming_scores(models, searcher.store, bare, feats, rows)
        assert sum(descents) > len(feats)  # (the rows' words found by a descent)
        assert sum(reads) == len(rows)  # (and their descriptors read)
        assert np.array_equal(stored, again) and stored.max() > 0
        unsigned = EncodedImages(*[getattr(data, f) for f in _FIELDS[:-1]])
        assert unsigned.sigs is None
        descents.clear()
        words_only = selective.hamming_scores(models, searcher.store, unsigned, feats, rows[::2])
        assert descents == [len(feats)]  # (stored words, signatures computed)
        assert np.array_equal(words_only, stored[::2])


def test_rows_written_before_the_words_have_none_beside_rows_with_them(tmp_path, demo_folder):
    """Search data of a segment written before the words were stored (no ``he.*``
    arrays) concatenated with a newer one, then subset: the older rows have no words,
    the newer keep theirs, and the state round trip keeps both."""
    from engine.collection import Collection
    from engine.index.encode import EncodedImages

    folder = _add_photos(tmp_path / "photos", demo_folder, 0, 6)
    with Collection.open(folder, tmp_path / "idx") as col:
        _update(col)
        _, data = col.searcher.ensure()
    n = len(data.ids)
    st = data.to_state()
    old = {k: v for k, v in st.items() if not k.startswith("he.")}
    older = EncodedImages.from_state(old)
    assert older.words is None and older.row_words(0) is None
    both = EncodedImages.concat([older, EncodedImages.from_state(st)])
    assert both.words_indptr.shape == (2 * n + 1,)
    assert all(both.row_words(r) is None for r in range(n))
    for r in range(n):
        mine = data.row_words(r)
        assert (mine is None) == (both.row_words(n + r) is None)
        assert mine is None or np.array_equal(both.row_words(n + r), mine)
    pick = np.array([n + 2, 1, n])
    sub = EncodedImages.from_state(both.subset(pick).to_state())
    assert sub.row_words(1) is None
    assert np.array_equal(sub.row_words(0), data.row_words(2))
    assert np.array_equal(sub.row_words(2), data.row_words(0))


@pytest.mark.parametrize("left_out", ["he.", "he.sigs"])
def test_an_index_from_before_the_words_or_signatures_gets_them_at_its_next_update(
    tmp_path, demo_folder, monkeypatch, left_out
):
    """Segments written without the descriptors' words and signatures, or with the
    words only (older indexes): a reader searches as before (the words found by a
    descent, the signatures computed from the descriptors), the next update rewrites the
    segments with every row's words and signatures, and the hits and their scores stay
    the same."""
    from engine.collection import Collection
    from engine.index import segments
    from engine.index.encode import EncodedImages

    folder = _add_photos(tmp_path / "photos", demo_folder, 0, 10)
    real = EncodedImages.to_state

    def older(self, **kw):
        return {k: v for k, v in real(self, **kw).items() if not k.startswith(left_out)}

    with monkeypatch.context() as m:
        m.setattr(EncodedImages, "to_state", older)
        with Collection.open(folder, tmp_path / "idx") as col:
            _update(col)
            _add_photos(folder, demo_folder, 10, 14)  # a second old segment
            _update(col)
    query = folder / "camera.jpg"
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        assert segments.holds_uniform(reader.searcher.store.snapshot())
        data = reader.searcher.ensure()[1]
        assert data.sigs is None and (data.words is None) == (left_out == "he.")
        before = [(h.path, h.score) for h in reader.query(query, method="hybrid")]
    with Collection.open(folder, tmp_path / "idx") as col:
        _update(col)
        assert not segments.holds_uniform(col.searcher.store.snapshot())
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        models, data = reader.searcher.ensure()
        assert data.sigs is not None and len(data.ids) == 14
        _assert_rows_embedded(reader.searcher, models, data)
        after = [(h.path, h.score) for h in reader.query(query, method="hybrid")]
    assert after == before and len(after) > 1


def test_the_search_data_is_stored_compact(tmp_path, demo_folder):
    """The vocabulary pyramids' values are stored as float16 (encoded at that precision:
    the reader holds what was encoded), their columns and the bags' indices as uint16;
    a reader of the stored segment scores as the writer did."""
    from engine.collection import Collection
    from engine.index.encode import EncodedImages

    folder = _add_photos(tmp_path / "photos", demo_folder, 0, 8)
    query = sorted(folder.glob("*.jpg"))[0]
    with Collection.open(folder, tmp_path / "idx") as col:
        _update(col)
        _, data = col.searcher.ensure()
        written = [(h.path, h.score) for h in col.query(query, method="vocabulary")]
    st = data.to_state()
    assert st["vocab.values"].dtype == np.float16
    assert st["vocab.cols"].dtype == np.uint16 and st["bow.indices"].dtype == np.uint16
    assert st["he.sigs"].dtype == np.uint64
    # encoded at float16 precision: nothing is lost by storing them so
    assert np.array_equal(st["vocab.values"].astype(np.float32), data.vocab.values)
    back = EncodedImages.from_state(st)
    assert back.vocab.values.dtype == np.float32
    assert np.array_equal(back.vocab.values, data.vocab.values)
    assert np.array_equal(back.bow.indices, data.bow.indices)
    assert np.array_equal(back.sigs, data.sigs)
    with Collection.open(folder, tmp_path / "idx", readonly=True) as reader:
        got = [(h.path, h.score) for h in reader.query(query, method="vocabulary")]
    assert got == written
