"""The words and Hamming signatures of the stored descriptors, for a one-shot reader that
maps the search data's segments (:mod:`engine.index.mapped`).

Each segment holds the level-``HE_LEVEL`` word and the 64-bit signature of every stored
descriptor in each vocabulary tree (``he.words``, ``he.sigs``, offsets ``he.indptr``:
:attr:`~engine.index.encode.EncodedImages.words`). The ``hybrid`` method's first stage
scores its 300 best hits by the Hamming embedding (:mod:`engine.index.selective`); a
mapped reader gathers their words and signatures from the mapped arrays
(:meth:`SegmentedWords.gather`, checking the blocks it reads: :data:`~engine.index.
block_checks.WORD_CHECKED`) instead of reading the hits' descriptors from the feature
chunks and projecting them (about 100,000 descriptors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.index.search import entry_positions

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.block_checks import FileChecks, Member

__all__ = ["SegmentedWords"]


@dataclass(eq=False)
class SegmentedWords:
    """The words and signatures of the descriptors of the live rows of several mapped
    segments, row ``i`` being row ``pos[i]`` of segment ``seg[i]``.

    Attributes
    ----------
    parts : list of tuple
        Per segment: ``he.indptr`` (m + 1,) int64 (checked, in memory), ``he.words``
        (N, T) uint16 or int32 and ``he.sigs`` (N, T) uint64 (mapped), and the two
        members holding those (their blocks checked as they are read).
    seg : (n,) int32
        Segment of each row; -1 for a row encoded in memory (no stored words).
    pos : (n,) int64
        Its row in that segment.
    checks : FileChecks
    """

    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, Member, Member]]
    seg: np.ndarray
    pos: np.ndarray
    checks: FileChecks

    def subset(self, rows: np.ndarray) -> SegmentedWords:
        """Rows ``rows``, in that order."""
        return SegmentedWords(self.parts, self.seg[rows], self.pos[rows], self.checks)

    def with_rows(self, m: int, order: np.ndarray) -> SegmentedWords:
        """These rows and ``m`` rows encoded in memory (after these, without stored
        words), in ``order``."""
        seg = np.concatenate([self.seg, np.full(m, -1, np.int32)])[order]
        pos = np.concatenate([self.pos, np.zeros(m, np.int64)])[order]
        return SegmentedWords(self.parts, seg, pos, self.checks)

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Words (M, T) int32, signatures (M, T) uint64 and owners (M,) int64 (positions
        in ``rows``) of the descriptors of ``rows``, one row after the other, each in its
        stored order: what :meth:`engine.index.encode.EncodedImages.held_words` gives
        for the same rows. None when a row has none stored (encoded in memory).

        Raises
        ------
        IndexCorruptError
            A block read is damaged.
        """
        rows = np.asarray(rows, np.int64)
        seg, pos = self.seg[rows], self.pos[rows]
        if (seg < 0).any():
            return None
        lens = np.zeros(rows.shape[0], np.int64)
        chosen = []
        for k in np.unique(seg).tolist():
            sel = np.flatnonzero(seg == k)
            indptr = self.parts[k][0]
            lens[sel] = indptr[pos[sel] + 1] - indptr[pos[sel]]
            chosen.append((k, sel))
        out_ptr = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(lens, out=out_ptr[1:])
        t = self.parts[0][1].shape[1] if self.parts else 0
        words = np.empty((int(out_ptr[-1]), t), np.int32)
        sigs = np.empty((int(out_ptr[-1]), t), np.uint64)
        for k, sel in chosen:
            indptr, w, g, w_mem, g_mem = self.parts[k]
            p = pos[sel]
            for arr, mem in ((w, w_mem), (g, g_mem)):
                row_bytes = arr.dtype.itemsize * t
                self.checks.require_spans(mem, indptr[p] * row_bytes, indptr[p + 1] * row_bytes)
            at = entry_positions(indptr, p)[1]  # (the rows' entries in the segment)
            dest = entry_positions(out_ptr, sel)[1]  # (and where they go)
            words[dest] = w[at]
            sigs[dest] = g[at]
        owner = np.repeat(np.arange(rows.shape[0]), lens)
        return words, sigs, owner
