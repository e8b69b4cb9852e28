"""Record what the ``simile`` CLI outputs, and compare two recordings (refactoring guard).

Before a refactor, record the old code; after it, record the new code and compare: every
hit list, score, group, metric and stored index array must be the same.

Usage::

    python tests/benchmarks/record_outputs.py record OUTDIR [--quick] [--code CHECKOUT]
        [--jobs 2] [--data ../shared/data] [--work /tmp/simile_record_work]
        [--only demo,ukbench,holidays,caltech4,learned]
    python tests/benchmarks/record_outputs.py compare DIR_A DIR_B

``record`` runs the product's own entry point, ``python -m app ... --json`` (what the
``simile`` script runs), with the working directory and ``PYTHONPATH`` set to the checkout
``--code`` (default: the checkout holding this file), after checking that ``engine`` and
``app`` really import from there (the venv may hold another checkout in editable mode).
Every folder gets a fresh index under ``OUTDIR/indexes/`` (``--index``).

What is recorded (``OUTDIR/outputs/<item>.json``: argv, exit status, the JSON line):

- ``demo``: ``assets/demo`` of the recorded checkout, copied to ``--work``: ``index``;
  ``query`` of every image with ``--method`` hybrid, vocabulary, uniform, wta (``--top
  10``); ``duplicates``; ``cluster --k 4`` and ``--k auto``; ``match`` of two pairs with
  ``--method`` uniform and vocabulary.
- ``ukbench`` (dev data, indexed in place): ``index``; ``query`` of every 5th image with
  each method; ``eval --protocol ukbench`` with each method.
- ``holidays`` (full runs only): ``index``; ``eval --protocol holidays`` (hybrid,
  vocabulary).
- ``caltech4`` (full runs only): the first 40 images of Faces_easy, airplanes,
  Motorbikes and car_side COPIED into class subfolders of ``--work`` (never symlinked:
  the folder scan resolves links); ``cluster --k 4`` and ``--k auto``.
- ``learned`` (full runs only): 10 images of each of 8 Caltech-101 classes copied into
  class subfolders; ``index``; ``learn --from-subfolders`` (the default learner, then
  ``--method boostssc`` and ``boostpro``), each followed by ``query --method learned``
  of two images per class (``--top 10``).
- index snapshots (``OUTDIR/snapshots/<folder>/<stage>/``), after indexing and after each
  command that writes to the index: every state of ``INDEX/states`` (arrays of its npz
  and parts merged, as ``IndexStore.load_state`` does, saved as ``state.<name>.npz``,
  scalars as ``state.<name>.json``; matched by state name, never by the random token of
  the file names), every ``INDEX/arrays/*.npy`` (``arrays.npz``), the catalogue rows
  and key-value entries (``catalog.json``, without file times), every image's stored
  features (``features.npz``, one entry per image and field) and where they are stored
  (``feature_layout.json``: chunk and offset; see :data:`KNOWN_NONDETERMINISTIC`). The
  dense-feature caches of grouping and learning (``<ns>.dense.<token>.*`` arrays with a
  manifest in the key-value table) are recorded per image (``<ns>.dense.npz``), and random
  tokens the index stores (:data:`RANDOM_STATE_SCALARS`, :data:`RANDOM_KV`) as
  ``<random token>``.

Absolute paths in outputs and stored string arrays are rewritten relative to the folder
(``<INDEX>``, ``<WORK>``, ``<OUT>``, ``<CODE>`` for the other roots), so recordings of
different checkouts into different directories compare. Timing fields of the JSON
(``seconds``, ``seconds_per_query``) are moved to ``OUTDIR/timings.json`` with the wall
time of every step; they are not compared.

``compare`` prints, per item, ``identical`` or its first differences (hit lists and
scores separately: scores exactly equal or not, and their max abs difference; arrays:
bit-identical or not, and their max abs difference) and exits 1 if anything differs.
Comparing a ``--quick`` recording with a full one compares the quick items only.
Items listed in :data:`KNOWN_NONDETERMINISTIC` are still compared and their differences
printed, marked as known; they do not change the exit status. Two recordings of the same
code (4597c21) were otherwise identical: every output, array and feature.

A full recording takes about 2.5 minutes on 2 shared cores (``--jobs 2``), ``--quick``
about 1.3 (wall time per step in ``OUTDIR/timings.json``); it writes ~0.5 GB.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = (REPO.parent / "shared" / "data").resolve()
DEFAULT_WORK = Path("/tmp/simile_record_work")

METHODS = ("hybrid", "vocabulary", "uniform", "wta")
HOLIDAYS_METHODS = ("hybrid", "vocabulary")
CALTECH4 = ("Faces_easy", "airplanes", "Motorbikes", "car_side")
CALTECH4_PER_CLASS = 40
LEARN_CLASSES = (
    "accordion",
    "bonsai",
    "brain",
    "butterfly",
    "chair",
    "dolphin",
    "laptop",
    "sunflower",
)
LEARN_PER_CLASS = 10
#: ``simile learn --method``: the default first
LEARNERS = ("oasis", "boostssc", "boostpro")
DEMO_MATCH_PAIRS = (("brick.jpg", "brick_perspective.jpg"), ("astronaut.jpg", "coffee.jpg"))
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif"}
#: top-level JSON fields that are timings: moved to timings.json, never compared
TIMING_KEYS = ("seconds", "seconds_per_query")
#: catalogue columns not compared: file times, and the time of indexing
CATALOG_SKIP = {"mtime_ns", "added_at", "created_at"}
#: catalogue columns of where features are stored: recorded in feature_layout.json
LAYOUT_COLUMNS = {"feature_chunk", "feature_offset"}
#: folders recorded, in order; a --quick recording does the first two
ALL_FOLDERS = ("demo", "ukbench", "holidays", "caltech4", "learned")
QUICK_FOLDERS = ALL_FOLDERS[:2]

#: item-name patterns (fnmatch) whose output differs between two recordings of the same
#: code, and why. Their differences are printed but do not fail ``compare``.
KNOWN_NONDETERMINISTIC: dict[str, str] = {
    "*/feature_layout.json": (
        "where features are stored, not what: engine.ingest.ingest stores results in scan "
        "order, but cuts a batch (one feature chunk) at batch_size or batch_size // 4 "
        "depending on how many files the workers have FINISHED (total - done), so chunk "
        "boundaries and offsets depend on worker timing; the dense caches "
        "(CategoryChannel) keep images in the order the workers finish them. Image ids, "
        "every image's features (features.npz, <ns>.dense.npz) and all results are "
        "compared exactly"
    ),
}

STEP_TIMEOUT = 4 * 3600

#: random tokens the index stores (``secrets.token_hex`` / ``uuid4``): scalars of states and
#: key-value entries, recorded as "<random token>"
RANDOM_STATE_SCALARS = ("token",)
RANDOM_KV = ("learned.model.token", "catalog.id")


# ============================================================================ helpers


def _rel_item(item: str) -> Path:
    return Path(*item.split("/"))


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _images_in(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


class PathRewriter:
    """Rewrites absolute paths: under ``folder`` -> relative to it; under the other roots
    (index, work, output, code) -> ``<NAME>/...``. Both the given and the resolved form of
    every root are recognised."""

    def __init__(self, folder: Path | None, roots: dict[str, Path]):
        self.folder = [] if folder is None else self._forms(folder)
        pairs = []
        for name, root in roots.items():
            for form in self._forms(root):
                pairs.append((form, f"<{name}>"))
        for form in self.folder:
            pairs.append((form, "<FOLDER>"))
        # longest first: the index lies under the output directory
        self.pairs = sorted(set(pairs), key=lambda p: -len(p[0]))

    @staticmethod
    def _forms(p: Path) -> list[str]:
        forms = {os.path.abspath(p), os.path.realpath(p)}
        return sorted(f.rstrip("/") for f in forms if f.rstrip("/"))

    def text(self, s: str) -> str:
        for f in self.folder:
            if s == f:
                return "."
            if s.startswith(f + "/"):
                return s[len(f) + 1 :]
        for form, name in self.pairs:
            if form in s:
                s = s.replace(form, name)
        return s

    def obj(self, o: Any) -> Any:
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, list):
            return [self.obj(v) for v in o]
        if isinstance(o, dict):
            return {self.text(k): self.obj(v) for k, v in o.items()}
        return o

    def array(self, a: np.ndarray) -> np.ndarray:
        if a.dtype.kind == "U" and a.size:
            flat = [self.text(str(s)) for s in a.reshape(-1).tolist()]
            return np.array(flat, dtype=str).reshape(a.shape)
        return a


# ============================================================================ snapshots


def _load_states(index: Path) -> dict[str, tuple[dict, dict[str, np.ndarray]]]:
    """Every state of ``index/states``: name -> (scalars, arrays), from the manifest
    (``states/MANIFEST.json``) or, for an index written before it, the per-state JSON."""
    out = {}
    states = index / "states"
    if not states.is_dir():
        return out
    manifest = states / "MANIFEST.json"
    if manifest.is_file():
        doc = json.loads(manifest.read_text())
        entries = {n: (dict(e["scalars"]), list(e["files"])) for n, e in doc["states"].items()}
    else:
        entries = {}
        for js in sorted(states.glob("*.json")):
            scalars = json.loads(js.read_text())
            files = [scalars.pop("__npz__", None), *scalars.pop("__parts__", [])]
            entries[js.name[: -len(".json")]] = (scalars, [f for f in files if f])
    for name, (scalars, files) in sorted(entries.items()):
        arrays: dict[str, np.ndarray] = {}
        for f in files:
            with np.load(states / f, allow_pickle=False) as z:
                for k in z.files:
                    if k in arrays:
                        raise ValueError(f"state {name}: array {k} stored twice")
                    arrays[k] = z[k]
        out[name] = (scalars, arrays)
    return out


def _catalog_and_features(index: Path, rw: PathRewriter):
    """Catalogue rows (by path), every image's stored feature rows (by path, field), and
    where they are stored (``layout``: chunk number, offset, codec; chunk sizes)."""
    uri = "file:" + str(index / "catalog.sqlite") + "?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    try:
        con.row_factory = sqlite3.Row
        images = [dict(r) for r in con.execute("SELECT * FROM images ORDER BY id")]
        chunks = {r["id"]: dict(r) for r in con.execute("SELECT * FROM chunks")}
        settings = {r[0]: r[1] for r in con.execute("SELECT key, value FROM settings")}
        kv = {}
        for key, value in con.execute("SELECT key, value FROM kv"):
            kv[key] = _kv_value(value)
    finally:
        con.close()
    feats: dict[str, np.ndarray] = {}
    opened: dict[str, np.ndarray] = {}
    rows = []
    chunk_no = {cid: k for k, cid in enumerate(sorted(chunks))}
    placed = {}
    for img in images:
        rel = rw.text(img["path"])
        chunk = chunks.get(img.get("feature_chunk"))
        row = {k: v for k, v in img.items() if k not in CATALOG_SKIP | LAYOUT_COLUMNS}
        row["path"] = rel
        if img.get("error"):
            row["error"] = rw.text(img["error"])
        if chunk is not None:
            placed[rel] = [
                chunk_no[chunk["id"]],
                img["feature_offset"],
                chunk["desc_codec"],
                chunk["desc_scale"],
            ]
            if chunk["file"] not in opened:
                opened[chunk["file"]] = np.load(
                    index / "features" / chunk["file"], mmap_mode="r", allow_pickle=False
                )
            arr = opened[chunk["file"]]
            off, n = int(img["feature_offset"]), int(img["n_features"])
            part = np.asarray(arr[off : off + n])
            for field in part.dtype.names or ():
                feats[f"{rel}|{field}"] = np.ascontiguousarray(part[field])
        rows.append(row)
    catalog = {
        "images": rows,
        "settings": rw.obj(settings),
        "kv": rw.obj(kv),
    }
    layout = {
        "features": {
            "chunk_rows": [chunks[c]["n_rows"] for c in sorted(chunks)],
            "images [chunk, offset, codec, scale]": placed,
        }
    }
    return catalog, feats, layout


def _kv_value(value: Any) -> Any:
    """A key-value entry as JSON: parsed JSON text if it is that, else text, else hex."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return {"hex": value.hex()}
    if isinstance(value, str):
        try:
            return {"json": json.loads(value)}
        except ValueError:
            return value
    return value


def _canonical_dense(named: dict, catalog: dict, tokens: dict[str, str], layout: dict) -> dict:
    """Take the dense-feature caches (``engine.cluster.CategoryChannel``) out of ``named``:
    their chunks are named by random tokens and hold images in the order the worker
    processes finished them, so they are recorded per image instead (``<ns>.dense.npz``
    entries ``<path>|desc``, ``|xy``, ``|bins``), and their manifest in the catalogue
    becomes ``{key, items: {path: [width, height]}, bins_tags}``; the chunk and row of
    every image go to ``layout``.
    ``tokens`` maps random tokens stored in states to what the recording calls them."""
    by_hash: dict[str, str] = {}
    for row in catalog["images"]:
        if row.get("content_hash"):
            by_hash.setdefault(row["content_hash"], row["path"])
    out: dict[str, dict[str, np.ndarray]] = {}
    kv = catalog["kv"]
    for key in sorted(kv):
        if not key.endswith(".dense.manifest") or not isinstance(kv[key], dict):
            continue
        ns = key[: -len(".dense.manifest")]
        man = kv[key].get("json") or {}
        chunks = man.get("chunks", {})
        arrays: dict[str, np.ndarray] = {}
        items = {}
        where = {}
        chunk_no = {tok: k for k, tok in enumerate(chunks)}  # in the order written
        for h, (tok, row, w, hgt) in sorted(man.get("items", {}).items()):
            name = by_hash.get(h, h)
            items[name] = [w, hgt]
            where[name] = [chunk_no.get(tok, -1), row]
            off = named.get(f"{ns}.dense.{tok}.off")
            if off is None:
                continue
            a, b = int(off[row]), int(off[row + 1])
            for field in ("desc", "xy", "bins"):
                arr = named.get(f"{ns}.dense.{tok}.{field}")
                if arr is not None:
                    arrays[f"{name}|{field}"] = np.ascontiguousarray(arr[a:b])
        tags: dict[str, int] = {}
        for tok in man.get("bins", {}).values():
            label = tokens.get(tok, "<a token no state holds>")
            tags[label] = tags.get(label, 0) + 1
        prefix = f"{ns}.dense."
        orphans = 0
        for name in [n for n in named if n.startswith(prefix)]:
            tok = name[len(prefix) :].rsplit(".", 1)[0]
            if tok not in chunks:
                orphans += 1
            del named[name]
        kv[key] = {
            "key": man.get("key"),
            "items": items,
            "bins_tags": tags,
            "chunk_files_no_manifest_names": orphans,
        }
        layout[key] = {"chunk_rows": list(chunks.values()), "images [chunk, row]": where}
        out[ns] = arrays
    return out


def snapshot(index: Path, dest: Path, rw: PathRewriter) -> None:
    """Save every array of ``index`` under ``dest`` (see the module docstring)."""
    dest.mkdir(parents=True, exist_ok=True)
    tokens: dict[str, str] = {}
    for name, (scalars, arrays) in _load_states(index).items():
        for key in RANDOM_STATE_SCALARS:
            if isinstance(scalars.get(key), str) and scalars[key]:
                tokens[scalars[key]] = f"<{key} of state {name}>"
                scalars[key] = "<random token>"
        _write_json(dest / f"state.{name}.json", rw.obj(scalars))
        np.savez(dest / f"state.{name}.npz", **{k: rw.array(v) for k, v in arrays.items()})
    named = {}
    if (index / "arrays").is_dir():
        for f in sorted((index / "arrays").glob("*.npy")):
            named[f.name[: -len(".npy")]] = rw.array(np.load(f, allow_pickle=False))
    catalog, feats, layout = _catalog_and_features(index, rw)
    for key in RANDOM_KV:
        if catalog["kv"].get(key):
            catalog["kv"][key] = "<random token>"
    for ns, arrays in _canonical_dense(named, catalog, tokens, layout).items():
        np.savez(dest / f"{ns}.dense.npz", **arrays)
    np.savez(dest / "arrays.npz", **named)
    _write_json(dest / "catalog.json", catalog)
    _write_json(dest / "feature_layout.json", layout)
    np.savez(dest / "features.npz", **feats)


# ============================================================================ recording


class Recorder:
    def __init__(self, args: argparse.Namespace):
        self.code = Path(args.code).resolve()
        self.out = Path(args.outdir).resolve()
        self.work = Path(args.work).resolve()
        self.data = Path(args.data).resolve()
        self.python = args.python
        self.jobs = args.jobs
        self.quick = args.quick
        self.only = set(args.only.split(",")) if args.only else None
        if self.only and not self.only <= set(ALL_FOLDERS):
            unknown = ", ".join(sorted(self.only - set(ALL_FOLDERS)))
            raise SystemExit(f"--only: unknown folder(s) {unknown}; choose from {ALL_FOLDERS}")
        self.timings: dict[str, Any] = {}
        self.items: list[str] = []
        self.failures: list[str] = []
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(self.code)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        self.env["XDG_CACHE_HOME"] = str(self.work / "xdg-cache")  # never ~/.cache
        self.roots = {
            "INDEX": self.out / "indexes",
            "OUT": self.out,
            "WORK": self.work,
            "CODE": self.code,
            "DATA": self.data,
        }

    # ------------------------------------------------------------------ setup

    def check_code(self) -> dict[str, Any]:
        """Check that ``engine`` and ``app`` import from ``--code`` and describe the run."""
        probe = (
            "import json, sys, engine, app, numpy, cv2; print(json.dumps({'engine': "
            "engine.__file__, 'app': app.__file__, 'python': sys.version, 'numpy': "
            "numpy.__version__, 'cv2': cv2.__version__}))"
        )
        res = subprocess.run(
            [self.python, "-c", probe],
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        info = json.loads(res.stdout.strip().splitlines()[-1])
        for mod in ("engine", "app"):
            where = Path(info[mod]).resolve()
            if self.code not in where.parents:
                raise SystemExit(f"{mod} imports from {where}, not from {self.code}")
        git = {}
        for key, cmd in (("rev", ["rev-parse", "HEAD"]), ("status", ["status", "--porcelain"])):
            r = subprocess.run(["git", "-C", str(self.code), *cmd], capture_output=True, text=True)
            git[key] = r.stdout.strip() if r.returncode == 0 else None
        info.update(
            code=str(self.code),
            git_rev=git["rev"],
            git_dirty=bool(git["status"]),
            platform=platform.platform(),
            cpus=os.cpu_count(),
            jobs=self.jobs,
            quick=self.quick,
            data=str(self.data),
            started=time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        return info

    # ------------------------------------------------------------------ steps

    def cli(self, item: str, argv: list[str], folder: Path | None, index: Path | None) -> Any:
        """Run ``python -m app ARGV`` and record its last stdout line (JSON)."""
        rw = PathRewriter(folder, self.roots)
        t0 = time.perf_counter()
        res = subprocess.run(
            [self.python, "-m", "app", *argv],
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
        )
        wall = time.perf_counter() - t0
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        output: Any = None
        if lines:
            try:
                output = json.loads(lines[-1])
            except ValueError:
                output = None
        reported = {}
        if isinstance(output, dict):
            for key in TIMING_KEYS:
                if key in output:
                    reported[key] = output.pop(key)
        record = {
            "argv": rw.obj(argv),
            "returncode": res.returncode,
            "output": rw.obj(output),
        }
        if output is None:
            record["stdout_tail"] = rw.obj(lines[-5:])
        if res.returncode != 0:
            record["stderr_tail"] = rw.obj(res.stderr.splitlines()[-10:])
            self.failures.append(item)
        _write_json(self.out / "outputs" / _rel_item(item + ".json"), record)
        log = self.out / "logs" / _rel_item(item + ".stderr")
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(res.stderr)
        self.timings[item] = {"wall_seconds": round(wall, 3), **reported}
        self.items.append(item)
        status = "ok" if res.returncode == 0 else f"EXIT {res.returncode}"
        print(f"  {item:40s} {wall:8.1f} s  {status}", flush=True)
        return output

    def snap(self, item: str, index: Path, folder: Path) -> None:
        t0 = time.perf_counter()
        try:
            snapshot(
                index, self.out / "snapshots" / _rel_item(item), PathRewriter(folder, self.roots)
            )
        except Exception as exc:  # record the failure, go on with the other steps
            self.failures.append(item)
            print(f"  {item:40s} snapshot FAILED: {exc!r}", flush=True)
            return
        wall = time.perf_counter() - t0
        self.timings[item] = {"wall_seconds": round(wall, 3)}
        self.items.append(item)
        print(f"  {item:40s} {wall:8.1f} s  snapshot", flush=True)

    def index(self, name: str) -> Path:
        idx = self.out / "indexes" / name
        if idx.exists():
            shutil.rmtree(idx)
        return idx

    def jobs_args(self) -> list[str]:
        return [] if self.jobs is None else ["--jobs", str(self.jobs)]

    # ------------------------------------------------------------------ folders

    def demo(self) -> None:
        folder = self.work / "demo"
        shutil.copytree(self.code / "assets" / "demo", folder)
        idx = self.index("demo")
        ix = ["--index", str(idx)]
        images = [str(p) for p in _images_in(folder)]
        self.cli(
            "demo/index", ["index", str(folder), *ix, *self.jobs_args(), "--json"], folder, idx
        )
        self.snap("demo/after-index", idx, folder)
        for m in METHODS:
            self.cli(
                f"demo/query.{m}",
                ["query", str(folder), *images, *ix, "--method", m, "--top", "10", "--json"],
                folder,
                idx,
            )
        self.cli("demo/duplicates", ["duplicates", str(folder), *ix, "--json"], folder, idx)
        for k in ("4", "auto"):
            self.cli(
                f"demo/cluster.k{k}",
                ["cluster", str(folder), *ix, "--k", k, *self.jobs_args(), "--json"],
                folder,
                idx,
            )
            self.snap(f"demo/after-cluster.k{k}", idx, folder)
        for a, b in DEMO_MATCH_PAIRS:
            for m in ("uniform", "vocabulary"):
                self.cli(
                    f"demo/match.{Path(a).stem}-{Path(b).stem}.{m}",
                    ["match", str(folder / a), str(folder / b), "--method", m, "--json"],
                    folder,
                    None,
                )

    def ukbench(self) -> None:
        folder = self.data / "ukbench"
        idx = self.index("ukbench")
        ix = ["--index", str(idx)]
        images = [str(p) for p in _images_in(folder)][::5]
        self.cli(
            "ukbench/index", ["index", str(folder), *ix, *self.jobs_args(), "--json"], folder, idx
        )
        self.snap("ukbench/after-index", idx, folder)
        for m in METHODS:
            self.cli(
                f"ukbench/query.{m}",
                ["query", str(folder), *images, *ix, "--method", m, "--top", "10", "--json"],
                folder,
                idx,
            )
        for m in METHODS:
            self.cli(
                f"ukbench/eval.{m}",
                ["eval", str(folder), "--protocol", "ukbench", *ix, "--method", m, "--json"],
                folder,
                idx,
            )

    def holidays(self) -> None:
        folder = self.data / "holidays"
        idx = self.index("holidays")
        ix = ["--index", str(idx)]
        self.cli(
            "holidays/index", ["index", str(folder), *ix, *self.jobs_args(), "--json"], folder, idx
        )
        for m in HOLIDAYS_METHODS:
            self.cli(
                f"holidays/eval.{m}",
                ["eval", str(folder), "--protocol", "holidays", *ix, "--method", m, "--json"],
                folder,
                idx,
            )

    def _copy_classes(self, folder: Path, classes, per_class: int) -> None:
        for c in classes:
            src = sorted(p for p in (self.data / "caltech101" / c).iterdir() if p.is_file())
            (folder / c).mkdir(parents=True)
            for p in src[:per_class]:
                shutil.copyfile(p, folder / c / p.name)  # a copy, never a link

    def caltech4(self) -> None:
        folder = self.work / "caltech4"
        self._copy_classes(folder, CALTECH4, CALTECH4_PER_CLASS)
        idx = self.index("caltech4")
        ix = ["--index", str(idx)]
        for k in ("4", "auto"):
            self.cli(
                f"caltech4/cluster.k{k}",
                ["cluster", str(folder), *ix, "--k", k, *self.jobs_args(), "--json"],
                folder,
                idx,
            )
            self.snap(f"caltech4/after-cluster.k{k}", idx, folder)

    def learned(self) -> None:
        folder = self.work / "learned"
        self._copy_classes(folder, LEARN_CLASSES, LEARN_PER_CLASS)
        idx = self.index("learned")
        ix = ["--index", str(idx)]
        self.cli(
            "learned/index", ["index", str(folder), *ix, *self.jobs_args(), "--json"], folder, idx
        )
        queries = []
        for c in LEARN_CLASSES:
            imgs = _images_in(folder / c)
            queries += [str(imgs[0]), str(imgs[len(imgs) // 2])]
        query = ["query", str(folder), *queries, *ix, "--method", "learned"]
        # the default learner first (what 'simile learn' does), then the boosted ones
        for learner in LEARNERS:
            tag = "" if learner == LEARNERS[0] else f".{learner}"
            extra = [] if learner == LEARNERS[0] else ["--method", learner]
            self.cli(
                f"learned/learn{tag}",
                ["learn", str(folder), *ix, "--from-subfolders", *extra, "--json"],
                folder,
                idx,
            )
            self.snap(f"learned/after-learn{tag}", idx, folder)
            self.cli(
                f"learned/query.learned{tag}",
                [*query, "--top", "10", "--json"],
                folder,
                idx,
            )

    # ------------------------------------------------------------------ all

    def run(self) -> int:
        if self.out.exists() and any(self.out.iterdir()):
            raise SystemExit(f"{self.out} exists and is not empty; choose a new OUTDIR")
        self.out.mkdir(parents=True, exist_ok=True)
        marker = self.work / ".simile_record_work"
        if self.work.exists():
            if any(self.work.iterdir()) and not marker.exists():
                raise SystemExit(f"--work {self.work} is not empty and not ours; not wiping it")
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        marker.touch()
        info = self.check_code()
        print(f"recording {self.code} (engine from {info['engine']}) into {self.out}")
        folders = list(QUICK_FOLDERS if self.quick else ALL_FOLDERS)
        if self.only:
            folders = [f for f in folders if f in self.only]
        t0 = time.perf_counter()
        for name in folders:
            t = time.perf_counter()
            getattr(self, name)()
            self.timings[f"{name}/total"] = {"wall_seconds": round(time.perf_counter() - t, 3)}
        total = time.perf_counter() - t0
        self.timings["total"] = {"wall_seconds": round(total, 3)}
        info.update(
            folders=folders,
            items=self.items,
            failures=self.failures,
            finished=time.strftime("%Y-%m-%d %H:%M:%S"),
        )
        _write_json(self.out / "manifest.json", info)
        _write_json(self.out / "timings.json", self.timings)
        shutil.rmtree(self.work, ignore_errors=True)
        print(
            f"recorded {len(self.items)} items in {total:.0f} s"
            + (f"; FAILED: {', '.join(self.failures)}" if self.failures else "")
        )
        return 1 if self.failures else 0


# ============================================================================ comparing


def _flatten(o: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(o, dict):
        out = {}
        for k in sorted(o):
            out.update(_flatten(o[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(o, list):
        out = {f"{prefix}#len": len(o)}
        for i, v in enumerate(o):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: o}


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _num_diff(pairs: list[tuple[float, float]]) -> tuple[int, float]:
    """Number of values not exactly equal (NaN == NaN), and their max abs difference."""
    n, worst = 0, 0.0
    for a, b in pairs:
        if a == b or (a != a and b != b):
            continue
        n += 1
        d = abs(float(a) - float(b))
        worst = max(worst, d if d == d else float("inf"))
    return n, worst


def _compare_json(a: Any, b: Any, limit: int = 5) -> list[str]:
    """Differences of two JSON values: non-numeric leaves one by one, numbers summarised
    (how many differ, max abs difference) with the first few listed."""
    fa, fb = _flatten(a), _flatten(b)
    lines = []
    for tag, fx, fy in (("A", fa, fb), ("B", fb, fa)):
        only = [f"{k}={fx[k]!r}" for k in fx if k not in fy]
        if only:
            more = f" ... ({len(only)} in all)" if len(only) > limit else ""
            lines.append(f"only in {tag}: {', '.join(only[:limit])}{more}")
    common = [k for k in fa if k in fb]
    other = [k for k in common if not (_is_num(fa[k]) and _is_num(fb[k])) and fa[k] != fb[k]]
    nums = [k for k in common if _is_num(fa[k]) and _is_num(fb[k])]
    for k in other[:limit]:
        lines.append(f"{k}: {fa[k]!r} != {fb[k]!r}")
    if len(other) > limit:
        lines.append(f"... {len(other) - limit} more non-numeric differences")
    n, worst = _num_diff([(fa[k], fb[k]) for k in nums])
    if n:
        first = [k for k in nums if fa[k] != fb[k] and not (fa[k] != fa[k] and fb[k] != fb[k])]
        lines.append(f"numbers: {n} of {len(nums)} not exactly equal, max abs diff {worst:.3g}")
        for k in first[:limit]:
            lines.append(f"  {k}: {fa[k]!r} != {fb[k]!r}")
    return lines


def _compare_query(a: dict, b: dict, limit: int = 3) -> list[str]:
    """Query outputs: hit lists (paths, in order) and scores reported separately."""
    ra, rb = a.get("results", []), b.get("results", [])
    lines = []
    if [r["query"] for r in ra] != [r["query"] for r in rb]:
        return ["queries differ", *_compare_json(a, b)]
    hit_diff, pairs, shown = 0, [], 0
    first_score = None
    for qa, qb in zip(ra, rb, strict=True):
        pa = [h["path"] for h in qa["hits"]]
        pb = [h["path"] for h in qb["hits"]]
        if pa != pb:
            hit_diff += 1
            if shown < limit:
                first = next(
                    (i for i, (x, y) in enumerate(zip(pa, pb, strict=False)) if x != y),
                    min(len(pa), len(pb)),
                )
                lines.append(
                    f"hits of {qa['query']} differ from rank {first + 1}: "
                    f"A {pa[first : first + 3]} B {pb[first : first + 3]}"
                )
                shown += 1
        sb = {h["path"]: h["score"] for h in qb["hits"]}
        for h in qa["hits"]:
            if h["path"] in sb:
                pairs.append((h["score"], sb[h["path"]]))
                if first_score is None and _num_diff(pairs[-1:])[0]:
                    first_score = (
                        f"first score difference: {qa['query']} -> {h['path']}: "
                        f"A {h['score']!r} B {sb[h['path']]!r}"
                    )
    n, worst = _num_diff(pairs)
    rest = _compare_json(
        {k: v for k, v in a.items() if k != "results"},
        {k: v for k, v in b.items() if k != "results"},
    )
    if not hit_diff and not n:
        return rest
    head = [
        f"hit lists: {hit_diff} of {len(ra)} queries differ"
        if hit_diff
        else f"hit lists: identical ({len(ra)} queries)"
    ]
    if n:
        head.append(
            f"scores: {n} of {len(pairs)} (same query and image) not exactly equal, "
            f"max abs diff {worst:.3g}"
        )
        head.append(f"  {first_score}")
    else:
        head.append(f"scores: all {len(pairs)} (same query and image) exactly equal")
    return head + lines + rest


def _compare_output(pa: Path, pb: Path) -> list[str]:
    a, b = _read_json(pa), _read_json(pb)
    lines = []
    if a["returncode"] != b["returncode"]:
        lines.append(f"exit status {a['returncode']} != {b['returncode']}")
    oa, ob = a.get("output"), b.get("output")
    if isinstance(oa, dict) and isinstance(ob, dict) and "results" in oa and "results" in ob:
        lines += _compare_query(oa, ob)
    else:
        lines += _compare_json(oa, ob)
    if a.get("argv") != b.get("argv"):
        lines.append("(note: the command lines differ)")
        if not lines[:-1]:
            lines = []  # the same outputs for different argv are not a difference
    return lines


def _compare_arrays(x: np.ndarray, y: np.ndarray) -> str | None:
    if x.dtype != y.dtype or x.shape != y.shape:
        return f"dtype/shape {x.dtype}{x.shape} != {y.dtype}{y.shape}"
    if x.tobytes() == y.tobytes():
        return None
    if x.dtype.kind in "biuf" and x.size:
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
        with np.errstate(invalid="ignore"):
            d = np.abs(xf - yf)[~same]
        worst = float(np.nanmax(d)) if d.size and not np.all(np.isnan(d)) else float("nan")
        return (
            f"not bit-identical: {int((~same).sum())} of {x.size} values differ, "
            f"max abs diff {worst:.3g}"
        )
    neq = int(np.sum(x != y)) if x.dtype.kind in "USb" else -1
    return f"not bit-identical ({neq} of {x.size} values differ)"


def _compare_npz(pa: Path, pb: Path, limit: int = 5) -> list[str]:
    with np.load(pa, allow_pickle=False) as za, np.load(pb, allow_pickle=False) as zb:
        ka, kb = set(za.files), set(zb.files)
        lines = []
        if ka - kb:
            lines.append(f"arrays only in A: {sorted(ka - kb)[:limit]} ({len(ka - kb)})")
        if kb - ka:
            lines.append(f"arrays only in B: {sorted(kb - ka)[:limit]} ({len(kb - ka)})")
        diffs = []
        for k in sorted(ka & kb):
            d = _compare_arrays(za[k], zb[k])
            if d:
                diffs.append(f"{k}: {d}")
        lines += diffs[:limit]
        if len(diffs) > limit:
            lines.append(f"... {len(diffs) - limit} more arrays differ (of {len(ka & kb)})")
        if not lines:
            return []
        return [f"{len(diffs)} of {len(ka & kb)} arrays not bit-identical", *lines]


def _items(root: Path) -> dict[str, Path]:
    """Item name -> file of a recording (outputs and snapshot files)."""
    out = {}
    for p in sorted((root / "outputs").rglob("*.json")):
        out[p.relative_to(root / "outputs").as_posix().removesuffix(".json")] = p
    for p in sorted((root / "snapshots").rglob("*")):
        if p.is_file():
            out["snapshot:" + p.relative_to(root / "snapshots").as_posix()] = p
    return out


def _known(item: str) -> str | None:
    name = item.removeprefix("snapshot:")
    for pattern, why in KNOWN_NONDETERMINISTIC.items():
        if fnmatch.fnmatchcase(name, pattern):
            return why
    return None


def compare(dir_a: Path, dir_b: Path) -> int:
    ma, mb = _read_json(dir_a / "manifest.json"), _read_json(dir_b / "manifest.json")
    for tag, d, m in (("A", dir_a, ma), ("B", dir_b, mb)):
        dirty = " (uncommitted changes)" if m.get("git_dirty") else ""
        rev = str(m.get("git_rev"))[:12]
        print(f"{tag}: {d}: {m['code']} @ {rev}{dirty}; folders {', '.join(m['folders'])}")
    for key in ("python", "numpy", "cv2", "jobs", "platform"):
        if ma.get(key) != mb.get(key):
            print(f"note: {key} differs: {ma.get(key)!r} != {mb.get(key)!r}")
    ia, ib = _items(dir_a), _items(dir_b)
    both = [f for f in ma["folders"] if f in mb["folders"]]
    if set(ma["folders"]) != set(mb["folders"]):
        print(f"note: the recordings hold different folders: comparing {', '.join(both)} only")

        def keep(item: str) -> bool:
            return item.removeprefix("snapshot:").split("/")[0] in both

        ia = {k: v for k, v in ia.items() if keep(k)}
        ib = {k: v for k, v in ib.items() if keep(k)}
    failed, known, n_same = [], [], 0
    for item in sorted(set(ia) | set(ib), key=lambda s: (s.startswith("snapshot:"), s)):
        if item not in ia or item not in ib:
            lines = [f"recorded only in {'A' if item in ia else 'B'}"]
        elif item.endswith(".npz"):
            lines = _compare_npz(ia[item], ib[item])
        elif item.startswith("snapshot:"):
            lines = _compare_json(_read_json(ia[item]), _read_json(ib[item]))
        else:
            lines = _compare_output(ia[item], ib[item])
        if not lines:
            n_same += 1
            print(f"{item}: identical")
            continue
        why = _known(item)
        if why:
            known.append(item)
            print(f"{item}: DIFFERS (known nondeterministic, see the end)")
        else:
            failed.append(item)
            print(f"{item}: DIFFERS")
        for ln in lines:
            print(f"    {ln}")
    tail = f", {len(known)} differ but are known nondeterministic" if known else ""
    print(f"\n{n_same} identical, {len(failed)} differ{tail}")
    for pattern, why in KNOWN_NONDETERMINISTIC.items():
        print(f"known nondeterministic (not counted): {pattern}: {why}")
    return 1 if failed else 0


# ============================================================================ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record the CLI outputs of a checkout")
    r.add_argument("outdir", metavar="OUTDIR")
    r.add_argument("--quick", action="store_true", help="demo folder and UKBench only")
    r.add_argument("--code", default=str(REPO), help=f"checkout to run (default {REPO})")
    r.add_argument("--python", default=sys.executable, help="interpreter (default: this one)")
    r.add_argument("--jobs", type=int, default=2, help="--jobs of index and cluster (2)")
    r.add_argument("--data", default=str(DEFAULT_DATA), help="dev data (../shared/data)")
    r.add_argument("--only", metavar="F,...", help=f"record these of {', '.join(ALL_FOLDERS)}")
    r.add_argument(
        "--work", default=str(DEFAULT_WORK), help="scratch folder for copied photos (wiped)"
    )
    c = sub.add_parser("compare", help="compare two recordings")
    c.add_argument("dir_a", metavar="DIR_A")
    c.add_argument("dir_b", metavar="DIR_B")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        return Recorder(args).run()
    return compare(Path(args.dir_a), Path(args.dir_b))


if __name__ == "__main__":
    sys.exit(main())
