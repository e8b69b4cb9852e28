"""The search data of a one-shot reader: every segment memory-mapped, nothing concatenated.

A reader that answers one query (``simile query``) and exits need not read the search
data into memory of its own: :func:`map_segments` maps every file of every segment of
the version it opened (:mod:`engine.index.segments`), and :meth:`MappedSegments.data`
gives an :class:`SegmentedImages` that stands for the data
(:class:`~engine.index.encode.EncodedImages`) a reader that reads them would hold -- the
live rows of the segments in ascending id order -- without concatenating their big
arrays. A query then touches only what it reads:

- the hash codes of every row (``wta``, ``rh``: a few hundred bytes a photo, copied into
  the one array the candidate search scans);
- the bags of words of every row, for the tf-idf cosine of the candidate search: a
  sparse matrix-vector product over each segment in turn (:class:`SegmentedRows`),
  merged into one score per live row;
- the pyramids of the candidates only, gathered from their segments
  (:class:`~engine.index.segmented.SegmentedIndex`). The uniform pyramids are not
  stored: the ``uniform`` method's candidates' are made from their stored features
  (:mod:`engine.index.uniform_rows`; those of segments written before are not read);
- the words and Hamming signatures of the stored descriptors of the ``hybrid`` method's
  300 best hits (:class:`~engine.index.mapped_words.SegmentedWords`), when every segment
  holds them with block checksums (else their descriptors are read and projected).

Every score is the one the concatenated data gives, to the last bit: a row's score is
computed from its own entries alone, by the same operations in the same order.

Damage is found before any byte of it is used. The small members (ids, row keys, row
pointers, hash codes, block checksums, the words' offsets) are checked at once, whole
(the zip's own CRC-32); the bags of words, which every query reads whole, in a
background thread started when the files are mapped (a query waits for, or helps with,
those it is about to read, :meth:`FileChecks.require`). The vocabulary pyramids, two
thirds of the bytes of which a query reads the rows of its few candidates only, are
checked block by block: a segment stores the CRC-32 of every :data:`CHECK_BLOCK` bytes
of their arrays (``check.<array>``, :func:`block_checks`, with one more of their dtype,
shape and order), and a query checks the blocks that hold the rows it is about to read,
each once (:meth:`FileChecks.require_spans`); so are the descriptors' words and
signatures. What a query never reads is not checked: the rest of the pyramids, and the
padding of the arrays' headers; ``simile index --repair`` checks everything. A segment
written before block checksums has its pyramids checked whole, in the background, as the
bags of words. A damaged file raises the one-line
:class:`~engine.index.store_errors.IndexCorruptError` of a read. Pages read only to be
checked, or once per query (the bags of words), are handed back after use
(``madvise(MADV_DONTNEED)``: they stay in the page cache), so the process's memory is
the arrays it keeps, not the files it read.
"""

from __future__ import annotations

import io
import mmap
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from engine.index.block_checks import (
    BLOCK_CHECKED,
    CHECK_BLOCK,
    WORD_CHECKED,
    FileChecks,
    Member,
    block_checks,
    release,
)
from engine.index.encode import ROW_KEYS, EncodedImages, pyramid_from_state
from engine.index.keys import DATA_STATE
from engine.index.mapped_words import SegmentedWords
from engine.index.segmented import SegmentedIndex
from engine.index.states import NPZ_ERRORS, damaged_file, live_masks, segment_files

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    import scipy.sparse as sp

    from engine.index.manifest import Snapshot

__all__ = [
    "BLOCK_CHECKED",
    "CHECK_BLOCK",
    "FileChecks",
    "MappedSegments",
    "SegmentedImages",
    "SegmentedRows",
    "block_checks",
    "map_segments",
]

_MATVEC_ROWS = 8192  # rows of a segment's bags multiplied (and handed back) at a time
# dtypes of the compact vocabulary pyramids (engine.index.encode.pyramid_state) kept as
# stored rather than converted whole: by the last part of the array's name
_GATHERED = {"cols": (np.dtype(np.uint16),), "values": (np.dtype(np.float16),)}


def _map_file(
    states: Path, fh: IO[bytes], file: str, checks: FileChecks
) -> tuple[dict[str, np.ndarray], dict[str, Member]] | None:
    """The arrays of one ``.npz`` file as read-only views of a map of it, and its
    members (added to ``checks``); None when a member is compressed (the file is read
    instead). Only the zip directory and the array headers are read here.

    Raises
    ------
    IndexCorruptError
        The zip directory, a member's header or an array header is damaged, or an array
        does not fill its member (a truncated file).
    """
    arrays: dict[str, np.ndarray] = {}
    members: dict[str, Member] = {}
    try:
        fh.seek(0)
        with zipfile.ZipFile(fh) as z:
            infos = z.infolist()
        if any(i.compress_type != zipfile.ZIP_STORED for i in infos):
            return None
        size = fh.seek(0, io.SEEK_END)
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        for info in infos:
            if not info.filename.endswith(".npy"):
                raise ValueError(f"{info.filename!r} is not an array")
            key = info.filename[: -len(".npy")]
            local = mm[info.header_offset : info.header_offset + 30]
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile(f"bad local header of {info.filename!r}")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_len + extra_len
            end = start + info.compress_size
            if end > size:
                raise EOFError(f"{info.filename!r} is truncated")
            head = io.BytesIO(mm[start : min(end, start + (1 << 16))])
            version = np.lib.format.read_magic(head)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
            if dtype.hasobject:
                raise ValueError(f"array {key!r} holds objects")
            data = start + head.tell()
            count = int(np.prod(shape, dtype=np.int64))
            if data + count * dtype.itemsize != end:
                raise ValueError(f"array {key!r} does not fill its member")
            if key in arrays:
                raise ValueError(f"array {key!r} is stored twice")
            arr = np.frombuffer(mm, dtype, count, data) if count else np.zeros(0, dtype)
            arrays[key] = arr.reshape(shape, order="F" if fortran else "C")
            members[key] = Member(file, key, mm, start, data, end, info.CRC)
            checks.add(members[key])
    except (*NPZ_ERRORS, struct.error) as exc:
        raise damaged_file(states, DATA_STATE, file, exc) from exc
    return arrays, members


def _runs(glob: np.ndarray, pos: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first row, first position, length)`` of the runs where both ascending
    ``glob`` and ``pos`` step by one."""
    if glob.size == 0:
        return []
    breaks = np.flatnonzero((np.diff(glob) != 1) | (np.diff(pos) != 1)) + 1
    starts = np.r_[0, breaks]
    lengths = np.diff(np.r_[starts, glob.size])
    return list(zip(glob[starts].tolist(), pos[starts].tolist(), lengths.tolist(), strict=True))


def _own(a: np.ndarray, dtype: Any) -> np.ndarray:
    """``a`` as ``dtype`` in memory of its own (a small mapped array, read whole)."""
    return np.array(a, dtype, copy=True, order="C")


class SegmentedRows:
    """The bags of words of the live rows of several segments, as one
    ``(n, n_words)`` CSR matrix that is never built: a matrix-vector product runs over
    each segment's rows in turn, a row gather copies those rows only. Stands for the
    ``scipy.sparse.csr_matrix`` a reader that reads the data holds (same values, same
    products to the last bit); any other use gets that matrix, made on first use
    (:meth:`whole`).

    Parameters
    ----------
    parts : sequence of (indptr, indices, data)
        Each segment's CSR arrays (``(m_s + 1,)``, ``(nnz_s,)``, ``(nnz_s,)`` float32),
        with the spans of their maps to hand back after a product (or None).
    n_words : int
    seg, pos : (n,) int
        Segment and row in it of every row.
    ready : callable
        Called before the segments' entries are read.
    """

    ndim = 2
    format = "csr"

    def __init__(
        self,
        parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, Sequence[Member]]],
        n_words: int,
        seg: np.ndarray,
        pos: np.ndarray,
        ready: Any,
    ) -> None:
        self.parts = list(parts)
        self.n_words = int(n_words)
        self.seg, self.pos = seg, pos
        self._ready = ready
        self._whole: sp.csr_matrix | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.seg.shape[0]), self.n_words)

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0][2].dtype if self.parts else np.dtype(np.float32)

    @property
    def nnz(self) -> int:
        return int(
            sum(
                (ip[self.pos[self.seg == k] + 1] - ip[self.pos[self.seg == k]]).sum()
                for k, (ip, _, _, _) in enumerate(self.parts)
            )
        )

    def __matmul__(self, other: Any) -> Any:
        """``A @ x`` for a dense ``(n_words,)`` vector of the bags' dtype: ``(n,)``; any
        other operand: the whole matrix's product."""
        if not (
            other.__class__ is np.ndarray
            and other.shape == (self.n_words,)
            and other.dtype == self.dtype
        ):
            return self.whole() @ other
        from scipy.sparse._sparsetools import csr_matvec

        self._ready()
        x = np.ascontiguousarray(other)
        out = np.zeros(self.shape[0], self.dtype)
        for k, (indptr, indices, data, spans) in enumerate(self.parts):
            glob = np.flatnonzero(self.seg == k)
            if glob.size == 0:
                continue
            m = indptr.shape[0] - 1
            y = np.zeros(m, self.dtype)
            index = np.int32 if indices.dtype.itemsize <= 4 else np.int64
            if indptr.dtype != index:
                indptr = indptr.astype(index)
            for r0 in range(0, m, _MATVEC_ROWS):
                r1 = min(m, r0 + _MATVEC_ROWS)
                e0, e1 = int(indptr[r0]), int(indptr[r1])
                ptr = indptr[r0 : r1 + 1] - indptr[r0]
                ind = indices[e0:e1]  # (uint16 indices: converted a block at a time)
                ind = ind if ind.dtype == index else ind.astype(index)
                csr_matvec(r1 - r0, self.n_words, ptr, ind, data[e0:e1], x, y[r0:r1])
                for mem, arr in zip(spans, (indices, data), strict=False):
                    size = arr.dtype.itemsize
                    release(mem.mm, mem.data + e0 * size, mem.data + e1 * size)
            out[glob] = y[self.pos[glob]]
        return out

    def __getitem__(self, key: Any) -> sp.csr_matrix:
        """Rows ``key`` (an integer array: gathered from their segments), else the whole
        matrix's ``[key]``."""
        if isinstance(key, np.ndarray) and key.ndim == 1 and key.dtype.kind in "iu":
            return self._rows(key.astype(np.int64))
        return self.whole()[key]

    def _rows(self, rows: np.ndarray) -> sp.csr_matrix:
        self._ready()
        seg, pos = self.seg[rows], self.pos[rows]
        lens = np.zeros(rows.shape[0], np.int64)
        chosen = []
        for k, (indptr, _, _, _) in enumerate(self.parts):
            sel = np.flatnonzero(seg == k)
            if sel.size:
                lens[sel] = indptr[pos[sel] + 1] - indptr[pos[sel]]
                chosen.append((k, sel))
        out_ptr = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(lens, out=out_ptr[1:])
        nnz = int(out_ptr[-1])
        index = np.int32 if max(nnz, self.n_words) < 2**31 - 1 else np.int64
        indices = np.empty(nnz, index)
        data = np.empty(nnz, self.dtype)
        for k, sel in chosen:
            indptr, ind, dat, _ = self.parts[k]
            p = pos[sel]
            starts = indptr[p]
            n_ent = indptr[p + 1] - starts
            at = np.repeat(starts - np.cumsum(n_ent) + n_ent, n_ent) + np.arange(n_ent.sum())
            dest = np.repeat(out_ptr[sel] - np.cumsum(n_ent) + n_ent, n_ent) + np.arange(
                n_ent.sum()
            )
            indices[dest] = ind[at]
            data[dest] = dat[at]
        import scipy.sparse as sp  # (here: importing this module does not load scipy)

        return sp.csr_matrix(
            (data, indices, out_ptr.astype(index)), shape=(rows.shape[0], self.n_words)
        )

    def whole(self) -> sp.csr_matrix:
        """The whole matrix, made once."""
        if self._whole is None:
            self._whole = self._rows(np.arange(self.shape[0], dtype=np.int64))
        return self._whole

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("parts", "seg", "pos", "_ready", "_whole"):
            raise AttributeError(name)
        return getattr(self.whole(), name)

    def subset(self, rows: np.ndarray) -> SegmentedRows:
        return SegmentedRows(self.parts, self.n_words, self.seg[rows], self.pos[rows], self._ready)

    def with_part(self, bow: sp.csr_matrix, order: np.ndarray) -> SegmentedRows:
        """These rows and those of ``bow`` (after these), in ``order``."""
        m = bow.shape[0]
        seg = np.concatenate([self.seg, np.full(m, len(self.parts), np.int32)])[order]
        pos = np.concatenate([self.pos, np.arange(m, dtype=np.int64)])[order]
        part = (bow.indptr, bow.indices, bow.data.astype(self.dtype, copy=False), ())
        return SegmentedRows([*self.parts, part], self.n_words, seg, pos, self._ready)


@dataclass(eq=False)
class SegmentedImages:
    """The search data of a reader, held by mapped segments
    (:meth:`MappedSegments.data`): what :class:`~engine.index.encode.EncodedImages`
    holds, read the same way by the search methods.

    Attributes
    ----------
    ids : (n,) int64
        Store ids, ascending.
    vocab : SegmentedIndex
        The vocabulary pyramids.
    uniform : UniformRows or None
        The uniform pyramids, made from the stored features when read (set by the
        reader: :class:`~engine.index.uniform_rows.UniformRows`; not stored).
    bow : SegmentedRows
        The bags of words.
    wta : (n, m) uint8
    rh : (n, n_bits / 8) uint8
        The hash codes, in memory of their own.
    checks : FileChecks or None
    words : SegmentedWords or None
        The words and signatures of the rows' stored descriptors (None when a segment
        holds none, or none with block checksums: then found from the descriptors).
    """

    ids: np.ndarray
    vocab: SegmentedIndex
    uniform: Any
    bow: SegmentedRows
    wta: np.ndarray
    rh: np.ndarray
    checks: FileChecks | None = None
    words: SegmentedWords | None = None

    def held_words(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`SegmentedWords.gather` of ``rows`` (None without stored words)."""
        return None if self.words is None else self.words.gather(rows)

    def subset(self, rows: np.ndarray) -> SegmentedImages:
        """Rows ``rows`` ((k,) int64 positions), in that order (nothing is copied but
        the ids and hash codes)."""
        rows = np.asarray(rows, np.int64)
        return SegmentedImages(
            self.ids[rows],
            self.vocab.subset(rows),
            None if self.uniform is None else self.uniform.subset(rows),
            self.bow.subset(rows),
            self.wta[rows],
            self.rh[rows],
            self.checks,
            None if self.words is None else self.words.subset(rows),
        )

    def with_rows(self, new: EncodedImages) -> SegmentedImages:
        """These rows and ``new``'s (encoded in memory), in ascending id order (the
        uniform pyramids: None, set again by the reader)."""
        ids = np.concatenate([self.ids, new.ids])
        order = np.argsort(ids, kind="stable")
        return SegmentedImages(
            ids[order],
            self.vocab.with_part(new.vocab, order),
            None,
            self.bow.with_part(new.bow, order),
            np.concatenate([self.wta, new.wta])[order],
            np.concatenate([self.rh, new.rh])[order],
            self.checks,
            None if self.words is None else self.words.with_rows(len(new.ids), order),
        )

    def materialize(self) -> EncodedImages:
        """The same data in memory of its own, as one :class:`EncodedImages`."""
        return EncodedImages(
            self.ids, self.vocab.whole(), self.uniform, self.bow.whole(), self.wta, self.rh,
        )  # fmt: skip

    def to_state(self, *, uniform: bool = False) -> dict[str, Any]:
        """:meth:`EncodedImages.to_state` of the same data."""
        return self.materialize().to_state(uniform=uniform)

    def close(self) -> None:
        """No file is checked after this: pyramids not yet checked (the uniform ones,
        before a query needs them) raise :class:`StoreError` when read later."""
        if self.checks is not None:
            self.checks.close()


class MappedSegments:
    """Every segment of one version's search data, mapped (:func:`map_segments`).

    Attributes
    ----------
    groups : list of tuple of str
        The files of each segment.
    arrays : list of dict of str to ndarray
        Each segment's arrays: read-only views of the maps.
    members : list of dict of str to Member
    checks : FileChecks
    n_words : int
    """

    def __init__(
        self,
        groups: list[tuple[str, ...]],
        arrays: list[dict[str, np.ndarray]],
        members: list[dict[str, Member]],
        checks: FileChecks,
        n_words: int,
    ) -> None:
        self.groups, self.arrays, self.members = groups, arrays, members
        self.checks, self.n_words = checks, int(n_words)

    def _owned(self, k: int, key: str, dtype: Any) -> np.ndarray:
        """Array ``key`` of segment ``k`` copied into memory, its pages handed back."""
        out = _own(self.arrays[k][key], dtype)
        m = self.members[k][key]
        release(m.mm, m.start, m.end)
        return out

    def _rows_checker(self) -> Any:
        """``check(k, positions)``: returns once the pyramids of rows ``positions`` of
        segment ``k`` are checked (the blocks that hold them,
        :meth:`FileChecks.require_spans`; a segment without block checksums: its
        pyramids whole)."""
        checks = self.checks
        spans = []
        for st, mem in zip(self.arrays, self.members, strict=True):
            held = [(mem[k], st[k].dtype.itemsize) for k in BLOCK_CHECKED if k in mem]
            spans.append((held, None))

        def check(k: int, positions: np.ndarray) -> None:
            if k >= len(spans):
                return  # (rows encoded in memory)
            held, indptr = spans[k]
            if any(m.blocks is None for m, _ in held):
                checks.require("vocab")
            if indptr is None:
                indptr = _own(self.arrays[k]["vocab.indptr"], np.int64)
                spans[k] = (held, indptr)
            p = np.asarray(positions, np.int64)
            first, last = indptr[p], indptr[p + 1]
            for m, size in held:
                checks.require_spans(m, first * size, last * size)

        return check

    def data(self, ids: np.ndarray, keys: np.ndarray) -> tuple[SegmentedImages, np.ndarray | None]:
        """The reader's data: the live rows of every segment
        (:func:`engine.index.states.live_masks` against the catalogue's usable ``ids``
        and their row ``keys``), in ascending id order, and their row keys; an index
        written before row keys (one segment, no keys): the segment whole and None.

        Raises
        ------
        IndexCorruptError
            A member read here is damaged.
        ValueError
            The arrays do not fit together (another version's format), or a segment has
            no row keys.
        """

        self.checks.require("open")
        n_seg = len(self.arrays)
        seg_ids = [self._owned(k, "ids", np.int64) for k in range(n_seg)]
        seg_keys: list[np.ndarray | None] = []
        for k in range(n_seg):
            got = self.arrays[k].get(ROW_KEYS)
            if got is not None and got.shape == seg_ids[k].shape:
                seg_keys.append(self._owned(k, ROW_KEYS, np.uint64))
            else:
                seg_keys.append(None)
        if n_seg == 1 and seg_keys[0] is None:  # written before row keys: whole
            live = [np.arange(seg_ids[0].size)]
            data_keys = None
        else:
            if any(k is None for k in seg_keys):
                raise ValueError("a segment of the search data has no row keys")
            masks = live_masks(seg_ids, seg_keys, ids, keys)
            live = [np.flatnonzero(m) for m in masks]
            data_keys = np.concatenate([sk[r] for sk, r in zip(seg_keys, live, strict=True)])
        every = np.concatenate([si[r] for si, r in zip(seg_ids, live, strict=True)])
        seg = np.concatenate([np.full(r.size, k, np.int32) for k, r in enumerate(live)])
        pos = np.concatenate(live).astype(np.int64)
        order = np.argsort(every, kind="stable")
        if not np.array_equal(order, np.arange(order.size)):
            every, seg, pos = every[order], seg[order], pos[order]
            if data_keys is not None:
                data_keys = data_keys[order]
        vocab_parts, bow_parts = [], []
        wta = rh = None
        for k, st in enumerate(self.arrays):
            st = dict(st)
            for key in ("vocab.indptr", "vocab.ukeys", "bow.indptr"):
                if key in st:
                    st[key] = self._owned(k, key, np.int64)

            def own(key: str, dtype: Any, st: dict = st) -> np.ndarray:
                a = st.pop(key)
                if a.dtype == dtype or a.dtype in _GATHERED.get(key.split(".")[-1], ()):
                    return a  # (compact pyramids: gathered row by row as stored)
                return np.asarray(a, dtype)

            vocab_parts.append(pyramid_from_state(st, "vocab", own, st.pop))
            # (uniform pyramids of segments written before: not read, made from the
            # features when a query reads them)
            glob = np.flatnonzero(seg == k)
            runs = _runs(glob, pos[glob])
            for name in ("wta", "rh"):
                codes = np.asarray(st.pop(name), np.uint8)
                if codes.ndim != 2:
                    raise ValueError(f"the search data's {name} codes are not a matrix")
                if name == "wta" and wta is None:
                    wta = np.empty((every.size, codes.shape[1]), np.uint8)
                if name == "rh" and rh is None:
                    rh = np.empty((every.size, codes.shape[1]), np.uint8)
                target = wta if name == "wta" else rh
                if codes.shape[1] != target.shape[1]:
                    raise ValueError(f"the segments' {name} codes differ in length")
                if len(runs) > 256:
                    target[glob] = codes[pos[glob]]
                for g0, p0, length in runs if len(runs) <= 256 else ():
                    target[g0 : g0 + length] = codes[p0 : p0 + length]  # (a few long runs)
                m = self.members[k][name]
                release(m.mm, m.start, m.end)
            spans = [self.members[k][f"bow.{n}"] for n in ("indices", "data")]
            bow_parts.append(
                (st["bow.indptr"], st["bow.indices"], np.asarray(st["bow.data"]), spans)
            )
            if len(vocab_parts[-1]) != seg_ids[k].size:
                raise ValueError("the vocab pyramids do not match the segment's rows")
            if st["bow.indptr"].shape[0] != seg_ids[k].size + 1:
                raise ValueError("the bags of words do not match the segment's rows")
        checks = self.checks

        def ready_all() -> None:
            checks.require("vocab")
            checks.require_blocks()

        data = SegmentedImages(
            every,
            SegmentedIndex(
                vocab_parts, seg, pos, ready=ready_all, ready_rows=self._rows_checker()
            ),
            None,
            SegmentedRows(bow_parts, self.n_words, seg, pos, lambda: checks.require("bow")),
            wta,
            rh,
            checks,
            self._words(seg, pos),
        )
        return data, data_keys

    def _words(self, seg: np.ndarray, pos: np.ndarray) -> SegmentedWords | None:
        """The stored words and signatures of the rows (``seg``, ``pos``), when every
        segment holds them with block checksums (else None: found from the descriptors).

        Raises
        ------
        ValueError
            They do not fit their segment's rows.
        """
        parts = []
        for k, (st, mem) in enumerate(zip(self.arrays, self.members, strict=True)):
            if "he.indptr" not in st or any(
                key not in st or mem[key].blocks is None for key in WORD_CHECKED
            ):
                return None
            indptr = self._owned(k, "he.indptr", np.int64)
            words, sigs = st["he.words"], st["he.sigs"]
            n_rows = st["ids"].shape[0]
            if (
                indptr.shape != (n_rows + 1,)
                or words.ndim != 2
                or sigs.shape != words.shape
                or sigs.dtype != np.uint64
                or int(indptr[-1]) != words.shape[0]
            ):
                raise ValueError("the search data's words do not match its rows")
            parts.append((indptr, words, sigs, mem["he.words"], mem["he.sigs"]))
        return SegmentedWords(parts, seg, pos, self.checks)


def map_segments(
    snap: Snapshot, handles: Mapping[str, IO[bytes]] | None = None
) -> MappedSegments | None:
    """Map every file of the search data of version ``snap`` and start checking the
    members a query reads in part (the bags of words, then the vocabulary pyramids) in
    the background. None when a file holds a compressed member (the data is read).

    Parameters
    ----------
    snap : Snapshot
    handles : mapping of str to file, optional
        The state's files, opened (else opened here); they can be closed once mapped.

    Raises
    ------
    KeyError
        No search data in ``snap``.
    FileNotFoundError
        A file is gone (a writer committed meanwhile: read the manifest again).
    IndexCorruptError
        A file's directory or headers are damaged.
    """
    entry = snap.entries[DATA_STATE]
    groups = segment_files(snap.states_dir, DATA_STATE, entry.scalars, entry.files)
    if not groups:
        raise ValueError("the search data has no segment")
    own = handles is None
    if handles is None:
        handles = snap.open([DATA_STATE])[DATA_STATE]
    checks = FileChecks(snap.states_dir, DATA_STATE)
    arrays, members = [], []
    try:
        for group in groups:
            st: dict[str, np.ndarray] = {}
            mem: dict[str, Member] = {}
            for file in group:
                got = _map_file(snap.states_dir, handles[file], file, checks)
                if got is None:
                    return None
                for key in got[0]:
                    if key in st:
                        exc = ValueError(f"array {key!r} is stored twice")
                        raise damaged_file(snap.states_dir, DATA_STATE, file, exc)
                st.update(got[0])
                mem.update(got[1])
            arrays.append(st)
            members.append(mem)
    finally:
        if own:
            for fh in handles.values():
                fh.close()
    for st, mem in zip(arrays, members, strict=True):
        for key in BLOCK_CHECKED + WORD_CHECKED:
            if key in mem and f"check.{key}" in mem:
                checks.require_members([mem[f"check.{key}"]])
                checks.use_blocks(mem[key], st[f"check.{key}"], st[key])
    checks.start(["bow", "vocab"])
    return MappedSegments(groups, arrays, members, checks, entry.scalars["bow.n_words"])
