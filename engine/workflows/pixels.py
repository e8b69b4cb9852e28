"""The pixel test of a duplicate pair: do two pictures, aligned by the homography of
their features, show the same fine detail? (:mod:`engine.workflows.duplicates` asks it
of the pairs that pass the geometric part of its same-photo rule.)

What a copy keeps and what another shot does not (see :func:`pixel_agreement`):

- the framing: a copy is the whole photo or a cut of it, so one picture lies within
  the other; two framings of a scene (a pan, a step aside) each show detail the other
  lacks (:data:`PIXEL_WITHIN`), and a shot zoomed in on part of another holds detail
  no enlargement of it has (:mod:`engine.workflows.framing`);
- the fine detail, even blurred or recompressed: once the sharper picture is blurred to
  the level of the other (:data:`PIXEL_BLURS`) and a sub-pixel offset of the feature
  fit is taken out (:data:`PIXEL_SHIFT`), a copy's detail correlates almost perfectly;
  two shots differ by noise, movement and parallax, which no blur and no single shift
  remove;
- where they differ: a recompressed, resampled or converted copy differs everywhere a
  little and nowhere a lot, so hardly any of its textured tiles disagree; a second shot
  moments apart differs in a few places (a moved person, leaves, a wave) or everywhere
  by parallax, with detail of the same strength on both sides where they differ (a
  watermark or clipped highlights add or remove detail on one side only): such a pair
  is two shots unless the rest agrees near perfectly (:data:`PIXEL_MOVED_SHARE`, the
  tiles: :mod:`engine.workflows.pixel_tiles`). :func:`pixel_evidence` gives the
  agreement and the share of disagreeing tiles; a pair whose tiles all agree
  (:data:`PIXEL_CLEAN_SHARE`) can get :data:`PIXEL_CLEAN_BONUS` added to its agreement,
  to tell a small, heavily compressed copy (detail correlating at only 0.90-0.94) from
  two shots moments apart. The bonus is 0: the best one on the duplicate benchmark's
  tuning half (0.07) cost precision on every other half measured, second shots joining
  the copies (``tests/benchmarks/bench_duplicates.py``).
"""

from __future__ import annotations

import copy
import io
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.core.arrays import median_of
from engine.workflows.align import translation_step
from engine.workflows.framing import frame_corners, zoomed_shot
from engine.workflows.pixel_tiles import (
    PIXEL_BLURS,
    PIXEL_DISAGREE,
    PIXEL_MOVED_CAP,
    PIXEL_MOVED_EXEMPT,
    PIXEL_MOVED_RATIO,
    PIXEL_MOVED_SHARE,
    PIXEL_TEXTURE_FLOOR,
    PixelTiles,
    judged_evidence,
    matched_agreement,
    moved_evidence,
    tone_mapped,
)

__all__ = [
    "PIXEL_BLURS",
    "PIXEL_CLEAN_BONUS",
    "PIXEL_CLEAN_SHARE",
    "PIXEL_DISAGREE",
    "PIXEL_MOVED_CAP",
    "PIXEL_MOVED_EXEMPT",
    "PIXEL_MOVED_RATIO",
    "PIXEL_MOVED_SHARE",
    "PIXEL_PATCH",
    "PIXEL_SHIFT",
    "PIXEL_SIDE",
    "PIXEL_TEXTURE_FLOOR",
    "PIXEL_WITHIN",
    "combine_evidence",
    "compressed_agreement",
    "gray_levels",
    "jpeg_facts",
    "pixel_agreement",
    "pixel_evidence",
    "pixel_tests",
    "within_share",
]

#: Tile side (pixels) of :func:`pixel_agreement`.
PIXEL_PATCH = 8
#: Longest side (pixels) pictures are loaded at for :func:`pixel_agreement`.
PIXEL_SIDE = 1024
#: Largest sub-pixel correction (pixels) of the feature alignment.
PIXEL_SHIFT = 2.0
#: Least share of one picture's textured tiles that must lie inside the other
#: (:func:`within_share`); below it the pictures are two framings: agreement 0.
PIXEL_WITHIN = 0.98
#: Largest share of disagreeing textured tiles of a pair whose difference is "everywhere
#: a little, nowhere a lot" (a recompressed or resampled copy).
PIXEL_CLEAN_SHARE = 0.01
#: Added to the agreement of such a pair (capped at 1) by :func:`pixel_agreement`; off
#: (see the module docstring).
PIXEL_CLEAN_BONUS = 0.0


_LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def gray_levels(rgb: np.ndarray) -> np.ndarray:
    """The gray levels the pixel tests and the keeper's sharpness compare.

    Parameters
    ----------
    rgb : (H, W, 3) uint8
        RGB pixels (:func:`engine.io.imageio.load_image`).

    Returns
    -------
    (H, W) float32
        ``0.299 R + 0.587 G + 0.114 B`` (ITU-R BT.601 luma, not rounded).
    """
    return rgb.astype(np.float32) @ _LUMA


def pixel_agreement(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
    *,
    patch: int = PIXEL_PATCH,
) -> float:
    """How well the fine detail of two aligned pictures agrees, one number.

    The median correlation of :func:`pixel_evidence`, plus :data:`PIXEL_CLEAN_BONUS`
    (capped at 1) when at most :data:`PIXEL_CLEAN_SHARE` of the textured tiles disagree.

    Parameters
    ----------
    gray_a, gray_b, homography, size_a, size_b, patch
        As :func:`pixel_evidence`.

    Returns
    -------
    float
        In [-1, 1]; ``nan`` when fewer than 4 textured tiles overlap.
    """
    agree, disagree = pixel_evidence(gray_a, gray_b, homography, size_a, size_b, patch=patch)
    return combine_evidence(agree, disagree)


def combine_evidence(
    agree: float,
    disagree: float,
    clean_share: float = PIXEL_CLEAN_SHARE,
    clean_bonus: float = PIXEL_CLEAN_BONUS,
) -> float:
    """:func:`pixel_agreement` from the two numbers of :func:`pixel_evidence`.

    Parameters
    ----------
    agree, disagree : float
        The agreement and the share of disagreeing tiles (:func:`pixel_evidence`).
    clean_share, clean_bonus : float
        :data:`PIXEL_CLEAN_SHARE`, :data:`PIXEL_CLEAN_BONUS` (other values: the
        benchmark's search).

    Returns
    -------
    float
    """
    if agree > 0 and disagree <= clean_share:
        return float(min(1.0, agree + clean_bonus))
    return float(agree)


def pixel_evidence(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
    *,
    patch: int = PIXEL_PATCH,
) -> tuple[float, float]:
    """How well the fine detail of two aligned pictures agrees, and where it does not.

    The picture with more pixels is shrunk to about the other's scale and warped onto
    it. 0 when neither lies within the other (:func:`within_share` below
    :data:`PIXEL_WITHIN`). Otherwise the alignment is refined by the one translation
    (at most :data:`PIXEL_SHIFT` px) that best explains the difference of the two
    (Lucas-Kanade on band-passed pixels: the feature fit can be off by a fraction of a
    pixel), then both are high-passed (minus a Gaussian blur of sigma 2 px) and compared
    by normalised cross-correlation in ``patch`` x ``patch`` tiles wholly inside the
    overlap; the score is the median over the more textured half of the tiles, less
    those holding only noise (:data:`PIXEL_TEXTURE_FLOOR`). The result is the best such
    score with the sharper picture (more high-pass energy in the overlap) blurred by
    :data:`PIXEL_BLURS` in turn, until the score stops rising (or not blurred): a
    blurred or resampled copy agrees once the sharper picture is brought to its level,
    two shots do not. The second number is the share of those tiles whose correlation
    is below :data:`PIXEL_DISAGREE` at that best blur. The agreement is at most
    :data:`PIXEL_MOVED_CAP` when something moved (:data:`PIXEL_MOVED_SHARE`; unless a
    tone curve explains it, :func:`~engine.workflows.pixel_tiles.tone_mapped`), 0 for a
    shot zoomed in on the other's scene (:func:`engine.workflows.framing.zoomed_shot`).

    Parameters
    ----------
    gray_a, gray_b : (H, W) float32
        The two pictures in gray levels, any size.
    homography : (3, 3) float64
        Maps positions in a picture of ``size_a`` to positions in one of ``size_b``.
    size_a, size_b : (width, height)
        The sizes ``homography`` refers to (e.g. ``Features.image_size``).
    patch : int
        Tile side in pixels.

    Returns
    -------
    agreement : float
        In [-1, 1]; ``nan`` when fewer than 4 textured tiles overlap, 0 for two framings.
    disagreement : float
        In [0, 1] (``nan`` with a ``nan`` agreement, 1 for two framings).
    """
    return judged_evidence(_evidence(_Aligned(gray_a, gray_b, homography, size_a, size_b, patch)))


def pixel_tests(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
    jpeg: Callable[[], tuple[Any, Any]],
    band: tuple[float, float],
    *,
    enough: float = np.inf,
    either_way: bool = False,
    disagreement: bool = False,
    patch: int = PIXEL_PATCH,
) -> tuple[float, ...]:
    """:func:`pixel_agreement` and, when it falls in ``band`` = ``[low, high)``,
    :func:`compressed_agreement` (else ``nan``), aligning the pictures once for both.

    Unless the compressed-copy test settles it, a pair whose agreement falls in ``band``,
    or whose detail seems to have moved (:data:`PIXEL_MOVED_SHARE`), is then aligned
    again by its pixels (:func:`engine.workflows.align.refit_homography`, a whole
    homography), which counts when it agrees better with nothing moved in it
    (:data:`PIXEL_CLEAN_SHARE`): a copy compared under a feature fit a few tenths of a
    pixel off (turned by a few degrees, few features), not two shots, whose differences
    stay (``tests/benchmarks/bench_duplicates.py`` has the numbers).

    Parameters
    ----------
    gray_a, gray_b, homography, size_a, size_b, patch
        As :func:`pixel_evidence`.
    jpeg : callable
        ``jpeg() -> (jpeg_a, jpeg_b)``, :func:`jpeg_facts` of the two files; called
        only when the second test is asked.
    band : (float, float)
        The pixel agreements worth the second test.
    enough : float
        A compressed-copy agreement that settles the pair (the rule's least): once
        reached, nothing more is tried.
    either_way : bool
        Two JPEG files of one size: recreate each as the copy of the other (a copy may
        have been saved at a higher quality), not only the more compressed one.
    disagreement : bool
        Also return the share of disagreeing tiles where the agreement was measured.

    Returns
    -------
    (float, float) or (float, float, float)
    """
    pair = _Aligned(gray_a, gray_b, homography, size_a, size_b, patch)
    first = _evidence(pair)
    agree, disagree = judged_evidence(first)
    agree, moved = combine_evidence(agree, disagree), moved_evidence(first)
    out = (lambda *r: r) if disagreement else (lambda *r: r[:2])
    if not (band[0] <= agree < band[1] or moved):
        return out(agree, float("nan"), disagree)
    if pair.measurable and (not pair.within() or pair.zoomed()):  # (two framings)
        # (the realigned pair keeps these verdicts, so its evidence would be the same
        # (0, 1, 1), no better: a refit could not change the outcome)
        return out(agree, float("nan"), disagree)
    compressed = float("nan")
    if not moved:
        facts = jpeg()
        compressed = _compressed(pair, *facts, enough, either_way)
        if compressed >= enough:
            return out(agree, compressed, disagree)
    again = pair.realigned()
    if again is not None:
        agree_again, disagree_again, moved_again = _evidence(again)
        if agree_again > agree and moved_again <= PIXEL_CLEAN_SHARE:
            agree, disagree = judged_evidence((agree_again, disagree_again, moved_again))
            agree = combine_evidence(agree, disagree)
            if band[0] <= agree < band[1]:
                facts = jpeg()
                again_compressed = _compressed(again, *facts, enough, either_way)
                compressed = float(np.nanmax([compressed, again_compressed]))
    return out(agree, compressed, disagree)


class _Aligned:
    """Two pictures at one scale (:func:`_common_scale`) and their alignment, worked out
    once for the pixel tests of a pair (the refined warp only when a test needs it)."""

    def __init__(self, gray_a, gray_b, homography, size_a, size_b, patch: int) -> None:
        self.smaller_is_a = gray_a.size < gray_b.size  # (as _common_scale chooses)
        self.gray_a, self.gray_b = gray_a, gray_b
        self.homography, self.size_a, self.size_b = homography, size_a, size_b
        self.ga, self.gb, self.m = _common_scale(gray_a, gray_b, homography, size_a, size_b)
        self.patch = patch
        self._within: bool | None = None
        self._zoomed: bool | None = None
        self._warp: tuple[np.ndarray, np.ndarray] | None = None
        self._first: tuple[np.ndarray, np.ndarray] | None = None
        self._tiles: tuple[PixelTiles, tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def measurable(self) -> bool:
        """Whether the smaller picture holds a tile at all."""
        h, w = self.gb.shape
        return h >= self.patch and w >= self.patch

    @property
    def hp_b(self) -> np.ndarray:
        """The smaller picture's detail (remembered by :func:`_highpass`)."""
        return _highpass(self.gb)

    def within(self) -> bool:
        """Whether one picture lies within the other (:data:`PIXEL_WITHIN`)."""
        if self._within is None:
            share = _within_share(
                self.ga, self.gb, self.m, 2 * self.patch, _highpass(self.ga), self.hp_b
            )
            self._within = share >= PIXEL_WITHIN
        return self._within

    def zoomed(self) -> bool:
        """Whether the finer picture is another shot zoomed in on the other's scene
        (:func:`engine.workflows.framing.zoomed_shot`)."""
        if self._zoomed is None:
            args = (self.gray_a, self.gray_b, self.homography, self.size_a, self.size_b)
            self._zoomed = zoomed_shot(*args)
        return self._zoomed

    def warped(self) -> tuple[np.ndarray, np.ndarray]:
        """(:func:`_refined_warp` of the larger picture onto the smaller, where it lands)."""
        if self._warp is None:
            self._warp = _refined_warp(self.ga, self.gb, self.m, self.patch, self.first())
        return self._warp

    def first(self) -> tuple[np.ndarray, np.ndarray]:
        """(:func:`_warp` of the larger picture onto the smaller by the feature fit,
        where it lands): where both warps above start, made once."""
        if self._first is None:
            h, w = self.gb.shape
            self._first = _warp(self.ga, self.m, (w, h))
        return self._first

    def realigned(self) -> _Aligned | None:
        """The pair aligned again by :func:`_realigned_warp` (None when it fails)."""
        warp = _realigned_warp(self.ga, self.gb, self.m, self.patch, self.first())
        if warp is None:
            return None
        again = copy.copy(self)
        again._warp, again._tiles = warp, None
        return again

    def tiles(self) -> tuple[PixelTiles, tuple[np.ndarray, np.ndarray]]:
        """(the tiles where the warped picture lands, the smaller picture's side of them)
        (:class:`PixelTiles`): the same for every test of the pair."""
        if self._tiles is None:
            tiles = PixelTiles(self.warped()[1], self.patch)
            self._tiles = tiles, tiles.side(self.hp_b)
        return self._tiles


def _evidence(pair: _Aligned) -> tuple[float, float, float]:
    """(agreement, disagreeing share, moved share) of an aligned pair
    (:meth:`PixelTiles.agreement` at the best blur; :func:`pixel_evidence` is
    :func:`~engine.workflows.pixel_tiles.judged_evidence` of it). When something seems
    to have moved, the pair is compared again with either picture's gray levels mapped
    onto the other's (:func:`~engine.workflows.pixel_tiles.tone_mapped`), which counts
    when no tile disagrees then (:data:`PIXEL_CLEAN_SHARE`): a brightness, contrast or
    curves edit changes detail by the gray level, not by the place."""
    if not pair.measurable:
        return float("nan"), float("nan"), float("nan")
    if not pair.within() or pair.zoomed():
        return 0.0, 1.0, 1.0
    warped, inside = pair.warped()
    tiles, side_b = pair.tiles()
    best = matched_agreement(tiles, inside, warped, pair.gb, side_b, _highpass, _blurred)
    if moved_evidence(best):
        for w, b in ((tone_mapped(warped, pair.gb, inside), pair.gb),
                     (warped, tone_mapped(pair.gb, warped, inside))):  # fmt: skip
            known = side_b if b is pair.gb else None
            again = matched_agreement(tiles, inside, w, b, known, _highpass, _blurred)
            if again[1] <= PIXEL_CLEAN_SHARE:  # (the tone explains every disagreement)
                return again
    return best


def _refined_warp(
    ga: np.ndarray, gb: np.ndarray, m: np.ndarray, patch: int, first: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """``ga`` warped onto ``gb`` by ``m``, refined by at most two Lucas-Kanade
    translations (together at most :data:`PIXEL_SHIFT` px), and where it lands
    (``first``: :func:`_warp` of ``ga`` by ``m``, where it lands)."""
    h, w = gb.shape
    warped, inside = first
    total = np.zeros(2)
    band_b = None
    for _ in range(2):  # (a second step takes out what the first linearised away)
        if inside.sum() < 16 * patch * patch:
            break
        if band_b is None:
            band_b = _band(gb)
        d = translation_step(_band(warped), band_b, inside)
        if not np.isfinite(d).all() or np.hypot(*(total + d)) > PIXEL_SHIFT:
            break
        total += d
        m = np.array([[1.0, 0.0, d[0]], [0.0, 1.0, d[1]], [0.0, 0.0, 1.0]]) @ m
        warped, inside = _warp(ga, m, (w, h))
    return warped, inside


def _realigned_warp(
    ga: np.ndarray, gb: np.ndarray, m: np.ndarray, patch: int, first: tuple
) -> tuple[np.ndarray, np.ndarray] | None:
    """``ga`` warped onto ``gb`` by ``m`` refined by a homography fitted to the pixels
    (:func:`engine.workflows.align.refit_homography`), and where it lands; None when
    the fit fails (``first`` as :func:`_refined_warp`)."""
    from engine.workflows.align import refit_homography

    h, w = gb.shape
    warped, inside = first
    if inside.sum() < 16 * patch * patch:
        return None
    fit = refit_homography(warped, gb, inside)  # (warped(fit x) ~ gb(x))
    if fit is None:
        return None
    return _warp(ga, np.linalg.solve(fit, m), (w, h))


def jpeg_facts(path: str | os.PathLike) -> tuple[tuple[int, ...], tuple[int, int]] | None:
    """The luminance quantisation table (64 values, as Pillow reads it) and the size
    (width, height) of a JPEG file, from its header; None for another format or a file
    that cannot be read."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            tables = getattr(im, "quantization", None)
            if im.format != "JPEG" or not tables:
                return None
            return tuple(int(v) for v in tables[min(tables)]), tuple(im.size)
    except Exception:
        return None


def compressed_agreement(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    homography: np.ndarray,
    size_a: tuple[int, int],
    size_b: tuple[int, int],
    jpeg_a: tuple[tuple[int, ...], tuple[int, int]] | None,
    jpeg_b: tuple[tuple[int, ...], tuple[int, int]] | None,
    *,
    patch: int = PIXEL_PATCH,
) -> float:
    """Whether the smaller picture is the larger one resampled and saved again as a JPEG:
    their agreement once the larger picture, shrunk and aligned as for
    :func:`pixel_evidence`, is compressed with the smaller file's own luminance table
    (analysis by synthesis).

    A re-export at a lower quality is the original resampled and requantised: its
    blocking and ringing are the original's detail passed through its quantisation
    table, which no blur imitates (:func:`pixel_evidence` tops out at 0.90-0.95 for small
    quality-40-70 re-exports, where second shots of a scene reach 0.95-0.98). Passing
    the aligned larger picture through the same table (8 x 8 blocks on the smaller
    picture's own grid) makes a true re-export agree again (0.95 and above), while the
    differences of two shots stay (measured with ``bench_duplicates.py``'s transforms,
    draws of 40 and 75 Holidays scenes a half: every other shot at 0.92 or less). Only the gray
    levels are compressed: they are JPEG's luminance channel (the same BT.601 weights,
    :func:`gray_levels`).

    Parameters
    ----------
    gray_a, gray_b, homography, size_a, size_b, patch
        As :func:`pixel_evidence`.
    jpeg_a, jpeg_b
        :func:`jpeg_facts` of the two files (None: not a JPEG).

    Returns
    -------
    float
        In [-1, 1]; ``nan`` when the smaller picture is not a JPEG file loaded at its
        own size (its blocks could not be placed), or too few textured tiles overlap; 0
        for two framings.
    """
    pair = _Aligned(gray_a, gray_b, homography, size_a, size_b, patch)
    return _compressed(pair, jpeg_a, jpeg_b)


def _compressed(
    pair: _Aligned, jpeg_a, jpeg_b, enough: float = np.inf, either_way: bool = False
) -> float:
    """:func:`compressed_agreement` of an aligned pair; two JPEGs of one size: the more
    compressed file as the copy (``either_way``: then the other too, unless ``enough``)."""
    if pair.gray_a.size != pair.gray_b.size or jpeg_a is None or jpeg_b is None:
        return _recreated(pair, jpeg_a, jpeg_b)
    # (a copy is mostly saved at a lower quality; a copy saved at a higher one is the
    # other way round)
    ways = [(False, jpeg_a, jpeg_b), (True, jpeg_b, jpeg_a)]
    if sum(jpeg_a[0]) > sum(jpeg_b[0]):  # (a is the more compressed: a as the copy first)
        ways.reverse()
    if not either_way:
        ways = ways[:1]
    best = float("nan")
    for swap, ja, jb in ways:
        p = pair
        if swap:
            p = _Aligned(pair.gray_b, pair.gray_a, np.linalg.inv(pair.homography),
                         pair.size_b, pair.size_a, pair.patch)  # fmt: skip
        best = float(np.nanmax([best, _recreated(p, ja, jb)]))
        if best >= enough:
            break
    return best


def _recreated(pair: _Aligned, jpeg_a, jpeg_b) -> float:
    """:func:`_compressed` with the smaller picture (the second of two of one size) as
    the copy recreated."""
    facts = jpeg_a if pair.smaller_is_a else jpeg_b
    h, w = pair.gb.shape
    if facts is None or tuple(facts[1]) != (w, h) or not pair.measurable:
        return float("nan")
    if not pair.within():
        return 0.0
    table, hp_b, patch = facts[0], pair.hp_b, pair.patch
    if pair.smaller_is_a:
        larger, to_smaller = pair.gray_b, np.linalg.inv(pair.homography)
        sizes = (pair.size_b, pair.size_a)
    else:
        larger, to_smaller, sizes = pair.gray_a, pair.homography, (pair.size_a, pair.size_b)
    if _whole_frame(to_smaller, *sizes):
        # the whole picture resized: resized again here as the usual programs do
        tiles = PixelTiles(_border_mask(pair.gb.shape, 2), patch)
        side_b = tiles.side(hp_b)
        tries = [
            tiles.agreement(tiles.side(_highpass(_jpeg_again(r, table))), side_b)[0]
            for r in _resampled(larger, (w, h))
        ]
        whole = max((t for t in tries if np.isfinite(t)), default=float("nan"))
        if np.isfinite(whole):  # (the warp below resamples bilinearly: cv-linear did)
            return float(whole)
    tiles, side_b = pair.tiles()
    sim = _jpeg_again(pair.warped()[0], table)
    return float(tiles.agreement(tiles.side(_highpass(sim)), side_b)[0])


#: How :func:`compressed_agreement` resizes a whole picture to the size of its smaller
#: copy: the resampling filters of common programs (OpenCV's pixel area and bilinear,
#: Pillow's Lanczos and bicubic with their antialiasing: Lightroom-, Photoshop- and
#: ImageMagick-like exports lie between them); the best agreement counts.
RESAMPLERS = ("cv-area", "cv-linear", "pil-lanczos", "pil-bicubic")


def _resampled(x: np.ndarray, size: tuple[int, int]):
    """``x`` resized to ``size`` (w, h) by each of :data:`RESAMPLERS`, one at a time."""
    import cv2
    from PIL import Image

    for name in RESAMPLERS:
        if name.startswith("cv-"):
            flag = cv2.INTER_AREA if name == "cv-area" else cv2.INTER_LINEAR
            yield cv2.resize(x, size, interpolation=flag)
        else:
            f = Image.Resampling.LANCZOS if name == "pil-lanczos" else Image.Resampling.BICUBIC
            yield np.asarray(Image.fromarray(np.asarray(x, np.float32), "F").resize(size, f))


def _whole_frame(to_smaller: np.ndarray, size_l, size_s) -> bool:
    """Whether ``to_smaller`` (3x3, the larger picture's frame of ``size_l`` (w, h) to
    the smaller's of ``size_s``) maps the larger picture's corners onto the smaller's,
    within 2 % of its longer side (at least 3 px: the feature fit of a small picture is
    off by a pixel or two at its corners): the whole picture resized, not cut."""
    (wl, hl), (ws, hs) = size_l, size_s
    corners = frame_corners(wl, hl)
    p = corners @ to_smaller[:2, :2].T + to_smaller[:2, 2]
    z = corners @ to_smaller[2, :2] + to_smaller[2, 2]
    if not (z > 0).all():
        return False
    p = p / z[:, None]
    want = frame_corners(ws, hs)
    return bool(np.abs(p - want).max() <= max(3.0, 0.02 * max(ws, hs)))


def _border_mask(shape: tuple[int, int], border: int) -> np.ndarray:
    """(H, W) bool: every pixel but a ``border`` px frame."""
    inside = np.zeros(shape, bool)
    inside[border : shape[0] - border, border : shape[1] - border] = True
    return inside


def _jpeg_again(x: np.ndarray, table) -> np.ndarray:
    """``x`` (gray levels) saved as a gray JPEG with the luminance ``table`` and read
    back, float32."""
    from PIL import Image

    img = Image.fromarray(np.clip(np.rint(x), 0, 255).astype(np.uint8), "L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", qtables=[list(table)])
    buf.seek(0)
    with Image.open(buf) as again:
        return np.asarray(again, np.float32)


def _highpass(x: np.ndarray) -> np.ndarray:
    """``x`` minus its Gaussian blur of sigma 2 px: the fine detail the tests compare
    (remembered for a read-only picture, :func:`_memo`)."""
    import cv2

    return _memo(x, "highpass", lambda x: x - cv2.GaussianBlur(x, (0, 0), 2.0))


def _blurred(x: np.ndarray, sigma: float) -> np.ndarray:
    """:func:`_highpass` of ``x``'s Gaussian blur of ``sigma`` (remembered as it is)."""
    import cv2

    return _memo(x, f"blurred{sigma}", lambda x: _highpass(cv2.GaussianBlur(x, (0, 0), sigma)))


#: Read-only pictures (as :class:`engine.workflows.dup_verify.PairContext` hands them
#: out) whose derived arrays are kept, at most this many bytes of them in all: a photo
#: compared with several neighbours is high-passed (and, as the sharper picture of a
#: pair, blurred by each of :data:`PIXEL_BLURS`) once, not once per pair.
PIXEL_MEMO_BYTES = 96 * 2**20
_MEMO: OrderedDict[int, tuple[np.ndarray, dict[str, Any]]] = OrderedDict()
_MEMO_SIZE = [0]


def _memo(x: np.ndarray, key: str, make: Callable[[np.ndarray], Any]) -> Any:
    """``make(x)``, remembered per array ``x`` and ``key`` when ``x`` is read-only and
    owns its data (by identity: it cannot change under the remembered value; other
    arrays are not remembered); the least recently used arrays are forgotten beyond
    :data:`PIXEL_MEMO_BYTES`."""
    if x.flags.writeable or x.base is not None:
        return make(x)
    hit = _MEMO.get(id(x))
    if hit is None or hit[0] is not x:  # (x is kept in the entry: its id stays unique)
        hit = _MEMO[id(x)] = (x, {})
    else:
        _MEMO.move_to_end(id(x))
    found = hit[1]
    if key not in found:
        found[key] = make(x)
        _MEMO_SIZE[0] += _nbytes(found[key])
        while _MEMO_SIZE[0] > PIXEL_MEMO_BYTES and len(_MEMO) > 1:
            _, (_, old) = _MEMO.popitem(last=False)
            _MEMO_SIZE[0] -= sum(_nbytes(v) for v in old.values())
    return found[key]


def _nbytes(value: Any) -> int:
    """Bytes of an array or a tuple of arrays."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    return sum(v.nbytes for v in value)


def within_share(ga: np.ndarray, gb: np.ndarray, m: np.ndarray, *, patch: int = 16) -> float:
    """The larger of the two shares of a picture's textured tiles that lie inside the
    other (1 for a copy, a crop, a rotated copy on a larger canvas).

    Parameters
    ----------
    ga, gb : (H, W) float32
        The pictures at one scale.
    m : (3, 3) float64
        Maps pixel positions of ``ga`` to those of ``gb``.
    patch : int
        Tile side; a tile is textured when its high-pass energy is at least a quarter of
        the picture's median, and inside when its centre maps within half a tile of the
        other picture.

    Returns
    -------
    float
        In [0, 1].
    """
    return _within_share(ga, gb, m, patch, _highpass(ga), _highpass(gb))


def _within_share(
    ga: np.ndarray, gb: np.ndarray, m: np.ndarray, patch: int, hp_a: np.ndarray, hp_b: np.ndarray
) -> float:
    """:func:`within_share` with the pictures' high-passed detail given (``hp_a``,
    ``hp_b``: :func:`_highpass` of ``ga``, ``gb``)."""
    shares = []
    for g, hp, other, mm in ((ga, hp_a, gb, m), (gb, hp_b, ga, np.linalg.inv(m))):
        th, tw = g.shape[0] // patch, g.shape[1] // patch
        if th == 0 or tw == 0:
            shares.append(1.0)
            continue
        c = _memo(g, f"textured{patch}", lambda g, hp=hp: _textured(hp, patch))
        if len(c) == 0:
            shares.append(1.0)
            continue
        p = c @ mm[:2, :2].T + mm[:2, 2]
        z = c @ mm[2, :2] + mm[2, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            p = p / z[:, None]
        margin = 0.5 * patch * abs(np.linalg.det(mm[:2, :2])) ** 0.5
        oh, ow = other.shape
        with np.errstate(invalid="ignore"):
            ok = (
                (z > 0)
                & (p[:, 0] >= -0.5 - margin)
                & (p[:, 0] <= ow - 0.5 + margin)
                & (p[:, 1] >= -0.5 - margin)
                & (p[:, 1] <= oh - 0.5 + margin)
            )
        shares.append(float(ok.mean()))
    return max(shares)


def _textured(hp: np.ndarray, patch: int) -> np.ndarray:
    """(T, 2) float64 centres (x, y) of the textured ``patch`` tiles of a picture whose
    high-passed detail is ``hp`` (:func:`within_share`)."""
    th, tw = hp.shape[0] // patch, hp.shape[1] // patch
    energy = (hp[: th * patch, : tw * patch] ** 2).reshape(th, patch, tw, patch).mean((1, 3))
    pos = energy[energy > 0]
    ys, xs = np.nonzero(energy >= 0.25 * median_of(pos)) if pos.size else ([], [])
    if len(xs) == 0:
        return np.zeros((0, 2))
    return (np.stack([xs, ys], 1).astype(np.float64) + 0.5) * patch - 0.5


def _common_scale(gray_a, gray_b, homography, size_a, size_b):
    """(larger picture shrunk to about the other's scale, the other, 3x3 map from the
    first's pixels to the second's)."""
    import cv2

    ga, gb = np.asarray(gray_a, np.float32), np.asarray(gray_b, np.float32)
    sa, sb = ga.shape[1] / size_a[0], gb.shape[1] / size_b[0]
    m = np.diag([sb, sb, 1.0]) @ homography @ np.diag([1 / sa, 1 / sa, 1.0])  # a -> b pixels
    if ga.size < gb.size:
        ga, gb, m = gb, ga, np.linalg.inv(m)
    scale = abs(np.linalg.det(m[:2, :2])) ** 0.5
    if 0 < scale < 0.9:  # shrink first: no aliasing in the warp
        ga = cv2.resize(ga, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        m = m @ np.diag([1 / scale, 1 / scale, 1.0])
    return ga, gb, m


def _warp(ga: np.ndarray, m: np.ndarray, size: tuple[int, int]):
    """``ga`` warped by ``m`` into a picture of ``size`` (w, h), and where it lands."""
    import cv2

    warped = cv2.warpPerspective(ga, m, size, flags=cv2.INTER_LINEAR)
    # (nearest-neighbour warp of ones, 1 where a pixel of ga lands, 0 outside: the
    # positions do not depend on the pixel type, so bytes give the mask floats would)
    ones = np.ones(ga.shape, np.uint8)
    inside = cv2.warpPerspective(ones, m, size, flags=cv2.INTER_NEAREST)
    inside = cv2.erode(inside, np.ones((5, 5), np.uint8)) > 0
    return warped, inside


def _band(x: np.ndarray) -> np.ndarray:
    """``x`` band-passed for :func:`engine.workflows.align.translation_step` (difference
    of Gaussians)."""
    import cv2

    return _memo(
        x, "band", lambda x: cv2.GaussianBlur(x, (0, 0), 0.7) - cv2.GaussianBlur(x, (0, 0), 3.0)
    )
