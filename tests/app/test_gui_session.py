"""The window's session model without a window (no QApplication, no Qt widgets).

:mod:`app.gui.session` holds everything a window shows; these tests open folders, set
results, open another folder and check that every part is reset in one place, that stale
background results are dropped by the one token mechanism, and that file actions are
refused outside the open folder (lexically: a symlinked photo is the link) or outside
the duplicate groups shown.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.gui.session import (
    ActionRefused,
    EmitterGroup,
    EventEmitter,
    Hit,
    QueryModel,
    Session,
    Token,
)
from app.gui.state import SearchSettings

ROOT = Path(__file__).resolve().parents[2]
SESSION_PY = ROOT / "app" / "gui" / "session.py"


class FakeCollection:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def photos(folder: Path, names) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for n in names:
        p = folder / n
        p.write_bytes(b"not really a photo")
        out.append(str(p))
    return out


def group(*paths, score=0.9):
    return SimpleNamespace(paths=list(paths), scores=[1.0] + [score] * (len(paths) - 1))


class Recorder:
    """Every event of every part of a session, as (part, name, event)."""

    def __init__(self, session: Session) -> None:
        self.seen: list[tuple[str, str, object]] = []
        parts = {"session": session, "query": session.query, "match": session.match,
                 "duplicates": session.duplicates, "grouping": session.grouping,
                 "jobs": session.jobs}  # fmt: skip
        for part, model in parts.items():
            for name in model.events:
                getattr(model.events, name).connect(
                    lambda e, part=part, name=name: self.seen.append((part, name, e))
                )

    def names(self) -> list[tuple[str, str]]:
        return [(part, name) for part, name, _ in self.seen]

    def clear(self) -> None:
        self.seen.clear()


def opened(session: Session, folder: Path, names=("a.jpg", "b.jpg", "c.jpg")):
    """Open ``folder`` in ``session`` as the window does: index, then a ready collection."""
    files = photos(folder, names)
    session.open_folder(folder)
    token = session.begin("index")
    session.jobs.start(token, "Indexing")
    coll = FakeCollection(folder.name)
    mark = SimpleNamespace(query=files[0], result=files[-1], relevant=True)
    assert session.collection_ready(token, coll, files, [(files[-1], "broken")],
                                    ["hybrid", "wta"], [mark])  # fmt: skip
    return coll, files


# ---------------------------------------------------------------------------- Qt-free
def test_session_module_is_qt_free():
    """The model imports no Qt: its own imports are the standard library and the Qt-free
    app.gui.state, and importing it (bypassing app.gui's PySide6 set-up) loads no Qt."""
    tree = ast.parse(SESSION_PY.read_text(encoding="utf-8"))
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mods.add(node.module or "")
    assert not any("PySide" in m or "Qt" in m or "shiboken" in m for m in mods), mods
    assert {m for m in mods if m.startswith("app")} <= {"app.gui.state"}
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('app.gui'); pkg.__path__ = [{str(SESSION_PY.parent)!r}]\n"
        "sys.modules['app.gui'] = pkg\n"
        "import app.gui.session as s\n"
        "s.Session().open_folder('.')\n"
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken'))]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------- events
def test_event_emitter_connect_emit_block_and_errors():
    class Model:
        pass

    m = Model()
    events = EmitterGroup(m, ("changed", "cleared"))
    got = []
    cb = events.changed.connect(lambda e: got.append((e.type, e.sender, e.value)))
    ev = events.changed(value=3)
    assert got == [("changed", m, 3)] and ev.value == 3
    with events.changed.blocker():
        events.changed(value=4)
    assert len(got) == 1
    events.changed.disconnect(cb)
    events.changed(value=5)
    assert len(got) == 1

    # a failing callback does not stop the others, and its error is raised afterwards
    after = []
    events.cleared.connect(lambda e: 1 / 0)
    events.cleared.connect(lambda e: after.append(e.type))
    with pytest.raises(ZeroDivisionError):
        events.cleared()
    assert after == ["cleared"]

    class View:
        def __init__(self):
            self.calls = []

        def _on_changed(self, e):
            self.calls.append(e.value)

    v = View()
    assert events.connect_slots(v) == ["changed"]
    events.changed(value=7)
    assert v.calls == [7]
    with pytest.raises(AttributeError):
        events.nothing  # noqa: B018
    with pytest.raises(ValueError, match="reserved"):
        EventEmitter(m, "x")(sender=1)
    with pytest.raises(TypeError):
        events.changed.connect("not callable")


# ---------------------------------------------------------------------------- one reset
def test_opening_another_folder_resets_every_part(tmp_path):
    s = Session()
    rec = Recorder(s)
    coll_a, a = opened(s, tmp_path / "A")
    assert s.epoch == 1 and s.collection is coll_a and s.photos == sorted(a)
    assert s.problems == [(a[-1], "broken")] and s.methods == ["hybrid", "wta"]
    assert len(s.marks) == 1 and not s.jobs.running("index")

    # everything a window can show about folder A
    s.query.searching(a[0], SearchSettings("hybrid", 5))
    s.query.set_results(a[0], "hybrid", [Hit(a[0], 1.0), Hit(a[1], 0.5)], 0.01)
    s.match.start(a[0], a[1])
    s.match.set_data("match data")
    s.duplicates.start(0.5)
    s.duplicates.set_groups([group(a[0], a[1])], 0.5)
    s.duplicates.select(0)
    s.duplicates.set_copies(["info a", "info b"], 0)
    s.duplicates.refresh_after_index = True
    g = SimpleNamespace(paths=list(a), k=2, names={0: "Cats"})
    s.grouping.set_grouping(g, K="affinities")
    s.grouping.add_constraints([(a[0], a[1])], [(a[0], a[2])])
    s.grouping.mask_started(a[0], "Matching…")
    s.grouping.set_mask("mask data", "Cats")
    cancelled = []
    for topic in ("grouping", "learn", "duplicates"):
        s.jobs.start(s.begin(topic), topic, cancel=lambda t=topic: cancelled.append(t))
    s.photos_arrived([a[0]])
    s.query.wanted_method = "learned"
    rec.clear()

    coll_b, b = opened(s, tmp_path / "B", ("x.jpg", "y.jpg"))
    # the first folder's collection is closed, its jobs asked to stop
    assert coll_a.closed == 1 and coll_b.closed == 0
    assert sorted(cancelled) == ["duplicates", "grouping", "learn"]
    assert s.epoch == 2 and s.folder == (tmp_path / "B").resolve()
    assert s.photos == sorted(b) and not set(a) & set(s.photos)
    assert s.problems == [(b[-1], "broken")]
    q = s.query
    assert (q.source, q.status, q.hits, q.hits_source, q.pending) == (
        None, "none", [], None, None)  # fmt: skip
    # a method asked for before a folder could offer it waits for the next folder
    assert q.wanted_method == "learned"
    assert s.match.pair is None and s.match.data is None
    d = s.duplicates
    assert (d.groups, d.infos, d.selected, d.threshold, d.trashed, d.refresh_after_index) == (
        [], [], -1, None, set(), False)  # fmt: skip
    gm = s.grouping
    assert (gm.grouping, gm.K, gm.must, gm.cannot, gm.busy, gm.mask_path, gm.mask_data) == (
        None, None, [], [], False, None, None)  # fmt: skip
    assert len(s.jobs) == 0
    assert len(s.marks) == 1 and s.marks.get(b[0], b[-1]) is True  # B's own marks only
    assert s.marks.get(a[0], a[-1]) is None

    # every part told its views, and the window learnt of the new folder
    names = rec.names()
    for ev in [("jobs", "finished"), ("session", "collection_closed"),
               ("session", "photos_reset"), ("session", "problems_changed"),
               ("query", "changed"), ("query", "results"), ("session", "marks_changed"),
               ("match", "changed"), ("duplicates", "cleared"), ("grouping", "grouping"),
               ("grouping", "mask"), ("session", "folder_opened")]:  # fmt: skip
        assert ev in names, ev
    assert names.index(("duplicates", "cleared")) < names.index(("session", "folder_opened"))
    results = next(e for part, n, e in rec.seen if (part, n) == ("query", "results"))
    assert results.hits == [] and results.source is None
    # the photos that arrived from A's indexing never reach B
    assert s.flush_arrivals() == []

    s.close()
    assert coll_b.closed == 1 and s.folder is None and s.photos == [] and s.epoch == 3
    assert ("session", "folder_closed") in rec.names()


def test_open_folder_validates(tmp_path):
    s = Session()
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        s.open_folder(tmp_path / "missing")
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        s.open_folder(tmp_path / "file.jpg")
    assert s.epoch == 0 and s.folder is None


# ---------------------------------------------------------------------------- one staleness rule
def test_stale_tokens_are_dropped(tmp_path):
    s = Session()
    opened(s, tmp_path / "A")
    got = []

    # a newer request of a topic supersedes the earlier one, not other topics
    q1 = s.begin("query")
    d1 = s.begin("duplicates")
    q2 = s.begin("query")
    assert not s.is_current(q1) and s.is_current(q2) and s.is_current(d1)
    s.accept(q1, got.append)("old hits")
    s.accept(q2, got.append)("new hits")
    assert got == ["new hits"]
    assert s.accept(q1, got.append)("x") is None

    # a new duplicate search also drops the copies of the groups shown
    c1 = s.begin("copies")
    s.begin("duplicates")
    assert not s.is_current(c1) and not s.is_current(d1)

    # an epoch-only token (saving one mark) survives newer requests, not a new folder
    m1 = s.begin("marks", supersede=False)
    s.begin("marks", supersede=False)
    s.begin("marks")
    assert m1.serial is None and s.is_current(m1)
    assert not s.is_current(Token("marks", s.epoch - 1, None))

    # opening another folder makes every earlier token stale at once
    keep = [s.begin(t) for t in ("query", "grouping", "mask", "learn", "match")]
    keep.append(m1)
    opened(s, tmp_path / "B", ("x.jpg",))
    assert not any(s.is_current(t) for t in keep)
    got.clear()
    for t in keep:
        s.accept(t, got.append)("result of A")
    assert got == []
    with pytest.raises(ValueError, match="identifier"):
        s.begin("not a topic")


def test_stale_index_result_is_closed_not_shown(tmp_path):
    s = Session()
    files = photos(tmp_path / "A", ["a.jpg"])
    s.open_folder(tmp_path / "A")
    old = s.begin("index")
    s.jobs.start(old, "Indexing A")
    assert s.index_opened(old, files, tmp_path / "idx")
    photos(tmp_path / "B", ["b.jpg"])
    s.open_folder(tmp_path / "B")
    late = FakeCollection("A")
    assert not s.index_opened(old, files, tmp_path / "idx")
    assert not s.collection_ready(old, late, files)
    assert late.closed == 1 and s.collection is None and s.photos == []


def test_jobs_cancel_finish(tmp_path):
    s = Session()
    opened(s, tmp_path / "A")
    asked = []
    t = s.begin("grouping")
    job = s.jobs.start(t, "Grouping…", cancel=lambda: asked.append(1), handle="worker")
    assert s.jobs.get("grouping") is job and job.handle == "worker" and job.topic == "grouping"
    # cancel without drop: the job reports its own end
    assert s.jobs.cancel("grouping") and asked == [1] and s.jobs.running("grouping")
    assert s.jobs.finish(t) and not s.jobs.finish(t)
    # cancel with drop: finished at once, its late results ignored
    t2 = s.begin("grouping")
    s.jobs.start(t2, "Splitting…", cancel=lambda: asked.append(2))
    assert s.jobs.cancel("grouping", drop=True)
    assert asked == [1, 2] and not s.jobs.running("grouping") and not s.is_current(t2)
    assert not s.jobs.cancel("grouping")
    with pytest.raises(ValueError, match="stale"):
        s.jobs.start(t2)


def test_parts_validate(tmp_path):
    s = Session()
    with pytest.raises(ValueError, match="method"):
        s.query.set_results("q.jpg", "nonsense", [])
    with pytest.raises(ValueError, match="threshold"):
        s.duplicates.start(0)
    with pytest.raises(IndexError):
        s.duplicates.select(0)
    with pytest.raises(ValueError, match="k must be"):
        s.grouping.set_k_choice(0)
    s.grouping.set_k_choice(3)
    assert s.grouping.k_choice == 3
    # a new must-pair replaces its cannot-pair and the other way round
    gm = s.grouping
    gm.add_constraints([("a", "b")], [("a", "c")])
    gm.add_constraints([("c", "a")], [("b", "a")])
    assert gm.must == [("c", "a")] and gm.cannot == [("b", "a")]
    assert not gm.rename(0, "x")  # no grouping shown
    gm.set_grouping(SimpleNamespace(k=2, names={}, paths=[]))
    assert gm.rename(1, "  Dogs ") and gm.grouping.names == {1: "Dogs"}
    assert gm.rename(1, "") and gm.grouping.names == {}
    assert QueryModel.display_name("/x/pasted-123.png") == "Pasted image"
    assert QueryModel.display_name(None) == "No query yet"


# ---------------------------------------------------------------------------- file actions
def test_file_actions_only_inside_the_folder_and_the_groups(tmp_path):
    s = Session()
    refused = []
    s.events.refused.connect(lambda e: refused.append(e.message))
    outside = photos(tmp_path / "elsewhere", ["target.jpg"])[0]
    sibling = photos(tmp_path / "A2", ["x.jpg"])[0]  # shares A's prefix, not its folder
    with pytest.raises(ActionRefused, match="no folder is open"):
        s.authorize("trash", outside)

    _, a = opened(s, tmp_path / "A", ("a.jpg", "a_copy.jpg", "other.jpg"))
    link = tmp_path / "A" / "link.jpg"
    os.symlink(outside, link)
    s.duplicates.set_groups([group(a[0], a[1], str(link)), group(outside, sibling)], 0.5)

    # inside the folder and in the groups shown: allowed, the path as written
    assert s.authorize("trash", a[1]) == a[1]
    # a symlinked photo is the link: allowed as the link, never as its target
    assert s.authorize("trash", link) == str(link)
    assert os.path.realpath(link) == outside
    n = len(refused)
    for bad, why in [
        (outside, "not inside the open folder"),  # the link's target
        (sibling, "not inside the open folder"),  # /tmp/.../A2 is not inside /tmp/.../A
        (str(tmp_path / "A" / ".." / "elsewhere" / "target.jpg"), "not inside"),
        (str(tmp_path / "A"), "not inside"),  # the folder itself
        (a[2], "not one of the duplicate groups shown"),  # inside, but in no group
    ]:
        with pytest.raises(ActionRefused, match=why):
            s.authorize("trash", bad)
    assert len(refused) == n + 5 and all("to the trash: it is not" in m for m in refused[n:])

    # a trashed photo leaves the photos and can never be acted on again
    s.file_trashed(a[1])
    assert a[1] not in s.photos and s.duplicates.refresh_after_index
    with pytest.raises(ActionRefused, match="duplicate groups"):
        s.authorize("trash", a[1])

    # links / copies of the grouping: inside the folder and in the grouping shown
    s.grouping.set_grouping(SimpleNamespace(k=1, names={}, paths=[a[0], a[2], outside]))
    assert s.authorize_all("link", [a[0], a[2]], among="grouping") == [a[0], a[2]]
    with pytest.raises(ActionRefused, match="not inside"):
        s.authorize_all("link", [a[0], outside], among="grouping")
    with pytest.raises(ValueError, match="among"):
        s.authorize("link", a[0], among="anything")

    # after another folder opens, nothing of the first may be touched
    opened(s, tmp_path / "B", ("b.jpg",))
    for p in (a[0], str(link)):
        with pytest.raises(ActionRefused, match="not inside the open folder"):
            s.authorize("trash", p)


def test_a_duplicate_search_on_a_replaced_collection_is_dropped_and_redone(tmp_path):
    """Found in a real window: after "Undo last clean-up" the folder was indexed twice
    (the undo, then the watcher) and a duplicate search started between the two failed
    with "the index store is closed": an index closes the collection while the search
    reads it. Whenever the collection is closed, the search running on it is stopped,
    its result dropped, and it is redone after the index."""
    s = Session()
    coll, files = opened(s, tmp_path / "a")
    dup = s.begin("duplicates")
    s.jobs.start(dup, "Finding duplicates")
    s.close_collection()  # (an index starts: the indexing process takes the writer lock)
    assert not s.is_current(dup) and not s.jobs.running("duplicates")
    assert s.duplicates.refresh_after_index and coll.closed
    s.duplicates.refresh_after_index = False
    token = s.begin("index")
    s.jobs.start(token, "Indexing")
    assert s.collection_ready(token, FakeCollection("a again"), files)
    dup = s.begin("duplicates")
    s.jobs.start(dup, "Finding duplicates")
    token = s.begin("index")
    s.jobs.start(token, "Indexing")
    assert s.collection_ready(token, FakeCollection("a, third"), files)  # replaced
    assert not s.is_current(dup) and s.duplicates.refresh_after_index


def test_grouping_history_stamp_changes_only_with_the_undo_history():
    """The Categories view writes the undo history to the index only when its stamp changed
    since the last write: every change of the history gives a new stamp, other changes
    (placing photos, a new grouping shown) do not."""
    import numpy as np

    from app.gui.session import GroupingModel
    from engine.cluster import EditableGrouping

    m = GroupingModel()
    g = EditableGrouping(["a", "b", "c"], np.array([0, 0, 1]), np.ones(3), np.ones(3, bool),
                         np.zeros(3, bool), "k=2")  # fmt: skip
    m.set_grouping(g)
    seen = [m.history_stamp]
    m.set_placed({"c": 0.9})
    m.set_grouping(g)
    assert m.history_stamp == seen[-1]
    m.rename(0, "Sea")  # remembers the state before it
    assert m.history_stamp not in seen and len(m.undo_stack) == 1
    seen.append(m.history_stamp)
    m.undo()
    assert m.history_stamp not in seen and not m.undo_stack
    seen.append(m.history_stamp)
    m.set_history(GroupingModel().history())
    assert m.history_stamp not in seen
    seen.append(m.history_stamp)
    other = GroupingModel()  # another model (another view) never reuses a stamp
    assert other.history_stamp not in seen


def test_index_writes_run_in_order_off_the_calling_thread_and_close_waits(tmp_path):
    """Edits are written by one background thread, in the order submitted; closing the
    collection (another folder, the window closing) waits for them first, so an edit
    made just before is in the index the next time it is opened."""
    import threading
    import time

    s = Session()
    photos(tmp_path / "A", ["a.jpg"])
    s.open_folder(tmp_path / "A")
    tok = s.begin("index")
    s.jobs.start(tok, "Indexing A")
    written: list[tuple[str, int, bool]] = []

    class Collection(FakeCollection):
        def close(self) -> None:
            written.append(("closed", 0, False))
            super().close()

    coll = Collection("A")
    assert s.collection_ready(tok, coll, [])
    caller = threading.get_ident()
    gate = threading.Event()

    def write(n: int) -> None:
        if n == 0:
            gate.wait(10)  # the first write is slow
            time.sleep(0.05)
        written.append(("write", n, threading.get_ident() != caller))

    for n in range(4):
        s.writes.submit(write, n)
    assert s.writes.pending == 4 and written == []  # the caller did not wait
    gate.set()
    s.open_folder(tmp_path / "A")  # closes the collection: after the writes
    assert written == [("write", n, True) for n in range(4)] + [("closed", 0, False)]
    assert s.writes.pending == 0 and coll.closed == 1

    def fail() -> None:
        raise OSError("read-only index")

    s.writes.submit(fail)
    s.writes.submit(write, 9)  # a failed write does not stop the ones after it
    assert s.writes.wait(10) and s.writes.failed == 1 and written[-1][:2] == ("write", 9)


def test_grouping_saved_state_is_a_copy_later_edits_do_not_reach():
    """The state handed to the background writer: a rename made while it is written (a
    rename changes the grouping's names in place) does not change what is written."""
    import numpy as np

    from app.gui.session import GroupingModel
    from engine.cluster import EditableGrouping

    m = GroupingModel()
    g = EditableGrouping(["a", "b", "c"], np.array([0, 0, 1]), np.ones(3), np.ones(3, bool),
                         np.zeros(3, bool), "k=2")  # fmt: skip
    m.set_grouping(g)
    m.rename(0, "Sea")
    m.set_constraints([("a", "b")], [])
    state = m.saved_state(history=True)
    m.rename(0, "Mountains")
    m.rename(1, "Sky")
    m.set_constraints([("a", "b"), ("b", "c")], [("a", "c")])
    assert state["grouping"].names == {0: "Sea"}
    assert state["must"] == [("a", "b")] and state["cannot"] == []
    assert [e.grouping.names for e in state["history"]] == [{}]
    assert "history" not in m.saved_state(history=False)
    assert m.grouping.names == {0: "Mountains", 1: "Sky"}
