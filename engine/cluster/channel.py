"""The dense categorisation channel: dense SIFT per image, cached in the index (Sec. 9.5).

:func:`category_features` describes one image by SIFT on a regular grid of windows (white
frame trimmed, RootSIFT); :class:`CategoryChannel` computes it for a collection's images in
worker processes the first time they are grouped and keeps it in the index, keyed by content
hash (:func:`collection_rows`, :func:`hash_of`). :func:`vocab_sample` draws the descriptors
a vocabulary is fitted on.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cluster.appearance import APPEARANCE, APPEARANCE_DIM, appearance_descriptor
from engine.cluster.results import ClusterProgress
from engine.cluster.semantic import SEMANTIC, SEMANTIC_DIM, semantic_embedding
from engine.features.keypoints import Features
from engine.index import keys

__all__ = [
    "CATEGORY_FEATURES",
    "CATEGORY_FEATURES_VERSION",
    "DENSE_CHUNK",
    "CategoryChannel",
    "CategoryFeatures",
    "as_float",
    "category_extractor",
    "category_features",
    "collection_rows",
    "global_descriptors",
    "hash_of",
    "vocab_sample",
]


#: Settings of the categorisation features (:func:`category_features`). Part of the cache
#: key: changing any of them recomputes the channel.
CATEGORY_FEATURES: dict[str, Any] = {
    "side": 300,
    "max_features": 400,
    "windows": ((12, 8), (24, 12)),
    "trim": 245,
    "rootsift": True,
}
#: The global descriptors a chunk may keep beside its dense features, by the suffix of their
#: array: (the :class:`CategoryFeatures` field, length, stored dtype).
_GLOBALS: dict[str, tuple[str, int, Any]] = {
    "app": ("appearance", APPEARANCE_DIM, np.float32),
    "sem": ("semantic", SEMANTIC_DIM, np.float32),
}
#: Bumped whenever :func:`category_features` changes its output for equal settings.
CATEGORY_FEATURES_VERSION = 1
#: Images per cached chunk of dense features (an interrupted run keeps finished chunks).
DENSE_CHUNK = 64


@dataclass(frozen=True, eq=False)
class CategoryFeatures(Features):
    """:class:`engine.features.Features` of the categorisation channel, with the photo's
    global appearance descriptor (:func:`engine.cluster.appearance_descriptor`).

    Attributes
    ----------
    appearance : (d,) float32 or None
        None when it was not asked for (``category_features(appearance=False)``).
    semantic : (1280,) float32 or None
        The network's embedding (:func:`engine.cluster.semantic_embedding`); None when it
        was not asked for (``category_features(semantic=False)``).
    """

    appearance: np.ndarray | None = None
    semantic: np.ndarray | None = None


def category_features(
    image: Any,
    *,
    side: int = 300,
    max_features: int = 400,
    windows: Sequence[Sequence[int]] = ((12, 8), (24, 12)),
    trim: int = 245,
    rootsift: bool = True,
    octaves: bool = True,
    appearance: bool = False,
    semantic: bool = False,
) -> CategoryFeatures:
    """Dense multi-scale SIFT of one image for categorisation (thesis Sec. 9.5).

    The image is loaded upright in grey (at most 1024 pixels a side), a uniform white frame
    is cut off (``trim``: grey level above which a pixel counts as white; 0 disables), the
    rest is shrunk so its longest side is ``side`` pixels, and SIFT descriptors are computed
    on a regular grid of windows for every ``(size, step)`` in ``windows`` (pixels), then
    evenly subsampled to ``max_features``. Dense windows describe the object's surface
    uniformly, where keypoint detectors favour clutter and texture; on Caltech-4 the
    normalized cut reaches 0.95 with them against 0.89 with 300 keypoints.

    The descriptors come from the one dense-SIFT extractor,
    :func:`engine.features.dense.dense_sift` (OpenCV SIFT on a corner-anchored grid; its
    ``angle=-1`` is OpenCV's default orientation, which this channel has always used).

    Parameters
    ----------
    image : path, bytes or ndarray
        Anything :func:`engine.io.imageio.load_gray` accepts, or an (H, W) / (H, W, 3) uint8
        array.
    side, max_features, windows, trim, rootsift
        See above (:data:`CATEGORY_FEATURES` holds the defaults used by the app).
    octaves : bool
        Describe a window of size z on the pyramid octave ``floor(log2(z / 6))`` (the
        image shrunk that many times): the same SIFT window from ~5x fewer pixels (about
        24 against 106 ms of CPU per image), the grouping's default. ``False`` samples
        every window at full resolution; learned similarity uses that
        (:data:`engine.workflows.feedback.LEARN_FEATURES`): on Caltech-101 (20 classes) the cosine
        of tf-idf bags gives precision@10 0.412 against 0.378, OASIS 0.550 against 0.477.
    appearance : bool
        Also describe the whole image (white frame trimmed) by
        :func:`engine.cluster.appearance_descriptor` with the settings of
        :data:`engine.cluster.APPEARANCE`, from the same decoded image (the grouping's
        channel does; learned similarity does not).
    semantic : bool
        Also embed the photo by :func:`engine.cluster.semantic_embedding` (colour, from the
        same file; the grouping's channel does).

    Returns
    -------
    CategoryFeatures
        ``descriptors`` (M, 128) float32 RootSIFT (unit L2 norm, values in [0, 1]); ``xy``
        (M, 2) float32 window centres in pixels of the image as loaded
        (``image_size``); ``kind = "category_dense"``; ``appearance`` (d,) float32 or None;
        ``semantic`` (1280,) float32 or None.
    """
    import cv2

    from engine.features.dense import dense_sift, gray_image, trim_box

    sem = None
    if semantic:  # (in colour: before an array is reduced to grey)
        sem = _semantic_of(image)
    if isinstance(image, np.ndarray):  # arrays are taken as uint8 grey levels, as always
        gray = np.asarray(image)
        if gray.ndim == 3:
            gray = cv2.cvtColor(np.ascontiguousarray(gray[..., :3], np.uint8), cv2.COLOR_RGB2GRAY)
        if gray.ndim != 2:
            raise ValueError(f"image must be (H, W) or (H, W, 3), got shape {gray.shape}")
        image = np.ascontiguousarray(gray, np.uint8)
    app = None
    if appearance:  # decode once: dense_sift takes the loaded grey image as it is
        image = gray_image(image, None if isinstance(image, np.ndarray) else 1024)
        height, width = image.shape
        r0, r1, c0, c1 = trim_box(image, int(trim)) if trim else (0, height, 0, width)
        app = appearance_descriptor(image[r0:r1, c0:c1], size=int(APPEARANCE["size"]),
                                    cell=int(APPEARANCE["cell"]))  # fmt: skip
    f = dense_sift(
        image,
        windows=tuple((6 * int(z), int(step)) for z, step in windows),
        grid="corner",
        angle=-1.0,
        load_max_side=1024,
        trim=int(trim),
        max_side=side,
        max_features=max_features,
        rootsift=rootsift,
        octaves=octaves,
    )
    return CategoryFeatures(
        descriptors=f.descriptors,
        xy=f.input_xy(),
        scale=None,
        angle=None,
        image_size=f.input_size,
        kind="category_dense",
        appearance=app,
        semantic=sem,
    )


def _semantic_of(image: Any) -> np.ndarray:
    """:func:`engine.cluster.semantic_embedding` of a path, bytes or array (the network's
    input is 224 pixels a side: a JPEG is decoded at a fraction of its size)."""
    from engine.io.imageio import load_image

    net = {"size": int(SEMANTIC["size"]), "model": str(SEMANTIC["model"])}
    if isinstance(image, np.ndarray):
        return semantic_embedding(np.asarray(image[..., :3] if image.ndim == 3 else image,
                                             np.uint8), **net)  # fmt: skip
    return semantic_embedding(load_image(image, max_side=4 * net["size"]), **net)


def category_extractor(data: bytes, **kwargs: Any) -> CategoryFeatures:
    """:func:`category_features` of an image file's bytes, as a module-level function that
    :func:`engine.index.ingest.extract_parallel` workers can call (``kwargs``: the
    channel's settings). Returns :class:`CategoryFeatures`."""
    return category_features(data, **kwargs)


def _settings_key(settings: dict[str, Any]) -> str:
    import json

    extra: dict[str, Any] = {}
    if settings.get("appearance"):  # the descriptor's own settings are part of the key
        extra = {"appearance_hog": [int(APPEARANCE["size"]), int(APPEARANCE["cell"])]}
    if settings.get("semantic"):
        extra["semantic_net"] = [str(SEMANTIC["model"]), int(SEMANTIC["size"])]
    return json.dumps(
        {"v": CATEGORY_FEATURES_VERSION, **{k: settings[k] for k in sorted(settings)},
         **extra},
        sort_keys=True, default=list,
    )  # fmt: skip


class CategoryChannel:
    """Dense categorisation features of a collection, computed lazily and cached.

    The index built by ``simile index`` holds sparse SIFT keypoints for retrieval; grouping
    works better on dense windows (:func:`category_features`). This channel computes them
    the first time a folder is grouped, in worker processes
    (:func:`engine.index.ingest.extract_parallel`), and keeps them in the index through the
    store's named arrays and key-value API, so indexing costs nothing extra.

    Storage: chunks of at most :data:`DENSE_CHUNK` images, each three arrays
    ``cluster.dense.<token>.{desc,xy,off}`` (descriptors as uint8 ``round(255 v)``, RootSIFT
    values lie in [0, 1]; xy float32; offsets (c+1,) int64), with the appearance channel a
    fourth, ``.app`` ((c, d) float32, one appearance descriptor per image, rows as the
    manifest's), with the semantic channel a fifth, ``.sem`` ((c, 1280) float32, one
    embedding per image), and a JSON manifest in the
    key-value table (``cluster.dense.manifest``) mapping every image's CONTENT HASH to
    ``(chunk, row, width, height)``. A chunk is written (atomically) before the manifest
    names it, so an interrupted run keeps every finished chunk and leaves a usable cache;
    unreferenced chunk files are deleted on the next update. Images are keyed by content,
    so renamed or moved photos are not recomputed; entries of images no longer in the
    collection are dropped and their chunks compacted once they are mostly dead.

    Parameters
    ----------
    store : engine.index.store.IndexStore
        The collection's store. Read-only stores work: missing features are then computed
        in memory and not kept.
    settings : dict, optional
        :func:`category_features` keyword arguments (default :data:`CATEGORY_FEATURES`).
    namespace : str
        Name of the cache in the index (``<namespace>.dense.*``): channels with different
        settings kept side by side (grouping uses ``"cluster"``, learned similarity
        ``"learn"``) never evict each other.
    appearance : bool, optional
        Also compute and keep every image's global appearance descriptor
        (:func:`category_features` ``appearance=True``; :meth:`appearance` reads them).
        Default: with the default ``settings`` (the grouping's channel), else as
        ``settings["appearance"]`` says (learned similarity's channel has none).
    semantic : bool, optional
        Also compute and keep every image's semantic embedding (:meth:`semantic` reads
        them); default as ``appearance``.
    """

    def __init__(
        self,
        store: Any,
        settings: dict[str, Any] | None = None,
        namespace: str = keys.DENSE_NAMESPACE,
        appearance: bool | None = None,
        semantic: bool | None = None,
    ) -> None:
        import json

        self.store = store
        self.settings = dict(CATEGORY_FEATURES if settings is None else settings)
        for name, on in (("appearance", appearance), ("semantic", semantic)):
            if on is None:
                on = settings is None or bool(self.settings.get(name, False))
            self.settings.pop(name, None)
            if on:
                self.settings[name] = True
        self.key = _settings_key(self.settings)
        # each namespace has its own cache (grouping: "cluster", learned similarity: "learn")
        self._prefix = keys.dense_array_prefix(namespace)
        self._kv = keys.dense_manifest_key(namespace)
        raw = store.get_kv(self._kv)
        man = None
        if raw:
            try:
                man = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            except ValueError:
                man = None
        if not man or man.get("key") != self.key:
            man = {"key": self.key, "chunks": {}, "items": {}}
        self.manifest: dict[str, Any] = man
        self._memory: dict[str, tuple[np.ndarray, np.ndarray, tuple[int, int]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # the global descriptors kept, by array suffix: computed in memory, loaded chunks
        self._globals = [g for g, (field, _, _) in _GLOBALS.items() if self.settings.get(field)]
        self._memory_glob: dict[str, dict[str, np.ndarray]] = {g: {} for g in _GLOBALS}
        self._glob_arrays: dict[str, dict[str, np.ndarray]] = {g: {} for g in _GLOBALS}

    @property
    def with_appearance(self) -> bool:
        """Whether this channel computes and keeps the appearance descriptors."""
        return "app" in self._globals

    @property
    def with_semantic(self) -> bool:
        """Whether this channel computes and keeps the semantic embeddings."""
        return "sem" in self._globals

    # -- bookkeeping --------------------------------------------------------------------------
    def has(self, content_hash: str) -> bool:
        return content_hash in self.manifest["items"] or content_hash in self._memory

    def _write_manifest(self) -> None:
        import json

        self.store.set_kv(self._kv, json.dumps(self.manifest, separators=(",", ":")))

    def _chunk_names(self, token: str) -> tuple[str, str, str]:
        base = f"{self._prefix}{token}"
        return base + ".desc", base + ".xy", base + ".off"

    def _save_chunk(self, feats: list[tuple[str, Any]]) -> None:
        """Write one chunk of ``(content_hash, Features)`` and name it in the manifest."""
        import secrets

        token = secrets.token_hex(6)
        descs = [np.asarray(f.descriptors, np.float32) for _, f in feats]
        off = np.concatenate([[0], np.cumsum([d.shape[0] for d in descs])]).astype(np.int64)
        D = np.concatenate(descs) if descs else np.zeros((0, 128), np.float32)
        q = np.clip(np.rint(D * 255.0), 0, 255).astype(np.uint8)
        xy = np.concatenate([np.asarray(f.xy, np.float32).reshape(-1, 2) for _, f in feats])
        n_desc, n_xy, n_off = self._chunk_names(token)
        self.store.save_array(n_desc, q)
        self.store.save_array(n_xy, xy)
        self.store.save_array(n_off, off)
        for g in self._globals:
            rows = global_descriptors([f for _, f in feats], _GLOBALS[g][0])
            self.store.save_array(f"{self._prefix}{token}.{g}", rows.astype(_GLOBALS[g][2]))
        self.manifest["chunks"][token] = len(feats)
        for row, (h, f) in enumerate(feats):
            self.manifest["items"][h] = [token, row, int(f.image_size[0]), int(f.image_size[1])]
        self._write_manifest()

    def _drop_chunk(self, token: str) -> None:
        for suffix in (".bins", *(f".{g}" for g in _GLOBALS)):
            name = f"{self._prefix}{token}{suffix}"
            if self.store.has_array(name):
                self.store.delete_array(name)
        for name in self._chunk_names(token):
            if self.store.has_array(name):
                self.store.delete_array(name)
        self.manifest.get("bins", {}).pop(token, None)
        self._arrays.pop(token, None)
        for arrays in self._glob_arrays.values():
            arrays.pop(token, None)

    def _collect_garbage(self, live: set[str]) -> None:
        """Forget images not in ``live`` (content hashes); compact mostly dead chunks;
        delete chunk files no manifest names (left by an interrupted run)."""
        items = self.manifest["items"]
        dead = [h for h in items if h not in live]
        for h in dead:
            del items[h]
        alive = np.zeros(0)
        if dead:
            per_chunk: dict[str, int] = {}
            for tok, _row, _w, _h in items.values():
                per_chunk[tok] = per_chunk.get(tok, 0) + 1
            alive = np.array([per_chunk.get(t, 0) for t in self.manifest["chunks"]])
            total = np.array(list(self.manifest["chunks"].values()))
            if total.sum() and alive.sum() < 0.5 * total.sum():  # compact everything
                keep = list(items)
                loaded = [(h, self.features(h)) for h in keep]
                old = list(self.manifest["chunks"])
                self.manifest["chunks"] = {}
                self.manifest["items"] = {}
                for s in range(0, len(loaded), DENSE_CHUNK):
                    self._save_chunk(loaded[s : s + DENSE_CHUNK])
                for tok in old:
                    self._drop_chunk(tok)
            else:
                for tok, a in zip(list(self.manifest["chunks"]), alive, strict=True):
                    if a == 0:
                        del self.manifest["chunks"][tok]
                        self._drop_chunk(tok)
            self._write_manifest()
        arrays = self.store.index_dir / "arrays"
        named = {f"{self._prefix}{t}" for t in self.manifest["chunks"]}
        for f in arrays.glob(self._prefix + "*.npy") if arrays.is_dir() else ():
            stem = f.name[: -len(".npy")]
            base = stem.rsplit(".", 1)[0]
            suffix = stem.rsplit(".", 1)[-1]
            if base not in named and suffix in ("desc", "xy", "off", "bins", *_GLOBALS):
                self.store.delete_array(stem)

    # -- computing ----------------------------------------------------------------------------
    def update_iter(
        self,
        items: Sequence[tuple[str, str | None]],
        *,
        jobs: int | None = None,
        cancel: Any = None,
    ) -> Generator[ClusterProgress, None, int]:
        """Compute the features of every ``(path, content_hash)`` not cached yet.

        Yields ``ClusterProgress("features", done, total)``; returns the number of images
        computed. Work is spread over ``jobs`` processes; ``cancel`` (threading.Event) or
        closing the generator stops it, keeping finished chunks. Images that cannot be
        read get an empty feature set (they still take part in the grouping).
        """
        from engine.index.ingest import extract_parallel

        writable = not getattr(self.store, "readonly", False)
        if writable:
            self._collect_garbage({h for _, h in items if h})
        todo = [(p, h) for p, h in items if not h or not self.has(h)]
        seen: set[str] = set()
        todo = [(p, h) for p, h in todo if not (h in seen or seen.add(h))]  # type: ignore[func-returns-value]
        total = len(todo)
        yield ClusterProgress("features", 0, total, "dense features for grouping")
        if not total:
            return 0
        want = {p: h for p, h in todo}
        pending: list[tuple[str, Any]] = []
        done = 0
        results = extract_parallel(
            [p for p, _ in todo], jobs=jobs, cancel=cancel, feature_kwargs=self.settings,
            extractor=category_extractor,
        )  # fmt: skip
        try:
            for r in results:
                h = want.get(r.path) or r.content_hash or r.path
                f = r.features
                if f is None:  # unreadable now: an empty set for this run, not cached
                    self._memory[h] = (np.zeros((0, 128), np.float32),
                                       np.zeros((0, 2), np.float32), (0, 0))  # fmt: skip
                    for g in _GLOBALS:
                        self._memory_glob[g][h] = _global_of(g, None)
                elif writable:
                    pending.append((h, f))
                    if len(pending) >= DENSE_CHUNK:
                        self._save_chunk(pending)
                        pending = []
                else:
                    self._memory[h] = (f.descriptors, f.xy, f.image_size)
                    for g in self._globals:
                        self._memory_glob[g][h] = _global_of(g, f)
                done += 1
                yield ClusterProgress("features", done, total, "dense features for grouping")
        finally:
            if pending:
                self._save_chunk(pending)
            close = getattr(results, "close", None)
            if close is not None:
                close()
        return done

    # -- reading ------------------------------------------------------------------------------
    def _chunk(self, token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if token not in self._arrays:
            n_desc, n_xy, n_off = self._chunk_names(token)
            self._arrays[token] = (
                self.store.load_array(n_desc, mmap=True),
                self.store.load_array(n_xy, mmap=True),
                np.asarray(self.store.load_array(n_off, mmap=False), np.int64),
            )
        return self._arrays[token]

    def raw(self, content_hash: str) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """``(descriptors (m, 128) uint8 or float32, xy (m, 2) float32, (w, h))`` of one
        image (KeyError if it has not been computed)."""
        if content_hash in self._memory:
            d, xy, size = self._memory[content_hash]
            return d, xy, size
        tok, row, w, h = self.manifest["items"][content_hash]
        D, XY, off = self._chunk(tok)
        return D[off[row] : off[row + 1]], XY[off[row] : off[row + 1]], (int(w), int(h))

    def bins(
        self, hashes: Sequence[str], tree: Any, vocab_token: str, levels: int
    ) -> Generator[ClusterProgress, None, list[np.ndarray]]:
        """(m_i, levels) int64 bins of every image of ``hashes`` under ``tree``, finest
        first. Bins are cached per chunk (``cluster.dense.<token>.bins``, uint16/int32)
        and tagged with ``vocab_token``: a refitted vocabulary recomputes them, a chunk is
        assigned in one call. Yields ``ClusterProgress("bins", chunks done, chunks)``."""
        items = self.manifest["items"]
        tags = self.manifest.setdefault("bins", {})
        need = sorted({items[h][0] for h in hashes if h in items})
        writable = not getattr(self.store, "readonly", False)
        per_chunk: dict[str, np.ndarray] = {}
        dirty = False
        for done, tok in enumerate(need, 1):
            name = f"{self._prefix}{tok}.bins"
            B = None
            if vocab_token and tags.get(tok) == vocab_token and self.store.has_array(name):
                B = np.asarray(self.store.load_array(name, mmap=False))
                if B.ndim != 2 or B.shape[1] != levels:
                    B = None
            if B is None:
                D = self._chunk(tok)[0]
                B = (tree.assign(as_float(np.asarray(D)))[0][:, :levels] if D.shape[0]
                     else np.zeros((0, levels), np.int64))  # fmt: skip
                B = B.astype(np.uint16 if B.size == 0 or B.max() < 65535 else np.int32)
                if writable and vocab_token:
                    self.store.save_array(name, B)
                    tags[tok] = vocab_token
                    dirty = True
            per_chunk[tok] = B
            yield ClusterProgress("bins", done, len(need), "visual words")
        if dirty:
            self._write_manifest()
        out = []
        for h in hashes:
            if h in self._memory:
                d = self._memory[h][0]
                out.append(tree.assign(as_float(d))[0][:, :levels] if d.shape[0]
                           else np.zeros((0, levels), np.int64))  # fmt: skip
                continue
            tok, row, _w, _h = items[h]
            off = self._chunk(tok)[2]
            out.append(per_chunk[tok][off[row] : off[row + 1]].astype(np.int64))
        return out

    def appearance(self, hashes: Sequence[str]) -> np.ndarray | None:
        """(n, d) float32 appearance descriptors of the images of ``hashes``, or None when
        the channel keeps none (``appearance=False``). KeyError if one is not computed."""
        return self._global_matrix("app", hashes)

    def semantic(self, hashes: Sequence[str]) -> np.ndarray | None:
        """(n, 1280) float32 semantic embeddings of the images of ``hashes``, or None when
        the channel keeps none (``semantic=False``). KeyError if one is not computed."""
        return self._global_matrix("sem", hashes)

    def _global_matrix(self, g: str, hashes: Sequence[str]) -> np.ndarray | None:
        if g not in self._globals:
            return None
        rows = [self._global_row(g, h) for h in hashes]
        if not rows:
            return np.zeros((0, _GLOBALS[g][1]), np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def _global_row(self, g: str, content_hash: str) -> np.ndarray:
        if content_hash in self._memory_glob[g]:
            return self._memory_glob[g][content_hash]
        tok, row, _w, _h = self.manifest["items"][content_hash]
        loaded = self._glob_arrays[g]
        if tok not in loaded:
            name = f"{self._prefix}{tok}.{g}"
            if not self.store.has_array(name):
                raise KeyError(f"{content_hash}: no {_GLOBALS[g][0]} descriptor in chunk {tok}")
            loaded[tok] = np.asarray(self.store.load_array(name, mmap=False))
        return np.asarray(loaded[tok][row], np.float32)

    def features(self, content_hash: str) -> CategoryFeatures:
        """:class:`CategoryFeatures` of one image (float32 descriptors; its appearance
        descriptor and semantic embedding when the channel keeps them)."""
        d, xy, size = self.raw(content_hash)
        glob = {_GLOBALS[g][0]: self._global_row(g, content_hash) for g in self._globals}
        return CategoryFeatures(as_float(d), np.asarray(xy, np.float32), None, None, size,
                                "category_dense", **glob)  # fmt: skip


def _global_of(g: str, f: Any) -> np.ndarray:
    """The global descriptor ``g`` (a suffix of :data:`_GLOBALS`) of features ``f``, float32;
    zeros for an unreadable image (``f`` None) or one computed without it."""
    field, dim, _ = _GLOBALS[g]
    a = getattr(f, field, None)
    return np.zeros(dim, np.float32) if a is None else np.asarray(a, np.float32).reshape(-1)


def global_descriptors(feats: Sequence[Any], field: str) -> np.ndarray:
    """(q, d) float32 global descriptors ``field`` (``"appearance"`` or ``"semantic"``) of
    :class:`CategoryFeatures` ``feats``; zeros for one computed without it."""
    g = next(g for g, (name, _, _) in _GLOBALS.items() if name == field)
    if not feats:
        return np.zeros((0, _GLOBALS[g][1]), np.float32)
    return np.stack([_global_of(g, f) for f in feats])


def as_float(d: np.ndarray) -> np.ndarray:
    """uint8-quantised descriptors back to float32 (``v / 255``); float input unchanged.

    Parameters
    ----------
    d : (m, 128) uint8 or float
        Descriptors as :meth:`CategoryChannel.raw` returns them.

    Returns
    -------
    (m, 128) float32
    """
    if d.dtype == np.uint8:
        return d.astype(np.float32) * np.float32(1.0 / 255.0)
    return np.asarray(d, np.float32)


def collection_rows(collection: Any) -> tuple[list[Any], list[str]]:
    """The collection's usable images in row order and their keys in the channel.

    Returns
    -------
    paths : list of Path
        ``collection.store.records("ok")`` (the row order of ``Collection.paths()``).
    hashes : list of str
        Content hash of every image, or ``"path:<path>:<size>:<mtime_ns>"`` when the
        index holds none.
    """
    from pathlib import Path

    recs = collection.store.records("ok")
    paths = [Path(r.path) for r in recs]
    hashes = [r.content_hash or f"path:{r.path}:{r.size}:{r.mtime_ns}" for r in recs]
    return paths, hashes


def hash_of(collection: Any, path: Any) -> str:
    """Key in the channel of one indexed image (as :func:`collection_rows`).

    Raises
    ------
    KeyError
        ``path`` is not a usable indexed image.
    """
    import os

    rec = collection.store.record(os.path.abspath(os.fspath(path)))
    if rec is None or rec.status != "ok":
        raise KeyError(f"{path} is not an indexed image")
    return rec.content_hash or f"path:{rec.path}:{rec.size}:{rec.mtime_ns}"


def vocab_sample(channel: CategoryChannel, hashes: Sequence[str], size: int, seed: int):
    """Up to ``size`` descriptors drawn evenly from the images (float32).

    Images are visited in content-hash order, so the sample (and the vocabulary fitted on
    it) does not depend on the order in which an index's workers happened to finish.

    Parameters
    ----------
    channel : CategoryChannel
        Holds the features of every image of ``hashes``.
    hashes : sequence of str
        Channel keys of the images to sample.
    size : int
        Expected sample size: each image contributes a binomial share of its descriptors.
    seed : int

    Returns
    -------
    (s, 128) float32
    """
    rng = np.random.default_rng(seed)
    hashes = sorted(hashes)
    counts = np.array([channel.raw(h)[0].shape[0] for h in hashes], np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros((0, 128), np.float32)
    frac = min(1.0, size / total)
    parts = []
    for h, c in zip(hashes, counts.tolist(), strict=True):
        if c == 0:
            continue
        take = int(rng.binomial(c, frac)) if frac < 1 else c
        if take:
            d = channel.raw(h)[0]
            parts.append(as_float(np.asarray(d[np.sort(rng.choice(c, take, replace=False))])))
    return np.concatenate(parts) if parts else np.zeros((0, 128), np.float32)
