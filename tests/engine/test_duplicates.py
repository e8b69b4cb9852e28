"""Duplicate tiers and the copy to keep (:mod:`engine.workflows.duplicates`): one rule for
the app's Duplicates view and ``simile duplicates``."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.io.formats import raw_sidecar_pairs
from engine.workflows.duplicates import (
    DEFAULT_RULE,
    DEFAULT_THRESHOLDS,
    KEEPER_SIDE,
    TIERS,
    CopyStats,
    DuplicateGroup,
    PairEvidence,
    TierRule,
    best_copy,
    copy_stats,
    group_links,
    jpeg_quality,
    looks_derived,
    pair_evidence,
    pair_tier,
    pixel_agreement,
    sharpness,
    suggest_keeper,
)

cv2 = pytest.importorskip("cv2")


# ------------------------------------------------------------------ tiers: the rule
def test_defaults_are_one_rule():
    assert TIERS == ("identical", "same_photo", "similar_shots")
    assert DEFAULT_THRESHOLDS["same_photo"] == DEFAULT_RULE.same_photo_fraction
    assert DEFAULT_THRESHOLDS["similar_shots"] == DEFAULT_RULE.similar_score
    assert DEFAULT_RULE.with_threshold(None) is DEFAULT_RULE
    assert DEFAULT_RULE.with_threshold(0.4).similar_score == 0.4
    assert DuplicateGroup([Path("a")], [1.0]).tier == "same_photo"  # old constructors


def test_pair_tier_follows_the_evidence():
    r = TierRule(
        min_inliers=8,
        same_photo_fraction=0.3,
        same_photo_residual=0.003,
        same_photo_residual_px=0.2,
        same_photo_pixels=0.7,
        similar_score=0.1,
    )
    copy = PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.1, pixel_agreement=0.95)
    assert pair_tier(copy, r) == "same_photo"
    # not measurable pixels: geometry decides
    assert pair_tier(PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.1), r) == "same_photo"
    # each same-photo condition failing alone drops to similar shots (score 0.6 >= 0.1)
    for ev in (
        PairEvidence(200, 150, 0.6, 0.29, 0.0005, 0.1, pixel_agreement=0.95),
        PairEvidence(200, 150, 0.6, 0.7, 0.004, 0.1, pixel_agreement=0.95),
        PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.25, pixel_agreement=0.95),
        PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.1, pixel_agreement=0.5),
        PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.1, pixel_agreement=0.95, taken_differ=True),
        PairEvidence(200, 150, 0.6, 0.7, 0.0005),  # no residual in pixels: no fit
    ):
        assert pair_tier(ev, r) == "similar_shots", ev
    assert pair_tier(PairEvidence(50, 20, 0.09, 0.1, 0.002), r) is None  # weak
    assert pair_tier(PairEvidence(9, 7, 1.0, 1.0, 0.0), r) is None  # too few inliers
    # pixels below the rule, made up for by the compressed-copy test (or not)
    low = PairEvidence(200, 150, 0.6, 0.7, 0.0005, 0.1, pixel_agreement=0.6)
    comp = dataclasses.replace(low, compressed_agreement=r.same_photo_compressed)
    assert pair_tier(comp, r) == "same_photo"
    short = dataclasses.replace(low, compressed_agreement=r.same_photo_compressed - 0.01)
    assert pair_tier(short, r) == "similar_shots"
    assert pair_tier(dataclasses.replace(comp, taken_differ=True), r) == "similar_shots"


def test_groups_are_built_strictest_tier_first():
    paths = [Path(f"/p/{c}.jpg") for c in "abcdefghij"]
    links = {
        (0, 1): ("identical", 1.0),  # a = b only: identical group
        (2, 3): ("identical", 1.0),  # c = d, plus a resized e: same-photo group
        (3, 4): ("same_photo", 0.5),
        (4, 5): ("similar_shots", 0.3),  # e is grouped already: f is not in its group
        (5, 6): ("similar_shots", 0.2),  # f ~ g ~ h: a similar-shots group
        (6, 7): ("similar_shots", 0.4),
        (0, 8): ("similar_shots", 0.9),  # a is in a group of copies: i is related to it
        (1, 8): ("similar_shots", 0.6),  # (and to b: its best score counts)
        (3, 9): ("similar_shots", 0.25),  # j: related to the group of d
        (4, 9): ("similar_shots", 0.35),
    }
    groups = group_links(links, paths)
    got = [(g.tier, sorted(p.stem for p in g.paths)) for g in groups]
    assert got == [
        ("identical", ["a", "b"]),
        ("same_photo", ["c", "d", "e"]),
        ("similar_shots", ["f", "g", "h"]),
    ]
    same = groups[1]
    assert same.paths[0] == paths[3] and same.scores[0] == 1.0  # d: most links
    assert dict(zip(same.paths, same.scores, strict=True))[paths[4]] == 0.5
    shots = groups[2]
    assert shots.paths[0] == paths[6]  # g links both others
    assert {p.stem for p in shots.paths} & {"a", "e", "i"} == set()
    # photos in no group that are shots of a copy: listed with it, not members of it
    assert groups[0].related == [(paths[8], 0.9)]
    assert same.related == [(paths[9], 0.35), (paths[5], 0.3)]  # (f: in a group of shots)
    assert shots.related == []


def test_raw_beside_its_jpeg_is_a_pair():
    paths = [Path(p) for p in ("/x/IMG_1.NEF", "/x/IMG_1.JPG", "/y/IMG_1.jpg", "/x/IMG_2.JPG",
                               "/x/IMG_2.jpg")]  # fmt: skip
    assert raw_sidecar_pairs(paths) == {(0, 1)}


# ------------------------------------------------------------------ tiers: evidence
def _gray(path: Path, side: int | None = None) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE).astype(np.float32)
    if side:
        f = side / max(img.shape)
        img = cv2.resize(img, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)
    return img


def _feats(img: np.ndarray):
    from engine.features.keypoints import extract_features

    return extract_features(img.astype(np.uint8))


def test_evidence_tells_a_copy_from_another_shot(demo_folder):
    img = _gray(demo_folder / "brick.jpg")
    h, w = img.shape
    half = cv2.resize(img, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
    crop = img[h // 8 : h - h // 8, w // 6 : w - w // 10]
    # "another shot": the scene moved by 3 % and its fine detail differs (new noise)
    rng = np.random.default_rng(0)
    shifted = np.roll(img, (h // 30, w // 30), axis=(0, 1))
    other = np.clip(cv2.GaussianBlur(shifted, (0, 0), 1.5) + rng.normal(0, 6, img.shape), 0, 255)
    f0 = _feats(img)
    for copy in (half, crop):
        fc = _feats(copy)
        ev = pair_evidence(f0, fc)
        assert ev.n_inliers >= 8 and ev.overlap_fraction > 0.3 and ev.residual < 0.003, ev
        assert ev.residual_px < DEFAULT_RULE.same_photo_residual_px, ev
        assert ev.homography is not None
        agree = pixel_agreement(img, copy, ev.homography, f0.image_size, fc.image_size)
        assert agree > 0.8, agree
    fo = _feats(other)
    ev = pair_evidence(f0, fo)
    assert ev.n_inliers >= 8
    agree = pixel_agreement(img, other, ev.homography, f0.image_size, fo.image_size)
    assert agree < 0.7, agree
    unrelated = pair_evidence(f0, _feats(_gray(demo_folder / "coffee.jpg")))
    assert pair_tier(unrelated) is None


def test_pixel_test_matches_blur_and_rejects_another_framing(demo_folder):
    import dataclasses

    img = _gray(demo_folder / "chelsea.jpg")
    f0 = _feats(img)

    def judged(other: np.ndarray) -> tuple[float, str | None]:
        fo = _feats(other)
        ev = pair_evidence(f0, fo)
        agree = pixel_agreement(img, other, ev.homography, f0.image_size, fo.image_size)
        return agree, pair_tier(dataclasses.replace(ev, pixel_agreement=agree))

    # a blurred, recompressed copy: the sharp picture is blurred to its level first
    blurred = cv2.GaussianBlur(img, (0, 0), 1.4)
    _ok, buf = cv2.imencode(".jpg", blurred.astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 80])
    agree, tier = judged(cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE).astype(np.float32))
    assert agree >= DEFAULT_RULE.same_photo_pixels and tier == "same_photo", agree
    # a copy turned by 90 degrees: the sub-pixel offset of the feature fit is taken out
    agree, tier = judged(np.ascontiguousarray(np.rot90(img)))
    assert agree >= DEFAULT_RULE.same_photo_pixels and tier == "same_photo", agree
    # another framing of a scene (the camera panned by 12 %): each picture shows
    # detail the other lacks, so not a copy, however alike the overlap
    wide = _gray(demo_folder / "astronaut.jpg")
    left, right = wide[:, : wide.shape[1] * 7 // 8], wide[:, wide.shape[1] // 8 :]
    fl, fr = _feats(left), _feats(right)
    ev = pair_evidence(fl, fr)
    assert ev.overlap_fraction > 0.3 and ev.residual_px < 0.1, ev  # the geometry agrees
    assert pixel_agreement(left, right, ev.homography, fl.image_size, fr.image_size) == 0.0
    # two different photos never pass for a copy
    ev = pair_evidence(f0, _feats(wide))
    assert pair_tier(ev) != "same_photo" or ev.homography is None


def test_two_framings_are_settled_without_aligning_them_again(demo_folder, monkeypatch):
    """Two framings of a scene (agreement 0) stay two framings under any alignment: the
    pixels are not aligned again (the costliest step), the answer is the same."""
    import engine.workflows.align as align
    from engine.workflows.pixels import pixel_tests

    def refit(*args, **kwargs):
        raise AssertionError("two framings aligned again")

    monkeypatch.setattr(align, "refit_homography", refit)
    wide = _gray(demo_folder / "astronaut.jpg")
    left, right = wide[:, : wide.shape[1] * 7 // 8], wide[:, wide.shape[1] // 8 :]
    fl, fr = _feats(left), _feats(right)
    ev = pair_evidence(fl, fr)
    facts = lambda: (None, None)  # noqa: E731
    band = (0.8, DEFAULT_RULE.same_photo_pixels)
    args = (left, right, ev.homography, fl.image_size, fr.image_size, facts, band)
    agree, compressed, disagree = pixel_tests(*args, disagreement=True)
    assert (agree, disagree) == (0.0, 1.0) and np.isnan(compressed)


# ------------------------------------------------------------------ tiers: a collection
@pytest.fixture(scope="module")
def dup_collection(tmp_path_factory, demo_folder):
    from engine.collection import Collection

    root = tmp_path_factory.mktemp("dupcol")
    photos = root / "photos"
    photos.mkdir()
    for name in ("brick.jpg", "coffee.jpg", "astronaut.jpg", "camera.jpg", "chelsea.jpg"):
        shutil.copy(demo_folder / name, photos / name)
    shutil.copy(demo_folder / "coffee.jpg", photos / "coffee_again.jpg")
    img = cv2.imread(str(demo_folder / "brick.jpg"))
    h, w = img.shape[:2]
    half = cv2.resize(img, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(photos / "brick_small.jpg"), half, [cv2.IMWRITE_JPEG_QUALITY, 60])
    cv2.imwrite(str(photos / "brick_rot.png"), cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE))
    col = Collection.open(photos, root / "idx")
    for _ in col.update(jobs=1):
        pass
    yield col
    col.close()


def test_find_duplicates_labels_the_tiers(dup_collection):
    col = dup_collection
    seen = []
    groups = col.duplicates(progress=lambda done, total: seen.append((done, total)))
    named = {g.tier: sorted(p.name for p in g.paths) for g in groups}
    assert named["identical"] == ["coffee.jpg", "coffee_again.jpg"]
    assert named["same_photo"] == ["brick.jpg", "brick_rot.png", "brick_small.jpg"]
    assert len(groups) == 2  # the other photos are distinct
    assert seen and seen[0][0] == 0 and seen[-1][0] == seen[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    only = col.duplicates(tiers=("identical",))
    assert [g.tier for g in only] == ["identical"]
    assert [g.tier for g in col.duplicates(tiers=["same_photo"])] == ["same_photo"]
    with pytest.raises(ValueError):
        col.duplicates(tiers=("nearly",))
    with pytest.raises(ValueError):
        col.duplicates(0.0)


def test_find_duplicates_can_be_cancelled(dup_collection):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InterruptedError):
        dup_collection.duplicates(cancel=cancel)


# ------------------------------------------------------------------ keeper
def test_sharpness_is_the_variance_of_the_laplacian():
    rng = np.random.default_rng(0)
    noisy = rng.random((40, 50)).astype(np.float32)
    g = noisy.astype(np.float32)
    lap = 4 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    assert sharpness(noisy) == pytest.approx(float(lap.var()))
    smooth = np.add.outer(np.arange(40.0), np.arange(50.0))  # a ramp: zero Laplacian
    assert sharpness(smooth) == 0.0 and sharpness(noisy) > 0
    assert sharpness(np.zeros((2, 9))) == 0.0 and sharpness(np.zeros((4, 4, 3))) == 0.0


def _st(path, w=1000, h=800, *, fmt="JPEG", q=90.0, taken=None, mtime=1000.0, size=10**5,
        error=None):  # fmt: skip
    return CopyStats(path, w, h, size, 1.0, error, fmt, q, taken, mtime)


def test_keeper_prefers_resolution():
    s = [_st("/p/small.jpg", 500, 400, q=100), _st("/p/big.jpg", 1000, 800, q=50, mtime=9e9)]
    k = suggest_keeper([c.path for c in s], s)
    assert (k.index, k.reason) == (1, "larger (1000x800 vs 500x400)")
    near = [_st("/p/a/x.jpg", 1000, 800), _st("/p/x.jpg", 990, 800)]  # within 5 %: equal
    assert best_copy(near) == 1  # decided by the shorter path
    broken = _st("/p/b.jpg", 0, 0, error="unreadable")
    assert best_copy([broken, s[0]]) == 1 and best_copy([broken]) == -1 and best_copy([]) == -1
    k = suggest_keeper(["/p/b.jpg", "/p/small.jpg"], [broken, s[0]])
    assert k.reason.startswith("the only readable copy")
    assert suggest_keeper(["/p/b.jpg"], [broken]) is None


def test_keeper_prefers_less_compression_within_a_format():
    s = [_st("/p/a.jpg", q=60), _st("/p/b.jpg", q=92)]
    k = suggest_keeper([c.path for c in s], s)
    assert (k.index, k.reason) == (1, "less compressed (JPEG quality 92 vs 60)")
    assert best_copy([_st("/p/a.jpg", q=90), _st("/p/bb.jpg", q=92)]) == 0  # within 3 points
    webp = [_st("/p/a.webp", fmt="WEBP", size=50_000), _st("/p/b.webp", fmt="WEBP", size=90_000)]
    assert best_copy(webp) == 1
    # different formats are not compared by compression: the older file wins
    mixed = [_st("/p/a.png", fmt="PNG", q=None, mtime=2000.0), _st("/p/b.jpg", q=50)]
    k = suggest_keeper([c.path for c in mixed], mixed)
    assert k.index == 1 and k.reason.startswith("original: file from")


def test_keeper_prefers_the_earliest_capture_then_the_older_file():
    s = [
        _st("/p/a.jpg", taken="2019-06-01 10:05:00"),
        _st("/p/b.jpg", taken="2019-06-01 10:02:00"),
    ]
    k = suggest_keeper([c.path for c in s], s)
    assert k.index == 1
    assert k.reason == "original: taken 2019-06-01 10:02, the other was taken later"
    s = [_st("/p/a.jpg"), _st("/p/b.jpg", taken="2019-06-01 10:02:00")]
    k = suggest_keeper([c.path for c in s], s)
    assert k.index == 1 and "the other has no capture time" in k.reason
    s = [_st("/p/a.jpg", mtime=5000.0), _st("/p/b.jpg", mtime=1000.0)]
    assert best_copy(s) == 1
    assert best_copy([_st("/p/aa.jpg", mtime=1001.0), _st("/p/b.jpg", mtime=1000.0)]) == 1
    assert best_copy([_st("/p/a.jpg", mtime=1001.0), _st("/p/bb.jpg", mtime=1000.0)]) == 0


def test_keeper_avoids_export_and_copy_folders():
    # the byte-identical pair: the export copy used to be suggested
    s = [_st("/pics/exports/100000 copy.jpg"), _st("/pics/holidays/100000.jpg")]
    k = suggest_keeper([c.path for c in s], s)
    assert k.index == 1
    assert k.reason == "the other is in an export folder (exports)"
    s = [_st("/pics/a/IMG_1 (1).jpg"), _st("/pics/a/IMG_1-longer-name.jpg")]
    k = suggest_keeper([c.path for c in s], s)
    assert k.index == 1 and k.reason == "the other is named like a copy (IMG_1 (1).jpg)"
    assert looks_derived("/pics/Kopie von Urlaub/x.jpg", "/pics")
    assert looks_derived("/pics/backup/x.jpg", "/pics") == "is in a copy folder (backup)"
    assert looks_derived("/pics/x copy 2.jpg") and looks_derived("/pics/x-1.jpg")
    assert looks_derived("/pics/2019/IMG_0001.jpg", "/pics") is None
    # a collection that lives under ~/backup is not a copy of itself
    s = [_st("/home/u/backup/a/long/x.jpg"), _st("/home/u/backup/b/x.jpg")]
    assert best_copy(s) == 1  # the shorter path decides, not "backup"


def test_reference_folders_always_win(tmp_path):
    ref = tmp_path / "masters"
    s = [_st(str(tmp_path / "x.jpg"), 2000, 1600), _st(str(ref / "deep" / "x.jpg"), 500, 400)]
    assert best_copy(s) == 0
    k = suggest_keeper([c.path for c in s], s, reference=[ref])
    assert (k.index, k.reason) == (1, "in your reference folder")
    assert best_copy(s, reference=[tmp_path / "elsewhere"]) == 0


def test_keeper_reads_size_quality_and_capture_time(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(3)
    img = cv2.GaussianBlur((rng.random((600, 800, 3)) * 255).astype(np.uint8), (0, 0), 2)
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = "2019:06:01 10:02:00"
    Image.fromarray(img).save(tmp_path / "orig.jpg", quality=95, exif=exif)
    Image.fromarray(img).save(tmp_path / "low.jpg", quality=50)
    cv2.imwrite(str(tmp_path / "half.png"), cv2.resize(img, (400, 300)))
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    st, pixels = copy_stats(tmp_path / "orig.jpg")
    assert (st.width, st.height, st.error, st.format) == (800, 600, None, "JPEG")
    assert st.taken == "2019-06-01 10:02:00" and st.jpeg_quality == pytest.approx(95, abs=1)
    assert pixels.shape == (KEEPER_SIDE * 600 // 800, KEEPER_SIDE, 3)
    assert st.file_size == (tmp_path / "orig.jpg").stat().st_size
    assert copy_stats(tmp_path / "low.jpg")[0].jpeg_quality == pytest.approx(50, abs=1)
    assert copy_stats(tmp_path / "half.png")[0].jpeg_quality is None
    bad, none = copy_stats(tmp_path / "broken.jpg")
    assert bad.error and none is None and bad.pixels == 0
    os.utime(tmp_path / "orig.jpg", (9e8, 2e9))  # the original looks newer: quality decides
    paths = [tmp_path / n for n in ("half.png", "low.jpg", "broken.jpg", "orig.jpg")]
    k = suggest_keeper(paths)
    assert k.path == str(paths[3])
    assert k.reason == "larger (800x600 vs 400x300); less compressed (JPEG quality 95 vs 50)"


def test_keeper_reads_headers_and_decodes_only_the_copy_it_keeps(tmp_path, monkeypatch):
    """Without measured stats the rule reads the copies' headers (what it uses of them
    is what :func:`copy_stats` reads) and decodes only the copy it chooses: a truncated
    copy whose header reads fine but whose pixels do not is never the one kept."""
    import engine.workflows.keeper as keeper

    rng = np.random.default_rng(4)
    img = cv2.GaussianBlur((rng.random((600, 800, 3)) * 255).astype(np.uint8), (0, 0), 2)
    cv2.imwrite(str(tmp_path / "big.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    cv2.imwrite(str(tmp_path / "small.jpg"), cv2.resize(img, (400, 300)))
    cv2.imwrite(str(tmp_path / "mid.jpg"), cv2.resize(img, (600, 450)))
    for name in ("big.jpg", "small.jpg", "mid.jpg"):
        full, head = copy_stats(tmp_path / name)[0], keeper.header_stats(tmp_path / name)
        pixels = {"sharpness": full.sharpness, "brightness": full.brightness}
        assert dataclasses.replace(head, **pixels) == full
    data = (tmp_path / "big.jpg").read_bytes()
    (tmp_path / "big.jpg").write_bytes(data[: len(data) // 3])  # (its header still reads)
    assert keeper.header_stats(tmp_path / "big.jpg").error is None
    decoded = []
    real = keeper.copy_stats
    monkeypatch.setattr(keeper, "copy_stats", lambda p, *a: decoded.append(p) or real(p, *a))
    paths = [tmp_path / n for n in ("small.jpg", "big.jpg", "mid.jpg")]
    k = suggest_keeper(paths)
    assert k.path == str(paths[2])  # (the larger one is broken)
    assert [Path(p).name for p in decoded] == ["big.jpg", "mid.jpg"]


def test_jpeg_quality_inverts_the_ijg_scaling():
    from engine.workflows.keeper import _IJG_LUMA

    for q in (25, 40, 50, 75, 95):  # (below 25 entries clip at 255: estimates run high)
        scale = 5000 / q if q < 50 else 200 - 2 * q
        table = np.clip(np.floor((_IJG_LUMA * scale + 50) / 100), 1, 255)
        assert jpeg_quality(table) == pytest.approx(q, abs=1.5)


def test_the_raw_file_is_kept_over_its_jpeg():
    s = [_st("/p/IMG_1.JPG", 6000, 4000), _st("/p/IMG_1.NEF", 6000, 4000, fmt="", q=None)]
    k = suggest_keeper([c.path for c in s], s)
    assert (k.index, k.reason) == (1, "the camera's RAW file")
    s = [_st("/p/IMG_1.JPG", 6000, 4000), _st("/p/other/IMG_1.JPG", 3000, 2000)]
    assert "RAW" not in suggest_keeper([c.path for c in s], s).reason


def test_hard_links_to_one_file_are_not_duplicates_of_each_other(tmp_path):
    """Two names of one file (a clean-up's "replace by a hard link") take no space twice:
    they are not offered as identical files again."""
    import os

    from engine.workflows.duplicates import _one_per_file

    a, b, c = tmp_path / "a.jpg", tmp_path / "b.jpg", tmp_path / "c.jpg"
    a.write_bytes(b"same bytes")
    os.link(a, b)
    c.write_bytes(b"same bytes")
    assert _one_per_file([0, 1, 2], [a, b, c]) == [0, 2]
    assert _one_per_file([0, 2], [a, b, c]) == [0, 2]


def test_the_keepers_reason_names_the_copy_kept_and_counts_the_others():
    """Three copies: the reason gives the kept copy's own size (not another's of about
    the same size) and says "the 2 others" where more than one copy lost."""
    from engine.workflows.keeper import CopyStats, suggest_keeper

    def st(path, w, h, mtime):
        return CopyStats(path, w, h, 1000, 1.0, None, "PNG", None, None, mtime)

    stats = [
        st("/f/a_long_name.png", 512, 512, 100.0),
        st("/f/b.png", 900, 300, 100.0),  # about as many pixels, the shorter path
        st("/f/c.png", 328, 335, 100.0),
    ]
    k = suggest_keeper([s.path for s in stats], stats)
    assert k.path == "/f/b.png"
    assert k.reason.startswith("larger (900x300 vs 328x335)")
    old = [st("/f/x.png", 100, 100, 0.0), st("/f/y.png", 100, 100, 500.0),
           st("/f/z.png", 100, 100, 900.0)]  # fmt: skip
    k = suggest_keeper([s.path for s in old], old)
    assert k.path == "/f/x.png" and "the 2 others were made later" in k.reason


# ------------------------------------------------------------------ remembered pair checks
def test_a_second_search_checks_only_the_pairs_it_has_not_seen(tmp_path, demo_folder, monkeypatch):
    """The pair checks are remembered by the photos' contents: the same search again
    checks nothing, the same groups come out; after photos are added, only pairs that
    involve them are checked; a damaged cache is ignored; a read-only one is not written."""
    from engine.collection import Collection
    from engine.workflows import duplicates as dup
    from engine.workflows.pair_cache import CACHE_FILE

    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("brick.jpg", "coffee.jpg", "astronaut.jpg", "camera.jpg", "chelsea.jpg"):
        shutil.copy(demo_folder / name, photos / name)
    img = cv2.imread(str(demo_folder / "brick.jpg"))
    cv2.imwrite(str(photos / "brick_rot.png"), cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE))
    checked = []
    real = dup.pair_evidence

    def counting(fa, fb):
        checked.append((len(fa), len(fb)))
        return real(fa, fb)

    monkeypatch.setattr(dup, "pair_evidence", counting)

    def search(col):
        checked.clear()
        groups = col.duplicates()
        return sorted((g.tier, sorted(p.name for p in g.paths)) for g in groups), len(checked)

    with Collection.open(photos, tmp_path / "idx") as col:
        for _ in col.update(jobs=1):
            pass
        first, n_first = search(col)
        assert n_first > 0 and (tmp_path / "idx" / CACHE_FILE).is_file()
        again, n_again = search(col)
        assert again == first and n_again == 0
        assert first == [("same_photo", ["brick.jpg", "brick_rot.png"])]
        # two photos added: only pairs with one of them are checked
        shutil.copy(demo_folder / "coffee_light.jpg", photos / "coffee_light.jpg")
        shutil.copy(demo_folder / "rocket.jpg", photos / "rocket.jpg")
        for _ in col.update(jobs=1):
            pass
        paths = col.searcher.row_paths
        new_rows = {i for i, p in enumerate(paths) if p.name in ("coffee_light.jpg", "rocket.jpg")}
        seen_pairs = []
        real_verify = dup._verify

        def spy(store, data, paths_, todo, *args, **kw):
            def blocks():  # (the blocks of pairs asked, as the candidate search finds them)
                for block in todo:
                    seen_pairs.extend(map(tuple, block.tolist()))
                    yield block

            return real_verify(store, data, paths_, blocks(), *args, **kw)

        monkeypatch.setattr(dup, "_verify", spy)
        grown, n_grown = search(col)
        assert 0 < n_grown < n_first + 2 * len(paths)
        n_involving = sum(1 for i, j in seen_pairs if i in new_rows or j in new_rows)
        assert n_grown <= n_involving + 2  # (pairs of old photos that became neighbours)
        monkeypatch.setattr(dup, "_verify", real_verify)
        # a damaged cache is ignored (and written again whole)
        (tmp_path / "idx" / CACHE_FILE).write_bytes(b"not a zip")
        again, n = search(col)
        assert again == grown and n >= n_grown
        assert search(col)[1] == 0
        # a cache folder that cannot be written: the search still answers
        if os.geteuid() != 0:
            os.chmod(tmp_path / "idx" / "cache", 0o555)
            try:
                (tmp_path / "idx" / CACHE_FILE).unlink()
            except PermissionError:
                pass
            assert search(col)[0] == grown
            os.chmod(tmp_path / "idx" / "cache", 0o755)


def test_compressed_copy_test_recreates_a_re_export(demo_folder, tmp_path):
    """A small, heavily compressed re-export is the original resized and saved with the
    copy's own quantisation table: recreated that way it agrees almost perfectly,
    whichever usual program resized it (also when the blur-matched pixel test is unsure);
    another shot does not, nor a copy that is not a JPEG (nan: nothing to recreate)."""
    from PIL import Image

    from engine.workflows.appearance import load_gray
    from engine.workflows.pixels import compressed_agreement, jpeg_facts

    src = demo_folder / "chelsea.jpg"
    img = cv2.imread(str(src))
    h, w = img.shape[:2]
    size = (w // 2, h // 2)
    fo = _feats(_gray(src))

    def judged(path):
        fc = _feats(_gray(path))
        ev = pair_evidence(fo, fc)
        ga, gc = load_gray(src), load_gray(path)
        args = (ga, gc, ev.homography, fo.image_size, fc.image_size)
        return pixel_agreement(*args), compressed_agreement(
            *args, jpeg_facts(src), jpeg_facts(path)
        )

    made = {
        "area": cv2.resize(img, size, interpolation=cv2.INTER_AREA),
        "lanczos": np.asarray(Image.fromarray(img).resize(size, Image.Resampling.LANCZOS)),
    }
    for name, small in made.items():
        path = tmp_path / f"{name}.jpg"
        cv2.imwrite(str(path), small, [cv2.IMWRITE_JPEG_QUALITY, 40])
        pixels, compressed = judged(path)
        assert compressed >= 0.99 > pixels, (name, pixels, compressed)
        assert compressed >= DEFAULT_RULE.same_photo_compressed
    png = tmp_path / "small.png"
    cv2.imwrite(str(png), made["area"])
    assert np.isnan(judged(png)[1])
    # another shot: the scene moved by 3 % and its fine detail differs (its own sensor
    # noise), saved alike
    gray = _gray(src)
    rng = np.random.default_rng(0)
    shifted = np.roll(gray, (h // 30, w // 30), axis=(0, 1))
    other = np.clip(cv2.GaussianBlur(shifted, (0, 0), 1.0) + rng.normal(0, 12, gray.shape), 0, 255)
    path = tmp_path / "other.jpg"
    small = cv2.resize(other.astype(np.uint8), size, interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(path), small, [cv2.IMWRITE_JPEG_QUALITY, 40])
    assert judged(path)[1] < DEFAULT_RULE.same_photo_compressed - 0.05


def test_a_copy_under_a_feature_fit_a_little_off_is_aligned_again_by_its_pixels(
    demo_folder, tmp_path
):
    """A copy turned by 4.8 degrees, compared under a fit a fifth of a degree off (as
    one of few, noisy features can be): the agreement of the fit falls short, the
    pictures aligned again by their pixels agree as under the true turn. Another shot
    is not helped."""
    from engine.workflows.appearance import load_gray
    from engine.workflows.pixels import jpeg_facts, pixel_tests

    src = demo_folder / "chelsea.jpg"
    img = cv2.imread(str(src))
    h, w = img.shape[:2]
    turn = cv2.getRotationMatrix2D((w / 2, h / 2), 4.8, 1.0)
    path = tmp_path / "turned.jpg"
    cv2.imwrite(str(path), cv2.warpAffine(img, turn, (w, h)), [cv2.IMWRITE_JPEG_QUALITY, 92])
    ga, gb = load_gray(src), load_gray(path)
    band = (0.9, DEFAULT_RULE.same_photo_pixels)
    facts = lambda: (jpeg_facts(src), jpeg_facts(path))  # noqa: E731

    def homography(angle: float, scale: float = 1.0) -> np.ndarray:
        return np.vstack([cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale), [0, 0, 1]])

    exact = pixel_agreement(ga, gb, homography(4.8), (w, h), (w, h))
    off = homography(5.0, 1.002)
    assert band[0] <= pixel_agreement(ga, gb, off, (w, h), (w, h)) < band[1] <= exact
    agree, _compressed = pixel_tests(ga, gb, off, (w, h), (w, h), facts, band)
    assert agree == pytest.approx(exact, abs=0.005)
    # another shot: the scene moved by 3 % and its fine detail differs
    rng = np.random.default_rng(0)
    gray = _gray(src)
    shifted = np.roll(gray, (h // 30, w // 30), axis=(0, 1))
    other = np.clip(cv2.GaussianBlur(shifted, (0, 0), 1.0) + rng.normal(0, 12, gray.shape), 0, 255)
    fo, fs = _feats(gray), _feats(other)
    ev = pair_evidence(fo, fs)
    agree, _c = pixel_tests(gray, other, ev.homography, fo.image_size, fs.image_size, facts, band)
    assert agree < band[0]


def test_a_whole_frame_copy_joins_no_other_shot_its_original_is_not_a_copy_of(
    tmp_path, monkeypatch
):
    """The walk folder: 123000, a 60 % re-export of it, and 123001, a second shot the
    size of 123000 from nearly the same spot. Reduced, the re-export passes as a copy of
    the second shot too (pixels 0.972, 0.20 px), one link against the one conflict
    between the shots. The re-export keeps 123000's whole frame: it is that picture,
    resized, so it is no more a copy of 123001 than 123000 is. Its link to its original
    counts as exact (residual 0), and the tie goes to it."""
    from engine.collection import Collection
    from engine.workflows import duplicates as dup

    rng = np.random.default_rng(3)
    for name, size in (("a.jpg", (320, 240)), ("c.jpg", (320, 240)), ("web.jpg", (192, 144))):
        img = cv2.GaussianBlur(rng.uniform(0, 255, (size[1], size[0], 3)), (0, 0), 2.0)
        cv2.imwrite(str(tmp_path / name), img.astype(np.uint8))
    with Collection.open(tmp_path, tmp_path / ".idx") as col:
        for _ in col.update(jobs=1):
            pass
        row = {p.name: r for r, p in enumerate(col.searcher.row_paths)}
        a, c, web = row["a.jpg"], row["c.jpg"], row["web.jpg"]
        copy = PairEvidence(180, 150, 0.54, 0.78, 0.0006, 0.13, pixel_agreement=0.981,
                            frame_offset_px=0.7)  # fmt: skip
        cut = PairEvidence(150, 126, 0.46, 0.71, 0.0008, 0.20, pixel_agreement=0.972,
                           frame_offset_px=18.7, frame_residual_px=6.0)  # fmt: skip
        shots = PairEvidence(330, 290, 0.58, 0.66, 0.0006, 0.20, pixel_agreement=0.0,
                             pixel_disagreement=1.0, frame_offset_px=32.6)  # fmt: skip
        found = {
            tuple(sorted(p)): ev for p, ev in (((a, web), copy), ((c, web), cut), ((a, c), shots))
        }
        monkeypatch.setattr(dup, "neighbour_evidence", lambda *args, **kw: found)
        groups = col.duplicates()
    copies = [g for g in groups if g.tier == "same_photo"]
    assert [sorted(p.name for p in g.paths) for g in copies] == [["a.jpg", "web.jpg"]]
    assert copies[0].apart == []
    assert [p.name for p, _s in copies[0].related] == ["c.jpg"]
    # the same links with the re-export's frame not kept (a cut of it): a tie, kept
    found[tuple(sorted((a, web)))] = dataclasses.replace(copy, frame_offset_px=30.0)
    with Collection.open(tmp_path, tmp_path / ".idx") as col:
        groups = col.duplicates()
    names = [sorted(p.name for p in g.paths) for g in groups if g.tier == "same_photo"]
    assert names == [["a.jpg", "c.jpg", "web.jpg"]]
