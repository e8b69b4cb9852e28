"""What a photo says about itself: date taken, camera, lens, exposure, size and place.

:func:`read_metadata` reads a photo's EXIF (IFD0, the Exif IFD ``0x8769`` and the GPS IFD
``0x8825``, through :meth:`PIL.Image.Image.getexif`) and, where EXIF has no answer, the
few XMP properties that carry the same facts (``exif:DateTimeOriginal``,
``xmp:CreateDate``, ``tiff:Make`` ...), into a :class:`PhotoMetadata`. Only headers are
parsed: Pillow opens lazily, so no pixel is decoded (a JPEG costs well under a
millisecond). HEIC / HEIF and AVIF are opened through the loader's plug-ins
(:mod:`engine.io.plugins`); TIFF-based camera RAW files (NEF, CR2, DNG, ARW, PEF, ...)
through Pillow's TIFF parser, which reads their EXIF tags, their size from LibRaw's
header parse (:mod:`engine.io.raw`); other RAW containers (CR3, RAF, ...) give their
size only.

Reading metadata never fails: a missing, truncated or corrupt EXIF block, a value of the
wrong type, a date that is not a date give empty fields, never an exception, and no
warning escapes (:func:`engine.io.errors.quiet`). Only parsers run on the file's bytes:
XMP is matched with regular expressions (no XML parser, no entities), nothing in a file
is executed.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import IO, Any, ClassVar

from engine.io.errors import quiet
from engine.io.formats import RAW_FORMATS, sniff_format, tiff_is_raw

__all__ = ["PhotoMetadata", "read_metadata"]

# EXIF tags (EXIF 2.32): IFD0, the Exif sub-IFD and the GPS sub-IFD.
_EXIF_IFD, _GPS_IFD = 0x8769, 0x8825
_MAKE, _MODEL, _ORIENTATION, _DATETIME = 0x010F, 0x0110, 0x0112, 0x0132
_EXPOSURE_TIME, _F_NUMBER, _ISO = 0x829A, 0x829D, 0x8827
_DATE_ORIGINAL, _DATE_DIGITIZED, _OFFSET_ORIGINAL = 0x9003, 0x9004, 0x9011
_FOCAL_LENGTH, _LENS_MAKE, _LENS_MODEL = 0x920A, 0xA433, 0xA434
_PIXEL_X, _PIXEL_Y = 0xA002, 0xA003
_GPS_LAT_REF, _GPS_LAT, _GPS_LON_REF, _GPS_LON, _GPS_ALT_REF, _GPS_ALT = 1, 2, 3, 4, 5, 6

#: Longest text kept from a tag (camera and lens names are far shorter).
_MAX_TEXT = 120
_MAX_XMP = 1 << 20
_DATE_RE = re.compile(
    r"^\s*(\d{4})[:\-](\d{2})[:\-](\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?"
    r"(?:\.\d+)?\s*(Z|[+\-]\d{2}:?\d{2})?"
)
_OFFSET_RE = re.compile(r"^\s*([+\-])(\d{2}):?(\d{2})\s*$")


@dataclass(frozen=True)
class PhotoMetadata:
    """The facts a photo records about itself; every field is ``None`` when unknown.

    Attributes
    ----------
    date_taken : str or None
        When the photo was taken, ISO 8601 local time as the camera wrote it
        (``"2023-07-14T10:30:05"``), with the UTC offset when the file records one
        (``"2023-07-14T10:30:05+02:00"``). From ``DateTimeOriginal``, else
        ``DateTimeDigitized``, ``DateTime`` or XMP's ``exif:DateTimeOriginal`` /
        ``photoshop:DateCreated`` / ``xmp:CreateDate``.
    make, model : str or None
        Camera maker and model (``Make``, ``Model``).
    lens : str or None
        Lens model (``LensModel``, with ``LensMake`` when the model does not name it).
    exposure_time : float or None
        Shutter time in seconds.
    f_number : float or None
        Aperture (the N of f/N).
    iso : int or None
        ISO speed.
    focal_length : float or None
        Focal length in millimetres (of the lens, not 35 mm equivalent).
    width, height : int or None
        Full size in pixels as displayed (after the EXIF orientation).
    latitude, longitude : float or None
        Decimal degrees, north and east positive.
    altitude : float or None
        Metres above sea level.
    """

    date_taken: str | None = None
    make: str | None = None
    model: str | None = None
    lens: str | None = None
    exposure_time: float | None = None
    f_number: float | None = None
    iso: int | None = None
    focal_length: float | None = None
    width: int | None = None
    height: int | None = None
    latitude: float | None = None
    longitude: float | None = None
    altitude: float | None = None

    # -------------------------------------------------------------- derived, for showing

    @property
    def camera(self) -> str | None:
        """``"Make Model"``, without repeating a maker the model already names."""
        make, model = self.make, self.model
        if make and model:
            first = make.split()[0].lower()
            return model if model.lower().startswith(first) else f"{make} {model}"
        return model or make

    @property
    def date(self) -> str | None:
        """The day taken, ``"YYYY-MM-DD"`` (None when unknown)."""
        return self.date_taken[:10] if self.date_taken else None

    @property
    def exposure(self) -> str | None:
        """Exposure settings in one line, e.g. ``"1/250 s · f/2.8 · ISO 100 · 35 mm"``."""
        parts = []
        t = self.exposure_time
        if t is not None and t > 0:
            parts.append(f"1/{round(1 / t)} s" if t < 0.5 else f"{t:g} s")
        if self.f_number is not None:
            parts.append(f"f/{self.f_number:.1f}".replace(".0", ""))
        if self.iso is not None:
            parts.append(f"ISO {self.iso}")
        if self.focal_length is not None:
            parts.append(f"{self.focal_length:g} mm")
        return " · ".join(parts) or None

    @property
    def has_gps(self) -> bool:
        """Whether the photo records where it was taken."""
        return self.latitude is not None and self.longitude is not None

    def is_empty(self) -> bool:
        """Whether nothing at all is known."""
        return all(v is None for v in asdict(self).values())

    # -------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        """Every field by name (``None`` for unknown), JSON-serialisable.

        Returns
        -------
        dict
        """
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PhotoMetadata:
        """The metadata of a :meth:`to_json` dict; unknown keys are ignored and a value of
        the wrong type (a damaged catalogue row) is dropped, never raised.

        Parameters
        ----------
        data : dict
            As :meth:`to_json` wrote it (anything else gives empty metadata).

        Returns
        -------
        PhotoMetadata
        """
        if not isinstance(data, dict):
            return cls()
        kw: dict[str, Any] = {}
        for f in fields(cls):
            v = data.get(f.name)
            if f.name in ("iso", "width", "height"):
                v = _int(v)
            elif f.name in ("date_taken", "make", "model", "lens"):
                v = _text(v)
            else:
                v = _float(v)
            if f.name == "date_taken" and v is not None and not _DATE_RE.match(v):
                v = None
            kw[f.name] = v
        return cls(**kw)


# ------------------------------------------------------------------------ value cleaning


def _text(value: Any) -> str | None:
    """A tag's text: bytes decoded, NULs and control characters dropped, trimmed."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    value = "".join(c for c in value.split("\x00")[0] if c.isprintable()).strip()
    return value[:_MAX_TEXT] or None


def _float(value: Any) -> float | None:
    """A finite float of a number or EXIF rational (None for 0/0, NaN, text...)."""
    if isinstance(value, tuple | list) and len(value) == 1:
        value = value[0]
    if isinstance(value, tuple) and len(value) == 2:  # (numerator, denominator)
        try:
            value = value[0] / value[1]
        except (TypeError, ZeroDivisionError):
            return None
    if isinstance(value, bool) or isinstance(value, str | bytes):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return out if math.isfinite(out) else None


def _int(value: Any) -> int | None:
    v = _float(value)
    return round(v) if v is not None and abs(v) < 2**31 else None


def _positive(value: Any) -> float | None:
    v = _float(value)
    return v if v is not None and v > 0 else None


def _date(value: Any, offset: Any = None) -> str | None:
    """ISO 8601 of an EXIF (``"2023:07:14 10:30:05"``) or XMP date; None when it is not a
    real date (``"0000:00:00 00:00:00"``, blanks, garbage)."""
    text = _text(value)
    m = _DATE_RE.match(text) if text else None
    if m is None:
        return None
    y, mo, d, hh, mm, ss, tz = m.groups()
    try:
        when = datetime(int(y), int(mo), int(d), int(hh or 0), int(mm or 0), int(ss or 0))
    except ValueError:
        return None
    if when.year < 1826:  # before the first photograph: a placeholder, not a date
        return None
    out = when.isoformat()
    tz = tz or _text(offset)
    if tz:
        if tz == "Z":
            return out + "+00:00"
        om = _OFFSET_RE.match(tz)
        if om and int(om[2]) <= 14 and int(om[3]) < 60:
            out += f"{om[1]}{om[2]}:{om[3]}"
    return out


def _degrees(value: Any, ref: Any, negative: str) -> float | None:
    """Decimal degrees of a GPS ``(degrees, minutes, seconds)`` triple and its reference
    letter (``negative``: ``"S"`` or ``"W"``)."""
    if not isinstance(value, tuple | list) or not 1 <= len(value) <= 3:
        return None
    parts = [_float(v) for v in value]
    if any(p is None for p in parts):
        return None
    deg = sum(p / 60**i for i, p in enumerate(parts))  # type: ignore[operator]
    r = _text(ref)
    if r and r.upper().startswith(negative):
        deg = -deg
    return deg


# ------------------------------------------------------------------------ reading


def _xmp_value(xmp: str, names: tuple[str, ...]) -> str | None:
    """The first of the XMP properties ``names`` (``prefix:Name``), as an attribute or a
    simple element."""
    for name in names:
        n = re.escape(name)
        m = re.search(rf'{n}\s*=\s*"([^"<>]*)"', xmp) or re.search(
            rf"<{n}>\s*(?:<rdf:\w+>\s*<rdf:li[^>]*>)?([^<>]*)<", xmp
        )
        if m and m.group(1).strip():
            return m.group(1).strip()
    return None


def _xmp_text(im: Any) -> str | None:
    """The XMP packet Pillow found (JPEG APP1, PNG iTXt, TIFF tag 700, WebP), as text."""
    raw = im.info.get("xmp") or im.info.get("XML:com.adobe.xmp")
    if raw is None and hasattr(im, "tag_v2"):
        raw = im.tag_v2.get(700)
    if isinstance(raw, bytes):
        raw = raw[:_MAX_XMP].decode("utf-8", "replace")
    return raw[:_MAX_XMP] if isinstance(raw, str) else None


def _from_exif(im: Any) -> dict[str, Any]:
    """The fields EXIF (and XMP) give, from an opened (not decoded) Pillow image."""
    out: dict[str, Any] = {}
    try:
        # (Pillow decodes a whole PNG to look for an eXIf chunk after its pixels: only
        # the chunks before them are read, as for the other formats)
        png_late = getattr(im, "format", None) == "PNG" and "exif" not in im.info
        exif = {} if png_late else im.getexif()
    except Exception:
        exif = {}
    ifd: Any = {}
    gps: Any = {}
    try:
        ifd = exif.get_ifd(_EXIF_IFD) if _EXIF_IFD in exif else {}
    except Exception:
        ifd = {}
    try:
        gps = exif.get_ifd(_GPS_IFD) if _GPS_IFD in exif else {}
    except Exception:
        gps = {}

    def get(table: Any, tag: int) -> Any:
        try:
            return table.get(tag)
        except Exception:
            return None

    out["date_taken"] = (
        _date(get(ifd, _DATE_ORIGINAL), get(ifd, _OFFSET_ORIGINAL))
        or _date(get(ifd, _DATE_DIGITIZED))
        or _date(get(exif, _DATETIME))
    )
    out["make"] = _text(get(exif, _MAKE))
    out["model"] = _text(get(exif, _MODEL))
    lens = _text(get(ifd, _LENS_MODEL))
    lens_make = _text(get(ifd, _LENS_MAKE))
    if lens and lens_make and lens_make.split()[0].lower() not in lens.lower():
        lens = f"{lens_make} {lens}"
    out["lens"] = lens
    out["exposure_time"] = _positive(get(ifd, _EXPOSURE_TIME))
    out["f_number"] = _positive(get(ifd, _F_NUMBER))
    iso = get(ifd, _ISO)
    iso = _int(iso[0] if isinstance(iso, tuple | list) and iso else iso)
    out["iso"] = iso if iso is not None and iso > 0 else None
    out["focal_length"] = _positive(get(ifd, _FOCAL_LENGTH))
    lat = _degrees(get(gps, _GPS_LAT), get(gps, _GPS_LAT_REF), "S")
    lon = _degrees(get(gps, _GPS_LON), get(gps, _GPS_LON_REF), "W")
    if lat is not None and lon is not None and abs(lat) <= 90 and abs(lon) <= 180:
        out["latitude"], out["longitude"] = round(lat, 7), round(lon, 7)
        alt = _float(get(gps, _GPS_ALT))
        if alt is not None:
            ref = get(gps, _GPS_ALT_REF)
            below = ref in (1, b"\x01") or (isinstance(ref, bytes) and ref[:1] == b"\x01")
            out["altitude"] = round(-alt if below else alt, 2)
    try:
        orientation = int(get(exif, _ORIENTATION) or 1)
    except (TypeError, ValueError):
        orientation = 1
    out["_orientation"] = orientation
    out["_pixels"] = (_int(get(ifd, _PIXEL_X)), _int(get(ifd, _PIXEL_Y)))

    xmp = None
    try:
        xmp = _xmp_text(im)
    except Exception:
        xmp = None
    if xmp:
        if out["date_taken"] is None:
            out["date_taken"] = _date(
                _xmp_value(
                    xmp, ("exif:DateTimeOriginal", "photoshop:DateCreated", "xmp:CreateDate")
                )
            )
        for key, names in (
            ("make", ("tiff:Make",)),
            ("model", ("tiff:Model",)),
            ("lens", ("exifEX:LensModel", "aux:Lens")),
        ):
            if out[key] is None:
                out[key] = _text(_xmp_value(xmp, names))
    return out


def _open_formats(kind: str | None) -> tuple[str, ...] | None:
    """The Pillow plug-ins allowed to parse a file of ``kind`` (None: do not open it)."""
    from engine.io.errors import ImageLoadError
    from engine.io.plugins import PLUGIN_KINDS, pillow_formats

    if kind in PLUGIN_KINDS:
        try:
            return pillow_formats(kind, "<metadata>")
        except ImageLoadError:
            return None
    if kind in ("RAW", "CR2"):
        return ("TIFF",)
    if kind is None or kind in RAW_FORMATS:
        return None
    return {"JPEG": ("JPEG", "MPO"), "WebP": ("WEBP",)}.get(kind, (kind.upper(),))


class _TagsOnly:
    """What :func:`_from_exif` needs of an image, for EXIF parsed without one."""

    info: ClassVar[dict[str, Any]] = {}

    def __init__(self, exif: Any) -> None:
        self._exif = exif

    def getexif(self) -> Any:
        return self._exif


def _tiff_exif(stream: IO[bytes]) -> dict[str, Any]:
    """:func:`_from_exif` of a TIFF-based RAW file's own tags (IFD0 and its Exif and GPS
    IFDs), parsed as an EXIF block: no image is opened."""
    from PIL import Image

    try:
        stream.seek(0)
        exif = Image.Exif()
        with quiet():
            exif.load(stream.read())
            return _from_exif(_TagsOnly(exif))
    except Exception:
        return {}


def _raw_size(stream: IO[bytes]) -> tuple[int, int] | None:
    """Displayed size of a RAW file from LibRaw's header parse (None when unreadable)."""
    from engine.io.raw import open_raw

    try:
        stream.seek(0)
        data = stream.read()
        with open_raw(data, "<metadata>", 1 << 40) as photo:  # (it keeps warnings quiet)
            return photo.size
    except Exception:
        return None


def _read(stream: IO[bytes]) -> PhotoMetadata:
    from PIL import Image

    head = stream.read(32)
    kind = sniff_format(head)
    if kind == "TIFF" and tiff_is_raw(stream):
        kind = "RAW"
    stream.seek(0)
    raw = kind == "RAW" or kind in RAW_FORMATS
    found: dict[str, Any] = {}
    size: tuple[int, int] | None = None
    formats = _open_formats(kind)
    if formats:
        try:
            with quiet(), Image.open(stream, formats=list(formats)) as im:
                found = _from_exif(im)
                size = im.size
        except Exception:
            found, size = {}, None
    if raw and not found and kind in ("RAW", "CR2"):
        found = _tiff_exif(stream)  # (Pillow cannot open every RAW's first image)
    orientation = found.pop("_orientation", 1)
    pixels = found.pop("_pixels", (None, None))
    if raw:
        size = _raw_size(stream)  # (the TIFF's first image is a preview; LibRaw knows)
        if size is None and None not in pixels:
            size = pixels
            if orientation in (5, 6, 7, 8):
                size = (size[1], size[0])
    elif size is not None and kind != "HEIF" and orientation in (5, 6, 7, 8):
        size = (size[1], size[0])  # (libheif applies the rotation itself)
    if size is not None and size[0] > 0 and size[1] > 0:
        found["width"], found["height"] = int(size[0]), int(size[1])
    return PhotoMetadata(**found)


def read_metadata(source: str | os.PathLike | bytes | bytearray | memoryview) -> PhotoMetadata:
    """Read a photo's metadata from its headers; never raises for the file's content.

    Parameters
    ----------
    source : path-like or bytes
        The photo file, or its bytes (the indexer's workers have read them already).

    Returns
    -------
    PhotoMetadata
        Empty (every field ``None``) when the file cannot be read or carries nothing,
        for instance a corrupt EXIF block: the other fields are still read when they can
        be.

    Examples
    --------
    >>> read_metadata(b"not a photo").is_empty()
    True
    """
    try:
        if isinstance(source, bytes | bytearray | memoryview):
            stream: IO[bytes] = io.BytesIO(bytes(source))
        else:
            stream = open(os.fspath(source), "rb")
    except (OSError, TypeError, ValueError):
        return PhotoMetadata()
    try:
        return _read(stream)
    except Exception:  # nothing in a photo's metadata may stop the indexing
        return PhotoMetadata()
    finally:
        stream.close()
