"""Issue 6 benchmarks: learned similarity on Caltech-101 (dev split).

Run by hand::

    nice python tests/benchmarks/bench_learn.py [--classes N] [--features 300]

Protocol: per class, half of the dev images train the model (labels = classes) and
the other half are *unseen* test images. Every test image queries all other test
images; we report precision@10 and mAP of

* raw tf-idf bag-of-words cosine similarity (the baseline),
* OASIS (bilinear W learned from training triplets; time to best validation score),
* L1 on the LSA-reduced bag of words, Hamming on unlearned random-hyperplane bits,
  SSC, Boosted SSC and BoostPro on the same reduced vectors (ROC area of test pairs,
  precision@10, embedding length).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cache import SHARED_DATA, cached_sets, caltech_paths

from engine.learn import (
    OASIS,
    SSC,
    BoostedSSC,
    BoostPro,
    pairs_from_labels,
    precision_at_k,
    train_test_split_by_class,
)
from engine.vocabulary import VocabularyTree, bag_of_words, fit_idf


def mean_ap(sim: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import average_precision_score

    aps = []
    for q in range(sim.shape[0]):
        mask = np.arange(sim.shape[0]) != q
        rel = labels[mask] == labels[q]
        if rel.any():
            aps.append(average_precision_score(rel, sim[q, mask]))
    return float(np.mean(aps))


def pair_auc(sim: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    iu = np.triu_indices(sim.shape[0], 1)
    same = labels[iu[0]] == labels[iu[1]]
    return float(roc_auc_score(same, sim[iu]))


def report(name: str, sim: np.ndarray, labels: np.ndarray, extra: str = "") -> float:
    p10 = precision_at_k(sim, labels, labels, 10, exclude_self=True)
    print(
        f"{name:<28} P@10 {p10:.3f}  mAP {mean_ap(sim, labels):.3f}  "
        f"ROC-AUC {pair_auc(sim, labels):.3f}  {extra}",
        flush=True,
    )
    return p10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--classes", type=int, default=0, help="first N classes (0 = all 101)")
    ap.add_argument("--features", type=int, default=300)
    ap.add_argument("--levels", type=int, default=3, help="vocabulary tree depth (k = 10)")
    args = ap.parse_args()
    if not (SHARED_DATA / "caltech101").is_dir():
        sys.exit("needs ../shared/data/caltech101")
    paths, labels, _names = caltech_paths(exclude=lambda n: n == "BACKGROUND_Google")
    if args.classes:
        keep = labels < args.classes
        paths = [p for p, k in zip(paths, keep, strict=True) if k]
        labels = labels[keep]
    t = time.perf_counter()
    sets, _ = cached_sets(f"caltech101_sift{args.features}", paths, max_features=args.features)
    secs = time.perf_counter() - t
    print(f"{len(paths)} images, {len(set(labels))} classes; features {secs:.1f}s")

    train, test = train_test_split_by_class(labels, 0.5, random_state=0)
    tree = VocabularyTree(branching=10, levels=args.levels, random_state=0)
    sample = np.concatenate([sets[i] for i in train])
    rng = np.random.default_rng(0)
    sample = sample[rng.choice(len(sample), min(len(sample), 200_000), replace=False)]
    t = time.perf_counter()
    tree.fit(sample)
    counts_sets = [sets[i] for i in train]
    idf = fit_idf(counts_sets, tree)
    X = bag_of_words(sets, tree, idf)
    print(f"vocabulary {tree.n_leaves} words in {time.perf_counter() - t:.1f}s")

    Xte, yte = X[test], labels[test]
    cos = (Xte @ Xte.T).toarray()
    base = report("tf-idf cosine", cos, yte)

    # OASIS: train on training images only; validation held aside inside fit.
    model = OASIS(C=0.1, n_steps=300_000, eval_every=10_000, patience=5, random_state=0)
    t0 = time.perf_counter()
    best_t, best = 0.0, -1.0
    for prog in model.fit_iter(X[train], labels[train]):
        if prog.score > best:
            best, best_t = prog.score, time.perf_counter() - t0
    total = time.perf_counter() - t0
    oas = report(
        "OASIS",
        model.similarity(Xte),
        yte,
        f"(best val P@10 {best:.3f} after {best_t:.1f}s, stopped at {total:.1f}s, "
        f"{model.history_[-1][0]} steps, d={model.W_.shape[0]}, {len(train)} train images)",
    )
    print(f"OASIS / cosine precision@10 ratio: {oas / base:.2f}x (target >= 1.3x)")

    # Similarity-sensitive embeddings on LSA-reduced bags of words.
    from sklearn.decomposition import TruncatedSVD

    svd = TruncatedSVD(64, random_state=0).fit(X[train])
    Z = svd.transform(X).astype(np.float64)
    Ztr, Zte = Z[train], Z[test]
    l1 = -np.abs(Zte[:, None, :] - Zte[None, :, :]).sum(-1)
    report("L1 (LSA-64)", l1, yte)
    i, j, lab = pairs_from_labels(labels[train], 20_000, random_state=0)
    for name, make in [
        ("SSC (G=0.1)", lambda: SSC(gap=0.1, max_bits=512)),
        ("Boosted SSC (128 bits)", lambda: BoostedSSC(n_bits=128)),
        ("BoostPro (64 proj)", lambda: BoostPro(n_bits=64, max_iter=40)),
    ]:
        t0 = time.perf_counter()
        emb = make().fit(Ztr, i, j, lab).embedding_
        secs = time.perf_counter() - t0
        # Unlearned baseline of the same length: random hyperplanes through the mean.
        R = np.random.default_rng(1).standard_normal((emb.n_bits, Z.shape[1]))
        bits = (Zte - Ztr.mean(0)) @ R.T > 0
        ham = -(bits[:, None, :] != bits[None, :, :]).sum(-1).astype(float)
        report(f"  Hamming random {emb.n_bits} bits", ham, yte)
        report(name, emb.similarity(emb.transform(Zte)), yte, f"M={emb.n_bits}, fit {secs:.1f}s")
    i, j, _ = pairs_from_labels(labels[train], 10_000, positive_fraction=1.0, random_state=0)
    emb = BoostedSSC(n_bits=128).fit(Ztr, i, j, None).embedding_
    report("Boosted SSC semi-sup.", emb.similarity(emb.transform(Zte)), yte, f"M={emb.n_bits}")


if __name__ == "__main__":
    main()
