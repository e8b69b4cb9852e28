"""Feature cache shared by the benchmarks: extracted sets live in one npz per
(dataset, settings) under /tmp/simile_bench_cache (never pickle, never in the repo)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("SIMILE_BENCH_CACHE", "/tmp/simile_bench_cache"))
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _extract(args):
    path, kwargs = args
    from engine.features.keypoints import extract_features
    from engine.io.imageio import ImageLoadError

    try:
        f = extract_features(path, **kwargs)
        return f.descriptors, f.xy
    except ImageLoadError:
        return np.zeros((0, 128), np.float32), np.zeros((0, 2), np.float32)


def cached_sets(
    name: str, paths: Sequence[Path], *, jobs: int = 2, **kwargs
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Descriptor and position sets for ``paths``, extracted once and cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    file = CACHE / f"{name}.npz"
    if file.exists():
        z = np.load(file, allow_pickle=False)
        if list(z["paths"]) == [str(p) for p in paths]:
            off = z["offsets"]
            d, xy = z["desc"], z["xy"]
            return (
                [d[off[i] : off[i + 1]] for i in range(len(paths))],
                [xy[off[i] : off[i + 1]] for i in range(len(paths))],
            )
    with ProcessPoolExecutor(jobs) as ex:
        out = list(ex.map(_extract, [(str(p), kwargs) for p in paths], chunksize=8))
    descs = [o[0] for o in out]
    xys = [o[1] for o in out]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in descs])])
    np.savez(
        file,
        paths=np.array([str(p) for p in paths]),
        offsets=offsets,
        desc=np.concatenate(descs),
        xy=np.concatenate(xys),
    )
    return descs, xys


def caltech_paths(
    classes: Sequence[str] | None = None, *, exclude: Callable[[str], bool] | None = None
):
    """(paths, labels, class names) of the Caltech-101 dev split, sorted."""
    root = SHARED_DATA / "caltech101"
    names = sorted(classes or [d.name for d in root.iterdir() if d.is_dir()])
    if exclude:
        names = [n for n in names if not exclude(n)]
    paths, labels = [], []
    for k, n in enumerate(names):
        files = sorted(p for p in (root / n).iterdir() if p.is_file())
        paths += files
        labels += [k] * len(files)
    return paths, np.array(labels), names
