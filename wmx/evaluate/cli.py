"""`evaluate`: evaluate a trained run's newest checkpoint and write a report, or compare runs.

Examples::

    evaluate --run ~/.wmx/runs/tdmpc2-mt19-20260101-120000 --episodes 10
    evaluate --run ~/.wmx/runs/<run> --tasks cartpole-balance cheetah-run --out /tmp/rep
    evaluate --runs ~/.wmx/runs/<a> ~/.wmx/runs/<b> --out /tmp/a-vs-b

``--run``: every task of an offline run's TaskSet (or the ``--tasks``
subset), or an online run's task, is evaluated with ``--episodes`` eval_mode
episodes per seed from fresh initial states on the real Playground envs (the
run's T and action repeat); the report (report.md, report.json,
per_task.csv, aggregates.csv, scores.png, learning_curves.png) goes to
``--out`` (default ``<RUN_DIR>/report/``). ``--runs``: a comparison of the
runs' reports (a run without one is evaluated first). Standard output is one
line, the path of the written report.md (compare.md for ``--runs``); progress
goes to standard error. Bad input exits with status 2 and writes nothing; an
expected failure while running (no space left, out of memory) exits with
status 1 and one line, leaving no partial report.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from wmx.paths import wmx_home
from wmx.runs.cli_common import add_cache_argument, enable_compile_cache
from wmx.runs.config_file import add_config_argument, parse_with_config

DESCRIPTION = __doc__.split("\n\n")[0]
log = logging.getLogger("wmx.evaluate")


class UsageError(ValueError):
    """Bad command-line input (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="evaluate", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1].replace("``", "").replace("::", ":")
        + "\nScores: normalised score = return / 10 (DMC, 0-100); aggregates over tasks\n"
          "(mean, median, IQM) carry 95% bootstrap intervals over tasks. See\n"
          "docs/evaluation.md.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", metavar="RUN_DIR",
                      help="a run directory written by train_online or train_offline")
    what.add_argument("--runs", metavar="RUN_DIR", nargs="+",
                      help="compare these runs (each run's report/ is read, or written first)")
    p.add_argument("--episodes", type=int, default=10,
                   help="eval_mode episodes per task and seed (default 10, the paper's)")
    p.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="with --run: evaluate only these tasks of the run (default: all)")
    p.add_argument("--seeds-from-checkpoint", action="store_true",
                   help="roll out with the checkpoint's seed keys and its last evaluation index "
                        "(repeats the trainer's final evaluation when --episodes equals the "
                        "run's); default: the evaluate command's own key stream per seed")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="report directory (--run: default <RUN_DIR>/report; required with "
                        "--runs)")
    p.add_argument("--home", default=None,
                   help="data root holding the dataset and episode sets (default: the run's "
                        "<home> when RUN_DIR is <home>/runs/<name>, else $WMX_HOME or ~/.wmx)")
    p.add_argument("--force", action="store_true", help="replace an existing report directory")
    add_cache_argument(p)
    add_config_argument(p)
    return p


def run_home(home: str | Path | None, run_dir: Path) -> Path:
    """The data root of a run: ``home`` when given, else ``<home>`` of a run directory
    ``<home>/runs/<name>``, else $WMX_HOME or ~/.wmx."""
    if home is not None:
        return wmx_home(home)
    run_dir = Path(run_dir).expanduser().resolve()
    if run_dir.parent.name == "runs":
        return run_dir.parent.parent
    return wmx_home(None)


def _check_out(out: Path, force: bool) -> None:
    from wmx.evaluate.report import recover_dir
    recover_dir(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a report directory; give a directory "
                         "(new, or an existing report with --force)")
    if out.exists() and not force:
        raise UsageError(f"{out} exists already; pass --force to replace it, or --out another "
                         "directory")


def evaluate_to_report(run_dir: str | Path, *, episodes: int = 10, tasks=None,
                       seeds_from_checkpoint: bool = False, out: str | Path | None = None,
                       home: str | Path | None = None, force: bool = False,
                       env_fn=None, compile_cache: bool = True) -> Path:
    """Evaluate ``run_dir`` and write its report; returns the path of report.md.

    The Python entry of ``evaluate --run`` (see the module doc); ``env_fn``
    replaces the evaluation envs (tests); ``compile_cache`` False turns off
    the persistent compilation cache in ``<home>/cache/jax``. Raises UsageError / RunError (both
    ValueError) for bad input before anything is written, FileExistsError
    for an existing ``out`` without ``force``.
    """
    from wmx.evaluate.report import build_report, write_report
    from wmx.evaluate.runs import evaluate_run, open_run, select_tasks
    if episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {episodes}")
    info = open_run(run_dir)
    chosen = select_tasks(info, tasks)
    out = Path(out).expanduser().resolve() if out is not None else info.run_dir / "report"
    _check_out(out, force)
    home = run_home(home, info.run_dir)
    enable_compile_cache(home, compile_cache)
    log.info("evaluating %s run %s at checkpoint %s: tasks %s", info.kind, info.run_dir,
             info.checkpoint.name, list(chosen))
    returns, meta = evaluate_run(info, chosen, episodes,
                                 seeds_from_checkpoint=seeds_from_checkpoint, env_fn=env_fn)
    report = build_report(info, returns, meta, home)
    return write_report(report, out, force)


def _run(args: argparse.Namespace) -> Path:
    return evaluate_to_report(args.run, episodes=args.episodes, tasks=args.tasks,
                              seeds_from_checkpoint=args.seeds_from_checkpoint, out=args.out,
                              home=args.home, force=args.force,
                              compile_cache=not args.no_compile_cache)


def _runs(args: argparse.Namespace) -> Path:
    from wmx.evaluate.compare import write_comparison
    from wmx.evaluate.report import load_report
    from wmx.evaluate.runs import RunError, open_run
    if args.out is None:
        raise UsageError("--runs needs --out DIR (where the comparison is written)")
    if args.tasks is not None:
        raise UsageError("--tasks applies to --run only; evaluate a subset with "
                         "`evaluate --run RUN_DIR --tasks ...` first, then compare")
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    out = Path(args.out).expanduser().resolve()
    _check_out(out, args.force)
    todo = []
    for r in args.runs:                      # every check before any evaluation
        run_dir = Path(r).expanduser().resolve()
        if (run_dir / "report" / "report.json").is_file():
            todo.append((run_dir, False))
            continue
        try:
            open_run(run_dir)
        except RunError as err:
            raise RunError(f"{err} (it has no report/ to compare either)") from None
        todo.append((run_dir, True))
    reports = []
    for run_dir, needs_eval in todo:
        if needs_eval:
            log.info("%s has no report: evaluating it first", run_dir)
            evaluate_to_report(run_dir, episodes=args.episodes,
                               seeds_from_checkpoint=args.seeds_from_checkpoint,
                               home=args.home, compile_cache=not args.no_compile_cache)
        reports.append(load_report(run_dir / "report"))
    return write_comparison(reports, out, args.force)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``evaluate`` console script; returns the exit status
    (0 success, 2 bad input, with the reason on standard error)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    parser = build_parser()
    try:
        args = parse_with_config(parser, sys.argv[1:] if argv is None else
                                 [str(a) for a in argv])
    except SystemExit as exc:            # --help (0) and argparse usage errors (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    try:
        path = _run(args) if args.run is not None else _runs(args)
    except Exception as err:  # noqa: BLE001 - only the expected failures, the rest re-raised
        from wmx.failures import report_failure
        status = report_failure("evaluate", err, "run the same command again")
        if status is None:
            raise
        return status
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
