"""Camera RAW files (CR2, CR3, NEF, ARW, RAF, ORF, RW2, DNG, PEF, SRW, ...) through rawpy.

`rawpy <https://pypi.org/project/rawpy/>`_ wraps LibRaw, which parses every common
camera's RAW format. :func:`open_raw` parses a file's header from its bytes in memory
(``rawpy.imread`` on a :class:`io.BytesIO`: no temporary file) and hands back a
:class:`RawPhoto`, from which the loader (:mod:`engine.io.imageio`) takes either

* the **embedded JPEG preview** (:meth:`RawPhoto.preview_jpeg`) that the camera rendered:
  the fast path, used when it is at least as large as the size asked for, or
* a **demosaic** of the sensor data (:meth:`RawPhoto.demosaic`): half size (each 2 x 2
  Bayer block becomes one pixel, no interpolation, fast) when that is still large enough,
  else LibRaw's full-size AHD demosaic; camera white balance, sRGB, 8 bits.

The orientation comes from the RAW's ``flip`` flag (LibRaw's reading of the camera's
EXIF orientation, :data:`RawPhoto.orientation` as an EXIF value), for both paths: the
demosaic is rotated by LibRaw, the preview by the loader (which ignores the EXIF block
LibRaw may write into the preview from the same flag, so it is not turned twice).

Limits: a file declaring more than ``max_pixels`` sensor or image pixels is refused from
its header, before anything is decoded (a decompression-bomb defence, as for every
other format); every rawpy / LibRaw failure becomes an :class:`ImageLoadError` with a
specific reason. LibRaw only parses data: nothing in a RAW file is executed.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from engine.io.errors import ImageLoadError, describe, quiet

__all__ = ["NOT_INSTALLED", "RawPhoto", "open_raw", "require_rawpy"]

#: Reason given for a RAW file when rawpy cannot be imported.
NOT_INSTALLED = "RAW support is not installed (the rawpy package reads camera RAW files)"

# LibRaw's flip flag -> EXIF orientation (inverse of dcraw's "50132467"[exif & 7] table).
_FLIP_TO_EXIF = {0: 1, 1: 2, 2: 4, 3: 3, 4: 5, 5: 8, 6: 6, 7: 7}

# LibRaw exception class name -> what it means for the person whose file it is.
_REASONS = {
    "LibRawFileUnsupportedError": "unsupported camera, or not a RAW file",
    "LibRawIOError": "truncated or corrupt RAW file",
    "LibRawDataError": "truncated or corrupt RAW data",
    "LibRawInputClosedError": "truncated or corrupt RAW file",
    "LibRawTooBigError": "RAW image too large to decode",
    "LibRawUnsufficientMemoryError": "not enough memory to decode the RAW file",
    "LibRawMemPoolOverflowError": "not enough memory to decode the RAW file",
}


def require_rawpy(label: str) -> ModuleType:
    """The :mod:`rawpy` module, or :class:`ImageLoadError` saying it is not installed.

    Parameters
    ----------
    label : str
        The file being loaded, for the error.

    Returns
    -------
    module
    """
    try:
        import rawpy
    except ImportError:
        raise ImageLoadError(label, NOT_INSTALLED) from None
    return rawpy


def _reason(exc: BaseException, doing: str) -> str:
    if isinstance(exc, MemoryError):
        return "not enough memory to decode the RAW file"
    args = getattr(exc, "args", ())
    if len(args) == 1 and isinstance(args[0], bytes):  # LibRaw's messages arrive as bytes
        detail = args[0].decode("utf-8", "replace").strip() or type(exc).__name__
    else:
        detail = describe(exc)
    known = _REASONS.get(type(exc).__name__)
    if known is not None:
        return f"{known} (LibRaw: {detail})"
    return f"cannot {doing} RAW file ({detail})"


class RawPhoto:
    """A RAW file whose header LibRaw has parsed; nothing decoded yet.

    Made by :func:`open_raw`; valid inside its ``with`` block.

    Attributes
    ----------
    sensor_size : (int, int)
        ``(width, height)`` of the image LibRaw outputs at full size, before rotation
        (non-square pixels already stretched, as LibRaw does).
    orientation : int
        EXIF orientation 1..8 from the RAW's flip flag.
    size : (int, int)
        ``(width, height)`` as displayed: ``sensor_size``, swapped for orientations 5-8.
    """

    def __init__(self, raw: Any, rawpy: ModuleType, label: str) -> None:
        self._raw = raw
        self._rawpy = rawpy
        self._label = label
        s = raw.sizes
        w, h = int(s.width), int(s.height)
        aspect = float(s.pixel_aspect or 1.0)
        if aspect < 0.995:  # LibRaw stretches non-square pixels (libraw_datastream / stretch)
            h = int(h / aspect + 0.5)
        elif aspect > 1.005:
            w = int(w * aspect + 0.5)
        self.sensor_size = (w, h)
        self.orientation = _FLIP_TO_EXIF.get(int(s.flip) & 7, 1)
        self.size = (h, w) if self.orientation >= 5 else (w, h)

    def preview_jpeg(self) -> bytes | None:
        """The largest embedded JPEG preview's bytes, or None (no preview, a bitmap one,
        or an unreadable one). Cheap: a copy of bytes stored in the file."""
        try:
            thumb = self._raw.extract_thumb()
        except Exception:  # no thumbnail, unsupported or corrupt: fall back to demosaic
            return None
        if thumb.format != self._rawpy.ThumbFormat.JPEG or not isinstance(thumb.data, bytes):
            return None
        return thumb.data

    def demosaic(self, *, half: bool) -> np.ndarray:
        """Decode the sensor data to upright 8-bit sRGB.

        Parameters
        ----------
        half : bool
            Half size: one pixel per 2 x 2 Bayer block (no interpolation; about 4x
            faster), else LibRaw's full-size AHD demosaic.

        Returns
        -------
        rgb : (H, W, 3) uint8 ndarray
            Camera white balance, sRGB, auto-brightened as LibRaw does by default, rotated
            by the flip flag.

        Raises
        ------
        ImageLoadError
            If the data is truncated, corrupt or too large for memory.
        """
        try:
            rgb = self._raw.postprocess(half_size=half, use_camera_wb=True, output_bps=8)
        except Exception as exc:  # LibRawError subclasses, MemoryError, ...
            raise ImageLoadError(self._label, _reason(exc, "decode")) from None
        rgb = np.asarray(rgb)
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 or 0 in rgb.shape:
            raise ImageLoadError(self._label, f"cannot decode RAW file (got {rgb.shape} pixels)")
        return rgb


@contextlib.contextmanager
def open_raw(data: bytes, label: str, max_pixels: int) -> Iterator[RawPhoto]:
    """Parse a RAW file's header from its bytes, checking its size before any decoding.

    Parameters
    ----------
    data : bytes
        The whole file.
    label : str
        The file's name, for errors.
    max_pixels : int
        Refuse files whose sensor (``raw_width x raw_height``) or output image declares
        more pixels: a decompression-bomb defence.

    Yields
    ------
    RawPhoto
        Closed (LibRaw's memory freed) when the block exits.

    Raises
    ------
    ImageLoadError
        If rawpy is not installed, LibRaw cannot parse the file, it declares a zero or
        too-large size.
    """
    rawpy = require_rawpy(label)
    try:
        with quiet():  # rawpy warns about forked workers; the warning is not the file's
            raw = rawpy.imread(io.BytesIO(data))
    except Exception as exc:
        raise ImageLoadError(label, _reason(exc, "read")) from None
    try:
        try:
            photo = RawPhoto(raw, rawpy, label)
            s = raw.sizes
            sensor = int(s.raw_width) * int(s.raw_height)
        except Exception as exc:
            raise ImageLoadError(label, _reason(exc, "read")) from None
        w, h = photo.sensor_size
        if w <= 0 or h <= 0:
            raise ImageLoadError(label, f"image has zero size ({w} x {h} pixels)")
        if max(sensor, w * h) > max_pixels:
            raise ImageLoadError(
                label,
                f"refused as a possible decompression bomb: {w} x {h} = {w * h} pixels "
                f"({sensor} sensor pixels) exceeds max_pixels={max_pixels}",
            )
        yield photo
    finally:
        with contextlib.suppress(Exception):
            raw.close()
