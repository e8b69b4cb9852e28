"""The results panel: the query photo (drag a box on it to search a region), method and
count, a filter by the calibrated score ("At least 50 %", "Only the same object or
place"), *Show in grid* (the results large in the main grid:
:mod:`app.gui.results_grid`), and the ranked results with their scores and ✓ / ✗ marks.

The results and the filter live in the window's
:class:`~app.gui.results_state.ShownResults` (``model.shown``): what the filter hides here
is hidden in the grid too."""

from __future__ import annotations

from typing import ClassVar

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListView,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.gui.feedback import MarkBook, MarkingResultDelegate
from app.gui.models import PATH_ROLE, ResultsModel, item_data
from app.gui.region import QueryPhoto
from app.gui.state import DEFAULT_METHOD, MAX_RESULTS, METHOD_TIPS, METHODS

__all__ = ["ResultsPanel"]


class ResultsPanel(QWidget):
    """Renders a :class:`ResultsModel`; emits what the user asks for."""

    search_changed = Signal(str, int)  # method, top
    # (paths as objects: a str signal drops the undecodable bytes of a file name)
    why_requested = Signal(object)  # result path
    open_requested = Signal(object)
    export_requested = Signal()
    mark_requested = Signal(str, bool)  # result path, relevant (thumbs up / down clicked)
    learn_requested = Signal()
    region_drawn = Signal(object)  # (x, y, w, h): fractions of the query photo
    region_cleared = Signal()  # "Whole photo" / Esc on the photo
    grid_requested = Signal()  # "Show in grid"
    grid_left = Signal()  # the same button again: all photos in the grid

    def __init__(self, model: ResultsModel, parent=None, marks: MarkBook | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.marks = marks if marks is not None else MarkBook()
        self.setMinimumWidth(300)

        # the query photo: drag a box on it to search that region (app/gui/region.py)
        self.query_pic = QueryPhoto()
        self.query_pic.region_drawn.connect(self.region_drawn)
        self.query_pic.region_cleared.connect(self.region_cleared)
        self.query_name = QLabel("<b>No query yet</b>")
        self.query_name.setWordWrap(True)
        self.query_hint = QLabel("Double-click a photo, press Enter, or drop/paste an image.")
        self.query_hint.setWordWrap(True)
        self.query_hint.setObjectName("hint")
        self.region_hint = QLabel("")
        self.region_hint.setWordWrap(True)
        self.region_hint.setObjectName("hint")
        self.whole_btn = QPushButton("Whole photo")
        self.whole_btn.setToolTip("Search with the whole photo again (Esc)")
        self.whole_btn.clicked.connect(self.region_cleared)
        self.whole_btn.hide()
        qtext = QVBoxLayout()
        qtext.addWidget(QLabel("QUERY"))
        qtext.addWidget(self.query_name)
        qtext.addWidget(self.query_hint)
        qtext.addWidget(self.region_hint)
        qtext.addStretch(1)
        qtext.addWidget(self.whole_btn, 0, Qt.AlignmentFlag.AlignLeft)
        qrow = QHBoxLayout()
        qrow.addWidget(self.query_pic, 0, Qt.AlignmentFlag.AlignTop)
        qrow.addLayout(qtext, 1)

        self.method = QComboBox()
        self.method.setToolTip("How similarity is measured (Ctrl+1 … Ctrl+5 in the Search menu)")
        self.set_methods([m for m in METHODS if m != "learned"])
        self.top = QSpinBox()
        self.top.setRange(1, MAX_RESULTS)
        self.top.setValue(20)
        self.top.setToolTip("Number of results")
        self.top.setSuffix(" results")
        self.method.currentIndexChanged.connect(self._emit_change)
        self._debounce = QTimer(self)  # typing "50" must not search for 5 first
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(350)
        self._debounce.timeout.connect(self._emit_change)
        self.top.valueChanged.connect(self._debounce.start)
        srow = QHBoxLayout()
        srow.addWidget(self.method, 1)
        srow.addWidget(self.top)

        self.verified_box = QCheckBox("Only the same object or place")
        self.verified_box.setToolTip(
            "Hide the results that only look alike: keep those that passed the geometric "
            "check (Best match)"
        )
        self.verified_box.toggled.connect(self._on_verified_only)
        # (cut short on a narrow panel rather than widen the window)
        self.verified_box.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        # the filter by the calibrated score: hide the results less likely than this
        self.min_percent = QSpinBox()
        self.min_percent.setRange(0, 99)
        self.min_percent.setSingleStep(5)
        self.min_percent.setSuffix(" %")
        self.min_percent.setSpecialValueText("any")
        self.min_percent.setToolTip(self._MIN_TIP)
        self.min_percent.valueChanged.connect(self._on_min_percent)
        self.min_label = QLabel("At least")
        self.min_label.setBuddy(self.min_percent)
        self.count_label = QLabel("")
        self.count_label.setObjectName("hint")
        frow = QHBoxLayout()
        frow.addWidget(self.min_label)
        frow.addWidget(self.min_percent)
        frow.addStretch(1)
        frow.addWidget(self.count_label)
        self.grid_btn = QPushButton("Show in grid")
        self.grid_btn.setCheckable(True)
        self.grid_btn.setToolTip(
            "Show the results large in the main grid, ranked, with their labels (Ctrl+G; "
            "Esc: back to all photos)"
        )
        self.grid_btn.toggled.connect(self._on_grid_toggled)
        self.list = QListView()
        self.list.setModel(model)
        self.delegate = MarkingResultDelegate(model.thumbs, self.marks, self.list)
        self.delegate.mark_clicked.connect(self.mark_requested)
        self.list.setItemDelegate(self.delegate)
        self.list.setUniformItemSizes(True)
        self.list.setMouseTracking(True)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.list.setFrameShape(QFrame.Shape.NoFrame)
        self.list.doubleClicked.connect(
            lambda idx: self.why_requested.emit(item_data(idx, PATH_ROLE))
        )
        self.list.activated.connect(lambda idx: self.why_requested.emit(item_data(idx, PATH_ROLE)))
        self.list.setIconSize(QSize(72, 72))
        # ✓ / ✗ on the selected result from the keyboard (Y or +, N or -), then the next one
        self.list.installEventFilter(self)

        self.why_btn = QPushButton("Why do they match?")
        self.why_btn.setToolTip(
            "Show corresponding features of the query and this result (Ctrl+M)"
        )
        self.why_btn.clicked.connect(self._why)
        self.open_btn = QPushButton("Open")
        self.open_btn.setToolTip("Open the selected result full size (Space)")
        self.open_btn.clicked.connect(self._open)
        self.export_btn = QPushButton("Export…")
        self.export_btn.setToolTip("Save the ranked results as CSV or JSON (Ctrl+E)")
        self.export_btn.clicked.connect(self.export_requested)
        brow = QHBoxLayout()
        brow.addWidget(self.why_btn, 1)
        brow.addWidget(self.open_btn)
        brow.addWidget(self.export_btn)
        self.learn_btn = QPushButton("Learn from my marks")
        self.learn_btn.setToolTip(
            "Mark results ✓ (similar) or ✗ (not similar), then learn a similarity that "
            "follows your marks ('Learned similarity' in the method list)"
        )
        self.learn_btn.clicked.connect(self.learn_requested)
        self.marks_label = QLabel("")
        self.marks_label.setObjectName("hint")
        lrow = QHBoxLayout()
        lrow.addWidget(self.marks_label, 1)
        lrow.addWidget(self.learn_btn)

        self.status = QLabel("")
        self.status.setObjectName("hint")

        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.addLayout(qrow)
        lay.addLayout(srow)
        strow = QHBoxLayout()
        strow.addWidget(self.status, 1)
        strow.addWidget(self.grid_btn)
        lay.addLayout(strow)
        lay.addLayout(frow)
        lay.addWidget(self.verified_box)
        lay.addWidget(self.list, 1)
        lay.addLayout(brow)
        lay.addLayout(lrow)
        self._kept: str | None = None  # the result selected before a reset
        self._rows_for = None  # (query, method, box) the rows were of
        model.modelAboutToBeReset.connect(self._before_reset)
        model.modelReset.connect(self._on_reset)
        self._on_reset()
        self.update_marks()

    def _on_verified_only(self, on: bool) -> None:
        self.model.set_verified_only(on)  # (resets the model: _on_reset says what is hidden)

    def _on_min_percent(self, value: int) -> None:
        self.model.set_min_probability(value / 100.0)

    def _on_grid_toggled(self, on: bool) -> None:
        if on:
            self.grid_requested.emit()
        else:
            self.grid_left.emit()

    def set_in_grid(self, on: bool) -> None:
        """Show whether the results fill the main grid (the button's state)."""
        self.grid_btn.blockSignals(True)
        self.grid_btn.setChecked(bool(on))
        self.grid_btn.blockSignals(False)
        self.grid_btn.setText("Back to all photos" if on else "Show in grid")
        self.grid_btn.setEnabled(bool(on) or self.model.shown.query is not None)
        # (in the grid, its heading has the same button, right above: not shown twice)
        self.grid_btn.setVisible(not on)

    def set_min_percent(self, percent: int) -> None:
        """Set the minimum calibrated percentage shown (0: any), as the spin box does."""
        self.min_percent.setValue(int(percent))

    # -- API -------------------------------------------------------------------------------
    def set_methods(self, methods: list[str]) -> None:
        current = self.current_method() if self.method.count() else DEFAULT_METHOD
        self.method.blockSignals(True)
        self.method.clear()
        for m in methods:
            self.method.addItem(METHODS[m], m)
            self.method.setItemData(
                self.method.count() - 1, METHOD_TIPS.get(m, ""), Qt.ItemDataRole.ToolTipRole
            )
        i = self.method.findData(current)
        self.method.setCurrentIndex(max(0, i))
        self.method.blockSignals(False)

    _MIN_TIP = (
        "Hide the results less likely than this to show the same object or place (the "
        "calibrated percentage on each result), in this list and in the grid"
    )

    #: keys that mark the selected result: ✓ (True) or ✗ (False)
    MARK_KEYS: ClassVar[dict[int, bool]] = {
        int(Qt.Key.Key_Y): True,
        int(Qt.Key.Key_Plus): True,
        int(Qt.Key.Key_N): False,
        int(Qt.Key.Key_Minus): False,
    }

    def eventFilter(self, obj, event) -> bool:
        if obj is self.list and event.type() == QEvent.Type.KeyPress:
            relevant = self.MARK_KEYS.get(int(event.key()))
            no_mods = not (event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
                           & ~Qt.KeyboardModifier.ShiftModifier)  # fmt: skip
            if relevant is not None and no_mods:
                self.mark_selected(relevant)
                return True
        return super().eventFilter(obj, event)

    def mark_selected(self, relevant: bool) -> None:
        """Mark the selected result ✓ (``relevant``) or ✗, then select the next one."""
        idx = self.list.currentIndex()
        path = item_data(idx, PATH_ROLE) if idx.isValid() else None
        if not path:
            return
        self.mark_requested.emit(str(path), bool(relevant))
        nxt = self.model.index(idx.row() + 1)
        if nxt.isValid():
            self.list.setCurrentIndex(nxt)

    def current_method(self) -> str:
        return self.method.currentData() or DEFAULT_METHOD

    def set_method(self, method: str) -> None:
        i = self.method.findData(method)
        if i >= 0:
            self.method.setCurrentIndex(i)

    def set_query(self, name: str, pixmap: QPixmap | None, hint: str = "") -> None:
        self.query_name.setText(f"<b>{name}</b>")
        self.query_hint.setText(hint)
        if pixmap is not None and not pixmap.isNull():
            self.query_pic.set_pixmap(pixmap)
        else:
            self.query_pic.clear()

    def set_region(self, fractions, text: str = "", *, drawable: bool = False) -> None:
        """Show the region searched (``fractions`` of the photo; None: the whole photo),
        a line about it, and whether a box may be drawn now."""
        self.query_pic.set_box(fractions)
        self.query_pic.set_drawable(drawable)
        self.region_hint.setText(text)
        self.region_hint.setVisible(bool(text))
        self.whole_btn.setVisible(fractions is not None)

    def update_marks(self) -> None:
        """Repaint the rows' thumbs and the count of marks."""
        up, down = self.marks.counts()
        idle = "Mark ✓ / ✗ (Y / N) to teach Simile"
        self.marks_label.setText(f"Your marks: {up} ✓  {down} ✗" if up or down else idle)
        self.list.viewport().update()

    def selected_path(self) -> str | None:
        idx = self.list.currentIndex()
        if idx.isValid():
            return item_data(idx, PATH_ROLE)
        return self.model.best_other()

    # -- internals -------------------------------------------------------------------------
    def _on_reset(self) -> None:
        shown = self.model.shown
        # (what the checkbox hides by itself; the count says what all of the filter hides)
        hidden = shown.hidden_by_label() if shown.filter.verified_only else 0
        self.verified_box.setText(
            "Only the same object or place" + (f" ({hidden} hidden)" if hidden else "")
        )
        calibrated = shown.calibrated() or shown.query is None
        self.min_percent.setEnabled(calibrated)
        self.min_label.setEnabled(calibrated)
        self.min_percent.setToolTip(
            self._MIN_TIP if calibrated else
            "This method gives no calibrated percentage: nothing is hidden by it"
        )  # fmt: skip
        self.count_label.setText(shown.count_text() if shown.hidden() else "")
        self.delegate.max_score = self.model.max_score() or 1.0
        self.delegate.query_path = self.model.query
        has = self.model.rowCount() > 0
        for b in (self.why_btn, self.open_btn, self.export_btn):
            b.setEnabled(has)
        self.grid_btn.setEnabled(shown.query is not None or shown.in_grid)
        # the result selected stays selected while filtering; new results: the best one
        search = (shown.query, shown.method, shown.box)
        kept = self._kept if search == self._rows_for else None
        self._rows_for, self._kept = search, None
        if has:
            row = self.model.row_of(kept) if kept else -1
            if row < 0:
                best = self.model.best_other()
                row = self.model.row_of(best) if best is not None else -1
            if row >= 0:
                self.list.setCurrentIndex(self.model.index(row))

    def _before_reset(self) -> None:
        idx = self.list.currentIndex()
        self._kept = item_data(idx, PATH_ROLE) if idx.isValid() else None

    def _emit_change(self, *_a) -> None:
        self._debounce.stop()
        self.search_changed.emit(self.current_method(), self.top.value())

    def _why(self) -> None:
        p = self.selected_path()
        if p:
            self.why_requested.emit(p)

    def _open(self) -> None:
        p = self.selected_path()
        if p:
            self.open_requested.emit(p)
