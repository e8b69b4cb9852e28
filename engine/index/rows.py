"""Rows of the search data, looked up lazily: their paths and the row of a store id.

A one-shot query at 100,000 photos must not build 100,000 ``Path`` objects or a dict of
100,000 ids to use a few of them; these stand for such a list and dict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RowOfId", "RowPaths"]


class RowPaths(Sequence[Path]):
    """The path of every row of the search data: the strings the catalogue holds, made
    :class:`~pathlib.Path` one at a time when read (100,000 ``Path`` objects made at
    once took 0.9 s of a one-shot query)."""

    __slots__ = ("_paths",)

    def __init__(self, paths: list[str]) -> None:
        self._paths = paths

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [Path(p) for p in self._paths[i]]
        return Path(self._paths[i])

    def __iter__(self) -> Iterator[Path]:
        return map(Path, self._paths)


class RowOfId(Mapping[int, int]):
    """The row of every store id of the search data: a binary search in its ascending
    ids (a dict of 100,000 ids took 30 ms of a one-shot query to build)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: np.ndarray) -> None:
        self._ids = np.asarray(ids, np.int64)

    def _find(self, key: Any) -> int | None:
        if not isinstance(key, int | np.integer) or not self._ids.size:
            return None
        r = int(np.searchsorted(self._ids, key))
        return r if r < self._ids.size and self._ids[r] == key else None

    def __getitem__(self, key: Any) -> int:
        r = self._find(key)
        if r is None:
            raise KeyError(key)
        return r

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not None

    def __len__(self) -> int:
        return int(self._ids.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())
