"""The architecture rules of the codebase, checked in the normal test run.

- import-linter's contracts in ``pyproject.toml``: ``engine`` never imports ``app``,
  PySide6 or shiboken6; the engine's subpackages are layers that follow the data flow;
  no import cycles in ``engine`` or ``app``;
- no engine module over 800 lines (a newcomer reads a module at a time);
- no module imports another module's private (``_name``) names;
- the flat module paths of the old layout still import, as the very same modules.
"""

from __future__ import annotations

import ast
import importlib
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 800


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_import_contracts_are_kept(monkeypatch):
    lint = pytest.importorskip("importlinter.cli")
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with redirect_stdout(out):
        code = lint.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    report = out.getvalue()
    assert code == 0, report[report.find("Broken contracts") :] or report
    assert "3 kept, 0 broken" in report


@pytest.mark.parametrize("path", _sources("engine"), ids=lambda p: str(p.relative_to(ROOT)))
def test_engine_modules_stay_readable(path):
    n = len(path.read_text("utf-8").splitlines())
    assert n <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {n} lines"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def test_no_module_imports_private_names_of_another():
    offences = []
    for package in ("engine", "app"):
        for path in _sources(package):
            here = _module_name(path)
            tree = ast.parse(path.read_text("utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                if node.module.split(".")[0] not in ("engine", "app"):
                    continue
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and node.module != here:
                        offences.append(f"{here}:{node.lineno} imports {node.module}.{alias.name}")
    assert not offences, "\n".join(offences)


def test_old_flat_module_paths_are_the_new_modules():
    import engine

    for old, new in engine.MOVED_MODULES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from engine.store import IndexStore  # what outside scripts wrote before the move

    assert IndexStore.__module__.startswith("engine.index")
