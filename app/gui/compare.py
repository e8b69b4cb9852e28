"""Two copies of a photo side by side at the same zoom, or flickered in one place.

Both copies are drawn at the same width in their scenes (a half-size re-export is scaled
up to the original's width), so the same part of the photo is under the same point of
both views; zoom (wheel, buttons) and scrolling are shared. "Flicker" shows them in turn
in the left view: a crop, a shift or a loss of detail jumps out. The copies first show
their previews (already loaded) and are replaced by larger versions loaded in a worker.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QImage, QPainter, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QGraphicsPixmapItem,
    QGraphicsScene,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
)

from app.gui import workers

__all__ = ["FULL_SIDE", "CompareDialog"]

#: Longest side the copies are loaded at for comparing detail.
FULL_SIDE = 2400


def _image_size(path: str) -> tuple[int, int] | None:
    """The copy's size from its header (cheap), None when unreadable."""
    try:
        from engine.io.imageio import image_size

        w, h = image_size(path)
        return int(w), int(h)
    except Exception:
        return None


class _View(QGraphicsView):
    def __init__(self, owner: CompareDialog) -> None:
        super().__init__()
        self._owner = owner
        self.setScene(QGraphicsScene(self))
        self.item = QGraphicsPixmapItem()
        self.item.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        self.scene().addItem(self.item)
        self.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setBackgroundBrush(Qt.GlobalColor.black)

    def wheelEvent(self, event) -> None:
        self._owner.zoom_by(1.25 if event.angleDelta().y() > 0 else 0.8)


class CompareDialog(QDialog):
    """Compare copy ``a`` and copy ``b`` (each ``(path, QImage or None)``).

    Attributes
    ----------
    zoom : float
        Screen pixels per scene pixel, the same in both views.
    """

    def __init__(self, a: tuple[str, QImage | None], b: tuple[str, QImage | None], parent=None):
        super().__init__(parent)
        self.setWindowTitle("Compare copies")
        self.resize(1200, 720)
        self.paths = (str(a[0]), str(b[0]))
        self.sizes = [_image_size(p) for p in self.paths]
        self.images: list[QImage | None] = [a[1], b[1]]
        # scene units: pixels of the widest original (100 % = its own pixels on screen)
        widths = [sz[0] for sz in self.sizes if sz] or [
            im.width() for im in self.images if im is not None
        ]
        self.width_ = max(widths, default=1)
        self.views = (_View(self), _View(self))
        self.captions = (QLabel(), QLabel())
        self.zoom = 1.0
        self._shown = 0  # flicker: which copy the left view shows
        self._syncing = False
        row = QHBoxLayout()
        for view, cap in zip(self.views, self.captions, strict=True):
            col = QVBoxLayout()
            cap.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            # (a long name must not make one view wider: both show the same area)
            cap.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            col.addWidget(cap)
            col.addWidget(view, 1)
            row.addLayout(col, 1)
            for bar in (view.horizontalScrollBar(), view.verticalScrollBar()):
                bar.valueChanged.connect(lambda _v, src=view: self._sync_scroll(src))
        tools = QHBoxLayout()
        for text, slot, tip in (
            ("Fit", self.fit, "Show the whole photo"),
            ("100 %", lambda: self.set_zoom(1.0), "One pixel of the larger copy per screen pixel"),
            ("Zoom in", lambda: self.zoom_by(1.25), "Or turn the mouse wheel"),
            ("Zoom out", lambda: self.zoom_by(0.8), ""),
        ):
            btn = QPushButton(text)
            btn.setToolTip(tip)
            btn.clicked.connect(slot)
            tools.addWidget(btn)
        self.zoom_label = QLabel()
        self.zoom_label.setMinimumWidth(self.zoom_label.fontMetrics().horizontalAdvance(
            "  zoom 1600 %  "))  # fmt: skip
        tools.addWidget(self.zoom_label)
        self.flicker_btn = QPushButton("Flicker")
        self.flicker_btn.setCheckable(True)
        self.flicker_btn.setToolTip("Show the two copies in turn in one place")
        self.flicker_btn.toggled.connect(self.set_flicker)
        tools.addWidget(self.flicker_btn)
        tools.addStretch(1)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        tools.addWidget(close)
        lay = QVBoxLayout(self)
        lay.addLayout(row, 1)
        lay.addLayout(tools)
        self.timer = QTimer(self)
        self.timer.setInterval(600)
        self.timer.timeout.connect(self._flip)
        for k in (0, 1):
            self._show(k, k)
        self._load_full()

    # -- images ----------------------------------------------------------------------------
    def _show(self, view_index: int, image_index: int) -> None:
        view, img = self.views[view_index], self.images[image_index]
        if img is None or img.isNull():
            view.item.setPixmap(QPixmap())
            self.captions[view_index].setText(f"{Path(self.paths[image_index]).name}: unreadable")
            return
        view.item.setPixmap(QPixmap.fromImage(img))
        view.item.setScale(self.width_ / max(1, img.width()))
        view.scene().setSceneRect(view.item.sceneBoundingRect())
        p = Path(self.paths[image_index])
        original = self.sizes[image_index]
        size = f" · {original[0]}×{original[1]}" if original else ""
        self.captions[view_index].setText(f"<b>{p.name}</b> · in {p.parent.name}{size}")
        self.captions[view_index].setToolTip(str(p))

    def _load_full(self) -> None:
        from app.gui.thumbnails import array_to_qimage
        from engine.io.imageio import load_image

        def load(path: str):
            return array_to_qimage(load_image(path, max_side=FULL_SIDE))

        for k, path in enumerate(self.paths):
            workers.create_worker(
                load, path, connect={"returned": lambda img, k=k: self.set_image(k, img)}
            )

    def set_image(self, k: int, image: QImage) -> None:
        """Copy ``k`` at a larger size (same framing: the zoom is kept)."""
        if image is None or image.isNull():
            return
        self.images[k] = image
        for v in (0, 1):
            if (self._shown if v == 0 and self.timer.isActive() else v) == k:
                self._show(v, k)

    # -- zoom and scroll -------------------------------------------------------------------
    def set_zoom(self, zoom: float) -> None:
        self.zoom = max(0.02, min(16.0, float(zoom)))
        for view in self.views:
            view.resetTransform()
            view.scale(self.zoom, self.zoom)
        self.zoom_label.setText(f"  zoom {100 * self.zoom:.0f} %")

    def zoom_by(self, factor: float) -> None:
        self.set_zoom(self.zoom * factor)

    def fit(self) -> None:
        view = self.views[0]
        rect = view.scene().sceneRect()
        if rect.width() <= 0 or rect.height() <= 0:
            return
        vp = view.viewport().size()
        self.set_zoom(min(vp.width() / rect.width(), vp.height() / rect.height()))

    def _sync_scroll(self, src: QGraphicsView) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            for view in self.views:
                if view is not src:
                    view.horizontalScrollBar().setValue(src.horizontalScrollBar().value())
                    view.verticalScrollBar().setValue(src.verticalScrollBar().value())
        finally:
            self._syncing = False

    # -- flicker -----------------------------------------------------------------------------
    def set_flicker(self, on: bool) -> None:
        self.views[1].setVisible(not on)
        self.captions[1].setVisible(not on)
        if on:
            self.timer.start()
        else:
            self.timer.stop()
            self._shown = 0
            self._show(0, 0)

    def _flip(self) -> None:
        self._shown = 1 - self._shown
        self._show(0, self._shown)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, self.fit)
