"""Tests for engine.io.imageio on generated odd and broken files (nothing read from the repo).

The classic formats; HEIC, AVIF, JPEG XL and camera RAW are tested in test_formats.py.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from engine.io.imageio import (
    IMAGE_SUFFIXES,
    ImageLoadError,
    image_size,
    is_image_file,
    load_gray,
    load_image,
)

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def quadrants(w: int = 40, h: int = 30) -> Image.Image:
    """RGB image with four distinct solid quadrants: TL red, TR green, BL blue, BR white."""
    arr = np.zeros((h, w, 3), np.uint8)
    arr[: h // 2, : w // 2] = RED
    arr[: h // 2, w // 2 :] = GREEN
    arr[h // 2 :, : w // 2] = BLUE
    arr[h // 2 :, w // 2 :] = WHITE
    return Image.fromarray(arr)


def corners(a: np.ndarray) -> list[tuple[int, ...]]:
    """Colours at the centres of the four quadrants: TL, TR, BL, BR."""
    h, w = a.shape[:2]
    pts = [(h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, w // 4), (3 * h // 4, 3 * w // 4)]
    return [tuple(int(v) for v in a[y, x]) for y, x in pts]


def close(a: tuple[int, ...], b: tuple[int, ...], tol: int = 12) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def all_close(got: list[tuple[int, ...]], want: list[tuple[int, ...]], tol: int) -> bool:
    return all(close(g, w, tol) for g, w in zip(got, want, strict=True))


def mode_of(path: Path) -> str:
    with Image.open(path) as im:
        return im.mode


def save(im: Image.Image, path: Path, fmt: str | None = None, **kw) -> Path:
    im.save(path, fmt, **kw)
    return path


# --------------------------------------------------------------------------------------------
# formats and pixel modes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "fmt", "tol"),
    [
        (".png", "PNG", 0),
        (".bmp", "BMP", 0),
        (".tif", "TIFF", 0),
        (".webp", "WEBP", 0),  # lossless below
        (".jpg", "JPEG", 12),
        (".gif", "GIF", 0),
    ],
)
def test_formats_roundtrip_quadrants(tmp_path, suffix, fmt, tol):
    kw = {"lossless": True} if fmt == "WEBP" else {"quality": 95} if fmt == "JPEG" else {}
    p = save(quadrants(), tmp_path / f"q{suffix}", fmt, **kw)
    a = load_image(p)
    assert a.shape == (30, 40, 3) and a.dtype == np.uint8
    for got, want in zip(corners(a), [RED, GREEN, BLUE, WHITE], strict=True):
        assert close(got, want, tol), (got, want)
    assert is_image_file(p)
    assert image_size(p) == (40, 30)


def test_png_16bit_gray_scaled_to_8bit(tmp_path):
    ramp = (np.arange(256, dtype=np.uint16) * 257).reshape(16, 16)  # 0, 257, ..., 65535
    p = tmp_path / "gray16.png"
    Image.fromarray(ramp).save(p)
    assert mode_of(p).startswith("I")  # really a 16-bit file
    g = load_gray(p)
    np.testing.assert_array_equal(g, np.arange(256, dtype=np.uint8).reshape(16, 16))
    rgb = load_image(p)
    np.testing.assert_array_equal(rgb[..., 0], g)
    np.testing.assert_array_equal(rgb[..., 2], g)


def test_32bit_integer_tiff_out_of_16bit_range_is_stretched(tmp_path):
    arr = np.array([[-1000, 0], [500_000, 1_000_000]], dtype=np.int32)
    p = tmp_path / "i32.tif"
    Image.fromarray(arr, mode="I").save(p)
    g = load_gray(p)
    assert g[0, 0] == 0 and g[1, 1] == 255
    assert 120 <= g[1, 0] <= 130  # linear min..max stretch


def test_float_tiff_in_unit_range(tmp_path):
    arr = np.array([[0.0, 0.5], [1.0, 0.25]], dtype=np.float32)
    p = tmp_path / "f.tif"
    Image.fromarray(arr, mode="F").save(p)
    np.testing.assert_array_equal(load_gray(p), [[0, 128], [255, 64]])


def test_grayscale_png_becomes_equal_rgb_channels(tmp_path):
    arr = np.tile(np.arange(0, 250, 10, dtype=np.uint8), (5, 1))
    p = tmp_path / "gray.png"
    Image.fromarray(arr, mode="L").save(p)
    a = load_image(p)
    for c in range(3):
        np.testing.assert_array_equal(a[..., c], arr)
    np.testing.assert_array_equal(load_gray(p), arr)


def test_rgba_composited_on_white(tmp_path):
    arr = np.zeros((2, 3, 4), np.uint8)
    arr[0, 0] = (255, 0, 0, 255)  # opaque red
    arr[0, 1] = (255, 0, 0, 0)  # fully transparent red -> white
    arr[0, 2] = (0, 0, 0, 128)  # half-transparent black -> mid grey
    arr[1, :] = (0, 0, 255, 255)
    p = tmp_path / "rgba.png"
    Image.fromarray(arr, mode="RGBA").save(p)
    a = load_image(p)
    assert tuple(a[0, 0]) == RED
    assert tuple(a[0, 1]) == WHITE
    assert tuple(a[0, 2]) == (127, 127, 127)
    assert tuple(a[1, 1]) == BLUE


def test_gray_alpha_composited_on_white(tmp_path):
    arr = np.array([[[0, 255], [0, 0], [100, 255]]], np.uint8)
    p = tmp_path / "la.png"
    Image.fromarray(arr, mode="LA").save(p)
    np.testing.assert_array_equal(load_gray(p), [[0, 255, 100]])


def test_palette_with_transparency(tmp_path):
    p_im = Image.new("P", (4, 2), 0)
    p_im.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0] + [0] * (768 - 9))
    p_im.putpixel((1, 0), 1)
    p_im.putpixel((2, 0), 2)
    p = tmp_path / "pal.png"
    p_im.save(p, transparency=0)  # index 0 (black) is transparent
    a = load_image(p)
    assert tuple(a[0, 0]) == WHITE  # transparent -> white, not black
    assert tuple(a[0, 1]) == RED
    assert tuple(a[0, 2]) == GREEN
    # GIF: palette with a transparent index too
    g = tmp_path / "pal.gif"
    p_im.save(g, transparency=0)
    a = load_image(g)
    assert tuple(a[0, 0]) == WHITE and tuple(a[0, 1]) == RED


def test_palette_without_transparency(tmp_path):
    p_im = quadrants().convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    p = tmp_path / "pal.bmp"
    p_im.save(p)
    assert mode_of(p) == "P"
    assert corners(load_image(p)) == [RED, GREEN, BLUE, WHITE]


def test_one_bit_image(tmp_path):
    arr = np.array([[0, 1, 0], [1, 1, 0]], bool)
    p = tmp_path / "bits.png"
    Image.fromarray(arr).save(p)
    assert mode_of(p) == "1"
    np.testing.assert_array_equal(load_gray(p), arr.astype(np.uint8) * 255)


@pytest.mark.parametrize(
    ("cmyk", "rgb"),
    [
        ((255, 0, 0, 0), (0, 255, 255)),  # cyan
        ((0, 255, 0, 0), (255, 0, 255)),  # magenta
        ((0, 0, 255, 0), (255, 255, 0)),  # yellow
        ((0, 0, 0, 0), (255, 255, 255)),  # paper white
        ((0, 0, 0, 255), (0, 0, 0)),  # black ink
    ],
)
def test_cmyk_jpeg(tmp_path, cmyk, rgb):
    p = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (16, 16), cmyk).save(p, quality=95)
    with Image.open(p) as check:  # Pillow writes an Adobe (inverted) CMYK JPEG
        assert check.mode == "CMYK" and "adobe" in check.info
    assert close(tuple(load_image(p)[8, 8]), rgb, 6)


def test_cmyk_tiff(tmp_path):
    p = tmp_path / "cmyk.tif"
    Image.new("CMYK", (4, 4), (0, 255, 255, 0)).save(p)
    assert tuple(load_image(p)[0, 0]) == RED


# EXIF orientation -> where the original top-left (red) quadrant ends up, and whether w/h swap
ORIENT = {
    1: ("TL", False),
    2: ("TR", False),  # mirrored horizontally
    3: ("BR", False),  # rotated 180
    4: ("BL", False),  # mirrored vertically
    5: ("TL", True),  # transpose
    6: ("TR", True),  # rotate 90 CW to display
    7: ("BR", True),  # transverse
    8: ("BL", True),  # rotate 90 CCW to display
}


@pytest.mark.parametrize("orientation", sorted(ORIENT))
def test_exif_orientation_applied(tmp_path, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    p = tmp_path / f"o{orientation}.jpg"
    quadrants(40, 30).save(p, quality=95, exif=exif.tobytes())
    a = load_image(p)
    where, swapped = ORIENT[orientation]
    assert a.shape[:2] == ((40, 30) if swapped else (30, 40))
    assert image_size(p) == ((30, 40) if swapped else (40, 30))
    got = dict(zip(["TL", "TR", "BL", "BR"], corners(a), strict=True))
    assert close(got[where], RED), (orientation, got)
    # the colour diagonally opposite red is always white
    opposite = {"TL": "BR", "TR": "BL", "BL": "TR", "BR": "TL"}[where]
    assert close(got[opposite], WHITE), (orientation, got)
    # orientation 6 specifically: the original left column becomes the top row, so the
    # red quadrant sits top-right and blue (originally bottom-left) top-left.
    if orientation == 6:
        assert close(got["TL"], BLUE)


def test_corrupt_exif_is_ignored_not_fatal(tmp_path):
    p = tmp_path / "badexif.jpg"
    quadrants().save(p, quality=95, exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff\xff")
    assert corners(load_image(p))[0][0] > 200


def test_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (10, 10), c) for c in (RED, GREEN, BLUE)]
    p = tmp_path / "anim.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=100, loop=0)
    with Image.open(p) as check:
        assert check.n_frames == 3
    assert tuple(load_image(p)[5, 5]) == RED


def test_multipage_tiff_first_page(tmp_path):
    pages = [Image.new("L", (6, 6), v) for v in (10, 200)]
    p = tmp_path / "pages.tif"
    pages[0].save(p, save_all=True, append_images=pages[1:])
    assert int(load_gray(p)[3, 3]) == 10


def test_webp_lossy(tmp_path):
    p = save(quadrants(64, 64), tmp_path / "q.webp", "WEBP", quality=90)
    assert all_close(corners(load_image(p)), [RED, GREEN, BLUE, WHITE], 20)


def test_non_ascii_filename(tmp_path):
    d = tmp_path / "фото 写真"
    d.mkdir()
    p = save(quadrants(), d / "Zoë 猫 ☃.jpg", quality=95)
    assert close(corners(load_image(p))[0], RED)
    assert image_size(str(p)) == (40, 30)
    assert is_image_file(p)


def test_bytes_and_file_objects(tmp_path):
    p = save(quadrants(), tmp_path / "q.png")
    data = p.read_bytes()
    ref = load_image(p)
    np.testing.assert_array_equal(load_image(data), ref)
    np.testing.assert_array_equal(load_image(bytearray(data)), ref)
    np.testing.assert_array_equal(load_image(io.BytesIO(data)), ref)
    with open(p, "rb") as fh:
        np.testing.assert_array_equal(load_image(fh), ref)
        assert not fh.closed  # a caller's stream is left open

    class Pipe:  # not seekable
        def __init__(self, b):
            self._b = io.BytesIO(b)

        def read(self, n=-1):
            return self._b.read(n)

    np.testing.assert_array_equal(load_image(Pipe(data)), ref)
    assert image_size(data) == (40, 30)


# --------------------------------------------------------------------------------------------
# downsizing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_downsize_longest_side(tmp_path, fmt):
    p = save(quadrants(1600, 1000), tmp_path / f"big.{fmt.lower()}", fmt)
    a = load_image(p, max_side=400)
    assert a.shape == (250, 400, 3)
    assert all_close(corners(a), [RED, GREEN, BLUE, WHITE], 14)
    g = load_gray(p, max_side=400)
    assert g.shape == (250, 400)
    assert close((int(g[60, 100]),), (76,), 6)  # luma of red: 0.299 * 255
    assert load_image(p, max_side=None).shape == (1000, 1600, 3)
    assert load_image(p, max_side=5000).shape == (1000, 1600, 3)  # never enlarged


def test_downsize_portrait_exif_rotated(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6
    p = tmp_path / "portrait.jpg"
    quadrants(1200, 800).save(p, quality=90, exif=exif.tobytes())
    assert load_image(p, max_side=300).shape == (300, 200, 3)


def test_jpeg_draft_decodes_cheaply_but_matches_full_decode(tmp_path):
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    big = Image.fromarray(small).resize((1600, 1200), Image.Resampling.BICUBIC)
    p = save(big, tmp_path / "big.jpg", quality=95)
    fast = load_image(p, max_side=200).astype(np.float64)
    full = Image.fromarray(load_image(p, max_side=None)).resize(
        (200, 150), Image.Resampling.LANCZOS
    )
    err = np.abs(fast - np.asarray(full, np.float64)).mean()
    assert fast.shape == (150, 200, 3)
    assert err < 4.0


# --------------------------------------------------------------------------------------------
# failures
# --------------------------------------------------------------------------------------------


def expect_error(source, match: str, **kw) -> ImageLoadError:
    with pytest.raises(ImageLoadError, match=match) as info:
        load_image(source, **kw)
    err = info.value
    assert isinstance(err.reason, str) and err.reason
    assert str(err) == f"{err.path}: {err.reason}"
    return err


def test_missing_file(tmp_path):
    p = tmp_path / "nope.jpg"
    err = expect_error(p, "file not found")
    assert err.path == str(p)
    with pytest.raises(ImageLoadError, match="file not found"):
        image_size(p)
    with pytest.raises(ImageLoadError, match="file not found"):
        load_gray(str(p))
    assert not is_image_file(p)


def test_directory(tmp_path):
    expect_error(tmp_path, "is a directory")
    assert not is_image_file(tmp_path)


def test_zero_byte_file(tmp_path):
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    expect_error(p, "empty file")
    expect_error(b"", "empty data")
    assert not is_image_file(p)


def test_text_file_with_jpg_name(tmp_path):
    p = tmp_path / "notes.jpg"
    p.write_text("these are not pixels\n" * 10)
    expect_error(p, "not an image")
    assert not is_image_file(p)


def test_unsupported_format_refused(tmp_path):
    p = tmp_path / "x.ppm"
    quadrants().save(p)  # Pillow can read PPM, but it is not one of ours
    expect_error(p, "not a supported format")
    assert not is_image_file(p)


def test_heic_signature_alone_is_a_corrupt_heic(tmp_path):
    # HEIC is read now (tests/engine/test_formats.py): a bare signature is an image file
    # whose content is broken, or whose decoder is missing, never "not an image".
    p = tmp_path / "x.heic"
    p.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64)
    assert is_image_file(p)
    expect_error(p, "corrupt HEIF header|HEIC support is not installed")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "TIFF", "BMP"])
def test_truncated_file(tmp_path, fmt):
    rng = np.random.default_rng(1)
    im = Image.fromarray(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, fmt)
    data = buf.getvalue()
    p = tmp_path / f"cut.{fmt.lower()}"
    p.write_bytes(data[: len(data) // 2])
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    expect_error(p, "truncated|corrupt")


def test_truncated_jpeg_header_only(tmp_path):
    buf = io.BytesIO()
    quadrants().save(buf, "JPEG")
    p = tmp_path / "head.jpg"
    p.write_bytes(buf.getvalue()[:40])
    assert is_image_file(p)  # magic bytes fine, contents broken
    expect_error(p, "truncated|corrupt")


def test_garbage_after_valid_magic(tmp_path):
    p = tmp_path / "garbage.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    err = expect_error(p, ".")
    assert "corrupt" in err.reason or "not an image" in err.reason


def png_header_only(w: int, h: int) -> bytes:
    """A syntactically valid PNG that *declares* w x h pixels but carries no pixel data."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@pytest.fixture
def no_decoding(monkeypatch):
    """Fail the test if any pixel data gets decoded."""
    calls = []

    def forbidden(self, *a, **k):
        calls.append(self.size)
        raise AssertionError("decoder ran")

    monkeypatch.setattr(ImageFile.ImageFile, "load", forbidden)
    return calls


@pytest.mark.parametrize(
    ("w", "h"),
    [
        (12_000, 10_000),  # 120 MP: above our default max_pixels, below Pillow's hard limit
        (100_000, 100_000),  # 10 GP: also above Pillow's own limit
    ],
)
def test_bomb_refused_from_header_before_decoding(tmp_path, no_decoding, w, h):
    p = tmp_path / "bomb.png"
    p.write_bytes(png_header_only(w, h))
    assert p.stat().st_size < 100
    err = expect_error(p, "decompression bomb")
    assert no_decoding == []
    assert "decompression bomb" in err.reason


def test_bomb_limit_is_configurable(tmp_path, no_decoding):
    p = tmp_path / "mid.png"
    p.write_bytes(png_header_only(2000, 2000))
    expect_error(p, r"decompression bomb: 2000 x 2000 = 4000000 pixels", max_pixels=3_999_999)
    assert no_decoding == []


def test_real_bomb_like_image_above_custom_limit(tmp_path):
    p = save(Image.new("L", (300, 300)), tmp_path / "ok.png")
    expect_error(p, "decompression bomb", max_pixels=300 * 300 - 1)
    assert load_gray(p, max_pixels=300 * 300).shape == (300, 300)


def test_image_size_is_header_only(tmp_path, no_decoding):
    p = tmp_path / "big.png"
    p.write_bytes(png_header_only(12_000, 10_000))
    assert image_size(p) == (12_000, 10_000)
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        image_size(p, max_pixels=10**8)
    assert no_decoding == []


def test_zero_size_image(tmp_path):
    p = tmp_path / "zero.png"
    p.write_bytes(png_header_only(0, 10))
    # Pillow itself rejects a zero width while parsing; either way the reason is specific
    err = expect_error(p, "zero size|corrupt PNG header")
    assert "not an image" not in err.reason


@pytest.mark.skipif(
    sys.platform == "win32" or (hasattr(os, "geteuid") and os.geteuid() == 0),
    reason="permissions are not enforced for root / on Windows",
)
def test_permission_denied(tmp_path):
    p = save(quadrants(), tmp_path / "locked.png")
    p.chmod(0)
    try:
        expect_error(p, "permission denied")
        assert not is_image_file(p)
    finally:
        p.chmod(0o644)


def test_bad_arguments_raise_value_or_type_error(tmp_path):
    p = save(quadrants(), tmp_path / "q.png")
    with pytest.raises(ValueError, match="max_side"):
        load_image(p, max_side=0)
    with pytest.raises(ValueError, match="max_pixels"):
        load_image(p, max_pixels=0)
    with pytest.raises(TypeError, match="path_or_bytes"):
        load_image(12345)  # type: ignore[arg-type]


def test_no_warnings_escape_for_large_images(tmp_path):
    # 95 MP header: above PIL.Image.MAX_IMAGE_PIXELS (which would warn) and below our limit.
    # The pytest config turns warnings into errors, so a leaked warning fails this test.
    p = tmp_path / "warn.png"
    p.write_bytes(png_header_only(10_000, 9_500))
    assert image_size(p) == (10_000, 9_500)
    expect_error(p, "truncated|corrupt")  # header fine, no pixel data: refused, no warning


def test_magic_bytes_for_all_formats(tmp_path):
    for fmt, suffix in [("JPEG", "jpg"), ("PNG", "png"), ("GIF", "gif"), ("BMP", "bmp")]:
        p = save(quadrants(), tmp_path / f"x.{suffix}", fmt)
        renamed = p.rename(tmp_path / f"x_{suffix}.dat")  # the name does not matter
        assert is_image_file(renamed)
    for fmt in ("TIFF", "WEBP"):
        p = save(quadrants(), tmp_path / f"y.{fmt}", fmt)
        assert is_image_file(p)
    assert {".jpg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp"} <= IMAGE_SUFFIXES
    assert all(s == s.lower() and s.startswith(".") for s in IMAGE_SUFFIXES)


def test_error_is_picklable_for_worker_processes():
    import copy

    err = ImageLoadError("a.jpg", "file not found")
    clone = copy.deepcopy(err)
    assert (clone.path, clone.reason, str(clone)) == ("a.jpg", "file not found", str(err))


def test_png_48bit_rgb(tmp_path):
    """16 bits per channel colour PNG (written by hand: Pillow cannot save it)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    pixels = [(65535, 0, 32896), (0, 65535, 257)]
    row = b"\x00" + b"".join(struct.pack(">HHH", *px) for px in pixels)  # filter byte 0
    ihdr = struct.pack(">IIBBBBB", 2, 1, 16, 2, 0, 0, 0)
    data = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(row))
        + chunk(b"IEND", b"")
    )
    p = tmp_path / "rgb48.png"
    p.write_bytes(data)
    np.testing.assert_array_equal(load_image(p), [[(255, 0, 128), (0, 255, 1)]])


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP"])
def test_fuzzed_files_only_raise_image_load_error(fmt):
    """Random byte corruptions: either a valid image comes back or ImageLoadError."""
    rng = np.random.default_rng(7)
    buf = io.BytesIO()
    quadrants(48, 32).save(buf, fmt)
    clean = np.frombuffer(buf.getvalue(), np.uint8)
    for trial in range(40):
        data = clean.copy()
        n = int(rng.integers(1, 8))
        # corrupt mostly the header region, where parsers are most fragile
        pos = rng.integers(0, min(len(data), 64 if trial % 2 else len(data)), n)
        data[pos] = rng.integers(0, 256, n, dtype=np.uint8)
        if trial % 5 == 4:
            data = data[: int(rng.integers(1, len(data)))]
        try:
            out = load_image(data.tobytes(), max_pixels=10_000_000)
        except ImageLoadError as err:
            assert err.reason
        else:
            assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3


def test_concurrent_loads_agree_with_serial(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    paths = []
    for i in range(8):
        exif = Image.Exif()
        exif[0x0112] = 1 + i % 8
        p = tmp_path / f"t{i}.jpg"
        quadrants(64 + i, 48).save(p, quality=90, exif=exif.tobytes())
        paths.append(p)
    serial = [load_image(p) for p in paths]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(load_image, paths))
    for a, b in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(a, b)
