"""How a bad image file fails: :class:`ImageLoadError`, and no warning escapes.

Shared by the loader (:mod:`engine.io.imageio`) and its optional decoders
(:mod:`engine.io.plugins`, :mod:`engine.io.raw`), so that every problem with an input file
-- whatever library parses it -- reaches the caller as the same exception type with a
plain ``reason``; one bad file never stops a batch. :func:`quiet` silences the warnings
that parsers emit about a file (Pillow's decompression-bomb warning, "possibly corrupt
EXIF", rawpy's fork notice) under one process-wide lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["WARNINGS_LOCK", "ImageLoadError", "describe", "quiet"]

#: :func:`warnings.catch_warnings` swaps process-wide state and is not thread-safe: every
#: use of it by the loader holds this lock, so that our own threads never interleave. Only
#: cheap header parses run under it; decoding runs in parallel.
WARNINGS_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Ignore every warning inside the block, holding :data:`WARNINGS_LOCK`."""
    with WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


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


def describe(exc: BaseException) -> str:
    """An exception's message, or its type name when the message is empty.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    str
    """
    msg = str(exc).strip()
    return msg if msg else type(exc).__name__
