"""The `wmx` command: `wmx dataset ls|info|validate ...`, `wmx runs ls|info`, `wmx demo`."""
from __future__ import annotations

import os
import signal
import sys

from wmx.runs.cli_common import ArgumentParser


def call(func, args) -> int:
    """``func(args)``'s exit status, its output flushed; a reader that closed the output
    early (``wmx runs info X | head``) ends it quietly with 141 (128 + SIGPIPE, as a shell
    tool killed by the signal) instead of a BrokenPipeError traceback."""
    try:
        status = func(args)
        sys.stdout.flush()              # buffered output fails here, not at exit
        return status
    except BrokenPipeError:
        # nothing more can be written; keep the interpreter's final flush from failing too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    """Entry point of `wmx`; returns the exit status. From a command line (``argv``
    None) the process first restarts with huge pages (`wmx.runs.heap`)."""
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)
    args = build_parser().parse_args(argv)
    return call(args.func, args)


def build_parser() -> ArgumentParser:
    """The `wmx` command line: ``--home`` and the subcommands dataset, runs and demo."""
    from wmx.cli import dataset, demo, runs
    ap = ArgumentParser(prog="wmx", description="wmx: world-model RL in JAX; data tools")
    ap.add_argument("--home", default=None, help="wmx data root (default $WMX_HOME or ~/.wmx); "
                    "accepted before or after the subcommand")
    sub = ap.add_subparsers(dest="cmd", required=True)
    dataset.add_parser(sub)
    runs.add_parser(sub)
    demo.add_parser(sub)
    return ap


if __name__ == "__main__":
    sys.exit(main())
