"""Holidays dev benchmark of the "why they match" explanation (issue #21, point 4).

A true same-place pair seen from another viewpoint should show its consistent matches,
a wrong hit few. This measures what the "why" view draws by default -- the
correspondences the ``hybrid`` ranking's own same-object check accepted
(:meth:`engine.collection.Collection.explain`, which calls
:func:`engine.index.verify.ranking_check`) -- on true and wrong pairs of real photos,
next to what the older view drew (the pyramid match's correspondences and their
homography inliers, :meth:`~engine.collection.Collection.match`).

Run::

    nice python tests/benchmarks/bench_why.py [--data ../shared/data/holidays]
        [--work /tmp/simile_why] [--photos 60] [--pairs 10] [--top 10] [--reuse]

1. A subset of Holidays: whole scenes (groups of photos of one place, group = image
   number // 100) of at least 3 photos, in name order, until ``--photos`` photos;
   symlinked into ``WORK/photos`` (nothing is copied; the data stay in ``../shared``).
2. ``simile index WORK/photos --index WORK/index`` (skipped with ``--reuse`` when the
   index exists), then every scene's query photo (the number that is a multiple of 100)
   is searched with ``simile query --json --top TOP`` (``hybrid``, the default), as a
   person would.
3. True pairs: each query with the best-ranked other photo of its scene (the first
   ``--pairs`` queries whose scene photo is in the top). Wrong pairs: each query with its
   best-ranked photo of another scene (the first ``--pairs`` queries). For each pair:
   its rank and score in the list, and ``Collection.explain``'s accepted
   correspondences (``n_inliers``; verified when ``>= VERIFY_MIN_INLIERS``), putative
   ratio-test pairs, and the older view's pyramid-match correspondences and inliers.

Re-runnable as the ranking's check changes: nothing here copies the check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def pick_scenes(data: Path, n_photos: int) -> list[Path]:
    """Whole scenes of at least 3 photos, in name order, until ``n_photos`` photos."""
    groups: dict[int, list[Path]] = {}
    for p in sorted(data.glob("*.jpg")):
        groups.setdefault(int(p.stem) // 100, []).append(p)
    chosen: list[Path] = []
    for _g, members in sorted(groups.items()):
        if len(members) < 3 or int(members[0].stem) % 100 != 0:
            continue
        chosen += members
        if len(chosen) >= n_photos:
            break
    return chosen


def scene(path: str | Path) -> int:
    return int(Path(path).stem) // 100


def run(cmd: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if out.returncode:
        raise SystemExit(f"simile {' '.join(cmd)} failed:\n{out.stderr}")
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "holidays")
    ap.add_argument("--work", type=Path, default=Path("/tmp/simile_why"))
    ap.add_argument("--photos", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--reuse", action="store_true", help="keep an existing index")
    ap.add_argument("--json", type=Path, help="also write the pairs here")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"no data at {args.data}: skipped")
        return 0

    photos = args.work / "photos"
    index = args.work / "index"
    photos.mkdir(parents=True, exist_ok=True)
    chosen = pick_scenes(args.data, args.photos)
    for old in photos.iterdir():
        if old.is_symlink() and old.resolve() not in {p.resolve() for p in chosen}:
            old.unlink()
    for p in chosen:
        link = photos / p.name
        if not link.exists():
            link.symlink_to(p.resolve())
    n_scenes = len({scene(p) for p in chosen})
    print(f"{len(chosen)} photos of {n_scenes} Holidays scenes, linked in {photos}")

    if not (args.reuse and (index / "catalog.sqlite").exists()):
        print(run(["index", str(photos), "--index", str(index)]).strip().splitlines()[0])
    queries = [photos / p.name for p in chosen if int(p.stem) % 100 == 0]
    res = json.loads(
        run(
            [
                "query",
                str(photos),
                *map(str, queries),
                "--index",
                str(index),
                "--top",
                str(args.top),
                "--json",
            ]
        )
        .strip()
        .splitlines()[-1]
    )

    from engine.collection import Collection

    true_pairs, wrong_pairs = [], []
    for r in res["results"]:
        q = r["query"]
        others = [(k, h) for k, h in enumerate(r["hits"], 1) if Path(h["path"]) != Path(q)]
        same = [(k, h) for k, h in others if scene(h["path"]) == scene(q)]
        diff = [(k, h) for k, h in others if scene(h["path"]) != scene(q)]
        if same and len(true_pairs) < args.pairs:
            true_pairs.append((q, *same[0]))
        if diff and len(wrong_pairs) < args.pairs:
            wrong_pairs.append((q, *diff[0]))

    rows = []
    with Collection.open(photos, index_dir=index, readonly=True) as col:
        for kind, pairs in (("true", true_pairs), ("wrong", wrong_pairs)):
            for q, rank, hit in pairs:
                e = col.explain(q, hit["path"])
                pyr = e.pyramid
                rows.append(
                    {
                        "kind": kind,
                        "query": Path(q).name,
                        "hit": Path(hit["path"]).name,
                        "rank": rank,
                        "score": hit["score"],
                        "probability": hit["probability"],
                        "label": hit["label"],
                        "explain_score": e.score,
                        "accepted": e.n_inliers,
                        "accepted_lines": int(e.inliers.sum()),
                        "putative": len(e),
                        "verified": e.verified,
                        "pyramid": len(pyr),
                        "pyramid_inliers": int(pyr.inliers.sum()),
                    }
                )

    head = (
        f"{'pair':5} {'query':>10} {'hit':>10} {'rank':>4} {'score':>7} {'%':>4} "
        f"{'accepted':>8} {'putative':>8} {'verified':>8} {'old lines':>9} {'old inl.':>8}"
    )
    print(head)
    for r in rows:
        prob = r["probability"]
        pct = f"{100 * prob:.0f}" if prob is not None else "-"
        ver = "yes" if r["verified"] else "no"
        print(
            f"{r['kind']:5} {r['query']:>10} {r['hit']:>10} {r['rank']:>4} {r['score']:7.3f} "
            f"{pct:>4} {r['accepted']:8d} {r['putative']:8d} {ver:>8} "
            f"{r['pyramid']:9d} {r['pyramid_inliers']:8d}"
        )
        # the explanation's score is the list's (the same ranking, the same number)
        if r["explain_score"] is None or abs(r["explain_score"] - r["score"]) > 1e-6:
            print(f"  !! explanation score {r['explain_score']} != list score {r['score']}")
    for kind in ("true", "wrong"):
        acc = np.array([r["accepted"] for r in rows if r["kind"] == kind])
        old = np.array([r["pyramid_inliers"] for r in rows if r["kind"] == kind])
        ver = np.array([r["verified"] for r in rows if r["kind"] == kind])
        if acc.size:
            print(
                f"{kind:5} pairs: {acc.size}; accepted correspondences median {np.median(acc):.0f}"
                f" (min {acc.min()}, max {acc.max()}), verified {ver.sum()}/{ver.size}; "
                f"the older view's homography inliers median {np.median(old):.0f}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
