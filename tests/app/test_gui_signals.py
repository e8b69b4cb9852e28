"""Asked to end (SIGTERM, SIGINT, SIGHUP), the window closes as its close button does.

Run as a person's desktop runs it: the ``simile-gui`` entry point in its own process, on
the offscreen platform, with private settings, cache and temporary folders.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("PySide6")

START_TIMEOUT = 120.0


def _wait(cond, timeout: float, proc: subprocess.Popen) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the window ended early: {proc.communicate()}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"timed out: {proc.communicate()}")
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_asked_to_end_the_window_closes_cleanly(tmp_path, signum):
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        cv2.imwrite(str(folder / f"p{i}.jpg"), rng.integers(0, 255, (120, 160, 3), np.uint8))
    tmp, config = tmp_path / "tmp", tmp_path / "config"
    tmp.mkdir()
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="offscreen",
        TMPDIR=str(tmp),
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(config),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    code = "import sys; from app.cli import gui_main; sys.exit(gui_main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the window is up (its temporary folder exists) and has opened the folder
        _wait(lambda: any(tmp.glob("simile-query-*")), START_TIMEOUT, proc)
        _wait(lambda: (folder / ".simile").is_dir(), START_TIMEOUT, proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # before: killed by the signal (-15) or a KeyboardInterrupt traceback, nothing saved
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert not list(tmp.glob("simile-query-*"))  # its temporary folder is removed
    saved = [p.read_text(errors="replace") for p in config.rglob("*.conf")]
    assert any(str(folder) in text and "lastFolder" in text for text in saved), saved
    assert len(list(folder.glob("p*.jpg"))) == 3  # the photos are untouched


def test_signal_handlers_are_installed_for_end_requests(qapp):
    from app.gui.main import quit_on_signals

    calls: list[int] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    old_fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(old_fd)
    try:
        quit_on_signals(qapp, lambda: calls.append(1))
        for s in old:
            handler = signal.getsignal(s)
            assert callable(handler) and handler not in (signal.SIG_DFL, signal.SIG_IGN)
            handler(s, None)
        assert calls == [1, 1, 1]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        signal.set_wakeup_fd(old_fd)


def test_scratch_folders_of_windows_that_were_killed_are_removed(tmp_path, monkeypatch):
    """A window's scratch folder carries its process id; a new window removes those whose
    process no longer runs (killed by SIGKILL, crashed), and nothing else."""
    import tempfile

    from app.gui.state import scratch_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(gone.stdout)
    stale = tmp_path / f"simile-query-{dead}-abc"
    stale.mkdir()
    (stale / "pasted-1.png").write_bytes(b"x")
    live = tmp_path / f"simile-query-{os.getppid()}-def"  # (the process that ran pytest)
    live.mkdir()
    old_style = tmp_path / "simile-query-xyz"  # (no process id: left alone)
    old_style.mkdir()
    not_a_folder = tmp_path / f"simile-query-{dead}-file"
    not_a_folder.write_text("a file")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / f"simile-query-{dead}-link"
    link.symlink_to(elsewhere, target_is_directory=True)

    scratch = scratch_dir()
    try:
        assert not stale.exists()
        assert live.is_dir() and old_style.is_dir() and not_a_folder.is_file()
        assert link.is_symlink() and elsewhere.is_dir()
        mine = Path(scratch.name)
        assert mine.parent == tmp_path and mine.name.startswith(f"simile-query-{os.getpid()}-")
        assert scratch_dir().cleanup() is None and mine.is_dir()  # (a live window's: kept)
    finally:
        scratch.cleanup()
    assert not mine.exists()
