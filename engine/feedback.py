"""Learned similarity for a collection: supervision, persistence and the ``learned`` method.

Supervision comes from one of two places:

* **labels** — images in the same subfolder of the collection are similar
  (:func:`labels_from_subfolders`), the usual set-up of a photo library sorted by hand;
* **relevance marks** — a person's thumbs up / down on search results
  (:class:`Mark`, stored in the index by :func:`add_marks`), or a feedback file
  (:func:`read_feedback_file`).

:func:`learn` fits one of three models on the collection's tf-idf bags of visual words
(:meth:`engine.collection.Collection.bow_matrix`) and stores it in the index:

``oasis``
    :class:`engine.learn.OASIS` — bilinear similarity, from triplets; iterate averaging
    on, and the hinge margin (0.1 or the paper's 1) chosen on the held-out score.
``boostssc`` / ``boostpro``
    :class:`engine.learn.BoostedSSC` / :class:`engine.learn.BoostPro` — weighted
    Hamming embeddings, on the bag of words reduced to 64 dimensions by a truncated SVD
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
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine._gen import run_to_end
from engine.learn import (
    OASIS,
    BoostedSSC,
    BoostPro,
    HammingEmbedding,
    LearnProgress,
    pairs_from_labels,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.collection import Collection, Hit
    from engine.features import Features

__all__ = [
    "LEARN_METHODS",
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
SVD_DIM = 64
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
    names: dict[str, int] = {}
    labels = []
    for p in collection.paths():
        parent = str(p.parent)
        if Path(parent) == collection.folder:
            labels.append(-1)
        else:
            labels.append(names.setdefault(parent, len(names)))
    return np.asarray(labels, np.int64)


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


# --------------------------------------------------------------------------- model
class LearnedSimilarity:
    """A learned similarity over a collection's bags of words, as stored in the index.

    Parameters
    ----------
    method : {"oasis", "boostssc", "boostpro"}
    oasis : OASIS, optional
    embedding : HammingEmbedding, optional
    components : (k, n_words) float32, optional
        Truncated-SVD basis applied before the embedding.
    n_words : int
        Vocabulary size the model was trained on (a check against a refitted index).
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
    ):
        self.method = method
        self.oasis = oasis
        self.embedding = embedding
        self.components = components
        self.n_words = int(n_words)
        self.source = source

    def similarity(self, A, B) -> np.ndarray:
        """(NA, NB) float64 learned similarities (higher = more similar).

        Parameters
        ----------
        A, B : (N, n_words) sparse tf-idf bags of words
        """
        for name, X in (("A", A), ("B", B)):
            if X.shape[1] != self.n_words:
                raise LookupError(
                    f"the learned model expects {self.n_words} visual words but {name} has "
                    f"{X.shape[1]}: the index was rebuilt; run 'simile learn' again"
                )
        if self.method == "oasis":
            return self.oasis.similarity(A, B)
        emb = self.embedding
        ca = emb.transform(np.asarray(A @ self.components.T))
        cb = emb.transform(np.asarray(B @ self.components.T))
        return emb.similarity(ca, cb)

    def to_state(self) -> dict[str, Any]:
        st: dict[str, Any] = {
            "method": self.method,
            "n_words": self.n_words,
            "source": self.source,
        }
        inner = self.oasis.to_state() if self.method == "oasis" else self.embedding.to_state()
        st.update({f"model.{k}": v for k, v in inner.items()})
        if self.components is not None:
            st["components"] = self.components
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> LearnedSimilarity:
        method = str(st["method"])
        inner = {k[6:]: v for k, v in st.items() if k.startswith("model.")}
        if method == "oasis":
            return cls(
                method,
                oasis=OASIS.from_state(inner),
                n_words=int(st["n_words"]),
                source=str(st.get("source", "")),
            )
        return cls(
            method,
            embedding=HammingEmbedding.from_state(inner),
            components=np.asarray(st["components"], np.float32),
            n_words=int(st["n_words"]),
            source=str(st.get("source", "")),
        )


def load_model(collection: Collection) -> LearnedSimilarity:
    """The collection's learned model; ``LookupError`` (saying how to make one) if none."""
    if not collection.store.has_state(MODEL_STATE):
        raise LookupError(
            "no learned similarity model for this collection yet: run "
            f"'simile learn {collection.folder} --from-subfolders' (or --feedback FILE), "
            "or mark results with thumbs up / down in the app and choose 'Learn from my marks'"
        )
    return LearnedSimilarity.from_state(collection.store.load_state(MODEL_STATE))


def learn(
    collection: Collection,
    *,
    method: str = "oasis",
    source: str = "subfolders",
    marks: Sequence[Mark] | None = None,
    cancel: threading.Event | None = None,
    random_state: int = 0,
) -> Generator[LearnProgress, None, LearnSummary | None]:
    """Fit a learned similarity on the collection and store it in the index.

    A generator: yields :class:`engine.learn.LearnProgress`, returns a
    :class:`LearnSummary` (``None`` when ``cancel`` was set: learning stops between
    yields and nothing is stored).

    Parameters
    ----------
    collection : Collection
        Opened for writing, already indexed.
    method : {"oasis", "boostssc", "boostpro"}
    source : {"subfolders", "marks"}
        Labels from subfolders, or relevance marks (``marks`` or, if None, those stored
        in the index).

    Raises
    ------
    ValueError
        Unknown method / source, or too little supervision (the message says what is
        missing).
    """
    if method not in LEARN_METHODS:
        raise ValueError(f"method must be one of {', '.join(LEARN_METHODS)}, got {method!r}")
    if source not in ("subfolders", "marks"):
        raise ValueError(f"source must be 'subfolders' or 'marks', got {source!r}")
    t0 = time.perf_counter()
    paths = collection.paths()
    if len(paths) < 3:
        raise ValueError("the collection needs at least three indexed images to learn from")
    X = collection.bow_matrix()
    rng = np.random.default_rng(random_state)
    labels = None
    triplets = None
    if source == "subfolders":
        labels = labels_from_subfolders(collection)
        counts = np.bincount(labels[labels >= 0]) if np.any(labels >= 0) else np.zeros(0)
        if (counts >= 2).sum() < 1 or counts.size < 2:
            raise ValueError(
                "learning from subfolders needs at least two subfolders, one of them with "
                "two or more images"
            )
    else:
        marks = load_marks(collection) if marks is None else list(marks)
        triplets = _triplets_from_marks(paths, marks, rng)
        if triplets.shape[0] == 0:
            raise ValueError(
                "no usable marks: mark at least one result as relevant (thumbs up) for a "
                "query in this collection"
            )

    model: LearnedSimilarity
    first = last = float("nan")
    score_name = ""
    n_constraints = 0
    if method == "oasis":
        # Budget from the amount of supervision: ~50 passes over the labelled images
        # (or 100 over the triplets), early stopping ends it sooner.
        n_sup = int(np.sum(labels >= 0)) if triplets is None else 2 * triplets.shape[0]
        n_steps = int(np.clip(50 * n_sup, 2_000, 200_000))
        score_name = "held-out mAP" if triplets is None else "triplet accuracy"
        # The hinge margin is chosen on the held-out score: 1 (the paper's) or 0.1,
        # which suits unit-length bags of words better (see engine.learn notes).
        best_model: OASIS | None = None
        margins = (0.1, 1.0)
        for k, margin in enumerate(margins):
            oasis = OASIS(
                n_steps=n_steps,
                margin=margin,
                eval_every=max(1_000, n_steps // 20),
                patience=4,
                average=True,
                random_state=random_state,
            )
            it = (
                oasis.fit_iter(X, labels)
                if triplets is None
                else oasis.fit_triplets_iter(X, triplets)
            )
            for prog in it:
                if cancel is not None and cancel.is_set():
                    return None
                first = prog.score if np.isnan(first) else first
                last = max(last, prog.score) if not np.isnan(last) else prog.score
                yield LearnProgress(
                    prog.step + k * n_steps,
                    len(margins) * n_steps,
                    prog.score,
                    f"margin {margin}: {prog.message}",
                )
            if best_model is None or oasis.best_score_ > best_model.best_score_:
                best_model = oasis
            if np.isnan(oasis.best_score_):  # nothing to validate on: keep the first
                break
        oasis = best_model
        n_constraints = oasis.n_steps if triplets is None else triplets.shape[0]
        model = LearnedSimilarity("oasis", oasis=oasis, n_words=X.shape[1], source=source)
    else:
        from engine.learn import reduce_dimension

        Z, comps = reduce_dimension(X, SVD_DIM, random_state=random_state)
        if triplets is None:
            n_lab = int(np.sum(labels >= 0))
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
            if cancel is not None and cancel.is_set():
                return None
            first = prog.score if np.isnan(first) else first
            last = prog.score
            yield prog
        model = LearnedSimilarity(
            method,
            embedding=learner.embedding_,
            components=comps,
            n_words=X.shape[1],
            source=source,
        )
    collection.store.save_state(MODEL_STATE, model.to_state())
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
def learned_query(collection: Collection, feats: Features, top: int) -> list[Hit]:
    """The ``learned`` search method: rank the collection by the stored learned model."""
    from engine.collection import Hit

    model = load_model(collection)
    X = collection.bow_matrix()
    q = collection.bow_vector(feats)
    scores = model.similarity(q, X)[0]
    top = min(int(top), scores.size)
    order = np.argsort(-scores, kind="stable")[:top]
    paths = collection.paths()
    return [Hit(paths[k], float(scores[k])) for k in order]


def _register() -> None:
    from engine.collection import register_method

    register_method("learned", learned_query)


_register()
