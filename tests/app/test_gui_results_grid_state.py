"""The results a window shows, without Qt (app/gui/results_state.py) and their export
(app/gui/state.py::export_results)."""

from __future__ import annotations

import csv
import json

import pytest

from app.gui.results_state import SAME_OBJECT, ResultFilter, ShownResults
from app.gui.session import Hit
from app.gui.state import export_results

ALIKE = "looks alike"


def hits(query="/f/q.jpg"):
    """The query itself first (it matches itself best), then five results."""
    return [
        Hit(query, 3.0, 0.99, SAME_OBJECT),
        Hit("/f/a.jpg", 2.0, 0.97, SAME_OBJECT),
        Hit("/f/b.jpg", 1.5, 0.62, ALIKE),
        Hit("/f/c.jpg", 1.2, 0.55, SAME_OBJECT),
        Hit("/f/d.jpg", 0.4, 0.08, ALIKE),
        Hit("/f/e.jpg", 0.3, 0.07, ALIKE),
    ]


def test_filter_validates_and_keeps():
    with pytest.raises(ValueError, match="min_probability"):
        ResultFilter(1.0)
    with pytest.raises(ValueError, match="min_probability"):
        ResultFilter(-0.1)
    with pytest.raises(ValueError, match="min_probability"):
        ResultFilter(float("nan"))
    with pytest.raises(ValueError, match="min_probability"):
        ResultFilter("0.5")  # type: ignore[arg-type]
    f = ResultFilter(0.5)
    assert f.keeps(Hit("/x", 1.0, 0.5, ALIKE)) and not f.keeps(Hit("/x", 1.0, 0.49, ALIKE))
    # a hit without a calibrated probability (e.g. the learned method) is never hidden by it
    assert f.keeps(Hit("/x", 1.0, None, ALIKE))
    assert not ResultFilter(verified_only=True).keeps(Hit("/x", 1.0, None, ALIKE))
    assert ResultFilter().describe() == "" and not ResultFilter().active
    assert ResultFilter(0.5, True).describe() == "at least 50 %, the same object or place only"


def test_ranks_leave_out_the_query_and_keep_their_gaps():
    s = ShownResults()
    seen = []
    s.events.changed.connect(lambda e: seen.append("changed"))
    s.set_hits("/f/q.jpg", "hybrid", hits())
    assert seen == ["changed"]
    assert [(r.rank, r.path) for r in s.rows()] == [
        (None, "/f/q.jpg"), (1, "/f/a.jpg"), (2, "/f/b.jpg"), (3, "/f/c.jpg"),
        (4, "/f/d.jpg"), (5, "/f/e.jpg"),
    ]  # fmt: skip
    assert s.total() == s.shown() == 5 and s.hidden() == 0
    assert s.heading() == "5 results for q.jpg · Best match"
    assert s.count_text() == "All 5 shown"
    s.set_filter(min_probability=0.5)
    assert [r.rank for r in s.others()] == [1, 2, 3]
    assert s.rows()[0].is_query  # (the query stays)
    assert s.count_text() == "3 of 5 shown (at least 50 %)"
    s.set_filter(verified_only=True)  # both: a gap where b was
    assert [(r.rank, r.path) for r in s.others()] == [(1, "/f/a.jpg"), (3, "/f/c.jpg")]
    assert s.hidden() == 3 and s.hidden_by_label() == 3
    assert s.best_other() == "/f/a.jpg"
    assert seen == ["changed"] * 3
    s.set_filter(verified_only=True)  # no change: no event
    assert seen == ["changed"] * 3
    with pytest.raises(ValueError, match="min_probability"):
        s.set_filter(min_probability=1.5)
    assert s.filter == ResultFilter(0.5, True)  # (a bad value changes nothing)


def test_a_query_from_outside_is_not_among_the_hits():
    s = ShownResults()
    s.set_hits("/elsewhere/q.jpg", "learned", [Hit("/f/a.jpg", 1.4), Hit("/f/b.jpg", 1.0)])
    assert [r.rank for r in s.rows()] == [1, 2] and s.total() == 2
    assert not s.calibrated()  # (the minimum cannot filter: nothing hidden)
    s.set_filter(min_probability=0.9)
    assert s.shown() == 2
    assert "Taught by you" in s.heading()


def test_a_query_through_a_symbolic_link_is_the_query(tmp_path):
    real = tmp_path / "photos"
    real.mkdir()
    (real / "q.jpg").write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    s = ShownResults()
    s.set_hits(str(link / "q.jpg"), "hybrid", hits(str(real / "q.jpg")))
    assert s.rows()[0].is_query and s.total() == 5


def test_a_hard_link_of_the_query_is_ranked_but_not_the_best_other(tmp_path):
    """A hard link of the query (a duplicates clean-up makes them) is a result (another
    name in the folder), but not the one "why do they match?" pairs the query with."""
    import os

    q, twin, other = tmp_path / "q.jpg", tmp_path / "q_twin.jpg", tmp_path / "b.jpg"
    q.write_bytes(b"x")
    other.write_bytes(b"y")
    os.link(q, twin)
    s = ShownResults()
    s.set_hits(str(q), "hybrid", [Hit(str(q), 3.0, 1.0, SAME_OBJECT),
                                  Hit(str(twin), 3.0, 1.0, SAME_OBJECT),
                                  Hit(str(other), 1.0, 0.6, ALIKE)])  # fmt: skip
    assert [(r.rank, r.path) for r in s.others()] == [(1, str(twin)), (2, str(other))]
    assert s.best_other() == str(other)


def test_no_results_leave_the_grid():
    s = ShownResults()
    grid = []
    s.events.grid.connect(lambda e: grid.append(e.on))
    s.set_hits("/f/q.jpg", "hybrid", hits(), box=(1, 2, 30, 40))
    assert s.heading().endswith("· a region of it")
    s.show_in_grid()
    s.show_in_grid()  # (already: no second event)
    s.set_hits("/f/a.jpg", "vocabulary", hits("/f/a.jpg"))  # a new search: still in the grid
    assert s.in_grid and grid == [True]
    s.set_hits(None, "", [])  # e.g. another folder was opened
    assert not s.in_grid and grid == [True, False]
    assert s.rows() == [] and s.query is None and s.heading() == "No results"
    with pytest.raises(ValueError, match="method"):
        s.set_hits("/f/q.jpg", "magic", hits())


def test_export_has_query_method_probability_and_label_columns(tmp_path):
    s = ShownResults()
    s.set_hits("/f/q.jpg", "hybrid", hits())
    s.set_filter(min_probability=0.5)
    rows = s.others()
    export_results(tmp_path / "r.csv", s.query, s.method, [r.hit for r in rows],
                   ranks=[r.rank for r in rows])  # fmt: skip
    got = list(csv.DictReader((tmp_path / "r.csv").read_text().splitlines()))
    assert list(got[0]) == ["query", "method", "rank", "path", "score", "probability", "label"]
    assert [(g["query"], g["method"], g["rank"], g["path"], g["label"]) for g in got] == [
        ("/f/q.jpg", "hybrid", "1", "/f/a.jpg", SAME_OBJECT),
        ("/f/q.jpg", "hybrid", "2", "/f/b.jpg", ALIKE),
        ("/f/q.jpg", "hybrid", "3", "/f/c.jpg", SAME_OBJECT),
    ]
    assert [float(g["probability"]) for g in got] == [0.97, 0.62, 0.55]
    export_results(tmp_path / "r.json", s.query, s.method, [r.hit for r in rows],
                   ranks=[r.rank for r in rows], hidden=s.hidden(),
                   filter_text=s.filter.describe())  # fmt: skip
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["query"] == "/f/q.jpg" and doc["method"] == "hybrid"
    assert doc["hidden"] == 2 and doc["filter"] == "at least 50 %"
    assert doc["results"][1] == {"rank": 2, "path": "/f/b.jpg", "score": 1.5,
                                 "probability": 0.62, "label": ALIKE}  # fmt: skip
    # a method without calibration: the probability column is empty
    export_results(tmp_path / "l.csv", "/f/q.jpg", "learned", [Hit("/f/a.jpg", 1.4, None, ALIKE)])
    row = next(csv.DictReader((tmp_path / "l.csv").read_text().splitlines()))
    assert row["probability"] == "" and row["rank"] == "1"
    with pytest.raises(ValueError, match="ranks"):
        export_results(tmp_path / "x.csv", "q", "hybrid", [("/a", 1.0)], ranks=[1, 2])


def test_export_of_a_name_that_is_not_utf8(tmp_path):
    """A hit whose file name is not UTF-8 (a lone surrogate, ``os.fsdecode``): the JSON is
    valid and reads back as the same name, the CSV holds the name's own bytes."""
    import os

    odd = os.fsdecode(b"/f/caf\xe9.jpg")
    export_results(tmp_path / "r.json", "/f/q.jpg", "hybrid", [Hit(odd, 1.0, 0.9, SAME_OBJECT)])
    doc = json.loads((tmp_path / "r.json").read_bytes().decode("utf-8"))
    assert doc["results"][0]["path"] == odd
    export_results(tmp_path / "r.csv", "/f/q.jpg", "hybrid", [Hit(odd, 1.0, 0.9, SAME_OBJECT)])
    assert b"/f/caf\xe9.jpg" in (tmp_path / "r.csv").read_bytes()
