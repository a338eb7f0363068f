"""Check a build job's Beam pipeline options before anything runs.

Beam itself drops an option it does not know with a log warning and fails
on an unknown runner with a traceback; a build job calls `check_beam_args`
first, so a misspelt option or runner is one clear error (exit 2) and
nothing is built.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator, Sequence

from wmx.pipelines.runners import RunnerError, resolve_runner
from wmx.sizes import noun_for


class BeamOptionsError(ValueError):
    """Unknown Beam pipeline options or runner."""


def check_beam_args(beam_args: Sequence[str], job_flags: Sequence[str] = ()) -> str:
    """Validate the Beam part of a build job's command line; returns the runner name.

    The runner (``--runner=...``, default DirectRunner) must be one Beam can
    create (its module is imported, which also declares its options), and
    every argument must be an option some PipelineOptions class declares.
    job_flags: the job's own flags, named in the error. Raises BeamOptionsError
    naming the unknown options or the runner, with what to do.
    """
    from apache_beam.options.pipeline_options import (PipelineOptions, StandardOptions,
                                                      _BeamArgumentParser)
    from apache_beam.runners.runner import create_runner
    args = list(beam_args)
    runner = PipelineOptions(args).view_as(StandardOptions).runner or "DirectRunner"
    try:
        _, path = resolve_runner(runner)
        create_runner(path)
    except RunnerError as e:
        raise BeamOptionsError(str(e)) from None
    except ValueError:
        raise BeamOptionsError(
            f"--runner={runner} is not a Beam runner; use one of "
            f"{', '.join(StandardOptions.KNOWN_RUNNER_NAMES)}, DaskRunner, or the dotted path of "
            "a PipelineRunner class") from None
    except ImportError as e:
        raise BeamOptionsError(
            f"--runner={runner} needs packages that are not installed ({e}); e.g. "
            "apache-beam[gcp] for DataflowRunner, dask and distributed for DaskRunner") from None
    except Exception as e:  # noqa: BLE001 - a runner that cannot even be created
        raise BeamOptionsError(f"--runner={runner} cannot be created: "
                               f"{type(e).__name__}: {e}") from None
    parser = _BeamArgumentParser(allow_abbrev=False)
    classes: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # noqa: SLF001 - what PipelineOptions itself does
    _, unknown = parser.parse_known_args(args)
    if unknown:
        own = f"; this job's own flags are {', '.join(job_flags)}" if job_flags else ""
        raise BeamOptionsError(
            f"unknown {noun_for(len(unknown), 'option')} {' '.join(unknown)}: neither this "
            "job's nor a Beam pipeline "
            f"option{own}. Beam options are written --name=value (e.g. "
            "--direct_num_workers=2, --runner=FlinkRunner --flink_master=HOST:PORT; Beam's "
            "PipelineOptions documentation lists them)")
    return runner


BEAM_LOGS_ENV = "WMX_BEAM_LOGS"
"""Set to 1 to see Beam's own INFO logging in a build (quiet_beam_logs does nothing)."""

_HARNESS_LEVEL = "--default_sdk_harness_log_level"


def beam_logs_wanted() -> bool:
    """Whether ``$WMX_BEAM_LOGS`` asks for Beam's own INFO logging (any value but "", "0")."""
    return os.environ.get(BEAM_LOGS_ENV, "") not in ("", "0")


def with_quiet_workers(beam_args: Sequence[str]) -> list[str]:
    """``beam_args`` plus ``--default_sdk_harness_log_level=WARNING``, so that Beam's SDK
    worker processes (``--direct_running_mode=multi_processing``) log warnings only.

    Args:
        beam_args: the Beam part of a build job's command line.

    Returns:
        A new list; ``beam_args`` itself where it sets the level already or
        ``$WMX_BEAM_LOGS`` asks for Beam's logs (copied).
    """
    args = list(beam_args)
    if beam_logs_wanted() or any(a.split("=", 1)[0] == _HARNESS_LEVEL for a in args):
        return args
    return args + [f"{_HARNESS_LEVEL}=WARNING"]


_WORKER_LOG = "apache_beam.runners.portability.local_job_service"


class _DropForwardedWorkerLogs(logging.Filter):
    """Drops the worker log lines the job service repeats ("Worker: severity: WARN ...")
    below ERROR: each worker process has printed them on stderr already."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "Worker: %s" and record.levelno < logging.ERROR)


@contextlib.contextmanager
def quiet_beam_logs() -> Iterator[None]:
    """Raise the ``apache_beam`` loggers to WARNING in this process for the block (Beam's
    INFO lines, such as "Converting string literal type hint to Any", under a CLI that
    logs at INFO), and drop the job service's repeats of the worker processes' warnings;
    both are undone afterwards. Nothing changes where ``$WMX_BEAM_LOGS`` asks for Beam's
    logs."""
    log, worker_log = logging.getLogger("apache_beam"), logging.getLogger(_WORKER_LOG)
    level, drop = log.level, _DropForwardedWorkerLogs()
    if not beam_logs_wanted():
        log.setLevel(logging.WARNING)
        worker_log.addFilter(drop)
    try:
        yield
    finally:
        log.setLevel(level)
        worker_log.removeFilter(drop)
