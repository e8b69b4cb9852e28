"""The feature-free way to find copies of photos with too few features
(:mod:`engine.workflows.appearance`) and the pixel test's local-disagreement evidence
(:mod:`engine.workflows.pixels`)."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from engine.workflows.appearance import (
    APPEARANCE_HAMMING,
    appearance_agreement,
    appearance_candidates,
    orientations,
    signature,
)
from engine.workflows.duplicates import DEFAULT_RULE, PairEvidence, pair_evidence
from engine.workflows.pixels import (
    PIXEL_CLEAN_BONUS,
    PIXEL_CLEAN_SHARE,
    combine_evidence,
    pixel_evidence,
)

cv2 = pytest.importorskip("cv2")


def _night_sky(seed: int, *, moon: tuple[int, int] | None = None) -> np.ndarray:
    """A 240 x 320 gray night sky: a glow, sensor noise (spread over a pixel or two, as
    demosaicing leaves it), faint stars, maybe a moon."""
    rng = np.random.default_rng(seed)
    h, w = 240, 320
    yy, xx = np.mgrid[:h, :w]
    img = 12 + 10 * np.exp(-((xx - 60) ** 2 + (yy - 200) ** 2) / 2e4)  # a glow, low left
    noise = cv2.GaussianBlur(rng.normal(0, 1, (h, w)).astype(np.float32), (0, 0), 1.0)
    img = img + 6 * noise / noise.std()
    for _ in range(120):
        x, y = rng.integers(2, w - 2), rng.integers(2, h - 2)
        img[y - 1 : y + 2, x - 1 : x + 2] += rng.uniform(20, 80) * np.array(
            [[0.3, 0.6, 0.3], [0.6, 1.0, 0.6], [0.3, 0.6, 0.3]]
        )
    if moon is not None:
        img += 200 * ((xx - moon[0]) ** 2 + (yy - moon[1]) ** 2 < 12**2)
    return np.clip(img, 0, 255).astype(np.float32)


def _jpeg(img: np.ndarray, quality: int, scale: float = 1.0) -> np.ndarray:
    if scale != 1.0:
        img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    _ok, buf = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8), [1, quality])
    return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE).astype(np.float32)


def _bits(sig: np.ndarray) -> np.ndarray:
    return sig.reshape(-1)[1:] > 0


def test_quarter_turns_of_a_signature_are_the_signatures_of_the_turned_picture():
    img = _night_sky(1, moon=(200, 80))
    sigs = orientations(signature(img))
    for k in range(4):
        turned = np.rot90(img, -k).copy()  # k quarter turns clockwise
        differ = np.sum(_bits(sigs[k]) != _bits(signature(turned)))
        assert differ <= 2, (k, differ)


def test_candidates_pair_copies_in_any_orientation_and_not_other_skies():
    sky = _night_sky(2)
    other = _night_sky(3)
    copies = [
        sky + 30,  # brightened
        np.rot90(sky, -1).copy(),  # turned a quarter clockwise
        _jpeg(sky, 50, 0.5),  # half size, quality 50
    ]
    sigs = np.stack([signature(x) for x in [sky, other, *copies]])
    found = {(i, j): k for i, j, k in appearance_candidates(sigs)}
    assert found.get((0, 2)) == 0
    assert found.get((0, 3)) == 1
    assert found.get((0, 4)) == 0
    assert (0, 1) not in found
    assert APPEARANCE_HAMMING < 32  # (a random pair differs in about half of 63 bits)


@pytest.mark.parametrize(
    "make, turns",
    [
        (lambda x: x + 30, 0),
        (lambda x: np.rot90(x, -1).copy(), 1),
        (lambda x: np.rot90(x, 2).copy(), 2),
        (lambda x: _jpeg(x, 92, 0.6), 0),
        (lambda x: _jpeg(x, 92), 0),
    ],
    ids=["brighter", "turned 90", "turned 180", "60 % q92", "q92"],
)
def test_a_copy_of_a_night_sky_agrees(make, turns):
    sky = _night_sky(4, moon=(150, 110))
    agree = appearance_agreement(sky, make(sky), turns)
    assert agree >= DEFAULT_RULE.same_photo_pixels


def test_a_slightly_rotated_copy_is_aligned_before_it_is_compared():
    sky = _night_sky(5, moon=(160, 120))
    m = cv2.getRotationMatrix2D((160, 120), 3.0, 1.0)
    turned = _jpeg(cv2.warpAffine(sky, m, (320, 240), flags=cv2.INTER_LINEAR), 92)
    assert appearance_agreement(sky, turned, 0) >= DEFAULT_RULE.same_photo_pixels


def test_another_shot_of_the_sky_does_not_agree():
    # the same moon moved a little, the same glow, other noise and other stars
    first = _night_sky(6, moon=(150, 110))
    second = _night_sky(7, moon=(153, 108))
    assert appearance_agreement(first, second, 0) < 0.5
    assert np.isnan(appearance_agreement(first, first[:, :200], 0))  # not one aspect


def test_disagreeing_tiles_tell_a_recompressed_copy_from_a_second_shot():
    rng = np.random.default_rng(8)
    base = cv2.GaussianBlur(rng.uniform(0, 255, (240, 320)).astype(np.float32), (0, 0), 1.5)
    eye = np.eye(3)
    copy = _jpeg(base, 40)
    agree, disagree = pixel_evidence(base, copy, eye, (320, 240), (320, 240))
    assert agree > 0.5 and disagree <= PIXEL_CLEAN_SHARE
    shot = base.copy()
    shot[40:100, 60:140] = np.roll(shot[40:100, 60:140], 7, axis=1)  # something moved
    agree2, disagree2 = pixel_evidence(base, _jpeg(shot, 40), eye, (320, 240), (320, 240))
    assert disagree2 > 3 * PIXEL_CLEAN_SHARE
    assert combine_evidence(agree, disagree) == pytest.approx(min(1.0, agree + PIXEL_CLEAN_BONUS))
    assert combine_evidence(agree2, disagree2) == pytest.approx(agree2)


def _pair(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A textured picture, a blurred, recompressed and slightly shifted copy, and the
    homography of the shift."""
    rng = np.random.default_rng(seed)
    base = cv2.GaussianBlur(rng.uniform(0, 255, (240, 320)).astype(np.float32), (0, 0), 1.2)
    m = np.array([[1.0, 0.0, 0.6], [0.0, 1.0, -0.4], [0.0, 0.0, 1.0]])
    copy = _jpeg(cv2.GaussianBlur(cv2.warpPerspective(base, m, (320, 240)), (0, 0), 0.8), 60)
    return base, copy, m


def _read_only(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.flags.writeable = False
    return x


def test_remembered_detail_of_read_only_pictures_gives_the_same_evidence():
    # the derived arrays of a read-only picture (as the duplicate search's worker
    # processes hand them out) are remembered between pairs; the evidence is the
    # evidence of pictures computed afresh, bit for bit, also when remembered
    from engine.workflows import pixels

    pixels._MEMO.clear()
    pixels._MEMO_SIZE[0] = 0
    pics = [_pair(seed) for seed in (11, 12)]
    fresh = [pixel_evidence(a, b, m, (320, 240), (320, 240)) for a, b, m in pics]
    assert not pixels._MEMO  # (writable arrays: nothing remembered)
    ro = [(_read_only(a), _read_only(b), m) for a, b, m in pics]
    for _ in range(2):  # (the second time from what is remembered)
        again = [pixel_evidence(a, b, m, (320, 240), (320, 240)) for a, b, m in ro]
        assert np.array(again).tobytes() == np.array(fresh).tobytes()
    assert len(pixels._MEMO) == 4 and pixels._MEMO_SIZE[0] > 0
    # each way round: the picture with more pixels is the one warped
    a, b, m = ro[0]
    swapped = pixel_evidence(b, a, np.linalg.inv(m), (320, 240), (320, 240))
    assert swapped == pixel_evidence(b.copy(), a.copy(), np.linalg.inv(m), (320, 240), (320, 240))


def test_a_writable_picture_changed_in_place_is_compared_as_it_is_now():
    a, b, m = _pair(13)
    before = pixel_evidence(a, b, m, (320, 240), (320, 240))
    b[60:180, 80:240] = np.roll(b[60:180, 80:240], 9, axis=0)  # changed in place
    after = pixel_evidence(a, b, m, (320, 240), (320, 240))
    assert after == pixel_evidence(a.copy(), b.copy(), m, (320, 240), (320, 240))
    assert after[0] < before[0]


def test_remembered_detail_stays_within_its_bytes(monkeypatch):
    from engine.workflows import pixels

    pixels._MEMO.clear()
    pixels._MEMO_SIZE[0] = 0
    monkeypatch.setattr(pixels, "PIXEL_MEMO_BYTES", 2 * 2**20)  # (about 3 pictures' worth)
    for seed in range(20, 26):
        a, b, m = _pair(seed)
        pixel_evidence(_read_only(a), _read_only(b), m, (320, 240), (320, 240))
        assert pixels._MEMO_SIZE[0] <= pixels.PIXEL_MEMO_BYTES
        held = sum(pixels._nbytes(v) for _x, d in pixels._MEMO.values() for v in d.values())
        assert held == pixels._MEMO_SIZE[0]
    assert 1 <= len(pixels._MEMO) < 12
    pixels._MEMO.clear()
    pixels._MEMO_SIZE[0] = 0


def test_a_turned_night_sky_saved_at_a_lower_quality_is_recreated(tmp_path):
    """A quarter-turned copy of a night sky saved at JPEG quality 75: its noise, the
    only fine detail, agrees at 0.90-0.95; the sky turned and saved with the copy's own
    quantisation table agrees fully. Another sky saved alike is not recreated."""
    from engine.workflows.appearance import appearance_tests, load_gray
    from engine.workflows.pixels import jpeg_facts

    rule = DEFAULT_RULE
    band = (0.9, rule.same_photo_pixels)
    src = tmp_path / "sky.jpg"
    cv2.imwrite(str(src), _night_sky(4, moon=(150, 110)).astype(np.uint8), [1, 95])
    turned = tmp_path / "turned.jpg"
    cv2.imwrite(str(turned), np.rot90(cv2.imread(str(src), 0), -1).copy(), [1, 75])
    ga, gb = load_gray(src), load_gray(turned)
    facts = lambda: (jpeg_facts(src), jpeg_facts(turned))  # noqa: E731
    agree, compressed = appearance_tests(ga, gb, 1, facts, band)
    assert agree == pytest.approx(appearance_agreement(ga, gb, 1))
    assert band[0] <= agree < rule.same_photo_pixels <= rule.same_photo_compressed <= compressed
    other = tmp_path / "other.jpg"
    cv2.imwrite(str(other), np.rot90(_night_sky(5, moon=(150, 110)), -1).astype(np.uint8), [1, 75])
    go = load_gray(other)
    agree, compressed = appearance_tests(
        ga, go, 1, lambda: (jpeg_facts(src), jpeg_facts(other)), band
    )
    assert agree < band[0] and np.isnan(compressed)  # (not asked)


def _haze(seed: int) -> np.ndarray:
    """A 240 x 320 hazy sky with no local features: a gradient and faint sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:240, :320]
    img = 120 + 60 * yy / 240 + 20 * np.sin(xx / 90.0 + seed)
    noise = cv2.GaussianBlur(rng.normal(0, 1, (240, 320)).astype(np.float32), (0, 0), 1.0)
    return np.clip(img + 4 * noise / noise.std(), 0, 255).astype(np.uint8)


def _groups_of(folder, index, demo_folder) -> list[tuple[str, list[str]]]:
    """(tier, sorted names) of the duplicate groups of ``folder``, indexed with a photo
    of many features added (the search models need features), whose three other photos
    have almost none."""
    from engine.collection import Collection

    shutil.copy(demo_folder / "brick.jpg", folder)
    with Collection.open(folder, index) as col:
        for _ in col.update():
            pass
        assert sum(r.n_features < 25 for r in col.searcher.store.records()) == 3
        groups = col.duplicates()
    return [(g.tier, sorted(p.name for p in g.paths)) for g in groups]


def test_find_duplicates_links_a_turned_recompressed_haze(tmp_path, demo_folder):
    """Photos without features are compared by appearance (the aerial haze of Holidays'
    124800 and its turned copy were missed): a quarter-turned copy at quality 80 agrees
    at 0.92 only, and is a copy by the compressed-copy test; another haze is not."""
    folder = tmp_path / "haze"
    folder.mkdir()
    cv2.imwrite(str(folder / "haze.jpg"), _haze(1), [1, 95])
    turned = np.rot90(cv2.imread(str(folder / "haze.jpg"), 0), -1).copy()
    cv2.imwrite(str(folder / "haze turned.jpg"), turned, [1, 80])
    cv2.imwrite(str(folder / "other haze.jpg"), _haze(2), [1, 95])
    assert _groups_of(folder, tmp_path / "idx", demo_folder) == [
        ("same_photo", ["haze turned.jpg", "haze.jpg"])
    ]


def test_find_duplicates_links_a_blurred_recompressed_night_sky(tmp_path, demo_folder):
    """A night sky blurred and saved again at quality 70: its pixels agree at 0.88 only
    (the detail is mostly noise), and its faint features agree with the original's to
    0.41-0.49 px, more than the same-photo rule's 0.35 px but far less than another
    shot's (the moon of Holidays' 127400 turned by a quarter: 0.36-0.50 px, missed
    before :data:`~engine.workflows.appearance.APPEARANCE_RESIDUAL_PX`); another sky is
    not a copy."""
    folder = tmp_path / "sky"
    folder.mkdir()
    sky = _jpeg(_night_sky(10, moon=(150, 110)), 92)
    cv2.imwrite(str(folder / "sky.jpg"), sky.astype(np.uint8), [1, 100])
    blurred = cv2.GaussianBlur(sky, (0, 0), 1.5)
    cv2.imwrite(
        str(folder / "sky soft.jpg"), np.clip(blurred + 0.5, 0, 255).astype(np.uint8), [1, 70]
    )
    other = _night_sky(60, moon=(152, 109))
    cv2.imwrite(str(folder / "other sky.jpg"), other.astype(np.uint8), [1, 92])
    assert _groups_of(folder, tmp_path / "idx", demo_folder) == [
        ("same_photo", ["sky soft.jpg", "sky.jpg"])
    ]


def test_photos_with_a_few_dozen_features_are_compared_in_the_pairs_asked(tmp_path, demo_folder):
    """The second pass (``asked``) takes the photos under ``APPEARANCE_FEW_FEATURES``
    features, and tests a candidate only when asked (the geometric check found no fit,
    or one that keeps the whole frame: :func:`whole_or_none`)."""
    from engine.collection import Collection
    from engine.workflows.appearance import (
        APPEARANCE_FEATURES,
        APPEARANCE_FEW_FEATURES,
        APPEARANCE_FRAME_PX,
        APPEARANCE_RESIDUAL_PX,
        appearance_links,
        whole_or_none,
    )
    from engine.workflows.duplicates import COMPRESSED_FLOOR

    sky = _night_sky(10, moon=(150, 110))
    rng = np.random.default_rng(10)
    for _ in range(5):  # (a few shapes: a few dozen features)
        x, y = rng.integers(10, 280), rng.integers(10, 200)
        w, h = rng.integers(8, 30), rng.integers(8, 30)
        cv2.rectangle(
            sky, (int(x), int(y)), (int(x + w), int(y + h)), float(rng.uniform(60, 160)), -1
        )
    folder = tmp_path / "dusk"
    folder.mkdir()
    cv2.imwrite(str(folder / "dusk.jpg"), np.clip(sky, 0, 255).astype(np.uint8), [1, 95])
    small = cv2.resize(_jpeg(sky, 95), (160, 120), interpolation=cv2.INTER_AREA)
    small = np.clip(small + 0.5, 0, 255).astype(np.uint8)
    cv2.imwrite(str(folder / "dusk small.jpg"), small, [1, 80])
    shutil.copy(demo_folder / "brick.jpg", folder)  # (the search models need features)
    rule = DEFAULT_RULE
    args = dict(compressed=(COMPRESSED_FLOOR, rule.same_photo_compressed),
                low_contrast=(APPEARANCE_RESIDUAL_PX, pair_evidence))  # fmt: skip
    with Collection.open(folder, tmp_path / "idx") as col:
        for _ in col.update():
            pass
        s = col.searcher
        ids = np.asarray(s.ensure()[1].ids).tolist()
        count = {rec.id: rec.n_features for rec in s.store.records()}
        n = {s.row_paths[r].name: count[int(d)] for r, d in enumerate(ids)}
        assert APPEARANCE_FEATURES <= n["dusk.jpg"] < APPEARANCE_FEW_FEATURES
        pixels = rule.same_photo_pixels
        assert appearance_links(s, {}, pixels, **args) == {}  # (the first pass: under 25)
        second = dict(compressed=args["compressed"])  # (by the pixels only)
        assert appearance_links(s, {}, pixels, **second, asked=lambda i, j: False) == {}
        links = appearance_links(s, {}, pixels, **second, asked=lambda i, j: True)
        named = {tuple(sorted(s.row_paths[r].name for r in p)): v for p, v in links.items()}
        assert list(named) == [("dusk small.jpg", "dusk.jpg")]
        assert named[("dusk small.jpg", "dusk.jpg")][0] == "same_photo"
    ev = PairEvidence(40, 20, 0.5, 0.6, 0.001, 0.3, frame_offset_px=APPEARANCE_FRAME_PX + 1)
    assert not whole_or_none(None, 8) and not whole_or_none(ev, 8)
    assert whole_or_none(dataclasses.replace(ev, frame_offset_px=APPEARANCE_FRAME_PX), 8)
    assert whole_or_none(dataclasses.replace(ev, n_inliers=7), 8)


def test_low_contrast_features_find_the_detail_the_usual_threshold_misses():
    from engine.features.keypoints import extract_features
    from engine.workflows.appearance import APPEARANCE_LOW_FEATURES, low_contrast_features

    sky = _night_sky(9)
    hazy = 128 + 0.15 * (sky - sky.mean())  # (the same detail at a seventh of the contrast)
    usual = extract_features(np.clip(hazy, 0, 255).astype(np.uint8), "sift")
    low = low_contrast_features(hazy)
    assert len(usual) < 25 and 100 <= len(low) <= APPEARANCE_LOW_FEATURES
    assert low.image_size == (320, 240) and low.descriptors.dtype == np.float32
    norms = np.linalg.norm(low.descriptors, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)
    assert len(low_contrast_features(np.full((240, 320), 40, np.float32))) == 0  # flat


@pytest.mark.parametrize(
    "make",
    [
        lambda s: _jpeg(np.clip(0.6 * s + 50, 0, 255), 90),  # re-toned (contrast down)
        lambda s: _jpeg(cv2.GaussianBlur(s, (0, 0), 1.0), 90),  # blurred
        lambda s: np.rot90(_jpeg(s, 95), -1).copy(),  # turned
    ],
    ids=["re-toned", "blurred", "turned"],
)
def test_a_copy_of_a_faint_picture_agrees_by_its_low_contrast_features(make):
    from engine.workflows.appearance import low_contrast_agreement, low_contrast_features

    sky = _night_sky(10, moon=(150, 110))
    a, b = low_contrast_features(sky), low_contrast_features(make(sky))
    rule = DEFAULT_RULE.same_photo_residual_px
    share = low_contrast_agreement(a, b, rule, pair_evidence)
    assert share is not None and 0 < share <= 1
    assert low_contrast_agreement(a, b, 0.0, pair_evidence) is None  # (the residual gate)


def test_another_shot_of_a_faint_picture_shares_no_low_contrast_features():
    from engine.workflows.appearance import low_contrast_agreement, low_contrast_features

    first = low_contrast_features(_night_sky(6, moon=(150, 110)))
    second = low_contrast_features(_night_sky(7, moon=(153, 108)))
    rule = DEFAULT_RULE.same_photo_residual_px
    assert low_contrast_agreement(first, second, rule, pair_evidence) is None


def _faint(sky: np.ndarray) -> np.ndarray:
    """The same sky at a seventh of its contrast: no keypoint at the usual threshold."""
    return np.clip(128 + 0.15 * (sky - sky.mean()), 0, 255).astype(np.uint8)


def _turned_crop(img: np.ndarray, margin: int = 36, degrees: float = 3.0) -> np.ndarray:
    """Turned by a few degrees and cropped by ``margin`` pixels top and bottom (a third
    more left and right)."""
    h, w = img.shape
    turn = cv2.getRotationMatrix2D((w / 2, h / 2), degrees, 1.0)
    turned = cv2.warpAffine(img, turn, (w, h), borderMode=cv2.BORDER_REFLECT)
    side = margin * 4 // 3
    return turned[margin : h - margin, side : w - side]


def test_nearest_candidates_pair_a_featureless_picture_beyond_the_limit():
    """A turned crop's signature is too far for a candidate; the pictures that cannot be
    verified geometrically ask for their nearest signatures instead, once per pair."""
    from engine.workflows.appearance import APPEARANCE_FAR, nearest_candidates

    sky = _faint(_night_sky(9))
    sigs = np.stack(
        [signature(sky), signature(_turned_crop(sky)), signature(_faint(_night_sky(10)))]
    )
    bits = int((_bits(sigs[0]) ^ _bits(sigs[1])).sum())
    assert APPEARANCE_HAMMING < bits <= APPEARANCE_FAR  # (the premise)
    assert (0, 1) not in {p[:2] for p in appearance_candidates(sigs)}
    near = nearest_candidates(sigs, np.array([True, False, False]), nearest=1)
    assert [(i, j) for i, j, _k, _b in near] == [(0, 1)]
    assert near[0][3] == bits and near[0][2] == 0
    both = nearest_candidates(sigs, np.array([True, True, False]), nearest=1)
    assert [(i, j) for i, j, _k, _b in both] == [(0, 1)]  # (once)
    assert nearest_candidates(sigs, np.zeros(3, bool)) == []
    assert nearest_candidates(sigs, np.ones(3, bool), most=bits - 1, nearest=3) == [
        p for p in nearest_candidates(sigs, np.ones(3, bool), nearest=3) if p[3] < bits
    ]


def test_find_duplicates_links_turned_crops_of_a_featureless_sky(tmp_path, demo_folder):
    """Crops of a sky turned by 3 degrees -- one 12 bits away (a candidate whose pixels
    fail, beyond the low-contrast test's 8 bits), one 26 bits away (no candidate) -- were
    missed; they are found by their low-contrast features. Another sky is not."""
    from engine.collection import Collection

    folder = tmp_path / "sky"
    folder.mkdir()
    sky = _faint(_night_sky(9))
    cv2.imwrite(str(folder / "sky.png"), sky)
    for name, margin in (("sky crop.jpg", 12), ("sky tight crop.jpg", 36)):
        cv2.imwrite(str(folder / name), _turned_crop(sky, margin), [cv2.IMWRITE_JPEG_QUALITY, 95])
    cv2.imwrite(str(folder / "other sky.png"), _faint(_night_sky(10)))
    shutil.copy(demo_folder / "brick.jpg", folder)  # (the search models need features)
    with Collection.open(folder, tmp_path / "idx") as col:
        for _ in col.update():
            pass
        assert sum(r.n_features < 8 for r in col.searcher.store.records()) == 4
        groups = col.duplicates()
    assert [(g.tier, sorted(p.name for p in g.paths)) for g in groups] == [
        ("same_photo", ["sky crop.jpg", "sky tight crop.jpg", "sky.png"])
    ]
