"""The results a window shows, without Qt: the ranked hits of one query, the filter a
person set on them, and whether they fill the main grid (digiKam's "search results"
album).

:class:`ShownResults` is the one place these live. The side list
(:class:`app.gui.models.ResultsModel`) and the results grid
(:class:`app.gui.models.ResultsGridModel`) both render it, so a filter set in one shows
in the other, and a new search -- from the grid, the side list, a drop or the menu --
updates both. Its rules:

- a hit's **rank** is its place among the results other than the query itself (the
  query matches itself best: it is shown as the query, not as result 1); ranks are
  given before filtering, so a hidden hit leaves a gap ("1, 2, 5") rather than
  renumbering the rest;
- the **filter** (:class:`ResultFilter`) hides hits whose calibrated probability of
  showing the same object or place is below a minimum, or that only look alike; a hit
  without a probability (a method without a calibration curve, e.g. the learned one)
  is never hidden by the minimum;
- the grid shows results only while there are results of a query: results of no query
  (a folder opened, the window closing) leave the grid.

Events (``shown.events``): ``changed`` (the hits or the filter) and ``grid`` (``on``:
the grid shows the results, or all photos again).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from app.gui.session import EmitterGroup, Hit, QueryModel
from app.gui.state import METHODS

__all__ = ["SAME_OBJECT", "RankedHit", "ResultFilter", "ShownResults"]

#: The label of a hit that passed the geometric check (``engine.collection.Hit.label``).
SAME_OBJECT = "same object or place"


@dataclass(frozen=True)
class ResultFilter:
    """Which hits are shown.

    Attributes
    ----------
    min_probability : float in [0, 1)
        Hide hits whose calibrated probability of showing the same object or place is
        below this (0: hide none). Hits without a probability are kept.
    verified_only : bool
        Hide the hits that only look alike (keep those labelled
        :data:`SAME_OBJECT`).
    """

    min_probability: float = 0.0
    verified_only: bool = False

    def __post_init__(self) -> None:
        p = self.min_probability
        if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p):
            raise ValueError(f"min_probability must be a number in [0, 1), got {p!r}")
        if not 0.0 <= float(p) < 1.0:
            raise ValueError(f"min_probability must be in [0, 1), got {p!r}")
        object.__setattr__(self, "min_probability", float(p))
        object.__setattr__(self, "verified_only", bool(self.verified_only))

    @property
    def active(self) -> bool:
        return self.min_probability > 0.0 or self.verified_only

    def keeps(self, hit: Hit) -> bool:
        """Whether ``hit`` (a result other than the query) is shown."""
        if self.verified_only and hit.label != SAME_OBJECT:
            return False
        p = hit.probability
        return p is None or self.min_probability <= 0.0 or p >= self.min_probability

    def describe(self) -> str:
        """The filter in words (``"at least 50 %, the same object or place only"``);
        "" when it hides nothing."""
        parts = []
        if self.min_probability > 0:
            parts.append(f"at least {round(100 * self.min_probability)} %")
        if self.verified_only:
            parts.append("the same object or place only")
        return ", ".join(parts)


@dataclass(frozen=True)
class RankedHit:
    """One row of the results: the ``hit`` and its ``rank`` among the results other
    than the query (1 = the best); ``rank`` is None for the query itself."""

    rank: int | None
    hit: Hit

    @property
    def path(self) -> str:
        return self.hit.path

    @property
    def is_query(self) -> bool:
        return self.rank is None


class ShownResults:
    """The results of the current query as a window shows them (see the module
    docstring).

    Attributes
    ----------
    query : str or None
        The photo the hits are for (None: no results).
    method : str
        The method that ranked them (:data:`app.gui.state.METHODS`).
    box : (x, y, w, h) or None
        The region of the query searched (None: the whole photo).
    hits : list of Hit
        Every hit, best first, as the search returned them (the query may be one).
    filter : ResultFilter
    in_grid : bool
        The main grid shows these results (else all photos).
    """

    def __init__(self) -> None:
        self.events = EmitterGroup(self, ("changed", "grid"))
        self.query: str | None = None
        self.method = ""
        self.box: tuple[float, float, float, float] | None = None
        self.hits: list[Hit] = []
        self.filter = ResultFilter()
        self.in_grid = False
        self._ranked: list[RankedHit] = []
        self._rows: list[RankedHit] = []
        self._best: tuple[str | None] | None = None  # (best_other(),), once asked

    # -- changes -------------------------------------------------------------------------
    def set_hits(self, query, method: str, hits: Iterable, box=None) -> None:
        """The ranked ``hits`` of ``query`` (None: there are no results: the grid shows
        all photos again). ``hits``: objects with ``path``, ``score`` and optionally
        ``probability`` and ``label`` (``engine.collection.Hit``)."""
        if query is None:
            self.query, self.method, self.box, self.hits = None, "", None, []
        else:
            if method not in METHODS:
                raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
            self.query, self.method = str(query), method
            self.box = None if box is None else tuple(float(v) for v in box)
            self.hits = [
                h if isinstance(h, Hit) else Hit(
                    str(h.path), float(h.score), getattr(h, "probability", None),
                    str(getattr(h, "label", "") or ""),
                ) for h in hits
            ]  # fmt: skip
        self._rank()
        self.events.changed()
        if self.query is None:
            self.leave_grid()

    def set_filter(self, *, min_probability: float | None = None,
                   verified_only: bool | None = None) -> None:  # fmt: skip
        """Change the filter (arguments left out keep their setting); ``ValueError``
        naming a bad value."""
        new = ResultFilter(
            self.filter.min_probability if min_probability is None else min_probability,
            self.filter.verified_only if verified_only is None else verified_only,
        )
        if new == self.filter:
            return
        self.filter = new
        self._apply()
        self.events.changed()

    def show_in_grid(self) -> None:
        """The main grid shows the results (the query first, then the hits by rank)."""
        if not self.in_grid:
            self.in_grid = True
            self.events.grid(on=True)

    def leave_grid(self) -> None:
        """The main grid shows all photos again (their order and filter untouched)."""
        if self.in_grid:
            self.in_grid = False
            self.events.grid(on=False)

    def reset(self) -> None:
        """No results (and the grid shows all photos)."""
        self.set_hits(None, "", [])

    # -- what is shown -------------------------------------------------------------------
    def rows(self) -> list[RankedHit]:
        """The rows of the side list: the query's own hit (if the search returned it)
        and the hits the filter keeps, in rank order."""
        return list(self._rows)

    def others(self) -> list[RankedHit]:
        """The hits the filter keeps, without the query: the results grid after its
        query tile."""
        return [r for r in self._rows if not r.is_query]

    def ranked(self) -> list[RankedHit]:
        """Every hit with its rank, the filtered ones too."""
        return list(self._ranked)

    def total(self) -> int:
        """The number of results other than the query."""
        return sum(1 for r in self._ranked if not r.is_query)

    def shown(self) -> int:
        """The number of results other than the query that the filter keeps."""
        return sum(1 for r in self._rows if not r.is_query)

    def hidden(self) -> int:
        return self.total() - self.shown()

    def hidden_by_label(self) -> int:
        """The results that only look alike (what "only the same object or place"
        hides, whatever the minimum)."""
        return sum(1 for r in self._ranked if not r.is_query and r.hit.label != SAME_OBJECT)

    def calibrated(self) -> bool:
        """Whether the hits carry a calibrated probability (the minimum can filter)."""
        return any(r.hit.probability is not None for r in self._ranked if not r.is_query)

    def best_other(self) -> str | None:
        """The best-ranked shown hit that is not the query's file: neither the query
        itself nor another name of it (a hard link, as a duplicates clean-up makes): the
        result a "why do they match?" pairs the query with by default."""
        if self._best is None:
            self._best = (next((r.path for r in self._rows
                                if not r.is_query and not self._query_file(r.path)),
                               None),)  # fmt: skip
        return self._best[0]

    def query_name(self) -> str:
        return QueryModel.display_name(self.query)

    def heading(self) -> str:
        """What the results grid shows, in one line: ``"20 results for coffee.jpg ·
        Best match"`` (``"… · a region of it"`` after a search by region)."""
        if self.query is None:
            return "No results"
        n = self.total()
        label = METHODS.get(self.method, self.method)
        label = label.split(" (")[0]  # ("Best match (recommended)": the advice is moot)
        text = f"{n} result{'s' if n != 1 else ''} for {self.query_name()} · {label}"
        if self.box is not None:
            text += " · a region of it"
        return text

    def count_text(self) -> str:
        """``"12 of 20 shown (at least 50 %)"``, or ``"All 20 shown"``."""
        total, shown = self.total(), self.shown()
        if self.query is None:
            return ""
        if shown == total:
            return f"All {total} shown" if total != 1 else "1 shown"
        what = self.filter.describe()
        return f"{shown} of {total} shown" + (f" ({what})" if what else "")

    # -- internals -----------------------------------------------------------------------
    def _rank(self) -> None:
        ranked, k = [], 0
        # the query's own hit: its path, or the file it names (a query opened through a
        # symbolic link; one look at the disk per search, none per hit)
        names = set()
        if self.query is not None:
            names = {os.path.abspath(self.query), os.path.realpath(self.query)}
        for h in self.hits:
            if os.path.abspath(h.path) in names:
                ranked.append(RankedHit(None, h))
            else:
                k += 1
                ranked.append(RankedHit(k, h))
        self._ranked = ranked
        self._apply()

    def _apply(self) -> None:
        f = self.filter
        self._rows = [r for r in self._ranked if r.is_query or f.keeps(r.hit)]
        self._best = None

    def _query_file(self, path: str) -> bool:
        """Whether ``path`` is the query's file under another name (a hard link): looks
        at the disk, so only for the few hits :meth:`best_other` passes."""
        if self.query is None:
            return False
        try:
            return os.path.samefile(path, self.query)
        except (OSError, ValueError):
            return False  # (a file that is gone, a pasted image's temporary file)
