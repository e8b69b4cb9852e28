"""Normalized cuts (Shi & Malik; thesis Eq. 9.1) and their Nystrom approximation.

The spectral machinery behind :func:`engine.cluster.discover_categories`: the leading
eigenvectors of ``D^-1/2 W D^-1/2`` (:func:`ncut_embedding`), their discretisation into k
groups (k-means after Ng, Jordan & Weiss, or Yu & Shi's rotation), the number of groups from
the relative eigengap (:func:`eigengap_k`), recursive two-way cuts, the Ncut value of a
partition, and the Nystrom extension from sampled landmark columns for large collections
(Fowlkes, Belongie, Chung & Malik 2004; :func:`choose_landmarks`, :func:`nystrom_embedding`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from engine.cluster.constraints import constraint_pairs

__all__ = [
    "DENSE_COMPONENT_MAX",
    "DENSE_EIG_MAX",
    "choose_landmarks",
    "discretize_embedding",
    "eigengap_k",
    "ncut_embedding",
    "normalized_cut_value",
    "nystrom_embedding",
    "recursive_ncut",
    "sparse_graph_spectrum",
]


#: Below this many images the spectrum is computed with a dense solver (scipy.linalg.eigh).
DENSE_EIG_MAX = 2000


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
        if vals.size < q:  # (LAPACK's subset driver can return fewer where values cluster,
            # e.g. at 1 for groups that share no affinity: the whole spectrum then)
            vals, vecs = eigh(M, driver="evd")
            vals, vecs = vals[n - q :], vecs[:, n - q :]
    else:
        from scipy.sparse.linalg import eigsh

        rng = np.random.default_rng(0)
        vals, vecs = eigsh(M, k=q, which="LA", v0=rng.standard_normal(n), tol=1e-8)
    order = np.argsort(-vals)
    return vals[order], vecs[:, order]


#: Connected components of a graph up to this many nodes get the dense symmetric solver in
#: :func:`sparse_graph_spectrum`; larger ones Lanczos.
DENSE_COMPONENT_MAX = 600


def sparse_graph_spectrum(G: np.ndarray, n_values: int) -> np.ndarray:
    """Leading eigenvalues of ``D^-1/2 G D^-1/2`` for a sparse graph ``G`` (n, n) float64,
    e.g. a nearest-neighbour graph (:func:`engine.cluster.affinity.knn_graph`), decreasing,
    (n_values,) float64.

    The matrix is block-diagonal over the graph's connected components
    (``scipy.sparse.csgraph.connected_components``), so its spectrum is the union of theirs:
    each component's leading eigenvalues come from the dense symmetric solver (LAPACK
    ``syevr``, only the ``n_values`` largest) up to :data:`DENSE_COMPONENT_MAX` nodes, else
    from Lanczos (``eigsh``) on its non-zero entries. Single-vector Lanczos on the whole
    graph would lose copies of a repeated eigenvalue -- a graph with c connected
    components has eigenvalue 1 c times --; within one component eigenvalue 1 is simple.
    The block method used before, LOBPCG (Knyazev, SIAM J. Sci. Comput. 2001), kept the
    copies too but took 18 times as long on the nearest-neighbour graphs of the dev tasks
    of over 200 photos (37.2 against 2.1 s; same eigenvalues within 2e-15), and 4 s a graph
    at 2,880 photos. Small graphs go to :func:`ncut_embedding`.
    """
    n = G.shape[0]
    q = int(min(max(n_values, 1), n))
    if n <= 200 or q >= n - 1:
        return ncut_embedding(G, q)[0]
    from scipy.linalg import eigh
    from scipy.sparse import csr_matrix, diags
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import eigsh

    S = csr_matrix(G)
    S = 0.5 * (S + S.T)
    d = np.asarray(S.sum(axis=1)).ravel()
    s = diags(1.0 / np.sqrt(np.where(d > 0, d, np.finfo(float).tiny)))
    M = (s @ S @ s).tocsr()
    n_comp, comp = connected_components(M, directed=False)
    vals = []
    for c in range(n_comp):
        idx = np.flatnonzero(comp == c)
        m, qc = idx.size, min(q, idx.size)
        Mc = M[idx][:, idx]
        if m <= DENSE_COMPONENT_MAX or qc >= m - 1:
            vals.append(eigh(Mc.toarray(), eigvals_only=True, subset_by_index=[m - qc, m - 1]))
        else:
            v0 = np.random.default_rng(0).standard_normal(m)
            vals.append(eigsh(Mc, k=qc, which="LA", v0=v0, tol=1e-10, return_eigenvectors=False))
    return np.sort(np.concatenate(vals))[::-1][:q]


def normalized_cut_value(W: np.ndarray, labels: np.ndarray) -> float:
    """``sum_g cut(A_g, V - A_g) / assoc(A_g, V)`` for the partition ``labels`` (n,)."""
    k = int(labels.max()) + 1 if labels.size else 0
    onehot = np.zeros((labels.shape[0], k))
    onehot[np.arange(labels.shape[0]), labels] = 1.0
    assoc_all = onehot.T @ W.sum(axis=1)
    within = np.sum(onehot * (W @ onehot), axis=0)  # (one product, not an n^2 k loop)
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


def discretize_embedding(V: np.ndarray, k: int, how: str, n_init: int, seed: int) -> np.ndarray:
    """Labels (n,) int64 in ``[0, k)`` from the leading eigenvectors (thesis Eq. 9.1).

    Parameters
    ----------
    V : (n, q) float64
        Eigenvectors of ``D^-1/2 W D^-1/2``, leading first, ``q >= k``
        (:func:`ncut_embedding`); the first k are used, rows scaled to unit length.
    k : int
        Number of groups (1: everything in group 0).
    how : {"kmeans", "yu_shi"}
        k-means with k-means++ restarts (Ng, Jordan & Weiss), or Yu & Shi's (ICCV 2003)
        alternation between a discrete partition and the best rotation.
    n_init : int
        Restarts (k-means keeps the one with the least sum of squared distances).
    seed : int
        Random seed of the restarts.

    Notes
    -----
    Tried (2026-11-29): keeping instead the restart whose partition has the lowest
    normalized cut of the affinities, the criterion the embedding relaxes. In a folder of
    87 photos cut into 29 groups it kept a pair of bowls apart from three photos of Petra,
    which the restart of least squared distance had joined; on the grouping tasks of
    ``tests/benchmarks/quality.py`` it moved accuracy both ways by task: development mean
    of 9 families 0.936 -> 0.937 with k given and 0.927 -> 0.931 automatic, held-out
    Caltech-101 draws (8 classes 10-14, 20 classes 5-9) 0.950 -> 0.947 with k given and
    0.953 -> 0.946 automatic, their worst with automatic k 0.906 -> 0.864. No gain: not
    kept.
    """
    if k == 1:
        return np.zeros(V.shape[0], np.int64)
    if how == "kmeans":
        return _discretize_kmeans(V, k, n_init, seed)
    return _discretize_yu_shi(V, k, n_init, seed)


def eigengap_k(values: np.ndarray, k_min: int, k_max: int) -> tuple[int, str]:
    """Relative eigengap: ``k = argmax (mu_k - mu_{k+1}) / mu_k`` over ``k in [k_min, k_max]``.

    ``mu`` are the eigenvalues of ``D^-1/2 W D^-1/2`` in decreasing order. The absolute gap
    ``mu_k - mu_{k+1}`` is biased towards small k on real affinities, whose spectrum
    decays steadily; dividing by ``mu_k`` compares the drop to the level it falls from.
    Only k with ``mu_k >= 0.1 mu_2`` are eligible, so the noise floor of the spectrum cannot
    produce a spurious large ratio.

    Given several spectra (one per row, e.g. of nearest-neighbour graphs of different
    sizes), k maximises the mean of their relative gaps (a k must be eligible in every
    spectrum): a consensus over graph scales, in the spirit of the multi-scale analysis of
    Zelnik-Manor & Perona ("Self-tuning spectral clustering", NIPS 2004), since the largest
    gap of a single graph moves with its size (von Luxburg 2007, Sec. 8.1).

    Parameters
    ----------
    values : (q,) or (s, q) float64
        Leading eigenvalues in decreasing order (:func:`ncut_embedding`), or s such
        spectra.
    k_min, k_max : int
        Range of k compared (``k_max`` is capped at ``q - 1``).

    Returns
    -------
    k : int
    reason : str
        The choice in words (``Clustering.k_reason``).
    """
    vals = np.atleast_2d(np.asarray(values, np.float64))
    q = vals.shape[1]
    k_max = min(k_max, q - 1)
    if k_max < k_min:
        k = max(1, min(k_min, q))
        return k, f"k={k}: too few images to compare eigengaps"
    ks = np.arange(k_min, k_max + 1)
    mu_k, mu_next = vals[:, ks - 1], vals[:, ks]
    floor = 0.1 * vals[:, 1:2] if q > 1 else np.zeros((vals.shape[0], 1))
    eligible = (mu_k > np.maximum(floor, 1e-12)) | (ks == k_min)[None, :]
    rel = np.where(eligible, (mu_k - mu_next) / np.maximum(np.abs(mu_k), 1e-12), -np.inf)
    rel = rel.mean(axis=0)
    j = int(np.argmax(rel))
    k = int(ks[j])
    order = np.argsort(-rel)
    second = (
        f"; next best k={int(ks[order[1]])} (relative gap {rel[order[1]]:.2f})"
        if ks.shape[0] > 1 and np.isfinite(rel[order[1]])
        else ""
    )
    if vals.shape[0] == 1:
        reason = (
            f"k={k} by relative eigengap among k in {k_min}..{k_max}: eigenvalue {k} "
            f"({vals[0, k - 1]:.3f}) drops to {vals[0, k]:.3f} at {k + 1}, a relative gap of "
            f"{rel[j]:.2f}{second}"
        )
    else:
        reason = (
            f"k={k} by relative eigengap among k in {k_min}..{k_max}: from eigenvalue {k} "
            f"to {k + 1} the spectra drop by {rel[j]:.2f} of their level, on average over "
            f"{vals.shape[0]} spectra{second}"
        )
    return k, reason


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


def recursive_ncut(W: np.ndarray, k: int) -> np.ndarray:
    """Split, k-1 times, the group whose best two-way Shi & Malik cut has the lowest Ncut.

    Parameters
    ----------
    W : (n, n) float64
        Symmetric non-negative affinities.
    k : int
        Number of groups wanted (fewer when no group can be cut any more).

    Returns
    -------
    (n,) int64
        Group per image, numbered in the order the groups were split off.
    """
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
    must_a = constraint_pairs(must, n, "must")
    cannot_a = constraint_pairs(cannot, n, "cannot")
    forced = np.unique(np.concatenate([must_a.ravel(), cannot_a.ravel()]))
    rest = np.setdiff1d(np.arange(n), forced)
    m_rest = max(0, min(n_landmarks - forced.shape[0], rest.shape[0]))
    rng = np.random.default_rng(random_state)
    pick = rng.choice(rest, size=m_rest, replace=False) if m_rest else rest[:0]
    return np.sort(np.concatenate([forced, pick])).astype(np.int64)


def nystrom_embedding(
    C: np.ndarray, landmarks: np.ndarray, n_vectors: int
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate leading eigenpairs of ``D^-1/2 W D^-1/2`` from columns ``C = W[:, L]``.

    One-shot orthogonalised Nystrom extension for normalized cuts (Fowlkes, Belongie,
    Chung & Malik, PAMI 2004, Sec. 4): with ``A = W[L, L]`` and ``B = W[L, R]``, degrees are
    ``d_L = A 1 + B 1`` and ``d_R = B^T 1 + B^T A^+ B 1``; after normalisation
    ``S = A + A^-1/2 B B^T A^-1/2 = U Lambda U^T`` and ``V = [A; B^T] A^-1/2 U Lambda^-1/2``.
    Cost O(n m^2).

    Parameters
    ----------
    C : (n, m) float64
        Non-negative affinities of every image to the m landmarks.
    landmarks : (m,) int64
        Row indices of the landmarks (:func:`choose_landmarks`), in the column order of C.
    n_vectors : int
        Eigenpairs wanted (at most m).

    Returns
    -------
    values : (q,) float64
        Approximate eigenvalues, decreasing.
    vectors : (n, q) float64
        Matching approximate eigenvectors.
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
