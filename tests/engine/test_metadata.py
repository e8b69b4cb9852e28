"""Photo metadata: read once at indexing (engine.io.metadata), kept in the catalogue."""

from __future__ import annotations

import io
import sqlite3

import numpy as np
import pytest
from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from engine.index.ingest import ingest
from engine.index.store import IndexStore
from engine.io.metadata import PhotoMetadata, read_metadata
from tests.engine.test_ingest import _run

FEAT_KW = {"max_features": 40}


def _pixels(seed: int = 0, size: int = 96) -> Image.Image:
    """A textured image with SIFT keypoints (indexing it gives features)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size // 8, size // 8), dtype=np.uint8)
    img = np.kron(small, np.ones((8, 8), np.uint8))
    return Image.fromarray(np.stack([img, img[::-1], img[:, ::-1]], -1))


def _exif(
    date="2021:06:05 14:03:22", make="Canon", model="Canon EOS 5D Mark IV", orientation=None
) -> Image.Exif:
    exif = Image.Exif()
    exif[0x010F] = make
    exif[0x0110] = model
    if orientation:
        exif[0x0112] = orientation
    sub = exif.get_ifd(0x8769)
    sub[0x9003] = date
    sub[0x9011] = "+02:00"
    sub[0xA434] = "EF24-70mm f/2.8L II USM"
    sub[0x829A] = IFDRational(1, 250)
    sub[0x829D] = IFDRational(28, 10)
    sub[0x8827] = 400
    sub[0x920A] = IFDRational(35, 1)
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2] = "S", (IFDRational(33, 1), IFDRational(51, 1), IFDRational(3600, 100))
    gps[3], gps[4] = "W", (IFDRational(70, 1), IFDRational(30, 1), IFDRational(0, 1))
    gps[5], gps[6] = b"\x00", IFDRational(520, 1)
    return exif


def _jpeg(path, seed=0, exif=None, size=96):
    path.parent.mkdir(parents=True, exist_ok=True)
    im = _pixels(seed, size)
    if exif is None:
        im.save(path, "JPEG", quality=92)
    else:
        im.save(path, "JPEG", quality=92, exif=exif)
    return path


def _corrupt_exif_jpeg(path, seed=0):
    """A JPEG whose APP1 EXIF segment is garbage after its ``Exif`` header."""
    buf = io.BytesIO()
    _pixels(seed).save(buf, "JPEG", quality=92)
    data = buf.getvalue()
    body = b"Exif\x00\x00MM\x00\x2a\xff\xff\xff\xf0" + bytes(range(256)) * 2
    app1 = b"\xff\xe1" + (len(body) + 2).to_bytes(2, "big") + body
    path.write_bytes(data[:2] + app1 + data[2:])
    return path


# ---------------------------------------------------------------------------- reading


def test_every_field_is_read_from_a_jpeg(tmp_path):
    m = read_metadata(_jpeg(tmp_path / "a.jpg", exif=_exif()))
    assert m.date_taken == "2021-06-05T14:03:22+02:00" and m.date == "2021-06-05"
    assert (m.make, m.model, m.camera) == ("Canon", "Canon EOS 5D Mark IV", "Canon EOS 5D Mark IV")
    assert m.lens == "EF24-70mm f/2.8L II USM"
    assert m.exposure_time == pytest.approx(1 / 250) and m.f_number == pytest.approx(2.8)
    assert (m.iso, m.focal_length) == (400, 35.0)
    assert m.exposure == "1/250 s · f/2.8 · ISO 400 · 35 mm"
    assert (m.width, m.height) == (96, 96)
    assert m.latitude == pytest.approx(-(33 + 51 / 60 + 36 / 3600))
    assert m.longitude == pytest.approx(-70.5) and m.altitude == 520 and m.has_gps
    # the same from the bytes (what the indexing workers hand it)
    assert read_metadata((tmp_path / "a.jpg").read_bytes()) == m
    assert PhotoMetadata.from_json(m.to_json()) == m


def test_orientation_swaps_the_size_and_camera_is_not_repeated(tmp_path):
    im = Image.fromarray(np.zeros((40, 100, 3), np.uint8))
    exif = _exif(make="NIKON CORPORATION", model="NIKON D750", orientation=6)
    im.save(tmp_path / "r.jpg", exif=exif)
    m = read_metadata(tmp_path / "r.jpg")
    assert (m.width, m.height) == (40, 100)
    assert m.camera == "NIKON D750"
    assert PhotoMetadata(make="Apple", model="iPhone 12").camera == "Apple iPhone 12"


def test_photo_without_exif_has_only_its_size(tmp_path):
    m = read_metadata(_jpeg(tmp_path / "plain.jpg"))
    assert (m.width, m.height) == (96, 96)
    assert m.date_taken is m.camera is m.lens is m.exposure is m.latitude is None


def test_corrupt_exif_and_junk_give_empty_fields_never_an_error(tmp_path):
    m = read_metadata(_corrupt_exif_jpeg(tmp_path / "bad.jpg"))
    assert m.date_taken is None and m.camera is None
    assert (m.width, m.height) == (96, 96)  # the rest is still read
    assert read_metadata(b"not a photo").is_empty()
    assert read_metadata(tmp_path / "missing.jpg").is_empty()
    assert read_metadata(b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00II*\x00").is_empty()
    bad_date = _exif(date="0000:00:00 00:00:00")
    assert read_metadata(_jpeg(tmp_path / "zero.jpg", exif=bad_date)).date_taken is None


def test_from_json_drops_damaged_values():
    m = PhotoMetadata.from_json(
        {"date_taken": "yesterday", "iso": "400", "f_number": float("nan"), "make": 7,
         "model": "X100V", "width": 6000, "unknown": 1}
    )  # fmt: skip
    assert m == PhotoMetadata(model="X100V", width=6000)
    assert PhotoMetadata.from_json(None) == PhotoMetadata()


def test_heic_with_exif(tmp_path):
    pillow_heif = pytest.importorskip("pillow_heif")
    im = _pixels(1, 64)
    exif = _exif(date="2024:02:29 08:15:00", make="Apple", model="iPhone 15 Pro")
    heif = pillow_heif.from_pillow(im)
    heif.info["exif"] = exif.tobytes()
    heif.save(tmp_path / "phone.heic", quality=80)
    m = read_metadata(tmp_path / "phone.heic")
    assert m.date_taken == "2024-02-29T08:15:00+02:00"
    assert m.camera == "Apple iPhone 15 Pro" and m.iso == 400
    assert (m.width, m.height) == (64, 64) and m.has_gps


def test_raw_camera_from_its_tiff_tags_and_size_from_libraw(tmp_path):
    pytest.importorskip("rawpy")
    from tests.engine.test_formats import make_dng, quadrants

    (tmp_path / "a.dng").write_bytes(make_dng(quadrants(), orientation=6))
    m = read_metadata(tmp_path / "a.dng")
    assert (m.make, m.model) == ("Simile", "Test DNG")
    assert (m.width, m.height) == (48, 64)  # the sensor's 64 x 48, turned by its flag
    with_preview = make_dng(quadrants(), preview=quadrants())  # (IFD 0: a JPEG preview)
    assert read_metadata(with_preview).camera == "Simile Test DNG"


def test_png_metadata_without_decoding_its_pixels(tmp_path, monkeypatch):
    from PIL import PngImagePlugin

    _pixels().save(tmp_path / "plain.png")
    _pixels().save(tmp_path / "exif.png", exif=_exif())

    decoded = []
    load = PngImagePlugin.PngImageFile.load

    def counting_load(self):
        decoded.append(self)
        return load(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", counting_load)
    plain = read_metadata(tmp_path / "plain.png")
    assert (plain.width, plain.height, plain.date_taken) == (96, 96, None)
    assert read_metadata(tmp_path / "exif.png").date == "2021-06-05"
    assert decoded == []


def test_xmp_date_when_exif_has_none(tmp_path):
    xmp = (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description '
        b'xmp:CreateDate="2019-12-24T18:30:00" tiff:Model="DMC-GX80"/></rdf:RDF></x:xmpmeta>'
    )
    _pixels().save(tmp_path / "x.jpg", "JPEG", xmp=xmp)
    m = read_metadata(tmp_path / "x.jpg")
    assert (m.date_taken, m.model) == ("2019-12-24T18:30:00", "DMC-GX80")


# ---------------------------------------------------------------------------- catalogue


def test_indexing_stores_metadata_with_the_row(tmp_path):
    folder = tmp_path / "photos"
    a = _jpeg(folder / "a.jpg", 0, _exif())
    b = _jpeg(folder / "sub" / "b.jpg", 1)
    bad = _corrupt_exif_jpeg(folder / "c.jpg", 2)
    with IndexStore.open(tmp_path / "idx") as store:
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.indexed == 3 and not summary.failed  # bad EXIF never fails a photo
        by_path = store.path_metadata()
        assert set(by_path) == {str(a), str(b), str(bad)}
        assert by_path[str(a)].camera == "Canon EOS 5D Mark IV"
        assert by_path[str(b)].date_taken is None and by_path[str(b)].width == 96
        assert store.metadata([store.id_of(a)]) == {store.id_of(a): by_path[str(a)]}
        assert summary.to_json()["metadata"] == {
            "read": 3, "date_taken": 1, "camera": 1, "gps": 1, "read_now": 3,
        }  # fmt: skip
        # a photo whose file changes and no longer reads loses its metadata
        a.write_bytes(b"\xff\xd8\xff junk")
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert [p for p, _ in summary.failed] == [str(a)]
        assert str(a) not in store.path_metadata()
        con = sqlite3.connect(tmp_path / "idx" / "catalog.sqlite")
        assert con.execute("SELECT count(*) FROM metadata").fetchone()[0] == 2
        # a deleted photo's metadata goes with its row
        b.unlink()
        summary, _ = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.removed == 1
        assert con.execute("SELECT count(*) FROM metadata").fetchone()[0] == 1
        con.close()


def test_metadata_is_written_in_the_rows_transaction(tmp_path):
    class Broken(PhotoMetadata):
        def to_json(self):
            raise RuntimeError("disk gone")

    feats = _extract(_pixels())
    with IndexStore.open(tmp_path / "idx") as store:
        with pytest.raises(RuntimeError, match="disk gone"):
            store.write_batch(ok=[("/p/a.jpg", 1, 1, "h", feats)], metadata={"/p/a.jpg": Broken()})
        assert store.count(None) == 0 and store.path_metadata() == {}
        store.write_batch(
            ok=[("/p/a.jpg", 1, 1, "h", feats)], metadata={"/p/a.jpg": PhotoMetadata(iso=100)}
        )
        assert store.path_metadata() == {"/p/a.jpg": PhotoMetadata(iso=100)}


def _extract(im):
    from engine.features.keypoints import extract_features

    buf = io.BytesIO()
    im.save(buf, "PNG")
    return extract_features(buf.getvalue(), **FEAT_KW)


def test_a_schema_2_catalogue_is_migrated_and_its_photos_get_metadata(tmp_path):
    folder = tmp_path / "photos"
    a = _jpeg(folder / "a.jpg", 0, _exif())
    _jpeg(folder / "b.jpg", 1)
    idx = tmp_path / "idx"
    with IndexStore.open(idx) as store:
        _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
    con = sqlite3.connect(idx / "catalog.sqlite", isolation_level=None)
    con.execute("DROP TABLE metadata")  # as schema 2 left it
    con.execute("PRAGMA user_version=2")
    con.close()
    with IndexStore.open(idx, readonly=True) as r:  # a reader uses it as it is
        assert r.path_metadata() == {} and r.count() == 2
    with IndexStore.open(idx) as store:
        con = sqlite3.connect(idx / "catalog.sqlite")
        assert con.execute("PRAGMA user_version").fetchone()[0] == 3
        con.close()
        assert len(store.missing_metadata()) == 2
        summary, events = _run(ingest(store, folder, jobs=1, feature_kwargs=FEAT_KW))
        assert summary.indexed == 0 and summary.unchanged == 2  # features not extracted again
        assert not [e for e in events if e.status == "indexed"]
        assert store.missing_metadata() == []
        assert store.path_metadata()[str(a)].date == "2021-06-05"
        assert summary.metadata["read_now"] == 2


def test_metadata_counts_in_sql_agree_with_the_parsed_rows(tmp_path):
    """The summary's counts (SQL, no row parsed) are those of the parsed metadata, also
    with a damaged row (counted as read, nothing else)."""
    from engine.index.metadata_rows import count_metadata

    feats = _extract(_pixels())
    metas = [
        PhotoMetadata(date_taken="2024-05-01T10:00:00", make="Canon", model="EOS R5"),
        PhotoMetadata(model="iPhone 15", latitude=48.1, longitude=11.5),
        PhotoMetadata(make="Nikon", latitude=1.0),  # no longitude: no place
        PhotoMetadata(iso=200),
        PhotoMetadata(),
    ]
    with IndexStore.open(tmp_path / "idx") as store:
        ok = [(f"/p/{k}.jpg", 1, 1, f"h{k}", feats) for k in range(len(metas) + 1)]
        store.write_batch(ok=ok, metadata={f"/p/{k}.jpg": m for k, m in enumerate(metas)})
        want = count_metadata(store.metadata().values())
        assert store.metadata_counts() == want == {
            "read": 5, "date_taken": 1, "camera": 3, "gps": 1,
        }  # fmt: skip
        rid = store.id_of("/p/0.jpg")
        store._write_sql("UPDATE metadata SET data = ? WHERE image_id = ?", ("{nope", rid))
        assert store.metadata_counts() == count_metadata(store.metadata().values())
