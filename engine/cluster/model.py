"""A collection's categorisation model: dense channel, vocabulary and binned sets.

:func:`category_model_iter` brings the dense channel up to date, fits (or reloads) the
grouping vocabulary stored in the index and bins every image's features; the result,
:class:`CategoryModel`, is what :func:`engine.cluster.categorize_iter` groups, on the
affinities :meth:`CategoryModel.kernel` (pyramid match of the binned sets mixed with the
global appearance kernel, :mod:`engine.cluster.appearance`, and the semantic kernel,
:mod:`engine.cluster.semantic`). The other
functions place single images with the stored vocabulary: their features
(:func:`category_features_of`), kernel rows against indexed images
(:func:`category_kernel_rows`, for the classifier) and feature masks (:func:`category_mask`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cluster.appearance import APPEARANCE, appearance_kernel, combine_kernels
from engine.cluster.binned import bin_correspondences, binned_pyramid_kernel
from engine.cluster.channel import (
    CategoryChannel,
    as_float,
    category_features,
    collection_rows,
    global_descriptors,
    hash_of,
    vocab_sample,
)
from engine.cluster.results import ClusterProgress
from engine.cluster.semantic import mix_semantic, semantic_kernel
from engine.index import keys

__all__ = [
    "CATEGORY_VOCAB",
    "VOCAB_REFIT_GROWTH",
    "CategoryModel",
    "category_features_of",
    "category_kernel_rows",
    "category_mask",
    "category_model_iter",
    "mix_appearance",
    "mix_globals",
]


#: Vocabulary of the categorisation kernel: branching and levels below the root.
CATEGORY_VOCAB = {"branching": 10, "levels": 3, "sample": 60_000}
#: Refit the categorisation vocabulary when the collection has grown this many times.
VOCAB_REFIT_GROWTH = 4.0

# the fitted vocabulary in the index: the tree's state plus these entries
_VOCAB_STATE = keys.DENSE_VOCAB_STATE
_VOCAB_EXTRA = ("settings_key", "n_fit", "token")


@dataclass
class CategoryModel:
    """What the pipeline needs to place images: the channel, the vocabulary and binned sets.

    Attributes
    ----------
    channel : CategoryChannel
    tree : engine.kernels.vocabulary.VocabularyTree
        Hierarchical k-means vocabulary fitted on the collection's dense features.
    paths : list of Path
        The collection's usable images (= ``Collection.paths()``).
    hashes : list of str
        Their content hashes (keys into ``channel``).
    bins : list of (m_i, L) int64
        Bin ids per feature, finest level first (the root level is left out).
    appearance : (n, d) float32 or None
        Global appearance descriptor of every image (None: the channel keeps none, and
        the affinities are the pyramid match alone).
    semantic : (n, 1280) float32 or None
        Semantic embedding of every image (:mod:`engine.cluster.semantic`; None: the
        channel keeps none, and the affinities leave it out).
    """

    channel: CategoryChannel
    tree: Any
    paths: list[Any]
    hashes: list[str]
    bins: list[np.ndarray]
    appearance: np.ndarray | None = None
    semantic: np.ndarray | None = None

    def kernel(
        self, rows: Sequence[int] | None = None, columns: Sequence[int] | None = None
    ) -> np.ndarray:
        """The grouping's affinities among the collection's images (unit diagonal): the
        second of :meth:`kernels`."""
        return self.kernels(rows, columns)[1]

    def kernels(
        self, rows: Sequence[int] | None = None, columns: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The pyramid match alone and the grouping's affinities (both unit diagonal).

        The normalised vocabulary-guided pyramid match of the binned sets
        (:func:`binned_pyramid_kernel`) mixed with the appearance kernel
        (:func:`engine.cluster.combine_kernels` with ``APPEARANCE["weight"]`` and
        ``APPEARANCE["gamma"]``) when the model has appearance descriptors, then with the
        semantic kernel (:func:`engine.cluster.semantic.mix_semantic`,
        ``SEMANTIC["weight"]``) when it has semantic embeddings.

        Parameters
        ----------
        rows, columns : sequence of int, optional
            Row indices of ``paths`` (default all): e.g. every image against landmarks
            (``columns``), or training and new images against the training ones.

        Returns
        -------
        pyramid_match, affinities : (len(rows), len(columns)) float64
            The normalised pyramid match and its mix with the appearance kernel (the same
            array when the model has no appearance descriptors). The grouping cuts the
            affinities and reads the number of groups from them too (the mean eigengap
            of several nearest-neighbour graphs,
            :data:`engine.cluster.pipeline.K_GRAPH_SIZES`); only in Nystrom mode from
            the pyramid match alone (see :mod:`engine.cluster.appearance`).
        """
        n = len(self.bins)
        r = np.arange(n) if rows is None else np.asarray(rows, np.int64).reshape(-1)
        c = np.arange(n) if columns is None else np.asarray(columns, np.int64).reshape(-1)
        if rows is None:
            K = binned_pyramid_kernel(self.bins, columns=None if columns is None else c)
        else:  # (each image once, also where rows and columns share images: a split)
            both, inverse = np.unique(np.concatenate([r, c]), return_inverse=True)
            K = binned_pyramid_kernel([self.bins[int(i)] for i in both],
                                      columns=inverse[r.size :])[inverse[: r.size]]  # fmt: skip
        square = rows is None and columns is None  # (None: the rows' own, unit diagonal)
        app = None if self.appearance is None else (self.appearance[r], self.appearance[c])
        sem = None
        if self.semantic is not None:
            sem = (self.semantic[r], None if square else self.semantic[c])
        return K, mix_globals(K, app, sem)

    def bin_features(self, descriptors: np.ndarray) -> np.ndarray:
        """(m, L) int64 bins of new descriptors (e.g. an image to classify)."""
        d = as_float(np.asarray(descriptors))
        levels = int(CATEGORY_VOCAB["levels"])
        if d.shape[0] == 0:
            return np.zeros((0, levels), np.int64)
        return self.tree.assign(d)[0][:, :levels]

    def kernel_rows(
        self,
        bins: Sequence[np.ndarray],
        columns: np.ndarray,
        appearance: np.ndarray | None = None,
        semantic: np.ndarray | None = None,
    ) -> np.ndarray:
        """Affinities (q, len(columns)) of new images against the collection images
        ``columns`` (row indices), as :meth:`kernel`.

        Parameters
        ----------
        bins : sequence of (m_i, L) int64
            The new images' binned sets (:meth:`bin_features`).
        columns : (t,) int
        appearance : (q, d) float, optional
            The new images' appearance descriptors; needed when the model has them
            (``ValueError`` otherwise), ignored when it has none.
        semantic : (q, 1280) float, optional
            The new images' semantic embeddings; likewise.
        """
        cols = np.asarray(columns, np.int64)
        sets = list(bins) + [self.bins[int(c)] for c in cols]
        K = binned_pyramid_kernel(sets, columns=np.arange(len(bins), len(sets)))
        K = K[: len(bins)]
        pairs = []
        for name, kept, new in (("appearance descriptors", self.appearance, appearance),
                                ("semantic embeddings", self.semantic, semantic)):  # fmt: skip
            if kept is not None and new is None:
                raise ValueError(f"the model has {name}: pass the new images'")
            pairs.append(None if kept is None else
                         (np.asarray(new).reshape(len(bins), -1), kept[cols]))  # fmt: skip
        return mix_globals(K, *pairs)


def category_model_iter(
    collection: Any,
    *,
    jobs: int | None = None,
    cancel: Any = None,
    random_state: int = 0,
) -> Generator[ClusterProgress, None, CategoryModel]:
    """Dense channel (computed for new images), vocabulary (fitted once, refitted when the
    collection has grown :data:`VOCAB_REFIT_GROWTH` times) and binned sets of a collection.

    Yields ``ClusterProgress`` with stages ``"features"``, ``"vocabulary"``, ``"bins"``.
    """
    import secrets

    from engine.kernels.vocabulary import VocabularyTree

    store = collection.store
    channel = CategoryChannel(store)
    vocab_token = ""
    paths, hashes = collection_rows(collection)
    yield from channel.update_iter(list(zip((str(p) for p in paths), hashes, strict=True)),
                                   jobs=jobs, cancel=cancel)  # fmt: skip
    if cancel is not None and cancel.is_set():
        raise InterruptedError("cancelled")
    missing = [h for h in hashes if not channel.has(h)]
    if missing:
        raise RuntimeError(f"{len(missing)} image(s) have no dense features (interrupted?)")
    n = len(paths)
    b, levels = int(CATEGORY_VOCAB["branching"]), int(CATEGORY_VOCAB["levels"])
    tree = None
    writable = not getattr(store, "readonly", False)
    if store.has_state(_VOCAB_STATE):
        try:
            st = store.load_state(_VOCAB_STATE)
            if str(st.get("settings_key")) == channel.key and (
                n <= VOCAB_REFIT_GROWTH * max(int(st["n_fit"]), 1)
            ):
                tree = VocabularyTree.from_state(
                    {k: v for k, v in st.items() if k not in _VOCAB_EXTRA}
                )
                vocab_token = str(st.get("token", ""))
                if not vocab_token and writable:  # tag it, so bins can be cached
                    vocab_token = secrets.token_hex(6)
                    store.save_state(_VOCAB_STATE, {**st, "token": vocab_token})
        except (KeyError, ValueError):
            tree = None
    if tree is None:
        yield ClusterProgress("vocabulary", 0, 1, "fitting the grouping vocabulary")
        sample = vocab_sample(channel, hashes, int(CATEGORY_VOCAB["sample"]), random_state)
        if sample.shape[0] < b:
            raise ValueError("too few features in the collection to group its photos")
        tree = VocabularyTree(b, levels + 1, random_state=random_state).fit(sample)
        vocab_token = secrets.token_hex(6)
        if writable:
            store.save_state(_VOCAB_STATE, {**tree.to_state(), "settings_key": channel.key,
                                            "n_fit": n, "token": vocab_token})  # fmt: skip
        yield ClusterProgress("vocabulary", 1, 1, "fitting the grouping vocabulary")
    bins = yield from channel.bins(hashes, tree, vocab_token, levels)
    return CategoryModel(
        channel, tree, paths, hashes, bins, channel.appearance(hashes), channel.semantic(hashes)
    )


def _load_tree(store: Any, channel: CategoryChannel):
    """The stored categorisation vocabulary (KeyError when the folder was never grouped
    with the current feature settings)."""
    from engine.kernels.vocabulary import VocabularyTree

    st = store.load_state(_VOCAB_STATE)
    if str(st.get("settings_key")) != channel.key:
        raise KeyError(_VOCAB_STATE)
    return VocabularyTree.from_state({k: v for k, v in st.items() if k not in _VOCAB_EXTRA})


def _channel_binner(collection: Any) -> tuple[CategoryChannel, Any]:
    """The collection's dense channel and a function mapping its descriptors ``(m, 128)``
    to their vocabulary-tree bins ``(m, levels) int64`` (the stored tree)."""
    channel = CategoryChannel(collection.store)
    tree = _load_tree(collection.store, channel)
    levels = int(CATEGORY_VOCAB["levels"])

    def binned(d: np.ndarray) -> np.ndarray:
        d = as_float(np.asarray(d))
        return tree.assign(d)[0][:, :levels] if d.shape[0] else np.zeros((0, levels), np.int64)

    return channel, binned


def category_features_of(collection: Any, path: Any):
    """The cached dense categorisation features of an indexed image (the features the
    masks of :func:`categorize_iter` refer to); computed on the fly when not cached."""
    channel = CategoryChannel(collection.store)
    h = hash_of(collection, path)
    if channel.has(h):
        return channel.features(h)
    return category_features(path, **channel.settings)


def category_kernel_rows(
    collection: Any, images: Sequence[Any], columns: Sequence[Any]
) -> np.ndarray:
    """Affinities (q, t) between new images and indexed ones as the grouping computes them
    (:meth:`CategoryModel.kernel`: normalised pyramid match on the dense categorisation
    channel and the vocabulary stored by :func:`categorize_iter`, mixed with the
    appearance kernel), for :meth:`engine.cluster.classify.CategoryClassifier.predict`.

    Parameters
    ----------
    images : sequence of paths, bytes or arrays
        Images to place (inside or outside the collection).
    columns : sequence of paths
        Indexed images (e.g. the classifier's prototypes) whose dense features are cached.

    Raises
    ------
    KeyError
        The folder has not been grouped with the current settings (no vocabulary), or a
        column image is not cached.
    engine.io.imageio.ImageLoadError
        An image cannot be read.
    """
    channel, binned = _channel_binner(collection)

    feats = [category_features(img, **channel.settings) for img in images]
    q = [binned(f.descriptors) for f in feats]
    col_hashes = [hash_of(collection, p) for p in columns]
    cols = [binned(channel.raw(h)[0]) for h in col_hashes]
    K = binned_pyramid_kernel(q + cols, columns=np.arange(len(q), len(q) + len(cols)))
    K = K[: len(q)]
    pairs = []
    for name, cols_desc in (("appearance", channel.appearance(col_hashes)),
                            ("semantic", channel.semantic(col_hashes))):  # fmt: skip
        pairs.append(None if cols_desc is None else
                     (global_descriptors(feats, name), cols_desc))  # fmt: skip
    return mix_globals(K, *pairs)


def mix_globals(
    K: np.ndarray,
    appearance: tuple[np.ndarray, np.ndarray | None] | None,
    semantic: tuple[np.ndarray, np.ndarray | None] | None,
) -> np.ndarray:
    """The grouping's affinities (r, c) float64 from the pyramid match ``K`` (r, c): mixed
    with the appearance kernel (:func:`mix_appearance`), then with the semantic kernel
    (:func:`engine.cluster.semantic.mix_semantic`). Each of ``appearance`` and ``semantic``
    is (the rows' descriptors, the columns' or None for the rows' own square kernel), or
    None when the channel keeps none."""
    M = K if appearance is None else mix_appearance(K, *appearance)
    return M if semantic is None else mix_semantic(M, semantic_kernel(*semantic))


def mix_appearance(
    K: np.ndarray, app_rows: np.ndarray, app_cols: np.ndarray | None = None
) -> np.ndarray:
    """The pyramid match ``K`` (r, c) -- or another kernel of unit diagonal, the Fisher view
    (:func:`engine.cluster.fisher.fisher_view`) -- mixed with the appearance kernel of the
    rows' and the columns' descriptors (:func:`engine.cluster.combine_kernels`,
    :data:`APPEARANCE`; ``app_cols`` None: the rows' square kernel, unit diagonal)."""
    A = appearance_kernel(app_rows, app_cols, gamma=float(APPEARANCE["gamma"]))
    return combine_kernels(K, A, weight=float(APPEARANCE["weight"]))


def category_mask(
    collection: Any, path: Any, partners: Sequence[Any], *, max_partners: int = 8
) -> tuple[Any, np.ndarray]:
    """Feature mask of one image within its group, on the dense categorisation channel
    (thesis Sec. 9.3, as :func:`refine_with_masks` with ``indicator="weight"``).

    For each partner q the correspondence weights of the image's features in the
    pyramid match with q (:func:`bin_correspondences`) form an indicator vector; the mask is
    their median over at most ``max_partners`` partners, scaled to max 1.

    Returns
    -------
    features : engine.features.Features
        The image's dense features (``xy`` in pixels of the image loaded at 1024 px).
    mask : (m,) float32 in [0, 1]
    """
    _, binned = _channel_binner(collection)

    feats = category_features_of(collection, path)
    bi = binned(feats.descriptors)
    others = [q for q in partners if str(q) != str(path)][:max_partners]
    ind = np.zeros((max(len(others), 1), len(feats)), np.float32)
    for row, q in enumerate(others):
        r = bin_correspondences(bi, binned(category_features_of(collection, q).descriptors))
        ind[row, r.pairs[:, 0]] = r.weight
    mask = np.median(ind, axis=0).astype(np.float32) if others else ind[0]
    if mask.size and mask.max() > 0:
        mask /= mask.max()
    return feats, mask
