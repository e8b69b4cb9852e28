"""Simile's findings as keywords in XMP sidecars, and the person's keywords as supervision
(formats issue, point 3).

- :func:`category_keywords` and :func:`duplicate_keywords` turn a grouping's named groups
  and duplicate groups into hierarchical keywords under one root
  (``Simile|Category|Beach``, ``Simile|Duplicates|Same photo``,
  ``Simile|Duplicates|Copy to keep``);
- :func:`export_keywords` writes them into the photos' sidecars
  (:func:`engine.io.xmp.merge_keywords`: merged with what a sidecar holds, the photos
  never touched; ``dry_run`` lists the changes), replacing the root's older keywords,
  only for photos inside the folder;
- :func:`labels_from_keywords` reads the keywords the person gave their photos (sidecars,
  embedded XMP, IPTC) and labels each photo by its most specific keyword shared with
  other photos, for :func:`engine.workflows.feedback.learn` (``source="keywords"``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.io.xmp import KeywordChange, XMPError, merge_keywords, read_keywords

__all__ = [
    "DEFAULT_ROOT",
    "TIER_KEYWORDS",
    "ExportReport",
    "category_keywords",
    "duplicate_keywords",
    "export_keywords",
    "labels_from_keywords",
]

#: The root keyword of everything Simile writes.
DEFAULT_ROOT = "Simile"
#: Keyword of each duplicate tier (``engine.workflows.duplicates.TIERS``).
TIER_KEYWORDS = {
    "identical": "Identical files",
    "same_photo": "Same photo",
    "similar_shots": "Similar shots",
}


def _part(name: str) -> str:
    """A keyword part: the hierarchy separators ``|`` and ``/`` replaced, spaces kept."""
    text = " ".join(str(name).replace("|", "-").replace("/", "-").split())
    return text or "Unnamed"


def category_keywords(grouping: Any, root: str = DEFAULT_ROOT) -> dict[str, list[str]]:
    """``root|Category|<group name>`` for every photo of ``grouping``
    (:class:`engine.cluster.EditableGrouping`: ``paths``, ``labels``, ``name(g)``)."""
    return {
        str(p): [f"{root}|Category|{_part(grouping.name(int(g)))}"]
        for p, g in zip(grouping.paths, grouping.labels, strict=True)
    }


def duplicate_keywords(
    groups: Sequence[Any], keep: Sequence[str | None], root: str = DEFAULT_ROOT
) -> dict[str, list[str]]:
    """Keywords of duplicate groups: ``root|Duplicates|<tier>`` for every member and
    ``root|Duplicates|Copy to keep`` or ``root|Duplicates|Extra copy``.

    Parameters
    ----------
    groups : sequence of DuplicateGroup
        ``paths`` and (when present) ``tier`` (:data:`TIER_KEYWORDS`).
    keep : sequence of str or None
        The suggested copy of each group (None: no suggestion).
    root : str
    """
    out: dict[str, list[str]] = {}
    for g, kept in zip(groups, keep, strict=True):
        tier = TIER_KEYWORDS.get(str(getattr(g, "tier", "")), "Duplicates")
        for p in g.paths:
            kws = out.setdefault(str(p), [])
            kws.append(f"{root}|Duplicates|{tier}")
            if kept is not None:
                role = "Copy to keep" if str(p) == str(kept) else "Extra copy"
                kws.append(f"{root}|Duplicates|{role}")
    return {p: list(dict.fromkeys(v)) for p, v in out.items()}


@dataclass
class ExportReport:
    """What :func:`export_keywords` did.

    Attributes
    ----------
    changes : list of KeywordChange
        One per sidecar that changed (or would, ``dry_run``).
    unchanged : int
        Photos whose sidecar already held exactly these keywords.
    refused : list of (str, str)
        Photos left alone and why (a sidecar that is not safe XMP, outside the folder,
        cannot be written).
    """

    changes: list[KeywordChange] = field(default_factory=list)
    unchanged: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)

    def written_text(self, what: str) -> str:
        """One sentence for people: "Wrote <what> as keywords into N XMP sidecars", with
        the photos left alone and the first reason."""
        n = len(self.changes)
        text = f"Wrote {what} as keywords into {n} XMP sidecar{'s' if n != 1 else ''}"
        if self.refused:
            text += f"; {len(self.refused)} left alone ({self.refused[0][1]})"
        return text + "."


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(folder)))
        return True
    except ValueError:
        return False


def export_keywords(
    keywords: Mapping[str, Sequence[str]],
    photos: Sequence[str | os.PathLike],
    folder: str | os.PathLike,
    *,
    root: str = DEFAULT_ROOT,
    style: str = "ext",
    dry_run: bool = False,
    scope: str | None = None,
) -> ExportReport:
    """Write ``keywords`` (photo -> ``root|...`` keywords) into the sidecars of
    ``photos``: each sidecar ends up with exactly the given keywords under ``root`` (older
    ones of ``root`` removed; a photo without keywords and without a sidecar gets none),
    everything else kept.

    Parameters
    ----------
    keywords : mapping of str to sequence of str
    photos : sequence of path-like
        Every photo of the folder (so that keywords of ``root`` no finding names any more
        are removed).
    folder : path-like
        Only photos inside it are touched (as written: a symlinked photo's sidecar is
        beside the link).
    root, style, dry_run
        As :func:`engine.io.xmp.merge_keywords`.
    scope : str, optional
        The part of ``root``'s hierarchy replaced (``"Simile|Category"``: the duplicate
        keywords written earlier stay); default ``root``.

    Returns
    -------
    ExportReport
    """
    from engine.io.xmp import sidecar_path

    folder = Path(folder)
    report = ExportReport()
    for photo in photos:
        photo = Path(photo)
        want = list(keywords.get(str(photo), ()))
        if not _inside(photo, folder):
            report.refused.append((str(photo), "outside the folder"))
            continue
        if not want and not sidecar_path(photo, style).exists():
            continue
        try:
            change = merge_keywords(photo, want, scope or root, style=style, dry_run=dry_run)
        except (XMPError, OSError, ValueError) as exc:
            report.refused.append((str(photo), str(exc)))
            continue
        if change.changed:
            report.changes.append(change)
        else:
            report.unchanged += 1
    return report


def labels_from_keywords(
    paths: Sequence[str | os.PathLike], ignore_root: str = DEFAULT_ROOT
) -> tuple[np.ndarray, list[str]]:
    """A class for every photo from the keywords the person gave it
    (:func:`engine.io.xmp.read_keywords`), Simile's own (``ignore_root``) excluded.

    Flat keywords that repeat the last part of a hierarchical one (``dc:subject`` beside
    ``lr:hierarchicalSubject``) are the same keyword. A keyword counts as a class when 2 or
    more photos carry it and at most 90 % of them
    (a keyword on nearly every photo, such as the photographer's name, tells nothing
    apart). Each photo is labelled by its most specific such keyword: the one the fewest
    photos carry (ties: the deeper hierarchy, then the name). Photos without one are
    unlabelled (-1).

    Parameters
    ----------
    paths : sequence of path-like
    ignore_root : str

    Returns
    -------
    labels : (n,) int64
    classes : list of str
        The keyword of each class (``A|B|C`` paths).
    """
    kws = []
    for p in paths:
        every = read_keywords(p)
        paths_ = [k for k in every if "|" in k]
        leaves = {k.rsplit("|", 1)[-1] for k in paths_}  # (dc:subject repeats the leaves)
        own = [k for k in paths_ if k.split("|")[0] != ignore_root]
        own += [k for k in every if "|" not in k and k not in leaves and k != ignore_root]
        kws.append(own)
    n = len(paths)
    counts = Counter(k for ks in kws for k in set(ks))
    usable = {k for k, c in counts.items() if c >= 2 and c <= 0.9 * n}
    classes: dict[str, int] = {}
    labels = np.full(n, -1, np.int64)
    for i, ks in enumerate(kws):
        cand = [k for k in ks if k in usable]
        if not cand:
            continue
        best = min(cand, key=lambda k: (counts[k], -k.count("|"), k))
        labels[i] = classes.setdefault(best, len(classes))
    return labels, list(classes)
