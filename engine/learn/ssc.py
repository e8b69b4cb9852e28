"""Similarity-sensitive embeddings of Shakhnarovich (seeds/002, ch. 3).

Thresholded projections ``h(x) = [f(x) <= T]`` (Eq. 3.2) combined into a weighted Hamming
space ``H(x) = [α₁h₁(x), …, α_M h_M(x)]`` (Eq. 3.1):

- :func:`threshold_rates` — Algorithm 4 (and :func:`threshold_rates_semi`, Algorithm 6,
  semi-supervised);
- :class:`SSC` — Algorithm 5, every axis-parallel threshold with TP−FP gap ≥ G;
- :class:`BoostedSSC` — Algorithm 7 (AdaBoost over axis-parallel stumps) and the
  semi-supervised variant of section 3.3.3 (Eqs. 3.15–3.17);
- :class:`BoostPro` — boosted general linear projections found by gradient ascent
  on the soft objective r̃_m (Eqs. 3.20–3.26), supervised or semi-supervised.

All three embeddings share :class:`HammingEmbedding`, which the hashing index can
use as it uses any other binary code (weights ``alpha`` per bit).

Boosted embeddings work on dense vectors; for tf-idf bags of words we first reduce
with a truncated SVD (see :func:`reduce_dimension`), as the thesis' experiments
were on low-dimensional data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from engine.core.validate import check_positive
from engine.learn.supervision import LearnProgress, State

__all__ = [
    "SSC",
    "BoostPro",
    "BoostedSSC",
    "HammingEmbedding",
    "reduce_dimension",
    "threshold_rates",
    "threshold_rates_semi",
]


def _midpoints(u: np.ndarray) -> np.ndarray:
    """Thresholds of Algorithm 4 steps 2–4: one below the minimum, then midpoints."""
    t = np.empty(u.size)
    t[0] = u[0] - ((u[1] - u[0]) / 2 if u.size > 1 else 0.5)
    t[1:] = (u[:-1] + u[1:]) / 2
    return t


def _separated_mass(lo: np.ndarray, hi: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Weight of pairs with ``lo <= T < hi`` (separated by T) at every threshold in ``t``."""
    o_lo, o_hi = np.argsort(lo, kind="stable"), np.argsort(hi, kind="stable")
    c_lo = np.concatenate([[0.0], np.cumsum(w[o_lo])])
    c_hi = np.concatenate([[0.0], np.cumsum(w[o_hi])])
    return (
        c_lo[np.searchsorted(lo[o_lo], t, side="right")]
        - c_hi[np.searchsorted(hi[o_hi], t, side="right")]
    )


def threshold_rates(
    v1: np.ndarray, v2: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TP and FP rates of every feasible threshold on one projection (Algorithm 4).

    A pair is *not separated* by ``T`` when both values fall on the same side of it;
    ``TP`` is the normalised weight of similar pairs not separated (Eq. 3.4), ``FP``
    that of dissimilar pairs not separated (Eq. 3.5). One sort, one pass: O(N log N).

    Parameters
    ----------
    v1, v2 : (N,) float
        Projection values ``f(x⁽¹⁾), f(x⁽²⁾)`` of the N pairs.
    labels : (N,) int
        ``+1`` similar / ``−1`` dissimilar.
    weights : (N,) float, optional
        Pair weights; normalised so that each class sums to one (step 9).

    Returns
    -------
    thresholds : (n,) float64
        One below the smallest value, then midpoints between consecutive unique
        values (steps 2–4); the bit is ``h(x) = [f(x) <= T]`` (Eq. 3.2).
    tp, fp : (n,) float64

    Examples
    --------
    >>> t, tp, fp = threshold_rates([0., 1.], [0.1, 5.], [1, -1])
    >>> float(np.max(tp - fp))
    1.0
    """
    v1 = np.asarray(v1, np.float64).ravel()
    v2 = np.asarray(v2, np.float64).ravel()
    labels = np.asarray(labels).ravel()
    if not (v1.shape == v2.shape == labels.shape):
        raise ValueError("v1, v2 and labels must have the same length")
    w = np.ones(v1.size) if weights is None else np.asarray(weights, np.float64)
    pos = labels > 0
    t = _midpoints(np.unique(np.concatenate([v1, v2])))
    lo, hi = np.minimum(v1, v2), np.maximum(v1, v2)
    out = []
    for mask in (pos, ~pos):
        wc = np.where(mask, w, 0.0)
        total = wc.sum()
        out.append(1.0 - _separated_mass(lo, hi, wc / total, t) if total > 0 else np.zeros(t.size))
    return t, out[0], out[1]


def threshold_rates_semi(
    values: np.ndarray,
    v1: np.ndarray,
    v2: np.ndarray,
    pair_weights: np.ndarray | None = None,
    point_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Semi-supervised threshold evaluation (Algorithm 6).

    TP comes from similar pairs as in Algorithm 4; FP is estimated from unlabeled
    points alone: with ``π = Pr(f(x) <= T)``, a random pair is not separated with
    probability ``FP = π² + (1 − π)²`` — valid when similarity is rare (Eq. 3.6).

    Parameters
    ----------
    values : (N,) float
        Projections of unlabeled points.
    v1, v2 : (Np,) float
        Projections of the similar pairs.
    pair_weights : (Np,) float, optional
    point_weights : (N,) float, optional

    Returns
    -------
    thresholds, tp, fp : (n,) float64
    """
    values = np.asarray(values, np.float64).ravel()
    v1 = np.asarray(v1, np.float64).ravel()
    v2 = np.asarray(v2, np.float64).ravel()
    s = np.ones(values.size) if point_weights is None else np.asarray(point_weights, float)
    w = np.ones(v1.size) if pair_weights is None else np.asarray(pair_weights, float)
    t = _midpoints(np.unique(values))
    tp = 1.0 - _separated_mass(np.minimum(v1, v2), np.maximum(v1, v2), w / w.sum(), t)
    order = np.argsort(values)
    cs = np.concatenate([[0.0], np.cumsum(s[order] / s.sum())])
    pi = cs[np.searchsorted(values[order], t, side="right")]
    return t, tp, pi**2 + (1 - pi) ** 2


# ----------------------------------------------------------------------------------
# Weighted Hamming embeddings
# ----------------------------------------------------------------------------------


@dataclass
class HammingEmbedding:
    """``H(x) = [α₁h₁(x), …, α_M h_M(x)]`` with ``h_m(x) = [f_m(x) <= T_m]`` (Eqs. 3.1–3.2).

    Attributes
    ----------
    projections : (M, D) float32
        Row m is the linear projection of bit m (axis-parallel bits are one-hot rows).
    thresholds : (M,) float64
    alpha : (M,) float64
        Vote of each bit; the distance is ``Σ α_m |h_m(x) − h_m(y)|``.
    offset : (D,) float32
        Subtracted from inputs first (lets projections work on centred data).
    """

    projections: np.ndarray
    thresholds: np.ndarray
    alpha: np.ndarray
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    kind: str = "ssc"

    @property
    def n_bits(self) -> int:
        return int(self.thresholds.size)

    def project(self, X) -> np.ndarray:
        """``f_m(x)`` for every input and bit: (N, M) float64."""
        if sp.issparse(X):
            F = np.asarray(X @ self.projections.T)
            if self.offset.size:
                F = F - (self.offset @ self.projections.T)[None, :]
            return F.astype(np.float64)
        X = np.asarray(X, np.float64)
        if self.offset.size:
            X = X - self.offset
        return X @ self.projections.T.astype(np.float64)

    def transform(self, X) -> np.ndarray:
        """Bits ``h_m(x)`` of each input.

        Parameters
        ----------
        X : (N, D) float array or sparse matrix

        Returns
        -------
        (N, M) uint8 in {0, 1}
        """
        return (self.project(X) <= self.thresholds[None, :]).astype(np.uint8)

    def distance(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """Weighted Hamming distances between codes (in bulk, via two matrix products).

        Parameters
        ----------
        A : (NA, M) uint8 codes from :meth:`transform`
        B : (NB, M) uint8 codes, optional (default ``A``)

        Returns
        -------
        (NA, NB) float64, ``Σ_m α_m |a_m − b_m|``
        """
        B = A if B is None else B
        a = A.astype(np.float64)
        b = B.astype(np.float64)
        return (a * self.alpha) @ (1 - b).T + ((1 - a) * self.alpha) @ b.T

    def similarity(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """``1 − distance / Σα`` in [0, 1]; higher = more similar."""
        total = float(np.sum(self.alpha)) or 1.0
        return 1.0 - self.distance(A, B) / total

    def to_state(self) -> State:
        return {
            "kind": self.kind,
            "projections": np.asarray(self.projections, np.float32),
            "thresholds": np.asarray(self.thresholds, np.float64),
            "alpha": np.asarray(self.alpha, np.float64),
            "offset": np.asarray(self.offset, np.float32),
        }

    @classmethod
    def from_state(cls, state: State) -> HammingEmbedding:
        return cls(
            projections=np.asarray(state["projections"], np.float32),
            thresholds=np.asarray(state["thresholds"], np.float64),
            alpha=np.asarray(state["alpha"], np.float64),
            offset=np.asarray(state["offset"], np.float32),
            kind=str(state["kind"]),
        )


def _dense(X) -> np.ndarray:
    return X.toarray().astype(np.float64) if sp.issparse(X) else np.asarray(X, np.float64)


def _check_pairs(X, i, j) -> tuple[np.ndarray, np.ndarray]:
    i = np.asarray(i, np.int64)
    j = np.asarray(j, np.int64)
    if i.shape != j.shape or i.ndim != 1:
        raise ValueError("pair index arrays i and j must be 1-D and of equal length")
    n = X.shape[0]
    if i.size == 0:
        raise ValueError("at least one pair is needed")
    if i.min() < 0 or j.min() < 0 or i.max() >= n or j.max() >= n:
        raise ValueError(f"pair indices must lie in [0, {n})")
    return i, j


def _one_hot(dims: np.ndarray, D: int) -> np.ndarray:
    P = np.zeros((dims.size, D), np.float32)
    P[np.arange(dims.size), dims] = 1.0
    return P


class SSC:
    """Similarity Sensitive Coding (Algorithm 5).

    For every input dimension ``d`` and every threshold of Algorithm 4, keep the bit
    ``[x_d <= T]`` when its estimated gap ``TP − FP >= G``. All bits get vote 1.

    Parameters
    ----------
    gap : float
        The lower bound G on TP − FP, in (0, 1).
    max_bits : int
        If more thresholds pass, keep a random sample of ``max_bits`` of them, as the
        thesis does for Isolet (section 3.2.2). Keeping the largest gaps instead is a
        trap: the best thresholds all sit next to each other on the few most
        informative dimensions (on a 20-class Caltech-101 LSA-64 input, 512 bits
        landed on 5 of the 64 dimensions and precision@10 fell from 0.22 with L1 to
        0.14).
    random_state : int
        Seed of that sample.
    """

    def __init__(self, gap: float = 0.1, max_bits: int = 4096, random_state: int = 0):
        if not 0 < gap < 1:
            raise ValueError(f"gap must be in (0, 1), got {gap!r}")
        check_positive(max_bits, "max_bits")
        self.gap = gap
        self.max_bits = int(max_bits)
        self.random_state = random_state
        self.embedding_: HammingEmbedding | None = None

    def fit(self, X, i, j, labels=None, *, unlabeled: bool = False) -> SSC:
        """Fit from labelled pairs ``(X[i], X[j], labels)``.

        Parameters
        ----------
        X : (N, D) float array or sparse matrix
        i, j : (P,) int
            Pair indices into ``X``.
        labels : (P,) int, +1 / −1
            Omit (with ``unlabeled=True``) for the semi-supervised case: all pairs are
            similar and FP is estimated from the rows of ``X`` (Algorithm 6).
        """
        i, j = _check_pairs(X, i, j)
        Xd = _dense(X)
        dims, ts = [], []
        for d in range(Xd.shape[1]):
            if unlabeled or labels is None:
                t, tp, fp = threshold_rates_semi(Xd[:, d], Xd[i, d], Xd[j, d])
            else:
                t, tp, fp = threshold_rates(Xd[i, d], Xd[j, d], labels)
            keep = (tp - fp) >= self.gap
            dims.append(np.full(int(keep.sum()), d))
            ts.append(t[keep])
        dims_a = np.concatenate(dims).astype(np.int64)
        t_a = np.concatenate(ts)
        if dims_a.size > self.max_bits:
            rng = np.random.default_rng(self.random_state)
            keep = np.sort(rng.choice(dims_a.size, self.max_bits, replace=False))
            dims_a, t_a = dims_a[keep], t_a[keep]
        self.embedding_ = HammingEmbedding(
            _one_hot(dims_a, Xd.shape[1]), t_a, np.ones(t_a.size), kind="ssc"
        )
        return self


class _StumpSearch:
    """Vectorised search over all axis-parallel stumps for boosting (Alg. 7 step 4–8).

    Values are sorted once per dimension; every boosting round only re-weights and
    takes one cumulative sum over a ``(2P, D)`` array.
    """

    def __init__(self, Xd: np.ndarray, i: np.ndarray, j: np.ndarray):
        lo = np.minimum(Xd[i], Xd[j])
        hi = np.maximum(Xd[i], Xd[j])
        vals = np.concatenate([lo, hi], axis=0)  # (2P, D)
        self.order = np.argsort(vals, axis=0, kind="stable")
        self.sorted = np.take_along_axis(vals, self.order, axis=0)
        self.pair = self.order % lo.shape[0]
        self.sign = np.where(self.order < lo.shape[0], 1.0, -1.0)
        # A threshold after position k is feasible if the next value differs.
        self.valid = np.zeros_like(self.sorted, dtype=bool)
        self.valid[:-1] = self.sorted[1:] != self.sorted[:-1]

    def best(self, contrib: np.ndarray) -> tuple[int, float, float]:
        """Maximise ``Σ_k contrib[pair] * sign`` cumulated: returns (dim, threshold, value)."""
        cum = np.cumsum(contrib[self.pair] * self.sign, axis=0)
        cum = np.where(self.valid, cum, -np.inf)
        k, d = np.unravel_index(int(np.argmax(cum)), cum.shape)
        t = (self.sorted[k, d] + self.sorted[k + 1, d]) / 2
        return int(d), float(t), float(cum[k, d])


class BoostedSSC:
    """Boosted Similarity Sensitive Coding (Algorithm 7; semi-supervised: section 3.3.3).

    AdaBoost over pairs: at round m the stump ``[x_d <= T]`` maximising
    ``r_m = 2(TP − FP) + Wⁿ − Wᵖ`` (step 7, with weighted, unnormalised rates) is
    added with vote ``α_m = ½ log((1 + r_m)/(1 − r_m))`` (Eq. 3.14, exact for ±1
    outputs), and pair weights are updated by Eq. 3.11. Stops when ``α_m <= 0``.

    Parameters
    ----------
    n_bits : int
        Maximum number of rounds M (embedding length).
    """

    def __init__(self, n_bits: int = 128):
        check_positive(n_bits, "n_bits")
        self.n_bits = int(n_bits)
        self.embedding_: HammingEmbedding | None = None
        self.r_: list[float] = []

    def fit(self, X, i, j, labels=None) -> BoostedSSC:
        """Fit from pairs; ``labels=None`` means the semi-supervised setting."""
        for _ in self.fit_iter(X, i, j, labels):
            pass
        return self

    def fit_iter(self, X, i, j, labels=None) -> Iterator[LearnProgress]:
        """Fit, yielding one :class:`LearnProgress` per boosting round.

        Parameters
        ----------
        X : (N, D) float array or sparse matrix
        i, j : (P,) int
            Pair indices into ``X``.
        labels : (P,) int, +1 / −1, optional
            Without labels all pairs are similar and the rows of ``X`` are the
            unlabeled sample (semi-supervised boosting, Eqs. 3.15–3.17).
        """
        i, j = _check_pairs(X, i, j)
        Xd = _dense(X)
        D = Xd.shape[1]
        dims: list[int] = []
        ts: list[float] = []
        alphas: list[float] = []
        self.r_ = []
        if labels is not None:
            lab = np.asarray(labels, np.float64)
            search = _StumpSearch(Xd, i, j)
            W = np.full(i.size, 1.0 / i.size)
            for m in range(self.n_bits):
                Wp, Wn = W[lab > 0].sum(), W[lab < 0].sum()
                # r(T) = Wᵖ − Wⁿ − 2·S⁺(T) + 2·S⁻(T), S = separated mass.
                d, t, val = search.best(np.where(lab > 0, -2.0, 2.0) * W)
                r = Wp - Wn + val
                if r <= 1e-12:
                    break
                r = min(r, 1 - 1e-12)
                alpha = 0.5 * np.log((1 + r) / (1 - r))
                h1, h2 = Xd[i, d] <= t, Xd[j, d] <= t
                c = np.where(h1 == h2, 1.0, -1.0)
                W = W * np.exp(-alpha * lab * c)
                W /= W.sum()
                dims.append(d), ts.append(t), alphas.append(alpha)
                self.r_.append(r)
                yield LearnProgress(m + 1, self.n_bits, r, f"bit {m + 1}: r={r:.3f}")
        else:
            # Semi-supervised: W on similar pairs, S on unlabeled points (each sums to ½).
            W = np.full(i.size, 0.5 / i.size)
            S = np.full(Xd.shape[0], 0.5 / Xd.shape[0])
            order = np.argsort(Xd, axis=0, kind="stable")
            xs = np.take_along_axis(Xd, order, axis=0)
            lo, hi = np.minimum(Xd[i], Xd[j]), np.maximum(Xd[i], Xd[j])
            # A stump that separates no similar pair at the median leaves every weight
            # unchanged (e = 0), so it would be picked forever: never pick one twice.
            chosen: dict[int, list[float]] = {}
            for m in range(self.n_bits):
                # Candidate thresholds: midpoints between consecutive unlabeled values.
                t_all = (xs[:-1] + xs[1:]) / 2  # (N-1, D)
                ok = xs[1:] != xs[:-1]
                pi = np.arange(1, Xd.shape[0])[:, None] / Xd.shape[0]
                s_le = np.cumsum(S[order], axis=0)[:-1]
                best_r, best = -np.inf, None
                for d in range(D):
                    tt = t_all[ok[:, d], d]
                    if tt.size == 0:
                        continue
                    sep = _separated_mass(lo[:, d], hi[:, d], W, tt)
                    pos_term = W.sum() - 2 * sep
                    p = pi[ok[:, d], 0]
                    neg_term = (2 * p - 1) * (2 * s_le[ok[:, d], d] - S.sum())
                    r = pos_term - neg_term
                    if chosen.get(d):
                        r = np.where(np.isin(tt, chosen[d]), -np.inf, r)
                    k = int(np.argmax(r))
                    if r[k] > best_r:
                        best_r, best = r[k], (d, tt[k], p[k])
                if best is None or best_r <= 1e-12:
                    break
                d, t, p = best
                c = np.where((Xd[i, d] <= t) == (Xd[j, d] <= t), 1.0, -1.0)
                h = Xd[:, d] <= t
                e = 2 * np.where(h, p, 1 - p) - 1  # E_y[c(x_j, y)] = 2P_j − 1 (Eq. 3.15)
                alpha = _minimise_z(
                    lambda a, c=c, e=e, W=W, S=S: np.concatenate(
                        [W * np.exp(-a * c), S * np.exp(a * e)]
                    )
                )
                if alpha <= 0:
                    break
                W = W * np.exp(-alpha * c)
                W *= 0.5 / W.sum()
                S = S * np.exp(alpha * e)  # Eq. 3.17
                S *= 0.5 / S.sum()
                chosen.setdefault(d, []).append(t)
                dims.append(d), ts.append(float(t)), alphas.append(alpha)
                self.r_.append(float(best_r))
                yield LearnProgress(m + 1, self.n_bits, float(best_r), f"bit {m + 1}")
        dims_a = np.asarray(dims, np.int64)
        self.embedding_ = HammingEmbedding(
            _one_hot(dims_a, D), np.asarray(ts), np.asarray(alphas), kind="boostssc"
        )


_ALPHA_MAX = 0.5 * np.log((1 + 0.99) / (1 - 0.99))  # vote of a stump with r = 0.99


def _minimise_z(terms) -> float:
    """α minimising ``Z(α) = Σ terms(α)`` (convex), bounded scalar search.

    The bound is the vote Eq. 3.14 gives a stump with r = 0.99: when a stump splits
    no similar pair, Z keeps falling as α grows and one bit would swamp the rest.
    """
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda a: float(np.sum(terms(a))),
        bounds=(0.0, _ALPHA_MAX),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(res.x)


class BoostPro:
    """Boosting general (linear) projections — BoostPro (section 3.4).

    Each round finds a projection ``f(x) = θᵀx`` and threshold ``T`` by gradient
    ascent on the soft objective ``r̃_m = Σ W_i l_i c̃(x_i⁽¹⁾, x_i⁽²⁾)`` (Eq. 3.22) with
    the logistic bit ``h̃ = 1/(1 + exp(γ(f − T)))`` (Eq. 3.20), ``γ`` set by the
    thesis' heuristic, and ``c̃ = 4(h̃₁ − ½)(h̃₂ − ½)`` (Eq. 3.21); gradients are
    Eqs. 3.23–3.26 (L-BFGS does the ascent). The projection is then hardened: its
    exact best threshold is taken from Algorithm 4, and the vote and weight update
    follow AdaBoost as in :class:`BoostedSSC`. The search starts from the best
    axis-parallel stump, so a round is never worse than Boosted SSC's.

    Semi-supervised (no labels): the negative term becomes
    ``Σ_j S_j E_y[c̃(x_j, y)]`` with ``E_y[c̃] = 4(h̃(x_j) − ½)(mean_y h̃(y) − ½)``,
    the expectation estimated on the unlabeled sample (section 3.4.2).

    Parameters
    ----------
    n_bits : int
        Maximum number of rounds.
    max_iter : int
        L-BFGS iterations per round.
    """

    def __init__(self, n_bits: int = 64, max_iter: int = 50, random_state: int = 0):
        check_positive(n_bits, "n_bits")
        self.n_bits = int(n_bits)
        self.max_iter = int(max_iter)
        self.random_state = random_state
        self.embedding_: HammingEmbedding | None = None
        self.r_: list[float] = []

    def fit(self, X, i, j, labels=None) -> BoostPro:
        for _ in self.fit_iter(X, i, j, labels):
            pass
        return self

    def fit_iter(self, X, i, j, labels=None) -> Iterator[LearnProgress]:
        """Fit, yielding one :class:`LearnProgress` per round (see :class:`BoostedSSC`).

        One function of ~110 lines on purpose: a round is the thesis' section 3.4 in
        order (initial direction, soft objective ``neg_obj`` with its gradient, L-BFGS,
        hardening, vote and weight update), and ``neg_obj`` closes over the round's pair
        and point weights.
        """
        from scipy.optimize import minimize

        i, j = _check_pairs(X, i, j)
        Xd = _dense(X)
        mu = Xd.mean(axis=0)
        sd = Xd.std(axis=0)
        sd[sd == 0] = 1.0
        Z = (Xd - mu) / sd  # standardised copy for a well-conditioned search
        N, D = Z.shape
        semi = labels is None
        lab = np.ones(i.size) if semi else np.asarray(labels, np.float64)
        W = np.full(i.size, (0.5 if semi else 1.0) / i.size)
        S = np.full(N, 0.5 / N)
        search = None if semi else _StumpSearch(Z, i, j)
        thetas, ts, alphas = [], [], []
        self.r_ = []
        for m in range(self.n_bits):
            # Initial direction: best axis-parallel stump (supervised) or random.
            if search is not None:
                d0, t0, _ = search.best(np.where(lab > 0, -2.0, 2.0) * W)
                theta0 = np.zeros(D)
                theta0[d0] = 1.0
            else:
                rng = np.random.default_rng(self.random_state + m)
                theta0 = rng.standard_normal(D)
                theta0 /= np.linalg.norm(theta0)
                t0 = float(np.median(Z @ theta0))
            f0 = Z @ theta0 - t0
            span = min(abs(f0.min()), abs(f0.max())) or 1.0
            gamma = np.log(0.999 / 0.001) / span

            def neg_obj(params, W=W, S=S, gamma=gamma):
                th, T = params[:-1], params[-1]
                f = Z @ th - T
                h = 1.0 / (1.0 + np.exp(np.clip(gamma * f, -50, 50)))
                dh = -gamma * h * (1 - h)  # ∂h̃/∂f (Eq. 3.25)
                a, b = h[i] - 0.5, h[j] - 0.5
                c = 4 * a * b
                wl = W * lab
                r = np.sum(wl * c)
                g_f = np.zeros(N)
                np.add.at(g_f, i, wl * 4 * b * dh[i])
                np.add.at(g_f, j, wl * 4 * a * dh[j])
                if semi:
                    mh = h.mean() - 0.5
                    r -= np.sum(S * 4 * (h - 0.5)) * mh
                    g_f -= S * 4 * dh * mh
                    g_f -= np.sum(S * 4 * (h - 0.5)) * dh / N
                grad = np.concatenate([Z.T @ g_f, [-g_f.sum()]])
                return -r, -grad

            res = minimize(
                neg_obj,
                np.concatenate([theta0, [t0]]),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": self.max_iter},
            )
            theta = res.x[:-1]
            norm = np.linalg.norm(theta) or 1.0
            theta = theta / norm
            v = Z @ theta
            # Harden: best exact threshold on this projection.
            if semi:
                t, tp, fp = threshold_rates_semi(v, v[i], v[j], W, S)
                k = int(np.argmax(tp - fp))
                T = float(t[k])
                c = np.where((v[i] <= T) == (v[j] <= T), 1.0, -1.0)
                p = float(np.mean(v <= T))
                e = 2 * np.where(v <= T, p, 1 - p) - 1
                r = float(np.sum(W * c) - np.sum(S * e))
                alpha = _minimise_z(
                    lambda a, c=c, e=e, W=W, S=S: np.concatenate(
                        [W * np.exp(-a * c), S * np.exp(a * e)]
                    )
                )
                if r <= 1e-12 or alpha <= 0:
                    break
                W = W * np.exp(-alpha * c)
                W *= 0.5 / W.sum()
                S = S * np.exp(alpha * e)
                S *= 0.5 / S.sum()
            else:
                t, tp, fp = threshold_rates(v[i], v[j], lab, W)
                Wp, Wn = W[lab > 0].sum(), W[lab < 0].sum()
                rr = 2 * (tp * Wp - fp * Wn) + Wn - Wp
                k = int(np.argmax(rr))
                T, r = float(t[k]), float(rr[k])
                if r <= 1e-12:
                    break
                r = min(r, 1 - 1e-12)
                alpha = 0.5 * np.log((1 + r) / (1 - r))
                c = np.where((v[i] <= T) == (v[j] <= T), 1.0, -1.0)
                W = W * np.exp(-alpha * lab * c)
                W /= W.sum()
            thetas.append(theta), ts.append(T), alphas.append(alpha)
            self.r_.append(r)
            yield LearnProgress(m + 1, self.n_bits, r, f"projection {m + 1}: r={r:.3f}")
        P = np.asarray(thetas, np.float64).reshape(-1, D) / sd[None, :]
        self.embedding_ = HammingEmbedding(
            P.astype(np.float32),
            np.asarray(ts),
            np.asarray(alphas),
            offset=mu.astype(np.float32),
            kind="boostpro",
        )


def reduce_dimension(X, n_components: int = 128, random_state=0):
    """Truncated SVD (LSA) of a tf-idf matrix for the boosted embeddings.

    Parameters
    ----------
    X : (N, D) sparse or dense
    n_components : int

    Returns
    -------
    Z : (N, n_components) float32
    components : (n_components, D) float32
        Apply to new data with ``X @ components.T``.
    """
    from sklearn.decomposition import TruncatedSVD

    n_components = min(n_components, min(X.shape) - 1)
    svd = TruncatedSVD(n_components=n_components, random_state=random_state)
    Z = svd.fit_transform(X).astype(np.float32)
    return Z, svd.components_.astype(np.float32)
