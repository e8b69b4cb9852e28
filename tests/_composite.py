"""Test photos for search by region: two demo photos side by side (tests of the engine,
the command line and the app)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

#: Height (pixels) of the side-by-side photo.
H = 300
#: The demo subjects copied into the folder a boxed query searches.
SUBJECTS = ("astronaut", "coffee", "brick")


def side_by_side(demo_folder: Path) -> tuple[np.ndarray, int]:
    """astronaut (left) and coffee (right), each ``H`` pixels high, side by side: the
    (H, W, 3) uint8 photo and the width of its left half."""
    import cv2

    from engine.io.imageio import load_image

    def rs(x: np.ndarray) -> np.ndarray:
        return cv2.resize(x, (round(x.shape[1] * H / x.shape[0]), H), interpolation=cv2.INTER_AREA)

    a = rs(load_image(demo_folder / "astronaut.jpg"))
    b = rs(load_image(demo_folder / "coffee.jpg"))
    return np.concatenate([a, b], axis=1), a.shape[1]


def region_folder(root: Path, demo_folder: Path) -> tuple[Path, Path, int, int]:
    """``root/photos`` (the demo photos of :data:`SUBJECTS`) and ``root/both.jpg``
    (:func:`side_by_side`, outside the folder): folder, query, left width, whole width."""
    from PIL import Image

    folder = root / "photos"
    folder.mkdir()
    for p in sorted(demo_folder.glob("*.jpg")):
        if p.name.startswith(SUBJECTS):
            shutil.copy(p, folder / p.name)
    both, left = side_by_side(demo_folder)
    query = root / "both.jpg"  # astronaut left, coffee right; outside the folder
    Image.fromarray(both).save(query, quality=92)
    return folder, query, left, both.shape[1]
