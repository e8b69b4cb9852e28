"""Work around a PySide6 reference-count bug on CPython < 3.12.

PySide6 6.12.0 returns ``None`` from every ``void`` C++ method (``QRect.setWidth``,
``QPainter.save``, …) without taking a new reference. From CPython 3.12 on, ``None``
is immortal (PEP 683) and that is harmless; on 3.11 each call drops one reference,
and after a few thousand calls (one repaint of the thumbnail grid) ``None`` is
freed and the interpreter aborts with ``Fatal Python error: none_dealloc`` (the
same happens to ``True``/``False``: ``bool_dealloc``, seen after long runs).

:func:`install` detects the leak with a short probe and, only if present, gives
``None``, ``True`` and ``False`` a very large reference count — exactly how
CPython 3.12 makes objects immortal — so the leaked decrements can never reach
zero (2**60 of them would be needed).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["install", "leaks_none"]

_IMMORTAL = 1 << 60
_installed = False


def leaks_none(calls: int = 64) -> bool:
    """True if a void PySide6 method loses a reference to ``None``."""
    from PySide6.QtCore import QRect

    r = QRect()
    before = sys.getrefcount(None)
    for _ in range(calls):
        r.setWidth(1)
    return sys.getrefcount(None) < before - calls // 2


def install() -> bool:
    """Make ``None`` effectively immortal if this PySide6 build needs it; True if applied."""
    global _installed
    if _installed:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if not leaks_none():
        return False
    # ob_refcnt is the first field (Py_ssize_t) of every object; id() is its address.
    # True and False are returned the same way by some bindings (seen: bool_dealloc).
    for singleton in (None, True, False):
        refcnt = ctypes.c_ssize_t.from_address(id(singleton))
        refcnt.value += _IMMORTAL
    _installed = True
    return True
