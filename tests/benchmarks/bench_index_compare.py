"""Indexing cost of two versions of Simile, paired on the same floor.

Run::

    git worktree add /tmp/simile_base <rev>
    python tests/benchmarks/bench_index_compare.py --other /tmp/simile_base [--reps 6]
        [--abba] [--data ../shared/data/ukbench] [--jobs 2]

This machine's speed drifts by tens of percent within minutes, so the ratio of one index
to one floor (``bench_ukbench.py``) moves by as much as a change is worth. Here every rep
measures the decode + SIFT floor (``bench_ukbench.floor_seconds``) and then indexes the
folder with this checkout and with ``--other`` (alternating which goes first), each in a
fresh interpreter with that checkout first on ``sys.path``, as ``bench_ukbench.py`` times
it (``Collection.update()`` into a fresh index, heap kept warm). Printed per rep: the
floor, each version's wall seconds, CPU seconds (its process and workers) and ratio to
the floor; at the end each version's median ratio and in how many reps this checkout was
faster.

``--abba``: every rep indexes with both versions twice, in the order A B B A (A and B
swapped every other rep), and takes each version's mean of its two runs: the version
indexed first after the floor tends to be the slower one (7 of 10 reps in one run of
the plain order), and a steady drift of the machine's speed cancels too. Twice the time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_INDEX = """
import os, shutil, sys, time

if __name__ == "__main__":
    from engine.index.ingest import keep_heap_warm

    keep_heap_warm()
    from engine.collection import Collection

    shutil.rmtree(sys.argv[2], ignore_errors=True)
    col = Collection.open(sys.argv[1], sys.argv[2])
    t, c0 = time.perf_counter(), os.times()
    for _ in col.update(jobs=int(sys.argv[3])):
        pass
    c1 = os.times()
    cpu = sum(c1[:4]) - sum(c0[:4])
    print(time.perf_counter() - t, cpu)
    col.close()
    shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


def index_seconds(checkout: Path, data: Path, jobs: int) -> tuple[float, float]:
    """Wall and CPU seconds of a first index of ``data`` by the code in ``checkout``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "index.py"
        script.write_text(_INDEX)
        env = dict(os.environ, PYTHONPATH=str(checkout))
        out = subprocess.run(
            [sys.executable, str(script), str(data), str(Path(tmp) / "index"), str(jobs)],
            env=env,
            cwd=checkout,
            capture_output=True,
            text=True,
            check=True,
        )
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--other", required=True, help="checkout of the version to compare")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "ukbench"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--abba", action="store_true", help="each version twice a rep: A B B A")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_ukbench import floor_seconds

    data = Path(args.data)
    # every photo under the folder, as the index finds them (as bench_ukbench.py)
    files = sorted(p for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    versions = {"this": ROOT, "other": Path(args.other).resolve()}
    ratios: dict[str, list[float]] = {v: [] for v in versions}
    faster = 0
    for rep in range(args.reps):
        fl, fl_cpu = floor_seconds(files, args.jobs)
        line = [f"floor {fl:.2f} s ({fl_cpu:.1f} s CPU)"]
        order = list(versions) if rep % 2 == 0 else list(versions)[::-1]
        if args.abba:
            order += order[::-1]
        runs: dict[str, list[tuple[float, float]]] = {v: [] for v in versions}
        for v in order:
            runs[v].append(index_seconds(versions[v], data, args.jobs))
        walls = {}
        for v in order[: len(versions)]:
            wall = statistics.fmean(w for w, _ in runs[v])
            cpu = statistics.fmean(c for _, c in runs[v])
            walls[v] = wall
            ratios[v].append(wall / fl)
            line.append(f"{v} {wall:.2f} s ({cpu:.1f} s CPU) = {wall / fl:.2f}x")
        faster += walls["this"] < walls["other"]
        print(" | ".join(line), flush=True)
    for v, rs in ratios.items():
        print(f"{v}: median {statistics.median(rs):.2f}  ({' '.join(f'{r:.2f}' for r in rs)})")
    print(f"this checkout faster in {faster} of {args.reps} reps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
