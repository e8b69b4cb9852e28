"""Search by region (engine.index.region, Collection.query / match with ``box=``)."""

import shutil

import cv2
import numpy as np
import pytest
from PIL import Image

from engine.collection import MIN_REGION_FEATURES, Collection
from engine.features.keypoints import Features, extract_features
from engine.index.region import (
    box_mask,
    check_box,
    clip_box,
    displayed_size,
    features_in_box,
    parse_box,
)
from tests._composite import H, side_by_side

GROUPS = ("astronaut", "coffee", "brick")


def _run(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _composite(demo_folder) -> tuple[np.ndarray, int]:
    """astronaut (left) and coffee (right) side by side; the width of the left half."""
    return side_by_side(demo_folder)


@pytest.fixture(scope="module")
def collection(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("region")
    folder = root / "photos"
    folder.mkdir()
    for p in sorted(demo_folder.glob("*.jpg")):
        if p.name.split("_")[0].removesuffix(".jpg") in GROUPS:
            shutil.copy(p, folder / p.name)
    comp, left = _composite(demo_folder)
    query = root / "composite.jpg"  # outside the folder
    Image.fromarray(comp).save(query, quality=92)
    col = Collection.open(folder, root / "index")
    _run(col.update(jobs=1))
    yield col, query, comp, left
    col.close()


def _group(hits, k=4) -> set[str]:
    return {h.path.name.split("_")[0].removesuffix(".jpg") for h in hits[:k]}


@pytest.mark.parametrize("method", ["hybrid", "vocabulary", "uniform"])
def test_a_box_finds_the_object_it_holds(collection, method):
    col, query, comp, left = collection
    width = comp.shape[1]
    whole = col.query(query, method=method, top=8)
    assert _group(whole, 8) >= {"astronaut", "coffee"}  # the photo shows both
    on_left = col.query(query, method=method, top=4, box=(0, 0, left, H))
    on_right = col.query(query, method=method, top=4, box=(left, 0, width - left, H))
    assert _group(on_left) == {"astronaut"}
    assert _group(on_right) == {"coffee"}


def test_the_box_is_in_displayed_pixels_of_a_large_rotated_photo(collection, tmp_path):
    """Full size 2x the loaded one, stored turned (EXIF orientation 6): the box is in
    pixels of the photo as displayed, at its full size."""
    col, _query, comp, left = collection
    big = cv2.resize(comp, (comp.shape[1] * 4, comp.shape[0] * 4), interpolation=cv2.INTER_CUBIC)
    # stored rotated 90 degrees counter-clockwise; orientation 6 turns it back for display
    stored = np.ascontiguousarray(np.rot90(big, 1))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "turned.jpg"
    Image.fromarray(stored).save(path, quality=90, exif=exif.tobytes())
    W, Hd = displayed_size(path)
    assert (W, Hd) == (big.shape[1], big.shape[0])  # upright, full size
    right = (4 * left, 0, W - 4 * left, Hd)
    feats = col.region_features(path, right)
    fw, fh = feats.image_size
    assert fw == 1024 and (fw, fh) != (W, Hd)  # loaded smaller than the full size
    assert (feats.xy[:, 0] >= (4 * left) * fw / W - 1).all()
    assert _group(col.query(path, method="vocabulary", top=4, box=right)) == {"coffee"}


def test_keypoints_are_detected_inside_the_box(collection):
    """A small box gets the strongest keypoints of its own, not only those of the whole
    photo's strongest that fall in it."""
    col, query, _comp, left = collection
    box = (left + 40, 40, 120, 120)
    size = displayed_size(query)
    inside = box_mask(extract_features(query), box, size).sum()  # of the whole photo's 500
    feats = col.region_features(query, box)
    assert len(feats) > inside and len(feats) >= MIN_REGION_FEATURES
    assert box_mask(feats, box, size).all()


def test_match_with_a_box_uses_the_boxed_features(collection, demo_folder):
    col, query, comp, left = collection
    box = (left, 0, comp.shape[1] - left, H)
    target = col.folder / "coffee.jpg"
    res = col.match(query, target, box=box)
    region = col.region_features(query, box)
    pairs = np.asarray(res.pairs).reshape(-1, 2)
    assert len(pairs) >= 8 and pairs[:, 0].max() < len(region)
    assert (np.asarray(res.xy_a)[:, 0] >= left - 1).all()  # every match lies in the box
    assert res.inliers.sum() >= 8
    whole = col.match(query, target)
    assert (np.asarray(whole.xy_a)[:, 0] < left).any()  # (the whole photo: both halves)


def test_features_are_filtered_by_a_box_in_their_pixels(collection):
    col, query, _comp, left = collection
    feats = extract_features(query)  # the composite is < 1024 px: its pixels
    sub = col.region_features(feats, (0, 0, left, H))
    assert 0 < len(sub) < len(feats)
    assert (sub.xy[:, 0] < left).all()
    hits = col.query(feats, method="vocabulary", top=4, box=(0, 0, left, H))
    assert _group(hits) == {"astronaut"}


def test_bad_boxes_are_clear_errors(collection):
    col, query, _comp, _left = collection
    with pytest.raises(ValueError, match=r"the box holds only \d+ features; draw a larger box"):
        col.query(query, box=(5, 5, 6, 6))
    with pytest.raises(ValueError, match="outside the photo"):
        col.query(query, box=(5000, 0, 10, 10))
    with pytest.raises(ValueError, match="width and height must be > 0"):
        col.query(query, box=(0, 0, 0, 10))
    with pytest.raises(ValueError, match="4 numbers"):
        col.query(query, box=(0, 0, 10))
    with pytest.raises(ValueError, match="finite"):
        col.query(query, box=(0, float("nan"), 10, 10))
    with pytest.raises(ValueError, match="holds only"):
        col.match(query, col.folder / "coffee.jpg", box=(5, 5, 6, 6))


def test_a_method_that_reads_pixels_gets_the_box(collection):
    col, query, _comp, left = collection
    seen = []

    def pixels(c, image, top):
        seen.append(image)
        return []

    other = Collection(col.folder, col.store, {"pixels": pixels})
    assert other.query(query, method="pixels", box=(left, 0, 100, 50)) == []
    assert isinstance(seen[0], np.ndarray) and seen[0].shape[:2] == (50, 100)


def test_box_helpers():
    assert check_box([1, 2, 3, 4]) == (1.0, 2.0, 3.0, 4.0)
    assert parse_box(" 10, 20,30.5 ,40") == (10.0, 20.0, 30.5, 40.0)
    for bad in ("1,2,3", "a,b,c,d", "1,2,3,4,5", "1,,3,4", "1,2,-3,4"):
        with pytest.raises(ValueError):
            parse_box(bad)
    assert clip_box((-10, -10, 50, 50), (30, 20)) == (0.0, 0.0, 30.0, 20.0)
    xy = np.array([[0, 0], [9, 9], [10, 10], [19, 5]], np.float32)
    f = Features(np.eye(4, 8, dtype=np.float32), xy, None, None, (20, 20), "sift")
    # the box is in a 2x larger photo: (0, 0, 20, 20) there is (0, 0, 10, 10) here
    assert box_mask(f, (0, 0, 20, 20), (40, 40)).tolist() == [True, True, False, False]
    with pytest.raises(ValueError, match="holds only 2 features"):
        features_in_box(f, (0, 0, 20, 20), (40, 40))


def test_extract_features_within():
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (200, 300), dtype=np.uint8), (0, 0), 1.5)
    whole = extract_features(img, max_features=50)
    part = extract_features(img, max_features=50, within=(0.5, 0.0, 1.0, 0.5))
    assert len(part) == 50
    assert (part.xy[:, 0] >= 149).all() and (part.xy[:, 1] <= 100).all()
    assert part.image_size == whole.image_size
    with pytest.raises(ValueError, match="within"):
        extract_features(img, kind="dense_sift", within=(0, 0, 1, 1))
