"""`wmx.cli.dispatch`: a `wmx` subcommand's failures under the error contract of every
command (`wmx.failures.report_failure`)."""
from __future__ import annotations

import errno

import pytest

from wmx.cli.dispatch import dispatch


def _raising(err):
    def cmd(args):
        raise err
    return cmd


@pytest.mark.parametrize("err, status", [
    (ValueError("no dataset 'x' in the store"), 2),
    (FileNotFoundError("no such run: runs/x"), 2),
    (FileExistsError("runs/x exists already; choose another --name"), 2),
    (OSError(errno.ENOSPC, "No space left on device", "d/f"), 1),
], ids=["value", "not-found", "exists", "disk-full"])
def test_expected_failures_are_one_line_and_a_status(err, status, capsys):
    assert dispatch({"go": _raising(err)}, "go", None) == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    if status == 2:
        assert lines[0] == f"error: {err}"


def test_a_bug_keeps_its_traceback_and_success_passes_through(capsys):
    with pytest.raises(KeyError):
        dispatch({"go": _raising(KeyError("bug"))}, "go", None)
    assert capsys.readouterr().err == ""
    assert dispatch({"go": lambda args: args}, "go", 3) == 3
