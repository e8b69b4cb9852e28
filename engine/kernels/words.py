"""Bags of visual words over a vocabulary tree's leaves (Nistér & Stewénius, 2006).

A fitted :class:`engine.kernels.vocabulary.VocabularyTree` quantises every local feature
to a leaf, its *visual word*. :func:`word_counts` counts the words of every set,
:func:`fit_idf` learns inverse document frequencies on a database, and :func:`tfidf` /
:func:`bag_of_words` give the tf-idf rows (``tf_ij * idf_j``, normalised) used by the
index, WTA hashing and similarity learning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.core.validate import as_point_set, check_choice

if TYPE_CHECKING:
    import scipy.sparse as sp

    from engine.kernels.vocabulary import VocabularyTree

__all__ = ["bag_of_words", "fit_idf", "tfidf", "word_counts"]


def word_counts(sets: Sequence[np.ndarray], tree: VocabularyTree) -> sp.csr_matrix:
    """(n_sets, n_leaves) float32 csr matrix of visual-word counts, one row per set.

    All sets are encoded with one :meth:`VocabularyTree.leaf_ids` call.
    """
    import scipy.sparse as sp

    n_leaves = tree.n_leaves  # raises RuntimeError when the tree is not fitted
    arrays = [as_point_set(s, f"sets[{i}]", dim=tree.dim) for i, s in enumerate(sets)]
    lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    stacked = np.concatenate(arrays) if arrays else np.empty((0, tree.dim), np.float32)
    words = tree.leaf_ids(stacked)
    rows = np.repeat(np.arange(lengths.size), lengths)
    counts = sp.csr_matrix(
        (np.ones(words.size, dtype=np.float32), (rows, words)),
        shape=(lengths.size, n_leaves),
    )
    counts.sum_duplicates()
    return counts


def fit_idf(
    sets: Sequence[np.ndarray] | sp.spmatrix, tree: VocabularyTree | None = None
) -> np.ndarray:
    """Inverse document frequencies ``idf_j = ln(N / N_j)`` (Nistér & Stewénius, 2006).

    Parameters
    ----------
    sets : list of (M_i, D) float32 arrays, or (N, n_leaves) sparse word counts
    tree : VocabularyTree
        Needed when ``sets`` are point sets.

    Returns
    -------
    (n_leaves,) float32
        ``N`` = number of sets, ``N_j`` = number of sets containing word ``j``; words
        seen in no set get 0 (they cannot match anything in this corpus).
    """
    import scipy.sparse as sp

    if sp.issparse(sets):
        counts = sp.csr_matrix(sets)
    else:
        if tree is None:
            raise ValueError("tree is required when sets are point sets")
        counts = word_counts(sets, tree)
    n = counts.shape[0]
    if n == 0:
        raise ValueError("sets must contain at least one set to fit idf")
    df = np.bincount(counts.indices[counts.data > 0], minlength=counts.shape[1])
    idf = np.zeros(counts.shape[1], dtype=np.float32)
    seen = df > 0
    idf[seen] = np.log(n / df[seen])
    return idf


def bag_of_words(
    sets: Sequence[np.ndarray],
    tree: VocabularyTree,
    idf: np.ndarray | None = None,
    *,
    norm: str = "l2",
) -> sp.csr_matrix:
    """tf-idf bag of visual words of every set over the tree's leaves.

    Parameters
    ----------
    sets : list of (M_i, D) float32
    tree : VocabularyTree
        Fitted; its leaves are the words.
    idf : (n_leaves,) float, optional
        From :func:`fit_idf` on the database; ``None`` = plain term frequencies.
    norm : {"l2", "l1", "none"}
        Row normalisation after weighting (``"l2"``: dot products are cosines).

    Returns
    -------
    scipy.sparse.csr_matrix (n_sets, n_leaves) float32
        ``tf_ij * idf_j`` with ``tf_ij`` = count of word ``j`` in set ``i`` / set size;
        empty sets give all-zero rows.
    """
    check_choice(norm, "norm", ("l2", "l1", "none"))
    return tfidf(word_counts(sets, tree), idf, norm=norm)


def tfidf(
    counts: sp.spmatrix, idf: np.ndarray | None = None, *, norm: str = "l2"
) -> sp.csr_matrix:
    """tf-idf rows of visual-word ``counts`` (what :func:`bag_of_words` weights).

    Parameters
    ----------
    counts : (n_sets, n_words) sparse, e.g. from :func:`word_counts`
    idf : (n_words,) float, optional
        ``None`` = plain term frequencies.
    norm : {"l2", "l1", "none"}

    Returns
    -------
    scipy.sparse.csr_matrix (n_sets, n_words) float32
        ``tf_ij * idf_j``, ``tf_ij`` = count / row total, rows normalised; empty rows
        stay zero.
    """
    import scipy.sparse as sp

    check_choice(norm, "norm", ("l2", "l1", "none"))
    counts = sp.csr_matrix(counts)
    counts.sum_duplicates()
    sizes = np.diff(counts.indptr)
    tot = np.asarray(counts.sum(axis=1)).ravel()
    data = counts.data / np.repeat(np.maximum(tot, 1), sizes)
    if idf is not None:
        idf = np.asarray(idf, dtype=np.float32)
        if idf.shape != (counts.shape[1],):
            raise ValueError(f"idf must have shape ({counts.shape[1]},), got {idf.shape}")
        data = data * idf[counts.indices]
    if norm != "none":
        row_of_nnz = np.repeat(np.arange(sizes.size), sizes)
        mass = data**2 if norm == "l2" else np.abs(data)
        row = np.bincount(row_of_nnz, weights=mass, minlength=sizes.size)
        if norm == "l2":
            row = np.sqrt(row)
        data = data / np.where(row > 0, row, 1.0)[row_of_nnz]
    out = sp.csr_matrix(
        (data.astype(np.float32), counts.indices.copy(), counts.indptr.copy()),
        shape=counts.shape,
    )
    out.eliminate_zeros()
    return out
