"""The shot to keep of a group of similar shots (:func:`engine.workflows.keeper.best_shot`):
the sharpest of shots exposed alike, then the first taken -- not "the original"."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from engine.workflows.keeper import (
    KEEPER_BRACKET_RATIO,
    KEEPER_SHARPER,
    CopyStats,
    best_copy,
    best_shot,
    copy_stats,
    suggest_keeper,
    suggest_keepers,
)

SHOTS = "similar_shots"


def _shot(path, *, sharp=100.0, light=120.0, taken=None, mtime=1000.0, w=1000, h=800):
    return CopyStats(path, w, h, 10**5, sharp, None, "JPEG", 90.0, taken, mtime, light)


def test_shots_exposed_differently_are_not_compared_for_sharpness():
    """Of a bracket the brightest frame has the most Laplacian: the rule keeps the first
    taken and says the shots are exposed differently."""
    s = [
        _shot("/p/a.jpg", sharp=100.0, light=60.0, taken="2024-05-01 10:00:00"),
        _shot("/p/b.jpg", sharp=400.0, light=150.0, taken="2024-05-01 10:00:00.5"),
        _shot("/p/c.jpg", sharp=250.0, light=100.0, taken="2024-05-01 10:00:01"),
    ]
    k = suggest_keeper([c.path for c in s], s, tier=SHOTS)
    assert (k.index, k.reason) == (
        0, "exposed differently (a bracket?); the first taken is kept (2024-05-01 10:00:00)"
    )  # fmt: skip
    # within the ratio: exposed alike, the sharpest wins
    s[0] = _shot("/p/a.jpg", sharp=100.0, light=150.0 / KEEPER_BRACKET_RATIO * 1.01)
    s[2] = _shot("/p/c.jpg", sharp=250.0, light=140.0)
    k = suggest_keeper([c.path for c in s], s, tier=SHOTS)
    assert (k.index, k.reason) == (1, "sharpest (1.6x the fine detail of the next one's)")


def test_the_sharpest_shot_wins_else_the_first_taken():
    s = [
        _shot("/p/a.jpg", sharp=100.0, taken="2024-05-01 10:00:00.10"),
        _shot("/p/b.jpg", sharp=260.0, taken="2024-05-01 10:00:00.30"),
        _shot("/p/c.jpg", sharp=120.0, taken="2024-05-01 10:00:00.20"),
    ]
    k = suggest_keeper([c.path for c in s], s, tier=SHOTS)
    assert (k.index, k.reason) == (1, "sharpest (2.2x the fine detail of the next one's)")
    assert best_copy(s) == 0  # as copies, the first taken is "the original"
    # within the factor: equally sharp, the first taken is kept
    s[1] = _shot("/p/b.jpg", sharp=100.0 * KEEPER_SHARPER * 0.99, taken=s[1].taken)
    k = suggest_keeper([c.path for c in s], s, tier=SHOTS)
    assert (k.index, k.reason) == (
        0, "the shots are alike; the first taken is kept (2024-05-01 10:00:00)"
    )  # fmt: skip
    assert "original" not in k.reason and "cop" not in k.reason


def test_shots_measured_from_headers_only_skip_the_pixel_rules():
    nan = float("nan")
    s = [_shot("/p/a.jpg", sharp=nan, light=nan, mtime=2000.0),
         _shot("/p/b.jpg", sharp=nan, light=nan, mtime=1000.0)]  # fmt: skip
    assert best_shot(s) == 1  # the oldest file
    same = [_shot("/p/a.jpg"), _shot("/p/b.jpg")]
    k = suggest_keeper(["/p/a.jpg", "/p/b.jpg"], same, tier=SHOTS)
    assert (k.index, k.reason) == (0, "the shots are alike (1000x800); the first is kept")
    broken = CopyStats("/p/x.jpg", 0, 0, 0, 0.0, "unreadable")
    assert best_shot([broken, same[1]]) == 1 and best_shot([broken]) == -1
    k = suggest_keeper(["/p/x.jpg", "/p/b.jpg"], [broken, same[1]], tier=SHOTS)
    assert k.reason == "the only readable shot (1000x800)"


def test_resolution_and_reference_folders_still_come_first():
    s = [_shot("/p/a.jpg", sharp=900.0, w=500, h=400), _shot("/ref/b.jpg", sharp=10.0)]
    assert best_shot(s) == 1  # larger
    s = [_shot("/p/a.jpg", sharp=900.0), _shot("/ref/b.jpg", sharp=10.0)]
    k = suggest_keeper([c.path for c in s], s, reference=["/ref"], tier=SHOTS)
    assert (k.index, k.reason) == (1, "in your reference folder")


def _scene(rng):
    """A textured 600 x 800 RGB picture covering the whole range of gray levels."""
    ramp = np.linspace(0, 255, 800, dtype=np.float32)[None, :].repeat(600, 0)
    texture = rng.normal(0, 40, (600, 800)).astype(np.float32)
    import cv2

    texture = cv2.GaussianBlur(texture, (0, 0), 1.0)
    gray = np.clip(ramp + texture, 0, 255)
    return gray[..., None].repeat(3, 2)


def _save(path, rgb, taken):
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = taken
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(path, quality=92, exif=exif)


def test_a_burst_keeps_its_sharp_frame_and_a_bracket_its_first(tmp_path):
    """Real files measured by :func:`copy_stats`: the shaken frame of a burst (taken
    first) is not suggested; of a bracket (the bright frame sharpest by the Laplacian,
    taken last) the first frame is."""
    import cv2

    rng = np.random.default_rng(3)
    scene = _scene(rng)
    shaken = cv2.blur(scene, (9, 1))  # camera shake along x
    burst = [tmp_path / "burst_1.jpg", tmp_path / "burst_2.jpg"]
    _save(burst[0], shaken, "2024:05:01 10:00:00")
    _save(burst[1], scene, "2024:05:01 10:00:01")
    k = suggest_keeper(burst, tier=SHOTS)
    assert k.path == str(burst[1]) and k.reason.startswith("sharpest (")
    assert suggest_keeper(burst).path == str(burst[0])  # as copies: the original

    bracket = [tmp_path / f"bracket_{n}.jpg" for n in ("mid", "dark", "bright")]
    for i, gain in enumerate((1.0, 0.6, 1.6)):
        _save(bracket[i], scene * gain, f"2024:05:01 11:00:0{i}")
    stats = [copy_stats(p)[0] for p in bracket]
    assert stats[2].sharpness > KEEPER_SHARPER * stats[0].sharpness  # (brightest: "sharpest")
    k = suggest_keeper(bracket, tier=SHOTS)
    assert k.path == str(bracket[0]) and k.reason.startswith("exposed differently")


def test_suggest_keepers_asks_each_groups_own_rule(tmp_path):
    s = [_shot("/p/a.jpg"), _shot("/p/b.jpg")]
    groups = [[tmp_path / "missing.jpg"], [tmp_path / "missing2.jpg"]]
    assert suggest_keepers(groups, tiers=[SHOTS, None], workers=0) == [None, None]
    with pytest.raises(ValueError, match="2 tiers given for 1 groups"):
        suggest_keepers(groups[:1], tiers=[SHOTS, None], workers=0)
    assert best_shot(s) == 0
