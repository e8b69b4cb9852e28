"""How long placing new photos into a person's grouping takes (categories issue, point 4),
and how often they land with their own class, on real photos (Caltech-101 dev).

A folder of ``--n`` photos of ``--classes`` classes is indexed and grouped with k given
(the grouping the person keeps); then ``--new`` more photos of the same classes are
copied in, indexed, and placed (:func:`engine.cluster.place_photos_iter`: dense features
of the new photos, an SVM on the groups' prototypes). Reports the seconds of each step
and the share of new photos placed in the group where most photos of their class are,
and how many went to "To review". Nothing is written outside ``--work`` (default a new
temporary folder); the data is linked, never copied into the repository::

    python tests/benchmarks/bench_placement.py --n 900 --new 100 --classes 25

Measured on 2 cores with the command above (2026-11-26): 900 photos indexed in 12.1 s and
grouped (k = 25, dense channel computed) in 10.2 s; the 100 new photos indexed in 2.0 s
and placed in 1.2 s. 41 of 100 landed in the group where most of their class is, 16 went
to "To review"; the grouping itself puts 0.441 of the first photos in their class's group,
so placement is as good as the grouping it extends.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.core.progress import run_to_end

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "caltech101"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=900)
    p.add_argument("--new", type=int, default=100)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path)
    args = p.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return 0
    from engine.cluster import EditableGrouping, group_collection_iter, place_photos_iter
    from engine.collection import Collection

    rng = np.random.default_rng(args.seed)
    per = -(-(args.n + args.new) // args.classes)
    pool = sorted(
        d for d in DATA.iterdir()
        if d.is_dir() and d.name not in ("BACKGROUND_Google", "Faces")
        and sum(1 for _ in d.iterdir()) >= per
    )  # fmt: skip
    if len(pool) < args.classes:
        raise SystemExit(f"only {len(pool)} classes have {per} photos; use more --classes")
    classes = sorted(rng.choice(pool, args.classes, replace=False), key=str)
    items = []
    for c in classes:
        files = sorted(f for f in c.iterdir() if f.suffix.lower() in (".jpg", ".jpeg", ".png"))
        rng.shuffle(files)
        items += [(f, c.name) for f in files[:per]]
    rng.shuffle(items)
    first, later = items[: args.n], items[args.n : args.n + args.new]
    work = args.work or Path(tempfile.mkdtemp(prefix="simile-place-"))
    folder = work / "photos"
    folder.mkdir(parents=True, exist_ok=True)
    label = {}

    def link(batch):
        for i, (src, cls) in enumerate(batch):
            dst = folder / f"{cls}__{src.stem}__{i}{src.suffix.lower()}"
            if not dst.exists():
                os.symlink(src, dst)
            label[str(dst)] = cls

    link(first)
    with Collection.open(folder, work / "index") as col:
        t = time.perf_counter()
        run_to_end(col.update())
        t_index = time.perf_counter() - t
        t = time.perf_counter()
        g = EditableGrouping.from_grouping(run_to_end(group_collection_iter(col, k=args.classes)))
        t_group = time.perf_counter() - t
        link(later)
        t = time.perf_counter()
        run_to_end(col.update())
        t_index_new = time.perf_counter() - t
        t = time.perf_counter()
        res = run_to_end(place_photos_iter(col, g))
        t_place = time.perf_counter() - t
    out = res.grouping
    labels = {p: label.get(p, label.get(os.path.realpath(p))) for p in out.paths}
    # the group most photos of each class are in (among the first photos)
    home = {}
    for c in {cls for _, cls in first}:
        groups = [out.group_of(p) for p in g.paths if labels.get(p) == c]
        if groups:
            home[c] = max(set(groups), key=groups.count)
    new = [p for p, _, _ in res.placed]
    right = sum(out.group_of(p) == home.get(labels.get(p)) for p in new)
    print(f"{args.n} photos, {args.classes} classes: index {t_index:.1f} s, group "
          f"{t_group:.1f} s")  # fmt: skip
    print(f"{len(new)} new photos: index {t_index_new:.1f} s, place {t_place:.1f} s "
          f"(dense features of the new photos included)")  # fmt: skip
    print(f"placed with the group of their class: {right}/{len(new)}; "
          f"to review: {len(res.unsure)}")  # fmt: skip
    print(
        f"(the grouping itself puts {_purity(g, labels):.3f} of the first photos in their "
        "class's group)"
    )
    return 0


def _purity(g, labels) -> float:
    ok = 0
    for k in range(g.k):
        members = [labels.get(g.paths[i]) for i in np.flatnonzero(g.labels == k)]
        if members:
            ok += max(members.count(c) for c in set(members))
    return ok / max(1, len(g.paths))


if __name__ == "__main__":
    raise SystemExit(main())
