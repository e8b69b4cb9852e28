"""The one image loader used everywhere in Simile.

Every image the engine, the command line or the GUI reads goes through
:func:`load_image` / :func:`load_gray`, so every caller gets the same pixels:

* formats: JPEG (and camera MPO), PNG, GIF (first frame), BMP, TIFF (first page), WebP;
* EXIF orientation applied (tag 0x0112, the same mapping as :func:`PIL.ImageOps.exif_transpose`);
* every pixel mode converted to 8-bit RGB (or luma): 16-bit and 32-bit grey, grey + alpha,
  RGBA, palette (with a transparent index), CMYK (Adobe-inverted CMYK JPEGs included), 1-bit,
  YCbCr / LAB / HSV.  Transparent pixels are composited on white;
* large photos downsized to ``max_side`` pixels on the longest side, cheaply: JPEGs are
  decoded at 1/2, 1/4 or 1/8 scale by libjpeg (:meth:`PIL.Image.Image.draft`) and then
  resampled to the exact size with Pillow's antialiasing bicubic filter (its support
  widened by the reduction factor, so no aliasing; about 1.8x faster than Lanczos here);
* decompression bombs refused from the header, before any pixel is decoded.

Failures
--------
Every problem with the *input* -- missing file, a directory, no permission, an empty file,
something that is not an image, an unsupported format, a truncated or corrupt file, a
zero-size image, too many pixels, not enough memory -- raises :class:`ImageLoadError`, whose
``path`` names the file and whose ``reason`` says plainly what is wrong. No other exception
type escapes for a bad file, and no Pillow warning escapes either. Bad *arguments* (a
negative ``max_side``, a source of the wrong type) raise ``ValueError`` / ``TypeError``.

Pillow's own global limit (``2 * PIL.Image.MAX_IMAGE_PIXELS``, about 179 megapixels by
default) still applies on top of ``max_pixels``; an image above it is reported as a
decompression bomb too.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
from PIL import Image, UnidentifiedImageError

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

#: File-name suffixes (lower case, with the dot) of the formats :func:`load_image` reads.
IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".dib", ".tif", ".tiff", ".webp"}
)

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
_FORMAT_NAMES = "JPEG, PNG, GIF, BMP, TIFF, WebP"

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

# Image.open consults process-wide warning filters for its decompression-bomb warning; the
# lock keeps our own threads from interleaving catch_warnings() (which is not thread-safe).
# Only the cheap header parse is serialised; decoding runs in parallel.
_OPEN_LOCK = threading.Lock()


class ImageLoadError(Exception):
    """An image could not be loaded.

    Parameters
    ----------
    path : str
        The file (or ``"<bytes>"`` / the stream's name) that failed.
    reason : str
        What is wrong, in plain words, e.g. ``"file not found"`` or
        ``"truncated or corrupt image data (image file is truncated)"``.

    Notes
    -----
    ``str(error)`` is ``f"{path}: {reason}"``, ready for a one-line message.
    """

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        self.path = os.fspath(path) if not isinstance(path, str) else path
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # keeps the error picklable across processes
        return (type(self), (self.path, self.reason))


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
            raise ImageLoadError(label, f"cannot open file ({_describe(exc)})") from None
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
            raise ImageLoadError(label, f"cannot read stream ({_describe(exc)})") from None
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"source stream must be opened in binary mode, got {type(data)}")
        if not data:
            raise ImageLoadError(label, "empty data (0 bytes)")
        return io.BytesIO(bytes(data))
    raise TypeError(
        f"path_or_bytes must be a path, bytes or a binary file object, got {type(source).__name__}"
    )


def _describe(exc: BaseException) -> str:
    msg = str(exc).strip()
    return msg if msg else type(exc).__name__


@contextlib.contextmanager
def _opened(source: ImageSource, label: str, max_pixels: int) -> Iterator[Image.Image]:
    """Parse the header only (lazy :func:`PIL.Image.open`), every failure translated.

    The declared size is checked against ``max_pixels`` before anything else can decode
    pixels. Closes the image and the stream on exit.
    """
    stream = _read_source(source, label)
    try:
        try:
            with _OPEN_LOCK, warnings.catch_warnings():
                # We enforce our own pixel limit right after this; Pillow's soft warning
                # would otherwise escape for images between MAX_IMAGE_PIXELS and max_pixels.
                warnings.simplefilter("ignore")
                im = Image.open(stream, formats=_FORMATS)
        except Image.DecompressionBombError as exc:
            raise ImageLoadError(
                label, f"refused as a possible decompression bomb ({exc})"
            ) from None
        except UnidentifiedImageError:
            stream.seek(0)
            kind = _magic_kind(stream.read(32))
            reason = (
                f"corrupt {kind} header (it starts like a {kind} file but cannot be parsed)"
                if kind
                else f"not an image, or not a supported format ({_FORMAT_NAMES})"
            )
            raise ImageLoadError(label, reason) from None
        except MemoryError:
            raise ImageLoadError(label, "not enough memory to read the image header") from None
        except Exception as exc:  # corrupt headers raise OSError, SyntaxError, struct.error...
            raise ImageLoadError(label, f"corrupt image header ({_describe(exc)})") from None
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
    finally:
        stream.close()


def _orientation(im: Image.Image, *, header_only: bool = False) -> int:
    """EXIF orientation 1..8 (1 when absent or unreadable; corrupt EXIF is ignored).

    With ``header_only``, never trigger decoding: Pillow's PNG reader would load the whole
    image to look for an ``eXIf`` chunk after the pixel data.
    """
    if header_only and im.format == "PNG" and "exif" not in im.info:
        return 1
    try:
        with _OPEN_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Possibly corrupt EXIF data" and the like
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


def _decode(
    source: ImageSource, *, max_side: int | None, max_pixels: int, gray: bool
) -> np.ndarray:
    _check_args(max_side, max_pixels)
    label = _label(source)
    with _opened(source, label, max_pixels) as im:
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
                label, f"truncated or corrupt image data ({_describe(exc)})"
            ) from None
        orientation = _orientation(im)
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
            raise ImageLoadError(label, f"cannot convert image ({_describe(exc)})") from None
    if gray:
        return arr.reshape(arr.shape[0], arr.shape[1])
    return arr.reshape(arr.shape[0], arr.shape[1], 3)


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


def _magic_kind(head: bytes) -> str | None:
    """Format named by a file's first bytes (JPEG, PNG, GIF, BMP, TIFF, WebP) or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head.startswith(b"BM") and len(head) >= 26:
        return "BMP"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):  # TIFF / BigTIFF
        return "TIFF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return None


def sniff_format(head: bytes) -> str | None:
    """Format a file's first 32 bytes name (``"JPEG"``, ``"PNG"``, ``"GIF"``, ``"BMP"``,
    ``"TIFF"``, ``"WebP"``), or ``None`` when they start like no supported image.

    Parameters
    ----------
    head : bytes
        The first bytes of the file (32 are enough).

    Returns
    -------
    str or None
    """
    return _magic_kind(bytes(head[:32]))


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file that starts like a supported image (by content, not name).

    Checks the magic bytes of JPEG, PNG, GIF, BMP, TIFF and WebP. HEIC, PDF, text, missing
    files, directories and unreadable files give ``False``; it never raises for a bad path.
    A ``True`` answer does not guarantee that the rest of the file decodes.

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
    return _magic_kind(head) is not None


def image_size(path: ImageSource, *, max_pixels: int | None = None) -> tuple[int, int]:
    """Size ``(width, height)`` of an image as it will be displayed, from its header only.

    EXIF orientations 5-8 swap width and height, so the result equals
    ``load_image(path, max_side=None).shape[1::-1]``. No pixel data is decoded.

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
    with _opened(path, label, max_pixels if max_pixels is not None else 1 << 62) as im:
        w, h = im.size
        orientation = _orientation(im, header_only=True)
    if orientation in (5, 6, 7, 8):
        w, h = h, w
    return int(w), int(h)
