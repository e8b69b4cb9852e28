"""``simile classify FOLDER IMAGE...``: assign new photos to the groups of ``simile cluster``.

Uses the SVM stored by ``simile cluster`` (trained on the groups' prototypes over the
pyramid-match kernel). The kernel row of a new image against the training images is
computed the way the grouping was: on the dense categorisation features and vocabulary
(:func:`engine.cluster.category_kernel_rows`, the default ``--features dense``), or from the
collection's ``vocabulary`` / ``uniform`` search scores (``--features index``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from app.commands._collection import open_collection
from app.commands._common import CommandError, emit_json
from app.commands.cluster import PREFIX

SVM_KEYS = ("C", "power", "empirical", "class_weight", "kernel", "labels", "ids", "names")


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
    from engine.cluster.classify import CategoryClassifier

    try:
        state = {k: col.load_array(PREFIX + "svm." + k) for k in SVM_KEYS}
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
    from engine.io.imageio import ImageLoadError

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
        images = []
        for img in args.images:
            path = Path(os.path.abspath(img))
            if not path.is_file():
                raise CommandError(f"{img}: no such file")
            images.append(path)
        try:
            if method == "dense":
                rows = _dense_rows(col, images, train_paths)
            else:
                rows = _index_rows(col, images, train_paths, method)
        except ImageLoadError as exc:
            raise CommandError(str(exc)) from None
        pred = clf.predict(rows)
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


def _dense_rows(col, images, train_paths) -> np.ndarray:
    """Kernel rows (q, t) on the dense categorisation channel of ``simile cluster``."""
    from engine.cluster.discovery import category_kernel_rows

    try:
        return category_kernel_rows(col, images, train_paths)
    except KeyError:
        raise CommandError(
            f"{col.folder}: the stored grouping's features are missing or outdated; "
            f"run 'simile cluster {col.folder}' again"
        ) from None


def _index_rows(col, images, train_paths, method) -> np.ndarray:
    """Kernel rows (q, t) from the search index's ``method`` scores."""
    col_of = {p: j for j, p in enumerate(train_paths)}
    n = len(col.paths())
    rows = np.zeros((len(images), len(train_paths)))
    for i, path in enumerate(images):
        for h in col.query(path, method=method, top=n):
            j = col_of.get(Path(h.path))
            if j is not None:
                rows[i, j] = h.score
    return rows
