"""The person's edits of a grouping: move an image, merge groups, split a group.

Helpers of the Categories view: a drag becomes must-group / cannot-group constraints for the
next normalized cut (:func:`move_constraints`); merging and splitting act on the labels
directly (split: a two-way normalized cut of the group's own affinities).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.cluster.constraints import relabel_by_size
from engine.cluster.partition import discover_categories
from engine.cluster.results import Clustering

__all__ = ["merge_groups", "move_constraints", "split_group"]


def move_constraints(
    clustering: Clustering, image: int, group: int, *, n_anchors: int = 3
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Constraints expressing "image belongs to ``group``" (a drag in the Categories view).

    Returns ``(must, cannot)``: ``image`` must group with the ``n_anchors`` highest-flow
    members of ``group`` and cannot group with those of its current group. Add them to the
    user's accumulated constraints and call :func:`discover_categories` again.
    """
    if not 0 <= image < clustering.n:
        raise ValueError(f"image must be in [0, {clustering.n}), got {image}")
    if not 0 <= group < clustering.k:
        raise ValueError(f"group must be in [0, {clustering.k}), got {group}")
    target = [int(j) for j in clustering.members(group) if j != image][:n_anchors]
    must = [(image, j) for j in target]
    old = int(clustering.labels[image])
    cannot = []
    if old != group:
        cannot = [(image, int(j)) for j in clustering.members(old) if j != image][:n_anchors]
    return must, cannot


def merge_groups(labels: np.ndarray, groups: Sequence[int]) -> np.ndarray:
    """Labels (n,) int64 with ``groups`` merged into one; groups renumbered by size."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    groups = [int(g) for g in groups]
    if len(groups) < 2:
        raise ValueError("groups must name at least two groups to merge")
    labels[np.isin(labels, groups)] = groups[0]
    return relabel_by_size(labels)


def split_group(kernel: np.ndarray, labels: np.ndarray, group: int, **kwargs: Any) -> np.ndarray:
    """Labels (n,) int64 with ``group`` cut in two by a normalized cut of its own
    affinities (``kwargs`` go to :func:`discover_categories`, ``k`` defaults to 2)."""
    labels = np.asarray(labels, dtype=np.int64).copy()
    idx = np.flatnonzero(labels == group)
    if idx.size < 2:
        raise ValueError(f"group {group} has {idx.size} member(s); cannot split it")
    K = np.asarray(kernel, dtype=np.float64)
    kwargs.setdefault("k", 2)
    sub = discover_categories(K[np.ix_(idx, idx)], **kwargs)
    labels[idx[sub.labels > 0]] = labels.max() + 1 + sub.labels[sub.labels > 0] - 1
    return relabel_by_size(labels)
