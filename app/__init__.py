"""Simile desktop application and command line (PySide6 GUI lives in :mod:`app.gui`)."""

from engine import __version__

__all__ = ["__version__"]
