"""``simile duplicates`` shows its progress as lines when stderr is not a terminal (a
pipe, a log file): when the checks start, every few seconds, and when they end."""

import io
import json
import shutil
import subprocess
import sys

import pytest

from app.cli import main
from app.commands.duplicates import LineProgress


@pytest.fixture(scope="module")
def folder(tmp_path_factory, demo_folder):
    root = tmp_path_factory.mktemp("dupprogress")
    photos = root / "photos"
    photos.mkdir()
    for p in sorted(demo_folder.glob("*.jpg"))[:16]:
        shutil.copy(p, photos / p.name)
    shutil.copy(demo_folder / "coins.jpg", photos / "coins_copy.jpg")
    assert main(["index", str(photos), "--index", str(root / "idx"), "--json"]) == 0
    return photos, root / "idx"


def test_progress_lines_on_a_pipe(folder):
    photos, index = folder
    shutil.rmtree(index / "cache", ignore_errors=True)
    code = "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", code, "duplicates", str(photos), "--index", str(index)]
    proc = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "simile: duplicates: finding the candidate pairs"
    start = next(i for i, ln in enumerate(lines) if ln.startswith("simile: duplicates: checking"))
    total = int(lines[start].split()[3].replace(",", ""))
    assert total > 0
    assert f"checked {total:,} of {total:,} pairs (100 %)" in proc.stderr
    assert any("choosing the copy to keep" in ln for ln in lines)
    assert json.loads(proc.stdout)["groups"]  # (stdout: the JSON alone)
    # a second search: the pairs come from the cache, and the line says so
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0
    assert f"checking {total:,} pairs ({total:,} remembered" in again.stderr


def test_line_progress_writes_a_line_every_few_seconds(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("app.commands.duplicates.time.monotonic", lambda: now[0])
    out = io.StringIO()
    p = LineProgress(out, every=10.0)
    p.begin()
    for rows in range(0, 1000, 100):  # the candidates, a block every 3 s
        now[0] += 3.0
        p.candidates(rows, 1000)
    p(0, 5000)
    for done in range(100, 5001, 100):  # pairs, a chunk every second
        now[0] += 1.0
        p(done, 5000)
    lines = out.getvalue().splitlines()
    assert lines[0] == "simile: duplicates: finding the candidate pairs"
    rows = [ln for ln in lines if "photos" in ln]
    assert 2 <= len(rows) <= 3 and "of 1,000 photos" in rows[0]
    assert "checking 5,000 pairs" in lines[len(rows) + 1]
    checked = [ln for ln in lines if "checked" in ln]
    assert 4 <= len(checked) <= 6  # 50 s of checks: a line every 10 s, and the last
    assert checked[0].startswith("simile: duplicates: checked 1,000 of 5,000 pairs (20 %)")
    assert "left" in checked[0] and "left" not in checked[-1]
    assert checked[-1].startswith("simile: duplicates: checked 5,000 of 5,000 pairs (100 %)")


def test_the_time_left_is_not_fooled_by_pairs_checked_while_candidates_were_found(
    monkeypatch,
):
    """The checks start while the candidates are still being found: the first count
    after the start holds those pairs at once, and the rate is measured from it."""
    now = [100.0]
    monkeypatch.setattr("app.commands.duplicates.time.monotonic", lambda: now[0])
    out = io.StringIO()
    p = LineProgress(out, every=10.0)
    p.begin()
    p(0, 5000)  # all pairs known; none remembered
    now[0] += 0.5
    p(2000, 5000)  # checked while the candidates were found
    for done in range(2100, 3001, 100):  # then 100 pairs a second
        now[0] += 1.0
        p(done, 5000)
    line = next(ln for ln in out.getvalue().splitlines() if "checked 3,000" in ln)
    assert line.endswith("about 20 s left"), line  # 2,000 pairs at 100 a second
