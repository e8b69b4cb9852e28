"""The one vocabulary of what an index stores (:mod:`engine.index.keys`).

Every persistent piece has its key there, documented in its table, and every module takes
its key from it: no other module spells a stored key itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.index import keys
from engine.index.files import NAME_RE

ROOT = Path(__file__).resolve().parents[2]

#: Keys of whole pieces (states, kv entries, settings): never spelled outside keys.py.
PIECES = (
    keys.MODELS_STATE,
    keys.DATA_STATE,
    keys.LEARNED_MODEL_STATE,
    keys.LEARNED_MODEL_TOKEN,
    keys.MARKS_KEY,
    keys.GROUPING_STATE,
    keys.DENSE_VOCAB_STATE,
    keys.CATEGORY_EDITS_KEY,
    keys.FEATURE_SETTINGS,
    keys.dense_manifest_key(keys.DENSE_NAMESPACE),
    keys.dense_manifest_key(keys.LEARN_DENSE_NAMESPACE),
)


def test_every_key_is_a_unique_valid_documented_name():
    assert len(set(PIECES)) == len(PIECES)
    table = keys.__doc__
    for key in PIECES:
        assert NAME_RE.match(key) and ".." not in key, key
        documented = key
        if key.endswith(".dense.manifest"):  # one row for every namespace
            documented = "<ns>.dense.manifest"
        assert f"``{documented}``" in table, f"{key} is missing from the table"
    for name in keys.LEGACY_GROUPING_ARRAYS:  # the legacy arrays are valid names too
        assert NAME_RE.match(keys.GROUPING_PREFIX + name)
    assert keys.dense_array_prefix("learn") == "learn.dense."
    assert keys.dense_manifest_key() == "cluster.dense.manifest"
    # the legacy grouping arrays never collide with the dense channel's arrays
    assert not any(n.startswith("dense") for n in keys.LEGACY_GROUPING_ARRAYS)


def _string_constants(path: Path):
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                yield node.lineno, node.value


def test_no_module_spells_a_stored_key_itself():
    """Keys come from engine.index.keys: a string literal equal to a key (or a legacy
    grouping array's name) anywhere else is a second vocabulary in the making."""
    home = ROOT / "engine" / "index" / "keys.py"
    legacy = {keys.GROUPING_PREFIX + n for n in keys.LEGACY_GROUPING_ARRAYS}
    offences = []
    for package in ("engine", "app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == home:
                continue
            for line, text in _string_constants(path):
                if text in PIECES or text in legacy or text == keys.GROUPING_PREFIX:
                    offences.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert not offences, "\n".join(offences)


def test_the_owners_use_the_keys():
    import engine.cluster.model as model
    import engine.workflows.feedback as feedback
    import engine.workflows.marks as marks
    from engine.cluster import CategoryChannel, grouping

    assert feedback.MODEL_STATE == keys.LEARNED_MODEL_STATE
    assert feedback.MODEL_TOKEN == keys.LEARNED_MODEL_TOKEN
    assert marks.MARKS_KEY == keys.MARKS_KEY
    assert grouping.PREFIX == keys.GROUPING_PREFIX
    assert model._VOCAB_STATE == keys.DENSE_VOCAB_STATE

    class Store:  # what CategoryChannel asks of a store when it opens
        def get_kv(self, key):
            self.asked = key

    for ns in (keys.DENSE_NAMESPACE, keys.LEARN_DENSE_NAMESPACE):
        store = Store()
        CategoryChannel(store, namespace=ns)
        assert store.asked == keys.dense_manifest_key(ns)


@pytest.mark.parametrize("ns", [keys.DENSE_NAMESPACE, keys.LEARN_DENSE_NAMESPACE])
def test_feedback_caches_its_dense_features_in_its_namespace(ns):
    import engine.workflows.feedback as feedback
    from engine.cluster import CATEGORY_FEATURES

    class Store:
        def get_kv(self, key):
            self.asked = key

    store = Store()
    settings = feedback.LEARN_FEATURES if ns == keys.LEARN_DENSE_NAMESPACE else CATEGORY_FEATURES
    feedback._channel(store, dict(settings))
    assert store.asked == keys.dense_manifest_key(ns)


def test_ingest_records_its_feature_settings_under_the_key(tmp_path, demo_folder):
    import shutil

    from engine.collection import Collection

    photos = tmp_path / "photos"
    photos.mkdir()
    shutil.copy(demo_folder / "brick.jpg", photos / "brick.jpg")
    with Collection.open(photos, tmp_path / "index") as col:
        for _ in col.update(jobs=1):
            pass
        assert col.store.get_setting(keys.FEATURE_SETTINGS) is not None
