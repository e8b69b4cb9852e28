"""Unsupervised categories from partial-match affinities (Grauman, thesis Ch. 9).

Pipeline
--------
1. :func:`prepare_affinity` -- symmetrise a normalised pyramid-match kernel and optionally
   reduce its dominant diagonal (thesis Sec. 8.1.2: ``K_ij <- K_ij ** p`` with ``0 < p < 1``,
   then optionally the empirical map ``K K^T``).
2. :func:`discover_categories` -- normalized cuts (Shi & Malik; thesis Eq. 9.1) on the
   affinities, with must-group / cannot-group constraints written into the affinity matrix
   (Sec. 9.2, after Kamvar et al.), the number of groups given or chosen by the eigengap, and
   a Nystrom approximation from sampled columns for large collections (Fowlkes et al. 2004).
3. :func:`refine_with_masks` -- per-image feature masks from explicit within-group
   correspondences (Sec. 9.3), masked affinities, flow ranking, prototypes and outliers
   (Sec. 9.4).
4. :class:`CategoryClassifier` (in :mod:`engine.classify`) -- an SVM on the precomputed
   kernel trained on prototypes or user-named groups.

Every long step has a generator twin (``*_iter``) that yields :class:`ClusterProgress` and
returns its result as ``StopIteration.value``; the plain function drains it. Stop iterating
(or ``close()`` the generator) to cancel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.core.progress import run_to_end
from engine.core.validate import check_choice

__all__ = [
    "BinsMatcher",
    "CategoryChannel",
    "CategoryModel",
    "CategoryResult",
    "ClusterProgress",
    "Clustering",
    "Refinement",
    "apply_constraints",
    "bin_correspondences",
    "binned_pyramid_kernel",
    "categorize",
    "categorize_iter",
    "category_features",
    "category_features_of",
    "category_kernel_rows",
    "category_mask",
    "category_model_iter",
    "choose_landmarks",
    "clustering_accuracy",
    "diagonal_dominance",
    "discover_categories",
    "discover_categories_iter",
    "knn_graph",
    "merge_groups",
    "move_constraints",
    "ncut_embedding",
    "normalized_cut_value",
    "prepare_affinity",
    "rank_groups",
    "refine_with_masks",
    "refine_with_masks_iter",
    "spatial_pyramid_kernel",
    "split_group",
]

#: Below this many images the spectrum is computed with a dense solver (scipy.linalg.eigh).
DENSE_EIG_MAX = 2000
#: ``nystrom="auto"`` switches to the Nystrom approximation above this many images.
NYSTROM_AUTO_MIN = 3000


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------


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
        return _members_by_flow(self.labels, self.flow, group)

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
        return _members_by_flow(self.labels, self.flow, group)

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


def _members_by_flow(labels: np.ndarray, flow: np.ndarray, group: int) -> np.ndarray:
    idx = np.flatnonzero(labels == group)
    return idx[np.argsort(-flow[idx], kind="stable")]


# --------------------------------------------------------------------------------------------
# affinities
# --------------------------------------------------------------------------------------------


def _check_square(K: object, name: str = "kernel") -> np.ndarray:
    A = np.asarray(K, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) matrix, got shape {A.shape}")
    if A.size and not np.isfinite(A).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return A


def diagonal_dominance(K: np.ndarray) -> float:
    """Ratio of the mean diagonal to the mean off-diagonal entry of ``K`` (n, n).

    A value far above 1 (e.g. > 5) means the examples look nearly orthogonal in feature
    space, the failure mode of thesis Sec. 8.1.2.
    """
    A = _check_square(K)
    n = A.shape[0]
    if n < 2:
        return 1.0
    off = (A.sum() - np.trace(A)) / (n * (n - 1))
    return float(np.trace(A) / n / max(off, np.finfo(float).tiny))


def prepare_affinity(
    kernel: np.ndarray,
    *,
    power: float | None = None,
    empirical: bool = False,
    normalize: bool = True,
) -> np.ndarray:
    """Turn a pyramid-match kernel into a clustering affinity (thesis Sec. 8.1.2).

    Parameters
    ----------
    kernel : (n, n) array_like of float
        Pyramid-match similarities, higher = more similar (e.g. ``PyramidMatch.kernel`` with
        ``normalize="self"`` or ``Collection.kernel_matrix``). Symmetrised as
        ``(K + K^T) / 2``; tiny negative values are clipped to 0.
    power : float in (0, 1], optional
        Sub-polynomial map ``K_ij <- K_ij ** p`` that lifts small off-diagonal values
        relative to the diagonal.
    empirical : bool
        Replace ``K`` by the empirical-map kernel ``K K^T``: two images are similar when they
        are similar to the same images.
    normalize : bool
        Cosine-normalise the result, ``K_ij / sqrt(K_ii K_jj)``, so the diagonal is 1.

    Returns
    -------
    (n, n) float64
        Symmetric, non-negative affinity matrix.
    """
    A = _check_square(kernel)
    A = 0.5 * (A + A.T)
    if A.size and A.min() < -1e-6 * max(1.0, float(np.abs(A).max())):
        raise ValueError("kernel has negative entries; affinities must be non-negative")
    np.maximum(A, 0.0, out=A)
    if power is not None:
        if not 0 < power <= 1:
            raise ValueError(f"power must be in (0, 1], got {power!r}")
        A = A**power
    if empirical:
        A = A @ A.T
    if normalize and A.size:
        d = np.sqrt(np.clip(np.diag(A), np.finfo(float).tiny, None))
        A = A / d[:, None] / d[None, :]
    return A


def _constraint_pairs(pairs: Iterable[Sequence[int]], n: int, name: str) -> np.ndarray:
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


# --------------------------------------------------------------------------------------------
# normalized cuts
# --------------------------------------------------------------------------------------------


def _degree_normalize(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = W.sum(axis=1)
    d = np.where(d > 0, d, np.finfo(float).tiny)
    s = 1.0 / np.sqrt(d)
    return W * s[:, None] * s[None, :], d


def ncut_embedding(W: np.ndarray, n_vectors: int) -> tuple[np.ndarray, np.ndarray]:
    """Leading eigenpairs of ``M = D^-1/2 W D^-1/2`` (thesis Eq. 9.1, ``mu = 1 - lambda``).

    Parameters
    ----------
    W : (n, n) float64
        Symmetric non-negative affinities (diagonal already handled by the caller).
    n_vectors : int
        Number of eigenpairs, ``1 <= n_vectors < n``.

    Returns
    -------
    values : (n_vectors,) float64
        Eigenvalues in decreasing order (the first is 1 for a connected graph).
    vectors : (n, n_vectors) float64
        Matching orthonormal eigenvectors of ``M``; ``D^-1/2 v`` are the generalized
        eigenvectors of Shi & Malik.
    """
    n = W.shape[0]
    q = int(min(max(n_vectors, 1), n))
    M, _ = _degree_normalize(W)
    M = 0.5 * (M + M.T)
    if n <= DENSE_EIG_MAX or q >= n - 1:
        from scipy.linalg import eigh

        vals, vecs = eigh(M, subset_by_index=[n - q, n - 1])
    else:
        from scipy.sparse.linalg import eigsh

        rng = np.random.default_rng(0)
        vals, vecs = eigsh(M, k=q, which="LA", v0=rng.standard_normal(n), tol=1e-8)
    order = np.argsort(-vals)
    return vals[order], vecs[:, order]


def normalized_cut_value(W: np.ndarray, labels: np.ndarray) -> float:
    """``sum_g cut(A_g, V - A_g) / assoc(A_g, V)`` for the partition ``labels`` (n,)."""
    k = int(labels.max()) + 1 if labels.size else 0
    onehot = np.zeros((labels.shape[0], k))
    onehot[np.arange(labels.shape[0]), labels] = 1.0
    assoc_all = onehot.T @ W.sum(axis=1)
    within = np.einsum("ig,ij,jg->g", onehot, W, onehot)
    safe = np.where(assoc_all > 0, assoc_all, 1.0)
    return float(np.sum((assoc_all - within) / safe))


def _row_normalize(V: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    return V / np.where(norms > 0, norms, 1.0)


def _discretize_kmeans(V: np.ndarray, k: int, n_init: int, seed: int) -> np.ndarray:
    """Ng-Jordan-Weiss: k-means (k-means++, ``n_init`` restarts) on unit-length rows."""
    from sklearn.cluster import KMeans

    Y = _row_normalize(V[:, :k])
    km = KMeans(n_clusters=k, n_init=n_init, random_state=seed)
    return km.fit_predict(Y).astype(np.int64)


def _discretize_yu_shi(V: np.ndarray, k: int, n_init: int, seed: int) -> np.ndarray:
    """Yu & Shi (ICCV 2003) multiclass discretisation: alternate between the nearest
    discrete partition matrix and the best orthogonal rotation (SVD), keeping the restart
    with the best objective ``tr(S)``."""
    rng = np.random.default_rng(seed)
    n = V.shape[0]
    Y = _row_normalize(V[:, :k])
    best, best_obj = None, -np.inf
    for _ in range(max(n_init, 1)):
        R = np.zeros((k, k))
        R[:, 0] = Y[rng.integers(n)]
        c = np.zeros(n)
        for j in range(1, k):  # k is small: greedy orthogonal initialisation
            c += np.abs(Y @ R[:, j - 1])
            R[:, j] = Y[np.argmin(c)]
        last = -np.inf
        for _it in range(50):
            labels = np.argmax(Y @ R, axis=1)
            X = np.zeros((n, k))
            X[np.arange(n), labels] = 1.0
            U, S, Vt = np.linalg.svd(X.T @ Y)
            obj = float(S.sum())
            if obj - last < 1e-10:
                break
            last = obj
            R = Vt.T @ U.T
        if last > best_obj:
            best_obj, best = last, labels
    return best.astype(np.int64)


def _discretize(V: np.ndarray, k: int, how: str, n_init: int, seed: int) -> np.ndarray:
    if k == 1:
        return np.zeros(V.shape[0], np.int64)
    if how == "kmeans":
        return _discretize_kmeans(V, k, n_init, seed)
    return _discretize_yu_shi(V, k, n_init, seed)


def _eigengap_k(values: np.ndarray, k_min: int, k_max: int) -> tuple[int, str]:
    """Relative eigengap: ``k = argmax (mu_k - mu_{k+1}) / mu_k`` over ``k in [k_min, k_max]``.

    ``mu`` are the eigenvalues of ``D^-1/2 W D^-1/2`` in decreasing order. The absolute gap
    ``mu_k - mu_{k+1}`` is biased towards small k on real affinities, whose spectrum
    decays steadily; dividing by ``mu_k`` compares the drop to the level it falls from.
    Only k with ``mu_k >= 0.1 mu_2`` are eligible, so the noise floor of the spectrum cannot
    produce a spurious large ratio.
    """
    k_max = min(k_max, values.shape[0] - 1)
    if k_max < k_min:
        k = max(1, min(k_min, values.shape[0]))
        return k, f"k={k}: too few images to compare eigengaps"
    ks = np.arange(k_min, k_max + 1)
    mu_k, mu_next = values[ks - 1], values[ks]
    floor = 0.1 * values[1] if values.shape[0] > 1 else 0.0
    eligible = (mu_k > max(floor, 1e-12)) | (ks == k_min)
    rel = np.where(eligible, (mu_k - mu_next) / np.maximum(np.abs(mu_k), 1e-12), -np.inf)
    j = int(np.argmax(rel))
    k = int(ks[j])
    order = np.argsort(-rel)
    second = (
        f"; next best k={int(ks[order[1]])} (relative gap {rel[order[1]]:.2f})"
        if ks.shape[0] > 1 and np.isfinite(rel[order[1]])
        else ""
    )
    reason = (
        f"k={k} by relative eigengap among k in {k_min}..{k_max}: eigenvalue {k} "
        f"({values[k - 1]:.3f}) drops to {values[k]:.3f} at {k + 1}, a relative gap of "
        f"{rel[j]:.2f}{second}"
    )
    return k, reason


def knn_graph(W: np.ndarray, m: int) -> np.ndarray:
    """Symmetric m-nearest-neighbour graph of affinities ``W`` (n, n): ``W_ij`` is kept when
    j is among the m largest off-diagonal entries of row i OR i among those of row j, else
    0 (von Luxburg, "A tutorial on spectral clustering", 2007, Sec. 2.2). Its spectrum
    separates groups of unequal density better than the full affinities, so the eigengap
    that chooses k is read from it; the diagonal is 0."""
    W = np.asarray(W, np.float64)
    n = W.shape[0]
    m = int(min(max(m, 1), n - 1))
    Wz = W.copy()
    np.fill_diagonal(Wz, -np.inf)
    idx = np.argpartition(-Wz, m - 1, axis=1)[:, :m]
    keep = np.zeros((n, n), bool)
    keep[np.arange(n)[:, None], idx] = True
    keep |= keep.T
    np.fill_diagonal(keep, False)
    return np.where(keep, W, 0.0)


def _enforce_must(labels: np.ndarray, must: np.ndarray) -> np.ndarray:
    """Make must-group constraints hard: every connected component of the must-graph takes
    the most common label among its members (the affinity change of Sec. 9.2 only biases
    the cut)."""
    if len(must) == 0:
        return labels
    n = labels.shape[0]
    comp = _must_components(must, n)
    labels = labels.copy()
    for c in np.flatnonzero(np.bincount(comp) > 1):
        idx = np.flatnonzero(comp == c)
        labels[idx] = np.bincount(labels[idx]).argmax()
    return labels


def _relabel_by_size(labels: np.ndarray) -> np.ndarray:
    """Renumber groups 0..k-1 by decreasing size (ties by first occurrence)."""
    uniq, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    first = np.array([np.argmax(labels == u) for u in uniq])
    order = np.lexsort((first, -counts))
    remap = np.empty(len(uniq), np.int64)
    remap[order] = np.arange(len(uniq))
    return remap[inv].astype(np.int64)


def _best_bipartition(W: np.ndarray) -> tuple[np.ndarray, float]:
    """Shi & Malik two-way cut: threshold the second generalized eigenvector at the value
    minimising Ncut (all n-1 thresholds, evaluated with 2-D cumulative sums)."""
    n = W.shape[0]
    _, vecs = ncut_embedding(W, 2)
    d = W.sum(axis=1)
    y = vecs[:, 1] / np.sqrt(np.where(d > 0, d, np.finfo(float).tiny))
    order = np.argsort(y, kind="stable")
    Wp = W[np.ix_(order, order)]
    dp = d[order]
    S = Wp.cumsum(axis=0).cumsum(axis=1)
    t = np.arange(n - 1)
    assoc_a = np.cumsum(dp)[t]
    within_a = S[t, t]
    total = dp.sum()
    within_b = S[-1, -1] - 2 * S[t, -1] + within_a  # sum over the complement block
    cut = assoc_a - within_a
    assoc_b = total - assoc_a
    with np.errstate(divide="ignore", invalid="ignore"):
        ncut = cut / assoc_a + (assoc_b - within_b) / assoc_b
    ncut = np.where(np.isfinite(ncut), ncut, np.inf)
    j = int(np.argmin(ncut))
    side = np.zeros(n, bool)
    side[order[j + 1 :]] = True
    return side, float(ncut[j])


def _recursive_ncut(W: np.ndarray, k: int) -> np.ndarray:
    """Split, k-1 times, the group whose best two-way cut has the lowest Ncut."""
    n = W.shape[0]
    labels = np.zeros(n, np.int64)
    cache: dict[int, tuple[np.ndarray, float]] = {}
    for new in range(1, k):
        best_g, best_val = -1, np.inf
        for g in range(new):
            if g not in cache:
                idx = np.flatnonzero(labels == g)
                if idx.shape[0] < 2:
                    cache[g] = (np.zeros(idx.shape[0], bool), np.inf)
                else:
                    cache[g] = _best_bipartition(W[np.ix_(idx, idx)])
            if cache[g][1] < best_val:
                best_g, best_val = g, cache[g][1]
        if best_g < 0:
            break
        idx = np.flatnonzero(labels == best_g)
        labels[idx[cache[best_g][0]]] = new
        cache.pop(best_g)
    return labels


def choose_landmarks(
    n: int,
    n_landmarks: int,
    *,
    must: Iterable[Sequence[int]] = (),
    cannot: Iterable[Sequence[int]] = (),
    random_state: int = 0,
) -> np.ndarray:
    """Sample landmark images for the Nystrom approximation.

    Every image named in a constraint is included (so the constraint can be written into
    the landmark block), the rest is sampled uniformly without replacement.

    Returns
    -------
    (m,) int64
        Sorted landmark indices, ``m = max(n_landmarks, #constrained images)`` capped at n.
    """
    must_a = _constraint_pairs(must, n, "must")
    cannot_a = _constraint_pairs(cannot, n, "cannot")
    forced = np.unique(np.concatenate([must_a.ravel(), cannot_a.ravel()]))
    rest = np.setdiff1d(np.arange(n), forced)
    m_rest = max(0, min(n_landmarks - forced.shape[0], rest.shape[0]))
    rng = np.random.default_rng(random_state)
    pick = rng.choice(rest, size=m_rest, replace=False) if m_rest else rest[:0]
    return np.sort(np.concatenate([forced, pick])).astype(np.int64)


def _nystrom_embedding(
    C: np.ndarray, landmarks: np.ndarray, n_vectors: int
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate leading eigenpairs of ``D^-1/2 W D^-1/2`` from columns ``C = W[:, L]``.

    One-shot orthogonalised Nystrom extension for normalized cuts (Fowlkes, Belongie,
    Chung & Malik, PAMI 2004, Sec. 4): with ``A = W[L, L]`` and ``B = W[L, R]``, degrees are
    ``d_L = A 1 + B 1`` and ``d_R = B^T 1 + B^T A^+ B 1``; after normalisation
    ``S = A + A^-1/2 B B^T A^-1/2 = U Lambda U^T`` and ``V = [A; B^T] A^-1/2 U Lambda^-1/2``.
    Cost O(n m^2).
    """
    n, _m = C.shape
    is_lm = np.zeros(n, bool)
    is_lm[landmarks] = True
    rest = np.flatnonzero(~is_lm)
    A = 0.5 * (C[landmarks] + C[landmarks].T)
    B = C[rest].T  # (m, n - m)
    evals, evecs = np.linalg.eigh(A)
    keep = evals > 1e-10 * max(float(evals.max()), 1e-300)
    Ainv = (evecs[:, keep] / evals[keep]) @ evecs[:, keep].T
    d1 = A.sum(1) + B.sum(1)
    d2 = B.sum(0) + B.T @ (Ainv @ B.sum(1))
    tiny = np.finfo(float).tiny
    s1 = 1.0 / np.sqrt(np.where(d1 > 0, d1, tiny))
    s2 = 1.0 / np.sqrt(np.where(d2 > 0, d2, tiny))
    A = A * s1[:, None] * s1[None, :]
    B = B * s1[:, None] * s2[None, :]
    evals, evecs = np.linalg.eigh(A)
    keep = evals > 1e-10 * max(float(evals.max()), 1e-300)
    Asi = (evecs[:, keep] / np.sqrt(evals[keep])) @ evecs[:, keep].T
    BA = Asi @ B  # (m, n - m)
    S = A + BA @ BA.T
    S = 0.5 * (S + S.T)
    lam, U = np.linalg.eigh(S)
    order = np.argsort(-lam)[:n_vectors]
    lam, U = lam[order], U[:, order]
    lam_safe = np.where(lam > tiny, lam, tiny)
    proj = Asi @ U / np.sqrt(lam_safe)[None, :]  # (m, q)
    V = np.empty((n, len(order)))
    V[landmarks] = A @ proj
    V[rest] = B.T @ proj
    return lam, V


# --------------------------------------------------------------------------------------------
# ranking: flow, prototypes, outliers
# --------------------------------------------------------------------------------------------


def rank_groups(
    W: np.ndarray,
    labels: np.ndarray,
    *,
    prototype_percentile: float = 25.0,
    outlier_z: float = 3.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flow, prototypes and outliers of a grouping (thesis Sec. 9.4).

    Parameters
    ----------
    W : (n, n) float64
        Affinities (the diagonal is ignored).
    labels : (n,) int
        Group per image.
    prototype_percentile : float in (0, 100]
        The top this-percent of every group by flow are prototypes (at least one per group).
    outlier_z : float
        A member is an outlier when its mean affinity to its own group is lower than its
        mean affinity to some other group, or lower than the group median by more than
        ``outlier_z`` robust standard deviations (1.4826 MAD).

    Returns
    -------
    flow : (n,) float64
        ``sum_{j in g(i), j != i} W_ij``.
    prototypes, outliers : (n,) bool
    """
    if not 0 < prototype_percentile <= 100:
        raise ValueError(f"prototype_percentile must be in (0, 100], got {prototype_percentile}")
    n = W.shape[0]
    labels = np.asarray(labels, dtype=np.int64)
    k = int(labels.max()) + 1 if n else 0
    onehot = np.zeros((n, k))
    onehot[np.arange(n), labels] = 1.0
    Wz = W - np.diag(np.diag(W))
    to_group = Wz @ onehot  # (n, k) affinity sums to every group
    sizes = onehot.sum(0)
    flow = to_group[np.arange(n), labels]
    own_count = sizes[labels] - 1
    mean_own = flow / np.where(own_count > 0, own_count, 1)
    other = to_group / np.where(sizes > 0, sizes, 1)[None, :]
    other[np.arange(n), labels] = -np.inf
    best_other = other.max(axis=1) if k > 1 else np.full(n, -np.inf)
    prototypes, outliers = _flag_members(
        labels, k, flow, mean_own, best_other, prototype_percentile, outlier_z
    )
    return flow, prototypes, outliers


def _flag_members(
    labels: np.ndarray,
    k: int,
    flow: np.ndarray,
    mean_own: np.ndarray,
    best_other: np.ndarray,
    prototype_percentile: float,
    outlier_z: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Prototypes (top ``prototype_percentile`` % of each group by flow, at least one)
    and outliers (mean affinity to the own group ``outlier_z`` robust standard deviations
    below the group's median, or below the best other group's); (n,) bool each."""
    n = labels.shape[0]
    prototypes = np.zeros(n, bool)
    outliers = np.zeros(n, bool)
    for g in range(k):
        idx = np.flatnonzero(labels == g)
        if idx.size == 0:
            continue
        order = idx[np.argsort(-flow[idx], kind="stable")]
        n_proto = max(1, math.ceil(idx.size * prototype_percentile / 100.0))
        prototypes[order[:n_proto]] = True
        if idx.size >= 3:
            vals = mean_own[idx]
            med = np.median(vals)
            scale = max(1.4826 * np.median(np.abs(vals - med)), 0.1 * abs(med))
            low = vals < med - outlier_z * scale
            outliers[idx] = low | (vals < best_other[idx])
    outliers &= ~prototypes
    return prototypes, outliers


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------


def discover_categories_iter(
    kernel: np.ndarray,
    *,
    k: int | str = "auto",
    must: Iterable[Sequence[int]] = (),
    cannot: Iterable[Sequence[int]] = (),
    power: float | None = None,
    empirical: bool = False,
    method: str = "spectral",
    discretize: str = "kmeans",
    k_min: int = 2,
    k_max: int = 12,
    landmarks: np.ndarray | None = None,
    n_init: int = 10,
    prototype_percentile: float = 25.0,
    outlier_z: float = 3.0,
    random_state: int = 0,
    k_graph: int | None = None,
) -> Generator[ClusterProgress, None, Clustering]:
    """Generator form of :func:`discover_categories`; yields :class:`ClusterProgress` and
    returns the :class:`Clustering` (``StopIteration.value``)."""
    if k_graph is not None and int(k_graph) < 1:
        raise ValueError(f"k_graph must be a positive integer or None, got {k_graph!r}")
    check_choice(method, "method", ("spectral", "recursive"))
    check_choice(discretize, "discretize", ("kmeans", "yu_shi"))
    if isinstance(k, str):
        check_choice(k, "k", ("auto",))
    elif int(k) < 1:
        raise ValueError(f"k must be >= 1 or 'auto', got {k!r}")
    if k_min < 1 or k_max < k_min:
        raise ValueError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
    C = np.asarray(kernel, dtype=np.float64)
    if C.ndim != 2:
        raise ValueError(f"kernel must be a 2-D matrix, got shape {C.shape}")
    n = C.shape[0]
    if n == 0:
        raise ValueError("kernel is empty: nothing to group")
    must_a = _constraint_pairs(must, n, "must")
    cannot_a = _constraint_pairs(cannot, n, "cannot")
    if isinstance(k, int | np.integer) and int(k) > n:
        raise ValueError(f"k={k} is larger than the number of images ({n})")

    yield ClusterProgress("affinity", 0, 1, "preparing affinities")
    if landmarks is not None:
        return (
            yield from _discover_nystrom(
                C,
                np.asarray(landmarks, dtype=np.int64),
                k,
                must_a,
                cannot_a,
                power,
                discretize,
                k_min,
                k_max,
                n_init,
                prototype_percentile,
                outlier_z,
                random_state,
            )
        )
    W = prepare_affinity(C, power=power, empirical=empirical)
    np.fill_diagonal(W, 1.0)
    apply_constraints(W, must_a, cannot_a)
    np.fill_diagonal(W, 0.0)  # self-affinity plays no role in a cut (Ng-Jordan-Weiss)
    yield ClusterProgress("affinity", 1, 1, f"{n} images")

    if n == 1:
        labels = np.zeros(1, np.int64)
        return Clustering(
            labels,
            1,
            "k=1: a single image",
            np.ones(1),
            np.zeros(1),
            np.ones(1, bool),
            np.zeros(1, bool),
            0.0,
            method,
            discretize,
        )
    q = min(n - 1, (k_max if k == "auto" else int(k)) + 1)
    q = max(q, 1)
    yield ClusterProgress("spectrum", 0, 1, f"{q} leading eigenvectors of {n}x{n}")
    values, vectors = ncut_embedding(W, q)
    yield ClusterProgress("spectrum", 1, 1)
    if k == "auto" and k_graph is not None and n > int(k_graph) + 1:
        G = knn_graph(W, int(k_graph))
        g_values, _ = ncut_embedding(G, q)
        kk, reason = _eigengap_k(g_values, k_min, k_max)
        reason += f" of the {int(k_graph)}-nearest-neighbour graph"
    elif k == "auto":
        kk, reason = _eigengap_k(values, k_min, k_max)
    else:
        kk, reason = int(k), f"k={int(k)} given by the user"
    yield ClusterProgress("discretize", 0, 1, f"k={kk}")
    if method == "recursive":
        labels = _recursive_ncut(W, kk)
    else:
        labels = _discretize(vectors, kk, discretize, n_init, random_state)
    labels = _relabel_by_size(_enforce_must(labels, must_a))
    kk = int(labels.max()) + 1
    yield ClusterProgress("discretize", 1, 1)
    flow, protos, outl = rank_groups(
        W, labels, prototype_percentile=prototype_percentile, outlier_z=outlier_z
    )
    yield ClusterProgress("rank", 1, 1)
    return Clustering(
        labels=labels,
        k=kk,
        k_reason=reason,
        eigenvalues=values,
        flow=flow,
        prototypes=protos,
        outliers=outl,
        ncut=normalized_cut_value(W, labels),
        method=method,
        discretize=discretize,
    )


def _discover_nystrom(
    C, landmarks, k, must_a, cannot_a, power, discretize, k_min, k_max, n_init,
    prototype_percentile, outlier_z, random_state,
):  # fmt: skip
    n, m = C.shape
    if landmarks.ndim != 1 or landmarks.shape[0] != m:
        raise ValueError(
            f"landmarks must be a (m,) index array matching kernel's {m} columns, "
            f"got shape {landmarks.shape}"
        )
    if m < 2 or landmarks.min() < 0 or landmarks.max() >= n or np.unique(landmarks).size != m:
        raise ValueError("landmarks must be >= 2 distinct row indices of kernel")
    if np.any(C < -1e-6):
        raise ValueError("kernel has negative entries; affinities must be non-negative")
    W = np.maximum(C, 0.0)
    if power is not None:
        if not 0 < power <= 1:
            raise ValueError(f"power must be in (0, 1], got {power!r}")
        W = W**power
    pos = np.full(n, -1, np.int64)
    pos[landmarks] = np.arange(m)
    top = float(np.max(W[landmarks, np.arange(m)]))
    for arr, val in ((must_a, top), (cannot_a, 0.0)):
        if len(arr) == 0:
            continue
        if (pos[arr] < 0).any():
            raise ValueError(
                "every image in a constraint must be a landmark; use choose_landmarks()"
            )
        W[arr[:, 0], pos[arr[:, 1]]] = val
        W[arr[:, 1], pos[arr[:, 0]]] = val
    yield ClusterProgress("affinity", 1, 1, f"{n} images, {m} landmarks (Nystrom)")
    q = min(m, (k_max if k == "auto" else int(k)) + 1)
    yield ClusterProgress("spectrum", 0, 1, f"Nystrom extension of {q} eigenvectors")
    with single_threaded_blas():  # m x m problems: thread hand-offs cost more than they save
        values, vectors = _nystrom_embedding(W, landmarks, q)
    yield ClusterProgress("spectrum", 1, 1)
    if k == "auto":
        kk, reason = _eigengap_k(values, k_min, k_max)
        reason += f" (Nystrom, {m} landmarks)"
    else:
        kk, reason = int(k), f"k={int(k)} given by the user"
    labels = _discretize(vectors, kk, discretize, n_init, random_state)
    labels = _relabel_by_size(_enforce_must(labels, must_a))
    kk = int(labels.max()) + 1
    yield ClusterProgress("discretize", 1, 1)
    # Flow from the sampled columns: affinity to the landmark members of the own group,
    # scaled to the group size.
    onehot_l = np.zeros((m, kk))
    onehot_l[np.arange(m), labels[landmarks]] = 1.0
    Wl = W.copy()
    Wl[landmarks, np.arange(m)] = 0.0
    to_group = Wl @ onehot_l  # (n, k)
    cnt_l = onehot_l.sum(0)
    sizes = np.bincount(labels, minlength=kk).astype(float)
    self_l = np.zeros(n)
    self_l[landmarks] = 1.0
    own_cnt = cnt_l[labels] - self_l
    mean_own = to_group[np.arange(n), labels] / np.where(own_cnt > 0, own_cnt, 1)
    flow = mean_own * (sizes[labels] - 1)
    # rank with a tiny dense surrogate: group means of landmark affinities
    mean_to = to_group / np.where(cnt_l > 0, cnt_l, 1)[None, :]
    mean_to[np.arange(n), labels] = -np.inf
    best_other = mean_to.max(axis=1) if kk > 1 else np.full(n, -np.inf)
    protos, outl = _flag_members(
        labels, kk, flow, mean_own, best_other, prototype_percentile, outlier_z
    )
    yield ClusterProgress("rank", 1, 1)
    return Clustering(
        labels=labels, k=kk, k_reason=reason, eigenvalues=values, flow=flow,
        prototypes=protos, outliers=outl, ncut=float("nan"), method="nystrom",
        discretize=discretize,
    )  # fmt: skip


def discover_categories(kernel: np.ndarray, **kwargs: Any) -> Clustering:
    """Group images by normalized cuts on pyramid-match affinities (thesis Sec. 9.2).

    Parameters
    ----------
    kernel : (n, n) float array, or (n, m) columns with ``landmarks``
        Normalised pyramid-match kernel (diagonal 1), e.g. ``Collection.kernel_matrix()``.
        With ``landmarks`` (Nystrom mode) only the columns ``K[:, landmarks]`` are needed.
    k : int or "auto"
        Number of groups, or ``"auto"`` to take the largest relative eigengap of
        ``D^-1/2 K D^-1/2`` for k in ``[k_min, k_max]``; ``Clustering.k_reason`` explains it.
    must, cannot : iterable of (i, j) index pairs
        Must-group / cannot-group constraints, written into the affinities (Sec. 9.2):
        maximal value (transitively closed) resp. zero. Must-groups are also enforced on
        the result (each must-connected set takes its majority label); cannot-groups only
        act through the affinities. A group may become empty this way, so ``k`` can be
        smaller than requested.
    power : float in (0, 1], optional
        Dominant-diagonal fix ``K_ij ** p`` (Sec. 8.1.2).
    empirical : bool
        Use the empirical-map kernel ``K K^T`` (cosine-normalised); exact mode only.
    method : {"spectral", "recursive"}
        ``"spectral"``: k leading eigenvectors + discretisation; ``"recursive"``: repeated
        two-way Shi-Malik cuts of the group with the lowest bipartition Ncut.
    discretize : {"kmeans", "yu_shi"}
        k-means with ``n_init`` k-means++ restarts on row-normalised eigenvectors (default),
        or Yu & Shi's rotation-based discretisation.
    k_min, k_max : int
        Range searched by ``k="auto"``.
    k_graph : int, optional
        With ``k="auto"`` (exact mode), read the eigengap from the spectrum of the
        symmetric ``k_graph``-nearest-neighbour graph of the affinities
        (:func:`knn_graph`) instead of the full affinities; the cut itself still uses
        the full affinities.
    landmarks : (m,) int, optional
        Nystrom mode (Fowlkes et al. 2004): ``kernel`` holds the (n, m) columns of the
        landmark images (see :func:`choose_landmarks`). Cost O(n m^2) instead of O(n^2).
    n_init : int
        Discretisation restarts.
    prototype_percentile, outlier_z : float
        See :func:`rank_groups`.
    random_state : int

    Returns
    -------
    Clustering

    Examples
    --------
    >>> import numpy as np
    >>> from engine.cluster.discovery import discover_categories
    >>> rng = np.random.default_rng(0)
    >>> truth = np.repeat([0, 1, 2], 20)
    >>> K = np.where(truth[:, None] == truth[None, :], 0.6, 0.1) + 0.05 * rng.random((60, 60))
    >>> K = (K + K.T) / 2; np.fill_diagonal(K, 1.0)
    >>> res = discover_categories(K, k="auto")
    >>> res.k, np.bincount(res.labels).tolist()
    (3, [20, 20, 20])
    """
    return run_to_end(discover_categories_iter(kernel, **kwargs))


# --------------------------------------------------------------------------------------------
# refinement with feature masks (Sec. 9.3-9.4)
# --------------------------------------------------------------------------------------------


class _MatchLike(Protocol):
    pairs: np.ndarray
    weight: np.ndarray


Matcher = Callable[[int, int], _MatchLike]


def _as_matcher(matcher: Any, features: Sequence[Any]) -> Matcher:
    """Accept ``PyramidMatch``-like objects (``.match(a, b)``) or ``f(i, j)`` callables."""
    if hasattr(matcher, "match"):
        sets = [getattr(f, "descriptors", f) for f in features]
        return lambda i, j: matcher.match(sets[i], sets[j])
    if callable(matcher):
        return matcher
    raise TypeError("matcher must have a .match(set_a, set_b) method or be a callable f(i, j)")


class BinnedMatcher:
    """Explicit pyramid-match correspondences between stored feature sets, no geometry.

    The refinement of Sec. 9.3 needs each image's correspondences to the other members of
    its group. This matcher bins every feature of every image ONCE with a fitted
    :class:`engine.pyramid.PyramidMatch` (its first pyramid, finest level first, Eq. 3.13)
    and then, per pair, pairs the still unmatched points that share a bin, finest level
    first (thesis 3.2.3, :func:`engine.correspondences.correspondences`). Unlike
    ``Collection.match`` there is no homography verification, so a pair costs only the
    in-bin assignments (milliseconds).

    Parameters
    ----------
    pyramid : engine.pyramid.PyramidMatch
        A fitted pyramid match (e.g. the collection's vocabulary-guided one); its
        projection, first binning, ``n_levels`` and ``bin_weights`` are used.
    sets : sequence of (m_i, D) float32 arrays or ``Features``
        The images' descriptors (``.descriptors`` is used when present).
    metric : {"l2", "l1"}
        Ground distance of the in-bin assignments.

    Notes
    -----
    Calling ``matcher(i, j)`` returns a :class:`engine.pyramid.MatchResult` whose
    ``pairs`` (P, 2) int64 index sets ``i`` and ``j``, ``level`` (P,) int64 and ``weight``
    (P,) float64 is the bin similarity weight of the level where the pair formed;
    ``score`` is ``weight.sum()`` (un-normalised pyramid-match similarity of the pairs).
    """

    def __init__(self, pyramid: Any, sets: Sequence[Any], *, metric: str = "l2") -> None:
        check_choice(metric, "metric", ("l2", "l1"))
        if not getattr(pyramid, "binnings_", None):
            raise ValueError("pyramid must be a fitted engine.pyramid.PyramidMatch")
        self.metric = metric
        self.sets = [
            np.ascontiguousarray(getattr(s, "descriptors", s), dtype=np.float32) for s in sets
        ]
        dims = {s.shape[1] for s in self.sets if s.ndim == 2 and s.shape[0]}
        if any(s.ndim != 2 for s in self.sets) or len(dims) > 1:
            raise ValueError("sets must be (m_i, D) arrays with one common D")
        sizes = np.array([s.shape[0] for s in self.sets], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])
        L = int(pyramid.n_levels)
        binning = pyramid.binnings_[0]
        if self.offsets[-1]:
            X = np.concatenate([s for s in self.sets if s.shape[0]])
            proj = getattr(pyramid, "projection_", None)
            P = proj.transform(X) if proj is not None else X
            bins = np.asarray(binning.assign(P)[0][:, :L], dtype=np.int64)
            w = np.empty(bins.shape, np.float64)
            for lev in range(L):  # loop over levels only
                w[:, lev] = binning.bin_weights(lev, bins[:, lev])
        else:
            bins, w = np.zeros((0, L), np.int64), np.zeros((0, L))
        self._bins, self._w, self.n_levels = bins, w, L

    def __len__(self) -> int:
        return len(self.sets)

    @property
    def bins(self) -> list[np.ndarray]:
        """Per-image (m_i, L) int64 bin ids, finest level first (views, do not modify)."""
        o = self.offsets
        return [self._bins[o[i] : o[i + 1]] for i in range(len(self.sets))]

    def __call__(self, i: int, j: int):
        from engine.kernels.correspondences import correspondences
        from engine.kernels.pyramid import MatchResult

        a0, a1 = self.offsets[i], self.offsets[i + 1]
        b0, b1 = self.offsets[j], self.offsets[j + 1]
        if a1 == a0 or b1 == b0:
            pairs, level, weight = np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0)
        else:
            pairs, level, weight = correspondences(
                self._bins[a0:a1], self._bins[b0:b1], self.sets[i], self.sets[j],
                self._w[a0:a1], metric=self.metric,
            )  # fmt: skip
        return MatchResult(
            score=float(np.sum(weight)), pairs=pairs, level=level, weight=weight,
            xy_a=None, xy_b=None,
        )  # fmt: skip


def masks_to_arrays(masks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Pack per-image feature masks for storage: ``(flat (sum m_i,) float32, offsets (n+1,)
    int64)``; image i's mask is ``flat[offsets[i]:offsets[i + 1]]``."""
    sizes = np.array([np.asarray(m).shape[0] for m in masks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = (
        np.concatenate([np.asarray(m, np.float32) for m in masks])
        if len(masks)
        else np.zeros(0, np.float32)
    )
    return flat.astype(np.float32), offsets


def masks_from_arrays(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    """Inverse of :func:`masks_to_arrays`: list of (m_i,) float32 masks."""
    flat = np.asarray(flat, np.float32)
    offsets = np.asarray(offsets, np.int64)
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != flat.size:
        raise ValueError("offsets must start at 0 and end at len(flat)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    return [flat[offsets[i] : offsets[i + 1]] for i in range(offsets.size - 1)]


def refine_with_masks_iter(
    features: Sequence[Any],
    labels: np.ndarray,
    matcher: Any,
    *,
    max_partners: int = 40,
    indicator: str = "weight",
    prototype_percentile: float = 25.0,
    outlier_z: float = 3.0,
    random_state: int = 0,
    normalize: str = "none",
) -> Generator[ClusterProgress, None, Refinement]:
    """Generator form of :func:`refine_with_masks`; yields ``ClusterProgress("match", ...)``
    after every image and returns the :class:`Refinement`."""
    check_choice(indicator, "indicator", ("binary", "weight"))
    check_choice(normalize, "normalize", ("none", "mask"))
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    if len(features) != n:
        raise ValueError(f"features has {len(features)} entries but labels has {n}")
    if max_partners < 1:
        raise ValueError(f"max_partners must be >= 1, got {max_partners}")
    sizes = np.array([len(getattr(f, "descriptors", f)) for f in features], dtype=np.int64)
    match = _as_matcher(matcher, features)
    rng = np.random.default_rng(random_state)

    # Partners: all other members of small groups, a random subset of large ones. Each
    # unordered pair is matched once and used by both ends.
    partners: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        for a_pos, a in enumerate(idx):
            others = np.delete(idx, a_pos)
            if others.size > max_partners:
                others = rng.choice(others, size=max_partners, replace=False)
            partners[a] = np.sort(others)
    pair_set = {(min(a, b), max(a, b)) for a in range(n) for b in partners[a].tolist()}
    pairs = sorted(pair_set)
    total = len(pairs)
    results: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    many = getattr(matcher, "match_many", None)
    if many is not None:  # batched (BinsMatcher): a few sorts per level for 256 pairs
        for s0 in range(0, total, 256):
            batch = pairs[s0 : s0 + 256]
            for key, (p, w) in zip(batch, many(np.array(batch, np.int64)), strict=True):
                results[key] = (p, w)
            yield ClusterProgress("match", s0 + len(batch), total, "within-group correspondences")
    for done, (a, b) in enumerate(pairs if many is None else (), 1):
        r = match(a, b)
        p = np.asarray(r.pairs, dtype=np.int64).reshape(-1, 2)
        w = np.asarray(getattr(r, "weight", np.ones(p.shape[0])), dtype=np.float64)
        results[(a, b)] = (p, w)
        if done % 50 == 0 or done == total:
            yield ClusterProgress("match", done, total, "within-group correspondences")

    # Masks: median over partners of the per-feature match indicator (Sec. 9.3).
    masks: list[np.ndarray] = []
    for i in range(n):
        ind = np.zeros((max(partners[i].size, 1), sizes[i]), np.float32)
        for row, j in enumerate(partners[i].tolist()):
            p, w = results[(min(i, j), max(i, j))]
            col = p[:, 0] if i < j else p[:, 1]
            ind[row, col] = 1.0 if indicator == "binary" else w
        mask = np.median(ind, axis=0).astype(np.float32) if partners[i].size else ind[0]
        if indicator == "weight" and mask.size and mask.max() > 0:
            mask = mask / mask.max()
        masks.append(mask)
    yield ClusterProgress("masks", n, n, "feature masks")

    # Mask-weighted, un-normalised affinities: each correspondence counts with the smaller
    # mask mass of its two features (the histogram intersection of weighted bin masses,
    # restricted to the matched pairs), times its pyramid-level weight (Sec. 9.4).
    # Sparse (n, n) over the matched pairs only: O(n * max_partners) memory for any n.
    import scipy.sparse as sp

    keys = list(results)
    pa = np.array([a for a, _ in keys], np.int64)
    pb = np.array([b for _, b in keys], np.int64)
    sc = np.array([
        float(np.sum(w * np.minimum(masks[a][p[:, 0]], masks[b][p[:, 1]]))) if p.shape[0]
        else 0.0
        for (a, b), (p, w) in results.items()
    ])  # fmt: skip
    if normalize == "mask":  # Eq. 3.12 with mask masses as the self-similarities
        mass = np.array([float(m.sum()) for m in masks])
        den = np.sqrt(mass[pa] * mass[pb]) if pa.size else np.zeros(0)
        sc = np.where(den > 0, sc / np.where(den > 0, den, 1.0), 0.0)
    rows, cols = np.concatenate([pa, pb]), np.concatenate([pb, pa])
    Wm = sp.csr_matrix((np.concatenate([sc, sc]), (rows, cols)), shape=(n, n))
    cnt = np.bincount(rows, minlength=n).astype(np.float64)
    tot = np.bincount(rows, weights=np.concatenate([sc, sc]), minlength=n)
    group_size = np.bincount(labels)
    flow = np.where(cnt > 0, tot / np.maximum(cnt, 1.0), 0.0) * (group_size[labels] - 1)
    known = sp.csr_matrix((np.ones(rows.size, bool), (rows, cols)), shape=(n, n))
    protos = np.zeros(n, bool)
    outl = np.zeros(n, bool)
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        order = idx[np.argsort(-flow[idx], kind="stable")]
        protos[order[: max(1, math.ceil(idx.size * prototype_percentile / 100.0))]] = True
        if idx.size >= 3:
            vals = flow[idx]
            med = np.median(vals)
            scale = max(1.4826 * np.median(np.abs(vals - med)), 0.1 * abs(med))
            outl[idx] = vals < med - outlier_z * scale
    outl &= ~protos
    return Refinement(
        labels=labels, masks=masks, flow=flow, prototypes=protos, outliers=outl,
        n_matches=total, extra={"masked_affinity": Wm, "known": known},
    )  # fmt: skip


def refine_with_masks(features: Sequence[Any], labels: np.ndarray, matcher: Any, **kwargs: Any):
    """Feature masks, masked flow, prototypes and outliers of a grouping (Sec. 9.3-9.4).

    Parameters
    ----------
    features : sequence of ``Features`` or (m_i, D) float32 arrays
        Every image's local features (only ``len`` and, for PyramidMatch-like matchers,
        ``.descriptors`` are used).
    labels : (n,) int
        Grouping to refine (e.g. ``Clustering.labels``).
    matcher : PyramidMatch-like or callable
        Either an object with ``match(set_a, set_b) -> MatchResult`` (``.pairs`` (P, 2)
        int64 feature indices, ``.weight`` (P,) float64 per-correspondence similarity), or
        ``f(i, j) -> MatchResult`` on image indices (e.g. ``Collection.match`` on paths).
    max_partners : int
        Each image is matched against at most this many random members of its group, so the
        cost is O(n * max_partners) matchings instead of O(sum C^2).
    indicator : {"weight", "binary"}
        Entry of a feature in one matching's indicator vector: the correspondence's
        similarity weight, as in the thesis (default; each mask is then scaled to max 1), or
        1 if matched at all. Use "binary" only with matchers that leave features unmatched:
        a pyramid match of equal-size sets matches everything at its coarsest level.
    prototype_percentile, outlier_z : float
        Top percentile of masked flow kept as prototypes; members more than ``outlier_z``
        robust standard deviations below the group's median flow are outliers.
    normalize : {"none", "mask"}
        "none" (default, as the thesis, Sec. 9.4): the masked affinity
        ``sum_pairs w * min(mask_a, mask_b)`` is left un-normalised. "mask": divide it by
        ``sqrt(|mask_a| |mask_b|)`` (``|mask|`` = sum of the mask, the masked set's
        self-similarity at the finest level; Eq. 3.12), so images with many features
        (cluttered scenes) do not dominate the flow. On Caltech-4 dev (k = 4), where
        airplanes have half the features of the other classes, the top-25 % prototypes
        are 92.5 % correct with "mask" against 85 % with "none".

    Returns
    -------
    Refinement
        ``masks[i]`` (m_i,) float32 in [0, 1] is the median indicator over image i's
        within-group matchings (Sec. 9.3); the GUI can colour feature i by it.
    """
    return run_to_end(refine_with_masks_iter(features, labels, matcher, **kwargs))


# --------------------------------------------------------------------------------------------
# user edits (GUI helpers)
# --------------------------------------------------------------------------------------------


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
    return _relabel_by_size(labels)


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
    return _relabel_by_size(labels)


# --------------------------------------------------------------------------------------------
# spatially augmented pyramid match
# --------------------------------------------------------------------------------------------


def spatial_pyramid_kernel(
    bins: Sequence[np.ndarray],
    xy: Sequence[np.ndarray],
    *,
    grid: int = 4,
    word_level: int = 1,
) -> np.ndarray:
    """Pyramid-match kernel over feature bins augmented with coarse image position.

    Every feature's bin at ``word_level`` (its "visual word") is paired with its cell in a
    ``g x g`` grid over the image for ``g = grid, grid/2, ..., 2``; these spatial levels
    are put below the feature-space levels, finest first, and the kernel is the
    pyramid match over the combined levels (thesis Eq. 3.13 with level weights
    ``w_l = 2^-l``)::

        K(X, Y) = sum_l (w_l - w_{l+1}) I_l(X, Y),     I_l = sum_b min(H_l^X(b), H_l^Y(b))

    cosine-normalised, ``K(X, Y) / sqrt(K(X, X) K(Y, Y))``. Each term is a histogram
    intersection with a non-negative coefficient, so ``K`` is positive semi-definite. Matches
    of the same word in the same region of the two images count most, as in the spatial
    pyramid match of Lazebnik et al. (2006), which suits object categories photographed in
    similar poses; for arbitrary layouts plain feature-space bins are the safer affinity.

    Parameters
    ----------
    bins : sequence of (m_i, L) int64 arrays
        Nested bin ids per feature, FINEST level first (as ``Binning.assign`` or
        :attr:`BinnedMatcher.bins`); ids unique within a level.
    xy : sequence of (m_i, 2) float arrays
        Feature positions normalised to ``[0, 1]`` by the image width and height.
    grid : int
        Finest grid side, a power of two >= 2 (4: 4x4 and 2x2 cells).
    word_level : int
        Level of ``bins`` whose bins are the words paired with positions (0 = finest).

    Returns
    -------
    (n, n) float64
        Symmetric kernel with unit diagonal (0 rows/columns for empty images).

    Notes
    -----
    Intersections are sparse dot products of unary-encoded bin counts (the ``t``-th point
    of an image in a bin sets coordinate ``(bin, t)``; thesis Sec. 5.1), one sparse product
    for all pairs; cost ~ ``n * nnz`` at worst, no Python loop over points or pairs.
    """

    if len(bins) != len(xy):
        raise ValueError(f"bins has {len(bins)} entries but xy has {len(xy)}")
    if grid < 2 or grid & (grid - 1):
        raise ValueError(f"grid must be a power of two >= 2, got {grid!r}")
    n = len(bins)
    if n == 0:
        return np.zeros((0, 0))
    B = [np.asarray(b, dtype=np.int64).reshape(len(b), -1) for b in bins]
    P = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in xy]
    L = {b.shape[1] for b in B if b.shape[0]}
    if len(L) > 1:
        raise ValueError("all bins arrays need the same number of levels")
    n_levels = L.pop() if L else max(b.shape[1] for b in B)
    if not 0 <= word_level < max(n_levels, 1):
        raise ValueError(f"word_level must be in [0, {n_levels - 1}], got {word_level!r}")
    for i, (b, p) in enumerate(zip(B, P, strict=True)):
        if b.shape[0] != p.shape[0]:
            raise ValueError(f"image {i}: {b.shape[0]} bins rows but {p.shape[0]} positions")
    sizes = np.array([b.shape[0] for b in B], dtype=np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    allb = np.concatenate(B) if owner.size else np.zeros((0, n_levels), np.int64)
    allp = np.clip(np.concatenate(P) if owner.size else np.zeros((0, 2)), 0.0, 1.0)
    word = allb[:, word_level] if owner.size else np.zeros(0, np.int64)
    levels = []
    g = grid
    while g >= 2:  # word x cell, finest grid first; nested since g halves
        cell = np.minimum((allp * g).astype(np.int64), g - 1)
        levels.append(word * (g * g) + cell[:, 0] * g + cell[:, 1])
        g //= 2
    levels += [allb[:, lev] for lev in range(n_levels)]
    if owner.size == 0:
        return np.zeros((n, n))
    E = _unary_embedding(levels, owner, n)
    K = np.asarray((E @ E.T).todense(), dtype=np.float64)
    d = np.sqrt(np.diag(K))
    d = np.where(d > 0, d, 1.0)
    return K / d[:, None] / d[None, :]


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------


def clustering_accuracy(truth: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy under the best one-to-one matching of groups to classes (Hungarian,
    ``scipy.optimize.linear_sum_assignment``); unmatched groups count as errors."""
    from scipy.optimize import linear_sum_assignment

    truth = np.asarray(truth)
    labels = np.asarray(labels)
    _, t = np.unique(truth, return_inverse=True)
    _, g = np.unique(labels, return_inverse=True)
    cm = np.zeros((g.max() + 1, t.max() + 1), np.int64)
    np.add.at(cm, (g, t), 1)
    r, c = linear_sum_assignment(-cm)
    return float(cm[r, c].sum() / truth.shape[0])


# --------------------------------------------------------------------------------------------
# the categorisation channel: dense SIFT per image, cached in the index
# --------------------------------------------------------------------------------------------

#: Settings of the categorisation features (:func:`category_features`). Part of the cache
#: key: changing any of them recomputes the channel.
CATEGORY_FEATURES: dict[str, Any] = {
    "side": 300,
    "max_features": 400,
    "windows": ((12, 8), (24, 12)),
    "trim": 245,
    "rootsift": True,
}
#: Bumped whenever :func:`category_features` changes its output for equal settings.
CATEGORY_FEATURES_VERSION = 1
#: Vocabulary of the categorisation kernel: branching and levels below the root.
CATEGORY_VOCAB = {"branching": 10, "levels": 3, "sample": 60_000}
#: Refit the categorisation vocabulary when the collection has grown this many times.
VOCAB_REFIT_GROWTH = 4.0
#: Images per cached chunk of dense features (an interrupted run keeps finished chunks).
DENSE_CHUNK = 64
#: Landmark images of the Nystrom approximation in :func:`categorize_iter`.
NYSTROM_LANDMARKS = 500

_VOCAB_STATE = "cluster.dense.vocab"
_VOCAB_EXTRA = ("settings_key", "n_fit", "token")


def _trim_box(gray: np.ndarray, thresh: int) -> tuple[int, int, int, int]:
    """``(r0, r1, c0, c1)`` of ``gray`` without a uniform white frame (rows / columns with
    fewer than 2 % pixels darker than ``thresh``); many Caltech photos have one and the
    thesis removed it too (Sec. 9.5). The full image when the rest would be tiny."""
    dark = gray < thresh
    keep_r = np.flatnonzero(dark.mean(axis=1) > 0.02)
    keep_c = np.flatnonzero(dark.mean(axis=0) > 0.02)
    h, w = gray.shape
    if keep_r.size < 16 or keep_c.size < 16:
        return 0, h, 0, w
    return int(keep_r[0]), int(keep_r[-1]) + 1, int(keep_c[0]), int(keep_c[-1]) + 1


def category_features(
    image: Any,
    *,
    side: int = 300,
    max_features: int = 400,
    windows: Sequence[Sequence[int]] = ((12, 8), (24, 12)),
    trim: int = 245,
    rootsift: bool = True,
    octaves: bool = True,
):
    """Dense multi-scale SIFT of one image for categorisation (thesis Sec. 9.5).

    The image is loaded upright in grey (at most 1024 pixels a side), a uniform white frame
    is cut off (``trim``: grey level above which a pixel counts as white; 0 disables), the
    rest is shrunk so its longest side is ``side`` pixels, and SIFT descriptors are computed
    on a regular grid of windows for every ``(size, step)`` in ``windows`` (pixels), then
    evenly subsampled to ``max_features``. Dense windows describe the object's surface
    uniformly, where keypoint detectors favour clutter and texture; on Caltech-4 the
    normalized cut reaches 0.95 with them against 0.89 with 300 keypoints.

    Parameters
    ----------
    image : path, bytes or ndarray
        Anything :func:`engine.imageio.load_gray` accepts, or an (H, W) / (H, W, 3) uint8
        array.
    side, max_features, windows, trim, rootsift
        See above (:data:`CATEGORY_FEATURES` holds the defaults used by the app).
    octaves : bool
        Describe a window of size z on the pyramid octave ``floor(log2(z / 6))`` (the
        image shrunk that many times): the same SIFT window from ~5x fewer pixels (about
        24 against 106 ms of CPU per image), the grouping's default. ``False`` samples
        every window at full resolution; learned similarity uses that
        (:data:`engine.feedback.LEARN_FEATURES`): on Caltech-101 (20 classes) the cosine
        of tf-idf bags gives precision@10 0.412 against 0.378, OASIS 0.550 against 0.477.

    Returns
    -------
    engine.features.Features
        ``descriptors`` (M, 128) float32 RootSIFT (unit L2 norm, values in [0, 1]); ``xy``
        (M, 2) float32 window centres in pixels of the image as loaded
        (``image_size``); ``kind = "category_dense"``.
    """
    import cv2

    from engine.features.keypoints import Features
    from engine.io.imageio import load_gray

    if isinstance(image, np.ndarray):
        gray = np.asarray(image)
        if gray.ndim == 3:
            gray = cv2.cvtColor(np.ascontiguousarray(gray[..., :3], np.uint8), cv2.COLOR_RGB2GRAY)
        if gray.ndim != 2:
            raise ValueError(f"image must be (H, W) or (H, W, 3), got shape {gray.shape}")
        gray = np.ascontiguousarray(gray, np.uint8)
    else:
        gray = load_gray(image, max_side=1024)
    H, W = gray.shape
    r0, r1, c0, c1 = _trim_box(gray, int(trim)) if trim else (0, H, 0, W)
    crop = gray[r0:r1, c0:c1]
    h, w = crop.shape
    s = min(1.0, float(side) / max(h, w, 1))
    if s < 1.0:
        crop = cv2.resize(crop, (max(1, round(w * s)), max(1, round(h * s))),
                          interpolation=cv2.INTER_AREA)  # fmt: skip
    h, w = crop.shape
    pts, sizes = [], []
    for size, step in windows:
        ys, xs = np.mgrid[size // 2 : h - size // 2 : step, size // 2 : w - size // 2 : step]
        pts.append(np.stack([xs.ravel(), ys.ravel()], axis=1))
        sizes.append(np.full(xs.size, float(size)))
    P = np.concatenate(pts).astype(np.float32) if pts else np.zeros((0, 2), np.float32)
    S = np.concatenate(sizes) if sizes else np.zeros(0)
    if P.shape[0] > max_features:
        sel = np.linspace(0, P.shape[0] - 1, max_features).astype(np.int64)
        P, S = P[sel], S[sel]
    desc = None
    if P.shape[0]:
        # Describe a window of size z on the pyramid octave o = floor(log2(z / 6)) (image
        # shrunk 2^o times): the same SIFT window, 5x fewer pixels to sample than octave 0.
        octs = np.maximum(np.floor(np.log2(S / 6.0)), 0).astype(int).tolist()
        if not octaves:  # every window on the full-resolution image
            octs = [0] * len(octs)
        kps = []
        for (x, y), z, o in zip(P.tolist(), S.tolist(), octs, strict=True):
            kp = cv2.KeyPoint(x, y, z)
            kp.octave = o & 255
            kps.append(kp)
        kps, desc = cv2.SIFT_create().compute(crop, kps)
    if desc is None or len(kps) == 0:
        D, xy = np.zeros((0, 128), np.float32), np.zeros((0, 2), np.float32)
    else:
        D = desc.astype(np.float32)
        if rootsift:
            D = np.sqrt(D / np.maximum(D.sum(axis=1, keepdims=True), 1e-12))
        else:
            D /= np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-12)
        xy = np.array([k.pt for k in kps], np.float32).reshape(-1, 2)
        xy = xy / np.float32(s) + np.array([c0, r0], np.float32)
    return Features(
        descriptors=np.ascontiguousarray(D, np.float32),
        xy=np.ascontiguousarray(xy, np.float32),
        scale=None,
        angle=None,
        image_size=(int(W), int(H)),
        kind="category_dense",
    )


def _category_extractor(data: bytes, **kwargs: Any):
    """Module-level extractor for :func:`engine.ingest.extract_parallel` workers."""
    return category_features(data, **kwargs)


def _settings_key(settings: dict[str, Any]) -> str:
    import json

    return json.dumps(
        {"v": CATEGORY_FEATURES_VERSION, **{k: settings[k] for k in sorted(settings)}},
        sort_keys=True, default=list,
    )  # fmt: skip


class CategoryChannel:
    """Dense categorisation features of a collection, computed lazily and cached.

    The index built by ``simile index`` holds sparse SIFT keypoints for retrieval; grouping
    works better on dense windows (:func:`category_features`). This channel computes them
    the first time a folder is grouped, in worker processes
    (:func:`engine.ingest.extract_parallel`), and keeps them in the index through the
    store's named arrays and key-value API, so indexing costs nothing extra.

    Storage: chunks of at most :data:`DENSE_CHUNK` images, each three arrays
    ``cluster.dense.<token>.{desc,xy,off}`` (descriptors as uint8 ``round(255 v)``, RootSIFT
    values lie in [0, 1]; xy float32; offsets (c+1,) int64), and a JSON manifest in the
    key-value table (``cluster.dense.manifest``) mapping every image's CONTENT HASH to
    ``(chunk, row, width, height)``. A chunk is written (atomically) before the manifest
    names it, so an interrupted run keeps every finished chunk and leaves a usable cache;
    unreferenced chunk files are deleted on the next update. Images are keyed by content,
    so renamed or moved photos are not recomputed; entries of images no longer in the
    collection are dropped and their chunks compacted once they are mostly dead.

    Parameters
    ----------
    store : engine.store.IndexStore
        The collection's store. Read-only stores work: missing features are then computed
        in memory and not kept.
    settings : dict, optional
        :func:`category_features` keyword arguments (default :data:`CATEGORY_FEATURES`).
    namespace : str
        Name of the cache in the index (``<namespace>.dense.*``): channels with different
        settings kept side by side (grouping uses ``"cluster"``, learned similarity
        ``"learn"``) never evict each other.
    """

    def __init__(
        self, store: Any, settings: dict[str, Any] | None = None, namespace: str = "cluster"
    ) -> None:
        import json

        self.store = store
        self.settings = dict(CATEGORY_FEATURES if settings is None else settings)
        self.key = _settings_key(self.settings)
        # each namespace has its own cache (grouping: "cluster", learned similarity: "learn")
        self._prefix = f"{namespace}.dense."
        self._kv = f"{namespace}.dense.manifest"
        raw = store.get_kv(self._kv)
        man = None
        if raw:
            try:
                man = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            except ValueError:
                man = None
        if not man or man.get("key") != self.key:
            man = {"key": self.key, "chunks": {}, "items": {}}
        self.manifest: dict[str, Any] = man
        self._memory: dict[str, tuple[np.ndarray, np.ndarray, tuple[int, int]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    # -- bookkeeping --------------------------------------------------------------------------
    def has(self, content_hash: str) -> bool:
        return content_hash in self.manifest["items"] or content_hash in self._memory

    def _write_manifest(self) -> None:
        import json

        self.store.set_kv(self._kv, json.dumps(self.manifest, separators=(",", ":")))

    def _chunk_names(self, token: str) -> tuple[str, str, str]:
        base = f"{self._prefix}{token}"
        return base + ".desc", base + ".xy", base + ".off"

    def _save_chunk(self, feats: list[tuple[str, Any]]) -> None:
        """Write one chunk of ``(content_hash, Features)`` and name it in the manifest."""
        import secrets

        token = secrets.token_hex(6)
        descs = [np.asarray(f.descriptors, np.float32) for _, f in feats]
        off = np.concatenate([[0], np.cumsum([d.shape[0] for d in descs])]).astype(np.int64)
        D = np.concatenate(descs) if descs else np.zeros((0, 128), np.float32)
        q = np.clip(np.rint(D * 255.0), 0, 255).astype(np.uint8)
        xy = np.concatenate([np.asarray(f.xy, np.float32).reshape(-1, 2) for _, f in feats])
        n_desc, n_xy, n_off = self._chunk_names(token)
        self.store.save_array(n_desc, q)
        self.store.save_array(n_xy, xy)
        self.store.save_array(n_off, off)
        self.manifest["chunks"][token] = len(feats)
        for row, (h, f) in enumerate(feats):
            self.manifest["items"][h] = [token, row, int(f.image_size[0]), int(f.image_size[1])]
        self._write_manifest()

    def _drop_chunk(self, token: str) -> None:
        for name in (*self._chunk_names(token), f"{self._prefix}{token}.bins"):
            if self.store.has_array(name):
                self.store.delete_array(name)
        self.manifest.get("bins", {}).pop(token, None)
        self._arrays.pop(token, None)

    def _collect_garbage(self, live: set[str]) -> None:
        """Forget images not in ``live`` (content hashes); compact mostly dead chunks;
        delete chunk files no manifest names (left by an interrupted run)."""
        items = self.manifest["items"]
        dead = [h for h in items if h not in live]
        for h in dead:
            del items[h]
        alive = np.zeros(0)
        if dead:
            per_chunk: dict[str, int] = {}
            for tok, _row, _w, _h in items.values():
                per_chunk[tok] = per_chunk.get(tok, 0) + 1
            alive = np.array([per_chunk.get(t, 0) for t in self.manifest["chunks"]])
            total = np.array(list(self.manifest["chunks"].values()))
            if total.sum() and alive.sum() < 0.5 * total.sum():  # compact everything
                keep = list(items)
                loaded = [(h, self.features(h)) for h in keep]
                old = list(self.manifest["chunks"])
                self.manifest["chunks"] = {}
                self.manifest["items"] = {}
                for s in range(0, len(loaded), DENSE_CHUNK):
                    self._save_chunk(loaded[s : s + DENSE_CHUNK])
                for tok in old:
                    self._drop_chunk(tok)
            else:
                for tok, a in zip(list(self.manifest["chunks"]), alive, strict=True):
                    if a == 0:
                        del self.manifest["chunks"][tok]
                        self._drop_chunk(tok)
            self._write_manifest()
        arrays = self.store.index_dir / "arrays"
        named = {f"{self._prefix}{t}" for t in self.manifest["chunks"]}
        for f in arrays.glob(self._prefix + "*.npy") if arrays.is_dir() else ():
            stem = f.name[: -len(".npy")]
            base = stem.rsplit(".", 1)[0]
            if base not in named and stem.rsplit(".", 1)[-1] in ("desc", "xy", "off", "bins"):
                self.store.delete_array(stem)

    # -- computing ----------------------------------------------------------------------------
    def update_iter(
        self,
        items: Sequence[tuple[str, str | None]],
        *,
        jobs: int | None = None,
        cancel: Any = None,
    ) -> Generator[ClusterProgress, None, int]:
        """Compute the features of every ``(path, content_hash)`` not cached yet.

        Yields ``ClusterProgress("features", done, total)``; returns the number of images
        computed. Work is spread over ``jobs`` processes; ``cancel`` (threading.Event) or
        closing the generator stops it, keeping finished chunks. Images that cannot be
        read get an empty feature set (they still take part in the grouping).
        """
        from engine.index.ingest import extract_parallel

        writable = not getattr(self.store, "readonly", False)
        if writable:
            self._collect_garbage({h for _, h in items if h})
        todo = [(p, h) for p, h in items if not h or not self.has(h)]
        seen: set[str] = set()
        todo = [(p, h) for p, h in todo if not (h in seen or seen.add(h))]  # type: ignore[func-returns-value]
        total = len(todo)
        yield ClusterProgress("features", 0, total, "dense features for grouping")
        if not total:
            return 0
        want = {p: h for p, h in todo}
        pending: list[tuple[str, Any]] = []
        done = 0
        results = extract_parallel(
            [p for p, _ in todo], jobs=jobs, cancel=cancel, feature_kwargs=self.settings,
            extractor=_category_extractor,
        )  # fmt: skip
        try:
            for r in results:
                h = want.get(r.path) or r.content_hash or r.path
                f = r.features
                if f is None:  # unreadable now: an empty set for this run, not cached
                    self._memory[h] = (np.zeros((0, 128), np.float32),
                                       np.zeros((0, 2), np.float32), (0, 0))  # fmt: skip
                elif writable:
                    pending.append((h, f))
                    if len(pending) >= DENSE_CHUNK:
                        self._save_chunk(pending)
                        pending = []
                else:
                    self._memory[h] = (f.descriptors, f.xy, f.image_size)
                done += 1
                yield ClusterProgress("features", done, total, "dense features for grouping")
        finally:
            if pending:
                self._save_chunk(pending)
            close = getattr(results, "close", None)
            if close is not None:
                close()
        return done

    # -- reading ------------------------------------------------------------------------------
    def _chunk(self, token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if token not in self._arrays:
            n_desc, n_xy, n_off = self._chunk_names(token)
            self._arrays[token] = (
                self.store.load_array(n_desc, mmap=True),
                self.store.load_array(n_xy, mmap=True),
                np.asarray(self.store.load_array(n_off, mmap=False), np.int64),
            )
        return self._arrays[token]

    def raw(self, content_hash: str) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """``(descriptors (m, 128) uint8 or float32, xy (m, 2) float32, (w, h))`` of one
        image (KeyError if it has not been computed)."""
        if content_hash in self._memory:
            d, xy, size = self._memory[content_hash]
            return d, xy, size
        tok, row, w, h = self.manifest["items"][content_hash]
        D, XY, off = self._chunk(tok)
        return D[off[row] : off[row + 1]], XY[off[row] : off[row + 1]], (int(w), int(h))

    def bins(
        self, hashes: Sequence[str], tree: Any, vocab_token: str, levels: int
    ) -> Generator[ClusterProgress, None, list[np.ndarray]]:
        """(m_i, levels) int64 bins of every image of ``hashes`` under ``tree``, finest
        first. Bins are cached per chunk (``cluster.dense.<token>.bins``, uint16/int32)
        and tagged with ``vocab_token``: a refitted vocabulary recomputes them, a chunk is
        assigned in one call. Yields ``ClusterProgress("bins", chunks done, chunks)``."""
        items = self.manifest["items"]
        tags = self.manifest.setdefault("bins", {})
        need = sorted({items[h][0] for h in hashes if h in items})
        writable = not getattr(self.store, "readonly", False)
        per_chunk: dict[str, np.ndarray] = {}
        dirty = False
        for done, tok in enumerate(need, 1):
            name = f"{self._prefix}{tok}.bins"
            B = None
            if vocab_token and tags.get(tok) == vocab_token and self.store.has_array(name):
                B = np.asarray(self.store.load_array(name, mmap=False))
                if B.ndim != 2 or B.shape[1] != levels:
                    B = None
            if B is None:
                D = self._chunk(tok)[0]
                B = (tree.assign(_as_float(np.asarray(D)))[0][:, :levels] if D.shape[0]
                     else np.zeros((0, levels), np.int64))  # fmt: skip
                B = B.astype(np.uint16 if B.size == 0 or B.max() < 65535 else np.int32)
                if writable and vocab_token:
                    self.store.save_array(name, B)
                    tags[tok] = vocab_token
                    dirty = True
            per_chunk[tok] = B
            yield ClusterProgress("bins", done, len(need), "visual words")
        if dirty:
            self._write_manifest()
        out = []
        for h in hashes:
            if h in self._memory:
                d = self._memory[h][0]
                out.append(tree.assign(_as_float(d))[0][:, :levels] if d.shape[0]
                           else np.zeros((0, levels), np.int64))  # fmt: skip
                continue
            tok, row, _w, _h = items[h]
            off = self._chunk(tok)[2]
            out.append(per_chunk[tok][off[row] : off[row + 1]].astype(np.int64))
        return out

    def features(self, content_hash: str):
        """:class:`engine.features.Features` of one image (float32 descriptors)."""
        from engine.features.keypoints import Features

        d, xy, size = self.raw(content_hash)
        return Features(_as_float(d), np.asarray(xy, np.float32), None, None, size,
                        "category_dense")  # fmt: skip


def _as_float(d: np.ndarray) -> np.ndarray:
    """uint8-quantised descriptors back to float32 (``v / 255``); float input unchanged."""
    if d.dtype == np.uint8:
        return d.astype(np.float32) * np.float32(1.0 / 255.0)
    return np.asarray(d, np.float32)


# --------------------------------------------------------------------------------------------
# vocabulary-guided pyramid match on binned sets
# --------------------------------------------------------------------------------------------


def _unary_embedding(
    levels: Sequence[np.ndarray], owner: np.ndarray, n: int, dw: np.ndarray | None = None
):
    """Sparse unary embedding of nested histograms: ``E[i] . E[j]`` is the pyramid match
    ``sum_l (w_l - w_{l+1}) I_l`` with ``w_l = 2^-l`` (thesis Eq. 3.13 and Sec. 5.1: the
    ``t``-th point of an image in a bin sets coordinate ``(bin, t)``, so a dot product of
    two such codes is the histogram intersection). ``levels`` finest first."""
    import scipy.sparse as sp

    if dw is None:
        w = 0.5 ** np.arange(len(levels))
        dw = w - np.append(w[1:], 0.0)
    rows, cols, vals = [], [], []
    offset = 0
    for lev, ids in enumerate(levels):
        if ids.size == 0:
            continue
        if ids.min() < 0 or ids.max() > 4 * ids.size:  # compact only sparse id ranges
            _, ids = np.unique(ids, return_inverse=True)
        order = np.lexsort((ids, owner))
        key = owner[order] * (int(ids.max()) + 1) + ids[order]
        start = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
        rank = np.arange(key.size) - np.repeat(start, np.diff(np.r_[start, key.size]))
        width = int(rank.max()) + 1
        rows.append(owner[order])
        cols.append(offset + ids[order] * width + rank)
        vals.append(np.full(key.size, np.sqrt(dw[lev]), np.float32))
        offset += (int(ids.max()) + 1) * width
    if not rows:
        return sp.csr_matrix((n, 1), dtype=np.float32)
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n, offset),
    )


def _as_bins(b: Any) -> np.ndarray:
    """(m, L) int64 view of one set's bins (a 1-D array is one level)."""
    b = np.asarray(b, np.int64)
    return b if b.ndim == 2 else b.reshape(-1, 1)


def _dense_intersections(
    ids: np.ndarray, owner: np.ndarray, n: int, cols: np.ndarray, n_bins: int
) -> np.ndarray:
    """``I[i, j] = sum_b min(h_i(b), h_cols[j](b))`` from dense (n, n_bins) histograms,
    in row chunks (levels with few bins, where nearly every image fills every bin)."""
    H = np.zeros((n, n_bins), np.float32)
    np.add.at(H, (owner, ids), 1.0)
    Hc = H[cols]
    out = np.empty((n, cols.size))
    step = max(1, int(4_000_000 // max(cols.size * n_bins, 1)))
    for s0 in range(0, n, step):
        out[s0 : s0 + step] = np.minimum(H[s0 : s0 + step, None, :], Hc[None, :, :]).sum(-1)
    return out


#: Levels with at most this many bins are intersected with dense histograms.
DENSE_LEVEL_BINS = 256


def binned_pyramid_kernel(
    bins: Sequence[np.ndarray], columns: np.ndarray | None = None
) -> np.ndarray:
    """Normalised vocabulary-guided pyramid match between binned sets (thesis Ch. 4).

    ``K(X, Y) = sum_l (w_l - w_{l+1}) I_l(X, Y)`` with level weights ``w_l = 2^-l`` from
    the finest level and ``I_l`` the histogram intersection of the bin counts at level l
    (Eq. 3.13), divided by ``sqrt(K(X, X) K(Y, Y)) = sqrt(|X| |Y|)`` (Eq. 3.12).

    Parameters
    ----------
    bins : sequence of (m_i, L) int arrays
        Nested bin ids per feature, finest level first, unique within a level.
    columns : (m,) int, optional
        Only the columns of these images (Nystrom landmarks): returns (n, m).

    Returns
    -------
    (n, n) or (n, m) float64
        Symmetric with unit diagonal for non-empty sets; empty sets give zero rows.

    Notes
    -----
    Fine levels (many bins, sparse counts) are intersected as sparse dot products of
    unary-encoded counts (Sec. 5.1); coarse levels (at most :data:`DENSE_LEVEL_BINS` bins,
    which nearly every image fills) as element-wise minima of dense histograms, where the
    unary code would be dense. No Python loop over images or points.
    """
    n = len(bins)
    cols = np.arange(n) if columns is None else np.asarray(columns, np.int64)
    if n == 0:
        return np.zeros((0, cols.size))
    B = [_as_bins(b) for b in bins]
    L = max(b.shape[1] for b in B)
    sizes = np.array([b.shape[0] for b in B], np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), sizes)
    allb = np.concatenate(B) if owner.size else np.zeros((0, L), np.int64)
    w = 0.5 ** np.arange(L)
    dw = w - np.append(w[1:], 0.0)
    K = np.zeros((n, cols.size))
    sparse_levels = []
    for lev in range(L):
        if owner.size == 0:
            break
        ids = allb[:, lev]
        if ids.min() >= 0 and ids.max() < DENSE_LEVEL_BINS:  # few bins: dense histograms
            K += dw[lev] * _dense_intersections(ids, owner, n, cols, int(ids.max()) + 1)
        else:
            sparse_levels.append(lev)
    if sparse_levels:
        E = _unary_embedding([allb[:, lev] for lev in sparse_levels], owner, n,
                             dw=dw[sparse_levels])  # fmt: skip
        K += np.asarray((E @ E[cols].T).todense(), np.float64)
    d = np.sqrt(sizes.astype(np.float64))  # K(X, X) = sum_l dw_l |X| = |X|
    d = np.where(d > 0, d, 1.0)
    return K / d[:, None] / d[cols][None, :]


def bin_correspondences(bins_a: np.ndarray, bins_b: np.ndarray):
    """Explicit correspondences of a pyramid match from bin ids alone (thesis 3.2.3, 9.3).

    From the finest level up, the r-th still unmatched point of A in a bin is paired with
    the r-th still unmatched point of B in that bin; a pair formed at level l weighs
    ``2^-l``. Vectorised per level (sort + join on (bin, rank)).

    Returns
    -------
    engine.pyramid.MatchResult
        ``pairs`` (P, 2) int64 indices into A and B, ``level`` (P,), ``weight`` (P,).
    """
    from engine.kernels.pyramid import MatchResult

    bins_a = np.asarray(bins_a, np.int64)
    bins_b = np.asarray(bins_b, np.int64)
    free_a = np.ones(bins_a.shape[0], bool)
    free_b = np.ones(bins_b.shape[0], bool)
    out_p, out_l = [], []
    n_levels = bins_a.shape[1] if bins_a.ndim == 2 else 0
    for lev in range(n_levels):
        ia, ib = np.flatnonzero(free_a), np.flatnonzero(free_b)
        if ia.size == 0 or ib.size == 0:
            break
        ka, kb = bins_a[ia, lev], bins_b[ib, lev]
        oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
        ia, ka, ib, kb = ia[oa], ka[oa], ib[ob], kb[ob]
        ra = np.arange(ka.size) - np.searchsorted(ka, ka, side="left")
        rb = np.arange(kb.size) - np.searchsorted(kb, kb, side="left")
        width = int(max(ra.max(), rb.max())) + 1
        _, pa, pb = np.intersect1d(ka * width + ra, kb * width + rb, assume_unique=True,
                                   return_indices=True)  # fmt: skip
        if pa.size:
            out_p.append(np.stack([ia[pa], ib[pb]], axis=1))
            out_l.append(np.full(pa.size, lev, np.int64))
            free_a[ia[pa]] = False
            free_b[ib[pb]] = False
    pairs = np.concatenate(out_p) if out_p else np.zeros((0, 2), np.int64)
    level = np.concatenate(out_l) if out_l else np.zeros(0, np.int64)
    weight = 0.5 ** level.astype(np.float64)
    return MatchResult(score=float(weight.sum()), pairs=pairs, level=level, weight=weight,
                       xy_a=None, xy_b=None)  # fmt: skip


# --------------------------------------------------------------------------------------------
# the categorisation pipeline shared by `simile cluster`, `simile classify` and the app
# --------------------------------------------------------------------------------------------


@dataclass
class CategoryModel:
    """What the pipeline needs to place images: the channel, the vocabulary and binned sets.

    Attributes
    ----------
    channel : CategoryChannel
    tree : engine.vocabulary.VocabularyTree
        Hierarchical k-means vocabulary fitted on the collection's dense features.
    paths : list of Path
        The collection's usable images (= ``Collection.paths()``).
    hashes : list of str
        Their content hashes (keys into ``channel``).
    bins : list of (m_i, L) int64
        Bin ids per feature, finest level first (the root level is left out).
    """

    channel: CategoryChannel
    tree: Any
    paths: list[Any]
    hashes: list[str]
    bins: list[np.ndarray]

    def bin_features(self, descriptors: np.ndarray) -> np.ndarray:
        """(m, L) int64 bins of new descriptors (e.g. an image to classify)."""
        d = _as_float(np.asarray(descriptors))
        levels = int(CATEGORY_VOCAB["levels"])
        if d.shape[0] == 0:
            return np.zeros((0, levels), np.int64)
        return self.tree.assign(d)[0][:, :levels]

    def kernel_rows(self, bins: Sequence[np.ndarray], columns: np.ndarray) -> np.ndarray:
        """Normalised pyramid match (q, len(columns)) of new binned sets against the
        collection images ``columns`` (row indices)."""
        cols = np.asarray(columns, np.int64)
        sets = list(bins) + [self.bins[int(c)] for c in cols]
        K = binned_pyramid_kernel(sets, columns=np.arange(len(bins), len(sets)))
        return K[: len(bins)]


@dataclass
class CategoryResult:
    """Result of :func:`categorize_iter` (rows = ``paths``).

    Attributes
    ----------
    paths : list of Path
    labels : (n,) int64
        Final group of every image, groups numbered by decreasing size.
    k : int
    k_reason : str
        Why this number of groups, and how the images were assigned.
    flow : (n,) float64
        Within-group flow used to order members (mask-weighted when refined).
    prototypes, outliers : (n,) bool
    clustering : Clustering
        The normalized cut before refinement.
    refinement : Refinement or None
        Feature masks (aligned with the dense features of :class:`CategoryChannel`).
    classifier : engine.classify.CategoryClassifier or None
        SVM trained on the prototypes (``train_ids_`` = rows of ``paths``).
    kernel : (n, n) float64 or None
        Exact affinities (None in Nystrom mode).
    model : CategoryModel
    seconds : dict of str to float
        Wall time per stage, ``"total"``, and ``"cpu"``: CPU seconds of this process
        (feature workers excluded), which a loaded machine does not inflate.
    """

    paths: list[Any]
    labels: np.ndarray
    k: int
    k_reason: str
    flow: np.ndarray
    prototypes: np.ndarray
    outliers: np.ndarray
    clustering: Clustering
    refinement: Refinement | None
    classifier: Any
    kernel: np.ndarray | None
    model: CategoryModel
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])


def _collection_rows(collection: Any) -> tuple[list[Any], list[str]]:
    """The collection's usable paths (row order) and their content hashes."""
    from pathlib import Path

    recs = collection.store.records("ok")
    paths = [Path(r.path) for r in recs]
    hashes = [r.content_hash or f"path:{r.path}:{r.size}:{r.mtime_ns}" for r in recs]
    return paths, hashes


def _vocab_sample(channel: CategoryChannel, hashes: Sequence[str], size: int, seed: int):
    """Up to ``size`` descriptors drawn evenly from the images (float32).

    Images are visited in content-hash order, so the sample (and the vocabulary fitted on
    it) does not depend on the order in which an index's workers happened to finish.
    """
    rng = np.random.default_rng(seed)
    hashes = sorted(hashes)
    counts = np.array([channel.raw(h)[0].shape[0] for h in hashes], np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros((0, 128), np.float32)
    frac = min(1.0, size / total)
    parts = []
    for h, c in zip(hashes, counts.tolist(), strict=True):
        if c == 0:
            continue
        take = int(rng.binomial(c, frac)) if frac < 1 else c
        if take:
            d = channel.raw(h)[0]
            parts.append(_as_float(np.asarray(d[np.sort(rng.choice(c, take, replace=False))])))
    return np.concatenate(parts) if parts else np.zeros((0, 128), np.float32)


def category_model_iter(
    collection: Any,
    *,
    jobs: int | None = None,
    cancel: Any = None,
    random_state: int = 0,
) -> Generator[ClusterProgress, None, CategoryModel]:
    """Dense channel (computed for new images), vocabulary (fitted once, refitted when the
    collection has grown :data:`VOCAB_REFIT_GROWTH` times) and binned sets of a collection.

    Yields ``ClusterProgress`` with stages ``"features"``, ``"vocabulary"``, ``"bins"``.
    """
    import secrets

    from engine.kernels.vocabulary import VocabularyTree

    store = collection.store
    channel = CategoryChannel(store)
    vocab_token = ""
    paths, hashes = _collection_rows(collection)
    yield from channel.update_iter(list(zip((str(p) for p in paths), hashes, strict=True)),
                                   jobs=jobs, cancel=cancel)  # fmt: skip
    if cancel is not None and cancel.is_set():
        raise InterruptedError("cancelled")
    missing = [h for h in hashes if not channel.has(h)]
    if missing:
        raise RuntimeError(f"{len(missing)} image(s) have no dense features (interrupted?)")
    n = len(paths)
    b, levels = int(CATEGORY_VOCAB["branching"]), int(CATEGORY_VOCAB["levels"])
    tree = None
    writable = not getattr(store, "readonly", False)
    if store.has_state(_VOCAB_STATE):
        try:
            st = store.load_state(_VOCAB_STATE)
            if str(st.get("settings_key")) == channel.key and (
                n <= VOCAB_REFIT_GROWTH * max(int(st["n_fit"]), 1)
            ):
                tree = VocabularyTree.from_state(
                    {k: v for k, v in st.items() if k not in _VOCAB_EXTRA}
                )
                vocab_token = str(st.get("token", ""))
                if not vocab_token and writable:  # tag it, so bins can be cached
                    vocab_token = secrets.token_hex(6)
                    store.save_state(_VOCAB_STATE, {**st, "token": vocab_token})
        except (KeyError, ValueError):
            tree = None
    if tree is None:
        yield ClusterProgress("vocabulary", 0, 1, "fitting the grouping vocabulary")
        sample = _vocab_sample(channel, hashes, int(CATEGORY_VOCAB["sample"]), random_state)
        if sample.shape[0] < b:
            raise ValueError("too few features in the collection to group its photos")
        tree = VocabularyTree(b, levels + 1, random_state=random_state).fit(sample)
        vocab_token = secrets.token_hex(6)
        if writable:
            store.save_state(_VOCAB_STATE, {**tree.to_state(), "settings_key": channel.key,
                                            "n_fit": n, "token": vocab_token})  # fmt: skip
        yield ClusterProgress("vocabulary", 1, 1, "fitting the grouping vocabulary")
    bins = yield from channel.bins(hashes, tree, vocab_token, levels)
    return CategoryModel(channel, tree, paths, hashes, bins)


def default_k_graph(n: int) -> int:
    """Neighbours of the graph whose eigengap chooses k: ``clip(n / 10, 10, 50)``."""
    return int(np.clip(round(n / 10), 10, 50))


def categorize_iter(
    collection: Any,
    *,
    k: int | str = "auto",
    must: Iterable[Sequence[int]] = (),
    cannot: Iterable[Sequence[int]] = (),
    power: float | None = None,
    k_min: int = 2,
    k_max: int = 12,
    refine: bool = True,
    relabel: bool = True,
    partners: int = 8,
    prototype_percentile: float = 25.0,
    nystrom: int | str = "auto",
    jobs: int | None = None,
    cancel: Any = None,
    random_state: int = 0,
) -> Generator[ClusterProgress, None, CategoryResult]:
    """Group a collection into categories: the pipeline of ``simile cluster`` and the app.

    1. Dense multi-scale SIFT per image (:class:`CategoryChannel`, computed once per image
       and cached in the index; the retrieval index keeps its sparse keypoints).
    2. Vocabulary-guided pyramid match (thesis Ch. 4) over a hierarchical k-means tree of
       those features (:func:`binned_pyramid_kernel`), exact below
       :data:`NYSTROM_AUTO_MIN` images, else Nystrom columns of
       :data:`NYSTROM_LANDMARKS` landmarks.
    3. Normalized cuts with the user's constraints (:func:`discover_categories_iter`); with
       ``k="auto"`` the eigengap of the ``default_k_graph(n)``-nearest-neighbour graph.
    4. Feature masks from explicit within-group correspondences, masked flow, prototypes
       and outliers (Sec. 9.3-9.4; :func:`refine_with_masks_iter`).
    5. An SVM on the precomputed kernel trained on the prototypes assigns every image
       (Sec. 9.4: the prototypes "train a classifier"); must-group constraints are kept.

    Parameters
    ----------
    collection : engine.collection.Collection
        An indexed collection (its store writable to cache the channel, else computed in
        memory).
    k, must, cannot, power, k_min, k_max, prototype_percentile
        As :func:`discover_categories` (constraints are row indices of
        ``collection.paths()``).
    refine : bool
        Step 4 (else prototypes and flow come from the affinities).
    relabel : bool
        Step 5.
    partners : int
        Group members matched per image in step 4.
    nystrom : "auto", bool or int
        Nystrom mode: ``"auto"`` above :data:`NYSTROM_AUTO_MIN` images, ``True``/``False``,
        or the number of landmarks.
    jobs, cancel
        Processes for the features and a ``threading.Event`` that stops the run (an
        ``InterruptedError`` is raised after the finished feature chunks are saved).

    Yields
    ------
    ClusterProgress
        Stages ``features``, ``vocabulary``, ``bins``, ``affinity``, ``spectrum``,
        ``discretize``, ``rank``, ``match``, ``masks``, ``classify``.

    Returns
    -------
    CategoryResult
    """
    import time

    if partners < 1:
        raise ValueError(f"partners must be >= 1, got {partners}")
    t0 = time.perf_counter()
    c0 = time.process_time()
    seconds: dict[str, float] = {}
    model = yield from category_model_iter(
        collection, jobs=jobs, cancel=cancel, random_state=random_state
    )
    t1 = time.perf_counter()
    seconds["features"] = t1 - t0
    n = len(model.paths)
    if n == 0:
        raise ValueError("there are no indexed images to group")
    if isinstance(k, int | np.integer) and int(k) > n:
        raise ValueError(f"k={k} is larger than the number of images ({n})")

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise InterruptedError("cancelled")

    use_nystrom = (n > NYSTROM_AUTO_MIN) if nystrom == "auto" else bool(nystrom)
    m_land = nystrom if isinstance(nystrom, int) and not isinstance(nystrom, bool) else None
    m_land = int(m_land or NYSTROM_LANDMARKS)
    must = [tuple(int(v) for v in p) for p in must]
    cannot = [tuple(int(v) for v in p) for p in cannot]
    yield ClusterProgress("affinity", 0, 1, "pyramid-match affinities")
    if use_nystrom and n > m_land:
        landmarks = choose_landmarks(n, m_land, must=must, cannot=cannot,
                                     random_state=random_state)  # fmt: skip
        C = binned_pyramid_kernel(model.bins, columns=landmarks)
        K = None
    else:
        landmarks, K = None, binned_pyramid_kernel(model.bins)
        C = K
    seconds["affinity"] = time.perf_counter() - t1
    check_cancel()
    t2 = time.perf_counter()
    kw = dict(k=k, must=must, cannot=cannot, power=power, k_min=min(k_min, max(n - 1, 1)),
              k_max=max(min(k_max, n - 1), 1), prototype_percentile=prototype_percentile,
              random_state=random_state)  # fmt: skip
    if landmarks is not None:
        kw["landmarks"] = landmarks
    elif n > 2:
        kw["k_graph"] = default_k_graph(n)
    if n == 1:
        res = Clustering(np.zeros(1, np.int64), 1, "k=1: a single image", np.ones(1),
                         np.zeros(1), np.ones(1, bool), np.zeros(1, bool))  # fmt: skip
    else:
        res = yield from discover_categories_iter(C, **kw)
    seconds["ncut"] = time.perf_counter() - t2
    check_cancel()
    labels, flow = res.labels.copy(), res.flow.copy()
    protos, outl = res.prototypes.copy(), res.outliers.copy()
    reason = res.k_reason
    refinement = None
    t3 = time.perf_counter()
    if refine and res.k >= 1 and n > 1:
        bins = model.bins
        gen = refine_with_masks_iter(
            bins, labels, BinsMatcher(bins),
            max_partners=partners, prototype_percentile=prototype_percentile,
            normalize="mask", random_state=random_state,
        )  # fmt: skip
        for p in gen_items(gen):
            if isinstance(p, Refinement):
                refinement = p
            else:
                check_cancel()
                yield p
        protos, outl, flow = refinement.prototypes, refinement.outliers, refinement.flow
    seconds["refine"] = time.perf_counter() - t3
    t4 = time.perf_counter()
    from engine.cluster.classify import CategoryClassifier

    classifier = None
    train = np.flatnonzero(protos)
    if landmarks is not None:  # the SVM needs kernel columns: prototypes among landmarks
        train = np.intersect1d(train, landmarks)
    if relabel and n > 2 and np.unique(labels[train]).size >= 2:
        yield ClusterProgress("classify", 0, 1, "SVM on the prototypes")
        if K is not None:
            K_tt, rows = K[np.ix_(train, train)], K[:, train]
        else:
            pos = np.searchsorted(landmarks, train)
            K_tt, rows = C[np.ix_(train, pos)], C[:, pos]
        classifier = CategoryClassifier(C=10.0, power=power).fit(K_tt, labels[train], ids=train)
        new = classifier.predict(rows).labels.astype(np.int64)
        new[train] = labels[train]  # the training images keep their group
        new = _enforce_must(new, _constraint_pairs(must, n, "must"))
        moved = new != labels
        if moved.any():
            reason += f"; {int(moved.sum())} image(s) reassigned by an SVM on the prototypes"
            # members that moved are ranked after the group's own members
            flow = np.where(moved, np.min(flow) - 1.0, flow) if flow.size else flow
            outl = outl & ~moved
            protos = protos & ~moved
        labels = new
        yield ClusterProgress("classify", 1, 1, "SVM on the prototypes")
    seconds["classify"] = time.perf_counter() - t4
    # groups numbered by decreasing size (empty ones removed); the SVM learns those numbers
    order = _relabel_by_size(labels)
    if classifier is not None:
        classifier = CategoryClassifier(C=10.0, power=power).fit(K_tt, order[train], ids=train)
    labels = order
    seconds["total"] = time.perf_counter() - t0
    seconds["cpu"] = time.process_time() - c0  # this process (not feature workers)
    return CategoryResult(
        paths=model.paths, labels=labels, k=int(labels.max()) + 1, k_reason=reason,
        flow=np.asarray(flow, np.float64), prototypes=protos, outliers=outl, clustering=res,
        refinement=refinement, classifier=classifier, kernel=K, model=model, seconds=seconds,
    )  # fmt: skip


def gen_items(gen: Generator[Any, None, Any]) -> Iterable[Any]:
    """Iterate a progress generator, yielding its items and finally its return value."""
    while True:
        try:
            yield next(gen)
        except StopIteration as stop:
            yield stop.value
            return


def categorize(collection: Any, **kwargs: Any) -> CategoryResult:
    """Drain :func:`categorize_iter` (same arguments)."""
    return run_to_end(categorize_iter(collection, **kwargs))


def _load_tree(store: Any, channel: CategoryChannel):
    """The stored categorisation vocabulary (KeyError when the folder was never grouped
    with the current feature settings)."""
    from engine.kernels.vocabulary import VocabularyTree

    st = store.load_state(_VOCAB_STATE)
    if str(st.get("settings_key")) != channel.key:
        raise KeyError(_VOCAB_STATE)
    return VocabularyTree.from_state({k: v for k, v in st.items() if k not in _VOCAB_EXTRA})


def _hash_of(collection: Any, path: Any) -> str:
    import os

    rec = collection.store.record(os.path.abspath(os.fspath(path)))
    if rec is None or rec.status != "ok":
        raise KeyError(f"{path} is not an indexed image")
    return rec.content_hash or f"path:{rec.path}:{rec.size}:{rec.mtime_ns}"


def category_features_of(collection: Any, path: Any):
    """The cached dense categorisation features of an indexed image (the features the
    masks of :func:`categorize_iter` refer to); computed on the fly when not cached."""
    channel = CategoryChannel(collection.store)
    h = _hash_of(collection, path)
    if channel.has(h):
        return channel.features(h)
    return category_features(path, **channel.settings)


def category_kernel_rows(
    collection: Any, images: Sequence[Any], columns: Sequence[Any]
) -> np.ndarray:
    """Normalised pyramid match (q, t) between new images and indexed ones, on the dense
    categorisation channel and the vocabulary stored by :func:`categorize_iter` (for
    :meth:`engine.classify.CategoryClassifier.predict`).

    Parameters
    ----------
    images : sequence of paths, bytes or arrays
        Images to place (inside or outside the collection).
    columns : sequence of paths
        Indexed images (e.g. the classifier's prototypes) whose dense features are cached.

    Raises
    ------
    KeyError
        The folder has not been grouped with the current settings (no vocabulary), or a
        column image is not cached.
    engine.imageio.ImageLoadError
        An image cannot be read.
    """
    channel = CategoryChannel(collection.store)
    tree = _load_tree(collection.store, channel)
    levels = int(CATEGORY_VOCAB["levels"])

    def binned(d: np.ndarray) -> np.ndarray:
        d = _as_float(np.asarray(d))
        return tree.assign(d)[0][:, :levels] if d.shape[0] else np.zeros((0, levels), np.int64)

    q = [binned(category_features(img, **channel.settings).descriptors) for img in images]
    cols = [binned(channel.raw(_hash_of(collection, p))[0]) for p in columns]
    K = binned_pyramid_kernel(q + cols, columns=np.arange(len(q), len(q) + len(cols)))
    return K[: len(q)]


def category_mask(
    collection: Any, path: Any, partners: Sequence[Any], *, max_partners: int = 8
) -> tuple[Any, np.ndarray]:
    """Feature mask of one image within its group, on the dense categorisation channel
    (thesis Sec. 9.3, as :func:`refine_with_masks` with ``indicator="weight"``).

    For each partner q the correspondence weights of the image's features in the
    pyramid match with q (:func:`bin_correspondences`) form an indicator vector; the mask is
    their median over at most ``max_partners`` partners, scaled to max 1.

    Returns
    -------
    features : engine.features.Features
        The image's dense features (``xy`` in pixels of the image loaded at 1024 px).
    mask : (m,) float32 in [0, 1]
    """
    channel = CategoryChannel(collection.store)
    tree = _load_tree(collection.store, channel)
    levels = int(CATEGORY_VOCAB["levels"])

    def binned(d: np.ndarray) -> np.ndarray:
        d = _as_float(np.asarray(d))
        return tree.assign(d)[0][:, :levels] if d.shape[0] else np.zeros((0, levels), np.int64)

    feats = category_features_of(collection, path)
    bi = binned(feats.descriptors)
    others = [q for q in partners if str(q) != str(path)][:max_partners]
    ind = np.zeros((max(len(others), 1), len(feats)), np.float32)
    for row, q in enumerate(others):
        r = bin_correspondences(bi, binned(category_features_of(collection, q).descriptors))
        ind[row, r.pairs[:, 0]] = r.weight
    mask = np.median(ind, axis=0).astype(np.float32) if others else ind[0]
    if mask.size and mask.max() > 0:
        mask /= mask.max()
    return feats, mask


class BinsMatcher:
    """Pyramid-match correspondences between binned sets, one pair or many at once.

    ``matcher(i, j)`` is :func:`bin_correspondences` of sets i and j;
    :meth:`match_many` computes a whole batch of pairs with a few sorts per level (no
    Python loop over pairs or points), which :func:`refine_with_masks_iter` uses when it
    is available. Results are identical.

    Parameters
    ----------
    bins : sequence of (m_i, L) int arrays
        Nested bin ids per feature, finest level first.
    """

    def __init__(self, bins: Sequence[np.ndarray]) -> None:
        B = [_as_bins(b) for b in bins]
        self.n_levels = max((b.shape[1] for b in B), default=0)
        self.sizes = np.array([b.shape[0] for b in B], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.all = (
            np.concatenate(B) if self.offsets[-1] else np.zeros((0, self.n_levels), np.int64)
        )
        self._bins = B
        owner = np.repeat(np.arange(len(B), dtype=np.int64), self.sizes)
        start = self.offsets[owner]
        self.width = [
            int(self.all[:, lev].max()) + 1 if self.all.shape[0] else 1
            for lev in range(self.n_levels)
        ]
        # per level: each image's local feature indices sorted by bin (stable), and the
        # bins in that order (contiguous, so a batch gathers each once)
        self.local_order, self.sorted_bins = [], []
        for lev in range(self.n_levels):
            col = np.ascontiguousarray(self.all[:, lev])
            order = np.argsort(owner * self.width[lev] + col, kind="stable")
            self.local_order.append(order - start)
            self.sorted_bins.append(col[order])

    def __len__(self) -> int:
        return len(self._bins)

    def __call__(self, i: int, j: int):
        return bin_correspondences(self._bins[i], self._bins[j])

    def _side(self, images: np.ndarray):
        """Slots of the features of ``images[q]`` (blocks in pair order): pair index,
        block start and global feature index, per slot."""
        cnt = self.sizes[images]
        q = np.repeat(np.arange(images.size, dtype=np.int64), cnt)
        blk = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
        blk_rep = np.repeat(blk, cnt)
        gidx = np.repeat(self.offsets[images] - blk, cnt) + np.arange(int(cnt.sum()))
        return q, blk_rep, gidx

    @staticmethod
    def _ranks(key: np.ndarray) -> np.ndarray:
        """Rank of every entry among equal keys of a SORTED key array (O(n))."""
        if key.size == 0:
            return key.copy()
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        return np.arange(key.size) - np.repeat(starts, np.diff(np.r_[starts, key.size]))

    def match_many(self, pairs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Correspondences of every ``(i, j)`` row of ``pairs`` (P, 2): a list of
        ``(pairs (c, 2) int64 local feature indices, weight (c,) float64 = 2^-level)``.

        Every image's features are pre-sorted by bin at every level, so the features of a
        batch of pairs come out sorted by (pair, bin) without sorting; ranks within a bin
        and the join on (pair, bin, rank) are linear passes and one binary search."""
        pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
        P = pairs.shape[0]
        sides = [self._side(pairs[:, 0]), self._side(pairs[:, 1])]
        free = [np.ones(sd[0].size, bool) for sd in sides]
        out_q, out_a, out_b, out_l = [], [], [], []
        for lev in range(self.n_levels):
            width = int(self.width[lev])
            keys, slots = [], []
            for sd, fr in zip(sides, free, strict=True):
                q, blk, gidx = sd
                pos = blk + self.local_order[lev][gidx]  # slot of the bin-sorted feature
                keep = fr[pos]
                keys.append(q[keep] * width + self.sorted_bins[lev][gidx[keep]])
                slots.append(pos[keep])
            if keys[0].size == 0 or keys[1].size == 0:
                break
            ra, rb = self._ranks(keys[0]), self._ranks(keys[1])
            rw = int(max(ra.max(), rb.max())) + 1
            ca, cb = keys[0] * rw + ra, keys[1] * rw + rb
            j = np.searchsorted(cb, ca)
            ok = j < cb.size
            ok[ok] = cb[j[ok]] == ca[ok]
            ia, ib = slots[0][ok], slots[1][j[ok]]
            if ia.size:
                out_q.append(sides[0][0][ia])
                out_a.append(ia)
                out_b.append(ib)
                out_l.append(np.full(ia.size, lev, np.int64))
                free[0][ia] = False
                free[1][ib] = False
        if not out_q:
            empty = (np.zeros((0, 2), np.int64), np.zeros(0))
            return [empty] * P
        q = np.concatenate(out_q)
        ia, ib = np.concatenate(out_a), np.concatenate(out_b)
        la, lb = ia - sides[0][1][ia], ib - sides[1][1][ib]  # slot - block start
        lev = np.concatenate(out_l)
        order = np.lexsort((la, lev, q))  # per pair: finest level first, then A's index
        q, la, lb, lev = q[order], la[order], lb[order], lev[order]
        bounds = np.searchsorted(q, np.arange(P + 1))
        w = 0.5 ** lev.astype(np.float64)
        pl = np.stack([la, lb], axis=1)
        return [(pl[bounds[t] : bounds[t + 1]], w[bounds[t] : bounds[t + 1]]) for t in range(P)]
