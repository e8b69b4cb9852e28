"""The grouping's global appearance channel (engine.cluster.appearance) and its cache."""

from __future__ import annotations

import shutil

import numpy as np
import pytest


def _scene(rng: np.random.Generator, size: int = 140) -> np.ndarray:
    import cv2

    img = np.full((size, size), 128, np.uint8)
    for _ in range(20):
        c = tuple(int(v) for v in rng.integers(0, size, 2))
        cv2.circle(img, c, int(rng.integers(4, 18)), int(rng.integers(0, 255)), -1)
    return img


@pytest.fixture()
def photos(tmp_path, monkeypatch):
    """An indexed folder of 5 small photos; chunks of 2 photos in the dense channel."""
    import cv2

    import engine.cluster.channel
    import engine.cluster.model
    from engine.collection import Collection

    channel = engine.cluster.channel
    monkeypatch.setattr(channel, "DENSE_CHUNK", 2)
    monkeypatch.setitem(channel.CATEGORY_FEATURES, "side", 120)
    monkeypatch.setitem(channel.CATEGORY_FEATURES, "max_features", 100)
    monkeypatch.setitem(engine.cluster.model.CATEGORY_VOCAB, "branching", 4)
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(5):
        cv2.imwrite(str(folder / f"p{i}.png"), _scene(rng))
    col = Collection.open(folder, tmp_path / "index")
    for _ in col.update(jobs=1):
        pass
    yield col, folder, tmp_path / "index"
    col.close()


def _model(col):
    """(the collection's CategoryModel, [number of photos whose features were computed])."""
    from engine.cluster import category_model_iter

    gen = category_model_iter(col, jobs=1)
    computed = []
    while True:
        try:
            p = next(gen)
        except StopIteration as stop:
            return stop.value, computed
        if p.stage == "features" and p.done == 0:
            computed.append(p.total)


def test_appearance_descriptor_is_a_deterministic_unit_hog():
    from engine.cluster import APPEARANCE, appearance_descriptor

    img = _scene(np.random.default_rng(0), 200)[:, :170]
    a = appearance_descriptor(img, size=APPEARANCE["size"], cell=APPEARANCE["cell"])
    assert a.shape == (324,) and a.dtype == np.float32
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(a, appearance_descriptor(img.copy()))
    flat = appearance_descriptor(np.full((50, 80), 200, np.uint8))
    assert flat.shape == (324,) and not flat.any()  # no gradients: zeros, not NaN
    assert appearance_descriptor(img, size=32, cell=8).shape == (324,)
    with pytest.raises(ValueError, match="uint8"):
        appearance_descriptor(img.astype(np.float32))
    with pytest.raises(ValueError, match="multiple"):
        appearance_descriptor(img, size=60, cell=16)


def test_appearance_kernel_and_the_mix_with_the_pyramid_match():
    from engine.cluster import appearance_kernel, combine_kernels

    rng = np.random.default_rng(1)
    A = rng.random((6, 10))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    K = appearance_kernel(A, gamma=2.0)
    assert K.shape == (6, 6) and K.dtype == np.float64
    assert np.allclose(K, K.T) and np.all(np.diag(K) == 1.0)
    assert np.all((K > 0) & (K <= 1.0))
    d2 = np.sum((A[0] - A[3]) ** 2)
    assert K[0, 3] == pytest.approx(np.exp(-2.0 * d2))
    assert np.allclose(appearance_kernel(A[:2], A[2:5]), K[:2, 2:5])
    D = np.eye(6)
    M = combine_kernels(D, K, weight=0.5)
    assert np.allclose(np.diag(M), 1.0) and np.allclose(M, 0.5 * D + 0.5 * K)
    assert np.allclose(combine_kernels(D, K, weight=0.0), D)
    with pytest.raises(ValueError, match="weight"):
        combine_kernels(D, K, weight=1.5)
    with pytest.raises(ValueError, match="shape"):
        combine_kernels(D[:3], K)


def test_category_features_add_the_appearance_without_changing_the_dense_features():
    from engine.cluster import APPEARANCE, appearance_descriptor, category_features
    from engine.features.dense import trim_box

    img = np.full((150, 190), 255, np.uint8)  # a white frame around a scene
    img[20:140, 30:170] = _scene(np.random.default_rng(2), 140)[:120, :140]
    plain = category_features(img, side=120, max_features=100)
    both = category_features(img, side=120, max_features=100, appearance=True)
    assert plain.appearance is None
    assert np.array_equal(plain.descriptors, both.descriptors)
    assert np.array_equal(plain.xy, both.xy) and plain.image_size == both.image_size
    r0, r1, c0, c1 = trim_box(img, 245)
    want = appearance_descriptor(img[r0:r1, c0:c1], size=APPEARANCE["size"],
                                 cell=APPEARANCE["cell"])  # fmt: skip
    assert both.appearance.dtype == np.float32 and np.array_equal(both.appearance, want)


def test_channel_caches_the_appearance_and_keeps_it_across_reopening_and_updates(photos):
    from engine.cluster import CategoryChannel, category_features, collection_rows
    from engine.collection import Collection

    col, folder, index = photos
    model, computed = _model(col)
    assert computed == [5]
    A = model.appearance
    assert A.shape == (5, 324) and A.dtype == np.float32
    assert np.allclose(np.linalg.norm(A, axis=1), 1.0, atol=1e-5)
    f0 = category_features(model.paths[0], **model.channel.settings)
    assert np.array_equal(A[0], f0.appearance)  # cached = computed afresh
    arrays = col.index_dir / "arrays"
    assert len(list(arrays.glob("cluster.dense.*.app.npy"))) == len(
        model.channel.manifest["chunks"]
    )
    col.close()

    col = Collection.open(folder, index)  # reopened: nothing recomputed, same descriptors
    try:
        again, computed = _model(col)
        assert computed == [0] and np.array_equal(again.appearance, A)
        # one photo replaced by a new one: only it is computed, the others are kept
        old = dict(zip(again.hashes, A, strict=True))
        (folder / "p4.png").unlink()
        shutil.copy(folder / "p0.png", folder / "copy.png")  # same content as p0
        import cv2

        cv2.imwrite(str(folder / "new.png"), _scene(np.random.default_rng(9)))
        for _ in col.update(jobs=1):
            pass
        upd, computed = _model(col)
        assert computed == [1] and upd.appearance.shape == (6, 324)
        for h, a in zip(upd.hashes, upd.appearance, strict=True):
            if h in old:
                assert np.array_equal(a, old[h])
        ch = CategoryChannel(col.store)
        assert set(ch.manifest["items"]) == set(collection_rows(col)[1])
        tokens = {f.name.split(".")[2] for f in arrays.glob("cluster.dense.*.app.npy")}
        assert tokens == set(ch.manifest["chunks"])  # no orphan appearance arrays
    finally:
        col.close()


def test_model_kernel_mixes_the_channels_and_its_blocks_agree(photos):
    from engine.cluster import (
        APPEARANCE,
        SEMANTIC,
        appearance_kernel,
        binned_pyramid_kernel,
        category_kernel_rows,
        semantic_kernel,
    )

    col, _folder, _index = photos
    model, _ = _model(col)
    K = model.kernel()
    assert K.shape == (5, 5) and np.allclose(K, K.T) and np.allclose(np.diag(K), 1.0)
    w, g, a = APPEARANCE["weight"], APPEARANCE["gamma"], SEMANTIC["weight"]
    local = (1 - w) * binned_pyramid_kernel(model.bins) + w * appearance_kernel(
        model.appearance, gamma=g
    )
    assert model.semantic.shape == (5, 1280)
    assert np.allclose(K, (1 - a) * local + a * semantic_kernel(model.semantic))
    rows, cols = np.array([4, 0, 2]), np.array([1, 3])
    assert np.allclose(model.kernel(columns=cols), K[:, cols])
    assert np.allclose(model.kernel(rows=rows, columns=cols), K[np.ix_(rows, cols)])
    got = model.kernel_rows([model.bins[2]], cols, model.appearance[[2]], model.semantic[[2]])
    assert np.allclose(got, K[[2]][:, cols])
    with pytest.raises(ValueError, match="appearance"):
        model.kernel_rows([model.bins[2]], cols, semantic=model.semantic[[2]])
    with pytest.raises(ValueError, match="semantic"):
        model.kernel_rows([model.bins[2]], cols, model.appearance[[2]])
    # new photos are compared as the grouping compares them (the SVM's rows)
    rows = category_kernel_rows(col, [model.paths[2]], [model.paths[1], model.paths[3]])
    assert np.allclose(rows, K[[2]][:, cols], atol=1e-6)


def test_only_the_grouping_channel_keeps_appearance_descriptors(photos):
    from engine.cluster import CATEGORY_FEATURES, CategoryChannel

    col, _folder, _index = photos
    grouping = CategoryChannel(col.store)
    learn_like = CategoryChannel(col.store, dict(CATEGORY_FEATURES), namespace="learn")
    assert grouping.with_appearance and not learn_like.with_appearance
    assert learn_like.appearance(["anything"]) is None
    assert grouping.key != learn_like.key and "appearance" in grouping.key
    assert grouping.with_semantic and not learn_like.with_semantic
    assert learn_like.semantic(["anything"]) is None
    explicit = CategoryChannel(
        col.store, {**CATEGORY_FEATURES, "appearance": True, "semantic": True}
    )
    assert explicit.with_appearance and explicit.key == grouping.key
    assert CategoryChannel(col.store, semantic=False).key != grouping.key


def test_the_number_of_groups_can_be_read_from_other_affinities():
    from engine.cluster import discover_categories

    rng = np.random.default_rng(5)
    fine = np.repeat([0, 1, 2, 3], 10)  # the cut's kernel: 4 blocks
    coarse = fine // 2  # the k kernel: 2 blocks
    K = np.where(fine[:, None] == fine[None, :], 0.8, 0.05) + 0.02 * rng.random((40, 40))
    Kk = np.where(coarse[:, None] == coarse[None, :], 0.8, 0.05) + 0.02 * rng.random((40, 40))
    K, Kk = (K + K.T) / 2, (Kk + Kk.T) / 2
    np.fill_diagonal(K, 1.0)
    np.fill_diagonal(Kk, 1.0)
    assert discover_categories(K, k="auto").k == 4
    for k_graph in (None, 10):
        res = discover_categories(K, k="auto", k_kernel=Kk, k_graph=k_graph)
        assert res.k == 2  # k from Kk, the cut of K: each group two of K's blocks
        assert all(np.unique(res.labels[fine == b]).size == 1 for b in range(4))
    assert discover_categories(K, k=3, k_kernel=Kk).k == 3  # only with k="auto"
    landmarks = np.arange(0, 40, 2)
    res = discover_categories(K[:, landmarks], k="auto", landmarks=landmarks,
                              k_kernel=Kk[:, landmarks])  # fmt: skip
    assert res.k == 2
    with pytest.raises(ValueError, match="k_kernel"):
        discover_categories(K, k="auto", k_kernel=Kk[:5])
