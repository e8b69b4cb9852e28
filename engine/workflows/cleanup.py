"""Batch clean-up of duplicate groups, with a log and a way back.

A clean-up keeps one copy of each group and acts on the others, in two steps:

* :func:`plan_cleanup` says what would happen (nothing is touched): a :class:`Plan` of
  :class:`Step` s, the copies kept, the copies skipped and why, the bytes concerned;
* :func:`run_cleanup` carries it out, one file at a time (progress, cancel), writing every
  action to a CSV log (:data:`LOG_FIELDS`) as it goes; :func:`undo_cleanup` reads such a log
  and puts the files back.

Actions (:data:`ACTIONS`); nothing is ever deleted outright:

``"trash"``
    The freedesktop.org trash (:mod:`engine.workflows.trash`), so the desktop's trash can
    restore the files too. When no trash can be used,
    :class:`~engine.workflows.trash.TrashUnavailable` is raised before any file moves (the
    app then offers a folder instead).
``"move"``
    Into a folder the person chooses, keeping the sub-folders relative to the open folder;
    an existing file is never overwritten (`` (2)``, `` (3)``… is added to the name).
``"link"``
    The copy is replaced by a hard link to the kept copy (the space is freed, the path stays).
    Only for byte-identical copies (groups of tier ``"identical"``, checked again byte for
    byte before each replacement) on the kept copy's device: a hard link to a different
    file would lose the copy's own pixels.

Only paths inside the open folder are ever touched, judged as the person sees them: a
symlinked photo is the link (moved as a link; its target is never touched), and a path whose
folder leads outside the open folder (a symlinked sub-folder) is refused
(:class:`OutsideFolder`).
"""

from __future__ import annotations

import csv
import filecmp
import os
import shutil
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from engine.workflows import trash as _trash
from engine.workflows.trash import TrashUnavailable, move_noclobber, trashinfo_path

__all__ = [
    "ACTIONS",
    "LOG_FIELDS",
    "CleanupError",
    "CleanupResult",
    "OutsideFolder",
    "Plan",
    "Step",
    "TrashUnavailable",
    "UndoResult",
    "default_log_path",
    "format_bytes",
    "last_log",
    "plan_cleanup",
    "read_log",
    "run_cleanup",
    "undo_cleanup",
]

#: What a clean-up can do with the copies not kept.
ACTIONS = ("trash", "move", "link")
#: Columns of a clean-up log.
LOG_FIELDS = ("original", "action", "destination", "time", "size", "kept")
#: How the logs' text is encoded: UTF-8, a file name that is not (``os.fsdecode``'s lone
#: surrogates) written as its own bytes, so that undo finds exactly that name again.
LOG_ERRORS = "surrogateescape"
#: Tier of the groups whose copies may be replaced by hard links.
LINK_TIER = "identical"
_UNDONE = ".undone.csv"


class CleanupError(Exception):
    """A clean-up could not be planned or run."""


class OutsideFolder(CleanupError):
    """A path of the clean-up lies outside the open folder (nothing was touched)."""


# ============================================================================ plan
@dataclass(frozen=True)
class Step:
    """One copy to act on.

    Attributes
    ----------
    path : str
        The copy (absolute, as the person sees it: links not resolved).
    action : str
        One of :data:`ACTIONS`.
    destination : str or None
        ``"move"``: the intended new path (a suffix is added at run time if it was taken
        meanwhile); ``"link"``: the kept copy linked to; ``"trash"``: None (the trash is
        chosen when the file moves).
    kept : str
        The copy of its group that is kept.
    size : int
        Bytes of the copy (0 for a symlink).
    """

    path: str
    action: str
    destination: str | None
    kept: str
    size: int


@dataclass
class Plan:
    """What a clean-up will do (:func:`plan_cleanup`); nothing has happened yet.

    Attributes
    ----------
    action : str
    folder : str
        The open folder; nothing outside it is touched.
    destination : str or None
        The chosen folder of ``"move"``.
    steps : list of Step
    kept : list of str
        The copy kept in each group acted on.
    skipped : list of (str, str)
        Copies left alone and why (a group without a kept copy, a missing file, a hard
        link refused…).
    """

    action: str
    folder: str
    destination: str | None
    steps: list[Step] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Bytes of the copies acted on (freed by ``"link"``; moved otherwise)."""
        return sum(s.size for s in self.steps)

    def summary(self) -> str:
        """One sentence for people: ``"Will move 37 photos (212.0 MB) to the trash;
        keep 30."``"""
        n = len(self.steps)
        what = f"{n} photo{'s' if n != 1 else ''} ({format_bytes(self.total_bytes)})"
        if self.action == "trash":
            text = f"Will move {what} to the trash"
        elif self.action == "move":
            text = f"Will move {what} to {self.destination}"
        else:
            text = f"Will replace {what} by hard links to the kept copies"
        k = len(self.kept)
        text += f"; keep {k} photo{'s' if k != 1 else ''}"
        if self.skipped:
            text += f"; leave {len(self.skipped)} alone"
        return text + "."


def format_bytes(n: int) -> str:
    """``n`` bytes for people (``"212.0 MB"``).

    Parameters
    ----------
    n : int

    Returns
    -------
    str
    """
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def _inside(folder: str, path: str) -> bool:
    """True if ``path`` is inside ``folder`` lexically and its parent folder, links
    resolved, is inside ``folder`` resolved (a symlinked file is the link; a symlinked
    sub-folder pointing elsewhere is outside)."""
    root = os.path.abspath(folder)
    p = os.path.abspath(path)
    try:
        if p == root or os.path.commonpath([root, p]) != root:
            return False
        real_root = os.path.realpath(root)
        real_parent = os.path.realpath(os.path.dirname(p))
        return os.path.commonpath([real_root, real_parent]) == real_root
    except ValueError:  # different drives (Windows)
        return False


def _check_inside(folder: str, path: str) -> str:
    p = os.path.abspath(os.fspath(path))
    if not _inside(folder, p):
        raise OutsideFolder(f"Refused: {p} is not inside the open folder {folder}.")
    return p


def _keeper_index(group_paths: Sequence[str], keeper) -> int | None:
    if keeper is None:
        return None
    if isinstance(keeper, int):
        return keeper if 0 <= keeper < len(group_paths) else None
    index = getattr(keeper, "index", None)
    if isinstance(index, int):
        return index if 0 <= index < len(group_paths) else None
    want = os.path.abspath(os.fspath(keeper))
    return next((i for i, p in enumerate(group_paths) if p == want), None)


def _size(path: str) -> int:
    st = os.lstat(path)
    return 0 if stat.S_ISLNK(st.st_mode) else int(st.st_size)


def plan_cleanup(
    groups: Sequence,
    keepers: Sequence,
    action: str,
    destination: str | os.PathLike | None = None,
    *,
    folder: str | os.PathLike,
) -> Plan:
    """What keeping one copy per group and acting on the others would do.

    Parameters
    ----------
    groups : sequence of DuplicateGroup
        Each with ``paths`` and optionally ``tier`` (``"same_photo"`` when absent).
    keepers : sequence
        The copy to keep in each group, in the same order: an index into its ``paths``, a
        :class:`~engine.workflows.duplicates.Keeper` (its ``index``), a path, or None
        (the group is left alone).
    action : str
        One of :data:`ACTIONS`.
    destination : str or os.PathLike, optional
        The folder of ``"move"`` (required then).
    folder : str or os.PathLike
        The open folder: every path of the groups acted on must be inside it.

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        An unknown action, a missing destination, ``len(keepers) != len(groups)``.
    OutsideFolder
        A copy or a kept copy lies outside ``folder`` (nothing is planned).
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    if len(keepers) != len(groups):
        raise ValueError(f"{len(keepers)} keepers for {len(groups)} groups")
    root = os.path.abspath(os.fspath(folder))
    dest_root = None
    if action == "move":
        if destination is None:
            raise ValueError("a move needs a destination folder")
        dest_root = os.path.abspath(os.fspath(destination))
        if dest_root == root:
            raise ValueError("the destination is the open folder itself")
    plan = Plan(action, root, dest_root)
    planned_dest: set[str] = set()
    seen: set[str] = set()
    for group, keeper in zip(groups, keepers, strict=True):
        paths = [_check_inside(root, p) for p in group.paths]
        k = _keeper_index(paths, keeper)
        if k is None:
            plan.skipped.extend((p, "no copy of its group is kept") for p in paths)
            continue
        kept = paths[k]
        if not os.path.lexists(kept):
            plan.skipped.extend((p, "the copy to keep is missing") for p in paths if p != kept)
            continue
        tier = getattr(group, "tier", "same_photo")
        if action == "link" and tier != LINK_TIER:
            plan.skipped.extend(
                (p, "hard links only replace identical files (this group is not)")
                for p in paths
                if p != kept
            )
            continue
        if kept not in plan.kept:
            plan.kept.append(kept)
        seen.add(kept)
        apart = _apart_from(group, kept)
        for p in paths:
            if p == kept or p in seen:
                continue
            seen.add(p)
            if not os.path.lexists(p):
                plan.skipped.append((p, "the file is gone"))
                continue
            if p in apart:
                plan.skipped.append((p, APART_REASON))
                continue
            dest = None
            if action == "move":
                dest = _free_name(os.path.join(dest_root, os.path.relpath(p, root)), planned_dest)
                planned_dest.add(dest)
            elif action == "link":
                why = _link_refusal(p, kept)
                if why:
                    plan.skipped.append((p, why))
                    continue
                dest = kept
            plan.steps.append(Step(p, action, dest, kept, _size(p)))
    return plan


#: Why a photo of a group is left alone when the search found it is not a copy of the
#: one kept (:attr:`~engine.workflows.duplicates.DuplicateGroup.apart`).
APART_REASON = "the search found it is not a copy of the kept photo (another shot?)"


def _apart_from(group, kept: str) -> set[str]:
    """The paths of ``group`` found not to be copies of ``kept``
    (:attr:`~engine.workflows.duplicates.DuplicateGroup.apart`; none when absent)."""
    out = set()
    for a, b in getattr(group, "apart", ()) or ():
        a, b = os.path.abspath(os.fspath(a)), os.path.abspath(os.fspath(b))
        if a == kept:
            out.add(b)
        elif b == kept:
            out.add(a)
    return out


def _link_refusal(path: str, kept: str) -> str | None:
    """Why ``path`` cannot become a hard link to ``kept`` (None: it can)."""
    if os.path.islink(path) or os.path.islink(kept):
        return "a symbolic link is not replaced by a hard link"
    a, b = os.stat(path), os.stat(kept)
    if a.st_dev != b.st_dev:
        return "on another disk than the kept copy: a hard link cannot cross disks"
    if a.st_ino == b.st_ino:
        return "already the same file as the kept copy"
    if a.st_size != b.st_size:
        return "not identical to the kept copy"
    return None


def _free_name(path: str, taken: set[str] = frozenset()) -> str:
    """``path``, or ``name (2).ext``, ``name (3).ext``… the first that neither exists nor
    is in ``taken``."""
    if not os.path.lexists(path) and path not in taken:
        return path
    stem, ext = os.path.splitext(path)
    n = 2
    while True:
        cand = f"{stem} ({n}){ext}"
        if not os.path.lexists(cand) and cand not in taken:
            return cand
        n += 1


# ============================================================================ run
@dataclass
class CleanupResult:
    """What :func:`run_cleanup` did.

    Attributes
    ----------
    log_path : str
    done : list of dict
        The log rows written (:data:`LOG_FIELDS`).
    failed : list of (str, str)
        Copies not acted on and why.
    cancelled : bool
        Stopped early on request (the log holds what was done).
    """

    log_path: str
    done: list[dict] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    cancelled: bool = False

    @property
    def bytes_done(self) -> int:
        return sum(int(r["size"]) for r in self.done)


def default_log_path(index_dir: str | os.PathLike, when: datetime | None = None) -> Path:
    """``<index_dir>/cleanup/<YYYY-mm-ddTHH-MM-SS>.csv`` (a free name).

    Parameters
    ----------
    index_dir : str or os.PathLike
        The collection's index folder (or any folder the logs should go to).
    when : datetime, optional
        The time in the name (now by default).

    Returns
    -------
    Path
    """
    when = when or datetime.now()
    base = Path(index_dir) / "cleanup" / when.strftime("%Y-%m-%dT%H-%M-%S")
    path, n = base.with_suffix(".csv"), 2
    while path.exists() or path.with_name(path.stem + _UNDONE).exists():
        path = base.with_name(f"{base.name}-{n}.csv")
        n += 1
    return path


def last_log(index_dir: str | os.PathLike) -> Path | None:
    """The newest clean-up log of ``index_dir`` not undone yet (None: none).

    Parameters
    ----------
    index_dir : str or os.PathLike

    Returns
    -------
    Path or None
    """
    folder = Path(index_dir) / "cleanup"
    if not folder.is_dir():
        return None
    logs = [p for p in folder.glob("*.csv") if not p.name.endswith(_UNDONE)]
    return max(logs, key=lambda p: (p.stat().st_mtime, p.name)) if logs else None


def run_cleanup(
    plan: Plan,
    log_path: str | os.PathLike,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CleanupResult:
    """Carry out ``plan``, one copy at a time, logging each action as it happens.

    Parameters
    ----------
    plan : Plan
        From :func:`plan_cleanup`. Every path is checked again (inside the folder, still
        there, its kept copy still there) right before it is touched.
    log_path : str or os.PathLike
        The CSV log (:data:`LOG_FIELDS`) to write (its folder is created); see
        :func:`default_log_path`.
    cancel : threading.Event, optional
        Set it to stop before the next copy (``result.cancelled``).
    progress : callable, optional
        ``progress(done, total)`` after each copy (and ``(0, total)`` first).

    Returns
    -------
    CleanupResult

    Raises
    ------
    TrashUnavailable
        ``"trash"`` and a copy's device has no usable trash: raised before anything moves.
    OutsideFolder
        A step names a path outside the plan's folder (nothing is touched).
    """
    steps = list(plan.steps)
    for s in steps:
        _check_inside(plan.folder, s.path)
        if s.action != plan.action:
            raise ValueError(f"step {s.path} is a {s.action!r}, the plan a {plan.action!r}")
    if plan.action == "trash":
        devices: set[int] = set()
        for s in steps:  # every device's trash first: nothing moves if one is missing
            dev = os.stat(os.path.dirname(s.path)).st_dev
            if dev not in devices:
                devices.add(dev)
                _trash.trash_dir(s.path)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = CleanupResult(str(log_path))
    total = len(steps)
    if progress is not None:
        progress(0, total)
    with open(log_path, "x", newline="", encoding="utf-8", errors=LOG_ERRORS) as fh:
        writer = csv.DictWriter(fh, fieldnames=LOG_FIELDS)
        writer.writeheader()
        fh.flush()
        for i, s in enumerate(steps):
            if cancel is not None and cancel.is_set():
                result.cancelled = True
                break
            try:
                row = _run_step(plan, s)
            except TrashUnavailable:
                raise
            except (OSError, ValueError, CleanupError) as exc:  # (this file only)
                result.failed.append((s.path, str(exc)))
            else:
                if isinstance(row, str):
                    result.failed.append((s.path, row))
                else:
                    _log_row(writer, fh, row)
                    result.done.append(row)
            if progress is not None:
                progress(i + 1, total)
    return result


def _log_row(writer: csv.DictWriter, fh, row: dict) -> None:
    """Write the log row of a step done; when it cannot be written (a full disk), put
    that file back (:func:`_restore`) before the error goes on: no file is ever moved
    without its row in the log."""
    try:
        writer.writerow(row)
        fh.flush()
    except BaseException as exc:
        why = _restore(row)
        if why is not None:
            raise CleanupError(
                f"the clean-up log could not be written ({exc}) and {row['original']} could "
                f"not be put back: it is at {row['destination']} ({why})"
            ) from exc
        raise


def _run_step(plan: Plan, s: Step) -> dict | str:
    """Act on one copy: its log row, or why it was left alone."""
    _check_inside(plan.folder, s.path)
    if not os.path.lexists(s.path):
        return "the file is gone"
    if not os.path.lexists(s.kept):
        return f"the kept copy {s.kept} is gone: this copy stays"
    size = _size(s.path)
    now = datetime.now()
    if s.action == "trash":
        dest = _trash.move_to_trash(s.path, now)
    elif s.action == "move":
        dest = s.destination
        for _ in range(100):
            dest = _free_name(dest)
            try:
                move_noclobber(s.path, dest)
                break
            except FileExistsError:
                continue  # taken meanwhile: the next free name
        else:
            return "no free name in the destination"
    else:
        why = _link_refusal(s.path, s.kept)
        if why:
            return why
        if not filecmp.cmp(s.path, s.kept, shallow=False):
            return "not identical to the kept copy, byte for byte"
        folder = os.path.dirname(s.path)
        tmp = os.path.join(folder, f".{os.path.basename(s.path)}.simile-link-{os.getpid()}")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.link(s.kept, tmp)
        try:
            os.replace(tmp, s.path)
        except BaseException:
            os.unlink(tmp)
            raise
        dest = s.kept
    return {
        "original": s.path,
        "action": s.action,
        "destination": dest,
        "time": now.isoformat(timespec="seconds"),
        "size": size,
        "kept": s.kept,
    }


# ============================================================================ undo
@dataclass
class UndoResult:
    """What :func:`undo_cleanup` did.

    Attributes
    ----------
    restored : list of str
        Original paths the files are back at.
    failed : list of (str, str)
        Original paths not restored and why (they stay in the log, to try again).
    """

    restored: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def _restore(row: dict) -> str | None:
    """Put back the file of one log row; None when done, else why not (nothing that
    appeared at its original path since is overwritten)."""
    orig, action, dest = row["original"], row["action"], row["destination"]
    try:
        if action in ("trash", "move"):
            if not os.path.lexists(dest):
                return f"it is no longer at {dest}"
            if os.path.lexists(orig):
                return "another file is at its place now: nothing was overwritten"
            move_noclobber(dest, orig)
            if action == "trash":
                info = trashinfo_path(dest)
                if os.path.exists(info):
                    os.unlink(info)
            return None
        if action == "link":
            if not os.path.lexists(orig):
                return "it is gone"
            if not os.path.samefile(orig, dest):
                return "another file is at its place now: nothing was overwritten"
            tmp = os.path.join(os.path.dirname(orig), f".{os.path.basename(orig)}.simile-undo")
            shutil.copy2(orig, tmp)
            os.replace(tmp, orig)
            return None
        return f"unknown action {action!r}"
    except OSError as exc:
        return str(exc)


def read_log(log_path: str | os.PathLike) -> list[dict]:
    """The rows of a clean-up log (:data:`LOG_FIELDS`).

    Parameters
    ----------
    log_path : str or os.PathLike

    Returns
    -------
    list of dict
    """
    with open(log_path, newline="", encoding="utf-8", errors=LOG_ERRORS) as fh:
        return list(csv.DictReader(fh))


def undo_cleanup(
    log_path: str | os.PathLike, folder: str | os.PathLike | None = None
) -> UndoResult:
    """Put the files of a clean-up log back where they were.

    Moved and trashed files go back to their original path (their ``.trashinfo`` is
    removed); a hard link is replaced again by a copy of its own (the bytes were
    identical). Nothing that appeared at an original path since is overwritten: that file
    is reported in ``failed`` and stays where it is.

    The rows restored are appended to ``<log>.undone.csv``; the log keeps only those not
    restored (it is removed when all are), so undoing again retries just those.

    Parameters
    ----------
    log_path : str or os.PathLike
    folder : str or os.PathLike, optional
        The open folder: a row whose original path is outside it is not restored (it is
        reported in ``failed``).

    Returns
    -------
    UndoResult
    """
    log_path = Path(log_path)
    rows = read_log(log_path)
    result = UndoResult()
    left, undone = [], []
    for row in reversed(rows):
        orig = row["original"]
        if folder is not None and not _inside(os.fspath(folder), orig):
            why = f"it is not inside the open folder {folder}"
        else:
            why = _restore(row)
        if why is None:
            result.restored.append(orig)
            undone.append(row)
        else:
            result.failed.append((orig, why))
            left.append(row)
    done_path = log_path.with_name(log_path.stem + _UNDONE)
    new = not done_path.exists()
    with open(done_path, "a", newline="", encoding="utf-8", errors=LOG_ERRORS) as fh:
        w = csv.DictWriter(fh, fieldnames=LOG_FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(undone)
    if left:
        tmp = log_path.with_name(log_path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8", errors=LOG_ERRORS) as fh:
            w = csv.DictWriter(fh, fieldnames=LOG_FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(reversed(left))
        os.replace(tmp, log_path)
    else:
        log_path.unlink()
    return result
