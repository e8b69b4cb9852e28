"""Relevance feedback in the results panel: thumbs up / down on each result.

A mark says "this result is (not) similar to the query" (:class:`engine.workflows.marks.Mark`);
marks are stored in the index (:func:`engine.feedback.add_marks`) and *Learn from my
marks* fits an OASIS similarity on them (:func:`engine.feedback.learn`, OASIS of
Chechik et al., triplets from the marks) that the ``learned`` search method uses.

:class:`MarkBook` (from the Qt-free :mod:`app.gui.session`) holds the marks the panel
paints;
:class:`MarkingResultDelegate` paints the two buttons on every result row and turns a
click into :attr:`MarkingResultDelegate.mark_clicked`.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QRect, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPalette
from PySide6.QtWidgets import QStyleOptionViewItem, QToolTip

from app.gui.models import PATH_ROLE, ResultDelegate, item_data
from app.gui.session import MarkBook, mark_key

__all__ = ["MarkBook", "MarkingResultDelegate", "save_mark"]

UP, DOWN = "✓", "✗"


def save_mark(coll, query: str, result: str, relevant: bool | None) -> int:
    """Worker side: store (or with ``None`` forget) one mark in the index; returns the
    number of marks stored."""
    from engine.workflows.feedback import Mark, add_marks, clear_marks, load_marks

    if relevant is not None:
        return add_marks(coll, [Mark(str(query), str(result), bool(relevant))])
    q, r = mark_key(query), mark_key(result)
    keep = [m for m in load_marks(coll) if (m.query, m.result) != (q, r)]
    clear_marks(coll)
    return add_marks(coll, keep) if keep else 0


class MarkingResultDelegate(ResultDelegate):
    """A :class:`ResultDelegate` row with thumbs up / down buttons on its right."""

    BTN_W = 44
    mark_clicked = Signal(str, bool)  # result path, relevant

    def __init__(self, thumbs, marks: MarkBook, parent=None) -> None:
        super().__init__(thumbs, parent)
        self.marks = marks

    def _markable(self, path) -> bool:
        """Results other than the query itself can be marked."""
        return (
            bool(path)
            and self.query_path is not None
            and mark_key(path) != mark_key(self.query_path)
        )

    def button_rects(self, rect: QRect) -> tuple[QRect, QRect]:
        r = rect.adjusted(4, 3, -4, -3)
        x = r.right() - self.BTN_W + 4
        h = (r.height() - 14) // 2
        up = QRect(x, r.top() + 5, self.BTN_W - 8, h)
        down = QRect(x, up.bottom() + 5, self.BTN_W - 8, h)
        return up, down

    def paint(self, painter: QPainter, option, index) -> None:
        opt = QStyleOptionViewItem(option)
        opt.rect = option.rect.adjusted(0, 0, -self.BTN_W, 0)
        painter.save()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(option.palette.color(QPalette.ColorRole.Base))
        painter.drawRect(option.rect)
        painter.restore()
        super().paint(painter, opt, index)
        path = item_data(index, PATH_ROLE)
        if not self._markable(path):
            return
        mark = self.marks.get(self.query_path, path)
        up, down = self.button_rects(option.rect)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        f = QFont(option.font)
        f.setBold(True)
        f.setPointSizeF(f.pointSizeF() * 1.15)
        painter.setFont(f)
        for rect, value, glyph, on in (
            (up, True, UP, QColor(52, 140, 84)),
            (down, False, DOWN, QColor(170, 62, 62)),
        ):
            active = mark is value
            painter.setPen(on.lighter(130) if active else QColor(78, 81, 89))
            painter.setBrush(on if active else QColor(44, 46, 51))
            painter.drawRoundedRect(rect, 5, 5)
            painter.setPen(
                QColor(255, 255, 255) if active else option.palette.color(
                    QPalette.ColorRole.PlaceholderText
                )
            )  # fmt: skip
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, glyph)
        painter.restore()

    def editorEvent(self, event, model, option, index) -> bool:
        if not self._markable(item_data(index, PATH_ROLE)):
            return super().editorEvent(event, model, option, index)
        if event.type() == QEvent.Type.MouseButtonRelease:
            up, down = self.button_rects(option.rect)
            pos = event.position().toPoint()
            for rect, value in ((up, True), (down, False)):
                if rect.contains(pos):
                    self.mark_clicked.emit(item_data(index, PATH_ROLE), value)
                    return True
        if event.type() in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonDblClick):
            up, down = self.button_rects(option.rect)
            pos = event.position().toPoint()
            if up.contains(pos) or down.contains(pos):
                return True  # a click on a button neither selects nor opens the row
        return super().editorEvent(event, model, option, index)

    def helpEvent(self, event, view, option, index) -> bool:
        if event is not None and self._markable(item_data(index, PATH_ROLE)):
            up, down = self.button_rects(option.rect)
            name = Path(item_data(index, PATH_ROLE) or "").name
            tips = (
                (up, f"Thumbs up: {name} is similar to the query (click again to undo)"),
                (down, f"Thumbs down: {name} is not similar (click again to undo)"),
            )
            for rect, tip in tips:
                if rect.contains(event.pos()):
                    QToolTip.showText(event.globalPos(), tip, view)
                    return True
        return super().helpEvent(event, view, option, index)
