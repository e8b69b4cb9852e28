"""Shared helpers of the GUI tests: generated photo folders and waiting for the window."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

INDEX_TIMEOUT = 180_000


def scene(rng: np.random.Generator, h: int = 300, w: int = 400) -> np.ndarray:
    """A random RGB scene of circles and rectangles: plenty of SIFT features."""
    img = np.full((h, w, 3), rng.integers(0, 256, 3), np.uint8)
    for _ in range(45):
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.circle(img, (x, y), int(rng.integers(6, 40)), color, -1)
        else:
            x2, y2 = x + int(rng.integers(8, 70)), y + int(rng.integers(8, 70))
            cv2.rectangle(img, (x, y), (x2, y2), color, -1)
    return img


def variant(img: np.ndarray, angle: float, scale: float) -> np.ndarray:
    """``img`` rotated by ``angle`` degrees and scaled about its centre."""
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    return cv2.warpAffine(img, m, (w, h), borderMode=cv2.BORDER_REFLECT)


def make_grouped_folder(
    folder: Path, n_groups: int = 2, per_group: int = 4, seed: int = 1
) -> dict[str, list[Path]]:
    """``folder/g{i}/`` holds ``per_group`` views of scene i; returns sub-folder -> paths."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Path]] = {}
    for gi in range(n_groups):
        sub = folder / f"g{gi}"
        sub.mkdir(parents=True, exist_ok=True)
        img = scene(rng)
        out[sub.name] = []
        for v in range(per_group):
            var = variant(img, float(rng.uniform(-25, 25)), float(rng.uniform(0.75, 1.0)))
            p = sub / f"g{gi}_view{v}.jpg"
            cv2.imwrite(str(p), var[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
            out[sub.name].append(p)
    return out


def open_and_wait(qtbot, win, folder, index) -> None:
    """Open ``folder`` in the window and wait until indexing has finished."""
    with qtbot.waitSignal(win.indexing_finished, timeout=INDEX_TIMEOUT):
        win.open_folder(folder, index)
    assert not win.is_indexing()


def query_and_wait(qtbot, win, action) -> None:
    """Run ``action`` and wait for the results to change."""
    with qtbot.waitSignal(win.results_changed, timeout=60_000):
        action()
