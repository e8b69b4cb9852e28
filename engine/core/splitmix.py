"""The SplitMix64 mixing function, the engine's one source of stable 64-bit hashes.

SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014; the constants of Vigna's ``splitmix64.c``) advances a 64-bit state by the
golden-ratio constant :data:`GOLDEN` and scrambles it with the finaliser :func:`mix64`,
a bijection of the 64-bit words. Both are computed here elementwise on NumPy ``uint64``
arrays with wrapping arithmetic, so every hash built from them (the pyramid match's bin
keys, the hashed random hyperplanes, the LSH band keys) is the same in every process and
on every NumPy version.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN", "mix64", "splitmix64"]

#: The 64-bit golden-ratio constant of SplitMix64 (its state increment).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _finalise(z: np.ndarray) -> np.ndarray:
    """The finaliser's three xor-shifts and two products, in place on a uint64 array."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a bijection of uint64 (so it adds no collisions).

    Parameters
    ----------
    x : ndarray of uint64
        Other integer dtypes are converted with ``astype(np.uint64)`` (int64 keeps its
        bits: negative values wrap).

    Returns
    -------
    ndarray of uint64, same shape
        ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
        z ^= z >> 31`` (mod ``2**64``).
    """
    return _finalise(np.asarray(x).astype(np.uint64, copy=True))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """One SplitMix64 output per element: ``mix64(x + GOLDEN)`` (wrapping uint64).

    The first output of the reference generator seeded with 0 is
    ``splitmix64(0) = 0xE220A8397B1DCDAF``.

    Parameters
    ----------
    x : ndarray of uint64
        Other integer dtypes are converted with ``astype(np.uint64)`` (int64 keeps its
        bits).

    Returns
    -------
    ndarray of uint64, same shape
    """
    z = np.asarray(x).astype(np.uint64, copy=True)
    z += GOLDEN
    return _finalise(z)
