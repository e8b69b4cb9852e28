"""“Why do they match?” — what ranked a result, shown (issue #21, point 4).

The ``hybrid`` ranking ("Best match") puts first the results that pass its same-object
check: details of the two photos paired by their descriptors (nearest neighbours with a
ratio test), then one geometric fit that a set of them must agree on
(:func:`engine.index.verify.ranking_check`). This view draws exactly that check's outcome
(:meth:`engine.collection.Collection.explain`): by default only the correspondences it
accepted, solid and bright, under a header that says in words whether they are enough
for the ranking to call the pair the same object or place. On request it adds the pairs
the check rejected (dashed, faint) and the vocabulary-guided pyramid match's
correspondences (thesis 3.2.3, dotted: what the "looks alike" score counts). The number
shown is the result's: the result list's when the window passes it (``hit_text``), else
the ``hybrid`` score the explanation computed for the pair.
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

from app.gui.models import shown_name, strength_colour
from app.gui.thumbnails import array_to_qimage

__all__ = ["ACCEPTED", "PYRAMID", "REJECTED", "CorrespondenceView", "MatchData", "compute_match"]

DISPLAY_HEIGHT = 640.0  # both images are shown at this height in scene units
GAP = 40.0
DEFAULT_LINES = 150  # accepted lines shown at first; the slider shows more

#: kinds of line: accepted by the ranking's check, rejected by it, pyramid-match pair
ACCEPTED, REJECTED, PYRAMID = 0, 1, 2
#: the bright part of the colour ramp, for lines drawn on photos
_RAMP_LOW = 0.35


@dataclass
class MatchData:
    """Everything the view draws; built in a worker by :func:`compute_match`.

    Attributes
    ----------
    xy_a, xy_b : (P, 2) float32
        Both ends of every line, in scene units of each image (scaled to the display):
        the check's putative pairs (accepted and rejected), then the pyramid match's.
    kind : (P,) int8
        :data:`ACCEPTED`, :data:`REJECTED` or :data:`PYRAMID` for each line.
    strength : (P,) float64
        Strength in [0, 1] within its kind (1 = strongest): descriptor similarity for
        the check's pairs, the bin weight (or level) for the pyramid match's.
    rank : (P,) int64
        Each line's rank within its kind by strength (0 = strongest): the slider keeps
        the lines of rank below a count.
    paint_order : (P,) int64
        Lines in drawing order, bottom to top: pyramid, rejected, accepted, each weakest
        to strongest.
    keys_a, keys_b : (K, 2) float32
        All keypoints of each image (the region's, for a search by region), display units.
    n_inliers : int
        The check's count of accepted correspondences (what the ranking compares with
        ``min_inliers``).
    min_inliers : int
        Accepted correspondences the ranking needs to call the pair the same object.
    n_putative : int
        The check's putative (ratio-test) pairs, accepted or not.
    verified : bool
        Whether the ranking's check calls the pair the same object or place.
    score, probability, label :
        The ``hybrid`` score of the pair, its calibrated probability and label (None /
        "" when the result is not in the collection).
    """

    path_a: str
    path_b: str
    image_a: QImage
    image_b: QImage
    xy_a: np.ndarray
    xy_b: np.ndarray
    kind: np.ndarray
    strength: np.ndarray
    keys_a: np.ndarray
    keys_b: np.ndarray
    n_inliers: int
    min_inliers: int
    n_putative: int
    verified: bool = False
    rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    paint_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    score: float | None = None
    probability: float | None = None
    label: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Lines of every kind."""
        return len(self.kind)

    @property
    def inliers(self) -> np.ndarray:
        """(P,) bool: the lines of the correspondences the check accepted."""
        return self.kind == ACCEPTED

    @property
    def n_accepted(self) -> int:
        return int(np.count_nonzero(self.kind == ACCEPTED))

    def count(self, *kinds: int) -> int:
        """Lines of these kinds."""
        return int(np.count_nonzero(np.isin(self.kind, kinds)))


def _unit(values: np.ndarray) -> np.ndarray:
    """``values`` scaled to [0, 1] (all 1 when they are all equal)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0 or np.ptp(v) <= 0:
        return np.ones(v.size)
    return (v - v.min()) / np.ptp(v)


def _pyramid_strength(result) -> np.ndarray:
    """Weights of the pyramid match's pairs scaled to [0, 1]; levels if there are no
    weights (finer level = stronger)."""
    n = len(result.pairs)
    w = getattr(result, "weight", None)
    if w is not None and len(w) == n and n and np.ptp(np.asarray(w, float)) > 0:
        return _unit(w)
    lv = getattr(result, "level", None)
    if lv is not None and len(lv) == n and n:
        lv = np.asarray(lv, dtype=np.float64)
        return 1.0 - lv / (lv.max() + 1.0)
    return np.ones(n)


def compute_match(collection, path_a: str, path_b: str, box=None) -> MatchData:
    """Worker side: explain why result ``path_b`` matches query ``path_a`` and prepare
    the drawing data.

    The explanation is :meth:`engine.collection.Collection.explain`: the ``hybrid``
    ranking's own same-object check on the features the ranking checked, and the
    pyramid match's correspondences. ``box``: the query was searched within this region
    (``(x, y, w, h)``, pixels of the photo at full size): the region's features are
    explained and shown, and the region is outlined (``extra["box"]``, in display units of
    image a).
    """
    from engine.io.imageio import load_image

    exp = collection.explain(path_a, path_b, box=box)
    img_a = load_image(path_a, max_side=1024)
    img_b = load_image(path_b, max_side=1024)
    fa, fb = exp.features_a, exp.features_b

    def scale(img, feats):
        # features live in the coordinates of the image the engine loaded (feats.image_size)
        fw, fh = feats.image_size
        s_disp = DISPLAY_HEIGHT / img.shape[0]
        return np.array([img.shape[1] / fw * s_disp, img.shape[0] / fh * s_disp], np.float32)

    sa, sb = scale(img_a, fa), scale(img_b, fb)
    # the check's putative pairs, accepted or rejected, then the pyramid match's
    acc = np.asarray(exp.inliers, dtype=bool)
    sim = _unit(exp.similarity)  # (one scale for accepted and rejected: comparable)
    parts_a, parts_b, strengths = [exp.xy_a], [exp.xy_b], [sim]
    kinds = [np.where(acc, ACCEPTED, REJECTED).astype(np.int8)]
    pyr = exp.pyramid
    if pyr is not None and len(pyr):
        pairs = np.asarray(pyr.pairs, dtype=np.int64).reshape(-1, 2)
        xa = pyr.xy_a if pyr.xy_a is not None else fa.xy[pairs[:, 0]]
        xb = pyr.xy_b if pyr.xy_b is not None else fb.xy[pairs[:, 1]]
        parts_a.append(np.asarray(xa, np.float32).reshape(-1, 2))
        parts_b.append(np.asarray(xb, np.float32).reshape(-1, 2))
        kinds.append(np.full(len(pairs), PYRAMID, np.int8))
        strengths.append(_pyramid_strength(pyr))
    kind = np.concatenate(kinds).astype(np.int8)
    strength = np.concatenate(strengths).astype(np.float64)
    rank = np.zeros(kind.size, np.int64)  # within its kind, strongest first
    for k in (ACCEPTED, REJECTED, PYRAMID):
        idx = np.flatnonzero(kind == k)
        rank[idx[np.argsort(-strength[idx], kind="stable")]] = np.arange(idx.size)
    paint_order = np.lexsort((-rank, -kind.astype(np.int64)))
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
        xy_a=np.concatenate(parts_a).astype(np.float32).reshape(-1, 2) * sa,
        xy_b=np.concatenate(parts_b).astype(np.float32).reshape(-1, 2) * sb,
        kind=kind,
        strength=strength,
        keys_a=np.asarray(fa.xy, np.float32).reshape(-1, 2) * sa,
        keys_b=np.asarray(fb.xy, np.float32).reshape(-1, 2) * sb,
        n_inliers=int(exp.n_inliers),
        min_inliers=int(exp.min_inliers),
        n_putative=len(exp),
        verified=exp.verified,
        rank=rank,
        paint_order=paint_order,
        score=exp.score,
        probability=exp.probability,
        label=exp.label,
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
    """Query and a result side by side, lines between the details that match.

    By default only the correspondences the ranking's same-object check accepted are
    drawn; "Show all correspondences" adds the ones it rejected, "Pyramid match" the
    pyramid match's. The slider keeps the strongest lines of each kind shown
    (right: more; at its right end, all); its label counts them.
    """

    result_chosen = Signal(object)  # the path of another result (an object, as in grid.py)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.data: MatchData | None = None
        #: the result list's words for this result (set by the window), else ""
        self.hit_text = ""
        self._lines: list[QGraphicsLineItem] = []
        self._rank = np.zeros(0, np.int64)  # rank of each line within its kind (0 = strongest)
        self._keys: QGraphicsItemGroup | None = None
        # the combo's results, in its order (kept here, not as the items' data: Qt drops
        # the undecodable bytes of a file name)
        self._choice_paths: list[str] = []
        self.scene = QGraphicsScene(self)
        self.view = ZoomView(self.scene)

        self.result_combo = QComboBox()
        self.result_combo.setMinimumContentsLength(24)
        self.result_combo.setToolTip("Result to compare with the query")
        self.result_combo.activated.connect(self._on_combo)
        self.lines_slider = QSlider(Qt.Orientation.Horizontal)
        self.lines_slider.setRange(1, 100)
        self.lines_slider.setValue(100)
        self.lines_slider.setFixedWidth(150)
        self.lines_slider.setToolTip(
            "How many lines to draw: drag right for more (the strongest first), "
            "all at the right end"
        )
        self.lines_slider.valueChanged.connect(self._apply_visibility)
        self.lines_label = QLabel("Lines shown: 0")
        self.lines_label.setMinimumWidth(
            self.lines_label.fontMetrics().horizontalAdvance("Lines shown: 000 strongest of 0000")
        )
        self.show_all = QCheckBox("Show all correspondences")
        self.show_all.setToolTip(
            "Also draw, dashed, the loose matches the same-object check rejected: pairs "
            "of details that look alike but do not fit one view of the same thing"
        )
        self.show_all.toggled.connect(self._apply_visibility)
        self.show_pyramid = QCheckBox("Pyramid match")
        self.show_pyramid.setToolTip(
            "Also draw, dotted, the vocabulary pyramid match's correspondences: the "
            "details that fall in the same visual words, what the “looks alike” score counts"
        )
        self.show_pyramid.toggled.connect(self._apply_visibility)
        self.show_lines = QCheckBox("Lines")
        self.show_lines.setChecked(True)
        self.show_lines.toggled.connect(self._apply_visibility)
        self.show_keys = QCheckBox("Keypoints")
        self.show_keys.setChecked(False)
        self.show_keys.setToolTip("Circle every detail found in each photo")
        self.show_keys.toggled.connect(self._apply_visibility)
        fit = QToolButton()
        fit.setText("Fit")
        fit.setToolTip("Fit both photos in the view (zoom with the wheel, drag to pan)")
        fit.clicked.connect(self.view.fit)

        top = QHBoxLayout()
        top.setContentsMargins(8, 6, 8, 2)
        top.addWidget(QLabel("Result:"))
        top.addWidget(self.result_combo, 1)
        top.addSpacing(12)
        top.addWidget(self.lines_label)
        top.addWidget(self.lines_slider)
        top.addSpacing(4)
        top.addWidget(fit)
        options = QHBoxLayout()  # (a row of its own: the window stays narrow)
        options.setContentsMargins(8, 2, 8, 2)
        for i, box in enumerate(
            (self.show_all, self.show_pyramid, self.show_lines, self.show_keys)
        ):
            if i:
                options.addSpacing(14)
            options.addWidget(box)
        options.addStretch(1)

        self.header = QLabel()
        self.header.setObjectName("matchHeader")
        self.header.setWordWrap(True)
        self.header.setContentsMargins(10, 4, 10, 4)
        f = self.header.font()
        f.setPointSizeF(f.pointSizeF() * 1.25)
        f.setBold(True)
        self.header.setFont(f)
        self.header.hide()

        self.info = QLabel(self._idle_text())
        self.info.setWordWrap(True)  # (a long line wraps rather than widen the window)
        self.info.setObjectName("matchInfo")
        self.info.setContentsMargins(10, 4, 10, 6)
        self.legend = QLabel()
        self.legend.setPixmap(self._legend_pixmap())
        tip = "Line colour: how alike the two details look (descriptor similarity)"
        self.legend.setToolTip(tip)
        bottom = QHBoxLayout()
        bottom.addWidget(self.info, 1)
        bottom.addWidget(QLabel("less alike"))
        bottom.addWidget(self.legend)
        bottom.addWidget(QLabel("more alike"))
        bottom.setContentsMargins(0, 0, 10, 0)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addLayout(top)
        lay.addLayout(options)
        lay.addWidget(self.header)
        lay.addWidget(self.view, 1)
        lay.addLayout(bottom)

    # -- API -------------------------------------------------------------------------------
    def set_choices(self, paths: list, current: str | None) -> None:
        """The results to choose from: paths, or ``(path, rank)`` pairs numbered as the
        result list numbers them (rank None: the query itself, "Q")."""
        self.result_combo.blockSignals(True)
        self.result_combo.clear()
        self._choice_paths = []
        for i, item in enumerate(paths):
            p, rank = item if isinstance(item, tuple) else (item, i + 1)
            self._choice_paths.append(p)
            self.result_combo.addItem(f"{'Q' if rank is None else f'#{rank}'}  {shown_name(p)}")
        if current is not None and current in self._choice_paths:
            self.result_combo.setCurrentIndex(self._choice_paths.index(current))
        self.result_combo.blockSignals(False)

    def set_busy(self, text: str) -> None:
        self.info.setText(text)

    def clear(self) -> None:
        self.data = None
        self._lines = []
        self._rank = np.zeros(0, np.int64)
        self._keys = None
        self.scene.clear()
        self.header.hide()
        self.lines_label.setText("Lines shown: 0")
        self.info.setText(self._idle_text())

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

        self._rank = data.rank
        self._lines = [None] * data.n  # type: ignore[list-item]
        for i in data.paint_order:
            line = self._line(data, int(i), ox)
            self.scene.addItem(line)
            self._lines[i] = line
        self.scene.setSceneRect(QRectF(self.scene.itemsBoundingRect()).adjusted(-20, -20, 20, 20))
        # a readable default: about the DEFAULT_LINES strongest accepted correspondences
        n_acc = data.n_accepted
        pct = 100 if n_acc <= DEFAULT_LINES else max(1, int(100 * DEFAULT_LINES / n_acc))
        self.lines_slider.blockSignals(True)
        self.lines_slider.setValue(pct)
        self.lines_slider.blockSignals(False)
        self.show_all.setEnabled(data.count(REJECTED) > 0)
        self.show_pyramid.setEnabled(data.count(PYRAMID) > 0)
        self._set_header(data)
        self._apply_visibility()
        self.view.fit()

    def visible_count(self, kind: int | None = None) -> int:
        """Lines drawn now (of one kind: :data:`ACCEPTED`, :data:`REJECTED`, :data:`PYRAMID`)."""
        d = self.data
        return sum(
            1
            for i, ln in enumerate(self._lines)
            if ln is not None and ln.isVisible() and (kind is None or d.kind[i] == kind)
        )

    def shown_counts(self) -> tuple[int, int]:
        """``(shown, available)``: the lines the slider keeps of the kinds switched on,
        and all lines of those kinds (what the slider's label says)."""
        d = self.data
        if d is None:
            return 0, 0
        on = self._kinds_on()
        pct = self.lines_slider.value()
        avail = sum(d.count(k) for k in on)
        shown = sum(self._keep(d.count(k), pct) for k in on)
        return shown, avail

    # -- internals -------------------------------------------------------------------------
    @staticmethod
    def _idle_text() -> str:
        return "Pick a result and choose “Why do they match?”."

    @staticmethod
    def _keep(n: int, pct: int) -> int:
        """Lines of a kind of ``n`` kept at slider value ``pct`` (1..100): the strongest
        ``ceil(n pct / 100)``, so that moving right never shows fewer."""
        return int(np.ceil(n * pct / 100.0))

    def _kinds_on(self) -> tuple[int, ...]:
        kinds = [ACCEPTED]
        if self.show_all.isChecked():
            kinds.append(REJECTED)
        if self.show_pyramid.isChecked():
            kinds.append(PYRAMID)
        return tuple(kinds)

    @staticmethod
    def _line(data: MatchData, i: int, ox: float) -> QGraphicsLineItem:
        a = QPointF(float(data.xy_a[i, 0]), float(data.xy_a[i, 1]))
        b = QPointF(float(data.xy_b[i, 0]) + ox, float(data.xy_b[i, 1]))
        kind = int(data.kind[i])
        t = _RAMP_LOW + (1.0 - _RAMP_LOW) * float(data.strength[i])
        if kind == ACCEPTED:  # prominent: solid, bright, thick, with a dark edge
            col = strength_colour(t, 255)
            width, style, r = 2.6, Qt.PenStyle.SolidLine, 3.8
        elif kind == REJECTED:
            col = QColor(255, 120, 110, 150)  # (red: rejected; seen on light and dark)
            width, style, r = 1.0, Qt.PenStyle.DashLine, 2.2
        else:
            col = strength_colour(t, 110)
            width, style, r = 1.0, Qt.PenStyle.DotLine, 2.0
        pen = QPen(col, width)
        pen.setCosmetic(True)
        pen.setStyle(style)
        line = QGraphicsLineItem(a.x(), a.y(), b.x(), b.y())
        line.setPen(pen)
        line.setZValue(3 - kind)  # accepted above rejected above pyramid
        line.setData(0, kind)
        brush = QBrush(col)
        for p in (a, b):
            d = QGraphicsEllipseItem(p.x() - r, p.y() - r, 2 * r, 2 * r, line)
            if kind == ACCEPTED:
                edge = QPen(QColor(0, 0, 0, 200), 1.0)
                edge.setCosmetic(True)
                d.setPen(edge)
            else:
                d.setPen(Qt.PenStyle.NoPen)
            d.setBrush(brush)
        return line

    def _set_header(self, d: MatchData) -> None:
        """The verdict of the ranking's check, in words."""
        loose = f"{d.n_putative} loose match{'es' if d.n_putative != 1 else ''}"
        if d.verified:
            text = (
                f"✓ {d.n_inliers} matching details agree on one view of the same object or "
                "place — the check that “Best match” ranks results by"
            )
            colour = "#8fd694"
        elif d.n_inliers > 0:
            text = (
                f"✗ Only {d.n_inliers} details agree on one view: too few to be sure it is "
                f"the same object or place, so this result only looks alike ({loose})"
            )
            colour = "#f0c040"
        else:
            text = f"✗ No consistent set of matches: this result only looks alike ({loose})"
            colour = "#f0c040"
        self.header.setText(text)
        self.header.setStyleSheet(f"QLabel#matchHeader {{ color: {colour}; }}")
        self.header.show()

    def choice_path(self, i: int) -> str | None:
        """The path of the ``i``-th entry of the list of results (None beyond it)."""
        return self._choice_paths[i] if 0 <= i < len(self._choice_paths) else None

    def _on_combo(self, i: int) -> None:
        path = self.choice_path(i)
        if path:
            self.result_chosen.emit(path)

    def _apply_visibility(self, *_args) -> None:
        d = self.data
        if d is None:
            self.lines_label.setText("Lines shown: 0")
            return
        on = self._kinds_on()
        pct = self.lines_slider.value()
        keep = np.zeros(d.n, bool)
        for k in on:
            keep |= (d.kind == k) & (self._rank < self._keep(d.count(k), pct))
        lines_on = self.show_lines.isChecked()
        for i, line in enumerate(self._lines):
            line.setVisible(lines_on and bool(keep[i]))
        if self._keys is not None:
            self._keys.setVisible(self.show_keys.isChecked())
        shown, avail = self.shown_counts()
        if not lines_on or avail == 0:
            self.lines_label.setText("Lines shown: none")
        elif shown >= avail:
            self.lines_label.setText(f"Lines shown: all {avail}")
        else:
            self.lines_label.setText(f"Lines shown: {shown} strongest of {avail}")
        self.lines_slider.setEnabled(avail > 1)
        parts = []
        if d.n_accepted:
            parts.append("solid: accepted by the same-object check")
        if REJECTED in on and d.count(REJECTED):
            parts.append(
                "dashed: rejected by it" if d.n_accepted else "dashed: rejected by the check"
            )
        elif REJECTED not in on and d.count(REJECTED):
            parts.append(
                f"tick “Show all correspondences” for the {d.count(REJECTED)} the check rejected"
            )
        if PYRAMID in on and d.count(PYRAMID):
            parts.append(f"dotted: {d.count(PYRAMID)} pyramid-match pairs")
        parts.append(self.hit_text or self._score_text(d))
        self.info.setText(" · ".join(p for p in parts if p))

    @staticmethod
    def _score_text(d: MatchData) -> str:
        """The pair's own number, when the result list has none for it."""
        if d.probability is not None:
            return (
                f"<b>{100 * d.probability:.0f} %</b> likely the same object or place "
                "(as “Best match” scores it)"
            )
        if d.score is not None:
            return f"score <b>{d.score:.3f}</b>"
        return "not in the collection: no score"

    @staticmethod
    def _legend_pixmap() -> QPixmap:
        pm = QPixmap(120, 10)
        p = QPainter(pm)
        for x in range(120):
            p.setPen(strength_colour(_RAMP_LOW + (1.0 - _RAMP_LOW) * x / 119))
            p.drawLine(x, 0, x, 10)
        p.end()
        return pm
