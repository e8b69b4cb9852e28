"""Phone and camera formats in engine.io: HEIC / HEIF, AVIF, JPEG XL and camera RAW.

Every file is generated here: HEIC with pillow-heif, AVIF with Pillow's own plug-in, and
RAW as tiny uncompressed CFA DNG files written byte by byte (:func:`make_dng`, read for
real by rawpy / LibRaw). A RAW file whose embedded preview must be large (the fast path
for 12-megapixel photos) is also faked through a stand-in ``rawpy`` module, so that the
preview logic is tested without megabytes of sensor data. Tests of a decoder skip when its
package is absent; tests with the import blocked check the "not installed" reasons.
"""

from __future__ import annotations

import io
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features

from engine.io.formats import (
    IMAGE_SUFFIXES,
    RAW_SUFFIXES,
    sniff_format,
    tiff_is_raw,
)
from engine.io.imageio import (
    ImageLoadError,
    image_size,
    is_image_file,
    load_gray,
    load_image,
)

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)
HAS_AVIF = features.check("avif")


def quadrants(w: int = 64, h: int = 48) -> np.ndarray:
    """(h, w, 3) uint8: TL red, TR green, BL blue, BR white."""
    arr = np.zeros((h, w, 3), np.uint8)
    arr[: h // 2, : w // 2] = RED
    arr[: h // 2, w // 2 :] = GREEN
    arr[h // 2 :, : w // 2] = BLUE
    arr[h // 2 :, w // 2 :] = WHITE
    return arr


def corners(a: np.ndarray) -> list[tuple[int, ...]]:
    """Colours at the centres of the four quadrants: TL, TR, BL, BR."""
    h, w = a.shape[:2]
    pts = [(h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, w // 4), (3 * h // 4, 3 * w // 4)]
    return [tuple(int(v) for v in a[y, x]) for y, x in pts]


def dominant(rgb: tuple[int, ...]) -> str:
    """'R', 'G', 'B' for a saturated colour, 'W' for a light grey."""
    if min(rgb) > 150:
        return "W"
    return "RGB"[int(np.argmax(rgb))]


# Quadrant colours (TL, TR, BL, BR) as displayed for each EXIF orientation of `quadrants`.
UPRIGHT = {
    1: "RGBW",
    3: "WBGR",
    6: "BRWG",  # turned 90 degrees clockwise
    8: "GWRB",  # turned 90 degrees counter-clockwise
}


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


# --------------------------------------------------------------------------------------------
# generated files
# --------------------------------------------------------------------------------------------


def heic_bytes(arr: np.ndarray, *, orientation: int = 1, bits: int = 8, **kw) -> bytes:
    """HEIC written by pillow-heif; ``bits=10`` stores 10-bit samples."""
    pillow_heif = pytest.importorskip("pillow_heif")
    if bits == 8:
        heif = pillow_heif.from_pillow(Image.fromarray(arr))
    else:
        wide = arr.astype(np.uint16) * 257
        heif = pillow_heif.from_bytes(mode="RGB;16", size=arr.shape[1::-1], data=wide.tobytes())
    buf = io.BytesIO()
    if orientation != 1:
        kw["exif"] = exif_bytes(orientation)
    heif.save(buf, quality=95, **kw)
    return buf.getvalue()


def avif_bytes(arr: np.ndarray, *, orientation: int = 1) -> bytes:
    if not HAS_AVIF:
        pytest.skip("this Pillow has no AVIF support")
    buf = io.BytesIO()
    kw = {"exif": exif_bytes(orientation)} if orientation != 1 else {}
    Image.fromarray(arr).save(buf, "AVIF", quality=95, **kw)
    return buf.getvalue()


def jpeg_bytes(arr: np.ndarray, quality: int = 95) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def mosaic(rgb: np.ndarray) -> np.ndarray:
    """RGGB Bayer mosaic (H, W) uint16 of an 8-bit sRGB image (linearised, 16 bits)."""
    lin = np.round((rgb.astype(np.float64) / 255.0) ** 2.2 * 65535).astype(np.uint16)
    cfa = np.empty(rgb.shape[:2], np.uint16)
    cfa[0::2, 0::2] = lin[0::2, 0::2, 0]
    cfa[0::2, 1::2] = lin[0::2, 1::2, 1]
    cfa[1::2, 0::2] = lin[1::2, 0::2, 1]
    cfa[1::2, 1::2] = lin[1::2, 1::2, 2]
    return cfa


def _tiff(ifds: list[list[tuple[int, int, object]]], blobs: list[bytes]) -> bytes:
    """Little-endian TIFF: ``ifds[0]`` first, the others reachable as SubIFDs of it.

    Entries are ``(tag, type, values)``; the value ``("blob", k)`` is the offset of
    ``blobs[k]`` and ``("ifd", k)`` the offset of ``ifds[k]``.
    """
    codes = {1: "B", 2: "s", 3: "H", 4: "I", 5: "II", 10: "ii"}
    ifd_pos, pos = [], 8
    for entries in ifds:
        ifd_pos.append(pos)
        pos += 2 + 12 * len(entries) + 4
    values_at, values = pos, bytearray()

    def pack(typ: int, vals: object, blob_pos: list[int]) -> tuple[int, bytes]:
        if isinstance(vals, tuple) and vals[0] in ("blob", "ifd"):
            return 1, struct.pack("<I", (blob_pos if vals[0] == "blob" else ifd_pos)[vals[1]])
        if typ == 2:
            data = bytes(vals) + b"\0"
            return len(data), data
        vals = list(vals)
        flat = [x for v in vals for x in (v if isinstance(v, tuple) else (v,))]
        return len(vals), struct.pack("<" + codes[typ][0] * len(flat), *flat)

    def build(blob_pos: list[int]) -> bytes:
        values.clear()
        out = bytearray()
        for entries in ifds:
            out += struct.pack("<H", len(entries))
            for tag, typ, vals in sorted(entries, key=lambda e: e[0]):
                count, data = pack(typ, vals, blob_pos)
                if len(data) <= 4:
                    field = data.ljust(4, b"\0")
                else:
                    field = struct.pack("<I", values_at + len(values))
                    values.extend(data + b"\0" * (len(data) % 2))
                out += struct.pack("<HHI", tag, typ, count) + field
            out += struct.pack("<I", 0)
        return bytes(out)

    build([0] * len(blobs))
    blob_pos, at = [], values_at + len(values)
    for blob in blobs:
        blob_pos.append(at)
        at += len(blob)
    table = build(blob_pos)
    return b"II*\0" + struct.pack("<I", 8) + table + bytes(values) + b"".join(blobs)


def make_dng(rgb: np.ndarray, *, orientation: int = 1, preview: np.ndarray | None = None) -> bytes:
    """A valid uncompressed CFA DNG (DNG 1.4) of an 8-bit RGB image, optionally with an
    embedded JPEG ``preview`` in IFD 0 (the raw data then in a SubIFD, as cameras do)."""
    h, w = rgb.shape[:2]
    raw = mosaic(rgb).astype("<u2").tobytes()
    sensor = [
        (254, 4, [0]), (256, 4, [w]), (257, 4, [h]), (258, 3, [16]), (259, 3, [1]),
        (262, 3, [32803]), (277, 3, [1]), (278, 4, [h]), (279, 4, [len(raw)]),
        (284, 3, [1]), (0x828D, 3, [2, 2]), (0x828E, 1, [0, 1, 1, 2]),
        (0xC61A, 3, [0]), (0xC61D, 3, [65535]),
    ]  # fmt: skip
    identity = [(1, 1), (0, 1), (0, 1), (0, 1), (1, 1), (0, 1), (0, 1), (0, 1), (1, 1)]
    camera = [
        (271, 2, b"Simile"), (272, 2, b"Test DNG"), (274, 3, [orientation]),
        (0xC612, 1, [1, 4, 0, 0]), (0xC613, 1, [1, 1, 0, 0]), (0xC614, 2, b"Simile Test"),
        (0xC621, 10, identity), (0xC628, 5, [(1, 1)] * 3), (0xC65A, 3, [21]),
    ]  # fmt: skip
    if preview is None:
        return _tiff([[*sensor, (273, 4, ("blob", 0)), *camera]], [raw])
    jpg = jpeg_bytes(preview, 90)
    ph, pw = preview.shape[:2]
    first = [
        (254, 4, [1]), (256, 4, [pw]), (257, 4, [ph]), (258, 3, [8, 8, 8]), (259, 3, [7]),
        (262, 3, [6]), (273, 4, ("blob", 0)), (277, 3, [3]), (278, 4, [ph]),
        (279, 4, [len(jpg)]), (284, 3, [1]), (330, 4, ("ifd", 1)),
    ]  # fmt: skip
    return _tiff([[*first, *camera], [*sensor, (273, 4, ("blob", 1))]], [jpg, raw])


def nef_like(extra: bytes = b"") -> bytes:
    """A TIFF as Nikon / Sony write them: IFD 0 a small RGB thumbnail with a camera Make
    and SubIFDs. Pillow would read the thumbnail; it must go to the RAW decoder."""
    thumb = quadrants(16, 12).tobytes()
    ifd0 = [
        (254, 4, [1]), (256, 4, [16]), (257, 4, [12]), (258, 3, [8, 8, 8]), (259, 3, [1]),
        (262, 3, [2]), (271, 2, b"NIKON CORPORATION"), (273, 4, ("blob", 0)),
        (277, 3, [3]), (278, 4, [12]), (279, 4, [len(thumb)]), (330, 4, ("ifd", 0)),
    ]  # fmt: skip
    return _tiff([ifd0], [thumb]) + extra


# --------------------------------------------------------------------------------------------
# signatures and suffixes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic", "HEIF"),
        (b"\x00\x00\x00\x18ftypheix\x00\x00\x00\x00mif1heix", "HEIF"),
        (b"\x00\x00\x00\x18ftyphevc\x00\x00\x00\x00msf1hevc", "HEIF"),
        (b"\x00\x00\x00\x18ftypheim\x00\x00\x00\x00mif1heim", "HEIF"),
        (b"\x00\x00\x00\x18ftypheis\x00\x00\x00\x00mif1heis", "HEIF"),
        (b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00mif1heic", "HEIF"),
        (b"\x00\x00\x00\x14ftypmsf1\x00\x00\x00\x00msf1", "HEIF"),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf", "AVIF"),
        (b"\x00\x00\x00\x1cftypavis\x00\x00\x00\x00avismsf1miaf", "AVIF"),
        (b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00mif1avifmiaf", "AVIF"),
        (b"\x00\x00\x00\x18ftypcrx \x00\x00\x00\x01crx isom", "CR3"),
        (b"II*\x00\x10\x00\x00\x00CR\x02\x00", "CR2"),
        (b"FUJIFILMCCD-RAW 0201FF383501", "RAF"),
        (b"IIRO\x08\x00\x00\x00", "ORF"),
        (b"MMOR\x00\x00\x00\x08", "ORF"),
        (b"IIU\x00\x08\x00\x00\x00", "RW2"),
        (b"II*\x00\x08\x00\x00\x00", "TIFF"),  # NEF, ARW, DNG... start like any TIFF
        (b"\xff\x0a\xfa\x7f", "JPEG XL"),
        (b"\x00\x00\x00\x0cJXL \r\n\x87\n\x00\x00\x00\x14ftypjxl ", "JPEG XL"),
        (b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2", None),  # an MP4 video
        (b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  ", None),  # a QuickTime movie
        (b"%PDF-1.7\n", None),
        (b"", None),
    ],
)
def test_sniff_format(head, kind):
    assert sniff_format(head) == kind
    assert sniff_format(head + b"\x00" * 40) == kind  # only the first 32 bytes count


def test_suffixes_cover_phone_and_camera_formats():
    for s in (".heic", ".heif", ".hif", ".avif", ".jxl", ".jpg", ".png"):
        assert s in IMAGE_SUFFIXES
    for s in (".cr2", ".cr3", ".nef", ".arw", ".raf", ".orf", ".rw2", ".dng", ".pef", ".srw"):
        assert s in RAW_SUFFIXES and s in IMAGE_SUFFIXES
    assert all(s == s.lower() and s.startswith(".") for s in IMAGE_SUFFIXES)


def test_tiff_is_raw_tells_raw_from_tiff():
    buf = io.BytesIO()
    Image.fromarray(quadrants()).save(buf, "TIFF")
    assert not tiff_is_raw(io.BytesIO(buf.getvalue()))
    exif = Image.Exif()
    exif[271] = "Canon"  # a camera's TIFF (no SubIFDs, full-size first image) stays a TIFF
    buf = io.BytesIO()
    Image.fromarray(quadrants()).save(buf, "TIFF", exif=exif)
    assert not tiff_is_raw(io.BytesIO(buf.getvalue()))
    assert tiff_is_raw(io.BytesIO(make_dng(quadrants())))
    assert tiff_is_raw(io.BytesIO(nef_like()))
    assert tiff_is_raw(io.BytesIO(b"II*\x00\x10\x00\x00\x00CR\x02\x00" + b"\0" * 20))
    for junk in (b"", b"II*\x00", b"II*\x00\xff\xff\xff\xff", b"MM\x00*\x00\x00\x00\x08\xff"):
        assert not tiff_is_raw(io.BytesIO(junk))


def test_new_formats_are_image_files_by_content(tmp_path):
    for name, head in [
        ("phone_photo", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"),
        ("anim", b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf"),
        ("canon", b"\x00\x00\x00\x18ftypcrx \x00\x00\x00\x01crx isom"),
        ("fuji", b"FUJIFILMCCD-RAW 0201FF383501"),
    ]:
        p = tmp_path / name
        p.write_bytes(head + b"\x00" * 64)
        assert is_image_file(p), name


# --------------------------------------------------------------------------------------------
# HEIC / HEIF
# --------------------------------------------------------------------------------------------


def test_heic_roundtrip_path_and_bytes(tmp_path):
    data = heic_bytes(quadrants())
    p = tmp_path / "IMG_0001.HEIC"
    p.write_bytes(data)
    assert sniff_format(data[:32]) == "HEIF" and is_image_file(p)
    a = load_image(p)
    assert a.shape == (48, 64, 3) and a.dtype == np.uint8
    assert "".join(dominant(c) for c in corners(a)) == "RGBW"
    np.testing.assert_array_equal(load_image(data), a)
    np.testing.assert_array_equal(load_image(io.BytesIO(data)), a)
    g = load_gray(data)
    assert g.shape == (48, 64) and g.dtype == np.uint8
    assert image_size(p) == (64, 48)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_heic_exif_orientation_turned_once(orientation):
    data = heic_bytes(quadrants(), orientation=orientation)
    a = load_image(data, max_side=None)
    assert "".join(dominant(c) for c in corners(a)) == UPRIGHT[orientation]
    assert image_size(data) == a.shape[1::-1]
    assert a.shape[:2] == ((64, 48) if orientation in (6, 8) else (48, 64))


def test_heic_10_bit_becomes_8_bit():
    pillow_heif = pytest.importorskip("pillow_heif")
    y, x = np.mgrid[0:96, 0:128]
    smooth = np.stack([x * 2, y * 2, (x + y)], -1).astype(np.uint8)
    data = heic_bytes(smooth, bits=10)
    assert pillow_heif.open_heif(io.BytesIO(data)).info["bit_depth"] == 10
    a = load_image(data, max_side=None)
    assert a.dtype == np.uint8 and a.shape == (96, 128, 3)
    assert np.abs(a.astype(int) - smooth).mean() < 3
    assert load_gray(data, max_side=64).shape == (48, 64)


def test_heic_downsized_and_embedded_thumbnail_used(monkeypatch):
    pytest.importorskip("pillow_heif")
    from pillow_heif import as_plugin

    data = heic_bytes(quadrants(640, 480), thumbnails=[200])
    chosen = []
    real = as_plugin._thumbnail_for_size

    def spy(image, size):
        out = real(image, size)
        chosen.append(None if out is None else out.size)
        return out

    monkeypatch.setattr(as_plugin, "_thumbnail_for_size", spy)
    small = load_image(data, max_side=150)
    assert small.shape == (112, 150, 3)
    assert chosen == [(200, 150)]  # decoded from the 200-pixel thumbnail, not the photo
    assert "".join(dominant(c) for c in corners(small)) == "RGBW"
    assert load_image(data, max_side=300).shape == (225, 300, 3)  # thumbnail too small
    assert chosen[-1] is None


def test_heic_with_alpha_on_white():
    arr = np.zeros((32, 32, 4), np.uint8)
    arr[..., 0] = 255
    arr[:, 16:, 3] = 255  # left half transparent
    pillow_heif = pytest.importorskip("pillow_heif")
    buf = io.BytesIO()
    pillow_heif.from_pillow(Image.fromarray(arr, "RGBA")).save(buf, quality=-1)
    a = load_image(buf.getvalue())
    assert dominant(tuple(a[16, 4])) == "W" and dominant(tuple(a[16, 28])) == "R"


def test_truncated_heic_has_a_clear_reason(tmp_path):
    rng = np.random.default_rng(3)
    data = heic_bytes(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8))
    for cut, reason in [(len(data) // 2, "truncated or corrupt"), (40, "corrupt HEIF header")]:
        p = tmp_path / f"cut{cut}.heic"
        p.write_bytes(data[:cut])
        with pytest.raises(ImageLoadError, match=reason) as info:
            load_image(p)
        assert info.value.path == str(p)


def test_heic_bomb_refused_before_decoding(monkeypatch):
    pytest.importorskip("pillow_heif")
    from pillow_heif.as_plugin import HeifImageFile

    data = heic_bytes(quadrants(200, 150))
    calls = []
    monkeypatch.setattr(HeifImageFile, "load", lambda self: calls.append(1))
    with pytest.raises(ImageLoadError):  # the spy sees a decode (and decodes nothing)
        load_image(data, max_pixels=200 * 150)
    assert calls
    calls.clear()
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        load_image(data, max_pixels=200 * 150 - 1)
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        image_size(data, max_pixels=200 * 150 - 1)
    assert calls == []


@pytest.mark.parametrize("maker", ["heic", "dng"])
def test_fuzzed_files_only_raise_image_load_error(maker):
    rng = np.random.default_rng(11)
    img = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    if maker == "heic":
        clean = np.frombuffer(heic_bytes(img), np.uint8)
    else:
        pytest.importorskip("rawpy")
        clean = np.frombuffer(make_dng(img), np.uint8)
    for trial in range(30):
        data = clean.copy()
        n = int(rng.integers(1, 8))
        pos = rng.integers(0, min(len(data), 400 if trial % 2 else len(data)), n)
        data[pos] = rng.integers(0, 256, n, dtype=np.uint8)
        if trial % 5 == 4:
            data = data[: int(rng.integers(1, len(data)))]
        try:
            out = load_image(data.tobytes(), max_pixels=10_000_000)
        except ImageLoadError as err:
            assert err.reason
        else:
            assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3


# --------------------------------------------------------------------------------------------
# AVIF, JPEG XL
# --------------------------------------------------------------------------------------------


def test_avif_roundtrip(tmp_path):
    data = avif_bytes(quadrants())
    assert sniff_format(data[:32]) == "AVIF"
    p = tmp_path / "x.avif"
    p.write_bytes(data)
    a = load_image(p)
    assert a.shape == (48, 64, 3)
    assert "".join(dominant(c) for c in corners(a)) == "RGBW"
    np.testing.assert_array_equal(load_image(data), a)
    assert image_size(p) == (64, 48)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_avif_orientation(orientation):
    data = avif_bytes(quadrants(), orientation=orientation)
    a = load_image(data, max_side=None)
    assert "".join(dominant(c) for c in corners(a)) == UPRIGHT[orientation]
    assert image_size(data) == a.shape[1::-1]


def test_jpeg_xl_with_its_plugin():
    pytest.importorskip("pillow_jxl")
    buf = io.BytesIO()
    Image.fromarray(quadrants()).save(buf, "JXL", lossless=True)
    data = buf.getvalue()
    assert sniff_format(data[:32]) == "JPEG XL"
    np.testing.assert_array_equal(load_image(data), quadrants())


# --------------------------------------------------------------------------------------------
# decoders not installed
# --------------------------------------------------------------------------------------------


HEIC_HEAD = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64


@pytest.mark.parametrize(
    ("blocked", "data", "reason"),
    [
        (["pillow_heif"], HEIC_HEAD, "HEIC support is not installed"),
        (
            ["PIL._avif", "pillow_avif"],
            b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf" + b"\0" * 64,
            "AVIF support is not installed",
        ),
        (["pillow_jxl"], b"\xff\x0a" + b"\x00" * 64, "JPEG XL support is not installed"),
        (["rawpy"], b"FUJIFILMCCD-RAW 0201" + b"\x00" * 64, "RAW support is not installed"),
        (["rawpy"], b"\x00\x00\x00\x18ftypcrx \x00\x00\x00\x01crx isom" + b"\0" * 64, "RAW"),
    ],
)
def test_missing_decoder_is_named(monkeypatch, tmp_path, blocked, data, reason):
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    p = tmp_path / "photo"
    p.write_bytes(data)
    for call in (load_image, load_gray, image_size):
        with pytest.raises(ImageLoadError, match=reason) as info:
            call(p)
        assert "support is not installed" in info.value.reason
    assert is_image_file(p)  # still proposed to the indexer, so the reason gets listed


def test_missing_rawpy_for_a_tiff_based_raw(monkeypatch):
    monkeypatch.setitem(sys.modules, "rawpy", None)
    with pytest.raises(ImageLoadError, match="RAW support is not installed"):
        load_image(make_dng(quadrants()))
    with pytest.raises(ImageLoadError, match="RAW support is not installed"):
        load_image(nef_like())  # not the 16 x 12 thumbnail Pillow would find


def test_missing_heic_decoder_after_it_was_registered(monkeypatch):
    data = heic_bytes(quadrants())
    load_image(data)  # pillow-heif registered with Pillow now
    monkeypatch.setitem(sys.modules, "pillow_heif", None)
    with pytest.raises(ImageLoadError, match="HEIC support is not installed"):
        load_image(data)


# --------------------------------------------------------------------------------------------
# camera RAW, read for real by rawpy (DNG written here)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def rawpy():
    return pytest.importorskip("rawpy")


def test_dng_is_read_by_rawpy_itself(rawpy):
    data = make_dng(quadrants())
    with rawpy.imread(io.BytesIO(data)) as raw:
        assert (raw.sizes.width, raw.sizes.height) == (64, 48)
        assert raw.color_desc == b"RGBG"


def test_dng_roundtrip_path_and_bytes(rawpy, tmp_path):
    data = make_dng(quadrants())
    p = tmp_path / "DSC_0001.DNG"
    p.write_bytes(data)
    assert sniff_format(data[:32]) == "TIFF" and tiff_is_raw(io.BytesIO(data))
    full = load_image(p, max_side=None)  # full-size demosaic
    assert full.shape == (48, 64, 3)
    assert "".join(dominant(c) for c in corners(full)) == "RGBW"
    np.testing.assert_array_equal(load_image(data, max_side=None), full)
    assert image_size(p) == (64, 48) == image_size(data)
    half = load_image(p, max_side=32)  # half-size demosaic: 32 x 24 straight from LibRaw
    assert half.shape == (24, 32, 3)
    assert "".join(dominant(c) for c in corners(half)) == "RGBW"
    assert load_gray(data, max_side=32).shape == (24, 32)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_dng_orientation_from_flip(rawpy, orientation):
    data = make_dng(quadrants(), orientation=orientation)
    for max_side in (None, 40):
        a = load_image(data, max_side=max_side)
        assert "".join(dominant(c) for c in corners(a)) == UPRIGHT[orientation]
    assert image_size(data) == load_image(data, max_side=None).shape[1::-1]


def test_dng_preview_used_when_large_enough(rawpy):
    # the preview is a different picture (all red), so the path taken shows in the pixels
    preview = np.zeros((48, 64, 3), np.uint8)
    preview[...] = RED
    data = make_dng(quadrants(), orientation=6, preview=preview)
    fast = load_image(data, max_side=64)  # preview 64 px long >= 64: used, turned by flip
    assert fast.shape == (64, 48, 3) and {dominant(c) for c in corners(fast)} == {"R"}
    slow = load_image(data, max_side=100)  # preview too small: demosaic
    assert "".join(dominant(c) for c in corners(slow)) == UPRIGHT[6]
    assert image_size(data) == (48, 64) == load_image(data, max_side=None).shape[1::-1]


def test_dng_letterboxed_preview_is_not_used(rawpy):
    preview = np.full((60, 64, 3), 255, np.uint8)  # not the sensor's 4:3 aspect
    data = make_dng(quadrants(), preview=preview)
    a = load_image(data, max_side=32)
    assert "".join(dominant(c) for c in corners(a)) == "RGBW"


def test_truncated_dng(rawpy, tmp_path):
    data = make_dng(quadrants(64, 48))
    p = tmp_path / "cut.dng"
    p.write_bytes(data[:400])
    with pytest.raises(ImageLoadError, match="RAW") as info:
        load_image(p)
    assert info.value.path == str(p) and "b'" not in info.value.reason


def test_dng_bomb_refused_before_decoding(rawpy):
    data = make_dng(quadrants(64, 48))
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        load_image(data, max_pixels=64 * 48 - 1)
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        image_size(data, max_pixels=64 * 48 - 1)


def test_dng_features_through_the_product_path(rawpy):
    from engine.features import extract_features

    rng = np.random.default_rng(5)
    img = (rng.random((96, 128, 1)) * 255 * np.ones(3)).astype(np.uint8)
    data = make_dng(img)
    f = extract_features(data)
    assert f.image_size == (128, 96)


# --------------------------------------------------------------------------------------------
# camera RAW through a stand-in rawpy (large previews without megabytes of sensor data)
# --------------------------------------------------------------------------------------------


def fake_rawpy(
    *,
    size=(6000, 4000),
    flip=0,
    preview: bytes | None = None,
    pixels: np.ndarray | None = None,
    fail: BaseException | None = None,
):
    """A module with rawpy's interface; records the postprocess calls."""
    mod = types.ModuleType("rawpy")
    mod.calls = []

    class ThumbFormat:
        JPEG, BITMAP = 1, 2

    class NoThumb(Exception):
        pass

    class Raw:
        sizes = types.SimpleNamespace(
            width=size[0], height=size[1], raw_width=size[0] + 32, raw_height=size[1] + 16,
            pixel_aspect=1.0, flip=flip,
        )  # fmt: skip

        def extract_thumb(self):
            if preview is None:
                raise NoThumb("no thumbnail")
            return types.SimpleNamespace(format=ThumbFormat.JPEG, data=preview)

        def postprocess(self, **kw):
            mod.calls.append(kw)
            if fail is not None:
                raise fail
            return pixels

        def close(self):
            pass

    def imread(fileobj):
        assert isinstance(fileobj, io.BytesIO)  # parsed from memory: no temporary file
        return Raw()

    mod.ThumbFormat, mod.imread = ThumbFormat, imread
    return mod


def test_fake_raw_large_preview_is_the_fast_path(monkeypatch):
    preview = jpeg_bytes(np.repeat(np.repeat(quadrants(60, 40), 40, 0), 40, 1))  # 2400 x 1600
    mod = fake_rawpy(size=(2400, 1600), flip=6, preview=preview)
    monkeypatch.setitem(sys.modules, "rawpy", mod)
    a = load_image(nef_like())
    assert a.shape == (1024, 683, 3)  # turned upright by the flip flag
    assert "".join(dominant(c) for c in corners(a)) == UPRIGHT[6]
    assert mod.calls == []  # no demosaic
    assert image_size(nef_like()) == (1600, 2400)
    assert load_image(nef_like(), max_side=None).shape == (2400, 1600, 3)
    assert mod.calls == []


def test_fake_raw_small_preview_half_size_demosaic(monkeypatch):
    preview = jpeg_bytes(quadrants(160, 120))
    pixels = np.zeros((2000, 3000, 3), np.uint8)  # what LibRaw returns (already turned)
    mod = fake_rawpy(preview=preview, pixels=pixels)
    monkeypatch.setitem(sys.modules, "rawpy", mod)
    assert load_image(nef_like()).shape == (683, 1024, 3)
    assert mod.calls[-1]["half_size"] is True
    assert image_size(nef_like()) == (6000, 4000)  # the sensor image, as LibRaw outputs it
    load_image(nef_like(), max_side=4000)  # half size (3000) would be too small
    assert mod.calls[-1]["half_size"] is False


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (MemoryError(), "not enough memory"),
        (type("LibRawDataError", (Exception,), {})(b"data corrupt"), "corrupt RAW data"),
        (RuntimeError("odd"), "cannot decode RAW file"),
    ],
)
def test_fake_raw_decoder_failures_become_image_load_errors(monkeypatch, exc, reason):
    monkeypatch.setitem(sys.modules, "rawpy", fake_rawpy(fail=exc))
    with pytest.raises(ImageLoadError, match=reason) as info:
        load_gray(nef_like())
    assert "b'" not in info.value.reason


def test_fake_raw_bomb_refused(monkeypatch):
    mod = fake_rawpy(size=(20_000, 10_000))
    monkeypatch.setitem(sys.modules, "rawpy", mod)
    with pytest.raises(ImageLoadError, match="decompression bomb"):
        load_image(nef_like())
    assert mod.calls == []


# --------------------------------------------------------------------------------------------
# the indexer sees them
# --------------------------------------------------------------------------------------------


def test_indexer_reads_heic_and_lists_what_it_cannot_read(tmp_path, monkeypatch):
    from engine.index.ingest import extract_parallel

    rng = np.random.default_rng(2)
    img = (rng.random((120, 160, 1)) * 255 * np.ones(3)).astype(np.uint8)
    heic = tmp_path / "phone.HEIC"
    heic.write_bytes(heic_bytes(img))
    nef = tmp_path / "camera.NEF"
    nef.write_bytes(nef_like())
    paths = [str(heic), str(nef)]
    monkeypatch.setitem(sys.modules, "rawpy", None)
    got = {Path(r.path).name: r for r in extract_parallel(paths, jobs=1)}
    assert got["phone.HEIC"].error is None and len(got["phone.HEIC"].features) > 0
    assert "RAW support is not installed" in got["camera.NEF"].error
    monkeypatch.setitem(sys.modules, "pillow_heif", None)
    got = {Path(r.path).name: r for r in extract_parallel(paths, jobs=1)}
    assert "HEIC support is not installed" in got["phone.HEIC"].error


def test_fake_raw_corrupt_preview_falls_back_to_demosaic(monkeypatch):
    good = jpeg_bytes(quadrants(2400, 1600))
    broken = good[: len(good) // 3]  # header fine, pixel data cut
    pixels = np.zeros((2000, 3000, 3), np.uint8)
    mod = fake_rawpy(preview=broken, pixels=pixels)
    monkeypatch.setitem(sys.modules, "rawpy", mod)
    assert load_image(nef_like()).shape == (683, 1024, 3)
    assert mod.calls and mod.calls[-1]["half_size"] is True
