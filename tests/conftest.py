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
