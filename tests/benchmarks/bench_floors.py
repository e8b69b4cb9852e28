"""The per-operation floors of a large library, old and new code interleaved.

Run (on an existing library made by ``bench_library.py``, which is only read)::

    nice python tests/benchmarks/bench_floors.py --library /tmp/simile_library_100000
        --index /tmp/simile_library_100000.index --extra /tmp/simile_library_100000_extra
        --work /tmp/floors/w100k --code OLD --code NEW --repeat 3

Each ``--code`` checkout gets its own copy of the library in ``WORK/<i>``: a folder of
hard links to the photos and a copy of the index (its feature and state files hard-linked,
``cp -al``: the store never writes into an existing one, it writes new files and renames
them; the catalogue copied, its paths moved to the new folder). The copies are made once
and kept (an existing ``WORK/<i>/done`` is reused).

Then, ``--repeat`` rounds, each running every checkout in turn (interleaved, so a load
change on the shared machine hits both): ``rescan`` (``simile index`` with nothing
changed), ``add 1`` (one photo of ``--extra`` linked in), ``remove 1`` (one library photo
unlinked), ``query`` (``simile query`` of the last extra photo, outside the library) and
``add 100``; and the path-limited forms ``only add 1``, ``only remove 1`` and ``only add
100`` (``simile index FOLDER --only PATH...``, told what changed instead of scanning the
folder; a checkout without ``--only`` reports "-" for them). Before an ``add``, the
photos added before are unlinked and a ``simile index`` (not timed; ``--only`` them for
the path-limited form) drops them, so every add indexes photos new to the index. Each is
one whole ``simile`` process; its wall time, CPU time (user + system of the process and
its children: what the other load of a shared machine changes least) and peak RSS are
recorded. Reported: best wall, best CPU, worst peak RSS, and whether every checkout's query
printed the same hits as the first.
The photos removed stay removed in the copies (the next run removes further ones).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "w = time.perf_counter() - t\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(p.returncode, w, u.ru_maxrss, u.ru_utime + u.ru_stime)\n"
    "sys.stdout.write(p.stdout)\n"
    "sys.stderr.write(p.stderr)\n"
)


def run(code: Path, args: list[str]) -> tuple[float, float, float, str]:
    """``simile ARGS`` of checkout ``code`` as a whole process: wall s, CPU s (user +
    system, its children included), peak RSS GB, stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *args]
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *cmd], env=env, capture_output=True, text=True,
        check=False, cwd=code,
    )  # fmt: skip
    first, _, rest = proc.stdout.partition("\n")
    rc, wall, rss, cpu = first.split()
    if rc != "0":
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
    return float(wall), float(cpu), float(rss) / 1024**2, rest


def make_copy(
    library: Path, index: Path, work: Path, *, keep_cache: bool = False, mark: bool = True
) -> None:
    """``work/photos`` (hard links to ``library``'s photos) and ``work/index`` (a copy of
    ``index``: features and states hard-linked, the rest copied, paths moved; its
    ``cache`` folder left out unless ``keep_cache``). With ``mark``, ``work/done`` says
    the copy is made, and an existing one is kept as it is."""
    photos, copy = work / "photos", work / "index"
    if mark and (work / "done").is_file():
        return
    shutil.rmtree(work, ignore_errors=True)
    photos.mkdir(parents=True)
    for p in library.glob("*.jpg"):
        os.link(p, photos / p.name)
    copy.mkdir()
    for entry in index.iterdir():
        if entry.name in ("features", "states"):  # immutable files: never written in place
            subprocess.run(["cp", "-al", str(entry), str(copy / entry.name)], check=True)
        elif keep_cache or entry.name != "cache":
            subprocess.run(["cp", "-a", str(entry), str(copy / entry.name)], check=True)
    con = sqlite3.connect(copy / "catalog.sqlite")
    with con:
        old = f"{library.resolve()}/"
        con.execute(
            "UPDATE images SET path = ? || substr(path, ?) WHERE substr(path, 1, ?) = ?",
            (f"{photos.resolve()}/", len(old) + 1, len(old), old),
        )
    con.close()
    if mark:
        (work / "done").write_text("")


def _op(code, name, only, r, photos, index, idx, extras, query_photo):
    """Run operation ``name`` once (``only``: path-limited, ``--only`` the paths changed)."""
    if name == "rescan":
        return run(code, idx)
    if name.startswith("add"):
        k = int(name.split()[1])
        if len(extras) - 1 < k:
            raise SystemExit(f"{name}: --extra holds fewer than {k + 1} photos")
        gone = [photos / p.name for p in extras if (photos / p.name).exists()]
        if gone:  # the photos added before are removed first (not timed)
            for p in gone:
                p.unlink()
            run(code, [*idx, "--only", *map(str, gone)] if only else idx)
        added = [photos / p.name for p in extras[:k]]
        for p, a in zip(extras[:k], added, strict=True):
            os.link(p, a)
        return run(code, [*idx, "--only", *map(str, added)] if only else idx)
    if name == "remove 1":
        victim = sorted(photos.glob("ukbench*_v1_*.jpg"))[17 + 2 * r + int(only)]
        victim.unlink()
        return run(code, [*idx, "--only", str(victim)] if only else idx)
    if name == "query":
        return run(code, ["query", str(photos), str(query_photo), "--index", str(index),
                          "--json", "--top", "10"])  # fmt: skip
    raise SystemExit(f"unknown op {name!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", required=True, help="the library's photo folder (read only)")
    ap.add_argument("--index", required=True, help="its index folder (read only)")
    ap.add_argument("--extra", required=True, help="photos to add (read only)")
    ap.add_argument("--work", required=True, help="folder of the copies")
    ap.add_argument("--code", action="append", required=True, help="checkouts, oldest first")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--ops",
        default="rescan,add 1,remove 1,query,add 100,only add 1,only remove 1,only add 100",
    )
    args = ap.parse_args(argv)
    codes = [Path(c).resolve() for c in args.code]
    work = Path(args.work)
    ops = args.ops.split(",")
    extras = sorted(Path(args.extra).glob("*.jpg"))
    query_photo = extras[-1]
    for i, code in enumerate(codes):
        make_copy(Path(args.library), Path(args.index), work / str(i))
        # a first rescan makes the copy this checkout's own (a format migration, if any)
        idx = ["index", str(work / str(i) / "photos"), "--index", str(work / str(i) / "index")]
        w, c, _, _ = run(code, [*idx, "--jobs", "2", "--json"])
        print(f"{code}: first rescan {w:.2f} s ({c:.2f} s CPU)", flush=True)
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        str(c): {op: [] for op in ops} for c in codes
    }
    outputs: dict[str, str] = {}
    for r in range(args.repeat):
        for i, code in enumerate(codes):
            photos, index = work / str(i) / "photos", work / str(i) / "index"
            idx = ["index", str(photos), "--index", str(index), "--jobs", "2", "--json"]
            for op in ops:
                only = op.startswith("only ")
                name = op[5:] if only else op
                if only and '"--only"' not in (code / "app/commands/index.py").read_text():
                    continue  # (a checkout without --only)
                res = _op(code, name, only, r, photos, index, idx, extras, query_photo)
                if name == "query":
                    out = res[3].replace(str((work / str(i)).resolve()), "WORK")
                    out = out.replace(str(work / str(i)), "WORK")  # (the copies' own paths)
                    outputs.setdefault(str(code), out)
                results[str(code)][op].append(res[:3])
                print(f"round {r} {code.name} {op}: {res[0]:.2f} s, {res[1]:.2f} s CPU, "
                      f"{res[2]:.2f} GB", flush=True)  # fmt: skip
    print("\noperation | " + " | ".join(f"{c.name} wall / CPU / GB" for c in codes))
    for op in ops:
        cells = []
        for c in codes:
            rs = results[str(c)][op]
            if not rs:
                cells.append("-")
                continue
            best_w = min(w for w, _, _ in rs)
            best_c = min(c_ for _, c_, _ in rs)
            peak = max(g for _, _, g in rs)
            cells.append(f"{best_w:.2f} s / {best_c:.2f} s / {peak:.2f} GB")
        print(f"{op} | " + " | ".join(cells))
    if "query" in ops:
        first = outputs.get(str(codes[0]))
        same = ["yes" if outputs.get(str(c)) == first else "NO" for c in codes]
        print("query hits same as first | " + " | ".join(same))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
