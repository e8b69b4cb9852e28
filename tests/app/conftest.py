"""Fixtures of the GUI tests (the offscreen platform is set in tests/conftest.py)."""

import pytest


@pytest.fixture
def window(qtbot, tmp_path):
    """A main window with private settings; indexing and learning are stopped afterwards."""
    pytest.importorskip("pytestqt")
    import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

    # isort: split
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.gui.theme import apply_theme
    from app.gui.window import MainWindow
    from tests.app._gui import INDEX_TIMEOUT

    apply_theme(QApplication.instance())
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    # the folder watcher indexes changes by itself: off unless a test turns it on (tests
    # that move files would otherwise race a re-index; tests/app/test_gui_watcher.py)
    settings.setValue("watchFolder", "false")
    win = MainWindow(settings, persist=False)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    yield win
    win.cancel_indexing()
    qtbot.waitUntil(lambda: not win.is_indexing() and not win.is_learning(), timeout=INDEX_TIMEOUT)
