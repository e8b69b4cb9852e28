"""The search data of images: what a collection holds per image to be searched, and how
a batch of images is encoded with the fitted models (:mod:`engine.index.fit`).

Per image (:class:`EncodedImages`, one row each, saved as the store's ``search.data``
state):

- the idf-weighted, L1-normalised vocabulary pyramid (``vocabulary`` scores; the
  hierarchical scoring of Nistér & Stewénius on every tree level), with the collection's
  columns;
- the uniform pyramid with the pyramid match's bin weights (``uniform`` scores, thesis
  Eq. 3.12), by key -- not stored: made from the stored features when read
  (:mod:`engine.index.uniform_rows`; it was three quarters of the stored bytes);
- the tf-idf bag of words over the tree's leaves and its densified WTA codes
  (Chen & Shrivastava Eq. 7);
- the random-hyperplane bits of the pyramid-match embedding of the vocabulary pyramid
  (thesis Eqs. 5.8-5.11);
- the word of every stored descriptor in each tree's level-``HE_LEVEL`` nodes (the
  Hamming embedding's coarse cells, :mod:`engine.index.selective`): found by the descent
  that makes the pyramids, kept so that a query does not descend the trees again for the
  descriptors of its hits (4 bytes a descriptor, about 1 KB a photo), and its 64-bit
  signature in each tree (16 bytes a descriptor, about 4 KB a photo): a query scores its
  300 best hits by the Hamming embedding without reading their descriptors.

The vocabulary pyramids' values are kept to float16 precision (:func:`encode` rounds
them, queries and stored rows alike, so that what is stored is what was encoded) and
their columns as uint16 (up to 65,536 distinct bins), as are the bags of words' column
indices: the signatures' 4 KB a photo are paid for by these 3 KB and the index stays
under 50 KB a photo (issue #20). Rounding to float16 moved one cell of the quick
quality table: the ``vocabulary`` method's Holidays mAP, 0.5939 -> 0.5927 (see
:func:`encode`).

:func:`encode` computes these for a batch of images (or a query: only the parts it
needs); :func:`stacked` reads a batch's stored descriptors in one pass. The saved state
also holds :data:`ROW_KEYS`, what ties each row to the catalogue row it was made from
(:func:`engine.index.catalog.row_keys`), and is always committed together with the
models it was encoded with (:func:`compatible` checks an older index's pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index.codes import StackedSets, batch_codes, intersection_index
from engine.index.keys import DATA_STATE
from engine.index.search import IntersectionIndex, code_values, entry_positions
from engine.index.threads import thread_map

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from engine.index.fit import SearchModels
    from engine.index.store import IndexStore
    from engine.kernels.pyramid import PyramidMatch, SparseEmbedding

__all__ = [
    "ALL_PARTS",
    "DATA_STATE",
    "ENCODE_BATCH",
    "FILL_BATCH",
    "HE_LEVEL",
    "INDEX_PARTS",
    "RH_CACHE_AFTER",
    "ROW_KEYS",
    "EncodedImages",
    "bow_from_codes",
    "compatible",
    "descriptor_sets",
    "embedding",
    "encode",
    "fill_words",
    "he_words",
    "pyramid_from_state",
    "pyramid_state",
    "rehash_bits",
    "stacked",
    "stored_query",
    "uniform_index",
]

#: Rows a process hashes before it caches the hyperplane coordinates of every bin
#: (:func:`encode`): the app's second query uses the cache, a one-shot query never builds it.
RH_CACHE_AFTER = 1
#: Key of the search data state's ``(n,) uint64`` row keys (catalogue tie).
ROW_KEYS = "row_keys"
# images per encoding batch. Smaller batches keep the sorts and gathers of encoding in
# cache, next to the extraction workers: a first UKBench index with 64 took 10.1 s
# against 10.8 s with 256 (7 alternating pairs; the parent 0.6 s less CPU, the workers
# less too) and beat 32 in 3 of 3 pairs
ENCODE_BATCH = 64
# the words of the Hamming embedding (engine.kernels.hamming) are the trees' nodes this
# many levels above the leaves: 1,000 a tree. Retrieval dev sets, mean mAP of the
# first-stage score (s + 8 h) / 9 alone: 0.671 on the 10,000 leaves, 0.693 on the 1,000
# nodes, 0.681 on the 100 above them (with ten times the descriptor pairs)
HE_LEVEL = 1


@dataclass
class EncodedImages:
    """Per-image search data of a batch of images (rows in ``ids`` order).

    Attributes
    ----------
    ids : (n,) int64
        Store ids (-1 for a query).
    vocab : IntersectionIndex
        idf-weighted, L1-normalised vocabulary pyramids (with their columns).
    uniform : IntersectionIndex, UniformRows or None
        Uniform pyramids (pyramid-match weights, thesis Eq. 3.10), unnormalised, by key:
        encoded (a query), made from the stored features when read (a reader's data,
        :class:`~engine.index.uniform_rows.UniformRows`), or None (the index's encoding,
        :data:`INDEX_PARTS`: not stored).
    bow : (n, n_words) float32 scipy.sparse.csr_matrix
        tf-idf bags of words over the tree's leaves, L2-normalised rows.
    wta : (n, m) uint8
        Densified WTA codes of ``bow`` (Chen & Shrivastava Eq. 7).
    rh : (n, n_bits / 8) uint8
        Packed random-hyperplane bits of the vocabulary pyramids' pyramid-match
        embedding (thesis Eqs. 5.8-5.11).
    words : (N, T) uint16 or None
        The level-``HE_LEVEL`` node of each of the ``T`` trees of every stored
        descriptor, the rows' descriptors one after the other (int32 for trees of more
        than 65,535 such nodes); None when not encoded (a query).
    words_indptr : (n + 1,) int64 or None
        Row ``i``'s words are ``words[words_indptr[i]:words_indptr[i + 1]]``, in the
        order of its stored descriptors; a row without words (written before they were
        stored) has none (:meth:`row_words`).
    sigs : (N, T) uint64 or None
        The 64-bit Hamming-embedding signature of every stored descriptor in each tree
        (:meth:`engine.kernels.hamming.HammingEmbedding.signatures`), beside ``words``
        (same offsets); None when not stored (a query, an index written before them, or
        models without the embedding).
    """

    ids: np.ndarray
    vocab: IntersectionIndex
    uniform: Any
    bow: sp.csr_matrix
    wta: np.ndarray
    rh: np.ndarray
    words: np.ndarray | None = None
    words_indptr: np.ndarray | None = None
    sigs: np.ndarray | None = None

    def row_words(self, row: int) -> np.ndarray | None:
        """(M, T) words of row ``row``'s stored descriptors (a view), or None when not
        stored (then ``M == 0``: a photo with descriptors always has its words)."""
        if self.words is None:
            return None
        a, b = int(self.words_indptr[row]), int(self.words_indptr[row + 1])
        return self.words[a:b] if b > a else None

    def held_words(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Words (M, T) int32, signatures (M, T) uint64 and owners (M,) int64 (positions
        in ``rows``) of the stored descriptors of ``rows`` ((k,) int64), one row after
        the other; None when the data holds no signatures."""
        if self.sigs is None:
            return None
        rows = np.asarray(rows, np.int64)
        indptr, at = entry_positions(self.words_indptr, rows)
        owner = np.repeat(np.arange(rows.shape[0]), np.diff(indptr))
        return self.words[at].astype(np.int32), self.sigs[at], owner

    def to_state(self, *, uniform: bool = False) -> dict[str, Any]:
        """Arrays and scalars of the data, as the index stores them: without the uniform
        pyramids (made from the features when read, :mod:`engine.index.uniform_rows`;
        ``uniform=True``: with them, as indexes written before kept them), the vocabulary
        pyramids compact (:func:`pyramid_state`), the bags of words' column indices as
        uint16 (int32 beyond 65,536 words, int64 beyond ``2**31``)."""
        st: dict[str, Any] = {"ids": self.ids}
        st.update(pyramid_state("vocab", self.vocab, compact=True))
        if uniform and self.uniform is not None:
            ix = self.uniform
            st.update(
                pyramid_state("uniform", ix if isinstance(ix, IntersectionIndex) else ix.whole())
            )
        n_words = int(self.bow.shape[1])
        st["bow.indptr"] = self.bow.indptr.astype(np.int64)
        st["bow.indices"] = self.bow.indices.astype(_index_dtype(n_words))
        st["bow.data"] = self.bow.data.astype(np.float32)
        st["bow.n_words"] = int(self.bow.shape[1])
        st["wta"] = self.wta
        st["rh"] = self.rh
        if self.words is not None:
            st["he.words"] = self.words
            st["he.indptr"] = self.words_indptr
            if self.sigs is not None:
                st["he.sigs"] = self.sigs
        return st

    @classmethod
    def from_state(
        cls,
        st: dict[str, Any],
        *,
        consume: bool = False,
        copy: bool = True,
        uniform: bool = True,
        mapped: bool = False,
    ) -> EncodedImages:
        """Rebuild from :meth:`to_state`.

        The vocabulary pyramids are saved with their columns and loaded without their
        ``(nnz,) int64`` keys (queries score candidate rows through the columns alone, see
        :class:`engine.index.search.IntersectionIndex`); the uniform pyramids, which only
        indexes of earlier versions hold, are loaded by key (or by column, as the
        vocabulary pyramids, when saved so) when they are present and ``uniform``. Arrays
        that do not own their memory (``np.load`` of an npz returns views of the read
        buffer) are copied into numpy's own allocations: the random gathers of exact
        scoring are about twice as fast there (measured: 19 -> 9 ms per query at 10,000
        images). With ``consume`` the arrays are popped from ``st`` one by one, so each
        buffer is freed as soon as it is copied and the peak memory of loading stays near
        the size of the index. Without ``copy`` the arrays are kept as read (segments about
        to be concatenated: the concatenation copies them anyway). Without ``uniform`` (or
        stored pyramids) the result's ``uniform`` is None: the reader makes them from the
        features when they are read (:class:`~engine.index.uniform_rows.UniformRows`). With
        ``mapped`` (memory-mapped arrays) nothing is copied nor converted: the bags keep
        the index dtype they were saved with.
        """
        get = st.pop if consume else st.get
        copy = copy and not mapped

        def own(key: str, dtype: type) -> np.ndarray:
            a = np.asarray(get(key), dtype)
            return a if a.flags.owndata or not copy else a.copy()

        ids = own("ids", np.int64)
        ixs: dict[str, IntersectionIndex | None] = {"uniform": None}
        # (the uniform pyramids: only in indexes written before they were made from the
        # features when read)
        stored = uniform and "uniform.indptr" in st
        for name in ("vocab", "uniform") if stored else ("vocab",):
            ixs[name] = pyramid_from_state(st, name, own, get)
        # 32-bit indices whenever they fit (a third of the bags' memory; scipy keeps
        # them: indices and indptr of one dtype)
        nnz = int(np.asarray(st["bow.indptr"])[-1]) if len(st["bow.indptr"]) else 0
        index = np.int32 if max(nnz, int(st["bow.n_words"])) < 2**31 - 1 else np.int64
        if mapped:
            index = np.asarray(st["bow.indices"]).dtype
        import scipy.sparse as sp  # (here: importing this module does not load scipy)

        bow = sp.csr_matrix(
            (
                own("bow.data", np.float32),
                own("bow.indices", index),
                own("bow.indptr", index),
            ),
            shape=(ids.shape[0], int(st["bow.n_words"])),
        )
        words = words_indptr = sigs = None
        if "he.indptr" in st:  # (an index written before them has none)
            words_indptr = own("he.indptr", np.int64)
            words = _own_array(get("he.words"), copy)
            if (
                words_indptr.shape != (ids.shape[0] + 1,)
                or words.ndim != 2
                or words.dtype.kind not in "iu"
                or int(words_indptr[-1]) != words.shape[0]
            ):
                raise ValueError("the search data's words do not match its rows")
            if "he.sigs" in st:
                sigs = _own_array(get("he.sigs"), copy)
                if sigs.shape != words.shape or sigs.dtype != np.uint64:
                    raise ValueError("the search data's signatures do not match its words")
        return cls(
            ids,
            ixs["vocab"],
            ixs["uniform"],
            bow,
            own("wta", np.uint8),
            own("rh", np.uint8),
            words,
            words_indptr,
            sigs,
        )

    def subset(self, rows: np.ndarray) -> EncodedImages:
        """Rows ``rows`` ((k,) int64 positions), in that order."""
        words = words_indptr = sigs = None
        if self.words is not None:
            words_indptr, at = entry_positions(self.words_indptr, np.asarray(rows, np.int64))
            words = self.words[at]
            sigs = None if self.sigs is None else self.sigs[at]
        return EncodedImages(
            self.ids[rows],
            self.vocab.subset(rows),
            None if self.uniform is None else self.uniform.subset(rows),
            self.bow[rows],
            self.wta[rows],
            self.rh[rows],
            words,
            words_indptr,
            sigs,
        )

    @staticmethod
    def concat(
        parts: list[EncodedImages], uniform: IntersectionIndex | None = None
    ) -> EncodedImages:
        """Rows of ``parts`` one after the other (``uniform``: their uniform pyramids,
        already concatenated)."""
        if len(parts) == 1 and uniform is None:  # no copy (a loaded index keeps its arrays)
            return parts[0]
        if uniform is None and any(not isinstance(p.uniform, IntersectionIndex) for p in parts):
            # (not encoded, or made from the features when read: left to the reader)
            vocab = IntersectionIndex.concat([p.vocab for p in parts])  # (none kept)
        elif uniform is None:
            # the two pyramids' merges (sorts and copies, without the GIL) side by side
            vocab, uniform = thread_map(
                IntersectionIndex.concat, [[p.vocab for p in parts], [p.uniform for p in parts]]
            )
        else:
            vocab = IntersectionIndex.concat([p.vocab for p in parts])
        import scipy.sparse as sp

        return EncodedImages(
            np.concatenate([p.ids for p in parts]),
            vocab,
            uniform,
            sp.vstack([p.bow for p in parts], format="csr"),
            np.concatenate([p.wta for p in parts]),
            np.concatenate([p.rh for p in parts]),
            *_concat_words(parts),
        )


def _index_dtype(n: int) -> type:
    """The smallest of uint16, int32 and int64 that holds the indices of ``n`` columns."""
    return np.uint16 if n <= 1 << 16 else np.int32 if n < 2**31 - 1 else np.int64


def _own_array(a: Any, copy: bool) -> np.ndarray:
    """``a`` as an array in memory of its own (``copy``, a view of a read buffer)."""
    a = np.asarray(a)
    return a.copy() if copy and not a.flags.owndata else a


#: Rows whose stored descriptors :func:`fill_words` reads at a time (about 100 MB).
FILL_BATCH = 512


def fill_words(models: SearchModels, store: IndexStore, data: EncodedImages) -> EncodedImages:
    """``data`` with the words of every row that holds none (written before they were
    stored) found from its stored descriptors by a descent of the trees (:func:`he_words`;
    about 1 us a descriptor), a batch of ``FILL_BATCH`` rows at a time, and, when
    ``models`` have the Hamming embedding, the signatures of those descriptors; rows
    written before the signatures were stored are all read again (their words found
    again, the same). ``data`` itself when nothing is missing."""
    n, t = len(data.ids), len(models.vocab.binnings_)
    signed = models.he is not None
    if data.words is not None and (data.sigs is not None or not signed):
        old_ptr, old, old_sigs = data.words_indptr, data.words, data.sigs
        todo = np.flatnonzero(np.diff(old_ptr) == 0)
        if todo.size == 0:
            return data
    else:
        old_ptr, old = np.zeros(n + 1, np.int64), np.zeros((0, t), np.uint16)
        old_sigs, todo = None, np.arange(n)
    # the rows' words as they are, then those found for ``todo`` (rows n, n + 1, ...):
    # one ragged layout, each row taken from where its words are
    found, ptrs = [old], [old_ptr]
    sigs = [np.zeros((0, t), np.uint64) if old_sigs is None else old_sigs]
    for b in range(0, todo.size, FILL_BATCH):
        X, indptr = store.stacked_descriptors([int(i) for i in data.ids[todo[b : b + FILL_BATCH]]])
        words = he_words(models.vocab, X)
        found.append(_word_dtype(models, words))
        if signed:
            sigs.append(models.he.signatures(X, words))
        ptrs.append(ptrs[-1][-1] + indptr[1:])
    source = np.arange(n, dtype=np.int64)
    source[todo] = n + np.arange(todo.size)
    dtype = np.result_type(*[f.dtype for f in found])
    indptr, at = entry_positions(np.concatenate(ptrs), source)
    words = np.concatenate([f.astype(dtype, copy=False) for f in found])[at]
    return replace(
        data,
        words=words,
        words_indptr=indptr,
        sigs=np.concatenate(sigs)[at] if signed else None,
    )


def _concat_words(
    parts: list[EncodedImages],
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """The words, their offsets and their signatures of ``parts`` one after the other;
    a part without words (written before they were stored) gives its rows none; None
    when no part has them (the signatures: when a part with words has none)."""
    held = [p for p in parts if p.words is not None]
    if not held:
        return None, None, None
    t = held[0].words.shape[1]
    dtype = np.result_type(*[p.words.dtype for p in held])
    counts = [
        np.diff(p.words_indptr) if p.words is not None else np.zeros(len(p.ids), np.int64)
        for p in parts
    ]
    indptr = np.zeros(sum(len(p.ids) for p in parts) + 1, np.int64)
    np.cumsum(np.concatenate(counts), out=indptr[1:])
    if any(p.words.shape[1] != t for p in held):
        raise ValueError("the search data's words differ in trees")
    words = np.concatenate([p.words.astype(dtype, copy=False) for p in held])
    signed = all(p.sigs is not None for p in held)
    return words, indptr, np.concatenate([p.sigs for p in held]) if signed else None


def stored_query(data: Any, row: int) -> EncodedImages:
    """Row ``row`` of a collection's search data as a query: what :func:`encode` gives
    that photo's stored features with :data:`INDEX_PARTS` (one row, id -1).

    The stored row was encoded from the same features with the same models (the idf
    weights stay those of the fit; a refit re-encodes every row), so a query by a photo of
    the collection need not read its features nor encode them again: about 5 ms of
    feature reading and 4 ms of encoding at 100,000 photos. ``tests/engine/test_collection.py``
    and ``test_mapped.py`` check that the two are equal.

    Parameters
    ----------
    data : EncodedImages or SegmentedImages
        The collection's data (in memory or mapped segments).
    row : int
        A row of ``data``.

    Returns
    -------
    EncodedImages
        ``vocab`` (the row's pyramid), ``bow`` (1, n_words) float32 CSR, ``wta`` and
        ``rh`` (1, m) uint8 copies; ``uniform`` None.
    """
    row = int(row)
    keys, values = data.vocab.row(row)
    vocab = IntersectionIndex(
        np.array([0, len(keys)], np.int64), np.asarray(keys), np.asarray(values)
    )
    one = np.array([row], np.int64)
    return EncodedImages(
        np.array([-1], np.int64),
        vocab,
        None,
        data.bow[one],
        np.array(data.wta[row : row + 1]),
        np.array(data.rh[row : row + 1]),
    )


def pyramid_from_state(
    st: dict[str, Any], name: str, own: Any, get: Any | None = None
) -> IntersectionIndex:
    """Pyramids ``name`` (``"vocab"`` or ``"uniform"``) of a state of
    :class:`EncodedImages`: by columns when saved with them (their keys are not kept),
    else by key. ``own(key, dtype)`` takes an array out of ``st``; ``get`` reads (or pops)
    what is not kept."""
    get = st.get if get is None else get
    if f"{name}.cols" in st:
        get(f"{name}.keys", None)  # not kept
        keys = None
        columns = (own(f"{name}.ukeys", np.int64), own(f"{name}.cols", np.int32))
    else:
        keys, columns = own(f"{name}.keys", np.int64), None
    return IntersectionIndex(
        own(f"{name}.indptr", np.int64), keys, own(f"{name}.values", np.float32), columns=columns
    )


def pyramid_state(
    name: str, ix: IntersectionIndex, *, compact: bool = False
) -> dict[str, np.ndarray]:
    """State arrays of pyramids ``name`` (``"vocab"`` or ``"uniform"``) of
    :class:`EncodedImages`; ``compact``: the values as float16 (:func:`encode` rounds
    the vocabulary pyramids' to that precision) and the columns as uint16 when there are
    at most 65,536 (readers convert them, or gather them as stored:
    :mod:`engine.index.mapped`).

    Returns
    -------
    dict of str to ndarray
        ``<name>.indptr`` (n + 1,) int64 and ``<name>.values`` (nnz,) float32 (float16
        when ``compact``), then the keys: ``<name>.keys`` (nnz,) int64 when the pyramids
        hold no columns (the uniform ones), else ``<name>.ukeys`` (K,) int64 and
        ``<name>.cols`` (nnz,) int32 (uint16 when ``compact`` and K <= 65,536; the keys
        are ``ukeys[cols]``, not stored again).
    """
    st = {f"{name}.indptr": ix.indptr, f"{name}.values": ix.values}
    columns = ix.stored_columns
    if columns is None:  # (the uniform pyramids: see uniform_index)
        st[f"{name}.keys"] = ix.keys
    else:
        uk, cols = columns  # the keys are ukeys[cols]: not stored again
        if compact and uk.shape[0] <= 1 << 16:
            cols = cols.astype(np.uint16)
        st[f"{name}.ukeys"], st[f"{name}.cols"] = uk, cols
    if compact:
        st[f"{name}.values"] = ix.values.astype(np.float16)
    return st


def stacked(store: IndexStore, ids: np.ndarray) -> StackedSets:
    """Stored descriptors of images ``ids``, in that order, stacked (descriptors only: no
    keypoint is read, and no set is validated again -- the store holds finite values).

    Parameters
    ----------
    store : IndexStore
    ids : (n,) int64
        Store ids.

    Returns
    -------
    StackedSets
        ``X`` (N, D) float32 and ``sizes`` (n,) int64.
    """
    X, indptr = store.stacked_descriptors(ids)
    return StackedSets(X, np.diff(indptr))


def descriptor_sets(store: IndexStore, ids: np.ndarray) -> list[np.ndarray]:
    """Stored descriptors of images ``ids`` ((n,) int64), in that order: a list of
    (M_i, D) float32 arrays (views of one stacked array)."""
    return stacked(store, ids).sets()


def uniform_index(
    models: SearchModels, sets: Sequence[np.ndarray] | StackedSets
) -> IntersectionIndex:
    """Uniform-bin pyramids of a batch as the search data holds them: by key, without
    columns. Their bins are millions, most in one image, so collection-wide columns cost
    a merge of every key whenever batches are concatenated (3,050 Caltech-101 images:
    1.2-1.9 s on the critical path of a first index's last step; 10,000 images, adding one
    image: 2.1 s against 0.38 s) and buy nothing at query time: candidate rows are matched
    to the query's keys directly (:class:`~engine.index.search.IntersectionIndex`).

    Parameters
    ----------
    models : SearchModels
        Fitted models (``models.uniform`` is read).
    sets : list of (M_i, D) float32 or StackedSets

    Returns
    -------
    IntersectionIndex
        One row per set: the pyramid-match values ``count * (w_b - w_parent(b)) / T``
        (thesis Eq. 3.10 averaged over ``T`` shifts), by key, without columns.
    """
    codes = batch_codes(models.uniform, sets, weights=True)
    return intersection_index(codes, code_values(codes, weighting="pm"), columns=False)


#: The optional parts of :func:`encode` (all of them).
ALL_PARTS = frozenset({"uniform", "wta", "rh", "words"})
#: The optional parts the index stores (the uniform pyramids are made from the stored
#: features when read: :mod:`engine.index.uniform_rows`).
INDEX_PARTS = frozenset({"wta", "rh", "words"})


def encode(
    models: SearchModels,
    ids: np.ndarray,
    sets: Sequence[np.ndarray] | StackedSets | None,
    codes: SimpleNamespace | None = None,
    parts: frozenset[str] = ALL_PARTS,
    uniform: IntersectionIndex | None = None,
) -> EncodedImages:
    """Encode a batch of images with fitted models.

    Parameters
    ----------
    models : SearchModels
        Fitted models, with their idf weights (:func:`engine.index.fit.fit_weights`).
    ids : (n,) int64
        Store ids of the images (``[-1]`` for a query).
    sets : list of (M_i, D) float32, StackedSets or None
        Their descriptors; None only when ``codes`` and (or ``parts`` without
        ``"uniform"``) ``uniform`` are given.
    codes : SimpleNamespace, optional
        Their vocabulary pyramids (:func:`~engine.index.codes.batch_codes`), when
        already computed.
    parts : frozenset of str
        Which of the optional encodings to compute (``"uniform"``, ``"wta"``, ``"rh"``,
        ``"words"``): a query needs only some, the index stores :data:`INDEX_PARTS`; the
        others are left empty (zeros; the uniform pyramids and the words: None). The
        words are taken from ``codes`` when it holds them (``batch_codes(...,
        words_level=HE_LEVEL)``), else found from ``sets`` (None without either); their
        signatures (:attr:`EncodedImages.sigs`) from ``codes.sigs``, else computed from
        ``sets`` (None without them or without the models' Hamming embedding).
    uniform : IntersectionIndex, optional
        Their uniform pyramids, already encoded (:func:`uniform_index`).

    Returns
    -------
    EncodedImages
        The vocabulary pyramids' values are ``count * idf_b``, L1-normalised per image
        (bins unknown to the fit get ``models.idf_unknown``), rounded to float16
        precision (as the index stores them).
    """
    if codes is None:
        level = HE_LEVEL if "words" in parts else None
        codes = batch_codes(models.vocab, sets, words_level=level)
    values = code_values(
        codes,
        weighting="idf",
        idf=models.idf,
        idf_keys=models.idf_keys,
        idf_unknown=models.idf_unknown,
    )
    # float16 precision, as stored (EncodedImages.to_state): what a reader holds is what
    # was encoded. Quality table (tests/benchmarks/quality.py --quick) against float32:
    # Holidays vocabulary (and wta) mAP 0.5939 -> 0.5927, hybrid 0.8269 either way, the
    # other cells unchanged
    values = values.astype(np.float16).astype(np.float32)
    vocab = intersection_index(codes, values)
    n = len(ids)
    if uniform is None and "uniform" in parts:
        uniform = uniform_index(models, sets)
    import scipy.sparse as sp

    bow = (
        bow_from_codes(models, codes)
        if parts == ALL_PARTS or "wta" in parts
        else sp.csr_matrix((n, len(models.leaf_keys)), dtype=np.float32)
    )
    wta = np.zeros((n, models.dwta.n_codes), np.uint8)
    if "wta" in parts and n:
        wta = models.dwta.hash(bow)
    # random hyperplanes over the embedding of the idf-weighted pyramid (Eqs. 5.8-5.11:
    # values are square roots, so dot products approximate the weighted intersection)
    rh = np.zeros((n, models.rh.n_bits // 8), np.uint8)
    if "rh" in parts and n:
        hashed = models.rh.rows_hashed
        if models.rh.n_cached == 0 and len(models.idf_keys) and hashed >= RH_CACHE_AFTER:
            # hyperplane coordinates of every bin known at fit time (once, ~0.25 s at
            # 1024 bits x 21k bins): hashing a query's pyramid is then one sparse row
            # times the cache (4 * n_bits bytes per bin, 86 MB at 10,000 images). Not
            # for the first rows a process hashes: a one-shot query (``simile query``)
            # generates the coordinates of its own ~1,500 bins (a few ms) instead
            models.rh.cache(models.idf_keys)
        models.rh.rows_hashed = hashed + n
        rh = models.rh.hash(embedding(vocab))
    words = words_indptr = sigs = None
    if "words" in parts:
        words, sigs = getattr(codes, "words", None), getattr(codes, "sigs", None)
        signed = models.he is not None
        if sets is not None and (words is None or (sigs is None and signed)):
            X = sets.X if isinstance(sets, StackedSets) else _stack(sets)
            if words is None:
                words = he_words(models.vocab, X)
            if sigs is None and signed:
                sigs = models.he.signatures(X, words)
        if words is not None:
            words = _word_dtype(models, words)
            words_indptr = np.zeros(n + 1, np.int64)
            np.cumsum(codes.sizes, out=words_indptr[1:])
            if int(words_indptr[-1]) != len(words):
                raise ValueError("the words do not match the batch's descriptors")
    ids = np.asarray(ids, np.int64)
    return EncodedImages(ids, vocab, uniform, bow, np.asarray(wta), rh, words, words_indptr, sigs)


def he_words(vocab: PyramidMatch, X: np.ndarray) -> np.ndarray:
    """(M, T) int64 the level-``HE_LEVEL`` node of descriptors ``X`` (M, D) in each of
    the ``T`` trees of the fitted vocabulary pyramid match ``vocab`` (``models.vocab``):
    the words of the Hamming embedding (:mod:`engine.kernels.hamming`), by a descent of
    the trees."""
    Z = vocab.project(np.asarray(X, np.float32))
    trees = vocab.binnings_
    if len(Z) == 0:
        return np.zeros((0, len(trees)), np.int64)
    return np.stack([t.bins_at(Z, HE_LEVEL) for t in trees], axis=1)


def _word_dtype(models: SearchModels, words: np.ndarray) -> np.ndarray:
    """``words`` as the index stores them: uint16 when every tree has at most 65,536
    level-``HE_LEVEL`` nodes, else int32."""
    small = all(t.sizes[HE_LEVEL] <= 1 << 16 for t in models.vocab.binnings_)
    return np.ascontiguousarray(words, np.uint16 if small else np.int32)


def _stack(sets: Sequence[np.ndarray]) -> np.ndarray:
    """The descriptors of ``sets`` one after the other, (M, D) float32."""
    arrays = [np.asarray(a, np.float32) for a in sets]
    return np.concatenate(arrays) if arrays else np.zeros((0, 0), np.float32)


def embedding(ix: IntersectionIndex) -> SparseEmbedding:
    """Sparse vectors whose dot product approximates the intersection: sqrt of the values
    (thesis Eqs. 5.8-5.11), with the index's columns, which spare the hash a sort of the
    keys.

    Parameters
    ----------
    ix : IntersectionIndex
        ``n`` rows.

    Returns
    -------
    engine.kernels.pyramid.SparseEmbedding
        ``n`` rows, values (nnz,) float32.
    """
    from engine.kernels.pyramid import SparseEmbedding

    keys = ix.keys if ix.holds_keys else ix.row_keys(slice(None))  # keys not kept
    return SparseEmbedding(
        ix.indptr, keys, np.sqrt(ix.values).astype(np.float32), columns=ix.columns()
    )


def rehash_bits(models: SearchModels, data: EncodedImages, n_bits: int) -> None:
    """Switch to ``n_bits`` hyperplanes: new model and bits of every stored row (from the
    stored pyramids alone; the bits of hyperplane ``b`` depend only on ``(seed, b, key)``,
    so the first bits are unchanged).

    Parameters
    ----------
    models : SearchModels
        ``models.rh`` is replaced (same seed) and its bin cache filled.
    data : EncodedImages
        ``data.rh`` is replaced by the (n, n_bits / 8) uint8 bits.
    n_bits : int
    """
    from engine.hashing.lsh import RandomHyperplaneHash

    models.rh = RandomHyperplaneHash(n_bits, random_state=models.rh.random_state)
    models.rh.cache(models.idf_keys)
    n = len(data.ids)
    data.rh = np.zeros((n, n_bits // 8), np.uint8)
    for s0 in range(0, n, 2048):
        part = data.vocab.subset(np.arange(s0, min(n, s0 + 2048)))
        data.rh[s0 : s0 + part.indptr.size - 1] = models.rh.hash(embedding(part))


def bow_from_codes(models: SearchModels, codes: SimpleNamespace) -> sp.csr_matrix:
    """tf-idf bag of words over the tree's leaves (level 0 of the vocabulary pyramid;
    Nistér & Stewénius: ``tf * idf``, L2-normalised).

    Parameters
    ----------
    models : SearchModels
        ``leaf_keys`` (the columns) and ``leaf_idf`` are read; leaves unknown to them
        are dropped.
    codes : SimpleNamespace
        Vocabulary pyramids of ``n`` images (:func:`~engine.index.codes.batch_codes`).

    Returns
    -------
    (n, len(models.leaf_keys)) float32 scipy.sparse.csr_matrix
    """
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
    import scipy.sparse as sp

    bow = sp.csr_matrix((data.astype(np.float32), (rows, cols)), shape=(n, nw))
    bow.sum_duplicates()
    lens = np.diff(bow.indptr)
    norms = np.sqrt(np.bincount(np.repeat(np.arange(n), lens), weights=bow.data**2, minlength=n))
    bow.data = (bow.data / np.repeat(np.where(norms > 0, norms, 1.0), lens)).astype(np.float32)
    return bow


def compatible(models: SearchModels, data: EncodedImages) -> bool:
    """Whether ``data`` can have been encoded with ``models``: its bags of words have
    the models' words, its WTA codes and hash bits their lengths. (An index written
    before the models and data were one commit may hold new models with old data after
    a crash between the two writes.)

    Parameters
    ----------
    models : SearchModels
    data : EncodedImages

    Returns
    -------
    bool
    """
    return (
        data.bow.shape[1] == len(models.leaf_keys)
        and data.wta.shape[1] == models.dwta.n_codes
        and data.rh.shape[1] * 8 == models.rh.n_bits
    )
