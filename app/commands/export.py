"""``simile export FOLDER --xmp``: Simile's categories and duplicate findings as keywords in
XMP sidecars, where digiKam, darktable and Lightroom see them.

The categories are the folder's stored grouping (the person's names, moves, splits and
merges from the app, else the last ``simile cluster``; :func:`engine.cluster.load_edits`);
``--duplicates`` finds the duplicate groups first (:meth:`Collection.duplicates`). The
keywords (``ROOT|Category|<name>``, ``ROOT|Duplicates|<tier>``, ``ROOT|Duplicates|Copy to
keep`` / ``Extra copy``) are merged into each photo's sidecar by
:func:`engine.workflows.keywords.export_keywords`: the person's own keywords and every other
entry are kept, older keywords under ROOT are replaced, the photos are never written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.commands._collection import open_collection
from app.commands._common import CommandError, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export",
        help="write categories and duplicate findings as keywords into XMP sidecars",
        description=(
            "Write the folder's categories (the stored grouping: your names and edits in "
            "the app, else the last 'simile cluster') and, with --duplicates, its duplicate "
            "groups as hierarchical keywords (ROOT|Category|NAME, ROOT|Duplicates|TIER) into "
            "XMP sidecars beside the photos (dc:subject, lr:hierarchicalSubject, "
            "digiKam:TagsList). What a sidecar already holds is kept; the photos are never "
            "written."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="indexed photo folder")
    p.add_argument("--xmp", action="store_true", required=True, help="write XMP sidecars")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--no-categories", action="store_true", help="leave the categories out")
    p.add_argument("--duplicates", action="store_true", help="also find and export duplicates")
    p.add_argument("--root", default="Simile", help="root keyword (default: Simile)")
    p.add_argument(
        "--sidecar",
        choices=("ext", "base"),
        default="ext",
        help="sidecar names: photo.jpg.xmp (ext: darktable, digiKam; default) or photo.xmp "
        "(base: Lightroom)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the changes, write nothing")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def _categories(col, root: str) -> dict[str, list[str]]:
    from engine.cluster import load_edits
    from engine.workflows.keywords import category_keywords

    saved = load_edits(col.store, [str(p) for p in col.paths()])
    if saved is None or saved.grouping is None:
        raise CommandError(
            f"{col.folder}: no stored grouping; run 'simile cluster {col.folder}' (or group "
            "the photos in the app) first, or pass --no-categories"
        )
    return category_keywords(saved.grouping, root)


def _duplicates(col, root: str) -> dict[str, list[str]]:
    from engine.workflows.duplicates import suggest_keeper
    from engine.workflows.keywords import duplicate_keywords

    groups = col.duplicates()
    keep = []
    for g in groups:
        k = suggest_keeper(g.paths)
        keep.append(None if k is None else str(k.path))
    return duplicate_keywords(groups, keep, root)


def run(args: argparse.Namespace) -> int:
    from engine.workflows.keywords import export_keywords

    root = args.root.strip()
    if not root or "|" in root or "/" in root:
        raise CommandError(f"--root must be one keyword without '|' or '/', got {args.root!r}")
    if args.no_categories and not args.duplicates:
        raise CommandError("nothing to export: --no-categories without --duplicates")
    col = open_collection(args.folder, args.index, create=False, readonly=True)
    try:
        photos = [str(p) for p in col.paths()]
        keywords: dict[str, list[str]] = {}
        parts = []
        if not args.no_categories:
            parts.append(_categories(col, root))
        if args.duplicates:
            parts.append(_duplicates(col, root))
        for part in parts:
            for p, kws in part.items():
                keywords.setdefault(p, []).extend(kws)
        # what is exported is replaced; Simile's other keywords stay
        if len(parts) == 2:
            scope = root
        else:
            scope = f"{root}|Duplicates" if args.no_categories else f"{root}|Category"
        report = export_keywords(
            keywords,
            photos,
            col.folder,
            root=root,
            style=args.sidecar,
            dry_run=args.dry_run,
            scope=scope,
        )
    finally:
        col.close()
    if args.json:
        emit_json(
            {
                "dry_run": args.dry_run,
                "changed": [
                    {
                        "photo": str(c.photo),
                        "sidecar": str(c.sidecar),
                        "added": c.added,
                        "removed": c.removed,
                        "created": c.created,
                    }
                    for c in report.changes
                ],
                "unchanged": report.unchanged,
                "refused": [{"photo": p, "reason": r} for p, r in report.refused],
            }
        )
    else:
        verb = "would change" if args.dry_run else "changed"
        for c in report.changes:
            what = ", ".join([*(f"+{k}" for k in c.added), *(f"-{k}" for k in c.removed)])
            new = " (new sidecar)" if c.created else ""
            print(f"{Path(c.sidecar)}{new}: {what}")
        print(
            f"{verb} {len(report.changes)} sidecar(s); {report.unchanged} already up to date"
            + (f"; {len(report.refused)} left alone" if report.refused else "")
        )
        for p, reason in report.refused:
            print(f"  left alone: {p}: {reason}", file=sys.stderr)
    return 1 if report.refused and not report.changes and not report.unchanged else 0
