"""Shared helpers for sub-commands: errors, JSON output, progress."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator
from typing import Any, NoReturn


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 2) -> NoReturn:
    raise CommandError(message, code)


def print_error(message: str) -> None:
    print(f"simile: error: {message}", file=sys.stderr)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as one compact JSON line (the last stdout line of a --json run); an
    undecodable byte of a file name as its ``\\udcXX`` escape
    (:func:`engine.index.files.json_text`)."""
    from engine.index.files import json_text

    sys.stdout.write(json_text(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Progress:
    """A progress reporter: a bar on a terminal, JSON lines with ``json_lines``,
    nothing otherwise. Output goes to stderr, except JSON lines (stdout)."""

    def __init__(self, label: str, *, json_lines: bool = False, stream=None):
        self.label = label
        self.json_lines = json_lines
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, done: int, total: int, item: str = "") -> None:
        now = time.monotonic()
        if self.json_lines:
            emit_json({"progress": {"stage": self.label, "done": done, "total": total}})
            return
        if not self.tty or (now - self._last < 0.1 and done < total):
            return
        self._last = now
        frac = done / total if total else 1.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        elapsed = now - self.start
        eta = elapsed / done * (total - done) if done else 0.0
        self.stream.write(
            f"\r{self.label} [{bar}] {done}/{total}  {elapsed:5.1f}s  eta {eta:5.1f}s "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.tty and not self.json_lines:
            self.stream.write("\n")
            self.stream.flush()


def drive(
    gen: Generator[Any, None, Any],
    progress: Progress,
    position: Callable[[int, Any], tuple[int, int]] = lambda i, item: (item.done, item.total),
) -> Any:
    """Run a progress-yielding engine generator to its end and return its value.

    ``position(i, item)`` turns the i-th yielded item into ``(done, total)`` for
    ``progress``; a ``ValueError`` from the engine becomes a one-line :class:`CommandError`.
    """
    i = 0
    try:
        while True:
            item = next(gen)
            i += 1
            progress.update(*position(i, item))
    except StopIteration as stop:
        return stop.value
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    finally:
        progress.close()
