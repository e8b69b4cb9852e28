"""Exact scoring of a collection's pyramids: weighted histogram intersection.

- :class:`IntersectionIndex` -- exact scoring of one query against any subset of the
  collection by a weighted histogram intersection ``sum_b min(q_b, x_b)``. A pyramid
  match with global bin weights is exactly such an intersection once each bin's count is
  multiplied by its weight ``w_b - w_parent(b)`` (thesis Eq. 3.10 / 5.5: ``min(c_q, c_x) v
  = min(c_q v, c_x v)`` for ``v >= 0``). The ``vocabulary`` method uses the vocabulary-
  guided pyramid (thesis ch. 4) with idf-weighted bins and L1-normalised pyramids, which
  is also the hierarchical scoring of Nistér & Stewénius; the ``uniform`` method the
  normalised uniform-bin pyramid match (Eq. 3.12).
- :func:`histograms_from_codes`, :func:`code_values` -- the values of those histograms
  (pyramid-match or idf weights); :func:`fit_key_idf` -- the idf of every bin.

- :class:`SegmentedIndex` -- the same scores over rows that lie in several indexes (the
  memory-mapped segments of a one-shot reader, :mod:`engine.index.mapped`), without
  concatenating them: exactly the scores of their concatenation.

Candidates for large collections (hashes and an inverted file) are chosen by
:mod:`engine.index.candidates` and then scored exactly here; the same-object
verification (:func:`verify_pair`, re-exported here) lives in :mod:`engine.index.verify`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.blas import single_threaded_blas

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.verify import Verification, descriptor_matches, verify_pair

#: re-exported from engine.index.verify on first use (it imports OpenCV: the index and
#: its updates import this module without it)
_FROM_VERIFY = ("Verification", "descriptor_matches", "verify_pair")

__all__ = [
    "IntersectionIndex",
    "Verification",
    "code_values",
    "descriptor_matches",
    "entry_positions",
    "fit_key_idf",
    "histograms_from_codes",
    "row_sums",
    "single_threaded_blas",
    "verify_pair",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_VERIFY:
        from engine.index import verify

        value = getattr(verify, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# IntersectionIndex._score_rows: below this many distinct bins the query is a dense vector,
# above it entries are matched through a filter of _FILTER_SLOTS (a power of two) slots
DENSE_QUERY_MAX = 1 << 20
_FILTER_SLOTS = 1 << 16
_DIRECTORY_MIN_KEYS = 1 << 16  # IntersectionIndex._lookup: bucket directory from here on


def row_sums(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """(n,) float64 sums of the rows of a CSR layout (``values`` per entry, ``indptr``
    (n + 1,)); empty rows sum to 0."""
    out = np.zeros(indptr.shape[0] - 1)
    nz = np.diff(indptr) > 0
    if nz.any():
        out[nz] = np.add.reduceat(values, indptr[:-1][nz], dtype=np.float64)
    return out


def entry_positions(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries of ``rows`` of a CSR layout, in that order: their own ``(len(rows) +
    1,)`` indptr and the (nnz,) positions of their entries in the layout's arrays."""
    starts = indptr[rows]
    lens = indptr[rows + 1] - starts
    sub = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lens, out=sub[1:])
    at = np.repeat(starts - sub[:-1], lens)
    at += np.arange(sub[-1])
    return sub, at


# --------------------------------------------------------------------------- histograms
def histograms_from_codes(
    codes,
    *,
    weighting: str = "pm",
    idf: np.ndarray | None = None,
    idf_keys: np.ndarray | None = None,
    idf_unknown: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Turn :class:`engine.kernels.pyramid.PyramidCodes` into weighted sparse histograms.

    Parameters
    ----------
    codes : PyramidCodes
        From ``PyramidMatch.encode`` (global weights).
    weighting : {"pm", "idf"}
        ``"pm"``: value ``count * (w_b - w_parent(b)) / T`` so the intersection of two rows
        is the unnormalised pyramid match (Eq. 3.10 averaged over ``T`` shifts).
        ``"idf"``: value ``count * idf_b``, rows L1-normalised (Nistér & Stewénius scoring on
        every tree level; idf looked up by key in ``idf_keys`` / ``idf``).
    idf, idf_keys : (K,) float32 / (K,) int64 sorted, optional
        Bin idf weights by key (``"idf"`` only).
    idf_unknown : float
        idf of keys absent from ``idf_keys`` (bins no image had when idf was fitted).

    Returns
    -------
    indptr : (n + 1,) int64
    keys : (nnz,) int64
        Sorted within each row.
    values : (nnz,) float32
    """
    n = len(codes.sizes)
    vals = code_values(
        codes, weighting=weighting, idf=idf, idf_keys=idf_keys, idf_unknown=idf_unknown
    )
    keep = vals > 0
    row, key, vals = codes.row[keep], codes.key[keep], vals[keep]
    order = np.lexsort((key, row))
    counts = np.bincount(row, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, key[order].astype(np.int64), vals[order].astype(np.float32)


def code_values(
    codes,
    *,
    weighting: str = "pm",
    idf: np.ndarray | None = None,
    idf_keys: np.ndarray | None = None,
    idf_unknown: float = 0.0,
) -> np.ndarray:
    """(G,) float64 histogram value of every entry of ``codes``, weighted as
    :func:`histograms_from_codes` describes (same parameters); zeros included."""
    if weighting == "pm":
        return codes.count * np.maximum(codes.w - codes.wp, 0.0) / codes.n_shifts
    if weighting != "idf":
        raise ValueError(f"weighting must be 'pm' or 'idf', got {weighting!r}")
    ukeys, col = getattr(codes, "ukeys", None), getattr(codes, "col", None)
    lookup = codes.key if ukeys is None or col is None else ukeys
    # each distinct key looked up once when the codes carry their columns (a batch's
    # entries repeat its keys about 4 times)
    pos = np.searchsorted(idf_keys, lookup)
    pos = np.minimum(pos, max(len(idf_keys) - 1, 0))
    known = (idf_keys[pos] == lookup) if len(idf_keys) else np.zeros(len(pos), bool)
    if lookup is ukeys:
        pos, known = pos[col], known[col]
    vals = codes.count * np.where(known, idf[pos] if len(idf_keys) else 0.0, idf_unknown)
    tot = np.bincount(codes.row, weights=vals, minlength=len(codes.sizes))
    return vals / np.where(tot > 0, tot, 1.0)[codes.row]


def fit_key_idf(
    codes, *, n_sets: int | None = None, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin inverse document frequency ``idf_b = ln(N / N_b)`` (Nistér & Stewénius).

    Parameters
    ----------
    codes : PyramidCodes
        Pyramids of ``N`` sets; a set holds each bin at most once, so ``N_b`` is the
        number of entries with key ``b``.
    n_sets : int, optional
        ``N`` (default ``len(codes)``).
    mask : (G,) bool, optional
        Only these entries (e.g. one level).

    Returns
    -------
    keys : (K,) int64, sorted
    idf : (K,) float32
    """
    key = codes.key if mask is None else codes.key[mask]
    keys, df = np.unique(key, return_counts=True)
    n = max(len(codes.sizes) if n_sets is None else int(n_sets), 1)
    return keys.astype(np.int64), np.log(n / df).astype(np.float32)


class IntersectionIndex:
    """Exact weighted histogram intersection of a query with any rows of a collection.

    Rows are sparse non-negative histograms over int64 bin keys. Bins held by many rows
    ("heavy": the coarse pyramid levels) are kept as a dense ``(n, H)`` float32 matrix,
    the others as postings sorted by key, so scoring a query costs
    ``O(|cand| x heavy bins of q + postings of q's light bins)`` -- no Python loop over
    rows or bins.

    Parameters
    ----------
    indptr : (n + 1,) int64
    keys : (nnz,) int64 or None
        ``None`` only with ``columns``: the keys are then ``columns[0][columns[1]]``,
        materialised on first use of :attr:`keys` (queries over candidate rows never need
        them, which saves 8 bytes per entry -- 270 MB for the uniform pyramids of 10,000
        images).
    values : (nnz,) float32, >= 0
    max_heavy : int
        At most this many dense columns.
    columns : ((K,) int64 sorted unique keys, (nnz,) int32 column of every entry), optional
        Precomputed :meth:`columns` (persisted with the index).

    Notes
    -----
    With ``columns`` (the vocabulary pyramids: tens of thousands of distinct bins) a
    query is looked up once in the sorted unique keys and matched to the rows' entries
    by column, and :meth:`concat` merges the parts' columns. Without them (the uniform
    pyramids: millions of distinct bins, most in one image) candidate rows are matched
    to the query by their keys directly (:meth:`_score_rows_by_key`), so concatenating
    batches -- a first index, or adding images to a large one -- is a copy of their
    arrays instead of a merge of every key (3,050 Caltech-101 images: 1.2-1.9 s of the
    index's final step; 10,000 images, adding one: 2.1 s against 0.38 s).
    """

    def __init__(
        self,
        indptr: np.ndarray,
        keys: np.ndarray | None,
        values: np.ndarray,
        *,
        max_heavy: int = 2048,
        columns: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if keys is None and columns is None:
            raise ValueError("keys may be None only when columns are given")
        self.indptr = np.asarray(indptr, np.int64)
        self._keys = None if keys is None else np.asarray(keys, np.int64)
        values = np.asarray(values)
        # (float16 values of a mapped segment are kept as stored, gathered row by row;
        # every operation on them gives float32, as on their float32 conversion)
        if values.dtype != np.float16:
            values = values.astype(np.float32, copy=False)
        self.values = values
        self.max_heavy = int(max_heavy)
        self._built = False
        self._columns = columns  # (unique keys (K,), column of every entry (nnz,) int32)
        self._csr = None
        self._scratch: np.ndarray | None = None  # (K,) float32 zeros between queries
        # _filter_sums' tables by id dtype: (_FILTER_SLOTS,) tags and float32 values
        self._filters: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}
        self._directory: tuple[np.uint64, np.ndarray, int] | None = None  # see _lookup
        self._scratch_lock = threading.Lock()

    @property
    def keys(self) -> np.ndarray:
        """(nnz,) int64 bin key of every entry (sorted within each row)."""
        if self._keys is None:
            uk, cols = self._columns
            self._keys = uk[cols]
        return self._keys

    @property
    def holds_keys(self) -> bool:
        """Whether the ``(nnz,)`` keys are held (else :attr:`keys` gathers them from the
        columns on first use)."""
        return self._keys is not None

    @property
    def stored_columns(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The columns the index holds -- given, or computed by :meth:`columns` before --
        else None; unlike :meth:`columns` it never computes them.

        Returns
        -------
        ((K,) int64 sorted unique keys, (nnz,) int32 column of every entry) or None
        """
        return self._columns

    def row_keys(self, rows: slice) -> np.ndarray:
        """Keys of an entry range without materialising :attr:`keys`."""
        if self._keys is None:
            uk, cols = self._columns
            return uk[cols[rows]]
        return self._keys[rows]

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Compact column ids: sorted unique keys ``(K,) int64`` and each entry's
        column ``(nnz,) int32`` (computed once; persisted with the index)."""
        if self._columns is None:
            uk, inv = np.unique(self.keys, return_inverse=True)
            self._columns = (uk.astype(np.int64), inv.ravel().astype(np.int32))
        return self._columns

    def lookup(self, q_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Column of each query key: ``pos`` (k,) int64 (clipped) and ``hit`` (k,) bool.

        Millions of columns (the uniform pyramids of indexes that saved their columns:
        119 MB of sorted keys at 10,000 images) make a binary search a chain of ~24 cache misses
        per key (3 ms for a 5,000-key query). The keys are hashes, spread uniformly over
        int64, so a directory over their top ``b`` bits (about 8 keys per bucket) narrows
        each search to one bucket, searched by a few vectorised bisection steps.
        """
        uk = self.columns()[0]
        K = uk.shape[0]
        if K == 0:
            return np.zeros(q_keys.shape, np.int64), np.zeros(q_keys.shape, bool)
        if K < _DIRECTORY_MIN_KEYS:
            pos = np.minimum(np.searchsorted(uk, q_keys), K - 1)
            return pos, uk[pos] == q_keys
        if self._directory is None:
            bits = int(min(26, max(8, np.ceil(np.log2(K / 8)))))
            shift = np.uint64(64 - bits)
            b = (uk.view(np.uint64) ^ np.uint64(1 << 63)) >> shift
            count = np.bincount(b.astype(np.int64), minlength=1 << bits)
            start = np.zeros((1 << bits) + 1, np.int64)
            np.cumsum(count, out=start[1:])
            self._directory = (shift, start, int(count.max()))
        shift, start, width = self._directory
        b = ((q_keys.view(np.uint64) ^ np.uint64(1 << 63)) >> shift).astype(np.int64)
        lo, hi = start[b], start[b + 1]
        for _ in range(int(width).bit_length()):  # binary search inside the buckets
            mid = (lo + hi) >> 1
            go = uk[np.minimum(mid, K - 1)] < q_keys
            go &= mid < hi
            lo = np.where(go, mid + 1, lo)
            hi = np.where(go, hi, mid)
        pos = np.minimum(lo, K - 1)
        return pos, uk[pos] == q_keys

    def _score_rows(
        self, q_keys: np.ndarray, q_values: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """Row-major scoring of a few rows: work proportional to their entries."""
        if self._columns is None:
            return self._score_rows_by_key(q_keys, q_values, rows)
        uk, cols = self.columns()
        pos, hit = self.lookup(q_keys)
        if getattr(self, "_csr", None) is None:
            import scipy.sparse as sp

            self._csr = sp.csr_matrix(
                (self.values.astype(np.float32, copy=False), cols, self.indptr),
                shape=(len(self), uk.shape[0] + 1),
            )
        sub = self._csr[rows]  # C-level row gather
        if sub.nnz == 0:
            return np.zeros(rows.shape[0])
        qcols = pos[hit].astype(np.int64)  # sorted: q_keys are sorted and unique
        qvals = q_values[hit]
        if qcols.size == 0:
            return np.zeros(rows.shape[0])
        idx = sub.indices
        if uk.shape[0] < DENSE_QUERY_MAX:
            # few distinct bins (vocabulary pyramids): the query as a dense vector over
            # the K columns, a cache-resident buffer kept between calls and cleared after
            with self._scratch_lock:
                if self._scratch is None:
                    self._scratch = np.zeros(uk.shape[0], np.float32)
                q = self._scratch
                q[qcols] = qvals
                qx = np.take(q, idx)  # faster than q[idx] for int32 indices
                q[qcols] = 0.0
            return row_sums(np.minimum(sub.data, qx), sub.indptr)
        # Many distinct bins (an index written with the uniform pyramids' columns):
        # gathering from a dense (K,) query vector would cost a cache miss per entry
        return self._filter_sums(idx, sub.data, sub.indptr, qcols.astype(idx.dtype), qvals)

    def _score_rows_by_key(
        self, q_keys: np.ndarray, q_values: np.ndarray, rows: np.ndarray
    ) -> np.ndarray:
        """:meth:`_score_rows` of an index without columns (the uniform pyramids): the
        rows' entries are gathered and matched to the query by their keys -- no lookup of
        the query's keys in a collection-wide table, and no such table to build when
        batches are concatenated."""
        sub_indptr, at = entry_positions(self.indptr, rows)
        if at.size == 0 or q_keys.size == 0:
            return np.zeros(rows.shape[0])
        keys = np.take(self._keys, at)
        values = np.take(self.values, at)
        return self._filter_sums(keys, values, sub_indptr, q_keys, q_values)

    def _filter_sums(
        self,
        ent: np.ndarray,
        ent_values: np.ndarray,
        indptr: np.ndarray,
        q: np.ndarray,
        q_values: np.ndarray,
    ) -> np.ndarray:
        """Per row of ``indptr``: ``sum min(ent_values, q_values)`` over the entries whose
        id (``ent``: column or key, hashed ids whose low bits are uniform) is one of the
        query's ``q`` (sorted, unique, of ``ent``'s dtype).

        The query sits in a direct-mapped table of ``_FILTER_SLOTS`` slots on the ids' low
        bits (L2-resident, kept between calls): an entry matches iff its slot's tag is its
        id -- exact, two gathers per entry. An empty slot ``s`` is tagged ``s ^ 1`` and a
        slot where query ids collide ``s ^ 2`` (ids in slot ``s`` never equal either);
        the entries of colliding slots are looked up by bisection."""
        mask = _FILTER_SLOTS - 1
        slot = (q & mask).astype(np.intp)
        ss = np.sort(slot)
        clash = np.unique(ss[1:][ss[1:] == ss[:-1]])
        es = ent & mask
        with self._scratch_lock:
            tables = self._filters.get(ent.dtype)
            if tables is None:
                tag = (np.arange(_FILTER_SLOTS) ^ 1).astype(ent.dtype)
                tables = self._filters[ent.dtype] = (tag, np.zeros(_FILTER_SLOTS, np.float32))
            tag, val = tables
            tag[slot] = q
            val[slot] = q_values
            tag[clash] = clash ^ 2
            t = np.take(tag, es)
            qx = np.take(val, es)
            tag[slot] = slot ^ 1
        contrib = np.minimum(ent_values, qx)
        contrib[t != ent] = 0.0
        out = row_sums(contrib, indptr)
        n_rows = out.shape[0]
        if clash.size:
            amb = np.flatnonzero(t == (es ^ 2))
            j = np.minimum(np.searchsorted(q, ent[amb]), q.size - 1)
            ok = q[j] == ent[amb]
            hit = amb[ok]
            row_of = np.searchsorted(indptr, hit, side="right") - 1
            out += np.bincount(
                row_of, weights=np.minimum(ent_values[hit], q_values[j[ok]]), minlength=n_rows
            )
        return out

    def __len__(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def row_of(self) -> np.ndarray:
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def self_similarity(self) -> np.ndarray:
        """(n,) float64 ``sum_b x_b`` = intersection of each row with itself."""
        return row_sums(self.values, self.indptr)

    def _build(self) -> None:
        n = len(self)
        row = self.row_of
        uk, inv, df = np.unique(self.keys, return_inverse=True, return_counts=True)
        inv = inv.ravel()
        thresh = max(8, n // 32)
        cand = np.flatnonzero(df >= thresh)
        if cand.size > self.max_heavy:
            cand = cand[np.argsort(-df[cand], kind="stable")[: self.max_heavy]]
            cand.sort()
        heavy_col = np.full(uk.shape[0], -1, np.int64)
        heavy_col[cand] = np.arange(cand.size)
        self._heavy_keys = uk[cand]
        hc = heavy_col[inv]
        is_heavy = hc >= 0
        self._dense = np.zeros((n, cand.size), np.float32)
        self._dense[row[is_heavy], hc[is_heavy]] = self.values[is_heavy]
        light = np.flatnonzero(~is_heavy)
        order = light[np.argsort(self.keys[light], kind="stable")]
        self._pkeys = self.keys[order]
        self._prows = row[order]
        self._pvals = self.values[order]
        self._built = True

    def score(
        self, q_keys: np.ndarray, q_values: np.ndarray, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``sum_b min(q_b, x_b)`` for the given rows (all rows if None).

        Parameters
        ----------
        q_keys : (k,) int64, unique
        q_values : (k,) float32
        rows : (c,) int64, optional

        Returns
        -------
        (c,) or (n,) float64
        """
        n = len(self)
        q_keys = np.asarray(q_keys, np.int64)
        q_values = np.asarray(q_values, np.float32)
        if rows is not None and (len(rows) < n // 4 or not self._built):
            return self._score_rows(q_keys, q_values, np.asarray(rows, np.int64))
        if not self._built:
            self._build()
        out_rows = np.arange(n) if rows is None else np.asarray(rows, np.int64)
        out = np.zeros(out_rows.shape[0])
        if q_keys.size == 0 or n == 0:
            return out
        # heavy bins: dense gather
        if self._heavy_keys.size:
            pos = np.searchsorted(self._heavy_keys, q_keys)
            pos = np.minimum(pos, self._heavy_keys.size - 1)
            hit = self._heavy_keys[pos] == q_keys
            if hit.any():
                cols = pos[hit]
                block = (
                    self._dense[np.ix_(out_rows, cols)]
                    if rows is not None
                    else (self._dense[:, cols])
                )
                out += np.minimum(block, q_values[hit]).sum(axis=1, dtype=np.float64)
        # light bins: postings
        lo = np.searchsorted(self._pkeys, q_keys, side="left")
        hi = np.searchsorted(self._pkeys, q_keys, side="right")
        cnt = hi - lo
        total = int(cnt.sum())
        if total:
            starts = np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
            idx = np.arange(total) + starts
            contrib = np.minimum(self._pvals[idx], np.repeat(q_values, cnt))
            full = np.bincount(self._prows[idx], weights=contrib, minlength=n)
            out += full[out_rows]
        return out

    def pairwise(self) -> np.ndarray:
        """(n, n) float64 intersections of all pairs (row by row, vectorised per row)."""
        n = len(self)
        K = np.zeros((n, n))
        for i in range(n):
            s = slice(self.indptr[i], self.indptr[i + 1])
            K[i] = self.score(self.row_keys(s), self.values[s])
        return np.maximum(K, K.T)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        s = slice(self.indptr[i], self.indptr[i + 1])
        return self.row_keys(s), self.values[s]

    def subset(self, rows: np.ndarray) -> IntersectionIndex:
        """A new index holding only ``rows`` (in that order)."""
        rows = np.asarray(rows, np.int64)
        breaks = np.flatnonzero(np.diff(rows) != 1)
        if rows.size and breaks.size < 64:
            # a few runs of consecutive rows (an update that drops some images): their
            # entries are a few contiguous spans, copied without an index of every entry
            indptr = np.zeros(rows.size + 1, np.int64)
            np.cumsum(np.diff(self.indptr)[rows], out=indptr[1:])
            first = np.r_[0, breaks + 1]
            last = np.r_[breaks, rows.size - 1]
            spans = list(zip(self.indptr[rows[first]], self.indptr[rows[last] + 1], strict=True))

            def idx(a: np.ndarray) -> np.ndarray:
                return np.concatenate([a[s:e] for s, e in spans])
        else:
            indptr, at = entry_positions(self.indptr, rows)

            def idx(a: np.ndarray) -> np.ndarray:
                return a[at]

        if self._keys is None:  # keep the compact form: same unique keys, gathered columns
            uk, cols = self._columns
            return IntersectionIndex(
                indptr, None, idx(self.values), max_heavy=self.max_heavy, columns=(uk, idx(cols))
            )
        columns = None if self._columns is None else (self._columns[0], idx(self._columns[1]))
        return IntersectionIndex(
            indptr, idx(self.keys), idx(self.values), max_heavy=self.max_heavy, columns=columns
        )

    @staticmethod
    def concat(parts: list[IntersectionIndex]) -> IntersectionIndex:
        """Rows of ``parts`` one after the other. When every part has its
        :meth:`columns` already, the result's are merged from them (a union of the
        parts' unique keys, far cheaper than one ``np.unique`` over all entries) and its
        keys are left to be gathered from them if ever asked for."""
        indptrs, vals, off = [np.zeros(1, np.int64)], [], 0
        for p in parts:
            indptrs.append(p.indptr[1:] + off)
            off += int(p.indptr[-1])
            vals.append(p.values)
        values = np.concatenate(vals) if vals else np.zeros(0, np.float32)
        values = values.astype(np.float32, copy=False)
        if parts and all(p._columns is not None for p in parts):
            uks = [p._columns[0] for p in parts]
            big = int(np.argmax([u.size for u in uks]))
            if 8 * (sum(u.size for u in uks) - uks[big].size) < uks[big].size:
                return IntersectionIndex(
                    np.concatenate(indptrs), None, values, columns=_merged_columns(parts, big)
                )
            every = np.concatenate(uks)
            # the parts' keys are sorted runs, which a stable (merging) sort exploits
            order = np.argsort(every, kind="stable")
            s = every[order]
            new = np.empty(s.size, bool)
            new[:1] = True
            np.not_equal(s[1:], s[:-1], out=new[1:])
            rank = np.empty(s.size, np.int32)
            rank[order] = np.cumsum(new, dtype=np.int32) - 1  # column of every part key
            ends = np.cumsum([u.size for u in uks])
            cols = [
                rank[e - u.size : e][p._columns[1]]
                for e, u, p in zip(ends, uks, parts, strict=True)
            ]
            return IntersectionIndex(
                np.concatenate(indptrs), None, values, columns=(s[new], np.concatenate(cols))
            )
        # (a part's columns give its keys without keeping them on it)
        keys = [p.row_keys(slice(None)) for p in parts]
        return IntersectionIndex(
            np.concatenate(indptrs),
            np.concatenate(keys) if keys else np.zeros(0, np.int64),
            values,
            columns=None,
        )


def _merged_columns(parts: list[IntersectionIndex], big: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of the rows of ``parts`` one after the other, when part ``big`` holds most
    of the keys (an incremental update: a whole collection and a few new images).

    The other parts' keys are inserted into the big part's sorted keys, and the big
    part's columns are shifted by the number of keys inserted before them: O(keys +
    entries), where the general merge in :meth:`IntersectionIndex.concat` sorts every
    part's keys. Written for the uniform pyramids' columns (10,000 views, one new image:
    15 million keys, 2.1 s against 1.0 s), which are now kept by key; what it still
    merges are the vocabulary pyramids' (10,000 views: 21,498 keys, 9.6 million
    entries, 6-35 ms against 50-90 ms). Gives the same columns (the big part's keys
    array itself when nothing is inserted)."""
    uks = [p._columns[0] for p in parts]
    A = uks[big]
    others = [u for j, u in enumerate(uks) if j != big]
    B = np.unique(np.concatenate(others)) if others else np.zeros(0, np.int64)
    pos = np.searchsorted(A, B)
    known = pos < A.size
    known[known] = A[pos[known]] == B[known]
    ins = pos[~known]  # ascending, as B
    merged = np.insert(A, ins, B[~known]) if ins.size else A
    out = np.empty(sum(int(p._columns[1].size) for p in parts), np.int32)
    at = 0
    for j, p in enumerate(parts):
        cols = p._columns[1]
        if j == big:  # each key's column moves by the keys inserted before it
            rank = None
            if ins.size:
                rank = np.cumsum(np.bincount(ins, minlength=A.size + 1)[: A.size], dtype=np.int32)
                rank += np.arange(A.size, dtype=np.int32)
        else:
            rank = np.searchsorted(merged, uks[j]).astype(np.int32)
        if rank is None:
            out[at : at + cols.size] = cols
        else:  # (mode="clip": with mode="raise" numpy buffers the output, 10x slower)
            np.take(rank, cols, out=out[at : at + cols.size], mode="clip")
        at += cols.size
    return merged, out
