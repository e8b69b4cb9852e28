"""Which photo formats Simile reads, and how a file's first bytes name its format.

The loader (:mod:`engine.io.imageio`), the folder scan (:mod:`engine.io.scan`) and the
indexer (:mod:`engine.index.ingest`, which refuses a file whose first 32 bytes name no
format before reading it whole) all decide "is this a photo?" here, so that a file that
looks like a photo -- by its name or by its signature -- is always either read or listed
with the reason it could not be.

Formats and their signatures
----------------------------
========================  ==========================================  ===================
format                    first bytes                                 decoded by
========================  ==========================================  ===================
JPEG (and MPO)            ``FF D8 FF``                                Pillow
PNG, GIF, BMP, WebP       their usual magic numbers                   Pillow
TIFF                      ``II*\\0`` / ``MM\\0*`` (BigTIFF ``+``)     Pillow
HEIC / HEIF               ISO-BMFF ``ftyp`` box, brand ``heic``,      pillow-heif
                          ``heix``, ``hevc``, ``heim``, ``heis``,
                          ``hev[xms]``, ``mif1``, ``msf1``
AVIF                      ``ftyp`` brand ``avif`` / ``avis`` (or      Pillow (libavif)
                          ``mif1`` / ``msf1`` listing ``avif``)
JPEG XL                   ``FF 0A`` or the ``JXL`` container box      pillow-jxl-plugin
Canon CR3                 ``ftyp`` brand ``crx``                      rawpy (LibRaw)
Fujifilm RAF              ``FUJIFILMCCD-RAW``                         rawpy
Olympus ORF               ``IIRO`` / ``IIRS`` / ``MMOR``              rawpy
Panasonic RW2 / Leica     ``IIU\\0``                                  rawpy
Minolta MRW, Sigma X3F    ``\\0MRM``, ``FOVb``                        rawpy
Canon CR2                 TIFF header + ``CR\\2\\0`` at byte 8        rawpy
NEF, ARW, DNG, PEF, SRW,  a TIFF header: told from a TIFF by the      rawpy
NRW, SR2, 3FR, ...        tags of its first IFD (:func:`tiff_is_raw`)
========================  ==========================================  ===================

The TIFF-based RAW formats are recognised by their *content*, never by their suffix, so
that the same file gives the same pixels whether the loader gets its path (the GUI) or
its bytes (the indexer hands :func:`engine.features.extract_features` the file's bytes).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = [
    "AVIF_SUFFIXES",
    "HEIF_SUFFIXES",
    "IMAGE_SUFFIXES",
    "JXL_SUFFIXES",
    "RAW_FORMATS",
    "RAW_SUFFIXES",
    "is_image_file",
    "raw_sidecar_pairs",
    "sniff_format",
    "tiff_is_raw",
]

#: Suffixes of HEIC / HEIF photos (phones), read through pillow-heif.
HEIF_SUFFIXES: frozenset[str] = frozenset({".heic", ".heif", ".heics", ".heifs", ".hif"})

#: Suffixes of AVIF images, read through Pillow's AVIF plug-in (libavif).
AVIF_SUFFIXES: frozenset[str] = frozenset({".avif", ".avifs"})

#: Suffixes of JPEG XL images, read only when a JPEG XL Pillow plug-in is installed.
JXL_SUFFIXES: frozenset[str] = frozenset({".jxl"})

#: Suffixes of camera RAW files, read through rawpy (LibRaw).
RAW_SUFFIXES: frozenset[str] = frozenset(
    {
        ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".raf", ".orf",
        ".rw2", ".rwl", ".dng", ".pef", ".srw", ".3fr", ".erf", ".kdc", ".dcr", ".mef",
        ".mos", ".mrw", ".x3f", ".iiq",
    }
)  # fmt: skip

#: File-name suffixes (lower case, with the dot) of every format the loader reads:
#: JPEG, PNG, GIF, BMP, TIFF, WebP, HEIC / HEIF, AVIF, JPEG XL and camera RAW. The scan
#: proposes a file with one of these suffixes to the indexer even when its content does
#: not start like an image, so that a broken photo is listed with its reason, never
#: silently passed over; HEIC, AVIF, JPEG XL and RAW files whose decoder is not installed
#: are listed the same way ("... support is not installed").
IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".dib", ".tif", ".tiff", ".webp"}
    | HEIF_SUFFIXES
    | AVIF_SUFFIXES
    | JXL_SUFFIXES
    | RAW_SUFFIXES
)

#: Format names :func:`sniff_format` gives camera RAW files ("TIFF" files can be RAW too:
#: see :func:`tiff_is_raw`).
RAW_FORMATS: frozenset[str] = frozenset({"CR2", "CR3", "RAF", "ORF", "RW2", "MRW", "X3F"})

_HEIF_BRANDS = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}
)
_AVIF_BRANDS = frozenset({b"avif", b"avis"})


def _isobmff_kind(head: bytes) -> str | None:
    """HEIF, AVIF or CR3 from an ISO base media file's ``ftyp`` box, else None."""
    if head[4:8] != b"ftyp":
        return None
    major = head[8:12]
    if major == b"crx ":
        return "CR3"
    if major in _AVIF_BRANDS:
        return "AVIF"
    if major in _HEIF_BRANDS:
        box = int.from_bytes(head[:4], "big")
        end = min(len(head), box) if box >= 16 else len(head)
        compatible = {head[i : i + 4] for i in range(16, end - 3, 4)}
        # a structural brand (mif1 / msf1) says what the coded images are in the others
        if major in (b"mif1", b"msf1") and compatible & _AVIF_BRANDS:
            return "AVIF"
        return "HEIF"
    return None


def sniff_format(head: bytes) -> str | None:
    """Format a file's first 32 bytes name, or ``None`` when they start like no photo.

    Parameters
    ----------
    head : bytes
        The first bytes of the file (32 are enough; fewer are accepted).

    Returns
    -------
    str or None
        ``"JPEG"``, ``"PNG"``, ``"GIF"``, ``"BMP"``, ``"TIFF"``, ``"WebP"``, ``"HEIF"``,
        ``"AVIF"``, ``"JPEG XL"`` or a RAW format of :data:`RAW_FORMATS` (``"CR2"``,
        ``"CR3"``, ``"RAF"``, ``"ORF"``, ``"RW2"``, ``"MRW"``, ``"X3F"``). NEF, ARW, DNG,
        PEF, SRW and the other TIFF-based RAW files start like any TIFF and are named
        ``"TIFF"`` here: the loader tells them apart with :func:`tiff_is_raw`.

    Examples
    --------
    >>> sniff_format(b"\\x00\\x00\\x00\\x18ftypheic\\x00\\x00\\x00\\x00mif1heic")
    'HEIF'
    >>> sniff_format(b"hello") is None
    True
    """
    head = bytes(head[:32])
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head.startswith(b"BM") and len(head) >= 26:
        return "BMP"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # TIFF / BigTIFF
        return "CR2" if head[:4] == b"II*\x00" and head[8:11] == b"CR\x02" else "TIFF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    kind = _isobmff_kind(head)
    if kind is not None:
        return kind
    if head.startswith(b"\xff\x0a") or head.startswith(b"\x00\x00\x00\x0cJXL \r\n\x87\n"):
        return "JPEG XL"
    if head.startswith(b"FUJIFILMCCD-RAW"):
        return "RAF"
    if head[:4] in (b"IIRO", b"IIRS", b"MMOR"):
        return "ORF"
    if head[:4] == b"IIU\x00":
        return "RW2"
    if head[:4] == b"\x00MRM":
        return "MRW"
    if head[:4] == b"FOVb":
        return "X3F"
    return None


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file that starts like a supported image (by content, not name).

    Checks the signatures of :func:`sniff_format`: JPEG, PNG, GIF, BMP, TIFF, WebP, HEIC /
    HEIF, AVIF, JPEG XL and camera RAW -- whether or not the optional decoder of that
    format is installed (the loader then says it is missing). PDF, text, missing files,
    directories and unreadable files give ``False``; it never raises for a bad path. A
    ``True`` answer does not guarantee that the rest of the file decodes. Also
    :func:`engine.io.imageio.is_image_file`; here, the scan asks it without loading Pillow.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
    """
    try:
        with open(os.fspath(path), "rb") as fh:
            head = fh.read(32)
    except (OSError, ValueError, TypeError):
        return False
    return sniff_format(head) is not None


# TIFF tags that tell a camera RAW from an ordinary TIFF (TIFF 6.0, TIFF/EP, DNG 1.4).
_NEW_SUBFILE_TYPE, _COMPRESSION, _PHOTOMETRIC, _MAKE, _SUB_IFDS = 254, 259, 262, 271, 330
_DNG_VERSION = 0xC612
_CFA, _LINEAR_RAW = 32803, 34892  # PhotometricInterpretation of sensor data
#: Compression codes only cameras write (Sony, Samsung, Nikon, Kodak, Pentax raw codecs).
_RAW_COMPRESSIONS = frozenset({32767, 32769, 32770, 32772, 34713, 65000, 65535})
_MAX_IFD_ENTRIES = 4096


def tiff_is_raw(stream: IO[bytes]) -> bool:
    """Whether a file with a TIFF header is a camera RAW file, from its first IFD's tags.

    A RAW file is a TIFF whose first image is the sensor data or a small preview of it;
    reading it as a TIFF would give that preview (often 160 x 120 pixels), not the photo.
    It is recognised, without decoding anything, by any of:

    * Canon's ``CR\\2`` marker after the TIFF header (CR2);
    * a ``DNGVersion`` tag (DNG);
    * a ``PhotometricInterpretation`` of CFA (32803) or LinearRaw (34892) data (PEF, SRW);
    * a ``Compression`` code that only cameras write (e.g. 34713 Nikon, 32767 Sony,
      65535 Pentax, 32769-32772 Samsung);
    * a camera ``Make`` together with ``SubIFDs`` or a first image flagged as a
      reduced-resolution copy (``NewSubfileType`` bit 0): NEF, NRW, ARW, SR2, 3FR...

    Parameters
    ----------
    stream : binary file object
        Seekable, positioned anywhere; left at an unspecified position.

    Returns
    -------
    bool
        ``False`` for an ordinary TIFF and for anything unreadable (never raises for the
        file's content).
    """
    try:
        stream.seek(0)
        head = stream.read(16)
        if len(head) < 8 or head[:2] not in (b"II", b"MM"):
            return False
        e = "<" if head[:2] == b"II" else ">"
        magic = struct.unpack(e + "H", head[2:4])[0]
        if magic == 42:
            if head[8:11] == b"CR\x02":
                return True
            offset = struct.unpack(e + "I", head[4:8])[0]
            count_fmt, entry_fmt, entry_size = e + "H", e + "HHI4s", 12
        elif magic == 43 and len(head) >= 16:  # BigTIFF
            offset = struct.unpack(e + "Q", head[8:16])[0]
            count_fmt, entry_fmt, entry_size = e + "Q", e + "HHQ8s", 20
        else:
            return False
        stream.seek(offset)
        raw_count = stream.read(struct.calcsize(count_fmt))
        count = min(struct.unpack(count_fmt, raw_count)[0], _MAX_IFD_ENTRIES)
        table = stream.read(count * entry_size)
        tags: dict[int, int] = {}
        for k in range(len(table) // entry_size):
            tag, typ, _n, value = struct.unpack_from(entry_fmt, table, k * entry_size)
            if typ == 3:  # SHORT: the first value sits in the first bytes of the field
                tags[tag] = struct.unpack(e + "H", value[:2])[0]
            elif typ in (4, 13):  # LONG / IFD
                tags[tag] = struct.unpack(e + "I", value[:4])[0]
            else:
                tags[tag] = -1  # present; its value is not needed
    except (OSError, ValueError, struct.error, OverflowError):
        return False
    if _DNG_VERSION in tags or tags.get(_PHOTOMETRIC) in (_CFA, _LINEAR_RAW):
        return True
    if tags.get(_COMPRESSION) in _RAW_COMPRESSIONS:
        return True
    reduced = tags.get(_NEW_SUBFILE_TYPE, 0) > 0 and tags[_NEW_SUBFILE_TYPE] & 1
    return _MAKE in tags and (_SUB_IFDS in tags or bool(reduced))


def raw_sidecar_pairs(paths: Sequence[str | os.PathLike]) -> set[tuple[int, int]]:
    """Pairs of a camera RAW file and a non-RAW image beside it with the same stem
    (``IMG_1.NEF`` + ``IMG_1.JPG``: the camera's own JPEG, one photo).

    Parameters
    ----------
    paths : sequence of path-like

    Returns
    -------
    set of (int, int)
        ``(i, j)``, i < j, indices into ``paths``.
    """
    by_stem: dict[tuple[str, str], list[int]] = {}
    for r, p in enumerate(paths):
        p = Path(p)
        by_stem.setdefault((str(p.parent), p.stem.lower()), []).append(r)
    out: set[tuple[int, int]] = set()
    for rows in by_stem.values():
        if len(rows) < 2:
            continue
        raw = [r for r in rows if Path(paths[r]).suffix.lower() in RAW_SUFFIXES]
        other = [r for r in rows if r not in raw]
        out.update((min(a, b), max(a, b)) for a in raw for b in other)
    return out
