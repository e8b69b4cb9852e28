"""Keywords in XMP sidecars and embedded metadata, read and written the way digiKam,
darktable and Lightroom do (formats issue, point 3).

A sidecar is a small XML file beside the photo: ``photo.jpg.xmp`` (darktable's and
digiKam's default, :data:`SIDECAR_STYLES` ``"ext"``) or ``photo.xmp`` (Lightroom's,
``"base"``). Keywords live in three properties, all kept in step:

- ``dc:subject`` (a bag of flat keywords: the last part of each hierarchy),
- ``lr:hierarchicalSubject`` (a bag of ``Parent|Child|Leaf`` paths; Lightroom, darktable),
- ``digiKam:TagsList`` (a sequence of ``Parent/Child/Leaf`` paths; digiKam).

:func:`merge_keywords` rewrites a sidecar with the keywords under one root (e.g.
``Simile|Category|Beach``) replaced by the ones given, and everything else it holds kept
(other keywords, ratings, edits, unknown namespaces and their prefixes). The photo itself
is never opened for writing; the sidecar is replaced atomically. A sidecar that is not
well-formed XMP, or that declares a DOCTYPE or entities (the XML bombs and external
entities a parser must not expand), is left alone and reported.

:func:`read_keywords` reads what the person already gave a photo: its sidecar, the XMP
packet embedded in the file and IPTC keywords (JPEG, TIFF; through Pillow).
"""

from __future__ import annotations

import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "NAMESPACES",
    "SIDECAR_STYLES",
    "KeywordChange",
    "XMPError",
    "merge_keywords",
    "read_keywords",
    "read_sidecar_keywords",
    "sidecar_path",
]

#: Namespaces of the keyword properties and of the XMP envelope.
NAMESPACES = {
    "x": "adobe:ns:meta/",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "dc": "http://purl.org/dc/elements/1.1/",
    "lr": "http://ns.adobe.com/lightroom/1.0/",
    "digiKam": "http://www.digikam.org/ns/1.0/",
}
#: Sidecar naming conventions: ``"ext"`` photo.jpg.xmp (darktable, digiKam), ``"base"``
#: photo.xmp (Lightroom, Capture One).
SIDECAR_STYLES = ("ext", "base")
#: Bytes of a photo searched for an embedded XMP packet.
EMBEDDED_SCAN = 4 << 20
#: Largest sidecar read (a sidecar is a few KB; anything huge is not one).
MAX_SIDECAR = 16 << 20

_RDF = f"{{{NAMESPACES['rdf']}}}"
_X = f"{{{NAMESPACES['x']}}}"
_PROPS = {  # property -> (container, separator of its hierarchy, or None: flat)
    f"{{{NAMESPACES['dc']}}}subject": ("Bag", None),
    f"{{{NAMESPACES['lr']}}}hierarchicalSubject": ("Bag", "|"),
    f"{{{NAMESPACES['digiKam']}}}TagsList": ("Seq", "/"),
}
_DANGEROUS = re.compile(rb"<!DOCTYPE|<!ENTITY", re.IGNORECASE)


class XMPError(ValueError):
    """A sidecar or packet that is not XMP Simile can read safely (the message says why)."""


@dataclass
class KeywordChange:
    """What :func:`merge_keywords` did (or would do, ``dry_run``) to one sidecar.

    Attributes
    ----------
    photo, sidecar : Path
    added, removed : list of str
        Hierarchical keywords (``Root|Child|Leaf``) added and removed.
    created : bool
        The sidecar did not exist.
    """

    photo: Path
    sidecar: Path
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    created: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def sidecar_path(photo: str | os.PathLike, style: str = "ext") -> Path:
    """The sidecar of ``photo`` under naming convention ``style`` (:data:`SIDECAR_STYLES`)."""
    p = Path(photo)
    if style == "ext":
        return p.with_name(p.name + ".xmp")
    if style == "base":
        return p.with_suffix(".xmp")
    raise ValueError(f"style must be one of {SIDECAR_STYLES}, got {style!r}")


def _check_safe(data: bytes, what: str) -> None:
    if _DANGEROUS.search(data):
        raise XMPError(f"{what}: declares a DOCTYPE or entities; not read (unsafe XML)")


def _parse(data: bytes, what: str) -> tuple[ET.Element, dict[str, str]]:
    """The root element of an XMP document and its namespace prefixes (prefix -> uri)."""
    _check_safe(data, what)
    prefixes: dict[str, str] = {}
    parser = ET.XMLPullParser(events=("start-ns",))
    try:
        parser.feed(data)
        parser.close()
        for _event, (prefix, uri) in parser.read_events():
            prefixes.setdefault(prefix, uri)
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise XMPError(f"{what}: not well-formed XML ({exc})") from None
    if root.tag not in (_X + "xmpmeta", _RDF + "RDF"):
        raise XMPError(f"{what}: not an XMP document (root element {root.tag})")
    return root, prefixes


def _rdf(root: ET.Element) -> ET.Element:
    return root if root.tag == _RDF + "RDF" else root.find(_RDF + "RDF")


def _values(root: ET.Element) -> dict[str, list[str]]:
    """Property tag -> its list items, over every ``rdf:Description``."""
    out: dict[str, list[str]] = {tag: [] for tag in _PROPS}
    rdf = _rdf(root)
    if rdf is None:
        return out
    for desc in rdf.findall(_RDF + "Description"):
        for tag in _PROPS:
            for prop in desc.findall(tag):
                for li in prop.iter(_RDF + "li"):
                    if li.text and li.text.strip():
                        out[tag].append(li.text.strip())
    return out


def _as_hierarchies(values: dict[str, list[str]]) -> list[str]:
    """Every keyword as a ``A|B|C`` path (flat keywords are one-part paths)."""
    out: list[str] = []
    for tag, (_, sep) in _PROPS.items():
        for v in values[tag]:
            out.append(v if sep in (None, "|") else v.replace(sep, "|"))
    return list(dict.fromkeys(out))


def read_sidecar_keywords(sidecar: str | os.PathLike) -> list[str]:
    """The keywords of an XMP sidecar as ``A|B|C`` paths (flat ones as themselves), in
    file order without repeats; ``[]`` when there is no sidecar.

    Raises
    ------
    XMPError
        The file is not safe, well-formed XMP.
    """
    path = Path(sidecar)
    try:
        if path.stat().st_size > MAX_SIDECAR:
            raise XMPError(f"{path}: {path.stat().st_size} bytes is too large for a sidecar")
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    root, _ = _parse(data, str(path))
    return _as_hierarchies(_values(root))


def _embedded_keywords(photo: Path) -> list[str]:
    """Keywords of the XMP packet inside the photo's first :data:`EMBEDDED_SCAN` bytes."""
    try:
        with open(photo, "rb") as fh:
            head = fh.read(EMBEDDED_SCAN)
    except OSError:
        return []
    start = head.find(b"<x:xmpmeta")
    end = head.find(b"</x:xmpmeta>", start)
    if start < 0 or end < 0:
        return []
    try:
        root, _ = _parse(head[start : end + len(b"</x:xmpmeta>")], str(photo))
    except XMPError:
        return []
    return _as_hierarchies(_values(root))


def _iptc_keywords(photo: Path) -> list[str]:
    """IPTC keywords (record 2, dataset 25) of a JPEG or TIFF, through Pillow."""
    try:
        from PIL import Image, IptcImagePlugin

        with Image.open(photo) as im:
            info = IptcImagePlugin.getiptcinfo(im) or {}
    except Exception:  # (any unreadable or unsupported file: no IPTC keywords)
        return []
    raw = info.get((2, 25), [])
    raw = raw if isinstance(raw, list) else [raw]
    out = []
    for v in raw:
        text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        if text.strip():
            out.append(text.strip())
    return out


def read_keywords(photo: str | os.PathLike, styles: Sequence[str] = SIDECAR_STYLES) -> list[str]:
    """Every keyword the person gave ``photo``: its sidecars (``styles``), the XMP packet
    embedded in it and its IPTC keywords, as ``A|B|C`` paths without repeats. Unreadable
    or unsafe metadata is skipped (never an exception).

    Parameters
    ----------
    photo : path-like
    styles : sequence of str
        Sidecar conventions looked at (:data:`SIDECAR_STYLES`).

    Returns
    -------
    list of str
    """
    photo = Path(photo)
    out: list[str] = []
    for style in styles:
        try:
            out += read_sidecar_keywords(sidecar_path(photo, style))
        except (XMPError, OSError):
            pass
    out += _embedded_keywords(photo)
    out += _iptc_keywords(photo)
    return list(dict.fromkeys(out))


def _empty_document() -> ET.Element:
    root = ET.Element(_X + "xmpmeta", {_X + "xmptk": "Simile"})
    rdf = ET.SubElement(root, _RDF + "RDF")
    ET.SubElement(rdf, _RDF + "Description", {_RDF + "about": ""})
    return root


def _property(rdf: ET.Element, tag: str) -> ET.Element:
    """The container (``rdf:Bag`` / ``rdf:Seq``) of property ``tag``, created in the first
    ``rdf:Description`` when absent."""
    kind = _PROPS[tag][0]
    for desc in rdf.findall(_RDF + "Description"):
        prop = desc.find(tag)
        if prop is not None:
            box = prop.find(_RDF + kind)
            if box is None:
                box = prop.find(_RDF + ("Seq" if kind == "Bag" else "Bag"))
            if box is None:
                box = ET.SubElement(prop, _RDF + kind)
            return box
    desc = rdf.find(_RDF + "Description")
    if desc is None:
        desc = ET.SubElement(rdf, _RDF + "Description", {_RDF + "about": ""})
    return ET.SubElement(ET.SubElement(desc, tag), _RDF + kind)


def _set_items(box: ET.Element, items: Iterable[str], drop: set[str]) -> None:
    """Remove the list items whose text is in ``drop``, then append ``items`` not there."""
    for li in list(box.findall(_RDF + "li")):
        if (li.text or "").strip() in drop:
            box.remove(li)
    have = {(li.text or "").strip() for li in box.findall(_RDF + "li")}
    for text in items:
        if text not in have:
            ET.SubElement(box, _RDF + "li").text = text
            have.add(text)


def _serialise(root: ET.Element, prefixes: dict[str, str]) -> bytes:
    for prefix, uri in {**prefixes, **NAMESPACES}.items():
        if prefix and not prefix.startswith("ns"):
            try:
                ET.register_namespace(prefix, uri)
            except ValueError:  # (a reserved prefix such as xml)
                pass
    if root.tag == _RDF + "RDF":  # a bare rdf:RDF document: wrap it
        meta = ET.Element(_X + "xmpmeta", {_X + "xmptk": "Simile"})
        meta.append(root)
        root = meta
    ET.indent(root, space=" ")
    body = ET.tostring(root, encoding="unicode")
    return (
        f'<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n{body}\n<?xpacket end="w"?>\n'
    ).encode()


def merge_keywords(
    photo: str | os.PathLike,
    keywords: Sequence[str],
    root: str,
    *,
    style: str = "ext",
    dry_run: bool = False,
) -> KeywordChange:
    """Make ``photo``'s sidecar hold exactly ``keywords`` under ``root`` (``Root|...``
    paths), keeping every other keyword and everything else the sidecar holds.

    Parameters
    ----------
    photo : path-like
        The photo (never opened for writing).
    keywords : sequence of str
        Hierarchical keywords, each ``root|...`` (e.g. ``"Simile|Category|Beach"``).
    root : str
        The part of the hierarchy this call owns (``"Simile"``, or ``"Simile|Category"``
        to leave Simile's other keywords alone): keywords under ``root`` in the sidecar
        and not in ``keywords`` are removed (a regrouping replaces the old categories).
    style : {"ext", "base"}
        Sidecar naming (:func:`sidecar_path`).
    dry_run : bool
        Only say what would change.

    Returns
    -------
    KeywordChange

    Raises
    ------
    XMPError
        The existing sidecar is not safe, well-formed XMP (it is left as it is).
    ValueError
        A keyword is not under ``root``, or has an empty part.
    OSError
        The sidecar cannot be written.
    """
    root = root.strip("|")
    if not root or "/" in root or not all(p.strip() for p in root.split("|")):
        raise ValueError(f"the root keyword must be a non-empty A|B path, got {root!r}")
    depth = root.count("|") + 1
    want = list(dict.fromkeys(keywords))
    for kw in want:
        parts = kw.split("|")
        ok = "|".join(parts[:depth]) == root and len(parts) > depth
        if not ok or not all(p.strip() for p in parts):
            raise ValueError(f"keyword {kw!r} is not a path under {root!r}")
    photo = Path(photo)
    side = sidecar_path(photo, style)
    created = not side.exists()
    if created:
        doc, prefixes = _empty_document(), {}
    else:
        if side.stat().st_size > MAX_SIDECAR:
            raise XMPError(f"{side}: too large for a sidecar; left alone")
        doc, prefixes = _parse(side.read_bytes(), str(side))
    values = _values(doc)
    lr_tag, dk_tag, dc_tag = (
        f"{{{NAMESPACES['lr']}}}hierarchicalSubject",
        f"{{{NAMESPACES['digiKam']}}}TagsList",
        f"{{{NAMESPACES['dc']}}}subject",
    )
    ours = [v for v in values[lr_tag] if v.startswith(root + "|")]
    ours += [
        v.replace("/", "|") for v in values[dk_tag] if v.replace("/", "|").startswith(root + "|")
    ]
    ours = list(dict.fromkeys(ours))
    removed = [v for v in ours if v not in want]
    added = [v for v in want if v not in ours]
    change = KeywordChange(photo, side, added, removed, created)
    if dry_run or not change.changed:
        return change
    rdf = _rdf(doc)
    if rdf is None:
        raise XMPError(f"{side}: no rdf:RDF element")
    kept_leaves = {v.split("|")[-1] for v in values[lr_tag] if not v.startswith(root + "|")}
    drop_leaves = {v.split("|")[-1] for v in removed} - kept_leaves
    drop_leaves -= {v.split("|")[-1] for v in want}
    _set_items(_property(rdf, lr_tag), want, set(removed))
    _set_items(_property(rdf, dk_tag), [v.replace("|", "/") for v in want],
               {v.replace("|", "/") for v in removed})  # fmt: skip
    _set_items(_property(rdf, dc_tag), [v.split("|")[-1] for v in want], drop_leaves)
    data = _serialise(doc, prefixes)
    fd, tmp = tempfile.mkstemp(prefix=f".{side.name}.", suffix=".tmp", dir=side.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if not created:
            try:
                os.chmod(tmp, side.stat().st_mode & 0o7777)
            except OSError:
                pass
        os.replace(tmp, side)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return change
