"""The open folder stays current: file-system events (``watchdog``) become one "the folder
changed" signal once the folder has been quiet for a moment, and the window indexes what
changed in the background (formats issue, point 4).

- Events come from watchdog's native observer (inotify, FSEvents, ReadDirectoryChangesW)
  on its own thread and are handed to the GUI thread as a queued Qt signal; a burst (a
  copy of 500 photos) restarts a :data:`QUIET_MS` timer, so it is indexed once.
- Where native events cannot be had (too many inotify watches, some network shares), a
  polling observer takes over; a periodic check (:data:`RESCAN_MS`) also catches what a
  network drive never reports.
- Changes inside the index folder, to sidecars (``*.xmp``), and to hidden and temporary
  files are ignored: Simile's own writes never trigger an index.
- A folder that disappears (an unplugged drive) is reported as offline; its index is
  kept (``engine.index.ingest.FolderOfflineError`` guards the update too) and the folder
  is indexed again when it comes back.

The indexing itself is the window's usual incremental update: a moved photo is found
by content and keeps what the index knows of it. The watcher also keeps the paths its
events named (:meth:`FolderWatcher.take_changes`), so that the update looks at those
only (``Collection.update(paths=...)``) instead of scanning the whole folder: at 100,000
photos that scan costs more than indexing the photo that was added. When the events may
not tell everything (the periodic check, the folder back online, a polling observer's
rescan, more than :data:`MAX_PATHS` paths) it asks for the whole scan.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

log = logging.getLogger(__name__)

__all__ = ["MAX_PATHS", "QUIET_MS", "RESCAN_MS", "FolderWatcher", "relevant"]

#: Quiet time after the last event before the folder counts as changed (ms).
QUIET_MS = 1500
#: Periodic check of the folder (offline / back, and changes no event reported) (ms).
RESCAN_MS = 5 * 60 * 1000
#: Paths named by the events of one change beyond which the whole folder is scanned.
MAX_PATHS = 5000
_IGNORED_SUFFIXES = (".xmp", ".tmp", ".part", ".crdownload", ".swp", "~")


def relevant(path: str, index_dir: Path | None, folder: Path | None = None) -> bool:
    """Whether a change of ``path`` can change the index: not inside the index folder,
    not in a hidden folder of ``folder`` (``.simile``, the default index with its
    thumbnails; ``.git``, …: the scan skips them too), not a sidecar, a hidden or a
    temporary file."""
    p = Path(path)
    for inside in (index_dir, folder):
        if inside is None:
            continue
        try:
            rel = p.relative_to(inside)
        except ValueError:
            continue
        if inside is index_dir:
            return False
        if any(part.startswith(".") for part in rel.parts):
            return False
    name = p.name
    if name.startswith(".") or name.lower().endswith(_IGNORED_SUFFIXES):
        return False
    return True


class FolderWatcher(QObject):
    """Watch one folder; emits :attr:`changed` once it has been quiet for
    :data:`QUIET_MS` after changes, :attr:`offline` / :attr:`online` when it disappears
    or comes back.

    Parameters
    ----------
    quiet_ms, rescan_ms : int
        The quiet time and the periodic check (tests shorten them).
    """

    changed = Signal()
    # (paths as objects: a str signal drops the undecodable bytes of a file name)
    offline = Signal(object)
    online = Signal(object)
    _event = Signal(object)  # (from the observer thread: queued to the GUI thread)

    def __init__(self, parent=None, quiet_ms: int = QUIET_MS, rescan_ms: int = RESCAN_MS):
        super().__init__(parent)
        self.folder: Path | None = None
        self.index_dir: Path | None = None
        self.mode = "off"  # "native", "polling" or "off"
        self._observer = None
        self._offline = False
        self._changes: set[str] | None = set()  # (None: scan the whole folder)
        self._quiet = QTimer(self)
        self._quiet.setSingleShot(True)
        self._quiet.setInterval(int(quiet_ms))
        self._quiet.timeout.connect(self.changed)
        self._rescan = QTimer(self)
        self._rescan.setInterval(int(rescan_ms))
        self._rescan.timeout.connect(self.check)
        self._event.connect(self._on_event)

    # ------------------------------------------------------------------ lifecycle
    def watch(self, folder: str | os.PathLike, index_dir: str | os.PathLike | None) -> None:
        """Watch ``folder`` (and stop watching the previous one)."""
        self.stop()
        self.folder = Path(folder)
        self.index_dir = Path(index_dir) if index_dir is not None else None
        self._offline = not self.folder.is_dir()
        self._start_observer()
        self._rescan.start()

    def stop(self) -> None:
        """Stop watching (no signal is emitted afterwards)."""
        self._quiet.stop()
        self._rescan.stop()
        obs, self._observer = self._observer, None
        if obs is not None:
            try:
                obs.stop()
                obs.join(timeout=2)
            except Exception as exc:  # pragma: no cover - best effort at shutdown
                log.debug("watcher stop: %s", exc)
        self.mode = "off"
        self.folder = None
        self._changes = set()

    def _start_observer(self) -> None:
        folder = self.folder
        if folder is None or not folder.is_dir():
            return
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
            from watchdog.observers.polling import PollingObserver
        except ImportError:  # pragma: no cover - a dependency; the periodic check remains
            log.warning("watchdog is not installed: the folder is checked every few minutes")
            return
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:  # (observer thread)
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if event.is_directory and event.event_type == "modified":
                    return  # (a folder's listing changed: its entries' own events say how)
                for p in (event.src_path, getattr(event, "dest_path", "") or ""):
                    if p:
                        watcher._event.emit(os.fsdecode(p))

        for mode, make in (("native", Observer), ("polling", PollingObserver)):
            obs = make()
            try:
                obs.schedule(Handler(), os.fspath(folder), recursive=True)
                obs.daemon = True
                obs.start()
            except Exception as exc:  # (inotify watch limit, a share without events)
                log.info("%s watcher failed on %s: %s", mode, folder, exc)
                continue
            self._observer, self.mode = obs, mode
            return

    # ------------------------------------------------------------------ events
    def _on_event(self, path: str) -> None:
        if self.folder is None or not relevant(path, self.index_dir, self.folder):
            return
        if Path(path) != self.folder and self.folder not in Path(path).parents:
            return  # (a late event of the folder watched before: queued across watch())
        if Path(path) == self.folder and not self.folder.is_dir():
            self.check()
            return
        if self._changes is not None:
            self._changes.add(path)
            if len(self._changes) > MAX_PATHS or Path(path) == self.folder:
                self._changes = None
        self._quiet.start()  # (re)start: a burst of events is one change

    def take_changes(self) -> list[str] | None:
        """The paths the events named since the last call (files and folders, added,
        changed, moved or deleted), to update the index for those only
        (``Collection.update(paths=...)``); None when the whole folder is to be scanned
        (see the module docstring; also when no event named a path, or nothing is
        watched). Starts collecting anew."""
        changes, self._changes = self._changes, set()
        if not changes or self.mode == "off":
            return None  # (nothing named: a change the events did not tell, or no watcher)
        return sorted(changes)

    def give_back(self, paths: list[str]) -> None:
        """Paths taken (:meth:`take_changes`) by an update that did not complete
        (cancelled, failed): the next update looks at them again."""
        if self._changes is not None:
            self._changes.update(paths)
            if len(self._changes) > MAX_PATHS:
                self._changes = None

    def check(self) -> None:
        """The periodic check: offline / back, and a change for the folder's rescan."""
        folder = self.folder
        if folder is None:
            return
        there = folder.is_dir()
        if not there and not self._offline:
            self._offline = True
            self._quiet.stop()
            obs, self._observer = self._observer, None
            if obs is not None:
                obs.stop()
            self.mode = "off"
            self.offline.emit(str(folder))
        elif there and self._offline:
            self._offline = False
            self._changes = None  # (what changed while it was away: the whole scan)
            self._start_observer()
            self.online.emit(str(folder))
            self._quiet.start()
        elif there and self.mode != "native":
            self._changes = None
            self._quiet.start()  # (no events to rely on: rescan now and then)

    @property
    def is_offline(self) -> bool:
        return self._offline
