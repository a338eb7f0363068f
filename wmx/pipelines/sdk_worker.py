"""Beam's SDK worker without its start-up lines: what the DirectRunner's
``--direct_running_mode=multi_processing`` workers run instead of
``python -m apache_beam.runners.worker.sdk_worker_main`` (`wmx.pipelines.direct_runner`).

Beam's worker module prints, per worker process and on every build, an import-time warning
about BigQuery client libraries, "Logging handler created.", "No semi_persistent_directory
found" and "Discarding unparseable args" on standard error: a Python logging call without a
handler configures one (``logging.basicConfig``) that writes everything the worker logs.
Here the root logger gets a standard-error handler for errors only before Beam is imported,
so that none is configured; the worker's records still reach the launching process through
Beam's own logging channel (the FnApi log handler the worker adds), and an error still
prints here. Then Beam's ``main`` runs as it would. ``$WMX_BEAM_LOGS`` (which asks for
Beam's own logging, `wmx.pipelines.options`) leaves standard error as Beam has it.
"""
from __future__ import annotations

import logging
import sys

COMMAND = f"{sys.executable} -m {__name__}"
"""The worker command line (the SDK environment's payload)."""


def main() -> None:
    """Run Beam's SDK worker with standard error taking the worker's errors only (all of
    its logging with ``$WMX_BEAM_LOGS``)."""
    from wmx.pipelines.options import beam_logs_wanted
    if not beam_logs_wanted():
        quiet = logging.StreamHandler(sys.stderr)
        quiet.setLevel(logging.ERROR)
        logging.getLogger().addHandler(quiet)
    from apache_beam.runners.worker import sdk_worker_main
    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
