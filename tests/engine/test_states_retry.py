"""A spurious CPython SystemError while numpy parses a header is read again
(:func:`engine.index.states.header_retried`)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from engine.index.states import header_retried, read_arrays

SPURIOUS = "AST constructor recursion depth mismatch (before=57, after=51)"


def test_a_spurious_recursion_depth_error_is_read_again():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise SystemError(SPURIOUS)
        return 42

    assert header_retried(flaky) == 42 and len(calls) == 3


def test_it_gives_up_after_three_tries_and_other_errors_go_at_once():
    calls = []

    def always():
        calls.append(1)
        raise SystemError(SPURIOUS)

    with pytest.raises(SystemError, match="recursion depth"):
        header_retried(always)
    assert len(calls) == 3
    calls.clear()

    def other():
        calls.append(1)
        raise SystemError("something else")

    with pytest.raises(SystemError, match="something else"):
        header_retried(other)
    assert len(calls) == 1


def test_read_arrays_reads_a_member_again(tmp_path, monkeypatch):
    buf = io.BytesIO()
    np.savez(buf, a=np.arange(3))
    real = np.lib.npyio.NpzFile.__getitem__
    failed = []

    def once(self, key):
        if not failed:
            failed.append(key)
            raise SystemError(SPURIOUS)
        return real(self, key)

    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", once)
    got = read_arrays(tmp_path, "state", {"part.npz": buf})
    assert failed == ["a"] and np.array_equal(got["a"], np.arange(3))
