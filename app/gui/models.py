"""Qt item models (photos, results) and the delegates that paint them."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QRect,
    QRectF,
    QSize,
    Qt,
)
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from app.gui.results_state import RankedHit, ShownResults
from app.gui.session import Hit, QueryModel, shown_name
from app.gui.thumbnails import ThumbnailProvider
from engine.index.calibration import TAUGHT
from engine.index.files import display_path

__all__ = [
    "HEADING_ROLE",
    "LABEL_ROLE",
    "PATH_ROLE",
    "PROBABILITY_ROLE",
    "QUERY_ROLE",
    "RANK_ROLE",
    "SCORE_ROLE",
    "Hit",
    "PhotoListModel",
    "ResultDelegate",
    "ResultsGridModel",
    "ResultsModel",
    "ThumbnailDelegate",
]

PATH_ROLE = Qt.ItemDataRole.UserRole + 1
SCORE_ROLE = Qt.ItemDataRole.UserRole + 2
#: a hit's calibrated probability of showing the same object or place (None: no curve)
PROBABILITY_ROLE = Qt.ItemDataRole.UserRole + 20
#: a hit's label: "same object or place" or "looks alike"
LABEL_ROLE = Qt.ItemDataRole.UserRole + 21
RANK_ROLE = Qt.ItemDataRole.UserRole + 3
#: text of a folder heading row of :class:`PhotoListModel` (None for a photo)
HEADING_ROLE = Qt.ItemDataRole.UserRole + 4
#: True for the row or tile of the query itself (its ``RANK_ROLE`` is None)
QUERY_ROLE = Qt.ItemDataRole.UserRole + 5

_Index = QModelIndex | QPersistentModelIndex


class ThumbModel(QAbstractListModel):
    """Shared: path list, row lookup and thumbnail repaint on arrival."""

    def __init__(self, thumbs: ThumbnailProvider, parent=None) -> None:
        super().__init__(parent)
        self.thumbs = thumbs
        self._paths: list[str] = []
        self._rows: dict[str, list[int]] = {}
        thumbs.ready.connect(self._on_thumb_ready)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._paths)

    def path(self, row: int) -> str:
        return self._paths[row]

    def paths(self) -> list[str]:
        return list(self._paths)

    def row_of(self, path: str | Path) -> int:
        rows = self._rows.get(str(path))
        return rows[0] if rows else -1

    def _reindex(self) -> None:
        self._rows = {}
        for i, p in enumerate(self._paths):
            self._rows.setdefault(p, []).append(i)

    def _on_thumb_ready(self, path: str) -> None:
        for row in self._rows.get(path, ()):
            idx = self.index(row)
            self.dataChanged.emit(idx, idx, [Qt.ItemDataRole.DecorationRole])


class PhotoListModel(ThumbModel):
    """The photos of the open collection, in the order the person chose.

    Sorted by folder (the path: the folder scan's order; the default), by file name or by
    date taken (:data:`SORT_KEYS`); optionally grouped under folder headings (rows whose
    :data:`HEADING_ROLE` is the heading's text and whose :data:`PATH_ROLE` is None) and
    filtered to a range of days taken (photos without a date are hidden then). The
    order is never the index's row order: a first index extracts an evenly spread sample
    of the folder first, so arrival and id order jump around the folder. Photos that
    arrive while indexing are inserted at their sorted place.

    Dates come from :meth:`set_metadata` (path -> ``PhotoMetadata``, read from the
    catalogue off the GUI thread); nothing here reads a file.
    """

    #: sort keys and their labels
    SORT_KEYS: ClassVar[dict[str, str]] = {
        "folder": "Folder",
        "name": "Name",
        "date": "Date taken",
    }

    def __init__(self, thumbs: ThumbnailProvider, parent=None) -> None:
        super().__init__(thumbs, parent)
        self._all: list[str] = []  # every photo, sorted by path
        self._headings: dict[int, str] = {}  # row -> heading text
        self.metadata: Mapping[str, Any] = {}
        self.sort_key = "folder"
        self.grouped = False
        self.date_range: tuple[str | None, str | None] | None = None  # ISO days
        self.root: Path | None = None  # the open folder: headings relative to it
        #: a camera RAW file beside its camera JPEG (same folder and name) is shown as one
        #: photo: the JPEG, labelled "+ NEF" (formats issue, point 1)
        self.pairs_as_one = True
        self._raw_partner: dict[str, str] = {}  # raw path -> the photo shown for it
        self._raw_label: dict[str, str] = {}  # shown photo -> " + NEF"

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        row = index.row()
        heading = self._headings.get(row)
        if heading is not None:
            if role in (Qt.ItemDataRole.DisplayRole, HEADING_ROLE):
                return heading
            return None
        p = self._paths[row]
        if role == Qt.ItemDataRole.DisplayRole:
            return shown_name(p) + self._raw_label.get(p, "")
        if role == Qt.ItemDataRole.ToolTipRole:
            m = self.metadata.get(p)
            taken = f"\ntaken {m.date_taken.replace('T', ' ')[:16]}" if m and m.date_taken else ""
            pair = self._raw_label.get(p, "")
            pair = f"\nwith its RAW file ({pair.strip(' +')})" if pair else ""
            return f"{shown_name(p)}\n{display_path(Path(p).parent)}{taken}{pair}"
        if role == Qt.ItemDataRole.DecorationRole:
            return self.thumbs.pixmap(p)
        if role == PATH_ROLE:
            return p
        return None

    def flags(self, index: _Index):
        if index.isValid() and index.row() in self._headings:
            return Qt.ItemFlag.ItemIsEnabled  # (a heading cannot be selected)
        return super().flags(index)

    def is_heading(self, row: int) -> bool:
        return row in self._headings

    def headings(self) -> list[str]:
        """The folder headings shown, top to bottom."""
        return [self._headings[r] for r in sorted(self._headings)]

    def paths(self) -> list[str]:
        """The photos shown, top to bottom (headings left out)."""
        return [p for i, p in enumerate(self._paths) if i not in self._headings]

    def all_paths(self) -> list[str]:
        """Every photo of the collection, shown or filtered out, by path."""
        return list(self._all)

    # -- what is shown -------------------------------------------------------------------
    def _plain(self) -> bool:
        """The default order (by path, no headings, no filter, no RAW + JPEG pair shown
        as one): rows follow ``_all``."""
        return (
            self.sort_key == "folder"
            and not self.grouped
            and self.date_range is None
            and not (self.pairs_as_one and self._raw_partner)
        )

    def set_pairs_as_one(self, on: bool) -> None:
        """Show a camera RAW file and its camera JPEG as one photo (or both)."""
        self.pairs_as_one = bool(on)
        self._rebuild()

    def _find_pairs(self) -> None:
        """RAW files with a non-RAW photo of the same name in the same folder."""
        from engine.io.formats import RAW_SUFFIXES

        by_stem: dict[tuple[str, str], list[str]] = {}
        for p in self._all:
            q = Path(p)
            by_stem.setdefault((str(q.parent), q.stem.casefold()), []).append(p)
        self._raw_partner, self._raw_label = {}, {}
        for group in by_stem.values():
            if len(group) < 2:
                continue
            raws = [p for p in group if Path(p).suffix.lower() in RAW_SUFFIXES]
            others = [p for p in group if p not in raws]
            if raws and others:
                for r in raws:
                    self._raw_partner[r] = others[0]
                suffixes = " + ".join(sorted({Path(r).suffix.lstrip(".").upper() for r in raws}))
                self._raw_label[others[0]] = f" + {suffixes}"

    def set_paths(self, paths) -> None:
        self._all = sorted({str(p) for p in paths})
        self._rebuild()

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """What the photos record (path -> ``PhotoMetadata``); re-sorts when it matters."""
        self.metadata = metadata
        if not self._plain():
            self._rebuild()
        elif self._paths:
            self.dataChanged.emit(self.index(0), self.index(len(self._paths) - 1),
                                  [Qt.ItemDataRole.ToolTipRole])  # fmt: skip

    def set_order(
        self,
        sort_key: str | None = None,
        grouped: bool | None = None,
        date_range: tuple[str | None, str | None] | type[Ellipsis] | None = ...,
    ) -> None:
        """Sort by ``sort_key`` (:data:`SORT_KEYS`), group under folder headings, keep
        only photos taken within ``date_range`` (``(first, last)`` ISO days, either None
        for open; None: no filter). Arguments left out keep their setting."""
        if sort_key is not None:
            if sort_key not in self.SORT_KEYS:
                raise ValueError(f"sort_key must be one of {', '.join(self.SORT_KEYS)}")
            self.sort_key = sort_key
        if grouped is not None:
            self.grouped = bool(grouped)
        if date_range is not ...:
            self.date_range = date_range
        self._rebuild()

    def _sort_key(self, p: str):
        if self.sort_key == "name":
            return (Path(p).name.casefold(), p)
        if self.sort_key == "date":
            m = self.metadata.get(p)
            taken = m.date_taken if m is not None else None
            return (taken is None, (taken or "")[:19], p)  # (photos without a date last)
        return (p,)

    def _shown(self, p: str) -> bool:
        if self.pairs_as_one and p in self._raw_partner:
            return False
        if self.date_range is None:
            return True
        m = self.metadata.get(p)
        day = m.date if m is not None else None
        if day is None:
            return False
        first, last = self.date_range
        return (first is None or day >= first) and (last is None or day <= last)

    def _heading(self, folder: str, n: int) -> str:
        shown = display_path(folder)
        if self.root is not None:
            try:
                rel = Path(folder).relative_to(self.root)
                shown = display_path(rel) if str(rel) != "." else display_path(self.root.name)
            except ValueError:
                pass
        return f"{shown}  ·  {n} photo{'s' if n != 1 else ''}"

    def _rebuild(self) -> None:
        self.beginResetModel()
        self._find_pairs()
        if not self.pairs_as_one:
            self._raw_label = {}
        shown = [p for p in self._all if self._shown(p)]
        if self.sort_key != "folder":
            shown.sort(key=self._sort_key)
        self._headings = {}
        if self.grouped:
            groups: dict[str, list[str]] = {}
            for p in shown:
                groups.setdefault(str(Path(p).parent), []).append(p)
            rows: list[str] = []
            for folder in sorted(groups):
                self._headings[len(rows)] = self._heading(folder, len(groups[folder]))
                rows.append("")
                rows.extend(groups[folder])
            shown = rows
        self._paths = shown
        self._reindex()
        self.endResetModel()

    def _reindex(self) -> None:
        self._rows = {}
        for i, p in enumerate(self._paths):
            if i not in self._headings:
                self._rows.setdefault(p, []).append(i)

    def append_paths(self, paths) -> None:
        """Insert photos that are not shown yet, each at its sorted place."""
        new = sorted({str(p) for p in paths} - set(self._all))
        if not new:
            return
        for p in new:
            bisect.insort(self._all, p)
        stems = self._stems()
        if not self._plain() or any(Path(p).stem.casefold() in stems for p in new):
            self._rebuild()
            return
        for p in new:
            row = bisect.bisect_left(self._paths, p)
            self.beginInsertRows(QModelIndex(), row, row)
            self._paths.insert(row, p)
            self._rows[p] = [row]  # (rows after it are renumbered below)
            self.endInsertRows()
        self._reindex()

    def _stems(self) -> set[str]:
        """Names (without suffix) that more than one photo has (a RAW + JPEG pair may
        form when one arrives)."""
        seen: dict[str, int] = {}
        for q in self._all:
            k = Path(q).stem.casefold()
            seen[k] = seen.get(k, 0) + 1
        return {k for k, n in seen.items() if n > 1}

    def remove_path(self, path: str | Path) -> None:
        p = str(path)
        if p in self._all:
            self._all.remove(p)
        if not self._plain() or p in self._raw_label or p in self._raw_partner:
            if p in self._rows:
                self._rebuild()
            return
        row = self.row_of(p)
        if row < 0:
            return
        self.beginRemoveRows(QModelIndex(), row, row)
        del self._paths[row]
        self._reindex()
        self.endRemoveRows()


class ResultsModel(ThumbModel):
    """The side list of the current query's results: a Qt view of a
    :class:`~app.gui.results_state.ShownResults` (its :meth:`rows`: the query's own hit,
    if the search returned it, and the hits the filter keeps, by rank). The model resets
    whenever the shown results change."""

    def __init__(
        self, thumbs: ThumbnailProvider, parent=None, shown: ShownResults | None = None
    ) -> None:
        super().__init__(thumbs, parent)
        self.shown = shown if shown is not None else ShownResults()
        self._rows_shown: list[RankedHit] = []
        self.shown.events.changed.connect(self._on_changed)
        self._on_changed()

    # (what the shown results hold, as the model's attributes)
    @property
    def query(self) -> str | None:
        return self.shown.query

    @property
    def method(self) -> str:
        return self.shown.method

    @property
    def verified_only(self) -> bool:
        return self.shown.filter.verified_only

    @property
    def min_probability(self) -> float:
        return self.shown.filter.min_probability

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        return ranked_data(self._rows_shown[index.row()], role, self.thumbs)

    def set_hits(self, query: str | None, method: str, hits, box=None) -> None:
        self.shown.set_hits(query, method, hits, box)

    def set_verified_only(self, on: bool) -> None:
        """Show only the hits that passed the geometric check (the same object or place)."""
        self.shown.set_filter(verified_only=bool(on))

    def set_min_probability(self, p: float) -> None:
        """Hide the hits less likely than ``p`` (in [0, 1)) to show the same object or
        place."""
        self.shown.set_filter(min_probability=p)

    def hidden_count(self) -> int:
        """Hits left out by the filter."""
        return self.shown.hidden()

    def hits(self) -> list[Hit]:
        return [r.hit for r in self._rows_shown]

    def ranked(self) -> list[RankedHit]:
        """The rows shown, with their ranks (None: the query)."""
        return list(self._rows_shown)

    def score(self, row: int) -> float:
        return self._rows_shown[row].hit.score

    def max_score(self) -> float:
        """Best score of a hit other than the query (the query matches itself best)."""
        scores = [r.hit.score for r in self._rows_shown]
        others = [r.hit.score for r in self._rows_shown if not r.is_query]
        return max(others, default=max(scores, default=0.0))

    def best_other(self) -> str | None:
        """The best-ranked hit shown that is not the query itself."""
        return self.shown.best_other()

    def _on_changed(self, _event=None) -> None:
        self.beginResetModel()
        self._rows_shown = self.shown.rows()
        self._paths = [r.path for r in self._rows_shown]
        self._reindex()
        self.endResetModel()


class ResultsGridModel(ThumbModel):
    """The results in the main grid: the query first (its tile marked "Query"), then the
    hits the filter keeps, by rank (:meth:`ShownResults.others`). Empty while there are
    no results. Resets whenever the shown results change."""

    def __init__(self, thumbs: ThumbnailProvider, shown: ShownResults, parent=None) -> None:
        super().__init__(thumbs, parent)
        self.shown = shown
        self._tiles: list[RankedHit] = []
        shown.events.changed.connect(self._on_changed)
        self._on_changed()

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        return ranked_data(self._tiles[index.row()], role, self.thumbs)

    def tiles(self) -> list[RankedHit]:
        """The tiles shown, top-left to bottom-right (the query's rank is None)."""
        return list(self._tiles)

    def _on_changed(self, _event=None) -> None:
        self.beginResetModel()
        s = self.shown
        if s.query is None:
            self._tiles = []
        else:  # (the query's own hit, when it is one, carries its score; else a bare tile)
            own = next((r for r in s.ranked() if r.is_query), None)
            query = own if own is not None else RankedHit(None, Hit(s.query, math.nan))
            self._tiles = [query, *s.others()]
        self._paths = [r.path for r in self._tiles]
        self._reindex()
        self.endResetModel()


def ranked_data(row: RankedHit, role: int, thumbs: ThumbnailProvider):
    """What a results row (side list or grid tile) holds for ``role``."""
    p, h = row.path, row.hit
    if role == Qt.ItemDataRole.DisplayRole:
        name = QueryModel.display_name(p) if row.is_query else shown_name(p)
        return f"{'Query' if row.is_query else row.rank}. {name}"
    if role == Qt.ItemDataRole.ToolTipRole:
        parent = display_path(Path(p).parent)
        if row.is_query:
            return f"The query: {QueryModel.display_name(p)}\n{parent}"
        prob = h.probability
        what = ("of the kind you taught (a learned score)" if h.label == TAUGHT
                else f"the same object or place ({h.label})")  # fmt: skip
        chance = (f"\n{100 * prob:.0f} % likely {what}"
                  if prob is not None else f"\n{h.label}" if h.label else "")  # fmt: skip
        return f"#{row.rank}  {shown_name(p)}\nscore {h.score:.4f}{chance}\n{parent}"
    if role == Qt.ItemDataRole.DecorationRole:
        return thumbs.pixmap(p)
    if role == PATH_ROLE:
        return p
    if role == SCORE_ROLE:
        return h.score
    if role == PROBABILITY_ROLE:
        return h.probability
    if role == LABEL_ROLE:
        return h.label
    if role == RANK_ROLE:
        return row.rank
    if role == QUERY_ROLE:
        return row.is_query
    return None


# -- painting ------------------------------------------------------------------------------
def card_date(meta) -> str:
    """The date taken as a card shows it (``"2021-06-05 14:03"``), "" when unknown."""
    taken = getattr(meta, "date_taken", None)
    return taken[:16].replace("T", " ") if taken else ""


def item_data(index, role: int):
    """``index.data(role)`` without the PySide6 6.12 / CPython 3.11 refcount bug.

    Reading an invalid QVariant through ``QModelIndex.data`` drops one reference to
    ``None`` per call; a delegate painting thousands of pending thumbnails would
    eventually free ``None`` and abort. Asking the Python model directly avoids the
    QVariant round trip.
    """
    model = index.model()
    return model.data(index, role) if model is not None else None


def pixmap_fit(rect: QRect, pm) -> QRect:
    """Where ``pm`` scaled to fit ``rect`` (aspect kept, centred) lies (``rect`` without a
    pixmap)."""
    if pm is None or pm.isNull():
        return rect
    s = pm.size().scaled(rect.size(), Qt.AspectRatioMode.KeepAspectRatio)
    target = QRect(0, 0, s.width(), s.height())
    target.moveCenter(rect.center())
    return target


def _label_line(fm, label: str | None, folder: str, width: int) -> str:
    """A result row's second line: "✓ same object or place  ·  folder" for a verified
    hit (else the folder), cut to ``width`` px at the folder's start, never in the label
    (the folder's end names it best; the label is the verdict)."""
    if label != "same object or place":  # (verified: said in words)
        return fm.elidedText(folder, Qt.TextElideMode.ElideLeft, width)
    if not folder:
        return fm.elidedText(label, Qt.TextElideMode.ElideRight, width)
    prefix = "✓ same object or place  ·  "
    room = width - fm.horizontalAdvance(prefix)
    if room < fm.horizontalAdvance("…abc"):  # (no room left for the folder)
        return fm.elidedText("✓ same object or place", Qt.TextElideMode.ElideRight, width)
    return prefix + fm.elidedText(folder, Qt.TextElideMode.ElideLeft, room)


def draw_pixmap_fit(painter: QPainter, rect: QRect, pm) -> QRect:
    """Draw ``pm`` scaled to fit ``rect`` (aspect kept, centred); return the drawn rect."""
    target = pixmap_fit(rect, pm)
    if target is not rect:
        painter.drawPixmap(target, pm)
    return target


def paint_cell_background(painter: QPainter, option) -> tuple[QRect, bool]:
    """Prepare ``painter`` for a photo tile and paint its selection or hover highlight;
    returns the tile's rectangle inside the cell and whether it is selected."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    cell = option.rect.adjusted(3, 3, -3, -3)
    selected = bool(option.state & QStyle.StateFlag.State_Selected)
    hover = bool(option.state & QStyle.StateFlag.State_MouseOver)
    if selected or hover:
        col = QColor(option.palette.color(QPalette.ColorRole.Highlight))
        col.setAlpha(110 if selected else 40)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(col)
        painter.drawRoundedRect(cell, 8, 8)
    return cell, selected


def draw_placeholder(painter: QPainter, rect: QRect, failed: bool, palette: QPalette) -> None:
    painter.save()
    r = rect.adjusted(
        rect.width() // 8, rect.height() // 8, -rect.width() // 8, -rect.height() // 8
    )
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(palette.color(QPalette.ColorRole.AlternateBase))
    painter.drawRoundedRect(r, 6, 6)
    if failed:
        painter.setPen(QColor(200, 80, 80))
        painter.drawText(r, Qt.AlignmentFlag.AlignCenter, "unreadable")
    painter.restore()


class ThumbnailDelegate(QStyledItemDelegate):
    """A square thumbnail cell with the file name under it."""

    def __init__(self, thumbs: ThumbnailProvider, size: int = 160, parent=None) -> None:
        super().__init__(parent)
        self.thumbs = thumbs
        self.size = size
        self.query_path: str | None = None

    #: height of a folder heading row
    HEADING_HEIGHT = 34

    def sizeHint(self, option, index) -> QSize:
        if index is not None and item_data(index, HEADING_ROLE) is not None:
            # as wide as the view: a heading starts a line of its own in the icon flow
            view = self.parent()
            width = view.viewport().width() - 2 * view.spacing() - 2 if view else 400
            return QSize(max(width, self.size + 14), self.HEADING_HEIGHT)
        return QSize(self.size + 14, self.size + 32)

    def _paint_heading(self, painter: QPainter, option: QStyleOptionViewItem, text: str) -> None:
        pal = option.palette
        r = option.rect.adjusted(6, 4, -6, -2)
        f = QFont(option.font)
        f.setBold(True)
        painter.setFont(f)
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        painter.drawText(r, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
        line = QColor(pal.color(QPalette.ColorRole.PlaceholderText))
        line.setAlpha(90)
        painter.setPen(QPen(line, 1))
        painter.drawLine(r.left(), r.bottom(), r.right(), r.bottom())

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        painter.save()
        heading = item_data(index, HEADING_ROLE)
        if heading is not None:
            self._paint_heading(painter, option, heading)
            painter.restore()
            return
        pal = option.palette
        cell, selected = paint_cell_background(painter, option)
        img_rect = QRect(cell.left() + 4, cell.top() + 4, cell.width() - 8, self.size)
        path = item_data(index, PATH_ROLE)
        pm = item_data(index, Qt.ItemDataRole.DecorationRole)
        if pm is None:
            draw_placeholder(painter, img_rect, self.thumbs.is_failed(path), pal)
        else:
            drawn = draw_pixmap_fit(painter, img_rect, pm)
            if path is not None and path == self.query_path:
                painter.setPen(QPen(QColor(255, 170, 0), 3))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRect(drawn.adjusted(-1, -1, 1, 1))
        text_rect = QRect(cell.left() + 4, img_rect.bottom() + 4, cell.width() - 8, 18)
        f = QFont(option.font)
        f.setPointSizeF(max(7.0, f.pointSizeF() * 0.9))
        painter.setFont(f)
        painter.setPen(
            pal.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        )
        name = painter.fontMetrics().elidedText(
            item_data(index, Qt.ItemDataRole.DisplayRole) or "",
            Qt.TextElideMode.ElideMiddle,
            text_rect.width(),
        )
        painter.drawText(
            text_rect, Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, name
        )
        painter.restore()


class ResultDelegate(QStyledItemDelegate):
    """One ranked result: rank badge, thumbnail, name, folder and a score bar."""

    ROW = 84

    def __init__(self, thumbs: ThumbnailProvider, parent=None) -> None:
        super().__init__(parent)
        self.thumbs = thumbs
        self.max_score = 1.0
        self.query_path: str | None = None
        self.root: Path | None = None  # collection folder: show sub-folders relative to it
        #: path -> PhotoMetadata (the session's): the date taken shown under the name
        self.metadata: Mapping[str, Any] = {}

    def sizeHint(self, option, index) -> QSize:
        return QSize(260, self.ROW)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        pal = option.palette
        r = option.rect.adjusted(4, 3, -4, -3)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hover = bool(option.state & QStyle.StateFlag.State_MouseOver)
        bg = QColor(pal.color(QPalette.ColorRole.Highlight))
        bg.setAlpha(100 if selected else (35 if hover else 0))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(bg if (selected or hover) else pal.color(QPalette.ColorRole.Base))
        painter.drawRoundedRect(r, 8, 8)
        thumb = QRect(r.left() + 30, r.top() + 4, r.height() - 8, r.height() - 8)
        path = item_data(index, PATH_ROLE)
        pm = item_data(index, Qt.ItemDataRole.DecorationRole)
        if pm is None:
            draw_placeholder(painter, thumb, self.thumbs.is_failed(path), pal)
        else:
            clip = QPainterPath()
            clip.addRoundedRect(QRectF(thumb), 5, 5)
            painter.save()
            painter.setClipPath(clip)
            s = pm.size().scaled(thumb.size(), Qt.AspectRatioMode.KeepAspectRatioByExpanding)
            src = QRect(0, 0, s.width(), s.height())
            src.moveCenter(thumb.center())
            painter.drawPixmap(src, pm)
            painter.restore()
        rank = item_data(index, RANK_ROLE)
        f = QFont(option.font)
        f.setBold(True)
        painter.setFont(f)
        painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        painter.drawText(  # (the query is not a result: "Q", results from 1)
            QRect(r.left(), r.top(), 28, r.height()), Qt.AlignmentFlag.AlignCenter,
            "Q" if rank is None else str(rank),
        )  # fmt: skip
        x = thumb.right() + 10
        w = r.right() - x - 8
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        name = shown_name(path)
        is_query = self.query_path is not None and Path(path) == Path(self.query_path)
        if is_query:
            name += "  (query)"
        painter.drawText(
            QRect(x, r.top() + 8, w, 20),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            painter.fontMetrics().elidedText(name, Qt.TextElideMode.ElideMiddle, w),
        )
        f.setBold(False)
        f.setPointSizeF(max(7.0, f.pointSizeF() * 0.88))
        painter.setFont(f)
        painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        folder = str(Path(path).parent)
        if self.root is not None:
            try:
                folder = str(Path(path).parent.relative_to(self.root))
                folder = "" if folder == "." else folder
            except ValueError:
                pass
        taken = card_date(self.metadata.get(path))
        if taken:
            folder = f"{taken}  ·  {folder}" if folder else taken
        label = item_data(index, LABEL_ROLE)
        painter.drawText(
            QRect(x, r.top() + 28, w, 18),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            _label_line(painter.fontMetrics(), label, folder, w),
        )
        score = float(item_data(index, SCORE_ROLE) or 0.0)
        prob = item_data(index, PROBABILITY_ROLE)
        if prob is not None:  # the bar is the calibrated probability, the same everywhere
            frac = max(0.0, min(1.0, float(prob)))
        else:  # (a method without a calibration curve: relative to the best other hit)
            frac = 0.0 if self.max_score <= 0 else max(0.0, min(1.0, score / self.max_score))
        bar = QRect(x, r.bottom() - 20, max(10, w - 58), 8)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(pal.color(QPalette.ColorRole.AlternateBase))
        painter.drawRoundedRect(bar, 4, 4)
        fill = QRect(bar.left(), bar.top(), int(bar.width() * frac), bar.height())
        painter.setBrush(_strength_colour(frac))
        painter.drawRoundedRect(fill, 4, 4)
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        painter.drawText(
            QRect(bar.right() + 6, bar.top() - 6, 54, 20),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            f"{100 * float(prob):.0f} %" if prob is not None else f"{score:.3f}",
        )
        painter.restore()


_STOPS = [  # a perceptual ramp (viridis-like): weak -> strong
    (0.00, (68, 1, 84)),
    (0.25, (59, 82, 139)),
    (0.50, (33, 145, 140)),
    (0.75, (94, 201, 98)),
    (1.00, (253, 231, 37)),
]


def _strength_colour(t: float, alpha: int = 255) -> QColor:
    """Colour of a match strength ``t`` in [0, 1] on a viridis-like ramp."""
    t = max(0.0, min(1.0, float(t)))
    for (t0, c0), (t1, c1) in itertools.pairwise(_STOPS):
        if t <= t1:
            u = (t - t0) / (t1 - t0)
            rgb = [round(a + u * (b - a)) for a, b in zip(c0, c1, strict=True)]
            return QColor(*rgb, alpha)
    return QColor(*_STOPS[-1][1], alpha)


strength_colour = _strength_colour
