"""``simile match A B``: pyramid-match similarity and correspondences of two images."""

from __future__ import annotations

import argparse

from app.commands._common import CommandError, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "match",
        help="similarity and feature correspondences of two images",
        description=(
            "Extract SIFT features from two images, compare them with the pyramid match "
            "(normalised similarity in [0, 1], 1 = same features) and list the explicit "
            "approximate correspondences, finest pyramid level first."
        ),
    )
    p.add_argument("a", metavar="A", help="first image")
    p.add_argument("b", metavar="B", help="second image")
    p.add_argument(
        "--method",
        choices=("uniform", "vocabulary"),
        default="uniform",
        help="pyramid bins: uniform grids on 8-D PCA-SIFT, or a vocabulary tree "
        "(default: uniform)",
    )
    p.add_argument(
        "--max-features", type=int, default=500, metavar="N", help="SIFT features per image"
    )
    p.add_argument(
        "--limit", type=int, default=20, metavar="N", help="matches printed (text output)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='last stdout line: {"score": ..., "matches": [{"a", "b", "level", "weight"}]}',
    )
    return p


def _features(path: str, max_features: int):
    from engine.features.keypoints import extract_features
    from engine.io.imageio import ImageLoadError

    try:
        return extract_features(path, "sift", max_features=max_features)
    except ImageLoadError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:  # pragma: no cover - the loader wraps these already
        raise CommandError(f"{path}: {exc.strerror or exc}") from None


def make_matcher(method: str, n_points: int):
    """A PyramidMatch suited to fitting on just the two images' features."""
    from engine.kernels.pyramid import PyramidMatch

    if method == "vocabulary":
        # few points: a shallower tree so leaves still hold several features
        # global weights: idf fitted on the two images alone would zero their shared bins
        return PyramidMatch(
            bins="vocabulary",
            weights="global",
            normalize="self",
            branching=8,
            depth=3 if n_points > 200 else 2,
        )
    # the thesis' settings: idf over two images says nothing (and "auto" would not use it)
    return PyramidMatch(bins="uniform", weights="global", normalize="self", n_sides=2, n_shifts=2)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    if args.max_features < 1:
        raise CommandError(f"--max-features must be >= 1, got {args.max_features}")
    fa = _features(args.a, args.max_features)
    fb = _features(args.b, args.max_features)
    n = len(fa) + len(fb)
    if len(fa) == 0 or len(fb) == 0:
        result = None
    else:
        pm = make_matcher(args.method, n).fit([fa.descriptors, fb.descriptors])
        result = pm.match(fa.descriptors, fb.descriptors, fa.xy, fb.xy)
    score = 0.0 if result is None else float(result.score)
    matches = []
    if result is not None:
        for (xa, ya), (xb, yb), lev, w in zip(
            result.xy_a.tolist(), result.xy_b.tolist(), result.level.tolist(),
            result.weight.tolist(), strict=True,
        ):  # fmt: skip
            matches.append(
                {"a": [round(xa, 2), round(ya, 2)], "b": [round(xb, 2), round(yb, 2)],
                 "level": int(lev), "weight": float(w)}
            )  # fmt: skip
    if args.json:
        emit_json({"score": score, "matches": matches})
        return 0
    print(f"A: {args.a} ({len(fa)} features)")
    print(f"B: {args.b} ({len(fb)} features)")
    print(f"similarity ({args.method} pyramid match): {score:.4f}")
    if result is None:
        print("no correspondences: an image has no features")
        return 0
    levels = np.bincount(result.level) if len(result) else np.zeros(0, int)
    per_level = ", ".join(f"level {i}: {c}" for i, c in enumerate(levels.tolist()) if c)
    print(f"{len(result)} correspondences ({per_level})")
    for m in matches[: max(args.limit, 0)]:
        print(
            f"  ({m['a'][0]:7.1f}, {m['a'][1]:7.1f}) -> ({m['b'][0]:7.1f}, {m['b'][1]:7.1f})"
            f"  level {m['level']}  weight {m['weight']:.4g}"
        )
    if len(matches) > args.limit:
        print(f"  ... {len(matches) - args.limit} more (use --json for all)")
    return 0
