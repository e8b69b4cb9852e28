"""Text that keeps readable when it is longer than its place: cut with "…" to the width
it has (a status line, the rows of a list), whole in a tooltip."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyledItemDelegate
from superqt import QElidingLabel

__all__ = ["ElidingItemDelegate", "StatusLabel", "elide_rows"]


class StatusLabel(QElidingLabel):
    """The status bar's line: a message wider than the bar ends in "…" instead of being
    cut off at the window's edge (or widening the window), and its tooltip holds the whole
    message while it is cut. ``text()`` is always the whole message."""

    def __init__(self, text: str = "", parent=None) -> None:
        super().__init__(parent)
        self.setElideMode(Qt.TextElideMode.ElideRight)
        self.setText(text)

    def is_elided(self) -> bool:
        """Whether the message shown is shorter than the message."""
        return super(QElidingLabel, self).text() != self.text()

    def setText(self, txt: str) -> None:
        super().setText(txt)
        self._tip()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._tip()

    def _tip(self) -> None:
        self.setToolTip(self.text() if self.is_elided() else "")


class ElidingItemDelegate(QStyledItemDelegate):
    """Rows of a list no wider than its viewport: a line that does not fit ends in "…"
    (the view's text elide mode) instead of widening the row and scrolling the list
    sideways."""

    def sizeHint(self, option, index) -> QSize:
        hint = super().sizeHint(option, index)
        view = self.parent()
        if isinstance(view, QAbstractItemView):
            room = view.viewport().width()
            if isinstance(view, QListView):  # (rows stand this far in from each side)
                room -= 2 * view.spacing()
            hint.setWidth(min(hint.width(), max(room, 1)))
        return hint


def elide_rows(view: QListView) -> None:
    """Make ``view``'s rows fit its width (:class:`ElidingItemDelegate`), eliding at the
    right, laid out again when the view is resized; no sideways scroll bar."""
    view.setItemDelegate(ElidingItemDelegate(view))
    view.setTextElideMode(Qt.TextElideMode.ElideRight)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.setResizeMode(QListView.ResizeMode.Adjust)
