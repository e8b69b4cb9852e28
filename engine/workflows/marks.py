"""A person's relevance marks: thumbs up / down on search results, kept in the index.

:class:`Mark` is one judgement; :func:`add_marks`, :func:`load_marks` and
:func:`clear_marks` keep them in the index's key-value table, :func:`read_feedback_file`
reads them from a file, and :func:`triplets_from_marks` turns them into the
``(query, relevant, other)`` triplets :func:`engine.workflows.feedback.learn` fits OASIS on.

Feedback file format
--------------------
CSV with a header ``query,result,relevant`` (``relevant``: 1/0, yes/no, true/false,
+/-, up/down), or JSON: ``{"marks": [{"query": path, "result": path, "relevant": bool}]}``
(a bare list of such objects is accepted too). Relative paths are relative to the
collection folder.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.index import keys

if TYPE_CHECKING:  # pragma: no cover
    from engine.collection import Collection

__all__ = [
    "MARKS_KEY",
    "Mark",
    "add_marks",
    "clear_marks",
    "load_marks",
    "read_feedback_file",
    "triplets_from_marks",
]

#: Key-value entry of the index that holds the marks (a JSON list;
#: :data:`engine.index.keys.MARKS_KEY`).
MARKS_KEY = keys.MARKS_KEY
_TRUE = {"1", "yes", "y", "true", "t", "+", "up", "relevant"}
_FALSE = {"0", "no", "n", "false", "f", "-", "down", "irrelevant", "not relevant"}


@dataclass(frozen=True)
class Mark:
    """A person's judgement of one search result.

    Attributes
    ----------
    query, result : str
        Absolute paths of the query image and the judged result.
    relevant : bool
        Thumbs up (True) or down (False).
    """

    query: str
    result: str
    relevant: bool


def _abs(path: str | os.PathLike, base: Path | None = None) -> str:
    p = Path(os.fspath(path)).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    return os.path.abspath(p)


def load_marks(collection: Collection) -> list[Mark]:
    """Relevance marks stored in the collection's index (oldest first)."""
    raw = collection.store.get_kv(MARKS_KEY)
    if not raw:
        return []
    data = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    return [Mark(m["query"], m["result"], bool(m["relevant"])) for m in data]


def add_marks(collection: Collection, marks: Iterable[Mark]) -> int:
    """Store marks in the index; a later mark of the same (query, result) replaces an
    earlier one. Returns the number of marks now stored."""
    current = {(m.query, m.result): m for m in load_marks(collection)}
    for m in marks:
        m = Mark(_abs(m.query), _abs(m.result), bool(m.relevant))
        current[(m.query, m.result)] = m
    payload = [m.__dict__ for m in current.values()]
    collection.store.set_kv(MARKS_KEY, json.dumps(payload))
    return len(payload)


def clear_marks(collection: Collection) -> None:
    """Forget every stored mark."""
    collection.store.set_kv(MARKS_KEY, "[]")


def _parse_relevant(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{where}: relevant must be yes/no (1/0, true/false, +/-), got {value!r}")


def read_feedback_file(path: str | os.PathLike, base: str | os.PathLike) -> list[Mark]:
    """Read marks from a CSV or JSON feedback file (format in the module docstring).

    Parameters
    ----------
    path : path-like
        The feedback file.
    base : path-like
        Folder that relative paths in the file are relative to.

    Raises
    ------
    ValueError
        A malformed file; the message names the file, line or entry and the problem.
    """
    path = Path(path)
    base = Path(base)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read feedback file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = _text_line(exc.object[: exc.start])
        raise ValueError(f"{path}: line {line}: not UTF-8 text") from None
    if "\x00" in text:
        raise ValueError(f"{path}: line {_text_line(text[: text.index(chr(0))])}: NUL byte")
    marks: list[Mark] = []
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        except RecursionError:
            raise ValueError(f"{path}: invalid JSON (nested too deeply)") from None
        items = data.get("marks") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ValueError(f'{path}: expected {{"marks": [...]}} or a list of marks')
        starts = _mark_lines(text)
        for k, item in enumerate(items):
            line = f" (line {starts[k]})" if k < len(starts) else ""
            where = f"{path}: mark {k}{line}"
            if not isinstance(item, dict) or not {"query", "result", "relevant"} <= set(item):
                raise ValueError(f"{where}: needs query, result and relevant")
            q = _path_value(item["query"], where, "query")
            r = _path_value(item["result"], where, "result")
            rel = _parse_relevant(item["relevant"], where)
            marks.append(Mark(_abs(q, base), _abs(r, base), rel))
        return marks
    reader = csv.DictReader(text.splitlines())
    fields = {f.strip().lower() for f in (reader.fieldnames or [])}
    if not {"query", "result", "relevant"} <= fields:
        raise ValueError(f"{path}: CSV header must name the columns query,result,relevant")
    for k, row in enumerate(reader, start=2):
        where = f"{path}: line {k}"
        row = {(key or "").strip().lower(): (v or "").strip() for key, v in row.items()}
        q = _path_value(row["query"], where, "query")
        r = _path_value(row["result"], where, "result")
        rel = _parse_relevant(row["relevant"], where)
        marks.append(Mark(_abs(q, base), _abs(r, base), rel))
    return marks


def _text_line(prefix: str | bytes) -> int:
    """1-based line number of the position right after ``prefix``."""
    return prefix.count("\n" if isinstance(prefix, str) else b"\n") + 1


def _mark_lines(text: str) -> list[int]:
    """Lines where the marks of a JSON feedback file start (each mark's ``"query"`` key),
    for messages; a best effort that never raises."""
    return [_text_line(text[: m.start()]) for m in re.finditer(r'"query"\s*:', text)]


def _path_value(value: Any, where: str, name: str) -> str:
    """A photo path of a feedback file: a non-empty string."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{where}: {name} is empty (a photo path is needed)")
    if not isinstance(value, str):
        got = "nothing" if value is None else type(value).__name__
        raise ValueError(f"{where}: {name} must be a photo path, got {got}")
    return value


def triplets_from_marks(
    paths: Sequence[Path], marks: Sequence[Mark], rng: np.random.Generator
) -> np.ndarray:
    """(T, 3) triplets (query, relevant, other) from marks. A query with thumbs-down
    results pairs each relevant with each of them; without any, random images of the
    collection serve as the non-relevant side (similarity is rare).

    Parameters
    ----------
    paths : sequence of Path
        The collection's images; the triplets index this sequence.
    marks : sequence of Mark
        Marks whose query or result is not in ``paths`` (or is the query itself) are
        ignored.
    rng : numpy.random.Generator
        Draws the random non-relevant images (up to 4 of 8 draws per relevant one).

    Returns
    -------
    (T, 3) int64 ndarray
        Rows ``(query, relevant, other)`` of indices into ``paths``.
    """
    row = {str(p): k for k, p in enumerate(paths)}
    pos: dict[int, list[int]] = {}
    neg: dict[int, list[int]] = {}
    for m in marks:
        q, r = row.get(m.query), row.get(m.result)
        if q is None or r is None or q == r:
            continue
        (pos if m.relevant else neg).setdefault(q, []).append(r)
    out = []
    for q, plist in pos.items():
        nlist = neg.get(q) or []
        blocked = set(plist) | {q}
        for p in plist:
            if nlist:
                out += [(q, p, n) for n in nlist]
            else:
                cand = rng.integers(0, len(paths), 8)
                out += [(q, p, int(n)) for n in cand if int(n) not in blocked][:4]
    return np.asarray(out, np.int64).reshape(-1, 3)
