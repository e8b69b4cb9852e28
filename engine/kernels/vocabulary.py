"""Vocabulary tree: hierarchical k-means bins for the vocabulary-guided pyramid match.

Implements the data-dependent partition of Grauman's thesis, chapter 4: a sample of
features is clustered with k-means into ``k`` groups, each group recursively into ``k``
more, for ``L`` levels counting the root (section 4.1). Every node (bin) records its
centre, its parent, the number of training points it holds, their largest distance to
the centre (radius) and their largest pairwise distance (the bin *diameter* ``A_ij`` of
Eq. 4.3 (a)).

:class:`VocabularyTree` implements the :class:`engine.kernels.binning.Binning` protocol, so it
plugs into ``PyramidMatch(bins="vocabulary")``:

* :meth:`VocabularyTree.assign` pushes points down the tree (``k`` distances per level,
  section 4.1) and returns the bin of every point at every level, *finest first*, plus
  the distance to each bin centre. Those distances give the input-specific weights of
  Eq. 4.3 (b), ``d_ij(X) + d_ij(Y)`` with ``d_ij(X)`` the largest distance of ``X``'s
  points in bin ``j`` to its centre (the pyramid engine takes the per-bin maximum).
* :meth:`VocabularyTree.bin_weights` gives the global similarity weights
  ``w_ij = exp(-A_ij / sigma)`` of thesis section 8.2.2 (Table 8.1), with ``sigma`` the
  mean distance between sample features. Because diameters never decrease from a bin to
  its parent, these weights never increase, which makes Eq. 4.4 a Mercer kernel
  (section 4.3).

:func:`bag_of_words` and :func:`fit_idf` (:mod:`engine.kernels.words`, importable from
here too) turn the leaves into a tf-idf bag of visual words (Nistér & Stewénius) for the
index, WTA hashing and similarity learning.

Speed: every level is clustered for all its nodes at once (the batched k-means of
:mod:`engine.kernels.kmeans`). 100,000 128-D SIFT descriptors with ``k = 10``, ``L = 4``
(or ``L = 5``, 10,000 leaves) build in seconds on two cores
(``tests/benchmarks/bench_vocabulary.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from engine.core.blas import single_threaded_blas as _single_threaded_blas
from engine.core.validate import as_documents, as_point_set, check_choice, check_positive
from engine.kernels.kmeans import (
    kmeans_level,
    rowwise_sqdist,
    runs,
    segment_argmax,
    segment_argmin,
    segment_starts,
    small_bin_diameters,
)
from engine.kernels.words import bag_of_words, fit_idf, tfidf, word_counts

__all__ = [
    "VocabularyProgress",
    "VocabularyTree",
    "bag_of_words",
    "fit_idf",
    "tfidf",
    "word_counts",
]

_WEIGHTS = ("global", "input_specific", "idf")
# _descend: up to this many points (a query image), each point's candidate centres are
# gathered (m, k, D) instead of grouping the points by node: fewer, larger numpy calls
# (one UKBench image: 2.4-3.2 -> 1.0-1.1 ms a tree)
_GATHER_DESCENT_MAX = 1024
_SIGMA_PAIRS = 20_000
# k-means of a node runs on at most this many random points per child, then every
# point of the node is assigned to the resulting centres.
_NODE_SAMPLE_PER_CHILD = 256
# Bins with at most this many training points get their exact diameter; larger ones
# the farthest-point estimate.
_EXACT_DIAMETER_MAX_POINTS = 64


class VocabularyProgress(NamedTuple):
    """Progress of :meth:`VocabularyTree.fit_iter`: ``done`` of ``total`` steps."""

    done: int
    total: int
    message: str


class VocabularyTree:
    """Hierarchical k-means vocabulary: nested, data-shaped bins (thesis chapter 4).

    Parameters
    ----------
    branching : int, default 10
        ``k``, number of children per node.
    levels : int, default 4
        ``L``, number of pyramid levels *including the root*, as in thesis section 4.1
        (level ``i`` holds at most ``k**i`` bins: ``i = 0`` is the root, a single bin
        around the sample mean, ``i = L - 1`` the at most ``k**(L - 1)`` leaves; libpmk
        counts the same way). The root level lets every point of the smaller set find
        a match, so pyramid-match costs count all ``min(|X|, |Y|)`` pairs.
    weights : {"global", "input_specific", "idf"}, default "global"
        Which weighting of Eq. 4.3 a vocabulary-guided pyramid match built on this tree
        should use; read by :class:`engine.kernels.pyramid.PyramidMatch`. (a) ``"global"``:
        bin diameters, ``exp(-A_ij / sigma)`` as similarity (Mercer); (b)
        ``"input_specific"``: ``d_ij(X) + d_ij(Y)`` from the distances of
        :meth:`assign`; ``"idf"``: inverse document frequencies
        ``idf_b = ln(N / N_b)`` of the bins over ``N`` example sets (Nistér & Stewénius
        2006; :meth:`fit_document_frequencies` computes them), see :meth:`bin_weights`.
    max_iter : int, default 10
        Maximum Lloyd iterations per level.
    tol : float, default 1e-3
        Lloyd stops when at most this fraction of the level's points changes cluster.
    sample_size : int or None, default None
        If given, :meth:`fit` clusters a random subset of at most this many points.
    sigma : float or None, default None
        Scale of the global weights; ``None`` = mean distance between random pairs of
        the sample's features (thesis section 8.2.2).
    random_state : int, default 0
        Seed; equal seeds and samples give identical trees.

    Attributes
    ----------
    n_levels : int
        ``levels`` (Binning protocol).
    dim : int
        Feature dimension ``D`` (after :meth:`fit`).
    sigma_ : float
        Scale used by :meth:`bin_weights`.
    n_leaves : int
        Number of (non-empty) leaves; leaf ids are ``0 .. n_leaves - 1``.
    n_documents_ : int or None
        ``N``, number of non-empty sets :meth:`fit_document_frequencies` counted bins over
        (None before).

    Notes
    -----
    Node ids are indices within their level, ordered by parent, so the children of a
    node are contiguous. Level indices in :meth:`assign`, :meth:`bin_weights` and
    :meth:`diameters` count from the finest level (0 = leaves), as the Binning protocol
    requires; the thesis counts from the root (its level ``i`` is ``L - 1 - level``).

    Diameter ``A_ij`` (Eq. 4.3 (a)) is the largest distance between two training points
    of the bin. It is exact for bins of at most 64 training points (all pairs); larger
    bins use two farthest-point sweeps (from the point farthest from the centre to the
    point farthest from it, and once more), a lower bound within a factor 2 and usually
    close. Then every parent's diameter is raised to at least its children's, which the
    true diameters satisfy and which keeps the global weights non-increasing towards
    the root (section 4.3).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((2000, 8), dtype=np.float32)
    >>> tree = VocabularyTree(branching=4, levels=3).fit(X)
    >>> bins, dist = tree.assign(X[:5])
    >>> bins.shape, dist.shape
    ((5, 3), (5, 3))
    >>> bool(np.all(tree.bin_weights(0, bins[:, 0]) >= tree.bin_weights(1, bins[:, 1])))
    True
    """

    def __init__(
        self,
        branching: int = 10,
        levels: int = 4,
        weights: str = "global",
        *,
        max_iter: int = 10,
        tol: float = 1e-3,
        sample_size: int | None = None,
        sigma: float | None = None,
        random_state: int = 0,
    ) -> None:
        if int(branching) != branching or branching < 2:
            raise ValueError(f"branching must be an integer >= 2, got {branching!r}")
        if int(levels) != levels or levels < 2:
            raise ValueError(f"levels must be an integer >= 2, got {levels!r}")
        check_choice(weights, "weights", _WEIGHTS)
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be an integer >= 0, got {max_iter!r}")
        if not 0 <= tol < 1:
            raise ValueError(f"tol must be in [0, 1), got {tol!r}")
        if sample_size is not None and (int(sample_size) != sample_size or sample_size < 1):
            raise ValueError(
                f"sample_size must be a positive integer or None, got {sample_size!r}"
            )
        if sigma is not None:
            check_positive(sigma, "sigma")
        self.branching = int(branching)
        self.levels = int(levels)
        self.n_levels = int(levels)
        self.weights = weights
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.sample_size = None if sample_size is None else int(sample_size)
        self.sigma = None if sigma is None else float(sigma)
        self.random_state = int(random_state)
        self._fitted = False
        self.n_documents_: int | None = None
        self._df: list[np.ndarray] | None = None  # per level, coarsest first
        self._idf_path: list[np.ndarray] | None = None

    # ------------------------------------------------------------------ fitting
    def fit(self, sample: np.ndarray) -> VocabularyTree:
        """Build the tree from ``sample`` (N, D) float32 stacked features. Returns self."""
        for _ in self.fit_iter(sample):
            pass
        return self

    def fit_iter(self, sample: np.ndarray) -> Iterator[VocabularyProgress]:
        """Build the tree level by level, yielding progress (cancel between yields).

        Parameters
        ----------
        sample : (N, D) float32
            Representative features, ``N >= 1``.

        Yields
        ------
        VocabularyProgress
            ``done`` of ``levels`` steps (one per level below the root, one for the bin
            statistics).
        """
        X = as_point_set(sample, "sample")
        if X.shape[0] == 0:
            raise ValueError("sample must contain at least one feature, got 0 rows")
        rng = np.random.default_rng(self.random_state)
        if self.sample_size is not None and X.shape[0] > self.sample_size:
            X = X[np.sort(rng.choice(X.shape[0], self.sample_size, replace=False))]
        n, dim = X.shape
        k, L = self.branching, self.levels
        total = L  # L - 1 clustered levels, then the bin statistics

        # level 0 (thesis numbering) is the root: one bin holding everything, centred on
        # the sample mean; levels 1 .. L-1 come from k-means inside their parents.
        centers = [X.mean(axis=0, dtype=np.float64)[None].astype(np.float32)]
        parents = [np.zeros(1, dtype=np.int64)]
        bins = np.zeros((n, L), dtype=np.int64)  # training points' bins, coarsest first
        cap = _NODE_SAMPLE_PER_CHILD * k
        perm = np.arange(n)  # the points grouped by node (never moved themselves)
        node = np.zeros(n, dtype=np.int64)
        n_nodes = 1
        for lvl in range(1, L):
            with _single_threaded_blas():  # not held across the yield
                seg_starts = segment_starts(node, n_nodes)
                sizes = np.diff(seg_starts)
                if sizes.max() > cap:
                    # Cluster at most `cap` random points per node, then assign all.
                    order = np.lexsort((rng.random(n), node))
                    rank = np.arange(n) - seg_starts[node[order]]
                    sub = np.sort(order[rank < cap])
                    flat_c, _, kk = kmeans_level(
                        X,
                        segment_starts(node[sub], n_nodes),
                        k,
                        rng,
                        self.max_iter,
                        self.tol,
                        rows=perm[sub],
                    )
                    csq = np.einsum("nd,nd->n", flat_c, flat_c)
                    cand_lo = np.arange(n_nodes, dtype=np.int64) * k
                    labels = segment_argmin(X, seg_starts, cand_lo, kk, flat_c, csq, perm)
                else:
                    flat_c, labels, _ = kmeans_level(
                        X, seg_starts, k, rng, self.max_iter, self.tol, rows=perm
                    )
                present, new_node = np.unique(labels, return_inverse=True)
                centers.append(np.ascontiguousarray(flat_c[present]))
                parents.append(present // k)
                bins[perm, lvl] = new_node
                order = np.argsort(new_node, kind="stable")
                node, perm = new_node[order], perm[order]
                n_nodes = present.size
            yield VocabularyProgress(lvl, total, f"level {lvl}/{L - 1}: {n_nodes} bins")

        self.dim = dim
        self.n_documents_, self._df, self._idf_path = None, None, None
        self._set_structure(centers, parents)
        with _single_threaded_blas():
            self._compute_statistics(X, bins, rng)
        self._fitted = True
        yield VocabularyProgress(total, total, "bin diameters")

    def _set_structure(self, centers: list[np.ndarray], parents: list[np.ndarray]) -> None:
        """Store per-level arrays, coarsest level first (thesis order)."""
        self._centers = [np.ascontiguousarray(c, dtype=np.float32) for c in centers]
        self._csq = [np.einsum("nd,nd->n", c, c) for c in self._centers]
        self._parent = [np.asarray(p, dtype=np.int64) for p in parents]
        # children of level-l node j: rows child_start[l][j] : +n_child[l][j] of level l+1
        self._child_start: list[np.ndarray] = []
        self._n_child: list[np.ndarray] = []
        for lvl in range(1, self.levels):
            n_prev = self._centers[lvl - 1].shape[0]
            self._n_child.append(np.bincount(self._parent[lvl], minlength=n_prev))
            self._child_start.append(np.searchsorted(self._parent[lvl], np.arange(n_prev)))
        self._child_blocks: list[tuple[np.ndarray, np.ndarray]] | None = None

    def _compute_statistics(
        self, X: np.ndarray, bins: np.ndarray, rng: np.random.Generator
    ) -> None:
        """Counts, radii and diameters of every bin from training points ``X`` and their
        ``bins`` (N, L), coarsest first (the same nearest-child descent as :meth:`assign`).
        """
        self._count, self._radius, self._diameter = [], [], []
        for lvl in range(self.levels):
            n_l = self._centers[lvl].shape[0]
            b = bins[:, lvl]
            count = np.bincount(b, minlength=n_l)
            # maxima per bin over the points grouped by bin (stable: ties go to the
            # point that comes last in X)
            order = np.argsort(b, kind="stable")
            has = np.flatnonzero(count)
            sizes = count[has]
            starts, seg = runs(sizes)  # seg: the bin (of `has`) at every position
            dist_l = np.sqrt(rowwise_sqdist(X, self._centers[lvl], b))[order]
            radius = np.zeros(n_l, dtype=np.float32)
            radius[has] = np.maximum.reduceat(dist_l, starts)
            # bins of up to _EXACT_DIAMETER_MAX_POINTS points get their exact diameter
            # (0 for one point); larger ones two farthest-point sweeps: from the point
            # farthest from the centre to the one farthest from it, and once more
            diam = np.zeros(n_l, dtype=np.float32)
            exact, value = small_bin_diameters(
                X, b, count, _EXACT_DIAMETER_MAX_POINTS, order=order
            )
            diam[exact] = value
            wide = sizes > _EXACT_DIAMETER_MAX_POINTS
            if wide.any():
                w_sizes = sizes[wide]
                w_starts, w_seg = runs(w_sizes)
                keep = wide[seg]  # sorted positions inside the wide bins
                Xw = X[order[keep]]  # gathered once for both sweeps
                start = segment_argmax(dist_l[keep], w_starts, w_seg)
                widest = np.zeros(w_sizes.size, dtype=np.float32)
                for sweep in range(2):
                    d = np.sqrt(rowwise_sqdist(Xw, Xw[start], w_seg))
                    np.maximum(widest, np.maximum.reduceat(d, w_starts), out=widest)
                    if sweep == 0:
                        start = segment_argmax(d, w_starts, w_seg)
                diam[has[wide]] = widest
            self._count.append(count.astype(np.int64))
            self._radius.append(radius)
            self._diameter.append(diam)
        for lvl in range(self.levels - 1, 0, -1):  # parents at least as wide as children
            np.maximum.at(self._diameter[lvl - 1], self._parent[lvl], self._diameter[lvl])
        if self.sigma is not None:
            self.sigma_ = self.sigma
        else:
            i = rng.integers(0, X.shape[0], _SIGMA_PAIRS)
            j = rng.integers(0, X.shape[0], _SIGMA_PAIRS)
            mean = float(np.sqrt(rowwise_sqdist(X[i], X, j)).mean())
            self.sigma_ = mean if mean > 0 else 1.0

    def fit_document_frequencies(self, sets: list[np.ndarray]) -> VocabularyTree:
        """Count in how many of ``sets`` every bin occurs (the ``"idf"`` weights).

        Parameters
        ----------
        sets : list of (M_i, D) float32 arrays
            Example sets ("documents"), e.g. the sets the tree was fitted on; empty sets
            are skipped. At least two must be non-empty: with ``N = 1`` every idf is 0.

        Returns
        -------
        self

        Notes
        -----
        ``N_b`` is the number of non-empty sets with a point in bin ``b``; the root then
        has ``idf = 0``. Cost: one descent of all the sets' points (as one encoding).
        """
        self._check_fitted()
        points, owner, n = as_documents(sets, dim=self.dim)
        with _single_threaded_blas():
            bins, _ = self._descend(points, need_dist=False)  # coarsest first
        df = []
        for lvl in range(self.levels):
            n_l = self._centers[lvl].shape[0]
            present = np.unique(owner * n_l + bins[:, lvl])  # distinct (set, bin) pairs
            df.append(np.bincount(present % n_l, minlength=n_l).astype(np.int64))
        self._set_document_frequencies(n, df)
        return self

    def _set_document_frequencies(self, n: int, df: list[np.ndarray]) -> None:
        """Store ``N`` and the per-level counts (coarsest first) and the path sums of idf
        that :meth:`bin_weights` returns."""
        self.n_documents_ = int(n)
        self._df = [np.asarray(d, np.int64) for d in df]
        idf = [np.log(n / np.maximum(d, 1)) for d in self._df]
        path = [idf[0]]
        for lvl in range(1, self.levels):
            path.append(idf[lvl] + path[-1][self._parent[lvl]])
        self._idf_path = path

    # ------------------------------------------------------------------ encoding
    def _check_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError("VocabularyTree is not fitted; call fit(sample) first")

    def _descend(
        self, X: np.ndarray, need_dist: bool = True, depth: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Push points down the tree; bins and distances (M, L), COARSEST first
        (``need_dist=False``: the distances are left uninitialised, not computed;
        ``depth``: only the levels down to thesis level ``depth`` are filled)."""
        m = X.shape[0]
        L = self.levels if depth is None else int(depth) + 1
        bins = np.empty((m, L), dtype=np.int64)
        dist = np.empty((m, L), dtype=np.float32)
        if m == 0:
            return bins, dist
        bins[:, 0] = 0  # the root
        if need_dist:
            dist[:, 0] = np.sqrt(rowwise_sqdist(X, self._centers[0], np.zeros(m, np.int64)))
        if m <= _GATHER_DESCENT_MAX:
            node = np.zeros(m, dtype=np.int64)
            for lvl in range(1, L):
                node = self._nearest_child(X, node, lvl)
                bins[:, lvl] = node
                if need_dist:
                    dist[:, lvl] = np.sqrt(rowwise_sqdist(X, self._centers[lvl], node))
            return bins, dist
        perm = np.arange(m)  # the points grouped by their bin (never moved themselves)
        node = np.zeros(m, dtype=np.int64)
        for lvl in range(1, L):
            n_prev = self._child_start[lvl - 1].size
            seg_starts = segment_starts(node, n_prev)
            chosen = segment_argmin(
                X,
                seg_starts,
                self._child_start[lvl - 1],
                self._n_child[lvl - 1],
                self._centers[lvl],
                self._csq[lvl],
                rows=None if lvl == 1 else perm,
            )
            bins[perm, lvl] = chosen
            if need_dist:
                dist[perm, lvl] = np.sqrt(rowwise_sqdist(X, self._centers[lvl], chosen, perm))
            if lvl + 1 < L:
                order = np.argsort(chosen, kind="stable")
                perm, node = perm[order], chosen[order]
        return bins, dist

    def _nearest_child(self, X: np.ndarray, node: np.ndarray, lvl: int) -> np.ndarray:
        """(M,) int64 the nearest level-``lvl`` child of every point's node (each point's
        candidate centres gathered: the small-input path of :meth:`_descend`, same rule)."""
        if self._child_blocks is None:
            # every node's children as one padded block: (nodes, k, D) centres and their
            # squared norms (inf in the padding), built once
            blocks = []
            for lv in range(1, self.levels):
                n_c = self._n_child[lv - 1]
                slots = np.arange(int(n_c.max(initial=1)))
                valid = slots < n_c[:, None]
                cidx = np.where(valid, self._child_start[lv - 1][:, None] + slots, 0)
                csq = np.where(valid, self._csq[lv][cidx], np.float32(np.inf))
                blocks.append((self._centers[lv][cidx], csq.astype(np.float32)))
            self._child_blocks = blocks
        C, csq = self._child_blocks[lvl - 1]
        d = csq[node] - 2.0 * np.einsum("mkd,md->mk", C[node], X)  # (M, k)
        return self._child_start[lvl - 1][node] + np.argmin(d, axis=1)

    def assign(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bins of every point at every level, finest first, and distances to bin centres.

        At each level a point is compared with the (at most ``k``) children of its
        current bin and descends into the nearest (section 4.1; ``kL`` distances).

        Parameters
        ----------
        X : (M, D) float32

        Returns
        -------
        bins : (M, levels) int64
            ``bins[:, 0]`` are leaves, ``bins[:, -1]`` the top-level bins; ids are unique
            within a level and nested (the bin at ``l + 1`` is the parent of the one at
            ``l``).
        dist : (M, levels) float32
            Euclidean distance of each point to the centre of its bin at that level; the
            per-bin maximum over a set is ``d_ij(X)`` of Eq. 4.3 (b).
        """
        self._check_fitted()
        X = as_point_set(X, "X", dim=self.dim)
        with _single_threaded_blas():
            bins, dist = self._descend(X)
        return np.ascontiguousarray(bins[:, ::-1]), np.ascontiguousarray(dist[:, ::-1])

    def assign_bins(self, X: np.ndarray) -> np.ndarray:
        """``assign(X)[0]`` without the distances (the query path of a collection needs
        only the bins: one gather and product per level less).

        Returns
        -------
        (M, levels) int64
            Finest level first, as :meth:`assign`.
        """
        self._check_fitted()
        X = as_point_set(X, "X", dim=self.dim)
        with _single_threaded_blas():
            bins, _ = self._descend(X, need_dist=False)
        return np.ascontiguousarray(bins[:, ::-1])

    def leaf_ids(self, X: np.ndarray) -> np.ndarray:
        """(M,) int64 leaf (visual word) index of every point, in ``[0, n_leaves)``."""
        return self.assign(X)[0][:, 0].copy()

    def bins_at(self, X: np.ndarray, level: int) -> np.ndarray:
        """(M,) int64 bin of every point at ``level`` (0 = leaves), as ``assign_bins(X)[:,
        level]`` but descending no deeper than that level (the coarser vocabulary of
        :mod:`engine.kernels.hamming`: a level above the leaves costs a quarter less).
        """
        lvl = self._level(level)
        X = as_point_set(X, "X", dim=self.dim)
        with _single_threaded_blas():
            bins, _ = self._descend(X, need_dist=False, depth=lvl)
        return bins[:, lvl].copy()

    # ------------------------------------------------------------------ bin data
    def _level(self, level: int) -> int:
        """Thesis (coarsest-first) index of a finest-first ``level``."""
        self._check_fitted()
        if int(level) != level or not 0 <= level < self.levels:
            raise ValueError(f"level must be an integer in [0, {self.levels}), got {level!r}")
        return self.levels - 1 - int(level)

    def _bins(self, lvl: int, bins: np.ndarray) -> np.ndarray:
        b = np.asarray(bins)
        n_l = self._centers[lvl].shape[0]
        if b.size and (not np.issubdtype(b.dtype, np.integer) or b.min() < 0 or b.max() >= n_l):
            raise ValueError(f"bins must be integer bin ids in [0, {n_l}) for this level")
        return b.astype(np.int64, copy=False)

    @property
    def n_leaves(self) -> int:
        """Number of leaves (visual words)."""
        self._check_fitted()
        return int(self._centers[-1].shape[0])

    @property
    def ids_follow_parents(self) -> bool:
        """Whether every level's bin ids ascend with their parents' (as :meth:`fit`
        numbers them): points sorted by leaf are then sorted by their bin at every level,
        so each level's bins are runs of that order."""
        self._check_fitted()
        return all(bool(np.all(p[1:] >= p[:-1])) for p in self._parent[1:])

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of bins per level, finest first."""
        self._check_fitted()
        return tuple(int(c.shape[0]) for c in self._centers[::-1])

    def centers(self, level: int) -> np.ndarray:
        """(n_bins, D) float32 bin centres at ``level`` (0 = leaves)."""
        return self._centers[self._level(level)]

    def parents(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) int64 parent ids at ``level + 1`` (all bins if ``bins`` is None).

        ``level`` must be below the root (``level < levels - 1``).
        """
        lvl = self._level(level)
        if lvl == 0:
            raise ValueError(f"level {level} is the root, which has no parent")
        p = self._parent[lvl]
        return p.copy() if bins is None else p[self._bins(lvl, bins)]

    def diameters(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) float64 bin diameters ``A_ij`` (Eq. 4.3 (a)) at ``level`` (0 = leaves).

        Cost weight of the global weighting; non-decreasing from a bin to its parent.
        """
        lvl = self._level(level)
        d = self._diameter[lvl]
        return (d if bins is None else d[self._bins(lvl, bins)]).astype(np.float64)

    def radii(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) float64 largest distance of a training point to its bin centre."""
        lvl = self._level(level)
        r = self._radius[lvl]
        return (r if bins is None else r[self._bins(lvl, bins)]).astype(np.float64)

    def counts(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) int64 number of training points per bin."""
        lvl = self._level(level)
        c = self._count[lvl]
        return (c if bins is None else c[self._bins(lvl, bins)]).copy()

    def idf(self, level: int, bins: np.ndarray | None = None) -> np.ndarray:
        """(n,) float64 inverse document frequencies ``ln(N / N_b)`` at ``level`` (0 =
        leaves; bins no counted set holds get ``ln N``), from
        :meth:`fit_document_frequencies`."""
        lvl = self._level(level)
        if self._df is None:
            raise RuntimeError("no document frequencies; call fit_document_frequencies(sets)")
        d = self._df[lvl] if bins is None else self._df[lvl][self._bins(lvl, bins)]
        return np.log(self.n_documents_ / np.maximum(d, 1))

    def bin_weights(self, level: int, bins: np.ndarray) -> np.ndarray:
        """Global similarity weights ``w_ij = exp(-A_ij / sigma)`` (thesis section 8.2.2).

        With ``weights="idf"``: the sum of the idf (:meth:`idf`) of the bin and all its
        ancestors, so that ``w_ij - p_ij = idf_ij`` and the pyramid match (Eq. 4.4)
        becomes the idf-weighted intersection ``sum_b idf_b min(h_X[b], h_Y[b])`` over all
        tree nodes of Nistér & Stewénius (2006); also never larger at a parent (idf >= 0),
        hence Mercer.

        Parameters
        ----------
        level : int
            0 = leaves.
        bins : (n,) int
            Bin ids at that level.

        Returns
        -------
        (n,) float64
            In ``(0, 1]``; never larger than the child's weight (``A`` grows towards the
            root), so ``w_ij - p_ij >= 0`` in Eq. 4.4 and the match is a Mercer kernel.
        """
        if self.weights == "idf":
            lvl = self._level(level)
            if self._idf_path is None:
                raise RuntimeError(
                    "weights='idf' needs document frequencies; call fit_document_frequencies(sets)"
                )
            return self._idf_path[lvl][self._bins(lvl, bins)]
        return np.exp(-self.diameters(level, bins) / self.sigma_)

    # ------------------------------------------------------------------ persistence
    def to_state(self) -> dict[str, Any]:
        """Arrays and scalars only (``np.savez`` / JSON friendly, no pickle)."""
        self._check_fitted()
        sizes = np.array([c.shape[0] for c in self._centers], dtype=np.int64)
        return {
            "kind": "vocabulary_tree",
            "branching": self.branching,
            "levels": self.levels,
            "weights": self.weights,
            "max_iter": self.max_iter,
            "tol": self.tol,
            "sample_size": -1 if self.sample_size is None else self.sample_size,
            "sigma": -1.0 if self.sigma is None else self.sigma,
            "sigma_": float(self.sigma_),
            "random_state": self.random_state,
            "dim": int(self.dim),
            "level_sizes": sizes,
            "centers": np.concatenate(self._centers),
            "parent": np.concatenate(self._parent),
            "count": np.concatenate(self._count),
            "radius": np.concatenate(self._radius),
            "diameter": np.concatenate(self._diameter),
            "n_documents": -1 if self.n_documents_ is None else self.n_documents_,
            "df": (np.concatenate(self._df) if self._df is not None else np.zeros(0, np.int64)),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> VocabularyTree:
        """Rebuild a fitted tree from :meth:`to_state` output."""
        try:
            kind = str(np.asarray(state["kind"]))
            if kind != "vocabulary_tree":
                raise ValueError(f"state['kind'] must be 'vocabulary_tree', got {kind!r}")
            sample_size = int(state["sample_size"])
            sigma = float(state["sigma"])
            tree = cls(
                branching=int(state["branching"]),
                levels=int(state["levels"]),
                weights=str(np.asarray(state["weights"])),
                max_iter=int(state["max_iter"]),
                tol=float(state["tol"]),
                sample_size=None if sample_size < 0 else sample_size,
                sigma=None if sigma < 0 else sigma,
                random_state=int(state["random_state"]),
            )
            dim = int(state["dim"])
            sizes = np.asarray(state["level_sizes"], dtype=np.int64)
            arrays = {
                key: np.asarray(state[key])
                for key in ("centers", "parent", "count", "radius", "diameter")
            }
            sigma_ = float(state["sigma_"])
        except KeyError as exc:
            raise ValueError(f"vocabulary tree state is missing key {exc.args[0]!r}") from None
        total = int(sizes.sum())
        if sizes.shape != (tree.levels,) or (sizes < 1).any() or sizes[0] != 1:
            raise ValueError(
                f"state['level_sizes'] must hold {tree.levels} positive sizes, the first 1"
            )
        if arrays["centers"].shape != (total, dim):
            raise ValueError(
                f"state['centers'] must have shape ({total}, {dim}), got {arrays['centers'].shape}"
            )
        for key in ("parent", "count", "radius", "diameter"):
            if arrays[key].shape != (total,):
                raise ValueError(f"state[{key!r}] must have shape ({total},)")
        cuts = np.cumsum(sizes)[:-1]
        split = {key: np.split(a, cuts) for key, a in arrays.items()}
        parents = split["parent"]
        for lvl in range(1, tree.levels):
            p = parents[lvl]
            if (np.diff(p) < 0).any() or p.min() < 0 or p.max() >= sizes[lvl - 1]:
                raise ValueError(f"state['parent'] is not a valid tree at level {lvl}")
        tree.dim = dim
        tree._set_structure(split["centers"], parents)
        tree._count = [c.astype(np.int64) for c in split["count"]]
        tree._radius = [r.astype(np.float32) for r in split["radius"]]
        tree._diameter = [d.astype(np.float32) for d in split["diameter"]]
        tree.sigma_ = sigma_
        tree._fitted = True
        # states written before weights="idf" existed hold no document frequencies
        n_docs = int(state["n_documents"]) if "n_documents" in state else -1
        if n_docs >= 0:
            df = np.asarray(state["df"], np.int64)
            if df.shape != (total,):
                raise ValueError(f"state['df'] must have shape ({total},)")
            tree._set_document_frequencies(n_docs, np.split(df, cuts))
        return tree

    def __repr__(self) -> str:
        fitted = f", sizes={self.sizes}" if self._fitted else ""
        return (
            f"VocabularyTree(branching={self.branching}, levels={self.levels}, "
            f"weights={self.weights!r}{fitted})"
        )
