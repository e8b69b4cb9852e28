"""Qt-free pieces of the desktop app: search settings, progress/ETA, export, paths.

Nothing here imports Qt, so it is testable and reusable without a display.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "METHOD_TIPS",
    "EtaEstimator",
    "SearchSettings",
    "copy_results",
    "demo_folder",
    "demo_index_dir",
    "disk_full_message",
    "export_results",
    "format_duration",
    "plain_error",
    "readonly_message",
    "repair_offer",
    "repaired_message",
    "scratch_dir",
]

#: Retrieval methods offered in the GUI: id -> label, in plain words. ``learned`` is
#: shown only when the collection reports a trained model; ``wta`` only where it ranks
#: differently from ``vocabulary`` (folders above
#: :data:`engine.index.candidates.EXHAUSTIVE_LIMIT` photos).
METHODS: dict[str, str] = {
    "hybrid": "Best match (recommended)",
    "uniform": "Looks alike · uniform bins",
    "vocabulary": "Looks alike",
    "wta": "Looks alike · fast hashing",
    "learned": "Taught by you",
}
#: One sentence on each method, for tooltips.
METHOD_TIPS: dict[str, str] = {
    "hybrid": "Photos of the same object or place: the closest ones by the pyramid match of "
    "their local features, checked geometrically",
    "uniform": "Photos that share many local features, matched in uniform bins (the pyramid "
    "match kernel of Grauman & Darrell)",
    "vocabulary": "Photos that share many local features, matched in a vocabulary learned "
    "from this folder (fast; no geometric check)",
    "wta": "As 'Looks alike', with candidates from winner-take-all hashes: faster in large "
    "folders",
    "learned": "Similar in the way you taught Simile with your marks, keywords or subfolders",
}
DEFAULT_METHOD = "hybrid"
MAX_RESULTS = 500


@dataclass
class SearchSettings:
    """What a search uses: method id and number of results (validated)."""

    method: str = DEFAULT_METHOD
    top: int = 20

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"method must be one of {', '.join(map(repr, METHODS))}, got {self.method!r}"
            )
        if not 1 <= int(self.top) <= MAX_RESULTS:
            raise ValueError(f"top must be in [1, {MAX_RESULTS}], got {self.top!r}")


@dataclass
class EtaEstimator:
    """Estimate the time left of a job from its progress.

    Uses the average rate since the first item that needed work (items that are
    skipped quickly — e.g. already indexed — would otherwise make the first
    estimate far too optimistic, so the rate is a smoothed per-item time).
    """

    alpha: float = 0.15
    _t0: float | None = None
    _last_t: float | None = None
    _last_done: int = 0
    _per_item: float | None = None
    clock: object = field(default=time.monotonic, repr=False)

    def reset(self) -> None:
        self._t0 = self._last_t = None
        self._last_done = 0
        self._per_item = None

    def update(self, done: int, total: int) -> float | None:
        """Record progress; return the estimated seconds left, or None if unknown."""
        now = self.clock()  # type: ignore[operator]
        if self._last_t is None:
            self._t0 = self._last_t = now
            self._last_done = done
            return None
        step = done - self._last_done
        if step > 0:
            per = (now - self._last_t) / step
            self._per_item = (
                per
                if self._per_item is None
                else (1 - self.alpha) * self._per_item + self.alpha * per
            )
            self._last_t = now
            self._last_done = done
        if self._per_item is None or total <= 0:
            return None
        return max(0.0, (total - done) * self._per_item)


def format_duration(seconds: float | None) -> str:
    """``75`` -> ``"1 min 15 s"``; None -> ``"estimating…"``."""
    if seconds is None or not math.isfinite(seconds):
        return "estimating…"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def export_results(
    path: str | Path,
    query: str | Path,
    method: str,
    hits: Sequence,
    *,
    ranks: Sequence[int] | None = None,
    hidden: int = 0,
    filter_text: str = "",
) -> Path:
    """Write ranked results to CSV or JSON, chosen by the file suffix.

    Parameters
    ----------
    path : path ending in .csv or .json
    query, method : the photo searched with and the method that ranked the results
    hits : sequence of (path, score) pairs or of hits
        Objects with ``path``, ``score`` and optionally ``probability`` (the calibrated
        probability of showing the same object or place) and ``label``.
    ranks : sequence of int, optional
        Each hit's rank (default 1, 2, ...: a filter that hid some leaves gaps).
    hidden, filter_text : how many results a filter left out, and the filter in words
        (JSON only).

    CSV columns: ``query, method, rank, path, score, probability, label`` (one row per
    result; ``probability`` empty when the method has no calibration). JSON: ``{"query",
    "method", "filter", "hidden", "results": [{"rank", "path", "score", "probability",
    "label"}]}``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise ValueError(f"path must end in .csv or .json, got {path.name!r}")
    if ranks is not None and len(ranks) != len(hits):
        raise ValueError(f"ranks must give one rank per hit ({len(hits)}), got {len(ranks)}")
    rows = []
    for i, h in enumerate(hits):
        if isinstance(h, tuple | list):
            p, score, prob, label = (*h, None, "")[:4]  # (path, score[, prob[, label]])
        else:
            p, score = h.path, h.score
            prob, label = getattr(h, "probability", None), getattr(h, "label", "") or ""
        rows.append({
            "rank": int(ranks[i]) if ranks is not None else i + 1,
            "path": str(p),
            "score": float(score),
            "probability": None if prob is None else round(float(prob), 4),
            "label": str(label or ""),
        })  # fmt: skip
    if suffix == ".json":
        from engine.index.files import json_text

        doc = {
            "query": str(query),
            "method": method,
            "filter": filter_text or None,
            "hidden": int(hidden),
            "results": rows,
        }
        path.write_text(json_text(doc, indent=2) + "\n", encoding="utf-8")
    else:
        fields = ["query", "method", "rank", "path", "score", "probability", "label"]
        # (a file name that is not UTF-8 written as its own bytes)
        with path.open("w", newline="", encoding="utf-8", errors="surrogateescape") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields)
            writer.writeheader()
            for r in rows:
                prob = "" if r["probability"] is None else r["probability"]
                writer.writerow({"query": str(query), "method": method, **r,
                                 "probability": prob})  # fmt: skip
    return path


def copy_results(dest: str | Path, paths: Sequence[str | Path], mode: str = "links") -> int:
    """Put the ranked results ``paths`` into folder ``dest`` as symbolic links or copies
    named ``"01 name.jpg"``, ``"02 …"`` in rank order (more digits for 100 or more);
    never overwrites (``" (2)"`` is added). The photos themselves are only read. Returns
    the number written.

    Raises
    ------
    ValueError
        ``mode`` is not "links" or "copies".
    OSError
        ``dest`` cannot be created or written.
    """
    import os
    import shutil

    if mode not in ("links", "copies"):
        raise ValueError(f"mode must be 'links' or 'copies', got {mode!r}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    width = max(2, len(str(len(paths))))  # (names sort in rank order: "001" … "120")
    for rank, p in enumerate(paths, 1):
        src = Path(p)
        target = dest / f"{rank:0{width}d} {src.name}"
        k = 2
        while os.path.lexists(target):
            target = dest / f"{rank:0{width}d} {src.stem} ({k}){src.suffix}"
            k += 1
        if mode == "links":
            os.symlink(os.path.abspath(src), target)
        else:
            shutil.copy2(src, target)
        n += 1
    return n


def demo_folder() -> Path | None:
    """The bundled demo photos: ``<repo>/assets/demo`` (editable install / source
    checkout) or ``app/resources/demo`` (installed package data); None if absent."""
    here = Path(__file__).resolve()
    candidates = [
        here.parents[2] / "assets" / "demo",
        here.parents[1] / "resources" / "demo",
    ]
    for cand in candidates:
        if cand.is_dir() and any(cand.iterdir()):
            return cand
    return None


def demo_index_dir(folder: Path) -> Path | None:
    """Where the index of the bundled demo photos lives: the user's cache folder
    (``$XDG_CACHE_HOME/simile/demo-<hash>``), never inside the installed package; ``None``
    when ``folder`` is not the demo folder."""
    import hashlib
    import os

    demo = demo_folder()
    if demo is None or Path(folder).resolve() != demo.resolve():
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha1(os.fsencode(str(demo.resolve()))).hexdigest()[:16]
    return cache / "simile" / f"demo-{digest}"


def licences_file() -> Path | None:
    """The demo photos' licence statement (``assets/demo/LICENSES.md``), if present."""
    demo = demo_folder()
    if demo is None:
        return None
    f = demo / "LICENSES.md"
    return f if f.is_file() else None


def plain_error(exc: BaseException, context: str = "") -> str:
    """One sentence for the user, never a traceback."""
    prefix = f"{context}: " if context else ""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        what = exc.filename or str(exc)
        return f"{prefix}the file or folder {what} does not exist (any more)."
    if isinstance(exc, PermissionError):
        what = exc.filename or str(exc)
        return f"{prefix}permission denied for {what}."
    if isinstance(exc, MemoryError):
        return f"{prefix}not enough memory."
    msg = str(exc).strip() or name
    if name in ("ValueError", "RuntimeError", "OSError", "ImageLoadError") or name.endswith(
        "Error"
    ):
        return f"{prefix}{msg}"
    return f"{prefix}{msg} ({name})"


def _sentence(text: object, limit: int = 200) -> str:
    """``text`` on one line, its first letter capitalised, shortened to ``limit``."""
    line = " ".join(str(text).split()).rstrip(".")
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line[:1].upper() + line[1:]


def readonly_message(reason: str, folder: Path | str | None, index_dir=None) -> str:
    """What the window says while the collection is open read-only, for ``reason``
    (``"locked"``, ``"media"``, ``"permission"``; see :class:`app.gui.session.Session`)."""
    unsaved = "marks, learning and group names are not saved"
    if reason == "locked":
        return (
            "Another Simile process is indexing this folder; showing what it has finished "
            f"— this view updates when it is done (until then {unsaved})."
        )
    name = Path(folder).name if folder is not None else "this folder"
    where = f" ({index_dir})" if index_dir is not None else ""
    if reason == "media":
        what = f"The index of {name} is on read-only media{where}"
    else:
        what = f"The index of {name} may not be written here{where}"
    return f"{what}: searching works, but new photos cannot be indexed, and {unsaved}."


def disk_full_message(folder: Path | str | None, kept: bool = True) -> str:
    """The one line after a full disk stopped indexing ``folder``."""
    text = (
        f"The disk is full: Simile could not save the index of {folder}; free some space "
        "and press F5"
    )
    return text + (" (the previous index is kept)." if kept else ".")


def repair_offer(error: object) -> str:
    """The banner text offering to repair a damaged index: the store's one-line error
    (which names the index and the file) and what repairing does."""
    return (
        f"{_sentence(error)}. Repairing rebuilds what is damaged from what is intact; "
        "your photos are not touched."
    )


def repaired_message(folder: Path | str | None, lines: Sequence[str]) -> str:
    """One line saying what repairing the index of ``folder`` did."""
    name = Path(folder).name if folder is not None else "the folder"
    if not lines:
        return f"Checked the index of {name}: nothing was damaged."
    done = "; ".join(" ".join(str(ln).split()) for ln in lines)
    return f"Repaired the index of {name}: {done}. Your photos were not touched."


#: Prefix of a window's scratch folder in the temporary directory (:func:`scratch_dir`).
SCRATCH_PREFIX = "simile-query-"


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (POSIX: signal 0 checks without sending anything; on
    Windows ``os.kill(pid, 0)`` would send Ctrl+C, so :func:`scratch_dir` never asks)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (it exists, but is another user's)
        return True
    return True


def scratch_dir():
    """A new scratch folder for this window (images pasted as a query), removed when the
    window closes: ``simile-query-<pid>-*`` in the temporary directory.

    Folders an earlier window left behind (its process killed or crashed before it could
    remove its own) are removed first: only directories of this user, not links, named
    with the id of a process that no longer runs. Returns a
    :class:`tempfile.TemporaryDirectory`.
    """
    import os
    import re
    import shutil
    import stat
    import tempfile

    if os.name != "posix":  # (no safe liveness check: leave earlier folders alone)
        return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    base = Path(tempfile.gettempdir())
    own = re.compile(re.escape(SCRATCH_PREFIX) + r"(\d+)-")
    uid = os.getuid()
    for d in base.glob(SCRATCH_PREFIX + "*"):
        m = own.match(d.name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            st = d.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if not _process_alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
