"""The photo grid: a virtualised thumbnail grid in which a click selects a photo and a
double-click, Enter or the context menu searches with it (Space opens it large)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QFrame, QListView

from app.gui.models import PATH_ROLE, item_data

__all__ = ["PhotoGridView"]


class PhotoGridView(QListView):
    """Virtualised thumbnail grid: a click selects a photo (the info panel shows it); a
    double-click or Enter makes it the query, Space opens it."""

    # (paths as objects: a str signal drops the undecodable bytes of a file name)
    query_requested = Signal(object)
    open_requested = Signal(object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setMovement(QListView.Movement.Static)
        self.setUniformItemSizes(True)
        self.setLayoutMode(QListView.LayoutMode.Batched)
        self.setBatchSize(400)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setMouseTracking(True)
        self.setSpacing(2)
        self.setWordWrap(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.doubleClicked.connect(self._emit_query)  # (a click only selects)

    def set_cell_size(self, size: QSize) -> None:
        """Lay photos out in cells of at least ``size`` (not while folder headings are
        shown: a heading is as wide as the grid)."""
        self._cell = QSize(size)
        self.set_headings(getattr(self, "_headings", False))

    def set_headings(self, on: bool) -> None:
        self._headings = bool(on)
        self.setUniformItemSizes(not on)
        self.setGridSize(QSize() if on else self._fitted_cell())
        self.doItemsLayout()

    def _fitted_cell(self) -> QSize:
        """The cell: ``set_cell_size``'s, widened so that whole columns fill the width
        (room for the scroll bar kept), instead of leaving a strip at the right edge."""
        cell = getattr(self, "_cell", QSize())
        if not cell.isValid() or cell.width() <= 0:
            return cell
        width = self.width() - 2 * self.frameWidth() - self.verticalScrollBar().sizeHint().width()
        cols = max(1, width // cell.width())
        return QSize(max(cell.width(), width // cols), cell.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not getattr(self, "_headings", False):
            fitted = self._fitted_cell()
            if fitted != self.gridSize():
                self.setGridSize(fitted)

    def _emit_query(self, index) -> None:
        if index.isValid() and item_data(index, PATH_ROLE):
            self.query_requested.emit(item_data(index, PATH_ROLE))

    def keyPressEvent(self, event) -> None:
        idx = self.currentIndex()
        path = item_data(idx, PATH_ROLE) if idx.isValid() else None
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and path:
            self.query_requested.emit(path)
            return
        if event.key() == Qt.Key.Key_Space and path:
            self.open_requested.emit(path)
            return
        super().keyPressEvent(event)
