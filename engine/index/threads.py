"""Threads for the numpy-bound work of an index refresh (model fits, batch encoding,
geometric checks): they release the GIL in their large operations, so threads use the
machine's cores without copying any features to other processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ENCODE_THREADS", "thread_map"]

#: Threads of :func:`thread_map` (and of the hyperplane cache after a refresh).
ENCODE_THREADS = max(1, min(4, os.cpu_count() or 1))


def thread_map(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` on up to :data:`ENCODE_THREADS` threads (in order).

    The model fitting and batch encoding of an index refresh are numpy-bound and release
    the GIL in their large operations, so threads use the machine's cores without copying
    any features to other processes.

    Parameters
    ----------
    fn : callable
        Applied to every item.
    items : sequence

    Returns
    -------
    list
        ``fn(item)`` of every item, in the order of ``items``.
    """
    items = list(items)
    n = min(ENCODE_THREADS, len(items))
    if n <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="simile-encode") as ex:
        return list(ex.map(fn, items))
