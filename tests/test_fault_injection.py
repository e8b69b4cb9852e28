"""Fault injection on a tiny folder (reliability issue, point 8): every family of
``tests/benchmarks/fault_harness.py`` with 1-3 cases, in the default test run.

The larger run of the same harness prints the table (family, tried, survived)::

    python tests/benchmarks/fault_harness.py --scale 1

The bugs the harness found are the tests at the end, one per bug, each a deterministic
case of its family; all are fixed, so they are regression tests (a bug found later is
added there as ``xfail(strict=True)`` until it is fixed).
"""

from __future__ import annotations

import sys

import pytest

from tests.benchmarks import fault_harness as fh

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc, FIFOs, sockets, mounts: Linux"
)

#: odd entries of the quick run: the special files and odd names first
QUICK_KINDS = (
    "fifo",
    "non-utf8-good",
    "non-utf8-bad",
    "truncated-jpeg",
    "truncated-heic",
    "header-bomb",
    "zero-byte",
    "random-bytes",
    "magic-then-junk",
    "dangling-link",
    "looping-links",
    "device-link",
    "socket",
    "wrong-suffix",
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One scratch folder for the module: the families share its photos and bases."""
    return tmp_path_factory.mktemp("faults")


def _skip_unless_mounted(out: fh.Outcome) -> None:
    """Skip when the family could not mount (tmpfs, bind mount: root and mount rights)."""
    if out.tried == 0 and any("skipped" in n for n in out.notes):
        pytest.skip("; ".join(out.notes))


def _survived(out: fh.Outcome) -> None:
    _skip_unless_mounted(out)
    assert out.tried >= 1, out.notes
    assert out.survived == out.tried, "\n".join(out.failures)


# ------------------------------------------------------------------ the families
def test_broken_images_never_stop_indexing(workdir):
    _survived(fh.broken_images(len(QUICK_KINDS), 0, workdir, kinds=QUICK_KINDS))


def test_kill_of_the_indexer_during_an_update(workdir):
    _survived(fh.kills(1, 0, workdir, n_photos=10, scenarios=("update",)))


def test_crash_at_a_write_of_an_update_a_grouping_and_a_learned_model(workdir):
    def select(op: str, k: int, stage: str) -> bool:
        return {
            "update": stage == "after",
            "learned model": stage == "before",
            "grouping": stage == "before",
        }[op]

    _survived(fh.crashes(3, 0, workdir, select=select))


def test_damaged_index_files_are_one_line_then_repaired(workdir):
    cases = [
        ("search data npz", "flip bytes"),
        ("MANIFEST.json", "replace by junk"),
        ("feature chunk", "cut the tail"),
    ]
    _survived(fh.corruption(0, 0, workdir, cases=cases))


def test_readers_during_updates_and_a_second_writer(workdir):
    _survived(fh.concurrency(2, 0, workdir, actions=("add", "replace")))


def test_full_disk_at_a_write_and_on_a_real_small_disk(workdir):
    def select(op: str, k: int, stage: str) -> bool:
        return op in ("update", "learned model")

    out = fh.disk_full(3, 0, workdir, select=select, frees=[1_000_000])
    _survived(out)


def test_read_only_media(workdir):
    _survived(fh.read_only(3, 0, workdir))


def test_bad_command_lines(workdir):
    names = [
        "unknown option: query",
        "contradiction: --must a b --cannot a b",
        "malformed feedback file: nul.csv",
    ]
    _survived(fh.bad_command_lines(0, 0, workdir, names=names))


# ------------------------------------------------------------------ bugs the harness found
# (each a regression test now: the fix is named in its docstring)
def test_crash_at_every_write_of_a_grouping(workdir):
    """Found by the harness ('simile cluster' committed its refitted vocabulary in a
    commit of its own before the grouping: a crash in between paired the old grouping and
    classifier with the new vocabulary); fixed (``IndexStore.hold_states``: one commit),
    kept as a regression: a crash right after each write, the process gone."""
    op = next(o for o in fh.ops(workdir) if o.name == "grouping")
    assert op.writes.count("MANIFEST.json") == 1, op.writes
    out = fh.crashes(
        len(op.writes), 0, workdir, stages=("exit",), select=lambda name, k, st: name == op.name
    )
    assert out.tried == len(op.writes)
    _survived(out)


def test_reader_while_a_writer_removes_photos(workdir):
    """Found by the harness (a reader read the rows' keys and their paths in two queries:
    KeyError when a writer removed photos in between); fixed (one query,
    ``IndexStore.usable_rows``, and a reader reads again when a commit came between its
    reads), kept as a regression."""
    assert fh.reader_during_removal(workdir) == []


def test_catalogue_cut_short(workdir):
    """Found by the harness (a catalogue cut short, its last page lost: 'simile index'
    printed a traceback, IndexError for the lost generation row or sqlite3.DatabaseError
    from writes outside ``IndexStore._q``); fixed (``PRAGMA quick_check`` when a catalogue
    is opened, every write maps SQLite's "malformed" to the one-line damaged-index
    error), kept as a regression: one line naming the file and --repair, then repaired."""
    _survived(fh.corruption(0, 0, workdir, cases=[("catalog.sqlite", "cut the tail")]))


def test_catalogue_rows_zeroed(workdir):
    """Found by the harness ('simile index --repair' failed with IntegrityError NOT NULL
    when salvaged rows held NULLs); fixed (such rows are dropped and their photos indexed
    again), kept as a regression."""
    cases = [
        ("catalog.sqlite", "zero a b-tree's rows:chunks"),
        ("catalog.sqlite", "zero a b-tree's rows:images"),
        ("catalog.sqlite", "zero a b-tree's rows:settings"),
    ]
    _survived(fh.corruption(0, 0, workdir, cases=cases))


def test_catalogue_index_zeroed(workdir):
    """Found by the harness (damage inside the catalogue's SQLite indexes went unseen:
    answers differed silently from a clean build); fixed (``PRAGMA quick_check`` when a
    catalogue is opened), kept as a regression."""
    cases = [
        ("catalog.sqlite", "zero a b-tree's rows:sqlite_autoindex_images_1"),
        ("catalog.sqlite", "zero a b-tree's rows:images_status"),
    ]
    _survived(fh.corruption(0, 0, workdir, cases=cases))


def test_real_full_disk_while_a_chunk_is_written(workdir):
    """Found by the harness (numpy reports the short write of a full disk as "N requested
    and M written", without ENOSPC: it was a traceback); fixed, kept as a regression."""
    out = fh.disk_full(1, 0, workdir, select=lambda *case: False, frees=[100_000])
    _survived(out)


def test_real_disk_already_full(workdir):
    """Found by the harness (a disk with no space left at all was reported as a damaged
    catalogue, exit 2, with the advice to repair it: SQLite reports it as SQLITE_IOERR on
    its -shm / -wal); fixed (``engine.index.catalog.disk_full``: a full disk is one line,
    exit 1, and readers open an index whose log is empty ``immutable=1``), kept as a
    regression."""
    out = fh.disk_full(1, 0, workdir, select=lambda *case: False, frees=[0])
    _survived(out)


def test_path_component_too_long(workdir):
    """Found by the harness (ENAMETOOLONG from pathlib's is_file / is_dir was a
    traceback); fixed, kept as a regression."""
    assert fh.bad_command_line(workdir, "very long path component") == []


def test_two_links_to_one_photo(workdir):
    """Found by the harness (the second of two links to one photo was passed over
    silently); fixed: it is listed as skipped, 'another name of ...'."""
    out = fh.broken_images(1, 0, workdir, kinds=["duplicate-links"])
    _survived(out)
