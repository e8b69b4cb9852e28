"""Near-duplicate groups: threshold, side-by-side comparison, suggested best copy.

The best copy is the engine's suggestion (:func:`engine.workflows.duplicates.best_copy`,
the same as ``simile duplicates``); this module draws it.

Nothing is ever deleted silently: the only destructive action is “Move to trash”,
after a confirmation, through ``QFile.moveToTrash`` — and only for a photo the session
allows (:meth:`app.gui.session.Session.authorize`: inside the open folder as written, in
the duplicate groups shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QFile, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.gui.session import ActionRefused, Session
from app.gui.thumbnails import array_to_qimage

__all__ = ["CopyInfo", "DuplicatesView", "describe_copies"]


def __getattr__(name: str):
    """``sharpness`` lives in the engine now (imported only when asked for)."""
    if name == "sharpness":
        from engine.workflows.duplicates import sharpness

        return sharpness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class CopyInfo:
    """A copy as a card shows it: :class:`engine.workflows.duplicates.CopyStats` and its
    picture."""

    path: str
    width: int
    height: int
    file_size: int
    sharpness: float
    score: float | None
    image: QImage | None
    error: str | None = None

    @property
    def pixels(self) -> int:
        return self.width * self.height


def describe_copies(paths, scores=None) -> tuple[list[CopyInfo], int]:
    """Worker side: size, resolution and sharpness of each copy, loaded at
    :data:`engine.workflows.duplicates.KEEPER_SIDE` pixels
    (:func:`engine.workflows.duplicates.copy_stats`), and the one to keep
    (:func:`engine.workflows.duplicates.best_copy`, as ``simile duplicates``)."""
    from engine.workflows.duplicates import CopyStats, best_copy, copy_stats

    infos, stats = [], []
    for k, p in enumerate(paths):
        score = None if scores is None or k >= len(scores) else float(scores[k])
        st, img = copy_stats(p)
        image = None
        if img is not None:
            try:
                image = array_to_qimage(img)
            except Exception as exc:  # one broken copy must not hide the others
                st = CopyStats(st.path, 0, 0, 0, 0.0, str(exc))
        stats.append(st)
        infos.append(CopyInfo(st.path, st.width, st.height, st.file_size, st.sharpness, score,
                              image, st.error))  # fmt: skip
    return infos, best_copy(stats)


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


class _Card(QFrame):
    trash_requested = Signal(str)
    open_requested = Signal(str)

    def __init__(self, info: CopyInfo, best: bool, height: int = 400) -> None:
        super().__init__()
        self.setObjectName("bestCard" if best else "copyCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        badge = QLabel("★ Suggested best copy" if best else " ")
        badge.setObjectName("bestBadge" if best else "")
        lay.addWidget(badge)
        pic = QLabel()
        pic.setAlignment(Qt.AlignmentFlag.AlignCenter)
        pic.setFixedHeight(height)
        pic.setMinimumWidth(240)
        if info.image is not None:
            pm = QPixmap.fromImage(info.image).scaled(
                height * 4 // 3,
                height,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
            pic.setPixmap(pm)
        else:
            pic.setText(info.error or "unreadable")
        lay.addWidget(pic)
        name = QLabel(f"<b>{Path(info.path).name}</b>")
        name.setToolTip(info.path)
        lay.addWidget(name)
        if info.error is None:
            bits = [
                f"{info.width}×{info.height}",
                _human_size(info.file_size),
                f"sharpness {info.sharpness:.0f}",
            ]
            if info.score is not None:
                bits.append(f"similarity {info.score:.2f}")
            detail = QLabel(" · ".join(bits))
            detail.setObjectName("detail")
            lay.addWidget(detail)
        row = QHBoxLayout()
        open_btn = QPushButton("Open")
        open_btn.clicked.connect(lambda: self.open_requested.emit(info.path))
        trash = QPushButton("Move to Trash…")
        trash.setToolTip("Moves this file to the system trash after asking you")
        trash.clicked.connect(lambda: self.trash_requested.emit(info.path))
        row.addWidget(open_btn)
        row.addStretch(1)
        row.addWidget(trash)
        lay.addLayout(row)


class DuplicatesView(QWidget):
    """Groups on the left, the selected group's copies side by side on the right.

    Renders :class:`app.gui.session.DuplicatesModel` (``session.duplicates``): it keeps no
    groups of its own, and every trash request is authorised by the session first (the
    path must be inside the open folder and in the groups shown).
    """

    find_requested = Signal(float)  # threshold
    group_selected = Signal(int)
    open_requested = Signal(str)
    trashed = Signal(str)
    message = Signal(str)

    EMPTY_TEXT = "Open a folder, then find duplicates."

    def __init__(
        self, default_threshold: float = 0.5, parent=None, session: Session | None = None
    ) -> None:
        super().__init__(parent)
        self.session = session if session is not None else Session()
        self.threshold = QDoubleSpinBox()
        self.threshold.setRange(0.05, 1.0)
        self.threshold.setSingleStep(0.01)
        self.threshold.setDecimals(2)
        self.threshold.setValue(default_threshold)
        self.threshold.setToolTip("Minimum similarity for two photos to count as duplicates")
        self.find_btn = QPushButton("Find duplicates")
        self.find_btn.clicked.connect(lambda: self.find_requested.emit(self.threshold.value()))
        self.threshold.editingFinished.connect(
            lambda: self.find_requested.emit(self.threshold.value())
        )
        self.summary = QLabel(self.EMPTY_TEXT)
        top = QHBoxLayout()
        top.setContentsMargins(8, 6, 8, 6)
        top.addWidget(QLabel("Similarity threshold:"))
        top.addWidget(self.threshold)
        top.addWidget(self.find_btn)
        top.addSpacing(16)
        top.addWidget(self.summary, 1)

        self.group_list = QListWidget()
        self.group_list.setMinimumWidth(220)
        self.group_list.setIconSize(QSize(56, 56))
        self.group_list.setSpacing(3)
        self.thumbs = None  # set by the window: ThumbnailProvider for group icons
        self.group_list.currentRowChanged.connect(self._on_row)
        self.cards_host = QWidget()
        self.cards = QHBoxLayout(self.cards_host)
        self.cards.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.cards.setContentsMargins(12, 12, 12, 12)
        self.cards.setSpacing(14)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.cards_host)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        split = QSplitter()
        split.addWidget(self.group_list)
        split.addWidget(scroll)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 900])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addWidget(split, 1)
        self.session.duplicates.events.connect_slots(self)

    # -- what the model holds ------------------------------------------------------------------
    @property
    def groups(self) -> list:
        return self.session.duplicates.groups

    @property
    def infos(self) -> list[CopyInfo]:
        return self.session.duplicates.infos

    # -- model events ------------------------------------------------------------------------
    def empty_text(self) -> str:
        folder = self.session.folder
        if folder is None:
            return self.EMPTY_TEXT
        return f"No duplicates searched in {folder.name} yet: press Find duplicates."

    def _on_cleared(self, _event=None) -> None:
        self.find_btn.setEnabled(True)
        self._fill_list([])
        self._clear_cards()
        self.summary.setText(self.empty_text())

    def _on_busy(self, event) -> None:
        self.set_busy(f"Looking for near-duplicates at similarity ≥ {event.threshold:.2f}…")

    def _on_groups(self, event) -> None:
        self.set_groups(event.groups, event.threshold)

    def _on_copies(self, event) -> None:
        self.set_copies(event.infos, event.best)

    # -- rendering ---------------------------------------------------------------------------
    def set_busy(self, text: str) -> None:
        self.summary.setText(text)
        self.find_btn.setEnabled(False)

    def set_groups(self, groups, threshold: float | None = None) -> None:
        """Show ``groups`` and select the first (which asks for its copies)."""
        thr = self.threshold.value() if threshold is None else float(threshold)
        self.find_btn.setEnabled(True)
        groups = list(groups)
        self._clear_cards()
        self._fill_list(groups)
        n_photos = sum(len(g.paths) for g in groups)
        if groups:
            self.summary.setText(
                f"{len(groups)} groups, {n_photos} photos at similarity ≥ {thr:.2f}"
            )
            self.group_list.setCurrentRow(0)
        else:
            self.summary.setText(
                f"No near-duplicates at similarity ≥ {thr:.2f}. "
                "Lower the threshold to find looser matches."
            )

    def _fill_list(self, groups) -> None:
        self.group_list.blockSignals(True)
        self.group_list.clear()
        for i, g in enumerate(groups):
            n = len(g.paths)
            scores = list(getattr(g, "scores", []) or [])
            sim = f" · ≥ {min(scores):.2f}" if scores else ""
            item = QListWidgetItem(f"Group {i + 1}: {n} photos{sim}\n{Path(g.paths[0]).name}")
            item.setToolTip("\n".join(str(p) for p in g.paths))
            item.setData(Qt.ItemDataRole.UserRole, str(g.paths[0]))
            self.group_list.addItem(item)
            self._set_icon(item)
        self.group_list.blockSignals(False)

    def _set_icon(self, item: QListWidgetItem) -> None:
        if self.thumbs is None:
            return
        pm = self.thumbs.pixmap(item.data(Qt.ItemDataRole.UserRole))
        if pm is not None:
            item.setIcon(QIcon(pm))

    def on_thumbnail(self, path: str) -> None:
        for i in range(self.group_list.count()):
            item = self.group_list.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == path:
                self._set_icon(item)

    def set_copies(self, infos: list[CopyInfo], best: int) -> None:
        self._clear_cards()
        for i, info in enumerate(infos):
            card = _Card(info, i == best)
            card.trash_requested.connect(self._confirm_trash)
            card.open_requested.connect(self.open_requested)
            self.cards.addWidget(card)
        self.cards.addStretch(1)

    def _clear_cards(self) -> None:
        while self.cards.count():
            item = self.cards.takeAt(0)
            w = item.widget()
            if w is not None:
                w.hide()
                w.deleteLater()

    def _on_row(self, row: int) -> None:
        if 0 <= row < len(self.groups):
            self.group_selected.emit(row)

    # -- the one destructive action ----------------------------------------------------------
    def _allowed(self, path: str) -> str | None:
        """The path to trash if the session allows it (else None: it said why)."""
        try:
            return self.session.authorize("trash", path, among="duplicates")
        except ActionRefused:
            return None

    def _confirm_trash(self, path: str) -> None:
        path = self._allowed(path)
        if path is None:
            return
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Move to Trash")
        box.setText(f"Move “{Path(path).name}” to the trash?")
        box.setInformativeText(f"{path}\n\nYou can restore it from the system trash.")
        box.setStandardButtons(QMessageBox.StandardButton.Cancel)
        move = box.addButton("Move to Trash", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is not move:
            return
        # asked again: the session may have changed while the question was open
        path = self._allowed(path)
        if path is None:
            return
        ok = QFile.moveToTrash(path)
        ok = ok[0] if isinstance(ok, tuple) else ok
        if not ok:
            self.message.emit(f"Could not move {Path(path).name} to the trash (no trash here?).")
            return
        self.trashed.emit(path)
