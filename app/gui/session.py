"""The session model: everything a Simile window shows, without Qt.

Modelled on napari's ``components/``: the model holds and validates the state and emits
events; the window and its views forward what the person does to it, connect
``_on_<event>`` slots to its events and render what the events carry. Nothing here
imports Qt, so the whole model is driven by tests without a window::

    Session                       the open folder
    ├── epoch, folder, index_dir, collection, readonly, photos, problems, methods,
    │   metadata (what each photo records: date taken, camera, ..., from the catalogue)
    ├── query       QueryModel        the current search (a photo, or a region of it)
    │                                 and its ranked hits
    ├── marks       MarkBook          thumbs up / down on results (stored in the index)
    ├── match       MatchModel        the pair shown in "Why do they match?"
    ├── duplicates  DuplicatesModel   the last duplicate groups, the selected group's copies
    ├── grouping    GroupingModel     the last grouping, its edits, the feature mask shown
    ├── jobs        Jobs              background jobs running for this folder
    └── writes      IndexWrites       writes to the index made off the GUI thread, in order

**One reset.** :meth:`Session.open_folder` (and :meth:`Session.close`) cancels the running
jobs, closes the collection and resets every part above in one place, each part emitting
its own event so every view shows its empty state.

**One staleness rule.** A background job takes a :class:`Token` when it starts
(:meth:`Session.begin`): the session's ``epoch`` (bumped by every folder open or close)
and a per-topic serial (bumped by every newer request of the same topic: ``"query"``,
``"duplicates"``, ``"grouping"``, …). Its results go through :meth:`Session.accept`, which
drops them once the token is stale — a result of an earlier folder or an earlier query
never reaches a view.

**Writes in the background, finished before the index closes.** What an edit keeps in
the index (the grouping, the person's edits and the undo history: tens of milliseconds of
JSON at 10,000 photos) is written by one background thread, in the order asked
(:class:`IndexWrites`); closing the collection, for another folder or the window closing,
first waits for them.

**Read-only collections.** The collection may be open read-only (:attr:`Session.readonly`
says why: ``"locked"`` — another Simile process is indexing the folder; ``"media"`` — the
index is on read-only media; ``"permission"`` — its folder may not be written). Nothing
is saved then; the window disables or refuses what would write, and the trash is refused
(the index could not forget the photo).

**Guarded file actions.** Trash, move and link actions first ask
:meth:`Session.authorize`: the path must lie inside the open folder *lexically*
(``os.path.abspath`` + ``os.path.commonpath``, symlinks not resolved: a symlinked photo is
the link, never its target) and belong to what this session shows (its duplicate groups
for the trash). Anything else is refused with a message (:attr:`Session.events`
``refused``) and :class:`ActionRefused`.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from app.gui.state import DEFAULT_METHOD, METHODS, SearchSettings
from engine.index.files import display_path

__all__ = [
    "ActionRefused",
    "DuplicatesModel",
    "EmitterGroup",
    "Event",
    "EventEmitter",
    "GroupingModel",
    "Hit",
    "IndexWrites",
    "Job",
    "Jobs",
    "MarkBook",
    "MatchModel",
    "QueryModel",
    "Session",
    "Token",
    "shown_name",
]

log = logging.getLogger(__name__)
#: Stamps of the undo history (GroupingModel.history_stamp).
_HISTORY_STAMPS = itertools.count()


def shown_name(path) -> str:
    """A photo's file name for showing: bytes that are not UTF-8 (old archives, Windows
    zips) become U+FFFD instead of vanishing in Qt (the path itself stays exact). Qt-free:
    the session's messages and every view use it (:mod:`app.gui.models` re-exports it)."""
    return display_path(Path(path).name)


# ============================================================================ events
class Event:
    """What an emitter hands its callbacks: its ``type`` (the event's name), the
    ``sender`` (the model that emitted it) and the payload as attributes
    (``event.paths``, ``event.groups``, …)."""

    def __init__(self, _type: str, _sender: Any, /, **payload: Any) -> None:
        if "type" in payload or "sender" in payload:
            raise ValueError("'type' and 'sender' are reserved event attributes")
        self.type = _type
        self.sender = _sender
        self.__dict__.update(payload)

    def __repr__(self) -> str:
        keys = ", ".join(k for k in self.__dict__ if k not in ("type", "sender"))
        return f"Event({self.type!r}: {keys})"


class EventEmitter:
    """A named event: ``connect(callback)``, then ``emitter(key=value, …)`` calls every
    callback with an :class:`Event`. A callback that raises does not stop the others; the
    first error is raised again once all have run (it never vanishes)."""

    def __init__(self, sender: Any, type: str) -> None:
        self.sender = sender
        self.type = type
        self.callbacks: list[Callable[[Event], Any]] = []
        self._blocked = 0

    def connect(self, callback: Callable[[Event], Any]) -> Callable[[Event], Any]:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        if callback not in self.callbacks:
            self.callbacks.append(callback)
        return callback

    def disconnect(self, callback: Callable[[Event], Any] | None = None) -> None:
        """Remove ``callback`` (every callback if None); unknown callbacks are ignored."""
        if callback is None:
            self.callbacks.clear()
        elif callback in self.callbacks:
            self.callbacks.remove(callback)

    @contextmanager
    def blocker(self) -> Iterator[None]:
        """Emit nothing inside the ``with`` block."""
        self._blocked += 1
        try:
            yield
        finally:
            self._blocked -= 1

    def __call__(self, **payload: Any) -> Event:
        event = Event(self.type, self.sender, **payload)
        if self._blocked:
            return event
        error: BaseException | None = None
        for cb in list(self.callbacks):
            try:
                cb(event)
            except Exception as exc:
                log.exception("callback %r of event %r failed", cb, self.type)
                error = error or exc
        if error is not None:
            raise error
        return event

    emit = __call__


class EmitterGroup:
    """The events of one model, as attributes: ``model.events.changed.connect(cb)``."""

    def __init__(self, sender: Any, names: Iterable[str]) -> None:
        self._emitters: dict[str, EventEmitter] = {}
        for name in names:
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"event names must be public identifiers, got {name!r}")
            self._emitters[name] = EventEmitter(sender, name)

    def __getattr__(self, name: str) -> EventEmitter:
        try:
            return self.__dict__["_emitters"][name]
        except KeyError:
            raise AttributeError(f"no event {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._emitters)

    def connect_slots(self, obj: Any, prefix: str = "_on_") -> list[str]:
        """Connect ``obj.<prefix><name>`` to every event ``name`` it has a slot for;
        returns the names connected."""
        done = []
        for name, emitter in self._emitters.items():
            slot = getattr(obj, prefix + name, None)
            if callable(slot):
                emitter.connect(slot)
                done.append(name)
        return done


# ============================================================================ values
@dataclass(frozen=True)
class Hit:
    """One ranked result (mirrors ``engine.collection.Hit``: the calibrated probability
    of showing the same object or place, and its label in words)."""

    path: str
    score: float
    probability: float | None = None
    label: str = ""


@dataclass(frozen=True)
class Token:
    """Identity of one background request: the session ``epoch`` it started in and its
    topic's ``serial`` (None: superseded only by a new folder, e.g. saving one mark)."""

    topic: str
    epoch: int
    serial: int | None


class ActionRefused(Exception):
    """A file action the session does not allow (the message says why)."""


def mark_key(path) -> str:
    return os.path.abspath(os.fspath(path))


class MarkBook:
    """The user's marks, ``(query, result) -> relevant`` (absolute paths)."""

    def __init__(self, marks=()) -> None:
        self._marks: dict[tuple[str, str], bool] = {}
        self.load(marks)

    def load(self, marks) -> None:
        self._marks = {(mark_key(m.query), mark_key(m.result)): bool(m.relevant) for m in marks}

    def get(self, query, result) -> bool | None:
        if query is None:
            return None
        return self._marks.get((mark_key(query), mark_key(result)))

    def set(self, query, result, relevant: bool | None) -> None:
        k = (mark_key(query), mark_key(result))
        if relevant is None:
            self._marks.pop(k, None)
        else:
            self._marks[k] = bool(relevant)

    def toggled(self, query, result, relevant: bool) -> bool | None:
        """The mark after clicking ``relevant``: the same button again clears it."""
        return None if self.get(query, result) == relevant else relevant

    def __len__(self) -> int:
        return len(self._marks)

    def counts(self) -> tuple[int, int]:
        up = sum(self._marks.values())
        return up, len(self._marks) - up


# ============================================================================ parts
class QueryModel:
    """The current search: its source, the region searched, state and ranked hits.

    ``status`` is ``"none"`` (no query), ``"pending"`` (runs when indexing finishes),
    ``"searching"``, ``"done"`` or ``"failed"``. ``box`` is the region of the source
    searched, ``(x, y, w, h)`` in pixels of the photo as displayed at its full size
    (``size``), or None for the whole photo (search by region,
    :mod:`engine.index.region`); a new source, folder or :meth:`reset` clears it.
    Events: ``changed`` (the query, its region or its state), ``results`` (the hits
    shown, with the ``box`` they are for).
    """

    def __init__(self) -> None:
        self.events = EmitterGroup(self, ("changed", "results"))
        self.source: str | None = None
        self.status = "none"
        self.method = DEFAULT_METHOD
        self.seconds: float | None = None
        self.box: tuple[float, float, float, float] | None = None
        #: (width, height) of the source as displayed at full size, once a search read it
        self.size: tuple[int, int] | None = None
        self.hits: list[Hit] = []
        self.hits_source: str | None = None  # the query the hits belong to
        self.hits_method = ""
        self.hits_box: tuple[float, float, float, float] | None = None  # ... and its region
        self.pending: str | None = None
        self.wanted_method: str | None = None  # chosen before the folder could offer it

    @staticmethod
    def display_name(source: str | None) -> str:
        if source is None:
            return "No query yet"
        name = Path(source).name
        return "Pasted image" if name.startswith("pasted-") else name

    def reset(self) -> None:
        self.source, self.status, self.seconds, self.pending = None, "none", None, None
        self.box, self.size = None, None
        # (a method asked for before the folder could offer it, e.g. "--method learned"
        # on the command line, is kept: the folder opening is what it waits for)
        self._changed()
        self._set_hits(None, "", [])

    def set_pending(self, source: str, box=None) -> None:
        self._set_source(source, box)
        self.pending, self.status = str(source), "pending"
        self._changed()

    def take_pending(self) -> str | None:
        src, self.pending = self.pending, None
        return src

    def searching(self, source: str, settings: SearchSettings, box=None) -> None:
        """A search of ``source`` (within ``box``, pixels; None: the whole photo) starts."""
        settings.validate()
        self._set_source(source, box)
        self.pending, self.status = None, "searching"
        self.method, self.seconds = settings.method, None
        self._changed()

    def set_results(
        self, source: str, method: str, hits, seconds: float | None = None, *,
        box=None, size=None,
    ) -> None:  # fmt: skip
        """The ``hits`` of ``source`` searched within ``box`` (None: the whole photo);
        ``size``: the photo's displayed size, when the search read it."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        box = _checked_box(box)
        if size is not None and str(source) == self.source:
            self.size = (int(size[0]), int(size[1]))
        self.status, self.method, self.seconds = "done", method, seconds
        if str(source) == self.source:
            self.box = box
        self._set_hits(
            str(source), method,
            [Hit(str(h.path), float(h.score), getattr(h, "probability", None),
                 str(getattr(h, "label", "") or "")) for h in hits],
            box,
        )  # fmt: skip
        self._changed()

    def failed(self) -> None:
        self.status = "failed"
        self._changed()

    def region_refused(self) -> None:
        """The region asked for could not be searched (e.g. it holds too few features):
        the hits shown stay, and with them the region they are for."""
        if self.hits_source is None or self.hits_source != self.source:
            self.failed()
            return
        self.box, self.status = self.hits_box, "done"
        self._changed()

    def box_from_fractions(self, fractions) -> tuple[float, float, float, float]:
        """A box drawn on the shown photo, ``(x, y, w, h)`` as fractions of its width and
        height, in pixels of the photo at its full size (:attr:`size`), rounded to whole
        pixels. ``ValueError`` when the size is not known yet or the box is empty."""
        if self.size is None:
            raise ValueError("the query photo's size is not known yet: search with it first")
        W, H = self.size
        fx, fy, fw, fh = (float(v) for v in fractions)
        x0, y0 = round(max(fx, 0.0) * W), round(max(fy, 0.0) * H)
        x1, y1 = round(min(fx + fw, 1.0) * W), round(min(fy + fh, 1.0) * H)
        return _checked_box((x0, y0, x1 - x0, y1 - y0))

    def box_fractions(self, box=None) -> tuple[float, float, float, float] | None:
        """``box`` (default :attr:`box`) as fractions of the photo (None: none, or the
        size is not known)."""
        box = self.box if box is None else box
        if box is None or self.size is None:
            return None
        W, H = self.size
        return (box[0] / W, box[1] / H, box[2] / W, box[3] / H)

    def _set_source(self, source: str, box) -> None:
        if str(source) != self.source:
            self.size = None  # another photo
        self.source, self.box = str(source), _checked_box(box)

    def _changed(self) -> None:
        self.events.changed(source=self.source, status=self.status, method=self.method,
                            n=len(self.hits), seconds=self.seconds, box=self.box)  # fmt: skip

    def _set_hits(self, source, method: str, hits: list[Hit], box=None) -> None:
        self.hits_source, self.hits_method, self.hits = source, method, hits
        self.hits_box = box
        self.events.results(source=source, method=method, hits=list(hits), box=box)


def _checked_box(box) -> tuple[float, float, float, float] | None:
    """``box`` as 4 floats ``(x, y, w, h)`` with ``w, h > 0`` (None stays None);
    ``ValueError`` naming what is wrong."""
    if box is None:
        return None
    try:
        x, y, w, h = (float(v) for v in box)
    except (TypeError, ValueError):
        raise ValueError(f"box must be 4 numbers (x, y, w, h), got {box!r}") from None
    if not all(math.isfinite(v) for v in (x, y, w, h)) or w <= 0 or h <= 0:
        raise ValueError(f"box must be finite with width and height > 0, got {box!r}")
    return x, y, w, h


class MatchModel:
    """The query / result pair of the correspondence view and its computed match
    (opaque ``data``). Events: ``busy``, ``changed`` (``data`` None: cleared)."""

    def __init__(self) -> None:
        self.events = EmitterGroup(self, ("busy", "changed"))
        self.pair: tuple[str, str] | None = None
        self.data: Any = None

    def reset(self) -> None:
        self.pair, self.data = None, None
        self.events.changed(data=None)

    def start(self, query: str, result: str) -> None:
        self.pair, self.data = (str(query), str(result)), None
        self.events.busy(query=self.pair[0], result=self.pair[1])

    def set_data(self, data: Any) -> None:
        self.data = data
        self.events.changed(data=data)


class DuplicatesModel:
    """The last duplicate groups (``.paths``, ``.scores`` each, largest first), the
    selected group and its copies. Events: ``cleared`` (a new folder: nothing found yet),
    ``busy``, ``groups``, ``copies``."""

    def __init__(self) -> None:
        self.events = EmitterGroup(self, ("cleared", "busy", "groups", "copies", "outdated"))
        self._clear()

    def _clear(self) -> None:
        self.groups: list = []
        self.threshold: float | None = None
        self.selected = -1
        self.infos: list = []
        self.best = -1
        self.trashed: set[str] = set()
        self.refresh_after_index = False
        self.changed_since = 0  # photos indexed or dropped since the groups were found

    def photos_changed(self, n: int) -> None:
        """``n`` photos were indexed (new or changed) or dropped since the groups shown
        were found: the view says so (event ``outdated``) until the next search, which
        checks only the pairs involving them (the pair checks are remembered)."""
        if n <= 0 or self.threshold is None:
            return
        self.changed_since += int(n)
        self.events.outdated(n=self.changed_since)

    def reset(self) -> None:
        self._clear()
        self.events.cleared()

    def start(self, threshold: float) -> None:
        t = float(threshold)
        if not 0 < t <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
        self.threshold = t
        self.events.busy(threshold=t)

    def set_groups(self, groups, threshold: float | None = None) -> None:
        self.groups = list(groups)
        if threshold is not None:
            self.threshold = float(threshold)
        self.selected, self.infos, self.best = -1, [], -1
        self.trashed = set()
        self.changed_since = 0
        self.events.groups(groups=list(self.groups), threshold=self.threshold)

    def select(self, row: int):
        """Make group ``row`` the selected one; returns it."""
        if not 0 <= row < len(self.groups):
            raise IndexError(f"row must be in [0, {len(self.groups)}), got {row}")
        self.selected, self.infos, self.best = row, [], -1
        return self.groups[row]

    def set_copies(self, infos, best: int) -> None:
        self.infos, self.best = list(infos), int(best)
        self.events.copies(infos=list(self.infos), best=self.best)

    def paths(self) -> set[str]:
        """Absolute paths of every photo in the groups (trashed ones excluded)."""
        return {mark_key(p) for g in self.groups for p in g.paths} - self.trashed

    def forget(self, path) -> None:
        """``path`` left the folder (trashed): no action may name it again."""
        self.trashed.add(mark_key(path))


class GroupingModel:
    """The Categories tab's state: the grouping shown (an opaque ``Grouping`` with
    ``paths``, ``k``, ``names``), its affinities ``K``, the person's constraints
    (``must`` / ``cannot`` path pairs), the chosen number of groups, whether a job runs,
    and the feature mask shown.

    Events: ``grouping``, ``constraints``, ``busy``, ``progress``, ``k_choice``, ``mask``.
    """

    def __init__(self) -> None:
        self.events = EmitterGroup(
            self, ("grouping", "constraints", "busy", "progress", "k_choice", "mask")
        )
        self._k_choice: Any = "auto"  # a preference: kept when another folder opens
        self._clear()

    #: Edits kept for undo (Ctrl+Z), most recent last.
    UNDO_DEPTH = 50
    #: Changes with every change of :attr:`undo_stack` (never the same twice, in any model):
    #: the view writes the history to the index only when it is not the stamp it saved.
    history_stamp: int

    def _clear(self) -> None:
        self.grouping: Any = None
        self.K: Any = None
        self.must: list[tuple[str, str]] = []
        self.cannot: list[tuple[str, str]] = []
        self.busy = False
        self.mask_path: str | None = None
        self.mask_data: Any = None
        self.undo_stack: list[tuple[str, Any, Any, list, list]] = []
        self._history_changed()
        # photos Simile placed into the person's groups since they were last grouped
        # (path -> the classifier's confidence), for them to check
        self.placed: dict[str, float] = {}

    def remember(self, what: str) -> None:
        """Keep the grouping shown and the constraints, so that :meth:`undo` can bring
        them back after the edit ``what`` (e.g. "rename", "move")."""
        import copy

        if self.grouping is None:
            return
        entry = (what, copy.deepcopy(self.grouping), self.K, list(self.must), list(self.cannot))
        self.undo_stack = [*self.undo_stack, entry][-self.UNDO_DEPTH :]
        self._history_changed()

    def _history_changed(self) -> None:
        """A new :attr:`history_stamp`: the undo history is not the one last saved."""
        self.history_stamp = next(_HISTORY_STAMPS)

    @property
    def can_undo(self) -> bool:
        return bool(self.undo_stack) and not self.busy

    def history(self) -> list:
        """The undo history as :class:`engine.cluster.HistoryEntry` items, oldest first
        (what :func:`engine.cluster.save_history` keeps in the index)."""
        from engine.cluster import HistoryEntry

        return [HistoryEntry(what, g, list(must), list(cannot))
                for what, g, _K, must, cannot in self.undo_stack]  # fmt: skip

    def saved_state(self, *, history: bool) -> dict[str, Any]:
        """What the index keeps of the grouping shown (:func:`engine.cluster.save_edits`
        arguments; with ``history``, also :meth:`history`), copied so that a later edit
        does not change it while it is written in the background (a rename changes a
        grouping's names in place; everything else is replaced, never changed)."""
        from dataclasses import replace

        def own(g: Any) -> Any:
            return replace(g, names=dict(g.names))

        state: dict[str, Any] = {
            "grouping": own(self.grouping), "must": list(self.must),
            "cannot": list(self.cannot), "k": self.k_choice, "placed": dict(self.placed),
        }  # fmt: skip
        if history:
            state["history"] = [replace(e, grouping=own(e.grouping)) for e in self.history()]
        return state

    def set_history(self, entries) -> None:
        """The undo history read back from the index (:func:`engine.cluster.load_history`,
        oldest first); undoing one of them keeps the affinities computed since."""
        self.undo_stack = [
            (e.what, e.grouping, None, list(e.must), list(e.cannot)) for e in entries
        ][-self.UNDO_DEPTH :]
        self._history_changed()

    def undo(self) -> str | None:
        """Bring back the grouping and constraints before the last edit; returns what was
        undone (None: nothing to undo)."""
        if not self.can_undo:
            return None
        what, grouping, K, must, cannot = self.undo_stack.pop()
        self._history_changed()
        current = self.grouping
        if current is not None and list(grouping.paths) != list(current.paths):
            # photos were added or removed since the edit: undo the edit only, the photos
            # placed since stay placed and the removed ones stay out
            from engine.cluster import rebase_grouping

            grouping, K = rebase_grouping(grouping, current), self.K
            live = set(current.paths)
            must = [p for p in must if set(p) <= live]
            cannot = [p for p in cannot if set(p) <= live]
        self.set_constraints(must, cannot)
        self.set_grouping(grouping, K=... if K is None else K)
        return what

    def reset(self) -> None:
        """Forget everything (a new folder): grouping, constraints, mask."""
        self._clear()
        self.events.busy(busy=False, text="")
        self.events.constraints(must=[], cannot=[])
        self.events.grouping(grouping=None)
        self.events.mask(path=None, data=None, group_name="", text="")

    def clear(self) -> None:
        """A re-opened collection of the same folder (e.g. after the watcher indexed new
        photos): no grouping or constraints until restored. The mask and the undo history
        stay: an edit made before the photos arrived can still be undone (:meth:`undo`
        brings it onto the photos of the day); another folder starts afresh
        (:meth:`reset`)."""
        self.grouping, self.K, self.must, self.cannot, self.busy = None, None, [], [], False
        self.events.busy(busy=False, text="")
        self.events.constraints(must=[], cannot=[])
        self.events.grouping(grouping=None)

    @property
    def k_choice(self):
        return self._k_choice

    def set_k_choice(self, k) -> None:
        if not (k == "auto" or (isinstance(k, int) and k >= 1)):
            raise ValueError(f"k must be 'auto' or a positive int, got {k!r}")
        if k != self.k_choice:
            self._k_choice = k
            self.events.k_choice(k=k)

    def set_grouping(self, grouping, K: Any = ...) -> None:
        """Show ``grouping`` (None: none); ``K``: its affinities, when they change. The
        marks of placed photos no longer in it go."""
        self.grouping = grouping
        if K is not ...:
            self.K = K
        if grouping is not None and self.placed:
            live = set(map(str, grouping.paths))
            self.placed = {p: c for p, c in self.placed.items() if p in live}
        self.events.grouping(grouping=grouping)

    def add_placed(self, placed) -> None:
        """Mark photos Simile placed into the groups: ``(path, group, confidence)`` each
        (:attr:`engine.cluster.Placement.placed`); shown until the person moves them or
        groups everything again (:meth:`forget_placed`)."""
        self.placed.update({str(p): float(c) for p, _g, c in placed})

    def set_placed(self, placed: dict) -> None:
        """The marks of the photos Simile placed, as saved with the groups (path ->
        confidence; :attr:`engine.cluster.SavedEdits.placed`), replacing any others."""
        self.placed = {str(p): float(c) for p, c in placed.items()}

    def forget_placed(self, paths=None) -> None:
        """Drop the marks of ``paths`` (None: all)."""
        if paths is None:
            self.placed = {}
        for p in paths or ():
            self.placed.pop(str(p), None)

    def set_affinities(self, K) -> None:
        self.K = K

    def set_constraints(self, must, cannot) -> None:
        self.must = [tuple(map(str, p)) for p in must]
        self.cannot = [tuple(map(str, p)) for p in cannot]
        self.events.constraints(must=list(self.must), cannot=list(self.cannot))

    def add_constraints(self, must=(), cannot=()) -> None:
        """Add must-group / cannot-group pairs; a new pair replaces its opposite."""
        m, c = list(self.must), list(self.cannot)
        for a, b in must:
            c = [x for x in c if set(x) != {a, b}]
            if (a, b) not in m and (b, a) not in m:
                m.append((a, b))
        for a, b in cannot:
            m = [x for x in m if set(x) != {a, b}]
            if (a, b) not in c and (b, a) not in c:
                c.append((a, b))
        self.set_constraints(m, c)

    def rename(self, group: int, name: str) -> bool:
        g = self.grouping
        if g is None or not 0 <= group < g.k:
            return False
        name = name.strip()
        if name != g.names.get(group, ""):
            self.remember("rename")
            g = self.grouping
        if name:
            g.names[group] = name
        else:
            g.names.pop(group, None)
        self.events.grouping(grouping=g, renamed=group)
        return True

    def set_busy(self, busy: bool, text: str = "") -> None:
        self.busy = bool(busy)
        self.events.busy(busy=self.busy, text=text)

    def report(self, text: str, done: int = 0, total: int = 0) -> None:
        self.events.progress(text=text, done=int(done), total=int(total))

    def mask_started(self, path: str, text: str) -> None:
        self.mask_path, self.mask_data = str(path), None
        self.events.mask(path=self.mask_path, data=None, group_name="", text=text)

    def set_mask(self, data: Any, group_name: str) -> None:
        self.mask_data = data
        self.events.mask(path=self.mask_path, data=data, group_name=group_name, text="")


@dataclass
class Job:
    """A background job of the session: its token, a label, how to ask it to stop, and
    the (opaque) thing running it."""

    token: Token
    label: str = ""
    cancel: Callable[[], Any] | None = None
    handle: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.token.topic


class Jobs:
    """The session's running jobs, one per topic. Events: ``started``, ``finished``."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._jobs: dict[str, Job] = {}
        self.events = EmitterGroup(self, ("started", "finished"))

    def start(self, token: Token, label: str = "", cancel=None, handle=None) -> Job:
        if not self._session.is_current(token):
            raise ValueError(f"token {token} is stale: the job would be ignored")
        job = Job(token, label, cancel, handle)
        self._jobs[token.topic] = job
        self.events.started(job=job)
        return job

    def finish(self, token: Token) -> bool:
        """The job of ``token`` ended (no-op for a job already finished or replaced)."""
        job = self._jobs.get(token.topic)
        if job is None or job.token != token:
            return False
        del self._jobs[token.topic]
        self.events.finished(job=job)
        return True

    def get(self, topic: str) -> Job | None:
        return self._jobs.get(topic)

    def running(self, topic: str) -> bool:
        return topic in self._jobs

    def cancel(self, topic: str, drop: bool = False) -> bool:
        """Ask the ``topic`` job to stop. ``drop``: also ignore whatever it still delivers
        (the job counts as finished at once); otherwise it reports its end itself."""
        job = self._jobs.get(topic)
        if job is None:
            return False
        if job.cancel is not None:
            job.cancel()
        if drop:
            self._session.supersede(topic)
            self.finish(job.token)
        return True

    def _stop_all(self) -> None:
        """Cancel every job and forget them (their results are stale by now)."""
        jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            if job.cancel is not None:
                try:
                    job.cancel()
                except Exception as exc:  # a job that cannot be told must not block a reset
                    log.debug("cancelling %s failed: %s", job.topic, exc)
            self.events.finished(job=job)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)


# ============================================================================ the session
class IndexWrites:
    """Writes to the index made off the GUI thread: one thread, in the order submitted.

    The GUI thread submits what to write, already copied (later edits must not reach a
    write under way); :meth:`wait` blocks until every write submitted has ended, and the
    session calls it before it closes a collection. A write that raises is logged and
    counted (:attr:`failed`), like the synchronous writes it replaces.
    """

    def __init__(self) -> None:
        self._pool: Any = None
        self._pending: list[Any] = []
        self.failed = 0

    def submit(self, func: Callable[..., None], *args: Any) -> None:
        """Run ``func(*args)`` after every write submitted before it."""
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="simile-index-write")
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self._run, func, *args))

    def _run(self, func: Callable[..., None], *args: Any) -> None:
        try:
            func(*args)
        except Exception as exc:  # (a read-only or closed index: kept for this session only)
            self.failed += 1
            log.debug("a background write to the index failed: %s", exc)

    @property
    def pending(self) -> int:
        """Writes submitted and not ended yet."""
        return sum(not f.done() for f in self._pending)

    def wait(self, timeout: float | None = 60.0) -> bool:
        """Block until the writes submitted have ended (True), or ``timeout`` seconds."""
        from concurrent.futures import wait

        done, _ = wait(self._pending, timeout=timeout)
        self._pending = [f for f in self._pending if f not in done]
        return not self._pending


class Session:
    """The state of one window (see the module docstring).

    Events (``session.events``): ``folder_opened``, ``folder_closed``,
    ``collection_opened``, ``collection_closed``, ``access_changed`` (``readonly``: None
    or why the collection is read-only), ``photos_reset``, ``photos_added``,
    ``photo_removed``, ``problems_changed``, ``methods_changed``, ``marks_changed``,
    ``metadata_changed``, ``refused``.
    """

    #: why a collection may be read-only (:attr:`readonly`)
    READONLY_REASONS = ("locked", "media", "permission")

    #: a new request of the key also supersedes the pending ones of these topics
    DEPENDENT_TOPICS: ClassVar[dict[str, tuple[str, ...]]] = {"duplicates": ("copies",)}
    #: Jobs that read the open collection: stopped and dropped when it is closed
    #: (:meth:`close_collection`).
    COLLECTION_TOPICS: ClassVar[tuple[str, ...]] = ("duplicates", "grouping")

    def __init__(self) -> None:
        self.events = EmitterGroup(self, (
            "folder_opened", "folder_closed", "collection_opened", "collection_closed",
            "access_changed", "photos_reset", "photos_added", "photo_removed", "problems_changed",
            "methods_changed", "marks_changed", "metadata_changed", "refused",
        ))  # fmt: skip
        self.epoch = 0
        self._serials: dict[str, int] = {}
        self.folder: Path | None = None
        self.index_dir: Path | None = None
        self.collection: Any = None
        #: None (the index is writable) or why it is read-only (:data:`READONLY_REASONS`)
        self.readonly: str | None = None
        self._photos: list[str] = []
        self._photo_set: set[str] = set()
        self._arrived: list[str] = []
        self.problems: list[tuple[str, str]] = []
        #: path -> :class:`engine.io.metadata.PhotoMetadata` of the photos whose metadata
        #: the catalogue holds (read off the GUI thread, with the collection)
        self.metadata: dict[str, Any] = {}
        self.methods: list[str] = [m for m in METHODS if m != "learned"]
        self.query = QueryModel()
        self.marks = MarkBook()
        self.match = MatchModel()
        self.duplicates = DuplicatesModel()
        self.grouping = GroupingModel()
        self.jobs = Jobs(self)
        self.writes = IndexWrites()

    # -- tokens ------------------------------------------------------------------------------
    def begin(self, topic: str, *, supersede: bool = True) -> Token:
        """A token for a new background request of ``topic``. ``supersede`` (default): the
        earlier requests of the topic (and of its dependent topics) become stale."""
        if not topic.isidentifier():
            raise ValueError(f"topic must be an identifier, got {topic!r}")
        if not supersede:
            return Token(topic, self.epoch, None)
        for dep in self.DEPENDENT_TOPICS.get(topic, ()):
            self.supersede(dep)
        serial = self._serials.get(topic, 0) + 1
        self._serials[topic] = serial
        return Token(topic, self.epoch, serial)

    def supersede(self, topic: str) -> None:
        """Make every pending request of ``topic`` stale."""
        self._serials[topic] = self._serials.get(topic, 0) + 1

    def is_current(self, token: Token) -> bool:
        if token.epoch != self.epoch:
            return False
        return token.serial is None or token.serial == self._serials.get(token.topic, 0)

    def accept(self, token: Token, callback: Callable[..., Any]) -> Callable[..., Any]:
        """``callback`` guarded by ``token``: called while the token is current, dropped
        (returns None) once another folder was opened or a newer request of the topic
        started."""

        def guarded(*args: Any) -> Any:
            if not self.is_current(token):
                log.debug("dropped a stale %s result (epoch %d, now %d)", token.topic,
                          token.epoch, self.epoch)  # fmt: skip
                return None
            return callback(*args)

        return guarded

    # -- folder ------------------------------------------------------------------------------
    def open_folder(self, folder, index_dir=None) -> Path:
        """Make ``folder`` the open folder: every job is cancelled, every part of the
        session reset, every earlier result stale. Raises ``NotADirectoryError``."""
        path = Path(os.fspath(folder)).expanduser()
        if not path.is_dir():
            raise NotADirectoryError(f"{path} is not a folder.")
        # The folder as the window has always opened it (links in its own path resolved,
        # as the index's scan does); the paths inside it are then compared lexically.
        path = path.resolve()
        self._reset(path, None if index_dir is None else Path(index_dir))
        self.events.folder_opened(folder=path, index_dir=self.index_dir, epoch=self.epoch)
        return path

    def close(self) -> None:
        """No folder: like opening one, without a new folder (window closing)."""
        old = self.folder
        self._reset(None, None)
        self.events.folder_closed(folder=old, epoch=self.epoch)

    def _reset(self, folder: Path | None, index_dir: Path | None) -> None:
        self.epoch += 1
        self._serials.clear()
        self.jobs._stop_all()
        self.close_collection()
        self.set_readonly(None)
        self.folder, self.index_dir = folder, index_dir
        self._arrived = []
        self.set_photos([])
        self.set_problems([])
        self.set_metadata({})
        self.query.reset()
        self.load_marks([])
        self.match.reset()
        self.duplicates.reset()
        self.grouping.reset()

    # -- collection --------------------------------------------------------------------------
    def close_collection(self) -> None:
        """Close the open collection (an index starts, or a finished one replaces it).
        Jobs still reading it (:data:`COLLECTION_TOPICS`: a duplicate search, a grouping)
        are stopped and their results dropped, so none reports "the index store is
        closed"; a duplicate search is done again after the next index."""
        coll, self.collection = self.collection, None
        if coll is not None:
            for topic in self.COLLECTION_TOPICS:
                if self.jobs.cancel(topic, drop=True) and topic == "duplicates":
                    self.duplicates.refresh_after_index = True
            if not self.writes.wait():  # (the person's edits reach the index first)
                log.warning("writes to the index still running after 60 s; closing it anyway")
            _close(coll)
            self.events.collection_closed()

    def index_opened(self, token: Token, paths, index_dir) -> bool:
        """The indexer opened the index: its location and the photos known already."""
        if not self.is_current(token):
            return False
        self.index_dir = Path(index_dir)
        self.add_photos(paths)
        return True

    def set_readonly(self, reason: str | None) -> None:
        """The collection is writable (None) or read-only for ``reason``
        (:data:`READONLY_REASONS`); emits ``access_changed`` when that changes."""
        if reason is not None and reason not in self.READONLY_REASONS:
            raise ValueError(
                f"reason must be None or one of {', '.join(self.READONLY_REASONS)}, got {reason!r}"
            )
        if reason != self.readonly:
            self.readonly = reason
            self.events.access_changed(readonly=reason)

    def collection_ready(
        self, token: Token, collection, paths, problems=(), methods=None, marks=(),
        *, readonly: str | None = None, index_dir=None,
    ) -> bool:  # fmt: skip
        """Indexing of ``token`` finished: the searchable collection (None: none could be
        opened yet), its photos, the skipped files, the offered methods, the stored marks,
        whether it is read-only (and why) and where its index is. A stale result is
        closed and ignored (False)."""
        if not self.is_current(token):
            if collection is not None:
                _close(collection)
            return False
        self.jobs.finish(token)
        if collection is not self.collection:
            self.close_collection()
        self.collection = collection
        if index_dir is not None:
            self.index_dir = Path(index_dir)
        self.set_readonly(readonly)
        self.flush_arrivals()
        paths = sorted({str(p) for p in paths})
        if paths != self._photos:
            self.set_photos(paths)
        self.set_problems(problems)
        if methods is not None:
            self.set_methods(methods)
        self.load_marks(marks)
        if collection is not None:
            self.events.collection_opened(collection=collection)
        return True

    # -- photos ------------------------------------------------------------------------------
    @property
    def photos(self) -> list[str]:
        return list(self._photos)

    def set_photos(self, paths) -> None:
        self._photos = sorted({str(p) for p in paths})
        self._photo_set = set(self._photos)
        self.events.photos_reset(paths=list(self._photos))

    def add_photos(self, paths) -> list[str]:
        new = sorted({str(p) for p in paths} - self._photo_set)
        if new:
            self._photo_set.update(new)
            self._photos = sorted(self._photo_set)
            self.events.photos_added(paths=new)
        return new

    def photos_arrived(self, paths) -> None:
        """Photos indexed while indexing runs; shown in batches by :meth:`flush_arrivals`."""
        self._arrived.extend(str(p) for p in paths)

    def flush_arrivals(self) -> list[str]:
        batch, self._arrived = self._arrived, []
        return self.add_photos(batch) if batch else []

    def sync_photos(self, paths) -> tuple[list[str], list[str]]:
        """Show exactly ``paths``, as additions and removals (the grid keeps its place):
        the photos added and those removed."""
        wanted = {str(p) for p in paths}
        gone = sorted(self._photo_set - wanted)
        for p in gone:
            self.remove_photo(p)
        return self.add_photos(wanted), gone

    def remove_photo(self, path) -> None:
        p = str(path)
        if p in self._photo_set:
            self._photo_set.discard(p)
            self._photos.remove(p)
            self.events.photo_removed(path=p)

    def set_metadata(self, metadata) -> None:
        """The photos' metadata (path -> ``PhotoMetadata``), as the catalogue holds it;
        emits ``metadata_changed`` (``metadata``: the new mapping)."""
        self.metadata = {str(p): m for p, m in dict(metadata or {}).items()}
        self.events.metadata_changed(metadata=self.metadata)

    def set_problems(self, problems) -> None:
        self.problems = [(str(p), str(r)) for p, r in problems]
        self.events.problems_changed(problems=list(self.problems))

    def add_problem(self, path, reason: str) -> None:
        self.problems.append((str(path), str(reason)))
        self.events.problems_changed(problems=list(self.problems))

    def set_methods(self, methods) -> None:
        methods = [m for m in METHODS if m in set(methods)]
        self.methods = methods
        self.events.methods_changed(methods=list(methods))

    def add_method(self, method: str) -> None:
        if method not in self.methods:
            self.set_methods([*self.methods, method])

    # -- marks -------------------------------------------------------------------------------
    def load_marks(self, marks) -> None:
        self.marks.load(marks)
        self.events.marks_changed()

    def set_mark(self, query, result, relevant: bool | None) -> None:
        self.marks.set(query, result, relevant)
        self.events.marks_changed()

    # -- file actions ------------------------------------------------------------------------
    def inside_folder(self, path) -> bool:
        """True if ``path`` lies inside the open folder as written (abspath + commonpath;
        symlinks are not followed, ``..`` is)."""
        if self.folder is None:
            return False
        root = os.path.abspath(os.fspath(self.folder))
        p = mark_key(path)
        try:
            return p != root and os.path.commonpath([root, p]) == root
        except ValueError:  # different drives (Windows)
            return False

    def authorize(self, action: str, path, among: str = "duplicates") -> str:
        """The absolute ``path`` if ``action`` (``"trash"``, ``"move"``, ``"link"``,
        ``"copy"``) may touch it, else :class:`ActionRefused` (and a ``refused`` event with
        the message).

        ``among``: what the path must also belong to in this session — ``"duplicates"``
        (the duplicate groups shown), ``"grouping"`` (the grouping shown) or
        ``"photos"`` (the open folder's photos).
        """
        p = mark_key(path)
        what_to_do = _VERBS.get(action, action + " {name}").format(name=shown_name(p))
        if self.folder is None:
            self._refuse(action, p, f"Refused to {what_to_do}: no folder is open.")
        if not self.inside_folder(p):
            self._refuse(action, p, f"Refused to {what_to_do}: it is not inside the open "
                                    f"folder {self.folder}.")  # fmt: skip
        if action in ("trash", "move") and self.readonly is not None:  # (the photo leaves)
            self._refuse(action, p, f"Refused to {what_to_do}: {READONLY_TRASH[self.readonly]}")
        if among == "duplicates":
            allowed, what = self.duplicates.paths(), "the duplicate groups shown"
        elif among == "grouping":
            g = self.grouping.grouping
            allowed = {mark_key(q) for q in (g.paths if g is not None else ())}
            what = "the groups shown"
        elif among == "photos":
            allowed, what = {mark_key(q) for q in self._photos}, "this folder's photos"
        else:
            raise ValueError(f"among must be 'duplicates', 'grouping' or 'photos', got {among!r}")
        if p not in allowed:
            self._refuse(action, p, f"Refused to {what_to_do}: it is not one of {what}.")
        return p

    def authorize_all(self, action: str, paths, among: str = "duplicates") -> list[str]:
        """:meth:`authorize` for every path (refused as a whole at the first bad one)."""
        return [self.authorize(action, p, among) for p in paths]

    def _refuse(self, action: str, path: str, message: str):
        log.warning("%s", message)
        self.events.refused(action=action, path=path, message=message)
        raise ActionRefused(message)

    def file_trashed(self, path) -> None:
        """``path`` went to the trash: it leaves the photos and can never be acted on again;
        the duplicate groups are searched again once the index forgot it."""
        self.remove_photo(path)
        self.duplicates.forget(path)
        self.duplicates.refresh_after_index = True


#: why the trash (or a move out of the folder) is refused while the index is read-only
#: (the index could not forget the photo)
READONLY_TRASH = {
    "locked": "another Simile process is indexing this folder, so this window cannot "
    "update the index; try again when it is done.",
    "media": "the index is on read-only media, so it could not forget the photo.",
    "permission": "the index may not be written here, so it could not forget the photo.",
}

#: how refusal messages name an action ("Refused to move x.jpg to the trash: …")
_VERBS = {"trash": "move {name} to the trash", "move": "move {name}", "link": "link to {name}",
          "copy": "copy {name}"}  # fmt: skip


def _close(collection) -> None:
    try:
        collection.close()
    except Exception as exc:
        log.debug("close failed: %s", exc)
