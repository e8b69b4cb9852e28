"""Registry of the main window's views (tabs).

A view is a widget made by ``factory(window)``; the window shows the registered
views as tabs in ``order``. Built-in: ``library`` (grid + results), ``matches``
(correspondences) and ``duplicates``. Another module (e.g. ``app/gui/categories.py``
from the clustering work) adds a tab with::

    from app.gui.views import register_view
    register_view("categories", "Categories", make_categories_view, order=40)

and the window imports the modules listed in :data:`PLUGIN_MODULES` if they exist.
A view keeps its state in the window's Qt-free session model (``window.session``, see
:mod:`app.gui.session`) and renders its events (``session.events.collection_opened``,
``session.events.folder_opened``, …); it runs work with
``window.run_worker(..., token=window.session.begin(topic))`` so that results of an
earlier folder or request are dropped. The window's Qt signals
``collection_opened(collection)`` and ``indexing_finished(collection)`` remain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PLUGIN_MODULES", "ViewSpec", "register_view", "registered_views"]

#: optional modules that register extra views when imported
PLUGIN_MODULES = ("app.gui.categories",)


@dataclass(frozen=True)
class ViewSpec:
    name: str
    title: str
    factory: Callable[[Any], Any]
    order: int = 100
    tooltip: str = ""


_REGISTRY: dict[str, ViewSpec] = {}


def register_view(
    name: str, title: str, factory: Callable[[Any], Any], *, order: int = 100, tooltip: str = ""
) -> None:
    """Add (or replace) the view ``name``; ``factory(window) -> QWidget``."""
    if not name.isidentifier():
        raise ValueError(f"name must be an identifier, got {name!r}")
    _REGISTRY[name] = ViewSpec(name, title, factory, order, tooltip)


def registered_views() -> list[ViewSpec]:
    return sorted(_REGISTRY.values(), key=lambda v: (v.order, v.name))
