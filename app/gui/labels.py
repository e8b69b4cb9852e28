"""Labels that keep long text readable: cut with "…" to their width, whole in a tooltip."""

from __future__ import annotations

from PySide6.QtCore import Qt
from superqt import QElidingLabel

__all__ = ["StatusLabel"]


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
