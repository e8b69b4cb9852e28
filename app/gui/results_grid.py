"""The results in the main grid (digiKam's "search results" album).

A person runs a search and wants to see the results large: *Show in grid* (the results
panel's button, View ▸ Results in the Grid, Ctrl+G) makes the library's grid show the
query first (its tile marked "Query") and the hits in rank order, each tile with its
rank, its calibrated percentage and its label in words, under a heading that says what is
shown ("20 results for coffee.jpg · Best match", "12 of 20 shown (at least 50 %)") with
*Back to all photos* (Esc).

The grid works as the photo grid does: a click selects (the info panel shows the photo),
a double-click or Enter searches with the photo (its results replace these, the grid
stays on results), Space opens it large, and Y / + or N / - mark it ✓ similar or ✗ not
similar, as in the side list. The state lives in the Qt-free
:class:`app.gui.results_state.ShownResults`; this module only paints it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStyleOptionViewItem,
    QVBoxLayout,
)

from app.gui.grid import PhotoGridView
from app.gui.models import (
    LABEL_ROLE,
    PATH_ROLE,
    PROBABILITY_ROLE,
    QUERY_ROLE,
    RANK_ROLE,
    ThumbnailDelegate,
    draw_pixmap_fit,
    draw_placeholder,
    item_data,
    paint_cell_background,
    shown_name,
)
from app.gui.results import ResultsPanel
from app.gui.results_state import SAME_OBJECT
from app.gui.session import MarkBook, QueryModel

__all__ = ["ResultTileDelegate", "ResultsGridHeader", "ResultsGridView", "badge_text"]

#: Badge colours: the query, a hit that passed the geometric check, one that only looks alike
QUERY_COLOUR = QColor(242, 169, 0)
SAME_COLOUR = QColor(46, 150, 86)
ALIKE_COLOUR = QColor(82, 90, 106)
MARK_COLOURS = {True: QColor(52, 140, 84), False: QColor(170, 62, 62)}


def badge_text(probability: float | None, label: str) -> str:
    """What a result tile's badge says: ``"92 % · same object or place"``; the label
    alone for a method without a calibrated probability."""
    if probability is None:
        return label or "no score"
    pct = f"{100 * float(probability):.0f} %"
    return f"{pct} · {label}" if label else pct


class ResultTileDelegate(ThumbnailDelegate):
    """A results-grid tile: the thumbnail with its rank ("#3", or "Query") in the corner
    and the person's ✓ / ✗ mark, the file name, and a coloured badge with the calibrated
    percentage and the label."""

    BADGE_H = 20

    def __init__(self, thumbs, marks: MarkBook | None = None, size: int = 160,
                 parent=None) -> None:  # fmt: skip
        super().__init__(thumbs, size, parent)
        self.marks = marks if marks is not None else MarkBook()

    def sizeHint(self, option, index) -> QSize:
        return QSize(self.size + 14, self.size + 32 + self.BADGE_H + 4)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index) -> None:
        painter.save()
        pal = option.palette
        cell, selected = paint_cell_background(painter, option)
        is_query = bool(item_data(index, QUERY_ROLE))
        path = item_data(index, PATH_ROLE)
        img_rect = QRect(cell.left() + 4, cell.top() + 4, cell.width() - 8, self.size)
        pm = item_data(index, Qt.ItemDataRole.DecorationRole)
        drawn = img_rect
        if pm is None:
            draw_placeholder(painter, img_rect, self.thumbs.is_failed(path), pal)
        else:
            drawn = draw_pixmap_fit(painter, img_rect, pm)
        if is_query:  # (the query's frame, as on the photo grid)
            painter.setPen(QPen(QUERY_COLOUR, 3))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(drawn.adjusted(-1, -1, 1, 1))
        small = QFont(option.font)
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.85))
        bold = QFont(small)
        bold.setBold(True)
        # the rank (or "Query") in the photo's top-left corner
        rank = item_data(index, RANK_ROLE)
        self._chip(painter, drawn.topLeft(), "Query" if is_query else f"#{rank}", bold,
                   QUERY_COLOUR if is_query else QColor(20, 21, 24, 210),
                   QColor(30, 24, 8) if is_query else QColor(240, 240, 240))  # fmt: skip
        # the person's mark in the top-right corner
        if not is_query and self.query_path is not None:
            mark = self.marks.get(self.query_path, path)
            if mark is not None:
                glyph = "✓" if mark else "✗"
                w = painter.fontMetrics().horizontalAdvance(glyph) + 12
                at = drawn.topRight()
                at.setX(at.x() - w - 3)
                self._chip(painter, at, glyph, bold, MARK_COLOURS[mark], QColor(255, 255, 255))
        # the file name
        name_rect = QRect(cell.left() + 4, img_rect.bottom() + 4, cell.width() - 8, 18)
        painter.setFont(small)
        painter.setPen(
            pal.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        )
        name = painter.fontMetrics().elidedText(
            QueryModel.display_name(path) if is_query else shown_name(path or ""),
            Qt.TextElideMode.ElideMiddle,
            name_rect.width(),
        )
        painter.drawText(name_rect, Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
                         name)  # fmt: skip
        # the badge: calibrated percentage and label
        if is_query:
            text, colour = "the photo searched with", None
        else:
            label = item_data(index, LABEL_ROLE) or ""
            text = badge_text(item_data(index, PROBABILITY_ROLE), label)
            colour = SAME_COLOUR if label == SAME_OBJECT else ALIKE_COLOUR
        badge_area = QRect(cell.left() + 4, name_rect.bottom() + 2, cell.width() - 8,
                           self.BADGE_H)  # fmt: skip
        painter.setFont(small)
        fm = painter.fontMetrics()
        text = fm.elidedText(text, Qt.TextElideMode.ElideRight, badge_area.width() - 12)
        if colour is None:
            painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(badge_area, Qt.AlignmentFlag.AlignCenter, text)
        else:
            w = min(badge_area.width(), fm.horizontalAdvance(text) + 12)
            badge = QRect(0, 0, w, self.BADGE_H - 2)
            badge.moveCenter(badge_area.center())
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            painter.drawRoundedRect(badge, (self.BADGE_H - 2) / 2, (self.BADGE_H - 2) / 2)
            painter.setPen(QColor(255, 255, 255))
            painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    @staticmethod
    def _chip(painter: QPainter, at, text: str, font: QFont, bg: QColor, fg: QColor) -> None:
        """A small rounded label with its top-left corner 3 px inside ``at``."""
        painter.setFont(font)
        fm = painter.fontMetrics()
        r = QRect(at.x() + 3, at.y() + 3, fm.horizontalAdvance(text) + 10, fm.height() + 4)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(bg)
        painter.drawRoundedRect(r, 4, 4)
        painter.setPen(fg)
        painter.drawText(r, Qt.AlignmentFlag.AlignCenter, text)


class ResultsGridView(PhotoGridView):
    """The photo grid showing results: as :class:`PhotoGridView`, and Y / + or N / -
    mark the selected result ✓ similar or ✗ not similar (then the next one is
    selected), as in the side list. The query's tile cannot be marked."""

    mark_requested = Signal(str, bool)  # result path, relevant

    def event(self, event) -> bool:
        # (a window shortcut must not take the mark keys, e.g. "-" of "Ctrl+-")
        if event.type() == QEvent.Type.ShortcutOverride and self._mark_of(event) is not None:
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event) -> None:
        relevant = self._mark_of(event)
        if relevant is not None:
            self.mark_selected(relevant)
            event.accept()
            return
        super().keyPressEvent(event)

    def mark_selected(self, relevant: bool) -> None:
        """Mark the selected result ✓ (``relevant``) or ✗, then select the next one."""
        idx = self.currentIndex()
        if not idx.isValid() or item_data(idx, QUERY_ROLE):
            return
        path = item_data(idx, PATH_ROLE)
        if not path:
            return
        self.mark_requested.emit(str(path), bool(relevant))
        nxt = self.model().index(idx.row() + 1, 0)
        if nxt.isValid():
            self.setCurrentIndex(nxt)

    @staticmethod
    def _mark_of(event) -> bool | None:
        mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        mods &= ~Qt.KeyboardModifier.ShiftModifier
        if mods:
            return None
        return ResultsPanel.MARK_KEYS.get(int(event.key()))


class ResultsGridHeader(QFrame):
    """The line above the results grid: what it shows, how many are shown, the search
    running, *Find similar* and *Back to all photos* (Esc)."""

    back_requested = Signal()
    search_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("resultsHeader")
        self.title = QLabel("")
        f = self.title.font()
        f.setBold(True)
        f.setPointSizeF(f.pointSizeF() * 1.1)
        self.title.setFont(f)
        self.count = QLabel("")
        self.count.setObjectName("hint")
        self.status = QLabel("")
        self.status.setObjectName("hint")
        self.find_btn = QPushButton("Find similar")
        self.find_btn.setToolTip(
            "Search with the selected photo (double-click or Enter does the same)"
        )
        self.find_btn.clicked.connect(self.search_requested)
        self.back_btn = QPushButton("Back to all photos")
        self.back_btn.setToolTip("Show all photos again, as they were (Esc)")
        self.back_btn.clicked.connect(self.back_requested)
        text = QVBoxLayout()
        text.setSpacing(0)
        text.addWidget(self.title)
        line = QHBoxLayout()
        line.addWidget(self.count)
        line.addWidget(self.status)
        line.addStretch(1)
        text.addLayout(line)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 8, 6)
        lay.addLayout(text, 1)
        lay.addWidget(self.find_btn)
        lay.addWidget(self.back_btn)

    def set_text(self, title: str, count: str, status: str = "") -> None:
        self.title.setText(title)
        self.title.setToolTip(title)
        self.count.setText(count)
        self.status.setText(status)
        self.status.setVisible(bool(status))
