"""Issue 6 benchmarks: learned similarity on Caltech-101 (dev split).

Run by hand (one command reproduces the whole table)::

    nice python tests/benchmarks/bench_learn.py [--features sift|dense] [--levels 4]
        [--class-counts 10,20,50] [--C 0.1] [--speed] [--boost-classes 20]

Protocol (OASIS paper, seeds/004, section 5): a random subset of N classes (among the
classes with >= 30 dev images; seed 0); per class, half of the images train the model
(labels = classes), the other half are *unseen* test images. Every test image queries
all other test images; we report precision@10 and mAP of

* raw tf-idf bag-of-words cosine similarity (the baseline),
* OASIS (bilinear W from training triplets; early stopping on held-out training images
  that rank each other, mirroring the test; C chosen on that validation score, never on
  the test images; time to the best validation score),
* on one subset: L1 on the LSA-reduced bag of words, Hamming on unlearned
  random-hyperplane bits of the same length, SSC, Boosted SSC and BoostPro (ROC area of
  all test pairs, precision@10, embedding length M).

``--speed`` also times OASIS on all ~3,000 dev images (101 classes, 20 % held aside
for validation) and reports the time to its best validation score.
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


def p10(sim: np.ndarray, labels: np.ndarray) -> float:
    return precision_at_k(sim, labels, labels, 10, exclude_self=True)


def load_sets(features: str):
    paths, labels, _ = caltech_paths(exclude=lambda n: n == "BACKGROUND_Google")
    if features == "dense":
        sets, _ = cached_sets(
            "caltech101_dense8_s320",
            paths,
            kind="dense_sift",
            max_side=320,
            step=8,
            patch_size=16,
        )
    else:
        sets, _ = cached_sets("caltech101_sift300", paths, max_features=300)
    return sets, labels


def subset(labels: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Items and relabelled classes of a random subset of ``n_classes`` classes."""
    counts = np.bincount(labels)
    if n_classes >= counts.size:
        chosen = np.arange(counts.size)
    else:
        rng = np.random.default_rng(0)
        chosen = np.sort(rng.choice(np.flatnonzero(counts >= 30), n_classes, replace=False))
    idx = np.flatnonzero(np.isin(labels, chosen))
    return idx, np.searchsorted(chosen, labels[idx])


def bags(sets, train: np.ndarray, levels: int):
    """tf-idf bags of words with a vocabulary tree and idf fitted on training images only."""
    sample = np.concatenate([sets[i] for i in train])
    rng = np.random.default_rng(0)
    sample = sample[rng.choice(len(sample), min(len(sample), 200_000), replace=False)]
    tree = VocabularyTree(branching=10, levels=levels, random_state=0).fit(sample)
    idf = fit_idf([sets[i] for i in train], tree)
    return bag_of_words(sets, tree, idf), tree.n_leaves


def train_oasis(X, y, Cs, n_steps, eval_every, patience, variant="plain"):
    """Fit one OASIS per C; keep the one with the best *validation* score."""
    best = None
    for C in Cs:
        model = OASIS(
            C=C,
            n_steps=n_steps,
            eval_every=eval_every,
            patience=patience,
            variant=variant,
            random_state=0,
        )
        t0 = time.perf_counter()
        best_t, best_val = 0.0, -np.inf
        for prog in model.fit_iter(X, y):
            if prog.score > best_val:
                best_val, best_t = prog.score, time.perf_counter() - t0
        total = time.perf_counter() - t0
        info = dict(
            C=C,
            val0=model.history_[0][1],
            val=best_val,
            t_best=best_t,
            total=total,
            step=model.best_step_,
            steps=model.history_[-1][0],
        )
        print(
            f"    C={C:<6} val P@10 {info['val0']:.3f} -> {best_val:.3f} at step "
            f"{info['step']} ({best_t:.1f}s; stopped {total:.1f}s, {info['steps']} steps)",
            flush=True,
        )
        if best is None or best_val > best[1]["val"]:
            best = (model, info)
    return best


def oasis_table(sets, labels, args) -> None:
    print(
        "\n| classes | words | train/test | cosine P@10 | cosine mAP | OASIS P@10 | OASIS mAP "
        "| ratio P@10 | C (val) | time to best val |"
    )
    rows = []
    for n_classes in args.class_counts:
        idx, y = subset(labels, n_classes)
        S = [sets[i] for i in idx]
        train, test = train_test_split_by_class(y, 0.5, random_state=0)
        X, n_words = bags(S, train, args.levels)
        Xte, yte = X[test], y[test]
        cos = (Xte @ Xte.T).toarray()
        print(
            f"  {n_classes} classes: {len(train)} train / {len(test)} test, {n_words} words",
            flush=True,
        )
        model, info = train_oasis(
            X[train], y[train], args.C, args.n_steps, args.eval_every, args.patience, args.variant
        )
        sim = model.similarity(Xte)
        r = (
            n_classes,
            n_words,
            f"{len(train)}/{len(test)}",
            p10(cos, yte),
            mean_ap(cos, yte),
            p10(sim, yte),
            mean_ap(sim, yte),
        )
        rows.append((*r, r[5] / r[3], info["C"], f"{info['t_best']:.1f}s ({info['step']} steps)"))
        print(
            f"  -> cosine P@10 {r[3]:.3f} mAP {r[4]:.3f} | OASIS P@10 {r[5]:.3f} "
            f"mAP {r[6]:.3f} | {r[5] / r[3]:.2f}x",
            flush=True,
        )
    print(
        "\n| classes | words | train/test | cosine P@10 | cosine mAP | OASIS P@10 | OASIS mAP "
        "| ratio P@10 | C (val) | time to best val |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} "
            f"| {r[7]:.2f}x | {r[8]} | {r[9]} |"
        )
    print("target: ratio P@10 >= 1.3x", flush=True)


def speed(sets, labels, args) -> None:
    idx = np.arange(labels.size)
    X, n_words = bags(sets, idx, args.levels)
    print(
        f"\nspeed: OASIS on all {labels.size} dev images ({n_words} words, 20 % validation)",
        flush=True,
    )
    _, info = train_oasis(
        X, labels, [args.C[0]], args.n_steps, args.eval_every, args.patience, args.variant
    )
    print(
        f"speed: best validation after {info['t_best']:.1f}s ({info['step']} steps, "
        f"{1e3 * info['total'] / max(info['steps'], 1):.2f} ms/step); target < 60 s",
        flush=True,
    )


def embeddings(sets, labels, args) -> None:
    from sklearn.decomposition import TruncatedSVD

    idx, y = subset(labels, args.boost_classes)
    S = [sets[i] for i in idx]
    train, test = train_test_split_by_class(y, 0.5, random_state=0)
    X, n_words = bags(S, train, args.levels)
    yte = y[test]
    print(
        f"\nembeddings: {args.boost_classes} classes, {n_words} words -> LSA-64; "
        f"{len(train)} train / {len(test)} test"
    )
    print("| method | M (bits) | ROC area | P@10 | mAP | fit |")
    print("|---|---|---|---|---|---|")

    def row(name, sim, m="", fit=""):
        print(
            f"| {name} | {m} | {pair_auc(sim, yte):.3f} | {p10(sim, yte):.3f} | "
            f"{mean_ap(sim, yte):.3f} | {fit} |",
            flush=True,
        )

    Xte = X[test]
    row("tf-idf cosine", (Xte @ Xte.T).toarray(), "-")
    svd = TruncatedSVD(64, random_state=0).fit(X[train])
    Z = svd.transform(X).astype(np.float64)
    Ztr, Zte = Z[train], Z[test]
    row("L1 (LSA-64)", -np.abs(Zte[:, None, :] - Zte[None, :, :]).sum(-1), "64 floats")
    i, j, lab = pairs_from_labels(y[train], 20_000, random_state=0)
    for name, make in [
        ("SSC (G=0.1)", lambda: SSC(gap=0.1, max_bits=512)),
        ("Boosted SSC", lambda: BoostedSSC(n_bits=128)),
        ("BoostPro", lambda: BoostPro(n_bits=64, max_iter=40)),
    ]:
        t0 = time.perf_counter()
        emb = make().fit(Ztr, i, j, lab).embedding_
        secs = time.perf_counter() - t0
        # Unlearned baseline of the same length: random hyperplanes through the mean.
        R = np.random.default_rng(1).standard_normal((emb.n_bits, Z.shape[1]))
        bits = (Zte - Ztr.mean(0)) @ R.T > 0
        row(
            "Hamming, random hyperplanes",
            -(bits[:, None, :] != bits[None, :, :]).sum(-1).astype(float),
            emb.n_bits,
        )
        row(name, emb.similarity(emb.transform(Zte)), emb.n_bits, f"{secs:.1f}s")
    i, j, _ = pairs_from_labels(y[train], 10_000, positive_fraction=1.0, random_state=0)
    t0 = time.perf_counter()
    emb = BoostedSSC(n_bits=128).fit(Ztr, i, j, None).embedding_
    row(
        "Boosted SSC, semi-supervised",
        emb.similarity(emb.transform(Zte)),
        emb.n_bits,
        f"{time.perf_counter() - t0:.1f}s",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--features",
        choices=["sift", "dense"],
        default="sift",
        help="sift: 300 strongest SIFT keypoints; dense: dense SIFT, step 8",
    )
    ap.add_argument(
        "--levels",
        type=int,
        default=4,
        help="vocabulary tree levels counting the root (k=10: 4 -> 1000 words)",
    )
    ap.add_argument(
        "--class-counts", default="10,20,50", type=lambda s: [int(v) for v in s.split(",") if v]
    )
    ap.add_argument(
        "--C",
        default="0.1",
        type=lambda s: [float(v) for v in s.split(",")],
        help="OASIS aggressiveness; several values = chosen on validation",
    )
    ap.add_argument("--variant", default="plain", choices=["plain", "symmetric", "psd"])
    ap.add_argument("--n-steps", type=int, default=60_000)
    ap.add_argument("--eval-every", type=int, default=5_000)
    ap.add_argument("--patience", type=int, default=3)
    ap.add_argument("--speed", action="store_true", help="time OASIS on all dev images")
    ap.add_argument("--boost-classes", type=int, default=20, help="0 = skip the embeddings")
    args = ap.parse_args()
    if not (SHARED_DATA / "caltech101").is_dir():
        sys.exit("needs ../shared/data/caltech101")
    t = time.perf_counter()
    sets, labels = load_sets(args.features)
    print(f"{labels.size} images, features ({args.features}) {time.perf_counter() - t:.1f}s")
    if args.class_counts:
        oasis_table(sets, labels, args)
    if args.speed:
        speed(sets, labels, args)
    if args.boost_classes:
        embeddings(sets, labels, args)


if __name__ == "__main__":
    main()
