"""Beam job: pool the store's episode sets of any TaskSet into a dataset.

    beam run pipelines/build_taskset.py --taskset TASKSET.json [--home DIR]
        [--sources SET ...] [--num_shards N] [--dask_workers N] [beam options]

The TaskSet JSON is `wmx.schemas.taskset.TaskSet.to_json()`. Its name is the
dataset's, so it must be a valid dataset name that other datasets do not use:
not ending in -synth (`wmx dataset synth`), and not mt19 or mt19-* (build_mt19.py's;
`wmx.pipelines.sources.check_custom_taskset_name`). Beam options
(--runner, --direct_num_workers, --direct_running_mode, --dask_client_address,
...) pass through; `--runner` takes a short name (direct, dask, flink, spark,
dataflow; wmx.pipelines.runners).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


BEAM_EPILOG = """Beam options that pass through to Beam (the ones README and docs/datasets.md use):
  --runner=NAME                  direct (default), dask, flink, spark, dataflow, or a
                                 runner class path
  --direct_num_workers=N         DirectRunner: N workers (0: one per CPU)
  --direct_running_mode=MODE     DirectRunner: in_memory (default), multi_threading or
                                 multi_processing
  --dask_client_address=H:P      --runner=dask: the scheduler of an existing Dask cluster
  --default_sdk_harness_log_level=LEVEL
                                 Beam's SDK workers' log level (a build gives WARNING)
WMX_BEAM_LOGS=1 shows Beam's own INFO logging (off by default)."""


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--home", default=None, help="wmx data root (default $WMX_HOME or ~/.wmx)")
    ap.add_argument("--sources", nargs="+", default=None,
                    help="episode sets to pool (set id, <task>/<set-id>, hash prefix or "
                         "path); default: every set of each task")
    ap.add_argument("--num_shards", type=int, default=None,
                    help="ArrayRecord shards (default ceil(episodes/512)); the content "
                         "hash does not depend on it")
    ap.add_argument("--dask_workers", type=int, default=None,
                    help="with --runner=dask and no --dask_client_address: worker "
                         "processes of the local Dask cluster started for the build "
                         "(default: the CPU count)")


def run(taskset, args, beam_args) -> int:
    """Build ``taskset``'s dataset (the jobs' common body); returns the exit status: 0 built,
    2 bad input (nothing written), 1 a failure while building (one line, nothing
    written), 128 + the signal's number after a SIGINT (Ctrl-C) or SIGTERM, which stops
    the build at once and writes nothing (`wmx.pipelines.interrupt`). Beam's own INFO
    logging is off, in the SDK worker processes too, unless $WMX_BEAM_LOGS=1
    (`wmx.pipelines.options.quiet_beam_logs`)."""
    from wmx.pipelines.interrupt import BuildInterrupted, guard_build
    from wmx.pipelines.options import quiet_beam_logs, with_quiet_workers
    try:
        with guard_build(), quiet_beam_logs():
            return _run(taskset, args, with_quiet_workers(beam_args))
    except BuildInterrupted as e:
        print(f"error: {e}: the build stopped and nothing was written (its staging folder "
              "is removed); run the same command again to build", file=sys.stderr)
        return 128 + e.signum


def _run(taskset, args, beam_args) -> int:
    from wmx.paths import wmx_home
    from wmx.pipelines.options import check_beam_args
    from wmx.pipelines.interrupt import signal_name
    from wmx.pipelines.runners import RunnerError, parse_runner_args
    from wmx.pipelines.sources import (BuildInputError, build_failure, check_writable_root,
                                       make_plan, run_build_result)
    from wmx.sizes import counted
    try:
        ra = parse_runner_args(beam_args, args.dask_workers)
        check_beam_args(ra.beam_args, ["--home", "--tasks", "--taskset", "--sources",
                                       "--num_shards", "--dask_workers"])
        plan = make_plan(wmx_home(args.home), taskset, args.sources, args.num_shards,
                         runner=ra.name)
        check_writable_root(plan)
    except (BuildInputError, RunnerError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(s.num_episodes for s in plan.sources)
    dups = sum(len(s.skip) for s in plan.sources)
    where = " (Beam's FnApiRunner, never Prism)" if ra.name == "DirectRunner" else ""
    if ra.is_dask:
        where = (f" on the Dask cluster at {ra.dask_address}" if ra.dask_address else
                 f" on a local Dask cluster of "
                 f"{counted(ra.dask_workers, 'worker process', 'worker processes')}")
    print(f"building {plan.name}: {counted(len(plan.sources), 'episode set')}, "
          f"{counted(n - dups, 'episode')}, {counted(plan.num_shards, 'shard')}, {ra.name}{where}" +
          (f" ({counted(dups, 'duplicate episode')} dropped, listed in the manifest's "
           "builder.duplicates)" if dups else "") +
          (f" ({counted(len(plan.shared), 'episode')} held by several tasks' sets, pooled "
           "under each, listed in the manifest's builder.shared)" if plan.shared else ""),
          flush=True)
    # Beam logs a failing step's traceback before it re-raises; the failure is reported
    # below instead: one line for an expected one, the traceback for any other
    beam_log = logging.getLogger("apache_beam.runners.common")
    level = beam_log.level
    beam_log.setLevel(logging.CRITICAL)
    try:
        res = run_build_result(plan, beam_args, args.dask_workers)
    except (RunnerError, BuildInputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - expected failures become one line, others re-raised
        line = build_failure(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1
    finally:
        beam_log.setLevel(level)
    print(f"dataset {plan.name}@{res.path.name[:10]} at {res.path} ({res.seconds:.1f} s, "
          f"shards written by {counted(len(res.writers), 'process', 'processes')})")
    if res.late_signal is not None:
        print(f"note: {signal_name(res.late_signal)} came as the finished dataset was put in "
              "place: it is complete and kept", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1], epilog=BEAM_EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--taskset", required=True, help="TaskSet JSON file")
    add_common_args(ap)
    args, beam_args = ap.parse_known_args(argv)
    from wmx.pipelines.sources import check_custom_taskset_name
    from wmx.schemas.taskset import TaskSet
    try:
        taskset = TaskSet.from_json(Path(args.taskset).read_text())
        check_custom_taskset_name(taskset.name)      # before any Beam work
    except (OSError, ValueError) as e:
        print(f"error: --taskset {args.taskset}: {e}", file=sys.stderr)
        return 2
    return run(taskset, args, beam_args)


if __name__ == "__main__":
    sys.exit(main())
