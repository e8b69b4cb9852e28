"""The learned similarity as the index stores it: the representation and the model.

:class:`DenseBagOfWords` turns an image's dense descriptors into the L2-normalised tf-idf
bag of visual words every learned model compares; :class:`LearnedSimilarity` holds one
fitted model (:class:`engine.learn.OASIS`, or a :class:`engine.learn.HammingEmbedding`
on a truncated-SVD basis) with its representation, and converts both to and from the
arrays-and-scalars state :meth:`engine.index.store.IndexStore.save_state` keeps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from engine.cluster import as_float
from engine.learn.oasis import OASIS
from engine.learn.ssc import HammingEmbedding

if TYPE_CHECKING:  # pragma: no cover
    from engine.kernels.vocabulary import VocabularyTree

__all__ = ["BAG_BATCH", "DenseBagOfWords", "LearnedSimilarity"]

#: Images quantised per call.
BAG_BATCH = 256


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
            word_counts([as_float(np.asarray(s)) for s in sets[k : k + BAG_BATCH]], self.tree)
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
    calibration : (a, b), optional
        The logistic curve of its scores (:func:`engine.index.calibration.fit_curve`:
        the probability that a hit is of the kind taught), fitted on what was held aside
        while learning; None when too little was (or for the boosted embeddings, which
        hold nothing aside).
    calibration_error : float
        Its expected calibration error, two-fold on what was held aside (nan without a
        curve).
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
        calibration: tuple[float, float] | None = None,
        calibration_error: float = float("nan"),
    ):
        self.method = method
        self.oasis = oasis
        self.embedding = embedding
        self.components = components
        self.n_words = int(n_words)
        self.source = source
        self.representation = representation
        self.image_bags = image_bags
        self.calibration = None if calibration is None else tuple(map(float, calibration))
        self.calibration_error = float(calibration_error)

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
        if self.calibration is not None:
            st["calib.a"], st["calib.b"] = self.calibration
            st["calib.error"] = self.calibration_error
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
            calibration=(
                (float(st["calib.a"]), float(st["calib.b"])) if "calib.a" in st else None
            ),
            calibration_error=float(st.get("calib.error", float("nan"))),
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
