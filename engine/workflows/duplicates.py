"""Near-duplicate groups of a collection: the same picture resized, recompressed,
retouched, cropped a little.

For each image, its ``DUPLICATE_NEIGHBOURS`` best ``vocabulary`` neighbours (exhaustive up
to ``EXHAUSTIVE_LIMIT`` images, else among the candidates of the banded WTA index,
:func:`engine.index.candidates.candidate_rows`) are verified geometrically (ratio-test
correspondences + robust homography, :func:`engine.index.verify.verify_pair`). The
near-duplicate score of a pair is the fraction of the smaller image's features that are
geometric inliers; pairs scoring at least the threshold are linked, as are byte-identical
files (score 1). Groups are the connected components (union-find).

Which copy of a group to keep is suggested by :func:`suggest_keeper` (the app's
Duplicates view and ``simile duplicates`` both ask it): the copy with the most pixels
(every copy within :data:`KEEPER_PIXEL_TOLERANCE` of the most counts as "most"), among
those the sharpest (:func:`sharpness`, compared at :data:`KEEPER_SIDE` pixels).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from engine.core.blas import single_threaded_blas
from engine.index import candidates
from engine.index.threads import thread_map
from engine.index.verify import VERIFY_MIN_INLIERS, verify_pair

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.encode import EncodedImages
    from engine.index.searcher import Searcher
    from engine.index.store import IndexStore

__all__ = [
    "DUPLICATE_BLOCK",
    "DUPLICATE_CACHE",
    "DUPLICATE_NEIGHBOURS",
    "KEEPER_PIXEL_TOLERANCE",
    "KEEPER_SIDE",
    "CopyStats",
    "DuplicateGroup",
    "Keeper",
    "best_copy",
    "copy_stats",
    "find_duplicates",
    "sharpness",
    "suggest_keeper",
]

DUPLICATE_NEIGHBOURS = 10
DUPLICATE_BLOCK = 256  # pairs checked side by side
DUPLICATE_CACHE = 1024  # images' features kept (~250 MB at 500 128-D features)
#: Longest side (pixels) the copies of a group are loaded at to compare their sharpness.
KEEPER_SIDE = 768
#: Copies with at least this fraction of the most pixels count as "highest resolution".
KEEPER_PIXEL_TOLERANCE = 0.95


@dataclass(frozen=True)
class DuplicateGroup:
    """Near-duplicate images.

    Attributes
    ----------
    paths : list of Path
        The first is the group's representative (the image most similar to the others).
    scores : list of float
        Similarity of each path to the representative (1.0 for itself); byte-identical
        files score 1.0.
    """

    paths: list[Path]
    scores: list[float]


def find_duplicates(searcher: Searcher, threshold: float = 0.3) -> list[DuplicateGroup]:
    """Groups of near-duplicate images of a collection (see the module docstring).

    Parameters
    ----------
    searcher : Searcher
        The collection's search data.
    threshold : float
        In (0, 1]. 0.3 accepts rescaled / recompressed copies; different photos of
        the same object usually score below 0.2.

    Returns
    -------
    list of DuplicateGroup
        Largest groups first; in a group the representative (most links) comes first
        with score 1.0, the others with their best link score.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    _, data = searcher.ensure()
    paths = searcher.row_paths
    link: dict[tuple[int, int], float] = {}
    row_of_path = {str(p): r for r, p in enumerate(paths)}
    for group in searcher.store.duplicate_files():
        rs = sorted(row_of_path[p] for p in group if p in row_of_path)
        for r in rs[1:]:
            link[(rs[0], r)] = 1.0
    todo = [pair for pair in sorted(_neighbour_pairs(searcher, data)) if pair not in link]
    _link_verified(searcher.store, data, todo, threshold, link)
    return _groups(link, len(data.ids), paths)


def _neighbour_pairs(searcher: Searcher, data: EncodedImages) -> set[tuple[int, int]]:
    """(i, j), i < j, of every row and its ``DUPLICATE_NEIGHBOURS`` best ``vocabulary``
    neighbours."""
    n = len(data.ids)
    k_nb = min(n, DUPLICATE_NEIGHBOURS + 1)
    pairs: set[tuple[int, int]] = set()
    for i in range(n):
        k, v = data.vocab.row(i)
        rows = None
        if n > candidates.EXHAUSTIVE_LIMIT:
            # (the banded WTA index reads only the query's codes: no subset of the
            # whole search data per image)
            q = SimpleNamespace(wta=data.wta[i : i + 1])
            rows = searcher.candidates("wta", q, data, candidates.MIN_CANDIDATES)
        s = data.vocab.score(k, v, rows)
        allr = np.arange(n) if rows is None else rows
        best = allr[np.argsort(-s, kind="stable")[:k_nb]]
        pairs.update((min(i, int(j)), max(i, int(j))) for j in best if j != i)
    return pairs


def _link_verified(
    store: IndexStore,
    data: EncodedImages,
    todo: list[tuple[int, int]],
    threshold: float,
    link: dict[tuple[int, int], float],
) -> None:
    """Add to ``link`` the pairs of rows ``todo`` whose geometric check scores at least
    ``threshold`` (with at least ``VERIFY_MIN_INLIERS`` inliers), in ``todo`` order."""

    # features are read on this thread, a block of pairs at a time, through a bounded
    # cache (the pairs are sorted by their first image; 10,000 images' features would
    # be 2.5 GB), and each block's checks run side by side (BLAS product and OpenCV
    # fit without the GIL, one BLAS thread each)
    @functools.lru_cache(maxsize=DUPLICATE_CACHE)
    def feats(r: int) -> Features:
        return store.get_features(int(data.ids[r]))

    def check(job: tuple[int, int, Features, Features]) -> tuple[int, int, float] | None:
        i, j, fa, fb = job
        v = verify_pair(fa.descriptors, fa.xy, fb.descriptors, fb.xy, image_size=fb.image_size)
        score = v.n_inliers / min(len(fa), len(fb))
        if v.n_inliers >= VERIFY_MIN_INLIERS and score >= threshold:
            return i, j, min(1.0, score)
        return None

    with single_threaded_blas():
        for s0 in range(0, len(todo), DUPLICATE_BLOCK):
            jobs = []
            for i, j in todo[s0 : s0 + DUPLICATE_BLOCK]:
                fa, fb = feats(i), feats(j)
                if min(len(fa), len(fb)) >= 4:
                    jobs.append((i, j, fa, fb))
            for hit in thread_map(check, jobs):
                if hit is not None:
                    link[hit[:2]] = hit[2]


def _groups(link: dict[tuple[int, int], float], n: int, paths: list[Path]) -> list[DuplicateGroup]:
    """The connected components of the linked rows (union-find), as groups: the
    representative (most links, then lowest row) first, the others by best link score."""
    parent = np.arange(n)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    for i, j in link:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    roots = np.array([find(r) for r in range(n)], dtype=np.int64)
    out = []
    for root in np.flatnonzero(np.bincount(roots, minlength=n) > 1):
        members = np.flatnonzero(roots == root).tolist()
        degree = {m: 0 for m in members}
        best = {m: 0.0 for m in members}
        for (i, j), sc in link.items():
            if i in degree:
                degree[i] += 1
                degree[j] += 1
                best[i] = max(best[i], sc)
                best[j] = max(best[j], sc)
        rep = max(members, key=lambda m: (degree[m], -m))
        rest = sorted((m for m in members if m != rep), key=lambda m: (-best[m], m))
        out.append(
            DuplicateGroup(
                [paths[rep]] + [paths[m] for m in rest],
                [1.0] + [float(best[m]) for m in rest],
            )
        )
    out.sort(key=lambda g: (-len(g.paths), str(g.paths[0])))
    return out


# --------------------------------------------------------------------------- best copy
def sharpness(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of a gray image (higher = sharper).

    Computed on images resized to the same longest side (:data:`KEEPER_SIDE`), so values
    are comparable between copies of one photo.

    Parameters
    ----------
    gray : (H, W) array
        Gray levels (any real dtype; computed in float32).

    Returns
    -------
    float
        ``var(4 g[y, x] - g[y-1, x] - g[y+1, x] - g[y, x-1] - g[y, x+1])`` over the
        interior pixels; 0.0 for an image not 2-D or under 3 pixels on a side.
    """
    g = np.asarray(gray, dtype=np.float32)
    if g.ndim != 2 or min(g.shape) < 3:
        return 0.0
    lap = 4.0 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    return float(lap.var())


@dataclass(frozen=True)
class CopyStats:
    """What the choice of the copy to keep looks at.

    Attributes
    ----------
    path : str
    width, height : int
        Size of the image as displayed (from its header); 0 when unreadable.
    file_size : int
        Bytes on disk; 0 when unreadable.
    sharpness : float
        :func:`sharpness` of the copy loaded at :data:`KEEPER_SIDE` pixels.
    error : str or None
        Why the copy could not be read (it is then never suggested).
    """

    path: str
    width: int
    height: int
    file_size: int
    sharpness: float
    error: str | None = None

    @property
    def pixels(self) -> int:
        """``width * height``."""
        return self.width * self.height


def copy_stats(
    path: str | os.PathLike, max_side: int = KEEPER_SIDE
) -> tuple[CopyStats, np.ndarray | None]:
    """Size, resolution and sharpness of one copy, and the pixels they were measured on.

    Parameters
    ----------
    path : str or os.PathLike
    max_side : int
        Longest side the image is loaded at for :func:`sharpness`.

    Returns
    -------
    stats : CopyStats
        With ``error`` set (and zeros) when the copy cannot be read: one broken copy never
        hides the others.
    image : (H, W, 3) uint8 or None
        The copy loaded at ``max_side`` (for display), None when unreadable.
    """
    from engine.io.imageio import image_size, load_image

    p = str(path)
    try:
        w, h = image_size(p)
        img = load_image(p, max_side=max_side)
        gray = img.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
        return CopyStats(p, int(w), int(h), os.path.getsize(p), sharpness(gray)), img
    except Exception as exc:  # one broken copy must not hide the others
        return CopyStats(p, 0, 0, 0, 0.0, str(exc)), None


def best_copy(stats: Sequence[CopyStats]) -> int:
    """Index of the copy to keep: most pixels first (within 5 %), then sharpest.

    Parameters
    ----------
    stats : sequence of CopyStats
        The copies of one group (:func:`copy_stats`).

    Returns
    -------
    int
        Index into ``stats``: among the readable copies with at least
        :data:`KEEPER_PIXEL_TOLERANCE` times the most pixels, the sharpest (ties: more
        pixels, then the first); -1 when no copy is readable.
    """
    ok = [i for i, c in enumerate(stats) if c.error is None]
    if not ok:
        return -1
    most = max(stats[i].pixels for i in ok)
    near = [i for i in ok if stats[i].pixels >= KEEPER_PIXEL_TOLERANCE * most]
    return max(near, key=lambda i: (stats[i].sharpness, stats[i].pixels))


@dataclass(frozen=True)
class Keeper:
    """The copy of a duplicate group suggested to keep.

    Attributes
    ----------
    index : int
        Its position in the group.
    path : str
    reason : str
        Why this one, for people (``"highest resolution (4000x3000)"``, ...).
    """

    index: int
    path: str
    reason: str


def suggest_keeper(
    paths: Sequence[str | os.PathLike], stats: Sequence[CopyStats] | None = None
) -> Keeper | None:
    """The copy of a duplicate group to keep (:func:`best_copy`), with the reason.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The copies (e.g. ``DuplicateGroup.paths``).
    stats : sequence of CopyStats, optional
        Their :func:`copy_stats` when already measured (same order); measured here
        otherwise.

    Returns
    -------
    Keeper or None
        None when no copy can be read.
    """
    if stats is None:
        stats = [copy_stats(p)[0] for p in paths]
    best = best_copy(stats)
    if best < 0:
        return None
    ok = [c for c in stats if c.error is None]
    most = max(c.pixels for c in ok)
    near = [c for c in ok if c.pixels >= KEEPER_PIXEL_TOLERANCE * most]
    c = stats[best]
    size = f"{c.width}x{c.height}"
    if len(ok) == 1:
        reason = f"the only readable copy ({size})"
    elif len(near) == 1:
        reason = f"highest resolution ({size})"
    else:
        reason = f"sharpest of the {len(near)} copies with the highest resolution ({size})"
    return Keeper(best, str(paths[best]), reason)
