"""What the learners share: progress reports and supervision from class labels.

:class:`LearnProgress` is what every learning generator yields (:class:`engine.learn.OASIS`,
:class:`engine.learn.BoostedSSC`, :class:`engine.learn.BoostPro` and
:func:`engine.workflows.feedback.learn`). The rest turns class labels into what the
learners train on: similar / dissimilar pairs (:func:`pairs_from_labels`, the weak
supervision of Shakhnarovich, seeds/002 ch. 3), the members of every class
(:func:`class_members`), and stratified splits (:func:`validation_split` for early
stopping, :func:`train_test_split_by_class` for benchmarks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LearnProgress",
    "State",
    "class_members",
    "pairs_from_labels",
    "train_test_split_by_class",
    "validation_split",
]

#: What ``to_state()`` of a model returns: arrays and plain values only (no pickle).
State = dict[str, "np.ndarray | int | float | str | bool"]


@dataclass(frozen=True)
class LearnProgress:
    """One progress report of a learning generator.

    Attributes
    ----------
    step, total : int
        Work done and planned (iterations, or boosting rounds).
    score : float
        The current validation score (held-out mAP or triplet accuracy for OASIS, r_m
        for boosting).
    message : str
        A short human-readable status.
    """

    step: int
    total: int
    score: float
    message: str = ""


def pairs_from_labels(
    labels: np.ndarray, n_pairs: int, *, positive_fraction: float = 0.5, random_state=0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample similar and dissimilar pairs of items from class labels.

    Parameters
    ----------
    labels : (N,) int array
        Class of each item; items with label ``-1`` are unlabeled and never sampled.
    n_pairs : int
        Number of pairs to draw.
    positive_fraction : float
        Fraction of similar (same-class) pairs.

    Returns
    -------
    i, j : (n_pairs,) int64
        Indices of the two items of each pair (``i != j``).
    l : (n_pairs,) int8
        ``+1`` for similar, ``-1`` for dissimilar pairs.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(random_state)
    idx = np.flatnonzero(labels >= 0)
    if idx.size < 2:
        raise ValueError("labels must name at least two labelled items")
    by_class = class_members(labels)
    multi = [m for m in by_class.values() if m.size >= 2]
    if not multi:
        raise ValueError("labels must contain a class with at least two items")
    n_pos = round(n_pairs * positive_fraction) if len(by_class) > 1 else n_pairs
    # Positives: pick a class in proportion to its number of pairs, then two members.
    sizes = np.array([m.size for m in multi], dtype=np.float64)
    cls = rng.choice(len(multi), size=n_pos, p=sizes * (sizes - 1) / np.sum(sizes * (sizes - 1)))
    pi = np.empty(n_pos, np.int64)
    pj = np.empty(n_pos, np.int64)
    for c in np.unique(cls):
        sel = np.flatnonzero(cls == c)
        m = multi[c]
        a = rng.integers(0, m.size, sel.size)
        b = (a + rng.integers(1, m.size, sel.size)) % m.size
        pi[sel], pj[sel] = m[a], m[b]
    n_neg = n_pairs - n_pos
    ni = rng.choice(idx, size=4 * n_neg + 8)
    nj = rng.choice(idx, size=4 * n_neg + 8)
    keep = labels[ni] != labels[nj]
    ni, nj = ni[keep][:n_neg], nj[keep][:n_neg]
    i = np.concatenate([pi, ni])
    j = np.concatenate([pj, nj])
    lab = np.concatenate([np.ones(pi.size, np.int8), -np.ones(ni.size, np.int8)])
    return i, j, lab


def class_members(labels: np.ndarray) -> dict[int, np.ndarray]:
    """The items of every class; negative labels (``-1``: unlabeled) are left out.

    Parameters
    ----------
    labels : (N,) int ndarray

    Returns
    -------
    dict of int to (n_c,) int64 ndarray
        Label -> indices of its items, ascending; classes in ascending label order.
    """
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    bounds = np.flatnonzero(np.diff(sorted_labels)) + 1
    groups = np.split(order, bounds)
    return {int(labels[g[0]]): g for g in groups if g.size and labels[g[0]] >= 0}


def validation_split(
    classes: dict[int, np.ndarray], fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Hold aside ``fraction`` of every class's images (stratified) for validation.

    A class gives validation images only if at least two remain for training and at
    least two are held aside (so each held-out image has a held-out relevant match).

    Parameters
    ----------
    classes : dict of int to (n_c,) int ndarray
        Members of every class (:func:`class_members`).
    fraction : float
        Share of a class held aside (rounded).
    rng : numpy.random.Generator
        Draws the held-out members (one permutation per class that gives some).

    Returns
    -------
    train, val : (n,) int64, sorted item indices
    """
    train, val = [], []
    for members in classes.values():
        k = round(fraction * members.size)
        if k >= 2 and members.size - k >= 2:
            perm = rng.permutation(members)
            val.append(perm[:k])
            train.append(perm[k:])
        else:
            train.append(members)
    empty = np.zeros(0, np.int64)
    return (
        np.sort(np.concatenate(train)).astype(np.int64),
        np.sort(np.concatenate(val or [empty])).astype(np.int64),
    )


def train_test_split_by_class(
    labels: Sequence[int], test_fraction: float = 0.5, random_state=0
) -> tuple[np.ndarray, np.ndarray]:
    """Split item indices so that every class is in both parts (stratified).

    Parameters
    ----------
    labels : (N,) int sequence
        Class of each item; ``-1`` (unlabeled) items go to neither part.
    test_fraction : float
        Share of every class in the test part (at least one item per class).
    random_state : int or numpy Generator seed

    Returns
    -------
    train, test : (n,) int64 ndarray
        Sorted item indices.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(random_state)
    train, test = [], []
    for members in class_members(labels).values():
        perm = rng.permutation(members)
        k = max(1, round(len(perm) * test_fraction))
        test.append(perm[:k])
        train.append(perm[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
