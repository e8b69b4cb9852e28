"""What a ``simile index`` that extracts nothing may import.

At 100,000 photos a removal (``simile index FOLDER --only GONE.jpg``) or a rescan that
finds nothing changed costs a few tenths of a second of work; importing the libraries of
the search and of the feature extraction used to cost more than that. So the modules on
that path import them lazily, in the functions that use them, and this test keeps it so:
each case runs in a fresh process and fails naming the line that first imported a module
it may not.

Modules a removal or an unchanged rescan may not import (and what needs them):

- ``cv2`` -- OpenCV: feature extraction (:mod:`engine.features.dense`), the same-object
  verification (:mod:`engine.index.geometry`), duplicates' pixel checks;
- ``PIL`` -- Pillow: decoding photos (:mod:`engine.io.imageio`); the scan tells an image
  by its first bytes without it (:func:`engine.io.formats.is_image_file`);
- ``scipy.sparse`` -- the bags of words and the hash inputs, built when photos are
  encoded or searched (it pulls in ``numpy.testing`` and ``numpy.f2py``, 0.2-0.4 s);
- ``sklearn`` -- never needed by the index;
- :mod:`engine.index.methods`, :mod:`engine.index.verify`,
  :mod:`engine.workflows.duplicates` -- searching and duplicates (they import the above);
- :mod:`engine.index.distributed` -- only a run with ``--cluster``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: modules a removal / an unchanged rescan may not import (see the module docstring)
NOT_ON_REMOVE_PATH = (
    "cv2",
    "PIL",
    "scipy.sparse",
    "sklearn",
    "engine.index.methods",
    "engine.index.verify",
    "engine.workflows.duplicates",
    "engine.index.distributed",
)

# Runs CODE (argv[2]) and prints, as JSON, each module of argv[1] that got imported with
# the frames (file:line, innermost last, import machinery left out) that first asked for it
_PROBE = r"""
import json, os, sys, traceback

watched = set(json.loads(sys.argv[1]))
first = {}


class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in watched and name not in first:
            first[name] = [
                f"{os.path.relpath(f.filename)}:{f.lineno}"
                for f in traceback.extract_stack()[:-1]
                if "importlib" not in f.filename and not f.filename.startswith("<")
            ][-4:]
        return None


sys.meta_path.insert(0, Spy())
exec(sys.argv[2])
print(json.dumps({m: first.get(m, ["(before the probe)"]) for m in watched if m in sys.modules}))
"""


def _imported(code: str) -> dict[str, list[str]]:
    """The modules of :data:`NOT_ON_REMOVE_PATH` that ``code`` imports, in a fresh
    process, with where each was first imported."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(NOT_ON_REMOVE_PATH), code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_modules_of_simile_index_import_no_heavy_library():
    imported = _imported("import app.cli, app.commands.index, engine.collection")
    assert imported == {}, f"imported (module: where): {imported}"


@pytest.fixture(scope="module")
def library(tmp_path_factory, demo_folder):
    """A small indexed folder (a few demo photos, made small: fast to index)."""
    import cv2

    from engine.collection import Collection

    folder = tmp_path_factory.mktemp("import_cost") / "photos"
    folder.mkdir()
    for name in ("astronaut", "coffee", "chelsea", "rocket", "coins", "brick"):
        img = cv2.imread(str(demo_folder / f"{name}.jpg"))
        cv2.imwrite(str(folder / f"{name}.jpg"), cv2.resize(img, None, fx=0.3, fy=0.3))
    with Collection.open(folder) as col:
        gen = col.update(jobs=1)
        for _ in gen:
            pass
        assert len(col) == 6
    return folder


def _simile(args: list[str]) -> str:
    return (
        "import io, contextlib\n"
        "from app.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({args!r})\n"
        "assert rc == 0, rc\n"
    )


def test_unchanged_rescan_imports_no_heavy_library(library):
    imported = _imported(_simile(["index", str(library)]))
    assert imported == {}, f"imported (module: where): {imported}"


def test_removal_imports_no_heavy_library(library):
    from engine.collection import Collection

    gone = library / "coins.jpg"
    gone.unlink()
    imported = _imported(_simile(["index", str(library), "--only", str(gone)]))
    assert imported == {}, f"imported (module: where): {imported}"
    with Collection.open(library, readonly=True) as col:
        assert gone not in col.paths() and len(col) == 5  # (it did remove it)


def test_lazy_names_of_engine_collection():
    """The names :mod:`engine.collection` imports on first use are its names still, and
    the default tiers of ``Collection.duplicates`` are the duplicates' tiers."""
    import inspect

    import engine.collection as ec
    from engine.workflows import duplicates

    for name in ec.__all__:
        assert getattr(ec, name) is not None
    assert ec.TIERS is duplicates.TIERS and ec.find_duplicates is duplicates.find_duplicates
    default = inspect.signature(ec.Collection.duplicates).parameters["tiers"].default
    assert default == duplicates.TIERS
    with pytest.raises(AttributeError, match="no_such_name"):
        ec.no_such_name  # noqa: B018
