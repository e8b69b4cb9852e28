"""Learning from subfolders and from relevance marks, end to end on a small collection."""

import itertools
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from engine.cluster import CategoryChannel, collection_rows
from engine.collection import Collection
from engine.index.store import ReadOnlyIndexError
from engine.kernels.vocabulary import bag_of_words
from engine.workflows.feedback import (
    LEARN_FEATURES,
    MODEL_STATE,
    MODEL_TOKEN,
    LearnedSimilarity,
    Mark,
    _channel,
    add_marks,
    labels_from_subfolders,
    learn,
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


def _small(root, demo_folder, groups=("chelsea", "coffee"), n=2):
    for g in groups:
        (root / g).mkdir(parents=True)
        for src in sorted(demo_folder.glob(f"{g}*.jpg"))[:n]:
            shutil.copy(src, root / g / src.name)
    coll = Collection.open(root)
    for _ in coll.update(jobs=1):
        pass
    return coll


def _same_folder_precision(coll, k=2):
    """Mean fraction of the k best other images that share the query's subfolder."""
    labelled = [p for p in coll.paths() if p.parent != coll.folder]
    prec = []
    for q in labelled:
        hits = [h for h in coll.query(q, method="learned", top=k + 1) if h.path != q][:k]
        prec.append(np.mean([h.path.parent == q.parent for h in hits]))
    return float(np.mean(prec))


def test_learned_query_without_model_says_how(collection):
    if collection.store.has_state("learned.model"):
        collection.store.delete_state("learned.model")
    with pytest.raises(LookupError, match="simile learn"):
        collection.query(collection.paths()[0], method="learned")


@pytest.mark.parametrize("method", ["oasis", "boostssc", "boostpro"])
def test_learn_from_subfolders_then_query(collection, method):
    summary = run_learn(collection, method=method, source="subfolders", jobs=1)
    assert summary.method == method and summary.n_images == 10
    model = load_model(collection)
    assert model.method == method
    # trained on the dense categorisation channel, now cached for every image
    rep = model.representation
    assert rep.settings == json.loads(json.dumps(LEARN_FEATURES))
    assert rep.settings["octaves"] is False  # every window described at full resolution
    # its own cache, beside the grouping's (which learning neither fills nor evicts)
    assert (
        CategoryChannel(collection.store, rep.settings).key
        != CategoryChannel(collection.store).key
    )
    assert not any(
        CategoryChannel(collection.store).has(h) for h in collection_rows(collection)[1]
    )
    assert model.n_words == rep.tree.n_leaves == rep.idf.size
    assert (rep.tree.branching, rep.tree.levels) == (16, 4)
    channel = _channel(collection.store, LEARN_FEATURES)
    assert all(channel.has(h) for h in collection_rows(collection)[1])
    q = next(p for p in collection.paths() if p.name == "chelsea.jpg")
    hits = collection.query(q, method="learned", top=10)
    assert len(hits) == 10 and len({h.path for h in hits}) == 10
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    # the two other chelsea views rank within the top three
    assert {h.path.parent.name for h in hits[:3]} == {"chelsea"}
    # every labelled query: its two best other images share its folder far more often
    # than chance (2 of the 8 other labelled images + rocket: 0.22)
    assert _same_folder_precision(collection) >= 0.8


def test_model_state_round_trip(collection, tmp_path):
    run_learn(collection, method="oasis", source="subfolders", jobs=1)
    model = load_model(collection)
    again = LearnedSimilarity.from_state(collection.store.load_state(MODEL_STATE))
    assert again is not model and again.representation.settings == model.representation.settings
    np.testing.assert_array_equal(again.representation.idf, model.representation.idf)
    rng = np.random.default_rng(0)
    sets = [rng.random((50, 128), dtype=np.float32) for _ in range(4)]
    A, B = model.representation.bags(sets), again.representation.bags(sets)
    assert (A != B).nnz == 0 and A.shape == (4, model.n_words)
    np.testing.assert_allclose(np.sqrt(A.multiply(A).sum(axis=1)), 1.0, rtol=1e-5)
    # the tf-idf of engine.vocabulary (the benchmark's bags) with the stored tree and idf
    ref = bag_of_words(sets, again.representation.tree, again.representation.idf)
    np.testing.assert_allclose(A.toarray(), ref.toarray(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(again.similarity(A, A), model.similarity(A, A), rtol=1e-6)
    # the stored bags of the collection are those a query of the same image gets
    hashes = collection_rows(collection)[1]
    assert again.image_bags[0].tolist() == hashes
    channel = _channel(collection.store, LEARN_FEATURES)
    fresh = again.representation.bags([channel.raw(h)[0] for h in hashes])
    np.testing.assert_allclose(again.image_bags[1].toarray(), fresh.toarray(), atol=1e-6)
    # no pickle: only arrays and plain scalars
    for v in model.to_state().values():
        assert isinstance(v, np.ndarray | int | float | str | bool)
        assert not (isinstance(v, np.ndarray) and v.dtype.hasobject)


def test_model_of_an_older_version_says_learn_again(tmp_path, demo_folder):
    coll = _small(tmp_path / "old", demo_folder)
    try:
        run_learn(coll, method="oasis", source="subfolders", jobs=1)
        st = coll.store.load_state(MODEL_STATE)
        old = {k: v for k, v in st.items() if not k.startswith("repr.")}
        coll.store.save_state(MODEL_STATE, old)
        coll.store.set_kv(MODEL_TOKEN, "")  # older versions wrote no token
        with pytest.raises(LookupError, match=r"older version.*simile learn"):
            load_model(coll)
        with pytest.raises(LookupError, match="simile learn"):
            coll.query(coll.paths()[0], method="learned")
    finally:
        coll.close()


def test_learned_query_outside_the_collection(collection, demo_folder):
    from engine.features.keypoints import extract_features
    from engine.io.imageio import load_image

    run_learn(collection, method="oasis", source="subfolders", jobs=1)
    outside = demo_folder / "coffee_perspective.jpg"  # not in the collection
    hits = collection.query(outside, method="learned", top=3)
    assert [h.path.parent.name for h in hits[:2]] == ["coffee", "coffee"]
    by_array = collection.query(load_image(outside, max_side=None), method="learned", top=3)
    assert [h.path for h in by_array] == [h.path for h in hits]
    with pytest.raises(TypeError, match="path or an"):
        collection.query(extract_features(outside), method="learned")


def test_collection_bags_come_from_the_model_and_are_cached(collection, monkeypatch):
    import engine.workflows.feedback as fb

    run_learn(collection, method="oasis", source="subfolders", jobs=1)
    q = collection.paths()[0]
    expected = collection.query(q, method="learned", top=10)

    def no_dense_sets(*args, **kwargs):
        raise AssertionError("the collection's images were bagged again")

    monkeypatch.setattr(fb, "_dense_sets", no_dense_sets)
    calls = []
    bags = fb.DenseBagOfWords.bags
    monkeypatch.setattr(
        fb.DenseBagOfWords, "bags", lambda self, s: calls.append(len(s)) or bags(self, s)
    )
    # another process (a fresh read-only Collection): bags from the stored model
    with Collection.open(collection.folder, readonly=True) as other:
        for _ in range(2):
            hits = other.query(q, method="learned", top=10)
            assert [h.path for h in hits] == [h.path for h in expected]
    assert calls == [1, 1]  # only the query image is bagged


def test_read_only_index_and_images_added_after_learning(tmp_path, demo_folder):
    root = tmp_path / "ro"
    coll = _small(root, demo_folder)
    try:
        run_learn(coll, method="oasis", source="subfolders", jobs=1)
        new = root / "chelsea" / "chelsea_perspective.jpg"
        shutil.copy(demo_folder / new.name, new)
        for _ in coll.update(jobs=1):
            pass
        new_hash = dict(zip(*collection_rows(coll), strict=True))[new]
    finally:
        coll.close()
    idx = root / ".simile"
    dense_files = sorted(idx.glob("arrays/learn.dense.*"))
    with Collection.open(root, readonly=True) as ro:
        assert not _channel(ro.store, LEARN_FEATURES).has(new_hash)  # learned before it came
        hits = ro.query(root / "chelsea" / "chelsea.jpg", method="learned", top=5)
        assert len(hits) == 5 and new in [h.path for h in hits]
        assert {h.path.parent.name for h in hits[:3]} == {"chelsea"}
        assert not _channel(ro.store, LEARN_FEATURES).has(new_hash)  # computed in memory only
        with pytest.raises(ReadOnlyIndexError, match="read-only"):
            run_learn(ro, source="subfolders", jobs=1)
    assert sorted(idx.glob("arrays/learn.dense.*")) == dense_files


def test_cancel_during_dense_features_stores_no_model(tmp_path, demo_folder):
    coll = _small(tmp_path / "c", demo_folder)
    try:
        cancel = threading.Event()
        gen = learn(coll, source="subfolders", cancel=cancel, jobs=1)
        stages = []
        try:
            while True:
                prog = next(gen)
                stages.append(prog.message)
                if prog.message.startswith("dense features") and prog.step >= 1:
                    cancel.set()
        except StopIteration as stop:
            result = stop.value
        assert result is None
        assert all(m.startswith("dense features") for m in stages)
        assert not coll.store.has_state(MODEL_STATE)
        with pytest.raises(LookupError, match="simile learn"):
            load_model(coll)
        # the features finished before the cancel stay cached: learning resumes from them
        channel = _channel(coll.store, LEARN_FEATURES)
        assert sum(channel.has(h) for h in collection_rows(coll)[1]) < len(coll.paths())
        assert run_learn(coll, source="subfolders", jobs=1) is not None
    finally:
        coll.close()


def test_marks_are_stored_replaced_and_learned_from(collection):
    paths = {p.name: str(p) for p in collection.paths()}
    q = paths["coffee.jpg"]
    others = [v for k, v in paths.items() if k.startswith("coffee") and v != q]
    add_marks(collection, [Mark(q, others[0], True), Mark(q, paths["rocket.jpg"], True)])
    add_marks(collection, [Mark(q, paths["rocket.jpg"], False), Mark(q, others[1], True)])
    marks = {(m.result, m.relevant) for m in load_marks(collection)}
    assert marks == {(others[0], True), (paths["rocket.jpg"], False), (others[1], True)}
    summary = run_learn(collection, method="oasis", source="marks", jobs=1)
    assert summary.source == "marks" and summary.n_constraints >= 2
    assert load_model(collection).source == "marks"


def test_learn_refuses_too_little_supervision(collection):
    from engine.workflows.feedback import clear_marks

    clear_marks(collection)
    with pytest.raises(ValueError, match="no usable marks"):
        run_learn(collection, source="marks", jobs=1)
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
    # a query from outside the folder (it was a TypeError traceback: keypoint features
    # were extracted for the learned method, which compares dense features of the image)
    outside = sorted(demo_folder.glob("chelsea*.jpg"))[2]
    assert main(["query", str(root), str(outside), "--method", "learned", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"][0]["hits"]
    assert len(hits) == 4 and Path(hits[0]["path"]).parent.name == "chelsea"
    assert main(["query", str(root), str(tmp_path / "p"), "--method", "learned"]) == 2


def test_full_resolution_dense_features_and_symlinked_folder(tmp_path, demo_folder):
    from engine.cluster import category_features
    from engine.workflows.feedback import _labels_of

    img = demo_folder / "chelsea.jpg"
    fast, full = category_features(img), category_features(img, **LEARN_FEATURES)
    np.testing.assert_array_equal(fast.xy, full.xy)  # the same windows...
    assert np.abs(fast.descriptors - full.descriptors).max() > 0.1  # ...sampled finer
    # images directly in a folder opened through a symlink are still unlabeled
    real = tmp_path / "real"
    (real / "a").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    paths = [real / "x.jpg", real / "a" / "y.jpg", real / "a" / "z.jpg"]
    assert _labels_of(paths, link).tolist() == [-1, 0, 0]
    assert _labels_of(paths, real).tolist() == [-1, 0, 0]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "null.json",
            '{"marks": [\n {"query": "a.jpg", "result": "b.jpg", "relevant": 1},\n'
            ' {"query": null, "result": "b.jpg", "relevant": 1}\n]}',
            "mark 1 (line 3): query must be a photo path, got nothing",
        ),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            "nul.csv",
            "query,result,relevant\na.jpg,b.jpg,yes\na\x00.jpg,b.jpg,no\n",
            "line 3: NUL byte",
        ),
        ("latin1.csv", b"query,result,relevant\na.jpg,b\xff.jpg,yes\n", "line 2: not UTF-8"),
        ("empty.csv", "query,result,relevant\n,b.jpg,yes\n", "line 2: query is empty"),
    ],
)
def test_malformed_feedback_files_name_the_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=re.escape(message)):
        read_feedback_file(path, tmp_path)


def test_calibration_curve_and_error_on_known_probabilities():
    """fit_curve recovers a logistic curve from examples drawn from it; the expected
    calibration error of the true probabilities is small, that of a constant wrong one is
    its distance from the frequency."""
    from engine.index.calibration import (
        curve_probability,
        expected_calibration_error,
        fit_curve,
    )

    rng = np.random.default_rng(0)
    s = rng.uniform(-1, 3, 20_000)
    p = 1 / (1 + np.exp(-(2.0 * s - 1.5)))
    y = rng.random(s.size) < p
    a, b = fit_curve(s, y)
    assert abs(a - 2.0) < 0.15 and abs(b + 1.5) < 0.15
    assert expected_calibration_error(p, y) < 0.02
    assert abs(expected_calibration_error(np.full(s.size, 0.9), y) - (0.9 - y.mean())) < 1e-9
    assert curve_probability((a, b), 10.0) > 0.99 and curve_probability(None, 1.0) is None
    assert fit_curve(s[:5], y[:5]) is None  # too few
    assert fit_curve(s, np.ones(s.size, bool)) is None  # nothing to tell apart
    assert fit_curve(-s, y) is None  # a curve falling with the score is no calibration


def test_learned_calibration_on_held_aside_photos_and_its_hits(collection):
    """The curve is fitted on half of the held-aside photos ranking each other, checked
    on the other half, stored with the model, and a learned hit carries its probability
    (monotone in the score) and the label 'like what you taught'."""
    from engine.index.calibration import TAUGHT
    from engine.workflows.feedback import _calibrate

    class Model:  # the similarity of bags that share their label a little more often
        def similarity(self, A, B):
            return (A @ B.T).toarray()

    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(8), 12)
    centres = rng.normal(size=(8, 16))
    X = sp.csr_matrix(centres[labels] + 1.5 * rng.normal(size=(labels.size, 16)))
    curve, error = _calibrate(Model(), X, labels, np.arange(labels.size))
    assert curve is not None and curve[0] > 0 and 0 <= error < 0.15
    assert _calibrate(Model(), X, labels, np.zeros(0, np.int64))[0] is None  # none aside
    # marks: a held-aside triplet's relevant photo against its other one
    t = np.array([[i, i + 1, (i + 12) % labels.size] for i in range(0, labels.size - 1, 2)])
    curve_t, error_t = _calibrate(Model(), X, None, t)
    assert curve_t is not None and 0 <= error_t < 0.3

    run_learn(collection, method="oasis", source="subfolders", jobs=1)
    model = load_model(collection)
    model.calibration, model.calibration_error = (3.0, -1.0), 0.05  # (this tiny set holds
    again = LearnedSimilarity.from_state(model.to_state())  # nothing aside: set by hand)
    assert again.calibration == (3.0, -1.0) and again.calibration_error == 0.05
    hits = collection.query(collection.paths()[0], method="learned", top=5)
    probs = [h.probability for h in hits]
    assert all(p is not None and 0 <= p <= 1 for p in probs)
    assert probs == sorted(probs, reverse=True)
    assert probs[0] == pytest.approx(1 / (1 + np.exp(-(3.0 * hits[0].score - 1.0))))
    assert {h.label for h in hits} == {TAUGHT}
    model.calibration = None
    hits = collection.query(collection.paths()[0], method="learned", top=5)
    assert all(h.probability is None for h in hits)
