"""Hamming embedding: binary signatures that say where a descriptor lies inside its
visual word, and the selective match kernel of a query against many images.

Jégou, Douze & Schmid, "Hamming embedding and weak geometric consistency for large
scale image search" (ECCV 2008): a visual word is a coarse cell; two descriptors of one
word are only counted as a match when their ``n_bits``-bit signatures differ in at most
``max_distance`` bits. A signature is the sign of a random orthogonal projection of the
descriptor against the per-word median of that projection (learned on a sample), so
descriptors close in the full space agree on most bits while the coarse word keeps the
number of candidate pairs small. Each match votes ``exp(-h^2 / sigma^2)`` (``h`` its
Hamming distance; the weighting of the selective match kernel of Tolias, Avrithis &
Jégou, "To aggregate or not to aggregate", ICCV 2013) times the idf of its word, and the
votes are normalised for burstiness (Jégou, Douze & Schmid, "On the burstiness of visual
elements", CVPR 2009): a query descriptor that matches ``c`` descriptors of one image
counts each of them ``1 / sqrt(c)``, and so does a descriptor of the image matched by
``c`` query descriptors.

:class:`HammingEmbedding` holds the projection and the medians (one table per
vocabulary tree, words being the nodes of one tree level); :func:`selective_scores`
scores a query against the descriptors of many images.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.core.blas import single_threaded_blas

__all__ = ["HE_BITS", "MIN_WORD_SAMPLES", "HammingEmbedding", "selective_scores"]

#: Bits of a signature (one uint64 a descriptor and tree).
HE_BITS = 64
#: A word with fewer sample descriptors takes the sample's global medians.
MIN_WORD_SAMPLES = 4


class HammingEmbedding:
    """Random orthogonal projection and per-word medians of ``n_bits``-bit signatures.

    Parameters
    ----------
    n_bits : int, default 64
        ``HE_BITS``; at most the descriptor dimension.
    random_state : int, default 0
        Seed of the projection.

    Attributes
    ----------
    projection_ : (n_bits, D) float32
        Orthonormal rows.
    thresholds_ : list of (n_words_t, n_bits) float32
        Per vocabulary (tree) ``t``, the median of every projected coordinate over the
        sample descriptors of each word, to float16 precision (as saved).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((500, 128), dtype=np.float32)
    >>> words = rng.integers(0, 10, (500, 1))
    >>> he = HammingEmbedding().fit(X, words, [10])
    >>> he.signatures(X[:3], words[:3]).shape
    (3, 1)
    """

    def __init__(self, n_bits: int = HE_BITS, random_state: int = 0) -> None:
        if n_bits != HE_BITS:
            raise ValueError(f"n_bits must be {HE_BITS} (one uint64 a signature), got {n_bits}")
        self.n_bits = int(n_bits)
        self.random_state = int(random_state)
        self.projection_: np.ndarray | None = None
        self.thresholds_: list[np.ndarray] = []

    def fit(self, X: np.ndarray, words: np.ndarray, n_words: Sequence[int]) -> HammingEmbedding:
        """Draw the projection and learn the medians.

        Parameters
        ----------
        X : (N, D) float32
            Sample descriptors, ``D >= n_bits``.
        words : (N, T) int
            Their word in each of ``T`` vocabularies.
        n_words : sequence of T int
            Words of each vocabulary.

        Returns
        -------
        self
        """
        X = np.asarray(X, np.float32)
        d = X.shape[1]
        if d < self.n_bits:
            raise ValueError(f"descriptors of dimension {d} < {self.n_bits} bits")
        rng = np.random.default_rng(self.random_state)
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        self.projection_ = np.ascontiguousarray(q[: self.n_bits], dtype=np.float32)
        Z = self._project(X)
        glob = np.median(Z, axis=0) if len(Z) else np.zeros(self.n_bits, np.float32)
        self.thresholds_ = []
        for t, nw in enumerate(n_words):
            w = np.asarray(words[:, t], np.int64)
            table = np.tile(glob, (int(nw), 1))
            order = np.argsort(w, kind="stable")
            counts = np.bincount(w, minlength=int(nw))
            starts = np.concatenate([[0], np.cumsum(counts)])
            Zs = Z[order]
            for j in np.flatnonzero(counts >= MIN_WORD_SAMPLES):
                table[j] = np.median(Zs[starts[j] : starts[j + 1]], axis=0)
            # float16 precision, as saved (to_state): signatures computed with the fitted
            # embedding (stored with the rows they were encoded with) are those a reader
            # of the saved one computes
            self.thresholds_.append(table.astype(np.float16).astype(np.float32))
        return self

    def _project(self, X: np.ndarray) -> np.ndarray:
        """``X @ projection_.T`` in float64 on one BLAS thread: the same bits whatever the
        thread count (a model fitted by a first index and by a later one are identical),
        no wait for a BLAS thread pool on a busy machine, and a descriptor's signature is
        the same whatever batch it is projected in (float32 products differ in their last
        bit with the batch's size -- a tenth of them, measured -- which flipped a few bits
        of the signatures stored by indexing from those a query computes; in float64 a
        flip needs a projection within 1e-16 of its median). About 1 us a descriptor."""
        with single_threaded_blas():
            return np.asarray(X, np.float64) @ self.projection_.T.astype(np.float64)

    def signatures(self, X: np.ndarray, words: np.ndarray) -> np.ndarray:
        """(N, T) uint64 signatures of descriptors ``X`` (N, D) in their ``words``
        (N, T): bit ``b`` set when projected coordinate ``b`` exceeds its word's median."""
        if self.projection_ is None:
            raise RuntimeError("HammingEmbedding is not fitted")
        Z = self._project(X)
        out = np.empty((len(Z), len(self.thresholds_)), np.uint64)
        for t, table in enumerate(self.thresholds_):
            bits = Z > table[np.asarray(words[:, t], np.int64)]
            out[:, t] = np.packbits(bits, axis=1, bitorder="little").view(np.uint64).ravel()
        return out

    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only."""
        if self.projection_ is None:
            raise RuntimeError("HammingEmbedding is not fitted")
        return {
            "n_bits": self.n_bits,
            "random_state": self.random_state,
            "projection": self.projection_,
            "n_words": np.array([len(t) for t in self.thresholds_], np.int64),
            "thresholds": np.concatenate(self.thresholds_).astype(np.float16),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> HammingEmbedding:
        """Rebuild from :meth:`to_state`."""
        he = cls(int(state["n_bits"]), int(state["random_state"]))
        he.projection_ = np.asarray(state["projection"], np.float32)
        cuts = np.cumsum(np.asarray(state["n_words"], np.int64))[:-1]
        table = np.asarray(state["thresholds"], np.float32)
        he.thresholds_ = [np.ascontiguousarray(t) for t in np.split(table, cuts)]
        return he


def selective_scores(
    q_words: np.ndarray,
    q_sigs: np.ndarray,
    words: np.ndarray,
    sigs: np.ndarray,
    owner: np.ndarray,
    n_sets: int,
    idf: Sequence[np.ndarray],
    *,
    max_distance: int = 22,
    sigma: float = 14.0,
) -> np.ndarray:
    """Hamming-embedding scores of a query against ``n_sets`` descriptor sets.

    Per vocabulary ``t``, every pair of a query descriptor and a set descriptor of the
    same word whose signatures differ in at most ``max_distance`` bits votes
    ``exp(-h^2 / sigma^2) idf_t[word]``, divided by the square root of the number of
    such pairs of the query descriptor in that set and by that of the set descriptor
    (burstiness); a set's score is the sum of its votes over
    ``sqrt(sum_q idf) sqrt(sum_x idf)`` (a set matched descriptor for descriptor scores
    about 1), averaged over the vocabularies.

    Parameters
    ----------
    q_words, q_sigs : (M, T) int64, (M, T) uint64
        The query's words and signatures.
    words, sigs : (N, T) int64, (N, T) uint64
        Those of the sets' descriptors, stacked.
    owner : (N,) int64
        The set of each descriptor, in ``[0, n_sets)``.
    n_sets : int
    idf : sequence of T (n_words_t,) float64
        The words' idf.
    max_distance : int
    sigma : float

    Returns
    -------
    (n_sets,) float64
    """
    total = np.zeros(n_sets)
    T = len(idf)
    if len(q_words) == 0 or len(words) == 0:
        return total
    owner = np.asarray(owner, np.int64)
    for t in range(T):
        w_idf = np.asarray(idf[t], np.float64)
        qw = q_words[:, t]
        q_order = np.argsort(qw, kind="stable")
        # the query descriptors of word j: q_order[lo_w[j]:lo_w[j] + n_w[j]]
        n_w = np.bincount(qw, minlength=len(w_idf))
        lo_w = np.cumsum(n_w) - n_w
        xw = words[:, t]
        cnt = n_w[xw]
        # every (set descriptor, query descriptor of its word) pair
        x = np.repeat(np.arange(len(words)), cnt)
        first = np.repeat(lo_w[xw] - (np.cumsum(cnt) - cnt), cnt)
        qi = q_order[first + np.arange(x.size)]
        h = np.bitwise_count(sigs[x, t] ^ q_sigs[qi, t])
        keep = h <= max_distance
        x, qi, h = x[keep], qi[keep], h[keep].astype(np.float64)
        s = owner[x]
        v = np.exp(-(h * h) / (sigma * sigma)) * w_idf[qw[qi]]
        # burstiness: per (query descriptor, set), then per set descriptor (counted by
        # bincount: no sort)
        key = qi * n_sets + s
        v /= np.sqrt(np.bincount(key, minlength=len(q_words) * n_sets)[key])
        v /= np.sqrt(np.bincount(x, minlength=len(words))[x])
        raw = np.bincount(s, v, minlength=n_sets)
        q_norm = np.sqrt(w_idf[qw].sum())
        x_norm = np.sqrt(np.bincount(owner, w_idf[words[:, t]], minlength=n_sets))
        den = q_norm * x_norm
        total += np.where(den > 0, raw / np.where(den > 0, den, 1.0), 0.0)
    return total / max(T, 1)
