"""A second, feature-free way to find copies: for photos with too few local features to
be verified geometrically (a starry sky, the moon at night, haze, a blank wall), the
duplicate search compares their global appearance instead.

Why. The duplicate search (:mod:`engine.workflows.duplicates`) links two photos as
"the same photo" when one transform explains their matched features. A photo with a
handful of features never gets there, however exact its copies. Such photos are few in
a library, so they can afford a slower, pixel-level check.

How (:func:`appearance_links`):

1. the photos with fewer than :data:`APPEARANCE_FEATURES` features (the catalogue
   counts them) get an appearance signature: the 8 x 8 lowest-frequency DCT
   coefficients of a :data:`APPEARANCE_SIDE`-pixel square gray thumbnail of the whole
   picture (:func:`signature`), computed once per photo and cached by row key in
   ``<index>/cache/`` :data:`CACHE_FILE` (plain arrays, no pickle);
2. candidates are the pairs of those photos whose signatures' signs (63 bits, DC left
   out: brightness and contrast edits do not move them) differ in at most
   :data:`APPEARANCE_HAMMING` bits under one of the four rotations by quarter turns
   (sign changes and a transpose of the coefficients, :func:`orientations`): a copy is
   the same picture up to resampling, compression, a global tone curve and a rotation;
3. each candidate is tested under that hypothesis (:func:`appearance_agreement`):
   the quarter turn and the resize make a first alignment, refined by an affine ECC
   fit on small versions (a rotation by a few degrees, a slight offset), then the pixel
   test of the geometric pairs (:func:`engine.workflows.pixels.pixel_agreement`: fine
   detail correlated tile by tile, blur matched, framing checked) decides with the
   same threshold (:attr:`TierRule.same_photo_pixels`). A second shot of a starry sky
   or of the moon moments later has the same coarse look but other noise, other stars
   and a moved disc: its fine detail does not agree;
4. a candidate whose pixels do not agree enough (a re-toned or blurred copy of haze, a
   night sky or the moon: its fine detail is mostly noise), and whose signatures differ
   in at most :data:`APPEARANCE_LOW_HAMMING` bits, is a copy too when SIFT
   features detected at a much lower contrast threshold (:func:`low_contrast_features`:
   faint detail, stars, JPEG noise in black; hundreds of them) agree under one
   homography (:func:`low_contrast_agreement`: at least :data:`APPEARANCE_MIN_INLIERS`,
   within :data:`APPEARANCE_RESIDUAL_PX`: faint features are placed less precisely than
   the same-photo rule's). A copy keeps them; another shot of a
   night sky or the moon shares none, of a hazy view from a plane some, but not to a
   fraction of a pixel;
5. a photo with fewer features than the geometric check needs
   (:data:`APPEARANCE_FEATURELESS`: it can never be verified otherwise) is asked that
   test with all its candidates, and also with its :data:`APPEARANCE_NEAREST` nearest
   signatures up to :data:`APPEARANCE_FAR` bits (:func:`nearest_candidates`): a cropped
   or slightly turned copy changes the signature by more (19-27 bits on the Holidays
   dev photos), and those pairs are asked the low-contrast test only (a crop does not
   keep the frame the pixel test's alignment assumes).

6. a second pass, once the geometric check is done, takes the photos with fewer than
   :data:`APPEARANCE_FEW_FEATURES` features (dark, hazy or blurred photos with a few
   dozen, whose copies keep too few of them, or whose pixels a fit to so few aligns
   badly), and tests those candidates of theirs, not both under
   :data:`APPEARANCE_FEATURES`, that the geometric check looked at and found no fit for,
   or one keeping about the whole frame (:func:`whole_or_none`): the others it placed
   as another cut, which a test of the whole frames cannot pass, or its index did not
   find alike. By their pixels only (step 3), not by low-contrast features: two shots of
   a dark, static scene with a few dozen features share many faint ones (a climber
   moving in a cave of Holidays' 127200: the cave's faint features agree to 0.6 px).

Cost: only the low-feature photos are read (once: their signatures are cached), and
their pairs are compared as 64-bit words, a block at a time (``L`` low-feature photos:
``2 L^2`` word comparisons, a few milliseconds for thousands); each candidate pair costs
one pixel test (tens of milliseconds); step 5 at most :data:`APPEARANCE_NEAREST` tests
of low-contrast features per featureless photo (81 of the 100,000-photo library).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.blas import single_threaded_opencv
from engine.features.keypoints import Features, extract_features
from engine.index.files import read_cache, write_cache
from engine.index.verify import VERIFY_MIN_INLIERS
from engine.workflows.pixels import (
    PIXEL_SIDE,
    gray_levels,
    jpeg_facts,
    pixel_agreement,
    pixel_tests,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.searcher import Searcher

__all__ = [
    "APPEARANCE_CONTRAST",
    "APPEARANCE_FAR",
    "APPEARANCE_FEATURELESS",
    "APPEARANCE_FEATURES",
    "APPEARANCE_FEW_FEATURES",
    "APPEARANCE_FRAME_PX",
    "APPEARANCE_HAMMING",
    "APPEARANCE_LOW_FEATURES",
    "APPEARANCE_LOW_HAMMING",
    "APPEARANCE_MIN_INLIERS",
    "APPEARANCE_NEAREST",
    "APPEARANCE_REMEMBER",
    "APPEARANCE_RESIDUAL_PX",
    "APPEARANCE_SIDE",
    "CACHE_FILE",
    "appearance_agreement",
    "appearance_candidates",
    "appearance_links",
    "appearance_tests",
    "load_gray",
    "low_contrast_agreement",
    "low_contrast_features",
    "nearest_candidates",
    "orientations",
    "signature",
    "whole_or_none",
]

#: Photos with fewer local features than this get an appearance signature.
APPEARANCE_FEATURES = 25
#: Photos with fewer than this are compared too, in the pairs ``asked`` (step 6; Holidays'
#: 126600, 126800, 127600 at 325 pixels have 81, 35, 41). All their candidates would cost
#: too much: 241,889 pairs of the 100,000-photo library's 20,658, against 2,209 under 25.
APPEARANCE_FEW_FEATURES = 100
#: Largest corner offset (pixels) of a feature fit that leaves a pair to step 6: a 325 x
#: 243 copy turned by 8 degrees moves its corners by 28 px; another cut, farther.
APPEARANCE_FRAME_PX = 32.0
#: Side (pixels) of the square thumbnail a signature is made of.
APPEARANCE_SIDE = 32
#: Most differing sign bits (of 63) of a candidate pair's signatures.
APPEARANCE_HAMMING = 16
#: OpenCV's SIFT contrast threshold for the features of a candidate pair whose pixels
#: disagree (its default is 0.04: haze, a night sky or JPEG noise in black then have
#: almost none; at 0.001 they have hundreds, which a copy keeps and another shot does not).
APPEARANCE_CONTRAST = 0.001
#: Most of those features kept per picture (the strongest).
APPEARANCE_LOW_FEATURES = 500
#: Most differing signature bits of a candidate asked that test (a re-toned or blurred
#: copy: 0-5; of the 2,209 candidates of the 100,000-photo library, views cut and turned
#: differently, 59 have 8 or fewer): it costs two SIFT extractions and a robust fit.
APPEARANCE_LOW_HAMMING = 8
#: Largest median residual (pixels of the smaller picture) of those features' homography
#: for a copy. Faint features are placed less precisely than the same-photo rule's
#: (:attr:`~engine.workflows.duplicates.TierRule.same_photo_residual_px`, 0.35 px):
#: copies of the duplicate benchmark's night skies, moon and haze (turned, re-exported,
#: cropped) 0-0.50 px; other shots of them 0.91 px or more.
APPEARANCE_RESIDUAL_PX = 0.6
#: Fewest of those features one homography must explain for a copy (another shot of a
#: night sky or the moon: 0-6; of a hazy view from a plane: 36-83, with a residual of
#: 1.05-1.7 px, above the same-photo rule's).
APPEARANCE_MIN_INLIERS = 25
#: Photos with fewer features than this (the geometric check's least number of inliers:
#: it can never verify them) also ask their nearest signatures.
APPEARANCE_FEATURELESS = VERIFY_MIN_INLIERS
#: How many nearest signatures (beyond :data:`APPEARANCE_HAMMING` bits) each asks.
APPEARANCE_NEAREST = 3
#: Most differing bits of those (a crop or a turn by a few degrees: 19-27).
APPEARANCE_FAR = 30
#: Pictures (and their low-contrast features) the search keeps for the candidates that
#: follow (a 1024 x 768 picture is 3 MB: about 400 MB at most; they were all kept before).
APPEARANCE_REMEMBER = 128
#: Longest side (pixels) of the pictures the ECC refinement works on.
APPEARANCE_ECC_SIDE = 128
#: Where the signatures are cached in an index folder.
CACHE_FILE = Path("cache") / "appearance.npz"
#: Raise when :func:`signature` changes (older caches are then ignored).
VERSION = 1


def signature(gray: np.ndarray) -> np.ndarray:
    """The appearance signature of a picture.

    Parameters
    ----------
    gray : (H, W) float32
        The picture in gray levels, any size.

    Returns
    -------
    (8, 8) float32
        The lowest-frequency DCT coefficients (rows: vertical frequency) of the picture
        resized, whatever its aspect, to :data:`APPEARANCE_SIDE` pixels square.
    """
    import cv2

    small = cv2.resize(
        np.asarray(gray, np.float32),
        (APPEARANCE_SIDE, APPEARANCE_SIDE),
        interpolation=cv2.INTER_AREA,
    )
    return cv2.dct(small)[:8, :8].astype(np.float32)


def orientations(sig: np.ndarray) -> np.ndarray:
    """The signature of the picture turned by 0, 90, 180 and 270 degrees clockwise.

    Parameters
    ----------
    sig : (8, 8) float32
        A :func:`signature`.

    Returns
    -------
    (4, 8, 8) float32
        A horizontal flip multiplies coefficient (u, v) by (-1)^v, a vertical one by
        (-1)^u; a quarter turn clockwise is a transpose followed by a horizontal flip.
    """
    sign = (-1.0) ** np.arange(8)
    out = [sig]
    for _ in range(3):
        out.append(out[-1].T * sign[None, :])
    return np.stack(out).astype(np.float32)


def _bits(sigs: np.ndarray) -> np.ndarray:
    """(..., ) uint64 words of the signs of the 63 AC coefficients of (..., 8, 8)."""
    flat = sigs.reshape(*sigs.shape[:-2], 64)[..., 1:] > 0
    weights = np.uint64(1) << np.arange(63, dtype=np.uint64)
    return (flat.astype(np.uint64) * weights).sum(axis=-1, dtype=np.uint64)


def _popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    b = x.view(np.uint8).reshape(*x.shape, 8)
    return np.unpackbits(b, axis=-1).sum(axis=-1)


def appearance_candidates(
    sigs: np.ndarray, *, max_bits: int = APPEARANCE_HAMMING, block_words: int = 1 << 21
) -> list[tuple[int, int, int]]:
    """Pairs of signatures that may be one picture, and the quarter turn that maps one
    to the other.

    Parameters
    ----------
    sigs : (L, 8, 8) float32
        :func:`signature` of each picture.
    max_bits : int
        Most differing sign bits.
    block_words : int
        Word comparisons held in memory at a time (8 bytes each, twice).

    Returns
    -------
    list of (i, j, k)
        i < j (positions in ``sigs``), k in 0..3: picture i turned clockwise by k quarter
        turns is compared with picture j (the k with the fewest differing bits; the
        distance is the same from j's side, turned back).
    """
    if len(sigs) < 2:
        return []
    words = _words(sigs)
    return [(i, j, k) for i, j, k, _bits_apart in _candidates(words, max_bits, block_words)]


def _words(sigs: np.ndarray) -> np.ndarray:
    """(L, 4) uint64: the sign words of each signature in its four quarter turns."""
    return _bits(np.stack([orientations(s) for s in sigs]))


def _candidates(
    words: np.ndarray, max_bits: int, block_words: int
) -> list[tuple[int, int, int, int]]:
    """:func:`appearance_candidates` of :func:`_words`, with how many bits apart each
    pair is."""
    n = len(words)
    base = words[:, 0]
    block = max(1, min(n, block_words // (4 * n)))
    out = []
    for s0 in range(0, n, block):
        q = words[s0 : s0 + block]  # (b, 4)
        d = _popcount(q[:, :, None] ^ base[None, None, :])  # (b, 4, L)
        k = d.argmin(axis=1)
        best = d.min(axis=1)
        ii, jj = np.nonzero(best <= max_bits)
        out.extend(
            (s0 + a, j, int(k[a, j]), int(best[a, j]))
            for a, j in zip(ii.tolist(), jj.tolist(), strict=True)
            if s0 + a < j
        )
    return out


def nearest_candidates(
    sigs: np.ndarray,
    asking: np.ndarray,
    *,
    nearest: int = APPEARANCE_NEAREST,
    beyond: int = APPEARANCE_HAMMING,
    most: int = APPEARANCE_FAR,
    block_words: int = 1 << 21,
) -> list[tuple[int, int, int, int]]:
    """The nearest signatures of some pictures, beyond the candidates' limit.

    Parameters
    ----------
    sigs : (L, 8, 8) float32
        :func:`signature` of each picture.
    asking : (L,) bool
        The pictures that ask for their nearest (the others can be found).
    nearest : int
        Nearest signatures each asks for.
    beyond, most : int
        Only signatures more than ``beyond`` (those are candidates already) and at most
        ``most`` bits apart, under the quarter turn that brings them closest.
    block_words : int
        Word comparisons held in memory at a time.

    Returns
    -------
    list of (i, j, k, bits)
        i < j (positions in ``sigs``), each pair once; k, the quarter turn of i that is
        compared with j (as :func:`appearance_candidates`); ``bits`` apart.
    """
    if len(sigs) < 2:
        return []
    return _nearest(_words(sigs), asking, nearest, beyond, most, block_words)


def _nearest(
    words: np.ndarray, asking: np.ndarray, nearest: int, beyond: int, most: int, block_words: int
) -> list[tuple[int, int, int, int]]:
    """:func:`nearest_candidates` of :func:`_words`."""
    n = len(words)
    ask = np.flatnonzero(np.asarray(asking, bool))
    if n < 2 or len(ask) == 0 or nearest < 1:
        return []
    block = max(1, min(len(ask), block_words // (4 * n)))
    out: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for s0 in range(0, len(ask), block):
        rows = ask[s0 : s0 + block]
        d = _popcount(words[rows][:, :, None] ^ words[None, :, 0][:, None, :])  # (b, 4, L)
        best = d.min(axis=1).astype(np.int64)  # (b, L)
        best[np.arange(len(rows)), rows] = most + 1  # (not itself)
        best[best <= beyond] = most + 1
        for a, row in enumerate(rows.tolist()):
            order = np.argsort(best[a], kind="stable")[:nearest]
            for b in order.tolist():
                bits = int(best[a, b])
                if bits > most:
                    break
                i, j = (row, b) if row < b else (b, row)
                # the turn of i that is compared with j: from i's side
                turn = int(np.argmin(_popcount(words[i] ^ words[j, 0])))
                out.setdefault((i, j), (i, j, turn, bits))
    return sorted(out.values())


def appearance_agreement(gray_a: np.ndarray, gray_b: np.ndarray, turns: int) -> float:
    """The pixel agreement of two pictures under the hypothesis that b is a turned (by
    ``turns`` quarter turns clockwise), resized, recompressed or lightly rotated copy
    of a.

    Parameters
    ----------
    gray_a, gray_b : (H, W) float32
        The two pictures in gray levels, any size.
    turns : int
        0..3.

    Returns
    -------
    float
        :func:`engine.workflows.pixels.pixel_agreement` after the alignment (``nan``
        when not measurable).
    """
    hom = _aligned(gray_a, gray_b, turns)
    if hom is None:
        return float("nan")
    return pixel_agreement(gray_a, gray_b, hom, gray_a.shape[::-1], gray_b.shape[::-1])


def appearance_tests(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    turns: int,
    jpeg: Callable[[], tuple[Any, Any]],
    band: tuple[float, float],
    *,
    enough: float = np.inf,
) -> tuple[float, float]:
    """:func:`appearance_agreement` and, when it falls in ``band``, the compressed-copy
    agreement of the aligned pair (:func:`engine.workflows.pixels.pixel_tests`; else
    ``nan``): a turned copy saved again at a lower JPEG quality, of a photo whose fine
    detail is mostly its own noise (haze, a night sky), agrees at 0.90-0.95 only.

    Parameters
    ----------
    gray_a, gray_b, turns
        As :func:`appearance_agreement` (each loaded at its file's size, up to
        :data:`~engine.workflows.pixels.PIXEL_SIDE`).
    jpeg : callable
        ``jpeg() -> (jpeg_a, jpeg_b)``, :func:`engine.workflows.pixels.jpeg_facts` of
        the two files; called only when the second test is asked.
    band : (float, float)
        The pixel agreements worth the second test.
    enough : float
        A compressed-copy agreement that settles the pair.

    Returns
    -------
    (float, float)
    """
    hom = _aligned(gray_a, gray_b, turns)
    if hom is None:
        return float("nan"), float("nan")
    size_a, size_b = gray_a.shape[::-1], gray_b.shape[::-1]
    return pixel_tests(
        gray_a, gray_b, hom, size_a, size_b, jpeg, band, enough=enough, either_way=True
    )


def _aligned(gray_a: np.ndarray, gray_b: np.ndarray, turns: int) -> np.ndarray | None:
    """The 3x3 map of ``gray_a``'s pixels onto ``gray_b``'s under :func:`appearance_agreement`'s
    hypothesis (None when the two do not have one aspect ratio)."""
    import cv2

    ha, wa = gray_a.shape
    hb, wb = gray_b.shape
    # a -> a turned: clockwise quarter turns about the picture's corners
    turn = np.eye(3)
    w, h = wa, ha
    for _ in range(turns % 4):
        turn = np.array([[0.0, -1.0, h - 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]) @ turn
        w, h = h, w
    if abs(np.log((w / h) / (wb / hb))) > 0.05:  # not the same aspect: not a copy
        return None
    h0 = _scale(wb / w, hb / h) @ turn  # a pixels -> b pixels
    # refine by an affine ECC fit on small versions of b and of a warped onto b
    f = min(1.0, APPEARANCE_ECC_SIDE / max(wb, hb))
    size = (max(8, round(wb * f)), max(8, round(hb * f)))
    small = _scale(size[0] / wb, size[1] / hb)
    sb = cv2.resize(gray_b, size, interpolation=cv2.INTER_AREA)
    m0 = small @ h0
    sa = cv2.warpPerspective(_shrunk(gray_a, m0), _shrink_map(gray_a, m0), size)
    warp = np.eye(2, 3, dtype=np.float32)
    try:
        _cc, warp = cv2.findTransformECC(
            _norm(sb),
            _norm(sa),
            warp,
            cv2.MOTION_AFFINE,
            (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 100, 1e-5),
            None,
            5,
        )
        w3 = np.vstack([warp.astype(np.float64), [0.0, 0.0, 1.0]])  # small b -> small a'
        refine = np.linalg.inv(small) @ np.linalg.inv(w3) @ small  # b -> b
        if not np.isfinite(refine).all() or abs(np.linalg.det(refine[:2, :2]) - 1) > 0.1:
            refine = np.eye(3)
    except cv2.error:  # (did not converge: the first alignment stands)
        refine = np.eye(3)
    return refine @ h0


def _scale(sx: float, sy: float) -> np.ndarray:
    """3x3 map of pixel positions of a picture resized by (sx, sy) (pixel centres:
    ``x' = (x + 0.5) sx - 0.5``, as :func:`cv2.resize` samples)."""
    return np.array([[sx, 0.0, 0.5 * sx - 0.5], [0.0, sy, 0.5 * sy - 0.5], [0.0, 0.0, 1.0]])


def _shrink_map(g: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``m`` for the picture :func:`_shrunk` returns."""
    s = _shrink_factor(m)
    if s >= 1:
        return m
    h, w = g.shape
    sw, sh = round(w * s), round(h * s)
    return m @ np.linalg.inv(_scale(sw / w, sh / h))


def _shrunk(g: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``g`` shrunk (area) to about the scale ``m`` maps it to (no aliasing in a warp)."""
    import cv2

    s = _shrink_factor(m)
    if s < 1:
        h, w = g.shape
        return cv2.resize(g, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
    return g


def _shrink_factor(m: np.ndarray) -> float:
    return float(min(1.0, abs(np.linalg.det(m[:2, :2])) ** 0.5))


def _norm(x: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance float32 (ECC on pictures of other brightness)."""
    x = np.asarray(x, np.float32)
    return (x - x.mean()) / (x.std() + 1e-6)


def low_contrast_features(gray: np.ndarray) -> Features:
    """SIFT features of a picture with almost none at the usual contrast threshold.

    Parameters
    ----------
    gray : (H, W) float32
        Gray levels 0-255 (:func:`load_gray`).

    Returns
    -------
    Features
        At most :data:`APPEARANCE_LOW_FEATURES` RootSIFT features, strongest first,
        detected with OpenCV's contrast threshold :data:`APPEARANCE_CONTRAST`: the faint
        detail of haze, the stars of a night sky, the JPEG noise of a black sky. A copy
        keeps them where it keeps the pixels (resized, turned, re-toned, lightly
        blurred); another shot moments later has other noise and moved stars.
    """
    g = np.clip(np.asarray(gray, np.float32) + 0.5, 0, 255).astype(np.uint8)
    return extract_features(
        g,
        "sift",
        max_features=APPEARANCE_LOW_FEATURES,
        max_side=None,
        contrast_threshold=APPEARANCE_CONTRAST,
    )


def low_contrast_agreement(
    fa: Features, fb: Features, residual_px: float, evidence: Callable[[Features, Features], Any]
) -> float | None:
    """Whether two pictures' low-contrast features (:func:`low_contrast_features`) show
    one photo: at least :data:`APPEARANCE_MIN_INLIERS` of them agree under one
    homography, to a median of ``residual_px`` (pixels of the smaller picture) or less.

    Parameters
    ----------
    fa, fb : Features
    residual_px : float
    evidence : callable
        :func:`engine.workflows.duplicates.pair_evidence` (given, not imported: that
        module imports this one).

    Returns
    -------
    float or None
        The share of the features where the pictures overlap that agree (the
        evidence's ``overlap_fraction``), or None when they do not agree.
    """
    ev = evidence(fa, fb)
    if ev.n_inliers >= APPEARANCE_MIN_INLIERS and ev.residual_px <= residual_px:
        return float(ev.overlap_fraction)
    return None


# ------------------------------------------------------------------ the search step
def load_gray(path: str | os.PathLike, max_side: int = PIXEL_SIDE) -> np.ndarray:
    """The photo at ``path`` in gray levels, (H, W) float32, longest side at most
    ``max_side`` (as the pixel test compares pictures).

    Raises
    ------
    OSError, ValueError
        When the file cannot be read as an image.
    """
    from engine.io.imageio import load_image

    return gray_levels(load_image(str(path), max_side=max_side))


def _signatures(
    index_dir: Path | None, keys: np.ndarray | None, rows: list[int], paths: Sequence[Path]
) -> dict[int, np.ndarray]:
    """:func:`signature` of the photos of ``rows``, from the cache when it knows them;
    the cache is brought up to date (unreadable photos are left out)."""
    cache_path = None if index_dir is None else Path(index_dir) / CACHE_FILE
    known: dict[int, np.ndarray] = {}
    if cache_path is not None and keys is not None:
        found = read_cache(cache_path, VERSION, ("keys", "sigs"))
        if found is not None and found["sigs"].shape == (len(found["keys"]), 8, 8):
            known = {int(k): s for k, s in zip(found["keys"].tolist(), found["sigs"], strict=True)}
    out: dict[int, np.ndarray] = {}
    new = False
    for r in rows:
        key = None if keys is None else int(keys[r])
        if key is not None and key in known:
            out[r] = known[key]
            continue
        try:
            out[r] = signature(load_gray(paths[r]))
        except Exception:  # a file gone or unreadable since indexing: left out
            continue
        if key is not None:
            known[key] = out[r]
            new = True
    if new and cache_path is not None and keys is not None:
        live = {int(k) for k in np.asarray(keys).tolist()}
        ks = [k for k in known if k in live]
        sigs = np.array([known[k] for k in ks], np.float32).reshape(-1, 8, 8)
        write_cache(cache_path, VERSION, {"keys": np.array(ks, np.uint64), "sigs": sigs})
    return out


def appearance_links(
    searcher: Searcher,
    linked: dict[tuple[int, int], tuple[str, float]],
    pixels: float,
    *,
    compressed: tuple[float, float] | None = None,
    cancel: threading.Event | None = None,
    low_contrast: tuple[float, Callable[[Features, Features], Any]] | None = None,
    asked: Callable[[int, int], bool] | None = None,
) -> dict[tuple[int, int], tuple[str, float]]:
    """``same_photo`` links between photos with too few features, found and tested by
    their appearance (the module docstring).

    Parameters
    ----------
    searcher : Searcher
        Current (:meth:`Searcher.ensure` called).
    linked : dict
        The links found so far, ``(i, j) -> (tier, score)``: pairs already linked as
        identical or same_photo are not tested again.
    pixels : float
        Least pixel agreement of a copy (:attr:`TierRule.same_photo_pixels`).
    compressed : (float, float), optional
        ``(floor, least)``: a pair whose pixel agreement is at least ``floor`` but below
        ``pixels`` is a copy too when its compressed-copy agreement is at least
        ``least`` (:func:`appearance_tests`; ``COMPRESSED_FLOOR`` and
        :attr:`TierRule.same_photo_compressed`). None: the pixel agreement alone.
    cancel : threading.Event, optional
        Checked between pairs; when set, :class:`InterruptedError`.
    low_contrast : (float, callable), optional
        ``(residual_px, evidence)``: a pair whose pixels disagree is a copy too when its
        low-contrast features agree under one homography to ``residual_px``
        (:data:`APPEARANCE_RESIDUAL_PX`), ``evidence`` being
        :func:`engine.workflows.duplicates.pair_evidence`
        (:func:`low_contrast_agreement`). None: not asked.
    asked : callable, optional
        ``asked(i, j) -> bool`` for rows i < j. Given: the second pass, after the
        geometric check, over the photos with fewer than :data:`APPEARANCE_FEW_FEATURES`
        features; a candidate of two of them not both under :data:`APPEARANCE_FEATURES`
        (the first pass had those) is tested only when ``asked`` (the geometric check
        looked at the pair and found no fit, or one that keeps about the whole frame:
        :data:`APPEARANCE_FRAME_PX`), and the caller leaves ``low_contrast`` out.

    Returns
    -------
    dict
        ``(i, j) -> ("same_photo", agreement)`` for rows i < j (the compressed-copy
        agreement for a pair it made a copy, the share of low-contrast features that
        agree for a pair they made one).
    """
    store = searcher.store
    _, data = searcher.ensure()
    row_of_id = {int(d): r for r, d in enumerate(np.asarray(data.ids).tolist())}
    most = APPEARANCE_FEATURES if asked is None else APPEARANCE_FEW_FEATURES
    counts = {
        row_of_id[rec.id]: rec.n_features
        for rec in store.records()
        if rec.n_features < most and rec.id in row_of_id
    }
    rows = sorted(counts)
    if len(rows) < 2:
        return {}
    featureless = {r for r, n in counts.items() if n < APPEARANCE_FEATURELESS}
    if asked is not None:  # (the second pass: the first had the pairs under 25, and
        # the nearest signatures of the featureless photos)
        first = {r for r, n in counts.items() if n < APPEARANCE_FEATURES}
        keep = lambda i, j: not (i in first and j in first) and asked(i, j)  # noqa: E731
        featureless = set()
    else:
        keep = None
    with single_threaded_opencv():  # (small pictures: OpenCV's threads only cost CPU)
        return _links(
            searcher, rows, linked, pixels, compressed, cancel, low_contrast, featureless, keep
        )


def whole_or_none(ev: Any, min_inliers: int) -> bool:
    """Whether the geometric check looked at a pair and found no fit, or one that keeps
    about the whole frame: a pair the second pass of :func:`appearance_links` tests.

    Parameters
    ----------
    ev : PairEvidence or None
        The pair's :class:`~engine.workflows.duplicates.PairEvidence` (None: not looked
        at, the search's index does not find the two alike).
    min_inliers : int
        The geometric check's least number of inliers of a fit.

    Returns
    -------
    bool
        ``n_inliers < min_inliers`` or ``frame_offset_px <=`` :data:`APPEARANCE_FRAME_PX`.
    """
    return ev is not None and (
        ev.n_inliers < min_inliers or ev.frame_offset_px <= APPEARANCE_FRAME_PX
    )


def _pixel_link(
    gray_a: np.ndarray,
    gray_b: np.ndarray,
    turns: int,
    paths: tuple[Path, Path],
    pixels: float,
    compressed: tuple[float, float] | None,
) -> tuple[str, float] | None:
    """The same-photo link of a candidate whose pixels agree (or whose compressed copy
    does, :func:`appearance_tests`), else None."""
    if compressed is None:
        agree, comp = appearance_agreement(gray_a, gray_b, turns), float("nan")
    else:
        band = (compressed[0], pixels)
        facts = lambda: (jpeg_facts(paths[0]), jpeg_facts(paths[1]))  # noqa: E731
        agree, comp = appearance_tests(gray_a, gray_b, turns, facts, band, enough=compressed[1])
    if agree >= pixels:
        return "same_photo", float(agree)
    if compressed is not None and comp >= compressed[1]:
        return "same_photo", float(comp)
    return None


def _links(
    searcher,
    rows,
    linked,
    pixels,
    compressed,
    cancel,
    low_contrast,
    featureless=frozenset(),
    keep=None,
) -> dict[tuple[int, int], tuple[str, float]]:
    """:func:`appearance_links` of the photos of ``rows``, with few features
    (``featureless``: those of them that also ask their nearest signatures; ``keep(i,
    j)``: whether a candidate is tested, all when None)."""
    store = searcher.store
    paths = searcher.row_paths
    sigs = _signatures(store.index_dir, searcher.data_keys, rows, paths)
    rows = [r for r in rows if r in sigs]
    out: dict[tuple[int, int], tuple[str, float]] = {}
    # (pictures and their low-contrast features remembered for the next pairs, a bounded
    # number: a folder of thousands of night skies must not hold them all)
    gray = functools.lru_cache(maxsize=APPEARANCE_REMEMBER)(lambda r: load_gray(paths[r]))
    low = functools.lru_cache(maxsize=APPEARANCE_REMEMBER)(
        lambda r: low_contrast_features(gray(r))
    )
    if len(rows) < 2:
        return out
    words = _words(np.stack([sigs[r] for r in rows]))
    candidates = _candidates(words, APPEARANCE_HAMMING, 1 << 21)
    far = []
    if low_contrast is not None:
        asking = np.array([r in featureless for r in rows], bool)
        far = _nearest(
            words, asking, APPEARANCE_NEAREST, APPEARANCE_HAMMING, APPEARANCE_FAR, 1 << 21
        )
    # (the nearest signatures beyond the candidates: a crop or a turn, whose pixels the
    # alignment does not bring together; asked the low-contrast test only)
    todo = [(c, True) for c in candidates] + [(c, False) for c in far]
    for (a, b, k, bits_apart), aligned in todo:
        if cancel is not None and cancel.is_set():
            raise InterruptedError("the duplicate search was cancelled")
        i, j = rows[a], rows[b]
        if linked.get((i, j), ("similar_shots",))[0] != "similar_shots":
            continue
        if keep is not None and not keep(i, j):
            continue
        try:
            if aligned:
                link = _pixel_link(gray(i), gray(j), k, (paths[i], paths[j]), pixels, compressed)
                if link is not None:
                    out[(i, j)] = link
                    continue
                faint = bits_apart <= APPEARANCE_LOW_HAMMING or bool(featureless & {i, j})
                if low_contrast is None or not faint:
                    continue
            score = low_contrast_agreement(low(i), low(j), *low_contrast)
        except Exception:  # a file gone or unreadable since indexing
            continue
        if score is not None:
            out[(i, j)] = ("same_photo", score)
    return out
