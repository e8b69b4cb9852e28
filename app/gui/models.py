"""Qt item models (photos, results) and the delegates that paint them."""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

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

from app.gui.session import Hit
from app.gui.thumbnails import ThumbnailProvider
from engine.index.files import display_path

__all__ = [
    "PATH_ROLE",
    "SCORE_ROLE",
    "Hit",
    "PhotoListModel",
    "ResultDelegate",
    "ResultsModel",
    "ThumbnailDelegate",
]

PATH_ROLE = Qt.ItemDataRole.UserRole + 1
SCORE_ROLE = Qt.ItemDataRole.UserRole + 2
RANK_ROLE = Qt.ItemDataRole.UserRole + 3

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
    """The photos of the open collection, sorted by path (the folder scan's order).

    Not the index's row order: a first index extracts an evenly spread sample of the
    folder first (to fit its models early), so arrival and id order jump around the
    folder. Photos that arrive while indexing are inserted at their sorted place.
    """

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        p = self._paths[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return shown_name(p)
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{shown_name(p)}\n{display_path(Path(p).parent)}"
        if role == Qt.ItemDataRole.DecorationRole:
            return self.thumbs.pixmap(p)
        if role == PATH_ROLE:
            return p
        return None

    def set_paths(self, paths) -> None:
        self.beginResetModel()
        self._paths = sorted({str(p) for p in paths})
        self._reindex()
        self.endResetModel()

    def append_paths(self, paths) -> None:
        """Insert photos that are not shown yet, each at its sorted place."""
        new = sorted({str(p) for p in paths} - self._rows.keys())
        if not new:
            return
        for p in new:
            row = bisect.bisect_left(self._paths, p)
            self.beginInsertRows(QModelIndex(), row, row)
            self._paths.insert(row, p)
            self._rows[p] = [row]  # (rows after it are renumbered below)
            self.endInsertRows()
        self._reindex()

    def remove_path(self, path: str | Path) -> None:
        row = self.row_of(path)
        if row < 0:
            return
        self.beginRemoveRows(QModelIndex(), row, row)
        del self._paths[row]
        self._reindex()
        self.endRemoveRows()


class ResultsModel(ThumbModel):
    """Ranked hits of the current query."""

    def __init__(self, thumbs: ThumbnailProvider, parent=None) -> None:
        super().__init__(thumbs, parent)
        self._scores: list[float] = []
        self.query: str | None = None
        self.method: str = ""

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        r = index.row()
        p = self._paths[r]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{r + 1}. {shown_name(p)}  {self._scores[r]:.3f}"
        if role == Qt.ItemDataRole.ToolTipRole:
            parent = display_path(Path(p).parent)
            return f"#{r + 1}  {shown_name(p)}\nscore {self._scores[r]:.4f}\n{parent}"
        if role == Qt.ItemDataRole.DecorationRole:
            return self.thumbs.pixmap(p)
        if role == PATH_ROLE:
            return p
        if role == SCORE_ROLE:
            return self._scores[r]
        if role == RANK_ROLE:
            return r + 1
        return None

    def set_hits(self, query: str | None, method: str, hits) -> None:
        self.beginResetModel()
        self.query = None if query is None else str(query)
        self.method = method
        self._paths = [str(h.path) for h in hits]
        self._scores = [float(h.score) for h in hits]
        self._reindex()
        self.endResetModel()

    def hits(self) -> list[Hit]:
        return [Hit(p, s) for p, s in zip(self._paths, self._scores, strict=True)]

    def score(self, row: int) -> float:
        return self._scores[row]

    def max_score(self) -> float:
        """Best score of a hit other than the query (the query matches itself best)."""
        q = None if self.query is None else Path(self.query)
        others = [s for p, s in zip(self._paths, self._scores, strict=True) if Path(p) != q]
        return max(others, default=max(self._scores, default=0.0))

    def best_other(self) -> str | None:
        """The best-ranked hit that is not the query itself."""
        q = None if self.query is None else Path(self.query).resolve()
        for p in self._paths:
            if q is None or Path(p).resolve() != q:
                return p
        return None


# -- painting ------------------------------------------------------------------------------
def shown_name(path) -> str:
    """A photo's file name for showing: bytes that are not UTF-8 (old archives, Windows
    zips) become U+FFFD instead of vanishing in Qt (the path itself stays exact)."""
    return display_path(Path(path).name)


def item_data(index, role: int):
    """``index.data(role)`` without the PySide6 6.12 / CPython 3.11 refcount bug.

    Reading an invalid QVariant through ``QModelIndex.data`` drops one reference to
    ``None`` per call; a delegate painting thousands of pending thumbnails would
    eventually free ``None`` and abort. Asking the Python model directly avoids the
    QVariant round trip.
    """
    model = index.model()
    return model.data(index, role) if model is not None else None


def _draw_pixmap_fit(painter: QPainter, rect: QRect, pm) -> QRect:
    """Draw ``pm`` scaled to fit ``rect`` (aspect kept, centred); return the drawn rect."""
    if pm is None or pm.isNull():
        return rect
    s = pm.size().scaled(rect.size(), Qt.AspectRatioMode.KeepAspectRatio)
    target = QRect(0, 0, s.width(), s.height())
    target.moveCenter(rect.center())
    painter.drawPixmap(target, pm)
    return target


def _placeholder(painter: QPainter, rect: QRect, failed: bool, palette: QPalette) -> None:
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

    def sizeHint(self, option, index) -> QSize:
        return QSize(self.size + 14, self.size + 32)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        pal = option.palette
        cell = option.rect.adjusted(3, 3, -3, -3)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hover = bool(option.state & QStyle.StateFlag.State_MouseOver)
        if selected or hover:
            col = QColor(pal.color(QPalette.ColorRole.Highlight))
            col.setAlpha(110 if selected else 40)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(col)
            painter.drawRoundedRect(cell, 8, 8)
        img_rect = QRect(cell.left() + 4, cell.top() + 4, cell.width() - 8, self.size)
        path = item_data(index, PATH_ROLE)
        pm = item_data(index, Qt.ItemDataRole.DecorationRole)
        if pm is None:
            _placeholder(painter, img_rect, self.thumbs.is_failed(path), pal)
        else:
            drawn = _draw_pixmap_fit(painter, img_rect, pm)
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
            _placeholder(painter, thumb, self.thumbs.is_failed(path), pal)
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
        painter.drawText(
            QRect(r.left(), r.top(), 28, r.height()), Qt.AlignmentFlag.AlignCenter, str(rank)
        )
        x = thumb.right() + 10
        w = r.right() - x - 8
        painter.setPen(pal.color(QPalette.ColorRole.Text))
        name = Path(path).name
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
        painter.drawText(
            QRect(x, r.top() + 28, w, 18),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            painter.fontMetrics().elidedText(folder, Qt.TextElideMode.ElideLeft, w),
        )
        score = float(item_data(index, SCORE_ROLE) or 0.0)
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
            f"{score:.3f}",
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
