"""``simile cluster`` and ``simile classify`` end to end on the demo photos (headless)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.cli import main

FAMILIES = ("astronaut", "brick", "coffee")
VARIANTS = ("", "_light", "_rotate", "_perspective", "_crop")


def _names(family):
    return [f"{family}{v}.jpg" for v in VARIANTS]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("cluster_photos")
    photos = root / "photos"
    photos.mkdir()
    for fam in FAMILIES:
        for n in _names(fam)[:-1]:  # the crops stay outside, for classify
            if (demo_folder / n).exists():
                shutil.copy(demo_folder / n, photos / n)
    return root


def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr().out
    return code, out


def _family(path):
    return path.rsplit("/", 1)[-1].split(".")[0].split("_")[0]


def test_cluster_json_partitions_every_image(folder, capsys):
    photos = folder / "photos"
    index = folder / "idx"
    code, out = _run(["cluster", str(photos), "--index", str(index), "--k", "3", "--json"],
                     capsys)  # fmt: skip
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    assert res["k"] == 3 and len(res["clusters"]) == 3
    members = [m for c in res["clusters"] for m in c["members"]]
    indexed = sorted(str(p) for p in photos.iterdir())
    assert sorted(members) == indexed  # every image in exactly one group
    assert {c["id"] for c in res["clusters"]} == {0, 1, 2}
    for c in res["clusters"]:
        assert set(c["prototypes"]) <= set(c["members"])
        assert set(c["outliers"]) <= set(c["members"])
        assert not set(c["prototypes"]) & set(c["outliers"])
        assert c["prototypes"], "every group has a prototype"
        assert c["members"][: len(c["prototypes"])] == c["prototypes"]  # prototypes first
        # the photo variants of one scene group together
        assert len({_family(m) for m in c["members"]}) == 1
    # the refinement ran and its feature masks are stored, one per image, aligned with
    # the stored features (thesis 9.3), for the GUI to show
    assert res["refined"] is True and res["n_matches"] > 0
    from engine.cluster import category_features_of, load_grouping
    from engine.collection import Collection
    from engine.index import keys

    col = Collection.open(photos, index, create=False, readonly=True)
    try:
        # one state holds the grouping and its classifier (no separate cluster.* arrays)
        assert col.store.has_state(keys.GROUPING_STATE)
        assert not [f for f in (index / "arrays").glob("cluster.*") if ".dense." not in f.name]
        grouping = load_grouping(col.store)  # the engine's reader of that state
        stored = [str(p) for p in grouping.paths]
        masks = grouping.masks
        assert sorted(stored) == indexed and len(masks) == len(stored)
        # masks refer to the dense categorisation features (the default pipeline)
        assert grouping.features == "dense"
        for path, mask in zip(stored, masks, strict=True):
            assert mask.shape == (len(category_features_of(col, path)),)
            assert mask.min() >= 0.0 and mask.max() == pytest.approx(1.0)
            assert np.ptp(mask) > 0  # graded by how consistently each feature matches
        flow = grouping.flow
    finally:
        col.close()
    assert grouping.k_reason == res["k_reason"] and grouping.n_matches == res["n_matches"]
    assert grouping.features == "dense" and grouping.classifier is not None
    for c in res["clusters"]:
        assert [str(grouping.paths[i]) for i in grouping.members(c["id"])] == c["members"]
    by_path = dict(zip(stored, flow, strict=True))
    for c in res["clusters"]:  # members are listed by decreasing masked flow
        f = [by_path[m] for m in c["members"]]
        assert f == sorted(f, reverse=True)


def test_cluster_auto_k_and_constraints(folder, capsys):
    photos = folder / "photos"
    index = str(folder / "idx")
    code, out = _run(["cluster", str(photos), "--index", index, "--no-update", "--json",
                      "--no-refine"], capsys)  # fmt: skip
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    assert res["k"] == 3
    assert res["refined"] is False and "n_matches" not in res
    assert all(c["prototypes"] for c in res["clusters"])
    assert "eigengap" in res["k_reason"]
    # cannot-group two variants of one scene with k=4: they end up apart
    code, out = _run(
        ["cluster", str(photos), "--index", index, "--no-update", "--k", "4", "--json",
         "--cannot", "brick.jpg", "brick_light.jpg"],
        capsys,
    )  # fmt: skip
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    group_of = {m.rsplit("/", 1)[-1]: c["id"] for c in res["clusters"] for m in c["members"]}
    assert group_of["brick.jpg"] != group_of["brick_light.jpg"]
    # must-group across scenes with k=3
    code, out = _run(
        ["cluster", str(photos), "--index", index, "--no-update", "--k", "3", "--json",
         "--must", str(photos / "brick.jpg"), "coffee.jpg"],
        capsys,
    )  # fmt: skip
    res = json.loads(out.strip().splitlines()[-1])
    group_of = {m.rsplit("/", 1)[-1]: c["id"] for c in res["clusters"] for m in c["members"]}
    assert group_of["brick.jpg"] == group_of["coffee.jpg"]


def test_classify_assigns_new_photos(folder, demo_folder, capsys):
    photos = folder / "photos"
    index = str(folder / "idx")
    code, out = _run(["cluster", str(photos), "--index", index, "--no-update", "--k", "3",
                      "--json"], capsys)  # fmt: skip
    res = json.loads(out.strip().splitlines()[-1])
    fam_of_group = {c["id"]: _family(c["members"][0]) for c in res["clusters"]}
    crops = [str(demo_folder / f"{fam}_crop.jpg") for fam in FAMILIES]
    crops = [c for c in crops if (demo_folder / c).exists()]
    code, out = _run(["classify", str(photos), *crops, "--index", index, "--json"], capsys)
    assert code == 0
    results = json.loads(out.strip().splitlines()[-1])["results"]
    assert len(results) == len(crops)
    for r in results:
        assert fam_of_group[r["cluster"]] == _family(r["image"])
        assert 0 < r["confidence"] <= 1


def test_cluster_spatial_affinities_group_scenes(folder, capsys):
    """--spatial 4: word-in-cell pyramid match; the scene variants still group together,
    the choice is explained, and every image lands in one group."""
    photos = folder / "photos"
    code, out = _run(["cluster", str(photos), "--index", str(folder / "idx"),
                      "--k", "3", "--spatial", "4", "--no-refine", "--json",
                      "--features", "index"],
                     capsys)  # fmt: skip
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    assert "4x4 spatial cells" in res["k_reason"]
    members = [m for c in res["clusters"] for m in c["members"]]
    assert sorted(members) == sorted(str(p) for p in photos.iterdir())
    for c in res["clusters"]:
        assert len({_family(m) for m in c["members"]}) == 1


def test_cluster_landmarks_force_the_nystrom_approximation(folder, capsys):
    photos = folder / "photos"
    code, out = _run(["cluster", str(photos), "--index", str(folder / "idx"), "--json",
                      "--no-refine", "--landmarks", "8"], capsys)  # fmt: skip
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    assert "among the 8 landmarks of 9 images, Nystrom" in res["k_reason"]
    assert res["k"] == 3
    for c in res["clusters"]:
        assert len({_family(m) for m in c["members"]}) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--landmarks", "1"], "--landmarks must be >= 2"),
        (["--landmarks", "5", "--features", "index"], "--landmarks needs --features dense"),
        (["--k", "zero"], "--k"),
        (["--k", "0"], "--k"),
        (["--k", ""], "--k"),  # (an empty value, not the default: fault harness)
        (["--must", "nope.jpg", "brick.jpg"], "not an indexed image"),
        (["--power", "2"], "--power"),
        (["--partners", "0"], "--partners"),
        (["--spatial", "3"], "--spatial"),
        (["--spatial", "1"], "--spatial"),
        (
            ["--must", "brick.jpg", "brick_light.jpg", "--cannot", "brick.jpg", "brick_light.jpg"],
            "contradicts the --must links",
        ),
        (
            [
                "--must",
                "brick.jpg",
                "brick_light.jpg",
                "--must",
                "brick_light.jpg",
                "coffee.jpg",
                "--cannot",
                "coffee.jpg",
                "brick.jpg",
            ],
            "contradicts the --must links",
        ),
    ],
)
def test_cluster_errors(folder, capsys, extra, message):
    code = main(["cluster", str(folder / "photos"), "--index", str(folder / "idx"),
                 "--no-update", *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_classify_without_grouping_fails(tmp_path, demo_folder, capsys):
    photos = tmp_path / "p"
    photos.mkdir()
    shutil.copy(demo_folder / "brick.jpg", photos / "brick.jpg")
    assert main(["index", str(photos), "--index", str(tmp_path / "i"), "--jobs", "1"]) == 0
    capsys.readouterr()
    code = main(["classify", str(photos), str(photos / "brick.jpg"),
                 "--index", str(tmp_path / "i")])  # fmt: skip
    assert code == 2
    assert "simile cluster" in capsys.readouterr().err


def test_cluster_reports_and_skips_unreadable_files(tmp_path, demo_folder, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    for fam in ("brick", "coffee"):
        for src in sorted(demo_folder.glob(f"{fam}*.jpg"))[:3]:
            shutil.copy(src, photos / src.name)
    (photos / "broken.jpg").write_bytes((demo_folder / "coffee.jpg").read_bytes()[:2000])
    (photos / "notes.jpg").write_text("not a photo")
    code = main(["cluster", str(photos), "--index", str(tmp_path / "idx"), "--k", "2", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    res = json.loads(captured.out.strip().splitlines()[-1])
    members = sorted(m for c in res["clusters"] for m in c["members"])
    assert len(members) == 6 and not any("broken" in m or "notes" in m for m in members)
    assert "skipped 2 unreadable file(s)" in captured.err
    assert "broken.jpg: " in captured.err and "notes.jpg: " in captured.err


def test_a_crash_while_saving_keeps_the_old_grouping_for_classify(
    folder, demo_folder, capsys, monkeypatch
):
    """``simile cluster`` stops half-way through saving (after the new arrays were written):
    ``simile classify`` answers with the previous grouping and its classifier, together."""
    from engine.cluster import load_grouping
    from engine.collection import Collection
    from engine.index import keys
    from tests.engine.test_cluster import _crash_after_npz

    photos = folder / "photos"
    index = str(folder / "idx")
    code, out = _run(["cluster", str(photos), "--index", index, "--no-update", "--k", "3",
                      "--json"], capsys)  # fmt: skip
    assert code == 0
    crops = [str(demo_folder / f"{fam}_crop.jpg") for fam in FAMILIES]
    code, before = _run(["classify", str(photos), *crops, "--index", index, "--json"], capsys)
    assert code == 0
    with monkeypatch.context() as m:
        _crash_after_npz(m, keys.GROUPING_STATE)
        code = main(["cluster", str(photos), "--index", index, "--no-update", "--k", "4",
                     "--json"])  # fmt: skip
        captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out.strip().splitlines()[-1])["k"] == 4
    assert "could not store the grouping" in captured.err
    code, after = _run(["classify", str(photos), *crops, "--index", index, "--json"], capsys)
    assert code == 0 and after == before  # the old classifier ...
    col = Collection.open(photos, folder / "idx", create=False, readonly=True)
    try:
        grouping = load_grouping(col.store)
    finally:
        col.close()
    assert grouping.k == 3  # ... on the old grouping
    assert set(grouping.classifier.labels_.tolist()) <= set(range(3))
    assert grouping.k_reason == json.loads(out.strip().splitlines()[-1])["k_reason"]


def test_classify_refuses_a_grouping_whose_vocabulary_was_replaced(folder, demo_folder, capsys):
    """The grouping records its vocabulary's token: when the vocabulary is refitted and
    committed without a new grouping (the app groups without saving), ``simile classify``
    says to group again instead of answering with kernel rows of another vocabulary."""
    from engine.collection import Collection
    from engine.index import keys

    photos = folder / "photos"
    index = str(folder / "idx")
    # (indexes the folder when this test runs alone; a rescan after the module's others)
    code, _ = _run(["cluster", str(photos), "--index", index, "--k", "3"], capsys)
    assert code == 0
    crop = str(demo_folder / "brick_crop.jpg")
    code, _ = _run(["classify", str(photos), crop, "--index", index], capsys)
    assert code == 0
    col = Collection.open(photos, folder / "idx", create=False)
    try:
        vocab = col.store.load_state(keys.DENSE_VOCAB_STATE)
        col.store.save_state(keys.DENSE_VOCAB_STATE, {**vocab, "token": "another"})
    finally:
        col.close()
    code = main(["classify", str(photos), crop, "--index", index])
    err = capsys.readouterr().err
    assert code != 0 and f"run 'simile cluster {photos}' again" in err


def test_cluster_keeps_the_groups_edited_in_the_app(tmp_path, demo_folder, capsys):
    """Plain 'simile cluster' keeps the groups the person edited in the app (names,
    moves): photos added since are placed into them and saved; --regroup starts over."""
    from engine.cluster import EditableGrouping, load_edits, move_edit, save_edits
    from engine.collection import Collection

    photos = tmp_path / "photos"
    groups = {}  # two subjects of the demo photos, four versions each
    for g, subject in (("g0", "chelsea"), ("g1", "coffee")):
        (photos / g).mkdir(parents=True)
        groups[g] = []
        for version in ("", "_crop", "_light", "_perspective"):
            src = demo_folder / f"{subject}{version}.jpg"
            if not src.exists():
                src = demo_folder / f"{subject}_jpeg.jpg"
            groups[g].append(Path(shutil.copy(src, photos / g / src.name)))
    later = groups["g1"][-1]
    aside = tmp_path / later.name
    shutil.move(later, aside)
    code, out = _run(["cluster", str(photos), "--k", "2", "--json"], capsys)
    assert code == 0
    with Collection.open(photos) as col:
        from engine.cluster import load_grouping

        g = EditableGrouping.from_grouping(load_grouping(col.store, classifier=False))
        first = str(groups["g0"][0])
        g.names = {g.group_of(first): "Red"}
        moved = str(groups["g0"][1])
        other = 1 - g.group_of(first)
        g = move_edit(g, moved, other)  # the person put one photo with the others
        save_edits(col.store, g, [], [], 2)
    shutil.move(aside, later)  # a new photo arrives
    code, out = _run(["cluster", str(photos), "--json"], capsys)
    assert code == 0
    res = json.loads(out.strip().splitlines()[-1])
    group_of = {m: c["id"] for c in res["clusters"] for m in c["members"]}
    names = {c["id"]: c["name"] for c in res["clusters"]}
    assert names[group_of[first]] == "Red"
    assert group_of[moved] != group_of[first]  # the person's move is kept
    assert str(later) in group_of  # placed
    assert group_of[str(later)] == group_of[str(groups["g1"][0])]
    with Collection.open(photos, readonly=True) as col:
        saved = load_edits(col.store, [str(p) for p in col.paths()])
    assert saved.new_paths == [] and str(later) in saved.grouping.paths
    assert list(saved.placed) == [str(later)]  # marked "new" for the app, with a confidence
    assert 0 < saved.placed[str(later)] <= 1
    code, out = _run(["cluster", str(photos)], capsys)  # the text names the groups too
    assert code == 0 and f"Red: {len(groups['g0']) - 1} images" in out
    assert f"Group {1 - group_of[first] + 1}: " in out
    # --regroup starts over: the person's move is not kept, their name goes to the new
    # group that overlaps the named one most, and the new grouping replaces the edited one
    # (the next plain run shows it; the app can undo it: the edited one is in the history)
    code = main(["cluster", str(photos), "--json", "--regroup"])
    cap = capsys.readouterr()
    assert code == 0 and "Undo (Ctrl+Z) in the app's Categories brings it back" in cap.err
    res = json.loads(cap.out.strip().splitlines()[-1])
    group_of = {m: c["id"] for c in res["clusters"] for m in c["members"]}
    names = {c["id"]: c["name"] for c in res["clusters"]}
    assert names[group_of[first]] == "Red"
    assert group_of[moved] == group_of[first]  # (its subject's group: the move is gone)
    code, out = _run(["cluster", str(photos), "--json"], capsys)
    assert json.loads(out.strip().splitlines()[-1])["clusters"] == res["clusters"]
    from engine.cluster import load_history

    with Collection.open(photos, readonly=True) as col:
        (undo,) = load_history(col.store, [str(p) for p in col.paths()])
    assert undo.what == "grouping again"
    assert undo.grouping.group_of(moved) != undo.grouping.group_of(first)  # the edited one


def _three_groups(folder, index_name, capsys, *extra) -> list[dict]:
    """``simile cluster photos --k 3 [extra] --json`` on the family photos, twice: with
    ``extra`` and then without it (every group one family either way); the two results."""
    photos, index = folder / "photos", folder / index_name
    out = []
    for args in (extra, ()):
        code, text = _run(["cluster", str(photos), "--index", str(index), "--k", "3", *args,
                           "--json"], capsys)  # fmt: skip
        assert code == 0
        out.append(json.loads(text.strip().splitlines()[-1]))
    for c in out[0]["clusters"] + out[1]["clusters"]:
        assert len({_family(m) for m in c["members"]}) == 1
    return out


def test_cluster_scenes_joins_the_search_pairs(folder, capsys):
    """By default every photo queries the search and its same-object-or-place pairs join the
    cut's affinities; the reason says how many, and the queries are remembered in the index.
    ``--no-scenes`` leaves them out."""
    off, res = _three_groups(folder, "idx_scenes", capsys, "--no-scenes")
    assert "pair(s) the search finds of the same object or place" in res["k_reason"]
    assert int(res["k_reason"].split("; with ")[1].split(" ")[0]) > 0
    assert "same object or place" not in off["k_reason"]
    assert (folder / "idx_scenes" / "cache" / "scene-pairs.npz").is_file()


def test_cluster_fisher_consensus_groups_the_scenes_too(folder, capsys):
    """``--fisher`` cuts a second view beside the affinities and keeps what both agree on;
    it says so in ``k_reason``, and the classifier for new photos is trained either way."""
    res, plain = _three_groups(folder, "idx_fisher", capsys, "--fisher")
    assert "consensus of 3 cuts of each of 2 views" in res["k_reason"]
    assert "consensus" not in plain["k_reason"]
    assert "reassigned" not in plain["k_reason"]  # the SVM keeps the cut's groups by default


def test_cluster_help_states_the_engines_defaults(capsys):
    """The help spells the defaults as numbers (the parser stays free of the engine's
    imports); they must be the engine's."""
    import re

    from engine.cluster import AUTO_K_MAX
    from engine.cluster.pipeline import NYSTROM_AUTO_MIN
    from engine.cluster.scenes import SCENES_AUTO_MAX

    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {AUTO_K_MAX}, engine.cluster.AUTO_K_MAX" in text
    assert f"default up to {SCENES_AUTO_MAX} photos" in text
    limits = {int(m.replace(",", "")) for m in re.findall(r"up to ([\d,]+) photos", text)}
    assert limits == {SCENES_AUTO_MAX, NYSTROM_AUTO_MIN}
