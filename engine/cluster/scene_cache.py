"""The search's same-scene pairs remembered between groupings (#22).

:func:`engine.cluster.scenes.scene_probabilities_iter` queries every photo of a folder
(``hybrid``: pyramid-match candidates checked by epipolar geometry), 15-60 ms a photo.
What a query found depends on the photo's content and on the photos indexed with it, so
its hits are remembered by the content keys of the query and of each hit
(:func:`scene_keys`); the next grouping of the folder queries only the photos it has not
queried before (after adding 10 photos to a folder, those 10). A remembered photo's hits
do not include photos added after it, but the pair is still found from the other side:
the new photo's own query returns it, and the grouping takes the larger probability of the
two directions. Hits of photos no longer indexed are dropped when the cache is saved.

The pairs live in ``<index>/`` :data:`SCENE_CACHE` (plain arrays, no pickle, written
atomically). Like the duplicate finder's ``pair-evidence.npz``, it is a cache: never part
of the index's versions, never needed, ignored when unreadable, of another
:data:`SCENE_CACHE_VERSION` or made with other settings (the hits per query and the
search's calibration curve), and not written to a read-only index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from engine.index.files import read_cache, write_cache
from engine.index.row_key import row_keys

__all__ = ["SCENE_CACHE", "SCENE_CACHE_VERSION", "RememberedScenes", "scene_keys"]

#: Where the remembered queries live in an index folder.
SCENE_CACHE = Path("cache") / "scene-pairs.npz"
#: Raise whenever what a remembered query holds changes for equal settings.
SCENE_CACHE_VERSION = 1
#: The arrays of a remembered query set, beside its settings.
_ARRAYS = ("queried", "key_a", "key_b", "probability")


def scene_keys(hashes: Iterable[str]) -> np.ndarray:
    """(n,) uint64 key of each photo's content hash (a 64-bit digest,
    :func:`engine.index.row_key.row_keys`)."""
    return row_keys((h, "scenes") for h in hashes)


class RememberedScenes:
    """The remembered queries of one index (see the module docstring).

    Parameters
    ----------
    path : Path or None
        The cache file; None keeps the queries in memory only.
    settings : sequence of float
        What the queries were made with (hits per query, calibration curve); a file made
        with other settings is ignored.

    Attributes
    ----------
    queried : (q,) uint64
        Keys of the photos whose query is remembered, ascending.
    key_a, key_b : (m,) uint64
        Query and hit of every remembered pair.
    probability : (m,) float64
        The hit's calibrated probability, in [0, 1].
    """

    def __init__(self, path: Path | None, settings: Sequence[float]) -> None:
        self.path = path
        self.settings = np.asarray(settings, np.float64)
        self.queried = np.zeros(0, np.uint64)
        self.key_a = np.zeros(0, np.uint64)
        self.key_b = np.zeros(0, np.uint64)
        self.probability = np.zeros(0, np.float64)

    @classmethod
    def load(
        cls, index_dir: Path | None, settings: Sequence[float], *, writable: bool = True
    ) -> RememberedScenes:
        """The cache of ``index_dir`` (empty when there is none, or it cannot be used);
        ``writable`` False: read, never written (a read-only index)."""
        path = None if index_dir is None else Path(index_dir) / SCENE_CACHE
        cache = cls(path if writable else None, settings)
        if path is None:
            return cache
        found = read_cache(path, SCENE_CACHE_VERSION, ("settings", *_ARRAYS))
        if found is None:
            return cache
        settings = found["settings"]
        same = settings.shape == cache.settings.shape and np.allclose(
            settings, cache.settings, rtol=0, atol=1e-9
        )
        if not same:
            return cache
        queried, a, b, p = (found[k] for k in _ARRAYS)
        m = a.shape[0]
        if queried.ndim != 1 or any(x.shape != (m,) for x in (a, b, p)):
            return cache
        cache.queried = np.unique(queried.astype(np.uint64))
        cache.key_a, cache.key_b = a.astype(np.uint64), b.astype(np.uint64)
        cache.probability = np.clip(np.nan_to_num(p.astype(np.float64)), 0.0, 1.0)
        return cache

    def known(self, keys: np.ndarray) -> np.ndarray:
        """(n,) bool: whether the query of each key is remembered."""
        return np.isin(np.asarray(keys, np.uint64), self.queried)

    def add(self, query: int, hits: np.ndarray, probability: np.ndarray) -> None:
        """Remember the query of key ``query``: its hits' keys ``(h,) uint64`` and their
        probabilities ``(h,) float`` (replacing what was remembered of it)."""
        q = np.uint64(query)
        keep = self.key_a != q
        self.key_a = np.concatenate([self.key_a[keep], np.full(len(hits), q, np.uint64)])
        self.key_b = np.concatenate([self.key_b[keep], np.asarray(hits, np.uint64)])
        self.probability = np.concatenate(
            [self.probability[keep], np.asarray(probability, np.float64)]
        )
        self.queried = np.union1d(self.queried, np.array([q], np.uint64))

    def matrix(self, keys: np.ndarray) -> np.ndarray:
        """``P[i, j]``: the remembered probability of the query of row ``i`` (key
        ``keys[i]``) for the hit of row ``j``, 0 where none (not symmetrised; zero
        diagonal). Rows of equal keys, copies of one file, share their remembered hits and
        are paired with probability 1.

        Parameters
        ----------
        keys : (n,) uint64

        Returns
        -------
        (n, n) float64
        """
        keys = np.asarray(keys, np.uint64)
        n = keys.size
        P = np.zeros((n, n))
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        live = np.isin(self.key_a, sk) & np.isin(self.key_b, sk)
        a, b, p = self.key_a[live], self.key_b[live], self.probability[live]
        lo_a, hi_a = np.searchsorted(sk, a, "left"), np.searchsorted(sk, a, "right")
        lo_b, hi_b = np.searchsorted(sk, b, "left"), np.searchsorted(sk, b, "right")
        one = (hi_a - lo_a == 1) & (hi_b - lo_b == 1)
        np.maximum.at(P, (order[lo_a[one]], order[lo_b[one]]), p[one])
        for t in np.flatnonzero(~one):  # (keys shared by two copies of one file)
            rows = np.ix_(order[lo_a[t] : hi_a[t]], order[lo_b[t] : hi_b[t]])
            P[rows] = np.maximum(P[rows], p[t])
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        for lo, hi in zip(starts, np.r_[starts[1:], n], strict=True):
            if hi - lo > 1:  # copies of one file show the same thing
                P[np.ix_(order[lo:hi], order[lo:hi])] = 1.0
        np.fill_diagonal(P, 0.0)
        return P

    def save(self, live_keys: np.ndarray) -> bool:
        """Write the queries and pairs of photos among ``live_keys`` (those indexed now),
        atomically; False, writing nothing, without a file, when the folder is not
        writable or the disk is full."""
        if self.path is None:
            return False
        live = np.asarray(live_keys, np.uint64)
        keep = np.isin(self.key_a, live) & np.isin(self.key_b, live)
        arrays = {
            "settings": self.settings,
            "queried": self.queried[np.isin(self.queried, live)],
            "key_a": self.key_a[keep],
            "key_b": self.key_b[keep],
            "probability": self.probability[keep],
        }
        return write_cache(self.path, SCENE_CACHE_VERSION, arrays)
