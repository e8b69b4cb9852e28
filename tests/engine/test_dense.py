"""Tests for engine.features.dense: the one dense-SIFT implementation and the channels
that are options of it (extract_features' "dense_sift", spatial.dense_sift / grid_sift,
the categorisation features)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from engine.features.dense import (
    SIFT_DIM,
    DenseSift,
    centred_grid,
    dense_sift,
    gray_image,
    normalise_sift,
    trim_box,
)


def _scene(h: int = 150, w: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w), dtype=np.uint8), (0, 0), 2)
    return cv2.normalize(img, None, 0, 230, cv2.NORM_MINMAX)


@pytest.fixture(scope="module")
def img() -> np.ndarray:
    return _scene()


def test_centred_grid_keeps_whole_windows_and_splits_the_margin():
    c = centred_grid(50, 30, 8, 16)
    xs, ys = np.unique(c[:, 0]), np.unique(c[:, 1])
    # 50 px: windows at 1, 9, 17, 25, 33 (margin 1 + 1); 30 px: 3, 11 (margin 3 + 3)
    np.testing.assert_array_equal(xs, np.array([1, 9, 17, 25, 33]) + 7.5)
    np.testing.assert_array_equal(ys, np.array([3, 11]) + 7.5)
    assert c.dtype == np.float32 and c.shape == (10, 2)
    assert centred_grid(10, 10, 4, 16).shape == (0, 2)


def test_opencv_grids_sizes_and_positions(img):
    f = dense_sift(img, windows=((16, 8), (32, 16)))
    assert isinstance(f, DenseSift) and len(f) == f.xy.shape[0] == f.size.shape[0]
    assert f.descriptors.shape == (len(f), SIFT_DIM) and f.descriptors.dtype == np.float32
    assert set(np.unique(f.size)) == {4.0, 8.0}  # cell width = side / 4
    fine = f.xy[f.size == 4]
    np.testing.assert_array_equal(fine, centred_grid(200, 150, 8, 16))
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-5)
    c = dense_sift(img, windows=((72, 8),), grid="corner")
    # corner grid: first centre half a keypoint size (72 / 6 / 2 = 6 px) off the corner
    assert c.xy[:, 0].min() == 6 and c.xy[:, 1].min() == 6
    assert len(c) == len(range(6, 194, 8)) * len(range(6, 144, 8))
    assert f.image_size == f.input_size == (200, 150) and f.scale == 1.0 and f.offset == (0, 0)


def test_subsampling_is_even_and_keeps_the_ends(img):
    every = dense_sift(img, windows=((16, 4), (32, 8)), grid="corner")
    some = dense_sift(img, windows=((16, 4), (32, 8)), grid="corner", max_features=100)
    sel = np.linspace(0, len(every) - 1, 100).astype(np.int64)
    np.testing.assert_array_equal(some.xy, every.xy[sel])
    np.testing.assert_array_equal(some.descriptors, every.descriptors[sel])
    np.testing.assert_array_equal(some.size, every.size[sel])


def test_trim_and_shrink_map_back_to_the_input(img):
    framed = np.full((190, 260), 255, np.uint8)
    framed[20:170, 30:230] = img
    a = dense_sift(framed, windows=((72, 8),), grid="corner", trim=245)
    b = dense_sift(img, windows=((72, 8),), grid="corner")
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    assert a.offset == (30, 20) and a.input_size == (260, 190) and a.image_size == (200, 150)
    np.testing.assert_array_equal(a.input_xy(), b.xy + np.array([30, 20], np.float32))
    s = dense_sift(framed, windows=((48, 8),), trim=245, max_side=100)
    assert s.image_size == (100, 75) and s.scale == 0.5
    np.testing.assert_allclose(s.input_xy(), s.xy * 2 + [30, 20])
    np.testing.assert_allclose(s.normalized_xy(), s.xy / [100, 75])
    assert trim_box(framed, 245) == (20, 170, 30, 230)
    assert trim_box(img, 245) == (0, 150, 0, 200)  # nothing white to cut


def test_options_change_what_they_say(img):
    base = dense_sift(img, windows=((48, 12),))
    tilted = dense_sift(img, windows=((48, 12),), angle=-1.0)
    # OpenCV reads -1 as a (1 degree) orientation, not as upright
    assert not np.array_equal(base.descriptors, tilted.descriptors)
    assert np.mean(np.sum(base.descriptors * tilted.descriptors, axis=1)) > 0.9
    full = dense_sift(img, windows=((72, 12),))
    halved = dense_sift(img, windows=((72, 12),), octaves=True)  # keypoint size 12: octave 1
    assert not np.array_equal(full.descriptors, halved.descriptors)
    assert np.mean(np.sum(full.descriptors * halved.descriptors, axis=1)) > 0.8
    plain = dense_sift(img, windows=((48, 12),), rootsift=False).descriptors
    root = np.sqrt(plain / plain.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(base.descriptors, root, atol=1e-6)
    flat = np.full((60, 60), 100, np.uint8)
    flat[:, 30:] = 140  # one edge: windows away from it have no gradient at all
    kept = dense_sift(flat, windows=((16, 8),))
    some = kept.descriptors.any(axis=1)
    assert 0 < some.sum() < len(kept)
    dropped = dense_sift(flat, windows=((16, 8),), drop_empty=True)
    np.testing.assert_array_equal(dropped.xy, kept.xy[some])
    np.testing.assert_array_equal(dropped.descriptors, kept.descriptors[some])


def test_phow_method(img):
    f = dense_sift(img, method="phow", windows=((16, 4), (24, 4)))
    assert set(np.unique(f.size)) == {4.0, 6.0}  # PHOW bin sizes
    # a float image in [0, 1] is taken as it is, a uint8 one divided by 255
    g = dense_sift(img.astype(np.float32) / 255, method="phow", windows=((16, 4), (24, 4)))
    np.testing.assert_array_equal(f.descriptors, g.descriptors)
    with pytest.raises(ValueError, match="multiples of 4"):
        dense_sift(img, method="phow", windows=((18, 4),))
    with pytest.raises(ValueError, match="grid"):
        dense_sift(img, method="phow", grid="corner")
    with pytest.raises(ValueError, match="trim needs a uint8"):
        dense_sift(img.astype(np.float32) / 255, method="phow", trim=245)


def test_inputs_and_validation(img, tmp_path):
    path = tmp_path / "scene.png"
    cv2.imwrite(str(path), img)
    a = dense_sift(path, windows=((16, 8),))
    b = dense_sift(img, windows=((16, 8),))
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    small = dense_sift(path, windows=((16, 8),), load_max_side=100)
    assert small.input_size == (100, 75)
    rgb = np.repeat(img[:, :, None], 3, axis=2)
    np.testing.assert_array_equal(gray_image(rgb, None), img)
    np.testing.assert_array_equal(gray_image(img / 255.0, None), img)
    for bad in (dict(windows=((16, 0),)), dict(windows=((0, 8),)), dict(method="vlfeat"),
                dict(grid="random"), dict(max_features=0), dict(max_side=0)):  # fmt: skip
        with pytest.raises(ValueError):
            dense_sift(img, **bad)
    assert normalise_sift(np.zeros((2, SIFT_DIM), np.float32), True).sum() == 0


def test_channels_are_calls_of_dense_sift(img):
    """extract_features("dense_sift"), spatial.dense_sift / grid_sift and the
    categorisation features are options of dense_sift (bit-identical)."""
    from engine.features.keypoints import extract_features
    from engine.kernels import spatial

    f = extract_features(img, "dense_sift", step=6, patch_size=20, rootsift=False)
    d = dense_sift(img, windows=((20, 6),), rootsift=False, drop_empty=True)
    np.testing.assert_array_equal(f.descriptors, d.descriptors)
    np.testing.assert_array_equal(f.xy, d.xy)
    p = spatial.dense_sift(img, bin_sizes=(4, 6), step=5)
    q = dense_sift(img, method="phow", windows=((16, 5), (24, 5)), max_side=300)
    for name in ("descriptors", "xy", "size"):
        np.testing.assert_array_equal(getattr(p, name), getattr(q, name))
    desc, xy = spatial.grid_sift(img)
    r = dense_sift(
        img, windows=((72, 8), (144, 12)), grid="corner", angle=-1.0, max_side=300, trim=245,
        max_features=400,
    )  # fmt: skip
    np.testing.assert_array_equal(desc, r.descriptors)
    np.testing.assert_array_equal(xy, r.normalized_xy())


def test_categorisation_features_are_a_call_of_dense_sift(img):
    """engine.cluster's category_features (defaults and learned-similarity settings) is
    dense_sift(grid="corner", angle=-1, ...) with positions mapped back to the input."""
    from engine.cluster import category_features

    framed = np.full((400, 520), 255, np.uint8)
    framed[30:330, 60:460] = cv2.resize(img, (400, 300))
    for kw in ({}, {"octaves": False}, {"rootsift": False, "trim": 0, "side": 200}):
        want = category_features(framed, **kw)
        kw = {"side": 300, "trim": 245, "rootsift": True, "octaves": True} | kw
        got = dense_sift(
            framed, windows=((72, 8), (144, 12)), grid="corner", angle=-1.0,
            load_max_side=1024, trim=kw["trim"], max_side=kw["side"], max_features=400,
            rootsift=kw["rootsift"], octaves=kw["octaves"],
        )  # fmt: skip
        np.testing.assert_array_equal(want.descriptors, got.descriptors)
        np.testing.assert_array_equal(want.xy, got.input_xy())
        assert want.image_size == got.input_size
