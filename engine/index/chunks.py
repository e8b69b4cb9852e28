"""Feature chunks of the index store: append-only ``.npy`` files of structured rows.

One chunk holds the features of one ingest batch, one row per local feature with the
fields ``desc`` (the descriptor, in the chunk's codec), ``xy`` (float32) and, when every
feature of the chunk has them, ``scale`` and ``angle`` (float16) (:func:`chunk_dtype`).

Descriptors are stored per chunk with the smallest faithful codec: ``u8`` (``round(255 x)``)
when every value lies in ``[0, 1]`` — true of (Root)SIFT, whose raw OpenCV values are
already integers in 0..255 before normalisation — giving 128 B per 128-D descriptor instead
of 512 B (float32); the quantisation error (≤ 1/510 per component, ≈ 0.013 in L2 over 128
dims) is far below typical RootSIFT nearest-neighbour distances (0.3–0.6). Other values
(e.g. zero-mean patches) use ``f16`` when they fit, else ``f32``. ``xy`` stays float32 (pixel
accuracy for geometric verification); ``scale``/``angle`` are float16 (0.1 % relative
precision is ample for both).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.index.files import atomic_write
from engine.index.store_errors import IndexCorruptError

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features

__all__ = [
    "MAX_OPEN_CHUNKS",
    "U8_SCALE",
    "ChunkCache",
    "PackedFeatures",
    "chunk_dtype",
    "decode_features",
    "descriptor_dim",
    "encode_descriptors",
    "write_chunk",
]

#: Chunk files kept memory-mapped by one store (least recently used ones are dropped).
MAX_OPEN_CHUNKS = 64
U8_SCALE = 1.0 / 255.0  # the 8-bit descriptor codec: value = code * scale


def encode_descriptors(desc: np.ndarray) -> tuple[np.ndarray, str, float]:
    """Choose the chunk codec for stacked descriptors ``(N, D)``.

    Returns ``(encoded, codec, scale)`` with ``decoded = encoded.astype(float32) * scale``.
    """
    desc = np.asarray(desc, dtype=np.float32)
    if desc.size == 0:
        return desc.astype(np.uint8), "u8", U8_SCALE
    lo, hi = float(desc.min()), float(desc.max())
    if lo >= 0.0 and hi <= 1.0:
        return np.rint(desc * 255.0).astype(np.uint8), "u8", U8_SCALE
    if max(-lo, hi) <= float(np.finfo(np.float16).max):
        return desc.astype(np.float16), "f16", 1.0
    return desc, "f32", 1.0


@dataclass(frozen=True)
class PackedFeatures:
    """Local features whose descriptors are already in the store's 8-bit codec.

    What the extraction workers of :func:`engine.ingest.ingest` send back instead of
    :class:`engine.features.Features` when every descriptor value is in [0, 1] (the SIFT
    kinds): ``codes`` are ``rint(255 * value)``, exactly the bytes
    :meth:`IndexStore.write_batch` would store, so the index is the same, and a quarter
    of the descriptor bytes cross the process boundary (on UKBench ~50 instead of 173 KB
    a photo, little enough to fit a pipe's buffer, so a worker no longer waits for the
    indexing process to read its result).

    Attributes
    ----------
    codes : (M, D) uint8 ndarray
    xy, scale, angle, image_size, kind
        As in :class:`engine.features.Features`.
    """

    codes: np.ndarray
    xy: np.ndarray
    scale: np.ndarray | None
    angle: np.ndarray | None
    image_size: tuple[int, int]
    kind: str

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def descriptors(self) -> np.ndarray:
        """(M, D) float32, the values the store gives back (``codes / 255``)."""
        return self.codes.astype(np.float32) * np.float32(U8_SCALE)

    @classmethod
    def pack(cls, feats: Features) -> PackedFeatures | Features:
        """``feats`` in the 8-bit codec, or ``feats`` itself when a value is outside [0, 1]."""
        codes, codec, _ = encode_descriptors(feats.descriptors)
        if codec != "u8":
            return feats
        return cls(codes, feats.xy, feats.scale, feats.angle, feats.image_size, feats.kind)


def chunk_dtype(dim: int, desc_dtype: np.dtype, has_scale: bool, has_angle: bool) -> np.dtype:
    """Row type of a chunk: ``desc`` (``dim`` values of ``desc_dtype``), ``xy`` (2 x
    ``<f4``) and, when present, ``scale`` and ``angle`` (``<f2``)."""
    fields: list[tuple] = [("desc", desc_dtype, (dim,)), ("xy", "<f4", (2,))]
    if has_scale:
        fields.append(("scale", "<f2"))
    if has_angle:
        fields.append(("angle", "<f2"))
    return np.dtype(fields)


def descriptor_dim(f: Features | PackedFeatures) -> int:
    """Descriptor length of features (0 for a malformed, not 2-D, array)."""
    desc = f.codes if isinstance(f, PackedFeatures) else f.descriptors
    return int(desc.shape[1]) if np.ndim(desc) == 2 else 0


def write_chunk(
    features_dir: Path, feats: Sequence[Features | PackedFeatures]
) -> tuple[str, int, str, float] | None:
    """Write the non-empty ``feats`` as one chunk file in ``features_dir``.

    Packed features keep their codes when all of the chunk's are packed; next to
    features outside [0, 1] (no SIFT kind is) the chunk is encoded from their values.
    The file is complete and renamed into place when this returns (:func:`atomic_write`).

    Parameters
    ----------
    features_dir : Path
        The index's ``features`` folder.
    feats : sequence of Features or PackedFeatures
        One descriptor length for all of them.

    Returns
    -------
    (file, rows, codec, scale) or None
        The chunk's file name, number of rows, codec (``"u8"``, ``"f16"`` or ``"f32"``) and
        scale (decoded = stored * scale); ``None`` when every feature set is empty.

    Raises
    ------
    ValueError
        The feature sets have different descriptor lengths.
    """
    nonempty = [f for f in feats if len(f)]
    if not nonempty:
        return None
    dims = {descriptor_dim(f) for f in nonempty}
    if len(dims) != 1:
        raise ValueError(f"features of one batch have mixed descriptor sizes {sorted(dims)}")
    dim = dims.pop()
    has_scale = all(f.scale is not None for f in nonempty)
    has_angle = all(f.angle is not None for f in nonempty)
    if all(isinstance(f, PackedFeatures) for f in nonempty):
        enc, codec, scale = np.concatenate([f.codes for f in nonempty]), "u8", U8_SCALE
    else:
        enc, codec, scale = encode_descriptors(np.concatenate([f.descriptors for f in nonempty]))
    dtype = chunk_dtype(dim, enc.dtype, has_scale, has_angle)
    rec = np.empty(len(enc), dtype=dtype)
    rec["desc"] = enc
    rec["xy"] = np.concatenate([np.asarray(f.xy, np.float32) for f in nonempty])
    if has_scale:
        rec["scale"] = np.concatenate([np.asarray(f.scale, np.float32) for f in nonempty])
    if has_angle:
        rec["angle"] = np.concatenate([np.asarray(f.angle, np.float32) for f in nonempty])
    file = f"c{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}.npy"
    atomic_write(features_dir / file, lambda fh: np.save(fh, rec, allow_pickle=False))
    return file, len(rec), codec, scale


class ChunkCache:
    """Memory maps of the chunk files a store has read, the least recently used dropped.

    Keyed by file name, which is unique forever, so a cached map can never alias a newer
    chunk. Not thread-safe on its own: the store calls it under its lock.

    Parameters
    ----------
    features_dir : Path
        The index's ``features`` folder.
    size : int
        Maps kept open at most.
    """

    def __init__(self, features_dir: Path, size: int = MAX_OPEN_CHUNKS) -> None:
        self.features_dir = features_dir
        self.size = size
        self._maps: OrderedDict[str, np.ndarray] = OrderedDict()
        # (dtype, data offset) of every chunk opened once: a chunk file never changes
        # (its name is never reused), so mapping it again skips parsing its header
        self._layout: dict[str, tuple[np.dtype, int]] = {}

    def get(self, file: str, n_rows: int) -> np.ndarray:
        """The rows of chunk ``file``: a read-only ``(n_rows,)`` structured array over its
        memory map.

        Raises
        ------
        FileNotFoundError
            The file is gone (compacted away by a concurrent writer).
        IndexCorruptError
            The file is not a chunk of ``n_rows`` rows.
        """
        hit = self._maps.get(file)
        if hit is not None:
            self._maps.move_to_end(file)
            return hit
        path = self.features_dir / file
        layout = self._layout.get(file)
        if layout is not None:  # (seen before: map it again without parsing its header)
            arr = _remap(path, layout[0], layout[1], n_rows)
        else:
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise
            except (OSError, ValueError) as exc:
                raise IndexCorruptError(f"feature chunk {path} is damaged: {exc}") from exc
            if arr.ndim != 1 or arr.shape[0] != n_rows or arr.dtype.names is None:
                raise IndexCorruptError(
                    f"feature chunk {path} is damaged: shape {arr.shape}, expected ({n_rows},)"
                )
            self._layout[file] = (arr.dtype, int(arr.offset))
            # a plain array over the same mapping (which it keeps open): slicing a
            # np.memmap runs Python code for every view (~0.1 s per 500 images read)
            arr = arr.view(np.ndarray)
        self._maps[file] = arr
        while len(self._maps) > self.size:
            self._maps.popitem(last=False)
        return arr

    def clear(self) -> None:
        """Drop every map (the files stay)."""
        self._maps.clear()


def _remap(path: Path, dtype: np.dtype, offset: int, n_rows: int) -> np.ndarray:
    """The ``(n_rows,)`` read-only rows of the chunk file ``path`` whose data start at
    ``offset`` (a chunk opened before: its header is known), memory-mapped."""
    import mmap

    with open(path, "rb") as fh:  # (FileNotFoundError when it is gone)
        try:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            return np.frombuffer(mapped, dtype=dtype, count=n_rows, offset=offset)
        except ValueError as exc:  # (emptied or shorter than its rows since: damaged)
            raise IndexCorruptError(f"feature chunk {path} is damaged: {exc}") from exc


def decode_features(
    arr: np.ndarray, offset: int, n: int, scale: float, image_size: tuple[int, int], kind: str
) -> Features:
    """The features of one image from its rows of a chunk.

    Parameters
    ----------
    arr : (n_rows,) structured ndarray
        The chunk (:meth:`ChunkCache.get`).
    offset, n : int
        The image owns ``arr[offset:offset + n]``.
    scale : float
        The chunk's descriptor scale (decoded = stored * scale).
    image_size : (int, int)
        Width and height the coordinates refer to.
    kind : str
        Feature kind.

    Returns
    -------
    Features
        ``descriptors (n, D) float32``, ``xy (n, 2) float32``, ``scale``/``angle``
        ``(n,) float32`` or ``None`` when the chunk has no such field.
    """
    from engine.features.keypoints import Features

    rec = arr[offset : offset + n]
    desc = rec["desc"].astype(np.float32)
    if scale != 1.0:
        desc *= np.float32(scale)
    names = arr.dtype.names
    return Features(
        descriptors=desc,
        xy=np.ascontiguousarray(rec["xy"], dtype=np.float32),
        scale=rec["scale"].astype(np.float32) if "scale" in names else None,
        angle=rec["angle"].astype(np.float32) if "angle" in names else None,
        image_size=image_size,
        kind=kind,
    )
