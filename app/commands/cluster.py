"""``simile cluster FOLDER``: group an indexed photo folder into categories (thesis Ch. 9).

Default pipeline (``--features dense``, :func:`engine.cluster.categorize_iter`, shared with
the app's Categories view): dense multi-scale SIFT per image, computed the first time the
folder is grouped (in parallel, with progress) and cached in the index
(:class:`engine.cluster.CategoryChannel`; only new or changed photos are computed later), a
vocabulary-guided pyramid match over them, normalized cuts (k given, or ``auto``: the
eigengap of the nearest-neighbour graph), feature masks from within-group correspondences
(every image matched with up to ``--partners`` members of its group, each feature's mask
value the median of its match indicators; thesis 9.3), members ranked by mask-weighted flow
(the top ``--prototypes`` percent are prototypes, low-flow members outliers; 9.4), and an
SVM on the prototypes that assigns every image (``--no-relabel`` keeps the cut's groups).

``--features index`` groups on the retrieval index's sparse keypoints instead
(``--method``, ``--spatial G``: visual words within G x G and coarser cells).

The grouping, prototypes, masks (``cluster.masks`` float32 concatenated, image i's mask =
``masks[mask_offsets[i]:mask_offsets[i + 1]]``, aligned with the features named by
``cluster.features``: ``"dense"`` = :func:`engine.cluster.category_features_of`, ``"index"``
= ``Collection.features``; rows = ``cluster.paths``), ``cluster.flow`` and a classifier
trained on the prototypes are stored in the index (``cluster.*`` arrays) so
``simile classify`` can assign new photos to the groups and the app can show the masks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from app.commands._collection import open_collection
from app.commands._common import CommandError, Progress, drive, emit_json

#: Prefix of the arrays this command stores in the index.
PREFIX = "cluster."


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cluster",
        help="group the photos of a folder into categories",
        description=(
            "Group the indexed images of FOLDER by normalized cuts on their pyramid-match "
            "affinities; every image lands in exactly one group. Groups list prototypes "
            "(members with the highest feature-mask-weighted flow) first; poorly fitting "
            "members are outliers. "
            "The folder is indexed first (as 'simile index') unless --no-update."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="photo folder")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument(
        "--k", default="auto", metavar="K|auto", help="number of groups (default: auto)"
    )
    p.add_argument("--must", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="images A and B belong together (repeatable)")  # fmt: skip
    p.add_argument("--cannot", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="images A and B belong to different groups (repeatable)")  # fmt: skip
    p.add_argument("--features", default="dense", choices=("dense", "index"),
                   help="dense: dense SIFT computed for grouping and cached in the index "
                        "(default, best); index: the search index's keypoints")  # fmt: skip
    p.add_argument("--method", default="vocabulary", choices=("vocabulary", "uniform"),
                   help="--features index: pyramid match used (default: vocabulary)")  # fmt: skip
    p.add_argument("--power", type=float, default=None, metavar="P",
                   help="affinity power 0 < P <= 1 against a dominant diagonal")  # fmt: skip
    p.add_argument("--spatial", type=int, default=0, metavar="G",
                   help="add image layout to the affinities: match visual words within "
                        "GxG and coarser grid cells (power of two, e.g. 4; default 0 = off). "
                        "Helps for objects photographed in similar poses")  # fmt: skip
    p.add_argument("--k-max", type=int, default=12, help="largest k tried by --k auto")
    p.add_argument("--prototypes", type=float, default=25.0, metavar="PCT",
                   help="top percent of each group kept as prototypes (default 25)")  # fmt: skip
    p.add_argument("--partners", type=int, default=8, metavar="N",
                   help="refinement: group members matched per image (default 8)")  # fmt: skip
    p.add_argument("--no-refine", action="store_true",
                   help="skip the feature-mask refinement (kernel-flow prototypes)")  # fmt: skip
    p.add_argument("--no-relabel", action="store_true",
                   help="keep the normalized cut's groups (no SVM on the prototypes)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="processes for indexing and dense features (default: cores)")  # fmt: skip
    p.add_argument("--no-update", action="store_true", help="do not re-scan the folder")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def parse_k(text: str) -> int | str:
    if text == "auto":
        return "auto"
    try:
        k = int(text)
    except ValueError:
        raise CommandError(f"--k must be a positive integer or 'auto', got {text!r}") from None
    if k < 1:
        raise CommandError(f"--k must be >= 1, got {k}")
    return k


def resolve_pairs(
    pairs: list[list[str]], row_of: dict[Path, int], folder: Path, option: str
) -> list[tuple[int, int]]:
    """Map ``[[A, B], ...]`` image names (absolute, relative to the cwd or to FOLDER) to
    row indices; unknown names are a :class:`CommandError`."""
    out = []
    for a, b in pairs:
        ids = []
        for name in (a, b):
            cands = [Path(os.path.abspath(name)), Path(os.path.abspath(folder / name))]
            hit = next((row_of[c] for c in cands if c in row_of), None)
            if hit is None:
                raise CommandError(f"{option} {a} {b}: {name} is not an indexed image")
            ids.append(hit)
        if ids[0] == ids[1]:
            raise CommandError(f"{option} {a} {b}: the two images are the same")
        out.append((ids[0], ids[1]))
    return out


def _report_skipped(failed, limit: int = 5) -> None:
    """One stderr line per unreadable file (at most ``limit``): they are left out of the
    grouping, and the user should know which ones and why."""
    failed = list(failed)
    if not failed:
        return
    print(f"skipped {len(failed)} unreadable file(s), not grouped:", file=sys.stderr)
    for path, reason in failed[:limit]:
        print(f"  {path}: {reason}", file=sys.stderr)
    if len(failed) > limit:
        print(f"  ... and {len(failed) - limit} more (see 'simile index')", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    k = parse_k(args.k)
    if args.power is not None and not 0 < args.power <= 1:
        raise CommandError(f"--power must be in (0, 1], got {args.power}")
    if args.spatial and (args.spatial < 2 or args.spatial & (args.spatial - 1)):
        raise CommandError(f"--spatial must be 0 or a power of two >= 2, got {args.spatial}")
    if args.spatial and args.features == "dense":
        raise CommandError("--spatial needs --features index")
    if not 0 < args.prototypes <= 100:
        raise CommandError(f"--prototypes must be in (0, 100], got {args.prototypes}")
    if args.partners < 1:
        raise CommandError(f"--partners must be >= 1, got {args.partners}")
    if args.jobs is not None and args.jobs < 1:
        raise CommandError(f"--jobs must be >= 1, got {args.jobs}")
    col = open_collection(args.folder, args.index, create=not args.no_update)
    try:
        if not args.no_update:
            summary = drive(col.update(jobs=args.jobs), Progress("indexing", json_lines=False))
            _report_skipped(summary.failed)
        paths = [Path(p) for p in col.paths()]
        n = len(paths)
        if n == 0:
            raise CommandError(f"{args.folder}: no indexed images to group")
        if isinstance(k, int) and k > n:
            raise CommandError(f"--k {k} is larger than the number of images ({n})")
        row_of = {p: i for i, p in enumerate(paths)}
        must = resolve_pairs(args.must, row_of, col.folder, "--must")
        cannot = resolve_pairs(args.cannot, row_of, col.folder, "--cannot")
        if args.features == "dense":
            out = _group_dense(col, k, must, cannot, args)
        else:
            out = _group_index(col, paths, k, must, cannot, args)
        labels, protos, outliers, flow, reason, refinement = out[:6]
        kk = int(labels.max()) + 1
        _save(col, paths, labels, protos, outliers, args, refinement, flow, out[6])
    finally:
        col.close()

    clusters = []
    for g in range(kk):
        idx = np.flatnonzero(labels == g)
        idx = idx[np.argsort(-flow[idx], kind="stable")]
        clusters.append({
            "id": g,
            "members": [str(paths[i]) for i in idx],
            "prototypes": [str(paths[i]) for i in idx if protos[i]],
            "outliers": [str(paths[i]) for i in idx if outliers[i]],
        })  # fmt: skip
    refined = {"refined": refinement is not None}
    if refinement is not None:
        refined["n_matches"] = int(refinement.n_matches)
    if args.json:
        emit_json({"k": kk, "k_reason": reason, **refined, "clusters": clusters})
    else:
        how = (
            f"refined with feature masks from {refinement.n_matches} matchings"
            if refinement is not None
            else "not refined"
        )
        print(f"{n} images in {kk} groups ({reason}; {how})")
        for c in clusters:
            print(f"group {c['id']}: {len(c['members'])} images, "
                  f"{len(c['outliers'])} outliers")  # fmt: skip
            for m in c["members"]:
                tag = "*" if m in c["prototypes"] else ("!" if m in c["outliers"] else " ")
                print(f"  {tag} {m}")
        print("(* prototype, ! outlier)", file=sys.stdout)
    return 0


#: Progress labels of the stages of :func:`engine.cluster.categorize_iter`.
STAGES = {
    "features": "dense features", "vocabulary": "vocabulary", "bins": "visual words",
    "affinity": "affinities", "spectrum": "grouping", "discretize": "grouping",
    "rank": "grouping", "match": "refining", "masks": "refining", "classify": "classifying",
}  # fmt: skip


def drive_stages(gen):
    """Run a :class:`engine.cluster.ClusterProgress` generator with one progress bar per
    stage; returns its value (a ``ValueError`` becomes a :class:`CommandError`)."""
    label, progress = None, None
    try:
        while True:
            item = next(gen)
            name = STAGES.get(item.stage, item.stage)
            if name != label:
                if progress is not None:
                    progress.close()
                label, progress = name, Progress(name, json_lines=False)
            progress.update(int(item.done), int(item.total))
    except StopIteration as stop:
        return stop.value
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()


def _group_dense(col, k, must, cannot, args):
    """The shared pipeline (:func:`engine.cluster.categorize_iter`)."""
    from engine.cluster.discovery import categorize_iter

    gen = categorize_iter(
        col, k=k, must=must, cannot=cannot, power=args.power, k_max=args.k_max,
        refine=not args.no_refine, relabel=not args.no_relabel, partners=args.partners,
        prototype_percentile=args.prototypes, jobs=args.jobs,
    )  # fmt: skip
    res = drive_stages(gen)
    if [str(p) for p in res.paths] != [str(p) for p in col.paths()]:
        raise CommandError("the index changed while grouping; run the command again")
    return (res.labels, res.prototypes, res.outliers, res.flow, res.k_reason,
            res.refinement, res.classifier)  # fmt: skip


def _group_index(col, paths, k, must, cannot, args):
    """Grouping on the retrieval index's sparse features (``--features index``)."""
    from engine.cluster.discovery import discover_categories_iter

    n = len(paths)
    K = col.kernel_matrix(args.method)
    feats = matcher = None
    A = K  # grouping affinities; the stored classifier keeps K (as `simile classify`)
    if args.spatial and n > 1:
        feats, matcher = _matcher(col, paths, args.method)
        A = _spatial_kernel(feats, matcher, args.spatial)
    if n == 1:
        z = np.zeros(1)
        return (np.zeros(1, np.int64), np.ones(1, bool), np.zeros(1, bool), z,
                "k=1: a single image", None, None)  # fmt: skip
    gen = discover_categories_iter(
        A, k=k, must=must, cannot=cannot, power=args.power,
        k_max=min(args.k_max, n - 1), k_min=min(2, n - 1),
        prototype_percentile=args.prototypes,
    )  # fmt: skip
    result = drive(gen, Progress("grouping", json_lines=False), lambda i, _item: (i, 7))
    labels = result.labels
    protos, outliers, flow = result.prototypes, result.outliers, result.flow
    refinement = None
    if not args.no_refine:
        if matcher is None:
            feats, matcher = _matcher(col, paths, args.method)
        refinement = _refine(feats, matcher, labels, args)
        protos, outliers = refinement.prototypes, refinement.outliers
        flow = refinement.flow
    reason = result.k_reason
    if args.spatial:
        reason += f"; affinities with {args.spatial}x{args.spatial} spatial cells"
    clf = None
    train = np.flatnonzero(protos)
    if np.unique(labels[train]).size >= 2:
        from engine.cluster.classify import CategoryClassifier

        clf = CategoryClassifier(power=args.power).fit(
            K[np.ix_(train, train)], labels[train], ids=train
        )
    return labels, protos, outliers, flow, reason, refinement, clf


def _matcher(col, paths, method):
    """The stored features of ``paths`` and a :class:`engine.cluster.BinnedMatcher` on the
    collection's fitted ``method`` pyramid (every feature binned once)."""
    from engine.cluster.discovery import BinnedMatcher

    feats = [col.features(p) for p in paths]
    return feats, BinnedMatcher(col.pyramid(method), [f.descriptors for f in feats])


def _spatial_kernel(feats, matcher, grid: int) -> np.ndarray:
    """Pyramid match of visual words (the pyramid level above the finest) within
    ``grid x grid`` and coarser image cells, on top of the feature-space levels
    (:func:`engine.cluster.spatial_pyramid_kernel`)."""
    from engine.cluster.discovery import spatial_pyramid_kernel

    xy = []
    for f in feats:
        size = np.maximum(np.asarray(f.image_size, np.float64), 1.0)
        xy.append(np.asarray(f.xy, np.float64).reshape(-1, 2) / size)
    word_level = min(1, matcher.n_levels - 1)
    return spatial_pyramid_kernel(matcher.bins, xy, grid=grid, word_level=word_level)


def _refine(feats, matcher, labels, args):
    """Feature masks, masked flow, prototypes and outliers (thesis 9.3-9.4).

    Correspondences come from the collection's own fitted pyramid (vocabulary-guided or
    uniform, as ``--method``) applied to the stored features, without geometric
    verification (:class:`engine.cluster.BinnedMatcher`); every image is matched against
    at most ``--partners`` members of its group. Masked affinities are normalised by the
    mask masses (``normalize="mask"``) so feature-rich images do not dominate the flow.
    """
    from engine.cluster.discovery import refine_with_masks_iter

    progress = Progress("refining", json_lines=False)
    gen = refine_with_masks_iter(
        feats, labels, matcher, max_partners=args.partners,
        prototype_percentile=args.prototypes, normalize="mask",
    )  # fmt: skip
    return drive(gen, progress)


def _save(col, paths, labels, protos, outliers, args, refinement, flow, clf) -> None:
    """Store the grouping, the feature masks (``cluster.masks`` float32 concatenated,
    ``cluster.mask_offsets`` (n+1,) int64, rows = ``cluster.paths``, features named by
    ``cluster.features``; see :func:`engine.cluster.masks_from_arrays`) and the classifier
    trained on the prototypes (``cluster.svm.*``)."""
    from engine.cluster.discovery import masks_to_arrays

    try:
        if refinement is not None:
            flat, offsets = masks_to_arrays(refinement.masks)
        else:  # no masks: every image's mask is empty (never leave a stale one behind)
            flat, offsets = np.zeros(0, np.float32), np.zeros(len(paths) + 1, np.int64)
        col.save_array(PREFIX + "masks", flat)
        col.save_array(PREFIX + "mask_offsets", offsets)
        col.save_array(PREFIX + "flow", np.asarray(flow, np.float64))
        col.save_array(PREFIX + "paths", np.array([str(p) for p in paths], dtype=str))
        col.save_array(PREFIX + "labels", labels.astype(np.int64))
        col.save_array(PREFIX + "prototypes", protos.astype(bool))
        col.save_array(PREFIX + "outliers", outliers.astype(bool))
        method = "dense" if args.features == "dense" else args.method
        col.save_array(PREFIX + "method", np.array(method))
        col.save_array(PREFIX + "features", np.array(args.features))
        for key in _svm_keys(col):  # never leave a stale classifier behind
            col.store.delete_array(key)
        if clf is not None:
            for key, val in clf.to_state().items():
                col.save_array(PREFIX + "svm." + key, np.asarray(val))
    except (OSError, PermissionError) as exc:  # the grouping itself was still printed
        print(f"simile: warning: could not store the grouping: {exc}", file=sys.stderr)


def _svm_keys(col) -> list[str]:
    from app.commands.classify import SVM_KEYS

    return [PREFIX + "svm." + k for k in SVM_KEYS if col.store.has_array(PREFIX + "svm." + k)]
