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
