"""Duplicate groups of a collection, in three tiers, and the copy of each group to keep.

Tiers (:data:`TIERS`), each decided by evidence a person can check:

``"identical"``
    The same bytes (the store's content hash, :meth:`IndexStore.duplicate_files`).
``"same_photo"``
    One image explains the other by a single transform with nearly all features
    agreeing: a resized, recompressed, converted, lightly edited, cropped or rotated
    copy. A camera RAW file and the JPEG beside it (same folder, same stem) count too.
``"similar_shots"``
    Many geometrically verified matches, but not one transform that explains the whole
    picture: bursts, bracketed exposures, the same scene taken twice.

How a pair is judged. For each image, its ``DUPLICATE_NEIGHBOURS`` best ``vocabulary``
neighbours (exhaustive up to ``EXHAUSTIVE_LIMIT`` images, else among the candidates of
the banded WTA index, :func:`engine.index.candidates.candidate_rows`; found a block of
images at a time, :mod:`engine.workflows.dup_candidates`) are checked geometrically
(ratio-test correspondences + robust homography, :func:`engine.index.verify.verify_pair`;
in worker processes, :mod:`engine.workflows.dup_verify`), and :func:`pair_evidence` measures

- ``score``: inliers / features of the image with fewer features (the old single
  threshold's number);
- ``overlap_fraction``: inliers / features lying where the two pictures overlap (the
  features of each image mapped by the fitted homography into the other's frame; the
  smaller of the two counts). A crop keeps all of its own features, so its fraction
  stays as high as a full copy's;
- ``residual`` / ``residual_px``: median distance between the inliers and where the
  homography puts them, as a fraction of the longer side / in pixels of the smaller
  picture. A copy is the same pixels, so its points agree to the feature detector's
  precision; two shots of a scene differ by parallax and movement;
- ``pixel_agreement`` (only for pairs that pass the geometric tests): the fine detail of
  the two pictures, aligned by the homography (refined by one sub-pixel translation),
  correlated tile by tile after blurring the sharper picture to the other's level (a
  blurred or resampled copy agrees, two shots do not); 0 when neither picture lies
  within the other, i.e. two framings of a scene (:func:`pixel_agreement`);
- ``taken_differ``: both files carry EXIF capture times and they differ (two shots).

:func:`pair_tier` applies the rule :data:`DEFAULT_RULE` (a :class:`TierRule`):
``same_photo`` when ``n_inliers >= min_inliers``, ``overlap_fraction >=
same_photo_fraction``, ``residual <= same_photo_residual``, ``residual_px <=
same_photo_residual_px``, ``pixel_agreement >= same_photo_pixels`` (when measurable; or,
for ``residual_px`` up to ``same_photo_residual_px_clean``, measured with no tile
disagreeing: off by default) and
the capture times do not differ; otherwise ``similar_shots`` when ``n_inliers >=
min_inliers`` and ``score >= similar_score``; otherwise no link. Byte-identical files are
``identical`` links. :data:`DEFAULT_THRESHOLDS` gives the same numbers by name. The
numbers were chosen on ``tests/benchmarks/bench_duplicates.py`` (the highest same-photo
recall with precision >= 0.99 on its tuning half; its docstring has the measured table,
including what this costs: on 325-pixel dev images, some small heavily compressed
re-exports and copies of nearly textureless photos fall to ``similar_shots``, and a
second shot of a flat scene from the same spot can pass for a copy).

How groups are built. Each photo is in one group at most:

1. components over the identical and same_photo links (union-find); a component whose
   members are all linked by identical files alone is an ``identical`` group, any other
   a ``same_photo`` group. A link that would join photos the search found not to be
   copies (pixels compared and disagreeing, capture times differing) more often than
   linked is left out (:func:`engine.workflows.dup_groups.consistent_links`; a tie
   goes to the far more precise link: a crop of one shot is not a second shot's copy);
2. ``similar_shots`` groups are the components of the similar_shots links among the
   photos left out of step 1 (a photo already in a group of copies is not listed again
   among shots).

A photo left out of both that is a similar shot of a copy group's member is listed with
that group as :attr:`DuplicateGroup.related` (never acted on by a clean-up). The groups
are built by :func:`engine.workflows.dup_groups.group_links`.

Which copy of a group to keep is suggested by :func:`suggest_keeper` (the app's
Duplicates view and ``simile duplicates`` both ask it); see :func:`best_copy` for the
rule (``best_shot`` for similar shots). They live in :mod:`engine.workflows.keeper`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.core.arrays import median_of
from engine.index.verify import VERIFY_MIN_INLIERS, verify_pair
from engine.io.formats import raw_sidecar_pairs
from engine.workflows.appearance import APPEARANCE_RESIDUAL_PX, appearance_links, whole_or_none
from engine.workflows.dup_candidates import neighbour_blocks
from engine.workflows.dup_groups import (
    TIERS,
    DuplicateGroup,
    conflict_levels,
    group_links,
    reduced_copies,
)
from engine.workflows.dup_verify import PairContext, VerifyInterrupted, verify_pairs
from engine.workflows.framing import frame_offset, frame_residual, inside_frame, map_points
from engine.workflows.keeper import (
    DERIVED_WORDS,
    KEEPER_BPP_RATIO,
    KEEPER_MTIME_SLACK,
    KEEPER_PIXEL_TOLERANCE,
    KEEPER_QUALITY_STEP,
    KEEPER_SIDE,
    LOSSY_FORMATS,
    CopyStats,
    Keeper,
    best_copy,
    capture_time,
    copy_stats,
    jpeg_quality,
    keeper_reason,
    looks_derived,
    sharpness,
    suggest_keeper,
)
from engine.workflows.pair_cache import AskedPairs, PairCache, remember
from engine.workflows.pixels import PIXEL_CLEAN_SHARE, PIXEL_SIDE, pixel_agreement, pixel_tests

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.encode import EncodedImages
    from engine.index.searcher import Searcher

__all__ = [
    "COMPRESSED_FLOOR",
    "DEFAULT_RULE",
    "DEFAULT_THRESHOLDS",
    "DERIVED_WORDS",
    "DUPLICATE_BLOCK",
    "DUPLICATE_CACHE",
    "DUPLICATE_NEIGHBOURS",
    "KEEPER_BPP_RATIO",
    "KEEPER_MTIME_SLACK",
    "KEEPER_PIXEL_TOLERANCE",
    "KEEPER_QUALITY_STEP",
    "KEEPER_SIDE",
    "LOSSY_FORMATS",
    "TIERS",
    "CopyStats",
    "DuplicateGroup",
    "Keeper",
    "PairEvidence",
    "TierRule",
    "best_copy",
    "capture_time",
    "copy_stats",
    "find_duplicates",
    "group_links",
    "identical_pairs",
    "jpeg_quality",
    "keeper_reason",
    "looks_derived",
    "neighbour_evidence",
    "pair_evidence",
    "pair_tier",
    "pixel_agreement",
    "sharpness",
    "suggest_keeper",
]

DUPLICATE_NEIGHBOURS = 10
#: Features of one picture finer (scaled into the other) than this quantile of the other
#: picture's feature scales are not counted by :attr:`PairEvidence.overlap_fraction`.
VISIBLE_SCALE_QUANTILE = 0.05
DUPLICATE_BLOCK = 128  # pairs a worker process checks at a time
DUPLICATE_CACHE = 1024  # images' features a worker keeps (~130 MB at 500 features)


@dataclass(frozen=True)
class TierRule:
    """The numbers that decide a verified pair's tier (:func:`pair_tier`).

    Attributes
    ----------
    min_inliers : int
        Fewest geometric inliers for any link.
    same_photo_fraction : float
        Least :attr:`PairEvidence.overlap_fraction` of a ``same_photo`` pair.
    same_photo_residual : float
        Largest :attr:`PairEvidence.residual` (fraction of the longer side) of a
        ``same_photo`` pair.
    same_photo_compressed : float
        Least :attr:`PairEvidence.compressed_agreement` that makes up for a pixel
        agreement below ``same_photo_pixels`` (a re-export at a lower JPEG quality).
    same_photo_pixels : float
        Least :attr:`PairEvidence.pixel_agreement` of a ``same_photo`` pair (not asked
        of a pair whose pixels could not be compared, ``nan``).
    same_photo_residual_px : float
        Largest :attr:`PairEvidence.residual_px` (pixels of the smaller picture) of a
        ``same_photo`` pair ...
    same_photo_residual_px_clean : float
        ... unless its pixels agree cleanly: at least ``same_photo_pixels`` with no
        textured tile disagreeing (:attr:`PairEvidence.pixel_disagreement` at most
        :data:`~engine.workflows.pixels.PIXEL_CLEAN_SHARE`); then up to this. A blurred,
        desaturated or re-toned copy moves its features by a few tenths of a pixel
        more than a resized one, but not a single tile of its detail; two shots with
        that residual (parallax) differ somewhere.
    same_photo_residual_px_frame, same_photo_frame_px : float
        ... or up to ``same_photo_residual_px_frame`` when the pictures keep one frame
        (:attr:`PairEvidence.frame_offset_px` at most ``same_photo_frame_px``); then
        the pixel test decides as below ``same_photo_residual_px``. A copy blurred or
        re-toned in place (or a small re-export) moves its features by up to 0.7 (1) px
        (blur shifts the detector's blobs), not its frame; another shot held that still
        is rare, and the pixel test tells it (``bench_duplicates.py``, sixth round).
    similar_score : float
        Least :attr:`PairEvidence.score` of a ``similar_shots`` pair.
    """

    min_inliers: int = VERIFY_MIN_INLIERS
    same_photo_fraction: float = 0.3
    same_photo_residual: float = 0.01
    similar_score: float = 0.2
    same_photo_pixels: float = 0.95
    same_photo_compressed: float = 0.95
    same_photo_residual_px: float = 0.35
    # (0.7 px found 1-2 more copies of the duplicate benchmark's tuning halves, none
    # more held out, and took 2.6x the CPU of a 10,000-photo first search: off)
    same_photo_residual_px_clean: float = 0.35
    same_photo_residual_px_frame: float = 1.0
    same_photo_frame_px: float = 4.0

    def with_threshold(self, threshold: float | None) -> TierRule:
        """This rule with ``similar_score = threshold`` (unchanged for None)."""
        if threshold is None:
            return self
        return dataclasses.replace(self, similar_score=float(threshold))


#: The rule the app and ``simile duplicates`` use (chosen on the benchmark).
DEFAULT_RULE = TierRule()
#: The same numbers by name: ``"same_photo"`` the least overlap fraction of a same-photo
#: pair (with ``"same_photo_residual"`` and ``"same_photo_pixels"``), ``"similar_shots"``
#: the least score of a similar-shots pair (the app's threshold box starts at it).
DEFAULT_THRESHOLDS: dict[str, float] = {
    "same_photo": DEFAULT_RULE.same_photo_fraction,
    "same_photo_residual": DEFAULT_RULE.same_photo_residual,
    "same_photo_pixels": DEFAULT_RULE.same_photo_pixels,
    "same_photo_compressed": DEFAULT_RULE.same_photo_compressed,
    "similar_shots": DEFAULT_RULE.similar_score,
}
#: The compressed-copy test (:func:`engine.workflows.pixels.compressed_agreement`) is
#: asked only of pairs whose pixel agreement is at least this (and below the rule's
#: ``same_photo_pixels``): a pair asked costs a JPEG encoding and decoding of one picture
#: per resampling filter. 0.8 (0.9 before): a JPEG saved again at its own size, or a
#: quality-45 re-export, agrees at 0.84-0.90 only, yet recreated at 0.9996 (other shots
#: 0.92 at most; ``tests/benchmarks/bench_duplicates.py``, sixth round).
COMPRESSED_FLOOR = 0.8


@dataclass(frozen=True)
class PairEvidence:
    """What the geometric check of two images found (:func:`pair_evidence`).

    Attributes
    ----------
    n_matches : int
        Ratio-test correspondences.
    n_inliers : int
        Those consistent with one robust homography (distinct points, 0 when none).
    score : float
        ``n_inliers / min(features of a, features of b)``, at most 1.
    overlap_fraction : float
        ``n_inliers / min(features of a mapped inside b, features of b mapped inside
        a)``, at most 1: the share of the features where the pictures overlap that agree.
        Features finer than the other picture can show (their scale, mapped, under the
        :data:`VISIBLE_SCALE_QUANTILE` quantile of the other's) are not counted.
    residual : float
        Median reprojection error of the inliers under the least-squares homography,
        as a fraction of the longer side of image b; ``inf`` without a fit.
    residual_px : float
        The same median error in pixels of the picture with the smaller longer side
        (positions as the features were extracted, at most 1024 px): a copy agrees to
        the detector's precision at its own scale (about 0.1 px); two shots of a scene,
        even from a tripod, differ by a fraction of a pixel more. ``inf`` without a fit.
    pixel_agreement : float
        After aligning the two pictures by the homography (and one sub-pixel
        translation), the median normalised correlation of their fine detail over the
        textured patches of the overlap, the sharper picture blurred to the other's
        level (:func:`pixel_agreement`): near 1 for a copy, even blurred or recompressed,
        lower for another shot (noise, movement, parallax differ); 0 when neither
        picture lies within the other (another framing). ``nan`` when not measured (only
        pairs that pass the geometric part of the same-photo rule are) or not
        measurable.
    compressed_agreement : float
        For a pair whose pixel agreement is below the same-photo rule's but at least
        :data:`COMPRESSED_FLOOR`: the agreement once the larger picture is compressed
        with the smaller JPEG file's own quantisation table
        (:func:`engine.workflows.pixels.compressed_agreement`: a re-export at a lower
        quality); ``nan`` otherwise.
    pixel_disagreement : float
        The share of textured tiles whose detail disagrees where
        :attr:`pixel_agreement` was measured (:func:`~engine.workflows.pixels.pixel_tests`);
        ``nan`` when not measured.
    homography : (3, 3) float64 or None
        Maps the feature positions of a to those of b (least squares on the inliers).
    taken_differ : bool
        Both files carry an EXIF capture time (``DateTimeOriginal`` with its
        sub-seconds) and the two differ: two shots, not copies of one. Read for the pairs
        whose pixels are compared; False otherwise.
    frame_offset_px : float
        How far a's frame lands from b's under the homography, best quarter turn, in
        pixels of the smaller picture (:func:`engine.workflows.framing.frame_offset`):
        a pixel or two for a whole picture kept in its frame; ``inf`` without a fit.
    frame_residual_px : float
        The inliers' median distance from where the map of a's whole frame onto b's
        (a resize, best quarter turn) puts them, in pixels of the smaller picture
        (:func:`engine.workflows.framing.frame_residual`): about the feature residual
        for a picture kept in its frame, even when a fit to few features puts the
        corners off; ``inf`` without a fit.
    """

    n_matches: int
    n_inliers: int
    score: float
    overlap_fraction: float
    residual: float
    residual_px: float = float("inf")
    pixel_agreement: float = float("nan")
    compressed_agreement: float = float("nan")
    pixel_disagreement: float = float("nan")
    homography: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    taken_differ: bool = False
    frame_offset_px: float = float("inf")
    frame_residual_px: float = float("inf")


def pair_evidence(fa: Features, fb: Features) -> PairEvidence:
    """Geometric evidence that two images show the same photo (module docstring).

    Parameters
    ----------
    fa, fb : Features
        Their local features (descriptors (M, D) float32, xy (M, 2) float32, positions
        in the loaded image of size ``image_size``).

    Returns
    -------
    PairEvidence
    """
    import cv2

    na, nb = len(fa), len(fb)
    if min(na, nb) < 4:
        return PairEvidence(0, 0, 0.0, 0.0, float("inf"))
    v = verify_pair(fa.descriptors, fa.xy, fb.descriptors, fb.xy, image_size=fb.image_size)
    n = int(v.n_inliers)
    score = min(1.0, n / min(na, nb))
    if n < 4:
        return PairEvidence(len(v.pairs), n, score, score, float("inf"))
    pa = fa.xy[v.pairs[v.inliers, 0]].astype(np.float64)
    pb = fb.xy[v.pairs[v.inliers, 1]].astype(np.float64)
    h, _ = cv2.findHomography(pa, pb, 0)
    side_b = float(max(fb.image_size)) if fb.image_size else float(np.ptp(fb.xy, axis=0).max())
    if h is None or not np.isfinite(h).all() or abs(np.linalg.det(h)) < 1e-12:
        return PairEvidence(len(v.pairs), n, score, score, float("inf"))
    err = float(median_of(np.linalg.norm(map_points(h, pa) - pb, axis=1)))
    residual = err / max(side_b, 1.0)
    side_a = float(max(fa.image_size)) if fa.image_size else side_b
    residual_px = err * min(1.0, side_a / max(side_b, 1.0))
    in_b = inside_frame(map_points(h, fa.xy.astype(np.float64)), fb.image_size)
    in_a = inside_frame(map_points(np.linalg.inv(h), fb.xy.astype(np.float64)), fa.image_size)
    if fa.scale is not None and fb.scale is not None and len(fa.scale) and len(fb.scale):
        # a feature finer than the other picture can show has no partner there (a
        # half-size copy loses the finest details): count only those it could show
        s = abs(float(np.linalg.det(h[:2, :2]))) ** 0.5
        in_b &= fa.scale * s >= _finest_visible(fb.scale)
        in_a &= fb.scale / max(s, 1e-9) >= _finest_visible(fa.scale)
    overlap = min(1.0, n / max(1, min(int(in_b.sum()), int(in_a.sum()))))
    sizes = (fa.image_size, fb.image_size)
    frame = frame_offset(h, *sizes) if all(sizes) else float("inf")
    fit = frame_residual(pa, pb, *sizes) if all(sizes) else float("inf")
    return PairEvidence(
        len(v.pairs), n, score, overlap, residual, residual_px, homography=h,
        frame_offset_px=frame, frame_residual_px=fit,
    )  # fmt: skip


_FINEST: dict[int, tuple[np.ndarray, np.float64]] = {}


def _finest_visible(scale: np.ndarray) -> np.float64:
    """``np.quantile(scale, VISIBLE_SCALE_QUANTILE)``, remembered for the feature sets of
    the last few thousand photos (a photo is checked against several neighbours)."""
    hit = _FINEST.get(id(scale))
    if hit is not None and hit[0] is scale:
        return hit[1]
    if len(_FINEST) >= 4096:
        _FINEST.clear()
    q = np.quantile(scale, VISIBLE_SCALE_QUANTILE)  # (a float64 scalar: compared as such)
    _FINEST[id(scale)] = (scale, q)
    return q


def pair_tier(ev: PairEvidence, rule: TierRule = DEFAULT_RULE) -> str | None:
    """The tier of a verified pair by ``rule``: "same_photo", "similar_shots" or None.

    Parameters
    ----------
    ev : PairEvidence
    rule : TierRule

    Returns
    -------
    str or None
        ``"same_photo"`` when ``n_inliers >= min_inliers``, ``overlap_fraction >=
        same_photo_fraction``, ``residual <= same_photo_residual``, ``residual_px <=
        same_photo_residual_px`` (or up to ``same_photo_residual_px_frame`` for a pair
        that keeps its frame, ``frame_offset_px <= same_photo_frame_px``, its pixels
        measured; or up to ``same_photo_residual_px_clean`` with a clean pixel
        agreement: ``pixel_disagreement <= PIXEL_CLEAN_SHARE``) and
        ``pixel_agreement >= same_photo_pixels`` (or nan: not measurable; or else
        ``compressed_agreement >= same_photo_compressed``) and the
        capture times do not differ (``not taken_differ``); else
        ``"similar_shots"`` when ``n_inliers >= min_inliers`` and ``score >=
        similar_score``; else None (not linked).
    """
    if ev.n_inliers < rule.min_inliers:
        return None
    pixels = (
        not ev.pixel_agreement < rule.same_photo_pixels
        or ev.compressed_agreement >= rule.same_photo_compressed
    )
    if ev.residual_px > rule.same_photo_residual_px:  # (then only measured pixels)
        pixels = pixels and not np.isnan(ev.pixel_agreement)  # (measured)
        if not _kept_frame(ev, rule):  # (and only a clean agreement)
            pixels = (
                ev.pixel_agreement >= rule.same_photo_pixels
                and ev.pixel_disagreement <= PIXEL_CLEAN_SHARE
            )
    if _same_geometry(ev, rule) and pixels and not ev.taken_differ:
        return "same_photo"
    if ev.score >= rule.similar_score:
        return "similar_shots"
    return None


def _same_geometry(ev: PairEvidence, rule: TierRule) -> bool:
    """The geometric part of the same-photo rule (the residual up to
    ``same_photo_residual_px_clean``, or ``same_photo_residual_px_frame`` for a pair
    that keeps its frame: the pixels then decide)."""
    return (
        ev.n_inliers >= rule.min_inliers
        and ev.overlap_fraction >= rule.same_photo_fraction
        and ev.residual <= rule.same_photo_residual
        and (
            ev.residual_px <= max(rule.same_photo_residual_px, rule.same_photo_residual_px_clean)
            or _kept_frame(ev, rule)
        )
    )


def _kept_frame(ev: PairEvidence, rule: TierRule) -> bool:
    """Whether the pair keeps one frame (:func:`_one_frame`) with a residual allowed."""
    return ev.residual_px <= rule.same_photo_residual_px_frame and _one_frame(ev, rule)


def _one_frame(ev: PairEvidence, rule: TierRule) -> bool:
    """Whether one picture is the other's whole frame: its corners land within
    ``same_photo_frame_px``, or the map of the whole frame explains its features within
    ``same_photo_residual_px_frame`` (a fit to few features can put the corners off)."""
    return (
        ev.frame_offset_px <= rule.same_photo_frame_px
        or ev.frame_residual_px <= rule.same_photo_residual_px_frame
    )


def find_duplicates(
    searcher: Searcher,
    threshold: float | None = None,
    *,
    tiers: Iterable[str] = TIERS,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
    rule: TierRule | None = None,
) -> list[DuplicateGroup]:
    """Duplicate groups of a collection, by tier (see the module docstring).

    Parameters
    ----------
    searcher : Searcher
        The collection's search data.
    threshold : float or None
        In (0, 1]: the least :attr:`PairEvidence.score` of a ``similar_shots`` link (the
        loosest link). None: the default, ``DEFAULT_THRESHOLDS["similar_shots"]``. The
        ``same_photo`` tier is decided by its own evidence whatever the threshold.
    tiers : iterable of str
        The tiers to report (a subset of :data:`TIERS`); the others are still worked
        out so that a photo is in the same group whichever tiers are asked for.
    cancel : threading.Event, optional
        Checked between blocks of pair checks; when set, :class:`InterruptedError`.
    progress : callable, optional
        ``progress(done, total)`` with pairs checked so far, as they are checked. When it
        has a ``candidates`` method, ``progress.candidates(rows_done, n)`` is called
        while the candidate pairs are found (before any pair is checked).
    rule : TierRule, optional
        Default :data:`DEFAULT_RULE` (``threshold`` overrides its ``similar_score``).

    Returns
    -------
    list of DuplicateGroup
        Of the asked tiers, strictest tier first, then largest groups first; in a group
        the representative (most links) comes first with score 1.0, the others with their
        best link score.

    Raises
    ------
    ValueError
        For a threshold outside (0, 1] or an unknown tier.
    InterruptedError
        When ``cancel`` is set.
    """
    if threshold is not None and not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    want = set(tiers)
    if not want or want - set(TIERS):
        raise ValueError(f"tiers must be a non-empty subset of {TIERS}, got {sorted(want)}")
    rule = (rule or DEFAULT_RULE).with_threshold(threshold)
    ids = searcher.ensure()[1].ids  # (row_paths are those of the current search data)
    paths = searcher.row_paths
    identical = identical_pairs(searcher)
    links: dict[tuple[int, int], tuple[str, float]] = {p: ("identical", 1.0) for p in identical}
    if want == {"identical"}:
        return [g for g in group_links(links, paths) if g.tier in want]
    # photos with too few features are compared by appearance in a thread while the
    # pairs are checked (after them, it was half a minute of one core at 100,000 photos);
    # the pairs the checks link as copies are left out of its links, as they were then
    stop = _Either(cancel)
    pool = ThreadPoolExecutor(1, thread_name_prefix="simile-appearance")
    pixels = rule.same_photo_pixels
    compressed = (COMPRESSED_FLOOR, rule.same_photo_compressed)
    faint = (APPEARANCE_RESIDUAL_PX, pair_evidence)
    looks = pool.submit(
        appearance_links, searcher, dict(links), pixels, compressed=compressed, cancel=stop,
        low_contrast=faint,
    )  # fmt: skip
    try:
        evidence = neighbour_evidence(
            searcher, skip=identical, cancel=cancel, progress=progress, pixel_rule=rule
        )
        conflicts: dict[tuple[int, int], PairEvidence] = {}
        residuals: dict[tuple[int, int], float] = {}  # (geometric copy links, other frames)
        whole: list[tuple[int, int]] = []  # (those keeping one frame)
        for pair, ev in evidence.items():
            tier = pair_tier(ev, rule)
            if tier is not None:
                links[pair] = (tier, ev.score)
            if tier == "same_photo" and _one_frame(ev, rule):
                whole.append(pair)
            elif tier == "same_photo":
                residuals[pair] = ev.residual_px
            if tier != "same_photo" and (ev.taken_differ or ev.pixel_agreement <= 1.0):
                conflicts[pair] = ev  # (not copies: the pixels disagree, or the times)
        found = looks.result()
        asked = lambda i, j: whole_or_none(evidence.get((i, j)), rule.min_inliers)  # noqa: E731
        found.update(appearance_links(searcher, {**links, **found}, pixels, compressed=compressed,
                                      cancel=stop, asked=asked))  # fmt: skip
    except BaseException:
        stop.set()  # (the thread stops at its next pair; nobody waits for it)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    links.update(
        (pair, v)
        for pair, v in found.items()
        if links.get(pair, ("similar_shots",))[0] == "similar_shots"
    )
    for pair in raw_sidecar_pairs(paths):
        if pair not in links or links[pair][0] == "similar_shots":
            ev = evidence.get(pair)
            links[pair] = ("same_photo", 1.0 if ev is None else ev.score)
    # (the sizes of the conflicting pairs' pictures: one catalogue read, not one per row)
    sizes = searcher.store.image_sizes(int(ids[r]) for p in (*conflicts, *whole) for r in p)
    size_of = lambda r: sizes.get(int(ids[r]))  # noqa: E731
    conflicts = conflict_levels(conflicts, links, size_of)
    residuals.update(dict.fromkeys(reduced_copies(whole, size_of), 0.0))
    groups = [g for g in group_links(links, paths, conflicts, residuals) if g.tier in want]
    if "similar_shots" not in want:  # (the related photos are similar shots)
        groups = [dataclasses.replace(g, related=[]) for g in groups]
    return groups


class _Either:
    """Set when ``cancel`` (the person's) or this one is (an error elsewhere)."""

    def __init__(self, cancel: threading.Event | None) -> None:
        self.cancel = cancel
        self.own = threading.Event()

    def set(self) -> None:
        self.own.set()

    def is_set(self) -> bool:
        return self.own.is_set() or (self.cancel is not None and self.cancel.is_set())


def identical_pairs(searcher: Searcher) -> set[tuple[int, int]]:
    """(i, j) rows, i < j, of byte-identical files (each file linked to the first).

    Parameters
    ----------
    searcher : Searcher
        Current (:meth:`Searcher.ensure` called): rows index ``searcher.row_paths``.

    Returns
    -------
    set of (int, int)
    """
    row_of_path = {str(p): r for r, p in enumerate(searcher.row_paths)}
    out: set[tuple[int, int]] = set()
    for group in searcher.store.duplicate_files():
        rs = sorted(row_of_path[p] for p in group if p in row_of_path)
        rs = _one_per_file(rs, searcher.row_paths)
        out.update((rs[0], r) for r in rs[1:])
    return out


def _one_per_file(rows: list[int], paths: Sequence[Path]) -> list[int]:
    """``rows`` without the second and later names of one file on disk (hard links, as
    a clean-up's "replace by a hard link" leaves them: they take no space twice)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for r in rows:
        try:
            st = os.stat(paths[r])
            key = (st.st_dev, st.st_ino)
        except OSError:
            out.append(r)
            continue
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def neighbour_evidence(
    searcher: Searcher,
    *,
    skip: Iterable[tuple[int, int]] = (),
    cancel: threading.Event | None = None,
    progress: Callable[[int, int], object] | None = None,
    pixel_rule: TierRule | None = DEFAULT_RULE,
) -> dict[tuple[int, int], PairEvidence]:
    """:func:`pair_evidence` of every row and its ``DUPLICATE_NEIGHBOURS`` best
    ``vocabulary`` neighbours, with :attr:`PairEvidence.pixel_agreement` measured for
    the pairs that pass the geometric part of ``pixel_rule``'s same-photo test.

    Parameters
    ----------
    searcher : Searcher
    skip : iterable of (int, int)
        Pairs (i < j) not to check (e.g. byte-identical files).
    cancel, progress
        As :func:`find_duplicates`.
    pixel_rule : TierRule or None
        Which pairs get their pixels compared (None: none).

    Returns
    -------
    dict
        ``(i, j) -> PairEvidence`` for rows i < j (indices into ``searcher.row_paths``),
        for the pairs whose images both have at least 4 features.
    """
    _, data = searcher.ensure()
    # (a ``progress.candidates(rows_done, n)`` method, when there is one, follows the
    # search for candidates; the pairs of its first blocks are checked while it goes on)
    found = getattr(progress, "candidates", None)
    blocks = neighbour_blocks(searcher, data, DUPLICATE_NEIGHBOURS, cancel=cancel, progress=found)
    paths, keys = searcher.row_paths, searcher.data_keys
    cache = None if keys is None else PairCache.load(searcher.store.index_dir)
    return _verify(
        searcher.store, data, paths, blocks, cancel, progress, pixel_rule, cache, keys, skip
    )


def _verify(
    store,
    data: EncodedImages,
    paths: Sequence[Path],
    todo: Iterable[tuple[int, int]] | Iterator[np.ndarray],
    cancel: threading.Event | None,
    progress: Callable[[int, int], object] | None,
    pixel_rule: TierRule | None,
    cache: PairCache | None = None,
    keys: np.ndarray | None = None,
    skip: Iterable[tuple[int, int]] = (),
) -> dict[tuple[int, int], PairEvidence]:
    """:func:`pair_evidence` of the pairs of rows ``todo`` (:func:`_judge`), in worker
    processes (:func:`engine.workflows.dup_verify.verify_pairs`): those the ``cache``
    remembers (by the rows' ``keys``) are not checked again; the others are added to it
    and it is saved, also when cancelled (:mod:`.pair_cache`).

    ``todo`` is a sequence of pairs, or an iterator of blocks of pairs as the candidate
    search finds them (a pair may come again; those in ``skip`` are left out), checked
    while the next blocks are found. ``progress(done, total)`` is called once all the
    pairs are known: first with the remembered pairs done, then as pairs are checked.
    """
    if cancel is not None and cancel.is_set():
        raise InterruptedError("the duplicate search was cancelled")
    no_pixels = functools.partial(_same_geometry, rule=pixel_rule) if pixel_rule else None
    asked = AskedPairs(todo, skip, cache, keys, no_pixels or (lambda ev: False), PairEvidence)
    asked.progress = progress
    out: dict[tuple[int, int], PairEvidence] = {}

    def report(n: int) -> None:
        if asked.total is not None:
            asked.report(len(asked.known) + n)

    try:
        out = verify_pairs(
            asked.blocks(),
            functools.partial(_judge, pixel_rule=pixel_rule),
            index_dir=store.index_dir,
            ids=np.asarray(data.ids, np.int64),
            paths=paths,
            get_features=lambda r: store.get_features(int(data.ids[r])),
            cancel=cancel,
            progress=None if progress is None else report,
            chunk=DUPLICATE_BLOCK,
            feature_cache=DUPLICATE_CACHE,
        )
    except VerifyInterrupted as exc:
        out = exc.done
        raise InterruptedError("the duplicate search was cancelled") from None
    finally:
        if cache is not None and keys is not None and out:
            remember(cache, keys, out, functools.partial(_pixels_asked, pixel_rule=pixel_rule))
            cache.save(keys)
    asked.report(asked.total)
    out.update(asked.known)
    return {pair: out[pair] for pair in sorted(asked.pairs) if pair in out}  # (sorted)


def _pixels_asked(ev: PairEvidence, pixel_rule: TierRule | None) -> bool:
    """Whether :func:`_judge` compares the pixels of a pair with this evidence."""
    return pixel_rule is not None and ev.homography is not None and _same_geometry(ev, pixel_rule)


def _judge(ctx: PairContext, i: int, j: int, pixel_rule: TierRule | None) -> PairEvidence | None:
    """The evidence of rows ``i`` and ``j`` (None when one has fewer than 4 features):
    :func:`pair_evidence`, then, for a pair that passes the geometric part of
    ``pixel_rule``'s same-photo test, the capture times and the pixel test, with the
    compressed-copy test when the pixel agreement falls short of the rule by little
    (:data:`COMPRESSED_FLOOR`; neither is asked when the capture times differ: the pair
    is no copy whatever its pixels)."""
    fa, fb = ctx.features(i), ctx.features(j)
    if min(len(fa), len(fb)) < 4:
        return None
    ev = pair_evidence(fa, fb)
    if _pixels_asked(ev, pixel_rule):
        ta, tb = ctx.taken(i), ctx.taken(j)
        differ = ta is not None and tb is not None and ta != tb
        band = (COMPRESSED_FLOOR, pixel_rule.same_photo_pixels)
        nan = float("nan")
        enough = pixel_rule.same_photo_compressed
        agree, comp, disagree = (
            (nan,) * 3 if differ else _pixels_of(ctx, i, j, fa, fb, ev.homography, band, enough)
        )
        ev = dataclasses.replace(
            ev,
            pixel_agreement=agree,
            compressed_agreement=comp,
            pixel_disagreement=disagree,
            taken_differ=differ,
        )
    return ev


def _pixels_of(
    ctx: PairContext,
    i: int,
    j: int,
    fa: Features,
    fb: Features,
    h: np.ndarray,
    band: tuple[float, float],
    enough: float,
) -> tuple[float, float, float]:
    """:func:`engine.workflows.pixels.pixel_tests` of the files of rows ``i`` and ``j``:
    their pixel agreement, when it falls in ``band`` their compressed-copy agreement
    (``enough`` settles it), and the share of disagreeing tiles (nan when one cannot be
    read, or not asked)."""
    nan = float("nan")
    ga, gb = ctx.gray(i, PIXEL_SIDE), ctx.gray(j, PIXEL_SIDE)
    if ga is None or gb is None:  # a file changed or gone since indexing: geometry decides
        return nan, nan, nan
    try:
        facts = lambda: (ctx.jpeg(i), ctx.jpeg(j))  # noqa: E731
        sizes = (fa.image_size, fb.image_size)
        return pixel_tests(ga, gb, h, *sizes, facts, band, enough=enough, disagreement=True)
    except Exception:
        return nan, nan, nan
