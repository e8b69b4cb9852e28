"""``simile duplicates FOLDER``: groups of near-duplicate images, and the copy to keep.

The groups come from :meth:`engine.collection.Collection.duplicates`; the copy suggested
to keep from :func:`engine.workflows.duplicates.suggest_keeper` (the app's choice too).
This module parses the arguments and prints.
"""

from __future__ import annotations

import argparse

from app.commands._collection import open_collection
from app.commands._common import CommandError, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "duplicates",
        help="find near-duplicate images",
        description=(
            "Group near-duplicate images of an indexed FOLDER: identical files, and images "
            "where at least a fraction THRESHOLD of the features are geometrically verified "
            "correspondences (resized, recompressed or slightly edited copies)."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="indexed photo folder")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.3,
        metavar="T",
        help="fraction of features verified as the same points, in (0, 1] (0.3)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    if not 0 < args.threshold <= 1:
        raise CommandError(f"--threshold must be in (0, 1], got {args.threshold}")
    from engine.workflows.duplicates import suggest_keeper

    col = open_collection(args.folder, args.index, create=False, readonly=True)
    try:
        try:
            groups = col.duplicates(args.threshold)
        except LookupError as exc:
            raise CommandError(str(exc)) from None
    finally:
        col.close()
    out = []
    for g in groups:
        keeper = suggest_keeper(g.paths)
        out.append({
            "paths": [str(p) for p in g.paths],
            "scores": [float(s) for s in g.scores],
            "keep": None if keeper is None else keeper.path,
            "keep_reason": None if keeper is None else keeper.reason,
        })  # fmt: skip
    if args.json:
        emit_json({"threshold": args.threshold, "groups": out})
    else:
        if not out:
            print("no near-duplicates found")
        for k, g in enumerate(out, 1):
            print(f"group {k} ({len(g['paths'])} images)")
            for p, s in zip(g["paths"], g["scores"], strict=True):
                print(f"  {'*' if p == g['keep'] else ' '} {s:6.3f}  {p}")
            if g["keep"] is not None:
                print(f"    keep {g['keep']}: {g['keep_reason']}")
        if out:
            print("(* the copy to keep)")
    return 0
