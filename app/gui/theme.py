"""Look and feel: Fusion style with a dark palette (photos read best on dark grey)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from app import __version__

__all__ = ["apply_theme"]

_STYLE = """
QTabWidget::pane { border: none; border-top: 1px solid #34363b; }
QTabBar::tab { padding: 7px 18px; margin: 0; background: transparent; border: none;
    border-bottom: 2px solid transparent; color: #a9adb5; }
QTabBar::tab:hover { color: #e6e8ec; }
QTabBar::tab:selected { color: #ffffff; border-bottom: 2px solid #3d8fd6; }
QCheckBox::indicator { width: 14px; height: 14px; border: 1px solid #767a84;
    border-radius: 3px; background: #1f2023; }
QCheckBox::indicator:checked { background: #3d8fd6; border-color: #3d8fd6;
    image: url(@RES@/check.svg); }
QCheckBox::indicator:disabled { border-color: #4a4d54; background: #2a2b2f; }
QLabel#hint { color: #9a9ea6; }
QLabel#matchInfo { color: #d8dade; }
QFrame#banner { background: #5c2b2b; border-bottom: 1px solid #7a3a3a; }
QFrame#banner[kind="warning"] { background: #5a4a22; border-bottom: 1px solid #7a6630; }
QFrame#banner[kind="info"] { background: #24415e; border-bottom: 1px solid #2f5a80; }
QFrame#copyCard, QFrame#bestCard { background: #26272b; border: 1px solid #34363b;
    border-radius: 8px; }
QFrame#bestCard { border: 2px solid #d9a521; }
QLabel#bestBadge { color: #f0c040; font-weight: bold; }
QLabel#detail { color: #a9adb5; }
QStatusBar { border-top: 1px solid #34363b; }
QStatusBar QLabel { padding: 0 4px; }
QListView { background: #1f2023; }
QProgressBar { border: 1px solid #45474d; border-radius: 4px; text-align: center;
    background: #26272b; height: 16px; }
QProgressBar::chunk { background: #3d8fd6; border-radius: 3px; }
"""


def apply_theme(app: QApplication) -> None:
    """Style, palette, names (for QSettings) and the window icon."""
    from app.gui.window import RESOURCES

    app.setOrganizationName("Simile")
    app.setApplicationName("Simile")
    app.setApplicationVersion(__version__)
    app.setStyle("Fusion")
    p = QPalette()
    base, window, text = QColor(31, 32, 35), QColor(40, 41, 45), QColor(222, 224, 228)
    p.setColor(QPalette.ColorRole.Window, window)
    p.setColor(QPalette.ColorRole.WindowText, text)
    p.setColor(QPalette.ColorRole.Base, base)
    p.setColor(QPalette.ColorRole.AlternateBase, QColor(50, 52, 57))
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor(50, 52, 57))
    p.setColor(QPalette.ColorRole.ToolTipText, text)
    p.setColor(QPalette.ColorRole.Text, text)
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor(140, 144, 152))
    p.setColor(QPalette.ColorRole.Button, QColor(52, 54, 59))
    p.setColor(QPalette.ColorRole.ButtonText, text)
    p.setColor(QPalette.ColorRole.BrightText, QColor(255, 90, 90))
    p.setColor(QPalette.ColorRole.Highlight, QColor(61, 143, 214))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
    p.setColor(QPalette.ColorRole.Link, QColor(90, 170, 240))
    for role in (
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
        QPalette.ColorRole.WindowText,
    ):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(115, 118, 125))
    app.setPalette(p)
    app.setStyleSheet(_STYLE.replace("@RES@", RESOURCES.as_posix()))
    icon = RESOURCES / "simile.svg"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
