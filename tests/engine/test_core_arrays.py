"""engine.core.arrays: the sort that groups bin entries by key, then by owner."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.arrays import key_owner_order


def _check(key, owner, order):
    ks, os_ = key[order], owner[order]
    assert sorted(order.tolist()) == list(range(key.shape[0]))
    assert np.all(ks[1:] >= ks[:-1])  # every key's entries contiguous, keys ascending
    same = ks[1:] == ks[:-1]
    assert np.all(os_[1:][same] >= os_[:-1][same])  # owners ascending within a key


@pytest.mark.parametrize("n_owners", [1, 2, 5, 1000])
def test_random_hashed_keys(n_owners):
    rng = np.random.default_rng(n_owners)
    key = rng.integers(-(2**62), 2**62, 300).repeat(rng.integers(1, 4, 300))
    owner = rng.integers(0, n_owners, key.shape[0])
    _check(key, owner, key_owner_order(key, owner, n_owners))


def test_keys_that_differ_only_in_the_owner_bits_stay_apart():
    """8 and 9 share every bit but the last; with 4 owners (2 low bits replaced) the
    fast sort would interleave them: (8, 0), (9, 1), (8, 2). The exact sort is used."""
    key = np.array([8, 9, 8, 9, 8], np.int64)
    owner = np.array([2, 1, 0, 3, 1], np.int64)
    order = key_owner_order(key, owner, 4)
    _check(key, owner, order)
    assert key[order].tolist() == [8, 8, 8, 9, 9]
    assert owner[order].tolist() == [0, 1, 2, 1, 3]


def test_more_owners_than_the_fast_path_packs():
    rng = np.random.default_rng(3)
    n = 1 << 25
    key = rng.integers(0, 50, 400)
    owner = rng.integers(0, n, 400)
    _check(key, owner, key_owner_order(key, owner, n))
