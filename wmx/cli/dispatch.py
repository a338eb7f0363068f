"""Run one subcommand of a `wmx` command group with the CLI's error contract."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable, Mapping


def dispatch(commands: Mapping[str, Callable[[Any], int]], name: str, args: Any) -> int:
    """Run ``commands[name](args)`` and return its exit status.

    The error contract of every command (`wmx.failures.report_failure`, lines
    without a program name): an expected failure of the machine (disk, memory,
    permissions; see `wmx.failures.describe`) prints one line and returns 1; bad
    input (`wmx.failures.BAD_INPUT`: ValueError, FileNotFoundError,
    FileExistsError) prints its message and returns 2; a reader that closed the output
    early (``wmx runs info X | head``) ends it quietly with 141 (128 + SIGPIPE, as a shell
    tool killed by the signal); anything else is re-raised."""
    from wmx.failures import report_failure
    try:
        return commands[name](args)
    except BrokenPipeError:
        # nothing more can be written; keep the interpreter's final flush from failing too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as e:  # noqa: BLE001 - only the expected failures, the rest re-raised
        status = report_failure(None, e)
        if status is None:
            raise
        return status
