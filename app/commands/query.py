"""``simile query FOLDER IMAGE...``: the most similar images of an indexed folder."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from app.commands._collection import check_method, open_collection
from app.commands._common import CommandError, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    from engine.index.methods import METHODS

    p = subparsers.add_parser(
        "query",
        help="find the images most similar to query images",
        description=(
            "Rank the images of an indexed FOLDER by similarity to each IMAGE (inside or "
            "outside the folder). Methods: hybrid (default; same object/place verified by "
            "geometry), vocabulary (vocabulary-guided pyramid match), uniform (uniform-bin "
            "pyramid match), wta (densified WTA hashing), learned (after 'simile learn'). "
            "--box X,Y,W,H searches for what lies in that box of the photo only: an "
            "object that is small in a busy photo."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="indexed photo folder")
    p.add_argument("images", metavar="IMAGE", nargs="+", help="query image(s)")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--method", default="hybrid", help=f"one of {', '.join(METHODS)}")
    p.add_argument("--top", type=int, default=10, metavar="K", help="hits per query")
    p.add_argument(
        "--box",
        metavar="X,Y,W,H",
        help="search for what lies in this box of each IMAGE only (pixels of the photo as "
        "displayed, at its full size: top-left corner and size, integers or decimals)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from engine.features.keypoints import extract_features
    from engine.index.region import clip_box, displayed_size, parse_box
    from engine.io.imageio import ImageLoadError, image_size

    check_method(args.method)
    if args.top < 1:
        raise CommandError(f"--top must be >= 1, got {args.top}")
    box = None
    if args.box is not None:
        try:
            box = parse_box(args.box)
        except ValueError as exc:
            raise CommandError(f"--box: {exc}") from None
    col = open_collection(
        args.folder, args.index, create=False, readonly=True, map_data=True,
        learned=args.method == "learned",
    )  # fmt: skip
    try:
        # read every query first: an unreadable one fails the run before any output
        queries = []
        for img in args.images:
            path = Path(os.path.abspath(img))
            if not path.is_file():
                raise CommandError(f"{img}: no such file")
            rec = col.store.record(path)
            try:
                if box is not None:
                    # the photo's size, and the box on it, checked now (its keypoints are
                    # detected inside the box by the query)
                    try:
                        searched = clip_box(box, displayed_size(path))
                    except ValueError as exc:
                        raise CommandError(f"{img}: {exc}") from None
                    queries.append((path, path, searched))
                    continue
                if rec is not None and rec.status == "ok":
                    queries.append((path, path, None))
                    continue
                if args.method == "learned":  # (it compares dense features of the image)
                    image_size(path)  # readable, or one line now
                    queries.append((path, path, None))
                    continue
                from engine.collection import FEATURE_KWARGS

                queries.append((path, extract_features(path, **FEATURE_KWARGS), None))
            except ImageLoadError as exc:
                raise CommandError(f"cannot read query image {exc}") from None
        results = []
        for path, q, searched in queries:
            try:
                hits = col.query(q, method=args.method, top=args.top, box=searched)
            except LookupError as exc:
                raise CommandError(str(exc)) from None
            except ValueError as exc:
                raise CommandError(f"{path}: {exc}") from None
            except ImageLoadError as exc:
                raise CommandError(f"cannot read query image {exc}") from None
            results.append(
                {
                    "query": str(path),
                    "box": None if searched is None else [_number(v) for v in searched],
                    "hits": [
                        {
                            "path": str(h.path),
                            "score": h.score,
                            "probability": h.probability,
                            "label": h.label,
                            "metadata": meta,
                        }
                        for h, meta in zip(hits, _hit_metadata(col, hits), strict=True)
                    ],
                }
            )
    finally:
        col.close()
    if args.json:
        emit_json({"method": args.method, "results": results})
    else:
        for r in results:
            where = "" if r["box"] is None else "  (box {})".format(",".join(map(str, r["box"])))
            print(r["query"] + where)
            for k, h in enumerate(r["hits"], 1):
                p = h["probability"]
                chance = f"{100 * p:3.0f} %" if p is not None else "   - "
                print(f"  {k:3d}. {h['score']:8.4f}  {chance}  {h['label']:<20}  {h['path']}")
    return 0


def _hit_metadata(col, hits) -> list[dict | None]:
    """Each hit's metadata as JSON (date taken, camera, lens, exposure, size, GPS:
    :meth:`engine.io.metadata.PhotoMetadata.to_json`); None where it was not read yet."""
    ids = [col.store.id_of(h.path) for h in hits]
    found = col.store.metadata([i for i in ids if i is not None])
    return [found[i].to_json() if i in found else None for i in ids]


def _number(v: float) -> int | float:
    """A box coordinate as JSON: an integer when it is one."""
    return int(v) if float(v).is_integer() else round(float(v), 3)
