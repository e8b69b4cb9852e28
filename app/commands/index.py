"""``simile index FOLDER``: build or update the index of a photo folder."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from app.commands._collection import (
    disk_full,
    open_collection,
    repair_collection,
    store_error_message,
)
from app.commands._common import CommandError, Progress, emit_json


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "index",
        help="build or update the index of a folder",
        description=(
            "Index every image under FOLDER (recursively, recognised by content). A second "
            "run only processes new and changed files and drops deleted ones. The index goes "
            "to FOLDER/.simile, or to ~/.cache/simile/<hash> when FOLDER is not writable. "
            "Ctrl-C stops cleanly: what is finished stays usable and the next run completes it. "
            "--repair first rebuilds what is damaged in the index from what is intact. "
            "--only PATH... updates those files and folders of FOLDER alone (added, changed "
            "or deleted ones) without scanning the rest: what a script or a file watcher "
            "that knows what changed runs (e.g. simile index ~/Photos --only "
            "~/Photos/new.jpg ~/Photos/gone.jpg)."
        ),
    )
    p.add_argument("folder", metavar="FOLDER", help="photo folder")
    p.add_argument("--index", metavar="DIR", help="index directory (overrides the default)")
    p.add_argument("--jobs", type=int, metavar="N", help="feature extraction processes")
    p.add_argument(
        "--cluster",
        metavar="SPEC",
        help=(
            "extract the features on a Dask cluster: local:N (N worker processes on this "
            "machine, started for the run) or tcp://HOST:PORT (a scheduler started with "
            "'dask scheduler', its workers with 'dask worker tcp://HOST:PORT'); this process "
            'still writes the index, the same as a local run. Needs pip install "simile[cluster]"'
        ),
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help=(
            "check every file of the index first and rebuild what is damaged (stored "
            "features whose checksums hold are kept, the rest extracted again)"
        ),
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help=(
            "drop the photos from the index even when the folder holds none of them any "
            "more (otherwise taken for an unplugged drive: the index keeps them)"
        ),
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="PATH",
        help=(
            "update only these files or folders of FOLDER, new, changed or deleted (a "
            "deleted file is removed from the index; a folder is scanned), instead of "
            "scanning all of FOLDER; a PATH outside FOLDER is refused"
        ),
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines on stdout: progress, then the summary as the last line",
    )
    return p


def _check_cluster(args: argparse.Namespace) -> None:
    """Refuse a malformed ``--cluster``, one given with ``--jobs``, or one without Dask,
    before the index is opened."""
    from engine.index.distributed import DaskMissingError, parse_cluster, require_dask

    if args.jobs is not None:
        raise CommandError(
            "--jobs and --cluster do not go together (--cluster local:N runs N processes)"
        )
    try:
        args.cluster = str(parse_cluster(args.cluster))
        require_dask()
    except (ValueError, DaskMissingError) as exc:
        raise CommandError(str(exc)) from None


def _check_only(folder: str, paths: list[str]) -> None:
    """Refuse ``--only`` paths outside ``folder`` before the index is opened."""
    from engine.index.ingest import OutsideFolderError, in_folder

    for p in paths:
        try:
            in_folder(folder, p)
        except OutsideFolderError:
            raise CommandError(
                f"--only: {p} is not inside the folder {folder}; name files or folders of it"
            ) from None


class _NotRaised(Exception):
    """Stands for ``ClusterError`` in a run without ``--cluster`` (only the cluster code,
    whose module is then not imported, raises that)."""


def run(args: argparse.Namespace) -> int:
    from engine.index.ingest import FolderOfflineError, OutsideFolderError
    from engine.index.store_errors import StoreError

    if args.jobs is not None and args.jobs < 1:
        raise CommandError(f"--jobs must be >= 1, got {args.jobs}")
    cluster_error: type[Exception] = _NotRaised
    if args.cluster is not None:
        _check_cluster(args)
        from engine.index.distributed import ClusterError

        cluster_error = ClusterError
    only = getattr(args, "only", None)
    if only is not None:
        _check_only(args.folder, only)
    if args.repair:
        for line in repair_collection(args.folder, args.index) or ["nothing was damaged"]:
            print(f"simile: repair: {line}", file=sys.stderr)
    col = open_collection(
        args.folder, args.index, create=True, learned=False, check_pages=only is None
    )
    cancel = threading.Event()
    progress = Progress("indexing", json_lines=args.json)
    summary = None
    interrupted = False

    def on_sigint(signum, frame):  # first Ctrl-C: stop after the current batch
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        cancel.set()
        print(
            "\nsimile: stopping after the current batch (Ctrl-C again to abort)", file=sys.stderr
        )

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    try:
        gen = col.update(
            jobs=args.jobs, cancel=cancel, allow_empty=args.allow_empty, cluster=args.cluster,
            paths=only,
        )  # fmt: skip
        while True:
            try:
                p = next(gen)
            except StopIteration as stop:
                summary = stop.value
                break
            if p.status == "finalizing":
                progress.update(p.done, p.total, "finalizing")
            elif p.total:
                progress.update(p.done, p.total, p.path or "")
    except StoreError as exc:
        raise CommandError(store_error_message(exc, args.folder, args.index), 1) from None
    except (FolderOfflineError, OutsideFolderError) as exc:
        raise CommandError(str(exc), 1) from None
    except cluster_error as exc:
        raise CommandError(str(exc), 1) from None
    except Exception as exc:
        if not disk_full(exc):
            raise
        raise CommandError(
            f"no space left on the disk of the index {col.index_dir} (indexing {col.folder}): "
            "the index keeps its previous version; free some space and run "
            f"'simile index {args.folder}' again",
            1,
        ) from None
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        progress.close()
        col.close()
    out = summary.to_json()
    if args.json:
        emit_json(out)
    else:
        n_failed = len(out["failed"])
        print(
            f"{out['indexed']} indexed, {out['unchanged']} unchanged, {out['removed']} removed, "
            f"{n_failed} failed ({out['total']} files) in {out['seconds']:.1f} s"
        )
        meta = out.get("metadata") or {}
        if meta.get("read"):
            print(
                f"metadata: {meta['date_taken']} with a date taken, {meta['camera']} with a "
                f"camera, {meta['gps']} with GPS (of {meta['read']} photos)"
            )
        for f in out["failed"][:20]:
            print(f"  failed: {f['path']}: {f['reason']}")
        if n_failed > 20:
            print(f"  ... and {n_failed - 20} more")
        skipped = out["skipped"]
        for f in skipped[:20]:
            print(f"  skipped: {f['path']}: {f['reason']}")
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more skipped")
    if interrupted or summary.cancelled:
        print("simile: interrupted; the index holds what was finished", file=sys.stderr)
        return 130
    return 0
