"""The one image loader used everywhere in Simile.

Every image the engine, the command line or the GUI reads goes through
:func:`load_image` / :func:`load_gray`, so every caller gets the same pixels:

* formats: JPEG (and camera MPO), PNG, GIF (first frame), BMP, TIFF (first page), WebP;
  HEIC / HEIF and AVIF (phones), JPEG XL when its plug-in is installed
  (:mod:`engine.io.plugins`); camera RAW -- CR2, CR3, NEF, ARW, RAF, ORF, RW2, DNG, PEF,
  SRW and the rest of what LibRaw reads (:mod:`engine.io.raw`). The format is told from
  the file's content (:mod:`engine.io.formats`), never its name, so a path and the same
  file's bytes always give the same pixels;
* EXIF orientation applied (tag 0x0112, the same mapping as :func:`PIL.ImageOps.exif_transpose`);
  HEIF rotation boxes are applied by libheif; a RAW file is turned by its ``flip`` flag;
* every pixel mode converted to 8-bit RGB (or luma): 16-bit and 32-bit grey, grey + alpha,
  RGBA, palette (with a transparent index), CMYK (Adobe-inverted CMYK JPEGs included), 1-bit,
  YCbCr / LAB / HSV.  Transparent pixels are composited on white;
* large photos downsized to ``max_side`` pixels on the longest side, cheaply: JPEGs are
  decoded at 1/2, 1/4 or 1/8 scale by libjpeg (:meth:`PIL.Image.Image.draft`) and then
  resampled to the exact size with Pillow's antialiasing bicubic filter (its support
  widened by the reduction factor, so no aliasing; about 1.8x faster than Lanczos here).
  A HEIF file's embedded thumbnail is decoded instead of the image when it is large enough;
  a RAW file gives its embedded JPEG preview when that is at least ``max_side`` pixels
  long (else a half-size, or full-size, demosaic);
* 10- and 12-bit HEIF / AVIF and 16-bit images reduced to 8 bits;
* decompression bombs refused from the header, before any pixel is decoded (RAW files
  too: from LibRaw's parse of the sensor size).

Failures
--------
Every problem with the *input* -- missing file, a directory, no permission, an empty file,
something that is not an image, an unsupported format, a truncated or corrupt file, a
zero-size image, too many pixels, not enough memory, a HEIC / AVIF / JPEG XL / RAW file
whose decoder is not installed ("HEIC support is not installed (...)", "RAW support is not
installed (...)") -- raises :class:`ImageLoadError`, whose ``path`` names the file and
whose ``reason`` says plainly what is wrong. No other exception type escapes for a bad
file, whichever library parses it (Pillow, pillow-heif / libheif, libavif, LibRaw), and
no warning escapes either. Bad *arguments* (a negative ``max_side``, a source of the
wrong type) raise ``ValueError`` / ``TypeError``.

Pillow's own global limit (``2 * PIL.Image.MAX_IMAGE_PIXELS``, about 179 megapixels by
default) still applies on top of ``max_pixels``; an image above it is reported as a
decompression bomb too.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image, UnidentifiedImageError

from engine.io.errors import ImageLoadError, describe, quiet
from engine.io.formats import (  # is_image_file: re-exported, its home before
    IMAGE_SUFFIXES,
    RAW_FORMATS,
    is_image_file,
    sniff_format,
    tiff_is_raw,
)
from engine.io.plugins import PLUGIN_KINDS, pillow_formats
from engine.io.raw import RawPhoto, open_raw

__all__ = [
    "IMAGE_SUFFIXES",
    "MAX_FILE_BYTES",
    "ImageLoadError",
    "ImageSource",
    "image_size",
    "is_image_file",
    "load_gray",
    "load_image",
    "sniff_format",
]

#: Largest image file the indexer reads (1 GiB): above any image under the default pixel
#: limit (100 MP of 16-bit RGBA is 800 MB uncompressed), so a bigger file is junk or a bomb.
MAX_FILE_BYTES = 1 << 30

#: What the loader accepts: a path, the encoded bytes of a file, or a binary file object.
ImageSource = str | os.PathLike | bytes | bytearray | memoryview | IO[bytes]

# Pillow plug-ins we let parse input; everything else is "unsupported format".
Image.init()  # register every plug-in now, so the names below are known to Image.open
_FORMATS = tuple(
    f for f in ("JPEG", "MPO", "PNG", "GIF", "BMP", "DIB", "TIFF", "WEBP") if f in Image.OPEN
)
_JPEG_FORMATS = tuple(f for f in ("JPEG", "MPO") if f in Image.OPEN)  # RAW previews
_FORMAT_NAMES = "JPEG, PNG, GIF, BMP, TIFF, WebP, HEIC, AVIF, JPEG XL, camera RAW"

# EXIF orientation -> transposition that displays the image upright (EXIF 2.3, tag 0x0112).
_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

# Image.open consults process-wide warning filters for its decompression-bomb warning:
# every catch_warnings() of the loader runs under one lock (engine.io.errors.quiet), since
# catch_warnings() is not thread-safe. Only the cheap header parse is serialised.


# --------------------------------------------------------------------------------------------
# Opening
# --------------------------------------------------------------------------------------------


def _label(source: object) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source) if not isinstance(source, bytes) else repr(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>"
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _read_source(source: ImageSource, label: str) -> IO[bytes]:
    """Return a seekable binary stream for ``source`` or raise :class:`ImageLoadError`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise ImageLoadError(label, "empty data (0 bytes)")
        return io.BytesIO(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        try:
            if path.is_dir():
                raise ImageLoadError(label, "is a directory, not an image file")
            fh = open(path, "rb")  # closed by _opened
        except ImageLoadError:
            raise
        except FileNotFoundError:
            raise ImageLoadError(label, "file not found") from None
        except PermissionError:
            raise ImageLoadError(label, "permission denied") from None
        except IsADirectoryError:
            raise ImageLoadError(label, "is a directory, not an image file") from None
        except (OSError, ValueError) as exc:  # ValueError: embedded NUL in the path
            raise ImageLoadError(label, f"cannot open file ({describe(exc)})") from None
        try:
            empty = os.fstat(fh.fileno()).st_size == 0
        except OSError:
            empty = False
        if empty:
            fh.close()
            raise ImageLoadError(label, "empty file (0 bytes)")
        return fh
    if hasattr(source, "read"):
        try:  # copied, so that closing the image never closes the caller's stream
            data = source.read()
        except Exception as exc:
            raise ImageLoadError(label, f"cannot read stream ({describe(exc)})") from None
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"source stream must be opened in binary mode, got {type(data)}")
        if not data:
            raise ImageLoadError(label, "empty data (0 bytes)")
        return io.BytesIO(bytes(data))
    raise TypeError(
        f"path_or_bytes must be a path, bytes or a binary file object, got {type(source).__name__}"
    )


@contextlib.contextmanager
def _source_stream(source: ImageSource, label: str) -> Iterator[IO[bytes]]:
    """:func:`_read_source`, closed on exit."""
    stream = _read_source(source, label)
    try:
        yield stream
    finally:
        stream.close()


def _read_all(stream: IO[bytes], label: str) -> bytes:
    """The whole stream (a RAW file is parsed from memory), failures translated."""
    try:
        return stream.read()
    except MemoryError:
        raise ImageLoadError(label, "not enough memory to read the file") from None
    except OSError as exc:
        raise ImageLoadError(label, f"cannot read file ({describe(exc)})") from None


def _kind(stream: IO[bytes]) -> str | None:
    """Format named by the stream's first bytes (:func:`sniff_format`), ``"RAW"`` for a
    TIFF-based camera RAW file (:func:`engine.io.formats.tiff_is_raw`); rewinds."""
    kind = sniff_format(stream.read(32))
    if kind == "TIFF" and tiff_is_raw(stream):
        kind = "RAW"
    stream.seek(0)
    return kind


def _is_raw(kind: str | None) -> bool:
    return kind == "RAW" or kind in RAW_FORMATS


@contextlib.contextmanager
def _opened(
    stream: IO[bytes],
    label: str,
    max_pixels: int,
    kind: str | None,
    formats: tuple[str, ...] | None = None,
) -> Iterator[Image.Image]:
    """Parse the header only (lazy :func:`PIL.Image.open`), every failure translated.

    ``kind`` is what the first bytes say (:func:`_kind`); it picks the Pillow plug-ins
    allowed to parse the stream (``formats`` overrides them), registering an optional
    one on first use. The declared size is checked against ``max_pixels`` before
    anything else can decode pixels. Closes the image (not the stream) on exit.
    """
    if formats is None:
        formats = pillow_formats(kind, label) if kind in PLUGIN_KINDS else _FORMATS
    try:
        with quiet():
            # We enforce our own pixel limit right after this; Pillow's soft warning
            # would otherwise escape for images between MAX_IMAGE_PIXELS and max_pixels.
            im = Image.open(stream, formats=formats)
    except Image.DecompressionBombError as exc:
        raise ImageLoadError(label, f"refused as a possible decompression bomb ({exc})") from None
    except UnidentifiedImageError:
        reason = (
            f"corrupt {kind} header (it starts like a {kind} file but cannot be parsed)"
            if kind
            else f"not an image, or not a supported format ({_FORMAT_NAMES})"
        )
        raise ImageLoadError(label, reason) from None
    except MemoryError:
        raise ImageLoadError(label, "not enough memory to read the image header") from None
    except Exception as exc:  # corrupt headers raise OSError, SyntaxError, struct.error...
        raise ImageLoadError(label, f"corrupt image header ({describe(exc)})") from None
    try:
        w, h = im.size
        if w <= 0 or h <= 0:
            raise ImageLoadError(label, f"image has zero size ({w} x {h} pixels)")
        if w * h > max_pixels:
            raise ImageLoadError(
                label,
                f"refused as a possible decompression bomb: {w} x {h} = {w * h} pixels "
                f"exceeds max_pixels={max_pixels}",
            )
        yield im
    finally:
        im.close()


def _orientation(im: Image.Image, *, header_only: bool = False) -> int:
    """EXIF orientation 1..8 (1 when absent or unreadable; corrupt EXIF is ignored).

    With ``header_only``, never trigger decoding: Pillow's PNG reader would load the whole
    image to look for an ``eXIf`` chunk after the pixel data.
    """
    if header_only and im.format == "PNG" and "exif" not in im.info:
        return 1
    try:
        with quiet():  # "Possibly corrupt EXIF data" and the like
            value = int(im.getexif().get(0x0112, 1))
    except Exception:
        return 1
    return value if 1 <= value <= 8 else 1


def _check_args(max_side: int | None, max_pixels: int) -> None:
    if max_side is not None and (not isinstance(max_side, (int, np.integer)) or max_side < 1):
        raise ValueError(f"max_side must be a positive integer or None, got {max_side!r}")
    if not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
        raise ValueError(f"max_pixels must be a positive integer, got {max_pixels!r}")


# --------------------------------------------------------------------------------------------
# Decoding and pixel-mode conversion
# --------------------------------------------------------------------------------------------


def _on_white(rgba: np.ndarray) -> np.ndarray:
    """Composite ``(H, W, C+1) uint8`` colour + straight alpha on a white background."""
    color = rgba[..., :-1].astype(np.uint16)
    alpha = rgba[..., -1:].astype(np.uint16)
    # c * a / 255 + 255 * (1 - a / 255), rounded: exact integer arithmetic.
    out = (color * alpha + 255 * (255 - alpha) + 127) // 255
    return out.astype(np.uint8)


def _integer_to_uint8(arr: np.ndarray) -> np.ndarray:
    """Map 16/32-bit grey samples to 8 bits.

    Values in ``[0, 65535]`` are taken as 16-bit samples and divided by 257 (so 65535 -> 255
    and 257 * v -> v exactly); any other range is stretched linearly from min..max.
    """
    arr = arr.astype(np.int64, copy=False)
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    if lo >= 0 and hi <= 65535:
        return ((arr + 128) // 257).astype(np.uint8)
    scaled = (arr - lo) * 255.0 / max(hi - lo, 1)
    return np.rint(scaled).astype(np.uint8)


def _float_to_uint8(arr: np.ndarray) -> np.ndarray:
    """Map float grey samples to 8 bits: ``[0, 1]`` -> ``[0, 255]``, else min..max stretch."""
    arr = np.nan_to_num(arr.astype(np.float64, copy=False))
    lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if lo >= 0.0 and hi <= 1.0:
        return np.rint(arr * 255.0).astype(np.uint8)
    return np.rint((arr - lo) * 255.0 / max(hi - lo, 1e-12)).astype(np.uint8)


def _to_pixels(im: Image.Image, gray: bool) -> Image.Image:
    """Convert a decoded image of any mode to mode ``"RGB"`` (or ``"L"`` if ``gray``)."""
    mode = im.mode
    target = "L" if gray else "RGB"
    if mode == target:
        return im
    if mode in ("L", "RGB"):
        return im.convert(target)
    if mode == "1":
        return im.convert("L").convert(target)
    if mode.startswith("I;16") or mode == "I":
        out = Image.fromarray(_integer_to_uint8(np.asarray(im)))
        return out if gray else out.convert("RGB")
    if mode == "F":
        out = Image.fromarray(_float_to_uint8(np.asarray(im)))
        return out if gray else out.convert("RGB")
    has_alpha = mode in ("LA", "La", "PA", "RGBA", "RGBa") or (
        mode in ("P", "L", "RGB") and "transparency" in im.info
    )
    if has_alpha:
        rgba = np.asarray(im.convert("LA" if mode in ("LA", "La") else "RGBA"))
        out = Image.fromarray(_on_white(rgba)[..., 0] if mode in ("LA", "La") else _on_white(rgba))
        return out.convert(target)
    # P, CMYK (Pillow undoes Adobe's inverted CMYK when it reads the JPEG), YCbCr, LAB, HSV...
    return im.convert("RGB").convert(target) if gray else im.convert("RGB")


def _finish(
    im: Image.Image, label: str, orientation: int, *, max_side: int | None, gray: bool
) -> np.ndarray:
    """Decoded image -> upright 8-bit RGB / luma array at most ``max_side`` pixels long."""
    try:
        out = _to_pixels(im, gray)
        if orientation != 1:
            out = out.transpose(_ORIENTATION[orientation])
        if max_side is not None and max(out.size) > max_side:
            ow, oh = out.size
            s = max_side / max(ow, oh)
            size = (max(1, round(ow * s)), max(1, round(oh * s)))
            out = out.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0)
        arr = np.array(out, dtype=np.uint8)  # copy: independent of Pillow's buffer
    except MemoryError:
        raise ImageLoadError(label, "not enough memory to decode the image") from None
    except Exception as exc:
        raise ImageLoadError(label, f"cannot convert image ({describe(exc)})") from None
    if gray:
        return arr.reshape(arr.shape[0], arr.shape[1])
    return arr.reshape(arr.shape[0], arr.shape[1], 3)


def _decode_pillow(
    stream: IO[bytes],
    label: str,
    kind: str | None,
    *,
    max_side: int | None,
    max_pixels: int,
    gray: bool,
    formats: tuple[str, ...] | None = None,
    orientation: int | None = None,
) -> np.ndarray:
    """Decode through Pillow; ``orientation`` overrides the image's EXIF one if given."""
    with _opened(stream, label, max_pixels, kind, formats) as im:
        w, h = im.size
        try:
            if im.format in ("JPEG", "MPO") and max_side is not None and max(w, h) > max_side:
                # libjpeg's DCT scaling: decode at the largest 1/2^k that is still >= target
                # (and straight to luma for load_gray); the resize below gives the exact size.
                s = max_side / max(w, h)
                target = (max(1, int(w * s) + 1), max(1, int(h * s) + 1))
                im.draft("L" if gray else "RGB", target)
            elif im.format in ("JPEG", "MPO") and gray:
                im.draft("L", None)
            elif im.format == "HEIF" and max_side is not None and max(w, h) > max_side:
                # pillow-heif decodes an embedded thumbnail instead when one is at least
                # this large (a scaled copy: same aspect ratio and rotation), else nothing.
                s = max_side / max(w, h)
                im.draft(None, (max(1, int(w * s) + 1), max(1, int(h * s) + 1)))
            im.seek(0)  # first frame of GIF / first page of TIFF
            im.load()
        except ImageLoadError:
            raise
        except MemoryError:
            raise ImageLoadError(label, "not enough memory to decode the image") from None
        except Image.DecompressionBombError as exc:
            raise ImageLoadError(
                label, f"refused as a possible decompression bomb ({exc})"
            ) from None
        except Exception as exc:  # OSError("image file is truncated"), SyntaxError, ...
            raise ImageLoadError(
                label, f"truncated or corrupt image data ({describe(exc)})"
            ) from None
        if orientation is None:
            orientation = _orientation(im)
        return _finish(im, label, orientation, max_side=max_side, gray=gray)


def _raw_preview(
    photo: RawPhoto, label: str, max_side: int | None, max_pixels: int
) -> tuple[bytes, tuple[int, int]] | None:
    """The RAW file's embedded JPEG and its stored ``(width, height)``, if it serves.

    It serves when it parses, is at least ``max_side`` pixels long (at least as long as
    the sensor image for ``max_side=None``) and has the sensor image's aspect ratio
    (within 2 %: not a letterboxed or cropped preview).
    """
    jpeg = photo.preview_jpeg()
    if jpeg is None:
        return None
    try:
        with _opened(io.BytesIO(jpeg), label, max_pixels, "JPEG", _JPEG_FORMATS) as im:
            pw, ph = im.size
    except ImageLoadError:
        return None
    w, h = photo.sensor_size
    if max(pw, ph) < (max(w, h) if max_side is None else max_side):
        return None
    if abs(pw * h - ph * w) > 0.02 * max(pw * h, ph * w):
        return None
    return jpeg, (pw, ph)


def _decode_raw(
    data: bytes, label: str, *, max_side: int | None, max_pixels: int, gray: bool
) -> np.ndarray:
    """Camera RAW: the embedded preview when large enough, else (or when the preview's
    data turns out corrupt) a demosaic."""
    with open_raw(data, label, max_pixels) as photo:
        preview = _raw_preview(photo, label, max_side, max_pixels)
        if preview is not None:
            try:
                return _decode_pillow(
                    io.BytesIO(preview[0]),
                    label,
                    "JPEG",
                    max_side=max_side,
                    max_pixels=max_pixels,
                    gray=gray,
                    formats=_JPEG_FORMATS,
                    orientation=photo.orientation,
                )
            except ImageLoadError:
                pass  # a broken preview; the sensor data may well be intact
        w, h = photo.sensor_size
        half = max_side is not None and max((w + 1) // 2, (h + 1) // 2) >= max_side
        rgb = photo.demosaic(half=half)  # upright already
    return _finish(Image.fromarray(rgb), label, 1, max_side=max_side, gray=gray)


def _decode(
    source: ImageSource, *, max_side: int | None, max_pixels: int, gray: bool
) -> np.ndarray:
    _check_args(max_side, max_pixels)
    label = _label(source)
    with _source_stream(source, label) as stream:
        kind = _kind(stream)
        if not _is_raw(kind):
            return _decode_pillow(
                stream, label, kind, max_side=max_side, max_pixels=max_pixels, gray=gray
            )
        data = _read_all(stream, label)
    return _decode_raw(data, label, max_side=max_side, max_pixels=max_pixels, gray=gray)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def load_image(
    path_or_bytes: ImageSource, *, max_side: int | None = 1024, max_pixels: int = 100_000_000
) -> np.ndarray:
    """Load an image as upright 8-bit RGB, downsized to at most ``max_side`` pixels.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or binary file object
        A path (any Unicode name), the encoded file's bytes, or a binary stream.
    max_side : int or None, optional
        Longest side of the result in pixels; larger images are shrunk (aspect ratio kept),
        smaller ones are never enlarged. ``None`` keeps the full resolution.
    max_pixels : int, optional
        Refuse images whose header declares more than this many pixels (width x height),
        before decoding anything: a defence against decompression bombs.

    Returns
    -------
    image : (H, W, 3) uint8 ndarray
        RGB pixels, EXIF orientation applied, transparency composited on white.

    Raises
    ------
    ImageLoadError
        For every problem with the input (see the module docstring); ``str(err)`` is
        ``"<path>: <reason>"``.
    ValueError
        If ``max_side`` or ``max_pixels`` is not a positive integer.
    TypeError
        If ``path_or_bytes`` is of an unsupported type.

    Examples
    --------
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO()
    >>> Image.new("RGB", (4000, 3000), (255, 0, 0)).save(buf, "PNG")
    >>> load_image(buf.getvalue(), max_side=400).shape
    (300, 400, 3)
    """
    return _decode(path_or_bytes, max_side=max_side, max_pixels=max_pixels, gray=False)


def load_gray(
    path_or_bytes: ImageSource, *, max_side: int | None = 1024, max_pixels: int = 100_000_000
) -> np.ndarray:
    """Load an image as upright 8-bit luma; same arguments and errors as :func:`load_image`.

    Colour is reduced with ITU-R BT.601 luma weights, ``L = 0.299 R + 0.587 G + 0.114 B``
    (for colour JPEGs libjpeg returns the stored Y channel directly, which is the same
    quantity and skips the colour conversion).

    Returns
    -------
    image : (H, W) uint8 ndarray
    """
    return _decode(path_or_bytes, max_side=max_side, max_pixels=max_pixels, gray=True)


def image_size(path: ImageSource, *, max_pixels: int | None = None) -> tuple[int, int]:
    """Size ``(width, height)`` of an image as it will be displayed, from its header only.

    EXIF orientations 5-8 swap width and height, so the result equals
    ``load_image(path, max_side=None).shape[1::-1]``. No pixel data is decoded. For a
    camera RAW file that is the size of its embedded preview when the preview is as
    large as the sensor image (what ``load_image(path, max_side=None)`` then returns),
    else the size LibRaw demosaics to, turned by the RAW's flip flag; the whole file is
    read to parse it, nothing is decoded.

    Parameters
    ----------
    path : str, os.PathLike, bytes or binary file object
    max_pixels : int or None, optional
        If given, images declaring more pixels raise :class:`ImageLoadError` like
        :func:`load_image` does; by default any size is reported (up to Pillow's own hard
        limit, above which Pillow refuses to parse the header).

    Returns
    -------
    (width, height) : tuple of int

    Raises
    ------
    ImageLoadError
        If the file is missing, unreadable, not a supported image, or declares a zero size.
    """
    label = _label(path)
    limit = max_pixels if max_pixels is not None else 1 << 62
    with _source_stream(path, label) as stream:
        kind = _kind(stream)
        if not _is_raw(kind):
            with _opened(stream, label, limit, kind) as im:
                w, h = im.size
                orientation = _orientation(im, header_only=True)
            if orientation in (5, 6, 7, 8):
                w, h = h, w
            return int(w), int(h)
        data = _read_all(stream, label)
    with open_raw(data, label, limit) as photo:
        preview = _raw_preview(photo, label, None, limit)
        if preview is None:
            return photo.size
        w, h = preview[1]
        return (int(h), int(w)) if photo.orientation >= 5 else (int(w), int(h))
