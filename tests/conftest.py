"""Test configuration: Qt runs offscreen, set before any Qt import."""

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
DEMO = ROOT / "assets" / "demo"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; tests using it are skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not available")
    return SHARED_DATA


@pytest.fixture(scope="session")
def demo_folder() -> Path:
    return DEMO


@pytest.fixture(autouse=True)
def _own_trash(tmp_path_factory, monkeypatch):
    """Every test has its own XDG data folder, so that whatever goes "to the trash" in a
    test lands in a temporary trash, never in the trash of the person running the tests
    (a test may still set its own)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
