"""Unsupervised categories by normalized cuts on pyramid-match affinities (thesis Sec. 9.2).

:func:`discover_categories` (and its generator twin :func:`discover_categories_iter`) ties
the steps together: affinities (:mod:`engine.cluster.affinity`), the person's constraints
(:mod:`engine.cluster.constraints`), the spectral embedding, the number of groups and its
discretisation, exact or Nystrom (:mod:`engine.cluster.ncut`), and the members' ranking
(:mod:`engine.cluster.ranking`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any

import numpy as np

from engine.cluster.affinity import knn_graph, prepare_affinity
from engine.cluster.constraints import (
    apply_constraints,
    constraint_pairs,
    enforce_must,
    relabel_by_size,
)
from engine.cluster.ncut import (
    discretize_embedding,
    eigengap_k,
    ncut_embedding,
    normalized_cut_value,
    nystrom_embedding,
    recursive_ncut,
    sparse_graph_spectrum,
)
from engine.cluster.ranking import flag_members, rank_groups
from engine.cluster.results import Clustering, ClusterProgress
from engine.cluster.scenes import JOIN_THRESHOLD, join_groups
from engine.cluster.stability import finer_stable_k
from engine.core.blas import single_threaded_blas
from engine.core.progress import run_to_end
from engine.core.validate import check_choice

__all__ = [
    "AUTO_K_MAX",
    "EIGENGAP_K_MAX",
    "LANDMARK_GRAPH_MIN",
    "consensus_cut",
    "discover_categories",
    "discover_categories_iter",
    "landmark_graph_sizes",
]

#: Largest k the eigengap compares by default: on the hand-made affinities every setting of
#: it was chosen over k in 2..12 (the grouping pipeline lets it reach ``k_max`` when its
#: affinities include the semantic channel: ``discover_categories_iter(eigengap_max=)``).
EIGENGAP_K_MAX = 12
#: Default largest number of groups of ``k="auto"``: above :data:`EIGENGAP_K_MAX` only the
#: stability check of finer partitions (:func:`engine.cluster.stability.finer_stable_k`)
#: reaches it. Raised from 12 on 2026-11-28 for folders of many small subjects (20
#: UKBench objects, 18 Holidays scenes: k was 2-10 for 18-20 subjects, see
#: :func:`~engine.cluster.stability.finer_stable_k`).
AUTO_K_MAX = 30
#: Fewest neighbours of a graph among Nystrom landmarks (:func:`landmark_graph_sizes`).
LANDMARK_GRAPH_MIN = 5


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
    k_max: int = AUTO_K_MAX,
    landmarks: np.ndarray | None = None,
    n_init: int = 10,
    prototype_percentile: float = 25.0,
    outlier_z: float = 3.0,
    random_state: int = 0,
    k_graph: int | Sequence[int] | None = None,
    k_kernel: np.ndarray | None = None,
    views: Sequence[np.ndarray] = (),
    view_runs: int = 3,
    k_stability: bool = True,
    join: np.ndarray | None = None,
    join_threshold: float = JOIN_THRESHOLD,
    eigengap_max: int = EIGENGAP_K_MAX,
) -> Generator[ClusterProgress, None, Clustering]:
    """Generator form of :func:`discover_categories`; yields :class:`ClusterProgress` and
    returns the :class:`Clustering` (``StopIteration.value``)."""
    _check_options(k, k_graph, method, discretize, k_min, k_max)
    C = np.asarray(kernel, dtype=np.float64)
    if C.ndim != 2:
        raise ValueError(f"kernel must be a 2-D matrix, got shape {C.shape}")
    n = C.shape[0]
    if n == 0:
        raise ValueError("kernel is empty: nothing to group")
    must_a = constraint_pairs(must, n, "must")
    cannot_a = constraint_pairs(cannot, n, "cannot")
    if isinstance(k, int | np.integer) and int(k) > n:
        raise ValueError(f"k={k} is larger than the number of images ({n})")
    Ck = None
    if k_kernel is not None and k == "auto":
        Ck = np.asarray(k_kernel, dtype=np.float64)
        if Ck.shape != C.shape:
            raise ValueError(f"k_kernel must have the kernel's shape {C.shape}, got {Ck.shape}")

    yield ClusterProgress("affinity", 0, 1, "preparing affinities")
    if landmarks is not None and len(views):
        raise ValueError("views need exact affinities: pass no landmarks with them")
    for v in views:
        if np.shape(v) != C.shape:
            raise ValueError(f"a view must have the kernel's shape {C.shape}: {np.shape(v)}")
    if landmarks is not None:
        landmarks = np.asarray(landmarks, dtype=np.int64)
        res = yield from _discover_nystrom(
            C, landmarks, k, must_a, cannot_a, power, discretize, k_min, k_max, n_init,
            prototype_percentile, outlier_z, random_state, Ck, eigengap_max, k_graph,
            k_stability,
        )  # fmt: skip
        return res
    W = _exact_affinities(C, must_a, cannot_a, power, empirical)
    yield ClusterProgress("affinity", 1, 1, f"{n} images")

    if n == 1:
        labels = np.zeros(1, np.int64)
        return Clustering(
            labels, 1, "k=1: a single image", np.ones(1), np.zeros(1), np.ones(1, bool),
            np.zeros(1, bool), 0.0, method, discretize,
        )  # fmt: skip
    q = min(n - 1, (min(k_max, eigengap_max) if k == "auto" else int(k)) + 1)
    q = max(q, 1)
    yield ClusterProgress("spectrum", 0, 1, f"{q} leading eigenvectors of {n}x{n}")
    values, vectors = ncut_embedding(W, q)
    yield ClusterProgress("spectrum", 1, 1)
    if Ck is None:
        kk, reason, finer = _choose_k(
            W, values, q, k, k_graph, k_min, k_max, k_stability, random_state, eigengap_max
        )
    else:  # the number of groups from other affinities (the same constraints)
        Wk = _exact_affinities(Ck, must_a, cannot_a, power, empirical)
        own = not _graph_sizes(k_graph, n)  # else the graphs' own spectra
        values_k = ncut_embedding(Wk, q)[0] if own else values
        kk, reason, finer = _choose_k(
            Wk, values_k, q, k, k_graph, k_min, k_max, k_stability, random_state, eigengap_max
        )
    if kk >= vectors.shape[1] and method == "spectral":  # a finer k than the eigengap's
        values, vectors = ncut_embedding(W, min(n - 1, kk + 1))
    yield ClusterProgress("discretize", 0, 1, f"k={kk}")
    if method == "recursive":
        labels = recursive_ncut(W, kk)
    elif len(views) and kk > 1:
        views_w = [W] + [
            _exact_affinities(np.asarray(v, np.float64), must_a, cannot_a, power, empirical)
            for v in views
        ]
        labels = consensus_cut(
            views_w, kk, vectors=vectors, discretize=discretize, n_init=n_init,
            runs=view_runs, random_state=random_state,
        )  # fmt: skip
        reason += f"; the consensus of {view_runs} cuts of each of {len(views) + 1} views"
    else:
        labels = discretize_embedding(vectors, kk, discretize, n_init, random_state)
    labels = relabel_by_size(enforce_must(labels, must_a))
    if finer and join is not None:
        labels, joined, moved = join_groups(labels, join, join_threshold, cannot_a)
        if moved:
            labels = relabel_by_size(labels)
            reason += (
                f"; {moved} photo(s) moved back to the group of the same object or place, "
                f"as the search finds (groups linked with mean probability >= "
                f"{join_threshold}; {joined} group(s) joined entirely)"
            )
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


def _check_options(
    k: int | str,
    k_graph: int | Sequence[int] | None,
    method: str,
    discretize: str,
    k_min: int,
    k_max: int,
) -> None:
    """Validate the options of :func:`discover_categories_iter` (``ValueError`` naming the
    option)."""
    sizes = () if k_graph is None else np.atleast_1d(np.asarray(k_graph)).ravel()
    if k_graph is not None and (sizes.size == 0 or np.any(sizes < 1)):
        raise ValueError(
            f"k_graph must be a positive integer, a sequence of them, or None, got {k_graph!r}"
        )
    check_choice(method, "method", ("spectral", "recursive"))
    check_choice(discretize, "discretize", ("kmeans", "yu_shi"))
    if isinstance(k, str):
        check_choice(k, "k", ("auto",))
    elif int(k) < 1:
        raise ValueError(f"k must be >= 1 or 'auto', got {k!r}")
    if k_min < 1 or k_max < k_min:
        raise ValueError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")


def _graph_sizes(k_graph: int | Sequence[int] | None, n: int) -> list[int]:
    """The neighbour counts of ``k_graph`` (an int or a sequence) below ``n - 1``: the
    graphs whose spectra choose k (none: the affinities' own spectrum)."""
    if k_graph is None:
        return []
    return sorted({int(m) for m in np.atleast_1d(np.asarray(k_graph)).ravel() if n > int(m) + 1})


def _choose_k(
    W: np.ndarray,
    values: np.ndarray,
    q: int,
    k: int | str,
    k_graph: int | Sequence[int] | None,
    k_min: int,
    k_max: int,
    stability: bool = True,
    random_state: int = 0,
    eigengap_max: int = EIGENGAP_K_MAX,
) -> tuple[int, str, bool]:
    """Number of groups, why, and whether the stability check made it finer than the
    eigengap's (exact mode): given by the user, or the relative eigengap
    of the spectrum ``values`` (q,) of the affinities ``W`` (n, n) -- or, with ``k_graph``,
    of its ``k_graph``-nearest-neighbour graph (:func:`engine.cluster.affinity.knn_graph`);
    with several sizes, the mean relative gap of their spectra
    (:func:`engine.cluster.ncut.eigengap_k`), then, with ``stability``, checked against
    the finer partitions those graphs cannot see (:func:`finer_stable_k`)."""
    n = W.shape[0]
    sizes = _graph_sizes(k_graph, n)
    if k == "auto" and sizes:
        spectra = np.stack([sparse_graph_spectrum(knn_graph(W, m), q) for m in sizes])
        kk, reason = eigengap_k(spectra, k_min, min(k_max, eigengap_max))
        names = ", ".join(str(m) for m in sizes)
        reason += f" of the {names}-nearest-neighbour graph" + ("s" if len(sizes) > 1 else "")
        if stability:
            k_eig = kk
            kk, why = finer_stable_k(W, kk, sizes[0], k_max, random_state=random_state)
            return kk, reason + why, kk > k_eig
    elif k == "auto":
        kk, reason = eigengap_k(values, k_min, min(k_max, eigengap_max))
    else:
        kk, reason = int(k), f"k={int(k)} given by the user"
    return kk, reason, False


def _discover_nystrom(
    C, landmarks, k, must_a, cannot_a, power, discretize, k_min, k_max, n_init,
    prototype_percentile, outlier_z, random_state, Ck=None, eigengap_max=EIGENGAP_K_MAX,
    k_graph=None, stability=True,
):  # fmt: skip
    """Nystrom mode of :func:`discover_categories_iter` (same arguments, ``C`` the (n, m)
    landmark columns, ``Ck`` those of ``k_kernel`` or None): constraints written into the
    columns, approximate spectrum (:func:`engine.cluster.ncut.nystrom_embedding`), and
    flow, prototypes and outliers from the affinities to the landmark members of each
    group. With ``k_graph``, automatic k is read as in exact mode (:func:`_choose_k`) from
    the landmarks' own (m, m) block, on graphs of proportionally fewer neighbours
    (:func:`landmark_graph_sizes`); else from the eigengap of the Nystrom spectrum."""
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
    if power is not None and not 0 < power <= 1:
        raise ValueError(f"power must be in (0, 1], got {power!r}")
    W = _landmark_affinities(C, landmarks, must_a, cannot_a, power)
    yield ClusterProgress("affinity", 1, 1, f"{n} images, {m} landmarks (Nystrom)")
    q = min(m, (min(k_max, eigengap_max) if k == "auto" else int(k)) + 1)
    yield ClusterProgress("spectrum", 0, 1, f"Nystrom extension of {q} eigenvectors")
    with single_threaded_blas():  # m x m problems: thread hand-offs cost more than they save
        values, vectors = nystrom_embedding(W, landmarks, q)
        if Ck is not None:  # the number of groups from other affinities
            Wk = _landmark_affinities(Ck, landmarks, must_a, cannot_a, power)
            values = nystrom_embedding(Wk, landmarks, q)[0]
    yield ClusterProgress("spectrum", 1, 1)
    if k == "auto" and k_graph is not None:
        block = (C if Ck is None else Ck)[landmarks]
        pos = np.full(n, -1, np.int64)
        pos[landmarks] = np.arange(m)
        W_ll = _exact_affinities(block, pos[must_a], pos[cannot_a], power, False)
        sizes = landmark_graph_sizes(k_graph, n, m)
        kk, reason, _ = _choose_k(W_ll, values, q, "auto", sizes, k_min, min(k_max, m - 1),
                                  stability, random_state, eigengap_max)  # fmt: skip
        reason += f" (among the {m:,} landmarks of {n:,} images, Nystrom)"
    elif k == "auto":
        kk, reason = eigengap_k(values, k_min, min(k_max, eigengap_max))
        reason += f" (Nystrom, {m} landmarks)"
    else:
        kk, reason = int(k), f"k={int(k)} given by the user"
    labels = discretize_embedding(vectors, kk, discretize, n_init, random_state)
    labels = relabel_by_size(enforce_must(labels, must_a))
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
    protos, outl = flag_members(
        labels, kk, flow, mean_own, best_other, prototype_percentile, outlier_z
    )
    yield ClusterProgress("rank", 1, 1)
    return Clustering(
        labels=labels, k=kk, k_reason=reason, eigenvalues=values, flow=flow,
        prototypes=protos, outliers=outl, ncut=float("nan"), method="nystrom",
        discretize=discretize,
    )  # fmt: skip


def landmark_graph_sizes(k_graph: int | Sequence[int], n: int, m: int) -> tuple[int, ...]:
    """Neighbour counts among ``m`` uniformly sampled landmarks that stand for ``k_graph``
    neighbours among all ``n`` images: a group of g images has about g m / n landmarks,
    so each count is scaled by m / n (at least :data:`LANDMARK_GRAPH_MIN`, below m - 1).

    Measured (2026-11-29, issue #22) by forcing Nystrom mode on every grouping task of
    ``tests/benchmarks/quality.py`` (``--grouping-landmarks 0.1``: 10 % of the photos as
    landmarks, 60 to n - 1), mean over the 9 families of the accuracy with automatic k and
    the share of tasks with k within 1: 0.854 and 0.64, against 0.398 and 0.20 with k read
    from the eigengap of the pyramid match's Nystrom spectrum among 2-12 as before (exact
    mode: 0.927 and 0.84). On the recorded affinities, 3 landmark samples a task: 0.907 /
    0.77 with half the photos as landmarks, 0.884 / 0.70 with a quarter, 0.873 / 0.66 with
    a tenth; the same graphs of 20-35 neighbours unscaled 0.867 / 0.56 (half); without the
    stability check, which with 500 landmarks never runs, 0.687 / 0.38 (a tenth)."""
    sizes = [k_graph] if isinstance(k_graph, int | np.integer) else list(k_graph)
    cap = max(1, m - 2)
    return tuple(sorted({min(cap, max(LANDMARK_GRAPH_MIN, round(s * m / n))) for s in sizes}))


def _exact_affinities(
    C: np.ndarray,
    must_a: np.ndarray,
    cannot_a: np.ndarray,
    power: float | None,
    empirical: bool,
) -> np.ndarray:
    """The (n, n) kernel ``C`` as the cut's affinities (:func:`prepare_affinity`) with the
    constraints written in and a zero diagonal (self-affinity plays no role in a cut,
    Ng-Jordan-Weiss)."""
    W = prepare_affinity(C, power=power, empirical=empirical)
    np.fill_diagonal(W, 1.0)
    apply_constraints(W, must_a, cannot_a)
    np.fill_diagonal(W, 0.0)
    return W


def _landmark_affinities(
    C: np.ndarray,
    landmarks: np.ndarray,
    must_a: np.ndarray,
    cannot_a: np.ndarray,
    power: float | None,
) -> np.ndarray:
    """Nystrom mode: the (n, m) landmark columns ``C`` as affinities (clipped at 0, the
    ``power`` map) with the constraints written in (maximal value resp. 0)."""
    n, m = C.shape
    W = np.maximum(np.asarray(C, np.float64), 0.0)
    if power is not None:
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
    return W


def consensus_cut(
    affinities: Sequence[np.ndarray],
    k: int,
    *,
    vectors: np.ndarray | None = None,
    discretize: str = "kmeans",
    n_init: int = 10,
    runs: int = 3,
    random_state: int = 0,
) -> np.ndarray:
    """The partition several affinities agree on: evidence accumulation over their cuts.

    Every affinity matrix is cut into ``k`` groups ``runs`` times (its normalized-cut
    embedding discretised with seeds ``random_state + r``); ``A_ij`` is the share of those
    partitions that put i and j together (the co-association matrix of Fred & Jain,
    "Combining multiple clusterings using evidence accumulation", PAMI 2005), and the
    result is the normalized cut of ``A`` (a consensus of the kind Strehl & Ghosh, JMLR
    2002, call cluster-based similarity partitioning). Where one view's cut is unstable or
    follows a cue the others do not share, the pairs it alone puts together get a low
    share.

    Parameters
    ----------
    affinities : sequence of (n, n) float64
        Symmetric non-negative affinities with the diagonal already zero (as the cut uses
        them, constraints written in).
    k : int
        Number of groups, ``1 <= k < n``.
    vectors : (n, q) float64, optional
        The first affinity's leading eigenvectors, when already computed (``q > k``).
    discretize, n_init, random_state
        As :func:`discover_categories`.
    runs : int
        Partitions per affinity.

    Returns
    -------
    (n,) int64
        Labels in ``[0, k)``.
    """
    mats = [np.asarray(a, np.float64) for a in affinities]
    n = mats[0].shape[0]
    if k <= 1 or n <= k + 1:
        return discretize_embedding(
            ncut_embedding(mats[0], max(min(k + 1, n - 1), 1))[1]
            if vectors is None
            else vectors,
            k, discretize, n_init, random_state,
        )  # fmt: skip
    A = np.zeros((n, n))
    parts = 0
    for i, W in enumerate(mats):
        V = vectors if (i == 0 and vectors is not None) else ncut_embedding(W, k + 1)[1]
        for r in range(max(int(runs), 1)):
            lab = discretize_embedding(V, k, discretize, n_init, random_state + r)
            A += lab[:, None] == lab[None, :]
            parts += 1
    A /= parts
    A += 1e-6  # (a connected graph even where no cut agrees)
    np.fill_diagonal(A, 0.0)
    V = ncut_embedding(A, k + 1)[1]
    return discretize_embedding(V, k, discretize, n_init, random_state)


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
        Range of ``k="auto"``: the eigengap compares k up to ``min(k_max, eigengap_max)``;
        finer k up to ``k_max`` are reached only by the stability check (``k_stability``).
    k_graph : int or sequence of int, optional
        With ``k="auto"`` (exact mode), read the eigengap from the spectrum of the
        symmetric ``k_graph``-nearest-neighbour graph of the affinities
        (:func:`knn_graph`) instead of the full affinities -- with several sizes, the
        mean relative gap over their graphs (sizes ``>= n - 1`` are left out); the cut
        itself still uses the full affinities. In Nystrom mode the same is done on the
        landmarks' own (m, m) block of the columns, with the sizes scaled to the sample
        (:func:`landmark_graph_sizes`); without ``k_graph`` Nystrom mode reads the
        eigengap of its approximate spectrum.
    k_kernel : array_like, optional
        With ``k="auto"``: read the number of groups (the eigengap, with ``k_graph`` of
        its nearest-neighbour graph) from these affinities instead, of ``kernel``'s shape
        (the same columns in Nystrom mode) and with the same constraints; the cut uses
        ``kernel``. :func:`engine.cluster.categorize_iter` passes the pyramid match alone
        while cutting its mix with the appearance kernel.
    views : sequence of (n, n) float arrays, optional
        Other affinities of the same images (exact mode, ``method="spectral"``): the groups
        are the consensus of ``view_runs`` cuts of ``kernel`` and of every view into the
        same k groups (:func:`consensus_cut`); k, the eigenvalues, the ranking and the
        Ncut value still come from ``kernel``. The constraints are written into every view.
    view_runs : int
        Cuts per affinity in the consensus.
    k_stability : bool
        With ``k="auto"`` and ``k_graph``: the graphs' k gives way to a finer partition
        those graphs cannot see when cuts of random subsamples agree on it at least 85 %
        as well (:func:`engine.cluster.stability.finer_stable_k`; folders of 22 to
        ``k_max * min(k_graph) / 2`` photos).
    join : (n, n) float array, optional
        Where the stability check chose a finer k: the probability that two images show
        the same object or place (:func:`engine.cluster.scene_probabilities_iter`); groups
        whose images it links by ``join_threshold`` on average are joined back
        (:func:`engine.cluster.scenes.join_groups`; cannot-group constraints kept).
    join_threshold : float
        Mean probability between two groups that joins them.
    eigengap_max : int
        Largest k the eigengap compares (default :data:`EIGENGAP_K_MAX`; the grouping
        pipeline passes ``k_max`` when its affinities include the semantic channel, whose
        gaps above 12 are reliable, :mod:`engine.cluster.semantic`).
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
    >>> from engine.cluster import discover_categories
    >>> rng = np.random.default_rng(0)
    >>> truth = np.repeat([0, 1, 2], 20)
    >>> K = np.where(truth[:, None] == truth[None, :], 0.6, 0.1) + 0.05 * rng.random((60, 60))
    >>> K = (K + K.T) / 2; np.fill_diagonal(K, 1.0)
    >>> res = discover_categories(K, k="auto")
    >>> res.k, np.bincount(res.labels).tolist()
    (3, [20, 20, 20])
    """
    return run_to_end(discover_categories_iter(kernel, **kwargs))
