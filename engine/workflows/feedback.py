"""Learned similarity for a collection: supervision, persistence and the ``learned`` method.

Supervision comes from one of two places:

* **labels** — images in the same subfolder of the collection are similar
  (:func:`labels_from_subfolders`), the usual set-up of a photo library sorted by hand;
* **relevance marks** — a person's thumbs up / down on search results
  (:class:`Mark`, stored in the index by :func:`add_marks`), or a feedback file
  (:func:`read_feedback_file`).

Every model compares images as L2-normalised tf-idf bags of visual words of the *dense*
categorisation features (:func:`engine.cluster.category_features`, 400 RootSIFT windows
per image, cached in the index by :class:`engine.cluster.CategoryChannel`) quantised by a
4096-word vocabulary tree fitted on the supervised images (:class:`DenseBagOfWords`).
That is the representation ``tests/benchmarks/bench_learn.py`` validated (OASIS >= 1.3x
the cosine's precision@10 on Caltech-101); the index's keypoint bags
(:meth:`engine.collection.Collection.bow_matrix`, 300 SIFT keypoints per image) are not
used. The vocabulary, idf and feature settings are stored with the model.

:func:`learn` fits one of three models and stores it in the index:

``oasis``
    :class:`engine.learn.OASIS` — bilinear similarity, from triplets; ``C = 0.1``, the
    paper's margin 1, iterate averaging, early stopping on held-out images.
``boostssc`` / ``boostpro``
    :class:`engine.learn.BoostedSSC` / :class:`engine.learn.BoostPro` — weighted
    Hamming embeddings, on the bags reduced to 64 dimensions by a truncated SVD
    (the boosting needs dense, low-dimensional input; see :func:`engine.learn.reduce_dimension`).

Importing this module registers the ``learned`` search method with
:func:`engine.collection.register_method`.

Feedback file format
--------------------
CSV with a header ``query,result,relevant`` (``relevant``: 1/0, yes/no, true/false,
+/-, up/down), or JSON: ``{"marks": [{"query": path, "result": path, "relevant": bool}]}``
(a bare list of such objects is accepted too). Relative paths are relative to the
collection folder.
"""

from __future__ import annotations

import csv
import json
import os
import threading
import time
import uuid
import weakref
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from engine.cluster.discovery import CATEGORY_FEATURES as _CATEGORY_FEATURES
from engine.core.progress import run_to_end
from engine.learn.models import (
    OASIS,
    BoostedSSC,
    BoostPro,
    HammingEmbedding,
    LearnProgress,
    pairs_from_labels,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.cluster.discovery import CategoryChannel
    from engine.collection import Collection, Hit
    from engine.kernels.vocabulary import VocabularyTree

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
MARKS_KEY = "feedback.marks"
MODEL_STATE = "learned.model"
#: Key-value entry naming the stored model (a new token per :func:`learn`), so that the
#: model and the collection's bags can stay in memory between queries.
MODEL_TOKEN = "learned.model.token"
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
#: Images quantised per call; missing dense features of at most FEW_IMAGES images are
#: computed in this process rather than in worker processes.
BAG_BATCH = 256
FEW_IMAGES = 16
_TRUE = {"1", "yes", "y", "true", "t", "+", "up", "relevant"}
_FALSE = {"0", "no", "n", "false", "f", "-", "down", "irrelevant", "not relevant"}


@dataclass(frozen=True)
class Mark:
    """A person's judgement of one search result.

    Attributes
    ----------
    query, result : str
        Absolute paths of the query image and the judged result.
    relevant : bool
        Thumbs up (True) or down (False).
    """

    query: str
    result: str
    relevant: bool


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


# --------------------------------------------------------------------------- marks
def _abs(path: str | os.PathLike, base: Path | None = None) -> str:
    p = Path(os.fspath(path)).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return os.path.abspath(p)


def load_marks(collection: Collection) -> list[Mark]:
    """Relevance marks stored in the collection's index (oldest first)."""
    raw = collection.store.get_kv(MARKS_KEY)
    if not raw:
        return []
    data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    return [Mark(m["query"], m["result"], bool(m["relevant"])) for m in data]


def add_marks(collection: Collection, marks: Iterable[Mark]) -> int:
    """Store marks in the index; a later mark of the same (query, result) replaces an
    earlier one. Returns the number of marks now stored."""
    current = {(m.query, m.result): m for m in load_marks(collection)}
    for m in marks:
        m = Mark(_abs(m.query), _abs(m.result), bool(m.relevant))
        current[(m.query, m.result)] = m
    payload = [m.__dict__ for m in current.values()]
    collection.store.set_kv(MARKS_KEY, json.dumps(payload))
    return len(payload)


def clear_marks(collection: Collection) -> None:
    """Forget every stored mark."""
    collection.store.set_kv(MARKS_KEY, "[]")


def _parse_relevant(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{where}: relevant must be yes/no (1/0, true/false, +/-), got {value!r}")


def read_feedback_file(path: str | os.PathLike, base: str | os.PathLike) -> list[Mark]:
    """Read marks from a CSV or JSON feedback file (format in the module docstring).

    Parameters
    ----------
    path : path-like
        The feedback file.
    base : path-like
        Folder that relative paths in the file are relative to.

    Raises
    ------
    ValueError
        A malformed file; the message names the file, line or entry and the problem.
    """
    path = Path(path)
    base = Path(base)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read feedback file ({exc.strerror})") from None
    marks: list[Mark] = []
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        items = data.get("marks") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ValueError(f'{path}: expected {{"marks": [...]}} or a list of marks')
        for k, item in enumerate(items):
            where = f"{path}: mark {k}"
            if not isinstance(item, dict) or not {"query", "result", "relevant"} <= set(item):
                raise ValueError(f"{where}: needs query, result and relevant")
            rel = _parse_relevant(item["relevant"], where)
            marks.append(Mark(_abs(item["query"], base), _abs(item["result"], base), rel))
        return marks
    reader = csv.DictReader(text.splitlines())
    fields = {f.strip().lower() for f in (reader.fieldnames or [])}
    if not {"query", "result", "relevant"} <= fields:
        raise ValueError(f"{path}: CSV header must name the columns query,result,relevant")
    for k, row in enumerate(reader, start=2):
        row = {(key or "").strip().lower(): (v or "").strip() for key, v in row.items()}
        rel = _parse_relevant(row["relevant"], f"{path}: line {k}")
        marks.append(Mark(_abs(row["query"], base), _abs(row["result"], base), rel))
    return marks


# --------------------------------------------------------------------------- supervision
def labels_from_subfolders(collection: Collection) -> np.ndarray:
    """Class of each image (rows of :meth:`Collection.paths`) = its parent folder.

    Images directly in the collection folder get ``-1`` (unlabeled).
    """
    return _labels_of(collection.paths(), collection.folder)


def _triplets_from_marks(
    paths: Sequence[Path], marks: Sequence[Mark], rng: np.random.Generator
) -> np.ndarray:
    """(T, 3) triplets (query, relevant, other) from marks. A query with thumbs-down
    results pairs each relevant with each of them; without any, random images of the
    collection serve as the non-relevant side (similarity is rare)."""
    row = {str(p): k for k, p in enumerate(paths)}
    pos: dict[int, list[int]] = {}
    neg: dict[int, list[int]] = {}
    for m in marks:
        q, r = row.get(m.query), row.get(m.result)
        if q is None or r is None or q == r:
            continue
        (pos if m.relevant else neg).setdefault(q, []).append(r)
    out = []
    for q, plist in pos.items():
        nlist = neg.get(q) or []
        blocked = set(plist) | {q}
        for p in plist:
            if nlist:
                out += [(q, p, n) for n in nlist]
            else:
                cand = rng.integers(0, len(paths), 8)
                out += [(q, p, int(n)) for n in cand if int(n) not in blocked][:4]
    return np.asarray(out, np.int64).reshape(-1, 3)


# --------------------------------------------------------------------------- representation
class DenseBagOfWords:
    """tf-idf bags of visual words of the dense categorisation channel.

    The representation every learned model is trained and queried on: the dense RootSIFT
    windows of :func:`engine.cluster.category_features` (``settings``, by default
    :data:`engine.cluster.CATEGORY_FEATURES`: 400 descriptors per image), each mapped to
    the leaf of a vocabulary tree (:class:`engine.vocabulary.VocabularyTree`), then per
    image ``x_j = tf_j · idf_j`` with ``tf_j`` = (count of word ``j``) / (number of
    descriptors) and ``idf_j = ln(N / N_j)`` over the ``N`` images the vocabulary was
    fitted on (Nistér & Stewénius; :func:`engine.vocabulary.fit_idf`), rows L2-normalised
    — exactly the bags of ``tests/benchmarks/bench_learn.py`` (``bags()``), on which
    OASIS beat the cosine by >= 1.3x precision@10 on Caltech-101.

    Parameters
    ----------
    tree : VocabularyTree
        Fitted; its leaves are the words.
    idf : (n_leaves,) float32
    settings : dict
        :func:`engine.cluster.category_features` keyword arguments of the descriptors.
    n_fit : int
        Number of images the vocabulary and idf were fitted on.
    """

    def __init__(
        self, tree: VocabularyTree, idf: np.ndarray, settings: dict[str, Any], n_fit: int = 0
    ) -> None:
        idf = np.asarray(idf, np.float32)
        if idf.shape != (tree.n_leaves,):
            raise ValueError(f"idf must have shape ({tree.n_leaves},), got {idf.shape}")
        self.tree = tree
        self.idf = idf
        # JSON-normal form (tuples become lists), as it comes back from the store
        self.settings = json.loads(json.dumps(dict(settings), sort_keys=True, default=list))
        self.n_fit = int(n_fit)

    @property
    def n_words(self) -> int:
        """Vocabulary size (columns of the bags)."""
        return int(self.tree.n_leaves)

    def counts(self, sets: Sequence[np.ndarray]) -> sp.csr_matrix:
        """(n, n_words) float32 word counts of descriptor sets ((m_i, 128), float32 or the
        channel's uint8 ``round(255 v)``), quantised :data:`BAG_BATCH` sets at a time."""
        from engine.kernels.vocabulary import word_counts

        parts = [
            word_counts([_as_float(s) for s in sets[k : k + BAG_BATCH]], self.tree)
            for k in range(0, len(sets), BAG_BATCH)
        ]
        if not parts:
            return sp.csr_matrix((0, self.n_words), dtype=np.float32)
        return sp.csr_matrix(sp.vstack(parts, format="csr"), dtype=np.float32)

    def weight(self, counts: sp.spmatrix) -> sp.csr_matrix:
        """(n, n_words) float32 L2-normalised tf-idf rows of word ``counts`` (empty rows
        stay zero; :func:`engine.vocabulary.tfidf`)."""
        from engine.kernels.vocabulary import tfidf

        return tfidf(counts, self.idf)

    def bags(self, sets: Sequence[np.ndarray]) -> sp.csr_matrix:
        """(n, n_words) float32 tf-idf bags of descriptor sets."""
        return self.weight(self.counts(sets))

    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only (the tree's own state under ``tree.``)."""
        st: dict[str, Any] = {
            "kind": "dense_bow",
            "idf": self.idf,
            "settings": json.dumps(self.settings, sort_keys=True, default=list),
            "n_fit": self.n_fit,
        }
        st.update({f"tree.{k}": v for k, v in self.tree.to_state().items()})
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> DenseBagOfWords:
        """Rebuild from :meth:`to_state` output."""
        from engine.kernels.vocabulary import VocabularyTree

        tree = VocabularyTree.from_state(
            {k[5:]: v for k, v in st.items() if k.startswith("tree.")}
        )
        return cls(tree, np.asarray(st["idf"]), json.loads(str(st["settings"])), int(st["n_fit"]))


def _as_float(d: np.ndarray) -> np.ndarray:
    from engine.cluster.discovery import _as_float as as_float

    return as_float(np.asarray(d))


# --------------------------------------------------------------------------- model
class LearnedSimilarity:
    """A learned similarity over dense tf-idf bags of words, as stored in the index.

    Parameters
    ----------
    method : {"oasis", "boostssc", "boostpro"}
    oasis : OASIS, optional
    embedding : HammingEmbedding, optional
    components : (k, n_words) float32, optional
        Truncated-SVD basis applied before the embedding.
    n_words : int
        Vocabulary size the model was trained on.
    source : str
        ``"subfolders"`` or ``"marks"``.
    representation : DenseBagOfWords
        How images become the bags the model compares (stored with the model).
    image_bags : tuple of ((n,) str array, (n, n_words) csr float32), optional
        Bags of the images it was trained on, by content hash (stored with the model, so
        a new process does not re-bag the collection for its first query).
    """

    def __init__(
        self,
        method: str,
        *,
        oasis: OASIS | None = None,
        embedding: HammingEmbedding | None = None,
        components: np.ndarray | None = None,
        n_words: int = 0,
        source: str = "",
        representation: DenseBagOfWords | None = None,
        image_bags: tuple[np.ndarray, sp.csr_matrix] | None = None,
    ):
        self.method = method
        self.oasis = oasis
        self.embedding = embedding
        self.components = components
        self.n_words = int(n_words)
        self.source = source
        self.representation = representation
        self.image_bags = image_bags

    def similarity(self, A, B) -> np.ndarray:
        """(NA, NB) float64 learned similarities (higher = more similar).

        Parameters
        ----------
        A, B : (N, n_words) sparse tf-idf bags of words (:attr:`representation`)
        """
        for name, X in (("A", A), ("B", B)):
            if X.shape[1] != self.n_words:
                raise ValueError(
                    f"the learned model expects {self.n_words} visual words but {name} has "
                    f"{X.shape[1]}"
                )
        if self.method == "oasis":
            return self.oasis.similarity(A, B)
        emb = self.embedding
        ca = emb.transform(np.asarray(A @ self.components.T))
        cb = emb.transform(np.asarray(B @ self.components.T))
        return emb.similarity(ca, cb)

    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only: the model under ``model.``, the representation under
        ``repr.``."""
        if self.representation is None:
            raise ValueError("a learned model needs its representation to be stored")
        st: dict[str, Any] = {
            "method": self.method,
            "n_words": self.n_words,
            "source": self.source,
        }
        inner = self.oasis.to_state() if self.method == "oasis" else self.embedding.to_state()
        st.update({f"model.{k}": v for k, v in inner.items()})
        st.update({f"repr.{k}": v for k, v in self.representation.to_state().items()})
        if self.components is not None:
            st["components"] = self.components
        if self.image_bags is not None:
            h, X = self.image_bags
            X = sp.csr_matrix(X, dtype=np.float32)
            st["bags.hashes"] = np.asarray(h, dtype=str)
            st["bags.indptr"] = X.indptr.astype(np.int64)
            st["bags.indices"] = X.indices.astype(np.int32)
            st["bags.data"] = X.data
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> LearnedSimilarity:
        """Rebuild from :meth:`to_state`.

        Raises
        ------
        LookupError
            The state was written by an older version (models trained on the index's
            keypoint bags of words, without a stored representation): learn again.
        """
        if str(st.get("repr.kind", "")) != "dense_bow":
            raise LookupError(
                "the learned model was made by an older version of Simile (on keypoint "
                "bags of words) and cannot be used any more; run 'simile learn' again"
            )
        method = str(st["method"])
        inner = {k[6:]: v for k, v in st.items() if k.startswith("model.")}
        rep = DenseBagOfWords.from_state(
            {k[5:]: v for k, v in st.items() if k.startswith("repr.")}
        )
        bags = None
        if "bags.hashes" in st:
            h = np.asarray(st["bags.hashes"])
            X = sp.csr_matrix(
                (st["bags.data"], st["bags.indices"], st["bags.indptr"]),
                shape=(h.size, int(st["n_words"])),
            )
            bags = (h, X)
        common = dict(
            n_words=int(st["n_words"]),
            source=str(st.get("source", "")),
            representation=rep,
            image_bags=bags,
        )
        if method == "oasis":
            return cls(method, oasis=OASIS.from_state(inner), **common)
        return cls(
            method,
            embedding=HammingEmbedding.from_state(inner),
            components=np.asarray(st["components"], np.float32),
            **common,
        )


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
    from engine.cluster.discovery import _collection_rows

    paths, hashes = _collection_rows(collection)
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

    Stages:

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
    source : {"subfolders", "marks"}
        Labels from subfolders, or relevance marks (``marks`` or, if None, those stored
        in the index).
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
    from engine.cluster.discovery import _vocab_sample
    from engine.kernels.vocabulary import VocabularyTree, fit_idf

    if method not in LEARN_METHODS:
        raise ValueError(f"method must be one of {', '.join(LEARN_METHODS)}, got {method!r}")
    if source not in ("subfolders", "marks"):
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
    labels = None
    triplets = None
    if source == "subfolders":
        labels = _labels_of(paths, collection.folder)
        counts = np.bincount(labels[labels >= 0]) if np.any(labels >= 0) else np.zeros(0)
        if (counts >= 2).sum() < 1 or counts.size < 2:
            raise ValueError(
                "learning from subfolders needs at least two subfolders, one of them with "
                "two or more images"
            )
        supervised = np.flatnonzero(labels >= 0)
    else:
        marks = load_marks(collection) if marks is None else list(marks)
        triplets = _triplets_from_marks(paths, marks, rng)
        if triplets.shape[0] == 0:
            raise ValueError(
                "no usable marks: mark at least one result as relevant (thumbs up) for a "
                "query in this collection"
            )
        supervised = np.unique(triplets)

    # 1. dense features (cached in the index)
    channel = _channel(collection.store, LEARN_FEATURES)
    n_missing = sum(not channel.has(h) for h in set(hashes))
    items = list(zip((str(p) for p in paths), hashes, strict=True))
    for cp in channel.update_iter(items, jobs=_jobs_for(n_missing, jobs), cancel=cancel):
        if _stopped(cancel):
            return None
        yield LearnProgress(
            cp.done, cp.total, float("nan"), f"dense features of the photos ({cp.done}/{cp.total})"
        )
    if _stopped(cancel):
        return None

    # 2. vocabulary and idf on the supervised images
    b, levels = int(DENSE_VOCAB["branching"]), int(DENSE_VOCAB["levels"])
    fit_rows = supervised if supervised.size >= MIN_VOCAB_IMAGES else np.arange(len(paths))
    yield LearnProgress(0, 1, float("nan"), "fitting the visual vocabulary")
    fit_hashes = [hashes[i] for i in fit_rows if channel.has(hashes[i])]
    sample = _vocab_sample(channel, fit_hashes, int(DENSE_VOCAB["sample"]), random_state)
    if sample.shape[0] < b:
        raise ValueError("too few features in the collection's images to learn from")
    tree = VocabularyTree(b, levels, random_state=random_state)
    for _ in tree.fit_iter(sample):
        if _stopped(cancel):
            return None
    del sample

    # 3. bags of every image
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
    X = rep.weight(counts)
    n_words = rep.n_words

    # 4. the model
    model: LearnedSimilarity
    first = last = float("nan")
    score_name = ""
    n_constraints = 0
    if method == "oasis":
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
        it = (
            oasis.fit_iter(X, labels) if triplets is None else oasis.fit_triplets_iter(X, triplets)
        )
        for prog in it:
            if _stopped(cancel):
                return None
            first = prog.score if np.isnan(first) else first
            last = max(last, prog.score) if not np.isnan(last) else prog.score
            yield prog
        n_constraints = oasis.history_[-1][0] if triplets is None else triplets.shape[0]
        model = LearnedSimilarity(
            "oasis",
            oasis=oasis,
            n_words=n_words,
            source=source,
            representation=rep,
            image_bags=(np.asarray(hashes, dtype=str), X),
        )
    else:
        from engine.learn.models import reduce_dimension

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
        model = LearnedSimilarity(
            method,
            embedding=learner.embedding_,
            components=comps,
            n_words=n_words,
            source=source,
            representation=rep,
            image_bags=(np.asarray(hashes, dtype=str), X),
        )
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
    )


def run_learn(collection: Collection, **kwargs) -> LearnSummary | None:
    """Drive :func:`learn` to the end; ``None`` if it was cancelled."""
    return run_to_end(learn(collection, **kwargs))


# --------------------------------------------------------------------------- search
def _dense_sets(
    collection: Collection, settings: dict[str, Any], paths: Sequence[Path], hashes: Sequence[str]
) -> list[np.ndarray]:
    """Dense descriptors of every image: cached ones from the index, the others (images
    added since) computed in memory — nothing is written, so read-only indexes work."""
    from engine.cluster.discovery import _category_extractor
    from engine.index.ingest import extract_parallel

    channel = _channel(collection.store, settings)
    missing = {str(p): h for p, h in zip(paths, hashes, strict=True) if not channel.has(h)}
    fresh: dict[str, np.ndarray] = {}
    if missing:
        for r in extract_parallel(
            list(missing),
            jobs=_jobs_for(len(missing), None),
            feature_kwargs=channel.settings,
            extractor=_category_extractor,
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
    from engine.cluster.discovery import CategoryChannel

    full = settings.get("octaves", True) is False
    return CategoryChannel(store, settings, namespace="learn" if full else "cluster")


def _query_descriptors(collection: Collection, image: Any, settings: dict[str, Any]):
    """Dense descriptors of a query: cached when it is an indexed image."""
    from engine.cluster.discovery import _hash_of, category_features
    from engine.features.keypoints import Features

    if isinstance(image, Features):
        raise TypeError(
            "the learned method compares dense features of whole images: query it with an "
            "image (a path or an (H, W[, 3]) uint8 array), not keypoint Features"
        )
    if isinstance(image, np.ndarray):
        return category_features(image, **settings).descriptors
    try:
        h = _hash_of(collection, image)
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
    from engine.collection import Hit

    model = load_model(collection)
    q = model.representation.bags(
        [_query_descriptors(collection, image, model.representation.settings)]
    )
    paths, X = _collection_bags(collection, model)
    scores = model.similarity(q, X)[0]
    top = min(int(top), scores.size)
    order = np.argsort(-scores, kind="stable")[:top]
    return [Hit(paths[k], float(scores[k])) for k in order]


def _register() -> None:
    from engine.collection import register_method

    register_method("learned", learned_query)


_register()
