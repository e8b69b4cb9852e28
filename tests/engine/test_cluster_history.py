"""The undo history of a person's grouping, kept in the index (engine.cluster.history)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import engine.cluster.history as history
from engine.cluster import (
    REVIEW_NAME,
    EditableGrouping,
    HistoryEntry,
    carry_names,
    load_history,
    replace_edits,
    save_edits,
    save_history,
)
from engine.index import keys


class Store:
    """The kv part of an index store."""

    def __init__(self) -> None:
        self.kv: dict[str, str] = {}

    def get_kv(self, key, default=None):
        return self.kv.get(key, default)

    def set_kv(self, key, value) -> None:
        self.kv[key] = value

    def has_state(self, name) -> bool:  # (no grouping of `simile cluster` either)
        return False

    def has_array(self, name) -> bool:
        return False

    def load_array(self, name, mmap=False):
        raise KeyError(name)


def grouping(paths, labels, names=None) -> EditableGrouping:
    n = len(paths)
    g = EditableGrouping(list(paths), np.asarray(labels, np.int64), np.linspace(1, 0, n),
                         np.arange(n) % 2 == 0, np.zeros(n, bool), "k given")  # fmt: skip
    g.names = dict(names or {})
    return g


PATHS = [f"/photos/p{i}.jpg" for i in range(6)]


def test_round_trip_keeps_every_state_oldest_first_and_the_paths_once():
    store = Store()
    a = grouping(PATHS, [0, 0, 0, 1, 1, 1], {0: "Sea"})
    b = grouping(PATHS, [0, 0, 1, 1, 1, 1], {0: "Sea", 1: "Hills"})
    moves = [(PATHS[2], PATHS[3])], [(PATHS[1], PATHS[2])]
    save_history(store, [HistoryEntry("rename", a, [], []), HistoryEntry("move", b, *moves)])
    raw = json.loads(store.kv[keys.CATEGORY_HISTORY_KEY])
    assert raw["paths"] == PATHS and all("paths" not in e for e in raw["entries"])
    got = load_history(store, PATHS)
    assert [e.what for e in got] == ["rename", "move"]
    assert (
        got[0].grouping.labels.tolist() == a.labels.tolist() and got[0].grouping.names == a.names
    )
    assert got[1].grouping.names == {0: "Sea", 1: "Hills"}
    assert got[1].must == [(PATHS[2], PATHS[3])] and got[1].cannot == [(PATHS[1], PATHS[2])]
    assert np.array_equal(got[1].grouping.flow, b.flow)
    assert np.array_equal(got[1].grouping.prototypes, b.prototypes)


def test_states_are_fitted_to_the_folder_as_it_is_now():
    store = Store()
    old = grouping(PATHS, [0, 0, 0, 1, 1, 1])
    save_history(store, [HistoryEntry("move", old, [(PATHS[0], PATHS[5])], [])])
    now = [PATHS[1], PATHS[2], PATHS[3], PATHS[4], PATHS[5], "/photos/new.jpg"]  # p0 gone
    (e,) = load_history(store, now)
    assert e.grouping.paths == now[:5]  # the new photo is not in the old state
    assert [e.grouping.group_of(p) for p in now[:5]] == [0, 0, 1, 1, 1]
    assert e.must == []  # (its constraint named the removed photo)
    assert load_history(store, ["/photos/elsewhere.jpg"]) == []  # none of its photos left


def test_a_state_of_other_photos_keeps_its_own_paths():
    store = Store()
    old = grouping(PATHS[:4], [0, 0, 1, 1])
    new = grouping(PATHS, [0, 0, 1, 1, 1, 0])
    save_history(store, [HistoryEntry("split", old, [], []), HistoryEntry("move", new, [], [])])
    raw = json.loads(store.kv[keys.CATEGORY_HISTORY_KEY])
    assert raw["entries"][0]["paths"] == PATHS[:4] and "paths" not in raw["entries"][1]
    first, _ = load_history(store, PATHS)
    assert first.grouping.paths == PATHS[:4]


def test_only_the_most_recent_states_are_kept(monkeypatch):
    store = Store()
    entries = [HistoryEntry(f"edit {i}", grouping(PATHS, [i % 2] * 6), [], []) for i in range(30)]
    save_history(store, entries)
    assert [e.what for e in load_history(store, PATHS)] == [f"edit {i}" for i in range(10, 30)]
    monkeypatch.setattr(history, "HISTORY_MAX_ROWS", 13)  # two states of 6 photos
    save_history(store, entries)
    assert [e.what for e in load_history(store, PATHS)] == ["edit 28", "edit 29"]
    monkeypatch.setattr(history, "HISTORY_MAX_ROWS", 1)  # the latest one always
    save_history(store, entries)
    assert [e.what for e in load_history(store, PATHS)] == ["edit 29"]


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"entries": [{"labels": [0]}]}',
     '{"version": 1, "paths": ["a", "b"], "entries": [{"labels": [0], "flow": [1, 2], '
     '"prototypes": [1, 0], "outliers": [0, 0]}]}'],
)  # fmt: skip
def test_a_damaged_history_is_lost_not_the_grouping(text):
    store = Store()
    store.set_kv(keys.CATEGORY_HISTORY_KEY, text)
    assert load_history(store, ["a", "b"]) == []
    assert load_history(Store(), ["a", "b"]) == []  # (none stored)


def test_replace_edits_keeps_the_edited_grouping_only():
    store = Store()
    new = grouping(PATHS, [0, 0, 1, 1, 1, 1])
    assert replace_edits(store, PATHS, new, [], [], 2) is None  # nothing edited
    assert keys.CATEGORY_HISTORY_KEY not in store.kv and keys.CATEGORY_EDITS_KEY not in store.kv
    g = grouping(PATHS, [0, 0, 0, 1, 1, 1], {1: "Hills"})
    save_edits(store, g, [(PATHS[0], PATHS[1])], [], "auto")
    assert replace_edits(store, PATHS, new, [], [], 2) is new
    (e,) = load_history(store, PATHS)
    assert e.what == "grouping again" and e.grouping.names == {1: "Hills"}
    assert e.must == [(PATHS[0], PATHS[1])]
    assert new.names == {1: "Hills"}  # (the new group 1 holds 3 of the 3 "Hills")


def test_carry_names_leaves_to_review_out():
    old = np.array([0, 0, 0, 1, 1, 1, 1])
    new = np.array([0, 0, 0, 1, 1, 0, 0])  # "To review"'s photos went to two groups
    paths = [str(i) for i in range(7)]
    names = carry_names(paths, old, {0: "Pizza", 1: REVIEW_NAME}, paths, new)
    assert names == {0: "Pizza", 1: REVIEW_NAME}  # as before, without skip
    names = carry_names(paths, old, {0: "Pizza", 1: REVIEW_NAME}, paths, new, skip=[REVIEW_NAME])
    assert names == {0: "Pizza"}
    # a review group that overlaps a group more does not keep it from its name
    old = np.array([0, 0, 1, 1, 1, 1])
    new = np.array([0, 0, 0, 0, 0, 0])
    assert carry_names(paths[:6], old, {0: "Pizza", 1: REVIEW_NAME}, paths[:6], new) == {
        0: REVIEW_NAME
    }
    assert carry_names(paths[:6], old, {0: "Pizza", 1: REVIEW_NAME}, paths[:6], new,
                       skip=(REVIEW_NAME,)) == {0: "Pizza"}  # fmt: skip
