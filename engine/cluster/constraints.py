"""The person's must-group / cannot-group constraints, and label bookkeeping (Sec. 9.2).

Constraints are written into the affinities (:func:`apply_constraints`, after Kamvar et al.,
"Spectral learning") and must-groups enforced on the result (:func:`enforce_must`);
:func:`relabel_by_size` numbers groups by decreasing size, as every result does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "apply_constraints",
    "constraint_pairs",
    "contradictions",
    "enforce_must",
    "relabel_by_size",
]


def constraint_pairs(pairs: Iterable[Sequence[int]], n: int, name: str) -> np.ndarray:
    """Validated constraint pairs.

    Parameters
    ----------
    pairs : iterable of (i, j) int pairs, or None
        Images that must (or cannot) be grouped together; rows of the kernel.
    n : int
        Number of images.
    name : str
        Name of the argument in error messages (``"must"``, ``"cannot"``).

    Returns
    -------
    (p, 2) int64
        The pairs; ``(0, 2)`` for None or no pairs.

    Raises
    ------
    ValueError
        An index outside ``[0, n)``, or a pair joining an image to itself.
    """
    arr = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 2) if pairs is not None else None
    if arr is None:
        return np.zeros((0, 2), np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"{name} contains an index outside [0, {n})")
    if (arr[:, 0] == arr[:, 1]).any():
        raise ValueError(f"{name} pairs must join two different images")
    return arr


def _must_components(must: np.ndarray, n: int) -> np.ndarray:
    """Connected-component id (n,) of the must-group graph (transitive closure)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    g = coo_matrix((np.ones(len(must)), (must[:, 0], must[:, 1])), shape=(n, n))
    return connected_components(g, directed=False)[1]


def contradictions(
    must: Iterable[Sequence[int]], cannot: Iterable[Sequence[int]], n: int
) -> list[tuple[int, int]]:
    """The cannot-link pairs that the must-links contradict.

    A must-link is transitive (A with B and B with C puts A with C), so a cannot-link
    between two images of one must-linked chain can never be satisfied.

    Parameters
    ----------
    must, cannot : iterable of (int, int)
        Pairs of image indices in ``[0, n)``.
    n : int
        Number of images.

    Returns
    -------
    list of (int, int)
        The contradicted cannot-link pairs, in the order given (empty: consistent).
    """
    must_arr = constraint_pairs(must, n, "must")
    cannot_arr = constraint_pairs(cannot, n, "cannot")
    if not len(must_arr) or not len(cannot_arr):
        return []
    comp = _must_components(must_arr, n)
    bad = comp[cannot_arr[:, 0]] == comp[cannot_arr[:, 1]]
    return [(int(a), int(b)) for a, b in cannot_arr[bad]]


def apply_constraints(
    W: np.ndarray, must: np.ndarray, cannot: np.ndarray, *, closure: bool = True
) -> np.ndarray:
    """Write must-group / cannot-group pairs into an affinity matrix (thesis Sec. 9.2).

    Must-group pairs get the maximal (diagonal) value, cannot-group pairs 0 (after
    Kamvar et al., "Spectral learning"). With ``closure`` must-groups are transitive: all
    pairs inside a connected component of the must-graph are set to the maximum. Cannot
    constraints win over must constraints. ``W`` (n, n) is modified in place and returned.
    """
    n = W.shape[0]
    if len(must) == 0 and len(cannot) == 0:
        return W
    top = float(np.max(np.diag(W))) if n else 1.0
    if len(must):
        if closure:
            comp = _must_components(must, n)
            sizes = np.bincount(comp)
            for c in np.flatnonzero(sizes > 1):
                idx = np.flatnonzero(comp == c)
                W[np.ix_(idx, idx)] = top
        else:
            W[must[:, 0], must[:, 1]] = top
            W[must[:, 1], must[:, 0]] = top
    if len(cannot):
        W[cannot[:, 0], cannot[:, 1]] = 0.0
        W[cannot[:, 1], cannot[:, 0]] = 0.0
    return W


def enforce_must(labels: np.ndarray, must: np.ndarray) -> np.ndarray:
    """Make must-group constraints hard: every connected component of the must-graph takes
    the most common label among its members (the affinity change of Sec. 9.2 only biases
    the cut).

    Parameters
    ----------
    labels : (n,) int64
        Group per image (not modified).
    must : (p, 2) int64
        Must-group pairs (:func:`constraint_pairs`).

    Returns
    -------
    (n,) int64
        ``labels`` itself when there are no pairs, else a changed copy.
    """
    if len(must) == 0:
        return labels
    n = labels.shape[0]
    comp = _must_components(must, n)
    labels = labels.copy()
    for c in np.flatnonzero(np.bincount(comp) > 1):
        idx = np.flatnonzero(comp == c)
        labels[idx] = np.bincount(labels[idx]).argmax()
    return labels


def relabel_by_size(labels: np.ndarray) -> np.ndarray:
    """Renumber groups 0..k-1 by decreasing size (ties by first occurrence).

    Parameters
    ----------
    labels : (n,) int
        Any group ids (gaps allowed: empty groups disappear).

    Returns
    -------
    (n,) int64
        Group 0 is the largest.
    """
    uniq, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    first = np.array([np.argmax(labels == u) for u in uniq])
    order = np.lexsort((first, -counts))
    remap = np.empty(len(uniq), np.int64)
    remap[order] = np.arange(len(uniq))
    return remap[inv].astype(np.int64)
