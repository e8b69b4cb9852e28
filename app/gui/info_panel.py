"""The info panel: what the selected photo records about itself.

Shows the file name and folder, then date taken, camera, lens, exposure, dimensions and
place (GPS) from the catalogue (the session's ``metadata``, read off the GUI thread:
nothing here touches the photo file). A field the photo does not record is left out; a
photo whose metadata was not read yet (it is being indexed) says so.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QFrame, QLabel, QVBoxLayout, QWidget

from engine.index.files import display_path

__all__ = ["InfoPanel", "info_rows"]


def _place(meta) -> str:
    lat, lon = meta.latitude, meta.longitude
    ns, ew = ("N" if lat >= 0 else "S"), ("E" if lon >= 0 else "W")
    text = f"{abs(lat):.5f}° {ns}, {abs(lon):.5f}° {ew}"
    if meta.altitude is not None:
        text += f", {meta.altitude:g} m"
    return text


def _when(taken: str) -> str:
    """``2021-06-05T14:03:22+02:00`` as ``2021-06-05 14:03:22 (UTC+02:00)``."""
    day_time, offset = taken[:19], taken[19:]
    text = day_time.replace("T", " ")
    return f"{text} (UTC{offset})" if offset else text


def info_rows(meta) -> list[tuple[str, str]]:
    """``(label, value)`` of what ``meta`` (a ``PhotoMetadata``) knows, in display order.

    Parameters
    ----------
    meta : PhotoMetadata or None

    Returns
    -------
    list of (str, str)
    """
    if meta is None:
        return []
    rows = []
    if meta.date_taken:
        rows.append(("Taken", _when(meta.date_taken)))
    if meta.camera:
        rows.append(("Camera", meta.camera))
    if meta.lens:
        rows.append(("Lens", meta.lens))
    if meta.exposure:
        rows.append(("Exposure", meta.exposure))
    if meta.width and meta.height:
        mp = meta.width * meta.height / 1e6
        size = f"{meta.width} × {meta.height}"
        rows.append(("Size", f"{size} ({mp:.1f} MP)" if mp >= 0.1 else size))
    if meta.has_gps:
        rows.append(("Place", _place(meta)))
    return rows


class InfoPanel(QFrame):
    """The selected photo's name, folder and metadata (:func:`info_rows`)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("infoPanel")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.title = QLabel("INFO")
        self.name = QLabel("")
        self.name.setWordWrap(True)
        self.name.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folder = QLabel("")
        self.folder.setObjectName("hint")
        self.folder.setWordWrap(True)
        self.hint = QLabel("Select a photo to see when and how it was taken.")
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        self.form_host = QWidget()
        self.form = QFormLayout(self.form_host)
        self.form.setContentsMargins(0, 4, 0, 0)
        self.form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.form.setHorizontalSpacing(10)
        self.form.setVerticalSpacing(3)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 8)
        lay.setSpacing(2)
        for w in (self.title, self.name, self.folder, self.form_host, self.hint):
            lay.addWidget(w)
        lay.addStretch(1)
        #: the photo shown (None: nothing selected)
        self.path: str | None = None
        self.clear()

    def clear(self) -> None:
        """Nothing selected."""
        self.path = None
        self.name.setText("")
        self.folder.setText("")
        self._set_rows([])
        self.hint.setText("Select a photo to see when and how it was taken.")
        self.hint.show()

    def show_photo(self, path, meta, root: Path | None = None) -> None:
        """Show ``path`` and its metadata ``meta`` (None: not read yet); ``root`` (the
        open folder) shortens the folder shown."""
        self.path = str(path)
        p = Path(path)
        self.name.setText(f"<b>{display_path(p.name)}</b>")
        folder = p.parent
        if root is not None:
            try:
                rel = folder.relative_to(root)
                folder = Path(root.name) / rel if str(rel) != "." else Path(root.name)
            except ValueError:
                pass
        self.folder.setText(display_path(folder))
        rows = info_rows(meta)
        self._set_rows(rows)
        if meta is None:
            self.hint.setText("Its details are read while the folder is indexed.")
        elif not rows:
            self.hint.setText("This photo records no date, camera or place.")
        elif not meta.date_taken and not meta.camera:
            self.hint.setText("No date taken or camera recorded.")
        else:
            self.hint.setText("")
        self.hint.setVisible(bool(self.hint.text()))

    def rows(self) -> list[tuple[str, str]]:
        """The ``(label, value)`` pairs shown (for tests and screen readers)."""
        out = []
        for i in range(self.form.rowCount()):
            label = self.form.itemAt(i, QFormLayout.ItemRole.LabelRole)
            value = self.form.itemAt(i, QFormLayout.ItemRole.FieldRole)
            if label is not None and value is not None:
                out.append((label.widget().text(), value.widget().text()))
        return out

    def _set_rows(self, rows: list[tuple[str, str]]) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        for label, value in rows:
            v = QLabel(value)
            v.setWordWrap(True)
            v.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            k = QLabel(label)
            k.setObjectName("hint")
            self.form.addRow(k, v)
        self.form_host.setVisible(bool(rows))
