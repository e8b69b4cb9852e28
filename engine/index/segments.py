"""The search data as immutable segments: adding photos writes what was added.

The search data of a collection (:class:`~engine.index.encode.EncodedImages`, the
``search.data`` state) used to be one state that every update rewrote whole (541 MB at
10,000 photos) -- adding one photo cost the whole library. It is now kept the way Lucene
keeps an index: as immutable *segments*, each the search data of a batch of photos
(its ``ids``, :data:`~engine.index.encode.ROW_KEYS` and encoded arrays, one or two
``.npz`` files), named in order by the state's entry in the manifest
(:mod:`engine.index.manifest`; :data:`engine.index.states.SEGMENTS_KEY` counts the files
of each segment). An index written before segments holds one segment.

- **Adding k photos** encodes them with the fitted models (their encoding does not depend
  on the other photos: idf weights and hash seeds are the models') and commits one new
  segment of k rows: the manifest names the old segments' files and the new one, in one
  atomic commit; nothing else is read or written (:func:`read_layout` reads only each
  segment's ``ids`` and row keys).
- **Deletions need no mark**: the catalogue is the truth. A row of a segment is *live*
  when its photo is usable and its row key is the catalogue's (a changed photo keeps its
  id and gets a new row in a newer segment: the last live occurrence wins,
  :func:`live_masks`). Removing a photo therefore writes only the catalogue.
- **Merges** (:func:`plan_merges`, log-structured, as Lucene's tiered policy): segments
  whose live rows fall in the same size tier (powers of :data:`MERGE_FACTOR`) are merged
  once there are :data:`MERGE_FACTOR` of them, and a segment with less than
  :data:`MIN_LIVE` of its rows live is rewritten; a segment with no live row is dropped
  unread. Each row is rewritten O(log n) times over the life of the index, and a library
  holds O(MERGE_FACTOR log n) segments. A merge is one more commit of the same kind:
  readers keep the version they opened (its files stay until it is collected, and an
  open file outlives its deletion).
- **Refits** (the models re-fitted on a grown collection, or more hash bits) encode every
  photo again and commit the models with a single new segment, atomically.

A reader that answers many queries (the app) loads every segment, keeps its live rows
and concatenates them (:func:`read_data`); queries then run as on one state. A one-shot
reader (``simile query``) maps every segment instead and concatenates nothing
(:mod:`engine.index.mapped`): a query touches the pages it reads, and gets the same
scores.

Each segment's vocabulary pyramids -- two thirds of its bytes, of which a query reads
the rows of its candidates only -- carry CRC-32 checksums of every
:data:`~engine.index.mapped.CHECK_BLOCK` bytes (``check.<array>`` arrays,
:func:`block_checks`), so that a reader that maps them checks the blocks it reads, not
the whole file (:mod:`engine.index.mapped`). A segment written before them is checked
whole by its readers, and rewritten with them by the next update (:attr:`Layout.unchecked`).

Each segment also holds the words of its rows' stored descriptors and their Hamming
signatures (``he.words``, ``he.sigs`` and ``he.indptr``,
:attr:`~engine.index.encode.EncodedImages.words`), which the app's queries read instead
of reading the descriptors of their 300 best hits and descending the vocabulary trees
again (the mapped reader does not read them: a one-shot query finds the words and
signatures of its hits from their descriptors). A segment written before them is
rewritten with them by the next update (:attr:`Layout.wordless`,
:func:`~engine.index.encode.fill_words`: about 2 us a stored descriptor).

The uniform pyramids are not stored: they were three quarters of the bytes (43 KB a
photo) and only the ``uniform`` method reads them; the reader makes those a query reads
from the stored features (:mod:`engine.index.uniform_rows`). Segments written before
hold them (``uniform.*`` arrays, usually a file of their own): readers skip them, and
the next update drops them (:attr:`Layout.uniform`: a file of them alone leaves the
segment, a segment holding them among its other arrays is rewritten without them).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from engine.index.block_checks import BLOCK_CHECKED, WORD_CHECKED, block_checks
from engine.index.encode import ROW_KEYS, EncodedImages
from engine.index.keys import DATA_STATE
from engine.index.mapped import SegmentedImages, map_segments
from engine.index.states import (
    NPZ_ERRORS,
    SEGMENTS_KEY,
    damaged_file,
    live_masks,
    read_arrays,
    segment_files,
)

if TYPE_CHECKING:  # pragma: no cover
    from engine.index.fit import SearchModels
    from engine.index.manifest import Snapshot
    from engine.index.store import IndexStore

__all__ = [
    "MERGE_FACTOR",
    "MIN_LIVE",
    "Layout",
    "block_checks",
    "commit_segments",
    "holds_uniform",
    "live_masks",
    "load_segments",
    "plan_merges",
    "read_data",
    "read_layout",
    "segment_arrays",
]

#: Segments of one size tier merged together once there are this many (and the base of
#: the tiers' sizes).
MERGE_FACTOR = 8
#: A segment with fewer than this fraction of its rows live is rewritten.
MIN_LIVE = 0.5


@dataclass(frozen=True)
class Layout:
    """The segments of one version of the search data, without their arrays.

    Attributes
    ----------
    files : list of tuple of str
        The files of each segment, in order.
    ids : list of (m_s,) int64
        Store ids of each segment's rows.
    keys : list of (m_s,) uint64
        Their row keys (:func:`engine.index.catalog.row_keys`).
    n_words : int
        Columns of the bags of words (the models' leaves).
    wta_codes : int
        Densified WTA codes per row.
    rh_bytes : int
        Bytes of packed hyperplane bits per row.
    uniform : dict of str to bool
        The files written by an earlier version, to be dropped or rewritten: those that
        hold uniform pyramids (now made from the features when read), and whether they
        hold nothing else; those whose bags of words have int64 column indices (False).
    """

    files: list[tuple[str, ...]]
    ids: list[np.ndarray]
    keys: list[np.ndarray]
    n_words: int
    wta_codes: int
    rh_bytes: int
    uniform: dict[str, bool] = field(default_factory=dict)
    #: Segments written before the block checksums of their pyramids (rewritten).
    unchecked: tuple[int, ...] = ()
    #: Segments written before the descriptors' words or their signatures were stored
    #: (rewritten with them, :func:`engine.index.encode.fill_words`).
    wordless: tuple[int, ...] = ()

    def without_uniform(self) -> tuple[Layout, list[int]]:
        """This layout with the files of uniform pyramids alone left out of their
        segments, and the segments to be rewritten: those that still hold uniform
        pyramids among other arrays, or int64 column indices of their bags of words, or
        no block checksums of their pyramids (:attr:`unchecked`), or no words of their
        descriptors (:attr:`wordless`)."""
        files = [tuple(f for f in g if not self.uniform.get(f, False)) for g in self.files]
        mixed = {i for i, g in enumerate(files) if any(f in self.uniform for f in g)}
        mixed.update(self.unchecked)
        mixed.update(self.wordless)
        return replace(self, files=files), sorted(mixed)

    def fits(self, models: SearchModels) -> bool:
        """Whether the segments were encoded with ``models``' shapes
        (:func:`engine.index.encode.compatible`)."""
        return (
            self.n_words == len(models.leaf_keys)
            and self.wta_codes == models.dwta.n_codes
            and self.rh_bytes * 8 == models.rh.n_bits
        )


def _member_header(npz: Any, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of array ``key`` of an open npz, read from its header alone."""
    with npz.zip.open(f"{key}.npy") as fh:
        return _npy_header(fh)


def _npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the ``.npy`` array whose header ``fh`` is at."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
    return tuple(shape), dtype


def _member_shape(npz: Any, key: str) -> tuple[int, ...]:
    """Shape of array ``key`` of an open npz, read from its header alone."""
    return _member_header(npz, key)[0]


def read_layout(snap: Snapshot, handles: Mapping[str, IO[bytes]] | None = None) -> Layout | None:
    """The segments of the search data of version ``snap``: per segment its ids and row
    keys (the only arrays read) and the shapes of its codes. ``handles``: the state's
    files, opened by the caller (else opened and closed here).

    Returns
    -------
    Layout or None
        None when the data cannot be updated segment by segment: no search data, or data
        written before row keys were saved (the caller rewrites it whole).

    Raises
    ------
    FileNotFoundError
        A file is gone (a writer committed meanwhile; read the manifest again).
    IndexCorruptError
        A file is damaged.
    """
    entry = snap.entries.get(DATA_STATE)
    if entry is None:
        return None
    groups = segment_files(snap.states_dir, DATA_STATE, entry.scalars, entry.files)
    own = handles is None
    if handles is None:
        handles = snap.open([DATA_STATE])[DATA_STATE]
    ids, keys = [], []
    wta = rh = None
    uniform: dict[str, bool] = {}
    unchecked, wordless = [], []
    try:
        for s_i, group in enumerate(groups):
            got: dict[str, np.ndarray] = {}
            names: set[str] = set()
            for file in group:
                try:
                    fh = handles[file]
                    with np.load(fh, allow_pickle=False) as npz:
                        names.update(npz.files)
                        held = [k.startswith("uniform.") for k in npz.files]
                        if any(held):
                            uniform[file] = all(held)
                        for k in ("ids", ROW_KEYS):
                            if k in npz.files:
                                got[k] = npz[k]
                        if "bow.indices" in npz.files:
                            wide = _member_header(npz, "bow.indices")[1].itemsize > 4
                            if wide and int(entry.scalars["bow.n_words"]) < 2**31 - 1:
                                uniform.setdefault(file, False)  # (rewritten: int32)
                        if "wta" in npz.files:
                            wta = _member_shape(npz, "wta")[1]
                            rh = _member_shape(npz, "rh")[1]
                except (*NPZ_ERRORS, IndexError) as exc:
                    raise damaged_file(snap.states_dir, DATA_STATE, file, exc) from exc
            if any(k in names and f"check.{k}" not in names for k in BLOCK_CHECKED + WORD_CHECKED):
                unchecked.append(s_i)
            if "he.indptr" not in names or "he.sigs" not in names:
                wordless.append(s_i)
            if ROW_KEYS not in got or "ids" not in got:
                return None
            if got["ids"].shape != got[ROW_KEYS].shape:
                return None
            ids.append(np.asarray(got["ids"], np.int64))
            keys.append(np.asarray(got[ROW_KEYS], np.uint64))
    finally:
        if own:
            _close(handles)
    if wta is None or rh is None:
        return None
    n_words = int(entry.scalars["bow.n_words"])
    return Layout(
        groups, ids, keys, n_words, int(wta), int(rh), uniform, tuple(unchecked), tuple(wordless)
    )


def holds_uniform(snap: Snapshot) -> bool:
    """Whether the search data of version ``snap`` is of an earlier layout that the next
    update rewrites (:meth:`Layout.without_uniform`): stored uniform pyramids, int64
    column indices of the bags of words, pyramids without block checksums, segments
    without their descriptors' words. Only the files' zip directories and array
    headers are read; False when there is no data, or a file cannot be read (the update
    finds out)."""
    entry = snap.entries.get(DATA_STATE)
    if entry is None:
        return False
    pyramids = words = 0
    for file in entry.files:
        try:
            with zipfile.ZipFile(snap.states_dir / file) as z:
                names = z.namelist()
                if any(n.startswith("uniform.") for n in names):
                    return True
                pyramids += "vocab.values.npy" in names
                words += "he.sigs.npy" in names
                for k in ("vocab.values", "he.sigs"):
                    if f"{k}.npy" in names and f"check.{k}.npy" not in names:
                        return True  # (no block checksums: rewritten with them)
                if "bow.indices.npy" in names:
                    with z.open("bow.indices.npy") as fh:
                        dtype = _npy_header(fh)[1]
                    if dtype.itemsize > 4:
                        return True
        except (OSError, ValueError, zipfile.BadZipFile):
            return False
    return words < pyramids  # (a segment without the words or signatures of its descriptors)


def _tier(n: int) -> int:
    return int(np.floor(np.log(max(n, 1)) / np.log(MERGE_FACTOR) + 1e-9))


def plan_merges(live: Sequence[int], total: Sequence[int]) -> list[int]:
    """Which segments to merge into one (log-structured merge policy).

    Parameters
    ----------
    live, total : sequence of int
        Live and stored rows of each segment.

    Returns
    -------
    list of int
        Positions of the segments to merge, ascending: those whose live rows fall in a
        size tier (``floor(log_F live)``, ``F`` = :data:`MERGE_FACTOR`) that holds ``F``
        segments or more, and those with less than :data:`MIN_LIVE` of their rows live.
        Segments with no live row are not listed (they are dropped unread). A single
        segment is listed only to be compacted; empty when nothing is to be done.
    """
    pick = {
        i for i, (lv, tot) in enumerate(zip(live, total, strict=True)) if 0 < lv < MIN_LIVE * tot
    }
    tiers: dict[int, list[int]] = {}
    for i, lv in enumerate(live):
        if lv > 0:
            tiers.setdefault(_tier(lv), []).append(i)
    for members in tiers.values():
        if len(members) >= MERGE_FACTOR:
            pick.update(members)
    return sorted(pick)


def segment_arrays(data: EncodedImages, keys: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of one segment holding ``data`` (rows with row ``keys``), with the
    block checksums of its pyramids (:func:`block_checks`)."""
    st = data.to_state()
    st.pop("bow.n_words")
    st[ROW_KEYS] = np.asarray(keys, np.uint64)
    st.update(block_checks(st))
    return st


def _read_group(
    snap: Snapshot,
    handles: Mapping[str, IO[bytes]],
    group: Sequence[str],
    *,
    skip: str | None = None,
) -> dict[str, Any]:
    """The arrays of one segment's files (but those whose name starts with ``skip``):
    :func:`engine.index.states.read_arrays`."""
    return read_arrays(
        snap.states_dir,
        DATA_STATE,
        {f: handles[f] for f in group},
        keep=lambda k: not ((skip and k.startswith(skip)) or k.startswith("check.")),
    )


def load_segments(
    snap: Snapshot,
    layout: Layout,
    which: Sequence[int],
    handles: Mapping[str, IO[bytes]] | None = None,
) -> list[tuple[EncodedImages, np.ndarray]]:
    """The data and row keys of segments ``which`` of ``layout`` (version ``snap``);
    ``handles``: the state's files, opened by the caller (else opened and closed here)."""
    own = handles is None
    if handles is None:
        handles = snap.open([DATA_STATE])[DATA_STATE]
    try:
        out = []
        for i in which:
            st = _read_group(snap, handles, layout.files[i], skip="uniform.")
            st["bow.n_words"] = layout.n_words
            keys = np.asarray(st.pop(ROW_KEYS), np.uint64)
            out.append((EncodedImages.from_state(st, consume=True), keys))
        return out
    finally:
        if own:
            _close(handles)


def read_data(
    snap: Snapshot, ids: np.ndarray, keys: np.ndarray, *, mapped: bool = False
) -> tuple[EncodedImages | SegmentedImages, np.ndarray | None]:
    """A reader's search data of version ``snap``: the live rows of its segments
    (:func:`live_masks` against the catalogue's usable ``ids`` and their row ``keys``), in
    ascending id order, and their row keys (None: an index written before row keys, whose
    one segment is returned whole for the caller to check). The data's ``uniform`` is
    None (stored ones are not read: the reader makes them from the features,
    :class:`~engine.index.uniform_rows.UniformRows`).

    With ``mapped``, every segment is memory-mapped instead of read, and nothing is
    concatenated (:func:`engine.index.mapped.map_segments`: a one-shot reader, ``simile
    query``, touches the hash codes and bags of every row and the pyramids of a few, so
    its memory and time no longer grow with the whole data; the data returned is then a
    :class:`~engine.index.mapped.SegmentedImages`, whose scores are the same to the
    last bit). A process that answers many queries reads the data into memory of its
    own, where the random gathers of exact scoring run about twice as fast.

    Raises
    ------
    KeyError
        No search data in ``snap``.
    FileNotFoundError
        A file is gone (a writer committed meanwhile: read the manifest again).
    IndexCorruptError
        A file is damaged.
    ValueError
        The arrays do not fit together (another version's format).
    """
    entry = snap.entries[DATA_STATE]
    groups = segment_files(snap.states_dir, DATA_STATE, entry.scalars, entry.files)
    handles = snap.open([DATA_STATE])[DATA_STATE]
    if mapped:
        try:
            maps = map_segments(snap, handles)
        finally:
            _close(handles)
        if maps is not None:
            return maps.data(ids, keys)
        handles = snap.open([DATA_STATE])[DATA_STATE]  # (a compressed member: read)
    parts: list[tuple[EncodedImages, np.ndarray | None]] = []
    try:
        for group in groups:
            st = _read_group(snap, handles, group, skip="uniform.")
            st["bow.n_words"] = entry.scalars["bow.n_words"]
            row_keys = st.pop(ROW_KEYS, None)
            data = EncodedImages.from_state(st, consume=True, copy=len(groups) == 1, uniform=False)
            if row_keys is not None and row_keys.shape != data.ids.shape:
                row_keys = None
            parts.append((data, None if row_keys is None else np.asarray(row_keys, np.uint64)))
    finally:
        _close(handles)
    if len(parts) == 1 and parts[0][1] is None:  # written before row keys: whole
        return parts[0][0], None
    if any(k is None for _, k in parts):
        raise ValueError("a segment of the search data has no row keys")
    masks = live_masks([d.ids for d, _ in parts], [k for _, k in parts], ids, keys)
    kept = [
        (d, k) if m.all() else (d.subset(np.flatnonzero(m)), k[m])
        for (d, k), m in zip(parts, masks, strict=True)
    ]
    data = EncodedImages.concat([d for d, _ in kept])
    data_keys = np.concatenate([k for _, k in kept])
    order = np.argsort(data.ids, kind="stable")
    if not np.array_equal(order, np.arange(order.size)):
        data, data_keys = data.subset(order), data_keys[order]
    return data, data_keys


def _close(handles: Mapping[str, IO[bytes]]) -> None:
    for fh in handles.values():
        fh.close()


def commit_segments(
    store: IndexStore,
    layout: Layout,
    keep: Sequence[int],
    new_files: Sequence[str],
) -> int:
    """Commit the search data as the segments ``keep`` of ``layout`` (their files as
    they are), then the new segments ``new_files`` (one file each, written with
    ``store.write_state_part(DATA_STATE, segment_arrays(...))``); the models are kept.
    Returns the new version's generation."""
    groups = [layout.files[i] for i in keep] + [(f,) for f in new_files]
    scalars = {
        SEGMENTS_KEY: " ".join(str(len(g)) for g in groups),
        "bow.n_words": layout.n_words,
    }
    files = [f for g in groups for f in g]
    return store.save_states({}, written={DATA_STATE: (scalars, files)})
