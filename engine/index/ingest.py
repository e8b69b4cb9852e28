"""Incremental, crash-safe ingestion of a folder into an index.

:func:`ingest` is the incremental update: scan → drop removed files → extract new and
changed files (:func:`engine.index.extract.extract_parallel`, in worker processes, or
:func:`engine.index.distributed.extract_on_cluster` on a Dask cluster) → write
them in batches, each batch one chunk file + one SQLite transaction
(:meth:`engine.index.store.IndexStore.write_batch`). A run stopped at any moment (cancel,
Ctrl-C, ``kill -9``) keeps every finished batch; the next run sees the rest as new or
changed and completes the index.

Told what changed (``paths=``: files or folders, new, changed or gone), it looks at those
only (:func:`scan_paths`) instead of listing the whole folder: what a file watcher or a
script that knows what it changed pays is what changed, not the library.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.index.keys import FEATURE_SETTINGS
from engine.io.scan import FileStat, scan_folder

if TYPE_CHECKING:  # pragma: no cover
    from engine.features.keypoints import Features
    from engine.index.store import IndexStore

from engine.index.extract import (  # re-exported: their home before the split
    CRASH_REASON,
    INGEST_FILES_PER_TASK,
    ExtractionStopped,
    ExtractResult,
    default_jobs,
    extract_parallel,
    keep_heap_warm,
    outcome,
    worker_context,
)

__all__ = [
    "CRASH_REASON",
    "INGEST_FILES_PER_TASK",
    "ExtractResult",
    "FolderOfflineError",
    "IngestProgress",
    "IngestSummary",
    "OutsideFolderError",
    "default_jobs",
    "extract_parallel",
    "feature_key",
    "in_folder",
    "ingest",
    "keep_heap_warm",
    "scan_paths",
    "worker_context",
]


class FolderOfflineError(OSError):
    """The folder holds none of its indexed photos any more (an unplugged drive, an
    unmounted share): nothing was removed from the index. ``folder`` names it."""

    def __init__(self, message: str, folder: str = "") -> None:
        super().__init__(message)
        self.folder = folder


class OutsideFolderError(ValueError):
    """A path given to a path-limited update is not inside the folder indexed."""


@dataclass(frozen=True)
class IngestProgress:
    """One progress event of :func:`ingest`.

    ``status`` is ``"scanning"``, ``"removed"``, ``"indexed"``, ``"unchanged"`` (stat
    changed, content did not), ``"failed"`` or ``"finalizing"``. ``done``/``total`` count
    files to extract in this run.
    """

    done: int
    total: int
    path: str | None
    status: str
    message: str


@dataclass(frozen=True)
class IngestSummary:
    """Result of :func:`ingest`.

    ``indexed``: images (re)extracted in this run; ``unchanged``: usable images not
    re-extracted; ``failed``: EVERY file currently failing, ``(path, reason)``;
    ``total = indexed + unchanged + len(failed)``; ``indexed + unchanged`` images are usable.
    ``scan_errors``: folders (or entries) that could not be read, ``(path, reason)``; their
    known images are kept, not dropped. ``metadata``: how many usable photos have their
    metadata read (``read``), a date taken, a camera, a place (``gps``), and how many of
    them this run read (``read_now``). ``skipped``: entries passed over on purpose,
    ``(path, reason)`` (dangling or looping links, FIFOs, sockets, devices).
    """

    indexed: int
    unchanged: int
    removed: int
    failed: list[tuple[str, str]] = field(default_factory=list)
    total: int = 0
    seconds: float = 0.0
    cancelled: bool = False
    scan_errors: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: :meth:`engine.index.store.IndexStore.metadata_counts` after the run, and
    #: ``"read_now"``: photos whose metadata this run read
    metadata: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` summary line of ``simile index``."""
        return {
            "metadata": dict(self.metadata),
            "indexed": self.indexed,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "failed": [{"path": p, "reason": r} for p, r in self.failed],
            "skipped": [{"path": p, "reason": r} for p, r in [*self.scan_errors, *self.skipped]],
            "total": self.total,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------- workers


def feature_key(feature_kwargs: Mapping[str, Any] | None) -> str:
    """Short key of the extraction settings (kwargs + ``engine.features`` version).

    Rows indexed with another key are re-extracted by :func:`ingest`.
    """
    version = None
    try:
        import engine.features.keypoints as features_mod

        version = getattr(features_mod, "FEATURES_VERSION", None)
    except ImportError:  # pragma: no cover
        pass
    text = json.dumps({"kw": dict(feature_kwargs or {}), "v": version}, sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def ingest(
    store: IndexStore,
    folder: str | os.PathLike,
    *,
    jobs: int | None = None,
    cancel: threading.Event | None = None,
    feature_kwargs: Mapping[str, Any] | None = None,
    batch_size: int = 64,
    exclude: Iterable[str | os.PathLike] = (),
    extractor: Callable[..., Features] | None = None,
    spread: int = 0,
    on_plan: Callable[[list[str]], None] | None = None,
    allow_empty: bool = False,
    cluster: str | None = None,
    paths: Iterable[str | os.PathLike] | None = None,
) -> Generator[IngestProgress, None, IngestSummary]:
    """Bring the index in ``store`` up to date with ``folder`` (or with ``paths`` of it).

    A folder that holds none of the indexed photos any more, and no other photo, is
    taken for an unplugged drive or an unmounted share: :class:`FolderOfflineError` is
    raised and nothing is removed, unless ``allow_empty``.

    Parameters
    ----------
    store : IndexStore
        A writable store (holds the writer lock).
    folder : path-like
        Photo folder, scanned recursively (the index directory is skipped).
    jobs, cancel, feature_kwargs, extractor
        See :func:`extract_parallel`. Changing ``feature_kwargs`` re-extracts every
        image (tracked per row, so an interrupted re-extraction resumes).
    batch_size : int
        Files per write batch (one chunk file + one transaction each); the last
        ``batch_size`` files are written a quarter batch at a time.
    exclude : iterable of path-like
        More directories not to scan.
    spread : int
        Submit this many evenly spaced files of the work list first (then the rest in
        scan order), so that the first results to arrive sample the whole folder: a
        caller can fit models on them while the rest is still being extracted.
    on_plan : callable, optional
        Called once with the paths submitted first (the ``spread`` files; an empty list
        when ``spread`` is 0 or there is no work): when the first file is extracted, so
        that the worker processes have started before the caller starts threads of its
        own (:func:`worker_context` forks them only from a single-threaded process), or
        at the end of a run without any (not after a cancelled one).
    cluster : str, optional
        Extract on a Dask cluster instead of local worker processes: ``local:N`` or
        ``tcp://HOST:PORT`` (:func:`engine.index.distributed.extract_on_cluster`;
        ``jobs`` is then not used). This process still writes everything, in the same
        order: the index is the one a local run makes. No cluster is started or
        contacted when nothing needs extracting.
    paths : iterable of path-like, optional
        Update these files and folders of ``folder`` only (:func:`scan_paths`: new,
        changed or gone; a folder is scanned): the index ends as a whole run would
        leave it when nothing else changed. Refused (:class:`OutsideFolderError`, before
        anything is written) when one is not inside ``folder``. The upkeep that reads
        the whole catalogue waits for a run over the whole folder: compacting the
        feature chunks (:meth:`~engine.index.store.IndexStore.compact`) and reading the
        metadata of photos an older version indexed without it.

    Yields
    ------
    IngestProgress

    Returns
    -------
    IngestSummary
        As ``StopIteration.value`` (``summary = yield from ingest(...)``).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if store.readonly:
        from engine.index.store import ReadOnlyIndexError

        raise ReadOnlyIndexError(f"index {store.index_dir} was opened read-only")
    t0 = time.perf_counter()
    kw = dict(feature_kwargs or {})
    fkey = feature_key(kw)
    folder = os.fspath(folder)
    whole = paths is None  # a scan of the whole folder (else of the named paths)
    if paths is None:
        known, scan, n_removed = yield from _scan(store, folder, exclude, allow_empty)
    else:
        scanned = scan_paths(store, folder, paths, exclude=exclude)
        known, scan, n_removed = yield from _scan(store, folder, exclude, True, scanned)
    work, stale, known_hashes, first = _plan(store, scan, known, fkey, spread)
    total = len(work)
    planned = on_plan is None
    yield IngestProgress(
        0,
        total,
        None,
        "scanning",
        f"{scan.n_images} images: {len(scan.new)} new, {len(scan.changed)} changed, "
        f"{len(stale)} to re-extract, {len(scan.unchanged) - len(stale)} unchanged, "
        f"{len(scan.removed)} removed",
    )

    done = 0
    paths = [w.path for w in work]
    writer = _OrderedWriter(store, fkey, paths, batch_size)
    if cluster is None:
        results = extract_parallel(
            paths,
            jobs=jobs,
            cancel=cancel,
            feature_kwargs=kw,
            known_hashes=known_hashes,
            extractor=extractor,
            files_per_task=INGEST_FILES_PER_TASK,
            pack=True,  # stored in the 8-bit codec anyway
        )
    else:
        from engine.index.distributed import extract_on_cluster

        results = extract_on_cluster(
            paths,
            cluster=cluster,
            cancel=cancel,
            feature_kwargs=kw,
            known_hashes=known_hashes,
            stats={w.path: (w.size, w.mtime_ns) for w in work},
            extractor=extractor,
            pack=True,
        )

    try:
        for res in results:
            if not planned:
                planned = True
                on_plan(first)
            done += 1
            writer.add(res, done)
            yield IngestProgress(done, total, res.path, *outcome(res))
    except (GeneratorExit, ExtractionStopped):
        writer.finish(done)  # the consumer stopped iterating, or a cluster was lost:
        raise  # keep what is finished
    finally:
        results.close()
    writer.finish(done)
    cancelled = cancel is not None and cancel.is_set() and done < total
    if not planned and not cancelled:
        on_plan(first)
    yield IngestProgress(done, total, None, "finalizing", "finalizing index")
    n_meta = writer.n_metadata
    if not cancelled:
        store.set_setting(FEATURE_SETTINGS, kw)
        if whole:  # (catalogue-wide upkeep: not for a few named photos)
            store.compact()
            n_meta += yield from _read_missing_metadata(store, cancel, done, total)
    n_ok = store.count("ok")
    failures = store.failures()
    return IngestSummary(
        indexed=writer.n_indexed,
        unchanged=n_ok - writer.n_indexed,
        removed=n_removed,
        failed=failures,
        total=n_ok + len(failures),
        seconds=time.perf_counter() - t0,
        cancelled=cancelled,
        scan_errors=list(scan.errors),
        skipped=list(scan.skipped),
        metadata={**store.metadata_counts(), "read_now": n_meta},
    )


#: Photos whose metadata :func:`_read_missing_metadata` stores per transaction.
METADATA_BATCH = 256


def _read_missing_metadata(
    store: IndexStore, cancel: threading.Event | None, done: int, total: int
) -> Generator[IngestProgress, None, int]:
    """Read the metadata of usable photos that have none stored (indexed before the
    catalogue kept it) in this process, without extracting their features again: only
    headers are parsed (:func:`engine.io.metadata.read_metadata`). Stored
    :data:`METADATA_BATCH` photos per transaction; returns how many were read."""
    from engine.io.metadata import read_metadata

    missing = store.missing_metadata()
    n = 0
    for start in range(0, len(missing), METADATA_BATCH):
        if cancel is not None and cancel.is_set():
            break
        part = missing[start : start + METADATA_BATCH]
        yield IngestProgress(
            done, total, None, "finalizing",
            f"reading the metadata of photos indexed before ({start} of {len(missing)})",
        )  # fmt: skip
        n += store.set_metadata({i: read_metadata(p) for i, p in part})
    return n


def _scan(
    store: IndexStore,
    folder: str,
    exclude: Iterable[str | os.PathLike],
    allow_empty: bool = False,
    scanned: tuple[dict[str, tuple[int, int]], Any] | None = None,
) -> Generator[IngestProgress, None, tuple[dict[str, tuple[int, int]], Any, int]]:
    """Scan ``folder`` against the catalogue and drop the files gone (progress events);
    returns the catalogue's known stats, the scan and the number of rows removed.
    :class:`FolderOfflineError` (nothing removed) when every indexed photo is gone and
    no photo is found, unless ``allow_empty``. ``scanned``: the known stats and scan of
    some paths of it (:func:`scan_paths`), used instead of a scan of the folder."""
    yield IngestProgress(0, 0, None, "scanning", f"scanning {folder}")
    if scanned is None:
        known = store.known_stats()
        scan = scan_folder(folder, known, exclude=[store.index_dir, *exclude])
    else:
        known, scan = scanned
    if (
        not allow_empty
        and scan.removed
        and len(scan.removed) == len(known)
        and not (scan.new or scan.changed or scan.unchanged)
    ):
        raise FolderOfflineError(
            f"{folder} holds none of the {len(known)} indexed photos any more (an unplugged "
            "drive or a network share that is not mounted?); the index keeps them. If they "
            "really are all gone, index again allowing an empty folder (simile index "
            "--allow-empty)",
            folder=str(folder),
        )

    for path, reason in [*scan.errors, *scan.skipped]:
        yield IngestProgress(0, 0, path, "scanning", f"skipped {path}: {reason}")
    moved = _moved(store, scan, known)
    if moved:  # a photo moved or renamed keeps its row, its features and metadata
        store.rename({old: (f.path, f.size, f.mtime_ns) for old, f in moved.items()})
        scan.removed = [p for p in scan.removed if p not in moved]
        new_paths = {f.path for f in moved.values()}
        scan.new = [f for f in scan.new if f.path not in new_paths]
        scan.unchanged = [*scan.unchanged, *sorted(new_paths)]
        known = store.known_stats(known if scanned is not None else None)
        if scanned is not None:
            known.update(store.known_stats(new_paths))
        yield IngestProgress(0, 0, None, "scanning", f"{len(moved)} photo(s) moved or renamed")
    n_removed = store.remove(scan.removed) if scan.removed else 0
    if scan.removed:
        yield IngestProgress(0, 0, None, "removed", f"dropped {n_removed} deleted files")
    return known, scan, n_removed


def in_folder(folder: str, path: str | os.PathLike) -> str:
    """The catalogue's path of ``path`` (absolute, below the folder's real path, as
    :func:`engine.io.scan.scan_folder` names it); :class:`OutsideFolderError` when it is
    not inside ``folder``."""
    root = os.path.realpath(folder)
    given = os.path.abspath(os.fsdecode(os.fspath(path)))
    # as given (below the folder as named, or its real path), else through the real
    # path of its parent (a folder reached through a link)
    real_parent = os.path.join(os.path.realpath(os.path.dirname(given)), os.path.basename(given))
    for base, p in ((os.path.abspath(folder), given), (root, given), (root, real_parent)):
        rel = os.path.relpath(p, base)
        if rel == os.curdir:
            return root
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return os.path.join(root, rel)
    raise OutsideFolderError(f"{given} is not inside the folder {root}")


def scan_paths(
    store: IndexStore,
    folder: str | os.PathLike,
    paths: Iterable[str | os.PathLike],
    *,
    exclude: Iterable[str | os.PathLike] = (),
) -> tuple[dict[str, tuple[int, int]], Any]:
    """What :func:`engine.io.scan.scan_folder` finds of ``paths`` of ``folder`` alone:
    a file is new, changed, unchanged or gone (removed: it is known and no longer there,
    or no longer an image); a folder is scanned, its known files not found in it gone;
    a hidden one, or one in the index folder, is passed over, as the scan does.

    Returns
    -------
    known : dict of str to (int, int)
        The catalogue's ``(size, mtime_ns)`` of the files looked at.
    scan : engine.io.scan.ScanResult

    Raises
    ------
    OutsideFolderError
        A path is not inside ``folder`` (nothing is looked at).
    """
    import stat as stat_mod

    from engine.io.formats import IMAGE_SUFFIXES, is_image_file
    from engine.io.scan import ScanResult

    def is_image(path: str) -> bool:  # (as the scan tells)
        return os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES or is_image_file(path)

    folder = os.fspath(folder)
    root = os.path.realpath(folder)
    wanted = sorted({in_folder(folder, p) for p in paths})
    index_dir = os.path.realpath(store.index_dir)
    skip = [index_dir, *(os.path.realpath(os.fspath(e)) for e in exclude)]
    scan = ScanResult()
    known: dict[str, tuple[int, int]] = {}
    files: dict[str, os.stat_result | None] = {}  # (stat-ed once; None: gone)
    for p in wanted:
        rel = os.path.relpath(p, root)
        if rel != os.curdir and any(part.startswith(".") for part in rel.split(os.sep)):
            continue  # (hidden: the scan skips it)
        if any(p == d or p.startswith(d + os.sep) for d in skip):
            continue
        try:
            st = os.stat(p)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            scan.errors.append((p, f"cannot stat: {exc.strerror or type(exc).__name__}"))
            continue
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            under = store.known_stats(under=p)
            sub = scan_folder(p, under, exclude=skip)
            known.update(under)
            for name in ("new", "changed", "unchanged", "removed", "errors", "skipped"):
                getattr(scan, name).extend(getattr(sub, name))
        else:
            files[p] = st
            if st is None:  # (gone: a folder of them, maybe)
                under = store.known_stats(under=p)
                known.update(under)
                scan.removed.extend(under)
    file_known = store.known_stats(list(files))
    known.update(file_known)
    for p, st in files.items():
        prev = file_known.get(p)
        if st is None:
            if prev is not None:
                scan.removed.append(p)
            continue
        if not stat_mod.S_ISREG(st.st_mode):
            scan.skipped.append((p, "not a regular file"))
            if prev is not None:
                scan.removed.append(p)
            continue
        if prev is not None and prev == (st.st_size, st.st_mtime_ns):
            scan.unchanged.append(p)
        elif not is_image(p):
            scan.n_skipped += 1
            if prev is not None:
                scan.removed.append(p)
        else:
            bucket = scan.new if prev is None else scan.changed
            bucket.append(FileStat(p, st.st_size, st.st_mtime_ns))
    for lst in (scan.new, scan.changed, scan.unchanged, scan.removed, scan.skipped):
        lst.sort()
    return known, scan


def _moved(store: IndexStore, scan: Any, known: Mapping[str, tuple[int, int]]) -> dict:
    """Photos moved or renamed since the last run: ``old path -> FileStat`` of a new file
    with the same size and content (:func:`engine.io.scan.content_hash`) as a file gone.
    Only new files whose size matches a file gone are read (extraction reads them anyway).
    """
    if not scan.removed or not scan.new:
        return {}
    from engine.io.scan import content_hash

    rows = store.file_rows(scan.removed)
    gone: dict[tuple[int, str], str] = {}
    sizes = set()
    for p in scan.removed:
        h = rows.get(p, (None, None))[0]
        if h and p in known:
            gone.setdefault((int(known[p][0]), h), p)
            sizes.add(int(known[p][0]))
    out: dict[str, FileStat] = {}
    for f in scan.new:
        if int(f.size) not in sizes:
            continue
        try:
            h = content_hash(f.path)
        except OSError:
            continue
        old = gone.pop((int(f.size), h), None)
        if old is not None:
            out[old] = f
    return out


def _plan(
    store: IndexStore,
    scan: Any,
    known: Mapping[str, tuple[int, int]],
    fkey: str,
    spread: int,
) -> tuple[list[FileStat], list[str], dict[str, str], list[str]]:
    """The work of :func:`ingest` after a scan: the files to extract (new, changed, and
    unchanged ones extracted with other settings: ``stale``), the known content hashes
    of changed files (not extracted again when only their stat changed, unless the
    settings changed too), and the ``spread`` evenly spaced files moved to the front
    (``first``)."""
    # (read by path or by key: what this costs follows the change, not the library)
    other_key = store.stale_paths(fkey) if scan.unchanged else set()
    work: list[FileStat] = list(scan.new) + list(scan.changed)
    stale = [p for p in scan.unchanged if p in other_key]
    work += [FileStat(p, *known[p]) for p in stale]
    # skip extraction when only the stat changed, unless the settings changed too
    rows = store.file_rows(f.path for f in scan.changed) if scan.changed else {}
    known_hashes = {
        f.path: rows[f.path][0]
        for f in scan.changed
        if f.path in rows and rows[f.path][1] == fkey and rows[f.path][0] is not None
    }
    total = len(work)
    first: list[str] = []
    if spread > 0 and work:
        n = min(int(spread), total)
        pick = sorted({round(i * (total - 1) / max(n - 1, 1)) for i in range(n)})
        chosen = set(pick)
        work = [work[i] for i in pick] + [w for i, w in enumerate(work) if i not in chosen]
        first = [w.path for w in work[: len(pick)]]
    return work, stale, known_hashes, first


class _OrderedWriter:
    """Writes the results of :func:`ingest` to the store in write batches, in the order
    of the work list (the scan's, spread files first), not in the order workers finish
    them: catalogue rows, and so every result that depends on row order, are then the
    same for every run over the same folder."""

    def __init__(self, store: IndexStore, fkey: str, order: list[str], batch_size: int) -> None:
        self.store = store
        self.fkey = fkey
        self.position = {path: i for i, path in enumerate(order)}
        self.total = len(order)
        self.batch_size = batch_size
        self.waiting: dict[int, ExtractResult] = {}
        self.next_pos = 0
        self.ok: list[tuple] = []
        self.failed: list[tuple] = []
        self.touched: list[tuple] = []
        self.metadata: dict[str, Any] = {}  # path -> PhotoMetadata of ``ok``
        self.n_indexed = 0
        self.n_metadata = 0

    def add(self, res: ExtractResult, done: int) -> None:
        """A result as it arrives (``done``: results so far, this one included)."""
        self.waiting[self.position[res.path]] = res
        while self.next_pos in self.waiting:
            self._take(self.waiting.pop(self.next_pos), done)
            self.next_pos += 1

    def finish(self, done: int) -> None:
        """Take the results still waiting for earlier ones (finished out of order when
        the run stops: kept too) and write everything taken."""
        for i in sorted(self.waiting):
            self._take(self.waiting.pop(i), done)
        self.flush()

    def _take(self, res: ExtractResult, done: int) -> None:
        status, _ = outcome(res)
        if status == "failed":
            self.failed.append((res.path, res.size, res.mtime_ns, res.content_hash, res.error))
        elif status == "unchanged":
            self.touched.append((res.path, res.size, res.mtime_ns))
        else:
            self.ok.append((res.path, res.size, res.mtime_ns, res.content_hash, res.features))
            self.n_indexed += 1
            if res.metadata is not None:
                self.metadata[res.path] = res.metadata
        # the last files go in quarter batches, so that a caller encoding what is
        # stored (Collection.update) has less left for after the last image
        batch = self.batch_size
        limit = batch if self.total - done >= batch else max(1, batch // 4)
        if len(self.ok) + len(self.failed) + len(self.touched) >= limit:
            self.flush()

    def flush(self) -> None:
        """Write the results taken so far: one chunk file and one transaction."""
        if self.ok or self.failed or self.touched:
            self.store.write_batch(
                self.ok, self.failed, self.touched, fkey=self.fkey, metadata=self.metadata
            )
            self.n_metadata += len(self.metadata)
            self.metadata.clear()
            self.ok.clear()
            self.failed.clear()
            self.touched.clear()
