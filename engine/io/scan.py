"""Fast recursive folder scan for incremental indexing, and file content hashing.

:func:`scan_folder` walks a folder with :func:`os.scandir` (one ``stat`` per entry,
``d_type`` for the directory test), recognises images by their signature
(:func:`engine.io.imageio.is_image_file`) or their suffix
(:data:`engine.io.formats.IMAGE_SUFFIXES`) -- only for files not already known with the
same size and mtime, so a re-scan of an unchanged folder reads no file content -- and
compares ``(size, mtime_ns)`` with what the index knows.

Every photo format the loader knows is proposed to the indexer, HEIC / HEIF, AVIF, JPEG XL
and camera RAW (CR2, CR3, NEF, ARW, RAF, ORF, RW2, DNG, PEF, SRW, ...) included, whether or
not its optional decoder is installed: a file the indexer then cannot read is listed as
failed with the reason (e.g. "HEIC support is not installed (...)"), never passed over.

Symlinks: file links are followed; directory links are followed too, with cycles broken
by remembering every visited directory's ``(st_dev, st_ino)``. Every path is reported as the
person sees it, an absolute path inside the folder: a symlinked photo is the link, never
its target (so nothing acting on a path can reach outside the folder). A file reachable
through several names is listed once, under a real (non-link) name when it has one.
Unreadable directories are reported in :attr:`ScanResult.errors`, never fatal; every other
entry that is passed over (a dangling or looping link, a FIFO, socket or device, a link to a
folder already scanned) is listed in :attr:`ScanResult.skipped` with its reason.

Any name the operating system hands us is kept exactly: names that are not valid UTF-8
arrive as ``str`` with lone surrogates (``os.fsdecode``) and stay so.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as stat_mod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["FileStat", "ScanResult", "content_hash", "scan_folder"]

_HASH_BLOCK = 1 << 20


class FileStat(NamedTuple):
    """An image file found by the scan: resolved absolute ``path``, ``size``, ``mtime_ns``."""

    path: str
    size: int
    mtime_ns: int


@dataclass
class ScanResult:
    """Outcome of :func:`scan_folder`.

    Attributes
    ----------
    new : list of FileStat
        Images not in ``known``.
    changed : list of FileStat
        Known images whose size or mtime differs.
    unchanged : list of str
        Known images with identical size and mtime (their content was not read).
    removed : list of str
        Paths in ``known`` no longer found (deleted, moved, no longer an image). Known
        paths under a folder listed in ``errors`` are NOT reported as removed.
    errors : list of (str, str)
        ``(path, reason)`` of directories or files that could not be read.
    skipped : list of (str, str)
        ``(path, reason)`` of entries passed over on purpose: dangling or looping links,
        special files (FIFOs, sockets, devices), links to a folder already scanned.
    n_skipped : int
        Regular files that are not images.
    """

    new: list[FileStat] = field(default_factory=list)
    changed: list[FileStat] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    n_skipped: int = 0

    @property
    def n_images(self) -> int:
        """Number of images now present (new + changed + unchanged)."""
        return len(self.new) + len(self.changed) + len(self.unchanged)


def _default_is_image(path: str) -> bool:
    """An image suffix OR image magic bytes: a broken ``x.jpg`` or an ``x.heic`` without
    its decoder is reported as failed by the indexer rather than silently skipped, and a
    JPEG (HEIC, RAW...) without suffix is found."""
    from engine.io.formats import IMAGE_SUFFIXES, is_image_file

    return os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES or is_image_file(path)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _special_kind(mode: int) -> str:
    if stat_mod.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat_mod.S_ISSOCK(mode):
        return "a socket"
    if stat_mod.S_ISCHR(mode) or stat_mod.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _walk(
    root: str,
    st_root: os.stat_result,
    excluded: set[tuple[int, int]],
    index_dirname: str,
    result: ScanResult,
) -> dict[str, tuple[str, bool, int, int]]:
    """Walk ``root`` depth-first: every regular file once, as
    ``real path -> (path as seen, is a link, size, mtime_ns)``; unreadable folders go to
    ``result.errors``, links and special files passed over to ``result.skipped``."""
    seen_dirs = {(st_root.st_dev, st_root.st_ino)}
    # real path -> (path as seen, is a link): one entry per file, a real name preferred
    files: dict[str, tuple[str, bool, int, int]] = {}
    stack = [root]
    while stack:
        dirpath = stack.pop()
        try:
            it = os.scandir(dirpath)
        except OSError as exc:
            result.errors.append((dirpath, f"cannot read folder: {_reason(exc)}"))
            continue
        with it:
            while True:
                try:
                    entry = next(it)
                except StopIteration:
                    break
                except OSError as exc:
                    result.errors.append((dirpath, f"cannot list folder: {_reason(exc)}"))
                    break
                name = entry.name
                if name.startswith(".") or name == index_dirname:
                    continue
                try:
                    is_link = entry.is_symlink()
                except OSError as exc:
                    result.errors.append((entry.path, f"cannot stat: {_reason(exc)}"))
                    continue
                try:
                    st = entry.stat()  # follows symlinks
                except OSError as exc:
                    if is_link:
                        loop = getattr(exc, "errno", None) == errno.ELOOP
                        why = "link loop" if loop else "dangling link (its target is missing)"
                        result.skipped.append((entry.path, why))
                    else:  # vanished mid-scan, or not stat-able
                        result.errors.append((entry.path, f"cannot stat: {_reason(exc)}"))
                    continue
                if stat_mod.S_ISDIR(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if key in excluded:
                        continue  # the index folder
                    if key in seen_dirs:
                        if is_link:
                            result.skipped.append(
                                (entry.path, "link to a folder already scanned (loop)")
                            )
                        continue
                    seen_dirs.add(key)
                    stack.append(entry.path)
                    continue
                if not stat_mod.S_ISREG(st.st_mode):
                    kind = _special_kind(st.st_mode)
                    result.skipped.append((entry.path, f"not a regular file: {kind}"))
                    continue
                real = os.path.realpath(entry.path) if is_link else entry.path
                prev_seen = files.get(real)
                if prev_seen is not None and (is_link or not prev_seen[1]):
                    # already listed under a real name, or under another link
                    result.skipped.append((entry.path, f"another name of {prev_seen[0]}"))
                    continue
                if prev_seen is not None:  # a real name replaces the link listed before
                    result.skipped.append((prev_seen[0], f"another name of {entry.path}"))
                files[real] = (entry.path, is_link, st.st_size, st.st_mtime_ns)

    return files


def scan_folder(
    folder: str | os.PathLike,
    known: Mapping[str, tuple[int, int]] | None = None,
    *,
    exclude: Iterable[str | os.PathLike] = (),
    is_image: Callable[[str], bool] | None = None,
    index_dirname: str = ".simile",
) -> ScanResult:
    """Find the images under ``folder`` and classify them against ``known``.

    Parameters
    ----------
    folder : path-like
        Root folder, scanned recursively.
    known : mapping of str to (int, int), optional
        ``path -> (size, mtime_ns)`` of files already in the index (paths as produced
        by a previous scan: absolute and resolved).
    exclude : iterable of path-like
        Directories never entered (e.g. an index directory kept inside ``folder``
        under another name).
    is_image : callable, optional
        ``is_image(path) -> bool``; default: the name has an image suffix
        (:data:`engine.io.formats.IMAGE_SUFFIXES`: JPEG, PNG, GIF, BMP, TIFF, WebP,
        HEIC / HEIF, AVIF, JPEG XL, camera RAW) or the content starts like one
        (:func:`engine.io.imageio.is_image_file`).
    index_dirname : str
        Name of index directories to skip at any depth (hidden names are skipped anyway).

    Returns
    -------
    ScanResult

    Raises
    ------
    NotADirectoryError, FileNotFoundError, PermissionError
        Only when ``folder`` itself is missing, not a directory or unreadable.

    Notes
    -----
    Hidden entries (name starting with ``"."``, e.g. ``.git``, ``.simile``, macOS
    ``._*`` resource forks) are skipped. A known file whose stat changed is checked
    again by content, and reported as removed if it is no longer an image.
    """
    known = known or {}
    is_image = is_image or _default_is_image
    root = os.path.realpath(os.fspath(folder))
    st_root = os.stat(root)  # raises FileNotFoundError / PermissionError for the root
    if not stat_mod.S_ISDIR(st_root.st_mode):
        raise NotADirectoryError(f"not a folder: {root}")
    os.listdir(root)  # an unreadable root is fatal (PermissionError), deeper ones are not

    excluded: set[tuple[int, int]] = set()
    for ex in exclude:
        try:
            st = os.stat(ex)
        except OSError:
            continue
        excluded.add((st.st_dev, st.st_ino))

    result = ScanResult()
    files = _walk(root, st_root, excluded, index_dirname, result)

    seen_files: set[str] = set()
    not_images: set[str] = set()
    for path, _is_link, size, mtime_ns in files.values():
        seen_files.add(path)
        prev = known.get(path)
        if prev is not None and prev[0] == size and prev[1] == mtime_ns:
            result.unchanged.append(path)
            continue
        if not is_image(path):
            result.n_skipped += 1
            if prev is not None:
                not_images.add(path)
            continue
        bucket = result.new if prev is None else result.changed
        bucket.append(FileStat(path, size, mtime_ns))
    # A known file under a folder we could not read is not "removed": keep it until the
    # folder is readable again (a permission glitch must not wipe part of the index).
    blind = tuple(d.rstrip(os.sep) + os.sep for d, _ in result.errors)
    result.removed = [
        p
        for p in known
        if (p not in seen_files and not (blind and p.startswith(blind))) or p in not_images
    ]
    for lst in (result.new, result.changed):
        lst.sort()
    result.unchanged.sort()
    result.removed.sort()
    result.skipped.sort()
    return result


def content_hash(path: str | os.PathLike) -> str:
    """BLAKE2b-128 hex digest of the whole file content.

    Hashing the full file rather than a sample (size + head + tail) keeps change and
    duplicate detection exact — an in-place edit of the middle of an uncompressed
    image keeps its size, head and tail. It is only computed for new or changed files,
    which are decoded in full anyway, so it costs a page-cache read at ~1 GB/s: about
    1 % of decoding plus SIFT extraction.
    """
    h = hashlib.blake2b(digest_size=16)
    with open(os.fspath(path), "rb") as fh:
        while True:
            block = fh.read(_HASH_BLOCK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()
