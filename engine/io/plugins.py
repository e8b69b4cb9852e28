"""Optional Pillow plug-ins for phone and modern formats: HEIC / HEIF, AVIF, JPEG XL.

The loader (:mod:`engine.io.imageio`) reads these formats through Pillow like the classic
ones, once the right plug-in is registered; :func:`pillow_formats` does that lazily (at
the first such file, so that importing the engine registers nothing) and names the
Pillow formats that may parse a file of a given kind:

* **HEIC / HEIF** (iPhones and most Android phones): `pillow-heif
  <https://pypi.org/project/pillow-heif/>`_ (libheif + libde265). libheif applies the
  file's rotation and mirror boxes (``irot`` / ``imir``) while decoding, and pillow-heif
  then resets the EXIF orientation to 1, so the picture is turned upright exactly once.
  10- and 12-bit images come out as 8-bit RGB (pillow-heif's ``convert_hdr_to_8bit``).
* **AVIF**: Pillow's own plug-in (built with libavif since Pillow 11.2; pillow-heif 1.x
  no longer reads AVIF); the ``pillow-avif-plugin`` package where Pillow lacks it. The
  rotation boxes become an EXIF orientation, which the loader applies.
* **JPEG XL**: only if `pillow-jxl-plugin <https://pypi.org/project/pillow-jxl-plugin/>`_
  is installed (an optional extra, not a dependency).

A file of one of these kinds whose plug-in is missing raises :class:`ImageLoadError`
with the reason "HEIC support is not installed (...)" (or AVIF / JPEG XL), so the
indexer lists it instead of passing over it.
"""

from __future__ import annotations

import threading

from PIL import Image, features

from engine.io.errors import ImageLoadError

__all__ = ["NOT_INSTALLED", "PLUGIN_KINDS", "pillow_formats"]

#: Reason given for a file of each kind when no plug-in can read it.
NOT_INSTALLED = {
    "HEIF": "HEIC support is not installed (the pillow-heif package reads HEIC / HEIF photos)",
    "AVIF": "AVIF support is not installed (this Pillow was built without libavif; "
    "the pillow-avif-plugin package adds it)",
    "JPEG XL": "JPEG XL support is not installed (the pillow-jxl-plugin package reads it)",
}

#: Kinds of :func:`engine.io.formats.sniff_format` read through these plug-ins.
PLUGIN_KINDS = frozenset(NOT_INSTALLED)

_REGISTER_LOCK = threading.Lock()


def _heif() -> tuple[str, ...]:
    try:
        import pillow_heif
    except ImportError:
        return ()
    with _REGISTER_LOCK:
        if "HEIF" not in Image.OPEN:
            pillow_heif.register_heif_opener()
    return ("HEIF",) if "HEIF" in Image.OPEN else ()


def _avif() -> tuple[str, ...]:
    try:
        native = features.check_module("avif")
    except ValueError:  # Pillow < 11.2 has no AVIF module at all
        native = False
    if native and "AVIF" in Image.OPEN:
        return ("AVIF",)
    try:
        import pillow_avif  # noqa: F401 - registers "AVIF" with Pillow on import
    except ImportError:
        return ()
    return ("AVIF",) if "AVIF" in Image.OPEN else ()


def _jxl() -> tuple[str, ...]:
    try:
        import pillow_jxl  # noqa: F401 - registers "JXL" with Pillow on import
    except ImportError:
        return ()
    return ("JXL",) if "JXL" in Image.OPEN else ()


_FINDERS = {"HEIF": _heif, "AVIF": _avif, "JPEG XL": _jxl}


def pillow_formats(kind: str, label: str) -> tuple[str, ...]:
    """Pillow format names that may open a file of ``kind``, its plug-in registered.

    Parameters
    ----------
    kind : {"HEIF", "AVIF", "JPEG XL"}
        What :func:`engine.io.formats.sniff_format` named the file.
    label : str
        The file, for the error.

    Returns
    -------
    tuple of str
        Non-empty, for :func:`PIL.Image.open`'s ``formats``.

    Raises
    ------
    ImageLoadError
        ``"... support is not installed (...)"`` when no plug-in for ``kind`` imports.
    """
    found = _FINDERS[kind]()
    if not found:
        raise ImageLoadError(label, NOT_INSTALLED[kind])
    return found
