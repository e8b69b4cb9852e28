"""``simile learn``: learn what "similar" means for this collection."""

from __future__ import annotations

import argparse
import sys

from app.commands._common import CommandError, Progress, drive, emit_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "learn",
        help="learn a similarity from subfolders or relevance feedback",
        description=(
            "Learn a similarity for the collection and store it in its index; then use "
            "'simile query --method learned'. Supervision: --from-subfolders (images in "
            "the same subfolder are similar), --feedback FILE (CSV with the header "
            'query,result,relevant, or JSON {"marks": [{"query", "result", '
            '"relevant"}]}; relative paths are relative to FOLDER), or --from-marks '
            "(thumbs up / down given in the app), or --from-keywords (photos sharing a "
            "keyword you gave them, in XMP sidecars, embedded XMP or IPTC, are similar)."
        ),
    )
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument("--index", metavar="DIR", help="index location (default: see README)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-subfolders", action="store_true")
    src.add_argument(
        "--from-keywords",
        action="store_true",
        help="labels from the keywords you gave your photos (XMP sidecars, embedded XMP, IPTC)",
    )
    src.add_argument("--feedback", metavar="FILE")
    src.add_argument("--from-marks", action="store_true")
    p.add_argument("--method", default="oasis", choices=("oasis", "boostssc", "boostpro"))
    p.add_argument("--json", action="store_true", help="JSON progress lines and summary")


def run(args: argparse.Namespace) -> int:
    from app.commands._collection import open_collection
    from engine.workflows.feedback import add_marks, learn, read_feedback_file

    coll = open_collection(args.folder, args.index, create=False)
    with coll:
        if len(coll.paths()) == 0:
            raise CommandError(f"{args.folder}: the index holds no images; run 'simile index'")
        source = (
            "subfolders" if args.from_subfolders else "keywords" if args.from_keywords else "marks"
        )
        if args.feedback:
            try:
                marks = read_feedback_file(args.feedback, coll.folder)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            add_marks(coll, marks)
        progress = Progress(f"learning ({args.method})", json_lines=args.json)
        summary = drive(
            learn(coll, method=args.method, source=source),
            progress,
            lambda _i, prog: (prog.step, prog.total),
        )
    result = {
        "method": summary.method,
        "source": summary.source,
        "images": summary.n_images,
        "constraints": summary.n_constraints,
        "score_name": summary.score_name,
        "score_before": _num(summary.score_before),
        "score_after": _num(summary.score_after),
        "seconds": round(summary.seconds, 3),
        "calibration_error": _num(summary.calibration_error),
    }
    if args.json:
        emit_json(result)
    else:
        print(
            f"learned {summary.method} from {summary.source} on {summary.n_images} images "
            f"({summary.n_constraints} constraints) in {summary.seconds:.1f}s; "
            f"{summary.score_name}: {result['score_before']} -> {result['score_after']}",
            file=sys.stdout,
        )
        if result["calibration_error"] is not None:
            print(
                "its hits carry the probability of being of the kind taught (calibration "
                f"error {result['calibration_error']:.3f} on photos it held aside)"
            )
        print(f"use it with: simile query {args.folder} IMAGE --method learned")
    return 0


def _num(x: float) -> float | None:
    return None if x != x else round(float(x), 4)
