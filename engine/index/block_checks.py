"""The checks of the files of the search data that a one-shot reader maps
(:mod:`engine.index.mapped`): each member of a segment file checked once, whole (its
CRC-32, the zip's own), in a background thread or by the first reader that needs it --
or, for the arrays of the pyramids that carry block checksums (:func:`block_checks`),
block by block, the blocks a reader reads only (:meth:`FileChecks.require_spans`).
"""

from __future__ import annotations

import mmap
import struct
import threading
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.index.encode import ROW_KEYS
from engine.index.states import NPZ_ERRORS, damaged_file
from engine.index.store_errors import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

__all__ = [
    "AT_ONCE",
    "BLOCK_CHECKED",
    "CHECK_BLOCK",
    "WORD_CHECKED",
    "FileChecks",
    "Member",
    "block_checks",
    "group_of",
    "release",
]

_PAGE = mmap.PAGESIZE
_CHUNK = 1 << 24  # bytes checked (and pages handed back) at a time
#: Members checked when the files are mapped: read whole by every reader, and small.
AT_ONCE = ("ids", ROW_KEYS, "vocab.indptr", "vocab.ukeys", "bow.indptr", "wta", "rh", "he.indptr")
#: Bytes of the arrays of the pyramids per CRC-32 of their block checksums.
CHECK_BLOCK = 8192
#: The arrays whose blocks are checked apart (:func:`block_checks`).
BLOCK_CHECKED = ("vocab.values", "vocab.cols", "vocab.keys")
#: The descriptors' words and signatures (``(N, T)`` arrays, their bytes in C order),
#: whose blocks are checked apart too: a query reads those of its 300 best hits.
WORD_CHECKED = ("he.words", "he.sigs")


def group_of(key: str) -> str:
    """When member ``key`` is checked: ``"open"``, ``"bow"``, ``"vocab"``, ``"uniform"``,
    ``"words"`` (a member with block checksums: ``"blocks"``, set when they are found).
    The mapped reader does not read the uniform pyramids, and reads the descriptors'
    words (:attr:`~engine.index.encode.EncodedImages.words`) by their blocks only: the
    groups ``"uniform"`` and ``"words"`` are never checked there."""
    if key in AT_ONCE or key.startswith("check."):
        return "open"
    if key.startswith("uniform."):
        return "uniform"
    if key.startswith("he."):
        return "words"
    return "bow" if key.startswith("bow.") else "vocab"


def layout_crc(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """CRC-32 of what the header of an array says: its dtype, shape and (C) order."""
    return zlib.crc32(f"{np.dtype(dtype).str}|{tuple(int(n) for n in shape)}|C".encode())


def block_checks(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The block checksums of the arrays of :data:`BLOCK_CHECKED` (one-dimensional ones)
    and :data:`WORD_CHECKED` held in ``arrays``: ``check.<key>`` ``(1 + ceil(nbytes /
    CHECK_BLOCK),) uint32``, the CRC-32 of the array's dtype and shape, then of each
    :data:`CHECK_BLOCK` bytes of its data as ``np.save`` writes them."""
    out = {}
    for key in BLOCK_CHECKED + WORD_CHECKED:
        a = arrays.get(key)
        if a is None:
            continue
        a = np.asarray(a)
        if (a.ndim != 1 and key not in WORD_CHECKED) or a.dtype.hasobject:
            continue
        buf = memoryview(np.ascontiguousarray(a)).cast("B")
        crcs = [layout_crc(a.dtype, a.shape)]
        crcs += [zlib.crc32(buf[i : i + CHECK_BLOCK]) for i in range(0, len(buf), CHECK_BLOCK)]
        out[f"check.{key}"] = np.array(crcs, np.uint32)
    return out


def release(mm: mmap.mmap, start: int, end: int) -> None:
    """Hand back the whole pages of ``mm[start:end]`` (their bytes stay in the page
    cache; a later read maps them again)."""
    a = -(-start // _PAGE) * _PAGE
    b = (end // _PAGE) * _PAGE
    if b > a and hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_DONTNEED, a, b - a)


@dataclass
class Member:
    """One ``.npy`` member of a mapped file: where its bytes are and their CRC-32."""

    file: str
    key: str
    mm: mmap.mmap
    start: int  # first byte of the member (its .npy header)
    data: int  # first byte of its array
    end: int
    crc: int
    state: str = "waiting"  # "running", "done"
    error: BaseException | None = None
    group: str = ""
    #: With block checksums: ``(1 + n_blocks,) uint32`` (:func:`block_checks`) and
    #: which blocks are checked.
    blocks: np.ndarray | None = None
    checked: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.done = threading.Event()
        self.group = self.group or group_of(self.key)


class FileChecks:
    """The CRC-32 checks of the members of mapped files, each run once: in a background
    thread, or by the first caller that needs it (:meth:`require`).

    Parameters
    ----------
    states : Path
        The index's ``states`` folder (for the error messages).
    name : str
        The state the files are of.
    """

    def __init__(self, states: Path, name: str) -> None:
        self._states, self._name = states, name
        self._members: list[Member] = []
        self._lock = threading.Lock()
        self._closed = False

    def add(self, member: Member) -> None:
        self._members.append(member)

    def _claim(self, member: Member) -> bool:
        with self._lock:
            if member.state != "waiting":
                return False
            member.state = "running"
            return True

    def _run(self, member: Member) -> None:
        """Check ``member`` (claimed by this thread)."""
        try:
            crc, view = 0, memoryview(member.mm)
            try:
                for a in range(member.start, member.end, _CHUNK):
                    b = min(a + _CHUNK, member.end)
                    crc = zlib.crc32(view[a:b], crc)
                    release(member.mm, a, b)
            finally:
                view.release()
            if crc != member.crc:
                raise zipfile.BadZipFile(f"Bad CRC-32 for file '{member.key}.npy'")
        except (*NPZ_ERRORS, struct.error) as exc:
            member.error = damaged_file(self._states, self._name, member.file, exc)
        except BaseException as exc:  # (e.g. the file shrank under the map: SIGBUS is
            member.error = exc  # not catchable, an OSError is)
        finally:
            member.state = "done"
            member.done.set()

    def start(self, groups: Sequence[str]) -> None:
        """Check the members of ``groups`` in a background thread, in that order."""
        todo = [m for g in groups for m in self._members if m.group == g]

        def work() -> None:
            for m in todo:
                if self._closed:
                    return
                if self._claim(m):
                    self._run(m)

        threading.Thread(target=work, name="simile-check", daemon=True).start()

    def require(self, group: str) -> None:
        """Return once every member of ``group`` is checked (checking those no thread
        has started, here).

        Raises
        ------
        IndexCorruptError
            One is damaged.
        StoreError
            The store was closed before they were checked.
        """
        members = [m for m in self._members if m.group == group]
        for m in members:
            if m.state == "waiting" and self._closed:
                raise StoreError("the index store is closed")
            if self._claim(m):
                self._run(m)
        for m in members:
            m.done.wait()
            if m.error is not None:
                raise m.error

    def use_blocks(self, member: Member, blocks: np.ndarray, array: np.ndarray) -> None:
        """Check ``member`` (holding ``array``) by its block checksums ``blocks``
        (:func:`block_checks`, read from a member checked whole) from now on: the blocks
        a reader reads only.

        Raises
        ------
        IndexCorruptError
            The checksums do not fit the array's header (dtype, shape, size).
        """
        n_blocks = -(-(member.end - member.data) // CHECK_BLOCK)
        if blocks.ndim != 1 or blocks.shape[0] != n_blocks + 1:
            self._damaged(member, f"the block checksums of {member.key!r} do not fit it")
        flat = array.ndim == 1 or member.key in WORD_CHECKED
        if int(blocks[0]) != layout_crc(array.dtype, array.shape) or not flat:
            self._damaged(member, f"the header of {member.key!r} is not the one written")
        member.blocks = np.asarray(blocks, np.uint32)
        member.checked = np.zeros(n_blocks, bool)
        member.group = "blocks"

    def _damaged(self, member: Member, why: str) -> None:
        exc = zipfile.BadZipFile(why)
        raise damaged_file(self._states, self._name, member.file, exc) from exc

    def require_spans(self, member: Member, starts: np.ndarray, ends: np.ndarray) -> None:
        """Return once the blocks of ``member`` that hold its array's bytes
        ``[starts[i], ends[i])`` (offsets in the array's data) are checked (each block
        once); a member without block checksums is checked whole (:meth:`require`).

        Raises
        ------
        IndexCorruptError
            A block read is damaged.
        StoreError
            The store was closed.
        """
        if member.blocks is None:
            self.require(member.group)
            return
        if self._closed:
            raise StoreError("the index store is closed")
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        keep = ends > starts
        b0 = starts[keep] // CHECK_BLOCK
        b1 = (ends[keep] - 1) // CHECK_BLOCK
        counts = b1 - b0 + 1
        if counts.size == 0:
            return
        first = np.cumsum(counts) - counts
        idx = np.repeat(b0 - first, counts) + np.arange(int(counts.sum()))
        todo = np.unique(idx)
        todo = todo[~member.checked[todo]]
        if todo.size == 0:
            return
        view = memoryview(member.mm)
        try:
            for b in todo.tolist():
                a = member.data + b * CHECK_BLOCK
                crc = zlib.crc32(view[a : min(a + CHECK_BLOCK, member.end)])
                if crc != int(member.blocks[b + 1]):
                    self._damaged(member, f"Bad CRC-32 for block {b} of '{member.key}.npy'")
        finally:
            view.release()
        member.checked[todo] = True

    def require_members(self, members: Sequence[Member]) -> None:
        """Return once ``members`` are checked whole (here, unless a thread is at it).

        Raises
        ------
        IndexCorruptError
            One is damaged.
        """
        for m in members:
            if self._claim(m):
                self._run(m)
            m.done.wait()
            if m.error is not None:
                raise m.error

    def require_blocks(self) -> None:
        """Check every block of every member checked by blocks (a reader about to read
        all of them)."""
        for m in self._members:
            if m.blocks is not None:
                n = m.checked.shape[0]
                self.require_spans(m, np.array([0]), np.array([n * CHECK_BLOCK]))

    def close(self) -> None:
        """No check starts after this (those needed later raise :class:`StoreError`)."""
        self._closed = True
