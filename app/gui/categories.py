"""The Categories view: the folder grouped into unsupervised categories (thesis Ch. 9).

One row per group: an editable name, the group's size, its prototypes first (gold star)
and its outliers marked (red frame), then the other members by decreasing flow
(Sec. 9.4). A person corrects the grouping by

* dragging a photo onto another group (or *Move to group* in its context menu; several
  photos of a group picked with Ctrl- or Shift-click move together, as one edit): the
  photo moves and nothing else does (:func:`engine.cluster.move_edit`), and the move
  becomes must-group / cannot-group constraints (:func:`engine.cluster.move_constraints`,
  Sec. 9.2) that keep it when the folder is grouped again;
* *Split* (a two-way normalized cut of the group's own affinities, computed in a worker
  from the group's members only, so it works for folders grouped with the Nystrom
  approximation too) and *Merge with* (the union of the two groups); both are also
  written down as constraints so a later re-grouping keeps them;
* choosing the number of groups (automatic: the largest eigengap, whose reason is shown).

*Show feature mask* draws a photo's keypoints coloured by its mask weight: the median,
over matchings with the best members of its group, of each feature's correspondence
weight (Sec. 9.3, the "median indicator"), i.e. which features made it belong.
*Export* writes the grouping as folders of symbolic links or copies (the originals are
never moved or deleted) or as CSV.

The grouping, the names and the user's constraints are kept in the index keyed by photo
path, so they survive restarts (:func:`engine.cluster.save_edits` /
:func:`engine.cluster.load_edits`, kv entry :data:`engine.index.keys.CATEGORY_EDITS_KEY`);
a folder never grouped here shows the last grouping of ``simile cluster``
(:func:`engine.cluster.load_grouping`). Ctrl+Z undoes every edit, also after a restart: the
states before the last edits are kept beside them (:mod:`engine.cluster.history`).

The work is the engine's (:mod:`engine.cluster.edits`, :mod:`engine.cluster.grouping`): the
grouping pipeline (the one ``simile cluster`` runs), splitting, merging, names that follow
their groups, the affinities after a restart, storing and loading. This module runs it in
workers and draws it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QMimeData, QPointF, QRect, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QColor,
    QFont,
    QKeySequence,
    QPainter,
    QPen,
    QPixmap,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.models import (
    PATH_ROLE,
    ThumbModel,
    ThumbnailDelegate,
    item_data,
    pixmap_fit,
    shown_name,
    strength_colour,
)
from app.gui.session import ActionRefused
from app.gui.state import plain_error
from app.gui.thumbnails import array_to_qimage
from app.gui.views import register_view
from engine.index import keys

if TYPE_CHECKING:  # pragma: no cover
    from engine.cluster.edits import EditableGrouping as Grouping

__all__ = [
    "CategoriesView",
    "affinity_job",
    "compute_mask",
    "export_grouping",
    "group_job",
    "make_categories_view",
    "split_job",
]

log = logging.getLogger(__name__)

#: The kv entry of the person's edits (:data:`engine.index.keys.CATEGORY_EDITS_KEY`).
KV_KEY = keys.CATEGORY_EDITS_KEY
MIME = "application/x-simile-photo"
MASK_PARTNERS = 8
MOVE_ANCHORS = 8
MASK_SIDE = 640
EMPTY_TEXT = "Open a folder, then group its photos."
NO_PHOTOS_TEXT = "No photos to group yet: add photos to the folder and they are grouped here."
#: Rows of photos a group shows before it scrolls.
MAX_GRID_ROWS = 3
#: A group of more than REPRESENTATIVES_FROM photos shows its REPRESENTATIVES first ones
#: (prototypes first, then by flow) large above its grid.
REPRESENTATIVES = 3
REPRESENTATIVES_FROM = 8
MASK_HINT = ("Double-click a photo (or right-click ▸ Show feature mask) to see which of its "
             "features made it belong to its group.")  # fmt: skip

#: What moved to the engine (:mod:`engine.cluster.edits`), still importable from here; the
#: engine is imported when first needed, not with the app.
_ENGINE_NAMES = {"Grouping": "EditableGrouping", "carry_names": "carry_names",
                 "merge_ranks": "merge_ranks"}  # fmt: skip


def __getattr__(name: str):
    """``Grouping`` (:class:`engine.cluster.EditableGrouping`, the grouping shown),
    ``carry_names`` and ``merge_ranks`` live in :mod:`engine.cluster.edits`."""
    if name in _ENGINE_NAMES:
        import engine.cluster.edits as edits

        return getattr(edits, _ENGINE_NAMES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ============================================================================ export
_UNSAFE = re.compile(r"[^\w\-. ]+", re.UNICODE)


def group_label(grouping, g: int) -> str:
    """How a menu names group ``g``: its name and size ("Pizza (11 photos)"), with a "&" in
    the name doubled so that Qt shows it instead of taking it for a shortcut mark."""
    n = int(np.count_nonzero(np.asarray(grouping.labels) == g))
    return f"{grouping.name(g).replace('&', '&&')} ({n} photo{'s' if n != 1 else ''})"


def _folder_name(name: str, g: int) -> str:
    safe = _UNSAFE.sub("_", name).strip(" ._")
    return f"{g + 1:02d} {safe}" if safe else f"{g + 1:02d} Group {g + 1}"


def export_grouping(dest, grouping: Grouping, mode: str = "links") -> int:
    """Write the grouping without touching the originals; returns the files written.

    Parameters
    ----------
    dest : path
        ``mode="csv"``: the CSV file (columns ``path, group, name, prototype, outlier``).
        Otherwise a folder that receives one sub-folder per group (``"01 Name"``).
    mode : {"links", "copies", "csv"}
        Symbolic links to the originals (to their absolute paths as listed, never to where
        a symlinked photo points), copies of them, or a CSV table.
    """
    if mode not in ("links", "copies", "csv"):
        raise ValueError(f"mode must be 'links', 'copies' or 'csv', got {mode!r}")
    dest = Path(dest)
    if mode == "csv":
        dest.parent.mkdir(parents=True, exist_ok=True)
        # (a file name that is not UTF-8 written as its own bytes)
        with dest.open("w", newline="", encoding="utf-8", errors="surrogateescape") as fh:
            w = csv.writer(fh)
            w.writerow(["path", "group", "name", "prototype", "outlier"])
            for g in range(grouping.k):
                for i in grouping.members(g):
                    row = [grouping.paths[i], g + 1, grouping.name(g)]
                    w.writerow([*row, int(grouping.prototypes[i]), int(grouping.outliers[i])])
        return len(grouping.paths)
    originals = {Path(p).resolve() for p in grouping.paths}
    if dest.resolve() in originals:
        raise ValueError(f"{dest} is one of the photos")
    written = 0
    for g in range(grouping.k):
        sub = dest / _folder_name(grouping.name(g), g)
        sub.mkdir(parents=True, exist_ok=True)
        for i in grouping.members(g):
            src = Path(grouping.paths[i])
            target = sub / src.name
            n = 1
            while target.exists() or target.is_symlink():  # never overwrite anything
                target = sub / f"{src.stem}_{n}{src.suffix}"
                n += 1
            if mode == "links":  # to the photo as the folder shows it (a link stays a link)
                os.symlink(os.path.abspath(src), target)
            else:
                shutil.copy2(src, target)
            written += 1
    return written


# ============================================================================ worker side
#: Progress messages of the stages of :func:`engine.cluster.categorize_iter`.
STAGE_TEXT = {
    "features": "Computing dense features for grouping (once per photo)…",
    "vocabulary": "Learning visual words…",
    "bins": "Describing photos by visual words…",
    "affinity": "Computing pyramid-match affinities…",
    "scenes": "Finding photos of the same object or place (once per photo)…",
    "spectrum": "Normalized cuts…",
    "discretize": "Normalized cuts…",
    "rank": "Ranking group members…",
    "match": "Refining with feature masks…",
    "masks": "Refining with feature masks…",
    "classify": "Assigning photos with the prototypes' classifier…",
    "place": "Placing the new photos into your groups…",
}


def _progress_items(gen):
    """Turn ``ClusterProgress`` items into ``(message, done, total)`` for the view; returns
    the generator's value."""
    while True:
        try:
            p = next(gen)
        except StopIteration as stop:
            return stop.value
        yield (STAGE_TEXT.get(p.stage, p.message or f"{p.stage}…"), int(p.done), int(p.total))


def group_job(coll, K, k, must_paths, cannot_paths, cancel=None):
    """Worker generator: the shared grouping pipeline (:func:`engine.cluster.group_collection_iter`
    with dense features, the same as ``simile cluster``): dense features (computed once per
    photo and cached in the index), pyramid-match affinities, normalized cuts with the
    user's constraints, feature-mask refinement, prototypes' SVM.

    ``K`` is unused (kept for the call signature; the affinities are always recomputed from
    the cached channel, which is cheap). Yields ``(message, done, total)``; returns
    ``(paths, K, Grouping)`` with ``K`` the (n, n) affinities for later edits (None for very
    large folders, grouped with the Nystrom approximation).
    """
    from engine.cluster import EditableGrouping, group_collection_iter, pairs_to_rows

    del K
    paths = [str(p) for p in coll.paths()]
    n = len(paths)
    if n == 0:
        raise ValueError("there are no indexed photos to group")
    if not isinstance(k, str) and k > n:
        raise ValueError(f"there are only {n} photos; cannot make {k} groups")
    must, cannot = pairs_to_rows(paths, must_paths), pairs_to_rows(paths, cannot_paths)
    gen = group_collection_iter(coll, k=k, must=must, cannot=cannot, cancel=cancel)
    res = yield from _progress_items(gen)
    g = EditableGrouping.from_grouping(res, None if n > 1 else "a single photo: one group")
    return g.paths, res.kernel, g


def place_job(coll, grouping, cancel=None):
    """Worker generator: place the photos added to the folder since ``grouping`` was made
    into its groups (:func:`engine.cluster.place_photos_iter`: an SVM on the groups'
    prototypes; unsure ones in a group "To review"), then the affinities for later edits.
    Yields ``(message, done, total)``; returns ``(Placement, K or None)``."""
    from engine.cluster import category_affinities_iter, place_photos_iter

    placed = yield from _progress_items(place_photos_iter(coll, grouping, cancel=cancel))
    K = yield from _progress_items(category_affinities_iter(coll, cancel=cancel))
    return placed, K


def affinity_job(coll, cancel=None):
    """Worker generator: the (n, n) affinities of the grouping pipeline from the cached dense
    channel (:func:`engine.cluster.category_affinities_iter`, for edits after a restart);
    yields ``(message, done, total)``. Returns None above
    :data:`engine.cluster.NYSTROM_AUTO_MIN` photos, where the grouping keeps no (n, n)
    matrix either (edits then use :func:`split_job` / :func:`merge_ranks`)."""
    from engine.cluster import category_affinities_iter

    return (yield from _progress_items(category_affinities_iter(coll, cancel=cancel)))


def save_grouping_state(store, state: dict) -> None:
    """Write what :meth:`app.gui.session.GroupingModel.saved_state` copied into the index
    (:func:`engine.cluster.save_edits`; :func:`engine.cluster.save_history` when it holds
    the history). Runs on the session's writer thread."""
    from engine.cluster import save_edits, save_history

    save_edits(store, state["grouping"], state["must"], state["cannot"], state["k"],
               state["placed"])  # fmt: skip
    if "history" in state:
        save_history(store, state["history"])


def split_job(coll, paths, labels, group: int, K=None, cancel=None):
    """Worker generator: cut group ``group`` in two
    (:func:`engine.cluster.split_group_iter`: a 2-way normalized cut of its own affinities,
    from ``K`` when given, else from the cached dense channel). Yields ``(message, done,
    total)``; returns the :class:`engine.cluster.SplitResult` ``(idx, halves, flow,
    prototypes, outliers)``."""
    from engine.cluster import split_group_iter

    return (yield from _progress_items(split_group_iter(coll, paths, labels, group, K, cancel)))


@dataclass
class MaskData:
    path: str
    image: object  # QImage
    xy: np.ndarray  # (m, 2) float32 in image pixels
    weight: np.ndarray  # (m,) float32 in [0, 1]
    n_partners: int


def compute_mask(coll, path: str, partners: list[str]) -> MaskData:
    """Worker side: the feature mask of ``path`` within its group (thesis Sec. 9.3), on
    the dense features the grouping used (:func:`engine.cluster.category_mask`): for each
    partner the correspondence weights of ``path``'s features form an indicator vector (0
    where a feature is unmatched); the mask is their median, scaled to max 1.
    """
    from engine.cluster import category_mask
    from engine.io.imageio import load_image

    partners = [q for q in partners if q != path][:MASK_PARTNERS]
    fi, mask = category_mask(coll, path, partners, max_partners=MASK_PARTNERS)
    img = load_image(path, max_side=MASK_SIDE)
    fw, fh = fi.image_size
    s = np.array([img.shape[1] / max(fw, 1), img.shape[0] / max(fh, 1)], np.float32)
    xy = np.asarray(fi.xy, np.float32).reshape(-1, 2) * s
    return MaskData(str(path), array_to_qimage(img), xy, mask, len(partners))


def draw_mask(data: MaskData) -> QPixmap:
    """The photo with its keypoints as discs coloured (and sized) by mask weight;
    weak features are drawn small and faint so the ones that count stand out."""
    pm = QPixmap.fromImage(data.image)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.fillRect(pm.rect(), QColor(0, 0, 0, 90))  # dim the photo: the features are the subject
    order = np.argsort(data.weight, kind="stable")  # strongest drawn last, on top
    for i in order.tolist():
        w = float(data.weight[i])
        x, y = float(data.xy[i, 0]), float(data.xy[i, 1])
        r = 2.0 + 5.0 * w
        p.setPen(QPen(QColor(0, 0, 0, 160), 1.0))
        p.setBrush(strength_colour(w, 110 + int(145 * w)))
        p.drawEllipse(QPointF(x, y), r, r)
    p.end()
    return pm


# ============================================================================ Qt models/views
class GroupModel(ThumbModel):
    """The members of one group (already ordered), draggable to other groups."""

    def __init__(self, thumbs, group: int, parent=None) -> None:
        super().__init__(thumbs, parent)
        self.group = group
        self.proto: list[bool] = []
        self.outlier: list[bool] = []
        self.placed: list[float | None] = []  # the confidence of a photo Simile placed

    def set_members(self, paths, proto, outlier, placed=None) -> None:
        """The members in their order; ``placed``: path -> confidence of the photos Simile
        placed here (marked "new" until the person moves them)."""
        self.beginResetModel()
        self._paths = [str(p) for p in paths]
        self.proto = [bool(x) for x in proto]
        self.outlier = [bool(x) for x in outlier]
        self.placed = [(placed or {}).get(p) for p in self._paths]
        self._reindex()
        self.endResetModel()

    def data(self, index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._paths):
            return None
        r = index.row()
        p = self._paths[r]
        if role == Qt.ItemDataRole.DisplayRole:
            return shown_name(p)
        if role == Qt.ItemDataRole.ToolTipRole:
            tags = ["prototype"] if self.proto[r] else []
            tags += ["outlier: fits this group badly"] if self.outlier[r] else []
            if self.placed[r] is not None:
                tags += [f"new: placed here by Simile (confidence {self.placed[r]:.0%}); "
                         "drag it to another group if it belongs there"]  # fmt: skip
            extra = f"\n{', '.join(tags)}" if tags else ""
            return f"{shown_name(p)}{extra}\nDrag onto another group to move it"
        if role == Qt.ItemDataRole.DecorationRole:
            return self.thumbs.pixmap(p)
        if role == PATH_ROLE:
            return p
        return None

    def flags(self, index):
        f = super().flags(index)
        return f | Qt.ItemFlag.ItemIsDragEnabled if index.isValid() else f

    def mimeTypes(self) -> list[str]:
        return [MIME]

    def supportedDragActions(self):
        return Qt.DropAction.CopyAction | Qt.DropAction.MoveAction

    def mimeData(self, indexes) -> QMimeData:
        md = QMimeData()
        paths = [self._paths[i.row()] for i in indexes if i.isValid()]
        md.setData(MIME, json.dumps({"group": self.group, "paths": paths}).encode())
        return md


class GroupDelegate(ThumbnailDelegate):
    """Thumbnail cell with a gold star on prototypes and a red frame on outliers."""

    def paint(self, painter: QPainter, option, index) -> None:
        super().paint(painter, option, index)
        model = index.model()
        r = index.row()
        proto = bool(model.proto[r]) if hasattr(model, "proto") else False
        outl = bool(model.outlier[r]) if hasattr(model, "outlier") else False
        new = hasattr(model, "placed") and model.placed[r] is not None
        if not (proto or outl or new):
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        cell = option.rect.adjusted(3, 3, -3, -3)
        # the marks sit on the picture itself (a portrait or a wide photo is narrower or
        # lower than its cell), as the thumbnail delegate draws it
        img = QRect(cell.left() + 4, cell.top() + 4, cell.width() - 8, self.size)
        img = pixmap_fit(img, index.data(Qt.ItemDataRole.DecorationRole))
        badge = QRect(img.left() + 2, img.top() + 2, 20, 20)
        if proto:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(20, 20, 22, 200))
            painter.drawEllipse(badge)
            painter.setPen(QColor(240, 192, 64))
            f = QFont(option.font)
            f.setBold(True)
            painter.setFont(f)
            painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, "★")
        if outl:
            painter.setPen(QPen(QColor(230, 80, 80), 2, Qt.PenStyle.DashLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(img.adjusted(-1, -1, 1, 1), 4, 4)
            tag = QRect(img.left() + 2, img.bottom() - 18, 52, 16)
            _tag(painter, option, tag, QColor(170, 50, 50, 220), QColor(255, 235, 235), "outlier")
        if new:  # placed by Simile since the last grouping: for the person to check
            tag = QRect(img.right() - 36, img.bottom() - 18, 34, 16)
            _tag(painter, option, tag, QColor(40, 110, 200, 230), QColor(235, 242, 255), "new")
        painter.restore()


def _tag(painter: QPainter, option, rect: QRect, back: QColor, ink: QColor, text: str) -> None:
    """A small word on a rounded plate over a thumbnail ("outlier", "new")."""
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(back)
    painter.drawRoundedRect(rect, 3, 3)
    painter.setPen(ink)
    f = QFont(option.font)
    f.setPointSizeF(max(6.5, f.pointSizeF() * 0.8))
    painter.setFont(f)
    painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)


class GroupStrip(QListView):
    """One group's photos as a wrapping grid (every photo shown; beyond
    :data:`MAX_GRID_ROWS` rows it scrolls); accepts photos dragged from other groups."""

    dropped = Signal(list, int)  # paths, target group
    menu_requested = Signal(list, object)  # paths (the one clicked first), global pos

    def __init__(self, model: GroupModel, delegate: GroupDelegate, parent=None) -> None:
        super().__init__(parent)
        self.setModel(model)
        self.setItemDelegate(delegate)
        self.setFlow(QListView.Flow.LeftToRight)
        self.setWrapping(True)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setUniformItemSizes(True)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Ctrl- and Shift-click pick several photos, dragged or moved together
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setMouseTracking(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragDrop)
        self.setDefaultDropAction(Qt.DropAction.CopyAction)
        self.setDragEnabled(True)
        self.setAcceptDrops(True)
        self.setDropIndicatorShown(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._menu)
        self._cell = delegate.sizeHint(None, None)
        self.setFixedHeight(self._cell.height() + 6)
        model.modelReset.connect(self._fit_height)
        model.rowsInserted.connect(self._fit_height)
        model.rowsRemoved.connect(self._fit_height)

    def _fit_height(self, *_args) -> None:
        """As many rows as the photos need at this width, at most :data:`MAX_GRID_ROWS`."""
        n = self.model().rowCount() if self.model() is not None else 0
        per_row = max(1, self.viewport().width() // max(1, self._cell.width() + self.spacing()))
        rows = max(1, min(MAX_GRID_ROWS, -(-n // per_row)))
        self.setFixedHeight(rows * (self._cell.height() + self.spacing()) + 6)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_height()

    def selected_paths(self) -> list[str]:
        """The selected photos, in the order shown."""
        rows = sorted(i.row() for i in self.selectionModel().selectedIndexes())
        return [self.model().path(r) for r in rows]

    def _menu(self, pos) -> None:
        idx = self.indexAt(pos)
        if not idx.isValid():
            return
        path = item_data(idx, PATH_ROLE)
        chosen = self.selected_paths()  # (a right-click on a selected photo acts on them all)
        paths = [path] + [p for p in chosen if p != path] if path in chosen else [path]
        self.menu_requested.emit(paths, self.viewport().mapToGlobal(pos))

    def _payload(self, md) -> dict | None:
        if md is None or not md.hasFormat(MIME):
            return None
        try:
            return json.loads(bytes(md.data(MIME)).decode())
        except (ValueError, UnicodeDecodeError):
            return None

    def dragEnterEvent(self, event) -> None:
        d = self._payload(event.mimeData())
        if d is not None and d.get("group") != self.model().group:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:
        d = self._payload(event.mimeData())
        if d is None or d.get("group") == self.model().group:
            event.ignore()
            return
        event.setDropAction(Qt.DropAction.CopyAction)  # the source row is never removed
        event.accept()
        self.dropped.emit([str(p) for p in d.get("paths", [])], self.model().group)


class GroupRow(QFrame):
    """Header (editable name, size, split, merge) and the strip of one group."""

    def __init__(self, view: CategoriesView, group: int) -> None:
        super().__init__()
        self.setObjectName("groupRow")
        self.view = view
        self.group = group
        self.model = GroupModel(view.window.thumbs, group, self)
        self.strip = GroupStrip(self.model, view.delegate)
        # a few representative photos large at the top (prototypes first), for groups
        # too big to take in at a glance
        self.rep_model = GroupModel(view.window.thumbs, group, self)
        self.reps = GroupStrip(self.rep_model, view.rep_delegate)
        self.reps.hide()
        self.name = QLineEdit()
        self.name.setObjectName("groupName")
        self.name.setPlaceholderText(f"Group {group + 1}")
        self.name.setToolTip("Click to name this group (kept in the index)")
        self.name.setMaximumWidth(260)
        self.name.editingFinished.connect(lambda: view.rename_group(self.group, self.name.text()))
        self.info = QLabel()
        self.info.setObjectName("hint")
        self.split_btn = QToolButton()
        self.split_btn.setText("Split")
        self.split_btn.setToolTip("Cut this group in two (normalized cut of its own affinities)")
        self.split_btn.clicked.connect(lambda: view.split_group(self.group))
        self.merge_btn = QToolButton()
        self.merge_btn.setText("Merge with")
        self.merge_btn.setToolTip("Join another group into this one")
        self.merge_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.merge_menu = QMenu(self.merge_btn)
        self.merge_btn.setMenu(self.merge_menu)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.name)
        head.addWidget(self.info, 1)
        head.addWidget(self.split_btn)
        head.addWidget(self.merge_btn)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 4)
        lay.setSpacing(4)
        lay.addLayout(head)
        lay.addWidget(self.reps)
        lay.addWidget(self.strip)
        for strip in (self.strip, self.reps):
            strip.dropped.connect(view._on_dropped)
            strip.menu_requested.connect(view._photo_menu)
            strip.doubleClicked.connect(
                lambda idx: view.show_mask(item_data(idx, PATH_ROLE)) if idx.isValid() else None
            )

    def fill(self, g: Grouping) -> None:
        rows = g.members(self.group)
        placed = self.view.model.placed
        self.model.set_members([g.paths[i] for i in rows], g.prototypes[rows], g.outliers[rows],
                               placed)  # fmt: skip
        top = rows[:REPRESENTATIVES] if len(rows) > REPRESENTATIVES_FROM else rows[:0]
        self.rep_model.set_members([g.paths[i] for i in top], g.prototypes[top],
                                   g.outliers[top], placed)  # fmt: skip
        self.reps.setVisible(len(top) > 0)
        self.name.setText(g.names.get(self.group, ""))
        n_p, n_o = int(g.prototypes[rows].sum()), int(g.outliers[rows].sum())
        parts = [f"{len(rows)} photo{'s' if len(rows) != 1 else ''}"]
        if n_p:  # ("To review" has none: it is no group Simile found)
            parts.append(f"{n_p} ★ prototype{'s' if n_p != 1 else ''}")
        if n_o:
            parts.append(f"{n_o} outlier{'s' if n_o != 1 else ''}")
        n_new = sum(c is not None for c in self.model.placed)
        if n_new:
            parts.append(f"{n_new} new")
        self.info.setText("  ·  ".join(parts))
        self.split_btn.setEnabled(len(rows) >= 2)
        self.merge_menu.clear()
        for other in range(g.k):
            if other != self.group:
                a = self.merge_menu.addAction(group_label(g, other))
                a.triggered.connect(lambda _=False, o=other: self.view.merge_groups(self.group, o))
        self.merge_btn.setEnabled(g.k > 1)


class MaskPanel(QFrame):
    """A photo with its keypoints coloured by feature-mask weight."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("maskPanel")
        self.setMinimumWidth(320)
        self.title = QLabel("<b>Feature mask</b>")
        self.title.setWordWrap(True)
        self.image = QLabel(MASK_HINT)
        self.image.setWordWrap(True)
        self.image.setObjectName("hint")
        self.image.setMinimumHeight(220)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setObjectName("hint")
        self.image.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 10, 10, 10)
        lay.addWidget(self.title)
        lay.addWidget(self.legend)
        lay.addWidget(self.image, 1)
        self._pm: QPixmap | None = None
        self.data: MaskData | None = None

    def set_busy(self, text: str) -> None:
        self._pm = None
        self.data = None
        self.image.setPixmap(QPixmap())
        self.image.setText(text)

    def clear(self) -> None:
        """Nothing shown (another folder was opened)."""
        self.set_busy(MASK_HINT)
        self.title.setText("<b>Feature mask</b>")
        self.legend.setText("")

    def set_mask(self, data: MaskData, group_name: str) -> None:
        self.data = data
        self._pm = draw_mask(data)
        self.title.setText(f"<b>{shown_name(data.path)}</b> in <b>{group_name}</b>")
        strong = int((data.weight >= 0.5).sum())
        self.legend.setText(
            f"{len(data.weight)} features; {strong} strongly shared with {data.n_partners} "
            "best members of the group. Colour and size = mask weight (median correspondence "
            "weight over those matchings): yellow = made it belong, purple = did not."
        )
        self._fit()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        if self._pm is None:
            return
        w = max(50, self.image.width() - 4)
        h = max(50, self.image.height() - 4)
        self.image.setPixmap(
            self._pm.scaled(
                w,
                h,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
        )


class CategoriesView(QWidget):
    """The Categories tab (see the module docstring).

    Renders :class:`app.gui.session.GroupingModel` (``window.session.grouping``): the
    grouping, the person's constraints, the busy state and the feature mask live there;
    this widget starts the jobs, forwards edits and draws the model's events.
    """

    grouping_shown = Signal()
    mask_shown = Signal()
    keywords_written = Signal(object)  # the ExportReport of a keyword export

    def __init__(self, window) -> None:
        super().__init__()
        self.window = window
        self.session = window.session
        self.model = self.session.grouping
        self._history_saved: int | None = None  # the model's history_stamp last written
        self.rows: list[GroupRow] = []
        self.delegate = GroupDelegate(window.thumbs, 104, self)
        self.rep_delegate = GroupDelegate(window.thumbs, 176, self)  # the large ones on top

        self.k_combo = QComboBox()
        self.k_combo.addItem("Number of groups: automatic", "auto")
        for k in range(2, 31):  # (up to engine.cluster.AUTO_K_MAX, what "automatic" may make)
            self.k_combo.addItem(f"{k} groups", k)
        self.k_combo.setToolTip(
            "How many groups to make (automatic: Simile chooses; Details says how)"
        )
        self.k_combo.currentIndexChanged.connect(
            lambda i: self.model.set_k_choice(self.k_combo.itemData(i))
        )
        self.k_combo.activated.connect(lambda *_: self.regroup())
        self.group_btn = QPushButton("Regroup everything")
        self.group_btn.setToolTip(
            "Group the whole folder again from the photos (your moves, splits and merges "
            "are kept as constraints; Ctrl+Z brings the previous groups back)"
        )
        self.group_btn.clicked.connect(lambda: self.regroup())
        self.undo_btn = QToolButton()
        self.undo_btn.setText("Undo")
        self.undo_btn.setToolTip("Undo the last rename, move, split, merge or regrouping (Ctrl+Z)")
        self.undo_btn.clicked.connect(self.undo)
        self.undo_shortcut = QShortcut(QKeySequence.StandardKey.Undo, self)
        self.undo_shortcut.activated.connect(self.undo)
        self.reset_btn = QToolButton()
        self.reset_btn.setText("Forget my moves")
        self.reset_btn.setToolTip("Drop the constraints from your moves, splits and merges")
        self.reset_btn.clicked.connect(self.forget_constraints)
        self.export_btn = QToolButton()
        self.export_btn.setText("Export")
        self.export_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_btn)
        for text, mode in (
            ("Folders of links…", "links"),
            ("Folders of copies…", "copies"),
            ("CSV table…", "csv"),
            ("Keywords in XMP sidecars (digiKam, darktable, Lightroom)…", "xmp"),
        ):
            a = menu.addAction(text)
            a.triggered.connect(lambda _=False, m=mode: self.export_dialog(m))
        self.export_btn.setMenu(menu)
        self.export_btn.setToolTip("Write the groups as folders (originals are never moved)")
        self.progress = QProgressBar()
        self.progress.setFixedWidth(160)
        self.progress.hide()
        self.cancel_btn = QToolButton()
        self.cancel_btn.setText("Cancel")
        self.cancel_btn.setToolTip("Stop the grouping or split that is running")
        self.cancel_btn.clicked.connect(self.cancel_job)
        self.cancel_btn.hide()
        self.reason = QLabel(EMPTY_TEXT)
        self.reason.setObjectName("hint")
        self.reason.setWordWrap(True)
        self.details = QLabel("")  # the technical reason, behind "Details"
        self.details.setObjectName("hint")
        self.details.setWordWrap(True)
        self.details.hide()
        self.details_btn = QToolButton()
        self.details_btn.setText("Details")
        self.details_btn.setCheckable(True)
        self.details_btn.setToolTip("How the number of groups was chosen, and your constraints")
        self.details_btn.toggled.connect(self.details.setVisible)
        top = QHBoxLayout()
        top.addWidget(self.k_combo)
        top.addWidget(self.group_btn)
        top.addWidget(self.undo_btn)
        top.addWidget(self.reset_btn)
        top.addWidget(self.progress)
        top.addWidget(self.cancel_btn)
        top.addStretch(1)
        top.addWidget(self.export_btn)

        self.rows_host = QWidget()
        self.rows_lay = QVBoxLayout(self.rows_host)
        self.rows_lay.setContentsMargins(0, 0, 0, 0)
        self.rows_lay.setSpacing(6)
        self.rows_lay.addStretch(1)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setWidget(self.rows_host)
        self.mask = MaskPanel()
        self.mask.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.addWidget(self.scroll, 3)
        body.addWidget(self.mask, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 0)
        lay.addLayout(top)
        head = QHBoxLayout()
        head.addWidget(self.reason, 1)
        head.addWidget(self.details_btn, 0, Qt.AlignmentFlag.AlignTop)
        lay.addLayout(head)
        lay.addWidget(self.details)
        lay.addLayout(body, 1)
        self.setStyleSheet(
            "QFrame#groupRow { background: #26272b; border: 1px solid #34363b;"
            " border-radius: 8px; }"
            "QFrame#maskPanel { background: #232428; border-left: 1px solid #34363b; }"
            "QLineEdit#groupName { font-weight: bold; background: transparent;"
            " border: 1px solid transparent; border-bottom: 1px dashed #6a6d74;"
            " border-radius: 4px; padding: 2px 4px; }"
            "QLineEdit#groupName:hover, QLineEdit#groupName:focus { border-color: #4a4d54;"
            " background: #1f2023; }"
        )
        self._update_buttons()
        self.model.events.connect_slots(self)
        self.session.events.collection_opened.connect(self._on_collection_opened)
        self.session.events.collection_closed.connect(lambda _e: self._update_buttons())

    # -- what the model holds ------------------------------------------------------------------
    @property
    def collection(self):
        return self.session.collection

    @property
    def grouping(self) -> Grouping | None:
        return self.model.grouping

    @property
    def K(self) -> np.ndarray | None:
        return self.model.K

    @property
    def must(self) -> list[tuple[str, str]]:
        return self.model.must

    @property
    def cannot(self) -> list[tuple[str, str]]:
        return self.model.cannot

    @property
    def _busy(self) -> bool:
        return self.model.busy

    # -- model events --------------------------------------------------------------------------
    def _on_grouping(self, event) -> None:
        renamed = getattr(event, "renamed", None)
        if renamed is not None and event.grouping is not None:
            for row in self.rows:
                if row.group != renamed:
                    row.fill(event.grouping)  # the other rows' "Merge with" menus
            self._update_buttons()
            return
        self._render_grouping(event.grouping)

    def _on_constraints(self, _event) -> None:
        self._update_buttons()

    def _on_busy(self, event) -> None:
        self.progress.setVisible(event.busy)
        self.cancel_btn.setVisible(event.busy)
        if event.busy:
            self.progress.setRange(0, 0)
            self.reason.setText(event.text)
        elif event.text:
            self.reason.setText(event.text)
        self._update_buttons()

    def _on_progress(self, event) -> None:
        self.reason.setText(event.text)
        if event.total > 0:
            self.progress.setRange(0, event.total)
            self.progress.setValue(event.done)

    def _on_k_choice(self, event) -> None:
        i = self.k_combo.findData(event.k)
        if i >= 0 and i != self.k_combo.currentIndex():
            self.k_combo.setCurrentIndex(i)

    def _on_mask(self, event) -> None:
        if event.data is not None:
            self.mask.set_mask(event.data, event.group_name)
        elif event.path is None:
            self.mask.clear()
        else:
            self.mask.set_busy(event.text)

    # -- collection --------------------------------------------------------------------------
    def _on_collection_opened(self, _event) -> None:
        """The folder's index is (re)opened: restore its saved grouping, or group it when
        the tab is visible."""
        self.session.jobs.cancel("grouping", drop=True)
        self.session.supersede("grouping")
        self.model.clear()
        self._restore()
        if self.model.grouping is None and self.isVisible():
            self.regroup()
        self._update_buttons()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self.collection is not None and self.grouping is None and not self._busy:
            self.regroup()

    def _restore(self) -> None:
        """Show the grouping saved in the index (:func:`engine.cluster.load_edits`: the
        person's edits, else the last grouping of ``simile cluster``) with its constraints
        and number of groups; then compute the affinities later edits rank on."""
        from engine.cluster import load_edits, load_history

        coll = self.collection
        if coll is None:
            return
        try:
            saved = load_edits(coll.store, coll.paths())
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.debug("saved grouping unusable: %s", exc)
            return
        except Exception as exc:  # an old index or a closed store: just group again
            log.debug("no saved grouping: %s", exc)
            return
        if saved is None:
            return
        if saved.source == "edits":
            self.model.set_constraints(saved.must, saved.cannot)
            k = saved.k
            self.model.set_k_choice(k if self.k_combo.findData(k) >= 0 else "auto")
        if saved.grouping is None:  # unusable, or all its photos gone: group again
            log.debug("saved grouping not restored: %s", saved.problem)
            return
        self.model.set_placed(saved.placed)  # (still marked "new" from an earlier visit)
        if not self.model.undo_stack:  # (the same folder again keeps the history it has)
            try:
                self.model.set_history(load_history(coll.store, coll.paths()))
            except Exception as exc:  # (a closed store: undo starts afresh)
                log.debug("no undo history: %s", exc)
            else:
                self._history_saved = self.model.history_stamp  # (as the index has it)
        self.model.set_grouping(saved.grouping)
        if saved.new_paths:  # photos added since: placed into the groups, not regrouped
            self._place_new(saved.grouping, len(saved.new_paths))
            return

        # affinities for later edits, computed off the GUI thread (a grouping job started
        # meanwhile supersedes them)
        def failed(exc) -> None:
            if not _reopened(exc, coll, self.session.collection):
                self.window.show_error(plain_error(exc, "Computing affinities failed"))

        self.window.run_worker(
            affinity_job, coll, pass_cancel=True, token=self.session.begin("grouping"),
            connect={"returned": self.model.set_affinities, "errored": failed},
        )  # fmt: skip

    def _place_new(self, grouping, n_new: int) -> None:
        """Place the ``n_new`` photos added since ``grouping`` was saved into its groups
        (in a worker); the groups, names and the person's moves stay as they were."""

        def done(result) -> None:
            placed, K = result
            self.model.add_placed(placed.placed)
            self.model.set_grouping(placed.grouping, K=K)
            self._save()
            self.grouping_shown.emit()
            unsure = len(placed.unsure)
            text = f"{n_new} new photo{'s' if n_new != 1 else ''} placed into your groups"
            if unsure:
                text += f"; {unsure} to review in “{placed.grouping.name(placed.grouping.k - 1)}”"
            self.window.status_label.setText(text + ".")

        self._run_job(
            f"Placing {n_new} new photo{'s' if n_new != 1 else ''} into your groups…",
            "Placing the new photos failed", done, place_job, self.collection, grouping,
        )  # fmt: skip

    def undo(self) -> None:
        """Undo the last edit (Ctrl+Z): rename, move, split, merge or grouping again."""
        what = self.model.undo()
        if what is None:
            return
        self._save()
        self.grouping_shown.emit()
        self.window.status_label.setText(f"Undid the last {what}.")
        self._update_buttons()

    def _save(self) -> None:
        """Keep the grouping, the person's edits and the undo history in the index
        (:func:`save_grouping_state`), written in the background: a copy is taken here and
        the session's writer writes it (:class:`app.gui.session.IndexWrites`, in order;
        the collection is closed only after it)."""
        m = self.model
        if self.collection is None or m.grouping is None:
            return
        history = m.history_stamp != self._history_saved  # (placing photos leaves it)
        state = m.saved_state(history=history)
        self._history_saved = m.history_stamp
        self.session.writes.submit(save_grouping_state, self.collection.store, state)

    # -- grouping ----------------------------------------------------------------------------
    def k_choice(self):
        return self.model.k_choice

    def regroup(self, k=None, *, remembered: bool = False) -> None:
        """Group the collection in the background (``k``: None = the chooser's value;
        ``remembered``: the caller already kept the state to undo to)."""
        win = self.window
        if self.collection is None or win.is_indexing():
            win.show_error("Photos can be grouped once the folder is indexed.", kind="warning")
            return
        m = self.model
        k = m.k_choice if k is None else k
        old = m.grouping
        if not self.collection.paths():  # an empty folder: an empty state, not an error
            self.reason.setText(NO_PHOTOS_TEXT)
            return

        def done(result) -> None:
            from engine.cluster import regrouped_names

            _paths, K, g = result
            if old is not None:
                g.names = regrouped_names(old, g)
                if not remembered:
                    m.remember("grouping again")
            m.forget_placed()  # (every photo grouped afresh: none is "new" any more)
            m.set_grouping(g, K=K)
            self._save()
            self.grouping_shown.emit()

        self._run_job(
            "Grouping…", "Grouping the photos failed", done,
            group_job, self.collection, m.K, k, list(m.must), list(m.cannot),
        )  # fmt: skip

    def _run_job(self, text: str, fail_text: str, on_done, func, *args) -> None:
        """Run a generator job of this view in a worker: busy state (rows and buttons
        disabled), progress bar and text, a Cancel button; ``on_done(result)`` on success.
        Its results are dropped once cancelled, superseded or another folder opened."""
        s, m = self.session, self.model
        token = s.begin("grouping")
        m.set_busy(True, text)
        coll = s.collection

        def finish() -> None:
            s.jobs.finish(token)
            m.set_busy(False)

        def done(result) -> None:
            finish()
            on_done(result)

        def failed(exc) -> None:
            finish()
            if _reopened(exc, coll, s.collection):
                return  # (the index was opened again meanwhile: that restarts the work)
            self.reason.setText(f"{fail_text}.")
            self.window.show_error(plain_error(exc, fail_text))

        self.window.run_worker(
            func, *args, pass_cancel=True, token=token, job=text,
            connect={"yielded": lambda item: m.report(*item), "returned": done,
                     "errored": failed},
        )  # fmt: skip

    def cancel_job(self) -> None:
        """Stop the running grouping or split; the shown grouping stays as it was."""
        if not self._busy:
            return
        self.session.jobs.cancel("grouping", drop=True)  # what it still delivers is ignored
        self.model.set_busy(False)
        self._render_grouping(self.grouping)
        self.window.status_label.setText("Cancelled; the groups are unchanged.")

    def _update_buttons(self) -> None:
        has = self.collection is not None
        busy = self.model.busy
        self.group_btn.setEnabled(has and not busy)
        self.k_combo.setEnabled(has and not busy)
        self.export_btn.setEnabled(self.grouping is not None)
        self.reset_btn.setEnabled(bool(self.must or self.cannot) and not busy)
        self.undo_btn.setEnabled(self.model.can_undo)
        for r in self.rows:
            r.setEnabled(not busy)

    def _render_grouping(self, g: Grouping | None) -> None:
        while len(self.rows) > (g.k if g is not None else 0):
            row = self.rows.pop()
            self.rows_lay.removeWidget(row)
            row.hide()
            row.deleteLater()
        if g is None:
            self.reason.setText(EMPTY_TEXT)
            self.details.setText("")
            self._update_buttons()
            return
        while len(self.rows) < g.k:
            row = GroupRow(self, len(self.rows))
            self.rows_lay.insertWidget(self.rows_lay.count() - 1, row)
            self.rows.append(row)
        for row in self.rows:
            row.fill(g)
        n_c = len(self.must) + len(self.cannot)
        extra = f"  ·  {n_c} constraint{'s' if n_c != 1 else ''} from your edits" if n_c else ""
        self.reason.setText(
            f"<b>{g.k} group{'s' if g.k != 1 else ''}</b> of {len(g.paths):,} photos — Simile "
            "found these by comparing what is in the photos; rename, drag and split them as "
            "you like."
        )
        self.details.setText(f"How: {g.k_reason or 'edited by hand'}{extra}")
        self._update_buttons()

    # -- edits -------------------------------------------------------------------------------
    def rename_group(self, group: int, name: str) -> None:
        g = self.grouping
        old = g.name(group) if g is not None and 0 <= group < g.k else ""
        if self.model.rename(group, name):
            self._save()
            new = self.grouping.name(group)
            if new != old:
                self.window.status_label.setText(f"Renamed “{old}” to “{new}” (Ctrl+Z undoes it).")

    def _add_constraints(self, must, cannot) -> None:
        self.model.add_constraints(must, cannot)

    def move_photo(self, path: str, group: int) -> None:
        """The user says ``path`` belongs to ``group`` (:meth:`move_photos`)."""
        self.move_photos([path], group)

    def move_photos(self, paths: Sequence[str], group: int) -> None:
        """The user says ``paths`` belong to ``group``: they go there and nothing else
        changes (:func:`engine.cluster.move_edit`, one photo after the other, undone
        together); the constraints that keep the move when everything is grouped again
        are added."""
        from engine.cluster import move_constraints, move_edit

        g = self.grouping
        if g is None or self._busy or not 0 <= group <= g.k:
            return
        p = g.paths
        pos = {q: i for i, q in enumerate(p)}
        rows = sorted({pos[str(x)] for x in paths if str(x) in pos})
        rows = [i for i in rows if g.labels[i] != group]
        if not rows:
            return
        # the photos go where they were put and nothing else moves; the constraints keep
        # the move when the person groups everything again (anchored on up to MOVE_ANCHORS
        # of the target's members: with only its top few, a balanced cut could push one
        # of its other members out in exchange)
        n_anchors = min(MOVE_ANCHORS, int(np.sum(g.labels == group)))
        must, cannot = [], []
        before = g.to_clustering()
        for i in rows:
            mu, ca = move_constraints(before, i, group, n_anchors=n_anchors)
            must += [(p[a], p[b]) for a, b in mu]
            cannot += [(p[a], p[b]) for a, b in ca]
        moved = [p[i] for i in rows]
        if group == g.k:  # (a group of their own: the later ones join the first)
            must += [(moved[0], m) for m in moved[1:]]
        K = self.K if self.K is not None and len(self.K) == len(p) else None
        self.model.remember("move")
        self._add_constraints(must, cannot)
        self.model.forget_placed(moved)  # (the person decided where they go)
        new, target = g, group
        for path in moved:
            new = move_edit(new, path, target, K)
            # (a group left empty disappears and the later ones move up: follow the first)
            target = new.group_of(moved[0])
        if len(moved) > 1:
            new.k_reason = f"moved {len(moved):,} photos by hand"
        self._show_edit(new)
        where = new.name(new.group_of(moved[0]))
        what = shown_name(moved[0]) if len(moved) == 1 else f"{len(moved):,} photos"
        self.window.status_label.setText(
            f"Moved {what} to {where}; no other photo moved (Ctrl+Z undoes it)."
        )
        if group == g.k and new.group_of(moved[0]) < len(self.rows):  # a new group, last:
            row = self.rows[new.group_of(moved[0])]  # shown, its name ready to be typed
            QTimer.singleShot(0, lambda: self.scroll.ensureWidgetVisible(row))
            row.name.setFocus()
            row.name.selectAll()

    def _on_dropped(self, paths: list, group: int) -> None:
        self.move_photos(paths, group)

    def split_group(self, group: int) -> None:
        """Cut ``group`` in two in the background (:func:`split_job`): from the full
        affinities when they are kept, else from the group's own sub-kernel (large folders
        grouped with the Nystrom approximation, or affinities still being computed)."""
        g = self.grouping
        if g is None or self._busy or not 0 <= group < g.k:
            return
        K = self.K
        if int(np.sum(g.labels == group)) < 2:
            self.window.show_error(f"{g.name(group)} has one photo; it cannot be split.",
                                   kind="warning")  # fmt: skip
            return

        def done(result) -> None:
            from engine.cluster import split_edit

            if self.grouping is not g:  # pragma: no cover - guarded by the busy state
                return
            # ranked on the full affinities, else the halves keep the split's own ranks
            new, cannot = split_edit(g, group, result, K)
            self.model.remember("split")
            self._show_edit(new, cannot=cannot)
            kept, made = int(np.sum(new.labels == group)), int(np.sum(new.labels == new.k - 1))
            self.window.status_label.setText(
                f"Split {g.name(group)}: {kept} photos stay, {made} are in the new "
                f"{new.name(new.k - 1)}; no other group changed (Ctrl+Z undoes it)."
            )

        self._run_job(
            f"Splitting {g.name(group)}…", "Splitting the group failed", done,
            split_job, self.collection, list(g.paths), g.labels.copy(), group, K,
        )  # fmt: skip

    def merge_groups(self, group: int, other: int) -> None:
        """Join ``group`` and ``other`` (their union, in the place of the earlier of the
        two; the other groups keep theirs; no affinities needed)."""
        from engine.cluster import merge_edit

        g = self.grouping
        if g is None or self._busy or group == other:
            return
        first, second = sorted((int(group), int(other)))
        new, must = merge_edit(g, first, second, self.K)
        self.model.remember("merge")
        self._add_constraints(must, [])
        self._show_edit(new)
        now = int(new.labels[g.members(first)[0]])
        self.window.status_label.setText(
            f"Merged {g.name(group)} and {g.name(other)} into {new.name(now)}: "
            f"{int(np.sum(new.labels == now))} photos; no other group changed (Ctrl+Z undoes it)."
        )

    def _show_edit(self, g, cannot=()) -> None:
        """Show an edited grouping (:func:`engine.cluster.split_edit` /
        :func:`engine.cluster.merge_edit`), add the constraints that keep the edit when
        grouping again, and save."""
        if cannot:  # the two halves must stay apart when grouping again
            self._add_constraints([], list(cannot))
        self.model.set_grouping(g)
        self._save()
        self.grouping_shown.emit()

    def forget_constraints(self) -> None:
        """Forget the person's moves (their must / cannot pairs) and group again; one Ctrl+Z
        brings back both the groups and the moves."""
        kept = self.model.grouping is not None
        if kept:
            self.model.remember("“Forget my moves”")
        self.model.set_constraints([], [])
        self._save()
        self.regroup(remembered=kept)

    # -- photo actions -----------------------------------------------------------------------
    def _photo_menu(self, paths: list, pos) -> None:
        menu = self.photo_menu(paths[0], paths)
        menu.exec(pos)

    def photo_menu(self, path: str, selected: Sequence[str] = ()) -> QMenu:
        """Context menu of a photo: move it (and the other ``selected`` photos of its
        group) to another group, feature mask, open."""
        g = self.grouping
        menu = QMenu(self)
        paths = [path] + [p for p in selected if p != path]
        move = menu.addMenu(
            "Move to group" if len(paths) == 1 else f"Move {len(paths):,} photos to group"
        )
        cur = g.group_of(path) if g is not None else -1
        for other in range(g.k if g is not None else 0):
            a = QAction(group_label(g, other), move)
            a.setEnabled(other != cur and not self._busy)
            a.triggered.connect(lambda _=False, o=other: self.move_photos(paths, o))
            move.addAction(a)
        if g is not None:  # (a group of their own, last; it can be named like any other)
            move.addSeparator()
            a = QAction("New group", move)
            a.setEnabled(not self._busy and len(paths) < len(g.members(cur)))
            a.triggered.connect(lambda _=False, k=g.k: self.move_photos(paths, k))
            move.addAction(a)
        menu.addAction("Show feature mask").triggered.connect(lambda: self.show_mask(path))
        menu.addAction("Search similar").triggered.connect(
            lambda: (self.window.show_view("library"), self.window.query_photo(path))
        )
        menu.addAction("Open full size").triggered.connect(
            lambda: self.window.open_full_size(path)
        )
        return menu

    def show_mask(self, path: str | None) -> None:
        g = self.grouping
        if not path or g is None or self.collection is None:
            return
        grp = g.group_of(path)
        partners = [g.paths[i] for i in g.members(grp) if g.paths[i] != path]
        token = self.session.begin("mask")
        self.model.mask_started(path, f"Matching {shown_name(path)} with its group…")

        def done(data) -> None:
            self.model.set_mask(data, g.name(grp))
            self.mask_shown.emit()

        def failed(exc) -> None:
            self.model.mask_started(path, "The feature mask could not be computed.")
            self.window.show_error(plain_error(exc, f"Feature mask of {shown_name(path)}"))

        self.window.run_worker(
            compute_mask, self.collection, str(path), partners, token=token,
            connect={"returned": done, "errored": failed},
        )  # fmt: skip

    def export_dialog(self, mode: str) -> None:
        if self.grouping is None:
            return
        if mode == "xmp":
            self.export_keywords()
            return
        start = Path(self.window.folder or Path.home())
        if mode == "csv":
            fname, _ = QFileDialog.getSaveFileName(
                self, "Export groups as CSV", str(start.parent / "groups.csv"), "CSV (*.csv)"
            )
        else:
            fname = QFileDialog.getExistingDirectory(
                self, "Folder that receives one sub-folder per group", str(start.parent)
            )
        if fname:
            self.export(fname, mode)

    def export_keywords(self, confirm: bool = True) -> None:
        """Write the groups' names as keywords into XMP sidecars beside the photos, after
        showing what will change (a dry run, in a worker) and asking."""
        g, coll = self.grouping, self.collection
        if g is None or coll is None:
            return
        photos = [str(p) for p in coll.paths()]
        win = self.window

        def written(report) -> None:
            win.status_label.setText(report.written_text("the group names"))
            self.keywords_written.emit(report)

        def planned(report) -> None:
            n = len(report.changes)
            if n == 0:
                win.status_label.setText("The XMP sidecars already hold these group names.")
                self.keywords_written.emit(report)
                return
            new = sum(c.created for c in report.changes)
            ask = (
                f"Write the names of the {g.k} groups as keywords (Simile|Category|…) into "
                f"{n} XMP sidecar{'s' if n != 1 else ''} ({new} new)?\n\nYour own keywords "
                "and everything else in the sidecars are kept; the photos are not changed."
            )
            if confirm:
                yes = QMessageBox.StandardButton.Yes
                if QMessageBox.question(self, "Export keywords", ask) != yes:
                    return
            win.run_worker(
                keywords_job, g, photos, coll.folder, False,
                connect={"returned": written}, context="Writing keywords failed",
            )  # fmt: skip

        win.run_worker(
            keywords_job, g, photos, coll.folder, True,
            connect={"returned": planned}, context="Reading the sidecars failed",
        )  # fmt: skip

    def export(self, dest, mode: str) -> int | None:
        """Write the grouping shown (:func:`export_grouping`); links and copies only of
        photos the session allows (inside the open folder, in the groups shown)."""
        g = self.grouping
        if g is None:
            return None
        if mode in ("links", "copies"):
            verb = "link" if mode == "links" else "copy"
            try:
                self.session.authorize_all(verb, g.paths, among="grouping")
            except ActionRefused:
                return None  # the session said why (status bar)
        try:
            n = export_grouping(dest, g, mode)
        except (OSError, ValueError) as exc:
            self.window.show_error(plain_error(exc, "Export failed"))
            return None
        what = {"links": "links", "copies": "copies", "csv": "rows"}[mode]
        self.window.status_label.setText(f"Exported {n} {what} of {g.k} groups to {dest}")
        return n


def _reopened(exc: BaseException, started_on, current) -> bool:
    """Whether a grouping job failed only because its index was closed under it: the
    folder's index was opened again (after indexing) or another folder opened. Not an
    error to show: the new collection restarts the work."""
    from engine.index.store_errors import StoreError

    return current is not started_on or (isinstance(exc, StoreError) and "closed" in str(exc))


def keywords_job(grouping, photos, folder, dry_run: bool):
    """Worker: the groups' names as keywords ``Simile|Category|<name>`` in the photos'
    XMP sidecars (:func:`engine.workflows.keywords.export_keywords`; the photos are never
    written, the sidecars' other keywords kept)."""
    from engine.workflows.keywords import category_keywords, export_keywords

    return export_keywords(
        category_keywords(grouping), photos, folder, dry_run=dry_run, scope="Simile|Category"
    )


def make_categories_view(window) -> CategoriesView:
    view = CategoriesView(window)
    window.categories_view = view
    return view


register_view(
    "categories",
    "Categories",
    make_categories_view,
    order=40,
    tooltip="The photos grouped into categories; drag a photo to correct the grouping",
)
