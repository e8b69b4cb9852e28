"""A person's grouping survives a changing folder (categories issue, point 2): removed
photos leave their groups, new photos are placed by the classifier, a move changes only
the photo moved, and the saved edits come back after photos were added."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from engine.cluster import (  # noqa: E402
    REVIEW_NAME,
    EditableGrouping,
    group_collection_iter,
    load_edits,
    move_edit,
    place_photos_iter,
    restrict,
    save_edits,
)
from engine.collection import Collection  # noqa: E402
from engine.core.progress import run_to_end  # noqa: E402
from tests.app._gui import make_grouped_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two scenes, five views each; the fifth views are kept aside (added later)."""
    root = tmp_path_factory.mktemp("place")
    groups = make_grouped_folder(root / "photos", per_group=5, seed=3)
    aside = root / "aside"
    aside.mkdir()
    later = []
    for name, paths in groups.items():
        shutil.move(paths[-1], aside / paths[-1].name)
        later.append((aside / paths[-1].name, paths[-1], name))
    return root / "photos", later


def _grouping(col) -> EditableGrouping:
    g = run_to_end(group_collection_iter(col, k=2))
    return EditableGrouping.from_grouping(g)


def test_moves_removals_and_new_photos_keep_the_persons_grouping(folder):
    photos, later = folder
    with Collection.open(photos) as col:
        run_to_end(col.update(jobs=1))
        g = _grouping(col)
        scene = {p: p.rsplit("/", 2)[-2] for p in g.paths}
        assert len({tuple(sorted(scene[p] for p in np.array(g.paths)[g.labels == k]))
                    for k in range(2)}) == 2  # fmt: skip
        g.names = {int(g.group_of(next(p for p in g.paths if scene[p] == "g0"))): "Red"}
        red = next(k for k, v in g.names.items() if v == "Red")

        # a move changes the photo moved and nothing else
        moved = next(p for p in g.paths if scene[p] == "g1")
        m = move_edit(g, moved, red)
        changed = [p for i, p in enumerate(g.paths) if m.labels[i] != g.labels[i]]
        assert changed == [moved] and m.group_of(moved) == red and m.name(red) == "Red"
        assert not m.prototypes[m.paths.index(moved)]
        m2 = move_edit(g, moved, g.k)  # a group of its own
        assert m2.k == 3 and m2.name(m2.group_of(moved)).startswith("Group")

        # the person's edits are saved; then photos come and go
        save_edits(col.store, g, [], [], 2)
        gone = next(p for p in g.paths if scene[p] == "g0")
        (photos / "g0" / gone.rsplit("/", 1)[-1]).unlink()
        for src, dst, _ in later:
            shutil.copy(src, dst)
        run_to_end(col.update(jobs=1))
        paths = [str(p) for p in col.paths()]
        saved = load_edits(col.store, paths)
        assert saved.grouping is not None and saved.grouping.name(red) == "Red"  # in place
        assert sorted(saved.new_paths) == sorted(str(d) for _, d, _ in later)
        assert gone not in saved.grouping.paths and len(saved.grouping.paths) == 7

        placed = run_to_end(place_photos_iter(col, saved.grouping))
        out = placed.grouping
        assert out.paths == paths  # the collection's order, every photo once
        for _, dst, name in later:
            i = out.paths.index(str(dst))
            mates = [j for j, p in enumerate(out.paths) if scene.get(p) == name]
            assert out.labels[i] == out.labels[mates[0]], "placed with its own scene"
            assert not out.prototypes[i]
        # the old photos keep their groups and names
        for p in saved.grouping.paths:
            assert out.group_of(p) == saved.grouping.group_of(p)
        assert out.name(red) == "Red" and "placed by an SVM" in out.k_reason
        assert {p for p, _, _ in placed.placed} == set(saved.new_paths)
        assert all(0 < c <= 1 for _, _, c in placed.placed)


def test_unsure_photos_go_to_a_group_to_review(folder, monkeypatch):
    import engine.cluster.placement as placement

    photos, _ = folder
    with Collection.open(photos) as col:
        run_to_end(col.update(jobs=1))
        g = _grouping(col)
        some = restrict(g, g.paths[:-2])
        monkeypatch.setattr(placement, "UNSURE_CONFIDENCE", 1.01)  # the SVM is never sure
        # ... but the search finds both photos are views of a grouped scene: placed there
        res = run_to_end(place_photos_iter(col, some))
        assert res.unsure == [] and res.grouping.k == g.k
        for p, grp, conf in res.placed:
            assert grp == g.group_of(p) and 0.5 <= conf <= 1.0
        monkeypatch.setattr(placement, "SCENES_AUTO_MAX", 0)  # (no search: nobody is sure)
        res = run_to_end(place_photos_iter(col, some))
    assert len(res.unsure) == 2 and res.grouping.k == g.k + 1
    assert res.grouping.name(g.k) == REVIEW_NAME
    assert restrict(g, []) is None


def test_a_photo_of_a_new_subject_goes_to_review(tmp_path, demo_folder):
    """With two groups the SVM is always at least 50 % sure; a photo unlike both groups
    (a person among two synthetic scenes) is still set aside to review, while a new view
    of a scene joins its group."""
    groups = make_grouped_folder(tmp_path / "photos", per_group=5, seed=6)
    photos = tmp_path / "photos"
    later = groups["g0"][-1]
    aside = tmp_path / later.name
    shutil.move(later, aside)
    with Collection.open(photos) as col:
        run_to_end(col.update(jobs=1))
        g = _grouping(col)
        shutil.copy(demo_folder / "astronaut.jpg", photos / "astronaut.jpg")
        shutil.move(aside, later)
        run_to_end(col.update(jobs=1))
        res = run_to_end(place_photos_iter(col, g))
    assert res.unsure == [str(photos / "astronaut.jpg")]
    out = res.grouping
    assert out.name(out.group_of(str(photos / "astronaut.jpg"))) == REVIEW_NAME
    mate = next(p for p in g.paths if "/g0/" in p)
    assert out.group_of(str(later)) == out.group_of(mate)


def _eg(paths, labels, names=None):
    from engine.cluster import EditableGrouping

    n = len(paths)
    return EditableGrouping(
        list(paths), np.asarray(labels, np.int64), np.linspace(1, 0, n), np.zeros(n, bool),
        np.zeros(n, bool), "", dict(names or {}),
    )  # fmt: skip


def test_rebase_grouping_undoes_an_edit_and_keeps_photos_placed_since():
    from engine.cluster import rebase_grouping

    # before the move: a b c | d e (group 0 named "Sea"); the move took c to group 1,
    # then f and g arrived (placed with d e and in a "To review" group) and b left
    old = _eg("abcde", [0, 0, 0, 1, 1], {0: "Sea"})
    current = _eg("acdefg", [0, 1, 1, 1, 1, 2], {0: "Sea", 2: "To review"})
    r = rebase_grouping(old, current)
    assert r.paths == list("acdefg")
    got = {p: r.name(r.group_of(p)) for p in r.paths}
    assert got == {
        "a": "Sea", "c": "Sea", "d": "Group 2", "e": "Group 2", "f": "Group 2",
        "g": "To review",
    }  # fmt: skip
    assert r.k == 3 and r.labels.tolist() == [0, 0, 1, 1, 1, 2]
    # a group emptied by removals disappears; the others keep their order
    r2 = rebase_grouping(_eg("abc", [0, 1, 2], {2: "Last"}), _eg("ac", [0, 0]))
    assert r2.labels.tolist() == [0, 1] and r2.name(1) == "Last"


def test_a_photo_moved_by_hand_is_never_called_an_outlier():
    """Re-ranked on the affinities, the group a photo was moved into may find it the
    least connected member; the person put it there, so it is not flagged as an outlier
    (issue #22: "the photo that was placed is then marked outlier")."""
    n = 10
    paths = [f"/p/{i}.jpg" for i in range(n)]
    labels = np.array([0] * 5 + [1] * 5)
    K = np.full((n, n), 0.05)
    K[:5, :5] = K[5:, 5:] = 0.9
    np.fill_diagonal(K, 1.0)
    g = EditableGrouping(paths, labels, np.ones(n), np.zeros(n, bool), np.zeros(n, bool), "")
    m = move_edit(g, paths[7], 0, K)  # a photo unlike the group it is put in
    i = m.paths.index(paths[7])
    assert m.group_of(paths[7]) == 0 and not m.outliers[i]
    assert m.flow[i] == m.flow[m.labels == 0].min()  # (ranked last all the same)


def test_the_reason_counts_every_placement_in_one_clause():
    """A folder that receives photos every week: its grouping's reason (the app's
    "Details") says how many photos were placed since it was grouped, in one clause, not
    one clause per placement that grows forever."""
    from engine.cluster.placement import _placed_reason

    r = _placed_reason("k=4 by relative eigengap; moved a.jpg by hand", 7, 0)
    assert r == ("k=4 by relative eigengap; moved a.jpg by hand; 7 new photo(s) placed by an "
                 "SVM on the groups' prototypes")  # fmt: skip
    r = _placed_reason(r, 3, 1)
    assert r.endswith("; 10 new photo(s) placed by an SVM on the groups' prototypes (1 to review)")
    r = _placed_reason(r, 2, 0)
    assert r.count("placed by an SVM") == 1 and "12 new photo(s)" in r and "(1 to review)" in r
    assert r.startswith("k=4 by relative eigengap; moved a.jpg by hand; ")


@pytest.mark.data
def test_new_photos_are_placed_on_the_groupings_affinities(tmp_path, shared_data):
    """Caltech-101 photos: three classes grouped (8 photos each), then 2 more photos of each
    and 4 photos of a class no group holds arrive. The new photos of the three classes join
    their class's group, the others go to review (placed on the pyramid match alone, before
    the semantic channel, the novel class joined the groups)."""
    root = shared_data / "caltech101"
    grouped, novel = ("sunflower", "car_side", "Leopards"), "pizza"
    photos = tmp_path / "photos"
    photos.mkdir()
    files = {c: sorted((root / c).glob("*.jpg")) for c in (*grouped, novel)}
    for c in grouped:
        for f in files[c][:8]:
            shutil.copy(f, photos / f"{c}_{f.name}")
    with Collection.open(photos) as col:
        run_to_end(col.update(jobs=1))
        g = EditableGrouping.from_grouping(run_to_end(group_collection_iter(col, k=3)))
        cls = {p: p.rsplit("/", 1)[-1].rsplit("_image", 1)[0] for p in g.paths}
        for k in range(3):
            assert len({cls[p] for p in np.array(g.paths)[g.labels == k]}) == 1
        new = [(c, f) for c in grouped for f in files[c][8:10]] + [
            (novel, f) for f in files[novel][:4]
        ]
        for c, f in new:
            shutil.copy(f, photos / f"{c}_{f.name}")
        run_to_end(col.update(jobs=1))
        placed = run_to_end(place_photos_iter(col, g))
    out = placed.grouping
    group = {p: int(out.labels[i]) for i, p in enumerate(out.paths)}
    home = {cls[p]: int(g.labels[i]) for i, p in enumerate(g.paths)}
    for p, label, _confidence in placed.placed:
        c = p.rsplit("/", 1)[-1].rsplit("_image", 1)[0]
        if c == novel:
            assert out.names.get(group[p]) == REVIEW_NAME, p
        else:
            assert label == home[c], p


def test_new_photos_of_one_unknown_scene_go_to_review_together():
    """New photos the search links to each other but to no grouped photo are one subject
    no group holds: when one of them goes to review, or they were put in different
    groups, they all go to review; agreeing ones, and photos the search tied to a
    grouped photo, are left as they were."""
    from engine.cluster.placement import _review_together

    among = np.zeros((6, 6))
    for a, b, p in [(0, 1, 0.9), (1, 2, 0.6), (3, 4, 0.8), (4, 5, 0.3)]:
        among[a, b] = among[b, a] = p
    unsure = np.array([False, False, True, False, False, False])
    labels = np.array([1, 1, 3, 2, 2, 0])
    sure = np.zeros(6, bool)
    out = _review_together(unsure, labels, among, sure)
    # 0-1-2 linked, 2 unsure: all three; 3-4 linked and agreeing: kept; 5 (0.3) alone
    assert out.tolist() == [True, True, True, False, False, False]
    labels[4] = 0  # 3 and 4 disagree: both to review
    assert _review_together(unsure, labels, among, sure)[3:5].tolist() == [True, True]
    sure[4] = True  # 4 is the same scene as a grouped photo: it stays, 3 alone is kept
    assert _review_together(unsure, labels, among, sure)[3:5].tolist() == [False, False]
