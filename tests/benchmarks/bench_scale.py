"""Search at 10,000 images: latency, recall of hashed search vs exhaustive, memory.

Run::

    nice python tests/benchmarks/bench_scale.py [--n 10000] [--queries 200]
        [--workdir /tmp/simile_scale] [--ukbench-index /tmp/simile_bench_ukbench]

The 10k collection is SYNTHETIC and lives in ``--workdir`` (never committed): extracting
SIFT from 10,000 rendered views would take far longer than this benchmark may, so the
collection is generated from the stored feature sets of the 500 UKBench dev images: every
synthetic image is one dev image's set, randomly subsampled (60-95 % of its features),
descriptors jittered (Gaussian noise, sigma 0.03, re-normalised) and positions moved by a
random similarity transform. The feature sets are written to a real index through the
store and the search data are built by ``Collection`` as for any folder.

Queries are fresh views of dev images (new jitter, not in the collection). For each
method the benchmark reports the search time of a query (``Collection`` from encoding
the query's features to the ranked hits; extraction excluded), the fraction of the
collection scored exactly, and recall@10 against the exhaustive pyramid match of the
same method. The query phase runs in a separate process, whose peak RSS is reported.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _view(f, rng, keep_lo=0.6, keep_hi=0.95, sigma=0.03):
    from engine.features import Features

    m = len(f)
    keep = np.sort(rng.choice(m, max(1, int(m * rng.uniform(keep_lo, keep_hi))), replace=False))
    d = f.descriptors[keep] + rng.normal(0, sigma, (keep.size, f.descriptors.shape[1]))
    d = np.maximum(d, 0)
    d = (d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-6)).astype(np.float32)
    a, s = rng.uniform(-0.3, 0.3), rng.uniform(0.8, 1.25)
    R = s * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    xy = (f.xy[keep] @ R.T + rng.uniform(-20, 20, 2)).astype(np.float32)
    return Features(d, xy, None, None, f.image_size, f.kind)


def _base_features(ukb_index: str):
    from engine.collection import Collection

    data = ROOT.parent / "shared" / "data" / "ukbench"
    col = Collection.open(data, ukb_index)
    if len(col.store.ids()) < 500:
        for _ in col.update():
            pass
    feats = [f for _, f in col.store.iter_features()]
    col.close()
    return feats


def build(args) -> None:
    from engine.collection import Collection
    from engine.store import IndexStore

    base = _base_features(args.ukbench_index)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    photos = work / "photos"
    photos.mkdir(parents=True)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    with IndexStore.open(work / "index") as store:
        for s in range(0, args.n, 500):
            batch = []
            for j in range(s, min(args.n, s + 500)):
                b = j % len(base)
                batch.append(
                    (str(photos / f"syn{j:05d}_{b:03d}.jpg"), 1, 1, None, _view(base[b], rng))
                )
            store.write_batch(batch)
    print(f"wrote {args.n} synthetic feature sets in {time.perf_counter() - t:.1f} s", flush=True)
    col = Collection.open(photos, work / "index")
    t = time.perf_counter()
    col._refresh(save=True)
    print(f"models + search data for {args.n} images: {time.perf_counter() - t:.1f} s", flush=True)
    col.close()
    # queries: new views of the dev images
    qs = [_view(base[b], rng) for b in rng.choice(len(base), args.queries, replace=False)]
    np.savez(
        work / "queries.npz",
        **{f"d{i}": q.descriptors for i, q in enumerate(qs)},
        **{f"x{i}": q.xy for i, q in enumerate(qs)},
    )


def query_phase(args) -> dict:
    from engine.collection import Collection
    from engine.features import Features

    work = Path(args.workdir)
    z = np.load(work / "queries.npz")
    nq = len(z.files) // 2
    qs = [Features(z[f"d{i}"], z[f"x{i}"], None, None, (320, 240), "sift") for i in range(nq)]
    col = Collection.open(work / "photos", work / "index", readonly=True)
    t = time.perf_counter()
    models, data = col._ensure()
    load_s = time.perf_counter() - t
    n = len(data.ids)
    out = {"n": n, "load_seconds": load_s}
    for method in ("vocabulary", "uniform", "wta", "hybrid"):
        times, recalls, fracs = [], [], []
        for q in qs:
            t = time.perf_counter()
            rows, _ = col._search(models, data, q, method, 10)
            times.append(time.perf_counter() - t)
            enc = col._query_encoding(models, q)
            if method == "uniform":
                k, v = enc.uniform.row(0)
                raw = data.uniform.score(k, v)
                sx = data.uniform.self_similarity()
                exact = raw / np.sqrt(np.maximum(sx * v.sum(), 1e-30))
            else:
                k, v = enc.vocab.row(0)
                exact = data.vocab.score(k, v)
            truth = np.argsort(-exact, kind="stable")[:10]
            if method == "hybrid":
                rows = rows  # verified re-ranking changes the order; recall of the set
            recalls.append(np.intersect1d(rows, truth).size / 10)
            fracs.append(col._last_scored / n)
        out[method] = {
            "median_ms": 1000 * float(np.median(times)),
            "p90_ms": 1000 * float(np.percentile(times, 90)),
            "recall_at_10": float(np.mean(recalls)),
            "scored_fraction": float(np.mean(fracs)),
        }
        print(method, json.dumps(out[method]), flush=True)
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    col.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--workdir", default="/tmp/simile_scale")
    ap.add_argument("--ukbench-index", default="/tmp/simile_bench_ukbench")
    ap.add_argument("--query-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--skip-build", action="store_true")
    args = ap.parse_args(argv)
    if args.query_only:
        res = query_phase(args)
        print("RESULT " + json.dumps(res))
        return 0
    if not args.skip_build:
        build(args)
    cmd = [sys.executable, __file__, "--query-only", "--workdir", args.workdir]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-3000:])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return 1
    res = json.loads(line[7:])
    print(f"\nquery process peak RSS: {res['max_rss_mb']:.0f} MB (target <= 1536)")
    for m in ("vocabulary", "uniform", "wta"):
        r = res[m]
        print(
            f"{m:10s} search {r['median_ms']:.1f} ms median ({r['p90_ms']:.1f} p90), "
            f"recall@10 {r['recall_at_10']:.3f}, scored {100 * r['scored_fraction']:.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
