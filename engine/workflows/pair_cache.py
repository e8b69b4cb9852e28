"""Pair checks remembered between duplicate searches: a second search re-checks only
the pairs it has not seen.

The geometric check of a pair (:func:`engine.workflows.duplicates.pair_evidence`, plus
the pixel comparison of the pairs that pass its geometry) is most of a duplicate
search's time: at 10,000 photos, about 100,000 pairs of feature sets. What it measures
depends only on the two files' contents, so it is remembered by the pair of their row
keys (:func:`engine.index.catalog.row_keys`: a digest of the content hash and the
feature settings; a changed file gets another key and is checked again). After adding
10 photos to a library, the next search checks only the pairs involving them (and the
few pairs of older photos whose neighbour lists they changed).

The pairs live in ``<index>/cache/pair-evidence.npz`` (plain arrays, no pickle, written
atomically; version :data:`VERSION`). It is a cache: never part of the index's versions,
never needed, pruned to the photos still indexed when saved, ignored when unreadable or
of another version, and not written when the index folder is read-only. The homography
of a pair is not kept: a remembered pair whose pixels were not compared, and that the
rule in use would compare, is checked again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.index.files import read_cache, write_cache

__all__ = [
    "CACHE_FILE",
    "VERSION",
    "AskedPairs",
    "PairCache",
    "pair_hash",
    "remember",
    "split_remembered",
]

#: Where the cache lives in an index folder.
CACHE_FILE = Path("cache") / "pair-evidence.npz"
#: What the remembered checks were made by: raise it whenever the pair check or the
#: pixel comparison changes what it measures (older caches are then ignored).
VERSION = 7  # 2: the pixel test matches blur and checks the framing; 3: compressed copies;
# 4: near misses aligned again by their pixels, one-size JPEGs recreated either way round;
# 5: noise-only tiles left out, moved detail and zoomed-in second shots told, tone
# edits undone, the disagreeing share kept (pixel_disagreement); 6: frame_offset_px;
# 7: frame_residual_px

_FLOATS = (
    "score",
    "overlap_fraction",
    "residual",
    "residual_px",
    "pixel_agreement",
    "compressed_agreement",
    "pixel_disagreement",
    "frame_offset_px",
    "frame_residual_px",
)
_INTS = ("n_matches", "n_inliers")
_FLAGS = ("has_homography", "pixels_checked", "taken_differ")


def pair_hash(ka: np.ndarray, kb: np.ndarray) -> np.ndarray:
    """(m,) uint64 digest of ordered pairs of row keys (``ka[i]``, ``kb[i]``)."""
    ka = np.asarray(ka, np.uint64)
    kb = np.asarray(kb, np.uint64)
    with np.errstate(over="ignore"):
        h = ka * np.uint64(0x9E3779B97F4A7C15) ^ (kb + np.uint64(0x632BE59BD9B4E019))
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return h


class PairCache:
    """The remembered pair checks of one index (see the module docstring).

    Parameters
    ----------
    path : Path
        The cache file (``<index>/`` :data:`CACHE_FILE`).

    Attributes
    ----------
    hashes : (m,) uint64
        :func:`pair_hash` of every remembered pair, ascending.
    arrays : dict of str to (m,) array
        ``key_a``, ``key_b`` (uint64) and the fields of each pair.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hashes = np.zeros(0, np.uint64)
        self.arrays: dict[str, np.ndarray] = _empty(0)

    @classmethod
    def load(cls, index_dir: Path) -> PairCache:
        """The cache of ``index_dir`` (empty when there is none, or it cannot be used)."""
        cache = cls(Path(index_dir) / CACHE_FILE)
        arrays = read_cache(cache.path, VERSION, tuple(_empty(0)))
        if arrays is None:
            return cache
        m = arrays["key_a"].shape[0]
        if any(a.shape != (m,) for a in arrays.values()):
            return cache
        h = pair_hash(arrays["key_a"], arrays["key_b"])
        order = np.argsort(h, kind="stable")
        cache.hashes = h[order]
        cache.arrays = {k: a[order] for k, a in arrays.items()}
        return cache

    def __len__(self) -> int:
        return int(self.hashes.size)

    def lookup(self, ka: np.ndarray, kb: np.ndarray) -> np.ndarray:
        """(q,) int64 position of each ordered pair (``ka[i]``, ``kb[i]``) in
        :attr:`arrays`, -1 when not remembered."""
        h = pair_hash(ka, kb)
        if not self.hashes.size:
            return np.full(h.shape, -1, np.int64)
        pos = np.minimum(np.searchsorted(self.hashes, h), self.hashes.size - 1)
        hit = (self.hashes[pos] == h) & (self.arrays["key_a"][pos] == ka)
        hit &= self.arrays["key_b"][pos] == kb
        return np.where(hit, pos, -1).astype(np.int64)

    def fields(self, pos: int) -> dict[str, object]:
        """The remembered fields of the pair at ``pos`` (:meth:`lookup`)."""
        a = self.arrays
        out: dict[str, object] = {k: float(a[k][pos]) for k in _FLOATS}
        out.update({k: int(a[k][pos]) for k in _INTS})
        out.update({k: bool(a[k][pos]) for k in _FLAGS})
        return out

    def add(self, ka: np.ndarray, kb: np.ndarray, rows: dict[str, np.ndarray]) -> None:
        """Remember (or replace) the pairs (``ka[i]``, ``kb[i]``) with their ``rows``
        (one (q,) array per field of :data:`_FLOATS`, :data:`_INTS`, :data:`_FLAGS`)."""
        ka = np.asarray(ka, np.uint64)
        kb = np.asarray(kb, np.uint64)
        if not ka.size:
            return
        old = self.lookup(ka, kb)
        keep = np.ones(self.hashes.size, bool)
        keep[old[old >= 0]] = False
        new = {"key_a": ka, "key_b": kb, **rows}
        arrays = {
            k: np.concatenate([a[keep], np.asarray(new[k], a.dtype)])
            for k, a in self.arrays.items()
        }
        h = pair_hash(arrays["key_a"], arrays["key_b"])
        order = np.argsort(h, kind="stable")
        self.hashes = h[order]
        self.arrays = {k: a[order] for k, a in arrays.items()}

    def save(self, live_keys: np.ndarray) -> bool:
        """Write the pairs of which both photos are among ``live_keys`` (the row keys of
        the photos indexed now), atomically; False, writing nothing, when the folder is
        not writable (a read-only index) or the disk is full."""
        live = np.asarray(live_keys, np.uint64)
        keep = np.isin(self.arrays["key_a"], live) & np.isin(self.arrays["key_b"], live)
        arrays = {k: a[keep] for k, a in self.arrays.items()}
        return write_cache(self.path, VERSION, arrays)


def _empty(m: int) -> dict[str, np.ndarray]:
    out = {"key_a": np.zeros(m, np.uint64), "key_b": np.zeros(m, np.uint64)}
    out.update({k: np.zeros(m, np.float64) for k in _FLOATS})
    out.update({k: np.zeros(m, np.int32) for k in _INTS})
    out.update({k: np.zeros(m, bool) for k in _FLAGS})
    return out


def split_remembered(
    cache: PairCache,
    keys: np.ndarray,
    todo: list[tuple[int, int]],
    needs_pixels: Callable[[Any], bool],
    make: Callable[..., Any],
) -> tuple[dict[tuple[int, int], Any], list[tuple[int, int]]]:
    """The pairs of rows ``todo`` (rows with row ``keys``) the cache answers, as
    evidence (``make(**fields)``: :class:`~engine.workflows.duplicates.PairEvidence`), and
    the others, still to check (also those remembered without a pixel comparison that
    ``needs_pixels(evidence)`` now asks for)."""
    if not todo or not len(cache):
        return {}, list(todo)
    pairs = np.asarray(todo, np.int64).reshape(-1, 2)
    pos = cache.lookup(keys[pairs[:, 0]], keys[pairs[:, 1]])
    out: dict[tuple[int, int], Any] = {}
    rest: list[tuple[int, int]] = []
    for pair, p in zip(todo, pos.tolist(), strict=True):
        if p < 0:
            rest.append(pair)
            continue
        f = cache.fields(p)
        has_h, checked = f.pop("has_homography"), f.pop("pixels_checked")
        ev = make(**f)
        if has_h and not checked and needs_pixels(ev):
            rest.append(pair)
        else:
            out[pair] = ev
    return out, rest


def remember(
    cache: PairCache,
    keys: np.ndarray,
    checked: dict[tuple[int, int], Any],
    pixels_checked: Callable[[Any], bool],
) -> None:
    """Add the pairs of rows just ``checked`` (pair -> PairEvidence) to ``cache``."""
    if not checked:
        return
    pairs = np.asarray(list(checked), np.int64).reshape(-1, 2)
    evs = list(checked.values())
    rows: dict[str, np.ndarray] = {k: np.array([getattr(e, k) for e in evs]) for k in _FLOATS}
    rows.update({k: np.array([getattr(e, k) for e in evs]) for k in _INTS})
    rows["taken_differ"] = np.array([e.taken_differ for e in evs], bool)
    rows["has_homography"] = np.array([e.homography is not None for e in evs], bool)
    rows["pixels_checked"] = np.array([pixels_checked(e) for e in evs], bool)
    cache.add(keys[pairs[:, 0]], keys[pairs[:, 1]], rows)


class AskedPairs:
    """The pairs a duplicate search asks for, block by block: new ones only (not in
    ``skip``, not asked before), those the ``cache`` remembers answered from it
    (:attr:`known`, :func:`split_remembered`), the others handed on to be checked
    (:meth:`blocks`).

    Parameters
    ----------
    todo : iterable of (int, int), or iterator of (m, 2) int arrays
        Pairs of rows, or blocks of them as they are found (a pair may come again).
    skip : iterable of (int, int)
        Pairs not to check.
    cache : PairCache or None
    keys : (n,) uint64 or None
        The rows' keys in ``cache``.
    needs_pixels, make
        As :func:`split_remembered`.

    Attributes
    ----------
    pairs : set of (int, int)
        The pairs asked for so far (without ``skip``, once :meth:`blocks` is done).
    known : dict
        ``(i, j) -> evidence`` of those the cache answered.
    total : int or None
        ``len(pairs)`` once every block is read (None before).
    progress : callable or None
        ``progress(done, total)``, called by :meth:`report` (first when the last block
        is read, with the remembered pairs done).
    """

    def __init__(
        self,
        todo: Iterable[tuple[int, int]] | Iterator[np.ndarray],
        skip: Iterable[tuple[int, int]],
        cache: PairCache | None,
        keys: np.ndarray | None,
        needs_pixels: Callable[[Any], bool],
        make: Callable[..., Any],
    ) -> None:
        if not isinstance(todo, Iterator):  # (a sequence of pairs: one block)
            todo = iter([np.asarray(list(todo), np.int64).reshape(-1, 2)])
        self._todo = todo
        self._skip = set(skip)
        self._cache, self._keys, self._needs_pixels = cache, keys, needs_pixels
        self._make = make
        self.progress: Callable[[int, int], object] | None = None
        self.pairs: set[tuple[int, int]] = set()
        self.known: dict[tuple[int, int], Any] = {}
        self.total: int | None = None  # (known once every block is read)
        self._said = -1

    def blocks(self) -> Iterator[np.ndarray]:
        """The blocks of pairs still to check."""
        for block in self._todo:
            new = [p for p in map(tuple, np.asarray(block).tolist()) if p not in self.pairs]
            self.pairs.update(new)
            new = [p for p in new if p not in self._skip]
            if self._cache is not None and self._keys is not None:
                known, new = split_remembered(
                    self._cache, self._keys, new, self._needs_pixels, self._make
                )
                self.known.update(known)
            if new:
                yield np.asarray(new, np.int64).reshape(-1, 2)
        self.pairs -= self._skip
        self.total = len(self.pairs)
        self.report(len(self.known))

    def report(self, done: int | None) -> None:
        """``progress(done, total)`` (once per value)."""
        if self.progress is not None and done is not None and done != self._said:
            self._said = done
            self.progress(done, self.total)
