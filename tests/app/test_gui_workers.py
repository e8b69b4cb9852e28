"""The threading helper and the Qt-free GUI state (no collection needed)."""

from __future__ import annotations

import csv
import json
import threading

import pytest

pytest.importorskip("pytestqt")

from app.gui import workers
from app.gui.state import EtaEstimator, SearchSettings, export_results, format_duration


def _gen(n, log):
    for i in range(n):
        log.append(i)
        yield i
    return "done"


def test_generator_worker_signal_order(qtbot):
    got = []
    w = workers.create_worker(_gen, 3, [], start=False)
    w.yielded.connect(got.append)
    with qtbot.waitSignals(
        [w.started, w.yielded, w.yielded, w.yielded, w.returned, w.finished],
        order="strict",
        timeout=5000,
    ):
        w.start()
    assert got == [0, 1, 2]


def test_function_worker_returns_value(qtbot):
    w = workers.create_worker(sum, [1, 2, 3], start=False)
    with qtbot.waitSignal(w.returned, timeout=5000) as blocker:
        w.start()
    assert blocker.args == [6]


def test_errors_always_surface(qtbot):
    def boom():
        raise ValueError("bad photo")

    w = workers.create_worker(boom, start=False)
    errors = []
    w.errored.connect(errors.append)
    with qtbot.waitSignals([w.errored, w.finished], order="strict", timeout=5000):
        w.start()
    (exc,) = errors
    assert isinstance(exc, ValueError) and "bad photo" in str(exc)


def test_cancel_between_yields(qtbot):
    gate = threading.Event()
    log: list[int] = []

    def slow():
        for i in range(1000):
            log.append(i)
            yield i
            gate.wait(5)  # hold after every item until the test releases it
            gate.clear()

    w = workers.create_worker(slow, start=False)
    returned, aborted = [], []
    w.returned.connect(returned.append)
    w.aborted.connect(lambda: aborted.append(True))
    with qtbot.waitSignal(w.yielded, timeout=5000):
        w.start()
    w.quit()
    gate.set()
    qtbot.waitUntil(lambda: aborted == [True], timeout=5000)
    assert w.wait(5)
    assert returned == []
    assert len(log) < 5  # stopped at the next yield, far before 1000


def test_pass_cancel_gives_the_event(qtbot):
    seen = []

    def f(cancel=None):
        seen.append(cancel)
        return cancel.is_set()

    w = workers.create_worker(f, pass_cancel=True, start=False)
    with qtbot.waitSignal(w.returned, timeout=5000):
        w.start()
    assert seen == [w.cancel_event]


def test_synchronous_mode_runs_inline():
    workers.set_synchronous(True)
    try:
        out = []
        w = workers.create_worker(_gen, 2, [], connect={"returned": out.append})
        assert out == ["done"]  # already delivered: no event loop needed
        assert not w.is_running
    finally:
        workers.set_synchronous(False)


def test_unknown_signal_name_rejected():
    with pytest.raises(ValueError, match="connect"):
        workers.create_worker(sum, [], connect={"nope": print}, start=False)


def test_eta_estimator_uses_item_rate():
    t = [0.0]
    eta = EtaEstimator(clock=lambda: t[0])
    assert eta.update(0, 100) is None
    t[0] = 10.0
    left = eta.update(10, 100)  # 1 s per item, 90 left
    assert left == pytest.approx(90.0)
    t[0] = 30.0
    left = eta.update(20, 100)  # now 2 s per item; smoothed between 1 and 2
    assert 80.0 < left < 160.0


def test_format_duration():
    assert format_duration(None) == "estimating…"
    assert format_duration(5) == "5 s"
    assert format_duration(75) == "1 min 15 s"
    assert format_duration(3 * 3600 + 120) == "3 h 02 min"


def test_search_settings_validate():
    assert SearchSettings("wta", 5).method == "wta"
    with pytest.raises(ValueError, match="method"):
        SearchSettings("magic", 5)
    with pytest.raises(ValueError, match="top"):
        SearchSettings("hybrid", 0)


def test_export_csv_and_json(tmp_path):
    hits = [("/a/x.jpg", 0.9), ("/a/y.jpg", 0.5)]
    export_results(tmp_path / "r.csv", "/a/q.jpg", "hybrid", hits)
    rows = list(csv.DictReader((tmp_path / "r.csv").read_text().splitlines()))
    assert [(r["rank"], r["path"], float(r["score"])) for r in rows] == [
        ("1", "/a/x.jpg", 0.9),
        ("2", "/a/y.jpg", 0.5),
    ]
    export_results(tmp_path / "r.json", "/a/q.jpg", "wta", hits)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["method"] == "wta" and doc["query"] == "/a/q.jpg"
    assert [r["path"] for r in doc["results"]] == ["/a/x.jpg", "/a/y.jpg"]
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        export_results(tmp_path / "r.txt", "q", "hybrid", hits)


def test_void_calls_cannot_free_none():
    """PySide6 6.12 on CPython 3.11 drops a reference to None per void call; app.gui
    makes None effectively immortal so a long session cannot abort (none_dealloc)."""
    import sys

    from PySide6.QtCore import QRect

    r = QRect()
    for _ in range(50_000):  # far more than None's natural reference count
        r.setWidth(1)
    from app.gui import _pyside_fix

    if sys.version_info < (3, 12) and _pyside_fix.leaks_none():
        assert sys.getrefcount(None) > 1_000_000  # the guard is in place
