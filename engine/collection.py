"""The collection index: one photo folder, its persistent index and every way to search it.

:class:`Collection` is the facade the CLI, the GUI, clustering and learning code use. It
delegates to the index layer, which follows the data through:

- :mod:`engine.index.store`, :mod:`engine.index.ingest` -- the catalogue and the stored
  features, brought up to date with the folder;
- :mod:`engine.index.fit` -- the models (vocabulary trees, uniform bins, idf, hash
  seeds), fitted on a sample, on a first index while the features are still extracted;
- :mod:`engine.index.codes`, :mod:`engine.index.encode` -- every image's pyramids, bag of
  words and hash codes, encoded in batches;
- :mod:`engine.index.searcher` -- the models and search data in memory, kept in step
  with the store (:class:`~engine.index.searcher.Searcher`, :attr:`Collection.searcher`);
- :mod:`engine.index.candidates`, :mod:`engine.index.search`,
  :mod:`engine.index.verify` -- candidate rows of large collections, their exact scores,
  same-object verification;
- :mod:`engine.index.methods` -- the search methods and their registry;
- :mod:`engine.workflows.duplicates` -- near-duplicate groups.

Index location
--------------
By default the index lives in ``<folder>/.simile/``. When the folder is not writable
(a read-only share, a CD, someone else's pictures) it goes to
``~/.cache/simile/<first 16 hex of blake2b(absolute folder path)>/`` instead
(``$XDG_CACHE_HOME`` is honoured). An existing index is always found in either place.
``index_dir=`` (``--index DIR``) overrides both.

Reliability
-----------
Every update commits its search models and data together, as one version of the saved
states (:mod:`engine.index.manifest`): a crash, a power cut or a full disk at any instant
leaves the previous version whole and usable, and a reader -- ``Collection.open(...,
readonly=True)``, which works while another process is updating the folder and on
read-only media -- always sees one consistent version. A damaged or missing index file
is a one-line :class:`~engine.index.store_errors.IndexCorruptError` naming it;
:meth:`Collection.repair` (``simile index FOLDER --repair``) rebuilds what is damaged
from what is intact (:mod:`engine.index.repair`), and the next :meth:`Collection.update`
completes it into what a clean build gives. A first index that was interrupted, then
completed, gives the models and answers of an uninterrupted one.

Search methods
--------------
``hybrid`` (default), ``vocabulary``, ``uniform``, ``wta`` are built in
(:mod:`engine.index.methods` describes them); ``learned`` is provided by
:mod:`engine.workflows.feedback`, which registers it with :func:`register_method` when
it is imported (OASIS or a boosted embedding over dense tf-idf bags of words, trained by
``simile learn`` or from the app's relevance marks; without a learned model a clear error
says how to make one). A collection is handed its methods -- by default the registry
:data:`engine.index.methods.REGISTRY`, read at each query, or the ``methods=`` mapping
given to :meth:`Collection.open` -- and never imports the modules that provide them: the
program that needs ``learned`` imports :mod:`engine.workflows.feedback`.

The settings re-exported here (``EXHAUSTIVE_LIMIT``, ``CANDIDATE_KIND``, ``TREE_SAMPLE``,
...) are read at call time from their home modules (:mod:`engine.index.candidates`,
:mod:`engine.index.fit`, ...): change them there.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core.lazy import attach
from engine.index.calibration import hit_label, hit_probability
from engine.index.candidates import (
    CANDIDATE_FRACTION,
    CANDIDATE_FRACTION_UNIFORM,
    CANDIDATE_KIND,
    EXHAUSTIVE_LIMIT,
    MIN_CANDIDATES,
    WTA_FUSION_WEIGHT,
    rh_bits,
)
from engine.index.encode import ENCODE_BATCH
from engine.index.fit import (
    PREFIT_SPREAD,
    REFIT_GROWTH,
    SAMPLE_DESCRIPTORS,
    TREE_ITERATIONS,
    TREE_PCA_DIM,
    TREE_SAMPLE,
    VOCAB_TREES,
)
from engine.index.ingest import IngestProgress, IngestSummary
from engine.index.region import MIN_REGION_FEATURES, region_features, region_pixels
from engine.index.searcher import FEATURE_KWARGS, Searcher
from engine.index.store import INDEX_DIRNAME, IndexStore
from engine.index.threads import ENCODE_THREADS

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from engine.features.keypoints import Features
    from engine.index.explain import Explanation
    from engine.index.methods import (
        METHODS,
        UNIFORM_PRESCORE,
        UNIFORM_RERANK,
        Hit,
        SearchMethod,
        available_methods,
        register_method,
    )
    from engine.index.verify import VERIFY_MIN_INLIERS, VERIFY_TOP
    from engine.kernels.pyramid import MatchResult, PyramidMatch
    from engine.workflows.duplicates import DUPLICATE_NEIGHBOURS, DuplicateGroup

#: Names re-exported from modules that load OpenCV (the search methods, the same-object
#: verification, duplicates), imported on first use: opening a collection to update it
#: (``simile index``) does not pay for them. Name -> its home module.
_LAZY = {
    **dict.fromkeys(
        (
            "METHODS",
            "REGISTRY",
            "UNIFORM_PRESCORE",
            "UNIFORM_RERANK",
            "Hit",
            "HybridSearch",
            "PyramidSearch",
            "SearchMethod",
            "available_methods",
            "register_method",
        ),
        "engine.index.methods",
    ),
    **dict.fromkeys(("Explanation", "explain_pair"), "engine.index.explain"),
    **dict.fromkeys(("VERIFY_MIN_INLIERS", "VERIFY_TOP", "match_pair"), "engine.index.verify"),
    **dict.fromkeys(
        ("DUPLICATE_NEIGHBOURS", "TIERS", "DuplicateGroup", "find_duplicates"),
        "engine.workflows.duplicates",
    ),
}

#: :data:`engine.workflows.duplicates.TIERS`, the default of :meth:`Collection.duplicates`
#: (spelled out: that module is imported when duplicates are looked for; a test checks
#: that the two are equal)
_ALL_TIERS: tuple[str, str, str] = ("identical", "same_photo", "similar_shots")

__all__ = [
    "CANDIDATE_FRACTION",
    "CANDIDATE_FRACTION_UNIFORM",
    "CANDIDATE_KIND",
    "DUPLICATE_NEIGHBOURS",
    "ENCODE_BATCH",
    "ENCODE_THREADS",
    "EXHAUSTIVE_LIMIT",
    "FEATURE_KWARGS",
    "METHODS",
    "MIN_CANDIDATES",
    "MIN_REGION_FEATURES",
    "PREFIT_SPREAD",
    "REFIT_GROWTH",
    "SAMPLE_DESCRIPTORS",
    "TREE_ITERATIONS",
    "TREE_PCA_DIM",
    "TREE_SAMPLE",
    "UNIFORM_PRESCORE",
    "UNIFORM_RERANK",
    "VERIFY_MIN_INLIERS",
    "VERIFY_TOP",
    "VOCAB_TREES",
    "WTA_FUSION_WEIGHT",
    "Collection",
    "DuplicateGroup",
    "Explanation",
    "Hit",
    "IndexProgress",
    "IndexSummary",
    "available_methods",
    "default_index_dir",
    "register_method",
    "rh_bits",
]

IndexProgress = IngestProgress
IndexSummary = IngestSummary


__getattr__, __dir__ = attach(__name__, _LAZY)


def _cache_home() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return Path(base) if base else Path.home() / ".cache"


def default_index_dir(folder: str | os.PathLike) -> Path:
    """Where the index of ``folder`` lives by default (see the module docstring).

    ``<folder>/.simile`` when it already holds an index or the folder is writable, else
    ``~/.cache/simile/<hash of the absolute folder path>``.
    """
    folder = Path(os.path.abspath(os.fspath(folder)))
    local = folder / INDEX_DIRNAME
    digest = hashlib.blake2b(str(folder).encode("utf-8"), digest_size=8).hexdigest()
    cached = _cache_home() / "simile" / digest
    if (local / "catalog.sqlite").exists():
        return local
    if (cached / "catalog.sqlite").exists():
        return cached
    if local.is_dir() and os.access(local, os.W_OK):
        return local
    if not local.exists() and os.access(folder, os.W_OK | os.X_OK):
        return local
    return cached


class Collection:
    """A photo folder with its persistent index. Open with :meth:`Collection.open`.

    Attributes
    ----------
    folder : Path
        The photo folder (absolute).
    index_dir : Path
        Where the index is stored.
    store : IndexStore
        The catalogue, features and saved states.
    searcher : Searcher
        The search models and data in memory (what the search methods work on).
    methods : mapping of str to SearchMethod
        The search methods this collection was handed (default: the live registry
        :data:`engine.index.methods.REGISTRY`).
    """

    def __init__(
        self, folder: Path, store: IndexStore, methods: Mapping[str, SearchMethod] | None = None
    ) -> None:
        self.folder = folder
        self.store = store
        self.index_dir = store.index_dir
        self.searcher = Searcher(store, folder)
        self._methods = methods

    @property
    def methods(self) -> Mapping[str, SearchMethod]:
        """The search methods this collection was handed (the registry by default)."""
        if self._methods is None:  # (imported here: an update does not search)
            from engine.index.methods import REGISTRY

            return REGISTRY
        return self._methods

    @methods.setter
    def methods(self, methods: Mapping[str, SearchMethod]) -> None:
        self._methods = methods

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        folder: str | os.PathLike,
        index_dir: str | os.PathLike | None = None,
        *,
        create: bool = True,
        readonly: bool = False,
        methods: Mapping[str, SearchMethod] | None = None,
        check_pages: bool = True,
    ) -> Collection:
        """Open the index of ``folder`` (creating it unless ``create=False`` or ``readonly``).

        Parameters
        ----------
        folder : path-like
            The photo folder; must exist.
        index_dir : path-like, optional
            Index location; default :func:`default_index_dir`.
        create : bool
            Create an empty index when there is none.
        readonly : bool
            Open for queries only: no writer lock, :meth:`update` refused. Works while
            another process updates the index (queries see one consistent version of it)
            and on read-only media.
        methods : mapping of str to SearchMethod, optional
            The search methods of :meth:`query`; default the registry
            :data:`engine.index.methods.REGISTRY` (built-in methods and those registered
            with :func:`register_method`, looked up at each query).
        check_pages : bool
            (Writers) check every page of the catalogue on opening (about 50 ms at 100,000
            photos). An update of a few named photos (``update(paths=...)``, ``simile
            index --only``) may skip it: it reads only their rows, and SQLite reports
            damage in the pages it reads. Readers always check.

        Raises
        ------
        FileNotFoundError
            ``folder`` is not a directory, or (``engine.index.store.IndexNotFoundError``) there is
            no index and it may not be created.
        engine.index.store.IndexLockedError
            Another process is updating the index (``readonly=False``).
        engine.index.store.IndexCorruptError
            A file of the index is damaged or missing: :meth:`repair` it.
        """
        path = Path(os.path.abspath(os.fspath(folder)))
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: not a folder")
        idx = Path(index_dir).expanduser() if index_dir is not None else default_index_dir(path)
        store = IndexStore.open(idx, create=create, readonly=readonly, check_pages=check_pages)
        return cls(path, store, methods)

    @staticmethod
    def repair(folder: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> list[str]:
        """Repair the index of ``folder``: rebuild what is damaged from what is intact
        (:func:`engine.index.repair.repair_index`); then :meth:`update` completes it.

        Parameters
        ----------
        folder : path-like
            The photo folder.
        index_dir : path-like, optional
            Index location; default :func:`default_index_dir`.

        Returns
        -------
        list of str
            What was repaired, one line each (empty when nothing was damaged).

        Raises
        ------
        engine.index.store.IndexLockedError
            Another process is updating the index.
        engine.index.store.StoreError, OSError
            The folder is not an index, or cannot be written.
        """
        from engine.index.repair import repair_index

        path = Path(os.path.abspath(os.fspath(folder)))
        idx = Path(index_dir).expanduser() if index_dir is not None else default_index_dir(path)
        return repair_index(idx)

    def close(self) -> None:
        """Release the index (and the writer lock)."""
        self.store.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.paths())

    def __repr__(self) -> str:
        return f"Collection({str(self.folder)!r}, index_dir={str(self.index_dir)!r})"

    # ------------------------------------------------------------------ indexing
    def update(
        self,
        *,
        jobs: int | None = None,
        cancel: threading.Event | None = None,
        allow_empty: bool = False,
        cluster: str | None = None,
        paths: Iterable[str | os.PathLike] | None = None,
    ) -> Iterator[IndexProgress]:
        """Bring the index up to date with the folder: a generator of progress.

        Scans the folder, extracts features of new and changed images in ``jobs``
        processes (records unreadable files with their reason), drops deleted ones, then
        refreshes the search models and data (:mod:`engine.index.searcher`).

        ``paths``: look at these files and folders of the folder only, instead of
        scanning it whole (:func:`engine.index.ingest.scan_paths`): each is new, changed,
        unchanged or gone (a folder is scanned). What a caller that knows what changed
        (a file watcher, a script) pays is then what changed: at 100,000 photos, listing
        the folder alone costs more than adding one photo. The index ends as a whole
        update leaves it when nothing else changed; an interrupted one is completed by
        the next update, as a whole one.

        ``cluster``: extract on a Dask cluster instead, ``"local:N"`` (N processes on
        this machine, started for the update) or ``"tcp://HOST:PORT"`` (a running
        scheduler); this process still writes the index, the same as a local run's
        (:mod:`engine.index.distributed`; needs ``pip install "simile[cluster]"``).

        Yields
        ------
        IndexProgress
            ``(done, total, path, status, message)``; status is one of "scanning",
            "indexed", "unchanged", "failed", "removed", "finalizing".

        Returns
        -------
        IndexSummary
            As ``StopIteration.value`` (``summary = yield from col.update()``).
        Cancelling (``cancel.set()``) keeps every finished batch; the summary says
        ``cancelled=True``.

        Raises
        ------
        engine.index.ingest.FolderOfflineError
            The folder holds none of the indexed photos any more and no other photo (an
            unplugged drive?): nothing is removed, unless ``allow_empty``.
        ValueError, engine.index.distributed.DaskMissingError
            A malformed ``cluster``, or Dask is not installed.
        engine.index.ingest.OutsideFolderError
            A path of ``paths`` is not inside the folder (a ``ValueError``; raised
            before anything is written).
        engine.index.distributed.ClusterError
            The cluster cannot do the work (scheduler unreachable or lost, no worker,
            workers running another Simile or OpenCV).
        """
        if paths is not None:
            paths = [os.fspath(p) for p in paths]
        return (
            yield from self.searcher.update(
                jobs=jobs, cancel=cancel, allow_empty=allow_empty, cluster=cluster, paths=paths
            )
        )

    # ------------------------------------------------------------------ catalogue
    def paths(self) -> list[Path]:
        """Usable images in stable order (the row order of :meth:`kernel_matrix` etc.)."""
        return self.searcher.paths()

    def failures(self) -> list[tuple[Path, str]]:
        """Files that could not be indexed, with the reason."""
        return [(Path(p), r) for p, r in self.store.failures()]

    def features(self, path: str | os.PathLike) -> Features:
        """Stored features of an indexed image (KeyError if it is not indexed)."""
        return self.store.get_features(Path(os.path.abspath(os.fspath(path))))

    def load_array(self, name: str) -> np.ndarray:
        """A named array saved with :meth:`save_array` (KeyError if absent)."""
        return np.asarray(self.store.load_array(name, mmap=False))

    def save_array(self, name: str, arr: np.ndarray) -> None:
        """Persist an array in the index (atomic), e.g. a learned metric or clusters."""
        self.store.save_array(name, np.asarray(arr))

    # ------------------------------------------------------------------ querying
    def query(
        self, image: Any, *, method: str = "hybrid", top: int = 20, box: Any = None
    ) -> list[Hit]:
        """Most similar images of the collection, best first.

        Parameters
        ----------
        image : path, (H, W[, 3]) uint8 ndarray or Features
            A query inside or outside the collection. Nothing is excluded: an image of
            the collection normally finds itself first.
        method : {"hybrid", "vocabulary", "uniform", "wta", "learned"}
            See :mod:`engine.index.methods`; or another method this collection was handed.
        top : int
            Number of hits.
        box : (x, y, w, h) of float, optional
            Search for what lies in this box only (search by region,
            :mod:`engine.index.region`): the top-left corner and size in pixels of the
            photo as it is displayed -- EXIF orientation applied, at its full size (for
            an array its own pixels; for Features the pixels of their ``image_size``).
            A box partly off the photo is cut to it. The keypoint methods (every
            :class:`~engine.index.methods.PyramidSearch`: ``hybrid``, ``vocabulary``,
            ``uniform``, ``wta``) get the query's features whose keypoints lie inside
            (:func:`~engine.index.region.region_features`: detected inside the box,
            its 200 strongest): the pyramid match is a partial matching (Grauman's
            thesis Sec. 3.2.4), so a collection photo in which the object is small is
            matched on the object, its other features finding no partner, and the
            query's own background no longer votes. Other methods (``learned``) get
            the box's pixels (:func:`~engine.index.region.region_pixels`).

        Returns
        -------
        list of Hit
            Higher score = more similar; each with its calibrated probability and label
            (:mod:`engine.index.calibration`).

        Raises
        ------
        ValueError
            Unknown method or ``top < 1``; a malformed box, a box off the photo, or one
            that holds fewer than :data:`~engine.index.region.MIN_REGION_FEATURES` (8)
            features ("the box holds only N features; draw a larger box").
        LookupError
            Empty index; ``"learned"`` without a learned model, or in a program that did
            not import :mod:`engine.workflows.feedback` (which provides it).
        engine.io.imageio.ImageLoadError
            The query image cannot be read.
        """
        from engine.index.methods import METHODS

        if method not in METHODS and method not in self.methods:
            raise ValueError(
                f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}"
            )
        if int(top) != top or top < 1:
            raise ValueError(f"top must be a positive integer, got {top!r}")
        fn = self.methods.get(method)
        if fn is None:
            raise LookupError(
                f"the {method!r} search method is not available here: the module that "
                "provides it (engine.workflows.feedback for 'learned') registers it when "
                "imported"
            )
        if box is not None:
            image = self._region_query(image, box, fn)
        hits = fn(self, image, int(top))  # the query as given (or its box)
        return [  # (a method may bring its own curve: the learned one's is the model's)
            replace(
                h,
                probability=(
                    h.probability
                    if h.probability is not None
                    else hit_probability(method, h.score)
                ),
                label=hit_label(method, h.score),
            )
            for h in hits
        ]

    def _region_query(self, image: Any, box: Any, fn: SearchMethod) -> Any:
        """What method ``fn`` is handed for a query by region: the features inside
        ``box`` for the keypoint methods, the box's pixels for the others."""
        from engine.index.methods import PyramidSearch

        if isinstance(fn, PyramidSearch):
            return region_features(self.searcher, image, box)
        return region_pixels(image, box)

    def region_features(self, image: Any, box: Any) -> Features:
        """The features of a query (path, array or Features) inside ``box``, as a boxed
        :meth:`query` and :meth:`match` use them (:func:`engine.index.region.region_features`;
        ``box`` as in :meth:`query`).

        Returns
        -------
        Features
            ``descriptors (K, D) float32``, ``xy (K, 2) float32`` in the loaded image
            (``image_size``), ``K >= MIN_REGION_FEATURES``.
        """
        return region_features(self.searcher, image, box)

    # ------------------------------------------------------------------ pairs
    def match(self, a: Any, b: Any, *, box: Any = None) -> MatchResult:
        """Explicit correspondences of two images and their geometric verification.

        Parameters
        ----------
        a, b : path (in or outside the collection), ndarray image or Features
        box : (x, y, w, h), optional
            Match only the features of ``a`` inside this box (as :meth:`query` with
            ``box``): the "why" of a search by region.

        Returns
        -------
        engine.kernels.pyramid.MatchResult
            Vocabulary-guided pyramid-match score and correspondences (thesis 3.2.3),
            with an extra ``inliers`` attribute: (P,) bool, pairs consistent with a
            robust homography (:func:`engine.index.verify.match_pair`). With ``box``,
            ``pairs[:, 0]`` index :meth:`region_features` of ``a``. These are not the
            correspondences that rank a ``hybrid`` hit: :meth:`explain` gives those.
        """
        models, _ = self.searcher.ensure()
        if box is not None:
            fa = region_features(self.searcher, a, box)
        else:
            fa, _ = self.searcher.query_features(a)
        fb, _ = self.searcher.query_features(b)
        from engine.index.verify import match_pair

        return match_pair(models.vocab, fa, fb)

    def explain(self, a: Any, b: Any, *, box: Any = None) -> Explanation:
        """Why hit ``b`` matches query ``a``: the ``hybrid`` ranking's own same-object check,
        with its correspondences (what the "why" view draws).

        The check is :func:`engine.index.verify.ranking_check` itself
        (:func:`engine.index.explain.explain_pair`), run on the features the ranking
        checks: the query's as :meth:`query` uses them (stored for an indexed photo,
        extracted otherwise; with ``box``, :meth:`region_features`) and the hit's stored
        ones. So the accepted correspondences are those the ranking counted, and
        ``verified`` is whether the ranking gave the hit its bonus (it checks the
        :data:`VERIFY_TOP` best hits by ``vocabulary`` score).

        Parameters
        ----------
        a : path (in or outside the collection), ndarray image or Features
            The query.
        b : path, ndarray image or Features
            The hit (a photo of the collection, for a score).
        box : (x, y, w, h), optional
            The query was searched within this box (as :meth:`query` with ``box``).

        Returns
        -------
        engine.index.explain.Explanation
            ``pairs (P, 2) int64`` (the check's putative correspondences), ``xy_a``,
            ``xy_b (P, 2) float32``, ``similarity (P,) float32``, ``inliers (P,) bool``
            (accepted), ``n_inliers``, ``verified``; ``pyramid``: :meth:`match`'s
            correspondences (thesis 3.2.3); ``score``, ``probability``, ``label``: the
            ``hybrid`` score of ``b`` for ``a`` (as the ranking computes it when it checks
            ``b``; None when ``b`` is not in the collection).

        Raises
        ------
        ValueError
            A bad box, or one holding too few features (as :meth:`query`).
        engine.io.imageio.ImageLoadError
            An image cannot be read.
        """
        searcher = self.searcher
        models, _ = searcher.ensure()
        row_a = None
        if box is not None:
            fa = region_features(searcher, a, box)
        else:
            fa, row_a = searcher.query_features(a)
        fb, row_b = searcher.query_features(b)
        from engine.index.explain import explain_pair

        exp = explain_pair(fa, fb, models.vocab)
        score = self._hybrid_score(fa, row_b, row_a)
        if score is None:
            return exp
        return replace(
            exp,
            score=score,
            probability=hit_probability("hybrid", score),
            label=hit_label("hybrid", score),
        )

    def _hybrid_score(
        self, fa: Features, row: int | None, query_row: int | None = None
    ) -> float | None:
        """The ``hybrid`` method's score of collection row ``row`` for query features
        ``fa``, as its search gives it (:meth:`HybridSearch.score_of`: the check, the
        query expansion). None outside the collection or for a method of another kind."""
        from engine.index.methods import HybridSearch

        fn = self.methods.get("hybrid")
        if row is None or not isinstance(fn, HybridSearch):
            return None
        searcher = self.searcher
        models, data = searcher.ensure()
        return fn.score_of(searcher, models, data, fa, int(row), query_row=query_row)

    def kernel_matrix(self, method: str = "vocabulary") -> np.ndarray:
        """(n, n) float64 normalised affinities of all images (rows = :meth:`paths`).

        ``"vocabulary"``: idf-weighted vocabulary pyramid intersection, symmetric, in
        [0, 1], diagonal 1. ``"uniform"``: normalised uniform pyramid match (Eq. 3.12).
        """
        return self.searcher.kernel_matrix(method)

    def bow_matrix(self) -> sp.csr_matrix:
        """(n, n_words) float32 tf-idf bag of visual words, L2-normalised rows (:meth:`paths`)."""
        _, data = self.searcher.ensure()
        return data.bow.copy()

    def bow_vector(self, image: Any) -> sp.csr_matrix:
        """(1, n_words) float32 tf-idf bag of words of any image, in :meth:`bow_matrix`'s
        columns (path inside or outside the collection, ndarray or Features)."""
        return self.searcher.bow_vector(image)

    def pyramid(self, method: str = "vocabulary") -> PyramidMatch:
        """The collection's fitted pyramid match (``"vocabulary"`` or ``"uniform"``),
        e.g. for correspondences on stored features (:class:`engine.cluster.BinnedMatcher`).
        Treat it as read-only: it is shared with the search."""
        if method not in ("vocabulary", "uniform"):
            raise ValueError(f"method must be 'vocabulary' or 'uniform', got {method!r}")
        models, _ = self.searcher.ensure()
        return models.vocab if method == "vocabulary" else models.uniform

    def duplicates(
        self,
        threshold: float | None = None,
        *,
        tiers: Iterable[str] = _ALL_TIERS,
        cancel: threading.Event | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> list[DuplicateGroup]:
        """Duplicate groups by tier: identical files, the same photo (resized,
        recompressed, converted, cropped, rotated copies), similar shots; see
        :mod:`engine.workflows.duplicates`.

        Parameters
        ----------
        threshold : float or None
            In (0, 1]: the least score of a ``similar_shots`` link; None for the default
            (:data:`engine.workflows.duplicates.DEFAULT_THRESHOLDS`).
        tiers : iterable of str
            Tiers to report (subset of :data:`engine.workflows.duplicates.TIERS`).
        cancel : threading.Event, optional
            Set it to stop: :class:`InterruptedError`.
        progress : callable, optional
            ``progress(done, total)`` as pairs are checked.

        Returns
        -------
        list of DuplicateGroup
            Strictest tier first, then largest groups first; in a group the
            representative comes first with score 1.0.
        """
        from engine.workflows.duplicates import find_duplicates

        return find_duplicates(
            self.searcher, threshold, tiers=tiers, cancel=cancel, progress=progress
        )
