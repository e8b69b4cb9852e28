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
SVM trained on the prototypes that places photos added later (``--relabel``: it also
reassigns the folder's photos, as in the thesis; that lowered the accuracy on the dev
tasks, see :func:`engine.cluster.categorize_iter`). ``--fisher``: the groups that the cuts
of these affinities and of Fisher vectors of the same features agree on (up to 3,000
photos; :mod:`engine.cluster.fisher`). The search's pairs of photos of the same object or
place join the affinities of the cut (folders of up to 600 photos, ``--scenes`` up to 3,000;
one query per photo, remembered in the index so that only new photos are queried next time;
:mod:`engine.cluster.scenes`; ``--no-scenes`` leaves them out).

``--features index`` groups on the retrieval index's sparse keypoints instead
(``--method``, ``--spatial G``: visual words within G x G and coarser cells).

The grouping runs in the engine (:func:`engine.cluster.group_collection_iter`) and is stored
in the index as one version (the state :data:`engine.index.keys.GROUPING_STATE`,
:func:`engine.cluster.save_grouping`: groups, prototypes, outliers, flow, feature masks and
the classifier trained on the prototypes, committed together), so ``simile classify`` can
assign new photos to the groups and the app can show them. This module parses the
arguments and prints the groups.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.commands._collection import open_collection
from app.commands._common import CommandError, Progress, drive, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cluster",
        help="group the photos of a folder into categories",
        description=(
            "Group the indexed images of FOLDER by normalized cuts on their pyramid-match "
            "affinities; every image lands in exactly one group. Groups list prototypes "
            "(members with the highest feature-mask-weighted flow) first; poorly fitting "
            "members are outliers. "
            "The folder is indexed first (as 'simile index') unless --no-update. Groups you "
            "edited in the app (names, moves, splits, merges) are kept: photos added since "
            "are placed into them and removed ones leave; --regroup (or --k, --must, "
            "--cannot, --fisher, --[no-]scenes, --relabel, --landmarks) groups from scratch, "
            "and that grouping replaces the edited one (names carried over; the app's Undo "
            "brings it back)."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="photo folder")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--k", default=None, metavar="K|auto", help="number of groups (default: auto)")
    p.add_argument(
        "--regroup",
        action="store_true",
        help="group from scratch even when the folder holds groups you edited in the app "
        "(by default those are kept: new photos are placed into them); the new grouping "
        "replaces them, their names carried over, and the app's Undo brings them back",
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
    p.add_argument("--k-max", type=int, default=None, metavar="K",
                   help="largest k of --k auto (default 30, engine.cluster.AUTO_K_MAX; "
                        "the eigengap compares up to it, or up to 12 on the pyramid match "
                        "alone; finer k must be stable on subsamples)")  # fmt: skip
    p.add_argument("--prototypes", type=float, default=25.0, metavar="PCT",
                   help="top percent of each group kept as prototypes (default 25)")  # fmt: skip
    p.add_argument("--partners", type=int, default=8, metavar="N",
                   help="refinement: group members matched per image (default 8)")  # fmt: skip
    p.add_argument("--no-refine", action="store_true",
                   help="skip the feature-mask refinement (kernel-flow prototypes)")  # fmt: skip
    p.add_argument("--fisher", action="store_true",
                   help="also cut Fisher vectors of the same features and keep the groups "
                        "both cuts agree on (up to 3,000 photos)")  # fmt: skip
    p.add_argument("--scenes", action=argparse.BooleanOptionalAction, default=None,
                   help="join photos the search finds are of the same object or place "
                        "(default up to 600 photos, --scenes up to 3,000; better on folders "
                        "of trips and objects; one query per new photo, remembered in the "
                        "index)")  # fmt: skip
    p.add_argument("--relabel", action=argparse.BooleanOptionalAction, default=False,
                   help="let the SVM on the prototypes reassign the photos (default: keep "
                        "the cut's groups)")  # fmt: skip
    p.add_argument("--landmarks", type=int, default=None, metavar="M",
                   help="approximate the grouping from M landmark photos (Nystrom), as "
                        "folders of over 3,000 photos are by default with 500; for "
                        "measuring that approximation on smaller folders")  # fmt: skip
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
    from engine.cluster import AUTO_K_MAX, contradictions
    from engine.cluster.grouping import group_collection_iter, save_grouping
    from engine.index import keys

    k = parse_k("auto" if args.k is None else args.k)  # (an empty --k is an error)
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
    if args.landmarks is not None and args.landmarks < 2:
        raise CommandError(f"--landmarks must be >= 2, got {args.landmarks}")
    if args.landmarks is not None and args.features != "dense":
        raise CommandError("--landmarks needs --features dense")
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
        explicit = (args.regroup or args.k is not None or args.must or args.cannot
                    or args.fisher or args.scenes is not None or args.relabel
                    or args.landmarks is not None)  # fmt: skip
        kept = None if explicit else _kept_edits(col)
        if kept is not None:  # the person's groups: kept, new photos placed into them
            _print_groups(kept, n, args.json)
            return 0
        row_of = {p: i for i, p in enumerate(paths)}
        must = resolve_pairs(args.must, row_of, col.folder, "--must")
        cannot = resolve_pairs(args.cannot, row_of, col.folder, "--cannot")
        bad = contradictions(must, cannot, n)
        if bad:
            a, b = (paths[i].name for i in bad[0])
            raise CommandError(
                f"--cannot {a} {b} contradicts the --must links, which put {a} and {b} "
                "in one group"
            )
        gen = group_collection_iter(
            col, features=args.features, method=args.method, k=k, must=must, cannot=cannot,
            power=args.power, spatial=args.spatial,
            k_max=AUTO_K_MAX if args.k_max is None else args.k_max,
            prototype_percentile=args.prototypes, partners=args.partners,
            refine=not args.no_refine, relabel=args.relabel, fisher=args.fisher,
            scenes=args.scenes, jobs=args.jobs,
            nystrom="auto" if args.landmarks is None else args.landmarks,
        )  # fmt: skip
        # a refitted vocabulary is committed with the grouping made with it, in one version
        with col.store.hold_states([keys.DENSE_VOCAB_STATE]):
            grouping = drive_stages(gen)
            if [str(p) for p in grouping.paths] != [str(p) for p in col.paths()]:
                raise CommandError("the index changed while grouping; run the command again")
            try:
                save_grouping(col.store, grouping)
            except OSError as exc:  # the grouping itself is still printed
                print(f"simile: warning: could not store the grouping: {exc}", file=sys.stderr)
            else:
                pairs = [[(str(paths[a]), str(paths[b])) for a, b in p] for p in (must, cannot)]
                grouping = _replace_edits(col, grouping, *pairs, k)
    finally:
        col.close()

    _print_groups(grouping, n, args.json)
    return 0


def _replace_edits(col, grouping, must, cannot, k):
    """After a grouping the user asked for (``--regroup``, ``--k``, ...): it replaces the
    grouping the person edited in the app, if there is one, names carried over and the
    edited one kept for the app's Undo (:func:`engine.cluster.replace_edits`). Returns the
    grouping to print."""
    from engine.cluster import EditableGrouping, replace_edits

    paths = [str(p) for p in col.paths()]
    new = EditableGrouping.from_grouping(grouping)
    try:
        new = replace_edits(col.store, paths, new, must, cannot, k)
    except OSError as exc:
        print(f"simile: warning: could not store the grouping: {exc}", file=sys.stderr)
        return grouping
    if new is None:  # (never edited in the app: the new grouping is the folder's, as saved)
        return grouping
    print(
        "simile: this grouping replaces the one the app keeps for this folder (its group "
        "names carried over); Undo (Ctrl+Z) in the app's Categories brings it back",
        file=sys.stderr,
    )
    return new


def _kept_edits(col):
    """The grouping the person edited in the app (:func:`engine.cluster.load_edits`),
    fitted to the folder: photos removed since leave their groups, photos added since are
    placed into them (:func:`engine.cluster.place_photos_iter`) and the result is saved;
    None when the folder has no edited grouping."""
    from engine.cluster import load_edits, place_photos_iter, save_edits

    try:
        saved = load_edits(col.store, [str(p) for p in col.paths()])
    except (ValueError, TypeError):
        return None  # (unreadable edits: grouped from scratch)
    if saved is None or saved.source != "edits" or saved.grouping is None:
        return None
    g = saved.grouping
    placed = dict(saved.placed)  # (the app marks these "new" until the person moves them)
    if saved.new_paths:
        placement = drive_stages(place_photos_iter(col, g))
        g = placement.grouping
        placed.update({p: c for p, _g, c in placement.placed})
    if saved.new_paths or len(g.paths) != len(col.paths()):
        try:
            save_edits(col.store, g, saved.must, saved.cannot, saved.k, placed)
        except OSError as exc:
            print(f"simile: warning: could not store the grouping: {exc}", file=sys.stderr)
    return g


def _print_groups(grouping, n: int, as_json: bool) -> None:
    """The groups (members by decreasing flow, prototypes and outliers) as one JSON line or
    as text."""
    paths = grouping.paths
    kk = grouping.k
    reason = grouping.k_reason
    protos, outliers = grouping.prototypes, grouping.outliers
    clusters = []
    for g in range(kk):
        idx = grouping.members(g)
        clusters.append({
            "id": g,
            "name": grouping.name(g) if hasattr(grouping, "name") else f"Group {g + 1}",
            "members": [str(paths[i]) for i in idx],
            "prototypes": [str(paths[i]) for i in idx if protos[i]],
            "outliers": [str(paths[i]) for i in idx if outliers[i]],
        })  # fmt: skip
    masks = getattr(grouping, "masks", None)  # (None: not refined, or the person's groups)
    refined = {"refined": masks is not None}
    if masks is not None:
        refined["n_matches"] = int(grouping.n_matches)
    if as_json:
        emit_json({"k": kk, "k_reason": reason, **refined, "clusters": clusters})
    else:
        how = (
            f"refined with feature masks from {grouping.n_matches} matchings"
            if masks is not None
            else "not refined"
        )
        print(f"{n} images in {kk} groups ({reason}; {how})")
        for c in clusters:  # (the name the app shows: the person's, else "Group <id + 1>")
            print(f"{c['name']}: {len(c['members'])} images, "
                  f"{len(c['outliers'])} outliers")  # fmt: skip
            for m in c["members"]:
                tag = "*" if m in c["prototypes"] else ("!" if m in c["outliers"] else " ")
                print(f"  {tag} {m}")
        print("(* prototype, ! outlier)", file=sys.stdout)


#: Progress labels of the stages of :func:`engine.cluster.group_collection_iter`.
STAGES = {
    "features": "dense features", "vocabulary": "vocabulary", "bins": "visual words",
    "affinity": "affinities", "scenes": "same scenes", "spectrum": "grouping",
    "discretize": "grouping", "rank": "grouping", "match": "refining", "masks": "refining",
    "classify": "classifying",
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
