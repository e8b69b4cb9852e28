"""Fitting a collection's models: the binnings of its pyramids, their idf weights and the
hash functions, from a seeded sample of its images.

The models (:class:`SearchModels`, saved as the store's ``search.models`` state) are two
vocabulary trees (hierarchical k-means on 32-D PCA-projected descriptors, branching 10,
5 levels including the root) as vocabulary-guided pyramid bins, their per-bin idf
weights, a uniform-bin pyramid match on 8-D PCA-SIFT, densified-WTA permutations and
random-hyperplane seeds. They are fitted on the first index (:func:`fit_binnings`, from
a random sample of at most ``SAMPLE_DESCRIPTORS`` descriptors, seeded: :func:`sample_ids`;
the trees on ``TREE_SAMPLE`` of them; then :func:`fit_weights` over the whole
collection), and refitted only when the collection has grown to more than
``REFIT_GROWTH`` (2x) the number of images they were fitted on, or the features changed.

On a first index the fit does not wait for the end of extraction: :class:`Prefit` fits
the models on ``PREFIT_SPREAD`` files spread evenly over the folder, extracted first, on
a background thread and encodes every new image's pyramids as soon as its batch is
stored, while the worker processes go on extracting.

A first index that was interrupted (or whose models were lost) and is then completed
gets the models of an uninterrupted one: the files the models are fitted on are chosen
by path over the whole folder (:func:`first_files`, the files an uninterrupted first
index extracts first), whichever of them happened to be extracted before, and the fit
waits until every one of them is in the store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.index import candidates
from engine.index.codes import batch_codes
from engine.index.encode import (
    ENCODE_BATCH,
    HE_LEVEL,
    INDEX_PARTS,
    EncodedImages,
    descriptor_sets,
    encode,
    he_words,
    stacked,
)
from engine.index.keys import MODELS_STATE
from engine.index.search import fit_key_idf
from engine.index.threads import ENCODE_THREADS, thread_map

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.store import IndexStore
    from engine.kernels.hamming import HammingEmbedding
    from engine.kernels.pyramid import PyramidMatch

__all__ = [
    "HE_LEVEL",
    "MODELS_STATE",
    "PREFIT_SPREAD",
    "REFIT_GROWTH",
    "SAMPLE_DESCRIPTORS",
    "STATE_VERSION",
    "TREE_ITERATIONS",
    "TREE_PCA_DIM",
    "TREE_SAMPLE",
    "VOCAB_TREES",
    "Prefit",
    "SearchModels",
    "add_hamming",
    "first_files",
    "fit_binnings",
    "fit_hamming",
    "fit_weights",
    "path_sample",
    "refit",
    "sample_ids",
    "spread",
]

REFIT_GROWTH = 2.0
SAMPLE_DESCRIPTORS = 40_000
# the vocabulary trees are fitted on a random subset of that sample (the uniform pyramid's
# ranges and PCA, which cost little, on all of it): the tree fit's time grows with its
# sample, and UKBench N-S did not move with 30,000 (seeds 0-3 of the models' sample and
# fit: hybrid 3.624-3.642, mean 3.636, vocabulary 3.440-3.448, mean 3.444; with 40,000:
# 3.610-3.664, mean 3.631, and 3.418-3.484, mean 3.451) at 0.7x the fit time
TREE_SAMPLE = 30_000
# the trees cluster PCA-projected descriptors (fitted on their sample): the fit and every
# descent cost about their dimension, and UKBench N-S did not move with 32 of RootSIFT's
# 128 (seeds 0-3: hybrid 3.616-3.644, mean 3.634, vocabulary 3.438-3.464, mean 3.448,
# against 3.636 / 3.444 on all 128); one thread: the fit 0.83 -> 0.55 s, the vocabulary
# pyramids of 500 images 0.64 -> 0.52 s. 10k views (bench_scale.py): recall@10 0.999
# vocabulary and wta, 0.981 uniform (0.984 on 128)
TREE_PCA_DIM = 32
# files extracted first and spread over the folder on a first index, for the models' sample
# (40,000 descriptors at the ~250 SIFT features of a typical photo with max_features=500)
PREFIT_SPREAD = 160
TREE_ITERATIONS = 2
VOCAB_TREES = 2
STATE_VERSION = 1


class SearchModels:
    """Fitted models of the search data (saved as arrays and scalars: :meth:`to_state`).

    Attributes
    ----------
    vocab : PyramidMatch
        ``"vocabulary"`` pyramid match (``VOCAB_TREES`` trees), global weights.
    uniform : PyramidMatch
        ``"uniform"`` pyramid match.
    idf_keys, idf : (K,) int64 sorted, (K,) float32
        idf of every vocabulary bin seen at fit time.
    idf_unknown : float
        idf of a bin not seen at fit time (``ln N``, the largest).
    leaf_keys, leaf_idf : (W,) int64 sorted, (W,) float32
        The bag of words' columns (the trees' leaves) and their idf.
    he : HammingEmbedding or None
        Signatures of the descriptors within the trees' level-``HE_LEVEL`` nodes
        (:mod:`engine.kernels.hamming`); None in models saved without it.
    dwta : DensifiedWTAHash
        Densified WTA permutations of the bags of words.
    rh : RandomHyperplaneHash
        Random hyperplanes of the pyramid-match embedding.
    n_fit : int
        Images of the collection when the models were fitted.
    dim : int
        Descriptor dimension.
    """

    def __init__(self) -> None:
        self.vocab = None  # PyramidMatch("vocabulary"), global weights
        self.uniform = None  # PyramidMatch("uniform")
        self.idf_keys = np.zeros(0, np.int64)
        self.idf = np.zeros(0, np.float32)
        self.idf_unknown = 0.0
        self.leaf_keys = np.zeros(0, np.int64)  # bag-of-words columns (sorted leaf keys)
        self.leaf_idf = np.zeros(0, np.float32)
        self.dwta = None
        self.rh = None
        self.he = None
        self.n_fit = 0
        self.dim = 0

    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars of the models (the ``search.models`` state)."""
        st: dict[str, Any] = {
            "version": STATE_VERSION,
            "n_fit": self.n_fit,
            "dim": self.dim,
            "idf_keys": self.idf_keys,
            "idf": self.idf,
            "idf_unknown": float(self.idf_unknown),
            "leaf_keys": self.leaf_keys,
            "leaf_idf": self.leaf_idf,
        }
        for prefix, obj in (
            ("vocab.", self.vocab),
            ("uniform.", self.uniform),
            ("dwta.", self.dwta),
            ("rh.", self.rh),
            ("he.", self.he),
        ):
            if obj is None:
                continue
            for k, v in obj.to_state().items():
                st[prefix + k] = v
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> SearchModels:
        """Rebuild from :meth:`to_state` (``ValueError`` when written by another version)."""
        from engine.hashing.lsh import RandomHyperplaneHash
        from engine.hashing.wta import DensifiedWTAHash
        from engine.kernels.hamming import HammingEmbedding
        from engine.kernels.pyramid import PyramidMatch

        def sub(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) :]: v for k, v in st.items() if k.startswith(prefix)}

        m = cls()
        if int(st["version"]) != STATE_VERSION:
            raise ValueError("search models were written by another version")
        m.n_fit = int(st["n_fit"])
        m.dim = int(st["dim"])
        m.idf_keys = np.asarray(st["idf_keys"], np.int64)
        m.idf = np.asarray(st["idf"], np.float32)
        m.idf_unknown = float(st["idf_unknown"])
        m.leaf_keys = np.asarray(st["leaf_keys"], np.int64)
        m.leaf_idf = np.asarray(st["leaf_idf"], np.float32)
        m.vocab = PyramidMatch.from_state(sub("vocab."))
        m.uniform = PyramidMatch.from_state(sub("uniform."))
        m.dwta = DensifiedWTAHash.from_state(sub("dwta."))
        m.rh = RandomHyperplaneHash.from_state(sub("rh."))
        he = sub("he.")
        m.he = HammingEmbedding.from_state(he) if he else None
        return m


def fit_binnings(sets: Sequence[np.ndarray], n_images: int, random_state: int = 0) -> SearchModels:
    """Fit the vocabulary trees and the uniform pyramid on a sample of the images' sets.

    Parameters
    ----------
    sets : sequence of (M_i, D) float32
        Descriptors of the sampled images (:func:`sample_ids`).
    n_images : int
        Images of the collection (the number of hyperplanes, ``rh_bits``, and ``n_fit``).
    random_state : int

    Returns
    -------
    SearchModels
        ``vocab``, ``uniform``, ``rh`` (hyperplanes not yet cached), ``n_fit``, ``dim``;
        the weights come from :func:`fit_weights`.

    Raises
    ------
    ValueError
        No set has a feature.
    """
    from engine.hashing.lsh import RandomHyperplaneHash
    from engine.kernels.pyramid import PyramidMatch

    m = SearchModels()
    nonempty = [s for s in sets if len(s)]
    if not nonempty:
        raise ValueError("no image in the collection has local features to fit models on")
    m.dim = int(nonempty[0].shape[1])
    vocab = PyramidMatch(
        "vocabulary",
        # the index weighs bins by its own idf (search.fit_key_idf) or by these global
        # weights; the kernel's default idf weights would cost a pass over every image
        weights="global",
        normalize="self",
        branching=10,
        depth=5,
        sample_size=TREE_SAMPLE,
        random_state=random_state,
        # 2 Lloyd iterations per level: UKBench N-S vocabulary 3.478 / hybrid 3.668
        # against 3.480 / 3.674 with 5, at 0.75x the fit time (the fit is part of the
        # indexing cost; measured on 128-D trees). The trees' sample moves N-S by a few
        # hundredths (seeds 0-3: see TREE_SAMPLE, TREE_PCA_DIM); the index's own sample
        # gives hybrid 3.638 / vocabulary 3.444
        max_iter=TREE_ITERATIONS,
        n_shifts=VOCAB_TREES,
        pca_dim=TREE_PCA_DIM if m.dim > TREE_PCA_DIM else None,
    )
    # the thesis' settings, pinned (the research defaults of PyramidMatch differ: idf
    # weights and L1 scores, 6 pyramids): the index uses its own weights and measures
    uniform = PyramidMatch(
        "uniform",
        weights="global",
        normalize="self",
        n_sides=2,
        n_shifts=2,
        sample_size=SAMPLE_DESCRIPTORS,
        random_state=random_state,
    )
    # the two fits are independent and mostly numpy work that releases the GIL: on two
    # threads they overlap (indexing cost target: the models are the part beyond the
    # decode + SIFT floor)
    m.vocab, m.uniform = thread_map(lambda pm: pm.fit(nonempty), [vocab, uniform])
    m.he = fit_hamming(m.vocab, np.concatenate(nonempty), random_state)
    m.rh = RandomHyperplaneHash(candidates.rh_bits(n_images), random_state=random_state)
    m.n_fit = int(n_images)
    return m


def fit_hamming(vocab: PyramidMatch, X: np.ndarray, random_state: int = 0) -> HammingEmbedding:
    """The Hamming embedding of the descriptors in the nodes ``HE_LEVEL`` levels above the
    leaves of the fitted vocabulary trees ``vocab``, its medians learned on the sample
    descriptors ``X`` (N, D) (at most ``SAMPLE_DESCRIPTORS`` of them)."""
    from engine.kernels.hamming import HammingEmbedding

    rng = np.random.default_rng(random_state)
    if len(X) > SAMPLE_DESCRIPTORS:
        X = X[np.sort(rng.choice(len(X), SAMPLE_DESCRIPTORS, replace=False))]
    n_words = [t.sizes[HE_LEVEL] for t in vocab.binnings_]
    return HammingEmbedding(random_state=random_state).fit(X, he_words(vocab, X), n_words)


def add_hamming(store: IndexStore, ids: np.ndarray, models: SearchModels) -> bool:
    """Fit the Hamming embedding into ``models`` saved without it (an index written before
    it, :mod:`engine.index.selective`), on a sample of the stored descriptors as a refit
    chooses it; nothing is encoded again (the embedding is used at query time only).

    Parameters
    ----------
    store : IndexStore
    ids : (n,) int64 ndarray
        The usable rows, ascending.
    models : SearchModels
        Fitted, ``models.he`` None; ``he`` is set in place.

    Returns
    -------
    bool
        Whether it was fitted (False: no stored descriptor).
    """
    sets = [s for s in stacked(store, _sampled(store, ids)).sets() if len(s)]
    if not sets:
        return False
    models.he = fit_hamming(models.vocab, np.concatenate(sets))
    return True


def _sampled(store: IndexStore, ids: np.ndarray) -> np.ndarray:
    """:func:`sample_ids` of the usable rows ``ids``, their feature counts estimated from
    the catalogue's first 200 rows: the images a refit fits on."""
    n_feat = np.array([r.n_features for r in store.records("ok")[:200]])
    return sample_ids(ids, n_feat)


def sample_ids(ids: np.ndarray, n_features: np.ndarray) -> np.ndarray:
    """Seeded random images (ascending) whose features total about ``SAMPLE_DESCRIPTORS``.

    Parameters
    ----------
    ids : (n,) int64
        Candidates (store ids, or positions).
    n_features : (k,) int
        Features per image, or of a representative subset of them.

    Returns
    -------
    (m,) int64
        ``m = min(n, max(50, SAMPLE_DESCRIPTORS // mean features))`` of ``ids``, sorted
        (``numpy.random.default_rng(0)``).
    """
    n_est = max(int(np.mean(n_features)) if len(n_features) else 1, 1)
    take = min(ids.size, max(50, SAMPLE_DESCRIPTORS // n_est))
    return np.sort(np.random.default_rng(0).choice(ids, take, replace=False))


def spread(paths: Sequence[str], n: int) -> list[str]:
    """``n`` of ``paths`` spread evenly over them, the first and last included (what
    :func:`engine.index.ingest.ingest` submits first with ``spread=n``).

    Parameters
    ----------
    paths : sequence of str
        In the order of the work list.
    n : int

    Returns
    -------
    list of str
        In ``paths`` order.
    """
    total = len(paths)
    n = min(int(n), total)
    if n <= 0:
        return []
    pick = sorted({round(i * (total - 1) / max(n - 1, 1)) for i in range(n)})
    return [paths[i] for i in pick]


def first_files(store: IndexStore, folder: str | os.PathLike) -> list[str]:
    """The files an uninterrupted first index of ``folder`` fits its models on: the
    ``PREFIT_SPREAD`` files spread over every image of the folder in path order (its
    work list), whether or not they are in the store already.

    Parameters
    ----------
    store : IndexStore
        The folder's index (its known files are not read again by the scan).
    folder : path-like

    Returns
    -------
    list of str
        Paths as the scan gives them.
    """
    from engine.io.scan import scan_folder

    scan = scan_folder(os.fspath(folder), store.known_stats(), exclude=[store.index_dir])
    paths = sorted([f.path for f in scan.new] + [f.path for f in scan.changed] + scan.unchanged)
    return spread(paths, PREFIT_SPREAD)


def path_sample(store: IndexStore, wanted: set) -> np.ndarray:
    """The images the models are fitted on, chosen among the stored files ``wanted``
    (catalogue form of their paths) by path: independent of the order in which they
    were extracted or of their ids.

    Parameters
    ----------
    store : IndexStore
    wanted : set of str

    Returns
    -------
    (m,) int64
        Store ids (:func:`sample_ids` over the usable ``wanted`` images with features,
        sorted by path).

    Raises
    ------
    LookupError
        No usable image among them.
    """
    recs = store.records(None)
    ok = sorted(
        (r.path, r.id, r.n_features) for r in recs if r.status == "ok" and r.path in wanted
    )
    ok = [r for r in ok if r[2] > 0]
    if not ok:
        raise LookupError("no usable image among the first files")
    pos = sample_ids(np.arange(len(ok)), np.array([r[2] for r in ok[:200]]))
    return np.array([ok[i][1] for i in pos], np.int64)


def fit_weights(m: SearchModels, all_codes: list[SimpleNamespace], random_state: int = 0) -> None:
    """idf of every vocabulary bin and of the leaves (bag of words) over the whole
    collection (``ln(N / N_b)``, Nistér & Stewénius), and the densified WTA permutations
    for that many words.

    Parameters
    ----------
    m : SearchModels
        Fitted binnings (:func:`fit_binnings`); ``idf_keys``, ``idf``, ``idf_unknown``,
        ``leaf_keys``, ``leaf_idf`` and ``dwta`` are set, and the hyperplanes cached for
        every bin.
    all_codes : list of SimpleNamespace
        Vocabulary pyramids of every image (:func:`~engine.index.codes.batch_codes`).
    random_state : int
    """
    from engine.hashing.wta import DensifiedWTAHash

    n = sum(c.n for c in all_codes)
    keys = np.concatenate([c.key for c in all_codes])
    leaf = np.concatenate([c.level == 0 for c in all_codes])
    m.idf_keys, m.idf = fit_key_idf(SimpleNamespace(key=keys), n_sets=n)
    m.leaf_keys, m.leaf_idf = fit_key_idf(SimpleNamespace(key=keys), n_sets=n, mask=leaf)
    m.idf_unknown = float(np.log(max(n, 2)))
    m.dwta = DensifiedWTAHash(n_codes=256, window=8, random_state=random_state).fit(
        max(len(m.leaf_keys), 8)
    )
    m.rh.cache(m.idf_keys, threads=ENCODE_THREADS)  # after the last image: cores are free


def refit(
    store: IndexStore,
    ids: np.ndarray,
    prepared: SimpleNamespace | None,
    *,
    fit_paths: Sequence[str] | None = None,
    cancel: threading.Event | None = None,
) -> tuple[SearchModels, EncodedImages] | None:
    """Fit the models (or take the prefit's) and encode every image of ``store``.

    Parameters
    ----------
    store : IndexStore
    ids : (n,) int64 ndarray
        The usable rows, ascending.
    prepared : SimpleNamespace, optional
        Models and encoded batches from :meth:`Prefit.finish` (a first index).
    fit_paths : sequence of str, optional
        The files a first index fits on (:func:`first_files`: one completed after an
        interruption fits on those an uninterrupted one would).
    cancel : threading.Event, optional
        Checked between batches: once set, the work is dropped and None returned.

    Returns
    -------
    (SearchModels, EncodedImages) or None
        The models and every image's search data (without uniform pyramids:
        :data:`~engine.index.encode.INDEX_PARTS`), in the order of ``ids``; None when
        cancelled (nothing is kept: the version committed before stays).
    """

    def stopped() -> bool:
        return cancel is not None and cancel.is_set()

    if stopped():
        return None
    pre = prepared
    if pre is not None and not np.isin(pre.ids, ids).all():
        pre = None  # cannot happen within one run; refit from scratch then
    if pre is not None:
        from engine.hashing.lsh import RandomHyperplaneHash

        models = pre.models
        models.rh = RandomHyperplaneHash(candidates.rh_bits(ids.size), random_state=0)
        models.n_fit = int(ids.size)
        rest = ids[~np.isin(ids, pre.ids)]
        pre_parts = list(zip(pre.batches, pre.codes, strict=True))
    else:
        if fit_paths:  # a first index completed after an interruption
            chosen = path_sample(store, {store.norm_path(p) for p in fit_paths})
        else:
            chosen = _sampled(store, ids)
        sample = stacked(store, chosen).sets()
        models = fit_binnings(sample, ids.size)
        rest = ids
        pre_parts = []
    batches = [rest[s0 : s0 + ENCODE_BATCH] for s0 in range(0, rest.size, ENCODE_BATCH)]
    all_codes = thread_map(
        lambda b: (
            None
            if stopped()
            else batch_codes(models.vocab, stacked(store, b), words_level=HE_LEVEL)
        ),
        batches,
    )
    if stopped():
        return None
    fit_weights(models, [c for _, c in pre_parts] + all_codes)
    parts = thread_map(
        lambda p: None if stopped() else encode(models, p[0], None, p[1], parts=INDEX_PARTS),
        pre_parts,
    )
    parts += thread_map(
        lambda k: (
            None
            if stopped()
            else encode(
                models, batches[k], stacked(store, batches[k]), all_codes[k], parts=INDEX_PARTS
            )
        ),
        range(len(batches)),
    )
    all_codes.clear()  # (freed before the concatenation)
    del pre_parts
    if stopped():
        return None
    return models, EncodedImages.concat(parts)


class Prefit:
    """Fits the models and encodes images on a thread while the features of a first
    index are still being extracted (the indexing cost target: everything beyond the
    decode + SIFT floor should be nearly free, and on a machine whose cores all extract,
    work done after extraction adds its full time, work done during it about half).

    :func:`engine.index.ingest.ingest` submits ``spread`` evenly spaced files first
    (:meth:`plan` receives them); once all of them are in the store the models are fitted
    on a seeded sample of those (sorted by path, so the models do not depend on the order
    in which workers finish), then every image added by this run is encoded as soon as
    its batch is committed: its vocabulary pyramid (:func:`batch_codes`), the part that
    needs no collection-wide statistics (the uniform pyramids are not stored,
    :mod:`engine.index.uniform_rows`). :meth:`finish` hands these to
    :meth:`engine.index.searcher.Searcher.refresh`, which computes the idf weights and the rest.

    Only images whose path was not in the catalogue before the run are encoded here (a
    changed file keeps its id while its features are replaced); the refresh encodes the
    others from the store. Any error leaves everything to the refresh.

    Parameters
    ----------
    store : IndexStore
    first : list of str, optional
        The files to fit on (:func:`first_files`), when they are not the spread files
        that :meth:`plan` receives: a first index completed after an interruption.
    """

    def __init__(self, store: IndexStore, first: list[str] | None = None) -> None:
        self.store = store
        self.before = set(store.known_stats())
        self.fixed = None if first is None else [store.norm_path(p) for p in first]
        self.first: list[str] | None = None
        self.models: SearchModels | None = None
        self.ids: list[np.ndarray] = []
        self.codes: list[SimpleNamespace] = []
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simile-prefit", daemon=True)
        self._started = False

    def plan(self, first: list[str]) -> None:
        """Callback of ``ingest(on_plan=...)``: the spread files (unless :attr:`fixed`);
        starts the thread."""
        self.first = self.fixed or [self.store.norm_path(p) for p in first]
        if self.first:
            self._started = True
            self._thread.start()

    def _fit(self) -> bool:
        wanted = set(self.first or ())
        recs = self.store.records(None)
        landed = {r.path for r in recs} & wanted
        if len(landed) < len(wanted) and not self._done.is_set():
            return False
        sets = descriptor_sets(self.store, path_sample(self.store, wanted))
        self.models = fit_binnings(sets, len(recs))
        return True

    def _run(self) -> None:
        # the refresh after the last image needs engine.hashing.wta (fit_weights): imported here,
        # while the workers extract, not after them (~40 ms without cached bytecode)
        import engine.hashing.wta  # noqa: F401

        # many small products on a machine whose cores are extracting: BLAS threads
        # would only spin (process-wide; the GUI thread and the ingest loop use no BLAS)
        with single_threaded_blas():
            self._work()

    def _work(self) -> None:
        try:
            encoded = np.zeros(0, np.int64)
            seen = None
            while not self._stop.is_set():
                finished = self._done.is_set()  # read before the store: nothing after
                # the catalogue changes once per write batch: read it only then (reading
                # all of it ten times a second costs ~0.2 s of CPU on a 500-image folder)
                generation = self.store.generation
                if generation == seen and not finished:
                    self._done.wait(0.1)
                    continue
                seen = generation
                if self.models is None and not self._fit():
                    self._done.wait(0.1)
                    continue
                recs = self.store.records("ok")
                # featureless images too (empty rows): left to the refresh, they would put
                # the rows out of id order, which costs a copy of all of them (and the
                # uniform pyramids' merge could not overlap the idf): 3 s of the 6 s after
                # the last image on Caltech-101's 3,050, which have one such image
                new = np.array([r.id for r in recs if r.path not in self.before], np.int64)
                new = new[~np.isin(new, encoded)]
                # whole write batches (64 files), the last ones as ingest writes them
                if new.size >= 16 or (finished and new.size):
                    for s0 in range(0, new.size, ENCODE_BATCH):
                        if self._stop.is_set():
                            return
                        batch = new[s0 : s0 + ENCODE_BATCH]
                        # (the uniform pyramids are not stored: made from the
                        # features when read, engine.index.uniform_rows)
                        sets = stacked(self.store, batch)
                        codes = batch_codes(self.models.vocab, sets, words_level=HE_LEVEL)
                        if self.models.he is not None and codes.words is not None:
                            codes.sigs = self.models.he.signatures(sets.X, codes.words)
                        self.codes.append(codes)
                        self.ids.append(batch)
                    encoded = np.concatenate([encoded, new])
                elif finished:
                    return
                else:
                    self._done.wait(0.1)
        except BaseException as exc:  # the refresh does everything then
            self.error = exc

    def finish(self) -> SimpleNamespace | None:
        """Wait for the thread (extraction has ended); the prepared models and batches,
        or None when there is nothing usable."""
        if not self._started:
            return None
        self._done.set()
        self._thread.join()
        if self.error is not None or self.models is None:
            return None
        ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        return SimpleNamespace(models=self.models, ids=ids, batches=self.ids, codes=self.codes)

    def cancel(self) -> None:
        """Stop the thread without waiting for it (a cancelled or failed run)."""
        self._stop.set()
        self._done.set()
