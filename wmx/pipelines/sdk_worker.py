"""Beam's SDK worker without its start-up lines: what the DirectRunner's
``--direct_running_mode=multi_processing`` workers run instead of
``python -m apache_beam.runners.worker.sdk_worker_main`` (`wmx.pipelines.direct_runner`).

Beam's worker module prints, per worker process and on every build, an import-time warning
about BigQuery client libraries, "Logging handler created.", "No semi_persistent_directory
found" and "Discarding unparseable args" on standard error: a Python logging call without a
handler configures one (``logging.basicConfig``) that writes everything the worker logs.
Here the root logger gets a standard-error handler before Beam is imported, so that none
is configured: it prints the worker's warnings and errors as ``basicConfig``'s would
(``WARNING:logger:message``), but not those start-up lines (`START_UP`). The launching
process drops the copies of the workers' records below ERROR that Beam forwards to it
(`wmx.pipelines.options.quiet_beam_logs`), so a step's warning prints here or nowhere.
Then Beam's ``main`` runs as it would. ``$WMX_BEAM_LOGS`` (which asks for
Beam's own logging, `wmx.pipelines.options`) leaves standard error as Beam has it.

The workers run `command`: the folder the launching process imported wmx from comes
first on their ``PYTHONPATH``, so that ``-m wmx.pipelines.sdk_worker`` (and the build's
steps, which the workers unpickle) find wmx there also where it is not installed (a job
run from a checkout puts the checkout on its own sys.path only): Beam waits forever for
a worker that exits at its start, so the build would hang.
"""
from __future__ import annotations

import logging
import os
import shlex
import sys

START_UP = ("apitools not found", "Logging handler created",
            "No semi_persistent_directory found", "Discarding unparseable args")
"""How the worker's start-up lines begin: Beam's, on every build, not printed."""


def command() -> str:
    """The worker command line, the SDK environment's payload (run by a POSIX shell).

    Returns:
        ``PYTHONPATH=<the folder holding this wmx>[:$PYTHONPATH] <python> -m
        wmx.pipelines.sdk_worker`` (this interpreter, quoted), the
        ``PYTHONPATH`` as this process has it now.
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return f"PYTHONPATH={shlex.quote(path)} {shlex.quote(sys.executable)} -m {__name__}"


class _NotStartUp(logging.Filter):
    """Passes the records that are not one of Beam's start-up lines (`START_UP`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether a record prints.

        Args:
            record: a record the worker logged.

        Returns:
            False when its message begins as one of `START_UP`, else True.
        """
        return not record.getMessage().startswith(START_UP)


def main() -> None:
    """Run Beam's SDK worker with standard error taking the worker's warnings and errors
    but not Beam's start-up lines (all of its logging with ``$WMX_BEAM_LOGS``)."""
    from wmx.pipelines.options import beam_logs_wanted
    if not beam_logs_wanted():
        quiet = logging.StreamHandler(sys.stderr)
        quiet.setLevel(logging.WARNING)
        quiet.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
        quiet.addFilter(_NotStartUp())
        logging.getLogger().addHandler(quiet)
    from apache_beam.runners.worker import sdk_worker_main
    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
