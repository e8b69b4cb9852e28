"""Candidate search: which rows of a large collection a query scores exactly.

Collections of up to ``EXHAUSTIVE_LIMIT`` images are scored exhaustively (exact); larger
ones (and ``wta`` always) take candidates -- ``CANDIDATE_FRACTION`` of the collection
(``CANDIDATE_FRACTION_UNIFORM`` for ``uniform`` from the hashes alone,
:func:`candidate_fraction`), at least ``MIN_CANDIDATES`` -- and score those exactly.
The candidates (``CANDIDATE_KIND = "fused"``, :func:`fused_candidates`) come from two
rankings of the whole collection:

- the hash score: the z-score of the bit agreement (:func:`bit_agreement`) of the
  random-hyperplane bits of the pyramid-match embedding (Eqs. 5.8-5.11; :func:`rh_bits`
  hyperplanes, chosen from the collection size: 1024 at 10,000 images) plus
  ``WTA_FUSION_WEIGHT`` times the z-score of the code agreement of the densified-WTA
  codes of the tf-idf bag of words -- a linear scan of 384 bytes per image (above
  ``FUSED_PREFIX_ABOVE`` images, 128 bytes: prefixes of the bits and codes);
- the tf-idf cosine of the bags of words through an inverted file over the tree's
  leaves (exact, not hashed: only the postings of the query's words are read; above
  ``FUSED_PREFIX_ABOVE`` images, of its ``FUSED_QUERY_WORDS`` heaviest words).

A row's rank is the better of its two ranks. On the 10k benchmark of generated views
(``tests/benchmarks/bench_scale.py``, queries not in the collection) recall@10 against
the exhaustive score is 1.00 (``vocabulary``) and 0.98 (``uniform``), 2 % scored; the
hash score alone (``CANDIDATE_KIND = "hashes"``) 0.98 at 2 % and 0.96 at 5 %. The banded
indexes (:func:`engine.hashing.lsh.choose_params`) remain available as
``candidate_rows("wta" | "rh", ...)`` and are used by the near-duplicate search
(:mod:`engine.workflows.duplicates`).

The settings are module attributes read at call time (by this module and the search
methods, :mod:`engine.index.methods`), so a benchmark or test changes them here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from engine.index.encode import EncodedImages

__all__ = [
    "CANDIDATE_CAP",
    "CANDIDATE_FRACTION",
    "CANDIDATE_FRACTION_UNIFORM",
    "CANDIDATE_KIND",
    "EXHAUSTIVE_LIMIT",
    "FUSED_PREFIX_ABOVE",
    "FUSED_QUERY_WORDS",
    "FUSED_RH_BITS",
    "FUSED_WTA_CODES",
    "MIN_CANDIDATES",
    "WTA_FUSION_WEIGHT",
    "bit_agreement",
    "candidate_count",
    "candidate_fraction",
    "candidate_rows",
    "fused_candidates",
    "rh_bits",
    "zscore",
]

EXHAUSTIVE_LIMIT = 3000
# fraction of the collection scored exactly (bench_scale.py, 10k views, recall@10 against
# the exhaustive score): the fused candidates (the default) 1.00 for ``vocabulary`` and
# 0.98 for ``uniform`` at 2 %; the hash score alone (CANDIDATE_KIND = "hashes") 0.98 for
# ``vocabulary`` at 2 % but 0.94 for ``uniform`` (0.96 at 5 %, CANDIDATE_FRACTION_UNIFORM)
CANDIDATE_FRACTION = 0.02
CANDIDATE_FRACTION_UNIFORM = 0.05
MIN_CANDIDATES = 100
# most rows scored exactly by the fused candidates (``uniform`` from the hashes alone
# excepted): at 100,000 photos 2 % (2,000 rows) cost about 40 ms of exact scoring a query
# and found the exhaustive top 10 no better than 1,000 rows or 250 (recall@10 1.000 of 50
# photos of the library and of 60 new ones; 0.997 at 100 rows, 0.982 at 50)
CANDIDATE_CAP = 1000
WTA_FUSION_WEIGHT = 0.25  # weight of the WTA agreement's z-score next to the bits'
# Above FUSED_PREFIX_ABOVE rows the hash score of the fused ranking reads the first
# FUSED_RH_BITS hyperplane bits (of 2048) and FUSED_WTA_CODES WTA codes (of 256): the
# hyperplanes are drawn independently and every WTA code collides with the same
# probability (Chen & Shrivastava, Theorem 1), so a prefix's agreement estimates the
# same similarity from fewer samples (thesis Eq. 5.11: its deviation grows as
# 1 / sqrt(bits)). The bits grow with the collection (rh_bits) so that the hash
# score ALONE keeps its recall; next to the inverted file they need not. Recall@10 of
# the fused candidates against the exhaustive score at 100,000 photos (50 of the library
# / 100 new ones; the library of bench_library.py --n 100000): at 1,000 rows (the cap) 1.000 /
# 1.000 with all the bits and codes and with the prefixes; at 250 rows 1.000 / 1.000
# against 1.000 / 0.999; at 100 rows 0.998 / 0.997 against 0.996 / 0.985. A row's scan
# reads 128 instead of 512 bytes: about 10 of the 13 ms of the scan at 100,000 rows.
# Above FUSED_PREFIX_ABOVE rows, too, the inverted file reads the postings of the
# query's FUSED_QUERY_WORDS heaviest words (by tf-idf weight; query term pruning, as in
# text retrieval): a query of 500 words read 2.2-2.9 million postings (the light words
# are the common ones), 256 of them 0.75-0.8 million. Recall@10 at 100,000 photos, same
# queries: at 1,000 rows 1.000 / 1.000 with every word and with 256; at 250 rows 1.000
# / 0.999 against 1.000 / 0.995; at 100 rows 0.996 / 0.985 against 0.992 / 0.965. About
# 7.7-9.4 against 2.0 ms a query.
FUSED_PREFIX_ABOVE = 30_000
FUSED_RH_BITS = 512
FUSED_WTA_CODES = 64
FUSED_QUERY_WORDS = 256
CANDIDATE_KIND = "fused"  # or "hashes" (WTA + hyperplanes only), "wta" / "rh" (banded index)


def rh_bits(n_images: int) -> int:
    """Number of random hyperplanes for a collection of ``n_images`` images.

    The candidates are the rows whose bit agreement (with the WTA agreement) ranks best;
    the standard deviation of the angle estimated from ``B`` bits is
    ``pi sqrt(p (1 - p) / B)`` (thesis Eq. 5.11), so the more rows there are between the
    true neighbours and the fraction scored, the more bits are needed. Measured on
    10,000 generated views (``bench_scale.py``, recall@10 of the bits alone at 5 %
    scored): 256 bits 0.78, 512 bits 0.92, 1024 bits 0.98, 2048 bits 0.995.

    Parameters
    ----------
    n_images : int

    Returns
    -------
    int
        256 up to 1,000 images, 512 up to ``EXHAUSTIVE_LIMIT``, 1024 up to 30,000, else
        2048.
    """
    n = int(n_images)
    return 256 if n <= 1000 else 512 if n <= EXHAUSTIVE_LIMIT else 1024 if n <= 30_000 else 2048


def candidate_rows(
    kind: str, q: Any, data: EncodedImages, n_want: int, cache: dict[str, Any]
) -> np.ndarray:
    """Rows proposed by the hashes: ``kind`` "fused" (the query default, see
    :func:`fused_candidates`), "hashes" (the same without the inverted file) or the banded
    hash index of "wta" or "rh".

    Parameters
    ----------
    kind : {"fused", "hashes", "wta", "rh"}
    q : EncodedImages or namespace
        One query row: its ``wta`` and ``rh`` codes and ``bow`` ("fused", "hashes"), or
        only the codes of ``kind`` (a banded index).
    data : EncodedImages
        The collection, ``n`` rows.
    n_want : int
        Number of candidates (``<= n``).
    cache : dict
        Kept by the caller with ``data`` and emptied whenever ``data`` changes: the
        inverted file (``"postings"``) and the banded indexes (``"wta"``, ``"rh"``) are
        built there on first use.

    Returns
    -------
    (n_want,) int64
        Candidate rows, best first. A banded index ranks the rows by the bands they share
        with the query (ties: lower row first); when fewer than ``n_want`` rows collide,
        they come first (by row) and the rest are the best by code agreement.
    """
    from engine.hashing.lsh import band_keys, choose_params

    n = len(data.ids)
    if kind in ("fused", "hashes"):
        postings: sp.csr_matrix | bool | None = None
        if kind == "fused":
            asked = cache["fused_queries"] = cache.get("fused_queries", 0) + 1
            if "postings" not in cache and asked > 1:
                # inverted file of the bag of words: (n_words, n) CSR, one row of
                # postings per visual word (about 50 MB at 10,000 images), built for a
                # process's second query: a one-shot query (``simile query``) scores
                # the bags directly instead, one pass without that copy
                cache["postings"] = data.bow.T.tocsr()
            postings = cache.get("postings", True)
        return fused_candidates(q, data, n_want, postings, cache)
    codes = data.wta if kind == "wta" else data.rh
    qcodes = q.wta if kind == "wta" else q.rh
    if kind not in cache:
        # the banded inverted index of engine.hashing.lsh.BandedIndex (one sorted key array per
        # table); its vote join is done here with one bincount for a single query
        near, far = (0.35, 0.12) if kind == "wta" else (0.25, 0.02)
        p = choose_params(n, codes.shape[1], 0.95, s_near=near, s_far=far)
        keys = band_keys(codes, p.n_tables, p.band_size)  # (n, T)
        order = np.argsort(keys, axis=0, kind="stable")
        skeys = np.take_along_axis(keys, order, axis=0).T.copy()
        cache[kind] = (p, skeys, order.T.copy())
    p, skeys, sids = cache[kind]
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

        agree = code_agreement(qcodes, codes)[0] if kind == "wta" else bit_agreement(qcodes, codes)
        agree[ids] = np.inf
        more = np.argsort(-agree, kind="stable")[:n_want]
        ids = more
    return np.asarray(ids, np.int64)


def candidate_fraction(method: str, kind: str) -> float:
    """Fraction of the collection scored exactly for ``method`` with candidates of
    ``kind``: ``CANDIDATE_FRACTION``, except ``uniform`` with candidates from the hashes
    alone or a banded index (``CANDIDATE_FRACTION_UNIFORM``). The fused ranking's inverted
    file brings the uniform neighbours early (10k views: recall@10 0.981 at 2 %, the same
    as at 5 %); the hash score alone needs more rows (0.943 at 2 %, 0.957 at 5 %).

    Parameters
    ----------
    method : str
        A search method's name.
    kind : str
        ``CANDIDATE_KIND`` of the search.

    Returns
    -------
    float
    """
    if method == "uniform" and kind != "fused":
        return CANDIDATE_FRACTION_UNIFORM
    return CANDIDATE_FRACTION


def candidate_count(method: str, kind: str, n: int, top: int) -> int:
    """How many rows of a collection of ``n`` a hashed query of ``method`` scores exactly:
    :func:`candidate_fraction` of them, at least ``MIN_CANDIDATES`` (and ``top``), at most
    ``CANDIDATE_CAP`` when the fraction is ``CANDIDATE_FRACTION`` (the fused ranking's
    recall does not need more rows as the collection grows: see ``CANDIDATE_CAP``).

    Parameters
    ----------
    method : str
        A search method's name.
    kind : str
        ``CANDIDATE_KIND`` of the search.
    n : int
        Rows of the collection.
    top : int
        Results asked for.

    Returns
    -------
    int
        In ``[0, n]``.
    """
    frac = candidate_fraction(method, kind)
    want = int(np.ceil(frac * n))
    if frac == CANDIDATE_FRACTION and kind == "fused":
        want = min(want, CANDIDATE_CAP)
    return int(min(n, max(MIN_CANDIDATES, top, want)))


def fused_candidates(
    q: EncodedImages,
    data: EncodedImages,
    n_want: int,
    postings: sp.csr_matrix | bool | None = None,
    cache: dict[str, Any] | None = None,
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
    q : EncodedImages
        One query row with ``wta``, ``rh`` codes and ``bow``.
    data : EncodedImages
        The collection, ``n`` rows.
    n_want : int
        Number of candidates (``<= n``).
    postings : (n_words, n) scipy.sparse.csr_matrix or True, optional
        ``data.bow.T`` in CSR form (the inverted file); True: the same cosine computed
        from ``data.bow`` directly (one pass over it, no inverted file to build).
    cache : dict, optional
        Where the contiguous prefixes of the codes are kept (with ``postings``, above
        ``FUSED_PREFIX_ABOVE`` rows the hash score reads ``FUSED_RH_BITS`` bits and
        ``FUSED_WTA_CODES`` codes: see there); emptied by the caller when ``data``
        changes.

    Returns
    -------
    (n_want,) int64
        Candidate rows, best first (ties: lower row first).
    """
    from engine.hashing.wta import code_agreement

    n = len(data.ids)
    n_want = min(int(n_want), n)
    rh, wta, qrh, qwta = data.rh, data.wta, q.rh[:1], q.wta[:1]
    if postings is not None and n > FUSED_PREFIX_ABOVE:
        nb = min(rh.shape[1], FUSED_RH_BITS // 8)
        m = min(wta.shape[1], FUSED_WTA_CODES)
        cache = {} if cache is None else cache
        key = f"prefix:{nb}:{m}"
        if key not in cache:
            cache[key] = (np.ascontiguousarray(rh[:, :nb]), np.ascontiguousarray(wta[:, :m]))
        rh, wta = cache[key]
        qrh, qwta = np.ascontiguousarray(qrh[:, :nb]), np.ascontiguousarray(qwta[:, :m])
    score = zscore(bit_agreement(qrh, rh))
    score += WTA_FUSION_WEIGHT * zscore(code_agreement(qwta, wta)[0])
    rankings = [score]
    if postings is not None:
        words, weights = _query_words(q.bow[:1].tocsr(), n)
    if postings is True:
        qb = np.zeros(data.bow.shape[1], np.float32)  # (no float64 copy)
        qb[words] = weights
        rankings.append(np.asarray(data.bow @ qb, np.float64).ravel())
    elif postings is not None:
        # the query's postings only, then one pass over them (CSC mat-vec): cheaper than
        # a sparse-sparse product (which sizes its output in a first pass)
        sub = postings[words]
        rankings.append(np.asarray(sub.T @ weights, np.float64))
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


def _query_words(qb: sp.csr_matrix, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The words (ascending) and float32 weights of the query's bag of words ``qb``
    whose postings the inverted file reads: above ``FUSED_PREFIX_ABOVE`` rows only the
    ``FUSED_QUERY_WORDS`` heaviest (see there)."""
    words, weights = qb.indices, qb.data.astype(np.float32)
    if n > FUSED_PREFIX_ABOVE and words.size > FUSED_QUERY_WORDS:
        keep = np.sort(np.argpartition(-weights, FUSED_QUERY_WORDS - 1)[:FUSED_QUERY_WORDS])
        words, weights = words[keep], weights[keep]
    return words, weights


def zscore(x: np.ndarray) -> np.ndarray:
    """(n,) float64 ``(x - mean) / std`` of (n,) ``x`` (``std`` 0 -> only the mean
    removed)."""
    x = np.asarray(x, np.float64)
    sd = float(x.std())
    return (x - x.mean()) / (sd if sd > 0 else 1.0)


def bit_agreement(q: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Fraction of equal bits between packed bit rows (thesis Eq. 5.11: each bit agrees
    with probability ``1 - theta / pi``).

    Parameters
    ----------
    q : (1, B) uint8
        The query's packed bits (only its first row is read).
    codes : (n, B) uint8

    Returns
    -------
    (n,) float64
    """
    nb = codes.shape[1]
    if nb % 8 == 0 and codes.flags.c_contiguous:  # 64 bits at a time (hardware popcount)
        x = np.bitwise_xor(codes.view(np.uint64), np.ascontiguousarray(q[:1]).view(np.uint64))
    else:
        x = np.bitwise_xor(codes, q[:1])
    counts = np.bitwise_count(x)  # (n, w) uint8
    if counts.shape[1] % 8 == 0 and counts.shape[1] < 4096 and counts.flags.c_contiguous:
        # the row sums 8 counts at a time: a uint64 holds 8 byte lanes (each <= 64), folded
        # into 4 16-bit lanes (<= 128), summed over the row's words (<= 128 w / 8 < 2**16)
        # and added up by one multiplication (the top 16 bits): 1.7x faster than a sum
        v = counts.view(np.uint64)
        v = (v & _LANES8) + ((v >> np.uint64(8)) & _LANES8)
        v = v.sum(axis=1, dtype=np.uint64) if v.shape[1] > 1 else v[:, 0]
        diff = ((v * _ONES16) >> np.uint64(48)).astype(np.int64)
    else:
        diff = counts.sum(axis=1, dtype=np.int64)
    return 1.0 - diff / (8.0 * nb)


_LANES8 = np.uint64(0x00FF00FF00FF00FF)
_ONES16 = np.uint64(0x0001000100010001)
