"""The freedesktop.org trash, in Python (no desktop service needed).

A file goes to ``$XDG_DATA_HOME/Trash/files`` (``~/.local/share/Trash`` by default) with a
``.trashinfo`` beside it in ``Trash/info`` (its original path, URL-encoded, and the deletion
time), so the desktop's trash lists and restores it. A file on another device than the home
trash goes to its volume's ``$topdir/.Trash/$uid`` (when that folder exists, is not a link
and has the sticky bit) or ``$topdir/.Trash-$uid``, with a path relative to ``$topdir``.
When none can be used, :class:`TrashUnavailable` says so: nothing was moved.

Moves never replace a file (:func:`move_noclobber`).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from datetime import datetime
from urllib.parse import quote

__all__ = [
    "TrashUnavailable",
    "mount_point",
    "move_noclobber",
    "move_to_trash",
    "trash_dir",
    "trashinfo_path",
]


class TrashUnavailable(OSError):
    """No trash can take a file here (no writable ``$XDG_DATA_HOME/Trash`` or
    ``.Trash-$uid`` on its device): nothing was moved; move to a folder instead.

    Attributes
    ----------
    path : str
        The file that had no trash.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def mount_point(path: str) -> str:
    """The mount point (``$topdir``) of the device holding ``path``.

    Parameters
    ----------
    path : str

    Returns
    -------
    str
    """
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _usable_dir(path: str) -> bool:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _home_trash() -> str:
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data, "Trash")


def trash_dir(path: str | os.PathLike) -> tuple[str, str | None]:
    """The freedesktop.org trash that takes ``path``.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    trash : str
        A trash folder with writable ``files`` and ``info`` sub-folders (created if needed).
    topdir : str or None
        The mount point the ``.trashinfo`` path is written relative to (None for the home
        trash: absolute paths).

    Raises
    ------
    TrashUnavailable
        Neither the home trash (same device) nor ``$topdir/.Trash/$uid`` or
        ``$topdir/.Trash-$uid`` can be used.
    """
    p = os.path.abspath(os.fspath(path))
    parent_dev = os.stat(os.path.dirname(p)).st_dev
    home = _home_trash()
    tried = []
    # the home trash, when it is (or its nearest existing folder is) on the file's device
    probe = home
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        same_dev = os.stat(probe).st_dev == parent_dev
    except OSError:
        same_dev = False
    if same_dev:
        if all(_usable_dir(os.path.join(home, sub)) for sub in ("files", "info")):
            return home, None
        tried.append(home)
    top = mount_point(os.path.dirname(p))
    uid = os.getuid() if hasattr(os, "getuid") else 0
    shared = os.path.join(top, ".Trash")
    try:
        st = os.lstat(shared)
        shared_ok = stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    except OSError:
        shared_ok = False
    candidates = ([os.path.join(shared, str(uid))] if shared_ok else []) + [
        os.path.join(top, f".Trash-{uid}")
    ]
    for cand in candidates:
        if all(_usable_dir(os.path.join(cand, sub)) for sub in ("files", "info")):
            return cand, top
        tried.append(cand)
    raise TrashUnavailable(
        f"No trash can take {os.path.basename(p)} (tried {', '.join(tried)}).", p
    )


def move_to_trash(path: str, when: datetime | None = None) -> str:
    """Move ``path`` (a file, or a link as itself) into its trash, with its ``.trashinfo``.

    Parameters
    ----------
    path : str
    when : datetime, optional
        The deletion date written (now by default).

    Returns
    -------
    str
        Where it went (``<trash>/files/<name>``; ``name.2.ext``… when taken).

    Raises
    ------
    TrashUnavailable
        No trash can take it (see :func:`trash_dir`).
    """
    when = when or datetime.now()
    trash, top = trash_dir(path)
    files, info = os.path.join(trash, "files"), os.path.join(trash, "info")
    name = os.path.basename(path)
    stem, ext = os.path.splitext(name)
    shown = os.path.relpath(path, top) if top is not None else path
    body = (
        "[Trash Info]\n"
        # (the name's bytes, percent-encoded: a name that is not UTF-8 is kept exactly)
        f"Path={quote(os.fsencode(shown), safe='/')}\n"
        f"DeletionDate={when.strftime('%Y-%m-%dT%H:%M:%S')}\n"
    )
    n = 1
    while True:
        cand = name if n == 1 else f"{stem}.{n}{ext}"
        info_path = os.path.join(info, cand + ".trashinfo")
        try:  # the .trashinfo claims the name (O_EXCL), as the specification asks
            fd = os.open(info_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise TrashUnavailable(f"Could not write to the trash {trash}: {exc}", path) from exc
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
        dest = os.path.join(files, cand)
        if os.path.lexists(dest):
            os.unlink(info_path)
            n += 1
            continue
        try:
            move_noclobber(path, dest)
        except BaseException:
            os.unlink(info_path)
            raise
        return dest


def trashinfo_path(dest: str) -> str:
    """The ``.trashinfo`` of a file trashed to ``dest`` (:func:`move_to_trash`).

    Parameters
    ----------
    dest : str

    Returns
    -------
    str
    """
    trash = os.path.dirname(os.path.dirname(dest))
    return os.path.join(trash, "info", os.path.basename(dest) + ".trashinfo")


def move_noclobber(src: str, dst: str) -> None:
    """Move ``src`` (a file, or a link as itself) to ``dst``, never replacing ``dst``.

    A hard link then an unlink on one device (atomic: fails if ``dst`` exists); a copy then
    a removal across devices.

    Parameters
    ----------
    src, dst : str

    Raises
    ------
    FileExistsError
        ``dst`` exists.
    """
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst, follow_symlinks=False)  # fails if dst exists: no overwrite
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "already exists", dst) from exc
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "already exists", dst) from exc
        shutil.move(src, dst)  # another disk, or no hard links there: copy, then remove
        return
    os.unlink(src)
