"""Refinement of a grouping with per-image feature masks (thesis Sec. 9.3-9.4).

Every image is matched with (a sample of) the other members of its group; each feature's
mask value is the median of its match indicators over those matchings. Mask-weighted
affinities of the matched pairs give the masked flow, which ranks the members (prototypes
first, outliers flagged). :func:`masks_to_arrays` / :func:`masks_from_arrays` pack the
masks for storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import numpy as np

from engine.cluster.results import ClusterProgress, Refinement
from engine.core.progress import run_to_end
from engine.core.validate import check_choice

__all__ = [
    "Matcher",
    "masks_from_arrays",
    "masks_to_arrays",
    "refine_with_masks",
    "refine_with_masks_iter",
]


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
    partners = _choose_partners(labels, max_partners, rng)
    pair_set = {(min(a, b), max(a, b)) for a in range(n) for b in partners[a].tolist()}
    pairs = sorted(pair_set)
    results = yield from _match_pairs_iter(pairs, matcher, match)
    masks = _feature_masks(partners, results, sizes, indicator)
    yield ClusterProgress("masks", n, n, "feature masks")
    flow, Wm, known = _masked_flow(results, masks, labels, normalize)
    protos, outl = _flag_by_flow(labels, flow, prototype_percentile, outlier_z)
    return Refinement(
        labels=labels, masks=masks, flow=flow, prototypes=protos, outliers=outl,
        n_matches=len(pairs), extra={"masked_affinity": Wm, "known": known},
    )  # fmt: skip


def _choose_partners(
    labels: np.ndarray, max_partners: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Partners (sorted (p_i,) int64 per image) of every image: all other members of small
    groups, a random subset of ``max_partners`` of large ones. Each unordered pair is
    matched once and used by both ends."""
    n = labels.shape[0]
    partners: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    for g in np.unique(labels):
        idx = np.flatnonzero(labels == g)
        for a_pos, a in enumerate(idx):
            others = np.delete(idx, a_pos)
            if others.size > max_partners:
                others = rng.choice(others, size=max_partners, replace=False)
            partners[a] = np.sort(others)
    return partners


def _match_pairs_iter(
    pairs: list[tuple[int, int]], matcher: Any, match: Matcher
) -> Generator[ClusterProgress, None, dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]]:
    """Correspondences ``(pairs (c, 2) int64, weight (c,) float64)`` of every image pair
    ``(a, b)``, ``a < b``, keyed by the pair; batched when ``matcher`` has ``match_many``.
    Yields ``ClusterProgress("match", done, total)``."""
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
    return results


def _feature_masks(
    partners: list[np.ndarray],
    results: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]],
    sizes: np.ndarray,
    indicator: str,
) -> list[np.ndarray]:
    """Masks (m_i,) float32: median over an image's partners of the per-feature match
    indicator (Sec. 9.3); with ``indicator="weight"`` scaled to max 1."""
    masks: list[np.ndarray] = []
    for i in range(len(partners)):
        ind = np.zeros((max(partners[i].size, 1), sizes[i]), np.float32)
        for row, j in enumerate(partners[i].tolist()):
            p, w = results[(min(i, j), max(i, j))]
            col = p[:, 0] if i < j else p[:, 1]
            ind[row, col] = 1.0 if indicator == "binary" else w
        mask = np.median(ind, axis=0).astype(np.float32) if partners[i].size else ind[0]
        if indicator == "weight" and mask.size and mask.max() > 0:
            mask = mask / mask.max()
        masks.append(mask)
    return masks


def _masked_flow(
    results: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]],
    masks: list[np.ndarray],
    labels: np.ndarray,
    normalize: str,
):
    """Masked flow (n,) float64 and the sparse (n, n) csr masked affinities and matched-pair
    indicator of :attr:`Refinement.extra`.

    Mask-weighted, un-normalised affinities: each correspondence counts with the smaller
    mask mass of its two features (the histogram intersection of weighted bin masses,
    restricted to the matched pairs), times its pyramid-level weight (Sec. 9.4). Sparse
    (n, n) over the matched pairs only: O(n * max_partners) memory for any n. An image's
    flow is its mean affinity to its matched partners times ``C - 1``.
    """
    import scipy.sparse as sp

    n = labels.shape[0]
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
    return flow, Wm, known


def _flag_by_flow(
    labels: np.ndarray, flow: np.ndarray, prototype_percentile: float, outlier_z: float
) -> tuple[np.ndarray, np.ndarray]:
    """Prototypes (the top ``prototype_percentile`` % of each group by masked flow, at least
    one) and outliers (flow ``outlier_z`` robust standard deviations below the group's
    median); (n,) bool each."""
    n = labels.shape[0]
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
    return protos, outl


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
