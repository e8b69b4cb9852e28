"""Thumbs up / down on results and "Learn from my marks" (pytest-qt, offscreen)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("cv2")

import app.gui  # noqa: F401  (PySide6 refcount work-around before other Qt code)

# isort: split
from PySide6.QtCore import Qt

from tests.app._gui import INDEX_TIMEOUT, make_grouped_folder


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    root = tmp_path_factory.mktemp("marks")
    folder = root / "photos"
    groups = make_grouped_folder(folder, n_groups=3, per_group=3, seed=5)
    return folder, root / "index", groups


def click_thumb(qtbot, win, result: str, up: bool) -> None:
    """Click the ✓ (up) or ✗ button drawn on ``result``'s row."""
    panel = win.results_panel
    row = win.results.row_of(result)
    idx = win.results.index(row)
    panel.list.scrollTo(idx)
    rect = panel.list.visualRect(idx)
    b_up, b_down = panel.delegate.button_rects(rect)
    with qtbot.waitSignal(win.marks_saved, timeout=20_000):
        qtbot.mouseClick(
            panel.list.viewport(), Qt.MouseButton.LeftButton, pos=(b_up if up else b_down).center()
        )


def stored(win) -> dict[tuple[str, str], bool]:
    from engine.workflows.feedback import load_marks

    return {(Path(m.query).name, Path(m.result).name): m.relevant
            for m in load_marks(win.collection)}  # fmt: skip


def test_marks_learn_and_search_learned(qtbot, window, grouped):
    folder, index, groups = grouped
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    methods = [window.results_panel.method.itemData(i)
               for i in range(window.results_panel.method.count())]  # fmt: skip
    assert "learned" not in methods  # no model yet

    # picking "learned" without a model says how to make one, in plain words
    with qtbot.waitSignal(window.error_shown, timeout=5_000) as msg:
        window.set_method("learned")
    assert "Learn from my marks" in msg.args[0] and "Traceback" not in msg.args[0]
    assert window.results_panel.current_method() != "learned"

    g0, g1, g2 = (groups[k] for k in ("g0", "g1", "g2"))
    query = str(g0[0])
    with qtbot.waitSignal(window.results_changed, timeout=60_000):
        window.query_photo(query)
    shown = window.results.paths()
    assert str(g0[1]) in shown and str(g1[0]) in shown

    # thumbs up on a photo of the same scene, down on another scene's photo
    click_thumb(qtbot, window, str(g0[1]), up=True)
    click_thumb(qtbot, window, str(g1[0]), up=False)
    assert stored(window) == {(g0[0].name, g0[1].name): True, (g0[0].name, g1[0].name): False}
    assert "1 ✓" in window.results_panel.marks_label.text()
    # clicking the same thumb again removes the mark; clicking the other flips it
    click_thumb(qtbot, window, str(g1[0]), up=False)
    assert (g0[0].name, g1[0].name) not in stored(window)
    click_thumb(qtbot, window, str(g1[0]), up=False)
    click_thumb(qtbot, window, str(g2[0]), up=False)
    click_thumb(qtbot, window, str(g0[2]), up=True)
    assert stored(window)[(g0[0].name, g1[0].name)] is False
    assert window.marks.get(query, str(g0[2])) is True

    # learn from the marks in the background, then search with the learned similarity
    with qtbot.waitSignal(window.learning_finished, timeout=120_000) as done:
        window.learn_from_marks()
    summary = done.args[0]
    assert summary is not None and summary.source == "marks" and summary.method == "oasis"
    methods = [window.results_panel.method.itemData(i)
               for i in range(window.results_panel.method.count())]  # fmt: skip
    assert "learned" in methods
    with qtbot.waitSignal(window.results_changed, timeout=60_000):
        window.set_method("learned")
    assert window.results.method == "learned"
    ranked = window.results.paths()
    others = [p for p in ranked if p != query]
    # the photos marked similar rank above those marked not similar
    pos = {p: i for i, p in enumerate(others)}
    assert max(pos[str(g0[1])], pos[str(g0[2])]) < min(pos[str(g1[0])], pos[str(g2[0])])


def test_marks_need_an_idle_index(qtbot, window, grouped):
    folder, index, _ = grouped
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    assert len(window.marks) > 0  # the marks of the previous test were kept in the index
    assert "learned" in [window.results_panel.method.itemData(i)
                         for i in range(window.results_panel.method.count())]  # fmt: skip
    # learning can be cancelled (Esc / Cancel); the cancel button shows while it runs
    window.learn_from_marks()
    assert window.is_learning() and window.cancel_btn.isVisibleTo(window)
    with qtbot.waitSignal(window.learning_finished, timeout=60_000) as done:
        window.cancel_btn.click()
    if done.args[0] is None:  # (it may have finished before the click arrived)
        assert "cancelled" in window.status_label.text()
    assert not window.is_learning() and not window.cancel_btn.isVisibleTo(window)
    window.reindex()
    assert window.is_indexing()
    with qtbot.waitSignal(window.error_shown, timeout=5_000) as msg:
        window.learn_from_marks()
    assert "indexing" in msg.args[0]
    qtbot.waitUntil(lambda: not window.is_indexing(), timeout=INDEX_TIMEOUT)


def test_learned_message_says_what_it_takes_instead_of_nan():
    from types import SimpleNamespace

    from app.gui.window import learned_message

    few = SimpleNamespace(n_constraints=3, seconds=1.0, score_name="triplet accuracy",
                          score_before=float("nan"), score_after=float("nan"))  # fmt: skip
    text = learned_message(few, "Learned similarity")
    assert "nan" not in text and "Learned from 3 comparisons" in text
    assert "10 are needed to measure what it learned: mark more results" in text
    enough = SimpleNamespace(n_constraints=40, seconds=2.0, score_name="triplet accuracy",
                             score_before=0.5, score_after=0.8)  # fmt: skip
    assert "triplet accuracy 0.50 → 0.80" in learned_message(enough, "Learned similarity")


def test_a_long_status_line_ends_in_an_ellipsis_with_the_whole_of_it_in_its_tooltip(qtbot, window):
    """Seen in a real window: the message after learning from a few marks ran past the
    window's edge, its end ("Choose 'Taught by you' t") cut off."""
    from types import SimpleNamespace

    from app.gui.window import learned_message

    window.resize(900, 600)
    window.show()
    qtbot.waitExposed(window)
    few = SimpleNamespace(n_constraints=9, seconds=6.0, score_name="triplet accuracy",
                          score_before=float("nan"), score_after=float("nan"))  # fmt: skip
    text = learned_message(few, "Taught by you") + " " + "and some more words " * 8
    label = window.status_label
    label.setText(text)
    assert window.width() == 900  # the line does not widen the window
    assert label.text() == text and label.is_elided()
    shown = super(type(label).__mro__[1], label).text()  # what QLabel paints
    assert shown.endswith("…") and len(shown) < len(text)
    assert label.toolTip() == text
    label.setText("Ready")
    assert not label.is_elided() and label.toolTip() == ""
    window.resize(1800, 600)  # wider: the whole message fits again, no tooltip needed
    label.setText(learned_message(few, "Taught by you"))
    qtbot.waitUntil(lambda: not label.is_elided(), timeout=2_000)
    assert label.toolTip() == ""


def test_marks_from_the_keyboard(qtbot, window, grouped):
    """Y (or +) marks the selected result ✓, N (or -) ✗, and the next result is selected."""
    folder, index, groups = grouped
    with qtbot.waitSignal(window.indexing_finished, timeout=INDEX_TIMEOUT):
        window.open_folder(folder, index)
    query = str(groups["g0"][0])
    with qtbot.waitSignal(window.results_changed, timeout=60_000):
        window.query_photo(query)
    lst = window.results_panel.list
    paths = window.results.paths()
    # two results in a row not marked yet (the module's folder keeps the earlier marks)
    row = next(
        r for r in range(1, len(paths) - 1)
        if window.marks.get(query, paths[r]) is None
        and window.marks.get(query, paths[r + 1]) is None
    )  # fmt: skip
    lst.setFocus()
    lst.setCurrentIndex(window.results.index(row))
    qtbot.keyClick(lst, Qt.Key.Key_Y)
    assert window.marks.get(query, paths[row]) is True
    assert lst.currentIndex().row() == row + 1
    qtbot.keyClick(lst, Qt.Key.Key_Minus)
    assert window.marks.get(query, paths[row + 1]) is False
    qtbot.waitUntil(lambda: not window.session.jobs.running("marks"), timeout=20_000)
