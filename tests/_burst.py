"""Test photos for the keeper of similar shots: a burst of two frames, the first shaken
(tests of the engine's rule through the command line and the app)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def burst_folder(folder: Path) -> list[Path]:
    """Two 640 x 480 JPEG frames with EXIF capture times one second apart in ``folder``
    (made): ``IMG_0001.jpg`` shaken sideways (taken first), ``IMG_0002.jpg`` sharp."""
    import cv2
    from PIL import Image

    rng = np.random.default_rng(5)
    scene = cv2.GaussianBlur((rng.random((480, 640, 3)) * 255).astype(np.uint8), (0, 0), 1.5)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "IMG_0001.jpg", folder / "IMG_0002.jpg"]
    for path, pixels, second in ((paths[0], cv2.blur(scene, (11, 1)), 0), (paths[1], scene, 1)):
        exif = Image.Exif()
        exif.get_ifd(0x8769)[0x9003] = f"2024:05:01 10:00:0{second}"
        Image.fromarray(pixels).save(path, quality=92, exif=exif)
    return paths
