"""One process-wide switch for BLAS threading, shared by the engine's hot loops."""

from __future__ import annotations

import contextlib

_CONTROLLER = None


def single_threaded_blas() -> contextlib.AbstractContextManager:
    """Context limiting BLAS to one thread.

    The engine's hot loops (vocabulary-tree descent, per-pair matching, OASIS steps) are
    many small products; handing each to a BLAS thread pool costs far more than it saves,
    above all on a loaded machine (an OASIS step on 2,048 words took 34 ms instead of
    ~1 ms with 2 cores busy). threadpoolctl's limit is process-wide while the context is
    open, so it must never be held across a generator's ``yield``.
    """
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")
