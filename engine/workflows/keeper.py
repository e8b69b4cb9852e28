"""The copy of a duplicate group to keep (:func:`suggest_keeper`), and why.

The app's Duplicates view and ``simile duplicates`` both ask :func:`suggest_keeper`
(re-exported by :mod:`engine.workflows.duplicates`). For copies of one photo the rule is
:func:`best_copy`'s: a reference folder first, then a camera RAW file, the larger
resolution, the less compressed copy of one format, the original (earliest EXIF capture
time, then the older file), a copy not in an export or copy folder, the shorter path.

A group of *similar shots* (a burst, bracketed exposures, a scene taken twice) holds no
original and no derived copy: each is a photo of its own. Its rule is :func:`best_shot`'s
instead: a reference folder, a RAW file, the larger resolution, then the sharpest of
shots exposed alike (camera shake, missed focus: the frame a person keeps of a burst),
then the first taken. Which frame of a bracket is best exposed is the photographer's
call (and most brackets are merged, not culled): the rule says the shots are exposed
differently and keeps the first. The shot is a suggestion, shown with its reason, and
the person can keep another.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

__all__ = [
    "DERIVED_WORDS",
    "KEEPER_BPP_RATIO",
    "KEEPER_BRACKET_RATIO",
    "KEEPER_MTIME_SLACK",
    "KEEPER_PIXEL_TOLERANCE",
    "KEEPER_QUALITY_STEP",
    "KEEPER_SHARPER",
    "KEEPER_SIDE",
    "LOSSY_FORMATS",
    "SHOTS_TIER",
    "CopyStats",
    "Keeper",
    "best_copy",
    "best_shot",
    "capture_time",
    "copy_stats",
    "header_stats",
    "jpeg_quality",
    "keeper_reason",
    "looks_derived",
    "sharpness",
    "suggest_keeper",
    "suggest_keepers",
]

#: Longest side (pixels) the copies of a group are loaded at to compare their sharpness.
KEEPER_SIDE = 768
#: Copies with at least this fraction of the most pixels count as "highest resolution".
KEEPER_PIXEL_TOLERANCE = 0.95


def sharpness(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of a gray image (higher = sharper).

    Computed on images resized to the same longest side (:data:`KEEPER_SIDE`), so values
    are comparable between copies of one photo.

    Parameters
    ----------
    gray : (H, W) array
        Gray levels (any real dtype; computed in float32).

    Returns
    -------
    float
        ``var(4 g[y, x] - g[y-1, x] - g[y+1, x] - g[y, x-1] - g[y, x+1])`` over the
        interior pixels; 0.0 for an image not 2-D or under 3 pixels on a side.
    """
    g = np.asarray(gray, dtype=np.float32)
    if g.ndim != 2 or min(g.shape) < 3:
        return 0.0
    lap = 4.0 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    return float(lap.var())


@dataclass(frozen=True)
class CopyStats:
    """What the choice of the copy to keep looks at.

    Attributes
    ----------
    path : str
    width, height : int
        Size of the image as displayed (from its header); 0 when unreadable.
    file_size : int
        Bytes on disk; 0 when unreadable.
    sharpness : float
        :func:`sharpness` of the copy loaded at :data:`KEEPER_SIDE` pixels (used by
        :func:`best_shot`, not by :func:`best_copy`: a sharpened edit is sharper than its
        original); nan when its pixels were not decoded.
    error : str or None
        Why the copy could not be read (it is then never suggested).
    format : str
        Pillow's format name ("JPEG", "PNG", ...); "" when unknown.
    jpeg_quality : float or None
        For a JPEG, the IJG quality (1-100) its luminance quantisation table corresponds
        to (higher = less compressed); None otherwise.
    taken : str or None
        EXIF ``DateTimeOriginal`` (else ``DateTimeDigitized``) as ``"YYYY-MM-DD
        HH:MM:SS"``, with ``".sss"`` when ``SubSecTimeOriginal`` is given; None when the
        file has none.
    mtime : float
        Modification time of the file (seconds since the epoch); 0.0 when unreadable.
    brightness : float
        Mean gray level (0-255) of the copy loaded at :data:`KEEPER_SIDE` pixels (used by
        :func:`best_shot`); nan when its pixels were not decoded.
    """

    path: str
    width: int
    height: int
    file_size: int
    sharpness: float
    error: str | None = None
    format: str = ""
    jpeg_quality: float | None = None
    taken: str | None = None
    mtime: float = 0.0
    brightness: float = float("nan")

    @property
    def pixels(self) -> int:
        """``width * height``."""
        return self.width * self.height

    @property
    def bytes_per_pixel(self) -> float:
        """``file_size / pixels`` (0.0 without pixels)."""
        return self.file_size / self.pixels if self.pixels else 0.0


#: IJG's standard luminance quantisation table (quality 50), row-major.
_IJG_LUMA = np.array(
    [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
     14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
     18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
     49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99],
    dtype=np.float64,
)  # fmt: skip


def jpeg_quality(table: Sequence[int]) -> float:
    """The IJG quality (1-100) whose scaled standard table best fits a luminance table.

    Parameters
    ----------
    table : sequence of 64 int
        A JPEG luminance quantisation table (any order: only its sum is used).

    Returns
    -------
    float
        ``q`` with ``scale = 100 * sum(table) / sum(standard)`` and ``q = 5000 / scale``
        below 50, ``(200 - scale) / 2`` from 50 (IJG's ``jpeg_quality_scaling``
        inverted), clipped to [1, 100].
    """
    scale = 100.0 * float(np.sum(table)) / float(_IJG_LUMA.sum())
    q = (200.0 - scale) / 2.0 if scale <= 100.0 else 5000.0 / scale
    return float(np.clip(q, 1.0, 100.0))


def _header_facts(path: str) -> tuple[str, float | None, str | None]:
    """(format, JPEG quality, EXIF capture time) read from a file's header by Pillow."""
    from PIL import Image

    fmt, quality, taken = "", None, None
    try:
        with Image.open(path) as im:
            fmt = im.format or ""
            tables = getattr(im, "quantization", None)
            if fmt == "JPEG" and tables:
                quality = jpeg_quality(tables[min(tables)])
            exif = im.getexif()
            sub = exif.get_ifd(0x8769) if exif else {}
            raw = sub.get(0x9003) or sub.get(0x9004)
            if isinstance(raw, bytes):
                raw = raw.decode("ascii", "replace")
            if isinstance(raw, str):
                taken = _exif_time(raw)
            subsec = sub.get(0x9291) if sub.get(0x9003) else None
            if taken and isinstance(subsec, str) and subsec.strip("\x00 ").isdigit():
                taken += "." + subsec.strip("\x00 ")
    except Exception:  # a header Pillow cannot parse: no facts, not an unreadable copy
        pass
    return fmt, quality, taken


def _exif_time(text: str) -> str | None:
    """``"YYYY:MM:DD HH:MM:SS"`` (EXIF) as ``"YYYY-MM-DD HH:MM:SS"``; None when invalid."""
    try:
        return datetime.strptime(text.strip("\x00 ")[:19], "%Y:%m:%d %H:%M:%S").strftime(
            "%Y-%m-%d %H:%M:%S"
        )
    except ValueError:
        return None


def copy_stats(
    path: str | os.PathLike, max_side: int = KEEPER_SIDE
) -> tuple[CopyStats, np.ndarray | None]:
    """Size, resolution, compression, capture time and sharpness of one copy, and the
    pixels the sharpness was measured on.

    Parameters
    ----------
    path : str or os.PathLike
    max_side : int
        Longest side the image is loaded at for :func:`sharpness`.

    Returns
    -------
    stats : CopyStats
        With ``error`` set (and zeros) when the copy cannot be read: one broken copy never
        hides the others.
    image : (H, W, 3) uint8 or None
        The copy loaded at ``max_side`` (for display), None when unreadable.
    """
    from engine.io.imageio import load_image
    from engine.workflows.pixels import gray_levels

    p = str(path)
    head = header_stats(p)
    if head.error is not None:
        return head, None
    try:
        img = load_image(p, max_side=max_side)
        gray = gray_levels(img)
        return dataclasses.replace(
            head, sharpness=sharpness(gray), brightness=float(gray.mean())
        ), img
    except Exception as exc:  # one broken copy must not hide the others
        return CopyStats(p, 0, 0, 0, 0.0, str(exc)), None


def header_stats(path: str | os.PathLike) -> CopyStats:
    """What :func:`best_copy` reads of a copy, from its header only: :func:`copy_stats`
    without decoding the pixels (``sharpness`` nan).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    CopyStats
        With ``error`` set (and zeros) when the header cannot be read.
    """
    from engine.io.imageio import image_size

    p = str(path)
    try:
        w, h = image_size(p)
        st = os.stat(p)
        fmt, quality, taken = _header_facts(p)
        return CopyStats(
            p, int(w), int(h), st.st_size, float("nan"), None, fmt, quality, taken,
            st.st_mtime,
        )  # fmt: skip
    except Exception as exc:  # one broken copy must not hide the others
        return CopyStats(p, 0, 0, 0, 0.0, str(exc))


#: Words of a folder or file name that mark a derived copy (compared in lower case, as
#: whole words of the name).
DERIVED_WORDS: frozenset[str] = frozenset(
    {
        "export", "exports", "exported", "copy", "copies", "kopie", "kopien", "copie",
        "backup", "backups", "tmp", "temp", "edited", "edit", "edits", "resized",
        "output", "converted", "duplicate", "duplicates",
    }
)  # fmt: skip
#: File stems that mark a copy: "x copy", "x copy 2", "x (1)", "x-1", "x - Kopie".
_DERIVED_STEM = re.compile(
    r"(?:[ _-]copy(?: \d+)?|\s?\(\d+\)|-\d|[ _-]+kopie(?: \(\d+\))?)$", re.IGNORECASE
)


def looks_derived(path: str | os.PathLike, base: str | os.PathLike = "") -> str | None:
    """Why a path looks like an export or a copy, or None.

    Parameters
    ----------
    path : str or os.PathLike
    base : str or os.PathLike
        Only the folders below ``base`` are looked at (the copies' common folder: a
        whole collection under ``~/backup`` is not a copy of itself).

    Returns
    -------
    str or None
        ``"is in an export folder (exports)"`` / ``"is named like a copy (x copy.jpg)"``.
    """
    p = Path(path)
    rel = p.parent
    if base:
        try:
            rel = p.parent.relative_to(base)
        except ValueError:
            pass
    for part in rel.parts:
        words = set(re.split(r"[^0-9a-zäöüß]+", part.lower()))
        hit = words & DERIVED_WORDS
        if hit:
            kind = "an export" if any(w.startswith("export") for w in hit) else "a copy"
            return f"is in {kind} folder ({part})"
    if _DERIVED_STEM.search(p.stem) or {"copy", "kopie"} & set(
        re.split(r"[^0-9a-zäöüß]+", p.stem.lower())
    ):
        return f"is named like a copy ({p.name})"
    return None


def _in_reference(path: str, refs: Sequence[str]) -> bool:
    rp = os.path.realpath(path)
    for r in refs:
        try:
            if os.path.commonpath([rp, r]) == r:
                return True
        except ValueError:
            continue
    return False


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


class _Narrowing:
    """The copies still in the running, and why the others were left out, as the rules
    of :func:`best_copy` and :func:`best_shot` narrow them down in turn."""

    def __init__(self, stats: Sequence[CopyStats], cand: list[int]) -> None:
        self.stats = stats
        self.cand = cand
        self.reasons: list[str] = []
        self.larger_than: CopyStats | None = None  # the largest left out for resolution

    def first_rules(self, reference: Sequence[str | os.PathLike]) -> None:
        """The rules both share: a reference folder, a camera RAW file, the larger
        resolution."""
        stats, refs = self.stats, [os.path.realpath(os.fspath(r)) for r in reference]
        if refs:
            in_ref = [i for i in self.cand if _in_reference(stats[i].path, refs)]
            if in_ref and len(in_ref) < len(self.cand):
                self.cand = in_ref
                self.reasons.append("in your reference folder")
        # the camera's RAW file over the images made from it
        from engine.io.formats import RAW_SUFFIXES

        raw = [i for i in self.cand if Path(stats[i].path).suffix.lower() in RAW_SUFFIXES]
        if raw and len(raw) < len(self.cand):
            self.cand = raw
            self.reasons.append("the camera's RAW file")
        most = max(stats[i].pixels for i in self.cand)
        big = [i for i in self.cand if stats[i].pixels >= KEEPER_PIXEL_TOLERANCE * most]
        if len(big) < len(self.cand):
            left = (stats[i] for i in self.cand if i not in big)
            self.larger_than = max(left, key=lambda c: c.pixels)
            self.reasons.append("larger")
            self.cand = big

    def result(self, cand: list[int], alike: str) -> tuple[int, str]:
        """(the first of ``cand``, the copies left by the later rules, and the reasons);
        ``alike`` when no rule told them apart."""
        best = cand[0]
        if self.larger_than is not None:  # (the copy kept, which later rules may have chosen)
            c, o = self.stats[best], self.larger_than
            at = self.reasons.index("larger")
            self.reasons[at] = f"larger ({c.width}x{c.height} vs {o.width}x{o.height})"
        if not self.reasons:
            c = self.stats[best]
            self.reasons.append(f"{alike} ({c.width}x{c.height}); the first is kept")
        return best, "; ".join(self.reasons)


def _narrowed(
    stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike], what: str
) -> tuple[int, str] | _Narrowing:
    """The decision when fewer than two ``what`` are readable; else the readable ones
    narrowed down by the rules both rules share (:meth:`_Narrowing.first_rules`)."""
    ok = [i for i, c in enumerate(stats) if c.error is None]
    if not ok:
        return -1, ""
    if len(ok) == 1:
        c = stats[ok[0]]
        return ok[0], f"the only readable {what} ({c.width}x{c.height})"
    rules = _Narrowing(stats, ok)
    rules.first_rules(reference)
    return rules


def _decide(
    stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike] = ()
) -> tuple[int, str]:
    """(index, reason) of the copy to keep (:func:`best_copy`); (-1, "") when none."""
    rules = _narrowed(stats, reference, "copy")
    if isinstance(rules, tuple):
        return rules
    cand, reasons = rules.cand, rules.reasons
    # 2. compression, between copies of one format
    formats = {stats[i].format for i in cand}
    if len(cand) > 1 and len(formats) == 1:
        fmt = formats.pop()
        if fmt == "JPEG" and all(stats[i].jpeg_quality is not None for i in cand):
            q = {i: float(stats[i].jpeg_quality) for i in cand}  # type: ignore[arg-type]
            top = max(q.values())
            good = [i for i in cand if q[i] >= top - KEEPER_QUALITY_STEP]
            if len(good) < len(cand):
                low = max(q[i] for i in cand if i not in good)
                reasons.append(f"less compressed (JPEG quality {q[good[0]]:.0f} vs {low:.0f})")
                cand = good
        elif fmt in LOSSY_FORMATS:
            bpp = {i: stats[i].bytes_per_pixel for i in cand}
            top = max(bpp.values())
            good = [i for i in cand if bpp[i] >= top / KEEPER_BPP_RATIO]
            if len(good) < len(cand):
                low = max(bpp[i] for i in cand if i not in good)
                reasons.append(
                    f"less compressed ({bpp[good[0]]:.2f} vs {low:.2f} bytes per pixel)"
                )
                cand = good
    # 3. the original: earliest capture time, else earliest file
    first, early = _first_taken(stats, cand)
    if len(early) < len(cand):
        others = [stats[i].taken for i in cand if i not in early]
        if all(o is None for o in others):
            why = _others(len(others), "has no capture time", "have no capture time")
            why += " (made from it)"
        else:
            why = _others(len(others), "was taken later", "were taken later")
        reasons.append(f"original: taken {first[:16]}, {why}")
        cand = early
    t0, early = _oldest_files(stats, cand)
    if len(early) < len(cand):
        later = _others(len(cand) - len(early), "was made later", "were made later")
        reasons.append(f"original: file from {_when(t0)}, {later}")
        cand = early
    # 4. not in an export / copy folder, not named like a copy
    if len(cand) > 1:
        base = os.path.commonpath([os.path.dirname(stats[i].path) for i in cand])
        why = {i: looks_derived(stats[i].path, base) for i in cand}
        clean = [i for i in cand if why[i] is None]
        if clean and len(clean) < len(cand):
            other = next(why[i] for i in cand if why[i] is not None)
            n_out = len(cand) - len(clean)
            reasons.append(f"the other {other}" if n_out == 1 else f"{n_out} others: {other}")
            cand = clean
    # 5. the shorter path
    if len(cand) > 1:
        short = min(len(stats[i].path) for i in cand)
        kept = [i for i in cand if len(stats[i].path) == short]
        if len(kept) < len(cand):
            reasons.append("shorter path")
            cand = kept
    return rules.result(cand, "the copies are alike")


def _decide_shots(
    stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike] = ()
) -> tuple[int, str]:
    """(index, reason) of the shot to keep (:func:`best_shot`); (-1, "") when none."""
    rules = _narrowed(stats, reference, "shot")
    if isinstance(rules, tuple):
        return rules
    cand, reasons = rules.cand, rules.reasons
    # 2. the sharpest, of shots exposed alike (a bracket's brightest frame has the most
    # Laplacian: the rule does not compare them)
    sharp = {i: stats[i].sharpness for i in cand}
    light = [stats[i].brightness for i in cand]
    values = [*sharp.values(), *light]
    measured = len(cand) > 1 and all(np.isfinite(v) and v > 0 for v in values)
    bracket = measured and max(light) > KEEPER_BRACKET_RATIO * min(light)
    if measured and not bracket:
        top = max(sharp.values())
        good = [i for i in cand if sharp[i] >= top / KEEPER_SHARPER]
        if len(good) < len(cand):
            other = max(sharp[i] for i in cand if i not in good)
            n_out = len(cand) - len(good)
            whose = "the other's" if n_out == 1 else "the next one's"
            reasons.append(f"sharpest ({top / other:.1f}x the fine detail of {whose})")
            cand = good
    alike = "exposed differently (a bracket?)" if bracket else "the shots are alike"
    # 3. the first taken, else (when nothing else told them apart) the oldest file
    first, early = _first_taken(stats, cand)
    if len(early) < len(cand):
        reasons.append(f"{alike}; the first taken is kept ({first[:19]})")
        cand = early
    t0, early = _oldest_files(stats, cand)
    if len(early) < len(cand) and not reasons:
        reasons.append(f"{alike}; the oldest file is kept ({_when(t0)})")
        cand = early
    return rules.result(cand, alike)


def _first_taken(stats: Sequence[CopyStats], cand: list[int]) -> tuple[str, list[int]]:
    """The earliest EXIF capture time of ``cand`` and the copies taken then (``cand``
    itself when none has a time or only one is left)."""
    taken = {i: stats[i].taken for i in cand if stats[i].taken}
    if len(cand) < 2 or not taken:
        return "", cand
    first = min(taken.values())
    return first, [i for i in cand if taken.get(i) == first]


def _oldest_files(stats: Sequence[CopyStats], cand: list[int]) -> tuple[float, list[int]]:
    """The earliest modification time of ``cand`` and the files made within
    :data:`KEEPER_MTIME_SLACK` of it (``cand`` itself when only one is left)."""
    if len(cand) < 2:
        return 0.0, cand
    t0 = min(stats[i].mtime for i in cand)
    return t0, [i for i in cand if stats[i].mtime <= t0 + KEEPER_MTIME_SLACK]


def best_shot(stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike] = ()) -> int:
    """Index of the shot a careful person keeps of a group of similar shots.

    Similar shots (a burst, a bracket, a scene taken twice) are photos of their own, not
    copies of one another: which one is "the original" does not apply. The readable
    shots are narrowed down by these rules in turn (a rule that cannot tell the remaining
    shots apart leaves them all):

    0. a shot in a ``reference`` folder; then a camera RAW file; then the larger
       resolution (as :func:`best_copy`);
    1. the sharpest (:attr:`CopyStats.sharpness`, the variance of the Laplacian at one
       size; shots within a factor :data:`KEEPER_SHARPER` of the sharpest count as equal):
       the frame of a burst without camera shake or missed focus. Only between shots
       exposed alike (mean brightness within :data:`KEEPER_BRACKET_RATIO`): of a bracket
       the brightest frame has the most Laplacian, not the best focus, and which exposure
       is best is the photographer's call;
    2. the first taken (EXIF capture time); without capture times, the oldest file when
       nothing else told them apart; then the first.

    Parameters
    ----------
    stats : sequence of CopyStats
        The shots, their pixels measured (:func:`copy_stats`; rule 1 is skipped for
        shots measured from their headers only).
    reference : sequence of str or os.PathLike
        Folders whose photos are always kept.

    Returns
    -------
    int
        Index into ``stats``; -1 when no shot is readable.
    """
    return _decide_shots(stats, reference)[0]


def _others(n: int, one: str, many: str) -> str:
    """ "the other <one>" for one copy left out, "the <n> others <many>" for more."""
    return f"the other {one}" if n == 1 else f"the {n} others {many}"


#: The tier whose groups are shots, not copies (:func:`best_shot`).
SHOTS_TIER = "similar_shots"
#: Shots within this factor of the sharpest shot's sharpness count as equally sharp.
#: Shots of one scene from other spots differ by their content too: of the 150 INRIA
#: Holidays dev scenes with several photos, the sharpest beat the next by 1.19x at the
#: median, more than 1.5x in 21 % (the frame of a burst that shook loses by more).
KEEPER_SHARPER = 1.5
#: Shots whose mean brightness differs by more than this factor are exposed differently
#: (a bracket: one stop apart is about 1.37x in gamma-encoded levels), and their
#: sharpness is not compared.
KEEPER_BRACKET_RATIO = 1.2
#: JPEG copies within this many quality points of the best count as equally compressed.
KEEPER_QUALITY_STEP = 3.0
#: Lossy non-JPEG copies within this ratio of the most bytes per pixel count as equal.
KEEPER_BPP_RATIO = 1.2
#: Files modified within this many seconds of the earliest count as equally old.
KEEPER_MTIME_SLACK = 2.0
#: Lossy formats other than JPEG, compared by bytes per pixel (Pillow's names).
LOSSY_FORMATS: frozenset[str] = frozenset({"WEBP", "HEIF", "AVIF", "JXL"})


def best_copy(stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike] = ()) -> int:
    """Index of the copy a careful person keeps.

    The readable copies are narrowed down by these rules in turn (a rule that cannot
    tell the remaining copies apart leaves them all):

    0. a copy in a ``reference`` folder always wins over the others; then a camera RAW
       file over the images made from it;
    1. the larger resolution (copies within :data:`KEEPER_PIXEL_TOLERANCE` of the most
       pixels count as largest);
    2. higher quality for its size, between copies of one format: the higher JPEG
       quality of the quantisation tables (within :data:`KEEPER_QUALITY_STEP` points
       counts as equal), for other lossy formats more bytes per pixel (within
       :data:`KEEPER_BPP_RATIO`);
    3. the original: the earliest EXIF capture time (a copy without one loses to one
       with one), then the file modified first (within :data:`KEEPER_MTIME_SLACK` s);
    4. not in a folder, below the copies' common folder, that looks like an export or a
       copy, nor named like a copy (:func:`looks_derived`);
    5. the shorter path; then the first.

    Parameters
    ----------
    stats : sequence of CopyStats
        The copies of one group (:func:`copy_stats`).
    reference : sequence of str or os.PathLike
        Folders whose photos are always kept.

    Returns
    -------
    int
        Index into ``stats``; -1 when no copy is readable.
    """
    return _decide(stats, reference)[0]


def keeper_reason(stats: Sequence[CopyStats], reference: Sequence[str | os.PathLike] = ()) -> str:
    """Why :func:`best_copy` keeps its choice, in words ("" when no copy is readable).

    Parameters
    ----------
    stats : sequence of CopyStats
    reference : sequence of str or os.PathLike

    Returns
    -------
    str
        The reasons of the rules that decided, joined by "; ", e.g. ``"larger (800x600
        vs 400x300)"``, ``"in your reference folder"``, ``"the other is in an export
        folder (exports)"``.
    """
    return _decide(stats, reference)[1]


@dataclass(frozen=True)
class Keeper:
    """The copy of a duplicate group suggested to keep.

    Attributes
    ----------
    index : int
        Its position in the group.
    path : str
    reason : str
        Why this one, for people (``"larger (4000x3000 vs 2000x1500)"``, ...).
    """

    index: int
    path: str
    reason: str


def suggest_keeper(
    paths: Sequence[str | os.PathLike],
    stats: Sequence[CopyStats] | None = None,
    *,
    reference: Sequence[str | os.PathLike] = (),
    tier: str | None = None,
) -> Keeper | None:
    """The copy of a duplicate group to keep (:func:`best_copy`), with the reason; of a
    group of similar shots, the shot to keep (:func:`best_shot`).

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The copies (e.g. ``DuplicateGroup.paths``).
    stats : sequence of CopyStats, optional
        Their :func:`copy_stats` when already measured (same order). Otherwise their
        :func:`header_stats` are read, and only the copy chosen is decoded to make sure
        it can be read (when it cannot, the choice is made again without it). A copy whose
        header reads but whose pixels do not then still counts in the rule's tolerances
        (the most pixels, the best quality) unless it was the one chosen. Shots are
        all decoded (:func:`best_shot` compares their pixels).
    reference : sequence of str or os.PathLike
        Folders whose photos are always kept (preferred over the others).
    tier : str, optional
        The group's tier (``DuplicateGroup.tier``): ``"similar_shots"`` asks
        :func:`best_shot`, any other :func:`best_copy`.

    Returns
    -------
    Keeper or None
        None when no copy can be read.
    """
    if tier == SHOTS_TIER:
        if stats is None:
            stats = [copy_stats(p)[0] for p in paths]
        best, reason = _decide_shots(stats, reference)
        return None if best < 0 else Keeper(best, str(paths[best]), reason)
    if stats is None:
        # the rule reads only the files' headers (:func:`header_stats`); of the pixels it
        # asks only that the copy kept can be read: decode that one, and choose again
        # without it when it cannot (a group of 40 copies reads 40 headers and decodes 1)
        stats = [header_stats(p) for p in paths]
        while True:
            best, reason = _decide(stats, reference)
            if best < 0:
                return None
            full = copy_stats(paths[best])[0]
            if full.error is None:
                break
            stats[best] = full
    else:
        best, reason = _decide(stats, reference)
        if best < 0:
            return None
    return Keeper(best, str(paths[best]), reason)


def capture_time(path: str | os.PathLike) -> str | None:
    """EXIF capture time of an image file, for telling shots apart.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str or None
        ``DateTimeOriginal`` (else ``DateTimeDigitized``) as ``"YYYY-MM-DD HH:MM:SS"``,
        followed by ``".sss"`` when ``SubSecTimeOriginal`` is given; None when the file
        has none or cannot be read.
    """
    return _header_facts(str(path))[2]


#: Fewer groups than this are decided in the calling process by :func:`suggest_keepers`.
KEEPERS_IN_PROCESSES = 64


def suggest_keepers(
    groups: Sequence[Sequence[str | os.PathLike]],
    *,
    reference: Sequence[str | os.PathLike] = (),
    workers: int | None = None,
    tiers: Sequence[str | None] | None = None,
) -> list[Keeper | None]:
    """:func:`suggest_keeper` of many groups, in worker processes when there are many
    (every copy's header is read, the copy chosen decoded).

    Parameters
    ----------
    groups : sequence of sequences of paths
        The copies of each group.
    reference : sequence of str or os.PathLike
        Folders whose photos are always kept.
    workers : int, optional
        Processes (default: the machine's cores); 0 or 1, or fewer groups than
        :data:`KEEPERS_IN_PROCESSES`: in this process.
    tiers : sequence of str or None, optional
        Each group's tier (``suggest_keeper(tier=...)``); default: copies.

    Returns
    -------
    list of Keeper or None
        One per group, in order.
    """
    import functools

    if tiers is not None and len(tiers) != len(groups):
        raise ValueError(f"{len(tiers)} tiers given for {len(groups)} groups")
    one = functools.partial(_keeper_of, reference=[os.fspath(r) for r in reference])
    kinds = [None] * len(groups) if tiers is None else list(tiers)
    jobs = [([os.fspath(p) for p in g], t) for g, t in zip(groups, kinds, strict=True)]
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    if workers <= 1 or len(jobs) < KEEPERS_IN_PROCESSES:
        return [one(g) for g in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_watch_parent, initargs=(os.getpid(),)
    ) as pool:
        return list(pool.map(one, jobs, chunksize=max(1, len(jobs) // (8 * workers))))


def _keeper_of(job: tuple[list[str], str | None], reference: list[str]) -> Keeper | None:
    paths, tier = job
    return suggest_keeper(paths, reference=reference, tier=tier)


def _watch_parent(parent: int) -> None:
    """(A worker's initializer) end the worker when its parent is gone (killed)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
