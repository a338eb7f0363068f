"""Run one subcommand of a `wmx` command group with the CLI's error contract."""
from __future__ import annotations

from typing import Any, Callable, Mapping


def dispatch(commands: Mapping[str, Callable[[Any], int]], name: str, args: Any) -> int:
    """Run ``commands[name](args)`` and return its exit status.

    The error contract of every command (`wmx.failures.report_failure`, lines
    without a program name): an expected failure of the machine (disk, memory,
    permissions; see `wmx.failures.describe`) prints one line and returns 1; bad
    input (`wmx.failures.BAD_INPUT`: ValueError, FileNotFoundError,
    FileExistsError) prints its message and returns 2; anything else is re-raised (a
    closed pipe too: `wmx.cli.main.call` ends the command quietly)."""
    from wmx.failures import report_failure
    try:
        return commands[name](args)
    except BrokenPipeError:     # the reader left: `wmx.cli.main.call` ends it quietly
        raise
    except Exception as e:  # noqa: BLE001 - only the expected failures, the rest re-raised
        status = report_failure(None, e)
        if status is None:
            raise
        return status
