"""Fisher vectors of the dense channel: a second view of every photo for the grouping (#22).

The grouping's affinities (:meth:`engine.cluster.CategoryModel.kernels`) match the dense
SIFT windows of two photos through a vocabulary-guided pyramid (thesis Ch. 4) and add a
global HOG. :func:`fisher_vectors` describes the same windows differently: each photo's
set of descriptors becomes one vector, the gradient of its log-likelihood under a
Gaussian mixture fitted on the collection (Perronnin & Dance 2007; with the "improved"
signed square root and L2 normalisation of Perronnin, Sanchez & Mensink, ECCV 2010). For
K diagonal Gaussians ``(w_k, mu_k, sigma_k)`` in a PCA space of ``dim`` dimensions and the
soft assignments ``gamma_k(x)`` of a photo's ``m`` descriptors::

    G_mu_k    = 1 / (m sqrt(w_k))  sum_x gamma_k(x) (x - mu_k) / sigma_k
    G_sigma_k = 1 / (m sqrt(2 w_k)) sum_x gamma_k(x) [(x - mu_k)^2 / sigma_k^2 - 1]

concatenated (``2 K dim`` values), then ``sign(v) sqrt|v|`` and unit length. The pyramid
match counts how many descriptors two photos share bin by bin; the Fisher vector compares
how their descriptors sit inside each Gaussian (first- and second-order statistics), a
finer view of the same features that Chatfield et al. (BMVC 2011, "The devil is in the
details") found the strongest of the bag-of-features encodings on Caltech-101.
:func:`fisher_kernel` turns them into a Gaussian kernel. With ``simile cluster --fisher``
(:func:`engine.cluster.categorize_iter` ``fisher=True``) the grouping cuts this view
(mixed half and half with the HOG, as the pyramid match is) beside its own affinities and
keeps the partition both agree on (:func:`engine.cluster.partition.consensus_cut`).

Screening (the normalized cut alone, k given, on features extracted as the channel does;
15 random 4-class, 5 8-class and 3 20-class subsets of Caltech-101 dev, ETH-80 dev,
Caltech-4; mean (worst) accuracy)::

    affinities                     4 classes    8 classes    20 classes   ETH   C-4   mean
    pyramid match + HOG            .629 (.478)  .608 (.573)  .485 (.442)  .505  .931  .632
    Fisher + HOG, K=32, dim 48     .706 (.526)  .616 (.480)  .536 (.498)  .443  .906  .641
    consensus of both              .660 (.466)  .649 (.598)  .546 (.509)  .512  .925  .658

End to end (``tests/benchmarks/quality.py --only caltech,eth80 --grouping-seeds 15,10,5``:
15, 10 and 5 subsets, feature masks, the SVM not reassigning)::

    affinities                     4 classes    8 classes    20 classes   ETH   C-4   mean
    pyramid match + HOG (default)  .635 (.483)  .621 (.562)  .480 (.421)  .517  .925  .636
    consensus with the Fisher view .668 (.448)  .647 (.567)  .508 (.470)  .522  .869  .643

The consensus raises every random-subset family and costs Caltech-4 nine photos of 160
(0.869-0.925 over k-means seeds, against 0.925 on each), so it is not the default. The
view alone groups the random 4-class subsets better but ETH-80 and Caltech-4 worse.
Screened on the same tasks, all within about 0.02 of each other on the mean: K = 64 or
128 Gaussians, 64 dimensions, a spatial pyramid of the vectors (1x1, 2x2, 3x1 regions: 8
times longer), centre-weighted pooling, HOG weights 0.3 and 0.5, and the mean of the two
kernels instead of a consensus of their cuts (no gain end to end on the 4-class subsets);
the global vector of 3,072 values is the cheapest of them. Rejected on the same tasks:
nearest-neighbour graphs, self-tuning scales, diffusion and reciprocal-neighbour (Jaccard)
affinities for the cut (family mean 0.49-0.63 against 0.632), and self-training an SVM
on the cut's most central members (0.51-0.57).

Cost: fitting the mixture on 40,000 descriptors takes about 4 s of CPU whatever the
folder's size (Caltech-4, 160 photos: 7-8 s for the whole view and its cuts, against 1 s
for the grouping without it); encoding about 2 ms a photo; at 3,000 photos (the exact
mode's limit) about 6 s more to encode and the second view's cuts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FISHER", "FisherEncoder", "fisher_kernel", "fisher_vectors", "fisher_view"]

#: Settings of the Fisher view: Gaussians, PCA dimensions, descriptors sampled for the
#: PCA (``sample``) and for the mixture (``fit``, the first of them), EM iterations.
FISHER: dict[str, Any] = {
    "components": 32,
    "dim": 48,
    "sample": 60_000,
    "fit": 40_000,
    "iterations": 50,
}


@dataclass(frozen=True)
class FisherEncoder:
    """A PCA and a diagonal Gaussian mixture fitted on a collection's dense descriptors.

    Attributes
    ----------
    mean : (128,) float64
        Mean descriptor (PCA centre).
    basis : (dim, 128) float64
        Principal directions, rows.
    weights : (K,) float64
        Mixture weights (sum 1).
    means : (K, dim) float64
    variances : (K, dim) float64
        Diagonal variances (> 0).
    """

    mean: np.ndarray
    basis: np.ndarray
    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray

    @property
    def length(self) -> int:
        """Length of a Fisher vector, ``2 K dim``."""
        return 2 * int(self.means.size)

    @classmethod
    def fit(
        cls,
        sample: np.ndarray,
        *,
        components: int = FISHER["components"],
        dim: int = FISHER["dim"],
        fit: int = FISHER["fit"],
        iterations: int = FISHER["iterations"],
        random_state: int = 0,
    ) -> FisherEncoder:
        """Fit the PCA on ``sample`` (s, 128) and the mixture on its first ``fit`` rows.

        ``ValueError`` when the sample has fewer rows than ``max(components, dim)``.
        """
        import warnings

        from sklearn.decomposition import PCA
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import GaussianMixture

        X = np.asarray(sample, np.float64)
        if X.ndim != 2 or X.shape[0] < max(components, dim) or X.shape[1] < dim:
            raise ValueError(
                f"need at least {max(components, dim)} descriptors of >= {dim} values to "
                f"fit a Fisher encoder, got shape {X.shape}"
            )
        pca = PCA(dim, random_state=random_state).fit(X)
        Y = pca.transform(X[:fit])
        gmm = GaussianMixture(
            components, covariance_type="diag", max_iter=iterations, reg_covar=1e-4,
            init_params="k-means++", random_state=random_state,
        )  # fmt: skip
        with warnings.catch_warnings():  # (EM stopped at ``iterations``: a usable mixture)
            warnings.simplefilter("ignore", ConvergenceWarning)
            gmm.fit(Y)
        return cls(pca.mean_.copy(), pca.components_.copy(), gmm.weights_.copy(),
                   gmm.means_.copy(), gmm.covariances_.copy())  # fmt: skip

    def posteriors(self, projected: np.ndarray) -> np.ndarray:
        """Soft assignments (m, K) of PCA-projected descriptors (m, dim), rows sum to 1."""
        Y = np.asarray(projected, np.float64)
        inv = 1.0 / self.variances
        logn = (
            np.log(self.weights)
            - 0.5 * np.log(self.variances).sum(1)
            - 0.5 * ((Y * Y) @ inv.T - 2.0 * Y @ (self.means * inv).T
                     + (self.means**2 * inv).sum(1))
        )  # fmt: skip
        logn -= logn.max(1, keepdims=True)
        P = np.exp(logn)
        return P / P.sum(1, keepdims=True)

    def encode(self, descriptors: np.ndarray) -> np.ndarray:
        """The improved Fisher vector (``2 K dim``,) float32 of one photo's descriptors
        (m, 128) (module docstring); all zeros for a photo without descriptors."""
        return fisher_vectors(self, [descriptors])[0]

    def _statistics(self, Y: np.ndarray, G: np.ndarray) -> np.ndarray:
        """The normalised vector of one photo from its projected descriptors (m, dim) and
        their posteriors (m, K)."""
        m = float(Y.shape[0])
        s0 = G.sum(0)  # (K,)
        s1 = G.T @ Y  # (K, dim)
        s2 = G.T @ (Y * Y)
        g_mu = (s1 - s0[:, None] * self.means) / np.sqrt(self.variances)
        g_mu /= m * np.sqrt(self.weights)[:, None]
        g_sd = (s2 - 2.0 * self.means * s1 + s0[:, None] * self.means**2) / self.variances
        g_sd = (g_sd - s0[:, None]) / (m * np.sqrt(2.0 * self.weights)[:, None])
        v = np.concatenate([g_mu.ravel(), g_sd.ravel()])
        v = np.sign(v) * np.sqrt(np.abs(v))
        norm = float(np.linalg.norm(v))
        return v / norm if norm > 0 else v


def fisher_vectors(
    encoder: FisherEncoder, descriptor_sets: Sequence[np.ndarray], *, chunk: int = 20_000
) -> np.ndarray:
    """Fisher vectors (n, 2 K dim) float32 of n photos' descriptor sets (m_i, 128).

    Descriptors are projected and assigned ``chunk`` at a time (whole photos), one matrix
    product for many photos; a photo without descriptors gets a zero vector.
    """
    n = len(descriptor_sets)
    out = np.zeros((n, encoder.length), np.float32)
    sets = [np.asarray(d).reshape(-1, encoder.mean.size) for d in descriptor_sets]
    start = 0
    while start < n:
        stop, rows = start, 0
        while stop < n and (rows == 0 or rows + sets[stop].shape[0] <= chunk):
            rows += sets[stop].shape[0]
            stop += 1
        if rows:
            X = np.concatenate(sets[start:stop]).astype(np.float64)  # (a chunk at a time)
            Y = (X - encoder.mean) @ encoder.basis.T
            G = encoder.posteriors(Y)
            at = 0
            for i in range(start, stop):
                m = sets[i].shape[0]
                if m:
                    out[i] = encoder._statistics(Y[at : at + m], G[at : at + m])
                at += m
        start = stop
    return out


def fisher_kernel(vectors: np.ndarray, gamma: float | None = None) -> np.ndarray:
    """Gaussian kernel ``exp(-gamma ||f_i - f_j||^2)`` (n, n) float64 of unit Fisher vectors.

    Parameters
    ----------
    vectors : (n, d) float
        :func:`fisher_vectors` (unit length or zero).
    gamma : float, optional
        Default ``1 / mean ||f_i - f_j||^2`` over the pairs (the vectors' spread differs
        between collections, unlike the HOG's; a kernel of unit diagonal either way).
    """
    F = np.asarray(vectors, np.float32)
    if F.ndim != 2:
        raise ValueError(f"vectors must be (n, d), got shape {F.shape}")
    sq = (F.astype(np.float64) ** 2).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (F @ F.T).astype(np.float64), 0.0)
    np.fill_diagonal(d2, 0.0)
    n = F.shape[0]
    if gamma is None:
        mean = d2[np.triu_indices(n, 1)].mean() if n > 1 else 0.0
        gamma = 1.0 / mean if mean > 0 else 1.0
    return np.exp(-float(gamma) * d2)


def fisher_view(
    channel: Any,
    hashes: Sequence[str],
    appearance: np.ndarray | None = None,
    *,
    random_state: int = 0,
) -> np.ndarray:
    """The grouping's second view (n, n) float64 of a collection's photos (unit diagonal).

    A :class:`FisherEncoder` is fitted on a sample of the photos' cached dense descriptors
    (:func:`engine.cluster.channel.vocab_sample`, :data:`FISHER`), every photo is encoded
    (:func:`fisher_vectors`) and the vectors' :func:`fisher_kernel` is mixed with the
    appearance kernel as the pyramid match is (:func:`engine.cluster.combine_kernels`,
    :data:`engine.cluster.appearance.APPEARANCE`). Nothing is stored: the view only
    shapes a grouping made from scratch.

    Parameters
    ----------
    channel : engine.cluster.CategoryChannel
        Holds the dense features of every photo of ``hashes``.
    hashes : sequence of str
        The photos' content hashes, in the grouping's row order.
    appearance : (n, d) float, optional
        Their appearance descriptors (None: the Fisher kernel alone).
    random_state : int
    """
    from engine.cluster.channel import as_float, vocab_sample
    from engine.cluster.model import mix_appearance

    sample = vocab_sample(channel, list(hashes), int(FISHER["sample"]), random_state)
    encoder = FisherEncoder.fit(sample, random_state=random_state)
    F = fisher_vectors(encoder, [as_float(np.asarray(channel.raw(h)[0])) for h in hashes])
    K = fisher_kernel(F)
    return K if appearance is None else mix_appearance(K, appearance)
