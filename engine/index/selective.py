"""The ``hybrid`` method's second first-stage score: Hamming-embedding matching of the
query against the stored descriptors of its best hits.

The ``vocabulary`` score (a pyramid match over visual-word counts) ranks many photos of
the same place below unrelated ones that share common words; which hits are checked
geometrically (:data:`engine.index.verify.VERIFY_TOP`) depends on that order. The best
``HE_SHORTLIST`` hits by ``vocabulary`` score are therefore also scored by the selective
match kernel of :mod:`engine.kernels.hamming` (Jégou, Douze & Schmid, ECCV 2008: a
descriptor pair counts only when it falls in the same word -- one of the 1,000 nodes
``HE_LEVEL`` levels above the leaves of each vocabulary tree -- and its 64-bit
signatures agree): the checks go to the best by that score ``h``, and the hits they do
not verify are ordered by ``(s + HE_WEIGHT h) / (1 + HE_WEIGHT)``, ``s`` the
``vocabulary`` score (:func:`combined_scores`).

The words and signatures of every stored descriptor are stored in the search data
(:attr:`~engine.index.encode.EncodedImages.words` and ``sigs``, found when the rows are
encoded: 20 bytes a descriptor) and gathered for the hits (:func:`embedded_rows`; a
mapped one-shot reader gathers them from the mapped segments). Data that does not hold
them -- an index written before them, until its next update -- has the hits'
descriptors read from the feature chunks and their signatures computed at query time
(about 100,000 descriptors for 300 photos, some 0.2 ms of CPU a photo; with the words
found again by a descent of the two trees, 0.4 ms), then kept for the next queries on
the same search data (at most ``HE_CACHE_DESCRIPTORS``).

Chosen on the mean mAP of the three retrieval dev sets (``tests/benchmarks/quality.py``;
simulated with the same checks): see :class:`engine.index.methods.HybridSearch`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from engine.index.encode import HE_LEVEL, he_words
from engine.kernels.embedding import level_key
from engine.kernels.hamming import selective_scores

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.encode import EncodedImages
    from engine.index.fit import SearchModels
    from engine.index.store import IndexStore

__all__ = [
    "HE_CACHE_DESCRIPTORS",
    "HE_MAX_DISTANCE",
    "HE_SHORTLIST",
    "HE_SIGMA",
    "HE_WEIGHT",
    "blend",
    "combined_scores",
    "embed",
    "embedded_rows",
    "hamming_scores",
    "word_idf",
]

#: Hits (the best by ``vocabulary`` score) scored by the Hamming embedding too. Simulated
#: on the retrieval dev sets (mean mAP of ``hybrid``, the same checks): 0.7288 / 0.7326
#: with 200 / 300 (ordered by (s + 8 h) / 9 throughout: 0.7196 / 0.7270 / 0.7282 / 0.7301 /
#: 0.7306 with 100 / 150 / 200 / 300 / 400).
HE_SHORTLIST = 300
#: Weight of the Hamming-embedding score against the ``vocabulary`` score in the order of
#: the hits that are not verified: simulated mean mAP 0.7319 / 0.7326 / 0.7325 / 0.7323
#: with 1.5 / 2 / 3 / 4. Ordering the checks by (s + 8 h) / 9 as well gave 0.7269 (ETH-80
#: 0.403, below the 0.406 without the embedding).
HE_WEIGHT = 2.0
#: Signatures differing in more bits do not match; votes weigh ``exp(-h^2 / HE_SIGMA^2)``.
#: Simulated with (s + 8 h) / 9 throughout: 20 / 22 / 24 bits 0.7296 / 0.7301 / 0.7300;
#: sigma 12 / 14 / 18: 0.7304 / 0.7301 / 0.7290.
HE_MAX_DISTANCE = 22
HE_SIGMA = 14.0
#: Descriptors whose words and signatures are kept between the queries of one version of
#: a collection's search data (24 bytes each: 48 MB).
HE_CACHE_DESCRIPTORS = 2_000_000


class _RowCache:
    """Embedded rows, ``{store id: (words, signatures)}``, the least recently used
    forgotten beyond ``HE_CACHE_DESCRIPTORS`` descriptors (queries of several threads may
    use it at once)."""

    def __init__(self) -> None:
        self.rows: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.size = 0
        self.lock = threading.Lock()

    def get(self, ids: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """The rows of ``ids`` it holds (now the most recently used)."""
        with self.lock:
            found = {i: self.rows[i] for i in ids if i in self.rows}
            for i in found:
                self.rows.move_to_end(i)
        return found

    def put(self, fresh: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Keep ``fresh`` rows, forgetting the least recently used beyond the limit."""
        with self.lock:
            for i, value in fresh.items():
                if i not in self.rows:
                    self.rows[i] = value
                    self.size += len(value[0])
            while self.size > HE_CACHE_DESCRIPTORS and self.rows:
                _, old = self.rows.popitem(last=False)
                self.size -= len(old[0])


# id of the search data -> (weak reference to it, the rows embedded so far); an entry
# goes with its search data
_cache: dict[int, tuple[weakref.ref, _RowCache]] = {}


def _rows_cache(data: EncodedImages) -> _RowCache:
    """The embedded rows kept for the search data ``data``."""
    key = id(data)
    entry = _cache.get(key)
    if entry is None or entry[0]() is not data:
        try:
            entry = (weakref.ref(data), _RowCache())
        except TypeError:  # (search data that takes no weak reference: nothing kept)
            return _RowCache()
        _cache[key] = entry
        weakref.finalize(data, _cache.pop, key, None)
    return entry[1]


def word_idf(models: SearchModels) -> list[np.ndarray]:
    """The idf of every word of the Hamming embedding (the level-``HE_LEVEL`` nodes of each
    tree), read from the models' per-bin idf (``idf_unknown`` for a node unseen at fit
    time): one (n_words,) float64 array per tree."""
    out = []
    for t, tree in enumerate(models.vocab.binnings_):
        keys = level_key(t, HE_LEVEL, np.arange(tree.sizes[HE_LEVEL], dtype=np.int64))
        pos = np.minimum(np.searchsorted(models.idf_keys, keys), max(len(models.idf_keys) - 1, 0))
        found = models.idf_keys[pos] == keys if len(models.idf_keys) else np.zeros(len(keys), bool)
        out.append(np.where(found, models.idf[pos], models.idf_unknown).astype(np.float64))
    return out


def embed(models: SearchModels, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Words (M, T) int64 and signatures (M, T) uint64 of descriptors ``X`` (M, D) in the
    ``T`` trees of ``models`` (``models.he`` must be set)."""
    words = he_words(models.vocab, X)
    return words, models.he.signatures(X, words)


def embedded_rows(
    models: SearchModels, store: IndexStore, data: EncodedImages, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Words, signatures and owners (positions in ``rows``) of the stored descriptors of
    the collection rows ``rows``, stacked: gathered from the search data when it holds
    them (:attr:`~engine.index.encode.EncodedImages.sigs`), else read and embedded
    (:func:`embed`) on first use, then kept for the next queries on the same search data
    (the most recently used, at most ``HE_CACHE_DESCRIPTORS`` descriptors)."""
    held = _held_rows(data, np.asarray(rows, np.int64))
    if held is not None:
        return held
    cache = _rows_cache(data)
    ids = [int(i) for i in data.ids[rows]]
    known = cache.get(ids)
    todo = list(dict.fromkeys(i for i in ids if i not in known))
    if todo:
        X, indptr = store.stacked_descriptors(todo)
        words = _stored_words(models, data, dict(zip(ids, rows, strict=True)), todo, X, indptr)
        sigs = models.he.signatures(X, words)
        for k, i in enumerate(todo):  # (copies: a row forgotten frees its memory)
            a, b = indptr[k], indptr[k + 1]
            known[i] = (words[a:b].copy(), sigs[a:b].copy())
        cache.put({i: known[i] for i in todo})
    parts = [known[i] for i in ids]
    owner = np.repeat(np.arange(len(ids)), [len(w) for w, _ in parts])
    t = len(models.vocab.binnings_)
    words = np.concatenate([w for w, _ in parts]) if parts else np.zeros((0, t), np.int32)
    sigs = np.concatenate([g for _, g in parts]) if parts else np.zeros((0, t), np.uint64)
    return words, sigs, owner


def _held_rows(
    data: EncodedImages, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`embedded_rows` gathered from the words and signatures ``data`` holds
    (:meth:`~engine.index.encode.EncodedImages.held_words`, or those of mapped segments:
    :class:`~engine.index.mapped_words.SegmentedWords`); None when it holds none."""
    held = getattr(data, "held_words", None)
    return None if held is None else held(rows)


def _stored_words(
    models: SearchModels,
    data: EncodedImages,
    position: dict[int, int],
    todo: list[int],
    X: np.ndarray,
    indptr: np.ndarray,
) -> np.ndarray:
    """(M, T) int32 words of the descriptors ``X`` of the images ``todo`` (store ids,
    their descriptors ``X[indptr[k]:indptr[k + 1]]``, their rows ``position[id]`` in
    ``data``): as the search data stores them, or by a descent of the trees for rows
    that hold none (written before they were stored, or a reader that does not load
    them: :class:`~engine.index.mapped.SegmentedImages`)."""
    t = len(models.vocab.binnings_)
    words = np.empty((len(X), t), np.int32)
    missing = np.zeros(len(X), bool)
    row_words = getattr(data, "row_words", None)
    for k, i in enumerate(todo):
        a, b = int(indptr[k]), int(indptr[k + 1])
        got = None if row_words is None else row_words(int(position[i]))
        if got is not None and len(got) == b - a:
            words[a:b] = got
        else:
            missing[a:b] = True
    sizes = np.array([tree.sizes[HE_LEVEL] for tree in models.vocab.binnings_])
    missing |= (words >= sizes).any(axis=1)  # (not of these trees: found again)
    if missing.any():
        words[missing] = he_words(models.vocab, X[missing])
    return words


def hamming_scores(
    models: SearchModels, store: IndexStore, data: EncodedImages, feats: Features,
    rows: np.ndarray,
) -> np.ndarray | None:  # fmt: skip
    """Hamming-embedding scores (:func:`engine.kernels.hamming.selective_scores`) of the
    query ``feats`` against the collection rows ``rows`` (their descriptors read from
    ``store``): (len(rows),) float64, or None when the models have no Hamming embedding
    (saved by an older version) or the query no descriptor."""
    if models.he is None or len(feats) == 0 or len(rows) == 0:
        return None
    words, sigs, owner = embedded_rows(models, store, data, rows)
    q_words, q_sigs = embed(models, feats.descriptors)
    return selective_scores(
        q_words, q_sigs, words, sigs, owner, len(rows), word_idf(models),
        max_distance=HE_MAX_DISTANCE, sigma=HE_SIGMA,
    )  # fmt: skip


def blend(scores: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``(s + HE_WEIGHT h) / (1 + HE_WEIGHT)``: the score of a hit the checks do not
    verify, from its ``vocabulary`` score ``s`` and Hamming-embedding score ``h``
    (arrays of one shape, float64)."""
    return (np.asarray(scores, np.float64) + HE_WEIGHT * np.asarray(h, np.float64)) / (
        1.0 + HE_WEIGHT
    )


def combined_scores(
    models: SearchModels, store: IndexStore, data: EncodedImages, feats: Features,
    rows: np.ndarray, scores: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The shortlist ``rows`` (sorted by their ``vocabulary`` ``scores``) re-ordered for
    the checks, and the scores that order the hits the checks do not verify.

    The first ``HE_SHORTLIST`` rows get their Hamming-embedding score ``h``
    (:func:`hamming_scores`; 0 for the others): the rows are ordered by ``h``, then by
    ``vocabulary`` score (ties: lower row first), so the checks go to the best by ``h``
    (simulated mean mAP 0.7326 against 0.7301 for the best by ``(s + 8 h) / 9``); their
    scores mix both (:func:`blend`). Unchanged without a Hamming
    embedding.
    """
    k = min(HE_SHORTLIST, len(rows))
    h = hamming_scores(models, store, data, feats, rows[:k])
    if h is None:
        return rows, scores
    he = np.zeros(len(rows))
    he[:k] = h
    out = blend(scores, he)
    order = np.lexsort((rows, -np.asarray(scores, np.float64), -he))
    return rows[order], out[order]
