"""The index's cache files (``engine.index.files.read_cache`` / ``write_cache``): what
both remembered-work caches (duplicate pair checks, grouping scene pairs) rely on."""

from __future__ import annotations

import os

import numpy as np

from engine.index.files import read_cache, write_cache


def test_round_trip_and_version(tmp_path):
    path = tmp_path / "cache" / "x.npz"
    arrays = {"a": np.arange(5, dtype=np.uint64), "p": np.linspace(0, 1, 5)}
    assert write_cache(path, 3, arrays)
    got = read_cache(path, 3, ("a", "p"))
    assert got is not None
    np.testing.assert_array_equal(got["a"], arrays["a"])
    np.testing.assert_array_equal(got["p"], arrays["p"])
    assert read_cache(path, 4, ("a", "p")) is None  # another version: unusable
    assert read_cache(path, 3, ("a", "missing")) is None
    assert read_cache(tmp_path / "none.npz", 3, ("a",)) is None
    assert [p.name for p in path.parent.iterdir()] == ["x.npz"]  # no temporary left


def test_damaged_or_pickled_files_are_not_read(tmp_path):
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"PK\x03\x04 not really a zip")
    assert read_cache(damaged, 1, ("a",)) is None
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, version=np.int64(1), a=np.array([{"code": 1}], dtype=object))
    assert read_cache(pickled, 1, ("a",)) is None  # object arrays would unpickle


def test_read_only_folder_is_not_written(tmp_path, monkeypatch):
    import engine.index.files as files

    folder = tmp_path / "cache"
    folder.mkdir()
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: mode != os.W_OK and real(p, mode))
    assert not write_cache(folder / "x.npz", 1, {"a": np.zeros(2)})
    assert list(folder.iterdir()) == []
