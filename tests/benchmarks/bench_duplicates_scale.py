"""``simile duplicates`` on a large library: a first search (no remembered checks) and a
second one after adding 10 photos, old and new code side by side.

Run (on a library made by ``bench_library.py``, which is only read)::

    nice python tests/benchmarks/bench_duplicates_scale.py
        --library /tmp/simile_library_100000 --index /tmp/simile_library_100000.index
        --extra /tmp/simile_library_100000_extra --work /tmp/dupscale/w100k
        --code OLD --code NEW

Each ``--code`` checkout gets its own copy of the library in ``WORK/<i>``
(:func:`bench_floors.make_copy`: hard links to the photos, the index's feature and state
files hard-linked, its catalogue copied; no pair cache). Then, for each checkout in turn:

1. ``first``: ``simile duplicates WORK/<i>/photos --index WORK/<i>/index --json``, stderr
   a pipe (its progress lines give the number of pairs checked);
2. 10 photos of ``--extra`` linked into the copy and ``simile index`` run (not timed);
3. ``again``: the same search, which re-checks only the pairs involving new photos.

The groups of each run are kept in ``WORK/<i>/first.json`` and ``again.json``, their
progress lines in ``first.err`` and ``again.err``.

Reported per run: wall time, CPU time (user + system of the process and its children:
the worker processes), peak RSS (the largest process), pairs in the search and pairs
checked (the rest remembered), groups by tier; and whether every checkout printed the same
groups (tiers, paths, scores and keepers) as the first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_floors import WRAPPER, make_copy, run  # noqa: E402


def pairs_of(stderr: str) -> tuple[int, int]:
    """(pairs in the search, pairs remembered) from the progress lines."""
    m = re.search(r"checking ([\d,]+) pairs(?: \(([\d,]+) remembered)?", stderr)
    if m is None:
        return 0, 0
    total = int(m.group(1).replace(",", ""))
    known = int(m.group(2).replace(",", "")) if m.group(2) else 0
    return total, known


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True, help="the library's photo folder (read only)")
    ap.add_argument("--index", required=True, help="its index folder (read only)")
    ap.add_argument("--extra", required=True, help="photos to add (read only)")
    ap.add_argument("--work", required=True, help="folder of the copies")
    ap.add_argument("--code", action="append", required=True, help="checkouts, oldest first")
    ap.add_argument("--add", type=int, default=10, help="photos added before the second run")
    args = ap.parse_args(argv)
    codes = [Path(c).resolve() for c in args.code]
    extras = sorted(Path(args.extra).glob("*.jpg"))[: args.add]
    rows, answers = [], []
    for k, code in enumerate(codes):
        work = Path(args.work) / str(k)
        make_copy(Path(args.library), Path(args.index), work)
        for p in extras:  # (a rerun starts without the extra photos)
            if (work / "photos" / p.name).exists():
                (work / "photos" / p.name).unlink()
        run(code, ["index", str(work / "photos"), "--index", str(work / "index")])
        for p in (work / "index" / "cache").glob("*"):
            p.unlink()
        first = _measured(code, work)
        for p in extras:
            os.link(p, work / "photos" / p.name)
        run(code, ["index", str(work / "photos"), "--index", str(work / "index")])
        again = _measured(code, work)
        for name, r in (("first", first), ("again", again)):  # (kept to compare by hand)
            (work / f"{name}.json").write_text(json.dumps(r["groups"]))
            (work / f"{name}.err").write_text(r["err"])  # (its progress lines)
        for name, r in (("first", first), (f"after adding {len(extras)}", again)):
            rows.append((code.name, name, r))
        # (each checkout has its own copy: its paths are compared relative to it)
        answers.append(json.dumps(first["groups"]).replace(f"{work.resolve()}/", ""))
    print(f"{'code':>12} {'run':>16} {'wall s':>8} {'CPU s':>8} {'RSS GB':>7} "
          f"{'pairs':>9} {'checked':>9}  groups")  # fmt: skip
    for code_name, name, r in rows:
        total, known = r["pairs"]
        tiers = ", ".join(f"{t} {n}" for t, n in sorted(r["tiers"].items()))
        print(f"{code_name:>12} {name:>16} {r['wall']:8.1f} {r['cpu']:8.1f} {r['rss']:7.2f} "
              f"{total:9,} {total - known:9,}  {tiers}")  # fmt: skip
    same = all(a == answers[0] for a in answers[1:])
    print(f"same groups, scores and keepers in every checkout: {same}")
    return 0


def _measured(code: Path, work: Path) -> dict:
    """:func:`search` with its stderr kept for the pair counts."""
    args = ["duplicates", str(work / "photos"), "--index", str(work / "index"), "--json"]
    wall, cpu, rss, out, err = _run_err(code, args)
    res = json.loads(out.strip().splitlines()[-1])
    tiers: dict[str, int] = {}
    for g in res["groups"]:
        tiers[g["tier"]] = tiers.get(g["tier"], 0) + 1
    return {"wall": wall, "cpu": cpu, "rss": rss, "groups": res["groups"], "tiers": tiers,
            "pairs": pairs_of(err), "err": err}  # fmt: skip


def _run_err(code: Path, args: list[str]) -> tuple[float, float, float, str, str]:
    """:func:`bench_floors.run` that also returns the process's stderr."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code)
    simile = "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", WRAPPER, sys.executable, "-c", simile, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=code, env=env)
    first, _, rest = proc.stdout.partition("\n")
    rc, wall, rss, cpu = first.split()
    if rc != "0":
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
    return float(wall), float(cpu), float(rss) / 1024**2, rest, proc.stderr


if __name__ == "__main__":
    raise SystemExit(main())
