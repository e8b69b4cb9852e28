"""Lazy re-exports of a module's public names (PEP 562), as scikit-image's
``lazy_loader.attach`` does: a name is imported from its home module on first use, so
importing the package (or ``engine.collection``) loads no heavy dependency it does not
need.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["attach"]


def attach(
    module: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``module`` for lazily re-exported names.

    Parameters
    ----------
    module : str
        The module's own name (``__name__``).
    names : mapping of str to str
        Public name -> the absolute name of the module that defines it.

    Returns
    -------
    (__getattr__, __dir__)
        To assign at module level. A name is looked up in its home module once, then
        kept in ``module``'s globals; an unknown name raises :class:`AttributeError`.
    """

    def __getattr__(name: str) -> Any:
        try:
            home = names[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(home), name)
        vars(sys.modules[module])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module])) | set(names))

    return __getattr__, __dir__
