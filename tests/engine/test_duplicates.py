"""The copy of a duplicate group to keep (:mod:`engine.workflows.duplicates`): one rule for
the app's Duplicates view and ``simile duplicates``."""

from __future__ import annotations

import numpy as np
import pytest

from engine.workflows.duplicates import (
    KEEPER_SIDE,
    CopyStats,
    best_copy,
    copy_stats,
    sharpness,
    suggest_keeper,
)


def test_sharpness_is_the_variance_of_the_laplacian():
    rng = np.random.default_rng(0)
    noisy = rng.random((40, 50)).astype(np.float32)
    g = noisy.astype(np.float32)
    lap = 4 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    assert sharpness(noisy) == pytest.approx(float(lap.var()))
    smooth = np.add.outer(np.arange(40.0), np.arange(50.0))  # a ramp: zero Laplacian
    assert sharpness(smooth) == 0.0 and sharpness(noisy) > 0
    assert sharpness(np.zeros((2, 9))) == 0.0 and sharpness(np.zeros((4, 4, 3))) == 0.0


def _stats(w, h, sharp, error=None, name="x"):
    return CopyStats(f"/p/{name}.jpg", w, h, 1000, sharp, error)


def test_best_copy_prefers_resolution_then_sharpness():
    big_soft = _stats(1000, 1000, 5.0, name="a")
    big_sharp = _stats(990, 990, 9.0, name="b")  # within 5 % of the most pixels
    small_sharper = _stats(500, 500, 99.0, name="c")
    broken = _stats(0, 0, 0.0, error="unreadable", name="d")
    assert best_copy([big_soft, big_sharp, small_sharper, broken]) == 1
    assert best_copy([big_soft, small_sharper]) == 0  # resolution first
    assert best_copy([broken, broken]) == -1 and best_copy([]) == -1
    tie = [_stats(100, 100, 1.0, name="e"), _stats(100, 100, 1.0, name="f")]
    assert best_copy(tie) == 0
    keep = suggest_keeper([c.path for c in (big_soft, big_sharp, small_sharper, broken)],
                          [big_soft, big_sharp, small_sharper, broken])  # fmt: skip
    assert (keep.index, keep.path) == (1, "/p/b.jpg") and "sharpest of the 2" in keep.reason
    keep = suggest_keeper(["/p/a.jpg", "/p/c.jpg"], [big_soft, small_sharper])
    assert keep.index == 0 and keep.reason == "highest resolution (1000x1000)"
    keep = suggest_keeper(["/p/d.jpg", "/p/c.jpg"], [broken, small_sharper])
    assert keep.index == 1 and keep.reason.startswith("the only readable copy")
    assert suggest_keeper(["/p/d.jpg"], [broken]) is None


def test_suggest_keeper_reads_the_copies(tmp_path):
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(3)
    img = (rng.random((600, 800, 3)) * 255).astype(np.uint8)
    img = cv2.GaussianBlur(img, (0, 0), 2)
    cv2.imwrite(str(tmp_path / "full.png"), img)
    cv2.imwrite(str(tmp_path / "blurred.png"), cv2.GaussianBlur(img, (0, 0), 3))
    cv2.imwrite(str(tmp_path / "half.png"), cv2.resize(img, (400, 300)))
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    paths = [tmp_path / n for n in ("blurred.png", "half.png", "full.png", "broken.jpg")]
    st, pixels = copy_stats(paths[2])
    assert (st.width, st.height, st.error) == (800, 600, None)
    assert pixels.shape == (KEEPER_SIDE * 600 // 800, KEEPER_SIDE, 3)
    assert st.file_size == (tmp_path / "full.png").stat().st_size
    bad, none = copy_stats(paths[3])
    assert bad.error and none is None and bad.pixels == 0
    keep = suggest_keeper(paths)
    assert keep.path == str(paths[2]) and keep.index == 2
    assert keep.reason == "sharpest of the 2 copies with the highest resolution (800x600)"
