"""One quality table for every change: every dev benchmark through the product's commands.

Run by hand (never by pytest; needs ``../shared/data``)::

    python tests/benchmarks/quality.py --quick            # about 3 minutes
    python tests/benchmarks/quality.py                    # everything (about 12 minutes)
    # a change of a default: the same table before and after, from two worktrees
    python tests/benchmarks/quality.py --code /work/wt-before --json /tmp/before.json
    python tests/benchmarks/quality.py --code /work/wt-after --json /tmp/after.json
    python tests/benchmarks/quality.py --compare /tmp/before.json /tmp/after.json

Options: ``--only ukbench,caltech-8c`` (task names containing any of these), ``--no-brute``,
``--jobs N`` (of ``simile index``), ``--learn-classes 10,20,50 --learn-seeds 0``,
``--links hard`` (hard links instead of symbolic ones: needed to compare with checkouts
whose folder scan still resolved symbolic links to their targets -- their ETH-80
retrieval fails and their grouping sees the class folders in the paths), ``--fresh``.

Every number comes from the ``simile`` commands run as separate processes
(``python -m app ...`` with ``PYTHONPATH=<--code>``, run from a folder outside any
checkout; the imported ``engine`` and ``app`` are checked to come from ``--code``), so a
table measures exactly what a user of that checkout gets, and two worktrees give a
before / after pair. This script only builds folders of links under ``--work`` (never
copies an image), runs the commands and scores their output against the ground truth.
A warning heads the table when the checkout's files changed during the run.

Tasks
-----
Retrieval (``simile index``, then ``simile eval --protocol P --method M --json`` for
``M`` in hybrid, vocabulary, uniform, wta; the table shows its N-S score, mAP (query
excluded, every image with a relevant item is a query), precision@10 and 1-NN accuracy):

- ``ukbench``: UKBench dev (500 images, group = number // 4).
- ``holidays``: Holidays dev (421 images, group = number // 100).
- ``eth80-retrieval``: ETH-80 dev, ``--protocol folders`` on a folder of
  ``<class>/<object>__<file>`` links, so the label is the class (the first folder).

(``eval`` ranks the whole collection, so ``wta``, whose candidates are then every image,
scores exactly as ``vocabulary``.)

Each retrieval set also gets two brute-force reference rows on the same features (what
the index extracts: ``engine.collection.FEATURE_KWARGS`` given to
``engine.features.keypoints.extract_features`` of the checkout, i.e. <= 500 RootSIFT,
longest side <= 1,024): every image matched exhaustively against every other one (exact
nearest neighbours, Lowe's ratio test at 0.8), scored by the number of ratio-test
matches ("votes"), and by the inliers of a homography fitted by
``cv2.findHomography(..., cv2.USAC_MAGSAC, 6.0)`` ("RANSAC"; ties broken by the votes).
Brute force takes minutes; its scores are cached per feature content, so it is computed
again only when the extracted features change.

Grouping (``simile cluster FOLDER --k K|auto --json`` with its default settings, on a
flat folder of links whose names are a random permutation, so neither names nor order
reveal a class): accuracy under the best one-to-one matching of groups to classes
(``scipy.optimize.linear_sum_assignment``; with automatic k, unmatched groups or classes
count as errors), NMI and ARI (``sklearn.metrics``), with k given and automatic; "k hit"
= ``|k_found - k_true| <= 1``. Families:

- ``caltech4``: the Caltech-4 discovery classes (Faces_easy, airplanes, Motorbikes,
  car_side); full mode.
- ``caltech-4c-sS`` / ``caltech-8c-sS`` / ``caltech-20c-sS``: random 4, 8 and 20
  classes of the Caltech-101 dev split (``BACKGROUND_Google`` and ``Faces``, the uncropped
  copy of ``Faces_easy``, left out), drawn by ``numpy.random.default_rng([N, S])``.
  Quick mode: 4 classes, seeds 0-2; full mode: seeds 0-4 for 4 and 8 classes, 0-2 for 20
  (``--grouping-seeds 15,10,5``: seeds 0-14, 0-9 and 0-4).
- ``eth80``: ETH-80 dev (400 images), k = 8.
- ``ukbench-12o-sS``: small folders of small groups, 12 random UKBench dev objects (4
  photos each, 48 photos), drawn by ``default_rng([12, S, 7])``.
- ``holidays-10s-sS``: 10 random Holidays dev scenes among those with at least 2 photos
  (2-5 photos each), drawn by ``default_rng([10, S, 11])``.
- ``ukbench-20o-sS`` / ``holidays-18s-sS``: the same with 20 objects (80 photos) and 18
  scenes (about 50 photos), ``default_rng([20, S, 7])`` / ``default_rng([18, S, 11])``:
  folders of more small subjects than the eigengap's range (k <= 12).
  Full mode: seeds 0-4 of each (``--small-seeds N``); quick mode: seeds 0-1.
- ``mixed-sS``: a folder that mixes kinds of photo, as a person's does: the 18 Holidays
  scenes of ``holidays-18s-sS`` with 12 photos each of 3 random Caltech-101 classes and 8
  each of 2 ETH-80 objects, drawn by ``default_rng([99, S])``; k = 23. Added 2026-11-29,
  after a change that raised every other family lowered these (one mean for a folder of
  several worlds; ``engine/cluster/semantic.py``). Seeds as the small folders.

(``simile cluster --k auto`` tries k <= ``--k-max``, 30 by default since 2026-11-28 and 12
before; above 12 only by the stability check of finer partitions, which needs groups of at
most 10 photos on average, so the 20-class subsets never score a k hit.)

Learned similarity (full mode; the protocol of ``bench_learn_product.py``, through the
commands): ``N`` random classes among the Caltech-101 dev classes with >= 30 images
(``bench_learn.subset``), every class split in halves
(``train_test_split_by_class(y, 0.5, random_state=seed)``, re-implemented here with the
same random draws), training images linked into one sub-folder per class, test images
into the folder root (unlabelled for learning); ``simile index``, ``simile learn
--from-subfolders``, then every test image queries with ``simile query --method learned``
and ``--method vocabulary`` (``--top`` = all): precision@10 and mAP over the test
images (ties broken at random, as in ``bench_learn``).

Summary: mean over the retrieval sets of each method's mAP; for grouping, the mean over
task families (each family the mean over its seeds) and the worst task; the auto-k hit
rate; the learned / vocabulary precision@10 ratio. Choose settings on these means, never
on one set.

Caches (under ``--work``, default ``/tmp/quality``): ``sets/`` folders of links;
``idx/<code version>/<links>/<task>/`` indexes, where the code version is a hash of every
file of ``engine/`` and ``app/`` (and ``pyproject.toml``) of the checkout, so a rerun on
the same code reuses its indexes (the "index s" column then says ``cached``; the grouping's
dense features cached in them make its "k s" shorter too) and any code change rebuilds
them; ``features/<code version>/`` the brute-force features; ``brute/`` the brute-force
score matrices (keyed by feature content). Only the ``KEEP_VERSIONS`` most recently used
code versions are kept. ``--fresh`` rebuilds this checkout's indexes.

Measured on the 2-core dev machine (shared, load 2-5), indexes built afresh and the
brute-force scores cached: ``--quick`` 141-193 s, full mode 722 s (learn-50c alone 290 s),
before the small folders joined (4-8 s each with their index: 8 tasks, about 1 min more in
``--quick``; 20 tasks, about 2 min in full).
Computing the brute-force scores the first time adds about 220 s for UKBench, 175 s for
Holidays and 17 s for ETH-80.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
RETRIEVAL_METHODS = ("hybrid", "vocabulary", "uniform", "wta")
CALTECH4 = ("Faces_easy", "airplanes", "Motorbikes", "car_side")
CALTECH_EXCLUDED = ("BACKGROUND_Google", "Faces")  # Faces: the same photos as Faces_easy
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".bmp", ".tif", ".tiff"}
RATIO = 0.8  # Lowe's ratio test of the brute-force reference
RANSAC_THRESHOLD = 6.0  # pixels, as the product's verification (engine.index.geometry)
RANSAC_CONFIDENCE = 0.995
COMMAND_TIMEOUT = 3600.0
KEEP_VERSIONS = 4  # code versions whose indexes and features stay cached


class TaskError(RuntimeError):
    """A command failed; the message is what the table shows."""


# ------------------------------------------------------------------------------ the code
def code_version(code: Path) -> str:
    """A hash of every file of ``engine/`` and ``app/`` (and ``pyproject.toml``) of the
    checkout: names and contents, so edits, new and deleted files all change it."""
    h = hashlib.sha256()
    files = [code / "pyproject.toml"]
    for top in ("engine", "app"):
        files += [
            p
            for p in (code / top).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
    for p in sorted(files):
        if p.is_file():
            h.update(str(p.relative_to(code)).encode() + b"\0")
            h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class Runner:
    """Runs ``python -m app ...`` of one checkout: ``PYTHONPATH=<code>``, working directory
    ``<work>`` (``python -m`` puts the working directory first on ``sys.path``, so it must
    not be a checkout)."""

    def __init__(self, code: Path, work: Path, jobs: int | None):
        self.code = code
        self.work = work
        self.jobs = jobs
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = str(code)
        self.env.pop("PYTHONHOME", None)
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the checkouts as they are

    def python(self, argv: list[str], *, timeout: float = COMMAND_TIMEOUT):
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, *argv],
                cwd=self.work,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise TaskError(f"timed out after {timeout:.0f}s: {' '.join(argv[:4])}") from None
        secs = time.perf_counter() - t0
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            raise TaskError(f"{' '.join(argv[:4])}: {last}")
        return proc.stdout, secs

    def app(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> tuple[dict, float]:
        """Run one ``simile`` command with ``--json``; (its last JSON line, seconds)."""
        out, secs = self.python(["-m", "app", *args, "--json"], timeout=timeout)
        for line in reversed(out.strip().splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "progress" not in obj:
                return obj, secs
        raise TaskError(f"{args[0]}: no JSON result in its output")

    def imported_from(self) -> dict[str, str]:
        code = "import engine, app, json; print(json.dumps([engine.__file__, app.__file__]))"
        out, _ = self.python(["-c", code], timeout=120)
        eng, app = json.loads(out.strip().splitlines()[-1])
        root = os.path.realpath(self.code)
        for f in (eng, app):
            if not os.path.realpath(f).startswith(root + os.sep):
                raise SystemExit(f"--code {self.code}: python imports {f}, not from there")
        return {"engine": eng, "app": app}


# ----------------------------------------------------------------------------- datasets
def image_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )


def caltech_classes() -> dict[str, list[Path]]:
    root = DATA / "caltech101"
    return {d.name: image_files(d) for d in sorted(root.iterdir()) if d.is_dir()}


#: How the task folders point at the data: "sym" (symbolic links, the default) or "hard"
#: (hard links: the same folder for every checkout, also for those whose scan resolved
#: symbolic links to their targets; needs ``--work`` on the data's file system).
LINKS = "sym"


def link_folder(work: Path, name: str, items: list[tuple[Path, str]]) -> Path:
    """``work/sets/<name>/<rel>`` -> ``src`` links for ``items`` = [(src, rel)]
    (``sets-hard/`` with ``--links hard``); rebuilt only when the list changed (the
    manifest sits beside the folder)."""
    sets = work / ("sets" if LINKS == "sym" else "sets-hard")
    folder, manifest = sets / name, sets / f"{name}.json"
    want = [[str(s), r] for s, r in items]
    if folder.is_dir() and manifest.is_file() and json.loads(manifest.read_text()) == want:
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for src, rel in items:
        dst = folder / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if LINKS == "sym":
            os.symlink(src, dst)
        else:
            try:
                os.link(src, dst)
            except OSError as exc:
                raise SystemExit(f"--links hard: {exc}; use --links sym") from None
    manifest.write_text(json.dumps(want))
    return folder


def shuffled_flat(
    work: Path, name: str, classes: dict[str, list[Path]], seed
) -> tuple[Path, dict[str, int], list[str]]:
    """A flat folder of links named by a random permutation; (folder, link name ->
    class index, class names)."""
    names = sorted(classes)
    srcs = [(p, c) for c, n in enumerate(names) for p in classes[n]]
    perm = np.random.default_rng(seed).permutation(len(srcs))
    items, truth = [], {}
    for rank, k in enumerate(perm):
        src, c = srcs[k]
        link = f"{rank:05d}{src.suffix.lower()}"
        items.append((src, link))
        truth[link] = c
    return link_folder(work, name, items), truth, names


def eth80_classes() -> dict[str, list[Path]]:
    root = DATA / "eth80"
    return {d.name: image_files(d) for d in sorted(root.iterdir()) if d.is_dir()}


# ------------------------------------------------------------------------------ metrics
def ranked_relevance(S: np.ndarray, labels: np.ndarray, exclude_self: bool) -> np.ndarray:
    """As ``engine.metrics.ranked_relevance`` (square protocol; stable sort)."""
    n = S.shape[0]
    order = np.argsort(-S, axis=1, kind="stable")
    if exclude_self:
        order = order[order != np.arange(n)[:, None]].reshape(n, n - 1)
    return labels[order] == labels[:, None]


def retrieval_metrics(S: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The ``simile eval`` measures of a full score matrix (the same definitions)."""
    rel_self = ranked_relevance(S, labels, False)
    rel = ranked_relevance(S, labels, True)
    hits = np.cumsum(rel, axis=1)
    n_rel = rel.sum(axis=1)
    ok = n_rel > 0
    ap = np.where(rel, hits / np.arange(1, rel.shape[1] + 1), 0.0).sum(axis=1)[ok] / n_rel[ok]
    k = min(10, S.shape[0] - 1)
    return {
        "ns_score": float(rel_self[:, :4].sum(axis=1).mean()),
        "map": float(ap.mean()) if ap.size else float("nan"),
        "precision_at_10": float(rel[:, :k].mean()),
        "knn_accuracy_1": float(rel[:, 0].mean()),
    }


_JITTER = np.random.default_rng(12345)


def untie(S: np.ndarray) -> np.ndarray:
    """Random tie-breaking far below any real difference of scores (as bench_learn)."""
    span = float(np.ptp(S[np.isfinite(S)])) if np.isfinite(S).any() else 1.0
    return S + 1e-9 * (span or 1.0) * _JITTER.random(S.shape)


def p10_map(S: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    m = retrieval_metrics(untie(S), labels)
    return m["precision_at_10"], m["map"]


def grouping_scores(truth: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Accuracy under the best one-to-one group <-> class matching, NMI, ARI."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    _, t = np.unique(truth, return_inverse=True)
    _, p = np.unique(pred, return_inverse=True)
    C = np.zeros((t.max() + 1, p.max() + 1), np.int64)
    np.add.at(C, (t, p), 1)
    r, c = linear_sum_assignment(-C)
    return {
        "accuracy": float(C[r, c].sum() / len(t)),
        "nmi": float(normalized_mutual_info_score(t, p)),
        "ari": float(adjusted_rand_score(t, p)),
    }


# -------------------------------------------------------------------------- brute force
EXTRACT_SCRIPT = r'''
"""Written by tests/benchmarks/quality.py: the index's features of a list of images."""
import json, sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np


def one(path):
    try:
        from engine.collection import FEATURE_KWARGS
    except ImportError:
        from engine.index.searcher import FEATURE_KWARGS
    try:
        from engine.features.keypoints import extract_features
    except ImportError:  # older layouts
        from engine.features import extract_features

    try:
        f = extract_features(path, **FEATURE_KWARGS)
        return np.asarray(f.descriptors, np.float32), np.asarray(f.xy, np.float32), ""
    except Exception as exc:  # an unreadable image has no features
        return np.zeros((0, 128), np.float32), np.zeros((0, 2), np.float32), repr(exc)


if __name__ == "__main__":
    paths, out, jobs = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
    with ProcessPoolExecutor(jobs) as ex:
        res = list(ex.map(one, paths, chunksize=8))
    off = np.concatenate([[0], np.cumsum([len(r[0]) for r in res])])
    np.savez(out, paths=np.array(paths), offsets=off,
             desc=np.concatenate([r[0] for r in res]), xy=np.concatenate([r[1] for r in res]))
    import engine
    try:
        from engine.collection import FEATURE_KWARGS
    except ImportError:
        from engine.index.searcher import FEATURE_KWARGS
    print(json.dumps({"engine": engine.__file__, "kwargs": repr(FEATURE_KWARGS),
                      "failed": [r[2] for r in res if r[2]]}))
'''


def brute_features(runner: Runner, version: str, name: str, paths: list[Path]):
    """(descriptor sets, position sets, seconds or None when cached) of ``paths``,
    extracted by the checkout's own feature code."""
    d = runner.work / "features" / version
    d.mkdir(parents=True, exist_ok=True)
    file = d / f"{name}.npz"
    secs = None
    if not file.is_file():
        script = runner.work / "extract_features.py"
        script.write_text(EXTRACT_SCRIPT)
        lst = d / f"{name}.paths.json"
        lst.write_text(json.dumps([str(p) for p in paths]))
        tmp = d / f"{name}.tmp.npz"
        _, secs = runner.python([str(script), str(lst), str(tmp), str(runner.jobs or 2)])
        tmp.rename(file)
    z = np.load(file, allow_pickle=False)
    if list(z["paths"]) != [str(p) for p in paths]:
        file.unlink()
        return brute_features(runner, version, name, paths)
    off, desc, xy = z["offsets"], z["desc"], z["xy"]
    n = len(paths)
    return (
        [desc[off[i] : off[i + 1]] for i in range(n)],
        [xy[off[i] : off[i + 1]] for i in range(n)],
        secs,
    )


def brute_force_scores(descs: list[np.ndarray], xys: list[np.ndarray], log) -> tuple:
    """(votes, inliers) (n, n) matrices: row i = image i matched against every image j
    (exact nearest neighbours of i's descriptors among j's, Lowe ratio test), votes =
    matches passing the test, inliers = those of a MAGSAC homography.

    One matrix product per unordered pair gives both directions: the images are sorted by
    feature count, and image i is multiplied with blocks of the later images, padded to
    the block's largest count (never winning: for non-negative descriptors such as
    (Root)SIFT a pad points away from every descriptor; otherwise pads are masked)."""
    import cv2

    n = len(descs)
    counts = np.array([len(d) for d in descs])
    order = np.argsort(counts, kind="stable")
    dim = next((d.shape[1] for d in descs if d.ndim == 2 and d.shape[1]), 128)
    nonneg = all(d.min() >= 0 for d in descs if len(d))
    pad = -np.ones(dim, np.float32) / np.sqrt(dim)
    r2 = RATIO * RATIO
    matches: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    t0 = time.perf_counter()
    budget = 24_000_000  # elements of a (m_i, B, P) product block (~100 MB)
    for pos in range(n):
        i = int(order[pos])
        A = np.ascontiguousarray(descs[i], np.float32)
        mi = len(A)
        start = pos + 1
        while mi and start < n:
            # a block of later images: B of them, padded to the largest count P
            stop = start + 1
            while stop < n and mi * (stop + 1 - start) * counts[order[stop]] <= budget:
                stop += 1
            block = [int(j) for j in order[start:stop]]
            P = max(2, int(counts[block].max()))
            Bd = np.tile(pad, (len(block), P, 1))
            valid = np.zeros((len(block), P), bool)
            for b, j in enumerate(block):
                Bd[b, : counts[j]] = descs[j]
                valid[b, : counts[j]] = True
            G = (A @ Bd.reshape(-1, dim).T).reshape(mi, len(block), P)
            if not nonneg:
                G[:, ~valid] = -np.inf
            # j -> i: the two best of i's descriptors for every descriptor of j (axis 0)
            flat = G.reshape(mi, -1)
            best1 = flat[0].copy()
            best2 = np.full_like(best1, -np.inf)
            arg = np.zeros(best1.shape, np.int64)
            for k in range(1, mi):
                g = flat[k]
                gt = g > best1
                np.maximum(best2, np.minimum(g, best1), out=best2)
                np.maximum(best1, g, out=best1)
                np.copyto(arg, k, where=gt)
            # i -> j: the two best of j's descriptors for every descriptor of i (axis 2)
            nn = G.argmax(axis=2)  # (mi, b)
            g1 = np.take_along_axis(G, nn[..., None], axis=2)[..., 0]
            np.put_along_axis(G, nn[..., None], -np.inf, axis=2)
            g2 = G.max(axis=2)
            # unit vectors: squared distance = 2 - 2 dot; the ratio test needs a second
            # neighbour (an image with one feature would match everything)
            keep_r = (2 - 2 * g1 < r2 * (2 - 2 * g2)) & (counts[block] >= 2)
            keep_c = ((2 - 2 * best1 < r2 * (2 - 2 * best2)).reshape(len(block), P)) & valid
            keep_c &= mi >= 2
            arg = arg.reshape(len(block), P)
            for b, j in enumerate(block):
                a = np.flatnonzero(keep_r[:, b])
                matches[i, j] = (a, nn[a, b])
                c = np.flatnonzero(keep_c[b])
                matches[j, i] = (c, arg[b, c])
            start = stop
        if log and (pos + 1) % 100 == 0:
            log(f"    brute force: matched {pos + 1}/{n} images, {time.perf_counter() - t0:.0f}s")
    votes = np.zeros((n, n))
    inliers = np.zeros((n, n))
    for (i, j), (a, b) in matches.items():
        votes[i, j] = len(a)
        if len(a) >= 4:
            H, mask = cv2.findHomography(
                xys[i][a].astype(np.float64),
                xys[j][b].astype(np.float64),
                cv2.USAC_MAGSAC,
                RANSAC_THRESHOLD,
                confidence=RANSAC_CONFIDENCE,
            )
            if H is not None and mask is not None:
                inliers[i, j] = float(mask.sum())
    if log:
        log(f"    brute force: matching and RANSAC {time.perf_counter() - t0:.0f}s")
    np.fill_diagonal(votes, np.inf)  # the query itself comes first (N-S counts it)
    np.fill_diagonal(inliers, np.inf)
    return votes, inliers


def brute_force(runner: Runner, version: str, name: str, paths: list[Path], labels, log):
    """The two reference rows of a retrieval set (cached per feature content)."""
    descs, xys, t_feat = brute_features(runner, version, name, paths)
    h = hashlib.sha256(f"{RATIO} {RANSAC_THRESHOLD} {RANSAC_CONFIDENCE} homography v2".encode())
    for d, x in zip(descs, xys, strict=True):
        h.update(d.tobytes() + b"|" + x.tobytes() + b"#")
    file = runner.work / "brute" / f"{name}_{h.hexdigest()[:16]}.npz"
    t_match = None
    if file.is_file():
        z = np.load(file, allow_pickle=False)
        votes, inliers = z["votes"], z["inliers"]
    else:
        t0 = time.perf_counter()
        votes, inliers = brute_force_scores(descs, xys, log)
        t_match = time.perf_counter() - t0
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, votes=votes, inliers=inliers)
    n_feat = float(np.mean([len(d) for d in descs]))
    rows = []
    for label, S in (
        ("brute force: votes", votes),
        ("brute force: RANSAC", inliers + votes / (votes[np.isfinite(votes)].max() + 1.0)),
    ):
        rows.append(
            {
                "method": label,
                **retrieval_metrics(S, labels),
                "seconds": t_match,
                "feature_seconds": t_feat,
                "features_per_image": n_feat,
            }
        )
    return rows


# ---------------------------------------------------------------------------- the tasks
@dataclass
class Context:
    runner: Runner
    version: str
    fresh: bool
    brute: bool
    log: Any
    landmarks: float | None = None  # --grouping-landmarks

    def index(self, name: str, folder: Path) -> tuple[Path, float | None]:
        """``simile index`` of ``folder`` into this code version's cache; (index dir,
        seconds, or None when the cached index was reused)."""
        root = self.runner.work / "idx" / self.version / LINKS
        idx, marker = root / name, root / f"{name}.built"
        if marker.is_file() and idx.is_dir() and not self.fresh:
            return idx, None
        if idx.exists():
            shutil.rmtree(idx)
        marker.unlink(missing_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        jobs = ["--jobs", str(self.runner.jobs)] if self.runner.jobs else []
        out, secs = self.runner.app("index", str(folder), "--index", str(idx), *jobs)
        if out.get("failed"):
            self.log(f"    {name}: {len(out['failed'])} image(s) failed to index")
        marker.write_text(json.dumps(out)[:10_000])
        return idx, secs


def retrieval_task(ctx: Context, name: str, folder: Path, protocol: str, labels_of) -> dict:
    res: dict[str, Any] = {"kind": "retrieval", "task": name, "protocol": protocol, "rows": []}
    t0 = time.perf_counter()
    try:
        idx, res["index_seconds"] = ctx.index(name, folder)
    except TaskError as exc:
        res["error"] = str(exc)
        return res
    for method in RETRIEVAL_METHODS:
        row: dict[str, Any] = {"method": method}
        try:
            out, secs = ctx.runner.app(
                "eval", str(folder), "--index", str(idx), "--protocol", protocol,
                "--method", method,
            )  # fmt: skip
            row.update(out)
            row["seconds"] = secs
            res["n_images"] = out.get("n_images")
        except TaskError as exc:
            row["error"] = str(exc)
        res["rows"].append(row)
        ctx.log(f"    {name} {method}: {_short(row)}")
    if ctx.brute:
        paths = image_files(folder)
        try:
            for row in brute_force(
                ctx.runner, ctx.version, name, paths, labels_of(paths), ctx.log
            ):
                res["rows"].append(row)
                ctx.log(f"    {name} {row['method']}: {_short(row)}")
        except TaskError as exc:
            res["rows"].append({"method": "brute force", "error": str(exc)})
    res["seconds"] = time.perf_counter() - t0
    return res


def _short(row: dict) -> str:
    if "error" in row:
        return "FAILED " + row["error"]
    return f"mAP {row.get('map', float('nan')):.4f} N-S {row.get('ns_score', float('nan')):.3f}"


def grouping_task(
    ctx: Context, name: str, family: str, folder: Path, truth: dict[str, int], n_classes: int
) -> dict:
    res: dict[str, Any] = {
        "kind": "grouping",
        "task": name,
        "family": family,
        "n_images": len(truth),
        "k_true": n_classes,
    }
    t0 = time.perf_counter()
    try:
        idx, res["index_seconds"] = ctx.index(name, folder)
    except TaskError as exc:
        res["error"] = str(exc)
        return res
    y = np.array([truth[k] for k in sorted(truth)])
    for key, k in (("given", str(n_classes)), ("auto", "auto")):
        part: dict[str, Any] = {}
        try:
            extra = []
            if ctx.landmarks is not None:  # Nystrom mode forced, F n landmarks (60 or more)
                m = min(len(truth) - 1, max(60, round(ctx.landmarks * len(truth))))
                extra = ["--landmarks", str(m)]
            out, secs = ctx.runner.app(
                "cluster", str(folder), "--index", str(idx), "--k", k, *extra
            )
            # members by the file they show: a checkout may report a link or its target
            name_of = {os.path.realpath(folder / n): n for n in truth}
            group_of = {}
            for g, c in enumerate(out["clusters"]):
                for m in c["members"]:
                    n = name_of.get(os.path.realpath(os.path.join(folder, m)))
                    if n is not None:
                        group_of[n] = g
            missing = [n for n in sorted(truth) if n not in group_of]
            # an image left out of every group is a group of its own (always wrong)
            pred = np.array(
                [group_of.get(n, -1 - i) for i, n in enumerate(sorted(truth))], np.int64
            )
            part = {
                **grouping_scores(y, pred),
                "k_found": int(out["k"]),
                "k_reason": out.get("k_reason", ""),
                "missing": len(missing),
                "seconds": secs,
            }
        except (TaskError, KeyError, TypeError) as exc:
            part = {"error": str(exc)}
        res[key] = part
        ctx.log(
            f"    {name} k={k}: "
            + (
                f"acc {part['accuracy']:.3f} NMI {part['nmi']:.3f} ARI {part['ari']:.3f} "
                f"k {part['k_found']} ({part['seconds']:.1f}s)"
                if "error" not in part
                else "FAILED " + part["error"]
            )
        )
    res["seconds"] = time.perf_counter() - t0
    return res


def learn_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``engine.learn.train_test_split_by_class(y, 0.5, random_state=seed)`` (the same
    random draws), re-implemented so every checkout is scored on the same split."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y[y >= 0]):
        perm = rng.permutation(np.flatnonzero(y == c))
        k = max(1, round(len(perm) * 0.5))
        test.append(perm[:k])
        train.append(perm[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def learn_subset(labels: np.ndarray, n_classes: int, seed: int):
    """``bench_learn.subset``: ``n_classes`` random classes among those with >= 30 images."""
    counts = np.bincount(labels)
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(np.flatnonzero(counts >= 30), n_classes, replace=False))
    idx = np.flatnonzero(np.isin(labels, chosen))
    return idx, np.searchsorted(chosen, labels[idx])


def learned_task(ctx: Context, n_classes: int, seed: int) -> dict:
    name = f"learn-{n_classes}c-s{seed}"
    res: dict[str, Any] = {"kind": "learned", "task": name}
    t0 = time.perf_counter()
    classes = {n: v for n, v in caltech_classes().items() if n != "BACKGROUND_Google"}
    names = sorted(classes)
    paths = [p for n in names for p in classes[n]]
    labels = np.array([c for c, n in enumerate(names) for _ in classes[n]])
    idx, y = learn_subset(labels, n_classes, seed)
    train, test = learn_split(y, seed)
    sub_names = [names[c] for c in np.unique(labels[idx])]
    items = [(paths[idx[k]], f"{sub_names[y[k]]}/{paths[idx[k]].name}") for k in train]
    perm = np.random.default_rng(seed).permutation(len(test))
    test_rel = [""] * len(test)
    for rank, t in enumerate(perm):
        src = paths[idx[test[t]]]
        test_rel[t] = f"test_{rank:04d}{src.suffix.lower()}"
        items.append((src, test_rel[t]))
    folder = link_folder(ctx.runner.work, name, items)
    yte = y[test]
    res.update(n_train=len(train), n_test=len(test))
    try:
        index, res["index_seconds"] = ctx.index(name, folder)
        out, res["learn_seconds"] = ctx.runner.app(
            "learn", str(folder), "--index", str(index), "--from-subfolders"
        )
        res["learn"] = out
        queries = [str(folder / r) for r in test_rel]
        row = {os.path.realpath(q): i for i, q in enumerate(queries)}  # links or targets
        n_all = len(items)
        for method in ("learned", "vocabulary"):
            out, secs = ctx.runner.app(
                "query", str(folder), *queries, "--index", str(index), "--method", method,
                "--top", str(n_all),
            )  # fmt: skip
            S = np.full((len(queries), len(queries)), -np.inf)
            real: dict[str, str] = {}  # realpath is slow: once per image, not per hit
            for i, r in enumerate(out["results"]):
                for h in r["hits"]:
                    p = h["path"]
                    if p not in real:
                        real[p] = os.path.realpath(os.path.join(folder, p))
                    j = row.get(real[p])
                    if j is not None:
                        S[i, j] = h["score"]
            np.fill_diagonal(S, np.inf)
            if np.isneginf(S).any():
                res.setdefault("notes", []).append(
                    f"{method}: {int(np.isneginf(S).sum())} test pairs missing from the rankings"
                )
            finite = S[np.isfinite(S)]
            S[np.isneginf(S)] = (finite.min() - 1.0) if finite.size else -1.0
            p10, mAP = p10_map(S, yte)
            res[method] = {"p10": p10, "map": mAP, "seconds": secs}
            ctx.log(f"    {name} {method}: P@10 {p10:.3f} mAP {mAP:.3f} ({secs:.1f}s)")
    except (TaskError, KeyError, TypeError) as exc:
        res["error"] = str(exc)
        ctx.log(f"    {name}: FAILED {exc}")
    res["seconds"] = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------------------- tables
def _f(v, fmt: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return format(v, fmt)


def _secs(v) -> str:
    return "cached" if v is None else f"{v:.1f}"


def retrieval_table(results: list[dict]) -> tuple[list[str], dict]:
    lines = [
        "| task | method | N-S | mAP | P@10 | 1-NN | s/query | seconds | index s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    per_method: dict[str, list[dict]] = {}
    notes: list[str] = []
    for r in results:
        if "error" in r:
            lines.append(f"| {r['task']} | FAILED | | | | | | | |")
            notes.append(f"- {r['task']}: FAILED: {r['error']} (left out of the means)")
            continue
        label = f"{r['task']} ({r.get('n_images', '?')})"
        for k, row in enumerate(r["rows"]):
            idx = _secs(r.get("index_seconds")) if k == 0 else ""
            if "error" in row:
                lines.append(f"| {label} | {row['method']} | FAILED | | | | | | {idx} |")
                notes.append(f"- {r['task']}, {row['method']}: FAILED: {row['error']}")
                continue
            per_method.setdefault(row["method"], []).append(row)
            spq = row.get("seconds_per_query")
            secs = row.get("seconds")
            if row["method"].startswith("brute") and secs is None:
                secs_s = "cached"
            else:
                secs_s = _f(secs, ".1f")
            lines.append(
                f"| {label} | {row['method']} | {_f(row.get('ns_score'))} | "
                f"{_f(row.get('map'), '.4f')} | {_f(row.get('precision_at_10'))} | "
                f"{_f(row.get('knn_accuracy_1'))} | "
                f"{_f(None if spq is None else 1e3 * spq, '.1f') + (' ms' if spq else '')} | "
                f"{secs_s} | {idx} |"
            )
    n_sets = len([r for r in results if "error" not in r])
    summary = {}
    for method, rows in per_method.items():
        if len(rows) != n_sets:
            notes.append(f"- {method}: no mean (it failed on {n_sets - len(rows)} set(s))")
            continue
        summary[method] = {
            key: float(np.mean([row[key] for row in rows]))
            for key in ("map", "precision_at_10", "knn_accuracy_1")
        }
        lines.append(
            f"| **mean of {n_sets} sets** | {method} | | **{summary[method]['map']:.4f}** | "
            f"{summary[method]['precision_at_10']:.3f} | "
            f"{summary[method]['knn_accuracy_1']:.3f} | | | |"
        )
    if notes:
        lines += ["", *notes]
    return lines, summary


def grouping_table(results: list[dict]) -> tuple[list[str], dict]:
    lines = [
        "| task | images | k | acc | NMI | ARI | auto: k | acc | NMI | ARI "
        "| k s | auto s | index s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    families: dict[str, list[dict]] = {}
    notes: list[str] = []
    for r in results:
        families.setdefault(r["family"], []).append(r)
        g, a = r.get("given", {}), r.get("auto", {})
        if "error" in r:
            notes.append(f"- {r['task']}: FAILED: {r['error']}")
            lines.append(f"| {r['task']} | FAILED | | | | | | | | | | | |")
            continue
        cells = []
        for part, key in ((g, "given"), (a, "auto")):
            pre = [str(part.get("k_found", "-"))] if key == "auto" else []
            if "error" in part:
                notes.append(f"- {r['task']}, k {key}: FAILED: {part['error']}")
                cells.append(" | ".join([*pre, "FAILED", "-", "-"]))
                continue
            if part.get("missing"):
                notes.append(
                    f"- {r['task']}, k {key}: {part['missing']} images in no group "
                    "(scored as wrong)"
                )
            cells.append(
                " | ".join([*pre, _f(part["accuracy"]), _f(part["nmi"]), _f(part["ari"])])
            )
        lines.append(
            f"| {r['task']} | {r['n_images']} | {r['k_true']} | {cells[0]} | {cells[1]} | "
            f"{_f(g.get('seconds'), '.1f')} | {_f(a.get('seconds'), '.1f')} | "
            f"{_secs(r.get('index_seconds'))} |"
        )
    fam_means: dict[str, dict[str, float]] = {}
    worst: dict[str, float] = {}
    for fam, rs in families.items():
        ok = [r for r in rs if "error" not in r.get("given", {"error": 1})]
        ok_a = [r for r in rs if "error" not in r.get("auto", {"error": 1})]
        if not ok or not ok_a:
            continue
        m = {f"{key}_given": float(np.mean([r["given"][key] for r in ok])) for key in
             ("accuracy", "nmi", "ari")}  # fmt: skip
        m.update({f"{key}_auto": float(np.mean([r["auto"][key] for r in ok_a])) for key in
                  ("accuracy", "nmi", "ari")})  # fmt: skip
        m["k_hit"] = float(np.mean([abs(r["auto"]["k_found"] - r["k_true"]) <= 1 for r in ok_a]))
        m["worst_accuracy_given"] = min(r["given"]["accuracy"] for r in ok)
        m["worst_accuracy_auto"] = min(r["auto"]["accuracy"] for r in ok_a)
        m["n_tasks"] = len(rs)
        m["n_failed"] = len(rs) - min(len(ok), len(ok_a))
        fam_means[fam] = m
        if len(rs) > 1:
            hits = sum(abs(r["auto"]["k_found"] - r["k_true"]) <= 1 for r in ok_a)
            lines.append(
                f"| *{fam}: mean (worst) of {len(rs)}* | | | "
                f"{m['accuracy_given']:.3f} ({m['worst_accuracy_given']:.3f}) | "
                f"{m['nmi_given']:.3f} | {m['ari_given']:.3f} | hit {hits}/{len(ok_a)} | "
                f"{m['accuracy_auto']:.3f} ({m['worst_accuracy_auto']:.3f}) | "
                f"{m['nmi_auto']:.3f} | {m['ari_auto']:.3f} | | | |"
            )
    summary: dict[str, Any] = {"families": fam_means}
    if fam_means:
        keys = ["accuracy_given", "nmi_given", "ari_given", "accuracy_auto", "nmi_auto",
                "ari_auto", "k_hit"]  # fmt: skip
        mean = {k: float(np.mean([m[k] for m in fam_means.values()])) for k in keys}
        worst = {
            "accuracy_given": min(m["worst_accuracy_given"] for m in fam_means.values()),
            "accuracy_auto": min(m["worst_accuracy_auto"] for m in fam_means.values()),
        }
        summary.update(mean=mean, worst=worst)
        lines.append(
            f"| **mean of {len(fam_means)} families (worst task)** | | | "
            f"**{mean['accuracy_given']:.3f}** ({worst['accuracy_given']:.3f}) | "
            f"**{mean['nmi_given']:.3f}** | **{mean['ari_given']:.3f}** | "
            f"hit {mean['k_hit']:.2f} | **{mean['accuracy_auto']:.3f}** "
            f"({worst['accuracy_auto']:.3f}) | **{mean['nmi_auto']:.3f}** | "
            f"**{mean['ari_auto']:.3f}** | | | |"
        )
    if notes:
        lines += ["", *notes]
    return lines, summary


def learned_table(results: list[dict]) -> tuple[list[str], dict]:
    lines = [
        "| task | train/test | learned P@10 | learned mAP | vocabulary P@10 | vocabulary mAP "
        "| ratio P@10 | learn s | index s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ok, notes = [], []
    for r in results:
        notes += [f"- {r['task']}: {n}" for n in r.get("notes", [])]
        if "error" in r:
            lines.append(f"| {r['task']} | FAILED | | | | | | | |")
            notes.append(f"- {r['task']}: FAILED: {r['error']}")
            continue
        ok.append(r)
        lr, vo = r["learned"], r["vocabulary"]
        lines.append(
            f"| {r['task']} | {r['n_train']}/{r['n_test']} | {lr['p10']:.3f} | {lr['map']:.3f} "
            f"| {vo['p10']:.3f} | {vo['map']:.3f} | {lr['p10'] / vo['p10']:.3f}x | "
            f"{r['learn_seconds']:.1f} | {_secs(r.get('index_seconds'))} |"
        )
    summary = {}
    if ok:
        summary = {
            "learned_p10": float(np.mean([r["learned"]["p10"] for r in ok])),
            "learned_map": float(np.mean([r["learned"]["map"] for r in ok])),
            "vocabulary_p10": float(np.mean([r["vocabulary"]["p10"] for r in ok])),
            "vocabulary_map": float(np.mean([r["vocabulary"]["map"] for r in ok])),
        }
        summary["ratio_p10"] = summary["learned_p10"] / summary["vocabulary_p10"]
        lines.append(
            f"| **mean of {len(ok)}** | | **{summary['learned_p10']:.3f}** | "
            f"**{summary['learned_map']:.3f}** | {summary['vocabulary_p10']:.3f} | "
            f"{summary['vocabulary_map']:.3f} | {summary['ratio_p10']:.3f}x | | |"
        )
    if notes:
        lines += ["", *notes]
    return lines, summary


def summary_table(summ: dict) -> list[str]:
    lines = ["| headline (choose settings on these means) | value |", "|---|---|"]
    ret = summ.get("retrieval", {})
    if ret:
        lines.append(
            "| retrieval mean mAP | "
            + ", ".join(f"{m} {v['map']:.4f}" for m, v in ret.items())
            + " |"
        )
    grp = summ.get("grouping", {})
    if "mean" in grp:
        m, w = grp["mean"], grp["worst"]
        lines.append(
            f"| grouping, k given: mean acc / NMI / ARI (worst acc) | {m['accuracy_given']:.3f}"
            f" / {m['nmi_given']:.3f} / {m['ari_given']:.3f} ({w['accuracy_given']:.3f}) |"
        )
        lines.append(
            f"| grouping, automatic k: mean acc / NMI / ARI (worst acc); k hit rate | "
            f"{m['accuracy_auto']:.3f} / {m['nmi_auto']:.3f} / {m['ari_auto']:.3f} "
            f"({w['accuracy_auto']:.3f}); {m['k_hit']:.2f} |"
        )
    lrn = summ.get("learned", {})
    if lrn:
        lines.append(
            f"| learned similarity: P@10 learned / vocabulary (ratio); mAP | "
            f"{lrn['learned_p10']:.3f} / {lrn['vocabulary_p10']:.3f} "
            f"({lrn['ratio_p10']:.3f}x); {lrn['learned_map']:.3f} / {lrn['vocabulary_map']:.3f} |"
        )
    return lines


def headline(doc: dict) -> dict[str, float]:
    """The numbers of a ``--json`` file that a before / after comparison shows."""
    out: dict[str, float] = {}
    summ = doc.get("summary", {})
    for m, v in summ.get("retrieval", {}).items():
        out[f"retrieval mean mAP: {m}"] = v["map"]
    for r in doc.get("results", []):
        if r["kind"] == "retrieval":
            for row in r.get("rows", []):
                if "map" in row:
                    out[f"{r['task']} mAP: {row['method']}"] = row["map"]
                if r["task"] == "ukbench" and "ns_score" in row:
                    out[f"ukbench N-S: {row['method']}"] = row["ns_score"]
    grp = summ.get("grouping", {})
    for key, v in grp.get("mean", {}).items():
        out[f"grouping mean {key}"] = v
    for key, v in grp.get("worst", {}).items():
        out[f"grouping worst {key}"] = v
    for fam, m in grp.get("families", {}).items():
        for key in ("accuracy_given", "accuracy_auto", "nmi_given", "ari_given", "k_hit"):
            out[f"{fam}: {key}"] = m[key]
    for key, v in summ.get("learned", {}).items():
        out[f"learned {key}"] = v
    return out


def compare(before: Path, after: Path) -> str:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    ha, hb = headline(a), headline(b)
    lines = [
        f"## Before / after: {a.get('code')} ({a.get('code_version')}, {a.get('mode')}) -> "
        f"{b.get('code')} ({b.get('code_version')}, {b.get('mode')})",
        "",
        *(
            ["**WARNING: different task lists; the means are not comparable.**", ""]
            if a.get("tasks") != b.get("tasks")
            else []
        ),
        "| measure | before | after | change |",
        "|---|---|---|---|",
    ]
    for key in [*ha, *(k for k in hb if k not in ha)]:
        va, vb = ha.get(key), hb.get(key)
        d = f"{vb - va:+.4f}" if va is not None and vb is not None else ""
        lines.append(f"| {key} | {_f(va, '.4f')} | {_f(vb, '.4f')} | {d} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------- main
def plan(quick: bool, args) -> list[tuple]:
    tasks: list[tuple] = [("retrieval", n) for n in ("ukbench", "holidays", "eth80-retrieval")]
    if not quick:
        tasks.append(("grouping", "caltech4", None, None))
    counts = ((4, 3),) if quick else ((4, 5), (8, 5), (20, 3))
    if args.grouping_seeds:  # seeds 0..N-1 of the 4-, 8- and 20-class subsets
        counts = tuple(zip((4, 8, 20), args.grouping_seeds, strict=False))
    for n, n_seeds in counts:
        for s in range(n_seeds):
            tasks.append(("grouping", f"caltech-{n}c-s{s}", n, s))
    tasks.append(("grouping", "eth80", None, None))
    n_small = args.small_seeds if args.small_seeds is not None else (2 if quick else 5)
    for family in ("ukbench-12o", "holidays-10s", "ukbench-20o", "holidays-18s", "mixed"):
        for s in range(n_small):
            tasks.append(("grouping", f"{family}-s{s}", None, s))
    if not quick:
        for n in args.learn_classes:
            for s in args.learn_seeds:
                tasks.append(("learned", n, s))
    return tasks


def run_task(ctx: Context, task: tuple) -> dict:
    work = ctx.runner.work
    if task[0] == "retrieval":
        name = task[1]
        if name == "ukbench":
            from_names = _number_labels(4)
            return retrieval_task(ctx, name, DATA / "ukbench", "ukbench", from_names)
        if name == "holidays":
            return retrieval_task(ctx, name, DATA / "holidays", "holidays", _number_labels(100))
        classes = eth80_classes()
        items = [
            (p, f"{c}/{p.parent.name}__{p.name}") for c in sorted(classes) for p in classes[c]
        ]
        folder = link_folder(work, "eth80-retrieval", items)
        return retrieval_task(
            ctx, name, folder, "folders", lambda ps: _first_folder_labels(ps, folder)
        )
    if task[0] == "grouping":
        _, name, n, seed = task
        if name == "eth80":
            folder, truth, names = shuffled_flat(work, name, eth80_classes(), 0)
            return grouping_task(ctx, name, "ETH-80", folder, truth, len(names))
        if name.startswith(("ukbench-", "holidays-", "mixed-")):
            mixed = name.startswith("mixed-")
            groups, family = mixed_groups(seed) if mixed else small_groups(name, seed)
            folder, truth, names = shuffled_flat(work, name, groups, seed)
            res = grouping_task(ctx, name, family, folder, truth, len(names))
            res["classes"] = names
            return res
        allc = caltech_classes()
        if name == "caltech4":
            classes = {c: allc[c] for c in CALTECH4}
            folder, truth, names = shuffled_flat(work, name, classes, 0)
            return grouping_task(ctx, name, "Caltech-4", folder, truth, 4)
        pool = sorted(c for c in allc if c not in CALTECH_EXCLUDED)
        rng = np.random.default_rng([n, seed])
        chosen = sorted(rng.choice(pool, n, replace=False).tolist())
        folder, truth, names = shuffled_flat(work, name, {c: allc[c] for c in chosen}, seed)
        res = grouping_task(ctx, name, f"Caltech {n} classes", folder, truth, n)
        res["classes"] = chosen
        return res
    return learned_task(ctx, task[1], task[2])


def small_groups(name: str, seed: int) -> tuple[dict[str, list[Path]], str]:
    """The groups of a small-folder task (``ukbench-<n>o-sS``: n UKBench objects, 4 photos
    each; ``holidays-<n>s-sS``: n Holidays scenes with at least 2 photos); (group name ->
    photos, family name)."""
    n = int(name.split("-")[1][:-1])
    if name.startswith("ukbench-"):
        salt, divisor, root, family = 7, 4, DATA / "ukbench", f"UKBench {n} objects"
    else:
        salt, divisor, root, family = 11, 100, DATA / "holidays", f"Holidays {n} scenes"
    paths = image_files(root)
    labels = _number_labels(divisor)(paths)
    groups: dict[str, list[Path]] = {}
    for p, g in zip(paths, labels, strict=True):
        groups.setdefault(f"{root.name}-{g:05d}", []).append(p)
    pool = sorted(g for g, ps in groups.items() if len(ps) >= 2)
    chosen = sorted(np.random.default_rng([n, seed, salt]).choice(pool, n, replace=False))
    return {g: groups[g] for g in chosen}, family


def mixed_groups(seed: int) -> tuple[dict[str, list[Path]], str]:
    """The groups of ``mixed-sS`` (module docstring): Holidays scenes, Caltech-101 classes
    and ETH-80 objects in one folder; (group name -> photos, family name)."""
    groups, _ = small_groups(f"holidays-18s-s{seed}", seed)
    rng = np.random.default_rng([99, seed])
    classes = caltech_classes()
    pool = sorted(c for c in classes if c not in CALTECH_EXCLUDED)
    for c in rng.choice(pool, 3, replace=False):
        groups[f"caltech101-{c}"] = sorted(
            rng.choice(classes[c], min(12, len(classes[c])), replace=False).tolist()
        )
    eth = eth80_classes()
    for c in rng.choice(sorted(eth), 2, replace=False):
        groups[f"eth80-{c}"] = sorted(rng.choice(eth[c], 8, replace=False).tolist())
    return groups, "Mixed: 18 scenes, 3 classes, 2 objects"


def _number_labels(divisor: int):
    import re

    def labels(paths: list[Path]) -> np.ndarray:
        return np.array([int(re.findall(r"\d+", p.stem)[-1]) // divisor for p in paths])

    return labels


def _first_folder_labels(paths: list[Path], folder: Path) -> np.ndarray:
    names = [p.relative_to(folder).parts[0] for p in paths]
    return np.unique(names, return_inverse=True)[1]


def prune_caches(work: Path, version: str) -> None:
    """Mark ``version`` as used and delete all but the ``KEEP_VERSIONS`` most recently
    used code versions' indexes and features."""
    for top in ("idx", "features"):
        d = work / top
        (d / version).mkdir(parents=True, exist_ok=True)
        os.utime(d / version)
        olds = sorted((p for p in d.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        for p in olds[:-KEEP_VERSIONS]:
            shutil.rmtree(p, ignore_errors=True)


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the retrieval sets, 3 Caltech "
                    "4-class subsets and ETH-80 grouping (a few minutes)")  # fmt: skip
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[2],
                    help="checkout to measure (default: this one)")  # fmt: skip
    ap.add_argument("--work", type=Path, default=Path("/tmp/quality"),
                    help="caches and link folders (default /tmp/quality)")  # fmt: skip
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs of simile index")
    ap.add_argument("--only", default="", help="comma-separated substrings of task names")
    ap.add_argument("--no-brute", action="store_true", help="skip the brute-force rows")
    ap.add_argument("--fresh", action="store_true", help="rebuild this code's indexes")
    ap.add_argument("--grouping-seeds", type=_ints, default=None, metavar="N4,N8,N20",
                    help="random Caltech-101 subsets of 4, 8 and 20 classes to group "
                         "(default 5,5,3; --quick 3,0,0)")  # fmt: skip
    ap.add_argument("--grouping-landmarks", type=float, default=None, metavar="F",
                    help="group in Nystrom mode, as folders of over 3,000 photos are, with "
                         "F n landmarks (at least 60, at most n - 1; simile cluster "
                         "--landmarks): the approximation measured on the dev tasks")  # fmt: skip
    ap.add_argument("--small-seeds", type=int, default=None, metavar="N",
                    help="small folders of UKBench objects and of Holidays scenes to "
                         "group, N of each (default 5; --quick 2)")  # fmt: skip
    ap.add_argument("--learn-classes", type=_ints, default=[10, 20, 50])
    ap.add_argument("--learn-seeds", type=_ints, default=[0])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                    help="the headline numbers of two --json files side by side")  # fmt: skip
    ap.add_argument("--links", choices=("sym", "hard"), default="sym",
                    help="task folders of symbolic (default) or hard links to the data; "
                         "hard: for checkouts whose scan resolves symbolic links")  # fmt: skip
    args = ap.parse_args(argv)
    global LINKS
    LINKS = args.links
    if args.compare:
        print(compare(*args.compare))
        return 0
    if not DATA.is_dir():
        print(f"needs the dev data in {DATA}", file=sys.stderr)
        return 2
    code = Path(os.path.realpath(args.code))
    work = Path(os.path.abspath(args.work))
    for top in ("engine", "app"):
        if not (code / top).is_dir():
            print(f"--code {code}: no {top}/ folder", file=sys.stderr)
            return 2
    if work == code or code in work.parents or work in code.parents:
        print("--work must lie outside the checkout", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", file=sys.stderr, flush=True)

    runner = Runner(code, work, args.jobs)
    imported = runner.imported_from()
    version = code_version(code)
    prune_caches(work, version)
    log(f"code {code} (version {version}); engine {imported['engine']}")
    ctx = Context(runner, version, args.fresh, not args.no_brute, log, args.grouping_landmarks)
    tasks = plan(args.quick, args)
    if args.only:
        keys = [k for k in args.only.split(",") if k]
        tasks = [t for t in tasks if any(k in _task_name(t) for k in keys)]
    results = []
    for t in tasks:
        log(f"{_task_name(t)} ...")
        r = run_task(ctx, t)
        results.append(r)
        log(f"{_task_name(t)} done in {r.get('seconds', 0.0):.1f}s" + (
            f" FAILED: {r['error']}" if "error" in r else ""))  # fmt: skip
    wall = time.perf_counter() - t_start
    changed = code_version(code) != version
    if changed:
        log(f"WARNING: the code in {code} changed during the run; the results mix versions")

    ret_lines, ret_sum = retrieval_table([r for r in results if r["kind"] == "retrieval"])
    grp_lines, grp_sum = grouping_table([r for r in results if r["kind"] == "grouping"])
    lrn_lines, lrn_sum = learned_table([r for r in results if r["kind"] == "learned"])
    summary = {"retrieval": ret_sum, "grouping": grp_sum, "learned": lrn_sum}
    mode = "quick" if args.quick else "full"
    out = [
        f"## Simile quality ({mode}): code {code}, version {version}",
        f"engine imported from {imported['engine']}; wall time {wall:.0f}s",
        "",
    ]
    if changed:
        out += ["**WARNING: the code changed during the run; the results mix versions.**", ""]
    if ret_lines[2:]:
        out += ["### Retrieval (simile eval; brute force = reference)", "", *ret_lines, ""]
    if grp_lines[2:]:
        out += ["### Grouping (simile cluster, default settings)", "", *grp_lines, ""]
    if lrn_lines[2:]:
        out += ["### Learned similarity (simile learn --from-subfolders + query)", ""]
        out += [*lrn_lines, ""]
    out += ["### Summary", "", *summary_table(summary)]
    print("\n".join(out), flush=True)
    if args.json:
        doc = {
            "mode": mode,
            "code": str(code),
            "code_version": version,
            "imported": imported,
            "wall_seconds": wall,
            "code_changed_during_run": changed,
            "tasks": [_task_name(t) for t in tasks],
            "results": results,
            "summary": summary,
            "table": "\n".join(out),
        }
        args.json.write_text(json.dumps(doc, indent=1, default=_json_default))
    return 0


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


def _task_name(t: tuple) -> str:
    if t[0] == "learned":
        return f"learn-{t[1]}c-s{t[2]}"
    return t[1]


if __name__ == "__main__":
    sys.exit(main())
