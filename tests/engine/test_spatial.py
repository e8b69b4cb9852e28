"""Tests of engine.spatial: dense SIFT, spatial pyramid binning and kernel."""

from __future__ import annotations

import numpy as np
import pytest

from engine.kernels.pyramid import PyramidMatch
from engine.kernels.spatial import (
    DIM,
    SpatialPyramidBinning,
    SpatialPyramidMatch,
    dense_sift,
    grid_sift,
    with_positions,
)


def _texture(h=64, w=80, seed=0):
    import cv2

    rng = np.random.default_rng(seed)
    img = rng.random((h, w)).astype(np.float32)
    return cv2.GaussianBlur(img, (0, 0), 1.5)


# ------------------------------------------------------------------------- dense SIFT
def _reference_descriptor(img, x0, y0, b, magnif=6.0):
    """Brute force: every pixel votes into cells with bilinear weights, orientations
    split linearly between the two nearest of 8 bins; then SIFT + RootSIFT normalisation."""
    import cv2

    s2 = (b / magnif) ** 2 - 0.25
    sm = cv2.GaussianBlur(img, (0, 0), np.sqrt(s2)) if s2 > 0 else img
    gy, gx = np.gradient(sm)
    mag = np.hypot(gx, gy)
    t = np.mod(np.arctan2(gy, gx) * 8 / (2 * np.pi), 8)
    d = np.zeros((4, 4, 8))
    h, w = img.shape
    for i in range(4):  # y cell
        for j in range(4):  # x cell
            cy, cx = y0 + i * b, x0 + j * b
            for yy in range(max(0, cy - b + 1), min(h, cy + b)):
                for xx in range(max(0, cx - b + 1), min(w, cx + b)):
                    wgt = (1 - abs(yy - cy) / b) * (1 - abs(xx - cx) / b)
                    o = int(np.floor(t[yy, xx]))
                    f = t[yy, xx] - o
                    d[i, j, o % 8] += wgt * mag[yy, xx] * (1 - f)
                    d[i, j, (o + 1) % 8] += wgt * mag[yy, xx] * f
    d = d.ravel()
    d /= np.linalg.norm(d)
    d = np.minimum(d, 0.2)
    d /= np.linalg.norm(d)
    return np.sqrt(d / d.sum())


def test_dense_sift_matches_brute_force_reference():
    img = _texture()
    f = dense_sift(img, bin_sizes=(4, 6), step=5, max_side=None, contrast_threshold=0.0)
    assert f.descriptors.shape == (len(f.xy), DIM) and f.descriptors.dtype == np.float32
    assert f.image_size == (80, 64)
    rng = np.random.default_rng(1)
    for k in rng.choice(len(f), 6, replace=False):
        b = int(f.size[k])
        x0 = round(float(f.xy[k, 0]) - 1.5 * b)
        y0 = round(float(f.xy[k, 1]) - 1.5 * b)
        ref = _reference_descriptor(img, x0, y0, b)
        np.testing.assert_allclose(f.descriptors[k], ref, atol=2e-4)


def test_dense_sift_grid_and_normalisation():
    img = _texture(70, 90)
    f = dense_sift(img, bin_sizes=(4, 8), step=4, max_side=None, contrast_threshold=0.0)
    for b in (4, 8):
        xy = f.xy[f.size == b]
        span = 3 * b
        nx = len(np.arange(b // 2, 90 - span - b // 2, 4))
        ny = len(np.arange(b // 2, 70 - span - b // 2, 4))
        assert len(xy) == nx * ny
        # windows (4 b wide around the centre, cell centres b/2 inside) stay in the image
        assert xy[:, 0].min() - span / 2 >= b // 2 and xy[:, 0].max() + span / 2 < 90
    # RootSIFT: squared entries sum to 1
    np.testing.assert_allclose((f.descriptors**2).sum(axis=1), 1.0, rtol=1e-5)
    nxy = f.normalized_xy()
    assert nxy.min() >= 0 and nxy.max() < 1


def test_dense_sift_translation_equivariance_and_flat_regions():
    img = _texture(64, 96)
    a = dense_sift(img[:, :80], bin_sizes=(6,), step=4, max_side=None)
    b = dense_sift(img[:, 8:88], bin_sizes=(6,), step=4, max_side=None)
    # window at x in b == window at x + 8 in a
    ka = {tuple(p): i for i, p in enumerate(a.xy.tolist())}
    # away from the crops' left/right edges (blur and gradient border handling differ)
    pairs = [
        (ka[(x + 8, y)], i)
        for i, (x, y) in enumerate(b.xy.tolist())
        if (x + 8, y) in ka and 20 <= x <= 80 - 8 - 20
    ]
    assert len(pairs) > 20
    ia, ib = np.array(pairs).T
    np.testing.assert_allclose(a.descriptors[ia], b.descriptors[ib], atol=1e-5)
    flat = dense_sift(np.full((50, 50), 128, np.uint8), bin_sizes=(4,), step=8, max_side=None)
    assert len(flat) > 0 and not flat.descriptors.any()


def test_dense_sift_orientation_and_resize():
    ramp = np.tile(np.linspace(0, 1, 64, dtype=np.float32), (48, 1))  # gradient along +x
    f = dense_sift(ramp, bin_sizes=(4,), step=8, max_side=None, rootsift=False)
    ori = f.descriptors.reshape(-1, 16, 8).sum(axis=1)
    assert np.all(np.argmax(ori, axis=1) == 0)  # orientation bin 0 = +x
    big = (np.random.default_rng(0).random((600, 400)) * 255).astype(np.uint8)
    assert dense_sift(big, bin_sizes=(4,), step=16).image_size == (200, 300)
    with pytest.raises(ValueError, match="gray"):
        dense_sift(np.zeros((4, 4, 3)))
    with pytest.raises(ValueError, match="step"):
        dense_sift(ramp, step=0)


def test_grid_sift_trims_frames_and_normalises():
    rng = np.random.default_rng(0)
    inner = (rng.random((150, 200)) * 200).astype(np.uint8)
    framed = np.full((190, 260), 255, np.uint8)
    framed[20:170, 30:230] = inner
    d, xy = grid_sift(framed, max_features=None)
    d0, xy0 = grid_sift(inner, max_features=None)
    np.testing.assert_allclose(xy, xy0)  # the white frame is cropped before the grid
    np.testing.assert_allclose(d, d0, atol=1e-6)
    # grid: size 12 every 8 px and size 24 every 12 px on the 200 x 150 image
    n = len(range(6, 194, 8)) * len(range(6, 144, 8)) + len(range(12, 188, 12)) * len(
        range(12, 138, 12)
    )
    assert d.shape == (n, DIM) and xy.min() >= 0 and xy.max() < 1
    np.testing.assert_allclose((d**2).sum(axis=1), 1.0, rtol=1e-5)  # RootSIFT
    assert len(grid_sift(inner, max_features=50)[0]) == 50
    with pytest.raises(ValueError, match="uint8"):
        grid_sift(inner.astype(np.float32))


# ------------------------------------------------------------------------- binning
def test_binning_nested_and_lazebnik_weights():
    rng = np.random.default_rng(0)
    words = rng.integers(0, 50, size=(500, 2))
    words[:, 1] = words[:, 0] // 10  # coarser word = parent
    pts = with_positions(words, rng.random((500, 2)))
    b = SpatialPyramidBinning(grid_levels=3, feature_levels=2)
    bins, dist = b.assign(pts)
    assert dist is None and bins.shape == (500, 4)
    for lev in range(3):  # each bin has exactly one parent bin
        pairs = np.unique(bins[:, lev : lev + 2], axis=0)
        assert np.unique(pairs[:, 0]).size == pairs.shape[0]
    np.testing.assert_array_equal(bins[:, 2], words[:, 0])
    np.testing.assert_array_equal(bins[:, 3], words[:, 1])
    assert [b.bin_weights(lev, bins[:3, lev])[0] for lev in range(4)] == [1, 0.5, 0.25, 0.125]
    assert SpatialPyramidBinning.from_state(b.to_state()).n_levels == 4
    with pytest.raises(ValueError, match="columns"):
        b.assign(np.zeros((3, 3), np.float32))


def _hist(words, xy, g, n_words):
    cell = np.minimum((xy * g).astype(int), g - 1)
    return np.bincount((words * g + cell[:, 1]) * g + cell[:, 0], minlength=n_words * g * g)


def test_pyramid_match_over_binning_is_spatial_pyramid_match():
    """PyramidMatch over the binning = 1/2 I(4x4) + 1/4 I(2x2) + 1/4 I(1x1) (Lazebnik Eq. 3)."""
    rng = np.random.default_rng(3)
    n_words = 6
    sets = [(rng.integers(0, n_words, m), rng.random((m, 2))) for m in (40, 55, 30)]
    pm = PyramidMatch(SpatialPyramidBinning(3), normalize="none", n_shifts=1, n_sides=1,
                      pca_dim=None)  # fmt: skip
    pts = [with_positions(w, p) for w, p in sets]
    K = pm.fit(pts).kernel(pts)
    for i in range(3):
        for j in range(3):
            ref = 0.0
            for g, coef in ((4, 0.5), (2, 0.25), (1, 0.25)):
                hi = _hist(*sets[i], g, n_words)
                hj = _hist(*sets[j], g, n_words)
                ref += coef * np.minimum(hi, hj).sum()
            assert K[i, j] == pytest.approx(ref)


# ------------------------------------------------------------------------- kernel
def _scene(rng, layout, n=120):
    """Descriptors drawn around 4 prototypes; prototype k is placed in quadrant layout[k]."""
    protos = np.eye(4, 16, dtype=np.float32) * 3
    k = rng.integers(0, 4, n)
    d = protos[k] + 0.1 * rng.standard_normal((n, 16)).astype(np.float32)
    q = np.asarray(layout)[k]
    xy = (np.stack([q % 2, q // 2], 1) + rng.random((n, 2))) / 2
    return d, xy.astype(np.float32)


def test_spatial_pyramid_match_prefers_same_layout_and_roundtrips():
    rng = np.random.default_rng(0)
    scenes = [_scene(rng, [0, 1, 2, 3]) for _ in range(3)] + [_scene(rng, [3, 2, 1, 0])]
    descs, xys = zip(*scenes, strict=True)
    spm = SpatialPyramidMatch(branching=4, depth=1, random_state=0).fit(list(descs))
    codes = spm.encode(list(descs), list(xys))
    K = spm.kernel(codes)
    np.testing.assert_allclose(np.diag(K), 1.0)
    np.testing.assert_allclose(K, K.T)
    assert np.linalg.eigvalsh(K).min() > -1e-9
    # same words everywhere; only the layout differs
    assert min(K[0, 1], K[0, 2], K[1, 2]) > K[0, 3] + 0.2
    # bag of words only (1 x 1 grid): layout invisible
    bow = SpatialPyramidMatch(branching=4, grid_levels=1).fit(list(descs))
    Kb = bow.kernel(bow.encode(list(descs), list(xys)))
    assert abs(Kb[0, 3] - Kb[0, 1]) < 0.1
    again = SpatialPyramidMatch.from_state(spm.to_state())
    np.testing.assert_allclose(again.kernel(again.encode(list(descs), list(xys))), K)
    Kab = spm.kernel(spm.encode(list(descs[:2]), list(xys[:2])), codes)
    np.testing.assert_allclose(Kab, K[:2])


def test_spatial_pyramid_match_errors():
    with pytest.raises(RuntimeError, match="fit"):
        SpatialPyramidMatch().words(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="feature_levels"):
        SpatialPyramidMatch(depth=1, feature_levels=3)
    with pytest.raises(ValueError, match="no descriptors"):
        SpatialPyramidMatch().fit([np.zeros((0, 8), np.float32)])
    with pytest.raises(ValueError, match="xy"):
        with_positions(np.zeros(3, int), np.zeros((2, 2)))
