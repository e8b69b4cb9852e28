"""Driving the engine's progress generators to their end."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any


def run_to_end(gen: Generator[Any, None, Any]) -> Any:
    """Exhaust a progress-yielding generator and return its ``StopIteration`` value
    (the non-generator form of every ``*_iter`` job)."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value
