"""From a pyramid-match kernel to clustering affinities (thesis Sec. 8.1.2, 9.2).

:func:`prepare_affinity` symmetrises a kernel, optionally lifts small values against a
dominant diagonal (``K ** p``) or takes the empirical map ``K K^T``, and cosine-normalises it;
:func:`diagonal_dominance` measures the problem it fixes; :func:`knn_graph` keeps each
image's strongest neighbours, the graph whose spectrum chooses the number of groups.
"""

from __future__ import annotations

import numpy as np

__all__ = ["diagonal_dominance", "knn_graph", "prepare_affinity"]


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
