"""Simile's PySide6 desktop window (entry point: :func:`app.gui.main.run_gui`).

Qt-free state lives in :mod:`app.gui.session` (the session model: everything a
window shows, its events, the one staleness rule for background results and the guard
on file actions) and :mod:`app.gui.state` (settings, ETA, export); item models, views
and the single threading helper (:mod:`app.gui.workers`) are Qt.
"""

import os
import sys

# superqt's widgets (QElidingLabel) are built on qtpy: make it bind the PySide6 the app
# uses, not another binding that happens to be installed
os.environ.setdefault("QT_API", "pyside6")

from app.gui import _pyside_fix

_pyside_fix.install()

# The GUI thread waits for the GIL at most this long when a worker thread runs
# Python code (default 5 ms): a shorter slice keeps the event loop responsive.
if sys.getswitchinterval() > 0.001:
    sys.setswitchinterval(0.001)
