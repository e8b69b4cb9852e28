"""Unsupervised category discovery benchmarks (thesis Ch. 9).

Run::

    nice python tests/benchmarks/bench_discovery.py            # all parts
    nice python tests/benchmarks/bench_discovery.py caltech4   # Caltech-4-style, k=4 and auto
    nice python tests/benchmarks/bench_discovery.py eth80      # ETH-80 dev, 8 classes
    nice python tests/benchmarks/bench_discovery.py nystrom    # 10,000-image timing
    nice python tests/benchmarks/bench_discovery.py product --folder F --index I --k 4 auto
        # the shared pipeline (engine.cluster.categorize_iter) on an indexed folder, with
        # per-stage seconds; the first run computes the cached dense channel
    nice python tests/benchmarks/bench_discovery.py cli --folder /tmp/c4/photos
        # the `simile cluster` command on a COPY of the class folders (one per class),
        # default pipeline, and with --spatial 4 --features index (``--cli-spatial``)

Features are cached in /tmp/simile_bench_cache (npz, allow_pickle=False). The kernel is a
vocabulary-guided pyramid match (thesis Ch. 4) built here from a hierarchical k-means
vocabulary, histogram intersections computed as sparse dot products of unary-encoded bin
counts; ``engine.pyramid.PyramidMatch`` is used instead when it is importable and
``--engine-pm`` is given.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
CACHE = Path("/tmp/simile_bench_cache")
CALTECH4 = ("Faces_easy", "airplanes", "Motorbikes", "car_side")


# ------------------------------------------------------------------------------- features
def _trim_border(gray: np.ndarray, thresh: int = 245) -> np.ndarray:
    """Remove uniform white frames (many Caltech airplanes/motorbikes have them; the thesis
    removed them too, Sec. 9.5)."""
    keep_r = np.flatnonzero((gray < thresh).mean(axis=1) > 0.02)
    keep_c = np.flatnonzero((gray < thresh).mean(axis=0) > 0.02)
    if keep_r.size < 16 or keep_c.size < 16:
        return gray
    return gray[keep_r[0] : keep_r[-1] + 1, keep_c[0] : keep_c[-1] + 1]


def extract(path: Path, kind: str, max_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(M, 128) float32 RootSIFT descriptors and (M, 2) float32 xy normalised to [0, 1]."""
    import cv2

    gray = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if gray is None:
        raise OSError(f"cannot read {path}")
    gray = _trim_border(gray)
    h, w = gray.shape
    s = 300.0 / max(h, w)
    if s < 1:
        gray = cv2.resize(gray, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
    h, w = gray.shape
    sift = cv2.SIFT_create()
    if kind == "sift":
        kps = sift.detect(gray, None)
        kps = sorted(kps, key=lambda k: -k.response)[:max_features]
    else:  # dense grid, two scales, subsampled to max_features
        kps = []
        for size, step in ((12, 8), (24, 12)):
            ys, xs = np.mgrid[size // 2 : h - size // 2 : step, size // 2 : w - size // 2 : step]
            kps += [
                cv2.KeyPoint(float(x), float(y), size)
                for x, y in zip(xs.ravel(), ys.ravel(), strict=True)
            ]
        if len(kps) > max_features:
            sel = np.linspace(0, len(kps) - 1, max_features).astype(int)
            kps = [kps[i] for i in sel]
    kps, desc = sift.compute(gray, kps)
    if desc is None or len(kps) == 0:
        return np.zeros((0, 128), np.float32), np.zeros((0, 2), np.float32)
    desc = desc.astype(np.float32)
    desc /= np.maximum(desc.sum(axis=1, keepdims=True), 1e-12)  # RootSIFT
    desc = np.sqrt(desc)
    xy = np.array([k.pt for k in kps], np.float32) / np.array([w, h], np.float32)
    return desc, xy


def load_features(
    name: str, paths: list[Path], kind: str = "sift", max_features: int = 300
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Features of ``paths``, cached as one npz per (name, kind, max_features)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    f = CACHE / f"{name}_{kind}_{max_features}.npz"
    if f.exists():
        z = np.load(f, allow_pickle=False)
        if z["paths"].tolist() == [str(p) for p in paths]:
            off = z["offsets"]
            d, xy = z["desc"], z["xy"]
            return (
                [d[off[i] : off[i + 1]] for i in range(len(paths))],
                [xy[off[i] : off[i + 1]] for i in range(len(paths))],
            )
    descs, xys = [], []
    t0 = time.time()
    for i, p in enumerate(paths):
        d, xy = extract(p, kind, max_features)
        descs.append(d)
        xys.append(xy)
        if (i + 1) % 200 == 0:
            print(f"  features {name}: {i + 1}/{len(paths)} {time.time() - t0:.0f}s", flush=True)
    off = np.concatenate([[0], np.cumsum([len(d) for d in descs])]).astype(np.int64)
    np.savez(
        f, paths=np.array([str(p) for p in paths]), offsets=off,
        desc=np.concatenate(descs), xy=np.concatenate(xys),
    )  # fmt: skip
    return descs, xys


def caltech_paths(classes) -> tuple[list[Path], np.ndarray]:
    paths, y = [], []
    for c, name in enumerate(classes):
        files = sorted((DATA / "caltech101" / name).glob("*.jpg"))
        paths += files
        y += [c] * len(files)
    return paths, np.array(y)


def eth80_paths() -> tuple[list[Path], np.ndarray]:
    classes = sorted(p.name for p in (DATA / "eth80").iterdir() if p.is_dir())
    paths, y = [], []
    for c, name in enumerate(classes):
        files = sorted((DATA / "eth80" / name).glob("*/*.png"))
        paths += files
        y += [c] * len(files)
    return paths, np.array(y)


# ------------------------------------------------------------------ vocabulary-guided PM
class VGPyramid:
    """Vocabulary-guided pyramid match (thesis Ch. 4, global weights) for benchmarks.

    A hierarchical k-means tree (``branching`` ** ``levels`` leaves); level weights are
    ``1 / 2**l`` from the finest level (weights decrease as bins grow); kernel
    ``sum_l w_l (I_l - I_{l+1})`` with ``I_l`` the histogram intersection at level l, then
    normalised by ``sqrt(K(X, X) K(Y, Y))``. Optional spatial channel: the bin id is combined
    with a coarse ``xy`` cell (``spatial`` x ``spatial`` grid) at the finest levels.
    """

    def __init__(self, branching=8, levels=3, spatial=0, random_state=0, sample=60000):
        self.branching = branching
        self.levels = levels
        self.spatial = spatial
        self.rs = random_state
        self.sample = sample

    def fit(self, sets):
        from sklearn.cluster import KMeans

        rng = np.random.default_rng(self.rs)
        X = np.concatenate(sets)
        X = X[rng.choice(len(X), min(self.sample, len(X)), replace=False)]
        # top-down hierarchical k-means; nodes at depth t have ids in [0, b^t)
        self.centres = []
        assign = np.zeros(len(X), np.int64)
        for depth in range(1, self.levels + 1):
            cents = np.zeros((self.branching**depth, X.shape[1]), np.float32)
            new = np.zeros(len(X), np.int64)
            for node in np.unique(assign):
                idx = np.flatnonzero(assign == node)
                kk = min(self.branching, len(idx))
                km = KMeans(kk, n_init=1, random_state=self.rs, max_iter=50).fit(X[idx])
                cents[node * self.branching : node * self.branching + kk] = km.cluster_centers_
                new[idx] = node * self.branching + km.labels_
                if kk < self.branching:  # unused children: copy a real centre
                    cents[node * self.branching + kk : (node + 1) * self.branching] = (
                        km.cluster_centers_[0]
                    )
            assign = new
            self.centres.append(cents)
        return self

    def assign(self, D: np.ndarray, xy: np.ndarray | None = None) -> np.ndarray:
        """(M, levels) node ids, FINEST first."""
        node = np.zeros(len(D), np.int64)
        out = []
        for cents in self.centres:
            b = self.branching
            cand = node[:, None] * b + np.arange(b)[None, :]
            d = ((D[:, None, :] - cents[cand]) ** 2).sum(-1)
            node = cand[np.arange(len(D)), np.argmin(d, axis=1)]
            out.append(node.copy())
        bins = np.stack(out[::-1], axis=1)
        if self.spatial and xy is not None:
            extra = []
            s = self.spatial
            while s >= 2:  # (leaf, s x s cell) nested in (leaf, s/2 x s/2 cell) ...
                cell = np.minimum((xy * s).astype(np.int64), s - 1)
                cid = cell[:, 0] * s + cell[:, 1]
                extra.append(bins[:, 0] * s * s + cid)
                s //= 2
            bins = np.concatenate([np.stack(extra, axis=1), bins], axis=1)
        return bins

    def embed(self, bins_list, weights=None):
        """Sparse unary embedding: row i . row j = unnormalised PM kernel (thesis 5.1)."""
        import scipy.sparse as sp

        L = bins_list[0].shape[1]
        w = 0.5 ** np.arange(L)
        dw = w - np.append(w[1:], 0.0)  # sum_l w_l (I_l - I_{l+1}) = sum_l (w_l - w_{l+1}) I_l
        rows, cols, vals = [], [], []
        offset = 0
        for lev in range(L):
            ids = np.concatenate([b[:, lev] for b in bins_list])
            owner = np.repeat(np.arange(len(bins_list)), [len(b) for b in bins_list])
            mass = (np.concatenate(weights) if weights is not None else np.ones(len(ids))).astype(
                np.float64
            )
            key = owner * (ids.max() + 1) + ids
            # unary encoding of counts: t-th point in a (set, bin) -> column (bin, t)
            order = np.lexsort((ids, owner))
            key_s = key[order]
            start = np.r_[0, np.flatnonzero(np.diff(key_s)) + 1]
            rank = np.arange(len(key_s)) - np.repeat(start, np.diff(np.r_[start, len(key_s)]))
            maxr = rank.max() + 1
            col = offset + ids[order] * maxr + rank
            rows.append(owner[order])
            cols.append(col)
            vals.append(np.sqrt(dw[lev]) * mass[order])
            offset += (ids.max() + 1) * maxr
        E = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(len(bins_list), offset),
        )
        return E

    def kernel(self, bins_a, bins_b=None):
        if bins_b is None:
            E = self.embed(bins_a)
            K = (E @ E.T).toarray()
            d = np.sqrt(np.diag(K))
            return K / np.outer(d, d)
        E = self.embed(list(bins_a) + list(bins_b))
        na = len(bins_a)
        G = (E[:na] @ E[na:].T).toarray()
        da = np.sqrt(E[:na].multiply(E[:na]).sum(1)).A.ravel()
        db = np.sqrt(E[na:].multiply(E[na:]).sum(1)).A.ravel()
        return G / np.outer(da, db)


class _Match:
    def __init__(self, pairs, weight):
        self.pairs = pairs
        self.weight = weight


def vg_match(bins_a: np.ndarray, bins_b: np.ndarray) -> _Match:
    """Explicit correspondences of a vocabulary-guided pyramid match (thesis Sec. 3.2.3 /
    9.3): from the finest level up, the r-th still-unmatched point of A in a bin is paired
    with the r-th still-unmatched point of B in that bin; weight = level weight 1/2^l."""
    na, nb = len(bins_a), len(bins_b)
    free_a = np.ones(na, bool)
    free_b = np.ones(nb, bool)
    out_p, out_w = [], []
    for lev in range(bins_a.shape[1]):
        ia = np.flatnonzero(free_a)
        ib = np.flatnonzero(free_b)
        if ia.size == 0 or ib.size == 0:
            break
        ka, kb = bins_a[ia, lev], bins_b[ib, lev]
        oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
        ia, ka, ib, kb = ia[oa], ka[oa], ib[ob], kb[ob]
        ra = np.arange(ka.size) - np.searchsorted(ka, ka, side="left")
        rb = np.arange(kb.size) - np.searchsorted(kb, kb, side="left")
        # join on (bin, rank)
        keya = ka * 100000 + ra
        keyb = kb * 100000 + rb
        common, pa, pb = np.intersect1d(keya, keyb, assume_unique=True, return_indices=True)
        if common.size:
            out_p.append(np.stack([ia[pa], ib[pb]], axis=1))
            out_w.append(np.full(common.size, 0.5**lev))
            free_a[ia[pa]] = False
            free_b[ib[pb]] = False
    if not out_p:
        return _Match(np.zeros((0, 2), np.int64), np.zeros(0))
    return _Match(np.concatenate(out_p), np.concatenate(out_w))


# ----------------------------------------------------------------------------- benchmarks
def _scores(y, labels):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from engine.cluster.discovery import clustering_accuracy

    return (
        clustering_accuracy(y, labels),
        normalized_mutual_info_score(y, labels),
        adjusted_rand_score(y, labels),
    )


def discovery_pipeline(K, bins, k, *, power=None, refine=True, relabel=True, seed=0, **kw):
    """ncut -> masks/prototypes -> SVM on prototypes relabels the rest. Returns dict of
    label vectors per stage."""
    from engine.cluster.classify import CategoryClassifier
    from engine.cluster.discovery import discover_categories, refine_with_masks

    res = discover_categories(K, k=k, power=power, random_state=seed, **kw)
    out = {"ncut": res.labels, "_res": res}
    protos = res.prototypes
    if refine:
        ref = refine_with_masks(bins, res.labels, lambda i, j: vg_match(bins[i], bins[j]))
        protos = ref.prototypes
        out["_ref"] = ref
    out["_protos"] = protos
    if relabel and res.k > 1:
        idx = np.flatnonzero(protos)
        clf = CategoryClassifier(C=10.0).fit(K[np.ix_(idx, idx)], res.labels[idx])
        lab = clf.predict(K[:, idx]).labels
        out["relabel"] = lab
    return out


def run_caltech4(args):
    paths, y = caltech_paths(CALTECH4)
    print(f"Caltech-4 dev: {len(paths)} images, classes {CALTECH4}")
    for kind, mf in args.features:
        descs, xys = load_features(f"c4_{kind}", paths, kind, mf)
        for spatial in args.spatial:
            vg = VGPyramid(args.branching, args.levels, spatial=spatial).fit(descs)
            bins = [vg.assign(d, xy) for d, xy in zip(descs, xys, strict=True)]
            K = vg.kernel(bins)
            from engine.cluster.discovery import diagonal_dominance

            print(
                f"[{kind} {mf}, VG-PM b={args.branching} L={args.levels} spatial={spatial}] "
                f"diag dominance {diagonal_dominance(K):.1f}"
            )
            for power in args.powers:
                t0 = time.time()
                out = discovery_pipeline(K, bins, 4, power=power)
                protos = out["_protos"]
                acc_p = _scores(y[protos], out["ncut"][protos])[0]
                line = f"  k=4 p={power}: ncut acc {_scores(y, out['ncut'])[0]:.3f}"
                line += f", prototypes acc {acc_p:.3f} ({protos.sum()})"
                if "relabel" in out:
                    a, nmi, ari = _scores(y, out["relabel"])
                    line += f", refined+SVM acc {a:.3f} NMI {nmi:.3f} ARI {ari:.3f}"
                print(line + f"  [{time.time() - t0:.1f}s]", flush=True)
            from engine.cluster.discovery import discover_categories

            for power in args.powers:
                r = discover_categories(K, k="auto", power=power)
                print(f"  k=auto p={power}: k={r.k} acc {_scores(y, r.labels)[0]:.3f}: "
                      f"{r.k_reason}")  # fmt: skip


def run_eth80(args):
    paths, y = eth80_paths()
    print(f"ETH-80 dev: {len(paths)} images, 8 classes")
    for kind, mf in args.features:
        descs, xys = load_features(f"eth80_{kind}", paths, kind, mf)
        for spatial in args.spatial:
            vg = VGPyramid(args.branching, args.levels, spatial=spatial).fit(descs)
            bins = [vg.assign(d, xy) for d, xy in zip(descs, xys, strict=True)]
            K = vg.kernel(bins)
            for power in args.powers:
                out = discovery_pipeline(K, bins, 8, power=power)
                a, nmi, ari = _scores(y, out["ncut"])
                line = (
                    f"[{kind} {mf} spatial={spatial} p={power}] k=8 ncut: acc {a:.3f} "
                    f"NMI {nmi:.3f} ARI {ari:.3f}"
                )
                if "relabel" in out:
                    a, nmi, ari = _scores(y, out["relabel"])
                    line += f"; refined+SVM: acc {a:.3f} NMI {nmi:.3f} ARI {ari:.3f}"
                print(line, flush=True)
            from engine.cluster.discovery import discover_categories

            r = discover_categories(K, k="auto", power=args.powers[-1])
            print(f"  k=auto: k={r.k}, acc {_scores(y, r.labels)[0]:.3f}; {r.k_reason}")


def run_nystrom(args):
    """10,000 images: Nystrom columns from a low-rank set model vs the 60 s budget."""
    from engine.cluster.discovery import (
        choose_landmarks,
        clustering_accuracy,
        discover_categories,
    )

    rng = np.random.default_rng(0)
    n, k, m = 10000, 10, args.landmarks
    truth = rng.integers(k, size=n)
    # each image = random mixture of a class topic and 3 shared background topics
    topics = rng.gamma(0.3, size=(k + 3, 400))
    mix = np.zeros((n, k + 3))
    mix[np.arange(n), truth] = rng.uniform(0.4, 0.8, n)
    mix[:, k:] = rng.dirichlet(np.ones(3), n) * (1 - mix[np.arange(n), truth])[:, None]
    H = mix @ topics
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    t0 = time.time()
    lm = choose_landmarks(n, m, must=[(0, 1)], random_state=0)
    C = H @ H[lm].T  # the only kernel values needed: n x m columns
    t1 = time.time()
    res = discover_categories(C, landmarks=lm, k="auto", must=[(0, 1)])
    t2 = time.time()
    print(
        f"Nystrom n={n} m={len(lm)}: columns {t1 - t0:.2f}s, grouping {t2 - t1:.2f}s "
        f"(<= 60 s budget), k={res.k} acc {clustering_accuracy(truth, res.labels):.3f}"
    )
    t3 = time.time()
    res10 = discover_categories(C, landmarks=lm, k=k, must=[(0, 1)])
    print(f"  k={k} given: grouping {time.time() - t3:.2f}s, "
          f"acc {clustering_accuracy(truth, res10.labels):.3f}")  # fmt: skip
    if args.exact_check:
        sub = rng.choice(n, 3000, replace=False)
        t3 = time.time()
        r2 = discover_categories(H[sub] @ H[sub].T, k=k)
        print(f"  exact on 3000: {time.time() - t3:.2f}s acc "
              f"{clustering_accuracy(truth[sub], r2.labels):.3f}")  # fmt: skip


def run_cli(args) -> None:
    """``simile cluster`` end to end on a folder whose sub-folders are the classes (e.g. a
    COPY of the four Caltech-4 class folders in /tmp): grouping accuracy (best one-to-one
    matching), prototype accuracy (prototypes labelled by their group's matched class)
    and time, with and without the feature-mask refinement."""
    import contextlib
    import io
    import json

    from app.cli import main as cli
    from engine.cluster.discovery import clustering_accuracy

    if not args.folder:
        raise SystemExit("cli: give --folder (a copy of the class folders, never the repo)")
    folder = Path(args.folder)
    index = args.index or str(folder.parent / (folder.name + "_index"))
    base = ["cluster", str(folder), "--index", index, "--json"]
    with contextlib.redirect_stdout(io.StringIO()):
        cli([*base[:4], "--k", "2", "--no-refine"])  # index once, untimed
    for k, spatial, refine in [
        (k, g, r) for g in args.cli_spatial for k in args.k for r in (False, True)
    ]:
        argv = [*base, "--no-update", "--k", k, "--partners", str(args.partners)]
        argv += [] if refine else ["--no-refine"]
        argv += ["--spatial", str(spatial), "--features", "index"] if spatial else []
        out = io.StringIO()
        t0 = time.time()
        with contextlib.redirect_stdout(out):
            code = cli(argv)
        dt = time.time() - t0
        if code:
            raise SystemExit(f"simile {' '.join(argv)} failed ({code})")
        res = json.loads(out.getvalue().strip().splitlines()[-1])
        members = [(m, c["id"]) for c in res["clusters"] for m in c["members"]]
        names = sorted({Path(m).parent.name for m, _ in members})
        truth = np.array([names.index(Path(m).parent.name) for m, _ in members])
        labels = np.array([g for _, g in members])
        C = np.zeros((labels.max() + 1, len(names)))
        np.add.at(C, (labels, truth), 1)
        from scipy.optimize import linear_sum_assignment

        r, c = linear_sum_assignment(-C)
        cls_of = dict(zip(r.tolist(), c.tolist(), strict=True))
        pro = [(names.index(Path(m).parent.name), c["id"]) for c in res["clusters"]
               for m in c["prototypes"]]  # fmt: skip
        pacc = np.mean([cls_of.get(g, -1) == t for t, g in pro])
        tag = f"k={k} spatial={spatial} {'refined' if refine else 'no refine'}"
        print(f"[cli {tag}] k found {res['k']} "
              f"accuracy {clustering_accuracy(truth, labels):.3f} prototype accuracy "
              f"{pacc:.3f} ({len(pro)}) {dt:.1f}s  ({res['k_reason'][:60]})",
              flush=True)  # fmt: skip


def run_product(args) -> None:
    """The shared pipeline (:func:`engine.cluster.categorize_iter`, what ``simile cluster``
    and the app run) on an indexed folder, twice: the first run computes the dense
    channel for images not cached yet, the second measures grouping "once features are
    indexed". Per-stage seconds are printed; with ``--truth parent`` (or ``grandparent``)
    the class of a photo is its folder name and accuracy / NMI / ARI are printed too."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from engine.cluster.discovery import categorize_iter, clustering_accuracy
    from engine.collection import Collection

    if not args.folder or not args.index:
        raise SystemExit("product: give --folder and --index (an existing index)")
    col = Collection.open(args.folder, args.index, create=False)
    try:
        for run, k in enumerate(args.k * args.repeat):
            k = "auto" if k == "auto" else int(k)
            t0 = time.time()
            gen = categorize_iter(col, k=k, jobs=args.jobs)
            last = None
            while True:
                try:
                    p = next(gen)
                except StopIteration as stop:
                    res = stop.value
                    break
                if p.stage != last and p.stage == "features" and p.total:
                    print(f"  computing dense features of {p.total} images", flush=True)
                last = p.stage
            stages = ", ".join(f"{a} {b:.1f}" for a, b in res.seconds.items())
            line = (f"[product run {run} k={k}] n={res.n} k found {res.k} "
                    f"{time.time() - t0:.1f}s ({stages})")  # fmt: skip
            if args.truth != "none":
                up = 1 if args.truth == "parent" else 2
                names = [p.parents[up - 1].name for p in res.paths]
                y = np.unique(names, return_inverse=True)[1]
                lab = res.labels
                line += (f" acc {clustering_accuracy(y, lab):.3f} NMI "
                         f"{normalized_mutual_info_score(y, lab):.3f} ARI "
                         f"{adjusted_rand_score(y, lab):.3f}")  # fmt: skip
                pr = res.prototypes
                line += f" prototypes {pr.sum()} acc {clustering_accuracy(y[pr], lab[pr]):.3f}"
            print(line, flush=True)
            print("   ", res.k_reason[:300], flush=True)
    finally:
        col.close()


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("parts", nargs="*", default=["caltech4", "eth80", "nystrom"])
    p.add_argument("--branching", type=int, default=10)
    p.add_argument("--levels", type=int, default=3)
    p.add_argument("--spatial", type=int, nargs="+", default=[0, 4])
    p.add_argument("--powers", type=float, nargs="+", default=[1.0])
    p.add_argument("--kind", nargs="+", default=["dense:400"])
    p.add_argument("--landmarks", type=int, default=500)
    p.add_argument("--exact-check", action="store_true")
    p.add_argument("--folder", help="cli part: folder with one sub-folder per class")
    p.add_argument("--index", help="cli / product part: index directory")
    p.add_argument("--jobs", type=int, default=None, help="product part: processes")
    p.add_argument("--repeat", type=int, default=1, help="product part: runs per --k value")
    p.add_argument(
        "--truth",
        default="parent",
        choices=("parent", "grandparent", "none"),
        help="product part: class = name of the parent (or grandparent) folder",
    )
    p.add_argument("--k", nargs="+", default=["4", "auto"], help="cli part: --k values")
    p.add_argument("--partners", type=int, default=8, help="cli part: --partners")
    p.add_argument("--cli-spatial", type=int, nargs="+", default=[0, 4],
                   help="cli part: --spatial values (0 = off)")  # fmt: skip
    args = p.parse_args(argv)
    args.features = [(s.split(":")[0], int(s.split(":")[1])) for s in args.kind]
    args.powers = [None if x == 1.0 else x for x in args.powers]
    for part in args.parts:
        parts = {"caltech4": run_caltech4, "eth80": run_eth80, "nystrom": run_nystrom}
        parts["cli"] = run_cli
        parts["product"] = run_product
        parts[part](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
