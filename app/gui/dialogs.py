"""Small windows: About (with licences), skipped-files panel, full-size viewer."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QPixmap, QShortcut
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGraphicsPixmapItem,
    QGraphicsScene,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.gui.matches import ZoomView
from app.gui.models import shown_name
from app.gui.state import licences_file
from engine.index.files import display_path

__all__ = ["AboutDialog", "ImageViewer", "ProblemsPanel"]

_ABOUT = """\
# Simile {version}

Search and organise a folder of photos by what is in them.

Double-click a photo (or select it and press Enter) to find similar ones; *Why do they
match?* shows the corresponding local features (SIFT) found by the pyramid match kernel
(Grauman & Darrell); WTA hashing (Yagnik et al.) gives fast approximate search.

## Licence

Simile is distributed under the BSD 3-Clause licence.

## Third-party software

- Qt 6 and PySide6 — LGPLv3
- OpenCV — Apache 2.0
- NumPy, SciPy, scikit-image, scikit-learn — BSD 3-Clause
- Pillow — MIT-CMU (HPND)

"""


def _demo_licences_markdown() -> str:
    """The demo photos' licence file, one heading level down (it is a sub-section)."""
    f = licences_file()
    if f is None:
        return "## Demo photographs\n\nThe demo collection is not installed.\n"
    lines = f.read_text(encoding="utf-8").splitlines()
    return "\n".join("#" + ln if ln.startswith("#") else ln for ln in lines) + "\n"


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Simile")
        self.resize(560, 560)
        text = QTextBrowser()
        text.setOpenExternalLinks(True)
        text.setMarkdown(_ABOUT.format(version=__version__) + _demo_licences_markdown())
        self.text = text
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(text)
        lay.addWidget(buttons)


class ProblemsPanel(QDialog):
    """Files that were skipped or could not be read, with the reason."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Skipped files")
        self.resize(720, 380)
        self.label = QLabel()
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["File", "Reason"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(0, 260)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.label)
        lay.addWidget(self.table, 1)
        lay.addWidget(buttons)

    def set_problems(self, problems: list[tuple[str, str]]) -> None:
        self.table.setRowCount(len(problems))
        for r, (path, reason) in enumerate(problems):
            item = QTableWidgetItem(shown_name(path))
            item.setToolTip(display_path(path))
            self.table.setItem(r, 0, item)
            self.table.setItem(r, 1, QTableWidgetItem(reason))
        self.label.setText(
            f"{len(problems)} file(s) were skipped. They stay where they are; Simile only "
            "reads them."
            if problems
            else "No files were skipped."
        )


class ImageViewer(QDialog):
    """A photo at full size with wheel zoom and drag-to-pan (Esc closes)."""

    def __init__(self, path: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        name = shown_name(path)
        self.setWindowTitle(name)
        self.resize(1000, 720)
        self.scene = QGraphicsScene(self)
        self.view = ZoomView(self.scene)
        self.caption = QLabel(f"Loading {name}…")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.view, 1)
        lay.addWidget(self.caption)
        QShortcut(QKeySequence("F"), self, activated=self.view.fit)

    def set_image(self, qimage, info: str) -> None:
        item = QGraphicsPixmapItem(QPixmap.fromImage(qimage))
        item.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        self.scene.clear()
        self.scene.addItem(item)
        self.caption.setText(info)
        self.view.fit()
