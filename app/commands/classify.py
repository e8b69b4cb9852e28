"""``simile classify FOLDER IMAGE...``: assign new photos to the groups of ``simile cluster``.

Uses the grouping and the SVM stored by ``simile cluster`` (trained on the groups'
prototypes over the pyramid-match kernel; one version of both, read by
:func:`engine.cluster.load_grouping`). The kernel
row of a new image against the training images is computed the way the grouping was
(:func:`engine.cluster.grouping_kernel_rows`): on the dense categorisation features and
vocabulary (the default ``--features dense``), or from the collection's ``vocabulary`` /
``uniform`` search scores (``--features index``). This module parses the arguments and
prints the predictions.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from app.commands._collection import open_collection
from app.commands._common import CommandError, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "classify",
        help="assign new photos to the groups found by 'simile cluster'",
        description=(
            "Predict, for every IMAGE (inside or outside FOLDER), the group of the last "
            "'simile cluster FOLDER' run, with a confidence in [0, 1]."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="clustered photo folder")
    p.add_argument("images", metavar="IMAGE", nargs="+", help="image(s) to classify")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def stored_grouping(col):
    """The stored grouping (:class:`engine.cluster.Grouping`) with its classifier;
    :class:`CommandError` when ``simile cluster`` has not been run (or found one group)."""
    from engine.cluster.grouping import load_grouping

    try:
        grouping = load_grouping(col.store)
    except KeyError:
        grouping = None
    if grouping is None or grouping.classifier is None:
        raise CommandError(
            f"{col.folder}: no stored grouping with at least two groups; "
            f"run 'simile cluster {col.folder}' first"
        )
    return grouping


def run(args: argparse.Namespace) -> int:
    from engine.cluster.grouping import grouping_kernel_rows
    from engine.io.imageio import ImageLoadError

    col = open_collection(args.folder, args.index, create=False, readonly=True)
    try:
        grouping = stored_grouping(col)
        current = {Path(p): i for i, p in enumerate(col.paths())}
        train_paths = grouping.training_paths()
        missing = [p for p in train_paths if p not in current]
        if missing:
            raise CommandError(
                f"{missing[0]} (a prototype of the stored grouping) is no longer indexed; "
                f"run 'simile cluster {args.folder}' again"
            )
        images = []
        for img in args.images:
            path = Path(os.path.abspath(img))
            if not path.is_file():
                raise CommandError(f"{img}: no such file")
            images.append(path)
        try:
            rows = grouping_kernel_rows(col, grouping, images)
        except ImageLoadError as exc:
            raise CommandError(str(exc)) from None
        except KeyError:
            if grouping.method != "dense":
                raise
            raise CommandError(
                f"{col.folder}: the stored grouping's features are missing or outdated; "
                f"run 'simile cluster {col.folder}' again"
            ) from None
        pred = grouping.classifier.predict(rows)
        results = [
            {"image": str(path), "cluster": int(lab), "confidence": round(float(conf), 4)}
            for path, lab, conf in zip(images, pred.labels, pred.confidence, strict=True)
        ]
    finally:
        col.close()
    if args.json:
        emit_json({"results": results})
    else:
        for r in results:
            print(f"{r['image']}\tgroup {r['cluster']}\tconfidence {r['confidence']:.2f}")
    return 0
