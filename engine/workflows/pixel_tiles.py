"""The tiles the duplicate pixel test compares (:mod:`engine.workflows.pixels`): two
aligned pictures' fine detail cut into ``patch`` x ``patch`` tiles, correlated tile by
tile, and what the tiles say together.

Which tiles count. Only the textured ones: the more textured half of the tiles, less
those whose detail is below :data:`PIXEL_TEXTURE_FLOOR` on one side (unless most of
them are: a photo whose detail is mostly noise is judged by its noise). A tile whose detail is
only sensor noise and JPEG artefacts (the dark sky of a night shot, a flat wall) says
nothing about a copy: a recompressed, resampled or turned copy remakes that noise, so
those tiles disagree for a copy as much as for another shot. Without the floor, a photo
that is mostly dark had its median pulled down by them (a copy turned by 6.5 degrees at
0.93, a blurred copy at 0.62).

What they say. The median correlation (the agreement), the share of tiles that disagree
(correlation below :data:`PIXEL_DISAGREE`), and the share of tiles that disagree where
both pictures have detail of about the same strength (:data:`PIXEL_MOVED_RATIO`):
something there moved or changed (a crowd, a wave, leaves), as between two shots moments
apart. An edit that adds or removes detail locally (a text watermark, clipped
highlights) disagrees where one side has much more detail than the other, and counts in
the first share only (:func:`engine.workflows.pixels.pixel_evidence`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.core.arrays import median_of

__all__ = [
    "PIXEL_BLURS",
    "PIXEL_DISAGREE",
    "PIXEL_MOVED_CAP",
    "PIXEL_MOVED_EXEMPT",
    "PIXEL_MOVED_RATIO",
    "PIXEL_MOVED_SHARE",
    "PIXEL_TEXTURE_FLOOR",
    "PIXEL_TEXTURE_KEEP",
    "PixelTiles",
    "TileAgreement",
    "judged_evidence",
    "matched_agreement",
    "moved_evidence",
    "tone_mapped",
]

#: Gaussian blurs (sigma, pixels of the compared scale) tried in turn on the sharper
#: picture to match the other's sharpness (a blurred, resampled or compressed copy).
PIXEL_BLURS = (0.5, 0.8, 1.1, 1.5, 2.0)
#: A textured tile disagrees when the correlation of its detail is below this.
PIXEL_DISAGREE = 0.5
#: Least detail (root mean square of the high-passed gray levels, 0-255 scale) of a tile,
#: on both sides, for it to count: below it, noise and compression artefacts ...
PIXEL_TEXTURE_FLOOR = 2.0
#: ... unless fewer than this share of the more textured half of the tiles is above it:
#: a photo whose detail is mostly noise (the moon, haze) is judged by its noise, not by
#: the few tiles of an edge (two shots of the moon agree there).
PIXEL_TEXTURE_KEEP = 0.5
#: A disagreeing tile counts as "moved" when the stronger side's detail is less than this
#: many times the weaker side's (root mean square): detail of the same strength on both
#: sides, not added or removed by an edit.
PIXEL_MOVED_RATIO = 1.5

#: A pair whose tiles disagree where both pictures have detail of the same strength
#: (:class:`PixelTiles`: something moved) on more than this share of its counted tiles
#: ...
PIXEL_MOVED_SHARE = 0.03
#: ... and agree below this elsewhere is two shots, not a copy: its agreement is reported
#: as at most :data:`PIXEL_MOVED_CAP` (below every test's band). A copy with a local edit
#: (a watermark) agrees near perfectly everywhere else and its disagreeing tiles are
#: one-sided.
PIXEL_MOVED_EXEMPT = 0.99
#: The agreement reported for such a pair.
PIXEL_MOVED_CAP = 0.85
#: Gray-level bins of :func:`tone_mapped`'s curve.
TONE_BINS = 64


class TileAgreement(tuple):
    """(agreement, disagreeing share, moved share) of :meth:`PixelTiles.agreement`."""

    __slots__ = ()

    def __new__(cls, agree: float, disagree: float, moved: float) -> TileAgreement:
        return super().__new__(cls, (float(agree), float(disagree), float(moved)))


class PixelTiles:
    """The ``patch`` x ``patch`` tiles wholly ``inside`` the overlap of two aligned
    pictures, and the normalised correlation of their detail there (one pair's tiles:
    the picture not blurred is cut into tiles once for every blur tried)."""

    def __init__(self, inside: np.ndarray, patch: int) -> None:
        h, w = inside.shape
        self.shape = (h, w)
        self.th, self.tw, self.patch = h // patch, w // patch, patch
        self.ok = self.cut(inside.astype(np.float32)).min(axis=1) > 0
        # (the positions of the inside tiles' pixels in a picture of this shape, tile by
        # tile: one gather gives ``cut(x)[ok]`` for every picture the pair compares)
        ti, tj = np.divmod(np.flatnonzero(self.ok), self.tw)
        rows = (np.arange(patch)[:, None] * w + np.arange(patch)[None, :]).reshape(1, -1)
        self._at = (ti * (patch * w) + tj * patch)[:, None] + rows

    def cut(self, x: np.ndarray) -> np.ndarray:
        """(tiles, patch * patch) pixels of ``x`` tile by tile."""
        th, tw, patch = self.th, self.tw, self.patch
        x = x[: th * patch, : tw * patch].reshape(th, patch, tw, patch)
        return x.transpose(0, 2, 1, 3).reshape(th * tw, patch * patch)

    def side(self, hp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the tiles inside of the high-passed picture ``hp``, less their means; their
        norms)."""
        if hp.shape == self.shape and hp.flags.c_contiguous:
            u = np.take(hp.reshape(-1), self._at)  # (= self.cut(hp)[self.ok])
        else:
            u = self.cut(hp)[self.ok]
        u = u - u.mean(axis=1, keepdims=True)
        return u, np.linalg.norm(u, axis=1)

    @staticmethod
    def agreement(
        side_a: tuple[np.ndarray, np.ndarray], side_b: tuple[np.ndarray, np.ndarray]
    ) -> TileAgreement:
        """(median normalised correlation over the counted tiles, share of those below
        :data:`PIXEL_DISAGREE`, share of those below it with detail of about the same
        strength on both sides, :data:`PIXEL_MOVED_RATIO`); nans for fewer than 4
        textured tiles. The counted tiles: the more textured half, less those whose detail
        is below :data:`PIXEL_TEXTURE_FLOOR` on one side (unless fewer than
        :data:`PIXEL_TEXTURE_KEEP` of them are left)."""
        (u, su), (v, sv) = side_a, side_b
        texture = np.minimum(su, sv)
        good = texture > 1e-3
        if good.sum() < 4:
            nan = float("nan")
            return TileAgreement(nan, nan, nan)
        t = texture[good]
        ncc = (u * v).sum(axis=1)[good] / (su * sv)[good]
        ratio = np.maximum(su, sv)[good] / t
        # (tile norms: root mean square times the tile side)
        half = t >= median_of(t)
        keep = half & (t >= PIXEL_TEXTURE_FLOOR * np.sqrt(u.shape[1]))
        if keep.sum() < max(4.0, PIXEL_TEXTURE_KEEP * half.sum()):  # (mostly noise)
            keep = half
        ncc, ratio = ncc[keep], ratio[keep]
        low = ncc < PIXEL_DISAGREE
        return TileAgreement(
            median_of(ncc), np.mean(low), np.mean(low & (ratio < PIXEL_MOVED_RATIO))
        )


def moved_evidence(evidence: tuple[float, float, float]) -> bool:
    """Whether a pair's (agreement, disagreeing share, moved share) are two shots':
    something moved (:data:`PIXEL_MOVED_SHARE`) and the rest does not agree near
    perfectly (:data:`PIXEL_MOVED_EXEMPT`)."""
    agree, _disagree, moved = evidence
    return bool(moved > PIXEL_MOVED_SHARE and agree < PIXEL_MOVED_EXEMPT)


def judged_evidence(evidence: tuple[float, float, float]) -> tuple[float, float]:
    """(agreement, disagreeing share) from a pair's (agreement, disagreeing share, moved
    share), the agreement at most :data:`PIXEL_MOVED_CAP` when :func:`moved_evidence`."""
    agree, disagree, _moved_share = evidence
    if moved_evidence(evidence):
        agree = min(agree, PIXEL_MOVED_CAP)
    return float(agree), float(disagree)


def tone_mapped(x: np.ndarray, y: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """``x``'s gray levels mapped onto ``y``'s by the tone curve that best explains ``y``
    from ``x`` where ``inside`` (the mean of ``y`` over each of :data:`TONE_BINS` bins of
    ``x``'s levels, linear between the bins' mean levels): a brightness, contrast, curves or
    clipping edit, even one that folds the levels (``|a x + b|``), is undone; a moved
    object is not.

    Parameters
    ----------
    x, y : (H, W) float32
        Two aligned pictures' gray levels (0-255).
    inside : (H, W) bool
        Where both hold pixels of their pictures.

    Returns
    -------
    (H, W) float32
    """
    xs, ys = x[inside], y[inside]
    if xs.size < 64:
        return x
    edges = np.linspace(0.0, 256.0, TONE_BINS + 1)
    k = np.clip(np.digitize(xs, edges) - 1, 0, TONE_BINS - 1)
    n = np.bincount(k, minlength=TONE_BINS)
    total = np.bincount(k, weights=ys, minlength=TONE_BINS)
    seen = n >= 8
    if seen.sum() < 2:
        return x
    sums = np.bincount(k, weights=xs, minlength=TONE_BINS)
    at = sums[seen] / n[seen]  # (the bins' mean levels of x: a better abscissa)
    return np.interp(x, at, total[seen] / n[seen]).astype(np.float32)


def matched_agreement(
    tiles: PixelTiles,
    inside: np.ndarray,
    warped: np.ndarray,
    gb: np.ndarray,
    side_b: tuple[np.ndarray, np.ndarray] | None,
    highpass: Callable[[np.ndarray], np.ndarray],
    blurred: Callable[[np.ndarray, float], np.ndarray] | None = None,
) -> TileAgreement:
    """:meth:`PixelTiles.agreement` of two aligned pictures (``warped`` onto ``gb``,
    ``inside`` where it lands) at the best of :data:`PIXEL_BLURS` of the sharper one:
    blurred more and more until the agreement stops rising (it rises to the other's
    level, then falls), two or three tries instead of every blur on both.

    Parameters
    ----------
    tiles : PixelTiles
    inside : (H, W) bool
    warped, gb : (H, W) float32
    side_b : tuple or None
        ``tiles.side(highpass(gb))`` when known.
    highpass : callable
        The detail the tiles compare (:func:`engine.workflows.pixels.pixel_evidence`).
    blurred : callable, optional
        ``blurred(x, sigma)``: ``highpass`` of ``x``'s Gaussian blur of ``sigma``, the
        same numbers (e.g. remembered for a picture compared with several neighbours);
        None: worked out here.

    Returns
    -------
    TileAgreement
    """
    import cv2

    hp_w, hp_b = highpass(warped), highpass(gb)
    side_b = tiles.side(hp_b) if side_b is None else side_b
    side_w = tiles.side(hp_w)
    best = tiles.agreement(side_w, side_b)
    if np.isnan(best[0]):
        return best
    # (the sharper picture: more high-pass energy where they overlap; the other
    # picture's tiles are the same at every try)
    sharp_a = np.mean(hp_w[inside] ** 2) >= np.mean(hp_b[inside] ** 2) if inside.any() else True
    if blurred is None:
        blurred = lambda x, sigma: highpass(cv2.GaussianBlur(x, (0, 0), sigma))  # noqa: E731
    last = best
    for sigma in PIXEL_BLURS:
        side = tiles.side(blurred(warped if sharp_a else gb, sigma))
        score = tiles.agreement(side, side_b) if sharp_a else tiles.agreement(side_w, side)
        if not score[0] > last[0] - 1e-3:
            break
        best, last = (score if score[0] > best[0] else best), score
    return best
