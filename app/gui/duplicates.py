"""Near-duplicate groups: tiers, cards made for comparing, the copy to keep, batch clean-up.

The best copy is the engine's suggestion (:func:`engine.workflows.duplicates.suggest_keeper`,
the same as ``simile duplicates``); this module draws it. The person may overrule it per
group with the keys **K** (keep this copy) and **D** (discard it), **N** / **P** go to the
next / previous group, **←** / **→** choose a copy; **C** compares two copies side by side
(:class:`app.gui.compare.CompareDialog`).

"Keep the suggested copy in every group…" acts on all groups (or the checked tiers, or the
selected groups) at once: the copies kept are computed in a worker, a summary says what
will happen before anything does (:class:`CleanupDialog`), then
:func:`engine.workflows.cleanup.run_cleanup` runs in a worker with progress and cancel,
writing its log under the index folder; "Undo last clean-up" puts the files back
(:func:`engine.workflows.cleanup.undo_cleanup`). When the trash cannot be used the person is
offered a folder instead.

Nothing is ever deleted outright, and every file action is authorised by the session first
(:meth:`app.gui.session.Session.authorize`: inside the open folder as written, in the
duplicate groups shown).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QObject, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QImage, QKeySequence, QPainter, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui import workers
from app.gui.labels import elide_rows
from app.gui.models import shown_name
from app.gui.session import ActionRefused, Session
from app.gui.thumbnails import array_to_qimage
from engine.index.files import display_path
from engine.workflows.dup_groups import DuplicateGroup

__all__ = [
    "TIER_LABELS",
    "CleanupDialog",
    "CopyInfo",
    "DuplicatesView",
    "KeepChoices",
    "describe_copies",
    "find_groups",
    "suggest_keepers",
    "tier_of",
]

#: How each tier of :data:`engine.workflows.duplicates.TIERS` is named for people.
TIER_LABELS = {
    "identical": "Identical files",
    "same_photo": "Same photo",
    "similar_shots": "Similar shots",
}
TIER_HINTS = {
    "identical": "The files have the same bytes.",
    "same_photo": "One explains the other by a single resize, crop or rotation: copies "
    "of one photo.",
    "similar_shots": "Many matches but not one transform: a burst, bracketing, the same "
    "scene taken twice. Look before cleaning up.",
}
_TIER_COLOURS = {"identical": "#4caf7a", "same_photo": "#3d8fd6", "similar_shots": "#d08a3a"}


def __getattr__(name: str):
    """``sharpness`` lives in the engine now (imported only when asked for)."""
    if name == "sharpness":
        from engine.workflows.duplicates import sharpness

        return sharpness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _members(tier: str) -> str:
    """What a group's members are called in its header: shots are not copies."""
    return "shots" if tier == "similar_shots" else "copies"


def _related_html(group, groups=()) -> str:
    """The line of a group's header naming its related photos (similar shots of a copy
    outside the group, :attr:`engine.workflows.duplicates.DuplicateGroup.related`), each
    a link that opens it, with the group it is in (of ``groups``); "" when there are
    none."""
    related = list(getattr(group, "related", ()) or ())
    if not related:
        return ""
    group_of = {str(p): k for k, g in enumerate(groups, 1) for p in g.paths}

    def one(k: int, p, s: float) -> str:
        where = group_of.get(str(p))
        where = f", group {where}" if where else ", in no group"
        return f"<a href='related:{k}'>{html.escape(shown_name(p))}</a> ({s:.2f}{where})"

    names = ", ".join(one(k, p, s) for k, (p, s) in enumerate(related[:5]))
    more = f" and {len(related) - 5} more" if len(related) > 5 else ""
    return (
        f"<br>Also similar, not in this group: {names}{more} — a clean-up of this group "
        f"leaves {'it' if len(related) == 1 else 'them'} alone."
    )


def _apart_html(group) -> str:
    """The line of a group's header naming its members found not to be copies of each
    other (:attr:`engine.workflows.duplicates.DuplicateGroup.apart`); "" when none."""
    apart = list(getattr(group, "apart", ()) or ())
    if not apart:
        return ""
    pairs = ", ".join(
        f"{html.escape(shown_name(a))} ~ {html.escape(shown_name(b))}" for a, b in apart[:3]
    )
    more = f" and {len(apart) - 3} more" if len(apart) > 3 else ""
    return (
        f"<br><span style='color:#e0a040'>Not copies of each other (another shot?): "
        f"{pairs}{more}</span> — a clean-up that keeps one leaves the other in place."
    )


def tier_of(group) -> str:
    """The group's tier (``"same_photo"`` for groups found before tiers existed)."""
    return getattr(group, "tier", None) or "same_photo"


# ============================================================================ worker side
def find_groups(collection, threshold, *, cancel=None, progress=None) -> list:
    """Worker side: the duplicate groups of ``collection``
    (:meth:`engine.collection.Collection.duplicates`, tiers and defaults of
    :func:`engine.workflows.duplicates.find_duplicates`), reporting ``progress(done,
    total)`` and stopping (``InterruptedError``) when ``cancel`` is set."""
    return collection.duplicates(threshold, cancel=cancel, progress=progress)


def _suggest(paths, stats=None, reference=(), tier=None):
    from engine.workflows.duplicates import suggest_keeper

    return suggest_keeper(paths, stats, reference=tuple(reference), tier=tier)


def _short(name: str, most: int = 18) -> str:
    """``name`` shortened in the middle to ``most`` characters ("IMG_202…edit.jpg"): the
    list of groups shows it beside a thumbnail (the tooltip has the whole paths)."""
    if len(name) <= most:
        return name
    keep = most - 1
    return name[: keep - keep // 2] + "…" + name[-(keep // 2) :]


def suggest_keepers(groups, chosen=None, *, reference=(), cancel=None, progress=None) -> list:
    """Worker side: the copy to keep in each group — the person's choice (``chosen``:
    group index -> copy index) or the engine's suggestion (None: no copy readable;
    photos in the ``reference`` folders are always kept)."""
    chosen = dict(chosen or {})
    out = []
    for i, g in enumerate(groups):
        if cancel is not None and cancel.is_set():
            raise InterruptedError("cancelled")
        if i in chosen:
            out.append(chosen[i])
        else:
            k = _suggest([str(p) for p in g.paths], reference=reference, tier=tier_of(g))
            out.append(None if k is None else k.index)
        if progress is not None:
            progress(i + 1, len(groups))
    return out


def duplicate_keywords_job(groups, chosen, photos, folder, dry_run, *, reference=(),
                           cancel=None, progress=None):  # fmt: skip
    """Worker side: the duplicate groups as keywords ``Simile|Duplicates|…`` in the XMP
    sidecars of ``photos`` (:func:`engine.workflows.keywords.export_keywords`, scope
    ``Simile|Duplicates``), the copy to keep per group from :func:`suggest_keepers`."""
    from engine.workflows.keywords import duplicate_keywords, export_keywords

    keep_idx = suggest_keepers(
        groups, chosen, reference=reference, cancel=cancel, progress=progress
    )
    keep = [None if k is None else str(g.paths[k]) for g, k in zip(groups, keep_idx, strict=True)]
    kws = duplicate_keywords(groups, keep)
    return export_keywords(kws, photos, folder, dry_run=dry_run, scope="Simile|Duplicates")


@dataclass
class CopyInfo:
    """A copy as a card shows it: :class:`engine.workflows.duplicates.CopyStats`, its
    picture, when it was last modified and (for the suggested copy) why."""

    path: str
    width: int
    height: int
    file_size: int
    sharpness: float
    score: float | None
    image: QImage | None
    error: str | None = None
    mtime: float | None = None
    reason: str = ""
    taken: str | None = None  # ISO date the photo was taken (its EXIF / XMP), if known

    @property
    def pixels(self) -> int:
        return self.width * self.height


def _date_taken(path) -> str | None:
    """When the photo was taken, from its metadata (None when unknown or unreadable)."""
    try:
        from engine.io.metadata import read_metadata

        return read_metadata(path).date_taken
    except Exception:  # (metadata is optional: the card then shows the file's date)
        return None


def describe_copies(paths, scores=None, reference=(), tier=None) -> tuple[list[CopyInfo], int]:
    """Worker side: size, resolution and sharpness of each copy, loaded at
    :data:`engine.workflows.duplicates.KEEPER_SIDE` pixels
    (:func:`engine.workflows.duplicates.copy_stats`), and the one to keep
    (:func:`engine.workflows.duplicates.suggest_keeper` for the group's ``tier``, as
    ``simile duplicates``)."""
    from engine.workflows.duplicates import CopyStats, copy_stats

    infos, stats = [], []
    for k, p in enumerate(paths):
        score = None if scores is None or k >= len(scores) else float(scores[k])
        st, img = copy_stats(p)
        image = None
        if img is not None:
            try:
                image = array_to_qimage(img)
            except Exception as exc:  # one broken copy must not hide the others
                st = CopyStats(st.path, 0, 0, 0, 0.0, str(exc))
        try:
            mtime = os.stat(p).st_mtime
        except OSError:
            mtime = None
        stats.append(st)
        infos.append(CopyInfo(st.path, st.width, st.height, st.file_size, st.sharpness, score,
                              image, st.error, mtime, taken=_date_taken(p)))  # fmt: skip
    keeper = _suggest([str(p) for p in paths], stats, reference=reference, tier=tier)
    best = -1 if keeper is None else int(keeper.index)
    if keeper is not None:
        infos[best].reason = str(getattr(keeper, "reason", "") or "")
    return infos, best


# ============================================================================ choices
class KeepChoices:
    """The person's own keep / discard choices (Qt-free), by group (its first path).

    A group's kept copy is the person's choice when there is one, else the suggestion.
    """

    def __init__(self) -> None:
        self.kept: dict[str, str] = {}
        self.discarded: dict[str, set[str]] = {}

    @staticmethod
    def key(group) -> str:
        return os.path.abspath(os.fspath(group.paths[0]))

    def clear(self) -> None:
        self.kept.clear()
        self.discarded.clear()

    def keep(self, group, path) -> None:
        k, p = self.key(group), os.path.abspath(os.fspath(path))
        self.kept[k] = p
        self.discarded.get(k, set()).discard(p)

    def discard(self, group, path, suggested: int = -1) -> None:
        """Mark ``path`` to go; if it was the copy kept, the next copy not discarded is
        kept instead."""
        k, p = self.key(group), os.path.abspath(os.fspath(path))
        gone = self.discarded.setdefault(k, set())
        gone.add(p)
        if self.keeper_path(group, suggested) == p:
            paths = [os.path.abspath(os.fspath(q)) for q in group.paths]
            rest = [q for q in paths if q not in gone]
            if rest:
                self.kept[k] = rest[0]
            else:
                gone.discard(p)  # one copy always stays
                self.kept[k] = p

    def keeper_index(self, group, suggested: int = -1) -> int:
        """The index of the copy kept (the choice, else ``suggested``)."""
        p = self.kept.get(self.key(group))
        if p is not None:
            paths = [os.path.abspath(os.fspath(q)) for q in group.paths]
            if p in paths:
                return paths.index(p)
        return suggested

    def keeper_path(self, group, suggested: int = -1) -> str | None:
        i = self.keeper_index(group, suggested)
        return os.path.abspath(os.fspath(group.paths[i])) if 0 <= i < len(group.paths) else None

    def is_discarded(self, group, path) -> bool:
        return os.path.abspath(os.fspath(path)) in self.discarded.get(self.key(group), set())

    def chosen(self, groups) -> dict[int, int]:
        """Group index -> kept copy index, for the groups the person decided."""
        out = {}
        for i, g in enumerate(groups):
            k = self.keeper_index(g, -1)
            if k >= 0:
                out[i] = k
        return out


def _human_size(n: int) -> str:
    from engine.workflows.cleanup import format_bytes

    return format_bytes(n)


class _Progress(QObject):
    """Progress of a worker, delivered on the GUI thread (queued across threads)."""

    changed = Signal(int, int)


# ============================================================================ cards
class _FitImage(QWidget):
    """A picture drawn whole, scaled to fit the widget (never cropped)."""

    def __init__(self, image: QImage | None, text: str = "") -> None:
        super().__init__()
        self.image = image
        self.text = text
        self.setMinimumSize(200, 150)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(420, 340)

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(24, 25, 28))
        if self.image is None or self.image.isNull():
            p.setPen(Qt.GlobalColor.lightGray)
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                       self.text or "unreadable")  # fmt: skip
            return
        iw, ih = self.image.width(), self.image.height()
        s = min(self.width() / iw, self.height() / ih)
        w, h = iw * s, ih * s
        target = QRectF((self.width() - w) / 2, (self.height() - h) / 2, w, h)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        p.drawImage(target, self.image)


class _Card(QFrame):
    # (paths travel as objects: a str or list signal drops the undecodable bytes of a
    # file name, and the path then names no photo)
    trash_requested = Signal(object)
    open_requested = Signal(object)
    keep_requested = Signal(object)
    discard_requested = Signal(object)
    focus_requested = Signal(object)

    def __init__(
        self, info: CopyInfo, state: str, tier: str = "same_photo", folder: Path | None = None,
        reason: str = "",
    ) -> None:  # fmt: skip
        super().__init__()
        self.info = info
        self.state = state  # "suggested" | "kept" | "discard" | "copy"
        self.setObjectName("bestCard" if state in ("suggested", "kept") else "copyCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(230)
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        badge_text = {
            "suggested": "★ Suggested",
            "kept": "✓ Keep (your choice)",
            "discard": "✕ Discard",
            "copy": "Other shot" if tier == "similar_shots" else "Copy",
        }[state]
        badge = QLabel(badge_text)
        badge.setObjectName("bestBadge" if state in ("suggested", "kept") else "")
        if state == "discard":
            badge.setStyleSheet("color: #e07070; font-weight: bold;")
        top.addWidget(badge)
        top.addStretch(1)
        tag = QLabel(TIER_LABELS.get(tier, tier))
        tag.setToolTip(TIER_HINTS.get(tier, ""))
        tag.setStyleSheet(f"color: white; background: {_TIER_COLOURS.get(tier, '#666')};"
                          "border-radius: 4px; padding: 1px 6px;")  # fmt: skip
        top.addWidget(tag)
        lay.addLayout(top)
        if reason:
            why = QLabel(f"Why: {reason}")
            why.setObjectName("detail")
            why.setWordWrap(True)
            lay.addWidget(why)
        self.pic = _FitImage(info.image, info.error or "unreadable")
        lay.addWidget(self.pic, 1)
        p = Path(info.path)
        name = QLabel(f"<b>{html.escape(shown_name(p))}</b>")
        name.setToolTip(display_path(info.path))
        lay.addWidget(name)
        where = str(p.parent)
        if folder is not None:
            try:
                rel = p.parent.relative_to(folder)
                where = f"{folder.name}/{rel.as_posix()}" if str(rel) != "." else folder.name
            except ValueError:
                pass
        fol = QLabel(f"in {display_path(where)}")
        fol.setObjectName("detail")
        fol.setToolTip(display_path(p.parent))
        lay.addWidget(fol)
        bits = []
        if info.error is None:
            bits += [f"{info.width}×{info.height}", _human_size(info.file_size)]
        if info.taken:
            bits.append("taken " + info.taken[:16].replace("T", " "))
        elif info.mtime is not None:
            when = datetime.fromtimestamp(info.mtime).strftime("%Y-%m-%d %H:%M")
            bits.append(f"modified {when}")
        if info.error is None:
            bits.append(f"sharpness {info.sharpness:.0f}")
            if info.score is not None:
                bits.append(f"similarity {info.score:.2f}")
        detail = QLabel(" · ".join(bits))
        detail.setObjectName("detail")
        detail.setWordWrap(True)
        lay.addWidget(detail)
        row = QHBoxLayout()
        keep = QPushButton("Keep")
        keep.setToolTip("Keep this copy in a clean-up; the others of the group go (K)")
        keep.clicked.connect(lambda: self.keep_requested.emit(info.path))
        drop = QPushButton("Discard")
        drop.setToolTip("Mark this copy to go in a clean-up (D)")
        drop.clicked.connect(lambda: self.discard_requested.emit(info.path))
        open_btn = QPushButton("Open")
        open_btn.clicked.connect(lambda: self.open_requested.emit(info.path))
        trash = QPushButton("Trash…")
        trash.setToolTip("Moves this file to the system trash after asking you")
        trash.clicked.connect(lambda: self.trash_requested.emit(info.path))
        for b in (keep, drop, open_btn, trash):
            b.setStyleSheet("padding: 3px 6px;")
        # the decision on one line, the file's actions on the next: four cards side by
        # side leave too little width for one row (a real window clipped "Discard")
        row.addWidget(keep)
        row.addWidget(drop)
        row.addStretch(1)
        lay.addLayout(row)
        row2 = QHBoxLayout()
        row2.addWidget(open_btn)
        row2.addStretch(1)
        row2.addWidget(trash)
        lay.addLayout(row2)

    def set_focused(self, on: bool) -> None:
        # the focused card (K / D act on it): lighter, with a thicker border of its own
        # colour (gold for the copy kept, blue for the others)
        colour = "#d9a521" if self.objectName() == "bestCard" else "#5aaaf0"
        self.setStyleSheet(
            f"QFrame#{self.objectName()} {{ border: 3px solid {colour}; background: #303239; }}"
            if on
            else ""
        )

    def mousePressEvent(self, event) -> None:
        self.focus_requested.emit(self.info.path)
        super().mousePressEvent(event)


# ============================================================================ summary dialog
class CleanupDialog(QDialog):
    """What a batch clean-up will do, before it does it: which groups (tiers, selection),
    which action, and the summary (:meth:`engine.workflows.cleanup.Plan.summary`).

    ``plan()`` is the plan of the current choices (None when it cannot be made: the
    summary says why); ``accepted`` means "run it".
    """

    def __init__(
        self, groups, keepers, folder, log_dir, selected=(), action: str = "trash",
        destination=None, parent=None, tiers=None,
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.setWindowTitle("Keep the suggested copies")
        self.setModal(True)
        self.groups, self.keepers = list(groups), list(keepers)
        self.folder, self.log_dir = Path(folder), Path(log_dir) if log_dir else None
        self.selected = sorted(set(selected))
        self.destination = None if destination is None else str(destination)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("<b>Keep one copy of each group; the others go.</b>"))
        lay.addWidget(QLabel("Groups:"))
        self.tier_boxes: dict[str, QCheckBox] = {}
        for tier in TIER_LABELS:
            n = sum(1 for g in self.groups if tier_of(g) == tier)
            if not n:
                continue
            box = QCheckBox(f"{TIER_LABELS[tier]} ({n} group{'s' if n != 1 else ''})")
            # similar shots are different photos (a burst, a bracket): the person opts in
            # (``tiers``: the choice made in the dialog this one takes over from)
            box.setChecked(tier in tiers if tiers is not None else tier != "similar_shots")
            box.setToolTip(TIER_HINTS[tier])
            box.toggled.connect(self._update)
            self.tier_boxes[tier] = box
            lay.addWidget(box)
        self.only_selected = QCheckBox(f"Only the {len(self.selected)} selected group"
                                       f"{'s' if len(self.selected) != 1 else ''}")  # fmt: skip
        self.only_selected.setVisible(0 < len(self.selected) < len(self.groups))
        self.only_selected.toggled.connect(self._update)
        lay.addWidget(self.only_selected)
        lay.addSpacing(6)
        lay.addWidget(QLabel("The copies not kept:"))
        self.trash_rb = QRadioButton("Move to the trash")
        self.move_rb = QRadioButton("Move to a folder:")
        self.link_rb = QRadioButton(
            "Replace by a hard link to the kept copy (identical files only)"
        )
        self.link_rb.setToolTip(
            "Frees the space and keeps the path. Only for identical files: a hard link to a "
            "different file would lose the copy's own pixels."
        )
        self.actions = QButtonGroup(self)
        for i, rb in enumerate((self.trash_rb, self.move_rb, self.link_rb)):
            self.actions.addButton(rb, i)
        lay.addWidget(self.trash_rb)
        row = QHBoxLayout()
        row.addWidget(self.move_rb)
        self.dest_label = QLabel()
        self.dest_label.setObjectName("detail")
        row.addWidget(self.dest_label, 1)
        self.choose_btn = QPushButton("Choose…")
        self.choose_btn.clicked.connect(self.choose_destination)
        row.addWidget(self.choose_btn)
        lay.addLayout(row)
        lay.addWidget(self.link_rb)
        {"trash": self.trash_rb, "move": self.move_rb, "link": self.link_rb}[action].setChecked(
            True
        )
        self.actions.idToggled.connect(lambda *_: self._update())
        lay.addSpacing(6)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setMinimumWidth(520)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.summary)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.reject)
        self.run_btn = QPushButton("Clean up")
        self.run_btn.clicked.connect(self._run)
        buttons.addWidget(cancel)
        buttons.addWidget(self.run_btn)
        lay.addLayout(buttons)
        cancel.setDefault(True)
        self._plan = None
        self._update()

    @property
    def action(self) -> str:
        return ("trash", "move", "link")[max(0, self.actions.checkedId())]

    def checked_tiers(self) -> set[str]:
        """The tiers whose groups the clean-up takes."""
        return {t for t, b in self.tier_boxes.items() if b.isChecked()}

    def chosen_rows(self) -> list[int]:
        tiers = self.checked_tiers()
        rows = range(len(self.groups))
        if self.only_selected.isVisible() and self.only_selected.isChecked():
            rows = self.selected
        return [i for i in rows if tier_of(self.groups[i]) in tiers]

    def choose_destination(self) -> None:
        start = str(self.folder.parent)
        d = QFileDialog.getExistingDirectory(self, "Folder that receives the copies", start)
        if d:
            self.set_destination(d)

    def set_destination(self, path) -> None:
        self.destination = str(path)
        self.move_rb.setChecked(True)
        self._update()

    def plan(self):
        return self._plan

    def _update(self) -> None:
        from engine.workflows.cleanup import LINK_TIER, CleanupError, plan_cleanup

        rows = self.chosen_rows()
        has_identical = any(tier_of(self.groups[i]) == LINK_TIER for i in rows)
        self.link_rb.setEnabled(has_identical)
        if not has_identical and self.link_rb.isChecked():
            self.trash_rb.setChecked(True)
            return  # (toggling calls _update again)
        self.dest_label.setText(self.destination or "(none chosen)")
        action = self.action
        self._plan, text = None, ""
        if action == "move" and not self.destination:
            text = "Choose the folder the copies go to."
        else:
            try:
                self._plan = plan_cleanup(
                    [self.groups[i] for i in rows], [self.keepers[i] for i in rows], action,
                    self.destination if action == "move" else None, folder=self.folder,
                )  # fmt: skip
            except (CleanupError, ValueError, OSError) as exc:
                text = f"Cannot clean up: {exc}"
        if self._plan is not None:
            text = self._plan.summary()
            if self._plan.skipped:
                why = sorted({w for _, w in self._plan.skipped})
                text += "<br><span style='color:#a9adb5'>Left alone: " + "; ".join(why) + "</span>"
            if self.log_dir is not None:
                text += (f"<br>Log: {self.log_dir / 'cleanup'}/… — “Undo last clean-up” puts the "
                         "files back.")  # fmt: skip
            if action == "trash":
                text += "<br>Nothing is deleted: the trash can be emptied later."
        self.summary.setText(text)
        n = len(self._plan.steps) if self._plan is not None else 0
        self.run_btn.setEnabled(n > 0)
        verb = {"trash": "Move {n} to the trash", "move": "Move {n}", "link": "Link {n}"}[action]
        self.run_btn.setText(verb.format(n=f"{n} photo{'s' if n != 1 else ''}"))

    def _run(self) -> None:
        if self._plan is not None and self._plan.steps:
            self.accept()


# ============================================================================ the view
class DuplicatesView(QWidget):
    """Groups on the left, the selected group's copies side by side on the right.

    Renders :class:`app.gui.session.DuplicatesModel` (``session.duplicates``): it keeps no
    groups of its own, and every file action is authorised by the session first (the
    path must be inside the open folder and in the groups shown).
    """

    find_requested = Signal(float)  # threshold
    group_selected = Signal(int)
    open_requested = Signal(object)  # (paths: objects, see CopyCard)
    trashed = Signal(object)
    message = Signal(str)
    #: a clean-up moved these paths away (the index must forget them)
    cleaned = Signal(object)
    #: an undo put these paths back
    restored = Signal(object)
    #: a batch finished (or failed, or was undone): what happened, for the status bar
    cleanup_finished = Signal(str)
    reference_changed = Signal()  # the reference folders changed: keepers chosen again

    EMPTY_TEXT = "Open a folder, then find duplicates."

    def __init__(
        self, default_threshold: float = 0.2, parent=None, session: Session | None = None
    ) -> None:
        super().__init__(parent)
        self.session = session if session is not None else Session()
        self.choices = KeepChoices()
        self.keepers: list | None = None  # the copy kept of every group, once computed
        self.cleanup_dialog: CleanupDialog | None = None
        self.fallback_box: QMessageBox | None = None
        self.compare_dialog = None
        self.last_result = None
        self._kept_path: str | None = None  # (the copy the cards show as kept)
        self._job = None  # the worker of the batch step running (keepers, clean-up, undo)
        self._focus = 0
        self.threshold = QDoubleSpinBox()
        self.threshold.setRange(0.05, 1.0)
        self.threshold.setSingleStep(0.01)
        self.threshold.setDecimals(2)
        self.threshold.setValue(default_threshold)
        self.threshold.setToolTip("Minimum similarity for two photos to count as duplicates")
        self.find_btn = QPushButton("Find duplicates")
        self.find_btn.clicked.connect(lambda: self.find_requested.emit(self.threshold.value()))
        self.threshold.editingFinished.connect(
            lambda: self.find_requested.emit(self.threshold.value())
        )
        self.summary = QLabel(self.EMPTY_TEXT)
        # (a long text never widens the window)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # what the last clean-up or undo did (and where its log is)
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice.setStyleSheet("background: #24415e; padding: 5px 8px; border-radius: 4px;")
        self.notice.hide()
        self._stale = False  # the groups shown name files a clean-up moved
        self._batch_tiers: set[str] | None = None  # the tiers of the clean-up just run
        self._found_text = ""  # what the last search found (the summary line)
        self.progress = QProgressBar()
        self.progress.setFixedWidth(240)
        self.progress.setFormat("%v / %m")
        self.progress.hide()
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setToolTip("Stop the search or the clean-up at the next step")
        self.cancel_btn.clicked.connect(self.cancel)
        self.cancel_btn.hide()
        self.search_progress = _Progress(self)
        self.search_progress.changed.connect(self._on_progress)
        top = QHBoxLayout()
        top.setContentsMargins(8, 6, 8, 0)
        top.addWidget(QLabel("Similarity threshold:"))
        top.addWidget(self.threshold)
        top.addWidget(self.find_btn)
        top.addWidget(self.progress)
        top.addWidget(self.cancel_btn)
        top.addSpacing(12)
        top.addWidget(self.summary, 1)
        self.keep_all_btn = QPushButton("Keep the suggested copy in every group…")
        self.keep_all_btn.setToolTip(
            "Clean up all groups (or the checked tiers or selected groups) at once: you see a "
            "summary first, and can undo it"
        )
        self.keep_all_btn.clicked.connect(self.keep_suggested)
        self.undo_btn = QPushButton("Undo last clean-up")
        self.undo_btn.clicked.connect(self.undo_last)
        self.compare_btn = QPushButton("Compare…")
        self.compare_btn.setToolTip("The kept copy and the chosen one side by side (C)")
        self.compare_btn.clicked.connect(self.compare)
        self.keys_hint = QLabel("K keep · D discard · ←/→ choose a copy · N / P next / previous "
                                "group · C compare")  # fmt: skip
        self.keys_hint.setObjectName("detail")
        self.keys_hint.setToolTip(self.keys_hint.text())
        # (shown whole where there is room, cut short on a narrow window rather than
        # widen it: an Ignored policy hid it even on a wide one)
        self.keys_hint.setMinimumWidth(1)
        bar = QHBoxLayout()
        bar.setContentsMargins(8, 0, 8, 4)
        bar.addWidget(self.keep_all_btn)
        bar.addWidget(self.undo_btn)
        bar.addSpacing(12)
        bar.addWidget(self.compare_btn)
        self.keywords_btn = QPushButton("Keywords…")
        self.keywords_btn.setToolTip(
            "Write the groups as keywords (Simile|Duplicates|Same photo, …|Copy to keep, "
            "…|Extra copy) into XMP sidecars for digiKam, darktable and Lightroom; the "
            "photos are not changed"
        )
        self.keywords_btn.clicked.connect(lambda: self.export_keywords())
        bar.addWidget(self.keywords_btn)
        self.reference_btn = QToolButton()
        self.reference_btn.setText("Reference folders")
        self.reference_btn.setToolTip(
            "Folders whose photos are always the copy to keep (your originals)"
        )
        self.reference_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.reference_menu = QMenu(self.reference_btn)
        self.reference_menu.aboutToShow.connect(self._fill_reference_menu)
        self.reference_btn.setMenu(self.reference_menu)
        bar.addWidget(self.reference_btn)
        bar.addStretch(1)
        bar.addWidget(self.keys_hint)

        self.group_list = QListWidget()
        self._list_firsts: list[str] = []  # (see _fill_list)
        self.group_list.setMinimumWidth(270)
        self.group_list.setIconSize(QSize(56, 56))
        self.group_list.setSpacing(3)
        self.group_list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        elide_rows(self.group_list)  # (a line too long for the list ends in "…")
        self.thumbs = None  # set by the window: ThumbnailProvider for group icons
        self.group_list.currentRowChanged.connect(self._on_row)
        self.group_header = QLabel("")
        self.group_header.setWordWrap(True)
        self.group_header.linkActivated.connect(self._open_related)
        self.cards_host = QWidget()
        self.cards = QHBoxLayout(self.cards_host)
        self.cards.setContentsMargins(12, 6, 12, 12)
        self.cards.setSpacing(10)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.cards_host)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(12, 6, 0, 0)
        rl.addWidget(self.group_header)
        rl.addWidget(scroll, 1)
        split = QSplitter()
        split.addWidget(self.group_list)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 900])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addLayout(bar)
        notice_row = QHBoxLayout()
        notice_row.setContentsMargins(8, 0, 8, 4)
        notice_row.addWidget(self.notice)
        lay.addLayout(notice_row)
        lay.addWidget(split, 1)
        ctx = Qt.ShortcutContext.WidgetWithChildrenShortcut
        for key, slot in (
            ("K", self.keep_focused), ("D", self.discard_focused), ("N", self.next_group),
            ("P", self.previous_group), ("Right", lambda: self.move_focus(1)),
            ("Left", lambda: self.move_focus(-1)), ("C", self.compare),
        ):  # fmt: skip
            sc = QShortcut(QKeySequence(key), self)
            sc.setContext(ctx)
            sc.activated.connect(slot)
        self.session.duplicates.events.connect_slots(self)
        self._update_buttons()

    # -- what the model holds ------------------------------------------------------------------
    @property
    def groups(self) -> list:
        return self.session.duplicates.groups

    @property
    def infos(self) -> list[CopyInfo]:
        return self.session.duplicates.infos

    def current_group(self):
        row = self.session.duplicates.selected
        return self.groups[row] if 0 <= row < len(self.groups) else None

    # -- model events ------------------------------------------------------------------------
    def empty_text(self) -> str:
        folder = self.session.folder
        if folder is None:
            return self.EMPTY_TEXT
        return f"No duplicates searched in {folder.name} yet: press Find duplicates."

    def _on_cleared(self, _event=None) -> None:
        self.find_btn.setEnabled(True)
        self._stop_busy()
        self.choices.clear()
        self.keepers = None
        self._stale = False
        self.notice.hide()
        self._fill_list([])
        self._clear_cards()
        self.summary.setText(self.empty_text())
        self._update_buttons()

    def _on_busy(self, event) -> None:
        self.set_busy(f"Looking for near-duplicates at similarity ≥ {event.threshold:.2f}…")
        self.progress.setFormat("%v / %m pairs")  # (busy until the candidate pairs are known)

    def _on_groups(self, event) -> None:
        self.set_groups(event.groups, event.threshold)

    def _on_copies(self, event) -> None:
        self.set_copies(event.infos, event.best)

    def _on_outdated(self, event) -> None:
        """Photos were indexed or dropped since the groups shown were found."""
        if self.is_busy():
            return
        n = int(event.n)
        self.summary.setText(
            f"{self._found_text} · {n} photo{'s' if n != 1 else ''} added, changed or "
            "removed since: press Find duplicates to include them"
        )

    # -- progress ----------------------------------------------------------------------------
    def set_busy(self, text: str) -> None:
        self.summary.setText(text)
        self.find_btn.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_btn.show()
        self._update_buttons()

    def _stop_busy(self) -> None:
        self.progress.hide()
        self.cancel_btn.hide()

    def _on_progress(self, done: int, total: int) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))

    def is_busy(self) -> bool:
        return self.cancel_btn.isVisible() or self._job is not None

    def cancel(self) -> None:
        """Stop the search or the batch step running."""
        if self._job is not None:
            self._job.quit()
            self.summary.setText("Cancelling…")
            return
        jobs = self.session.jobs
        if jobs.running("duplicates"):
            jobs.cancel("duplicates", drop=True)
        else:
            self.session.supersede("duplicates")
        self._stop_busy()
        self.find_btn.setEnabled(True)
        self.summary.setText("Search cancelled. Press Find duplicates to search again.")
        self._update_buttons()

    # -- rendering ---------------------------------------------------------------------------
    def set_groups(self, groups, threshold: float | None = None) -> None:
        """Show ``groups`` and select the first (which asks for its copies)."""
        thr = self.threshold.value() if threshold is None else float(threshold)
        self.find_btn.setEnabled(True)
        self._stop_busy()
        self.keepers = None
        self._stale = False
        groups = list(groups)
        self._clear_cards()
        self._fill_list(groups)
        n_photos = sum(len(g.paths) for g in groups)
        if groups:
            counts = {}
            for g in groups:
                counts[tier_of(g)] = counts.get(tier_of(g), 0) + 1
            tiers = ", ".join(f"{n} {TIER_LABELS.get(t, t).lower()}" for t, n in counts.items())
            self._found_text = (
                f"{len(groups)} group{'s' if len(groups) != 1 else ''} ({tiers}), "
                f"{n_photos} photos at similarity ≥ {thr:.2f}"
            )
            self.summary.setText(self._found_text)
            self.group_list.setCurrentRow(0)
        else:
            self._found_text = (
                f"No near-duplicates at similarity ≥ {thr:.2f}. "
                "Lower the threshold to find looser matches."
            )
            self.summary.setText(self._found_text)
        self._update_buttons()

    def _fill_list(self, groups) -> None:
        self.group_list.blockSignals(True)
        self.group_list.clear()
        # each row's first photo, for its icon (a path is never stored in an item: Qt
        # drops the undecodable bytes of a file name)
        self._list_firsts = [str(g.paths[0]) for g in groups]
        for i, g in enumerate(groups):
            n = len(g.paths)
            scores = list(getattr(g, "scores", []) or [])
            sim = f" · ≥ {min(scores):.2f}" if scores else ""
            tier = TIER_LABELS.get(tier_of(g), tier_of(g))
            first = _short(shown_name(g.paths[0]))
            item = QListWidgetItem(f"Group {i + 1} · {tier}\n{n} photos{sim} · {first}")
            near = [p for p, _s in getattr(g, "related", ()) or ()]
            item.setToolTip(
                TIER_HINTS.get(tier_of(g), "")
                + "\n"
                + "\n".join(map(display_path, g.paths))
                + ("\nAlso similar, not in this group:\n" if near else "")
                + "\n".join(map(display_path, near))
            )
            self.group_list.addItem(item)
            self._set_icon(i)
        self.group_list.blockSignals(False)

    def _set_icon(self, row: int) -> None:
        """The icon of the list's ``row``: the thumbnail of its group's first photo."""
        if self.thumbs is None or not 0 <= row < self.group_list.count():
            return
        pm = self.thumbs.pixmap(self._list_firsts[row])
        if pm is not None:
            self.group_list.item(row).setIcon(QIcon(pm))

    def on_thumbnail(self, path: str) -> None:
        for i, first in enumerate(self._list_firsts):
            if first == path:
                self._set_icon(i)

    def set_copies(self, infos: list[CopyInfo], best: int) -> None:
        self._clear_cards()
        g = self.current_group()
        tier = tier_of(g) if g is not None else "same_photo"
        keep = self.choices.keeper_index(g, best) if g is not None else best
        self._kept_path = infos[keep].path if 0 <= keep < len(infos) else None
        folder = self.session.folder
        for i, info in enumerate(infos):
            if i == keep:
                state = "suggested" if keep == best and g is not None and (
                    self.choices.key(g) not in self.choices.kept) else "kept"  # fmt: skip
            elif g is not None and self.choices.is_discarded(g, info.path):
                state = "discard"
            else:
                state = "copy"
            card = _Card(info, state, tier, folder, info.reason if i == best else "")
            card.trash_requested.connect(self._confirm_trash)
            card.open_requested.connect(self.open_requested)
            card.keep_requested.connect(self.keep)
            card.discard_requested.connect(self.discard)
            card.focus_requested.connect(self._focus_path)
            self.cards.addWidget(card, 1)
        if g is not None:
            row = self.session.duplicates.selected
            n = len(infos)
            self.group_header.setText(
                f"<b>Group {row + 1} of {len(self.groups)}</b> · "
                f"<span style='color:{_TIER_COLOURS.get(tier, '#aaa')}'>"
                f"{TIER_LABELS.get(tier, tier)}</span> · {n} {_members(tier)} — "
                f"{TIER_HINTS.get(tier, '')}" + _related_html(g, self.groups) + _apart_html(g)
            )
        self._focus = min(self._focus, max(0, len(infos) - 1))
        self._show_focus()
        self._update_buttons()

    def cards_list(self) -> list[_Card]:
        out = []
        for i in range(self.cards.count()):
            w = self.cards.itemAt(i).widget()
            if isinstance(w, _Card):
                out.append(w)
        return out

    def _clear_cards(self) -> None:
        while self.cards.count():
            item = self.cards.takeAt(0)
            w = item.widget()
            if w is not None:
                w.hide()
                w.deleteLater()
        self.group_header.setText("")

    def _open_related(self, link: str) -> None:
        """A related photo's name clicked in the group's header: open it."""
        g = self.current_group()
        related = list(getattr(g, "related", ()) or ()) if g is not None else []
        k = int(link.removeprefix("related:")) if link.startswith("related:") else -1
        if 0 <= k < len(related):
            self.open_requested.emit(str(related[k][0]))

    def _on_row(self, row: int) -> None:
        if 0 <= row < len(self.groups):
            self._focus = 0
            self._clear_cards()  # (K / D never act on the cards of another group)
            self.group_header.setText(f"Group {row + 1} of {len(self.groups)}: loading…")
            self.group_selected.emit(row)

    # -- keys: keep / discard / next ---------------------------------------------------------
    def _show_focus(self) -> None:
        for i, card in enumerate(self.cards_list()):
            card.set_focused(i == self._focus)

    def _focus_path(self, path: str) -> None:
        paths = [c.info.path for c in self.cards_list()]
        if path in paths:
            self._focus = paths.index(path)
            self._show_focus()

    def move_focus(self, step: int) -> None:
        n = len(self.cards_list())
        if n:
            self._focus = (self._focus + step) % n
            self._show_focus()

    def focused_path(self) -> str | None:
        cards = self.cards_list()
        return cards[self._focus].info.path if 0 <= self._focus < len(cards) else None

    def keep(self, path: str) -> None:
        """Keep ``path`` in its group (the person's choice over the suggestion)."""
        g = self.current_group()
        if g is None:
            return
        self.choices.keep(g, path)
        self._focus_path(path)
        self._rerender()

    def discard(self, path: str) -> None:
        g = self.current_group()
        if g is None:
            return
        self.choices.discard(g, path, self.session.duplicates.best)
        self._focus_path(path)
        self._rerender()

    def keep_focused(self) -> None:
        p = self.focused_path()
        if p is not None:
            self.keep(p)

    def discard_focused(self) -> None:
        p = self.focused_path()
        if p is not None:
            self.discard(p)

    def _rerender(self) -> None:
        focus = self._focus
        d = self.session.duplicates
        self.set_copies(d.infos, d.best)
        self._focus = focus
        self._show_focus()

    def next_group(self, step: int = 1) -> None:
        n = self.group_list.count()
        if n:
            row = self.group_list.currentRow()
            self.group_list.setCurrentRow(min(n - 1, max(0, row + step)))

    def previous_group(self) -> None:
        self.next_group(-1)

    def compare(self) -> None:
        """The kept copy and the focused one (or the next) side by side."""
        infos = self.infos
        g = self.current_group()
        if g is None or len(infos) < 2:
            return
        keep = max(0, self.choices.keeper_index(g, self.session.duplicates.best))
        other = self._focus if self._focus != keep else (keep + 1) % len(infos)
        from app.gui.compare import CompareDialog

        a, b = infos[keep], infos[other]
        self.compare_dialog = CompareDialog((a.path, a.image), (b.path, b.image), self)
        self.compare_dialog.open()

    # -- batch clean-up ----------------------------------------------------------------------
    def _update_buttons(self) -> None:
        busy = self.is_busy()
        self.keep_all_btn.setEnabled(bool(self.groups) and not busy and not self._stale)
        self.compare_btn.setEnabled(len(self.infos) >= 2)
        self.keywords_btn.setEnabled(bool(self.groups) and not busy and not self._stale)
        log = self._last_log()
        ready = self.session.collection is not None  # (not while the index is rebuilt)
        self.undo_btn.setEnabled(log is not None and not busy and ready)
        self.undo_btn.setToolTip(f"Put back the files of {log}" if log else "No clean-up to undo")

    def _log_dir(self) -> Path | None:
        """Where clean-up logs go: ``<index>/cleanup`` (the open folder's before it has an
        index)."""
        return self.session.index_dir or self.session.folder

    def _last_log(self) -> Path | None:
        from engine.workflows.cleanup import last_log

        d = self._log_dir()
        try:
            return None if d is None else last_log(d)
        except OSError:
            return None

    def _start(self, func, *args, done, failed=None, text: str = "", **kwargs):
        """Run a batch step in a worker (progress in the bar, Cancel stops it); its
        results are dropped once another folder is open."""
        s = self.session
        token = s.begin("cleanup")
        bridge = _Progress(self)
        bridge.changed.connect(self._on_progress)
        self.progress.setRange(0, 0)
        self.progress.setFormat("%v / %m")
        self.progress.show()
        self.cancel_btn.show()
        self.summary.setText(text)

        def finished() -> None:
            self._job = None
            if s.is_current(token):
                self._stop_busy()
            self._update_buttons()

        def errored(exc) -> None:
            if failed is not None:
                failed(exc)
            else:
                self._report(f"{text.rstrip('…')} failed: {exc}", error=True)

        w = workers.create_worker(
            func, *args, pass_cancel=True, progress=bridge.changed.emit, start=False, **kwargs
        )
        w.returned.connect(s.accept(token, done))
        w.errored.connect(s.accept(token, errored))
        w.finished.connect(finished)
        # another folder opened meanwhile: the step stops at its next file
        s.jobs.start(token, text.rstrip("…"), cancel=w.quit, handle=w)
        w.finished.connect(lambda: s.jobs.finish(token))
        self._job = w
        self._update_buttons()
        w.start()
        return w

    def _report(self, text: str, error: bool = False) -> None:
        self.notice.setText(text)
        self.notice.show()
        self.summary.setText("")  # (the note says it all)
        if error:
            self.message.emit(text)
        else:
            self.cleanup_finished.emit(text)

    def export_keywords(self, confirm: bool = True) -> None:
        """The groups shown as keywords in the photos' XMP sidecars (tier, copy to keep
        or extra copy; the copy to keep is the person's choice, else the suggestion),
        after saying how many sidecars change; Simile's category keywords stay."""
        coll, folder = self.session.collection, self.session.folder
        if not self.groups or coll is None or folder is None or self.is_busy():
            return
        groups = list(self.groups)
        photos = [str(p) for p in coll.paths()]
        chosen = self.choices.chosen(groups)

        def written(report) -> None:
            self._report(report.written_text("the duplicate groups"))

        def planned(report) -> None:
            n = len(report.changes)
            if n == 0:
                self._report("The XMP sidecars already hold these duplicate groups.")
                return
            ask = (
                f"Write the {len(groups)} duplicate groups as keywords (Simile|Duplicates|…) "
                f"into {n} XMP sidecar{'s' if n != 1 else ''}?\n\nYour own keywords and "
                "Simile's categories in the sidecars are kept; the photos are not changed."
            )
            yes = QMessageBox.StandardButton.Yes
            if confirm and QMessageBox.question(self, "Export keywords", ask) != yes:
                return
            self._start(duplicate_keywords_job, groups, chosen, photos, folder, False,
                        done=written, text="Writing keywords…",
                        reference=self.reference_folders())  # fmt: skip

        self._start(duplicate_keywords_job, groups, chosen, photos, folder, True,
                    done=planned, text="Reading the sidecars…",
                    reference=self.reference_folders())  # fmt: skip

    # -- reference folders -------------------------------------------------------------------
    def reference_folders(self) -> list[str]:
        """The open folder's reference folders (stored in its index:
        :data:`engine.index.keys.DUPLICATE_REFERENCE_KEY`)."""
        from engine.index.keys import DUPLICATE_REFERENCE_KEY

        coll = self.session.collection
        if coll is None:
            return []
        try:
            raw = coll.store.get_kv(DUPLICATE_REFERENCE_KEY)
            data = json.loads(raw.decode() if isinstance(raw, bytes) else raw) if raw else []
        except Exception:  # (a damaged entry: no reference folders)
            return []
        return [str(p) for p in data if isinstance(p, str)]

    def set_reference_folders(self, folders) -> bool:
        """Store the reference folders (each inside the open folder); the copies to keep
        are chosen again. False (and a message) when the index cannot be written."""
        from engine.index.keys import DUPLICATE_REFERENCE_KEY

        coll, root = self.session.collection, self.session.folder
        if coll is None or root is None:
            return False
        keep = []
        for f in folders:
            f = os.path.abspath(os.fspath(f))
            try:
                Path(f).relative_to(os.path.abspath(root))
            except ValueError:
                self.message.emit(f"{f} is not inside {root}: it cannot be a reference folder.")
                continue
            if f not in keep:
                keep.append(f)
        try:
            coll.store.set_kv(DUPLICATE_REFERENCE_KEY, json.dumps(keep))
        except Exception as exc:
            self.message.emit(f"The reference folders cannot be saved: {exc}")
            return False
        self.keepers = None  # chosen again with the new folders
        self.reference_changed.emit()
        return True

    def _fill_reference_menu(self) -> None:
        m = self.reference_menu
        m.clear()
        root = self.session.folder
        current = self.reference_folders()
        add = m.addAction("Add a reference folder…")
        add.setEnabled(root is not None)
        add.triggered.connect(self._add_reference_dialog)
        if current:
            m.addSeparator()
        for f in current:
            shown = os.path.relpath(f, root) if root is not None else f
            a = m.addAction(f"Remove {shown}")
            a.triggered.connect(
                lambda _=False, f=f: self.set_reference_folders(
                    [x for x in self.reference_folders() if x != f]
                )
            )

    def _add_reference_dialog(self) -> None:
        root = self.session.folder
        if root is None:
            return
        f = QFileDialog.getExistingDirectory(
            self, "A folder of originals (always kept)", str(root)
        )
        if f:
            self.set_reference_folders([*self.reference_folders(), f])

    def keep_suggested(self) -> None:
        """ "Keep the suggested copy in every group…": the copies kept are computed (in a
        worker), then the summary dialog opens."""
        if not self.groups or self.is_busy():
            return
        if self.keepers is not None and len(self.keepers) == len(self.groups):
            self._open_cleanup_dialog()
            return
        groups = list(self.groups)
        chosen = self.choices.chosen(groups)
        sel = self.session.duplicates
        if 0 <= sel.selected < len(groups) and sel.best >= 0:
            chosen.setdefault(sel.selected, sel.best)

        shown = self.summary.text()  # (what the line said: back once they are chosen)

        def done(keepers) -> None:
            self.keepers = list(keepers)
            self.summary.setText(shown)
            self._open_cleanup_dialog()

        def failed(exc) -> None:
            if isinstance(exc, InterruptedError):
                self.summary.setText("Cancelled: nothing was changed.")
            else:
                self._report(f"Could not choose the copies to keep: {exc}", error=True)

        self._start(suggest_keepers, groups, chosen, done=done, failed=failed,
                    reference=self.reference_folders(),
                    text=f"Choosing the copy to keep in {len(groups)} groups…")  # fmt: skip

    def _keepers_now(self) -> list:
        """The computed keepers with the person's latest choices over them."""
        out = list(self.keepers or [])
        for i, k in self.choices.chosen(self.groups).items():
            if i < len(out):
                out[i] = k
        return out

    def selected_rows(self) -> list[int]:
        return sorted(self.group_list.row(it) for it in self.group_list.selectedItems())

    def _open_cleanup_dialog(self, action: str = "trash", destination=None) -> CleanupDialog:
        if self.session.folder is None:
            return None
        self.cleanup_dialog = CleanupDialog(
            self.groups, self._keepers_now(), self.session.folder, self._log_dir(),
            self.selected_rows(), action=action, destination=destination, parent=self,
            tiers=self._batch_tiers,
        )  # fmt: skip
        self._batch_tiers = None

        def accepted(d=self.cleanup_dialog) -> None:
            # the next dialog (the fallback when there is no trash, or the next clean-up)
            # starts from the person's choice of tiers
            self._batch_tiers = d.checked_tiers()
            self.run_plan(d.plan())

        self.cleanup_dialog.accepted.connect(accepted)
        self.cleanup_dialog.open()
        if action == "move" and destination is None:
            self.cleanup_dialog.choose_destination()
        return self.cleanup_dialog

    def run_plan(self, plan) -> None:
        """Carry out ``plan`` (authorised path by path by the session first)."""
        from engine.workflows.cleanup import TrashUnavailable, default_log_path, format_bytes
        from engine.workflows.cleanup import run_cleanup as run

        if plan is None or not plan.steps:
            return
        try:
            self.session.authorize_all(plan.action, [s.path for s in plan.steps])
            if plan.action == "link":
                self.session.authorize_all("link", sorted({s.kept for s in plan.steps}))
        except ActionRefused:
            self.summary.setText("Nothing was changed: a photo may not be touched (see above).")
            return
        log = default_log_path(self._log_dir())
        verb = {"trash": "Moving to the trash", "move": "Moving", "link": "Linking"}[plan.action]

        def done(result) -> None:
            self.last_result = result
            gone = [r["original"] for r in result.done if r["action"] != "link"]
            n = len(result.done)
            what = {
                "trash": "Moved {w} to the trash",
                "move": "Moved {w} to " + str(plan.destination),
                "link": "Replaced {w} by hard links",
            }[plan.action]
            text = what.format(w=f"{n} photo{'s' if n != 1 else ''} "
                                 f"({format_bytes(result.bytes_done)})")  # fmt: skip
            if result.cancelled:
                text += " before you cancelled"
            if result.failed:
                text += f"; {len(result.failed)} could not be: {result.failed[0][1]}"
            text += f". Log: {result.log_path}. “Undo last clean-up” puts them back."
            self.keepers = None
            self._report(text)
            if gone:
                self._stale = True  # found again once the index forgot the files
                self._fill_list([])
                self._clear_cards()
                self.group_header.setText("The groups are found again once the index has "
                                          "forgotten the files moved…")  # fmt: skip
                self._update_buttons()
                self.cleaned.emit(gone)

        def failed(exc) -> None:
            if isinstance(exc, TrashUnavailable):
                self.offer_folder_instead(plan, exc)
            else:
                self._report(f"The clean-up failed: {exc}", error=True)

        self._start(run, plan, log, done=done, failed=failed,
                    text=f"{verb} {len(plan.steps)} photos…")  # fmt: skip

    def offer_folder_instead(self, plan, exc) -> None:
        """The trash cannot be used here: nothing moved; offer a folder instead."""
        self.summary.setText("Nothing was changed: there is no usable trash here.")

        def move() -> None:
            self._open_cleanup_dialog("move")

        self._no_trash_box(
            "The trash cannot be used for these photos. Nothing was moved.",
            f"{exc}\n\nMove the copies to a folder you choose instead? You can undo it.",
            move,
        )

    def _no_trash_box(self, text: str, informative: str, on_move) -> None:
        """Ask (without blocking) whether to move to a folder instead of the trash;
        ``on_move()`` when the person says yes. The open box is :attr:`fallback_box`."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("No trash here")
        box.setText(text)
        box.setInformativeText(informative)
        move = box.addButton("Move to a folder…", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(move)
        self.fallback_box = box

        def answered(button) -> None:
            self.fallback_box = None
            if button is move:
                on_move()

        box.buttonClicked.connect(answered)
        box.open()

    def undo_last(self) -> None:
        """Put back the files of the last clean-up (its log)."""
        from engine.workflows.cleanup import undo_cleanup

        log = self._last_log()
        if log is None or self.is_busy():
            return
        folder = self.session.folder

        def work(cancel=None, progress=None):
            return undo_cleanup(log, folder=folder)

        def done(result) -> None:
            n = len(result.restored)
            text = f"Put back {n} photo{'s' if n != 1 else ''}"
            if result.failed:
                p, why = result.failed[0]
                text += (f"; {len(result.failed)} could not be ({shown_name(p)}: {why}); they "
                         f"stay listed in {log}")  # fmt: skip
            self._report(text + ".", error=bool(result.failed))
            if result.restored:
                self.restored.emit(list(result.restored))

        self._start(work, done=done, text="Putting the files back…")

    # -- the one-file action -----------------------------------------------------------------
    def _allowed(self, path: str) -> str | None:
        """The path to trash if the session allows it (else None: it said why)."""
        try:
            return self.session.authorize("trash", path, among="duplicates")
        except ActionRefused:
            return None

    def _confirm_trash(self, path: str) -> None:
        """A card's "Trash…": asked first, then done like a clean-up of one copy (in a
        worker, logged, put back by "Undo last clean-up"; another copy of the group must
        still be there)."""
        path = self._allowed(path)
        if path is None:
            return
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Move to Trash")
        box.setText(f"Move “{shown_name(path)}” to the trash?")
        box.setInformativeText(
            f"{path}\n\nYou can put it back with “Undo last clean-up” or from the trash."
        )
        box.setStandardButtons(QMessageBox.StandardButton.Cancel)
        move = box.addButton("Move to Trash", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is not move:
            return
        # asked again: the session may have changed while the question was open
        path = self._allowed(path)
        if path is None:
            return
        plan = self._one_copy_plan(path, "trash")
        if plan is not None:
            self._run_one(plan, path)

    def _one_copy_plan(self, path: str, action: str, destination=None):
        """The clean-up plan of ``path`` alone (``action`` "trash" or "move"), the copy
        kept being the one the cards show as kept (or the group's first other copy);
        None, said why, when it cannot be planned."""
        from engine.workflows.cleanup import CleanupError, plan_cleanup

        g = self.current_group()
        folder = self.session.folder
        if g is None or folder is None:
            return None
        others = [os.path.abspath(os.fspath(q)) for q in g.paths]
        others = [q for q in others if q != path]
        if not others:
            return None
        kept = self._kept_path and os.path.abspath(self._kept_path)
        kept = kept if kept in others else others[0]
        pair = DuplicateGroup([kept, path], [1.0, 1.0], tier_of(g))
        try:
            return plan_cleanup([pair], [0], action, destination, folder=folder)
        except (CleanupError, ValueError, OSError) as exc:
            self._report(f"Cannot move {shown_name(path)}: {exc}", error=True)
            return None

    def _run_one(self, plan, path: str) -> None:
        """Move one copy to the trash (a one-step ``plan``) in a worker, logged like a
        batch; ``trashed`` once it is gone, a folder offered when there is no trash."""
        from engine.workflows.cleanup import TrashUnavailable, default_log_path
        from engine.workflows.cleanup import run_cleanup as run

        log = default_log_path(self._log_dir())

        def done(result) -> None:
            if result.done:
                self.last_result = result
                self._update_buttons()
                self.trashed.emit(path)
                self._report(
                    f"Moved {shown_name(path)} to the trash. “Undo last clean-up” puts it back."
                )
            elif result.failed:
                self._report(
                    f"Could not move {shown_name(path)} to the trash: {result.failed[0][1]}",
                    error=True,
                )

        def failed(exc) -> None:
            if isinstance(exc, TrashUnavailable):
                name = shown_name(path)
                self.message.emit(f"Could not move {name} to the trash (no trash here).")
                self.offer_folder_for(path)
            else:
                self._report(f"Could not move {shown_name(path)} to the trash: {exc}", error=True)

        self._start(run, plan, log, done=done, failed=failed,
                    text=f"Moving {shown_name(path)} to the trash…")  # fmt: skip

    def offer_folder_for(self, path: str) -> None:
        """The trash refused ``path``: offer to move it to a folder instead (logged, and
        undone by "Undo last clean-up")."""
        if self.current_group() is None or self.session.folder is None:
            return

        def move() -> None:
            dest = QFileDialog.getExistingDirectory(
                self, "Folder that receives the copy", str(self.session.folder.parent)
            )
            if not dest:
                return
            plan = self._one_copy_plan(path, "move", dest)
            if plan is not None:
                self.run_plan(plan)

        self._no_trash_box(
            f"“{shown_name(path)}” could not be moved to the trash. Nothing was moved.",
            "Move it to a folder you choose instead? You can undo it.",
            move,
        )
