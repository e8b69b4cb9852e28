"""The argument parser of every ``simile`` entry point: a bad command line is one line."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["Parser"]


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (and a one-line hint) and exit status 2, instead of
    the whole usage block: what a person needs is what was wrong and where to look."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(see '{self.prog} --help')\n")
