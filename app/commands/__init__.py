"""Headless sub-commands of ``simile``; see :mod:`app.cli`."""
