"""Search by region in the window: the query photo a person drags a box on, and the
search that runs in a worker.

:class:`QueryPhoto` shows the current query in the results panel. Once its results are
in, a press-drag-release on it draws a box; the widget reports it as fractions of the
photo (:attr:`QueryPhoto.region_drawn`) and the window turns them into pixels of the
photo at its full size (:meth:`app.gui.session.QueryModel.box_from_fractions`) and
searches that region (``Collection.query(..., box=)``,
:mod:`engine.index.region`). The box stays drawn -- the rest of the photo dimmed --
while the results are for it; Esc on the photo (or anywhere, when nothing is being
indexed) or the "Whole photo" button searches the whole photo again
(:attr:`QueryPhoto.region_cleared`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget

__all__ = ["QueryPhoto", "SearchOutcome", "search"]

#: Outline of the box (the results' bar colour) and the dimming of the rest.
BOX_COLOUR = QColor(245, 197, 24)
DIM = QColor(0, 0, 0, 140)


@dataclass(frozen=True)
class SearchOutcome:
    """What :func:`search` hands back to the GUI thread.

    Attributes
    ----------
    hits : list of engine.collection.Hit
    size : (width, height) or None
        The query photo's size as displayed at full size (None: unknown).
    box : (x, y, w, h) or None
        The region searched, cut to the photo (None: the whole photo).
    """

    hits: list
    size: tuple[int, int] | None
    box: tuple[float, float, float, float] | None


def search(collection, source: str, *, method: str, top: int, box=None) -> SearchOutcome:
    """Worker side: query ``collection`` with ``source`` (within ``box``, pixels of the
    photo at full size) and read the photo's displayed size (its header only), so that
    a box drawn on it next can be turned into pixels."""
    from engine.index.region import clip_box, displayed_size
    from engine.io.imageio import ImageLoadError

    try:
        size = displayed_size(source)
    except (ImageLoadError, OSError, ValueError):
        size = None
    if box is not None and size is not None:
        box = clip_box(tuple(box), size)
    hits = collection.query(source, method=method, top=top, box=box)
    return SearchOutcome(list(hits), size, None if box is None else tuple(box))


class QueryPhoto(QWidget):
    """The query photo; a press-drag-release on it draws the region to search.

    Signals
    -------
    region_drawn(object)
        ``(x, y, w, h)`` fractions of the photo's width and height.
    region_cleared()
        Esc on the photo while a region is shown.
    """

    region_drawn = Signal(object)
    region_cleared = Signal()

    #: drags shorter than this (pixels on screen) are clicks, not boxes
    MIN_DRAG = 6

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("queryPic")
        self.setFixedSize(176, 132)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self._pixmap: QPixmap | None = None
        self._box: tuple[float, float, float, float] | None = None  # fractions
        self._drawable = False
        self._from: QPointF | None = None
        self._to: QPointF | None = None
        self._set_tip()

    # -- API ------------------------------------------------------------------------------
    def set_pixmap(self, pixmap: QPixmap | None) -> None:
        self._pixmap = pixmap if pixmap is not None and not pixmap.isNull() else None
        self.update()

    def pixmap(self) -> QPixmap | None:
        return self._pixmap

    def clear(self) -> None:
        self._pixmap, self._box, self._from, self._to = None, None, None, None
        self.update()

    def set_box(self, box: Any) -> None:
        """Show ``box`` (fractions ``(x, y, w, h)``; None: the whole photo)."""
        self._box = None if box is None else tuple(float(v) for v in box)
        self._set_tip()
        self.update()

    def box(self) -> tuple[float, float, float, float] | None:
        return self._box

    def set_drawable(self, on: bool) -> None:
        """Whether a box may be drawn now (the photo's results are in)."""
        self._drawable = bool(on)
        if not on:
            self._from = self._to = None
        self.setCursor(Qt.CursorShape.CrossCursor if on else Qt.CursorShape.ArrowCursor)
        self._set_tip()
        self.update()

    def is_drawable(self) -> bool:
        return self._drawable

    def photo_rect(self) -> QRectF:
        """Where the photo is drawn in the widget (fitted, centred)."""
        r = QRectF(self.rect()).adjusted(3, 3, -3, -3)
        pm = self._pixmap
        if pm is None or pm.width() < 1 or pm.height() < 1:
            return r
        s = min(r.width() / pm.width(), r.height() / pm.height())
        w, h = pm.width() * s, pm.height() * s
        return QRectF(r.center().x() - w / 2, r.center().y() - h / 2, w, h)

    def rect_of(self, box: tuple[float, float, float, float]) -> QRectF:
        """The widget rectangle of a box given in fractions of the photo."""
        p = self.photo_rect()
        x, y, w, h = box
        return QRectF(p.x() + x * p.width(), p.y() + y * p.height(), w * p.width(),
                      h * p.height())  # fmt: skip

    # -- events ---------------------------------------------------------------------------
    def mousePressEvent(self, event) -> None:
        pos = event.position()
        if (
            event.button() == Qt.MouseButton.LeftButton
            and self._drawable
            and self._pixmap is not None
            and self.photo_rect().contains(pos)
        ):
            self._from = self._to = QPointF(pos)
            self.update()
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:
        if self._from is not None:
            self._to = self._clamped(event.position())
            self.update()
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        if self._from is None or event.button() != Qt.MouseButton.LeftButton:
            super().mouseReleaseEvent(event)
            return
        a, b = self._from, self._clamped(event.position())
        self._from = self._to = None
        self.update()
        event.accept()
        if abs(b.x() - a.x()) < self.MIN_DRAG or abs(b.y() - a.y()) < self.MIN_DRAG:
            return  # a click
        p = self.photo_rect()
        x0, x1 = sorted(((a.x() - p.x()) / p.width(), (b.x() - p.x()) / p.width()))
        y0, y1 = sorted(((a.y() - p.y()) / p.height(), (b.y() - p.y()) / p.height()))
        self.region_drawn.emit((x0, y0, x1 - x0, y1 - y0))

    def event(self, event) -> bool:
        # Esc clears the region here rather than reaching the window's Esc (which stops
        # indexing)
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and event.key() == Qt.Key.Key_Escape
            and (self._box is not None or self._from is not None)
        ):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_Escape:
            if self._from is not None:  # a drag in progress: forget it
                self._from = self._to = None
                self.update()
            elif self._box is not None:
                self.region_cleared.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        bg = QPainterPath()
        bg.addRoundedRect(QRectF(self.rect()), 6, 6)
        p.fillPath(bg, QColor(27, 28, 31))
        pm = self._pixmap
        if pm is None:
            p.end()
            return
        photo = self.photo_rect()
        p.drawPixmap(photo, pm, QRectF(pm.rect()))
        if self._box is not None:
            r = self.rect_of(self._box).intersected(photo)
            outside = QPainterPath()
            outside.addRect(photo)
            inside = QPainterPath()
            inside.addRect(r)
            p.fillPath(outside.subtracted(inside), DIM)
            p.setPen(QPen(BOX_COLOUR, 2))
            p.drawRect(r)
        if self._from is not None and self._to is not None:
            pen = QPen(QColor(255, 255, 255), 1.5, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.drawRect(QRectF(self._from, self._to).normalized())
        p.end()

    # -- internals ------------------------------------------------------------------------
    def _clamped(self, pos: QPointF) -> QPointF:
        r = self.photo_rect()
        return QPointF(min(max(pos.x(), r.left()), r.right()),
                       min(max(pos.y(), r.top()), r.bottom()))  # fmt: skip

    def _set_tip(self) -> None:
        if self._box is not None:
            tip = "Searching this region only. Esc or “Whole photo” searches all of it."
        elif self._drawable:
            tip = "Drag a box around an object to search for it alone."
        else:
            tip = ""
        self.setToolTip(tip)
