"""Run one subcommand of a `wmx` command group with the CLI's error contract."""
from __future__ import annotations

import sys
from typing import Any, Callable, Mapping


def dispatch(commands: Mapping[str, Callable[[Any], int]], name: str, args: Any) -> int:
    """Run ``commands[name](args)`` and return its exit status.

    An expected failure of the machine (disk, memory, permissions; see
    `wmx.failures.describe`) prints one line and returns 1; a ValueError or
    FileNotFoundError (a bad name, path or value) prints its message and
    returns 2; anything else is re-raised."""
    from wmx.failures import describe
    try:
        return commands[name](args)
    except Exception as e:  # noqa: BLE001 - only the expected failures, the rest re-raised
        line = describe(e)
        if line is not None:
            print(f"error: {line}", file=sys.stderr)
            return 1
        if isinstance(e, (ValueError, FileNotFoundError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise
