"""The main window: collection, grid, search, correspondences, duplicates."""

from __future__ import annotations

import errno
import gc
import importlib
import importlib.util
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QDesktopServices,
    QGuiApplication,
    QIcon,
    QImage,
    QKeySequence,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QSlider,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.commands._collection import disk_full
from app.gui import workers
from app.gui.dialogs import AboutDialog, ImageViewer, ProblemsPanel
from app.gui.duplicates import DuplicatesView, describe_copies, find_groups, tier_of
from app.gui.feedback import save_mark
from app.gui.grid import PhotoGridView
from app.gui.info_panel import InfoPanel
from app.gui.labels import StatusLabel
from app.gui.matches import CorrespondenceView, compute_match
from app.gui.models import (
    PATH_ROLE,
    PhotoListModel,
    ResultsGridModel,
    ResultsModel,
    ThumbnailDelegate,
    item_data,
    shown_name,
)
from app.gui.region import search as region_search
from app.gui.results import ResultsPanel
from app.gui.results_grid import ResultsGridHeader, ResultsGridView, ResultTileDelegate
from app.gui.results_state import ShownResults
from app.gui.session import ActionRefused, MarkBook, QueryModel, Session
from app.gui.sorting import SortBar
from app.gui.state import (
    DEFAULT_METHOD,
    METHOD_TIPS,
    METHODS,
    EtaEstimator,
    SearchSettings,
    copy_results,
    disk_full_message,
    export_results,
    format_duration,
    plain_error,
    readonly_message,
    repair_offer,
    repaired_message,
    scratch_dir,
)
from app.gui.thumbnails import ThumbnailProvider, array_to_qimage, default_cache_dir
from app.gui.views import PLUGIN_MODULES, register_view, registered_views
from app.gui.watcher import FolderWatcher
from engine.index.files import display_path

__all__ = ["MainWindow", "PhotoGridView"]

log = logging.getLogger(__name__)

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
THUMB_MIN, THUMB_MAX, THUMB_STEP = 64, 320, 24
MAX_RECENT = 8
#: how often a read-only window looks at the index another process is writing (ms)
READER_POLL_MS = 2000
#: the label of the banner's button that repairs a damaged index
REPAIR_LABEL = "Repair the index"


def icon(name: str) -> QIcon:
    f = RESOURCES / f"{name}.svg"
    return QIcon(str(f)) if f.is_file() else QIcon()


class Banner(QFrame):
    """A dismissable one-line message above the views (errors in plain words)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton()
        self.action.hide()
        self.action.clicked.connect(self._run_action)
        self._callback = None
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 4, 4, 4)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.action)
        lay.addWidget(close)
        self.hide()

    def show_message(self, text: str, kind: str = "error", action=None) -> None:
        """Show ``text``; ``action``: an optional ``(button label, callback)``."""
        self.setProperty("kind", kind)
        self.style().unpolish(self)
        self.style().polish(self)
        self.label.setText(text)
        self._callback = action[1] if action else None
        self.action.setText(action[0] if action else "")
        self.action.setVisible(bool(action))
        self.show()

    def _run_action(self) -> None:
        callback = self._callback
        self.hide()
        if callback is not None:
            callback()


class MainWindow(QMainWindow):
    """Simile's main window.

    A thin shell around :attr:`session` (:class:`app.gui.session.Session`): user actions
    go to the session (and to background workers whose results pass through
    :meth:`Session.accept`), and the widgets render the session's events in
    ``_on_<event>`` slots.

    Parameters
    ----------
    settings : QSettings, optional
        Where preferences persist (tests pass a throw-away INI file).
    persist : bool
        Save settings on close (False for headless screenshots).
    """

    collection_opened = Signal(object)
    indexing_finished = Signal(object)  # the Collection (or None if it failed)
    results_changed = Signal()
    match_shown = Signal()
    duplicates_shown = Signal()
    error_shown = Signal(str)
    marks_saved = Signal()
    learning_finished = Signal(object)  # LearnSummary, or None (cancelled / failed)
    results_copied = Signal(int)  # results written as links or copies into a folder

    def __init__(self, settings: QSettings | None = None, *, persist: bool = True) -> None:
        super().__init__()
        self.settings = settings if settings is not None else QSettings()
        self.persist = persist
        #: everything the window shows (Qt-free); the widgets render its events
        self.session = Session()
        self._tmpdir = scratch_dir()  # (and those of windows that were killed go)
        self._viewers: list[ImageViewer] = []

        _preload_engine()
        self.setWindowTitle("Simile")
        self.setWindowIcon(icon("simile"))
        self.setAcceptDrops(True)
        self.thumbs = ThumbnailProvider(default_cache_dir(), parent=self)
        self.photos = PhotoListModel(self.thumbs, self)
        #: the results shown (Qt-free): the side list and the results grid render it
        self.shown = ShownResults()
        self.results = ResultsModel(self.thumbs, self, shown=self.shown)
        self.results_grid_model = ResultsGridModel(self.thumbs, self.shown, self)

        self._build_views()
        self._build_status_bar()
        self._build_menus()
        self._restore_settings()

        self._flush_timer = QTimer(self)  # batch grid insertions while indexing
        self._flush_timer.setInterval(120)
        self._flush_timer.timeout.connect(self.session.flush_arrivals)
        # while another process writes the index: look at it now and then (off this thread)
        self._reader_timer = QTimer(self)
        self._reader_timer.setInterval(READER_POLL_MS)
        self._reader_timer.timeout.connect(self.poll_writer)
        self._reader_poll = None  # the running look (a worker)
        self._reader_seen = None  # the generations it saw last
        self._banner_topic: str | None = None  # what the banner shows: "readonly", "repair",
        # "duplicates" (a failed clean-up step), None (anything else)
        # the open folder stays current (app/gui/watcher.py): changes are indexed by themselves
        self.watcher = FolderWatcher(self)
        self.watcher.changed.connect(self._on_folder_changed_on_disk)
        self.watcher.offline.connect(self._on_folder_offline)
        self.watcher.online.connect(self._on_folder_back)
        self._watch_pending = False  # a change came while indexing: index again after
        self._connect_session()

    # ======================================================================== the model
    # Read-only views of the session, for callers and tests.
    @property
    def collection(self):
        return self.session.collection

    @property
    def folder(self) -> Path | None:
        return self.session.folder

    @property
    def index_dir(self) -> Path | None:
        return self.session.index_dir

    @property
    def problems(self) -> list[tuple[str, str]]:
        return self.session.problems

    @property
    def marks(self) -> MarkBook:
        return self.session.marks

    @property
    def query_path(self) -> str | None:
        return self.session.query.source

    def _connect_session(self) -> None:
        """Render the session: every ``session.events.<name>`` goes to ``_on_<name>``."""
        s = self.session
        s.events.connect_slots(self)
        s.jobs.events.connect_slots(self, "_on_job_")
        s.query.events.connect_slots(self, "_on_query_")
        s.match.events.connect_slots(self, "_on_match_")
        s.duplicates.events.connect_slots(self, "_on_duplicates_")

    def _on_folder_opened(self, event) -> None:
        self.banner.hide()
        self._banner_topic = None
        self.setWindowTitle(f"{display_path(event.folder.name)} — Simile")
        self.results_panel.delegate.root = event.folder
        self.photos.root = event.folder
        self.info_panel.clear()
        self._remember_folder(event.folder)
        self._watch_pending = False
        if self.watch_act.isChecked():
            self.watcher.watch(event.folder, self.session.index_dir)

    def _on_folder_closed(self, _event) -> None:
        self._flush_timer.stop()
        self.watcher.stop()
        self.setWindowTitle("Simile")

    def set_pairs_as_one(self, on: bool) -> None:
        """Show a RAW file and its camera JPEG as one photo in the grid (or both)."""
        self.pairs_act.setChecked(bool(on))
        self.settings.setValue("pairsAsOne", "true" if on else "false")
        self.photos.set_pairs_as_one(bool(on))

    # ======================================================================== folder watching
    def set_watching(self, on: bool) -> None:
        """Watch the open folder for changes (and index them by themselves), or stop."""
        self.watch_act.setChecked(bool(on))
        self.settings.setValue("watchFolder", "true" if on else "false")
        s = self.session
        if on and s.folder is not None:
            self.watcher.watch(s.folder, s.index_dir)
        elif not on:
            self.watcher.stop()

    def _on_folder_changed_on_disk(self) -> None:
        """Photos were added, changed, moved or removed: index what changed (after the
        running indexing or learning, when one runs)."""
        s = self.session
        if s.folder is None or s.readonly is not None:
            return  # (a reader follows its writer; read-only media do not change)
        if self.is_indexing() or self.is_learning():
            self._watch_pending = True
            return
        self._watch_pending = False
        self.status_label.setText(f"{s.folder.name} changed; indexing what changed…")
        # the paths the watcher's events named (None: scan the whole folder)
        self._start_indexing(paths=self.watcher.take_changes())

    def _on_folder_offline(self, folder: str) -> None:
        self.show_error(
            f"{Path(folder).name} is offline (an unplugged drive or a share that is not "
            "mounted?). Its index is kept, and what changed is indexed when it is back.",
            kind="warning",
        )

    def _on_folder_back(self, folder: str) -> None:
        self.status_label.setText(f"{Path(folder).name} is back.")

    def _on_collection_opened(self, event) -> None:
        index_dir = getattr(event.collection, "index_dir", None)
        if index_dir is not None:  # (known now: the watcher ignores the index's own writes)
            self.watcher.index_dir = Path(index_dir)
        self.collection_opened.emit(event.collection)

    def _on_access_changed(self, event) -> None:
        """The collection became read-only (say so, in the banner and the status bar, and
        follow the writer) or writable again."""
        s = self.session
        reason = event.readonly
        self.learn_act.setEnabled(reason is None)
        if reason is None:
            self._reader_timer.stop()
            self.access_label.hide()
            if self._banner_topic == "readonly":
                self.banner.hide()
                self._banner_topic = None
            return
        text = readonly_message(reason, s.folder, s.index_dir)
        self.access_label.setText("Read-only index")
        self.access_label.setToolTip(text)
        self.access_label.show()
        self.banner.show_message(text, "info")
        self.banner.setToolTip("")
        self._banner_topic = "readonly"
        self._reader_seen = None
        if reason == "locked":
            self._reader_timer.start()
        else:
            self._reader_timer.stop()

    def _on_metadata_changed(self, event) -> None:
        """The catalogue's metadata arrived: sort by it, show it on cards and in Info."""
        self.photos.set_metadata(event.metadata)
        self.sort_bar.refit()
        self.results_panel.delegate.metadata = event.metadata
        self.results_panel.list.viewport().update()
        if self.info_panel.path is not None:
            self._show_info(self.info_panel.path)

    def _show_info(self, path) -> None:
        """Show ``path``'s details in the info panel (from the session: no file read)."""
        if path:
            p = str(path)
            self.info_panel.show_photo(p, self.session.metadata.get(p), self.session.folder)

    def _on_photos_reset(self, event) -> None:
        self.photos.set_paths(event.paths)

    def _on_photos_added(self, event) -> None:
        self.photos.append_paths(event.paths)

    def _on_photo_removed(self, event) -> None:
        self.photos.remove_path(event.path)

    def _on_problems_changed(self, event) -> None:
        n = len(event.problems)
        self.problems_btn.setVisible(n > 0)
        self.problems_btn.setText(f"⚠ {n} skipped")

    def _on_methods_changed(self, event) -> None:
        self.results_panel.set_methods(event.methods)
        for mid, a in self.method_actions.items():
            a.setVisible(mid in event.methods)

    def _on_marks_changed(self, _event) -> None:
        self.results_panel.update_marks()
        self.results_grid.viewport().update()

    def _on_refused(self, event) -> None:
        self.show_error(event.message, kind="warning")

    def _on_job_started(self, event) -> None:
        self._sync_busy()

    def _on_job_finished(self, event) -> None:
        self._sync_busy()

    def _sync_busy(self) -> None:
        """Progress bar and Cancel while indexing or learning; the ETA while indexing."""
        jobs = self.session.jobs
        busy = jobs.running("index") or jobs.running("learn")
        self.progress.setVisible(busy)
        self.cancel_btn.setVisible(busy)
        self.eta_label.setVisible(jobs.running("index"))

    def _on_query_changed(self, event) -> None:
        src = event.source
        self.grid_delegate.query_path = src
        self.grid.viewport().update()
        name = QueryModel.display_name(src)
        pm = None if src is None else self.thumbs.pixmap(src)
        label = METHODS.get(event.method, event.method)
        hint = {
            "none": "Double-click a photo, press Enter, or drop/paste an image.",
            "pending": "Searching when indexing finishes…",
            "searching": f"Searching ({label})…",
            "done": f"{self._result_count(event)} · {label}",
            "failed": "Search failed.",
        }[event.status]
        self.results_panel.set_query(name, pm, hint)
        self._show_region()
        if self.shown.in_grid:
            self._update_results_header()
        if event.status in ("none", "searching"):
            self.results_panel.status.setText("")
        elif event.status == "done" and event.seconds is not None:
            self.results_panel.status.setText(f"Found in {event.seconds * 1000:.0f} ms")

    def _result_count(self, event) -> str:
        """``"19 results"``: the results other than the query itself (as the grid's
        heading counts them)."""
        s = self.shown
        n = s.total() if s.query is not None and s.query == event.source else event.n
        return f"{n} result{'s' if n != 1 else ''}"

    def _on_query_results(self, event) -> None:
        # (no source: no results -- a folder opened --, and the grid shows all photos)
        self.results.set_hits(event.source, event.method, event.hits, event.box)

    # ======================================================================== results grid
    def show_results_in_grid(self) -> bool:
        """Show the results in the main grid (the query first, then the hits by rank),
        on the Library tab; False (and why, in the banner) when there are none yet."""
        if self.shown.query is None:
            searching = self.session.query.status in ("pending", "searching")
            self.results_panel.set_in_grid(self.shown.in_grid)
            self.results_grid_act.setChecked(self.shown.in_grid)
            self.show_error(
                "The results show in the grid once the search has finished." if searching
                else "Search first: double-click a photo, press Enter, or drop an image; "
                "then its results can fill the grid.", kind="info",
            )  # fmt: skip
            return False
        self.shown.show_in_grid()
        self.show_view("library")
        return True

    def show_all_photos(self) -> None:
        """Show all photos in the main grid again, in the order and with the filter they
        had (Esc, *Back to all photos*)."""
        self.shown.leave_grid()

    def toggle_results_grid(self, on: bool) -> None:
        if on:
            self.show_results_in_grid()
        else:
            self.show_all_photos()

    def _on_results_grid(self, event) -> None:
        """The grid shows the results (``event.on``) or all photos again."""
        on = bool(event.on)
        self.results_panel.set_in_grid(on)
        self.results_grid_act.setChecked(on)
        self.library_stack.setCurrentWidget(self.results_page if on else self.photos_page)
        if on:
            self._update_results_header()
            self._select_best_tile()
            self.results_grid.setFocus()
        else:
            self.grid.setFocus()

    def _on_results_shown(self, _event=None) -> None:
        """New results, or the filter changed: the heading, and a tile selected (the one
        selected before when the filter still shows it, else the best result)."""
        self._update_results_header()
        if self.shown.in_grid:
            self._select_best_tile(keep=True)

    def _select_best_tile(self, keep: bool = False) -> None:
        """Select the best result shown (else the query) in the grid -- with ``keep``,
        the tile selected before if these are still the same query's results and it is
        still shown; the info panel is not changed (the person did not choose it)."""
        m, s = self.results_grid_model, self.shown
        search = (s.query, s.method, s.box)
        before, self._tile_search = self._tile_search, search
        row = m.row_of(self._tile_path) if keep and before == search and self._tile_path else -1
        if row < 0:
            best = s.best_other()
            row = m.row_of(best) if best is not None else (0 if m.rowCount() else -1)
            if row >= 0:
                self.results_grid.scrollTo(m.index(0))
        if row >= 0:
            self.results_grid.setCurrentIndex(m.index(row))
            self.results_grid.scrollTo(m.index(row))

    def _remember_tile(self, index, _previous=None) -> None:
        if index.isValid():
            self._tile_path = item_data(index, PATH_ROLE)

    def _update_results_header(self) -> None:
        s, q = self.shown, self.session.query
        status = ""
        if q.status in ("pending", "searching") and q.source is not None:
            status = f"· Searching with {QueryModel.display_name(q.source)}…"
        elif q.status == "failed":
            status = "· The last search failed"
        self.results_header.set_text(s.heading(), s.count_text(), status)
        self.results_grid_delegate.query_path = s.query

    def _sync_result_selection(self, path, *, to_grid: bool) -> None:
        """The same result selected in the side list and the grid."""
        if not path:
            return
        view, model = (
            (self.results_grid, self.results_grid_model) if to_grid
            else (self.results_panel.list, self.results)
        )  # fmt: skip
        row = model.row_of(path)
        if row >= 0 and view.currentIndex().row() != row:
            view.setCurrentIndex(model.index(row))
            view.scrollTo(model.index(row))

    def _show_region(self) -> None:
        """The query photo's region (search by region): the box searched, a line about
        it, and whether a box may be drawn (once the photo's size is known)."""
        q = self.session.query
        drawable = q.status in ("done", "failed") and q.size is not None
        if q.box is not None:  # (no break inside the numbers)
            w, h = round(q.box[2]), round(q.box[3])
            text = f"Region {w}\u00a0×\u00a0{h}\u00a0px"
        elif drawable:
            text = "Drag on the photo to search for one thing in it."
        else:
            text = ""
        self.results_panel.set_region(q.box_fractions(), text, drawable=drawable)

    def _on_query_thumbnail(self, path: str) -> None:
        """The query's thumbnail arrived after the query was shown."""
        src = self.session.query.source
        if src is not None and path == src and self.results_panel.query_pic.pixmap() is None:
            self.results_panel.query_pic.set_pixmap(self.thumbs.pixmap(src))

    def _on_match_busy(self, event) -> None:
        view = getattr(self, "matches_view", None)
        if view is not None:
            ranks = {r.hit.path: r.rank for r in self.shown.ranked()}
            view.set_choices(
                [(h.path, ranks.get(h.path)) for h in self.session.query.hits], event.result
            )
            view.set_busy(f"Matching {Path(event.query).name} with {Path(event.result).name}…")

    def _on_match_changed(self, event) -> None:
        view = getattr(self, "matches_view", None)
        if view is None:
            return
        if event.data is None:
            view.clear()
        else:
            view.hit_text = self._hit_text(getattr(event.data, "path_b", None))
            view.set_match(event.data)
            self.match_shown.emit()

    def _hit_text(self, path) -> str:
        """What the result list says of the hit ``path`` (its calibrated probability and
        label), for the "why" view: the same pair shows the same number in both."""
        for h in self.session.query.hits:
            if path is not None and _same_file(h.path, path):
                prob = getattr(h, "probability", None)
                if prob is None:
                    return ""
                return f"<b>{100 * prob:.0f} %</b> likely the same object or place"
        return ""

    def _on_duplicates_groups(self, event) -> None:
        if not event.groups:
            self.duplicates_shown.emit()

    def _on_duplicates_copies(self, _event) -> None:
        self.duplicates_shown.emit()

    # ======================================================================== construction
    def _build_views(self) -> None:
        register_view(
            "library",
            "Library",
            MainWindow._make_library,
            order=10,
            tooltip="All photos and the results of the current search",
        )
        register_view(
            "matches",
            "Why they match",
            MainWindow._make_matches,
            order=20,
            tooltip="Corresponding features of the query and a result",
        )
        register_view(
            "duplicates",
            "Duplicates",
            MainWindow._make_duplicates,
            order=30,
            tooltip="Groups of near-identical photos",
        )
        for mod in PLUGIN_MODULES:
            try:
                if importlib.util.find_spec(mod) is not None:
                    importlib.import_module(mod)
            except Exception as exc:  # a broken optional view must not stop the app
                log.warning("could not load view module %s: %s", mod, exc)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.views: dict[str, QWidget] = {}
        for spec in registered_views():
            try:
                w = spec.factory(self)
            except Exception as exc:
                log.warning("view %s failed to build: %s", spec.name, exc)
                continue
            self.views[spec.name] = w
            i = self.tabs.addTab(w, spec.title)
            self.tabs.setTabToolTip(i, spec.tooltip)
        self.banner = Banner()
        host = QWidget()
        lay = QVBoxLayout(host)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.banner)
        lay.addWidget(self.tabs, 1)
        self.setCentralWidget(host)

    def _make_library(self) -> QWidget:
        self.grid = PhotoGridView()
        self.grid.setModel(self.photos)
        self.grid_delegate = ThumbnailDelegate(self.thumbs, 160, self.grid)
        self.grid.setItemDelegate(self.grid_delegate)
        self.grid.query_requested.connect(self.query_photo)
        self.grid.open_requested.connect(self.open_full_size)
        self.grid.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.empty_hint = QLabel(
            "<h2>No photos yet</h2><p>Open a folder (Ctrl+O) or drop one here.</p>"
        )
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setObjectName("hint")
        self.sort_bar = SortBar(self.photos)
        self.sort_bar.changed.connect(lambda: self.grid.set_headings(self.photos.grouped))
        self.grid.selectionModel().currentChanged.connect(
            lambda idx, _prev: self._show_info(item_data(idx, PATH_ROLE))
        )
        # a click selects; double-click, Enter or this button searches
        self.find_btn = QPushButton("Find similar")
        self.find_btn.setToolTip(
            "Search with the selected photo (Ctrl+F; double-click or Enter does the same)"
        )
        self.find_btn.clicked.connect(self.search_selected)
        self.find_btn.setEnabled(False)  # (until a photo is selected)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 6, 0)
        top.addWidget(self.sort_bar, 1)
        top.addWidget(self.find_btn, 0, Qt.AlignmentFlag.AlignTop)
        self.photos_page = QWidget()
        ll = QVBoxLayout(self.photos_page)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.setSpacing(0)
        ll.addLayout(top)
        ll.addWidget(self.empty_hint)
        ll.addWidget(self.grid, 1)
        # the results in the grid (app/gui/results_grid.py): another page of the same place,
        # so that all photos come back exactly as they were (order, filter, scroll, selection)
        self.results_grid = ResultsGridView()
        self.results_grid.setModel(self.results_grid_model)
        self.results_grid_delegate = ResultTileDelegate(self.thumbs, self.marks, 160,
                                                        self.results_grid)  # fmt: skip
        self.results_grid.setItemDelegate(self.results_grid_delegate)
        self.results_grid.query_requested.connect(self.query_photo)
        self.results_grid.open_requested.connect(self.open_full_size)
        self.results_grid.mark_requested.connect(self.mark_result)
        self.results_grid.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        rgrid = self.results_grid  # (the person's choice, not the automatic one)
        rgrid.selectionModel().currentChanged.connect(
            lambda idx, _prev: rgrid.hasFocus() and self._show_info(item_data(idx, PATH_ROLE))
        )
        rgrid.selectionModel().currentChanged.connect(
            lambda idx, _prev: self._sync_result_selection(item_data(idx, PATH_ROLE),
                                                           to_grid=False)
        )  # fmt: skip
        rgrid.clicked.connect(lambda idx: self._show_info(item_data(idx, PATH_ROLE)))
        rgrid.selectionModel().currentChanged.connect(self._remember_tile)
        self._tile_path: str | None = None  # the tile selected, kept while filtering
        self._tile_search = None  # (query, method, box) it was selected in
        self.results_header = ResultsGridHeader()
        self.results_header.back_requested.connect(self.show_all_photos)
        self.results_header.search_requested.connect(self.search_selected)
        for view in (self.grid, self.results_grid):  # "Find similar": once one is selected
            view.selectionModel().currentChanged.connect(self._update_find_buttons)
            view.model().modelReset.connect(self._update_find_buttons)
        self.results_page = QWidget()
        rl = QVBoxLayout(self.results_page)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        rl.addWidget(self.results_header)
        rl.addWidget(self.results_grid, 1)
        self.library_stack = QStackedWidget()
        self.library_stack.addWidget(self.photos_page)
        self.library_stack.addWidget(self.results_page)
        left = self.library_stack
        self.photos.modelReset.connect(self._update_empty_hint)
        self.photos.rowsInserted.connect(self._update_empty_hint)
        self.results_panel = ResultsPanel(self.results, marks=self.marks)
        self.results_panel.mark_requested.connect(self.mark_result)
        self.results_panel.learn_requested.connect(self.learn_from_marks)
        self.results_panel.search_changed.connect(self._on_search_changed)
        self.results_panel.why_requested.connect(self.show_matches)
        self.results_panel.open_requested.connect(self.open_full_size)
        self.results_panel.export_requested.connect(self.export_results_dialog)
        self.results_panel.region_drawn.connect(self.search_region_fractions)
        self.results_panel.region_cleared.connect(self.search_whole_photo)
        self.results_panel.grid_requested.connect(self.show_results_in_grid)
        self.results_panel.grid_left.connect(self.show_all_photos)
        self.shown.events.changed.connect(self._on_results_shown)
        self.shown.events.grid.connect(self._on_results_grid)
        self.thumbs.ready.connect(self._on_query_thumbnail)
        rlist = self.results_panel.list  # (the person's choice, not the automatic one)
        rlist.selectionModel().currentChanged.connect(
            lambda idx, _prev: rlist.hasFocus() and self._show_info(item_data(idx, PATH_ROLE))
        )
        rlist.clicked.connect(lambda idx: self._show_info(item_data(idx, PATH_ROLE)))
        rlist.selectionModel().currentChanged.connect(
            lambda idx, _prev: (
                self.shown.in_grid
                and self._sync_result_selection(item_data(idx, PATH_ROLE), to_grid=True)
            )
        )
        self.info_panel = InfoPanel()
        self.side_splitter = QSplitter(Qt.Orientation.Vertical)
        self.side_splitter.addWidget(self.results_panel)
        self.side_splitter.addWidget(self.info_panel)
        self.side_splitter.setStretchFactor(0, 3)
        self.side_splitter.setStretchFactor(1, 1)
        self.side_splitter.setSizes([560, 200])
        self.splitter = QSplitter()
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.side_splitter)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([900, 380])
        self._update_empty_hint()
        return self.splitter

    def _make_matches(self) -> QWidget:
        self.matches_view = CorrespondenceView()
        self.matches_view.result_chosen.connect(self.show_matches)
        return self.matches_view

    def _make_duplicates(self) -> QWidget:
        self.dup_view = DuplicatesView(session=self.session)
        self.dup_view.thumbs = self.thumbs
        self.thumbs.ready.connect(self.dup_view.on_thumbnail)
        self.dup_view.find_requested.connect(self.find_duplicates)
        self.dup_view.group_selected.connect(self._show_group)
        self.dup_view.open_requested.connect(self.open_full_size)
        self.dup_view.trashed.connect(self._on_trashed)
        self.dup_view.message.connect(self._duplicates_warning)
        self.dup_view.reference_changed.connect(  # the shown group's keeper chosen again
            lambda: (
                self._show_group(self.session.duplicates.selected)
                if self.session.duplicates.groups and self.session.duplicates.selected >= 0
                else None
            )
        )
        self.dup_view.cleaned.connect(self._on_cleaned)
        self.dup_view.restored.connect(self._on_restored)
        self.dup_view.cleanup_finished.connect(self._duplicates_done)
        return self.dup_view

    def _duplicates_warning(self, text: str) -> None:
        """A clean-up step of the Duplicates view failed: the banner says so until a later
        step succeeds."""
        self.show_error(text, kind="warning")
        self._banner_topic = "duplicates"

    def _duplicates_done(self, text: str) -> None:
        """A clean-up step of the Duplicates view finished (or was undone) without
        failing: the status bar says what happened, and an earlier step's failure
        leaves the banner (it is no longer what is true)."""
        self.status_label.setText(text)
        if self._banner_topic == "duplicates":
            self.banner.hide()
            self._banner_topic = None

    def _build_status_bar(self) -> None:
        sb = self.statusBar()
        self.status_label = StatusLabel("Ready")
        self.progress = QProgressBar()
        self.progress.setFixedWidth(220)
        self.progress.setTextVisible(True)
        self.progress.setFormat("%v / %m")
        self.progress.hide()
        self.eta_label = QLabel()
        self.eta_label.hide()
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setToolTip("Stop indexing (Esc); photos indexed so far stay searchable")
        self.cancel_btn.clicked.connect(self.cancel_indexing)
        self.cancel_btn.hide()
        self.problems_btn = QToolButton()
        self.problems_btn.setAutoRaise(True)
        self.problems_btn.setToolTip("Show the files that were skipped and why")
        self.problems_btn.clicked.connect(self.show_problems)
        self.problems_btn.hide()
        self.access_label = QLabel()  # "Read-only" while the index cannot be written here
        self.access_label.setObjectName("accessLabel")
        self.access_label.hide()
        self.size_slider = QSlider(Qt.Orientation.Horizontal)
        self.size_slider.setRange(THUMB_MIN, THUMB_MAX)
        self.size_slider.setSingleStep(8)
        self.size_slider.setPageStep(THUMB_STEP)
        self.size_slider.setFixedWidth(120)
        self.size_slider.setToolTip("Thumbnail size (Ctrl+= / Ctrl+-)")
        self.size_slider.valueChanged.connect(self.set_thumbnail_size)
        sb.addWidget(self.status_label, 1)
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.eta_label)
        sb.addPermanentWidget(self.cancel_btn)
        sb.addPermanentWidget(self.problems_btn)
        sb.addPermanentWidget(self.access_label)
        sb.addPermanentWidget(QLabel("Size"))
        sb.addPermanentWidget(self.size_slider)

    def _act(self, menu, text, slot, shortcut=None, tip="", icon_name=None) -> QAction:
        a = QAction(text, self)
        if shortcut is not None:
            if isinstance(shortcut, list | tuple):
                a.setShortcuts([QKeySequence(s) for s in shortcut])
            else:
                a.setShortcut(QKeySequence(shortcut))
        if tip:
            a.setStatusTip(tip)
            a.setToolTip(tip)
        if icon_name:
            a.setIcon(icon(icon_name))
        a.triggered.connect(slot)
        menu.addAction(a)
        return a

    def _build_menus(self) -> None:
        mb = self.menuBar()
        m = mb.addMenu("&File")
        self._act(
            m,
            "&Open Folder…",
            self.open_folder_dialog,
            QKeySequence.StandardKey.Open,
            "Open a folder of photos",
            "folder",
        )
        self.recent_menu = m.addMenu("Open &Recent")
        self._act(m, "Open &Demo Photos", self.open_demo, None, "The bundled demo collection")
        m.addSeparator()
        self.reindex_act = self._act(
            m, "&Re-index Folder", self.reindex, "F5", "Look for new, changed and removed photos"
        )
        self.watch_act = self._act(
            m, "&Watch the Folder for Changes", self.set_watching, None,
            "Index new, changed, moved and removed photos by themselves, within seconds",
        )  # fmt: skip
        self.watch_act.setCheckable(True)
        self.watch_act.setChecked(True)
        self.export_act = self._act(
            m,
            "&Export Results…",
            self.export_results_dialog,
            "Ctrl+E",
            "Save the ranked results as CSV or JSON",
            "export",
        )
        self._act(
            m, "&Link Results into a Folder…", lambda: self.copy_results_dialog("links"),
            None, "Symbolic links to the results, named by rank, in a folder you choose",
        )  # fmt: skip
        self._act(
            m, "&Copy Results to a Folder…", lambda: self.copy_results_dialog("copies"),
            None, "Copies of the results, named by rank, in a folder you choose",
        )  # fmt: skip
        m.addSeparator()
        self._act(m, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        m = mb.addMenu("&Edit")
        self._act(
            m, "&Copy Path", self.copy_path, "Ctrl+Shift+C", "Copy the selected photo's path"
        )
        self._act(
            m,
            "&Paste Image as Query",
            self.paste_query,
            QKeySequence.StandardKey.Paste,
            "Search with the image (or image file) on the clipboard",
        )

        m = mb.addMenu("&View")
        for i, name in enumerate(self.views):
            title = self.tabs.tabText(self.tabs.indexOf(self.views[name]))
            self._act(m, title, lambda _=False, n=name: self.show_view(n), f"Alt+{i + 1}")
        m.addSeparator()
        self.results_grid_act = self._act(
            m, "Results in the &Grid", self.toggle_results_grid, "Ctrl+G",
            "Show the results large in the main grid, ranked, with their labels (Esc: back "
            "to all photos)",
        )  # fmt: skip
        self.results_grid_act.setCheckable(True)
        m.addSeparator()
        self._act(
            m, "&Larger Thumbnails", lambda: self.step_thumbnail_size(+1), ["Ctrl+=", "Ctrl++"]
        )
        self._act(m, "&Smaller Thumbnails", lambda: self.step_thumbnail_size(-1), "Ctrl+-")
        self._act(
            m, "S&kipped Files…", self.show_problems, None, "Files that could not be indexed"
        )
        self.pairs_act = self._act(
            m, "RAW + JPEG Pairs as &One", self.set_pairs_as_one, None,
            "Show a camera RAW file and the camera's JPEG beside it as one photo",
        )  # fmt: skip
        self.pairs_act.setCheckable(True)
        self.pairs_act.setChecked(True)

        m = mb.addMenu("&Search")
        self.method_group = QActionGroup(self)
        self.method_actions: dict[str, QAction] = {}
        for i, (mid, label) in enumerate(METHODS.items()):
            a = self._act(m, label, lambda _=False, k=mid: self.set_method(k), f"Ctrl+{i + 1}",
                          METHOD_TIPS.get(mid, ""))  # fmt: skip
            a.setCheckable(True)
            self.method_group.addAction(a)
            self.method_actions[mid] = a
        self.method_actions["learned"].setVisible(False)
        m.addSeparator()
        self._act(
            m, "&Find Similar", self.search_selected, "Ctrl+F",
            "Search with the selected photo (double-click or Enter in the grid does the same)",
        )  # fmt: skip
        self._act(
            m,
            "&Why Do They Match?",
            lambda: self.show_matches(None),
            "Ctrl+M",
            "Corresponding features of the query and the selected result",
        )
        self._act(
            m, "&Open Full Size", lambda: self.open_full_size(self._selected_path()), "Ctrl+Return"
        )
        self._act(
            m, "Show in &File Manager", lambda: self.reveal(self._selected_path()), "Ctrl+Shift+R"
        )
        self._act(m, "Find &Duplicates", lambda: self.find_duplicates(None), "Ctrl+D")
        m.addSeparator()
        self.learn_act = self._act(
            m,
            "&Learn From My Marks",
            self.learn_from_marks,
            "Ctrl+L",
            "Learn a similarity from your thumbs up / down on results",
        )
        self.learn_keywords_act = self._act(
            m, "Learn From My &Keywords", self.learn_from_keywords, None,
            "Learn a similarity from the keywords you gave your photos (XMP sidecars, "
            "embedded XMP, IPTC: digiKam, darktable, Lightroom)",
        )  # fmt: skip
        esc = QAction(self)
        esc.setShortcut(QKeySequence("Esc"))
        esc.triggered.connect(self._on_escape)
        self.addAction(esc)

        m = mb.addMenu("&Help")
        self._act(m, "&About Simile", self.show_about, "F1")

        grid_actions = (
            ("Search Similar", lambda: self.query_photo(self._selected_path())),
            ("Open Full Size", lambda: self.open_full_size(self._selected_path())),
            ("Show in File Manager", lambda: self.reveal(self._selected_path())),
            ("Copy Path", self.copy_path),
        )
        for text, slot in grid_actions:
            a = QAction(text, self.grid)
            a.triggered.connect(slot)
            self.grid.addAction(a)
        # the results grid: the same, and what the side list offers for a result
        for text, slot in (
            *grid_actions[:2],
            ("Why Do They Match?", lambda: self.show_matches(self._selected_path())),
            ("Mark ✓ Similar (Y)", lambda: self.results_grid.mark_selected(True)),
            ("Mark ✗ Not Similar (N)", lambda: self.results_grid.mark_selected(False)),
            *grid_actions[2:],
            ("Back to All Photos (Esc)", self.show_all_photos),
        ):
            a = QAction(text, self.results_grid)
            a.triggered.connect(slot)
            self.results_grid.addAction(a)
        self._rebuild_recent_menu()

    # ======================================================================== settings
    def _restore_settings(self) -> None:
        s = self.settings
        geo = s.value("geometry")
        if isinstance(geo, QByteArray | bytes) and self.restoreGeometry(QByteArray(geo)):
            pass
        else:
            self._first_start_geometry()
        split = s.value("splitter")
        if isinstance(split, QByteArray | bytes):
            self.splitter.restoreState(QByteArray(split))
        size = _int(s.value("thumbSize"), 160)
        self.size_slider.setValue(max(THUMB_MIN, min(THUMB_MAX, size)))
        self.set_thumbnail_size(self.size_slider.value())
        method = str(s.value("method", DEFAULT_METHOD))
        self.set_method(method if method in METHODS else DEFAULT_METHOD, rerun=False)
        sort_key = str(s.value("sortKey", "folder"))
        if sort_key in self.photos.SORT_KEYS:
            self.sort_bar.set_sort(sort_key)
        self.sort_bar.group.setChecked(str(s.value("folderHeadings", "false")) == "true")
        self.watch_act.setChecked(str(s.value("watchFolder", "true")) == "true")
        pairs = str(s.value("pairsAsOne", "true")) == "true"
        self.pairs_act.setChecked(pairs)
        self.photos.set_pairs_as_one(pairs)
        top = _int(s.value("top"), 20)
        self.results_panel.top.blockSignals(True)
        self.results_panel.top.setValue(max(1, min(500, top)))
        self.results_panel.top.blockSignals(False)

    def _first_start_geometry(self) -> None:
        screen = QGuiApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        if avail is None or avail.width() < 400:
            self.resize(1280, 800)
            return
        w = min(1440, int(avail.width() * 0.8))
        h = min(900, int(avail.height() * 0.8))
        self.resize(w, h)
        self.move(avail.center().x() - w // 2, avail.center().y() - h // 2)

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("splitter", self.splitter.saveState())
        s.setValue("thumbSize", self.size_slider.value())
        s.setValue("method", self.results_panel.current_method())
        s.setValue("top", self.results_panel.top.value())
        s.setValue("sortKey", self.photos.sort_key)
        s.setValue("folderHeadings", "true" if self.photos.grouped else "false")
        if self.session.folder is not None:
            s.setValue("lastFolder", str(self.session.folder))
        s.sync()

    def recent_folders(self) -> list[str]:
        v = self.settings.value("recentFolders", [])
        if isinstance(v, str):
            v = [v]
        return [str(x) for x in (v or [])]

    def _remember_folder(self, folder: Path) -> None:
        rec = [str(folder)] + [f for f in self.recent_folders() if f != str(folder)]
        self.settings.setValue("recentFolders", rec[:MAX_RECENT])
        if self.persist:
            self.settings.setValue("lastFolder", str(folder))
        self._rebuild_recent_menu()

    def _rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        rec = self.recent_folders()
        for i, f in enumerate(rec):
            a = self.recent_menu.addAction(f"&{i + 1}  {f}")
            a.triggered.connect(lambda _=False, p=f: self.open_folder(p))
        if not rec:
            self.recent_menu.addAction("(none)").setEnabled(False)
        else:
            self.recent_menu.addSeparator()
            clr = self.recent_menu.addAction("Clear Menu")
            clr.triggered.connect(self._clear_recent)

    def _clear_recent(self) -> None:
        self.settings.setValue("recentFolders", [])
        self._rebuild_recent_menu()

    # ======================================================================== messages
    def show_error(self, text: str, kind: str = "error") -> None:
        """Tell the user what went wrong, in plain words (never a traceback)."""
        log.info("%s: %s", kind, text)
        short = _one_line(text)
        self.banner.show_message(short, kind)
        self.banner.setToolTip(text if short != text else "")
        self._banner_topic = None
        self.status_label.setText(short)
        self.error_shown.emit(text)

    def show_failure(self, exc: BaseException, context: str = "") -> None:
        """Show what ``exc`` means: a damaged index offers its repair
        (:meth:`offer_repair`); anything else is one plain line."""
        if getattr(exc, "remedy", None) == "repair":
            self.offer_repair(exc)
        else:
            self.show_error(plain_error(exc, context))

    def offer_repair(self, error) -> None:
        """A damaged or missing index file: its one line (naming the file) in the banner,
        with a button that repairs the index (:meth:`repair_index`)."""
        text = repair_offer(error)
        log.info("repair offered: %s", text)
        self.banner.show_message(text, "error", action=(REPAIR_LABEL, self.repair_index))
        self.banner.setToolTip("")
        self._banner_topic = "repair"
        self.status_label.setText("The index is damaged; it can be repaired.")
        self.error_shown.emit(text)

    def _worker_error(self, context: str):
        def handler(exc: BaseException) -> None:
            self.show_failure(exc, context)

        return handler

    def run_worker(
        self, func, *args, connect=None, context="Background task", token=None, job=None,
        **kwargs,
    ):  # fmt: skip
        """Start ``func`` in the shared worker helper; errors go to :meth:`show_error`.

        With a session ``token`` every callback (and the error report) goes through
        :meth:`Session.accept`: results of an earlier folder or a superseded request are
        dropped. ``job`` (a label) also registers the worker as the token's running job
        (cancellable through ``session.jobs``) until it finishes.
        """
        connect = dict(connect or {})
        err = connect.pop("errored", None) or self._worker_error(context)
        if token is not None:
            connect = {k: self.session.accept(token, cb) for k, cb in connect.items()}
            err = self.session.accept(token, err)
        w = workers.create_worker(func, *args, connect=connect, start=False, **kwargs)
        w.errored.connect(err)
        if token is not None and job is not None:
            self.session.jobs.start(token, job, cancel=w.quit, handle=w)
            w.finished.connect(lambda: self.session.jobs.finish(token))
        return w.start()

    # ======================================================================== collection
    def open_demo(self) -> None:
        from app.gui.state import demo_folder

        demo = demo_folder()
        if demo is None:
            self.show_error("The demo photos are not installed; open a folder instead.")
            return
        self.open_folder(demo)

    def show_welcome(self) -> None:
        """The first start: say what the window shows and how to begin."""
        self.banner.show_message(
            "Welcome to Simile. These are demo photos, to try searching, duplicates and "
            "categories; your own photos are one click away. Simile only reads them: it "
            "never changes, moves or deletes a photo without asking.",
            kind="info",
            action=("Open a folder…", self.open_folder_dialog),
        )

    def open_folder_dialog(self) -> None:
        start = str(self.session.folder or Path.home())
        folder = QFileDialog.getExistingDirectory(self, "Open a folder of photos", start)
        if folder:
            self.open_folder(folder)

    def open_folder(self, folder, index_dir=None) -> None:
        """Open ``folder`` (index in ``index_dir`` or the default place) and index it.

        The session resets everything the window shows and makes every earlier
        background result stale, in one place (:meth:`Session.open_folder`). The bundled
        demo photos keep their index in the user's cache folder, never in the package."""
        from app.gui.state import demo_index_dir

        if index_dir is None:
            index_dir = demo_index_dir(Path(folder))
        try:
            self.session.open_folder(folder, index_dir)
        except NotADirectoryError as exc:
            self.show_error(str(exc))
            return
        self._start_indexing()

    def reindex(self) -> None:
        s = self.session
        if s.folder is None:
            self.open_folder_dialog()
            return
        if self.is_indexing():
            return
        if s.readonly == "locked":  # the other process is indexing it: look again now
            self.status_label.setText(
                "Another Simile process is indexing this folder; this view updates when it "
                "is done."
            )
            self.poll_writer()
            return
        if s.readonly is not None and s.index_dir is not None:
            if not os.access(s.index_dir, os.W_OK):
                self.show_error(
                    f"New photos cannot be indexed here: the index of {s.folder.name} "
                    f"({s.index_dir}) cannot be written. Searching what it holds works.",
                    kind="warning",
                )
                return
        if self.is_learning():
            self.show_error("Wait for learning to finish (or cancel it) before re-indexing.",
                            kind="warning")  # fmt: skip
            return
        self._start_indexing()

    def is_learning(self) -> bool:
        return self.session.jobs.running("learn")

    def is_indexing(self) -> bool:
        return self.session.jobs.running("index")

    def repair_index(self) -> None:
        """Repair the open folder's index in the background (rebuild what is damaged from
        what is intact: :meth:`engine.collection.Collection.repair`), then index the
        folder as usual. Only the index is written; the photos are never touched."""
        s = self.session
        if s.folder is None:
            self.show_error("Open a folder first: there is no index to repair.", kind="warning")
            return
        if self.is_indexing() or self.is_learning():
            self.show_error("Wait for indexing or learning to finish (or cancel it) before "
                            "repairing the index.", kind="warning")  # fmt: skip
            return
        self._start_indexing(repair=True)

    def _start_indexing(self, repair: bool = False, paths: list[str] | None = None) -> None:
        """Index the open folder in a child process: the whole folder, or only ``paths``
        of it (what the folder watcher saw change; given back to it when the run does not
        complete, so that the next run looks at them again)."""
        s = self.session
        folder = s.folder
        token = s.begin("index")
        s.supersede("reader_poll")  # (a look at another writer's index is moot now)
        self._reader_timer.stop()
        s.close_collection()  # the indexing process takes the index's writer lock
        if repair:
            self.status_label.setText(f"Repairing the index of {folder}…")
        else:
            self.status_label.setText(f"Opening {folder}…")
        self.progress.setRange(0, 0)
        self.eta_label.setText("")
        w = workers.create_worker(
            _open_and_index,
            folder,
            s.index_dir,
            repair=repair,
            paths=paths,
            pass_cancel=True,
            abort_on_quit=False,  # cancelling still opens what was indexed so far
            start=False,
        )
        label = f"Repairing the index of {folder.name}" if repair else f"Indexing {folder.name}"
        job = s.jobs.start(token, label, cancel=w.quit, handle=w)
        job.extra.update(eta=EtaEstimator(), started=time.monotonic(), paths=paths)
        w.yielded.connect(s.accept(token, lambda item: self._on_index_progress(job, item)))
        # a superseded run's collection is closed by the session, never shown
        w.returned.connect(lambda result: self._on_index_done(token, job, result))
        w.aborted.connect(s.accept(token, self._on_index_aborted))
        w.errored.connect(s.accept(token, self._on_index_error))
        w.finished.connect(s.accept(token, lambda: self._on_index_finished(token)))
        self._flush_timer.start()
        w.start()

    def _on_escape(self) -> None:
        """Esc: stop indexing or learning when either runs, else show all photos again
        when the grid shows results, else search the whole query photo again after a
        search by region."""
        if self.is_indexing() or self.is_learning():
            self.cancel_indexing()
        elif self.shown.in_grid and self.tabs.currentWidget() is self.views.get("library"):
            self.show_all_photos()
        elif self.session.query.box is not None:
            self.search_whole_photo()

    def cancel_indexing(self) -> None:
        """Stop indexing (and learning) at the next step (Esc / Cancel)."""
        for topic in ("learn", "index"):
            if self.session.jobs.cancel(topic):
                self.status_label.setText("Cancelling…")

    def _on_index_progress(self, job, item) -> None:
        s = self.session
        kind = item[0]
        if kind == "repaired":
            job.extra["repaired"] = list(item[1])
            self.status_label.setText(f"Repaired the index of {s.folder.name}; indexing…")
            return
        if kind == "opened":
            _, paths, index_dir = item
            self.thumbs.set_cache_dir(_thumb_cache(Path(index_dir)))
            s.index_opened(job.token, paths, index_dir)
            return
        p = item[1]
        total = int(getattr(p, "total", 0) or 0)
        done = int(getattr(p, "done", 0) or 0)
        status = getattr(p, "status", "")
        path = getattr(p, "path", None)
        if status in ("indexed", "unchanged") and path:
            s.photos_arrived([str(path)])
        elif status == "failed" and path:
            s.add_problem(str(path), getattr(p, "message", "") or "could not be read")
        name = s.folder.name
        if status == "finalizing":
            self.progress.setRange(0, 0)  # busy: the last step has no count
            self.eta_label.setText("")
            msg = getattr(p, "message", "") or "building the search index"
            self.status_label.setText(f"Finishing {name}: {msg}…")
        elif total > 0 and status not in ("scanning",):
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            eta = job.extra["eta"].update(done, total)
            self.eta_label.setText(f"{format_duration(eta)} left")
            self.status_label.setText(f"Indexing {name}: {done} of {total} photos")
        else:
            self.status_label.setText(getattr(p, "message", "") or "Looking for photos…")

    def _on_index_done(self, token, job, result: IndexResult) -> None:
        s = self.session
        if not s.collection_ready(token, result.collection, result.paths, result.failures,
                                  result.methods, result.marks, readonly=result.readonly,
                                  index_dir=result.index_dir):  # fmt: skip
            return  # another folder was opened meanwhile: its collection is closed
        s.set_metadata(result.metadata)
        if result.readonly is not None and result.index_dir is not None:
            self.thumbs.set_cache_dir(_thumb_cache(Path(result.index_dir)))
        wanted, s.query.wanted_method = s.query.wanted_method, None
        if wanted is not None:
            self.set_method(wanted, rerun=False)
        summary = result.summary
        n = len(s.photos)
        secs = getattr(summary, "seconds", time.monotonic() - job.extra["started"])
        new = getattr(summary, "indexed", 0)
        s.duplicates.photos_changed(new + getattr(summary, "removed", 0))
        job.extra["completed"] = not getattr(summary, "cancelled", False)
        msg = f"{n:,} photos in {s.folder.name}"
        if getattr(summary, "cancelled", False):
            msg = f"Indexing cancelled · {n:,} photos known; F5 continues where it stopped"
        elif new:
            msg += f" · {new} indexed in {format_duration(secs)}"
        if result.readonly == "locked":
            msg += " · read-only: another Simile process is indexing it"
        elif result.readonly is not None:
            msg += " · read-only index: searching works, new photos cannot be indexed here"
        self.status_label.setText(msg)
        if "repaired" in job.extra:
            self.banner.show_message(repaired_message(s.folder, job.extra["repaired"]), "info")
            self.banner.setToolTip("")
            self._banner_topic = None
        if result.notice:
            self.show_error(result.notice)

    def _on_index_aborted(self) -> None:
        self.session.flush_arrivals()
        n = len(self.session.photos)
        self.status_label.setText(
            f"Indexing cancelled · {n} photos known; F5 continues where it stopped"
        )

    def _on_index_error(self, exc) -> None:
        folder = self.session.folder
        if getattr(exc, "disk_full", False) is True or disk_full(exc):
            self.show_error(disk_full_message(folder, kept=False))
        else:
            self.show_failure(exc, f"Could not index {folder}")

    def _on_index_finished(self, token) -> None:
        s = self.session
        self._flush_timer.stop()
        s.flush_arrivals()
        job = s.jobs.get(token.topic)
        if (
            job is not None
            and job.token == token
            and job.extra.get("paths")
            and not (job.extra.get("completed"))
        ):
            self.watcher.give_back(job.extra["paths"])  # (cancelled or failed: look again)
        s.jobs.finish(token)
        self.indexing_finished.emit(s.collection)
        if self._watch_pending:  # the folder changed while it was indexed
            QTimer.singleShot(0, self._on_folder_changed_on_disk)
        if s.duplicates.refresh_after_index and s.collection is not None:
            s.duplicates.refresh_after_index = False
            self.find_duplicates(None)
        if s.query.pending is not None and s.collection is not None:
            self._run_query(s.query.take_pending(), s.query.box)

    # ======================================================================== another writer
    def poll_writer(self) -> None:
        """While another process indexes the folder (``session.readonly == "locked"``),
        look at its index off the GUI thread: show the photos it has committed since, and
        once it has finished, open the index for writing here (:func:`_poll_writer`)."""
        s = self.session
        if s.readonly != "locked" or s.folder is None or self.is_indexing():
            return
        if self._reader_poll is not None and self._reader_poll.is_running:
            return
        token = s.begin("reader_poll")
        coll = s.collection
        self._reader_poll = workers.create_worker(
            _poll_writer, s.folder, s.index_dir, coll, self._reader_seen,
            # (not guarded by the token here: a stale collection must still be closed)
            connect={"returned": lambda r: self._on_writer_news(token, coll, r),
                     "errored": s.accept(token, self._on_poll_error)},
        )  # fmt: skip

    def _on_writer_news(self, token, coll, result) -> None:
        s = self.session
        what, payload, seen = result
        if what in ("writable", "reader"):
            # (a stale one is closed by the session: a writable one holds the writer lock)
            if not s.collection_ready(token, payload.collection, payload.paths,
                                      payload.failures, payload.methods, payload.marks,
                                      readonly=payload.readonly,
                                      index_dir=payload.index_dir):  # fmt: skip
                return
            s.set_metadata(payload.metadata)
            self.thumbs.set_cache_dir(_thumb_cache(Path(payload.index_dir)))
            n = len(s.photos)
            if what == "writable":
                self.status_label.setText(
                    f"The other Simile process has finished: {n:,} photos in {s.folder.name}"
                )
            if s.query.pending is not None and s.collection is not None:
                self._run_query(s.query.take_pending(), s.query.box)
            elif s.query.source is not None and s.query.status in ("done", "failed"):
                self._run_query(s.query.source, s.query.box)  # the new version answers
            return
        if not s.is_current(token):
            return
        if what == "gone":
            self._start_indexing()  # no index (any more): make one
            return
        if s.collection is not coll:
            return  # (another collection was opened meanwhile)
        self._reader_seen = seen
        if what == "changed":
            paths, failures, methods = payload
            s.sync_photos(paths)
            s.set_problems(failures)
            s.set_methods(methods)
            self.status_label.setText(
                f"Another Simile process is indexing {s.folder.name}: {len(s.photos)} photos "
                "so far"
            )

    def _on_poll_error(self, exc) -> None:
        log.debug("looking at the index another process writes failed: %s", exc)
        if getattr(exc, "remedy", None) == "repair":
            self._reader_timer.stop()
            self.offer_repair(exc)

    # ======================================================================== search
    def query_photo(self, path, box=None) -> None:
        """Search with the photo ``path`` (a new query: the whole photo, or ``box``,
        ``(x, y, w, h)`` in pixels of the photo as displayed at its full size)."""
        if not path:
            return
        self._run_query(str(path), box)

    def search_region(self, box) -> None:
        """Search the current query photo within ``box`` (pixels of the photo at its full
        size; None: the whole photo)."""
        src = self.session.query.source
        if src is not None:
            self._run_query(src, box)

    def search_region_fractions(self, fractions) -> None:
        """A box drawn on the query photo (fractions of it): search that region."""
        try:
            box = self.session.query.box_from_fractions(fractions)
        except ValueError as exc:
            self.show_error(str(exc), kind="warning")
            return
        self.search_region(box)

    def search_whole_photo(self) -> None:
        """Search with the whole query photo again (after a search by region)."""
        if self.session.query.box is not None:
            self.search_region(None)

    def query_image(self, image: QImage) -> None:
        """Search with an image that is not a file (pasted / dropped pixels)."""
        f = Path(self._tmpdir.name) / f"pasted-{time.time_ns()}.png"
        if not image.save(str(f), "PNG"):
            self.show_error("The pasted image could not be read.")
            return
        self.query_photo(str(f))

    def set_method(self, method: str, rerun: bool = True) -> None:
        SearchSettings(method=method)  # validates
        if self.results_panel.method.findData(method) < 0 and not self._offer_method(method):
            return
        a = self.method_actions.get(method)
        if a is not None:
            a.setChecked(True)
        if self.results_panel.current_method() != method:
            self.results_panel.set_method(method)  # emits search_changed -> rerun
        elif rerun:
            self._on_search_changed(method, self.results_panel.top.value())

    def _on_search_changed(self, method: str, top: int) -> None:
        a = self.method_actions.get(method)
        if a is not None and not a.isChecked():
            a.setChecked(True)
        if self.session.query.source is not None:
            self._run_query(self.session.query.source, self.session.query.box)

    def search_settings(self) -> SearchSettings:
        return SearchSettings(self.results_panel.current_method(), self.results_panel.top.value())

    def _run_query(self, source: str, box=None) -> None:
        """Search with ``source`` within ``box`` (None: the whole photo), off the GUI
        thread (:func:`app.gui.region.search`)."""
        s = self.session
        coll = s.collection
        if coll is None or self.is_indexing():
            s.query.set_pending(source, box)
            return
        st = self.search_settings()
        token = s.begin("query")  # a newer search supersedes this one
        s.query.searching(source, st, box)
        t0 = time.monotonic()
        name = QueryModel.display_name(source)

        def done(outcome) -> None:
            s.query.set_results(source, st.method, outcome.hits, time.monotonic() - t0,
                                box=outcome.box, size=outcome.size)  # fmt: skip
            self.results_changed.emit()

        def failed(exc) -> None:
            if box is not None and isinstance(exc, ValueError):  # e.g. too few features
                s.query.region_refused()  # (the results shown stay)
                self.show_error(f"Searching a region of {name}: {exc}.", kind="warning")
            else:
                s.query.failed()
                self.show_failure(exc, f"Searching with {name} failed")
            self.results_changed.emit()

        self.run_worker(
            region_search, coll, source, method=st.method, top=st.top, box=box, token=token,
            connect={"returned": done, "errored": failed},
        )  # fmt: skip

    def export_results_dialog(self) -> None:
        if not self.session.query.hits:
            self.show_error("There are no results to export yet.", kind="warning")
            return
        start = str((self.session.folder or Path.home()) / "simile-results.csv")
        fname, _ = QFileDialog.getSaveFileName(
            self, "Export results", start, "CSV (*.csv);;JSON (*.json)"
        )
        if fname:
            self.export_results(fname)

    def export_results(self, fname) -> Path | None:
        """Save the results shown (the filter applied; the query itself left out: it is
        the ``query`` column) with their ranks, scores, calibrated probabilities and
        labels, as CSV or JSON (by the suffix of ``fname``)."""
        s = self.shown
        rows = s.others()
        if s.query is None:
            self.show_error("There are no results to export yet.", kind="warning")
            return None
        if not rows and s.total():
            self.show_error(f"The filter hides all {s.total()} results: nothing to export.",
                            kind="warning")  # fmt: skip
            return None
        try:
            out = export_results(
                fname, s.query, s.method, [r.hit for r in rows],
                ranks=[r.rank for r in rows], hidden=s.hidden(),
                filter_text=s.filter.describe() if s.hidden() else "",
            )  # fmt: skip
        except (OSError, ValueError) as exc:
            self.show_error(plain_error(exc, "Export failed"))
            return None
        hidden = f" ({s.hidden()} hidden by the filter left out)" if s.hidden() else ""
        self.status_label.setText(f"Saved {len(rows)} results{hidden} to {out}")
        return out

    def copy_results_dialog(self, mode: str) -> None:
        if not self.results.rowCount():
            self.show_error("There are no results to copy yet.", kind="warning")
            return
        start = str((self.session.folder or Path.home()).parent)
        dest = QFileDialog.getExistingDirectory(self, "Folder for the results", start)
        if dest:
            self.copy_results(dest, mode)

    def copy_results(self, dest, mode: str = "links") -> None:
        """The results shown (rank order; the query itself left out) as links or copies
        in ``dest``, written in a worker (copies of large photos take a while); only
        photos of the open folder (the session authorises each). Emits
        :attr:`results_copied` with the number written."""
        q = self.session.query.hits_source
        paths = [p for p in self.results.paths() if q is None or not _same_file(p, q)]
        verb = "link" if mode == "links" else "copy"
        try:
            self.session.authorize_all(verb, paths, among="photos")
        except ActionRefused:
            return  # (the session said why)
        what = "links" if mode == "links" else "copies"

        def done(n: int) -> None:
            self.status_label.setText(f"Put {n} results as {what} into {dest}")
            self.results_copied.emit(n)

        self.run_worker(
            copy_results, dest, paths, mode, token=self.session.begin("copy_results"),
            connect={"returned": done}, context="Copying the results failed",
        )  # fmt: skip

    # ======================================================================== feedback
    def _offer_method(self, method: str) -> bool:
        """Make ``method`` selectable if it can be used; else say why (True if offered)."""
        if method != "learned":
            return False
        if self.session.collection is None or self.is_indexing():
            self.session.query.wanted_method = method  # decided when the folder is open
            return False
        try:
            from engine.workflows.feedback import load_model

            load_model(self.session.collection)
        except LookupError as exc:
            msg = str(exc.args[0] if exc.args else exc)
            self.show_error(f"Learned similarity is not available: {msg}.", kind="info")
            return False
        except Exception as exc:
            self.show_error(plain_error(exc, "The learned similarity could not be loaded"))
            return False
        self.session.add_method("learned")
        return True

    def _writable_collection(self, what: str):
        """The open collection if ``what`` can write to its index now, else None (and the
        reason in a banner). The window holds the index's writer lock whenever it is not
        indexing (the indexing child process takes it meanwhile)."""
        if self.is_indexing():
            self.show_error(f"{what} once indexing has finished.", kind="warning")
            return None
        coll = self.session.collection
        if coll is None:
            self.show_error(f"Open a folder first: {what.lower()} needs its index.",
                            kind="warning")  # fmt: skip
            return None
        reason = self.session.readonly
        if reason == "locked":
            self.show_error(f"{what} once the other Simile process has finished indexing "
                            "this folder (this window shows its index read-only until "
                            "then).", kind="warning")  # fmt: skip
            return None
        if reason is not None or getattr(coll.store, "readonly", False):
            where = "is on read-only media" if reason == "media" else "cannot be written here"
            self.show_error(f"{what} only where the index can be written: the index of "
                            f"{self.session.folder.name} {where}.", kind="warning")  # fmt: skip
            return None
        return coll

    def mark_result(self, result: str, relevant: bool) -> None:
        """Thumbs up (``relevant``) or down on a result of the current query; clicking the
        same thumb again removes the mark. Stored in the index in the background."""
        s = self.session
        query = s.query.hits_source
        if query is None or not result:
            return
        coll = self._writable_collection("Marks can be saved")
        if coll is None:
            return
        before = s.marks.get(query, result)
        new = s.marks.toggled(query, result, relevant)
        s.set_mark(query, result, new)
        token = s.begin("marks", supersede=False)  # every save reports; a new folder drops it

        def failed(exc) -> None:
            s.set_mark(query, result, before)
            self.show_error(plain_error(exc, "Saving the mark failed"))

        self.run_worker(
            save_mark, coll, query, result, new, token=token,
            connect={"returned": lambda _n: self.marks_saved.emit(), "errored": failed},
        )  # fmt: skip

    def learn_from_marks(self) -> None:
        """Fit OASIS on the stored marks in the background (progress, Esc cancels)."""
        s = self.session
        if self.is_learning():
            return
        coll = self._writable_collection("Learning from your marks is possible")
        if coll is None:
            return
        if len(s.marks) == 0:
            self.show_error(
                "There are no marks yet: search, then click ✓ on results that are similar to "
                "the query and ✗ on those that are not.", kind="warning"
            )  # fmt: skip
            return
        self._learn(coll, "marks", "your marks")

    def learn_from_keywords(self) -> None:
        """Fit OASIS on the keywords the person gave their photos (XMP sidecars, embedded
        XMP, IPTC; :func:`engine.workflows.keywords.labels_from_keywords`), in the
        background; too few keywords is a plain message saying what is needed."""
        if self.is_learning():
            return
        coll = self._writable_collection("Learning from your keywords is possible")
        if coll is None:
            return
        self._learn(coll, "keywords", "your keywords")

    def _learn(self, coll, source: str, what: str) -> None:
        s = self.session
        from engine.workflows.feedback import learn

        token = s.begin("learn")
        self.progress.setRange(0, 0)
        self.status_label.setText(f"Learning from {what}…")

        def progress(p) -> None:
            total = int(getattr(p, "total", 0) or 0)
            if total > 0:
                self.progress.setRange(0, total)
                self.progress.setValue(min(total, int(getattr(p, "step", 0))))
            score = getattr(p, "score", float("nan"))
            self.status_label.setText(
                f"Learning from {what}: {getattr(p, 'message', '') or ''}"
                + (f" (score {score:.2f})" if score == score else "")
            )

        def done(summary) -> None:
            s.jobs.finish(token)  # before telling anyone: the window is idle again
            if summary is None:
                self.status_label.setText("Learning cancelled; nothing was changed.")
            else:
                s.add_method("learned")
                self.status_label.setText(learned_message(summary, METHODS["learned"]))
            self.learning_finished.emit(summary)

        def aborted() -> None:
            s.jobs.finish(token)
            self.status_label.setText("Learning cancelled; nothing was changed.")
            self.learning_finished.emit(None)

        def failed(exc) -> None:
            s.jobs.finish(token)
            self.show_error(plain_error(exc, f"Learning from {what} failed"))
            self.learning_finished.emit(None)

        self.run_worker(
            learn, coll, method="oasis", source=source, pass_cancel=True, token=token,
            job=f"Learning from {what}",
            connect={"yielded": progress, "returned": done, "aborted": aborted,
                     "errored": failed},
        )  # fmt: skip

    # ======================================================================== matches
    def show_matches(self, result_path=None) -> None:
        """Open the correspondence view for the query and ``result_path`` (or the best other)."""
        s = self.session
        query = s.query.source
        if query is None or s.collection is None:
            self.show_error("Search with a photo first, then pick a result.", kind="warning")
            return
        if result_path is None:
            result_path = self.results_panel.selected_path() or self.results.best_other()
        if result_path is not None and _same_file(result_path, query):
            # (the query matched with itself explains nothing: its best other result)
            result_path = self.results.best_other()
        if result_path is None:
            return
        self.show_view("matches")
        token = s.begin("match")
        s.match.start(query, result_path)
        # a search by region is explained by the region's features
        box = s.query.hits_box if s.query.hits_source == query else s.query.box
        self.run_worker(
            compute_match, s.collection, query, result_path, box=box, token=token,
            connect={"returned": s.match.set_data}, context="Matching failed",
        )  # fmt: skip

    # ======================================================================== duplicates
    def find_duplicates(self, threshold=None) -> None:
        s = self.session
        if s.collection is None or self.is_indexing():
            self.show_error(
                "Duplicates can be searched once the folder is indexed.", kind="warning"
            )
            return
        self.show_view("duplicates")
        view = self.dup_view
        if threshold is not None:
            view.threshold.blockSignals(True)
            view.threshold.setValue(float(threshold))
            view.threshold.blockSignals(False)
        thr = view.threshold.value()
        token = s.begin("duplicates")  # (also drops the copies of the groups shown)
        s.duplicates.start(thr)

        def failed(exc) -> None:
            s.duplicates.set_groups([], thr)
            self.show_error(plain_error(exc, "Finding duplicates failed"))

        self.run_worker(
            find_groups, s.collection, thr, progress=view.search_progress.changed.emit,
            pass_cancel=True, token=token, job="Finding duplicates",
            connect={"returned": lambda groups: s.duplicates.set_groups(groups, thr),
                     "errored": failed},
        )  # fmt: skip

    def _show_group(self, row: int) -> None:
        s = self.session
        g = s.duplicates.select(row)
        token = s.begin("copies")
        self.run_worker(
            describe_copies, list(g.paths), list(getattr(g, "scores", []) or []),
            self.dup_view.reference_folders(), tier_of(g), token=token,
            context="Comparing copies failed",
            connect={"returned": lambda res: s.duplicates.set_copies(*res)},
        )  # fmt: skip

    def _on_trashed(self, path: str) -> None:
        self.session.file_trashed(path)  # groups are found again once the index forgot it
        self.status_label.setText(f"Moved {shown_name(path)} to the trash")
        if not self.is_indexing():
            self._start_indexing()

    def _on_cleaned(self, paths: list) -> None:
        """A batch clean-up moved ``paths`` away: the index forgets them, then the groups
        are found again."""
        for p in paths:
            self.session.file_trashed(p)
        if not self.is_indexing():
            self._start_indexing()

    def _on_restored(self, _paths: list) -> None:
        """An undo put files back: index them, then find the groups again."""
        self.session.duplicates.refresh_after_index = True
        if not self.is_indexing():
            self._start_indexing()

    # ======================================================================== actions
    def _selected_path(self) -> str | None:
        w = QGuiApplication.focusObject()
        if w is self.results_panel.list:
            return self.results_panel.selected_path()
        if self.shown.in_grid:
            idx = self.results_grid.currentIndex()
            return item_data(idx, PATH_ROLE) if idx.isValid() else self.shown.best_other()
        idx = self.grid.currentIndex()
        if idx.isValid():
            return item_data(idx, PATH_ROLE)
        return self.results_panel.selected_path()

    def search_selected(self) -> None:
        """Search with the photo selected (*Find similar*, Ctrl+F): in the grid shown
        (all photos or the results), or in the side list when it has the focus."""
        if QGuiApplication.focusObject() is self.results_panel.list:
            view = self.results_panel.list
        else:
            view = self.results_grid if self.shown.in_grid else self.grid
        idx = view.currentIndex()
        path = item_data(idx, PATH_ROLE) if idx.isValid() else None
        if not path:
            self.show_error("Select a photo first (a click), then Find similar.", kind="info")
            return
        self.query_photo(path)

    def _update_find_buttons(self, *_a) -> None:
        for view, btn in ((self.grid, self.find_btn),
                          (self.results_grid, self.results_header.find_btn)):  # fmt: skip
            idx = view.currentIndex()
            btn.setEnabled(idx.isValid() and bool(item_data(idx, PATH_ROLE)))

    def show_view(self, name: str) -> None:
        w = self.views.get(name)
        if w is not None:
            self.tabs.setCurrentWidget(w)

    def set_thumbnail_size(self, size: int) -> None:
        size = max(THUMB_MIN, min(THUMB_MAX, int(size)))
        if self.size_slider.value() != size:
            self.size_slider.setValue(size)  # re-enters once
            return
        self.grid_delegate.size = size
        self.grid.set_cell_size(self.grid_delegate.sizeHint(None, None) + QSize(4, 4))
        self.results_grid_delegate.size = size
        self.results_grid.set_cell_size(
            self.results_grid_delegate.sizeHint(None, None) + QSize(4, 4)
        )

    def step_thumbnail_size(self, direction: int) -> None:
        self.set_thumbnail_size(self.size_slider.value() + direction * THUMB_STEP)

    def copy_path(self) -> None:
        p = self._selected_path()
        if p:
            QGuiApplication.clipboard().setText(str(p))
            self.status_label.setText(f"Copied {p}")

    def paste_query(self) -> None:
        md = QGuiApplication.clipboard().mimeData()
        if md is None:
            return
        if not self._query_from_mime(md):
            self.show_error("The clipboard holds no image or image file.", kind="warning")

    def reveal(self, path) -> None:
        if path:
            QDesktopServices.openUrl(_local_url(Path(path).parent))

    def open_full_size(self, path) -> None:
        if not path:
            return
        viewer = ImageViewer(str(path), self)
        viewer.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._viewers.append(viewer)
        viewer.destroyed.connect(
            lambda *_: self._viewers.remove(viewer) if viewer in self._viewers else None
        )
        viewer.show()

        def load(p):
            from engine.io.imageio import image_size, load_image

            arr = load_image(p, max_side=4096)
            w, h = image_size(p)
            return array_to_qimage(arr), f"{display_path(p)}  ·  {w}×{h}"

        self.run_worker(
            load,
            str(path),
            # (a viewer closed before its photo was read is gone: nothing to show it in)
            connect={"returned": lambda r: viewer in self._viewers and viewer.set_image(*r)},
            context=f"Opening {shown_name(path)} failed",
        )

    def show_problems(self) -> None:
        dlg = ProblemsPanel(self)
        dlg.set_problems(self.problems)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()
        self._problems_dialog = dlg

    def show_about(self) -> None:
        dlg = AboutDialog(self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()

    def _update_empty_hint(self, *_a) -> None:
        empty = self.photos.rowCount() == 0
        self.empty_hint.setVisible(empty)
        self.grid.setVisible(not empty)

    # ======================================================================== drag & drop
    def dragEnterEvent(self, event) -> None:
        md = event.mimeData()
        if md.hasUrls() or md.hasImage():
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:
        if self._query_from_mime(event.mimeData(), allow_folder=True):
            event.acceptProposedAction()

    def _query_from_mime(self, md, allow_folder: bool = True) -> bool:
        if md.hasUrls():
            for url in md.urls():
                if not url.isLocalFile():
                    continue
                p = Path(_local_path(url))
                if p.is_dir() and allow_folder:
                    self.open_folder(p)
                    return True
                if p.is_file():
                    self.query_photo(str(p))
                    return True
        if md.hasImage():
            img = md.imageData()
            if isinstance(img, QImage) and not img.isNull():
                self.query_image(img)
                return True
        return False

    # ======================================================================== shutdown
    def closeEvent(self, event) -> None:
        self._reader_timer.stop()
        self.watcher.stop()
        if self.persist:
            self.save_settings()
        for job in self.session.jobs:
            self.session.jobs.cancel(job.topic)
        self.thumbs.shutdown()
        workers.wait_all(10_000)
        self.session.close()  # what workers still deliver is stale; the index is closed
        self._tmpdir.cleanup()
        super().closeEvent(event)


def learned_message(summary, method_label: str) -> str:
    """The status line after learning. With fewer comparisons than OASIS holds some aside
    for (:data:`engine.learn.oasis.MIN_TRIPLETS_TO_SCORE`), there is no before/after score
    to show: say how many comparisons it takes, never "nan → nan"."""
    from engine.learn.oasis import MIN_TRIPLETS_TO_SCORE

    n = int(summary.n_constraints)
    text = f"Learned from {n} comparisons in {format_duration(summary.seconds)}"
    before, after = float(summary.score_before), float(summary.score_after)
    if before == before and after == after:  # both measured
        text += f" ({summary.score_name} {before:.2f} → {after:.2f})"
    elif n < MIN_TRIPLETS_TO_SCORE:
        # (a comparison is a ✓ result against a ✗ one of the same search: how many more
        # marks make the missing ones depends on which, so no number of marks is promised)
        text += (
            f"; {MIN_TRIPLETS_TO_SCORE} are needed to measure what it learned: mark more "
            "results ✓ or ✗ and learn again"
        )
    return text + f". Search with '{method_label}'."


# ============================================================================ worker side
@dataclass
class IndexResult:
    """What indexing hands the session: the searchable collection and what it knows.

    ``collection`` is None when none could be opened yet (another process is creating the
    index); ``readonly`` says why it was opened read-only (None: writable); ``notice``
    is a message to show once it is open (e.g. the disk filled up while indexing)."""

    summary: object
    paths: list[str]
    failures: list
    methods: list[str]
    marks: list
    collection: object
    readonly: str | None = None
    index_dir: str | None = None
    notice: str | None = None
    #: path -> PhotoMetadata of the photos whose metadata the catalogue holds
    metadata: dict = field(default_factory=dict)


def _result(coll, summary=None, readonly: str | None = None) -> IndexResult:
    """An :class:`IndexResult` of the open collection ``coll``."""
    return IndexResult(
        summary,
        [str(p) for p in coll.paths()],
        [*coll.failures(), *getattr(summary, "skipped", ())],
        _available_methods(coll),
        _stored_marks(coll),
        coll,
        readonly,
        str(coll.index_dir),
        metadata=_stored_metadata(coll),
    )


def _stored_metadata(coll) -> dict:
    """What the photos record (date taken, camera, ...), from the catalogue (read here,
    off the GUI thread)."""
    try:
        return coll.store.path_metadata()
    except Exception as exc:  # (an unreadable table must not stop the folder opening)
        log.warning("could not read the photos' metadata: %s", exc)
        return {}


def _open_and_index(
    folder: Path,
    index_dir: Path | None,
    cancel=None,
    repair: bool = False,
    paths: list[str] | None = None,
):
    """Index ``folder`` in a child process (see :mod:`app.gui.indexer`), yielding its
    progress (first repairing its index, with ``repair``), then open the finished index
    here for searching (and read its marks).

    When the index cannot be written, what it holds is opened read-only instead: another
    process holds the writer lock (``readonly="locked"``: the window follows that writer),
    or the index's folder cannot be written (read-only media: ``"media"``; no permission:
    ``"permission"``). A full disk keeps the previous version of the index, which is
    opened (with a ``notice`` saying so). Anything else raises
    :class:`app.gui.indexer.IndexingError` (or the store's error) for the window to show.
    """
    from app.gui.indexer import IndexingError, index_in_child
    from engine.collection import Collection
    from engine.index.store_errors import IndexLockedError

    try:
        summary = yield from index_in_child(
            folder, index_dir, cancel=cancel, repair=repair, paths=paths
        )
    except IndexingError as exc:
        if exc.locked:
            return _open_reader(folder, index_dir, "locked")
        if exc.not_writable:
            reason = "media" if exc.errno == errno.EROFS else "permission"
            result = _open_reader(folder, index_dir, reason)
            if result is None or result.collection is None:
                raise
            return result
        if exc.disk_full:
            try:
                coll = Collection.open(folder, index_dir, create=False)
            except Exception as again:
                log.info("the previous index could not be opened either: %s", again)
                raise exc from None
            result = _result(coll)
            result.notice = disk_full_message(folder)
            return result
        raise
    try:
        coll = Collection.open(folder, index_dir)
    except IndexLockedError:  # another process took the lock as the child let it go
        return _open_reader(folder, index_dir, "locked", summary)
    return _result(coll, summary)


def _open_reader(folder: Path, index_dir: Path | None, reason: str, summary=None):
    """Open the index of ``folder`` read-only (``reason``: why, see
    :attr:`app.gui.session.Session.readonly`) and load its saved search models and data,
    so that a damaged file is reported now rather than by the first search.

    Returns an :class:`IndexResult` (without a collection while another process is
    still creating the index, ``reason == "locked"``), or None when there is no index.
    """
    from engine.collection import Collection, default_index_dir
    from engine.index.keys import MODELS_STATE
    from engine.index.store_errors import IndexNotFoundError

    try:
        coll = Collection.open(folder, index_dir, readonly=True)
    except IndexNotFoundError:
        if reason != "locked":
            return None
        where = index_dir if index_dir is not None else default_index_dir(folder)
        return IndexResult(summary, [], [], _available_methods(None), [], None, reason,
                           str(where))  # fmt: skip
    try:
        if coll.store.snapshot().has(MODELS_STATE):
            coll.searcher.ensure()  # (without saved models a reader fits its own at once)
    except LookupError:
        pass  # no usable photo yet
    except BaseException:
        coll.close()
        raise
    return _result(coll, summary, reason)


def _poll_writer(folder: Path, index_dir: Path | None, coll, seen):
    """One look, off the GUI thread, at an index another process is writing (the window
    shows it read-only, ``coll``; None when it could not be opened yet).

    Returns ``(what, payload, seen)``:

    - ``("writable", IndexResult, None)``: the writer has finished; the index is now open
      for writing here (this process holds its writer lock);
    - ``("reader", IndexResult, None)``: the index could be opened read-only at last;
    - ``("changed", (paths, failures, methods), seen)``: the writer committed since
      ``seen`` (the catalogue's and the saved states' generations);
    - ``("same", None, seen)``: nothing new;
    - ``("gone", None, None)``: there is no index (any more): index the folder.
    """
    from engine.collection import Collection
    from engine.index.store_errors import IndexLockedError, IndexNotFoundError

    if index_dir is None and coll is not None:
        index_dir = coll.index_dir
    try:
        writer = Collection.open(folder, index_dir, create=False)
    except IndexLockedError:
        pass
    except IndexNotFoundError:
        return "gone", None, None
    else:
        return "writable", _result(writer), None
    if coll is None:
        result = _open_reader(folder, index_dir, "locked")
        if result is not None and result.collection is not None:
            return "reader", result, None
        return "same", None, seen
    now = (coll.store.generation, coll.store.snapshot().generation)
    if now == seen:
        return "same", None, seen
    paths = [str(p) for p in coll.paths()]
    return "changed", (paths, coll.failures(), _available_methods(coll)), now


def _stored_marks(coll) -> list:
    try:
        from engine.workflows.feedback import load_marks

        return list(load_marks(coll))
    except Exception as exc:  # an unreadable mark list must not stop the folder opening
        log.warning("could not read the marks: %s", exc)
        return []


def _preload_engine() -> None:
    """Import the engine before the window shows.

    Importing numpy/scipy/OpenCV extension modules holds the GIL for long stretches; done
    lazily in a worker it would freeze the visible window for a fraction of a second.
    """
    for mod in (
        "engine.collection",
        "engine.features.keypoints",
        "engine.io.imageio",
        "PIL.Image",
        "engine.learn",
    ):
        try:
            importlib.import_module(mod)
        except ImportError as exc:  # reported later, in plain words, when it is needed
            log.debug("preload of %s failed: %s", mod, exc)
    # The modules' objects live forever: keep them out of the cyclic collector, whose
    # full passes would otherwise walk them all while holding the GIL (a visible hitch).
    gc.freeze()


def _same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: symlinks resolved, hard links too
    (a file that is gone: by its resolved path)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, TypeError, ValueError):
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError, TypeError):
        return False


def _available_methods(coll) -> list[str]:
    """Methods to offer: the built-in ones, plus "learned" once a module registered it.
    "wta" only above :data:`engine.index.candidates.EXHAUSTIVE_LIMIT` photos: below it,
    every photo is scored exactly and its ranking is the "vocabulary" one (a menu entry
    that would do nothing different)."""
    methods = [m for m in METHODS if m != "learned"]
    if coll is None:
        return methods
    try:
        from engine.index.candidates import EXHAUSTIVE_LIMIT

        if len(coll.paths()) <= EXHAUSTIVE_LIMIT:
            methods.remove("wta")
    except Exception as exc:  # (a closed or damaged store: offer what the CLI offers)
        log.debug("collection size probe failed: %s", exc)
    try:
        import engine.collection as ec
        import engine.workflows.feedback as fb  # registers "learned"

        if "learned" in ec.available_methods() and coll.store.has_state(fb.MODEL_STATE):
            methods.append("learned")
    except Exception as exc:  # optional: never block the window
        log.debug("learned method probe failed: %s", exc)
    return methods


def _thumb_cache(index_dir: Path) -> Path:
    d = Path(index_dir) / "thumbnails"
    try:
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return default_cache_dir()


def _local_path(url: QUrl) -> str:
    """The exact path of a local file URL (a drop): its percent-encoded bytes decoded as
    the file system does. ``QUrl.toLocalFile`` turns the bytes of a name that is not
    UTF-8 into U+FFFD, which names no file (POSIX; elsewhere names are Unicode)."""
    if os.name != "posix":
        return url.toLocalFile()
    from urllib.parse import unquote_to_bytes

    return os.fsdecode(unquote_to_bytes(url.path(QUrl.ComponentFormattingOption.FullyEncoded)))


def _local_url(path) -> QUrl:
    """The file URL of ``path`` with every byte of its name (:func:`_local_path`'s inverse)."""
    if os.name != "posix":
        return QUrl.fromLocalFile(str(path))
    from urllib.parse import quote

    return QUrl.fromEncoded(b"file://" + quote(os.fsencode(path)).encode("ascii"))


def _one_line(text: str, limit: int = 220) -> str:
    """The first line of a message, shortened: banners and the status bar stay one line."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if len(first) > limit:
        first = first[: limit - 1].rstrip() + "…"
    elif len(lines) > 1:
        first += " …"
    return first


def _int(v, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default
