"""Learned similarity for a collection: supervision, learning and the ``learned`` method.

Supervision comes from one of two places:

* **labels** — images in the same subfolder of the collection are similar
  (:func:`labels_from_subfolders`), the usual set-up of a photo library sorted by hand;
* **relevance marks** — a person's thumbs up / down on search results
  (:class:`Mark`, stored in the index by :func:`add_marks`), or a feedback file
  (:func:`read_feedback_file`); both in :mod:`engine.workflows.marks`, whose docstring
  gives the file format.

Every model compares images as L2-normalised tf-idf bags of visual words of the *dense*
categorisation features (:func:`engine.cluster.category_features`, 400 RootSIFT windows
per image, cached in the index by :class:`engine.cluster.CategoryChannel`) quantised by a
4096-word vocabulary tree fitted on the supervised images (:class:`DenseBagOfWords`).
That is the representation ``tests/benchmarks/bench_learn.py`` validated (OASIS >= 1.3x
the cosine's precision@10 on Caltech-101); the index's keypoint bags
(:meth:`engine.collection.Collection.bow_matrix`, 300 SIFT keypoints per image) are not
used. The vocabulary, idf and feature settings are stored with the model
(:class:`LearnedSimilarity`, :mod:`engine.workflows.learned_model`).

:func:`learn` fits one of three models and stores it in the index:

``oasis``
    :class:`engine.learn.OASIS` — bilinear similarity, from triplets; ``C = 0.1``, the
    paper's margin 1, iterate averaging, early stopping on held-out images.
``boostssc`` / ``boostpro``
    :class:`engine.learn.BoostedSSC` / :class:`engine.learn.BoostPro` — weighted
    Hamming embeddings, on the bags reduced to 64 dimensions by a truncated SVD
    (the boosting needs dense, low-dimensional input; see :func:`engine.learn.reduce_dimension`).

Importing this module registers the ``learned`` search method with
:func:`engine.index.methods.register_method` (a collection never imports this module: a
program that searches with ``learned`` imports it).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
import weakref
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from engine.cluster import CATEGORY_FEATURES as _CATEGORY_FEATURES
from engine.cluster import collection_rows, vocab_sample
from engine.core.progress import run_to_end
from engine.index import keys
from engine.learn.oasis import OASIS
from engine.learn.ssc import BoostedSSC, BoostPro, reduce_dimension
from engine.learn.supervision import LearnProgress, pairs_from_labels
from engine.workflows.learned_model import BAG_BATCH, DenseBagOfWords, LearnedSimilarity
from engine.workflows.marks import (
    Mark,
    add_marks,
    clear_marks,
    load_marks,
    read_feedback_file,
    triplets_from_marks,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.cluster import CategoryChannel
    from engine.collection import Collection
    from engine.index.methods import Hit

__all__ = [
    "LEARN_FEATURES",
    "LEARN_METHODS",
    "DenseBagOfWords",
    "LearnSummary",
    "LearnedSimilarity",
    "Mark",
    "add_marks",
    "clear_marks",
    "labels_from_subfolders",
    "learn",
    "learned_query",
    "load_marks",
    "load_model",
    "read_feedback_file",
]

LEARN_METHODS = ("oasis", "boostssc", "boostpro")
#: The stored model (:data:`engine.index.keys.LEARNED_MODEL_STATE`).
MODEL_STATE = keys.LEARNED_MODEL_STATE
#: Key-value entry naming the stored model (a new token per :func:`learn`), so that the
#: model and the collection's bags can stay in memory between queries
#: (:data:`engine.index.keys.LEARNED_MODEL_TOKEN`).
MODEL_TOKEN = keys.LEARNED_MODEL_TOKEN
SVD_DIM = 64
#: Dense features of the learned similarity: the grouping's windows, each described at
#: full resolution (``octaves=False``; see :func:`engine.cluster.category_features`).
#: Cached in the index apart from the grouping's (namespace ``learn``).
LEARN_FEATURES: dict[str, Any] = {**_CATEGORY_FEATURES, "octaves": False}
#: Vocabulary of the learned similarity (``bench_learn.py`` defaults): branching ``k``,
#: levels counting the root (``k**(levels - 1)`` = 4096 words), descriptors sampled to fit.
DENSE_VOCAB = {"branching": 16, "levels": 4, "sample": 200_000}
#: With fewer supervised images the vocabulary and idf are fitted on all images.
MIN_VOCAB_IMAGES = 50
#: OASIS settings validated by ``bench_learn.py`` on tf-idf bags (see :func:`learn`).
OASIS_C = 0.1
OASIS_MARGIN = 1.0
OASIS_NEGATIVES = 10
#: Missing dense features of at most FEW_IMAGES images are computed in this process
#: rather than in worker processes.
FEW_IMAGES = 16


@dataclass(frozen=True)
class LearnSummary:
    """What :func:`learn` did."""

    method: str
    source: str  # "subfolders" | "marks"
    n_images: int
    n_constraints: int  # triplets or pairs used
    score_before: float
    score_after: float
    score_name: str
    seconds: float
    #: expected calibration error of the model's probabilities on held-aside photos or
    #: marks (nan when it has no calibration curve)
    calibration_error: float = float("nan")


# --------------------------------------------------------------------------- supervision
def labels_from_subfolders(collection: Collection) -> np.ndarray:
    """Class of each image (rows of :meth:`Collection.paths`) = its parent folder.

    Images directly in the collection folder get ``-1`` (unlabeled).
    """
    return _labels_of(collection.paths(), collection.folder)


# --------------------------------------------------------------------------- cache
@dataclass
class _Cached:
    token: str
    model: LearnedSimilarity
    generation: int = -1
    bags: sp.csr_matrix | None = None
    paths: list[Path] | None = None


_CACHE: weakref.WeakKeyDictionary[Any, _Cached] = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


def _cached(collection: Collection) -> _Cached | None:
    """The cache entry of the collection's current model (None if stale or absent)."""
    token = collection.store.get_kv(MODEL_TOKEN)
    token = token.decode() if isinstance(token, bytes) else (token or "")
    with _CACHE_LOCK:
        entry = _CACHE.get(collection)
    if entry is not None and token and entry.token == token:
        if collection.store.has_state(MODEL_STATE):
            return entry
    return None


def load_model(collection: Collection) -> LearnedSimilarity:
    """The collection's learned model (kept in memory until it is relearned).

    Raises
    ------
    LookupError
        No model yet, or one stored by an older version; the message says how to make
        one.
    """
    entry = _cached(collection)
    if entry is not None:
        return entry.model
    how = (
        f"'simile learn {collection.folder} --from-subfolders' (or --feedback FILE), "
        "or mark results with thumbs up / down in the app and choose 'Learn from my marks'"
    )
    if not collection.store.has_state(MODEL_STATE):
        raise LookupError(f"no learned similarity model for this collection yet: run {how}")
    token = collection.store.get_kv(MODEL_TOKEN)
    token = token.decode() if isinstance(token, bytes) else (token or "")
    try:
        model = LearnedSimilarity.from_state(collection.store.load_state(MODEL_STATE))
    except LookupError:
        raise LookupError(
            "the learned similarity of this collection was made by an older version of "
            f"Simile and must be learned again: run {how}"
        ) from None
    if token:
        with _CACHE_LOCK:
            _CACHE[collection] = _Cached(token, model)
    return model


# --------------------------------------------------------------------------- learning
def _rows(collection: Collection) -> tuple[list[Path], list[str]]:
    """The collection's usable paths, sorted, and their content hashes (the keys of the
    dense-feature cache). Sorted by path rather than in catalogue order (the order in which
    an index's workers finished), so that learning samples the same triplets, and fits
    the same model, whichever run built the index."""
    paths, hashes = collection_rows(collection)
    order = sorted(range(len(paths)), key=lambda k: str(paths[k]))
    return [paths[k] for k in order], [hashes[k] for k in order]


def _labels_of(paths: Sequence[Path], folder: Path) -> np.ndarray:
    """Class of each path = its parent folder; ``-1`` for images directly in ``folder``
    (compared with symlinks resolved: the scan stores resolved paths, while the collection
    may have been opened through a symlink, e.g. macOS ``/tmp``)."""
    roots = {Path(folder), Path(os.path.realpath(folder))}
    names: dict[str, int] = {}
    labels = []
    for p in paths:
        parent = str(p.parent)
        labels.append(-1 if Path(parent) in roots else names.setdefault(parent, len(names)))
    return np.asarray(labels, np.int64)


def _stopped(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def _descriptors(channel: CategoryChannel, h: str) -> np.ndarray:
    """(m, 128) cached dense descriptors of content hash ``h`` (empty if absent)."""
    if not channel.has(h):
        return np.zeros((0, 128), np.float32)
    return channel.raw(h)[0]


def _jobs_for(n_missing: int, jobs: int | None) -> int | None:
    # A few images are quicker in this process than through a pool of spawned workers.
    return 1 if jobs is None and n_missing <= FEW_IMAGES else jobs


def learn(
    collection: Collection,
    *,
    method: str = "oasis",
    source: str = "subfolders",
    marks: Sequence[Mark] | None = None,
    cancel: threading.Event | None = None,
    jobs: int | None = None,
    random_state: int = 0,
) -> Generator[LearnProgress, None, LearnSummary | None]:
    """Fit a learned similarity on the collection and store it in the index.

    A generator: yields :class:`engine.learn.LearnProgress`, returns a
    :class:`LearnSummary` (``None`` when ``cancel`` was set: learning stops between
    yields and no model is stored; dense features already computed stay cached).

    Stages (:func:`_dense_features`, :func:`_bags`, :func:`_fit_oasis` /
    :func:`_fit_boosted`; the supervision comes from :func:`_supervision`):

    1. the dense categorisation features of every image
       (:class:`engine.cluster.CategoryChannel`; cached in the index, so only new images
       cost anything);
    2. a vocabulary tree (branching 16, 4 levels counting the root: up to 4096 words) on
       at most 200,000 descriptors sampled (seeded) from the supervised images — the
       labelled ones, or those named by the marks; all images when fewer than
       :data:`MIN_VOCAB_IMAGES` are supervised — and the idf of the same images;
    3. L2-normalised tf-idf bags (:class:`DenseBagOfWords`) of every image;
    4. the model. ``oasis``: :class:`engine.learn.OASIS` with ``C = 0.1``, the paper's
       margin 1 (Eq. 1) — with tf-idf bags margin 1 beat 0.1 on validation in every run
       of ``bench_learn.py``, so it is not chosen per collection any more — iterate
       averaging, 10 sampled negatives per triplet (the hardest is used) and all words
       of the vocabulary (``max_words`` = its size); early stopping on held-aside
       labelled images (or triplets). ``boostssc`` / ``boostpro``: the same bags reduced
       to 64 dimensions by a truncated SVD, then the boosted embedding.

    The vocabulary, idf and feature settings are stored with the model, so queries are
    bagged exactly like the training images.

    Parameters
    ----------
    collection : Collection
        Opened for writing, already indexed.
    method : {"oasis", "boostssc", "boostpro"}
    source : {"subfolders", "keywords", "marks"}
        Labels from subfolders, from the keywords the person gave the photos (XMP
        sidecars, embedded XMP, IPTC: :func:`engine.workflows.keywords.labels_from_keywords`),
        or relevance marks (``marks`` or, if None, those stored in the index).
    cancel : threading.Event, optional
        Checked between yields.
    jobs : int, optional
        Worker processes for the dense features (default: automatic).
    random_state : int
        Seed of the vocabulary sample, the tree and the learner.

    Raises
    ------
    ValueError
        Unknown method / source, or too little supervision (the message says what is
        missing).
    engine.store.ReadOnlyIndexError
        The index was opened read-only.
    """
    if method not in LEARN_METHODS:
        raise ValueError(f"method must be one of {', '.join(LEARN_METHODS)}, got {method!r}")
    if source not in ("subfolders", "keywords", "marks"):
        raise ValueError(f"source must be 'subfolders' or 'marks', got {source!r}")
    if getattr(collection.store, "readonly", False):
        from engine.index.store import ReadOnlyIndexError

        raise ReadOnlyIndexError(
            f"index {collection.store.index_dir} was opened read-only: learning stores a model"
        )
    t0 = time.perf_counter()
    paths, hashes = _rows(collection)
    if len(paths) < 3:
        raise ValueError("the collection needs at least three indexed images to learn from")
    rng = np.random.default_rng(random_state)
    labels, triplets, supervised = _supervision(collection, paths, source, marks, rng)

    # 1. dense features (cached in the index)
    channel = _channel(collection.store, LEARN_FEATURES)
    if not (yield from _dense_features(channel, paths, hashes, jobs, cancel)):
        return None

    # 2. vocabulary and idf on the supervised images, 3. bags of every image
    fitted = yield from _bags(channel, hashes, supervised, random_state, cancel)
    if fitted is None:
        return None
    rep, X = fitted

    # 4. the model
    if method == "oasis":
        fit = _fit_oasis(X, rep.n_words, labels, triplets, supervised, random_state, cancel)
    else:
        fit = _fit_boosted(method, X, labels, triplets, supervised, random_state, cancel)
    result = yield from fit
    if result is None:
        return None
    learned, first, last, score_name, n_constraints = result
    model = LearnedSimilarity(
        method,
        **learned,
        n_words=rep.n_words,
        source=source,
        representation=rep,
        image_bags=(np.asarray(hashes, dtype=str), X),
    )
    held = getattr(learned.get("oasis"), "validation_", None)
    model.calibration, model.calibration_error = _calibrate(model, X, labels, held)
    if _stopped(cancel):
        return None
    token = uuid.uuid4().hex
    collection.store.save_state(MODEL_STATE, model.to_state())
    collection.store.set_kv(MODEL_TOKEN, token)
    with _CACHE_LOCK:  # the first learned query reuses these bags
        _CACHE[collection] = _Cached(
            token, model, collection.store.generation, X, [Path(p) for p in paths]
        )
    return LearnSummary(
        method,
        source,
        len(paths),
        n_constraints,
        first,
        last,
        score_name,
        time.perf_counter() - t0,
        model.calibration_error,
    )


#: Held-aside photos at most that query the collection to calibrate a learned model.
CALIBRATION_QUERIES = 1000


def _calibrate(
    model: LearnedSimilarity, X: sp.csr_matrix, labels: np.ndarray | None, held: Any
) -> tuple[tuple[float, float] | None, float]:
    """The learned scores' calibration curve and its error (``(None, nan)`` when there is
    too little to fit it on).

    What was held aside while learning (``held``, :attr:`engine.learn.OASIS.validation_`)
    is ranked as the product ranks: with labels, each held-aside photo — one the model
    was not fitted on, as a new photo is — queries the labelled photos (its best 10,
    itself left out; a hit is relevant when it has the query's label), as
    ``tests/benchmarks/calibrate.py`` does for the other methods (held-aside photos
    ranking only each other scored lower than new photos against the collection the
    model was fitted on: their probabilities came out 0.15 too low); with marks, each
    held-aside triplet gives its relevant and its other photo. The curve
    (:func:`engine.index.calibration.fit_curve`) is fitted on all of them; its error is
    that of fitting on the queries (triplets) of even position and measuring the expected
    calibration error on the odd ones, and the other way round (the mean of the two).
    Measured on new photos of the taught classes (Caltech-101, 16 classes of 20 photos,
    three seeds): 0.06-0.13, somewhat overconfident (mean probability 0.79-0.87 for
    0.73-0.74 right): the held-aside photos chose when learning stopped, so the model
    ranks them a little better than photos it never saw.
    """
    from engine.index.calibration import expected_calibration_error, fit_curve

    held = None if held is None else np.asarray(held, np.int64)
    if held is None or held.size == 0:
        return None, float("nan")
    if labels is not None:
        rows, pool = held.ravel()[:CALIBRATION_QUERIES], np.flatnonzero(labels >= 0)
        if rows.size < 2 or pool.size < 3:
            return None, float("nan")
        k = min(10, pool.size - 1)
        tops, best = [], []
        for c in range(0, rows.size, 64):  # (a block of queries at a time: bounded memory)
            r = rows[c : c + 64]
            S = model.similarity(X[r], X[pool])
            S[pool[None, :] == r[:, None]] = -np.inf  # (a photo is not its own hit)
            tops.append(np.argsort(-S, axis=1, kind="stable")[:, :k])
            best.append(np.take_along_axis(S, tops[-1], axis=1))
        top, s = np.concatenate(tops), np.concatenate(best)
        rel = labels[pool][top] == labels[rows][:, None]
        even = np.broadcast_to((np.arange(rows.size) % 2 == 0)[:, None], s.shape)
    else:
        used, inv = np.unique(held, return_inverse=True)
        t = inv.reshape(-1, 3)
        S = model.similarity(X[used], X[used])
        s = np.stack([S[t[:, 0], t[:, 1]], S[t[:, 0], t[:, 2]]], axis=1)
        rel = np.broadcast_to(np.array([True, False]), s.shape)
        even = np.broadcast_to((np.arange(t.shape[0]) % 2 == 0)[:, None], s.shape)
    s, rel, even = s.ravel(), rel.ravel(), even.ravel()
    curve = fit_curve(s, rel)
    if curve is None:
        return None, float("nan")
    errors = []
    for fit_on in (even, ~even):  # (two-fold: the error of fitting on half, on the other)
        half = fit_curve(s[fit_on], rel[fit_on])
        if half is None or fit_on.all():
            return curve, float("nan")
        p = 1.0 / (1.0 + np.exp(-np.clip(half[0] * s[~fit_on] + half[1], -700, 700)))
        errors.append(expected_calibration_error(p, rel[~fit_on]))
    return curve, float(np.mean(errors))


def _supervision(
    collection: Collection,
    paths: Sequence[Path],
    source: str,
    marks: Sequence[Mark] | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """What :func:`learn` fits on: ``(labels, triplets, supervised)``, the subfolder
    labels ``(n,) int64`` or the marks' triplets ``(T, 3) int64`` (the other one
    ``None``), and the rows that take part. Raises ValueError when there is too little."""
    labels = None
    triplets = None
    if source in ("subfolders", "keywords"):
        if source == "subfolders":
            labels = _labels_of(paths, collection.folder)
            need = "at least two subfolders, one of them with two or more images"
        else:
            from engine.workflows.keywords import labels_from_keywords

            labels = labels_from_keywords(paths)[0]
            need = (
                "at least two keywords, each given to two or more photos (in XMP sidecars, "
                "embedded XMP or IPTC; Simile's own keywords do not count)"
            )
        counts = np.bincount(labels[labels >= 0]) if np.any(labels >= 0) else np.zeros(0)
        if (counts >= 2).sum() < 1 or counts.size < 2:
            raise ValueError(f"learning from {source} needs {need}")
        supervised = np.flatnonzero(labels >= 0)
    else:
        marks = load_marks(collection) if marks is None else list(marks)
        triplets = triplets_from_marks(paths, marks, rng)
        if triplets.shape[0] == 0:
            raise ValueError(
                "no usable marks: mark at least one result as relevant (thumbs up) for a "
                "query in this collection"
            )
        supervised = np.unique(triplets)
    return labels, triplets, supervised


def _dense_features(
    channel: CategoryChannel,
    paths: Sequence[Path],
    hashes: Sequence[str],
    jobs: int | None,
    cancel: threading.Event | None,
) -> Generator[LearnProgress, None, bool]:
    """Stage 1 of :func:`learn`: the dense features of every image into the channel's
    cache; returns False when cancelled."""
    n_missing = sum(not channel.has(h) for h in set(hashes))
    items = list(zip((str(p) for p in paths), hashes, strict=True))
    for cp in channel.update_iter(items, jobs=_jobs_for(n_missing, jobs), cancel=cancel):
        if _stopped(cancel):
            return False
        yield LearnProgress(
            cp.done, cp.total, float("nan"), f"dense features of the photos ({cp.done}/{cp.total})"
        )
    return not _stopped(cancel)


def _bags(
    channel: CategoryChannel,
    hashes: Sequence[str],
    supervised: np.ndarray,
    random_state: int,
    cancel: threading.Event | None,
) -> Generator[LearnProgress, None, tuple[DenseBagOfWords, sp.csr_matrix] | None]:
    """Stages 2 and 3 of :func:`learn`: the vocabulary and idf fitted on the supervised
    images (all of them when fewer than :data:`MIN_VOCAB_IMAGES`), then the tf-idf bags
    ``(n, n_words) float32`` of every image; returns ``(representation, bags)``, or
    ``None`` when cancelled."""
    from engine.kernels.vocabulary import VocabularyTree, fit_idf

    b, levels = int(DENSE_VOCAB["branching"]), int(DENSE_VOCAB["levels"])
    fit_rows = supervised if supervised.size >= MIN_VOCAB_IMAGES else np.arange(len(hashes))
    yield LearnProgress(0, 1, float("nan"), "fitting the visual vocabulary")
    fit_hashes = [hashes[i] for i in fit_rows if channel.has(hashes[i])]
    sample = vocab_sample(channel, fit_hashes, int(DENSE_VOCAB["sample"]), random_state)
    if sample.shape[0] < b:
        raise ValueError("too few features in the collection's images to learn from")
    tree = VocabularyTree(b, levels, random_state=random_state)
    for _ in tree.fit_iter(sample):
        if _stopped(cancel):
            return None
    del sample

    rep = DenseBagOfWords(tree, np.zeros(tree.n_leaves, np.float32), channel.settings)
    parts = []
    for k in range(0, len(hashes), BAG_BATCH):
        parts.append(rep.counts([_descriptors(channel, h) for h in hashes[k : k + BAG_BATCH]]))
        if _stopped(cancel):
            return None
        done = min(k + BAG_BATCH, len(hashes))
        yield LearnProgress(done, len(hashes), float("nan"), "visual words")
    counts = sp.csr_matrix(sp.vstack(parts, format="csr"))
    rep = DenseBagOfWords(tree, fit_idf(counts[fit_rows]), channel.settings, len(fit_rows))
    return rep, rep.weight(counts)


def _fit_oasis(
    X: sp.csr_matrix,
    n_words: int,
    labels: np.ndarray | None,
    triplets: np.ndarray | None,
    supervised: np.ndarray,
    random_state: int,
    cancel: threading.Event | None,
) -> Generator[LearnProgress, None, tuple | None]:
    """Stage 4 of :func:`learn` for ``oasis`` (settings in its docstring); returns
    ``(LearnedSimilarity keywords, first score, best score, score name, constraints)``,
    or ``None`` when cancelled."""
    first = last = float("nan")
    # Budget from the amount of supervision: ~300 passes over the labelled images (or
    # 600 over the triplets); early stopping on held-out images ends it sooner. The
    # kernel-form solver makes a step cost ~60 us at 2,000 images, and 50 passes (the
    # budget before it) stopped OASIS short: Caltech-101, 20 classes, precision@10
    # of unseen images 0.555 with 50 passes (see bench_learn_product.py).
    n_sup = int(supervised.size) if triplets is None else 2 * triplets.shape[0]
    n_steps = int(np.clip(300 * n_sup, 5_000, 600_000))
    score_name = "held-out mAP" if triplets is None else "triplet accuracy"
    oasis = OASIS(
        C=OASIS_C,
        margin=OASIS_MARGIN,
        n_steps=n_steps,
        max_words=n_words,
        eval_every=int(np.clip(n_steps // 40, 500, 10_000)),
        patience=8,
        average=True,
        n_negatives=OASIS_NEGATIVES,
        random_state=random_state,
    )
    it = oasis.fit_iter(X, labels) if triplets is None else oasis.fit_triplets_iter(X, triplets)
    for prog in it:
        if _stopped(cancel):
            return None
        first = prog.score if np.isnan(first) else first
        last = max(last, prog.score) if not np.isnan(last) else prog.score
        yield prog
    n_constraints = oasis.history_[-1][0] if triplets is None else triplets.shape[0]
    return {"oasis": oasis}, first, last, score_name, n_constraints


def _fit_boosted(
    method: str,
    X: sp.csr_matrix,
    labels: np.ndarray | None,
    triplets: np.ndarray | None,
    supervised: np.ndarray,
    random_state: int,
    cancel: threading.Event | None,
) -> Generator[LearnProgress, None, tuple | None]:
    """Stage 4 of :func:`learn` for ``boostssc`` / ``boostpro``: the bags reduced to
    :data:`SVD_DIM` dimensions, pairs from the labels (or the triplets' two sides), the
    boosted embedding; returns like :func:`_fit_oasis`."""
    first = last = float("nan")
    Z, comps = reduce_dimension(X, SVD_DIM, random_state=random_state)
    if triplets is None:
        n_lab = int(supervised.size)
        n_pairs = int(min(20_000, 4 * n_lab * n_lab))  # small sets: ~every pair twice
        i, j, lab = pairs_from_labels(labels, n_pairs, random_state=random_state)
    else:
        i = np.concatenate([triplets[:, 0], triplets[:, 0]])
        j = np.concatenate([triplets[:, 1], triplets[:, 2]])
        lab = np.concatenate([np.ones(len(triplets)), -np.ones(len(triplets))])
    n_constraints = int(i.size)
    learner = BoostedSSC(n_bits=128) if method == "boostssc" else BoostPro(n_bits=64)
    score_name = "r (weighted pair correlation)"
    for prog in learner.fit_iter(Z, i, j, lab):
        if _stopped(cancel):
            return None
        first = prog.score if np.isnan(first) else first
        last = prog.score
        yield prog
    learned = {"embedding": learner.embedding_, "components": comps}
    return learned, first, last, score_name, n_constraints


def run_learn(collection: Collection, **kwargs) -> LearnSummary | None:
    """Drive :func:`learn` to the end; ``None`` if it was cancelled."""
    return run_to_end(learn(collection, **kwargs))


# --------------------------------------------------------------------------- search
def _dense_sets(
    collection: Collection, settings: dict[str, Any], paths: Sequence[Path], hashes: Sequence[str]
) -> list[np.ndarray]:
    """Dense descriptors of every image: cached ones from the index, the others (images
    added since) computed in memory — nothing is written, so read-only indexes work."""
    from engine.cluster import category_extractor
    from engine.index.ingest import extract_parallel

    channel = _channel(collection.store, settings)
    missing = {str(p): h for p, h in zip(paths, hashes, strict=True) if not channel.has(h)}
    fresh: dict[str, np.ndarray] = {}
    if missing:
        for r in extract_parallel(
            list(missing),
            jobs=_jobs_for(len(missing), None),
            feature_kwargs=channel.settings,
            extractor=category_extractor,
        ):
            d = r.features.descriptors if r.features is not None else np.zeros((0, 128))
            fresh[missing.get(r.path, r.path)] = np.asarray(d, np.float32)
    empty = np.zeros((0, 128), np.float32)
    return [channel.raw(h)[0] if channel.has(h) else fresh.get(h, empty) for h in hashes]


def _collection_bags(collection: Collection, model: LearnedSimilarity):
    """(paths, (n, n_words) bags) of the collection under ``model``, cached per model and
    index generation."""
    entry = _cached(collection)
    generation = collection.store.generation
    if entry is not None and entry.bags is not None and entry.generation == generation:
        return entry.paths, entry.bags
    paths, hashes = _rows(collection)
    rep = model.representation
    known_h, known_X = model.image_bags or (np.zeros(0, str), None)
    row = {str(h): k for k, h in enumerate(known_h.tolist())}
    idx = np.array([row.get(h, -1) for h in hashes], np.int64)
    need = np.flatnonzero(idx < 0)  # images added since learning
    sub = [paths[k] for k in need], [hashes[k] for k in need]
    fresh = rep.bags(_dense_sets(collection, rep.settings, *sub)) if need.size else None
    parts = [b for b in (known_X, fresh) if b is not None]
    if not parts:  # an empty collection
        parts = [sp.csr_matrix((0, model.n_words), dtype=np.float32)]
    stack = sp.vstack(parts, format="csr")
    idx[need] = (0 if known_X is None else known_X.shape[0]) + np.arange(need.size)
    bags = sp.csr_matrix(stack[idx], dtype=np.float32)
    if entry is not None and entry.model is model:
        with _CACHE_LOCK:
            entry.generation, entry.bags, entry.paths = generation, bags, paths
    return paths, bags


def _channel(store: Any, settings: dict[str, Any]) -> CategoryChannel:
    """The dense-feature cache for ``settings``: its own namespace for full-resolution
    features (:data:`LEARN_FEATURES`), the grouping's cache for the grouping's settings."""
    from engine.cluster import CategoryChannel

    full = settings.get("octaves", True) is False
    namespace = keys.LEARN_DENSE_NAMESPACE if full else keys.DENSE_NAMESPACE
    return CategoryChannel(store, settings, namespace=namespace)


def _query_descriptors(collection: Collection, image: Any, settings: dict[str, Any]):
    """Dense descriptors of a query: cached when it is an indexed image."""
    from engine.cluster import category_features, hash_of
    from engine.features.keypoints import Features

    if isinstance(image, Features):
        raise TypeError(
            "the learned method compares dense features of whole images: query it with an "
            "image (a path or an (H, W[, 3]) uint8 array), not keypoint Features"
        )
    if isinstance(image, np.ndarray):
        return category_features(image, **settings).descriptors
    try:
        h = hash_of(collection, image)
    except KeyError:
        h = None
    if h is not None:
        channel = _channel(collection.store, settings)
        if channel.has(h):
            return channel.raw(h)[0]
    return category_features(Path(os.path.abspath(os.fspath(image))), **settings).descriptors


def learned_query(collection: Collection, image: Any, top: int) -> list[Hit]:
    """The ``learned`` search method: rank the collection by the stored learned model.

    Parameters
    ----------
    collection : Collection
    image : path or (H, W[, 3]) uint8 ndarray
        The query, inside or outside the collection. Its dense features (cached for an
        indexed image, else computed) are bagged with the model's vocabulary and idf.
    top : int

    Raises
    ------
    LookupError
        No (or an outdated) learned model.
    TypeError
        ``image`` is a :class:`engine.features.Features` (keypoints): this method needs
        the image itself.
    """
    from engine.index.calibration import curve_probability
    from engine.index.methods import Hit

    model = load_model(collection)
    q = model.representation.bags(
        [_query_descriptors(collection, image, model.representation.settings)]
    )
    paths, X = _collection_bags(collection, model)
    scores = model.similarity(q, X)[0]
    top = min(int(top), scores.size)
    order = np.argsort(-scores, kind="stable")[:top]
    chance = functools.partial(curve_probability, model.calibration)
    return [Hit(paths[k], float(scores[k]), chance(float(scores[k]))) for k in order]


def _register() -> None:
    from engine.index.methods import register_method

    register_method("learned", learned_query)


_register()
