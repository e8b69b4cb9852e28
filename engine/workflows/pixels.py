"""The pixel test of a duplicate pair: do two pictures, aligned by the homography of
their features, show the same fine detail? (:mod:`engine.workflows.duplicates` asks it
of the pairs that pass the geometric part of its same-photo rule.)

What a copy keeps and what another shot does not (see :func:`pixel_agreement`):

- the framing: a copy is the whole photo or a cut of it, so one picture lies within
  the other; two framings of a scene (a pan, a step aside) each show detail the other
  lacks (:data:`PIXEL_WITHIN`);
- the fine detail, even blurred or recompressed: once the sharper picture is blurred to
  the level of the other (:data:`PIXEL_BLURS`) and a sub-pixel offset of the feature
  fit is taken out (:data:`PIXEL_SHIFT`), a copy's detail correlates almost perfectly;
  two shots differ by noise, movement and parallax, which no blur and no single shift
  remove;
- where they differ: a recompressed, resampled or converted copy differs everywhere a
  little and nowhere a lot, so hardly any of its textured tiles disagree; a second shot
  moments apart differs in a few places (a moved person, leaves, a wave) or everywhere
  by parallax. :func:`pixel_evidence` gives both numbers; a pair whose tiles all agree
  (:data:`PIXEL_CLEAN_SHARE`) can get :data:`PIXEL_CLEAN_BONUS` added to its agreement,
  to tell a small, heavily compressed copy (detail correlating at only 0.90-0.94) from
  two shots moments apart. The bonus is 0: the best one on the duplicate benchmark's
  tuning half (0.07) cost precision on every other half measured, second shots joining
  the copies (``tests/benchmarks/bench_duplicates.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "PIXEL_BLURS",
    "PIXEL_CLEAN_BONUS",
    "PIXEL_CLEAN_SHARE",
    "PIXEL_DISAGREE",
    "PIXEL_PATCH",
    "PIXEL_SHIFT",
    "PIXEL_SIDE",
    "PIXEL_WITHIN",
    "combine_evidence",
    "pixel_agreement",
    "pixel_evidence",
    "within_share",
]

#: Tile side (pixels) of :func:`pixel_agreement`.
PIXEL_PATCH = 8
#: Longest side (pixels) pictures are loaded at for :func:`pixel_agreement`.
PIXEL_SIDE = 1024
#: Gaussian blurs (sigma, pixels of the compared scale) tried in turn on the sharper
#: picture to match the other's sharpness (a blurred, resampled or compressed copy).
PIXEL_BLURS = (0.5, 0.8, 1.1, 1.5, 2.0)
#: Largest sub-pixel correction (pixels) of the feature alignment.
PIXEL_SHIFT = 2.0
#: Least share of one picture's textured tiles that must lie inside the other
#: (:func:`within_share`); below it the pictures are two framings: agreement 0.
PIXEL_WITHIN = 0.98
#: A textured tile disagrees when the correlation of its detail is below this.
PIXEL_DISAGREE = 0.5
#: Largest share of disagreeing textured tiles of a pair whose difference is "everywhere
#: a little, nowhere a lot" (a recompressed or resampled copy).
PIXEL_CLEAN_SHARE = 0.01
#: Added to the agreement of such a pair (capped at 1) by :func:`pixel_agreement`; off
#: (see the module docstring).
PIXEL_CLEAN_BONUS = 0.0


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
    overlap; a tile's score is the median over the more textured half of the tiles. The
    result is the best such score with the sharper picture (more high-pass energy in the
    overlap) blurred by :data:`PIXEL_BLURS` in turn, until the score stops rising (or not
    blurred): a blurred or resampled copy agrees once the sharper picture is brought to
    its level, two shots do not. The second number is the share of those tiles whose
    correlation is below :data:`PIXEL_DISAGREE` at that best blur.

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
    import cv2

    ga, gb, m = _common_scale(gray_a, gray_b, homography, size_a, size_b)
    h, w = gb.shape
    if h < patch or w < patch:
        return float("nan"), float("nan")
    if within_share(ga, gb, m, patch=2 * patch) < PIXEL_WITHIN:
        return 0.0, 1.0
    warped, inside = _warp(ga, m, (w, h))
    total = np.zeros(2)
    for _ in range(2):  # (a second step takes out what the first linearised away)
        if inside.sum() < 16 * patch * patch:
            break
        d = _translation(warped, gb, inside)
        if not np.isfinite(d).all() or np.hypot(*(total + d)) > PIXEL_SHIFT:
            break
        total += d
        m = np.array([[1.0, 0.0, d[0]], [0.0, 1.0, d[1]], [0.0, 0.0, 1.0]]) @ m
        warped, inside = _warp(ga, m, (w, h))
    best = _tile_agreement(warped, gb, inside, patch)
    if np.isnan(best[0]):
        return best
    # blur only the sharper picture (more high-pass energy where they overlap), more
    # and more until the agreement stops rising (it rises to the other's level, then
    # falls): two or three tries instead of every blur on both
    sharp_a = _detail(warped, inside) >= _detail(gb, inside)
    last = best
    for sigma in PIXEL_BLURS:
        a = cv2.GaussianBlur(warped, (0, 0), sigma) if sharp_a else warped
        b = gb if sharp_a else cv2.GaussianBlur(gb, (0, 0), sigma)
        score = _tile_agreement(a, b, inside, patch)
        if not score[0] > last[0] - 1e-3:
            break
        best, last = (score if score[0] > best[0] else best), score
    return float(best[0]), float(best[1])


def _detail(x: np.ndarray, inside: np.ndarray) -> float:
    """Mean high-pass energy of ``x`` where ``inside``."""
    import cv2

    hp = x - cv2.GaussianBlur(x, (0, 0), 2.0)
    return float(np.mean(hp[inside] ** 2)) if inside.any() else 0.0


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
    import cv2

    shares = []
    for g, other, mm in ((ga, gb, m), (gb, ga, np.linalg.inv(m))):
        th, tw = g.shape[0] // patch, g.shape[1] // patch
        if th == 0 or tw == 0:
            shares.append(1.0)
            continue
        hp = g - cv2.GaussianBlur(g, (0, 0), 2.0)
        energy = (hp[: th * patch, : tw * patch] ** 2).reshape(th, patch, tw, patch).mean((1, 3))
        pos = energy[energy > 0]
        ys, xs = np.nonzero(energy >= 0.25 * np.median(pos)) if pos.size else ([], [])
        if len(xs) == 0:
            shares.append(1.0)
            continue
        c = (np.stack([xs, ys], 1).astype(np.float64) + 0.5) * patch - 0.5
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
    inside = cv2.warpPerspective(np.ones_like(ga), m, size, flags=cv2.INTER_NEAREST)
    inside = cv2.erode((inside > 0.5).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    return warped, inside


def _translation(a: np.ndarray, b: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """(dx, dy) such that ``b(x) ~ a(x - d)`` over ``inside``: one Lucas-Kanade step on
    band-passed pictures, each scaled to unit energy (brightness and contrast edits
    do not count)."""
    import cv2

    w = inside.astype(np.float32)
    n = max(float(w.sum()), 1.0)
    ba, bb = (cv2.GaussianBlur(x, (0, 0), 0.7) - cv2.GaussianBlur(x, (0, 0), 3.0) for x in (a, b))
    ba = ba / (float((ba * ba * w).sum() / n) ** 0.5 + 1e-6)
    bb = bb / (float((bb * bb * w).sum() / n) ** 0.5 + 1e-6)
    mean = (ba + bb) / 2
    gx = cv2.Sobel(mean, cv2.CV_32F, 1, 0, ksize=3) / 8 * w
    gy = cv2.Sobel(mean, cv2.CV_32F, 0, 1, ksize=3) / 8 * w
    it = (bb - ba) * w
    g = np.array(
        [[(gx * gx).sum(), (gx * gy).sum()], [(gx * gy).sum(), (gy * gy).sum()]], np.float64
    )
    if not np.isfinite(g).all() or np.linalg.cond(g) > 1e4:
        return np.zeros(2)
    return np.linalg.solve(g, -np.array([(gx * it).sum(), (gy * it).sum()], np.float64))


def _tile_agreement(
    a: np.ndarray, b: np.ndarray, inside: np.ndarray, patch: int
) -> tuple[float, float]:
    """(median normalised correlation of the high-passed pictures over the more textured
    half of the ``patch`` tiles wholly ``inside``, share of those below
    :data:`PIXEL_DISAGREE`); (nan, nan) for fewer than 4 textured tiles."""
    import cv2

    hp_a = a - cv2.GaussianBlur(a, (0, 0), 2.0)
    hp_b = b - cv2.GaussianBlur(b, (0, 0), 2.0)
    h, w = b.shape
    th, tw = h // patch, w // patch

    def tiles(x: np.ndarray) -> np.ndarray:
        x = x[: th * patch, : tw * patch].reshape(th, patch, tw, patch)
        return x.transpose(0, 2, 1, 3).reshape(th * tw, patch * patch)

    ok = tiles(inside.astype(np.float32)).min(axis=1) > 0
    u, v = tiles(hp_a)[ok], tiles(hp_b)[ok]
    u = u - u.mean(axis=1, keepdims=True)
    v = v - v.mean(axis=1, keepdims=True)
    su, sv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
    texture = np.minimum(su, sv)
    good = texture > 1e-3
    if good.sum() < 4:
        return float("nan"), float("nan")
    ncc = (u * v).sum(axis=1)[good] / (su * sv)[good]
    ncc = ncc[texture[good] >= np.median(texture[good])]
    return float(np.median(ncc)), float(np.mean(ncc < PIXEL_DISAGREE))
