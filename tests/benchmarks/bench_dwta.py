"""WTA vs densified WTA on sparse bags of visual words (Chen & Shrivastava Fig. 4-6).

Protocol:

* SIFT (RootSIFT, at most 500 per image, ``engine.features.extract_features``) of the 500
  UKBench dev images (``../shared/data/ukbench``), cached in /tmp/simile_bench_cache;
* vocabularies of about 1k / 5k / 10k words: ``engine.kernels.vocabulary.VocabularyTree`` with
  (branching, levels) = (10, 4), (17, 4), (10, 5), i.e. 1,000 / 4,913 / 10,000 leaves,
  fitted on 100,000 sampled descriptors; tf-idf bags of words
  (``engine.kernels.words.bag_of_words``);
* for each vocabulary: raw data sparsity (their Eq. 1), ratio of empty WTA samples
  (windows whose ``K`` sampled words are all absent, their Fig. 4), and retrieval quality
  of the codes -- every image queries the other 499, ranked by code agreement (random
  tie-break): UKBench N-S score (mean number of the 4 group images in the top 4, the
  query included, max 4) and mAP of the 3 other group images -- for WTA and DWTA
  (K = 4 as in the paper, m = 64 / 256 / 512 codes, DWTA codes mod 256), averaged over
  ``--seeds`` random permutation sets; plus the exact tf-idf cosine as a reference.

Run: ``nice python tests/benchmarks/bench_dwta.py`` (a few minutes on 2 busy cores; the
first run extracts and caches the features).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cache import SHARED_DATA, cached_sets

from engine.hashing.wta import DensifiedWTAHash, WTAHash, code_agreement, sparsity
from engine.kernels.vocabulary import VocabularyTree
from engine.kernels.words import bag_of_words, fit_idf

VOCABS = {"1k": (10, 4), "5k": (17, 4), "10k": (10, 5)}


def retrieval_scores(S: np.ndarray, groups: np.ndarray, rng: np.random.Generator):
    """N-S score and mAP (excluding the query) from a similarity matrix (random ties)."""
    n = S.shape[0]
    jitter = rng.random(S.shape) * 1e-6  # below the smallest agreement step 1/m
    order = np.argsort(-(S + jitter), axis=1, kind="stable")
    same = groups[order] == groups[:, None]
    ns = float(same[:, :4].sum(axis=1).mean())
    not_self = order != np.arange(n)[:, None]
    rel = (same & not_self)[not_self].reshape(n, n - 1)
    hits = np.cumsum(rel, axis=1)
    prec = hits / np.arange(1, n)
    ap = (prec * rel).sum(axis=1) / np.maximum(rel.sum(axis=1), 1)
    return ns, float(ap.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--codes", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--features", type=int, default=500)
    ap.add_argument("--sample", type=int, default=100_000)
    args = ap.parse_args()
    root = SHARED_DATA / "ukbench"
    if not root.is_dir():
        raise SystemExit(f"{root} not found")
    paths = sorted(p for p in root.iterdir() if p.suffix.lower() == ".jpg")
    groups = np.array([int(p.stem[-5:]) // 4 for p in paths])
    t0 = time.perf_counter()
    sets, _ = cached_sets(
        f"ukbench_sift{args.features}_rootsift", paths, max_features=args.features
    )
    print(
        f"{len(paths)} images, {sum(map(len, sets))} descriptors "
        f"({time.perf_counter() - t0:.1f} s features)"
    )
    rng = np.random.default_rng(0)
    stacked = np.concatenate(sets)
    sample = stacked[rng.choice(len(stacked), min(args.sample, len(stacked)), replace=False)]
    K = args.window
    for name, (branching, levels) in VOCABS.items():
        t = time.perf_counter()
        tree = VocabularyTree(branching, levels, random_state=0).fit(sample)
        idf = fit_idf(sets, tree)
        X = bag_of_words(sets, tree, idf)
        words = X.shape[1]
        cos = (X @ X.T).toarray()
        ns_c, map_c = retrieval_scores(cos, groups, rng)
        print(
            f"\n== {name} vocabulary: {words} words, sparsity {100 * sparsity(X):.2f}% "
            f"(tree + BoW {time.perf_counter() - t:.1f} s); tf-idf cosine N-S {ns_c:.3f} "
            f"mAP {map_c:.3f}"
        )
        print(
            f"{'codes':>6s} {'empty codes':>12s} {'WTA N-S':>8s} {'DWTA N-S':>9s}"
            f" {'WTA mAP':>8s} {'DWTA mAP':>9s} {'DWTA ms/img':>11s}"
        )
        for m in args.codes:
            res = {"wta": [], "dwta": []}
            empty_ratio, ms = [], []
            for seed in range(args.seeds):
                w = WTAHash(m, K, random_state=seed).fit(words)
                d = DensifiedWTAHash(m, K, random_state=seed).fit(words)
                cw = w.hash(X)
                t = time.perf_counter()
                cd, empty = d.hash(X, return_empty=True)
                ms.append(1000 * (time.perf_counter() - t) / X.shape[0])
                empty_ratio.append(empty.mean())
                res["wta"].append(retrieval_scores(code_agreement(cw), groups, rng))
                res["dwta"].append(retrieval_scores(code_agreement(cd), groups, rng))
            wns, wmap = np.mean(res["wta"], axis=0)
            dns, dmap = np.mean(res["dwta"], axis=0)
            print(
                f"{m:6d} {100 * np.mean(empty_ratio):11.2f}% {wns:8.3f} {dns:9.3f}"
                f" {wmap:8.3f} {dmap:9.3f} {np.mean(ms):11.3f}"
            )
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
