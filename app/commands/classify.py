"""``simile classify FOLDER IMAGE...``: assign new photos to the groups of ``simile cluster``.

Uses the SVM stored by ``simile cluster`` (trained on the groups' prototypes over the
pyramid-match kernel); the kernel row of a new image against the training images comes from
the collection's ``vocabulary`` (or ``uniform``) scores.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from app.commands._collection import open_collection
from app.commands._common import CommandError, emit_json
from app.commands.cluster import PREFIX

_SVM_KEYS = ("C", "power", "empirical", "class_weight", "kernel", "labels", "ids", "names")


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


def load_classifier(col):
    """The stored :class:`~engine.classify.CategoryClassifier`, the clustered paths and the
    kernel method; :class:`CommandError` when ``simile cluster`` has not been run."""
    from engine.classify import CategoryClassifier

    try:
        state = {k: col.load_array(PREFIX + "svm." + k) for k in _SVM_KEYS}
        paths = [Path(p) for p in col.load_array(PREFIX + "paths").tolist()]
        method = str(col.load_array(PREFIX + "method"))
    except KeyError:
        raise CommandError(
            f"{col.folder}: no stored grouping with at least two groups; "
            f"run 'simile cluster {col.folder}' first"
        ) from None
    state = {k: (v.item() if v.ndim == 0 else v) for k, v in state.items()}
    return CategoryClassifier.from_state(state), paths, method


def run(args: argparse.Namespace) -> int:
    from engine.imageio import ImageLoadError

    col = open_collection(args.folder, args.index, create=False, readonly=True)
    try:
        clf, clustered, method = load_classifier(col)
        current = {Path(p): i for i, p in enumerate(col.paths())}
        train_paths = [clustered[i] for i in clf.train_ids_.tolist()]
        missing = [p for p in train_paths if p not in current]
        if missing:
            raise CommandError(
                f"{missing[0]} (a prototype of the stored grouping) is no longer indexed; "
                f"run 'simile cluster {args.folder}' again"
            )
        col_of = {p: j for j, p in enumerate(train_paths)}
        n = len(current)
        results = []
        for img in args.images:
            path = Path(os.path.abspath(img))
            if not path.is_file():
                raise CommandError(f"{img}: no such file")
            try:
                hits = col.query(path, method=method, top=n)
            except ImageLoadError as exc:
                raise CommandError(str(exc)) from None
            row = np.zeros(len(train_paths))
            for h in hits:
                j = col_of.get(Path(h.path))
                if j is not None:
                    row[j] = h.score
            pred = clf.predict(row[None, :])
            results.append({
                "image": str(path),
                "cluster": int(pred.labels[0]),
                "confidence": round(float(pred.confidence[0]), 4),
            })  # fmt: skip
    finally:
        col.close()
    if args.json:
        emit_json({"results": results})
    else:
        for r in results:
            print(f"{r['image']}\tgroup {r['cluster']}\tconfidence {r['confidence']:.2f}")
    return 0
