"""Fault injection on a tiny folder (reliability issue, point 8): every family of
``tests/benchmarks/fault_harness.py`` with 1-3 cases, in the default test run.

The larger run of the same harness prints the table (family, tried, survived)::

    python tests/benchmarks/fault_harness.py --scale 1

The bugs the harness found are the tests at the end, one per bug, each a deterministic
case of its family: ``xfail(strict=True)`` while the bug is open (they fail only with the
bug's own signature, :class:`KnownBug`; anything else fails the test), so a fix makes
them pass, and fail here strictly, which is when their mark goes.
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


class KnownBug(AssertionError):
    """A failure with the signature of the bug an xfail test names (any other failure
    of that test is a plain AssertionError, which its xfail mark does not excuse)."""


def _known_bug(problems: list[str], signature: str) -> None:
    """Fail with :class:`KnownBug` when ``problems`` show ``signature``; pass when there
    are none (the bug is fixed: the strict xfail then reports it)."""
    text = "\n".join(problems)
    if not problems:
        return
    if signature in text:
        raise KnownBug(text)
    raise AssertionError(f"not the known bug ({signature!r}):\n{text}")


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
# (open ones: xfail(strict=True, raises=KnownBug); fixed ones: plain regression tests)
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


@pytest.mark.xfail(
    strict=True,
    raises=KnownBug,
    reason=(
        "BUG: a catalogue cut short (an interrupted copy: its last page lost) answers "
        "queries, but 'simile index' prints a traceback (IndexError in IndexStore.generation: "
        "the kv 'generation' row is gone; or sqlite3.DatabaseError from writes that bypass "
        "IndexStore._q: _commit, _write_sql, gc)"
    ),
)
def test_catalogue_cut_short(workdir):
    out = fh.corruption(0, 0, workdir, cases=[("catalog.sqlite", "cut the tail")])
    _known_bug(out.failures, "IndexError: list index out of range")


@pytest.mark.xfail(
    strict=True,
    raises=KnownBug,
    reason=(
        "BUG: 'simile index --repair' prints a traceback when a catalogue table's rows are "
        "damaged: the salvaged rows hold NULLs and repair._rebuild's INSERT OR REPLACE fails "
        "(sqlite3.IntegrityError: NOT NULL constraint failed: chunks.file / images.path / "
        "settings.value); 'simile index' also prints sqlite3.DatabaseError (store.gc)"
    ),
)
def test_catalogue_rows_zeroed(workdir):
    cases = [("catalog.sqlite", "zero a b-tree's rows:chunks")]
    out = fh.corruption(0, 0, workdir, cases=cases)
    _known_bug(out.failures, "IntegrityError: NOT NULL constraint failed")


@pytest.mark.xfail(
    strict=True,
    raises=KnownBug,
    reason=(
        "BUG (detection gap): damage inside the catalogue's SQLite indexes is not detected: "
        "with the rows of the unique index on images.path zeroed, queries answer without "
        "any error but differently from a clean build (the query photo is no longer found "
        "by its path and is extracted again); with images_status zeroed, queries say 'the "
        "index ... holds no usable image; run simile index' instead of naming the damage. "
        "SQLite keeps no checksums, and no reader runs PRAGMA quick_check / integrity_check"
    ),
)
def test_catalogue_index_zeroed(workdir):
    cases = [("catalog.sqlite", "zero a b-tree's rows:sqlite_autoindex_images_1")]
    out = fh.corruption(0, 0, workdir, cases=cases)
    _known_bug(out.failures, "SILENTLY WRONG ANSWERS")


def test_real_full_disk_while_a_chunk_is_written(workdir):
    """Found by the harness (numpy reports the short write of a full disk as "N requested
    and M written", without ENOSPC: it was a traceback); fixed, kept as a regression."""
    out = fh.disk_full(1, 0, workdir, select=lambda *case: False, frees=[100_000])
    _survived(out)


@pytest.mark.xfail(
    strict=True,
    raises=KnownBug,
    reason=(
        "BUG: a disk with no space left at all is reported as a damaged catalogue, exit "
        "status 2, with the advice to repair it ('the catalogue ... is damaged or unreadable "
        "(catalog.sqlite: disk I/O error); run simile index ... --repair'), not as a full "
        "disk with exit status 1 (SQLite's SQLITE_IOERR on its -shm / -wal); while the disk "
        "stays full, queries fail with the same message"
    ),
)
def test_real_disk_already_full(workdir):
    out = fh.disk_full(1, 0, workdir, select=lambda *case: False, frees=[0])
    _skip_unless_mounted(out)
    _known_bug(out.failures, "disk I/O error")


def test_path_component_too_long(workdir):
    """Found by the harness (ENAMETOOLONG from pathlib's is_file / is_dir was a
    traceback); fixed, kept as a regression."""
    assert fh.bad_command_line(workdir, "very long path component") == []


def test_two_links_to_one_photo(workdir):
    """Found by the harness (the second of two links to one photo was passed over
    silently); fixed: it is listed as skipped, 'another name of ...'."""
    out = fh.broken_images(1, 0, workdir, kinds=["duplicate-links"])
    _survived(out)
