"""What the clustering steps return: progress reports and result records (thesis Ch. 9).

:class:`ClusterProgress` is yielded by every long step (``*_iter`` generators);
:class:`Clustering` is the normalized-cut partition of :func:`engine.cluster.discover_categories`
and :class:`Refinement` the feature masks and masked flow of
:func:`engine.cluster.refine_with_masks`. Both convert to and from plain ``to_state()`` dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ClusterProgress", "Clustering", "Refinement", "members_by_flow"]


@dataclass(frozen=True)
class ClusterProgress:
    """Progress of a long clustering step.

    ``stage`` is one of ``"affinity"``, ``"spectrum"``, ``"discretize"``, ``"rank"``,
    ``"match"``, ``"masks"``; ``done``/``total`` count work units within the stage.
    """

    stage: str
    done: int
    total: int
    message: str = ""


@dataclass
class Clustering:
    """A partition of ``n`` images into ``k`` groups.

    Attributes
    ----------
    labels : (n,) int64
        Group of every image, in ``[0, k)``. Groups are numbered by decreasing size.
    k : int
        Number of groups.
    k_reason : str
        Human-readable explanation of how ``k`` was chosen.
    eigenvalues : (q,) float64
        Leading eigenvalues of ``D^-1/2 K D^-1/2`` in decreasing order (``1 - lambda`` of
        thesis Eq. 9.1); ``q >= k``.
    flow : (n,) float64
        Sum of an image's affinities to the other members of its group (thesis Sec. 9.4).
    prototypes : (n,) bool
        The top ``prototype_percentile`` of every group by flow.
    outliers : (n,) bool
        Members that fit their group badly: their mean within-group affinity is lower than
        their mean affinity to another group, or a robust z-score below ``-outlier_z``.
    ncut : float
        Normalized-cut value ``sum_g cut(A_g, V \\ A_g) / assoc(A_g, V)`` of the partition
        on the affinities used (``nan`` for the Nystrom path).
    method : str
        ``"spectral"`` (k eigenvectors + discretisation), ``"recursive"`` (two-way cuts) or
        ``"nystrom"``.
    discretize : str
        ``"kmeans"`` or ``"yu_shi"``.
    """

    labels: np.ndarray
    k: int
    k_reason: str
    eigenvalues: np.ndarray
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    ncut: float = float("nan")
    method: str = "spectral"
    discretize: str = "kmeans"

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    def members(self, group: int) -> np.ndarray:
        """Indices of ``group``'s members, highest flow first: (C,) int64."""
        return members_by_flow(self.labels, self.flow, group)

    def groups(self) -> list[np.ndarray]:
        """:meth:`members` of every group, in group order."""
        return [self.members(g) for g in range(self.k)]

    def to_state(self) -> dict[str, np.ndarray | int | float | str | bool]:
        return {
            "labels": self.labels.astype(np.int64),
            "k": int(self.k),
            "k_reason": str(self.k_reason),
            "eigenvalues": self.eigenvalues.astype(np.float64),
            "flow": self.flow.astype(np.float64),
            "prototypes": self.prototypes.astype(bool),
            "outliers": self.outliers.astype(bool),
            "ncut": float(self.ncut),
            "method": str(self.method),
            "discretize": str(self.discretize),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Clustering:
        return cls(
            labels=np.asarray(state["labels"], dtype=np.int64),
            k=int(state["k"]),
            k_reason=str(state["k_reason"]),
            eigenvalues=np.asarray(state["eigenvalues"], dtype=np.float64),
            flow=np.asarray(state["flow"], dtype=np.float64),
            prototypes=np.asarray(state["prototypes"], dtype=bool),
            outliers=np.asarray(state["outliers"], dtype=bool),
            ncut=float(state["ncut"]),
            method=str(state["method"]),
            discretize=str(state["discretize"]),
        )


@dataclass
class Refinement:
    """Result of :func:`refine_with_masks` (thesis Sec. 9.3-9.4).

    Attributes
    ----------
    labels : (n,) int64
        The grouping that was refined (unchanged).
    masks : list of (m_i,) float32
        Per-image feature mask in ``[0, 1]``: the median over the image's within-group
        matchings of each feature's match indicator. High = the feature is consistently used
        to match the other members (the "in-category" part of the image).
    flow : (n,) float64
        Sum of the image's mask-weighted (un-normalised) pyramid-match affinities to the rest
        of its group; with partner sampling, the mean over sampled partners times ``C - 1``.
    prototypes, outliers : (n,) bool
        As in :class:`Clustering`, from the masked flow.
    n_matches : int
        Number of pairwise matchings computed.
    extra : dict
        ``"masked_affinity"``: scipy.sparse (n, n) csr float64 mask-weighted affinities of
        the matched pairs; ``"known"``: (n, n) csr bool, which pairs were matched.
    """

    labels: np.ndarray
    masks: list[np.ndarray]
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    n_matches: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def members(self, group: int) -> np.ndarray:
        """Indices of ``group``'s members, highest masked flow first: (C,) int64."""
        return members_by_flow(self.labels, self.flow, group)

    def to_state(self) -> dict[str, np.ndarray | int | float | str | bool]:
        sizes = np.array([m.shape[0] for m in self.masks], dtype=np.int64)
        flat = (
            np.concatenate(self.masks).astype(np.float32)
            if self.masks
            else np.zeros(0, np.float32)
        )
        return {
            "labels": self.labels.astype(np.int64),
            "mask_sizes": sizes,
            "masks": flat,
            "flow": self.flow.astype(np.float64),
            "prototypes": self.prototypes.astype(bool),
            "outliers": self.outliers.astype(bool),
            "n_matches": int(self.n_matches),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Refinement:
        sizes = np.asarray(state["mask_sizes"], dtype=np.int64)
        flat = np.asarray(state["masks"], dtype=np.float32)
        masks = np.split(flat, np.cumsum(sizes)[:-1]) if sizes.size else []
        return cls(
            labels=np.asarray(state["labels"], dtype=np.int64),
            masks=list(masks),
            flow=np.asarray(state["flow"], dtype=np.float64),
            prototypes=np.asarray(state["prototypes"], dtype=bool),
            outliers=np.asarray(state["outliers"], dtype=bool),
            n_matches=int(state["n_matches"]),
        )


def members_by_flow(labels: np.ndarray, flow: np.ndarray, group: int) -> np.ndarray:
    """Indices (C,) int64 of the images with ``labels == group``, highest ``flow`` first
    (ties in index order); ``labels`` (n,) int, ``flow`` (n,) float."""
    idx = np.flatnonzero(labels == group)
    return idx[np.argsort(-flow[idx], kind="stable")]
