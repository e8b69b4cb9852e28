"""Learning from subfolders and from relevance marks, end to end on a small collection."""

import itertools
import json
import shutil

import pytest

from engine.collection import Collection
from engine.feedback import (
    Mark,
    add_marks,
    labels_from_subfolders,
    load_marks,
    load_model,
    read_feedback_file,
    run_learn,
)

GROUPS = ("chelsea", "coffee", "astronaut")


@pytest.fixture(scope="module")
def collection(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("learn") / "photos"
    for g in GROUPS:
        (root / g).mkdir(parents=True)
        for src in sorted(demo_folder.glob(f"{g}*.jpg"))[:3]:
            shutil.copy(src, root / g / src.name)
    shutil.copy(demo_folder / "rocket.jpg", root / "rocket.jpg")  # unlabeled, top level
    coll = Collection.open(root)
    for _ in coll.update(jobs=1):
        pass
    yield coll
    coll.close()


def test_labels_from_subfolders(collection):
    labels = labels_from_subfolders(collection)
    paths = collection.paths()
    assert len(labels) == len(paths) == 10
    for p, lab in zip(paths, labels, strict=True):
        if p.parent == collection.folder:
            assert lab == -1
        else:
            same = [q for q, m in zip(paths, labels, strict=True) if m == lab]
            assert all(q.parent == p.parent for q in same)


def test_learned_query_without_model_says_how(collection):
    if collection.store.has_state("learned.model"):
        collection.store.delete_state("learned.model")
    with pytest.raises(LookupError, match="simile learn"):
        collection.query(collection.paths()[0], method="learned")


@pytest.mark.parametrize("method", ["oasis", "boostssc", "boostpro"])
def test_learn_from_subfolders_then_query(collection, method):
    summary = run_learn(collection, method=method, source="subfolders")
    assert summary.method == method and summary.n_images == 10
    assert load_model(collection).method == method
    q = next(p for p in collection.paths() if p.name == "chelsea.jpg")
    hits = collection.query(q, method="learned", top=10)
    assert len(hits) == 10
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    # the two other chelsea views rank within the top three
    assert {h.path.parent.name for h in hits[:3]} == {"chelsea"}


def test_marks_are_stored_replaced_and_learned_from(collection):
    paths = {p.name: str(p) for p in collection.paths()}
    q = paths["coffee.jpg"]
    others = [v for k, v in paths.items() if k.startswith("coffee") and v != q]
    add_marks(collection, [Mark(q, others[0], True), Mark(q, paths["rocket.jpg"], True)])
    add_marks(collection, [Mark(q, paths["rocket.jpg"], False), Mark(q, others[1], True)])
    marks = {(m.result, m.relevant) for m in load_marks(collection)}
    assert marks == {(others[0], True), (paths["rocket.jpg"], False), (others[1], True)}
    summary = run_learn(collection, method="oasis", source="marks")
    assert summary.source == "marks" and summary.n_constraints >= 2
    assert load_model(collection).source == "marks"


def test_learn_refuses_too_little_supervision(collection):
    from engine.feedback import clear_marks

    clear_marks(collection)
    with pytest.raises(ValueError, match="no usable marks"):
        run_learn(collection, source="marks")
    with pytest.raises(ValueError, match="method"):
        run_learn(collection, method="svm")


def test_read_feedback_file_csv_and_json(tmp_path):
    csv_file = tmp_path / "fb.csv"
    csv_file.write_text("query,result,relevant\na.jpg,b.jpg,yes\na.jpg,/x/c.jpg,0\n")
    marks = read_feedback_file(csv_file, tmp_path)
    assert marks == [
        Mark(str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg"), True),
        Mark(str(tmp_path / "a.jpg"), "/x/c.jpg", False),
    ]
    js = tmp_path / "fb.json"
    js.write_text(json.dumps({"marks": [{"query": "a.jpg", "result": "b.jpg", "relevant": 1}]}))
    assert read_feedback_file(js, tmp_path)[0].relevant is True
    bad = tmp_path / "bad.csv"
    bad.write_text("query,result,relevant\na.jpg,b.jpg,maybe\n")
    with pytest.raises(ValueError, match="line 2"):
        read_feedback_file(bad, tmp_path)
    (tmp_path / "nohdr.csv").write_text("a.jpg,b.jpg,1\n")
    with pytest.raises(ValueError, match="header"):
        read_feedback_file(tmp_path / "nohdr.csv", tmp_path)
    with pytest.raises(ValueError, match="cannot read"):
        read_feedback_file(tmp_path / "missing.csv", tmp_path)


def test_cli_learn_refused_while_another_process_writes(collection, capsys):
    from app.cli import main

    # the fixture holds the writer lock: a second writer is refused with a clear message
    code = main(["learn", str(collection.folder), "--from-subfolders", "--json"])
    assert code == 2 and "another simile process" in capsys.readouterr().err


def test_cli_learn_end_to_end(tmp_path, demo_folder, capsys):
    from app.cli import main

    root = tmp_path / "p"
    for g in ("chelsea", "coffee"):
        (root / g).mkdir(parents=True)
        for src in sorted(demo_folder.glob(f"{g}*.jpg"))[:2]:
            shutil.copy(src, root / g / src.name)
    assert main(["learn", str(root), "--from-subfolders"]) == 2
    assert "no index for" in capsys.readouterr().err
    with Collection.open(root) as c:
        for _ in c.update(jobs=1):
            pass
    assert main(["learn", str(root), "--from-subfolders", "--method", "boostssc", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["method"] == "boostssc" and out["images"] == 4 and out["source"] == "subfolders"
