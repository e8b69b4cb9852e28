"""Opening a collection for the sub-commands, with one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

from app.commands._common import CommandError


def open_collection(folder: str, index: str | None, *, create: bool, readonly: bool = False):
    """Open ``folder``'s collection or raise :class:`CommandError` naming the problem."""
    import engine.workflows.feedback  # noqa: F401  (registers the "learned" search method)
    from engine.collection import Collection, default_index_dir
    from engine.index.store import IndexLockedError, IndexNotFoundError, StoreError

    if not folder or not folder.strip():
        raise CommandError("the folder argument is empty; name a folder (e.g. '.')")
    path = Path(os.path.abspath(folder))
    if not path.is_dir():
        raise CommandError(f"{folder}: no such folder")
    where = Path(index) if index else default_index_dir(path)
    try:
        return Collection.open(path, index, create=create, readonly=readonly)
    except IndexNotFoundError:
        raise CommandError(
            f"no index for {path} (looked in {where}); run 'simile index {folder}' first"
        ) from None
    except IndexLockedError as exc:
        raise CommandError(str(exc)) from None
    except (StoreError, OSError) as exc:
        raise CommandError(f"cannot open the index in {where}: {exc}") from None


def check_method(method: str) -> None:
    """Raise :class:`CommandError` unless ``method`` is a search method of the engine."""
    import engine.workflows.feedback  # noqa: F401  (registers the "learned" search method)
    from engine.collection import available_methods

    names = available_methods()
    if method not in names:
        raise CommandError(f"unknown method {method!r}; choose one of {', '.join(names)}")
