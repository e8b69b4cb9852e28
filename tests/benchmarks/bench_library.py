"""What one operation costs on a large library: add, remove, rescan, query, size.

Run (a library of real SIFT photos, built once in /tmp, never committed)::

    nice python tests/benchmarks/bench_library.py --n 10000 [--dir /tmp/simile_library]
        [--code DIR ...] [--repeat 1]

The library is ``--n`` realistic views of the 500 UKBench dev photos
(:func:`bench_scale.random_view`: crop, rotation, perspective, lighting, noise, blur, JPEG;
320x240), written to ``<dir>_<n>/`` and indexed once with the real ``simile index --jobs
2`` (its time and photos/s are reported). Photos to add are further views of other
seeds (``<dir>_<n>_extra/``).

Then, for each ``--code`` checkout (default: this one; pass another checkout, e.g. a
``git worktree`` of an older commit, to compare in ONE run on the same machine state),
every operation is run as a whole ``simile`` process on a private copy of the index
(``cp -a``; each checkout starts from the same index):

- ``rescan``: ``simile index`` with nothing changed;
- ``add 1`` / ``add 100``: that many new photos copied into the folder, ``simile index``
  (their own extraction included: it is reported apart, measured as the same photos'
  decode + SIFT in this process);
- ``remove 1``: one photo deleted, ``simile index``;
- ``query``: ``simile query FOLDER IMAGE --json`` of a photo outside the folder, whole
  process, and its peak RSS (``/usr/bin/time``-like ``ru_maxrss`` of the child);
- the index size on disk (``du``) after the operations, per photo.

The folder is restored after each checkout's run. Ratios between checkouts are the
numbers to read: the machine is shared and noisy.

On the library this builds, the other measures of issue #20 have benchmarks of their
own, each comparing checkouts in one run: ``bench_app_query.py`` (a query in the app:
its search part, whole ``vocabulary`` and ``hybrid`` queries, resident memory, recall@10
of the candidates against the exhaustive score), ``bench_floors.py`` (whole ``simile``
processes: rescan, add, remove, ``--only``, query) and ``bench_duplicates_scale.py``
(``simile duplicates``, first and second search).

``--segments``: only ``simile query``, on an index of several segments made from an
existing library without touching it (its folder, its index and the photos to add are
read only)::

    nice python tests/benchmarks/bench_library.py --segments --n 100000
        --library /tmp/simile_library_100000 --index /tmp/simile_library_100000.index
        --extra /tmp/simile_library_100000_extra --work /tmp/simile_segments_100000
        --code OLD --code NEW --repeat 3

The work folder gets a folder of hard links to the library's photos and a copy of its
index (its immutable feature and state files hard-linked, ``cp -al``: the store never
writes into an existing one, it writes new files and renames them; the catalogue copied,
its paths moved to the new folder). The first ``--code`` then adds 10 and 5 photos in two
``simile index`` runs, removes one and changes one (a third run): the search data is the
library's segment and three small ones. Each checkout then answers the same queries (the
last extra photo, not in the library, by every method, and one by region), whole
processes, interleaved ``--repeat`` times; their best wall time and CPU time (user +
system: what a shared machine's load does not change much), worst peak RSS and whether
their hits and scores are the same as the first checkout's are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))


def _env(code: Path) -> dict[str, str]:
    """The environment of a ``simile`` process of checkout ``code``: as installed, with
    its bytecode cached (this sandbox sets PYTHONDONTWRITEBYTECODE, which recompiles every
    module in every process: 0.2 s each)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(code)}


def _simile(code: Path, args: list[str]) -> tuple[float, str]:
    """Run ``simile ARGS`` from checkout ``code``: wall seconds and stdout."""
    env = _env(code)
    cmd = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *args]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=code)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-1500:]}")
    return wall, proc.stdout


def _peak_rss(code: Path, args: list[str]) -> tuple[float, float]:
    """Whole-process wall time and peak RSS (GB) of ``simile ARGS`` in a wrapper process
    (``ru_maxrss`` of its only child)."""
    wall, rss, _ = _peak_rss_output(code, args)
    return wall, rss


def _peak_rss_output(code: Path, args: list[str]) -> tuple[float, float, str]:
    """:func:`_peak_rss` and the process's stdout."""
    wall, rss, _, out = _peak_rss_cpu(code, args)
    return wall, rss, out


def _peak_rss_cpu(code: Path, args: list[str]) -> tuple[float, float, float, str]:
    """:func:`_peak_rss`, the process's CPU seconds (user + system) and its stdout."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True)\n"
        "w = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(w, u.ru_maxrss, u.ru_utime + u.ru_stime)\n"
        "sys.stdout.write(p.stdout)\n"
    )
    env = _env(code)
    cmd = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *args]
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], env=env, capture_output=True, text=True,
        check=False, cwd=code,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-1500:]}")
    first, _, rest = proc.stdout.partition("\n")
    wall, rss, cpu = first.split()
    return float(wall), float(rss) / 1024**2, float(cpu), rest


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(n: int, base: Path, code: Path) -> tuple[Path, Path]:
    """The library folder of ``n`` views and the folder of photos to add; the folder is
    indexed with checkout ``code`` (the oldest compared: newer ones read its index)."""
    from bench_scale import make_views

    folder = Path(f"{base}_{n}")
    extra = Path(f"{base}_{n}_extra")
    per = -(-n // 500)
    if len(list(folder.glob("*.jpg"))) != n:
        shutil.rmtree(folder, ignore_errors=True)
        t = time.perf_counter()
        make_views(folder, per, seed=1)
        for p in sorted(folder.glob("*.jpg"))[n:]:
            p.unlink()
        print(f"wrote {n} views in {time.perf_counter() - t:.0f} s", flush=True)
    if len(list(extra.glob("*.jpg"))) < 101:
        shutil.rmtree(extra, ignore_errors=True)
        make_views(extra, 1, seed=7, images=np.arange(101))
    if not (folder / ".simile").is_dir() and not Path(f"{folder}.index").is_dir():
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, _ = _simile(code, ["index", str(folder), "--jobs", "2", "--json"])
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
        print(
            f"first index of {n}: {wall:.0f} s wall ({n / wall:.0f} photos/s), {cpu:.0f} s CPU",
            flush=True,
        )
    return folder, extra


def extraction_floor(photos: list[Path]) -> float:
    """Seconds to decode and extract the SIFT features of ``photos`` here."""
    sys.path.insert(0, str(ROOT))
    from engine.features.keypoints import extract_features

    t = time.perf_counter()
    for p in photos:
        extract_features(p)
    return time.perf_counter() - t


def run(code: Path, folder: Path, extra: Path, pristine: Path, repeat: int) -> dict:
    index = folder / ".simile"
    shutil.rmtree(index, ignore_errors=True)
    subprocess.run(["cp", "-a", str(pristine), str(index)], check=True)
    out: dict[str, float] = {}
    idx = ["index", str(folder), "--jobs", "2", "--json"]
    added: list[Path] = []
    removed: list[tuple[Path, bytes]] = []
    try:
        # a first rescan makes the copy this checkout's own (a format migration, if any)
        out["first rescan"] = _simile(code, idx)[0]
        out["rescan"] = min(_simile(code, idx)[0] for _ in range(repeat))
        extras = sorted(extra.glob("*.jpg"))
        for k, label in ((1, "add 1"), (100, "add 100")):
            times = []
            for _ in range(repeat):
                batch = extras[len(added) : len(added) + k]
                if len(batch) < k:
                    break
                for p in batch:
                    shutil.copy(p, folder / p.name)
                    added.append(folder / p.name)
                times.append(_simile(code, idx)[0])
            out[label] = min(times)
        photos = sorted(folder.glob("ukbench*.jpg"))
        times = []
        for r in range(repeat):
            victim = photos[17 + r]
            removed.append((victim, victim.read_bytes()))
            victim.unlink()
            times.append(_simile(code, idx)[0])
        out["remove 1"] = min(times)
        q = extras[-1]
        runs = [_peak_rss(code, ["query", str(folder), str(q), "--json"]) for _ in range(repeat)]
        out["query"] = min(w for w, _ in runs)
        out["query peak GB"] = max(r for _, r in runs)
        out["index KB/photo"] = _du(index) / 1024 / len(list(folder.glob("*.jpg")))
    finally:
        for p in added:
            p.unlink(missing_ok=True)
        for p, data in removed:
            p.write_bytes(data)
    return out


def segmented_copy(library: Path, index: Path, extra: Path, work: Path, code: Path) -> Path:
    """A library of several segments in ``work`` made from ``library`` (photos) and its
    ``index``, which are only read: ``work/photos`` (hard links), ``work/index`` (a copy:
    feature and state files hard-linked, the rest copied, the catalogue's paths moved).
    Checkout ``code`` adds 10, then 5 photos of ``extra``, then removes one photo and
    changes another (three ``simile index`` runs). Made once: an existing ``work`` is
    returned as it is."""
    from bench_floors import make_copy

    photos, copy = work / "photos", work / "index"
    if (work / "done").is_file():
        return work
    make_copy(library, index, work, keep_cache=True, mark=False)  # ("done" once segmented)
    idx = ["index", str(photos), "--index", str(copy), "--jobs", "2", "--json"]
    extras = sorted(extra.glob("*.jpg"))[:-1]  # (the last one is the query)
    t = time.perf_counter()
    _simile(code, idx)  # nothing changed: nothing written (or a format migration)
    print(f"rescan of the copy: {time.perf_counter() - t:.1f} s", flush=True)
    for batch in (extras[:10], extras[10:15]):
        for p in batch:
            os.link(p, photos / p.name)
        t = time.perf_counter()
        _simile(code, idx)
        print(f"added {len(batch)}: {time.perf_counter() - t:.1f} s", flush=True)
    originals = sorted(photos.glob("ukbench*.jpg"))
    (photos / originals[17].name).unlink()
    changed = photos / originals[18].name
    changed.unlink()
    shutil.copy(extras[20], changed)  # a new file (not a link): the library keeps its own
    t = time.perf_counter()
    _simile(code, idx)
    print(f"removed 1, changed 1: {time.perf_counter() - t:.1f} s", flush=True)
    (work / "done").write_text("")
    return work


def query_runs(codes: list[Path], work: Path, extra: Path, repeat: int) -> dict:
    """Whole ``simile query`` processes of every checkout on the copy ``work``: best wall
    time, worst peak RSS and whether the output equals the first checkout's, per query."""
    photos, index = work / "photos", work / "index"
    q = str(sorted(extra.glob("*.jpg"))[-1])
    base = ["query", str(photos), q, "--index", str(index), "--json", "--top", "10"]
    queries = {
        "hybrid": base,
        **{m: [*base, "--method", m] for m in ("vocabulary", "uniform", "wta")},
        "region": [*base, "--box", "40,30,200,150"],
    }
    table: dict[str, dict[str, float | str]] = {str(c): {} for c in codes}
    outputs: dict[tuple[str, str], str] = {}
    for label, args in queries.items():
        runs: dict[str, list[tuple[float, float, float]]] = {str(c): [] for c in codes}
        for _ in range(repeat):
            for code in codes:
                wall, rss, cpu, out = _peak_rss_cpu(code, args)
                runs[str(code)].append((wall, rss, cpu))
                outputs.setdefault((label, str(code)), out)
        for code in codes:
            r = runs[str(code)]
            same = outputs[(label, str(code))] == outputs[(label, str(codes[0]))]
            table[str(code)][f"{label} s"] = min(w for w, _, _ in r)
            table[str(code)][f"{label} CPU s"] = min(c for _, _, c in r)
            table[str(code)][f"{label} GB"] = max(g for _, g, _ in r)
            table[str(code)][f"{label} same"] = "yes" if same else "NO"
        print(json.dumps({c: {k: v for k, v in t.items() if k.startswith(label)}
                          for c, t in table.items()}), flush=True)  # fmt: skip
    return table


def main_segments(args: argparse.Namespace, codes: list[Path]) -> int:
    """``--segments``: query processes on a segmented copy of an existing library."""
    if not (args.library and args.index and args.extra and args.work):
        raise SystemExit("--segments needs --library, --index, --extra and --work")
    work = segmented_copy(
        Path(args.library), Path(args.index), Path(args.extra), Path(args.work), codes[0]
    )
    table = query_runs(codes, work, Path(args.extra), args.repeat)
    print(f"\n{args.n} photos, several segments | " + " | ".join(str(c) for c in table))
    for k in next(iter(table.values())):
        row = [table[c][k] for c in table]
        print(f"{k:>16} | " + " | ".join(v if isinstance(v, str) else f"{v:.2f}" for v in row))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--dir", default="/tmp/simile_library")
    ap.add_argument(
        "--code", action="append", default=None, help="checkout(s) to compare, oldest first"
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--segments", action="store_true", help="query processes only (see above)")
    ap.add_argument("--library", help="--segments: the library's photo folder (read only)")
    ap.add_argument("--index", help="--segments: its index folder (read only)")
    ap.add_argument("--extra", help="--segments: photos to add (read only)")
    ap.add_argument("--work", help="--segments: the folder of the segmented copy")
    args = ap.parse_args(argv)
    codes = [Path(c).resolve() for c in (args.code or [str(ROOT)])]
    if args.segments:
        return main_segments(args, codes)
    pristine = Path(f"{args.dir}_{args.n}.index")
    folder, extra = build(args.n, Path(args.dir), codes[0])
    if not pristine.is_dir():
        shutil.move(str(folder / ".simile"), pristine)
    floor = extraction_floor(sorted(extra.glob("*.jpg"))[:100])
    print(f"decode + SIFT of the photos added: {floor / 100:.3f} s a photo", flush=True)
    table = {}
    try:
        for code in codes:
            table[str(code)] = run(code, folder, extra, pristine, args.repeat)
            print(json.dumps({str(code): table[str(code)]}), flush=True)
    finally:
        shutil.rmtree(folder / ".simile", ignore_errors=True)
    keys = list(next(iter(table.values())))
    print(f"\n{args.n} photos | " + " | ".join(Path(c).name for c in table))
    for k in keys:
        print(f"{k:>16} | " + " | ".join(f"{table[c][k]:.2f}" for c in table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
