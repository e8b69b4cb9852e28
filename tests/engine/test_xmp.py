"""XMP sidecars and keywords (formats issue, point 3): write, read back, merge with what
a sidecar holds, unicode, the photo untouched, unsafe XML refused, keywords as labels."""

from __future__ import annotations

import hashlib
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from engine.io.xmp import (
    XMPError,
    merge_keywords,
    read_keywords,
    read_sidecar_keywords,
    sidecar_path,
)
from engine.workflows.keywords import (
    category_keywords,
    duplicate_keywords,
    export_keywords,
    labels_from_keywords,
)

DIGIKAM_SIDECAR = """<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/" x:xmptk="XMP Core 4.4.0-Exiv2">
 <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
  <rdf:Description rdf:about=""
    xmlns:xmp="http://ns.adobe.com/xap/1.0/"
    xmlns:darktable="http://darktable.sf.net/"
    xmlns:dc="http://purl.org/dc/elements/1.1/"
    xmlns:lr="http://ns.adobe.com/lightroom/1.0/"
    xmlns:digiKam="http://www.digikam.org/ns/1.0/"
    xmp:Rating="4"
    darktable:history_end="3">
   <dc:subject><rdf:Bag><rdf:li>Oma</rdf:li><rdf:li>Strand</rdf:li></rdf:Bag></dc:subject>
   <lr:hierarchicalSubject><rdf:Bag><rdf:li>Familie|Oma</rdf:li>
     <rdf:li>Orte|Strand</rdf:li></rdf:Bag></lr:hierarchicalSubject>
   <digiKam:TagsList><rdf:Seq><rdf:li>Familie/Oma</rdf:li><rdf:li>Orte/Strand</rdf:li>
     </rdf:Seq></digiKam:TagsList>
  </rdf:Description>
 </rdf:RDF>
</x:xmpmeta>
<?xpacket end="w"?>
"""


@pytest.fixture
def photo(tmp_path, demo_folder):
    p = tmp_path / "Urlaub München.jpg"
    shutil.copy(demo_folder / "brick.jpg", p)
    return p


def _digest(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_round_trip_keeps_the_persons_keywords_and_the_photo(photo):
    side = sidecar_path(photo)
    assert side.name == "Urlaub München.jpg.xmp"
    assert sidecar_path(photo, "base").name == "Urlaub München.xmp"
    side.write_text(DIGIKAM_SIDECAR, encoding="utf-8")
    before = _digest(photo)
    ch = merge_keywords(photo, ["Simile|Category|Strände & Meer"], "Simile")
    assert ch.added == ["Simile|Category|Strände & Meer"] and not ch.removed and not ch.created
    kws = read_sidecar_keywords(side)
    for k in ("Familie|Oma", "Orte|Strand", "Oma", "Strand", "Simile|Category|Strände & Meer",
              "Strände & Meer"):  # fmt: skip
        assert k in kws, k
    text = side.read_text(encoding="utf-8")
    # other properties and the namespace prefixes survive
    assert 'xmp:Rating="4"' in text and 'darktable:history_end="3"' in text
    assert "<digiKam:TagsList>" in text and "Simile/Category/Strände &amp; Meer" in text
    assert _digest(photo) == before  # the photo is never written
    # a second export replaces Simile's keywords, keeps the person's
    ch = merge_keywords(photo, ["Simile|Category|Berge"], "Simile")
    assert ch.removed == ["Simile|Category|Strände & Meer"] and ch.added == [
        "Simile|Category|Berge"
    ]
    kws = read_sidecar_keywords(side)
    assert "Simile|Category|Strände & Meer" not in kws and "Strände & Meer" not in kws
    assert {"Familie|Oma", "Strand", "Simile|Category|Berge", "Berge"} <= set(kws)
    # the same again changes nothing; a dry run writes nothing
    assert not merge_keywords(photo, ["Simile|Category|Berge"], "Simile").changed
    mtime = side.stat().st_mtime_ns
    dry = merge_keywords(photo, [], "Simile", dry_run=True)
    assert dry.removed == ["Simile|Category|Berge"] and side.stat().st_mtime_ns == mtime
    # read_keywords sees the sidecar (and nothing else in this JPEG)
    assert set(read_keywords(photo)) == set(kws)


def test_new_sidecar_unsafe_and_broken_ones(photo, tmp_path):
    ch = merge_keywords(photo, ["Simile|Duplicates|Same photo"], "Simile", style="base")
    assert ch.created and sidecar_path(photo, "base").exists()
    assert read_sidecar_keywords(sidecar_path(photo, "base")) == [
        "Same photo",
        "Simile|Duplicates|Same photo",
    ]
    bomb = sidecar_path(photo)
    bomb.write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>')
    with pytest.raises(XMPError, match="unsafe"):
        merge_keywords(photo, ["Simile|Category|A"], "Simile")
    assert "ENTITY" in bomb.read_text()  # left alone
    bomb.write_text("<not xml")
    with pytest.raises(XMPError, match="well-formed"):
        read_sidecar_keywords(bomb)
    with pytest.raises(ValueError):
        merge_keywords(photo, ["Other|A"], "Simile")
    assert read_keywords(tmp_path / "absent.jpg") == []


def test_export_and_keywords_as_labels(tmp_path, demo_folder):
    from engine.cluster import EditableGrouping

    folder = tmp_path / "photos"
    folder.mkdir()
    names = ["brick", "brick_crop", "coffee", "coffee_crop", "chelsea"]
    paths = []
    for n in names:
        shutil.copy(demo_folder / f"{n}.jpg", folder / f"{n}.jpg")
        paths.append(str(folder / f"{n}.jpg"))
    outside = tmp_path / "outside.jpg"
    shutil.copy(demo_folder / "astronaut.jpg", outside)
    g = EditableGrouping(paths, np.array([0, 0, 1, 1, 1]), np.zeros(5), np.zeros(5, bool),
                         np.zeros(5, bool), names={0: "Walls"})  # fmt: skip
    kw = category_keywords(g)
    assert kw[paths[0]] == ["Simile|Category|Walls"] and kw[paths[2]] == [
        "Simile|Category|Group 2"
    ]

    dup = SimpleNamespace(paths=[paths[0], paths[1]], tier="same_photo")
    dk = duplicate_keywords([dup], [paths[0]])
    assert dk[paths[1]] == ["Simile|Duplicates|Same photo", "Simile|Duplicates|Extra copy"]
    merged = {p: kw.get(p, []) + dk.get(p, []) for p in paths}
    dry = export_keywords(merged, [*paths, str(outside)], folder, dry_run=True)
    assert len(dry.changes) == 5 and not list(folder.glob("*.xmp"))
    assert dry.refused == [(str(outside), "outside the folder")]
    rep = export_keywords(merged, paths, folder)
    assert len(rep.changes) == 5 and len(list(folder.glob("*.xmp"))) == 5
    assert "Simile|Duplicates|Copy to keep" in read_keywords(paths[0])
    again = export_keywords(merged, paths, folder)
    assert again.unchanged == 5 and not again.changes

    # the person's own keywords (not Simile's) label the photos
    for p, k in zip(paths, ["Wand", "Wand", "Kaffee", "Kaffee", "Katze"], strict=True):
        merge_keywords(p, [f"Mine|{k}"], "Mine")
    labels, classes = labels_from_keywords(paths)
    assert classes == ["Mine|Wand", "Mine|Kaffee"]
    assert labels.tolist() == [0, 0, 1, 1, -1]  # a keyword of one photo is no class


def test_a_scope_replaces_only_its_part_of_the_hierarchy(photo):
    merge_keywords(photo, ["Simile|Category|Walls"], "Simile|Category")
    merge_keywords(photo, ["Simile|Duplicates|Same photo"], "Simile|Duplicates")
    kws = read_keywords(photo)
    assert "Simile|Category|Walls" in kws and "Simile|Duplicates|Same photo" in kws
    ch = merge_keywords(photo, [], "Simile|Duplicates")
    assert ch.removed == ["Simile|Duplicates|Same photo"]
    kws = read_keywords(photo)
    assert "Simile|Category|Walls" in kws and "Walls" in kws
    assert "Simile|Duplicates|Same photo" not in kws and "Same photo" not in kws
    with pytest.raises(ValueError):
        merge_keywords(photo, ["Simile|Category|X"], "Simile|Duplicates")
