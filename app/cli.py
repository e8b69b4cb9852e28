"""The ``simile`` command.

``simile`` with no sub-command, or with a folder, opens the desktop window.
Sub-commands run headless; each lives in ``app/commands/<name>.py`` and exposes
``add_parser(subparsers)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from app import __version__
from app._argparse import Parser

# Order here is the order in ``simile --help``.
COMMANDS = (
    "match",
    "index",
    "query",
    "duplicates",
    "eval",
    "cluster",
    "classify",
    "learn",
    "export",
)


def _command_names() -> list[str]:
    """The sub-commands present (found without importing them)."""
    return [n for n in COMMANDS if importlib.util.find_spec(f"app.commands.{n}") is not None]


def _command_modules(only: str | None = None):
    for name in _command_names() if only is None else [only]:
        yield name, importlib.import_module(f"app.commands.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every sub-command, or of sub-command ``only`` alone (a command line
    naming one imports that one only: a one-shot ``simile query`` does not pay for the
    modules of the others)."""
    parser = Parser(
        prog="simile",
        description="Search and organise a folder of photos by what is in them.",
        epilog="Run 'simile FOLDER' (or plain 'simile') to open the desktop window.",
    )
    parser.add_argument("--version", action="version", version=f"simile {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in _command_modules(only):
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    as_program = argv is None  # the ``simile`` process itself (tests pass argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    names = set(_command_names())
    if not argv or (argv[0] not in names and argv[0] not in ("-h", "--help", "--version")):
        # No sub-command: the GUI (``simile``, ``simile FOLDER``, ``simile FOLDER --screenshot``).
        return gui_main(argv)
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 never stops
        try:  # a listing: its undecodable bytes print as U+FFFD / '?'
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):  # a replaced stream (tests, pipes in IDEs)
            pass
    parser = build_parser(argv[0] if argv[0] in names else None)
    args = parser.parse_args(argv)
    if as_program:  # a one-shot process: freed arrays are reused, not page-faulted again
        from engine.index.ingest import keep_heap_warm

        keep_heap_warm()
    module = importlib.import_module(f"app.commands.{args.command}")
    from app.commands._common import CommandError, print_error

    try:
        return int(module.run(args) or 0)
    except CommandError as exc:
        print_error(str(exc))
        return exc.code
    except KeyboardInterrupt:
        print("simile: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an index problem met after opening: one line, no traceback
        from app.commands._collection import disk_full, store_error_message
        from engine.index.store_errors import StoreError

        folder, index = getattr(args, "folder", None), getattr(args, "index", None)
        if isinstance(exc, StoreError):
            print_error(store_error_message(exc, folder, index))
            return 1
        if disk_full(exc):
            print_error(f"the disk is full (writing the index of {folder}); free some space")
            return 1
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is not None:
            # a path the system refuses (too long, a loop, ...): what and why, one line
            from engine.index.files import display_path

            print_error(f"{display_path(str(exc.filename))}: {exc.strerror}")
            return 2
        raise
    except BrokenPipeError:  # `simile ... | head`: the reader left, which is fine
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush
    does not print a second BrokenPipeError."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def gui_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the desktop window (also the ``simile-gui`` script)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from app.gui.main import run_gui  # Qt is imported only here

    return run_gui(argv)


if __name__ == "__main__":
    sys.exit(main())
