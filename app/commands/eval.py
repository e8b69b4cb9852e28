"""``simile eval FOLDER --protocol P``: retrieval quality of a method on a labelled folder."""

from __future__ import annotations

import argparse
import time

import numpy as np

from app.commands._collection import check_method, open_collection
from app.commands._common import CommandError, Progress, emit_json

PROTOCOLS = ("ukbench", "holidays", "folders")


def add_parser(subparsers) -> argparse.ArgumentParser:
    from engine.collection import METHODS

    p = subparsers.add_parser(
        "eval",
        help="measure retrieval quality on a labelled folder",
        description=(
            "Query every indexed image of FOLDER against the whole collection and report "
            "the UKBench N-S score (mean number of same-group images in the top 4, the "
            "query included), mean average precision and precision@k (query excluded), "
            "the normalised average rank of the thesis (Eq. 6.4; 0 best, 0.5 random) and "
            "leave-one-out k-NN accuracy. Labels: ukbench = image number // 4, holidays = "
            "image number // 100, folders = the sub-folder of each image."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="indexed, labelled photo folder")
    p.add_argument("--protocol", required=True, choices=PROTOCOLS)
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--method", default="hybrid", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--k", type=int, default=10, help="k of precision@k and k-NN (10 / 1)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def labels_for(paths, folder, protocol: str) -> np.ndarray:
    from engine.metrics import group_labels

    if protocol == "ukbench":
        return group_labels([p.name for p in paths], 4)
    if protocol == "holidays":
        return group_labels([p.name for p in paths], 100)
    names = [str(p.parent.relative_to(folder)) for p in paths]
    _, inv = np.unique(names, return_inverse=True)
    return inv.astype(np.int64)


def run(args: argparse.Namespace) -> int:
    from engine import metrics

    check_method(args.method)
    if args.k < 1:
        raise CommandError(f"--k must be >= 1, got {args.k}")
    col = open_collection(args.folder, args.index, create=False, readonly=True)
    try:
        paths = col.paths()
        n = len(paths)
        if n < 2:
            raise CommandError(f"the index of {col.folder} holds {n} image(s); need at least 2")
        try:
            labels = labels_for(paths, col.folder, args.protocol)
        except ValueError as exc:
            raise CommandError(f"protocol {args.protocol}: {exc}") from None
        row = {p: i for i, p in enumerate(paths)}
        S = np.full((n, n), -1e9)
        progress = Progress("evaluating", json_lines=False)
        t0 = time.perf_counter()
        try:
            for i, p in enumerate(paths):
                hits = col.query(p, method=args.method, top=n)
                for h in hits:
                    S[i, row[h.path]] = h.score
                progress.update(i + 1, n, str(p))
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        finally:
            progress.close()
        per_query = (time.perf_counter() - t0) / n
    finally:
        col.close()
    k = min(args.k, n - 1)
    out = {
        "protocol": args.protocol,
        "method": args.method,
        "n_images": n,
        "n_groups": int(np.unique(labels).size),
        "ns_score": metrics.ns_score(S, labels, 4),
        "map": metrics.mean_average_precision(S, labels),
        f"precision_at_{k}": metrics.precision_at_k(S, labels, k),
        "precision_at_4": metrics.precision_at_k(S, labels, 4, exclude_self=False),
        "normalized_rank": metrics.normalized_average_rank(S, labels),
        "knn_accuracy_1": metrics.knn_accuracy(S, labels, 1),
        f"knn_accuracy_{k}": metrics.knn_accuracy(S, labels, k),
        "seconds_per_query": per_query,
    }
    if args.json:
        emit_json(out)
    else:
        for key, v in out.items():
            print(f"{key:20s} {v:.4f}" if isinstance(v, float) else f"{key:20s} {v}")
    return 0
