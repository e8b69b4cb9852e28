"""Tests of engine.scan: recursive image discovery, change detection, symlinks, hashing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.io.scan import FileStat, content_hash, scan_folder

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions / symlinks")


def _img(path, seed=0, size=(24, 16), fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        path, format=fmt
    )
    return path


def _real(p) -> str:
    return os.path.realpath(p)


def test_finds_images_by_content_recursively(tmp_path):
    a = _img(tmp_path / "a.jpg")
    b = _img(tmp_path / "sub" / "deeper" / "b.png", 1)
    noext = _img(tmp_path / "sub" / "no_extension", 2, fmt="PNG")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "notes.jpg.txt").write_bytes(b"\xff\xd8\xff")  # content says JPEG
    fake = tmp_path / "fake.jpg"  # suffix says image: kept, so its failure gets reported
    fake.write_bytes(b"not really a jpeg")
    res = scan_folder(tmp_path)
    expected = (a, b, noext, fake, tmp_path / "notes.jpg.txt")
    assert sorted(f.path for f in res.new) == sorted(_real(p) for p in expected)
    assert res.changed == [] and res.unchanged == [] and res.removed == []
    assert res.n_skipped == 1
    st = os.stat(a)
    assert FileStat(_real(a), st.st_size, st.st_mtime_ns) in res.new
    assert all(os.path.isabs(f.path) for f in res.new)


def test_skips_index_and_hidden_dirs_and_excluded(tmp_path):
    _img(tmp_path / "keep.png")
    _img(tmp_path / ".simile" / "x.png")
    _img(tmp_path / ".hidden" / "y.png")
    _img(tmp_path / ".dotfile.png")
    _img(tmp_path / "myindex" / "z.png")
    res = scan_folder(tmp_path, exclude=[tmp_path / "myindex"])
    assert [os.path.basename(f.path) for f in res.new] == ["keep.png"]


def test_incremental_classification(tmp_path):
    a = _img(tmp_path / "a.png", 0)
    b = _img(tmp_path / "b.png", 1)
    c = _img(tmp_path / "c.png", 2)
    first = scan_folder(tmp_path)
    known = {f.path: (f.size, f.mtime_ns) for f in first.new}
    known[_real(tmp_path / "gone.png")] = (10, 10)
    _img(b, 5, size=(30, 30))  # rewrite: size changes
    os.utime(c, ns=(1, 1))  # only mtime changes
    d = _img(tmp_path / "d.png", 3)
    res = scan_folder(tmp_path, known)
    assert [f.path for f in res.new] == [_real(d)]
    assert sorted(f.path for f in res.changed) == sorted([_real(b), _real(c)])
    assert res.unchanged == [_real(a)]
    assert res.removed == [_real(tmp_path / "gone.png")]


def test_changed_file_that_is_no_longer_an_image_is_removed(tmp_path):
    a = _img(tmp_path / "a.png")
    known = {f.path: (f.size, f.mtime_ns) for f in scan_folder(tmp_path).new}
    a.rename(tmp_path / "a.txt")
    a = tmp_path / "a.txt"
    known = {_real(a): v for v in known.values()}
    a.write_text("now a text file, longer than before......")
    res = scan_folder(tmp_path, known)
    assert res.removed == [_real(a)] and not res.changed and not res.new


def test_non_ascii_paths(tmp_path):
    p = _img(tmp_path / "фото" / "café 写真.jpg")
    res = scan_folder(tmp_path)
    assert [f.path for f in res.new] == [_real(p)]


@posix_only
def test_symlink_cycle_and_file_links(tmp_path):
    root = tmp_path / "root"
    a = _img(root / "sub" / "a.png")
    os.symlink(root, root / "sub" / "loop")  # dir cycle back to the root
    os.symlink(a, root / "link_to_a.png")  # file link to a file already in the folder
    outside = _img(tmp_path / "elsewhere" / "o.png", 4)
    os.symlink(outside, root / "o_link.png")  # file link to outside: followed, kept as the link
    os.symlink(tmp_path / "missing.png", root / "dangling.png")
    os.symlink(root / "self_loop.png", root / "self_loop.png")
    res = scan_folder(root)
    link = os.path.join(_real(root), "o_link.png")
    # the photo outside is listed as the link the person sees, never as its target
    assert sorted(f.path for f in res.new) == sorted([_real(a), link])
    assert res.errors == []
    reasons = dict(res.skipped)
    assert "dangling" in reasons[os.path.join(_real(root), "dangling.png")]
    assert "loop" in reasons[os.path.join(_real(root), "self_loop.png")]
    assert "already scanned" in reasons[os.path.join(_real(root), "sub", "loop")]


@posix_only
def test_dir_symlink_followed_once(tmp_path):
    root = tmp_path / "root"
    _img(root / "x.png")
    other = tmp_path / "other"
    _img(other / "b.png", 1)
    os.symlink(other, root / "l1")
    os.symlink(other, root / "l2")
    res = scan_folder(root)
    assert sorted(os.path.basename(f.path) for f in res.new) == ["b.png", "x.png"]
    # inside the folder, under one of the links, never the outside target
    (b_path,) = [f.path for f in res.new if f.path.endswith("b.png")]
    assert os.path.dirname(b_path) in {os.path.join(_real(root), n) for n in ("l1", "l2")}
    assert len(res.skipped) == 1 and "already scanned" in res.skipped[0][1]


@posix_only
def test_special_files_are_listed_not_opened(tmp_path, monkeypatch):
    _img(tmp_path / "ok.png")
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    opened = []
    real_open = open

    def spy(path, *a, **k):
        opened.append(os.fspath(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    res = scan_folder(tmp_path)
    assert [os.path.basename(f.path) for f in res.new] == ["ok.png"]
    assert res.skipped == [(os.path.join(_real(tmp_path), "pipe.jpg"),
                            "not a regular file: a FIFO (named pipe)")]  # fmt: skip
    assert os.path.join(_real(tmp_path), "pipe.jpg") not in opened


@posix_only
def test_non_utf8_file_name_is_kept_exactly(tmp_path):
    raw = os.fsencode(tmp_path) + b"/Urlaub_M\xfcnchen.png"
    _img(Path(os.fsdecode(raw)))
    res = scan_folder(tmp_path)
    assert [os.fsencode(f.path) for f in res.new] == [raw]


def test_unreadable_subfolder_is_reported_not_fatal(tmp_path, monkeypatch):
    _img(tmp_path / "ok.png")
    locked = tmp_path / "locked"
    _img(locked / "secret.png")
    real_scandir = os.scandir

    def scandir(path):  # chmod 0 does not stop root, so simulate EACCES
        if os.fspath(path) == _real(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr("engine.io.scan.os.scandir", scandir)
    known = {_real(locked / "secret.png"): (1, 1), _real(tmp_path / "gone.png"): (1, 1)}
    res = scan_folder(tmp_path, known)
    # files of an unreadable folder are kept, not dropped from the index
    assert res.removed == [_real(tmp_path / "gone.png")]
    assert [os.path.basename(f.path) for f in res.new] == ["ok.png"]
    assert len(res.errors) == 1 and res.errors[0][0] == _real(locked)
    assert "cannot read folder" in res.errors[0][1]


def test_missing_root_and_file_root(tmp_path):
    with pytest.raises(FileNotFoundError):
        scan_folder(tmp_path / "nope")
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        scan_folder(f)


def test_content_hash_exact(tmp_path):
    a = tmp_path / "a.bin"
    b = tmp_path / "b.bin"
    data = bytearray(np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8))
    a.write_bytes(bytes(data))
    b.write_bytes(bytes(data))
    assert content_hash(a) == content_hash(b)
    assert len(content_hash(a)) == 32
    data[150_000] ^= 1  # a change in the middle, same size, same head and tail
    b.write_bytes(bytes(data))
    assert content_hash(a) != content_hash(b)


def test_scan_speed_many_files(tmp_path):
    """10k non-image files + unchanged known images: scandir-based, no per-file re-reads."""
    import time

    png = _img(tmp_path / "base.png").read_bytes()
    for i in range(300):
        (tmp_path / f"i{i:04d}.png").write_bytes(png)
    first = scan_folder(tmp_path)
    known = {f.path: (f.size, f.mtime_ns) for f in first.new}
    t = time.perf_counter()
    res = scan_folder(tmp_path, known, is_image=lambda p: pytest.fail(f"read {p}"))
    dt = time.perf_counter() - t
    assert len(res.unchanged) == 301
    assert dt < 0.5, dt


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX")
def test_root_symlink_is_resolved(tmp_path):
    real = tmp_path / "real"
    a = _img(real / "a.png")
    os.symlink(real, tmp_path / "alias")
    res = scan_folder(tmp_path / "alias")
    assert [f.path for f in res.new] == [_real(a)]


def test_phone_and_camera_files_are_proposed_by_suffix_or_signature(tmp_path):
    """HEIC, AVIF and RAW files go to the indexer (which reads them or says why it cannot),
    whatever their decoder: by suffix even when their content is junk, by signature
    without a suffix."""
    named = []
    names = "IMG_0001.HEIC b.heif c.avif d.jxl DSC_0001.NEF e.CR3 f.arw g.raf h.orf i.rw2"
    for name in [*names.split(), "j.dng", "k.pef", "l.srw", "m.cr2"]:
        p = tmp_path / name
        p.write_bytes(b"not decodable")
        named.append(p)
    unnamed = tmp_path / "from_phone"
    unnamed.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\0" * 64)
    raf = tmp_path / "camera_file"
    raf.write_bytes(b"FUJIFILMCCD-RAW 0201FF383501" + b"\0" * 64)
    (tmp_path / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2")
    res = scan_folder(tmp_path)
    expected = [*named, unnamed, raf]
    assert sorted(f.path for f in res.new) == sorted(_real(p) for p in expected)
    assert res.n_skipped == 1  # the video
