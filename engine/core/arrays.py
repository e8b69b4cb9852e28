"""Small array helpers shared by the engine's hot paths."""

from __future__ import annotations

import numpy as np


def unique_values(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an integer array (flattened), as ``np.unique(x)``.

    numpy 2 answers a plain ``np.unique`` (no ``return_*``) with a hash table, which on
    this project's int64 bin keys is 50-70x slower than sorting: 4.9 s against 0.07 s for
    3 million random keys (numpy 2.4). One sort and a mask of the changes instead.

    Parameters
    ----------
    x : array of int
        Any shape.

    Returns
    -------
    (k,) array of x's dtype
        Ascending, distinct.
    """
    s = np.sort(np.asarray(x).reshape(-1))
    if s.size == 0:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def key_owner_order(key: np.ndarray, owner: np.ndarray, n_owners: int) -> np.ndarray:
    """Order that sorts entries by ``key``, then by ``owner``: every key's entries
    contiguous, and within them every owner's.

    Fast path: one unstable argsort of the key with its low bits replaced by the owner.
    Two different keys that share their other bits (about ``U**2 / 2**(65 - bits)`` for
    ``U`` distinct random 64-bit keys) would interleave; that is detected and the exact
    two-key sort is used.

    Parameters
    ----------
    key : (E,) int64
        E.g. bin ids (hashed: their low bits are as random as the others).
    owner : (E,) int64
        In ``0 .. n_owners - 1`` (e.g. the set of every entry).
    n_owners : int

    Returns
    -------
    (E,) int64
        ``key[order]`` ascending; ``owner[order]`` ascending within each key. Ties
        (same key and owner) in no particular order.
    """
    bits = max(1, int(n_owners - 1).bit_length())
    if bits <= 24:
        mask = np.int64((1 << bits) - 1)
        order = np.argsort((key & ~mask) | owner)
        ks = key[order]
        high = ks & ~mask
        if not np.any((high[1:] == high[:-1]) & (ks[1:] != ks[:-1])):
            return order
    return np.lexsort((owner, key))


def median_of(x: np.ndarray) -> np.floating:
    """``np.median(x)`` of a 1-D float array, the same number, without its general
    machinery (axes, ``out``, masked arrays): a few microseconds instead of ~15, for the
    small arrays of the duplicate search's hot loops (a pair's inlier errors, its tiles).

    As :func:`numpy.median`: the middle order statistic, or the mean of the two middle
    ones (their sum in ``x``'s dtype, halved), ``nan`` when ``x`` holds a nan.

    Parameters
    ----------
    x : (n,) float32 or float64
        ``n >= 1``.

    Returns
    -------
    numpy floating scalar
        Of ``x``'s dtype.
    """
    n = x.shape[0]
    h = n // 2
    kth = [h, n - 1] if n % 2 else [h - 1, h, n - 1]
    part = np.partition(x, kth)
    if np.isnan(part[n - 1]):  # (nans sort last: numpy's median is then nan)
        return part[n - 1]
    if n % 2:
        return part[h]
    return (part[h - 1] + part[h]) / 2
