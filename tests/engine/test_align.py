"""The pixel fit of a homography (:mod:`engine.workflows.align`)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.workflows.align import refit_homography

cv2 = pytest.importorskip("cv2")


def _picture(demo_folder) -> np.ndarray:
    return cv2.imread(str(demo_folder / "chelsea.jpg"), cv2.IMREAD_GRAYSCALE).astype(np.float32)


@pytest.mark.parametrize(
    "dx, dy, angle, scale",
    [(0.3, -0.2, 0.0, 1.0), (0.6, 0.5, 0.15, 1.0), (0.0, 0.0, 0.3, 1.004), (-1.2, 0.8, 0.0, 1.0)],
)
def test_a_small_misalignment_is_found_to_a_twentieth_of_a_pixel(
    demo_folder, dx, dy, angle, scale
):
    fixed = _picture(demo_folder)
    h, w = fixed.shape
    m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    m[:, 2] += (dx, dy)
    moving = cv2.warpAffine(fixed, m, (w, h), flags=cv2.INTER_LINEAR)  # moving(m x) = fixed(x)
    inside = np.zeros((h, w), bool)
    inside[12:-12, 12:-12] = True
    fit = refit_homography(moving, fixed, inside)
    assert fit is not None
    ys, xs = np.mgrid[12 : h - 12 : 20, 12 : w - 12 : 20]
    pts = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)])
    got, want = fit @ pts, np.vstack([m, [0, 0, 1]]) @ pts
    err = np.hypot(*(got[:2] / got[2] - want[:2]))
    assert err.max() < 0.05, err.max()


def test_a_black_corner_and_a_new_brightness_do_not_pull_the_fit(demo_folder):
    """A copy turned on its own canvas (black corners, which the moving picture holds
    as pixels of its own) and brightened: the fit is that of the turn."""
    fixed = _picture(demo_folder)
    h, w = fixed.shape
    m = cv2.getRotationMatrix2D((w / 2, h / 2), 0.25, 1.0)
    moving = cv2.warpAffine(fixed * 0.8 + 30, m, (w, h), flags=cv2.INTER_LINEAR)
    moving[: h // 4, : w // 5] = 0  # (a corner of fill)
    fit = refit_homography(moving, fixed, np.ones((h, w), bool))
    pts = np.array([[w / 2, 0, w - 1, 0, w - 1], [h / 2, 0, 0, h - 1, h - 1], [1, 1, 1, 1, 1]])
    got, want = fit @ pts, np.vstack([m, [0, 0, 1]]) @ pts
    assert np.hypot(*(got[:2] / got[2] - want[:2])).max() < 0.1


def test_too_little_overlap_gives_no_fit(demo_folder):
    fixed = _picture(demo_folder)
    inside = np.zeros(fixed.shape, bool)
    inside[:6, :6] = True
    assert refit_homography(fixed, fixed, inside) is None
