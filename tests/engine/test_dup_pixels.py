"""The pixel test's second-shot cues (issue #23): noise-only tiles, moved detail, tone
edits, zoomed-in shots, and the clean agreement that lets a re-toned or blurred copy
through a looser feature residual."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from engine.workflows.duplicates import DEFAULT_RULE, PairEvidence, pair_tier
from engine.workflows.framing import zoomed_shot
from engine.workflows.pixel_tiles import PIXEL_MOVED_CAP, tone_mapped
from engine.workflows.pixels import pixel_evidence


def _gray(path) -> np.ndarray:
    return cv2.imread(str(path), cv2.IMREAD_GRAYSCALE).astype(np.float32)


def test_a_folding_tone_edit_is_undone():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (64, 64)).astype(np.float32)
    y = np.abs(1.4 * x - 50)  # (OpenCV's convertScaleAbs: dark levels fold back)
    inside = np.ones(x.shape, bool)
    assert np.abs(tone_mapped(x, y, inside) - y).max() < 4.0
    # a moved picture is no tone edit: mapping the levels does not make it agree
    other = np.roll(x, 7, axis=1)
    assert np.abs(tone_mapped(x, other, inside) - other).mean() > 40.0


def test_a_watermark_is_an_edit_and_moved_detail_is_another_shot(demo_folder):
    img = _gray(demo_folder / "chelsea.jpg")
    h, w = img.shape
    eye = np.eye(3)
    marked = img.astype(np.uint8)
    cv2.putText(marked, "(c) Simile 2026", (w // 20, h * 9 // 10), cv2.FONT_HERSHEY_SIMPLEX,
                w / 300, 255, max(1, round(2 * w / 300)), cv2.LINE_AA)  # fmt: skip
    marked = marked.astype(np.float32)
    agree, disagree = pixel_evidence(img, marked, eye, (w, h), (w, h))
    assert disagree > 0.0 and agree >= DEFAULT_RULE.same_photo_pixels, (agree, disagree)
    # a second shot moments apart: new sensor noise, and a part of the scene moved (a
    # block of it shifted by a few pixels, as a person or a wave)
    rng = np.random.default_rng(0)
    shot = np.clip(img + rng.normal(0, 2.0, img.shape), 0, 255).astype(np.float32)
    agree, _disagree = pixel_evidence(img, shot, eye, (w, h), (w, h))
    assert agree > PIXEL_MOVED_CAP, agree  # (noise alone: the usual agreement decides)
    y0, x0, s = h // 3, w // 3, min(h, w) // 4
    shot[y0 : y0 + s, x0 : x0 + s] = shot[y0 + 3 : y0 + s + 3, x0 + 4 : x0 + s + 4].copy()
    agree, _disagree = pixel_evidence(img, shot, eye, (w, h), (w, h))
    assert agree <= PIXEL_MOVED_CAP, agree


def test_a_zoomed_in_shot_is_not_a_cut_of_the_wide_one(demo_folder):
    img = _gray(demo_folder / "chelsea.jpg")
    h, w = img.shape
    wide = cv2.resize(img, (w // 2, h // 2), interpolation=cv2.INTER_AREA)
    # the middle half of the scene at full resolution (a longer lens) ...
    zoom = img[h // 4 : h // 4 + h // 2, w // 4 : w // 4 + w // 2]
    # ... and the same part cut from the wide picture and enlarged (a copy)
    cut = wide[h // 8 : h // 8 + h // 4, w // 8 : w // 8 + w // 4]
    enlarged = cv2.resize(cut, (zoom.shape[1], zoom.shape[0]), interpolation=cv2.INTER_CUBIC)
    # zoom/enlarged pixels -> wide pixels
    to_wide = np.array([[0.5, 0, w / 8 - 0.25], [0, 0.5, h / 8 - 0.25], [0, 0, 1.0]])
    size_z, size_w = zoom.shape[::-1], wide.shape[::-1]
    assert zoomed_shot(zoom, wide, to_wide, size_z, size_w)
    assert zoomed_shot(wide, zoom, np.linalg.inv(to_wide), size_w, size_z)
    assert not zoomed_shot(enlarged, wide, to_wide, size_z, size_w)
    # a whole picture resized is no zoom (it shows the whole scene)
    half = np.array([[0.5, 0, -0.25], [0, 0.5, -0.25], [0, 0, 1.0]])
    assert not zoomed_shot(img, wide, half, img.shape[::-1], size_w)


def test_a_looser_residual_needs_a_clean_pixel_agreement():
    """The looser residual of a clean agreement is an option of the rule (off by
    default: it costs 2.6x the CPU of a large first search for little)."""
    r = dataclasses.replace(DEFAULT_RULE, same_photo_residual_px_clean=0.7)
    res = 0.5 * (r.same_photo_residual_px + r.same_photo_residual_px_clean)
    ev = PairEvidence(200, 150, 0.6, 0.7, 0.0005, res, pixel_agreement=0.97)
    clean = dataclasses.replace(ev, pixel_disagreement=0.0)
    assert pair_tier(clean, r) == "same_photo"
    assert pair_tier(clean) == "similar_shots"  # (the default rule: the residual decides)
    assert pair_tier(dataclasses.replace(ev, pixel_disagreement=0.05), r) == "similar_shots"
    assert pair_tier(ev, r) == "similar_shots"  # (not measured: not clean)
    comp = dataclasses.replace(ev, pixel_agreement=0.92, compressed_agreement=0.99)
    assert pair_tier(dataclasses.replace(comp, pixel_disagreement=0.0), r) == "similar_shots"
    far = dataclasses.replace(ev, residual_px=r.same_photo_residual_px_clean + 0.1)
    assert pair_tier(dataclasses.replace(far, pixel_disagreement=0.0), r) == "similar_shots"


def test_the_frame_offset_tells_a_picture_kept_in_its_frame():
    from engine.workflows.framing import frame_offset

    size = (320, 240)
    assert frame_offset(np.eye(3), size, size) < 1e-9
    # a whole picture halved: its corners land on the half-size picture's corners
    half = np.array([[0.5, 0, -0.25], [0, 0.5, -0.25], [0, 0, 1.0]])
    assert frame_offset(half, size, (160, 120)) < 1e-9
    # turned by a quarter turn (x, y) -> (h - 1 - y, x): each corner onto the next one
    turn = np.array([[0, -1.0, 239.0], [1.0, 0, 0], [0, 0, 1.0]])
    assert frame_offset(turn, size, (240, 320)) < 1e-9
    # shifted by 6 px (a second shot held nearly still), or a cut: off by that much
    shift = np.array([[1.0, 0, 6.0], [0, 1.0, 0], [0, 0, 1.0]])
    assert abs(frame_offset(shift, size, size) - 6.0) < 1e-9
    assert frame_offset(np.eye(3), (200, 150), size) > 50  # (a cut of the top left)
    # (in pixels of the smaller picture: 6 px of the double-size one are 3 of it)
    assert abs(frame_offset(shift @ np.diag([2.0, 2.0, 1.0]), size, (640, 480)) - 3.0) < 1.0


def test_the_frame_residual_asks_the_points_not_the_corners():
    from engine.workflows.framing import frame_residual

    rng = np.random.default_rng(3)
    size = (320, 240)
    pa = rng.uniform([0, 0], [319, 239], (15, 2))
    jitter = rng.normal(0, 0.3, pa.shape)  # (a blurred copy's features move a little)
    assert frame_residual(pa, pa + jitter, size, size) < 0.5
    # halved whole (pixel centres: x -> (x + 0.5) / 2 - 0.5), and turned a quarter
    half = (pa + 0.5) / 2 - 0.5
    assert frame_residual(pa, half, size, (160, 120)) < 1e-9
    turned = np.c_[239.0 - pa[:, 1], pa[:, 0]]
    assert frame_residual(pa, turned, size, (240, 320)) < 1e-9
    # another shot 6 px aside, or a cut of the top left: not the frame's map
    assert abs(frame_residual(pa, pa + np.array([6.0, 0.0]), size, size) - 6.0) < 1e-9
    top_left = pa[(pa[:, 0] < 200) & (pa[:, 1] < 150)]
    assert frame_residual(top_left, top_left, size, (200, 150)) > 20
    assert frame_residual(pa[:0], pa[:0], size, size) == np.inf


def test_a_few_features_fit_with_corners_off_still_keep_the_frame():
    """A blurred copy of a dusk photo: 19 features, moved 0.6 px by the blur; the
    homography fitted to them puts the corners 11 px off, the frame's own map explains
    every feature within a pixel (127600, 107800 of the duplicate benchmark)."""
    r = DEFAULT_RULE
    ev = PairEvidence(19, 19, 0.3, 0.3, 0.002, 0.63, pixel_agreement=0.977,
                      pixel_disagreement=0.002, frame_offset_px=11.2,
                      frame_residual_px=0.7)  # fmt: skip
    assert pair_tier(ev) == "same_photo"
    assert pair_tier(dataclasses.replace(ev, frame_residual_px=np.inf)) == "similar_shots"
    off = dataclasses.replace(ev, frame_residual_px=r.same_photo_residual_px_frame + 0.1)
    assert pair_tier(off) == "similar_shots"
    assert pair_tier(dataclasses.replace(ev, pixel_agreement=0.9)) == "similar_shots"


def test_a_picture_kept_in_its_frame_may_have_a_looser_residual():
    """A copy blurred or re-toned in place moves its features by up to 0.7 px, not its
    frame: its pixels decide as for a copy within the plain residual."""
    r = DEFAULT_RULE
    res = 0.5 * (r.same_photo_residual_px + r.same_photo_residual_px_frame)
    kept = PairEvidence(200, 150, 0.6, 0.7, 0.0005, res, pixel_agreement=0.97,
                        pixel_disagreement=0.02, frame_offset_px=1.0)  # fmt: skip
    assert pair_tier(kept) == "same_photo"  # (not clean, yet a copy: the frame is kept)
    moved = dataclasses.replace(kept, frame_offset_px=r.same_photo_frame_px + 1.0)
    assert pair_tier(moved) == "similar_shots"  # (another shot: only the plain residual)
    assert pair_tier(dataclasses.replace(kept, pixel_agreement=0.9)) == "similar_shots"
    assert pair_tier(dataclasses.replace(kept, pixel_agreement=float("nan"))) == "similar_shots"
    far = dataclasses.replace(kept, residual_px=r.same_photo_residual_px_frame + 0.05)
    assert pair_tier(far) == "similar_shots"
    # within the plain residual, the frame does not matter
    near = dataclasses.replace(moved, residual_px=r.same_photo_residual_px)
    assert pair_tier(near) == "same_photo"
