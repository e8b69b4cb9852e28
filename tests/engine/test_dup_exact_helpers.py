"""The duplicate search's faster helpers give the numbers of what they replace, to the
bit (issue #20: the search's answers stay byte-identical)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.arrays import median_of
from engine.workflows.framing import frame_offset


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_median_of_is_numpys_median(dtype):
    rng = np.random.default_rng(20)
    for t in range(3000):
        n = int(rng.integers(1, 40))
        x = (rng.normal(0, 1, n) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
        if t % 3 == 0:
            x = np.round(x, 1)  # (ties)
        if t % 11 == 0:
            x[rng.integers(0, n)] = np.nan
        if t % 13 == 0:
            x[rng.integers(0, n)] = np.inf
        want, got = np.median(x), median_of(x)
        assert got.dtype == want.dtype
        assert got == want or (np.isnan(got) and np.isnan(want))


def _frame_offset_by_turns(h, size_a, size_b):
    """frame_offset as first written: one quarter turn at a time."""
    (wa, ha), (wb, hb) = size_a, size_b
    ca = np.array([[-0.5, -0.5], [wa - 0.5, -0.5], [wa - 0.5, ha - 0.5], [-0.5, ha - 0.5]])
    cb = np.array([[-0.5, -0.5], [wb - 0.5, -0.5], [wb - 0.5, hb - 0.5], [-0.5, hb - 0.5]])
    q = ca @ h[:2, :2].T + h[:2, 2]
    z = ca @ h[2, :2] + h[2, 2]
    if not (z > 0).all():
        return float("inf")
    q = q / z[:, None]
    off = min(float(np.linalg.norm(q - np.roll(cb, k, axis=0), axis=1).max()) for k in range(4))
    return off * min(1.0, max(wa, ha) / max(wb, hb, 1))


def test_frame_offset_gives_the_numbers_of_one_turn_at_a_time():
    rng = np.random.default_rng(21)
    turn = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 400.0], [0.0, 0.0, 1.0]])
    for t in range(3000):
        h = (turn if t % 2 else np.eye(3)) + rng.normal(0, 1e-3, (3, 3))
        h[:2] += rng.normal(0, 0.2, (2, 3)) * (t % 3 == 0)
        size_a = (int(rng.integers(40, 1025)), int(rng.integers(40, 1025)))
        size_b = (int(rng.integers(40, 1025)), int(rng.integers(40, 1025)))
        assert frame_offset(h, size_a, size_b) == _frame_offset_by_turns(h, size_a, size_b)


def test_tiles_gather_the_pixels_cut_gives():
    from engine.workflows.pixel_tiles import PixelTiles

    rng = np.random.default_rng(22)
    inside = np.ones((61, 83), bool)
    inside[:, :9] = False
    inside[50:, 40:] = False
    tiles = PixelTiles(inside, 8)
    hp = rng.normal(size=inside.shape).astype(np.float32)
    u, norms = tiles.side(hp)
    want = tiles.cut(hp)[tiles.ok]
    want = want - want.mean(axis=1, keepdims=True)
    assert u.tobytes() == want.tobytes()
    assert norms.tobytes() == np.linalg.norm(want, axis=1).tobytes()
    # (a picture of another layout goes the way it went before)
    u2, _ = tiles.side(np.asfortranarray(hp))
    assert u2.tobytes() == want.tobytes()
