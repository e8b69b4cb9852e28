"""The collection index: one photo folder, its persistent index and every way to search it.

:class:`Collection` is the facade the CLI, the GUI, clustering and learning code use.
It combines the store (:mod:`engine.store`, :mod:`engine.ingest`: catalogue + features),
the matching models (:mod:`engine.pyramid`, :mod:`engine.vocabulary`), the hashing
(:mod:`engine.wta`, :mod:`engine.lsh`) and the search structures (:mod:`engine.search`).

Index location
--------------
By default the index lives in ``<folder>/.simile/``. When the folder is not writable
(a read-only share, a CD, someone else's pictures) it goes to
``~/.cache/simile/<first 16 hex of blake2b(absolute folder path)>/`` instead
(``$XDG_CACHE_HOME`` is honoured). An existing index is always found in either place.
``index_dir=`` (``--index DIR``) overrides both.

Models and when they are fitted
-------------------------------
:meth:`Collection.update` first brings the catalogue and the stored features up to date,
then refreshes the search data:

- the models -- two vocabulary trees (hierarchical k-means on 32-D PCA-projected
  descriptors, branching 10, 5 levels including the root) as vocabulary-guided pyramid
  bins, their per-bin idf weights, a uniform-bin pyramid match on 8-D PCA-SIFT,
  densified-WTA permutations and random-hyperplane seeds -- are fitted on the first index
  (from a random sample of at most ``SAMPLE_DESCRIPTORS`` descriptors, seeded; the trees
  on ``TREE_SAMPLE`` of them), and refitted only when the collection has grown to more
  than ``REFIT_GROWTH`` (2x) the number of images they were fitted on, or the features
  changed.
  Otherwise new images are only encoded with the existing models (idf weights stay those
  of the fit; bins never seen at fit time get the largest idf).
  On a first index the fit does not wait for the end of extraction: ``PREFIT_SPREAD``
  files spread evenly over the folder are extracted first, the models are fitted on them
  on a background thread (the sample is chosen by path, so it does not depend on which
  worker finishes first) and every new image's pyramids are encoded as soon as its batch
  is stored, while the worker processes go on extracting. Only the collection-wide
  weights (idf), the hashes and the final write remain after the last image.
- per image: the idf-weighted vocabulary pyramid (``vocabulary`` scores), the uniform
  pyramid (``uniform``), the tf-idf bag of words over the tree's leaves and its densified
  WTA codes, random-hyperplane bits of the pyramid-match embedding; banded inverted
  indexes over the codes are built at load time.

Everything is stored with the store's state API (arrays + JSON, no pickle) in one atomic
write at the end of :meth:`Collection.update`. An interrupted run keeps the catalogue of
what was finished; opening such an index encodes the images the search data does not yet
hold in memory, so queries always cover everything that is held.

Search methods
--------------
``hybrid`` (default)
    ``vocabulary`` scores, then the best ``VERIFY_TOP`` hits are checked for the same
    object: ratio-test correspondences and a robust homography; verified hits are ranked
    first by ``score + inliers / (inliers + 20)``. Best on typical photo folders
    (objects, places, near-duplicates); see ``tests/benchmarks/bench_ukbench.py``.
``vocabulary``
    Vocabulary-guided pyramid match with idf bin weights, L1-normalised (thesis ch. 4;
    the scoring of Nistér & Stewénius): category / object similarity, no geometry.
``uniform``
    Normalised uniform-bin pyramid match (thesis Eq. 3.12) on PCA-SIFT.
``wta``
    Always candidate-based: candidates from the densified-WTA hash of the tf-idf bag of
    words (fused with the hyperplane hash and the inverted file, below), scored exactly
    by the ``vocabulary`` score.
``learned``
    Provided by :mod:`engine.feedback` through :func:`register_method` (OASIS or a
    boosted embedding over dense tf-idf bags of words, trained by ``simile learn`` or from
    the app's relevance marks); without a learned model a clear error says how to make one.

Collections of up to ``EXHAUSTIVE_LIMIT`` images are scored exhaustively (exact); larger
ones (and ``wta`` always) take candidates -- ``CANDIDATE_FRACTION`` of the collection
(``CANDIDATE_FRACTION_UNIFORM`` for ``uniform`` from the hashes alone), at least
``MIN_CANDIDATES`` -- and score those exactly. The candidates (``CANDIDATE_KIND =
"fused"``, :func:`_fused_candidates`) come from two rankings of the whole collection:

- the hash score: the z-score of the bit agreement of the random-hyperplane bits of the
  pyramid-match embedding (Eqs. 5.8-5.11; :func:`rh_bits` hyperplanes, chosen from the
  collection size: 1024 at 10,000 images) plus ``WTA_FUSION_WEIGHT`` times the z-score
  of the code agreement of the densified-WTA codes of the tf-idf bag of words -- a linear
  scan of 384 bytes per image;
- the tf-idf cosine of the bags of words through an inverted file over the tree's
  leaves (exact, not hashed: only the postings of the query's words are read).

A row's rank is the better of its two ranks. On the 10k benchmark of generated views
(``tests/benchmarks/bench_scale.py``, queries not in the collection) recall@10 against
the exhaustive score is 1.00 (``vocabulary``) and 0.98 (``uniform``), 2 % scored; the
hash score alone (``CANDIDATE_KIND = "hashes"``) 0.98 at 2 % and 0.96 at 5 %. ``uniform``
scores its candidates by the exact vocabulary pyramid match first and only the best
``UNIFORM_RERANK`` by the (4x larger) uniform pyramids (more than ``2 x UNIFORM_PRESCORE``
candidates are first narrowed to ``UNIFORM_PRESCORE`` by their tf-idf cosine). The banded indexes
(:func:`engine.lsh.choose_params`) remain available as ``_candidates("wta" | "rh", ...)``
and are used by :meth:`Collection.duplicates`. An index written with fewer hyperplanes
than :func:`rh_bits` asks for is re-hashed from its stored pyramids by the next
:meth:`Collection.update` (no feature is re-read; 30 s at 10,000 images).

A reader (e.g. the query process) loads the search data without the ``(nnz,) int64``
bin keys of the pyramids (:class:`engine.search.IntersectionIndex` scores candidate rows
through the persisted compact columns): about 1.05 GB resident at 10,000 images,
including the cached hyperplane coordinates of every vocabulary bin (86 MB).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from engine.features.keypoints import Features, extract_features
from engine.index.ingest import IngestProgress, IngestSummary, ingest
from engine.index.search import (
    IntersectionIndex,
    code_values,
    fit_key_idf,
    single_threaded_blas,
    verify_pair,
)
from engine.index.store import INDEX_DIRNAME, IndexStore

if TYPE_CHECKING:  # pragma: no cover
    from engine.kernels.pyramid import PyramidMatch

__all__ = [
    "METHODS",
    "Collection",
    "DuplicateGroup",
    "Hit",
    "IndexProgress",
    "IndexSummary",
    "available_methods",
    "default_index_dir",
    "register_method",
    "rh_bits",
]

IndexProgress = IngestProgress
IndexSummary = IngestSummary

METHODS = ("hybrid", "vocabulary", "uniform", "wta", "learned")
FEATURE_KWARGS: dict[str, Any] = {}  # extract_features defaults: RootSIFT, <= 500, side <= 1024
EXHAUSTIVE_LIMIT = 3000
# fraction of the collection scored exactly (bench_scale.py, 10k views, recall@10 against
# the exhaustive score): the fused candidates (the default) 1.00 for ``vocabulary`` and
# 0.98 for ``uniform`` at 2 %; the hash score alone (CANDIDATE_KIND = "hashes") 0.98 for
# ``vocabulary`` at 2 % but 0.94 for ``uniform`` (0.96 at 5 %, CANDIDATE_FRACTION_UNIFORM)
CANDIDATE_FRACTION = 0.02
CANDIDATE_FRACTION_UNIFORM = 0.05
MIN_CANDIDATES = 100
UNIFORM_RERANK = 40  # hashed ``uniform``: candidates re-scored by the uniform pyramid
UNIFORM_PRESCORE = 150  # ... chosen among this many by the vocabulary pyramid (see _search)
WTA_FUSION_WEIGHT = 0.25  # weight of the WTA agreement's z-score next to the bits'
CANDIDATE_KIND = "fused"  # or "hashes" (WTA + hyperplanes only), "wta" / "rh" (banded index)
VERIFY_TOP = 30
VERIFY_MIN_INLIERS = 8
DUPLICATE_NEIGHBOURS = 10
_DUPLICATE_BLOCK = 256  # pairs checked side by side by Collection.duplicates
_DUPLICATE_CACHE = 1024  # images' features it keeps (~250 MB at 500 128-D features)
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
# images per encoding batch. Smaller batches keep the sorts and gathers of encoding in
# cache, next to the extraction workers: a first UKBench index with 64 took 10.1 s
# against 10.8 s with 256 (7 alternating pairs; the parent 0.6 s less CPU, the workers
# less too) and beat 32 in 3 of 3 pairs
ENCODE_BATCH = 64
ENCODE_THREADS = max(1, min(4, os.cpu_count() or 1))
_STATE_VERSION = 1


def rh_bits(n_images: int) -> int:
    """Number of random hyperplanes for a collection of ``n_images`` images.

    The candidates are the rows whose bit agreement (with the WTA agreement) ranks best;
    the standard deviation of the angle estimated from ``B`` bits is
    ``pi sqrt(p (1 - p) / B)`` (thesis Eq. 5.11), so the more rows there are between the
    true neighbours and the fraction scored, the more bits are needed. Measured on
    10,000 generated views (``bench_scale.py``, recall@10 of the bits alone at 5 %
    scored): 256 bits 0.78, 512 bits 0.92, 1024 bits 0.98, 2048 bits 0.995.
    """
    n = int(n_images)
    return 256 if n <= 1000 else 512 if n <= EXHAUSTIVE_LIMIT else 1024 if n <= 30_000 else 2048


_MODELS = "search.models"
_DATA = "search.data"

_REGISTRY: dict[str, Callable[..., list[Hit]]] = {}


def register_method(name: str, fn: Callable[..., list[Hit]]) -> None:
    """Add a search method: ``fn(collection, image, top) -> list[Hit]``.

    ``image`` is the query exactly as given to :meth:`Collection.query` (path, array or
    :class:`engine.features.Features`), so a method may use its own features.

    :mod:`engine.feedback` registers ``"learned"`` this way (imported on first use);
    ``fn`` should raise ``LookupError`` with a helpful message when its model is missing.
    """
    _REGISTRY[name] = fn


def available_methods() -> tuple[str, ...]:
    """Names accepted by :meth:`Collection.query`: the built-in ones, then registered ones."""
    return METHODS + tuple(name for name in _REGISTRY if name not in METHODS)


@dataclass(frozen=True)
class Hit:
    """One search result: an image of the collection and its score (higher = more similar)."""

    path: Path
    score: float


@dataclass(frozen=True)
class DuplicateGroup:
    """Near-duplicate images.

    Attributes
    ----------
    paths : list of Path
        The first is the group's representative (the image most similar to the others).
    scores : list of float
        Similarity of each path to the representative (1.0 for itself); byte-identical
        files score 1.0.
    """

    paths: list[Path]
    scores: list[float]


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base) if base else Path.home() / ".cache"


def default_index_dir(folder: str | os.PathLike) -> Path:
    """Where the index of ``folder`` lives by default (see the module docstring).

    ``<folder>/.simile`` when it already holds an index or the folder is writable, else
    ``~/.cache/simile/<hash of the absolute folder path>``.
    """
    folder = Path(os.path.abspath(os.fspath(folder)))
    local = folder / INDEX_DIRNAME
    digest = hashlib.blake2b(str(folder).encode("utf-8"), digest_size=8).hexdigest()
    cached = _cache_home() / "simile" / digest
    if (local / "catalog.sqlite").exists():
        return local
    if (cached / "catalog.sqlite").exists():
        return cached
    if local.is_dir() and os.access(local, os.W_OK):
        return local
    if not local.exists() and os.access(folder, os.W_OK | os.X_OK):
        return local
    return cached


# --------------------------------------------------------------------------- models
class _Models:
    """Fitted models of the search data (arrays/scalars only through to_state)."""

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
        self.n_fit = 0
        self.dim = 0

    def to_state(self) -> dict[str, Any]:
        st: dict[str, Any] = {
            "version": _STATE_VERSION,
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
        ):
            for k, v in obj.to_state().items():
                st[prefix + k] = v
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> _Models:
        from engine.hashing.lsh import RandomHyperplaneHash
        from engine.hashing.wta import DensifiedWTAHash
        from engine.kernels.pyramid import PyramidMatch

        def sub(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) :]: v for k, v in st.items() if k.startswith(prefix)}

        m = cls()
        if int(st["version"]) != _STATE_VERSION:
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
        return m


@dataclass
class _Encoded:
    """Per-image search data of a batch of images (rows in ``ids`` order)."""

    ids: np.ndarray  # (n,) int64 store ids
    vocab: IntersectionIndex  # idf-weighted, L1-normalised vocabulary pyramids
    uniform: IntersectionIndex  # uniform pyramid (pm weights), unnormalised
    bow: sp.csr_matrix  # (n, n_words) tf-idf, L2-normalised
    wta: np.ndarray  # (n, m) uint8 densified WTA codes of bow
    rh: np.ndarray  # (n, bytes) uint8 random-hyperplane bits of the vocab PM embedding

    def to_state(self, *, uniform: bool = True) -> dict[str, Any]:
        """Arrays and scalars of the data (``uniform=False``: without the uniform
        pyramids, saved apart by :func:`_pyramid_state`)."""
        st: dict[str, Any] = {"ids": self.ids}
        st.update(_pyramid_state("vocab", self.vocab))
        if uniform:
            st.update(_pyramid_state("uniform", self.uniform))
        st["bow.indptr"] = self.bow.indptr.astype(np.int64)
        st["bow.indices"] = self.bow.indices.astype(np.int64)
        st["bow.data"] = self.bow.data.astype(np.float32)
        st["bow.n_words"] = int(self.bow.shape[1])
        st["wta"] = self.wta
        st["rh"] = self.rh
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any], *, consume: bool = False) -> _Encoded:
        """Rebuild from :meth:`to_state`.

        The vocabulary pyramids are saved with their columns and loaded without their
        ``(nnz,) int64`` keys (queries score candidate rows through the columns alone, see
        :class:`engine.search.IntersectionIndex`); the uniform pyramids are saved and loaded
        by key (:func:`_uniform_index`; indexes written before that hold their columns,
        which load as the vocabulary pyramids' do). Arrays that do not own their memory
        (``np.load`` of an npz returns views of the read buffer) are copied into numpy's own
        allocations: the random gathers of exact scoring are about twice as fast there
        (measured: 19 -> 9 ms per query at 10,000 images). With ``consume`` the arrays are
        popped from ``st`` one by one, so each buffer is freed as soon as it is copied and
        the peak memory of loading stays near the size of the index.
        """
        get = st.pop if consume else st.get

        def own(key: str, dtype: type) -> np.ndarray:
            a = np.asarray(get(key), dtype)
            return a if a.flags.owndata else a.copy()

        ids = own("ids", np.int64)
        ixs = {}
        for name in ("vocab", "uniform"):
            has_cols = f"{name}.cols" in st
            if has_cols:
                get(f"{name}.keys", None)  # not kept
                keys = None
                columns = (own(f"{name}.ukeys", np.int64), own(f"{name}.cols", np.int32))
            else:
                keys, columns = own(f"{name}.keys", np.int64), None
            ixs[name] = IntersectionIndex(
                own(f"{name}.indptr", np.int64),
                keys,
                own(f"{name}.values", np.float32),
                columns=columns,
            )
        bow = sp.csr_matrix(
            (
                own("bow.data", np.float32),
                own("bow.indices", np.int64),
                own("bow.indptr", np.int64),
            ),
            shape=(ids.shape[0], int(st["bow.n_words"])),
        )
        return cls(
            ids, ixs["vocab"], ixs["uniform"], bow, own("wta", np.uint8), own("rh", np.uint8)
        )

    def subset(self, rows: np.ndarray) -> _Encoded:
        return _Encoded(
            self.ids[rows],
            self.vocab.subset(rows),
            self.uniform.subset(rows),
            self.bow[rows],
            self.wta[rows],
            self.rh[rows],
        )

    @staticmethod
    def concat(parts: list[_Encoded], uniform: IntersectionIndex | None = None) -> _Encoded:
        """Rows of ``parts`` one after the other (``uniform``: their uniform pyramids,
        already concatenated)."""
        if len(parts) == 1 and uniform is None:  # no copy (a loaded index keeps its arrays)
            return parts[0]
        if uniform is None:
            # the two pyramids' merges (sorts and copies, without the GIL) side by side
            vocab, uniform = _thread_map(
                IntersectionIndex.concat, [[p.vocab for p in parts], [p.uniform for p in parts]]
            )
        else:
            vocab = IntersectionIndex.concat([p.vocab for p in parts])
        return _Encoded(
            np.concatenate([p.ids for p in parts]),
            vocab,
            uniform,
            sp.vstack([p.bow for p in parts], format="csr"),
            np.concatenate([p.wta for p in parts]),
            np.concatenate([p.rh for p in parts]),
        )


def _pyramid_state(name: str, ix: IntersectionIndex) -> dict[str, np.ndarray]:
    """State arrays of pyramids ``name`` of :class:`_Encoded`."""
    st = {f"{name}.indptr": ix.indptr, f"{name}.values": ix.values}
    if ix._columns is None:  # (the uniform pyramids: see _uniform_index)
        st[f"{name}.keys"] = ix.keys
    else:
        uk, cols = ix._columns  # the keys are ukeys[cols]: not stored again
        st[f"{name}.ukeys"], st[f"{name}.cols"] = uk, cols
    return st


def _fit_binnings(sets: Sequence[np.ndarray], n_images: int, random_state: int = 0) -> _Models:
    """Fit the vocabulary tree and the uniform pyramid on a sample of the images' sets."""
    from engine.hashing.lsh import RandomHyperplaneHash
    from engine.kernels.pyramid import PyramidMatch

    m = _Models()
    nonempty = [s for s in sets if len(s)]
    if not nonempty:
        raise ValueError("no image in the collection has local features to fit models on")
    m.dim = int(nonempty[0].shape[1])
    vocab = PyramidMatch(
        "vocabulary",
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
    uniform = PyramidMatch("uniform", sample_size=SAMPLE_DESCRIPTORS, random_state=random_state)
    # the two fits are independent and mostly numpy work that releases the GIL: on two
    # threads they overlap (indexing cost target: the models are the part beyond the
    # decode + SIFT floor)
    m.vocab, m.uniform = _thread_map(lambda pm: pm.fit(nonempty), [vocab, uniform])
    m.rh = RandomHyperplaneHash(rh_bits(n_images), random_state=random_state)
    m.n_fit = int(n_images)
    return m


def _sample_ids(ids: np.ndarray, n_features: np.ndarray) -> np.ndarray:
    """Seeded random images (ascending) whose features total about ``SAMPLE_DESCRIPTORS``
    (``n_features``: features per image, or a representative subset of them)."""
    n_est = max(int(np.mean(n_features)) if len(n_features) else 1, 1)
    take = min(ids.size, max(50, SAMPLE_DESCRIPTORS // n_est))
    return np.sort(np.random.default_rng(0).choice(ids, take, replace=False))


@dataclass(frozen=True)
class _Stack:
    """Descriptor sets of a batch stacked: set ``k`` is ``X[start_k : start_k + sizes[k]]``
    (what :func:`_batch_codes` concatenates anyway; read from the store in one pass)."""

    X: np.ndarray  # (N, D) float32, C-contiguous and finite
    sizes: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return int(self.sizes.size)

    def sets(self) -> list[np.ndarray]:
        """The sets as views of ``X``."""
        return np.split(self.X, np.cumsum(self.sizes)[:-1]) if self.sizes.size else []


def _stacked(store: IndexStore, ids: np.ndarray) -> _Stack:
    """Stored descriptors of images ``ids``, in that order, stacked (descriptors only: no
    keypoint is read, and no set is validated again -- the store holds finite values)."""
    X, indptr = store.stacked_descriptors(ids)
    return _Stack(X, np.diff(indptr))


def _descriptor_sets(store: IndexStore, ids: np.ndarray) -> list[np.ndarray]:
    """Stored descriptors of images ``ids``, in that order."""
    return _stacked(store, ids).sets()


def _uniform_index(models: _Models, sets: Sequence[np.ndarray] | _Stack) -> IntersectionIndex:
    """Uniform-bin pyramids of a batch as the search data holds them: by key, without
    columns. Their bins are millions, most in one image, so collection-wide columns cost
    a merge of every key whenever batches are concatenated (3,050 Caltech-101 images:
    1.2-1.9 s on the critical path of a first index's last step; 10,000 images, adding one
    image: 2.1 s against 0.38 s) and buy nothing at query time: candidate rows are matched to the
    query's keys directly (:class:`~engine.search.IntersectionIndex`)."""
    codes = _batch_codes(models.uniform, sets, weights=True)
    return _intersection_index(codes, code_values(codes, weighting="pm"), columns=False)


class _Prefit:
    """Fits the models and encodes images on a thread while the features of a first
    index are still being extracted (the indexing cost target: everything beyond the
    decode + SIFT floor should be nearly free, and on a machine whose cores all extract,
    work done after extraction adds its full time, work done during it about half).

    :func:`engine.ingest.ingest` submits ``spread`` evenly spaced files first
    (:meth:`plan` receives them); once all of them are in the store the models are fitted
    on a seeded sample of those (sorted by path, so the models do not depend on the order
    in which workers finish), then every image added by this run is encoded as soon as
    its batch is committed: its vocabulary pyramid (:func:`_batch_codes`) and uniform pyramid
    -- the parts that need no collection-wide statistics. :meth:`finish` hands these to
    :meth:`Collection._refresh`, which computes the idf weights and the rest.

    Only images whose path was not in the catalogue before the run are encoded here (a
    changed file keeps its id while its features are replaced); the refresh encodes the
    others from the store. Any error leaves everything to the refresh.
    """

    def __init__(self, store: IndexStore) -> None:
        self.store = store
        self.before = set(store.known_stats())
        self.first: list[str] | None = None
        self.models: _Models | None = None
        self.ids: list[np.ndarray] = []
        self.codes: list[SimpleNamespace] = []
        self.uniform: list[IntersectionIndex] = []
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simile-prefit", daemon=True)
        self._started = False

    def plan(self, first: list[str]) -> None:
        """Callback of ``ingest(on_plan=...)``: the spread files; starts the thread."""
        self.first = [self.store._norm_path(p) for p in first]
        if self.first:
            self._started = True
            self._thread.start()

    def _fit(self) -> bool:
        wanted = set(self.first or ())
        recs = self.store.records(None)
        landed = {r.path for r in recs} & wanted
        if len(landed) < len(wanted) and not self._done.is_set():
            return False
        ok = sorted(
            (r.path, r.id, r.n_features) for r in recs if r.status == "ok" and r.path in wanted
        )
        ok = [r for r in ok if r[2] > 0]
        if not ok:
            raise LookupError("no usable image among the first files")
        pos = _sample_ids(np.arange(len(ok)), np.array([r[2] for r in ok[:200]]))
        sample = np.array([ok[i][1] for i in pos], np.int64)
        sets = _descriptor_sets(self.store, sample)
        self.models = _fit_binnings(sets, len(recs))
        return True

    def _run(self) -> None:
        # the refresh after the last image needs engine.wta (_fit_weights): imported here,
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
                        sets = _stacked(self.store, batch)
                        jobs = (
                            lambda sets=sets: _batch_codes(self.models.vocab, sets),
                            lambda sets=sets: _uniform_index(self.models, sets),
                        )
                        if finished:  # the workers are done: both pyramids at once
                            codes, uniform = _thread_map(lambda f: f(), jobs)
                        else:  # the cores are extracting: no second thread
                            codes, uniform = (f() for f in jobs)
                        self.codes.append(codes)
                        self.uniform.append(uniform)
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
        return SimpleNamespace(
            models=self.models, ids=ids, batches=self.ids, codes=self.codes, uniform=self.uniform
        )

    def cancel(self) -> None:
        """Stop the thread without waiting for it (a cancelled or failed run)."""
        self._stop.set()
        self._done.set()


def _thread_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` on up to :data:`ENCODE_THREADS` threads (in order).

    The model fitting and batch encoding of an index refresh are numpy-bound and release
    the GIL in their large operations, so threads use the machine's cores without copying
    any features to other processes."""
    items = list(items)
    n = min(ENCODE_THREADS, len(items))
    if n <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="simile-encode") as ex:
        return list(ex.map(fn, items))


_PACK_KEY_BITS = 32  # _key_major_order: the key's top bits kept above the set and entry
# _batch_codes groups the points of nested binnings (_nested_groups) from this many points
# on: below, its fixed cost per binning and level outweighs the smaller sort (one UKBench
# image, ~500 points: uniform pyramid 1.3 ms by the entry sort against 4.2 ms grouped,
# vocabulary 2.0 against 2.4 ms; even at ~3,400 points, faster from ~6,000)
_GROUPED_MIN_POINTS = 4096


def _key_major_order(
    sk: np.ndarray, entry_set: np.ndarray, set_bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Entries of :func:`_batch_codes` ordered by (key, set), for counting them.

    One sort of values (no argsort, no gather) does it when the set and the entry's
    index fit below at least ``_PACK_KEY_BITS`` of the key's top bits: each entry is
    packed as (the key's top bits, its set, its index) and the index and set read back
    from the sorted values (about 3x faster than an argsort of the keys with their set on
    UKBench batches). Where distinct keys share those top bits (one UKBench batch in four
    of the uniform pyramids' ~290,000 entries has such a pair), the runs of equal top bits
    are sorted again by (key, set); if there are many, the exact two-key sort of all
    entries is used instead.

    Parameters
    ----------
    sk : (E,) uint64
        Keys in an order-preserving unsigned form.
    entry_set : (E,) int64
        Set of every entry, ``< 2**set_bits``.
    set_bits : int

    Returns
    -------
    order : (E,) int64
        Entries sorted by key, then set.
    ks : (E,) uint64
        ``sk[order]``.
    new : (E,) bool
        Where a (key, set) group starts.
    rs : (E,) int64
        ``entry_set[order]``.
    """
    E = sk.size
    new = np.empty(E, bool)
    new[:1] = True
    entry_bits = max(1, int(E - 1).bit_length())
    low = set_bits + entry_bits
    if low <= 64 - _PACK_KEY_BITS:
        packed = (sk >> np.uint64(low)) << np.uint64(low)
        packed |= entry_set.view(np.uint64) << np.uint64(entry_bits)
        packed |= np.arange(E, dtype=np.uint64)
        packed.sort()  # the values are distinct: any sort gives the same order
        order = (packed & np.uint64((1 << entry_bits) - 1)).view(np.int64)
        ks = sk[order]
        group = packed >> np.uint64(entry_bits)  # the key's top bits and the set
        np.not_equal(group[1:], group[:-1], out=new[1:])
        rs = (group & np.uint64((1 << set_bits) - 1)).view(np.int64)
        top = group >> np.uint64(set_bits)
        # exact but where distinct keys share the top bits: those runs, ordered by set
        # and index, are sorted again
        mixed = np.flatnonzero((ks[1:] != ks[:-1]) & (top[1:] == top[:-1]))
        if mixed.size == 0:
            return order, ks, new, rs
        if mixed.size <= 64:
            bounds = np.append(np.flatnonzero(np.append(True, top[1:] != top[:-1])), E)
            for run in np.unique(np.searchsorted(bounds, mixed, side="right")):
                a, b = bounds[run - 1], bounds[run]
                sub = order[a:b]
                order[a:b] = sub[np.lexsort((entry_set[sub], sk[sub]))]
                ks[a:b] = sk[order[a:b]]
                rs[a:b] = entry_set[order[a:b]]
                k, r = ks[a:b], rs[a:b]
                new[a + 1 : b] = (k[1:] != k[:-1]) | (r[1:] != r[:-1])
            return order, ks, new, rs
    order = np.lexsort((entry_set, sk))
    ks = sk[order]
    rs = entry_set[order]
    new[1:] = (ks[1:] != ks[:-1]) | (rs[1:] != rs[:-1])
    return order, ks, new, rs


def _nested_groups(
    binning: Any, X: np.ndarray, n_levels: int, owner: np.ndarray, set_bits: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None:
    """The (set, bin) groups of a batch's points at every level of one nested binning,
    from one sort of the points.

    The bins of a :class:`~engine.pyramid.UniformBinning` and of a
    :class:`~engine.vocabulary.VocabularyTree` are nested: a bin is a union of bins of the
    level below. Points sorted by set, then by their finest bin in an order that keeps
    every coarser bin together -- the Morton (Z-) order of the grid cells, the tree's
    leaf id -- make every level's (set, bin) groups runs of that one order, found by
    comparing neighbours, instead of a sort of all (point, level) entries.

    Parameters
    ----------
    binning : UniformBinning or VocabularyTree
    X : (m, D) float32
        The batch's (projected) points, ``m >= 1``, stacked by set.
    n_levels : int
        Levels used (finest first).
    owner : (m,) int64
        Set of every point (ascending), ``< 2**set_bits``.
    set_bits : int

    Returns
    -------
    list of (rep, count, bins, sets), one per level, or None
        ``rep`` (G,) int64 a point of every group, ``count`` (G,) int64 its points,
        ``bins`` (G,) int64 its bin id as ``binning.assign`` numbers it, ``sets`` (G,)
        int64 its set; groups in (set, order) order. None when the binning is of another
        kind, or the batch's cells need more bits than a 64-bit sort key holds (the caller
        then sorts entries).
    """
    from engine.kernels.pyramid import UniformBinning
    from engine.kernels.vocabulary import VocabularyTree

    m = X.shape[0]
    if isinstance(binning, UniformBinning):
        cells = binning.cells(X)
        top = binning.n_levels - 1  # the single bin 0 (UniformBinning.assign)
        nested = min(n_levels, top)  # levels whose bins are cells >> level
        # an offset that is a multiple of every used level's side keeps cells >> level
        # nested; B bits per dimension then hold every cell of the batch
        g = 1 << max(nested - 1, 0)
        off = -(int(cells.min()) // g) * g
        B = max(1, (int(cells.max()) + off).bit_length())
        D = cells.shape[1]
        if D * B + set_bits > 63:
            return None
        # bit i of dimension d at bit i * D + d: the cells at level l are the bits >= l * D
        spread = np.zeros(1 << B, np.uint64)
        v = np.arange(1 << B, dtype=np.uint64)
        for i in range(B):
            spread |= ((v >> np.uint64(i)) & np.uint64(1)) << np.uint64(i * D)
        code = owner.astype(np.uint64) << np.uint64(D * B)
        for d in range(D):
            code |= spread[cells[:, d] + off] << np.uint64(d)
        perm = np.argsort(code)
        s = code[perm]
        ct = np.ascontiguousarray(cells.T)  # (D, m): each dimension's cells contiguous
        mult = [np.int64(x) for x in binning.mult_]
        levels = []
        for lev in range(n_levels):
            shift = np.uint64(D * (lev if lev < top else B))  # top: the set alone
            new = np.empty(m, bool)
            new[0] = True
            np.not_equal(s[1:] >> shift, s[:-1] >> shift, out=new[1:])
            starts = np.flatnonzero(new)
            rep = perm[starts]
            if lev < top:  # (cells[rep] >> lev) @ mult_ as assign (wraps), without
                # numpy's integer matmul (not vectorised: 3x the time of these passes)
                bins = (ct[0][rep] >> lev) * mult[0]
                for d in range(1, D):
                    bins += (ct[d][rep] >> lev) * mult[d]
            else:
                bins = np.zeros(starts.size, np.int64)
            owners = (s[starts] >> np.uint64(D * B)).view(np.int64)
            levels.append((rep, np.diff(np.append(starts, m)), bins, owners))
        return levels
    if isinstance(binning, VocabularyTree) and binning.ids_follow_parents:
        bins_all = binning.assign_bins(X)  # (m, levels) finest first
        leaf_bits = max(1, int(binning.n_leaves - 1).bit_length())
        if leaf_bits + set_bits > 63:
            return None
        code = (owner << leaf_bits) | bins_all[:, 0]
        perm = np.argsort(code)
        other_set = np.empty(m, bool)
        other_set[0] = True
        so = owner[perm]
        np.not_equal(so[1:], so[:-1], out=other_set[1:])
        levels = []
        for lev in range(n_levels):
            b = bins_all[perm, lev]
            new = other_set.copy()
            new[1:] |= b[1:] != b[:-1]
            starts = np.flatnonzero(new)
            levels.append((perm[starts], np.diff(np.append(starts, m)), b[starts], so[starts]))
        return levels
    return None


def _batch_codes(
    pm: PyramidMatch, sets: Sequence[np.ndarray] | _Stack, *, weights: bool = False
) -> SimpleNamespace:
    """Pyramids of a batch of sets as the search data needs them: the unique bin keys of
    every set with their counts (Eq. 3.6) and levels -- the keys and counts of
    ``pm.encode(sets)``, without the per-entry bin costs, columns and shifts that
    encoding computes for other weightings and kernels (the index encodes every image
    with this: half the time of ``encode`` on UKBench).

    Entries come out sorted by (set, key), as :class:`~engine.search.IntersectionIndex`
    holds its rows, and with the batch's columns: one sort of the entries by key and set
    (:func:`_key_major_order`), then a stable radix sort by set. The entries sorted are
    the (set, bin) groups of every level, found from one sort of the points per binning
    (:func:`_nested_groups`; the index's grids and trees are nested), or, for other
    binnings and cells too far out for that sort's key, all (point, level) pairs.
    Batches of fewer than ``_GROUPED_MIN_POINTS`` points (a query) sort all pairs.
    On UKBench's 500 images (batches of 64, one thread, 12 interleaved runs) the uniform
    pyramids take a median 0.49 s against 0.77 s with the sort of all entries, the
    vocabulary pyramids 0.34 s against 0.36 s (their tree descent is most of it).

    ``sets``: a list of (M_i, D) arrays (validated), or a :class:`_Stack` read from the
    store (taken as it is).

    Returns
    -------
    SimpleNamespace
        ``row, key, count, level`` (U,) int64 / int64 / int32 / int8; ``sizes`` (n,)
        int64; ``n``; ``ukeys`` (K,) int64 the sorted distinct keys and ``col`` (U,)
        int32 each entry's position in them; with ``weights`` also ``w, wp`` (U,)
        float64, the global weights of each bin and of its parent (0 above the top
        level), and ``n_shifts`` (what ``histograms_from_codes(..., "pm")`` reads).
    """
    from engine.kernels.pyramid import GOLDEN, level_salt, mix64

    if isinstance(sets, _Stack):
        if sets.X.ndim != 2 or sets.X.shape[1] != pm.dim_:
            raise ValueError(f"sets must have {pm.dim_} columns, got shape {sets.X.shape}")
        X, sizes = sets.X, np.asarray(sets.sizes, np.int64)
    else:
        arrays = pm.prepare(list(sets), "sets")
        sizes = np.array([a.shape[0] for a in arrays], np.int64)
        X = np.concatenate(arrays) if arrays else None
    n = int(sizes.size)
    m = int(sizes.sum())
    set_bits = max(1, int(n - 1).bit_length())
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)  # set of every point
    if m:
        X = pm.project(X)
        from engine.kernels.pyramid import UniformBinning

        grouped_ok = not weights or all(isinstance(b, UniformBinning) for b in pm.binnings_)
        if m >= _GROUPED_MIN_POINTS and grouped_ok:
            grouped = [
                _nested_groups(b, X, pm.levels_of(b), owner, set_bits) for b in pm.binnings_
            ]
            if all(g is not None for g in grouped):
                return _codes_from_groups(pm, grouped, n, sizes, weights)
    blocks: list[tuple[int, int]] = []  # (shift, level) of every run of m entries
    keys, all_bins = [], []
    if m:
        for t, binning in enumerate(pm.binnings_):
            L = pm.levels_of(binning)
            lean = getattr(binning, "assign_bins", None)  # VocabularyTree: no distances
            bins = lean(X) if lean is not None else binning.assign(X)[0]
            # engine.pyramid.level_key of every level at once (same keys, one call)
            salt = np.array([level_salt(t, lev) for lev in range(L)], np.uint64)
            ua = np.ascontiguousarray(bins[:, :L].T, np.int64).view(np.uint64)  # (L, m)
            keys.append(mix64(ua * GOLDEN + salt[:, None]).ravel())
            blocks += [(t, lev) for lev in range(L)]
            all_bins.append(bins)
    # every (point, level) pair an entry of its own: entry (block b, point p) at b * m + p
    E = len(blocks) * m
    return _codes_from_entries(
        pm,
        blocks,
        (np.concatenate(keys) if keys else np.zeros(0, np.uint64)) ^ np.uint64(1 << 63),
        np.tile(owner, len(blocks)),
        np.ones(E, np.int64),
        np.repeat(np.arange(len(blocks)), m),
        n,
        sizes,
        weights,
        point=np.tile(np.arange(m), len(blocks)),
        all_bins=all_bins,
    )


def _codes_from_groups(
    pm: PyramidMatch,
    grouped: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]],
    n: int,
    sizes: np.ndarray,
    weights: bool,
) -> SimpleNamespace:
    """:func:`_batch_codes` from the (set, bin) groups of every binning and level
    (:func:`_nested_groups`): the same keys, counts and layout, with the sort over the
    groups instead of over every (point, level) entry (UKBench batches: 0.58 as many
    uniform entries, 0.37 as many vocabulary ones)."""
    from engine.kernels.pyramid import level_key

    U = sum(g[0].size for levels in grouped for g in levels)
    blocks = [(t, lev) for t, levels in enumerate(grouped) for lev in range(len(levels))]
    sk = np.empty(U, np.uint64)
    entry_set = np.empty(U, np.int64)
    cnt = np.empty(U, np.int64)
    blk_all = np.empty(U, np.uint8 if len(blocks) <= 256 else np.int64)
    at = b = 0
    for t, levels in enumerate(grouped):
        for lev, (rep, count, bins, sets) in enumerate(levels):
            part = slice(at, at + rep.size)
            sk[part] = level_key(t, lev, bins).view(np.uint64) ^ np.uint64(1 << 63)
            entry_set[part] = sets
            cnt[part] = count
            blk_all[part] = b
            at, b = at + rep.size, b + 1
    # weights: uniform binnings only (_batch_codes), constant per level: no point needed
    return _codes_from_entries(pm, blocks, sk, entry_set, cnt, blk_all, n, sizes, weights)


def _codes_from_entries(
    pm: PyramidMatch,
    blocks: list[tuple[int, int]],
    sk: np.ndarray,
    entry_set: np.ndarray,
    cnt: np.ndarray,
    blk_all: np.ndarray,
    n: int,
    sizes: np.ndarray,
    weights: bool,
    *,
    point: np.ndarray | None = None,
    all_bins: list[np.ndarray] | None = None,
) -> SimpleNamespace:
    """The layout of :func:`_batch_codes` from its entries: (U,) ``sk`` keys in the
    order-preserving unsigned form, ``entry_set`` sets, ``cnt`` point counts, ``blk_all``
    indices into ``blocks`` ((binning, level) pairs), laid out block after block, with
    ``point`` (a point of every entry) and ``all_bins`` (every binning's (m, L) bins) for
    the weights of other than uniform binnings. Entries of one set with one key (every
    level's points when each is an entry, or a hash collision of two bins) become one,
    their counts summed, its block the first's."""
    flip = np.uint64(1 << 63)  # the order-preserving unsigned form of the keys and back
    out = SimpleNamespace(sizes=sizes, n=n)
    if sk.size == 0:
        out.row, out.key = np.zeros(0, np.int64), np.zeros(0, np.int64)
        out.count, out.level = np.zeros(0, np.int32), np.zeros(0, np.int8)
        out.ukeys, out.col = np.zeros(0, np.int64), np.zeros(0, np.int32)
        if weights:
            out.w, out.wp, out.n_shifts = np.zeros(0), np.zeros(0), len(pm.binnings_)
        return out
    order, ks, new, rs = _key_major_order(sk, entry_set, max(1, int(n - 1).bit_length()))
    if new.all():
        src, merged = order, None
    else:
        starts = np.flatnonzero(new)
        src, merged = order[starts], np.add.reduceat(cnt[order], starts)
        ks, rs = ks[starts], rs[starts]
    new_key = np.empty(ks.size, bool)
    new_key[0] = True
    np.not_equal(ks[1:], ks[:-1], out=new_key[1:])
    col = np.cumsum(new_key) - 1
    out.ukeys = (ks[new_key] ^ flip).view(np.int64)  # ascending: the sort was key-major
    # set-major order, keys ascending within a set: a stable (radix) sort by set
    rdtype = np.uint8 if n <= 1 << 8 else np.uint16 if n <= 1 << 16 else np.int64
    by_row = np.argsort(rs.astype(rdtype), kind="stable")
    out.row = np.repeat(np.arange(n, dtype=np.int64), np.bincount(rs, minlength=n))
    out.key = (ks[by_row] ^ flip).view(np.int64)
    idx = src[by_row]  # the (first) entry of every output position
    out.count = (cnt[idx] if merged is None else merged[by_row]).astype(np.int32)
    blk = blk_all[idx]
    out.level = np.array([lev for _, lev in blocks], np.int8)[blk]
    out.col = col[by_row].astype(np.int32)
    if weights:
        p = None if point is None else point[idx]
        out.w, out.wp = _entry_weights(pm, blocks, all_bins or [], blk, p)
        out.n_shifts = len(pm.binnings_)
    return out


def _entry_weights(
    pm: PyramidMatch,
    blocks: list[tuple[int, int]],
    all_bins: list[np.ndarray],
    blk: np.ndarray,
    p: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Global weights of the bins of entries (block ``blk``, point ``p``) and of their
    parents (0 above the top level), for :func:`_batch_codes` (uniform binnings: by
    block alone, ``p`` is not read)."""
    from engine.kernels.pyramid import UniformBinning

    if all(isinstance(b, UniformBinning) for b in pm.binnings_):
        # weights constant per level (Lemma 1): a lookup by block
        lut = np.zeros(len(blocks) + 1)
        for b, (t, lev) in enumerate(blocks):
            lut[b] = pm.binnings_[t].bin_weights(lev, np.zeros(1, np.int64))[0]
        top = np.array([lev + 1 == pm.levels_of(pm.binnings_[t]) for t, lev in blocks] + [True])
        lut_p = np.where(top[:-1], 0.0, lut[1:])  # the parent is the next block
        return lut[blk], lut_p[blk]
    w = np.zeros(blk.size)
    wp = np.zeros(blk.size)
    for b, (t, lev) in enumerate(blocks):
        at = np.flatnonzero(blk == b)
        if at.size == 0:
            continue
        binning, bins = pm.binnings_[t], all_bins[t]
        w[at] = binning.bin_weights(lev, bins[p[at], lev])
        if lev + 1 < pm.levels_of(binning):
            wp[at] = binning.bin_weights(lev + 1, bins[p[at], lev + 1])
    return w, wp


def _intersection_index(
    codes: SimpleNamespace, values: np.ndarray, *, columns: bool = True
) -> IntersectionIndex:
    """Histograms of :func:`_batch_codes` with entry ``values`` (zeros dropped) as an
    :class:`~engine.search.IntersectionIndex`, with its columns (from the codes' own)
    unless ``columns`` is False."""
    keep = values > 0
    row = codes.row[keep]
    indptr = np.zeros(codes.n + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=codes.n), out=indptr[1:])
    if not columns:
        return IntersectionIndex(indptr, codes.key[keep], values[keep].astype(np.float32))
    col = codes.col[keep]
    used = np.zeros(codes.ukeys.size, bool)
    used[col] = True
    renum = (np.cumsum(used) - 1).astype(np.int32)
    return IntersectionIndex(
        indptr,
        codes.key[keep],
        values[keep].astype(np.float32),
        columns=(codes.ukeys[used], renum[col]),
    )


def _fit_weights(m: _Models, all_codes: list[SimpleNamespace], random_state: int = 0) -> None:
    """idf of every vocabulary bin and of the leaves (bag of words) over the whole
    collection, and the densified WTA permutations for that many words."""
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


_ALL_PARTS = frozenset({"uniform", "wta", "rh"})


def _encode(
    models: _Models,
    ids: np.ndarray,
    sets: Sequence[np.ndarray] | _Stack | None,
    codes: SimpleNamespace | None = None,
    parts: frozenset[str] = _ALL_PARTS,
    uniform: IntersectionIndex | None = None,
) -> _Encoded:
    """Encode a batch of images with fitted models (``codes``: their vocabulary pyramids;
    ``parts``: which of the optional encodings to compute -- a query needs only some;
    ``uniform``: their uniform pyramids, already encoded -- ``sets`` may then be None)."""
    if codes is None:
        codes = _batch_codes(models.vocab, sets)
    values = code_values(
        codes,
        weighting="idf",
        idf=models.idf,
        idf_keys=models.idf_keys,
        idf_unknown=models.idf_unknown,
    )
    vocab = _intersection_index(codes, values)
    n = len(ids)
    if uniform is None and "uniform" in parts:
        uniform = _uniform_index(models, sets)
    elif uniform is None:
        uniform = IntersectionIndex(np.zeros(n + 1, np.int64), np.zeros(0), np.zeros(0))
    bow = (
        _bow_from_codes(models, codes)
        if parts == _ALL_PARTS or "wta" in parts
        else sp.csr_matrix((n, len(models.leaf_keys)), dtype=np.float32)
    )
    wta = np.zeros((n, models.dwta.n_codes), np.uint8)
    if "wta" in parts and n:
        wta = models.dwta.hash(bow)
    # random hyperplanes over the embedding of the idf-weighted pyramid (Eqs. 5.8-5.11:
    # values are square roots, so dot products approximate the weighted intersection)
    rh = np.zeros((n, models.rh.n_bits // 8), np.uint8)
    if "rh" in parts and n:
        if models.rh.n_cached == 0 and len(models.idf_keys):
            # hyperplane coordinates of every bin known at fit time (once, ~0.7 s at
            # 1024 bits x 21k bins): hashing a query's pyramid is then one sparse row
            # times the cache (4 * n_bits bytes per bin, 86 MB at 10,000 images)
            models.rh.cache(models.idf_keys)
        rh = models.rh.hash(_embedding(vocab))
    return _Encoded(np.asarray(ids, np.int64), vocab, uniform, bow, np.asarray(wta), rh)


def _embedding(ix: IntersectionIndex):
    """Sparse vectors whose dot product approximates the intersection: sqrt of the values
    (with the index's columns, which spare the hash a sort of the keys)."""
    from engine.kernels.pyramid import SparseEmbedding

    keys = ix.keys if ix._keys is not None else ix.row_keys(slice(None))  # keys not kept
    return SparseEmbedding(
        ix.indptr, keys, np.sqrt(ix.values).astype(np.float32), columns=ix.columns()
    )


def _rehash_bits(models: _Models, data: _Encoded, n_bits: int) -> None:
    """Switch to ``n_bits`` hyperplanes: new model and bits of every stored row (from the
    stored pyramids alone; the bits of hyperplane ``b`` depend only on ``(seed, b, key)``,
    so the first bits are unchanged)."""
    from engine.hashing.lsh import RandomHyperplaneHash

    models.rh = RandomHyperplaneHash(n_bits, random_state=models.rh.random_state)
    models.rh.cache(models.idf_keys)
    n = len(data.ids)
    data.rh = np.zeros((n, n_bits // 8), np.uint8)
    for s0 in range(0, n, 2048):
        part = data.vocab.subset(np.arange(s0, min(n, s0 + 2048)))
        data.rh[s0 : s0 + part.indptr.size - 1] = models.rh.hash(_embedding(part))


def _bow_from_codes(models: _Models, codes) -> sp.csr_matrix:
    """tf-idf bag of words over the tree's leaves (level 0 of the vocabulary pyramid)."""
    n = len(codes.sizes)
    nw = len(models.leaf_keys)
    leaf = np.flatnonzero(codes.level == 0)
    k = codes.key[leaf]
    pos = np.minimum(np.searchsorted(models.leaf_keys, k), max(nw - 1, 0))
    ok = models.leaf_keys[pos] == k if nw else np.zeros(k.shape, bool)
    rows = codes.row[leaf][ok]
    cols = pos[ok]
    tf = codes.count[leaf][ok] / np.maximum(codes.sizes[rows], 1)
    data = tf * models.leaf_idf[cols]
    bow = sp.csr_matrix((data.astype(np.float32), (rows, cols)), shape=(n, nw))
    bow.sum_duplicates()
    lens = np.diff(bow.indptr)
    norms = np.sqrt(np.bincount(np.repeat(np.arange(n), lens), weights=bow.data**2, minlength=n))
    bow.data = (bow.data / np.repeat(np.where(norms > 0, norms, 1.0), lens)).astype(np.float32)
    return bow


# --------------------------------------------------------------------------- collection
class Collection:
    """A photo folder with its persistent index. Open with :meth:`Collection.open`.

    Attributes
    ----------
    folder : Path
        The photo folder (absolute).
    index_dir : Path
        Where the index is stored.
    """

    def __init__(self, folder: Path, store: IndexStore) -> None:
        self.folder = folder
        self.store = store
        self.index_dir = store.index_dir
        self._models: _Models | None = None
        self._data: _Encoded | None = None
        self._generation: int | None = None
        self._paths: list[Path] = []
        self._row_of_id: dict[int, int] = {}
        self._bands: dict[str, Any] = {}
        self._uniform_self: np.ndarray | None = None
        self._lock = threading.RLock()
        self._last_scored = 0  # rows scored exactly by the last query (benchmarks)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        folder: str | os.PathLike,
        index_dir: str | os.PathLike | None = None,
        *,
        create: bool = True,
        readonly: bool = False,
    ) -> Collection:
        """Open the index of ``folder`` (creating it unless ``create=False`` or ``readonly``).

        Parameters
        ----------
        folder : path-like
            The photo folder; must exist.
        index_dir : path-like, optional
            Index location; default :func:`default_index_dir`.
        create : bool
            Create an empty index when there is none.
        readonly : bool
            Open for queries only: no writer lock, :meth:`update` refused.

        Raises
        ------
        FileNotFoundError
            ``folder`` is not a directory, or (``engine.store.IndexNotFoundError``) there is
            no index and it may not be created.
        engine.store.IndexLockedError
            Another process is updating the index (``readonly=False``).
        """
        path = Path(os.path.abspath(os.fspath(folder)))
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: not a folder")
        idx = Path(index_dir).expanduser() if index_dir is not None else default_index_dir(path)
        store = IndexStore.open(idx, create=create, readonly=readonly)
        return cls(path, store)

    def close(self) -> None:
        """Release the index (and the writer lock)."""
        self.store.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.paths())

    def __repr__(self) -> str:
        return f"Collection({str(self.folder)!r}, index_dir={str(self.index_dir)!r})"

    # ------------------------------------------------------------------ indexing
    def update(
        self, *, jobs: int | None = None, cancel: threading.Event | None = None
    ) -> Iterator[IndexProgress]:
        """Bring the index up to date with the folder: a generator of progress.

        Scans the folder, extracts features of new and changed images in ``jobs``
        processes (records unreadable files with their reason), drops deleted ones, then
        refreshes the search models and data (see the module docstring).

        Yields
        ------
        IndexProgress
            ``(done, total, path, status, message)``; status is one of "scanning",
            "indexed", "unchanged", "failed", "removed", "finalizing".

        Returns
        -------
        IndexSummary
            As ``StopIteration.value`` (``summary = yield from col.update()``).
        Cancelling (``cancel.set()``) keeps every finished batch; the summary says
        ``cancelled=True``.
        """
        # a first index fits its models while the features are still being extracted
        prefit = None if self.store.has_state(_MODELS) else _Prefit(self.store)
        try:
            summary = yield from ingest(
                self.store,
                self.folder,
                jobs=jobs,
                cancel=cancel,
                feature_kwargs=FEATURE_KWARGS,
                spread=PREFIT_SPREAD if prefit is not None else 0,
                on_plan=prefit.plan if prefit is not None else None,
            )
        except BaseException:
            if prefit is not None:
                prefit.cancel()
            raise
        if cancel is not None and cancel.is_set():
            if prefit is not None:
                prefit.cancel()
            return summary
        yield IndexProgress(0, 0, None, "finalizing", "fitting models and hashing")
        t0 = time.perf_counter()
        prepared = prefit.finish() if prefit is not None else None
        self._refresh(save=True, cancel=cancel, prepared=prepared)
        seconds = summary.seconds + (time.perf_counter() - t0)
        return dataclasses.replace(
            summary,
            seconds=seconds,
            cancelled=bool(cancel is not None and cancel.is_set()),
        )

    def _sets(self, ids: np.ndarray) -> _Stack:
        return _stacked(self.store, ids)

    def _refresh(
        self,
        *,
        save: bool,
        cancel: threading.Event | None = None,
        prepared: SimpleNamespace | None = None,
    ) -> None:
        """Make the in-memory models/data cover exactly the store's usable images
        (``prepared``: models and encoded batches from :class:`_Prefit`, used when the
        models are to be fitted)."""
        with self._lock:
            store = self.store
            ids = store.ids("ok")
            models = self._models
            data = self._data
            uniform_part = None  # (uniform pyramids, their state file) written early
            if models is None and store.has_state(_MODELS):
                try:
                    models = _Models.from_state(store.load_state(_MODELS))
                    data = (
                        _Encoded.from_state(store.load_state(_DATA), consume=True)
                        if store.has_state(_DATA)
                        else None
                    )
                except (KeyError, ValueError):
                    models, data = None, None
            changed = False
            if ids.size == 0:
                self._install(None, None, ids)
                return
            refit = models is None or ids.size > REFIT_GROWTH * max(models.n_fit, 1)
            if not refit:
                # check feature dimension of one image
                feats = store.get_features(int(ids[0]))
                refit = feats.descriptors.shape[1] != models.dim and len(feats) > 0
            if refit:
                pre = prepared
                if pre is not None and not np.isin(pre.ids, ids).all():
                    pre = None  # cannot happen within one run; refit from scratch then
                if pre is not None:
                    from engine.hashing.lsh import RandomHyperplaneHash

                    models = pre.models
                    models.rh = RandomHyperplaneHash(rh_bits(ids.size), random_state=0)
                    models.n_fit = int(ids.size)
                    rest = ids[~np.isin(ids, pre.ids)]
                    pre_parts = list(zip(pre.batches, pre.codes, pre.uniform, strict=True))
                else:
                    n_feat = np.array([r.n_features for r in store.records("ok")[:200]])
                    models = _fit_binnings(self._sets(_sample_ids(ids, n_feat)).sets(), ids.size)
                    rest = ids
                    pre_parts = []
                batches = [
                    rest[s0 : s0 + ENCODE_BATCH] for s0 in range(0, rest.size, ENCODE_BATCH)
                ]
                merging = None
                if pre_parts and not batches:
                    # (a first index: every image was encoded during extraction) their
                    # uniform pyramids need no collection-wide weight: merged, and written
                    # (most of the data's bytes), while the idf and the rest are computed
                    from concurrent.futures import ThreadPoolExecutor

                    def merge_uniform(parts: list[IntersectionIndex]):
                        ix = IntersectionIndex.concat(parts)
                        part = None
                        if save and not store.readonly:
                            part = store.write_state_part(_DATA, _pyramid_state("uniform", ix))
                        return ix, part

                    merger = ThreadPoolExecutor(1, thread_name_prefix="simile-merge")
                    merging = merger.submit(merge_uniform, [u for _, _, u in pre_parts])
                    merger.shutdown(wait=False)
                all_codes = _thread_map(
                    lambda b: _batch_codes(models.vocab, self._sets(b)), batches
                )
                _fit_weights(models, [c for _, c, _ in pre_parts] + all_codes)
                parts = _thread_map(
                    lambda p: _encode(models, p[0], None, p[1], uniform=p[2]), pre_parts
                )
                parts += _thread_map(
                    lambda k: _encode(models, batches[k], self._sets(batches[k]), all_codes[k]),
                    range(len(batches)),
                )
                del all_codes, pre_parts
                uniform = None
                if merging is not None:
                    uniform, part = merging.result()
                    if part is not None:
                        uniform_part = (uniform, part)
                data = _Encoded.concat(parts, uniform=uniform)
                changed = True
            if (
                not refit
                and data is not None
                and save
                and not store.readonly
                and models.rh.n_bits < rh_bits(ids.size)
            ):
                # more hyperplanes for a grown collection (or an index written before
                # rh_bits): re-hash the stored pyramids, no feature is read; done by
                # update() only, readers use the stored bits
                _rehash_bits(models, data, rh_bits(ids.size))
                changed = True
            if data is not None:
                keep = np.flatnonzero(np.isin(data.ids, ids))
                if keep.size != data.ids.size:
                    data = data.subset(keep)
                    changed = True
            have = data.ids if data is not None else np.zeros(0, np.int64)
            new_ids = ids[~np.isin(ids, have)]
            parts = [data] if data is not None and len(data.ids) else []
            new_batches = [
                new_ids[s : s + ENCODE_BATCH] for s in range(0, new_ids.size, ENCODE_BATCH)
            ]

            def encode_new(batch: np.ndarray) -> _Encoded | None:
                if cancel is not None and cancel.is_set() and save:
                    return None  # cancelled: what is encoded so far is kept
                return _encode(models, batch, self._sets(batch))

            encoded = [e for e in _thread_map(encode_new, new_batches) if e is not None]
            parts.extend(encoded)
            changed = changed or bool(encoded)
            data = _Encoded.concat(parts) if parts else _encode(models, new_ids[:0], [])
            # rows in ascending id order (= store order)
            order = np.argsort(data.ids, kind="stable")
            if not np.array_equal(order, np.arange(order.size)):
                data = data.subset(order)
            if save and changed and not store.readonly:
                store.save_state(_MODELS, models.to_state())
                if uniform_part is not None and uniform_part[0] is data.uniform:
                    store.save_state(_DATA, data.to_state(uniform=False), parts=[uniform_part[1]])
                else:  # rows changed since (a part that no state names: the store's gc deletes it)
                    store.save_state(_DATA, data.to_state())
            self._install(models, data, data.ids)

    def _install(self, models: _Models | None, data: _Encoded | None, ids: np.ndarray) -> None:
        self._models, self._data = models, data
        self._generation = self.store.generation
        recs = {r.id: r.path for r in self.store.records("ok")}
        self._paths = [Path(recs[int(i)]) for i in ids]
        self._row_of_id = {int(i): r for r, i in enumerate(ids)}
        self._bands = {}
        self._uniform_self = None

    def _ensure(self) -> tuple[_Models, _Encoded]:
        with self._lock:
            if self._data is None or self._generation != self.store.generation:
                self._refresh(save=False)
            if self._models is None or self._data is None:
                raise LookupError(
                    f"the index of {self.folder} holds no usable image; run 'simile index'"
                )
            return self._models, self._data

    # ------------------------------------------------------------------ catalogue
    def paths(self) -> list[Path]:
        """Usable images in stable order (the row order of :meth:`kernel_matrix` etc.)."""
        with self._lock:
            if self._generation != self.store.generation:
                return [Path(p) for p in self.store.paths("ok")]
            return list(self._paths)

    def failures(self) -> list[tuple[Path, str]]:
        """Files that could not be indexed, with the reason."""
        return [(Path(p), r) for p, r in self.store.failures()]

    def features(self, path: str | os.PathLike) -> Features:
        """Stored features of an indexed image (KeyError if it is not indexed)."""
        return self.store.get_features(Path(os.path.abspath(os.fspath(path))))

    def load_array(self, name: str) -> np.ndarray:
        """A named array saved with :meth:`save_array` (KeyError if absent)."""
        return np.asarray(self.store.load_array(name, mmap=False))

    def save_array(self, name: str, arr: np.ndarray) -> None:
        """Persist an array in the index (atomic), e.g. a learned metric or clusters."""
        self.store.save_array(name, np.asarray(arr))

    # ------------------------------------------------------------------ querying
    def _query_features(self, image: Any) -> tuple[Features, int | None]:
        """Features of a query and its row in the collection (None if outside)."""
        if isinstance(image, Features):
            return image, None
        if isinstance(image, np.ndarray):
            return extract_features(image, **FEATURE_KWARGS), None
        path = Path(os.path.abspath(os.fspath(image)))
        rec = self.store.record(path)
        if rec is not None and rec.status == "ok":
            return self.store.get_features(rec.id), self._row_of_id.get(rec.id)
        return extract_features(path, **FEATURE_KWARGS), None

    def query(self, image: Any, *, method: str = "hybrid", top: int = 20) -> list[Hit]:
        """Most similar images of the collection, best first.

        Parameters
        ----------
        image : path, (H, W[, 3]) uint8 ndarray or Features
            A query inside or outside the collection. Nothing is excluded: an image of
            the collection normally finds itself first.
        method : {"hybrid", "vocabulary", "uniform", "wta", "learned"}
            See the module docstring.
        top : int
            Number of hits.

        Returns
        -------
        list of Hit
            Higher score = more similar.

        Raises
        ------
        ValueError
            Unknown method or ``top < 1``.
        LookupError
            Empty index, or ``"learned"`` without a learned model.
        engine.imageio.ImageLoadError
            The query image cannot be read.
        """
        if method not in available_methods():
            raise ValueError(
                f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}"
            )
        if int(top) != top or top < 1:
            raise ValueError(f"top must be a positive integer, got {top!r}")
        if method == "learned" and method not in _REGISTRY:
            import engine.workflows.feedback  # noqa: F401  (registers the "learned" method)
        if method in _REGISTRY:
            if method == "learned":
                from engine.workflows.feedback import load_model

                load_model(self)  # LookupError saying how to learn, before any extraction
            return _REGISTRY[method](self, image, int(top))  # the query as given
        models, data = self._ensure()
        feats, _row = self._query_features(image)
        rows, scores = self._search(models, data, feats, method, int(top))
        return [Hit(self._paths[r], float(s)) for r, s in zip(rows, scores, strict=True)]

    def _query_encoding(
        self, models: _Models, feats: Features, parts: frozenset[str] = _ALL_PARTS
    ) -> _Encoded:
        d = feats.descriptors
        if len(d) and d.shape[1] != models.dim:
            raise ValueError(
                f"query features have {d.shape[1]} dimensions, the index {models.dim}"
            )
        d = d.reshape(-1, models.dim)
        return _encode(models, np.array([-1]), [d], parts=parts)

    def _candidates(self, kind: str, q: _Encoded, data: _Encoded, n_want: int) -> np.ndarray:
        """Rows proposed by the hashes: ``kind`` "fused" (the query default, see
        :func:`_fused_candidates`) or the banded hash index of "wta" or "rh"."""
        from engine.hashing.lsh import band_keys, choose_params

        n = len(data.ids)
        if kind in ("fused", "hashes"):
            postings = None
            if kind == "fused":
                if "postings" not in self._bands:
                    # inverted file of the bag of words: (n_words, n) CSR, one row of
                    # postings per visual word (about 50 MB at 10,000 images)
                    self._bands["postings"] = data.bow.T.tocsr()
                postings = self._bands["postings"]
            return _fused_candidates(q, data, n_want, postings)
        codes = data.wta if kind == "wta" else data.rh
        qcodes = q.wta if kind == "wta" else q.rh
        if kind not in self._bands:
            # the banded inverted index of engine.lsh.BandedIndex (one sorted key array per
            # table); its vote join is done here with one bincount for a single query
            near, far = (0.35, 0.12) if kind == "wta" else (0.25, 0.02)
            p = choose_params(n, codes.shape[1], 0.95, s_near=near, s_far=far)
            keys = band_keys(codes, p.n_tables, p.band_size)  # (n, T)
            order = np.argsort(keys, axis=0, kind="stable")
            skeys = np.take_along_axis(keys, order, axis=0).T.copy()
            self._bands[kind] = (p, skeys, order.T.copy())
        p, skeys, sids = self._bands[kind]
        qk = band_keys(qcodes[:1], p.n_tables, p.band_size)[0]
        hits = [
            sids[t, np.searchsorted(skeys[t], qk[t]) : np.searchsorted(skeys[t], qk[t], "right")]
            for t in range(p.n_tables)
        ]
        votes = np.bincount(np.concatenate(hits), minlength=n) if n else np.zeros(0, np.int64)
        ids = np.flatnonzero(votes)
        ids = ids[np.lexsort((ids, -votes[ids]))]  # most shared bands first, then id
        if ids.size > n_want:
            ids = ids[:n_want]
        elif ids.size < n_want:
            # too few colliding: fill with the best by code agreement (bulk, cheap)
            from engine.hashing.wta import code_agreement

            agree = (
                code_agreement(qcodes, codes)[0]
                if kind == "wta"
                else _bit_agreement(qcodes, codes)
            )
            agree[ids] = np.inf
            more = np.argsort(-agree, kind="stable")[:n_want]
            ids = more
        return np.asarray(ids, np.int64)

    def _search(
        self, models: _Models, data: _Encoded, feats: Features, method: str, top: int
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(data.ids)
        frac = _candidate_fraction(method, CANDIDATE_KIND)
        n_cand = min(n, max(MIN_CANDIDATES, top, int(np.ceil(frac * n))))
        hashed = method == "wta" or n > EXHAUSTIVE_LIMIT
        parts = {"uniform"} if method == "uniform" else set()
        if hashed:
            parts |= {"wta", "rh"}
        q = self._query_encoding(models, feats, frozenset(parts))
        if not hashed:
            rows = None
        else:
            # rank fusion of WTA codes, hyperplane bits and the bag-of-words inverted file
            # (bench_scale.py: recall@10 1.00 / 0.98 at 2 % scored on 10k generated views)
            rows = self._candidates(CANDIDATE_KIND, q, data, n_cand)
        self._last_scored = n if rows is None else int(rows.size)
        if method == "uniform":
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
            if self._uniform_self is None:
                self._uniform_self = data.uniform.self_similarity()
            sx = self._uniform_self if rows is None else self._uniform_self[rows]
            den = np.sqrt(sx * float(qv.sum()))
            scores = np.where(den > 0, raw / np.where(den > 0, den, 1.0), 0.0)
        else:
            qk, qv = q.vocab.row(0)
            scores = data.vocab.score(qk, qv, rows)
        all_rows = np.arange(n) if rows is None else rows
        k = min(top if method != "hybrid" else max(top, VERIFY_TOP), scores.size)
        best = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
        best = best[np.lexsort((all_rows[best], -scores[best]))]
        out_rows, out_scores = all_rows[best], scores[best]
        if method == "hybrid":
            out_scores = self._verify(feats, out_rows, out_scores.copy())
            order = np.lexsort((out_rows, -out_scores))
            out_rows, out_scores = out_rows[order], out_scores[order]
        return out_rows[:top], out_scores[:top]

    def _verify(self, feats: Features, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Re-rank the first ``VERIFY_TOP`` rows by geometric inliers (same object)."""
        if len(feats) < 4:
            return scores
        ids = self._data.ids[rows[:VERIFY_TOP]]
        stored = [f for _i, f in self.store.iter_features(ids)]  # read here, not on threads

        def inliers(f: Features) -> int:
            return verify_pair(
                feats.descriptors, feats.xy, f.descriptors, f.xy, image_size=f.image_size
            ).n_inliers

        # each check is one BLAS product and one OpenCV fit, both without the GIL: the
        # checks run side by side, each on one BLAS thread
        with single_threaded_blas():
            counts = _thread_map(inliers, stored)
        for j, n_in in enumerate(counts):
            if n_in >= VERIFY_MIN_INLIERS:
                scores[j] += 1.0 + n_in / (n_in + 40.0)
        return scores

    # ------------------------------------------------------------------ pairs
    def match(self, a: Any, b: Any):
        """Explicit correspondences of two images and their geometric verification.

        Parameters
        ----------
        a, b : path (in or outside the collection), ndarray image or Features

        Returns
        -------
        engine.pyramid.MatchResult
            Vocabulary-guided pyramid-match score and correspondences (thesis 3.2.3),
            with an extra ``inliers`` attribute: (P,) bool, pairs consistent with a
            robust homography.
        """
        models, _ = self._ensure()
        fa, _ = self._query_features(a)
        fb, _ = self._query_features(b)
        res = models.vocab.match(fa.descriptors, fb.descriptors, fa.xy, fb.xy)
        from engine.index.geometry import verify

        size = max(fb.image_size) if fb.image_size else 0
        thr = max(3.0, 0.015 * size) if size else 6.0
        if len(res) >= 4:
            g = verify(res.xy_a, res.xy_b, model="homography", threshold=thr)
            res.inliers = g.inliers
        else:
            res.inliers = np.zeros(len(res), bool)
        return res

    def kernel_matrix(self, method: str = "vocabulary") -> np.ndarray:
        """(n, n) float64 normalised affinities of all images (rows = :meth:`paths`).

        ``"vocabulary"``: idf-weighted vocabulary pyramid intersection, symmetric, in
        [0, 1], diagonal 1. ``"uniform"``: normalised uniform pyramid match (Eq. 3.12).
        """
        if method not in ("vocabulary", "uniform"):
            raise ValueError(f"method must be 'vocabulary' or 'uniform', got {method!r}")
        _, data = self._ensure()
        ix = data.vocab if method == "vocabulary" else data.uniform
        with single_threaded_blas():
            K = ix.pairwise()
        d = np.diag(K).copy()
        if method == "uniform":
            den = np.sqrt(np.outer(d, d))
            K = np.where(den > 0, K / np.where(den > 0, den, 1.0), 0.0)
        np.fill_diagonal(K, (d > 0).astype(np.float64))
        return K

    def bow_matrix(self) -> sp.csr_matrix:
        """(n, n_words) float32 tf-idf bag of visual words, L2-normalised rows (:meth:`paths`)."""
        _, data = self._ensure()
        return data.bow.copy()

    def bow_vector(self, image: Any) -> sp.csr_matrix:
        """(1, n_words) float32 tf-idf bag of words of any image, in :meth:`bow_matrix`'s
        columns (path inside or outside the collection, ndarray or Features)."""
        models, _ = self._ensure()
        feats, _row = self._query_features(image)
        return self._query_encoding(models, feats).bow

    def pyramid(self, method: str = "vocabulary") -> PyramidMatch:
        """The collection's fitted pyramid match (``"vocabulary"`` or ``"uniform"``),
        e.g. for correspondences on stored features (:class:`engine.cluster.BinnedMatcher`).
        Treat it as read-only: it is shared with the search."""
        if method not in ("vocabulary", "uniform"):
            raise ValueError(f"method must be 'vocabulary' or 'uniform', got {method!r}")
        models, _ = self._ensure()
        return models.vocab if method == "vocabulary" else models.uniform

    def duplicates(self, threshold: float = 0.3) -> list[DuplicateGroup]:
        """Groups of near-duplicate images (the same picture resized, recompressed,
        retouched, cropped a little).

        For each image, its ``DUPLICATE_NEIGHBOURS`` best ``vocabulary`` neighbours are
        verified geometrically (ratio-test correspondences + robust homography). The
        near-duplicate score of a pair is the fraction of the smaller image's features
        that are geometric inliers; pairs scoring at least ``threshold`` are linked, as
        are byte-identical files (score 1). Groups are the connected components
        (union-find).

        Parameters
        ----------
        threshold : float
            In (0, 1]. 0.3 accepts rescaled / recompressed copies; different photos of
            the same object usually score below 0.2.

        Returns
        -------
        list of DuplicateGroup
            Largest groups first; in a group the representative (most links) comes first
            with score 1.0, the others with their best link score.
        """
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        _, data = self._ensure()
        n = len(data.ids)
        link: dict[tuple[int, int], float] = {}
        row_of_path = {str(p): r for r, p in enumerate(self._paths)}
        for group in self.store.duplicate_files():
            rs = sorted(row_of_path[p] for p in group if p in row_of_path)
            for r in rs[1:]:
                link[(rs[0], r)] = 1.0
        k_nb = min(n, DUPLICATE_NEIGHBOURS + 1)
        pairs: set[tuple[int, int]] = set()
        for i in range(n):
            k, v = data.vocab.row(i)
            rows = None
            if n > EXHAUSTIVE_LIMIT:
                # (the banded WTA index reads only the query's codes: no subset of the
                # whole search data per image)
                q = SimpleNamespace(wta=data.wta[i : i + 1])
                rows = self._candidates("wta", q, data, MIN_CANDIDATES)
            s = data.vocab.score(k, v, rows)
            allr = np.arange(n) if rows is None else rows
            best = allr[np.argsort(-s, kind="stable")[:k_nb]]
            pairs.update((min(i, int(j)), max(i, int(j))) for j in best if j != i)
        todo = [pair for pair in sorted(pairs) if pair not in link]

        # features are read on this thread, a block of pairs at a time, through a bounded
        # cache (the pairs are sorted by their first image; 10,000 images' features would
        # be 2.5 GB), and each block's checks run side by side (BLAS product and OpenCV
        # fit without the GIL, one BLAS thread each)
        @functools.lru_cache(maxsize=_DUPLICATE_CACHE)
        def feats(r: int) -> Features:
            return self.store.get_features(int(data.ids[r]))

        def check(job: tuple[int, int, Features, Features]) -> tuple[int, int, float] | None:
            i, j, fa, fb = job
            v = verify_pair(fa.descriptors, fa.xy, fb.descriptors, fb.xy, image_size=fb.image_size)
            score = v.n_inliers / min(len(fa), len(fb))
            if v.n_inliers >= VERIFY_MIN_INLIERS and score >= threshold:
                return i, j, min(1.0, score)
            return None

        with single_threaded_blas():
            for s0 in range(0, len(todo), _DUPLICATE_BLOCK):
                jobs = []
                for i, j in todo[s0 : s0 + _DUPLICATE_BLOCK]:
                    fa, fb = feats(i), feats(j)
                    if min(len(fa), len(fb)) >= 4:
                        jobs.append((i, j, fa, fb))
                for hit in _thread_map(check, jobs):
                    if hit is not None:
                        link[hit[:2]] = hit[2]
        parent = np.arange(n)

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = int(parent[x])
            return x

        for i, j in link:
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
        roots = np.array([find(r) for r in range(n)], dtype=np.int64)
        out = []
        for root in np.flatnonzero(np.bincount(roots, minlength=n) > 1):
            members = np.flatnonzero(roots == root).tolist()
            degree = {m: 0 for m in members}
            best = {m: 0.0 for m in members}
            for (i, j), sc in link.items():
                if i in degree:
                    degree[i] += 1
                    degree[j] += 1
                    best[i] = max(best[i], sc)
                    best[j] = max(best[j], sc)
            rep = max(members, key=lambda m: (degree[m], -m))
            rest = sorted((m for m in members if m != rep), key=lambda m: (-best[m], m))
            out.append(
                DuplicateGroup(
                    [self._paths[rep]] + [self._paths[m] for m in rest],
                    [1.0] + [float(best[m]) for m in rest],
                )
            )
        out.sort(key=lambda g: (-len(g.paths), str(g.paths[0])))
        return out


def _candidate_fraction(method: str, kind: str) -> float:
    """Fraction of the collection scored exactly for ``method`` with candidates of
    ``kind``: ``CANDIDATE_FRACTION``, except ``uniform`` with candidates from the hashes
    alone or a banded index (``CANDIDATE_FRACTION_UNIFORM``). The fused ranking's inverted
    file brings the uniform neighbours early (10k views: recall@10 0.981 at 2 %, the same
    as at 5 %); the hash score alone needs more rows (0.943 at 2 %, 0.957 at 5 %)."""
    if method == "uniform" and kind != "fused":
        return CANDIDATE_FRACTION_UNIFORM
    return CANDIDATE_FRACTION


def _fused_candidates(
    q: _Encoded, data: _Encoded, n_want: int, postings: sp.csr_matrix | None = None
) -> np.ndarray:
    """Candidate rows from the two hashes and (optionally) an inverted file.

    Every row gets a hash score: the z-score (over the collection) of the bit agreement
    of its random-hyperplane bits of the pyramid-match embedding (thesis Eq. 5.11:
    ``P[h(x) = h(y)] = 1 - arccos(K~(x, y)) / pi`` per bit) plus ``WTA_FUSION_WEIGHT``
    times the z-score of the code agreement of its densified-WTA codes of the tf-idf bag
    of words (Chen & Shrivastava Eq. 7; the agreement estimates the WTA collision
    probability, Yagnik et al. Eq. 6). Both agreements are unbiased estimates of a
    similarity of the pair, so their standardised sum averages the two estimators' noise
    (measured on 10k views, 5 % scored: bits alone 0.978, WTA alone 0.86, the sum 0.989).

    With ``postings`` a second ranking joins: the tf-idf cosine of the bags of words
    over the tree's leaves, exact, through the inverted file (Nistér & Stewénius; only
    the postings of the query's words are read). A row's fused rank is then the best of
    its two ranks (ties: the inverted file first), i.e. about the best ``n_want / 2``
    rows of each ranking are returned; without ``postings`` (``CANDIDATE_KIND =
    "hashes"``) the best ``n_want`` rows by hash score.

    The agreements are a linear scan of compact codes, ``n x (m + bits / 8)`` bytes
    (384 bytes per image at 1024 bits: about 2 ms of CPU at 10,000 images), much cheaper
    than the exact scoring they prune.

    Parameters
    ----------
    q : _Encoded
        One query row with ``wta``, ``rh`` codes and ``bow``.
    data : _Encoded
        The collection, ``n`` rows.
    n_want : int
        Number of candidates (``<= n``).
    postings : (n_words, n) scipy.sparse.csr_matrix, optional
        ``data.bow.T`` in CSR form (the inverted file).

    Returns
    -------
    (n_want,) int64
        Candidate rows, best first (ties: lower row first).
    """
    from engine.hashing.wta import code_agreement

    n = len(data.ids)
    n_want = min(int(n_want), n)
    score = _zscore(_bit_agreement(q.rh[:1], data.rh))
    score += WTA_FUSION_WEIGHT * _zscore(code_agreement(q.wta[:1], data.wta)[0])
    rankings = [score]
    if postings is not None:
        # the query's postings only, then one pass over them (CSC mat-vec): cheaper than
        # a sparse-sparse product (which sizes its output in a first pass)
        qb = q.bow[:1].tocsr()
        sub = postings[qb.indices]
        rankings.append(np.asarray(sub.T @ qb.data.astype(np.float32), np.float64))
    k = len(rankings)
    none = np.iinfo(np.int64).max
    fused = np.full(n, none, np.int64)
    slots = np.arange(n_want, dtype=np.int64) * k
    for j, agree in enumerate(rankings):
        # only the best n_want of each ranking can enter the fused best n_want
        top = np.argpartition(-agree, n_want - 1)[:n_want] if n_want < n else np.arange(n)
        top = top[np.lexsort((top, -agree[top]))]  # by score, ties: lower row first
        # fused rank = best rank; equal ranks interleaved, the last ranking first
        fused[top] = np.minimum(fused[top], slots + (k - 1 - j))
    sel = np.flatnonzero(fused != none)
    return sel[np.argsort(fused[sel])][:n_want].astype(np.int64)


def _zscore(x: np.ndarray) -> np.ndarray:
    """(n,) float64 ``(x - mean) / std`` (``std`` 0 -> only the mean removed)."""
    x = np.asarray(x, np.float64)
    sd = float(x.std())
    return (x - x.mean()) / (sd if sd > 0 else 1.0)


def _bit_agreement(q: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Fraction of equal bits between packed bit rows ``q (1, B)`` and ``codes (n, B)``."""
    nb = codes.shape[1]
    if nb % 8 == 0 and codes.flags.c_contiguous:  # 64 bits at a time (hardware popcount)
        x = np.bitwise_xor(codes.view(np.uint64), np.ascontiguousarray(q[:1]).view(np.uint64))
    else:
        x = np.bitwise_xor(codes, q[:1])
    diff = np.bitwise_count(x).sum(axis=1, dtype=np.int64)
    return 1.0 - diff / (8.0 * nb)
