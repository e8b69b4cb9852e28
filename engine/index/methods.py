"""The search methods of a collection, as objects with one interface, and their registry.

A search method is any callable ``method(collection, image, top) -> list[Hit]``
(:class:`SearchMethod`): ``image`` is the query exactly as given to
:meth:`engine.collection.Collection.query` (path, array or
:class:`engine.features.Features`), so a method may use its own features. The built-in
methods use the collection's :class:`~engine.index.searcher.Searcher`
(``collection.searcher``):

``hybrid`` (default, :class:`HybridSearch`)
    ``vocabulary`` scores, then the best ``VERIFY_TOP`` hits are checked for the same
    object or place (:func:`engine.index.verify.ranking_check`: ratio-test
    correspondences, a homography or an epipolar geometry); the query is expanded with
    the verified hits (the best ``EXPANSION_POOL`` hits also score by how alike they
    are to those), and verified hits are ranked first
    (:func:`engine.index.verify.hybrid_scores`). Best on typical photo folders
    (objects, places, near-duplicates); see ``tests/benchmarks/quality.py``.
``vocabulary`` (:class:`PyramidSearch`)
    Vocabulary-guided pyramid match with idf bin weights, L1-normalised (thesis ch. 4;
    the scoring of Nistér & Stewénius): category / object similarity, no geometry.
``uniform`` (:class:`UniformSearch`)
    Normalised uniform-bin pyramid match (thesis Eq. 3.12) on PCA-SIFT.
``wta`` (:class:`WTASearch`)
    Always candidate-based: candidates from the densified-WTA hash of the tf-idf bag of
    words (fused with the hyperplane hash and the inverted file), scored exactly by the
    ``vocabulary`` score.
``learned``
    Not built in: a higher layer provides it (:mod:`engine.workflows.feedback` registers
    it with :func:`register_method` when imported). Until then it is listed but a query
    with it raises ``LookupError``.

Large collections are searched through candidates (:mod:`engine.index.candidates`);
hashed ``uniform`` scores its candidates by the exact vocabulary pyramid match first and
only the best ``UNIFORM_RERANK`` by the (4x larger) uniform pyramids (more than
``2 x UNIFORM_PRESCORE`` candidates are first narrowed to ``UNIFORM_PRESCORE`` by their
tf-idf cosine).

The registry (:data:`REGISTRY`) holds the built-in methods and those registered by
higher layers; a :class:`~engine.collection.Collection` is handed it (or another
mapping of methods) and never imports the modules that provide its methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from engine.index import candidates
from engine.index.encode import INDEX_PARTS, stored_query
from engine.index.selective import HE_SHORTLIST, blend, combined_scores, hamming_scores
from engine.index.verify import VERIFY_TOP, check_hits, hybrid_scores

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.encode import EncodedImages
    from engine.index.fit import SearchModels
    from engine.index.searcher import Searcher

__all__ = [
    "BUILTIN_METHODS",
    "EXPANSION_POOL",
    "EXPANSION_TOP",
    "EXPANSION_WEIGHT",
    "METHODS",
    "RECHECK_MAX",
    "REGISTRY",
    "UNIFORM_PRESCORE",
    "UNIFORM_RERANK",
    "Hit",
    "HybridSearch",
    "MethodRegistry",
    "PyramidSearch",
    "SearchMethod",
    "UniformSearch",
    "WTASearch",
    "available_methods",
    "expansion_scores",
    "register_method",
]

#: Method names of :meth:`engine.collection.Collection.query`, ``learned`` included
#: (provided by a higher layer).
METHODS = ("hybrid", "vocabulary", "uniform", "wta", "learned")
UNIFORM_RERANK = 40  # hashed ``uniform``: candidates re-scored by the uniform pyramid
UNIFORM_PRESCORE = 150  # ... chosen among this many by the vocabulary pyramid


@dataclass(frozen=True)
class Hit:
    """One search result: an image of the collection and its score (higher = more similar).

    Attributes
    ----------
    path : Path
    score : float
    probability : float or None
        Calibrated probability that it shows the same object or place as the query
        (:func:`engine.index.calibration.hit_probability`; set by ``Collection.query``,
        None for a method without a curve).
    label : str
        ``"same object or place"`` (passed the geometric check) or ``"looks alike"``
        (:func:`engine.index.calibration.hit_label`; empty when not set).
    """

    path: Path
    score: float
    probability: float | None = None
    label: str = ""


class SearchMethod(Protocol):
    """The interface of every search method."""

    def __call__(self, collection: Any, image: Any, top: int) -> list[Hit]:
        """The ``top`` images of ``collection`` most similar to ``image``, best first.

        Parameters
        ----------
        collection : engine.collection.Collection
        image : path, (H, W[, 3]) uint8 ndarray or Features
            The query as given to :meth:`~engine.collection.Collection.query`.
        top : int
            Number of hits, ``>= 1``.

        Returns
        -------
        list of Hit

        Raises
        ------
        LookupError
            The method's model is missing (the message says how to make it).
        """
        ...


class PyramidSearch:
    """The ``vocabulary`` method, and the steps every built-in method shares.

    A query is encoded with the collection's models; a collection of more than
    ``EXHAUSTIVE_LIMIT`` images (or a method that is ``always_hashed``) takes candidate
    rows from the hashes, the others are scored exhaustively; the scores (:meth:`score`)
    of the best rows are sorted (ties: lower row first) and re-ranked (:meth:`rerank`).
    """

    name = "vocabulary"
    #: the optional parts of the query's encoding that :meth:`score` reads
    parts: frozenset[str] = frozenset()
    #: candidates whatever the collection's size
    always_hashed = False
    #: whether the query's features are read even for a photo of the collection (whose
    #: stored row, :func:`~engine.index.encode.stored_query`, otherwise serves as the
    #: query's encoding when :attr:`parts` are stored ones)
    reads_features = False

    def __call__(self, collection: Any, image: Any, top: int) -> list[Hit]:
        """:class:`SearchMethod` on ``collection.searcher``."""
        searcher = collection.searcher
        models, data = searcher.ensure()
        row = None if self.reads_features else searcher.query_row(image)
        if row is not None:  # a photo of the collection: its stored row is the query
            feats = None
        else:
            feats, row = searcher.query_features(image)
        rows, scores = self.search(searcher, models, data, feats, int(top), query_row=row)
        paths = searcher.row_paths
        return [Hit(paths[r], float(s)) for r, s in zip(rows, scores, strict=True)]

    def search(
        self,
        searcher: Searcher,
        models: SearchModels,
        data: EncodedImages,
        feats: Features,
        top: int,
        *,
        query_row: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``data`` most similar to ``feats`` and their scores, best first.

        Parameters
        ----------
        searcher : Searcher
            Its caches and ``last_scored`` (the rows scored exactly) are used.
        models : SearchModels
        data : EncodedImages
            ``n`` rows.
        feats : Features
            The query's features.
        top : int
        query_row : int, optional
            The query's own row, when it is a photo of the collection.

        Returns
        -------
        rows : (k,) int64
        scores : (k,) float64
            ``k = min(top, rows scored)``.
        """
        rows, scores = self.shortlisted(searcher, models, data, feats, top, query_row=query_row)
        rows, scores = self.first_stage(searcher, models, data, feats, rows, scores)
        return self.rerank(searcher, data, feats, rows, scores, top, query_row=query_row)

    def first_stage(
        self,
        searcher: Searcher,
        models: SearchModels,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The shortlist ``rows`` and ``scores`` (best first) as :meth:`rerank` takes
        them: unchanged here."""
        return rows, scores

    def shortlisted(
        self,
        searcher: Searcher,
        models: SearchModels,
        data: EncodedImages,
        feats: Features | None,
        top: int,
        *,
        query_row: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The :meth:`shortlist` best rows for ``feats`` by :meth:`score` (candidates
        first in a large collection), best first (ties: lower row first), and their
        scores: what :meth:`rerank` receives. A query that is row ``query_row`` of the
        collection is encoded by its stored row (``feats`` not read) when :attr:`parts`
        are stored ones."""
        n = len(data.ids)
        n_cand = candidates.candidate_count(self.name, candidates.CANDIDATE_KIND, n, top)
        hashed = self.always_hashed or n > candidates.EXHAUSTIVE_LIMIT
        parts = set(self.parts)
        if hashed:
            parts |= {"wta", "rh"}
        if query_row is not None and parts <= INDEX_PARTS:
            q = stored_query(data, query_row)  # (what encoding its features gives)
        else:
            q = searcher.query_encoding(models, feats, frozenset(parts))
        if not hashed:
            rows = None
        else:
            # rank fusion of WTA codes, hyperplane bits and the bag-of-words inverted file
            # (bench_scale.py: recall@10 1.00 / 0.98 at 2 % scored on 10k generated views)
            rows = searcher.candidates(candidates.CANDIDATE_KIND, q, data, n_cand)
        searcher.last_scored = n if rows is None else int(rows.size)
        rows, scores = self.score(searcher, q, data, rows, top)
        all_rows = np.arange(n) if rows is None else rows
        k = min(self.shortlist(top), scores.size)
        best = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
        best = best[np.lexsort((all_rows[best], -scores[best]))]
        return all_rows[best], scores[best]

    def score(
        self,
        searcher: Searcher,
        q: EncodedImages,
        data: EncodedImages,
        rows: np.ndarray | None,
        top: int,
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Exact scores of ``rows`` (None: all) for the query ``q``: the rows scored
        (None: all) and their (c,) float64 scores. Here the idf-weighted vocabulary
        pyramid intersection."""
        qk, qv = q.vocab.row(0)
        return rows, data.vocab.score(qk, qv, rows)

    def shortlist(self, top: int) -> int:
        """How many of the best rows :meth:`rerank` receives."""
        return top

    def rerank(
        self,
        searcher: Searcher,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
        top: int,
        *,
        query_row: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The final ``top`` of the shortlist ``rows`` (sorted by ``scores``;
        ``query_row``: the query's own row, when it is in the collection)."""
        return rows[:top], scores[:top]


class WTASearch(PyramidSearch):
    """The ``wta`` method: always candidate-based, scored by the vocabulary pyramid."""

    name = "wta"
    always_hashed = True


class UniformSearch(PyramidSearch):
    """The ``uniform`` method: normalised uniform-bin pyramid match (thesis Eq. 3.12)."""

    name = "uniform"
    parts = frozenset({"uniform"})
    reads_features = True

    def score(
        self,
        searcher: Searcher,
        q: EncodedImages,
        data: EncodedImages,
        rows: np.ndarray | None,
        top: int,
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """``K(q, x) / sqrt(K(q, q) K(x, x))`` of the uniform pyramids; many candidates
        are first narrowed by cheaper exact scores (see the module docstring)."""
        n_re = max(UNIFORM_RERANK, 4 * top)
        if rows is not None and rows.size > n_re:
            # cascade: the uniform pyramids are ~4x larger than the vocabulary ones,
            # so the candidates are first scored by the exact vocabulary pyramid
            # match and only its best n_re rows by the uniform one (10k views:
            # recall@10 0.957 with 40, 0.958 with 50, 0.955 with 30 re-scored).
            # Many candidates (the hash score alone: 5 %) are first narrowed by the
            # tf-idf cosine of their bags of words (a third of the entries of the
            # vocabulary pyramid, one sparse mat-vec): 10k views, 500 candidates,
            # best 150 by cosine, best 40 of them by vocabulary: recall@10 0.957 as
            # without the cosine step, 1.3 ms less.
            n_pre = max(UNIFORM_PRESCORE, n_re)
            if rows.size > 2 * n_pre and q.bow.nnz:
                qb = q.bow[:1].toarray().ravel()
                cos = np.asarray(data.bow[rows] @ qb).ravel()
                rows = np.sort(rows[np.argpartition(-cos, n_pre - 1)[:n_pre]])
            qk, qv = q.vocab.row(0)
            pre = data.vocab.score(qk, qv, rows)
            keep = np.argpartition(-pre, n_re - 1)[:n_re]
            rows = np.sort(rows[keep])
        qk, qv = q.uniform.row(0)
        raw = data.uniform.score(qk, qv, rows)
        self_sim = searcher.uniform_self_similarity(data)
        sx = self_sim if rows is None else self_sim[rows]
        den = np.sqrt(sx * float(qv.sum()))
        return rows, np.where(den > 0, raw / np.where(den > 0, den, 1.0), 0.0)


#: The ``hybrid`` method's shortlist: the best rows by ``vocabulary`` score that the query
#: expansion re-scores.
EXPANSION_POOL = 100
#: Verified hits the query is expanded with (the best, the query's own photo left out).
EXPANSION_TOP = 5
#: Weight of the expansion score against the query's own ``vocabulary`` score.
EXPANSION_WEIGHT = 2.0
#: Hits the expansion moves into the best ``VERIFY_TOP`` that were not checked yet are
#: checked too, at most this many.
RECHECK_MAX = 5


class HybridSearch(PyramidSearch):
    """The ``hybrid`` method: ``vocabulary`` scores, the best ``VERIFY_TOP`` re-ranked by
    the same-object-or-place check (:func:`engine.index.verify.check_hits`), and a query
    expansion from the verified hits.

    Query expansion (Chum et al., ICCV 2007, "average query expansion"): the photos
    verified as the same object or place show it in other conditions; a hit that is like
    them is more likely to show it too. Each of the best ``EXPANSION_POOL`` hits gets
    an expansion score, the mean of its ``vocabulary`` scores against the best
    ``EXPANSION_TOP`` verified hits (their stored pyramids used as queries: no image is
    read), weighted by ``EXPANSION_WEIGHT`` (:func:`engine.index.verify.hybrid_scores`).
    The hits the expansion moves into the best ``VERIFY_TOP`` are checked too (at most
    ``RECHECK_MAX``, about 3 a query), so that a photo of the object found through the
    expansion is verified as such. Chosen on the mean mAP of the retrieval dev sets:
    0.678 -> 0.690 with the expansion (each set gained; weights 1, 2 and 3 gave 0.685,
    0.687, 0.687 in simulation), -> 0.696 in simulation with the second checks; checking
    the best 60 instead of 30 (:data:`~engine.index.verify.VERIFY_TOP`) -> 0.710; the
    best 50 by a Hamming-embedding score of the best 300 (:meth:`first_stage`) -> 0.733;
    the best 30 by it -> 0.731, for 13 ms less a query at 10,000 photos.
    """

    name = "hybrid"
    reads_features = True  # (its checks match them)

    def shortlist(self, top: int) -> int:
        return max(top, VERIFY_TOP, EXPANSION_POOL, HE_SHORTLIST)

    def first_stage(
        self,
        searcher: Searcher,
        models: SearchModels,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The shortlist ``rows`` (best first by ``vocabulary`` ``scores``) re-ordered by
        the Hamming-embedding scores of their best
        :data:`~engine.index.selective.HE_SHORTLIST` (Jégou, Douze & Schmid, ECCV 2008;
        :func:`engine.index.selective.combined_scores`), and the scores that order the
        hits left unverified: which hits are checked, and in which order the others come.

        Relevant photos often ranked 60-100 by the ``vocabulary`` score alone, beyond the
        checks. Chosen on the mean mAP of the retrieval dev sets
        (``tests/benchmarks/quality.py``): 0.710 -> 0.733 (UKBench 0.946 -> 0.956, N-S
        3.80 -> 3.84; Holidays 0.778 -> 0.831; ETH-80 0.406 -> 0.411), with 50 checks
        instead of 60 (since then 30: :data:`~engine.index.verify.VERIFY_TOP`). Without
        the checks, the order they follow ranks the sets at mAP 0.93 / 0.77 / 0.32 and the
        returned scores at 0.90 / 0.68 / 0.41, against the ``vocabulary`` score's 0.85 /
        0.59 / 0.40 (the Hamming embedding finds the same object or place, not the same
        category).
        """
        return combined_scores(models, searcher.store, data, feats, rows, scores)

    def rerank(
        self,
        searcher: Searcher,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
        top: int,
        *,
        query_row: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        scores = self.final_scores(searcher, data, feats, rows, scores, query_row=query_row)
        order = np.lexsort((rows, -scores))
        rows, scores = rows[order], scores[order]
        return rows[:top], scores[:top]

    def final_scores(
        self,
        searcher: Searcher,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
        *,
        query_row: int | None = None,
    ) -> np.ndarray:
        """The ``hybrid`` scores of the shortlist ``rows`` (``vocabulary`` ``scores``,
        best first): checked, expanded, and the hits the expansion moved into the best
        ``VERIFY_TOP`` checked too (at most ``RECHECK_MAX``)."""
        checks, by = self.expand(searcher, data, feats, rows, scores, query_row=query_row)
        expansion = expansion_scores(data, by, rows, query_row)
        if expansion is None:
            return hybrid_scores(scores, checks)
        full: list = [*checks, *[None] * (len(rows) - len(checks))]
        prelim = hybrid_scores(scores, full, expansion, EXPANSION_WEIGHT)
        best = np.lexsort((rows, -prelim))[:VERIFY_TOP]
        new = [int(j) for j in best if j >= len(checks)][:RECHECK_MAX]
        if new and len(feats) >= 4:
            checked = check_hits(feats, searcher.store, data.ids[rows[new]])
            for j, v in zip(new, checked, strict=True):
                full[j] = v
        return hybrid_scores(scores, full, expansion, EXPANSION_WEIGHT)

    def expand(
        self,
        searcher: Searcher,
        data: EncodedImages,
        feats: Features,
        rows: np.ndarray,
        scores: np.ndarray,
        *,
        query_row: int | None = None,
    ) -> tuple[list, np.ndarray]:
        """The checks of the first ``VERIFY_TOP`` of the shortlist ``rows`` and the rows
        the query is expanded with: the best ``EXPANSION_TOP`` verified ones, its own
        (``query_row``) left out."""
        checks = check_hits(feats, searcher.store, data.ids[rows])
        first = hybrid_scores(scores, checks)  # (without the expansion: to choose it)
        verified = [j for j, v in enumerate(checks) if v.verified and rows[j] != query_row]
        verified.sort(key=lambda j: (-first[j], rows[j]))
        return checks, rows[verified[:EXPANSION_TOP]]

    def score_of(
        self,
        searcher: Searcher,
        models: SearchModels,
        data: EncodedImages,
        feats: Features,
        row: int,
        *,
        query_row: int | None = None,
    ) -> float:
        """The score of collection row ``row`` for the query ``feats``: the one its
        search gives it, or, for a row beyond the shortlist, the one it would get were
        it checked (what "Why do they match?" shows)."""
        rows, scores = self.shortlisted(
            searcher, models, data, feats, EXPANSION_POOL, query_row=query_row
        )
        rows, scores = self.first_stage(searcher, models, data, feats, rows, scores)
        at = np.flatnonzero(rows == row)
        if at.size:
            final = self.final_scores(searcher, data, feats, rows, scores, query_row=query_row)
            return float(final[int(at[0])])
        _checks, by = self.expand(searcher, data, feats, rows, scores, query_row=query_row)
        q = searcher.query_encoding(models, feats, self.parts)
        one = np.array([row], np.int64)
        s = np.asarray(self.score(searcher, q, data, one, 1)[1], np.float64)
        h = hamming_scores(models, searcher.store, data, feats, one)
        if h is not None:  # (as if it were among the best HE_SHORTLIST)
            s = blend(s, h)
        check = check_hits(feats, searcher.store, data.ids[one])
        expansion = expansion_scores(data, by, one, query_row)
        return float(hybrid_scores(s, check, expansion, EXPANSION_WEIGHT)[0])


def expansion_scores(
    data: EncodedImages, by: np.ndarray, rows: np.ndarray, query_row: int | None = None
) -> np.ndarray | None:
    """The mean ``vocabulary`` score of ``rows`` against the rows ``by`` (their stored
    pyramids as queries): (len(rows),) float64, None when ``by`` is empty. The query's own
    row (``query_row``) scores 1: the expansion describes it, so it stays the best
    match of its own search (a hit the query was expanded with would otherwise count
    its likeness to itself)."""
    if len(by) == 0:
        return None
    total = np.zeros(len(rows))
    for v in by:
        vk, vv = data.vocab.row(int(v))
        total += data.vocab.score(vk, vv, rows)
    out = total / len(by)
    if query_row is not None:
        out[np.asarray(rows) == query_row] = 1.0
    return out


#: The methods every collection has.
BUILTIN_METHODS: dict[str, SearchMethod] = {
    m.name: m for m in (HybridSearch(), PyramidSearch(), UniformSearch(), WTASearch())
}


class MethodRegistry(Mapping[str, SearchMethod]):
    """Search methods by name: the built-in ones and those registered by higher layers
    (a registered method replaces a built-in one of the same name).

    Parameters
    ----------
    builtin : mapping of str to SearchMethod
    """

    def __init__(self, builtin: Mapping[str, SearchMethod]) -> None:
        self._builtin = dict(builtin)
        self._registered: dict[str, SearchMethod] = {}

    def register(self, name: str, fn: SearchMethod | Callable[..., list[Hit]]) -> None:
        """Add (or replace) method ``name``."""
        self._registered[name] = fn

    def unregister(self, name: str) -> None:
        """Remove registered method ``name`` (a built-in one stays)."""
        self._registered.pop(name, None)

    def registered(self) -> tuple[str, ...]:
        """Names of the registered methods, in registration order."""
        return tuple(self._registered)

    def __getitem__(self, name: str) -> SearchMethod:
        if name in self._registered:
            return self._registered[name]
        return self._builtin[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._builtin
        yield from (name for name in self._registered if name not in self._builtin)

    def __len__(self) -> int:
        return len(self._builtin.keys() | self._registered.keys())


#: The default methods of every :class:`~engine.collection.Collection`.
REGISTRY = MethodRegistry(BUILTIN_METHODS)


def register_method(name: str, fn: SearchMethod | Callable[..., list[Hit]]) -> None:
    """Add a search method to :data:`REGISTRY`: ``fn(collection, image, top) -> list[Hit]``.

    ``image`` is the query exactly as given to :meth:`Collection.query
    <engine.collection.Collection.query>` (path, array or
    :class:`engine.features.Features`), so a method may use its own features.

    :mod:`engine.workflows.feedback` registers ``"learned"`` this way when it is
    imported; ``fn`` should raise ``LookupError`` with a helpful message when its model
    is missing.

    Parameters
    ----------
    name : str
    fn : SearchMethod
    """
    REGISTRY.register(name, fn)


def available_methods() -> tuple[str, ...]:
    """Names accepted by :meth:`Collection.query <engine.collection.Collection.query>`:
    :data:`METHODS`, then the other registered ones."""
    return METHODS + tuple(name for name in REGISTRY.registered() if name not in METHODS)
