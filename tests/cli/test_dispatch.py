"""`wmx.cli.dispatch`: a `wmx` subcommand's failures under the error contract of every
command (`wmx.failures.report_failure`); a reader that closes the output early ends the
command quietly."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

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


PROG = """
import sys
from wmx.cli.dispatch import dispatch
from wmx.cli.main import call
def talk(args):
    for _ in range(int(sys.argv[1])):
        print("a line of a long listing")
    return 0
sys.exit(call(lambda a: dispatch({"talk": talk}, "talk", a), None))
"""


@pytest.mark.parametrize("buffered", [True, False])
def test_a_closed_pipe_ends_the_command_quietly_with_141(buffered):
    """`wmx ... | true` (the reader gone before a line is written) and `wmx ... | head` (gone
    after a few): exit 141 and nothing on stderr, whether stdout is buffered (the failure
    then comes at the final flush) or not (at the first print)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    for lines, read in ((10, 0), (200_000, 64)):
        p = subprocess.Popen([sys.executable, "-c", PROG, str(lines)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env)
        if read:
            assert p.stdout.read(read).startswith(b"a line")
        p.stdout.close()                    # before the child has imported anything
        err = p.stderr.read().decode()
        assert (p.wait(timeout=60), err) == (141, ""), (lines, buffered)
