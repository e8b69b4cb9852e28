"""The undo history of the person's grouping, kept in the index so that it outlives the app.

Every edit of a grouping in the app -- a rename, move, split, merge, "Regroup everything" --
first remembers the grouping as it was, so that Ctrl+Z brings it back. The app keeps those
states in memory; :func:`save_history` also writes the most recent ones into the index
(kv entry :data:`engine.index.keys.CATEGORY_HISTORY_KEY`, JSON, no pickle) beside the
grouping itself (:func:`engine.cluster.save_edits`), and :func:`load_history` reads them
back when the folder is opened again, fitted to the photos it holds by then: photos
removed since leave the old states too, photos added since are not in them (undo keeps
them where they were placed). ``simile cluster --regroup`` remembers the person's grouping
it replaces in the same way (:func:`replace_edits`), so the app can undo a regrouping
made on the command line.

How much is kept: at most :data:`HISTORY_DEPTH` states, and no more than
:data:`HISTORY_MAX_ROWS` photo rows in all, the most recent first: 20 states of a folder of
2,500 photos or fewer, 5 of 10,000 (2.1 MB of JSON, written at each edit in 40-75 ms,
beside the grouping's own 0.9 MB in 10-25 ms; measured in an index on this machine), 1 from
50,000. A damaged entry loses the history, never the grouping.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.cluster.edits import EditableGrouping, carry_names
from engine.cluster.grouping import fitted, grouping_dict, grouping_from_dict
from engine.cluster.placement import REVIEW_NAME
from engine.index import keys

__all__ = [
    "HISTORY_DEPTH",
    "HISTORY_MAX_ROWS",
    "HistoryEntry",
    "history_json",
    "load_history",
    "regrouped_names",
    "replace_edits",
    "save_history",
]

#: States kept in the index for undo after reopening (the app keeps 50 while it runs).
HISTORY_DEPTH = 20
#: ... and at most this many photo rows over all of them (at least the latest state).
HISTORY_MAX_ROWS = 50_000


@dataclass
class HistoryEntry:
    """One state of the grouping before an edit.

    Attributes
    ----------
    what : str
        The edit that followed it, in words ("rename", "move", "grouping again", ...).
    grouping : EditableGrouping
        The grouping, with the person's names.
    must, cannot : list of (str, str)
        The person's constraints then (path pairs).
    """

    what: str
    grouping: EditableGrouping
    must: list[tuple[str, str]]
    cannot: list[tuple[str, str]]


def history_json(entries: Sequence[HistoryEntry]) -> str:
    """The JSON text :func:`save_history` stores: ``{"version": 1, "paths": [...],
    "entries": [...]}``, oldest first, each entry
    :func:`engine.cluster.grouping.grouping_dict` with ``what``; only the most recent
    :data:`HISTORY_DEPTH` within :data:`HISTORY_MAX_ROWS` rows. An entry's ``paths`` are
    left out when they are the newest entry's (kept once, as ``paths``)."""
    kept: list[dict[str, Any]] = []
    rows = 0
    common: list[str] | None = None
    for e in reversed(list(entries)):
        n = len(e.grouping.paths)
        if len(kept) >= HISTORY_DEPTH or (kept and rows + n > HISTORY_MAX_ROWS):
            break
        d = {"what": str(e.what), **grouping_dict(e.grouping, e.must, e.cannot)}
        if common is None:
            common = d["paths"]
        if d["paths"] == common:
            del d["paths"]
        kept.append(d)
        rows += n
    return json.dumps({"version": 1, "paths": common or [], "entries": kept[::-1]})


def save_history(store: Any, entries: Sequence[HistoryEntry]) -> None:
    """Keep the undo history in the index (:func:`history_json`), replacing the one kept.

    Parameters
    ----------
    store : engine.index.store.IndexStore
        A writable store.
    entries : sequence of HistoryEntry
        The states before the person's edits, oldest first (the app's undo stack).
    """
    store.set_kv(keys.CATEGORY_HISTORY_KEY, history_json(entries))


def load_history(store: Any, paths: Sequence[Any]) -> list[HistoryEntry]:
    """The undo history saved by :func:`save_history`, fitted to the folder as it is now.

    Parameters
    ----------
    store : engine.index.store.IndexStore
    paths : sequence of path
        The collection's photos, in row order.

    Returns
    -------
    list of HistoryEntry
        Oldest first. Each state's rows are the photos of ``paths`` it holds, in their
        order (photos removed since leave it, photos added since are not in it; a state
        none of whose photos is left is dropped), and its constraints those between photos
        still there. Empty when none is stored or when it is damaged: the history is lost,
        the grouping is not (:func:`engine.cluster.load_edits` reads that).
    """
    raw = store.get_kv(keys.CATEGORY_HISTORY_KEY)
    if not raw:
        return []
    paths = [str(p) for p in paths]
    live = set(paths)
    out = []
    try:
        d = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        for e in d["entries"]:
            g, _new = fitted(grouping_from_dict({"paths": d["paths"], **e}), paths)
            if g is None:  # none of its photos is left
                continue
            must = [(str(a), str(b)) for a, b in e.get("must", []) if {a, b} <= live]
            cannot = [(str(a), str(b)) for a, b in e.get("cannot", []) if {a, b} <= live]
            out.append(HistoryEntry(str(e.get("what", "edit")), g, must, cannot))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return []
    return out


def regrouped_names(old: EditableGrouping, new: EditableGrouping) -> dict[int, str]:
    """Names for a grouping made afresh ("Regroup everything", ``simile cluster --regroup``)
    from the person's ``old`` one: each new group takes the name of the old group it
    overlaps most (:func:`engine.cluster.carry_names`), except "To review"
    (:data:`engine.cluster.REVIEW_NAME`), Simile's name for the photos it was unsure of: a
    grouping made afresh has none.

    Returns
    -------
    dict int -> str
        Names of ``new``'s groups (only those that overlap a named old group).
    """
    return carry_names(old.paths, old.labels, old.names, new.paths, new.labels,
                       skip=(REVIEW_NAME,))  # fmt: skip


def replace_edits(
    store: Any,
    paths: Sequence[Any],
    grouping: EditableGrouping,
    must: Sequence[Sequence[str]],
    cannot: Sequence[Sequence[str]],
    k: int | str,
    what: str = "grouping again",
) -> EditableGrouping | None:
    """Make a grouping made afresh (``simile cluster --regroup``) the folder's, in place of
    the one the person edited in the app, so that the app and the next ``simile cluster``
    show it: it takes the edited groups' names (:func:`regrouped_names`), and the edited
    grouping joins the undo history (:func:`load_history` + :func:`save_history`), so that
    Ctrl+Z in the app brings it back.

    Parameters
    ----------
    store : engine.index.store.IndexStore
        A writable store.
    paths : sequence of path
        The collection's photos, in row order (``grouping``'s rows).
    grouping : EditableGrouping
        The new grouping; its ``names`` are set.
    must, cannot : sequence of (str, str)
        The constraints it was made with (path pairs).
    k : int or "auto"
        The number of groups asked for.
    what : str, optional
        The edit, in words, as the app's status line names it ("Undid the last ...").

    Returns
    -------
    EditableGrouping or None
        ``grouping`` as saved; None when the folder holds no edited grouping (nothing is
        written). Edits that cannot be read are replaced without names or history.

    Raises
    ------
    OSError
        The index cannot be written.
    """
    from engine.cluster.grouping import load_edits, save_edits

    if not store.get_kv(keys.CATEGORY_EDITS_KEY):
        return None  # (never edited in the app)
    try:
        saved = load_edits(store, paths)
    except (ValueError, TypeError):
        saved = None
    old = saved.grouping if saved is not None else None
    if old is not None:
        grouping.names = regrouped_names(old, grouping)
        entry = HistoryEntry(what, old, list(saved.must), list(saved.cannot))
        save_history(store, [*load_history(store, paths), entry])
    save_edits(store, grouping, must, cannot, k)
    return grouping
