"""Shared fixtures of the grouping tests: synthetic affinities and a fake collection."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from engine.index.methods import Hit

GRAPHS = (20, 25, 30, 35)  # engine.cluster.pipeline.K_GRAPH_SIZES


def blobs(groups: int, per: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian affinities of ``groups`` clusters of ``per`` points in 8-D, and the truth."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, (groups, 8))
    X = np.repeat(centres, per, axis=0) + spread * rng.standard_normal((groups * per, 8))
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)
    return np.exp(-d2 / np.median(d2)), np.repeat(np.arange(groups), per)


class FakeCollection:
    """``query`` answers from a table (path -> [(path, probability)]); a path ending in
    "bad.jpg" fails to load. ``store`` has the ``index_dir`` (None: no cache) and
    ``readonly`` of an index; ``stop`` is set once ``stop_after`` queries were asked.

    Attributes
    ----------
    asked : list of str
        The queried paths, in order.
    calls : list of (str, str, int)
        Path, method and ``top`` of every query.
    """

    def __init__(self, table, index_dir=None, readonly=False, stop_after=None):
        self.table = table
        self.asked: list[str] = []
        self.calls: list[tuple[str, str, int]] = []
        self.store = SimpleNamespace(index_dir=index_dir, readonly=readonly)
        self.stop = threading.Event()
        self.stop_after = stop_after

    def query(self, image, *, method="hybrid", top=20, box=None):
        self.asked.append(str(image))
        self.calls.append((str(image), method, top))
        if self.stop_after is not None and len(self.asked) >= self.stop_after:
            self.stop.set()
        if str(image).endswith("bad.jpg"):
            raise OSError("unreadable")
        return [Hit(Path(p), 1.0, prob) for p, prob in self.table.get(str(image), [])][:top]
