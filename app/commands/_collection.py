"""Opening a collection for the sub-commands, with one-line errors."""

from __future__ import annotations

import errno
import os
import shlex
import sqlite3
from pathlib import Path

from app.commands._common import CommandError


def repair_command(folder: str | None, index: str | None = None) -> str:
    """The command that repairs the index of ``folder`` (``FOLDER`` when unknown)."""
    words = ["simile", "index", shlex.quote(folder) if folder else "FOLDER"]
    if index:
        words += ["--index", shlex.quote(index)]
    return " ".join([*words, "--repair"])


def store_error_message(
    exc: Exception, folder: str | None = None, index: str | None = None
) -> str:
    """One line for an index-store error: its message (which names the index and the
    file) and, when repairing mends it, the command that does (``simile index FOLDER
    --repair``)."""
    from engine.index.store_errors import one_line

    text = one_line(exc)
    if getattr(exc, "remedy", None) == "repair":
        text = f"{text}; run '{repair_command(folder, index)}'"
    return text


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk: ``OSError`` ENOSPC / EDQUOT, or SQLite's
    ``SQLITE_FULL``."""
    if isinstance(exc, OSError):
        if exc.errno is None:  # numpy's short write: "N requested and M written"
            text = str(exc)
            return "requested and" in text and "written" in text
        return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)
    return False


def open_collection(
    folder: str,
    index: str | None,
    *,
    create: bool,
    readonly: bool = False,
    check: bool | None = None,
    map_data: bool = False,
    learned: bool = True,
    check_pages: bool = True,
):
    """Open ``folder``'s collection or raise :class:`CommandError` naming the problem.

    ``check`` (default: ``readonly``) loads the search models and data at once, so that
    a damaged index is one line here, with its remedy, rather than a failed query.
    ``map_data``: memory-map every segment of the search data instead of reading it (a
    one-shot query: :attr:`engine.index.searcher.Searcher.map_data`).
    ``learned``: make the ``learned`` search method available (imports
    :mod:`engine.workflows.feedback`, which registers it); a command that uses another
    method need not pay for that import.
    ``check_pages``: a writer checks every page of the catalogue (``index --only`` does
    not: :meth:`engine.collection.Collection.open`).
    """
    if learned:
        import engine.workflows.feedback  # noqa: F401  (registers the "learned" method)
    from engine.collection import Collection, default_index_dir
    from engine.index.store import IndexLockedError, IndexNotFoundError, StoreError

    if not folder or not folder.strip():
        raise CommandError("the folder argument is empty; name a folder (e.g. '.')")
    path = Path(os.path.abspath(folder))
    if not path.is_dir():
        raise CommandError(f"{folder}: no such folder")
    where = Path(index) if index else default_index_dir(path)
    try:
        col = Collection.open(
            path, index, create=create, readonly=readonly, check_pages=check_pages
        )
    except IndexNotFoundError:
        raise CommandError(
            f"no index for {path} (looked in {where}); run 'simile index {folder}' first"
        ) from None
    except IndexLockedError as exc:
        raise CommandError(str(exc)) from None
    except StoreError as exc:
        raise CommandError(store_error_message(exc, folder, index)) from None
    except OSError as exc:
        if disk_full(exc):
            raise CommandError(f"no space left on the disk of the index {where}", 1) from None
        raise CommandError(f"cannot open the index in {where}: {exc}") from None
    col.searcher.map_data = map_data
    if readonly if check is None else check:
        try:
            col.searcher.ensure()
        except LookupError:
            pass  # an empty index: the command says so
        except StoreError as exc:
            col.close()
            raise CommandError(store_error_message(exc, folder, index)) from None
    return col


def repair_collection(folder: str, index: str | None) -> list[str]:
    """Repair the index of ``folder`` (:meth:`engine.collection.Collection.repair`): what
    was repaired, one line each; :class:`CommandError` when it cannot be."""
    from engine.collection import Collection, default_index_dir
    from engine.index.store import IndexLockedError, StoreError

    path = Path(os.path.abspath(folder))
    if not path.is_dir():
        raise CommandError(f"{folder}: no such folder")
    where = Path(index) if index else default_index_dir(path)
    try:
        return Collection.repair(path, index)
    except IndexLockedError as exc:
        raise CommandError(str(exc)) from None
    except StoreError as exc:
        raise CommandError(f"cannot repair the index in {where}: {exc}") from None
    except OSError as exc:
        if disk_full(exc):
            raise CommandError(f"no space left on the disk of the index {where}", 1) from None
        raise CommandError(f"cannot repair the index in {where}: {exc}", 1) from None


def check_method(method: str) -> None:
    """Raise :class:`CommandError` unless ``method`` is a search method of the engine."""
    from engine.index.methods import METHODS

    if method in METHODS:  # (a built-in name: known without importing the others)
        return
    import engine.workflows.feedback  # noqa: F401  (registers the "learned" search method)
    from engine.collection import available_methods

    names = available_methods()
    if method not in names:
        raise CommandError(f"unknown method {method!r}; choose one of {', '.join(names)}")
