"""“Why do they match?” — the correspondence view (thesis 3.2.3).

The pyramid match implicitly pairs features that share a histogram bin; the
finer the level at which two features first share a bin, the stronger the
correspondence (its weight, Eq. 3.3's ``w_i``). This view draws the query and a
result side by side with a line per correspondence, coloured by that strength,
and distinguishes the geometric inliers (same-object verification).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QGraphicsEllipseItem,
    QGraphicsItemGroup,
    QGraphicsLineItem,
    QGraphicsPixmapItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.models import strength_colour
from app.gui.thumbnails import array_to_qimage

__all__ = ["CorrespondenceView", "MatchData", "compute_match"]

DISPLAY_HEIGHT = 640.0  # both images are shown at this height in scene units
GAP = 40.0
DEFAULT_LINES = 150  # lines shown at first; the slider shows more


@dataclass
class MatchData:
    """Everything the view draws; built in a worker by :func:`compute_match`.

    Attributes
    ----------
    xy_a, xy_b : (P, 2) float32
        Matched feature positions in scene units of each image (scaled to the display).
    strength : (P,) float64
        Correspondence strength in [0, 1] (normalised weight, 1 = strongest).
    inliers : (P,) bool or None
        Geometric inliers, when the engine verified the match.
    keys_a, keys_b : (K, 2) float32
        All keypoints of each image, in display units.
    """

    path_a: str
    path_b: str
    image_a: QImage
    image_b: QImage
    xy_a: np.ndarray
    xy_b: np.ndarray
    strength: np.ndarray
    inliers: np.ndarray | None
    keys_a: np.ndarray
    keys_b: np.ndarray
    score: float
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.strength)

    @property
    def n_inliers(self) -> int:
        return int(self.inliers.sum()) if self.inliers is not None else 0


def _strength(result) -> np.ndarray:
    """Weights of the matched pairs scaled to [0, 1]; levels if there are no weights."""
    n = len(result.pairs)
    w = getattr(result, "weight", None)
    if w is not None and len(w) == n and n and np.ptp(np.asarray(w, float)) > 0:
        w = np.asarray(w, dtype=np.float64)
        return (w - w.min()) / (w.max() - w.min())
    lv = getattr(result, "level", None)
    if lv is not None and len(lv) == n and n:
        lv = np.asarray(lv, dtype=np.float64)
        top = lv.max()
        return 1.0 - lv / (top + 1.0)
    return np.ones(n)


def _features(collection, path):
    """Stored features, or freshly extracted ones for a query from outside the folder."""
    try:
        return collection.features(path)
    except KeyError:
        from engine.features.keypoints import extract_features

        return extract_features(path)


def compute_match(collection, path_a: str, path_b: str, box=None) -> MatchData:
    """Worker side: match two indexed photos and prepare the drawing data.

    ``box``: the query ``path_a`` was searched within this region (``(x, y, w, h)``,
    pixels of the photo at full size): only the region's features are matched and shown
    (``Collection.match(..., box=)``), and the region is outlined (``extra["box"]``, in
    display units of image a).
    """
    from engine.io.imageio import load_image

    result = collection.match(path_a, path_b, box=box)
    img_a = load_image(path_a, max_side=1024)
    img_b = load_image(path_b, max_side=1024)
    fa = collection.region_features(path_a, box) if box is not None else None
    fa = fa if fa is not None else _features(collection, path_a)
    fb = _features(collection, path_b)

    def scale(img, feats):
        # features live in the coordinates of the image the engine loaded (feats.image_size)
        fw, fh = feats.image_size if feats is not None else (img.shape[1], img.shape[0])
        s_disp = DISPLAY_HEIGHT / img.shape[0]
        return np.array([img.shape[1] / fw * s_disp, img.shape[0] / fh * s_disp], np.float32)

    sa, sb = scale(img_a, fa), scale(img_b, fb)
    pairs = np.asarray(result.pairs, dtype=np.int64).reshape(-1, 2)
    xy_a = getattr(result, "xy_a", None)
    xy_b = getattr(result, "xy_b", None)
    if xy_a is None:
        xy_a = fa.xy[pairs[:, 0]]
    if xy_b is None:
        xy_b = fb.xy[pairs[:, 1]]
    inl = getattr(result, "inliers", None)
    inliers = None if inl is None else np.asarray(inl, dtype=bool).reshape(-1)
    if inliers is not None and len(inliers) != len(pairs):
        inliers = None
    extra = {}
    if box is not None:
        from engine.index.region import clip_box, displayed_size

        # the box is in pixels of the photo at full size; the view draws image a
        # at DISPLAY_HEIGHT
        W, H = displayed_size(path_a)
        x, y, w, h = clip_box(tuple(box), (W, H))
        s_disp = DISPLAY_HEIGHT / H
        extra["box"] = (x * s_disp, y * s_disp, w * s_disp, h * s_disp)
    return MatchData(
        path_a=str(path_a),
        path_b=str(path_b),
        image_a=array_to_qimage(img_a),
        image_b=array_to_qimage(img_b),
        xy_a=np.asarray(xy_a, np.float32).reshape(-1, 2) * sa,
        xy_b=np.asarray(xy_b, np.float32).reshape(-1, 2) * sb,
        strength=_strength(result),
        inliers=inliers,
        keys_a=np.asarray(fa.xy, np.float32).reshape(-1, 2) * sa,
        keys_b=np.asarray(fb.xy, np.float32).reshape(-1, 2) * sb,
        score=float(result.score),
        extra=extra,
    )


class ZoomView(QGraphicsView):
    """A QGraphicsView with wheel zoom around the cursor and drag-to-pan."""

    def __init__(self, scene: QGraphicsScene, parent=None) -> None:
        super().__init__(scene, parent)
        self.setRenderHints(
            QPainter.RenderHint.Antialiasing | QPainter.RenderHint.SmoothPixmapTransform
        )
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setBackgroundBrush(QColor(30, 31, 34))
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fitted = True

    def wheelEvent(self, event) -> None:
        factor = 1.0015 ** event.angleDelta().y()
        self.zoom(factor)

    def zoom(self, factor: float) -> None:
        current = self.transform().m11()
        factor = max(0.05 / current, min(factor, 40.0 / current))
        self.scale(factor, factor)
        self._fitted = False

    def fit(self) -> None:
        rect = self.scene().itemsBoundingRect()
        if not rect.isEmpty():
            self.fitInView(rect.adjusted(-10, -10, 10, 10), Qt.AspectRatioMode.KeepAspectRatio)
        self._fitted = True

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._fitted:
            self.fit()


class CorrespondenceView(QWidget):
    """Query and a result side by side, lines between corresponding features."""

    result_chosen = Signal(str)  # user picked another result in the combo

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.data: MatchData | None = None
        self._lines: list[QGraphicsLineItem] = []
        self._order = np.zeros(0, np.int64)
        self.scene = QGraphicsScene(self)
        self.view = ZoomView(self.scene)

        self.result_combo = QComboBox()
        self.result_combo.setMinimumContentsLength(24)
        self.result_combo.setToolTip("Result to compare with the query")
        self.result_combo.activated.connect(self._on_combo)
        self.strength = QSlider(Qt.Orientation.Horizontal)
        self.strength.setRange(1, 100)
        self.strength.setValue(100)
        self.strength.setFixedWidth(160)
        self.strength.setToolTip("Show only the strongest correspondences")
        self.strength.valueChanged.connect(self._apply_visibility)
        self.strength_label = QLabel("100 %")
        self.strength_label.setMinimumWidth(40)
        self.show_lines = QCheckBox("Lines")
        self.show_lines.setChecked(True)
        self.show_lines.toggled.connect(self._apply_visibility)
        self.show_keys = QCheckBox("Keypoints")
        self.show_keys.setChecked(False)
        self.show_keys.toggled.connect(self._apply_visibility)
        self.inliers_only = QCheckBox("Inliers only")
        self.inliers_only.setToolTip(
            "Show only correspondences consistent with one geometric transform"
        )
        self.inliers_only.toggled.connect(self._apply_visibility)
        fit = QToolButton()
        fit.setText("Fit")
        fit.setToolTip("Fit both photos in the view (zoom with the wheel, drag to pan)")
        fit.clicked.connect(self.view.fit)

        top = QHBoxLayout()
        top.setContentsMargins(8, 6, 8, 2)
        top.addWidget(QLabel("Result:"))
        top.addWidget(self.result_combo, 1)
        top.addSpacing(12)
        top.addWidget(QLabel("Strongest:"))
        top.addWidget(self.strength)
        top.addWidget(self.strength_label)
        top.addSpacing(8)
        top.addWidget(self.show_lines)
        top.addWidget(self.show_keys)
        top.addWidget(self.inliers_only)
        top.addWidget(fit)

        self.info = QLabel("Pick a result and choose “Why do they match?”.")
        self.info.setWordWrap(True)  # (a long line wraps rather than widen the window)
        self.info.setObjectName("matchInfo")
        self.info.setContentsMargins(10, 4, 10, 6)
        self.legend = QLabel()
        self.legend.setPixmap(self._legend_pixmap())
        bottom = QHBoxLayout()
        bottom.addWidget(self.info, 1)
        bottom.addWidget(QLabel("weak"))
        bottom.addWidget(self.legend)
        bottom.addWidget(QLabel("strong"))
        bottom.setContentsMargins(0, 0, 10, 0)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addLayout(top)
        lay.addWidget(self.view, 1)
        lay.addLayout(bottom)

    # -- API -------------------------------------------------------------------------------
    def set_choices(self, paths: list[str], current: str | None) -> None:
        self.result_combo.blockSignals(True)
        self.result_combo.clear()
        for i, p in enumerate(paths):
            self.result_combo.addItem(f"#{i + 1}  {Path(p).name}", p)
        if current is not None:
            i = self.result_combo.findData(current)
            if i >= 0:
                self.result_combo.setCurrentIndex(i)
        self.result_combo.blockSignals(False)

    def set_busy(self, text: str) -> None:
        self.info.setText(text)

    def clear(self) -> None:
        self.data = None
        self._lines = []
        self.scene.clear()
        self.info.setText("Pick a result and choose “Why do they match?”.")

    def set_match(self, data: MatchData) -> None:
        """Draw ``data`` (GUI thread; cheap: items only, no image processing)."""
        self.data = data
        self.scene.clear()
        pa = QPixmap.fromImage(data.image_a)
        pb = QPixmap.fromImage(data.image_b)
        sa = DISPLAY_HEIGHT / max(1, pa.height())
        sb = DISPLAY_HEIGHT / max(1, pb.height())
        ia = QGraphicsPixmapItem(pa)
        ia.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        ia.setScale(sa)
        ib = QGraphicsPixmapItem(pb)
        ib.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        ib.setScale(sb)
        wa = pa.width() * sa
        ox = wa + GAP
        ib.setPos(ox, 0)
        self.scene.addItem(ia)
        self.scene.addItem(ib)
        box = data.extra.get("box")
        if box is not None:  # a search by region: its box on the query
            outline = QGraphicsRectItem(QRectF(*box))
            pen = QPen(QColor(245, 197, 24), 2.5)
            pen.setCosmetic(True)
            outline.setPen(pen)
            self.scene.addItem(outline)
        region = " (region)" if box is not None else ""
        for x, label in (
            (0.0, f"Query · {Path(data.path_a).name}{region}"),
            (ox, f"Result · {Path(data.path_b).name}"),
        ):
            t = QGraphicsSimpleTextItem(label)
            f = t.font()
            f.setPointSizeF(15)
            t.setFont(f)
            t.setBrush(QColor(230, 230, 230))
            t.setPos(x, -32)
            self.scene.addItem(t)

        self._keys = QGraphicsItemGroup()
        kpen = QPen(QColor(255, 255, 255, 150), 1.2)
        kpen.setCosmetic(True)
        for keys, dx in ((data.keys_a, 0.0), (data.keys_b, ox)):
            for x, y in keys:
                e = QGraphicsEllipseItem(dx + x - 3, y - 3, 6, 6)
                e.setPen(kpen)
                self._keys.addToGroup(e)
        self.scene.addItem(self._keys)

        # strongest drawn last (on top)
        self._order = np.argsort(-data.strength, kind="stable")
        self._lines = [None] * data.n  # type: ignore[list-item]
        inl = data.inliers
        for i in self._order[::-1]:
            a = QPointF(float(data.xy_a[i, 0]), float(data.xy_a[i, 1]))
            b = QPointF(float(data.xy_b[i, 0]) + ox, float(data.xy_b[i, 1]))
            is_in = inl is not None and bool(inl[i])
            outlier = inl is not None and not is_in
            col = strength_colour(float(data.strength[i]), 110 if outlier else 235)
            pen = QPen(col, 1.0 if outlier else (2.4 if is_in else 1.6))
            pen.setCosmetic(True)
            if outlier:
                pen.setStyle(Qt.PenStyle.DashLine)
            line = QGraphicsLineItem(a.x(), a.y(), b.x(), b.y())
            line.setPen(pen)
            dot_brush = QBrush(col)
            r = 2.5 if outlier else 3.5
            for p in (a, b):
                d = QGraphicsEllipseItem(p.x() - r, p.y() - r, 2 * r, 2 * r, line)
                d.setPen(Qt.PenStyle.NoPen)
                d.setBrush(dot_brush)
            self.scene.addItem(line)
            self._lines[i] = line
        self.scene.setSceneRect(QRectF(self.scene.itemsBoundingRect()).adjusted(-20, -20, 20, 20))
        self.inliers_only.setEnabled(inl is not None)
        # a readable default: about the DEFAULT_LINES strongest correspondences
        pct = 100 if data.n <= DEFAULT_LINES else max(1, int(100 * DEFAULT_LINES / data.n))
        self.strength.blockSignals(True)
        self.strength.setValue(pct)
        self.strength.blockSignals(False)
        self._apply_visibility()
        self.view.fit()

    def visible_count(self) -> int:
        return sum(1 for ln in self._lines if ln is not None and ln.isVisible())

    # -- internals -------------------------------------------------------------------------
    def _on_combo(self, i: int) -> None:
        path = self.result_combo.itemData(i)
        if path:
            self.result_chosen.emit(path)

    def _apply_visibility(self, *_args) -> None:
        pct = self.strength.value()
        self.strength_label.setText(f"{pct} %")
        d = self.data
        if d is None:
            return
        k = int(np.ceil(d.n * pct / 100.0))
        keep = np.zeros(d.n, bool)
        keep[self._order[:k]] = True
        if self.inliers_only.isChecked() and d.inliers is not None:
            keep &= d.inliers
        lines_on = self.show_lines.isChecked()
        for i, line in enumerate(self._lines):
            line.setVisible(lines_on and bool(keep[i]))
        self._keys.setVisible(self.show_keys.isChecked())
        shown = int(keep.sum())
        parts = [f"<b>{d.n}</b> correspondences"]
        if d.inliers is not None:
            parts.append(f"<b>{d.n_inliers}</b> geometric inliers (solid; others dashed)")
        parts.append(f"showing {shown}")
        hit = getattr(self, "hit_text", "")
        # the number of the result list (the same pair, the same number), else the match's
        parts.append(hit or f"score <b>{d.score:.3f}</b>")
        self.info.setText(" · ".join(parts))

    @staticmethod
    def _legend_pixmap() -> QPixmap:
        pm = QPixmap(120, 10)
        p = QPainter(pm)
        for x in range(120):
            p.setPen(strength_colour(x / 119))
            p.drawLine(x, 0, x, 10)
        p.end()
        return pm
