"""Tests for engine.features on synthetic images (no external data needed)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from engine.features.keypoints import KINDS, PCA, Features, extract_features
from engine.io.imageio import ImageLoadError


def scene(h: int = 240, w: int = 320, seed: int = 0) -> np.ndarray:
    """A deterministic cluttered grey scene: random filled shapes plus mild texture."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w), 128, np.uint8)
    for _ in range(70):
        colour = int(rng.integers(0, 256))
        x, y = (int(v) for v in rng.integers(0, [w, h]))
        r = int(rng.integers(4, 30))
        shape = rng.integers(0, 3)
        if shape == 0:
            cv2.circle(img, (x, y), r, colour, -1)
        elif shape == 1:
            cv2.rectangle(img, (x, y), (x + r, y + int(rng.integers(4, 30))), colour, -1)
        else:
            pts = (rng.normal(0, r, (5, 2)) + np.array([x, y])).astype(np.int32)
            cv2.fillPoly(img, [pts], colour)
    noise = cv2.GaussianBlur(rng.normal(0, 12, (h, w)), (0, 0), 1.5)
    return np.clip(img + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def img() -> np.ndarray:
    return scene()


# --------------------------------------------------------------------------------------------
# shapes, dtypes, determinism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "dim"), [("sift", 128), ("dense_sift", 128), ("patch", 64)])
def test_shapes_and_dtypes(img, kind, dim):
    f = extract_features(img, kind)
    m = len(f)
    assert m > 50
    assert f.descriptors.shape == (m, dim) and f.descriptors.dtype == np.float32
    assert f.xy.shape == (m, 2) and f.xy.dtype == np.float32
    assert f.scale is not None and f.scale.shape == (m,) and f.scale.dtype == np.float32
    assert f.image_size == (320, 240) and f.kind == kind and f.dim == dim
    assert (f.xy >= 0).all() and (f.xy[:, 0] <= 319).all() and (f.xy[:, 1] <= 239).all()
    assert np.isfinite(f.descriptors).all()
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-5)
    if kind == "sift":
        assert f.angle is not None and f.angle.shape == (m,)
        assert ((f.angle >= 0) & (f.angle < 360)).all()
    else:
        assert f.angle is None


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic(img, kind):
    a, b = extract_features(img, kind), extract_features(img.copy(), kind)
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    np.testing.assert_array_equal(a.xy, b.xy)


def test_sift_cap_keeps_strongest_first(img):
    big = extract_features(img, "sift", max_features=200)
    small = extract_features(img, "sift", max_features=40)
    assert len(small) == 40 and 40 < len(big) <= 200
    # the 40 strongest are the same keypoints, in the same order, whatever the cap
    np.testing.assert_allclose(small.xy, big.xy[:40], atol=1e-4)
    np.testing.assert_allclose(small.descriptors, big.descriptors[:40], atol=1e-5)
    unlimited = extract_features(img, "sift", max_features=None)
    assert len(unlimited) >= len(big)


def test_rootsift_is_sqrt_of_l1_normalised_sift(img):
    root = extract_features(img, "sift", rootsift=True).descriptors
    plain = extract_features(img, "sift", rootsift=False).descriptors
    assert (plain >= 0).all() and (root >= 0).all()
    np.testing.assert_allclose(np.linalg.norm(plain, axis=1), 1.0, atol=1e-5)
    expected = np.sqrt(plain / plain.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(root, expected, atol=1e-5)
    assert not np.allclose(root, plain, atol=1e-3)


def test_sift_scale_is_six_keypoint_sizes(img):
    kps = cv2.SIFT_create(nfeatures=30).detect(img, None)
    f = extract_features(img, "sift", max_features=30)
    expected = sorted(6 * k.size for k in kps)
    np.testing.assert_allclose(sorted(f.scale.tolist())[:30], expected[:30], rtol=1e-5)


# --------------------------------------------------------------------------------------------
# invariance: descriptors of a rotated image match their counterparts
# --------------------------------------------------------------------------------------------


def mutual_matches(da: np.ndarray, db: np.ndarray, ratio: float = 0.8) -> np.ndarray:
    """(P, 2) index pairs that are mutual nearest neighbours and pass Lowe's ratio test."""
    d = np.linalg.norm(da[:, None, :] - db[None, :, :], axis=2)
    nn_ab = d.argmin(axis=1)
    nn_ba = d.argmin(axis=0)
    two = np.sort(d, axis=1)[:, :2]
    ok = (nn_ba[nn_ab] == np.arange(len(da))) & (two[:, 0] < ratio * two[:, 1])
    idx = np.flatnonzero(ok)
    return np.stack([idx, nn_ab[idx]], axis=1)


@pytest.mark.parametrize("angle", [90, 30])
def test_sift_rotation_invariance(img, angle):
    h, w = img.shape
    # rotate about the centre onto a canvas big enough to hold the whole image
    m = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), angle, 1.0)
    side = int(np.ceil(np.hypot(h, w))) + 2
    m[:, 2] += [(side - w) / 2, (side - h) / 2]
    rot = cv2.warpAffine(img, m, (side, side), flags=cv2.INTER_CUBIC, borderValue=128)
    fa = extract_features(img, "sift", max_features=300)
    fb = extract_features(rot, "sift", max_features=300)
    pairs = mutual_matches(fa.descriptors, fb.descriptors)
    assert len(pairs) >= 40
    mapped = fa.xy[pairs[:, 0]] @ m[:, :2].T + m[:, 2]
    err = np.linalg.norm(mapped - fb.xy[pairs[:, 1]], axis=1)
    assert np.mean(err < 3.0) > 0.85  # matched descriptors land where the rotation says
    # the keypoint orientations turn with the content: getRotationMatrix2D turns it
    # counter-clockwise on screen, and OpenCV's angles then decrease by the same amount
    turn = np.mod(fa.angle[pairs[:, 0]] - fb.angle[pairs[:, 1]], 360.0)
    close = np.minimum(np.abs(turn - angle), 360 - np.abs(turn - angle)) < 10
    assert np.mean(close[err < 3.0]) > 0.8


def test_dense_sift_is_not_rotation_invariant_but_shift_equivariant(img):
    # upright grid descriptors: shifting the image by exactly one grid step shifts the grid
    f = extract_features(img, "dense_sift", step=8, patch_size=16)
    shifted = np.full_like(img, 128)
    shifted[:, 8:] = img[:, :-8]
    g = extract_features(shifted, "dense_sift", step=8, patch_size=16)
    fa = {tuple(p): d for p, d in zip(f.xy.tolist(), f.descriptors, strict=True)}
    same = [
        np.abs(fa[(x - 8, y)] - d).max()
        for (x, y), d in zip(g.xy.tolist(), g.descriptors, strict=True)
        if 40 <= x <= 280 and (x - 8, y) in fa
    ]
    assert len(same) > 200
    assert np.median(same) < 1e-4


# --------------------------------------------------------------------------------------------
# grid kinds
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dense_sift", "patch"])
def test_grid_geometry(img, kind):
    f = extract_features(img, kind, step=10, patch_size=20)
    nx, ny = (320 - 20) // 10 + 1, (240 - 20) // 10 + 1
    assert len(f) == nx * ny  # the scene has texture everywhere
    xs, ys = np.unique(f.xy[:, 0]), np.unique(f.xy[:, 1])
    assert len(xs) == nx and len(ys) == ny
    np.testing.assert_allclose(np.diff(xs), 10)
    np.testing.assert_allclose(np.diff(ys), 10)
    # windows lie inside the image, margins split evenly
    assert xs[0] - 9.5 >= 0 and xs[-1] + 9.5 <= 319
    assert abs((xs[0] - 9.5) - (319 - (xs[-1] + 9.5))) <= 1
    np.testing.assert_array_equal(f.scale, 20)


def test_patch_descriptor_is_normalised_window(img):
    f = extract_features(img, "patch", step=16, patch_size=8)  # 8 x 8 window = 8 x 8 samples
    assert f.dim == 64
    np.testing.assert_allclose(f.descriptors.mean(axis=1), 0, atol=1e-5)
    # with one sample per pixel and no blur the descriptor is the normalised raw window
    x, y = f.xy[7]
    x0, y0 = int(x - 3.5), int(y - 3.5)
    win = img[y0 : y0 + 8, x0 : x0 + 8].astype(np.float64).ravel()
    win -= win.mean()
    np.testing.assert_allclose(f.descriptors[7], win / np.linalg.norm(win), atol=1e-4)


def test_patch_invariant_to_brightness_and_contrast(img):
    a = extract_features(img, "patch")
    b = extract_features(np.clip(img * 0.5 + 40, 0, 255).astype(np.uint8), "patch")
    common = min(len(a), len(b))
    assert common > 100
    # affine grey changes leave normalised patches nearly unchanged (up to rounding)
    ia = {tuple(p): i for i, p in enumerate(a.xy.tolist())}
    rows = [(ia[tuple(p)], j) for j, p in enumerate(b.xy.tolist()) if tuple(p) in ia]
    ra, rb = np.array(rows).T
    cos = (a.descriptors[ra] * b.descriptors[rb]).sum(axis=1)
    assert np.median(cos) > 0.99


def test_append_xy(img):
    f = extract_features(img, "dense_sift", append_xy=True, xy_weight=2.0)
    plain = extract_features(img, "dense_sift")
    assert f.dim == 130
    np.testing.assert_array_equal(f.descriptors[:, :128], plain.descriptors)
    np.testing.assert_allclose(f.descriptors[:, 128], 2.0 * f.xy[:, 0] / 320, rtol=1e-6)
    np.testing.assert_allclose(f.descriptors[:, 129], 2.0 * f.xy[:, 1] / 240, rtol=1e-6)
    s = extract_features(img, "sift", append_xy=True)
    assert s.dim == 130 and (s.descriptors[:, 128:] >= 0).all()
    assert (s.descriptors[:, 128:] < 1).all()


# --------------------------------------------------------------------------------------------
# empty images, inputs, errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "dim"), [("sift", 128), ("dense_sift", 128), ("patch", 64)])
@pytest.mark.parametrize("shape", [(100, 120), (5, 7)])
def test_featureless_images_give_empty_sets(kind, dim, shape):
    f = extract_features(np.full(shape, 90, np.uint8), kind)
    assert len(f) == 0
    assert f.descriptors.shape == (0, dim) and f.descriptors.dtype == np.float32
    assert f.xy.shape == (0, 2) and f.image_size == (shape[1], shape[0])
    g = extract_features(np.full(shape, 90, np.uint8), kind, append_xy=True)
    assert g.descriptors.shape == (0, dim + 2)


def test_flat_regions_are_skipped_on_grids():
    half = np.full((64, 128), 200, np.uint8)
    half[:, 64:] = scene(64, 64, seed=3)
    # a window is described only if its support reaches the textured half (x >= 64):
    # raw patches see +-8 px plus a 1 px blur; OpenCV's SIFT samples a radius of about
    # 0.88 * patch_size around the centre, after its own sigma = 1.6 pre-blur
    for kind, reach in (("dense_sift", 0.88 * 16 + 5), ("patch", 8 + 3)):
        f = extract_features(half, kind, step=8, patch_size=16)
        full = extract_features(scene(64, 128, seed=3), kind, step=8, patch_size=16)
        assert 0 < len(f) < len(full)
        assert (f.xy[:, 0] + reach > 64).all(), (kind, f.xy[:, 0].min())


def test_path_bytes_and_array_inputs_agree(tmp_path, img):
    p = tmp_path / "scene.png"
    Image.fromarray(img).save(p)
    from_array = extract_features(img, "sift")
    for source in (p, str(p), p.read_bytes(), io.BytesIO(p.read_bytes())):
        f = extract_features(source, "sift")
        np.testing.assert_array_equal(f.descriptors, from_array.descriptors)
    rgb = np.repeat(img[..., None], 3, axis=2)
    np.testing.assert_array_equal(extract_features(rgb, "patch").descriptors,
                                  extract_features(img, "patch").descriptors)  # fmt: skip
    f = extract_features(img.astype(np.float32) / 255, "patch")
    np.testing.assert_allclose(f.descriptors, extract_features(img, "patch").descriptors,
                               atol=1e-6)  # fmt: skip


def test_max_side_downsizes_and_positions_follow(tmp_path, img):
    p = tmp_path / "scene.png"
    Image.fromarray(img).save(p)
    f = extract_features(p, "dense_sift", max_side=160)
    assert f.image_size == (160, 120)
    assert f.xy[:, 0].max() < 160 and f.xy[:, 1].max() < 120
    g = extract_features(img, "dense_sift", max_side=160)  # arrays are shrunk the same way
    assert g.image_size == (160, 120)


def test_errors(tmp_path, img):
    with pytest.raises(ValueError, match="kind"):
        extract_features(img, "surf")
    with pytest.raises(ValueError, match="step"):
        extract_features(img, "dense_sift", step=0)
    with pytest.raises(ValueError, match="patch_size"):
        extract_features(img, "patch", patch_size=-3)
    with pytest.raises(ValueError, match="max_features"):
        extract_features(img, "sift", max_features=0)
    for bad in (0.0, -0.01, float("nan")):
        with pytest.raises(ValueError, match="contrast_threshold"):
            extract_features(img, "sift", contrast_threshold=bad)
    with pytest.raises(ValueError, match="image must"):
        extract_features(np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(ValueError, match="dtype"):
        extract_features(np.zeros((4, 4), np.int64))
    with pytest.raises(ImageLoadError, match="file not found"):
        extract_features(tmp_path / "missing.jpg")


def test_features_state_roundtrip_via_npz(tmp_path, img):
    for kind in KINDS:
        f = extract_features(img, kind)
        path = tmp_path / f"{kind}.npz"
        np.savez(path, **f.to_state())
        with np.load(path, allow_pickle=False) as z:
            g = Features.from_state(dict(z))
        np.testing.assert_array_equal(g.descriptors, f.descriptors)
        np.testing.assert_array_equal(g.xy, f.xy)
        assert (g.angle is None) == (f.angle is None)
        assert g.image_size == f.image_size and g.kind == kind and len(g) == len(f)


def test_features_validates_shapes():
    with pytest.raises(ValueError, match="xy"):
        Features(
            np.zeros((3, 4), np.float32), np.zeros((2, 2), np.float32), None, None, (1, 1), "x"
        )
    with pytest.raises(ValueError, match="descriptors"):
        Features(np.zeros((3, 4)), np.zeros((3, 2), np.float32), None, None, (1, 1), "x")


# --------------------------------------------------------------------------------------------
# PCA
# --------------------------------------------------------------------------------------------


def correlated_sample(n: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian sample with a known rotation ``q`` and standard deviations ``sd``."""
    rng = np.random.default_rng(seed)
    d = 12
    sd = np.geomspace(10, 0.1, d)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = (rng.normal(size=(n, d)) * sd) @ q.T + 5.0
    return X.astype(np.float32), q, sd


@pytest.mark.parametrize("n", [5000, 30])  # scatter-matrix path and direct-SVD path
def test_pca_recovers_principal_axes(n):
    X, q, sd = correlated_sample(n)
    pca = PCA(3).fit(X)
    assert pca.n_components == 3 and pca.n_features == 12
    assert pca.components_.shape == (3, 12) and pca.components_.dtype == np.float32
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(3), atol=1e-5)
    assert np.all(np.diff(pca.explained_variance_) <= 0)
    if n == 5000:  # enough samples: the true axes, up to sign
        cos = np.abs((pca.components_ @ q[:, :3]).diagonal())
        assert (cos > 0.99).all()
        np.testing.assert_allclose(pca.explained_variance_, sd[:3] ** 2, rtol=0.1)
    Y = pca.transform(X)
    assert Y.shape == (n, 3) and Y.dtype == np.float32
    np.testing.assert_allclose(Y.mean(axis=0), 0, atol=1e-3 * sd[0])
    np.testing.assert_allclose(Y.var(axis=0, ddof=1), pca.explained_variance_, rtol=1e-3)


def test_pca_matches_direct_covariance_eigendecomposition():
    X, _, _ = correlated_sample(2000, seed=4)
    pca = PCA(5).fit(X)
    w, v = np.linalg.eigh(np.cov(X.astype(np.float64), rowvar=False))
    order = np.argsort(w)[::-1][:5]
    np.testing.assert_allclose(pca.explained_variance_, w[order], rtol=1e-6)
    np.testing.assert_allclose(np.abs(pca.components_ @ v[:, order]), np.eye(5), atol=1e-4)


def test_pca_full_rank_roundtrip_whiten_and_state(tmp_path):
    X, _, _ = correlated_sample(500, seed=1)
    full = PCA(None).fit(X)
    assert full.n_components == 12
    np.testing.assert_allclose(full.inverse_transform(full.transform(X)), X, atol=1e-3)
    w = PCA(4, whiten=True).fit(X)
    np.testing.assert_allclose(w.transform(X).std(axis=0, ddof=1), 1.0, rtol=1e-3)
    np.testing.assert_allclose(w.inverse_transform(w.transform(X)),
                               PCA(4).fit(X).inverse_transform(PCA(4).fit(X).transform(X)),
                               atol=1e-3)  # fmt: skip
    np.savez(tmp_path / "pca.npz", **w.to_state())
    with np.load(tmp_path / "pca.npz", allow_pickle=False) as z:
        back = PCA.from_state(dict(z))
    np.testing.assert_array_equal(back.transform(X), w.transform(X))
    assert back.whiten and back.n_components == 4


def test_pca_deterministic_sign_and_errors():
    X, _, _ = correlated_sample(300, seed=2)
    a, b = PCA(3).fit(X), PCA(3).fit(-X + 1)  # flipping the data must not flip the axes
    np.testing.assert_allclose(a.components_, b.components_, atol=1e-4)
    big = np.abs(a.components_).argmax(axis=1)
    assert (a.components_[np.arange(3), big] > 0).all()
    with pytest.raises(ValueError, match="n_components"):
        PCA(0)
    with pytest.raises(ValueError, match="exceeds"):
        PCA(20).fit(X)
    with pytest.raises(ValueError, match="at least 2"):
        PCA(2).fit(X[:1])
    with pytest.raises(RuntimeError, match="fit"):
        PCA(2).transform(X)
    with pytest.raises(ValueError, match=r"\(N, 12\)"):
        PCA(2).fit(X).transform(X[:, :5])


def test_pca_on_real_sift_reduces_dimension(img):
    f = extract_features(img, "dense_sift")
    pca = PCA(10).fit(f.descriptors)
    Y = pca.transform(f.descriptors)
    assert Y.shape == (len(f), 10)
    # 10 components of RootSIFT keep a sizeable share of the variance
    total = f.descriptors.astype(np.float64).var(axis=0, ddof=1).sum()
    assert 0.3 < pca.explained_variance_.sum() / total < 1.0


# --------------------------------------------------------------------------------------------
# the bundled demo views: SIFT matches agree with the recorded ground-truth homographies
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "view", ["chelsea_perspective.jpg", "astronaut_rotate.jpg", "camera_jpeg.jpg"]
)
def test_demo_views_match_their_homographies(demo_folder, view):
    import json

    record_path = demo_folder / "views.json"
    if not record_path.is_file():
        pytest.skip("assets/demo has not been generated")
    rec = json.loads(record_path.read_text())[view]
    a = extract_features(demo_folder / rec["source"], "sift", max_features=300)
    b = extract_features(demo_folder / view, "sift", max_features=300)
    assert list(b.image_size) == rec["size"]
    pairs = mutual_matches(a.descriptors, b.descriptors)
    assert len(pairs) >= 30
    H = np.array(rec["homography"])
    p = np.c_[a.xy[pairs[:, 0]], np.ones(len(pairs))] @ H.T
    err = np.linalg.norm(p[:, :2] / p[:, 2:] - b.xy[pairs[:, 1]], axis=1)
    assert np.mean(err < 3.0) > 0.85


def test_a_lower_contrast_threshold_keeps_fainter_features(img):
    faint = (128 + (img.astype(np.float32) - 128) * 0.1).astype(np.uint8)
    usual = extract_features(faint, "sift", max_features=None)
    low = extract_features(faint, "sift", max_features=None, contrast_threshold=0.004)
    assert len(low) > len(usual)
    assert len(extract_features(faint, "sift", contrast_threshold=0.004, max_features=7)) == 7
