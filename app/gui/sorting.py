"""The bar above the photo grid: sort by folder, name or date taken, folder headings, and
a range of days taken.

:class:`SortBar` only sets :meth:`app.gui.models.PhotoListModel.set_order` (and tells the
grid whether it shows headings: a heading row is as wide as the grid, which a fixed grid
cell cannot hold). The dates come from the catalogue through the session; sorting 100,000
photos is a Python sort of strings (~0.1 s).
"""

from __future__ import annotations

from PySide6.QtCore import QDate, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDateEdit,
    QHBoxLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

__all__ = ["SortBar"]


class SortBar(QWidget):
    """Sort, group and date-filter controls of a :class:`~app.gui.models.PhotoListModel`.

    Emits ``changed`` after the model was re-ordered (the grid adapts its layout).
    """

    changed = Signal()

    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.sort = QComboBox()
        for key, label in model.SORT_KEYS.items():
            self.sort.addItem(f"Sort by {label.lower()}", key)
        self.sort.setToolTip("The order of the photos in the grid")
        self.group = QCheckBox("Folder headings")
        self.group.setToolTip("Show the photos of each folder under its name")
        self.filter = QCheckBox("Taken from")
        self.filter.setToolTip(
            "Show only photos taken between these days (photos without a date are hidden)"
        )
        today = QDate.currentDate()
        self.first = QDateEdit(today.addYears(-1))
        self.last = QDateEdit(today)
        for d in (self.first, self.last):
            d.setCalendarPopup(True)
            d.setDisplayFormat("yyyy-MM-dd")
            d.setEnabled(False)
        self.to_label = QLabel("to")
        self.count = QLabel("")
        self.count.setObjectName("hint")
        # two rows, so that the grid's column stays narrow enough for small windows
        top = QHBoxLayout()
        top.addWidget(self.sort)
        top.addWidget(self.group)
        top.addStretch(1)
        top.addWidget(self.count)
        dates = QHBoxLayout()
        dates.addWidget(self.filter)
        dates.addWidget(self.first)
        dates.addWidget(self.to_label)
        dates.addWidget(self.last)
        dates.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 2)
        lay.setSpacing(2)
        lay.addLayout(top)
        lay.addLayout(dates)
        self._dates_set = False  # (the person chose days: keep them)
        self.sort.currentIndexChanged.connect(self._apply)
        self.group.toggled.connect(self._apply)
        self.filter.toggled.connect(self._filter_toggled)
        self.first.dateChanged.connect(self._dates_changed)
        self.last.dateChanged.connect(self._dates_changed)
        model.modelReset.connect(self._update_count)
        model.rowsInserted.connect(self._update_count)
        model.rowsRemoved.connect(self._update_count)

    # -- API -------------------------------------------------------------------------------
    def set_sort(self, key: str) -> None:
        """Choose the sort key (:attr:`PhotoListModel.SORT_KEYS`), as the combo box does."""
        i = self.sort.findData(key)
        if i < 0:
            raise ValueError(f"unknown sort key {key!r}")
        self.sort.setCurrentIndex(i)

    def set_date_range(self, first: QDate | None, last: QDate | None) -> None:
        """Show only photos taken from ``first`` to ``last`` (both inclusive); None and
        None: no filter."""
        self.first.blockSignals(True)
        self.last.blockSignals(True)
        if first is not None:
            self.first.setDate(first)
        if last is not None:
            self.last.setDate(last)
        self.first.blockSignals(False)
        self.last.blockSignals(False)
        self._dates_set = self._dates_set or first is not None or last is not None
        if self.filter.isChecked() == (first is not None or last is not None):
            self._apply()
        else:
            self.filter.setChecked(first is not None or last is not None)

    def refit(self) -> None:
        """New metadata: the days span the photos' dates, unless the person chose days."""
        if not self._dates_set:
            self.fit_range()
            if self.filter.isChecked():
                self._apply()

    def fit_range(self) -> None:
        """Set the days to the first and last day any photo was taken."""
        days = sorted(m.date for m in self.model.metadata.values() if m.date)
        if days:
            self.first.blockSignals(True)
            self.last.blockSignals(True)
            self.first.setDate(QDate.fromString(days[0], "yyyy-MM-dd"))
            self.last.setDate(QDate.fromString(days[-1], "yyyy-MM-dd"))
            self.first.blockSignals(False)
            self.last.blockSignals(False)

    # -- internals -------------------------------------------------------------------------
    def _filter_toggled(self, on: bool) -> None:
        if on and not self._dates_set:
            self.fit_range()  # (first use: every photo's day is inside)
        self._apply()

    def _dates_changed(self, *_a) -> None:
        self._dates_set = True
        if self.filter.isChecked():
            self._apply()

    def _range(self) -> tuple[str, str] | None:
        if not self.filter.isChecked():
            return None
        a = self.first.date().toString("yyyy-MM-dd")
        b = self.last.date().toString("yyyy-MM-dd")
        return (a, b) if a <= b else (b, a)

    def _apply(self, *_a) -> None:
        on = self.filter.isChecked()
        for w in (self.first, self.last):
            w.setEnabled(on)
        self.model.set_order(self.sort.currentData(), self.group.isChecked(), self._range())
        self.changed.emit()

    def _update_count(self, *_a) -> None:
        shown, total = len(self.model.paths()), len(self.model.all_paths())
        self.count.setText(f"{shown} of {total} photos" if shown != total else "")
