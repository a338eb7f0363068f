"""`evaluate`: evaluate a trained run's newest checkpoint and write a report, or compare runs.

Examples::

    evaluate --run ~/.wmx/runs/tdmpc2-mt19-20260101-120000 --episodes 10
    evaluate --run ~/.wmx/runs/<run> --tasks cartpole-balance cheetah-run --out /tmp/rep
    evaluate --runs ~/.wmx/runs/<a> ~/.wmx/runs/<b> --out /tmp/a-vs-b
    evaluate --run ~/.wmx/runs/<run> --video 2 --logger tensorboard

``--run``: every task of an offline run's TaskSet (or the ``--tasks``
subset), or an online run's task, is evaluated with ``--episodes`` eval_mode
episodes per seed from fresh initial states on the real Playground envs (the
run's T and action repeat); the report (report.md, report.json,
per_task.csv, aggregates.csv, scores.png, learning_curves.png) goes to
``--out`` (default ``<RUN_DIR>/report/``); ``--video N`` adds MP4s of the
first N episodes of the run's first seed per task (videos/, linked from
report.md). ``--runs``: a comparison of the
runs' reports (a run without one is evaluated first; a report is reused only
when it has the --episodes, rollout keys and newest checkpoint asked, and
every run must share a task with another). Standard output is one
line, the path of the written report.md (compare.md for ``--runs``); progress
goes to standard error. Bad input exits with status 2 and writes nothing; an
expected failure while running (no space left, out of memory) exits with
status 1 and one line, leaving no partial report.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from wmx.paths import wmx_home
from wmx.runs.cli_common import (ArgumentParser, add_cache_argument, configure_logging,
                                  enable_compile_cache)
from wmx.runs.config_file import add_config_argument, parse_with_config
from wmx.sizes import counted

DESCRIPTION = __doc__.split("\n\n")[0]
log = logging.getLogger("wmx.evaluate")

DEFAULT_EPISODES = 10
"""eval_mode episodes per task and seed when --episodes is not given (the papers' 10)."""


class UsageError(ValueError):
    """Bad command-line input (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="evaluate", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1].replace("``", "").replace("::", ":")
        + "\nScores: normalised score = return / 10 (DMC, 0-100); aggregates over tasks\n"
          "(mean, median, IQM) carry 95% bootstrap intervals over tasks. See\n"
          "docs/evaluation.md.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", metavar="RUN_DIR",
                      help="a run directory written by train_online or train_offline, or its "
                           "name under <home>/runs (as `wmx runs ls` lists it)")
    what.add_argument("--runs", metavar="RUN_DIR", nargs="+",
                      help="compare these runs, directories or names (each run's report/ is "
                           "read, or written first)")
    p.add_argument("--episodes", type=int, default=None,
                   help=f"eval_mode episodes per task and seed (default {DEFAULT_EPISODES}, the "
                        "paper's; with --runs: the count of the runs' existing reports when "
                        "they agree)")
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
    p.add_argument("--source-share", type=float, default=None, metavar="X",
                   help="with --runs: count, per run, the tasks whose source learned that reach "
                        "X times the source's final return (default 0.8)")
    p.add_argument("--video", type=int, default=0, metavar="N",
                   help="with --run: render the first N evaluation episodes of the run's first "
                        "seed per task to <out>/videos/<task>_seed<k>_ep<i>.mp4, linked from "
                        "report.md (default 0: none; needs an OpenGL backend, MUJOCO_GL, see "
                        "README.md); returns are unchanged")
    p.add_argument("--logger", default=None, metavar="NAMES",
                   help="with --video: also log the videos to tensorboard (<out>/tensorboard/, "
                        "animated GIFs) and/or wandb (a W&B run <run>-evaluate; offline mode "
                        "without an API key or network), comma-separated; csv (the report "
                        "itself) is always on")
    add_cache_argument(p)
    add_config_argument(p, trainer=False)
    return p


def run_home(home: str | Path | None, run_dir: Path) -> Path:
    """The data root of a run: ``home`` when given, else ``<home>`` of a run directory
    ``<home>/runs/<name>`` (as given: a symbolic link there to a run kept elsewhere
    counts; `wmx.runs.listing.home_of_run`), else $WMX_HOME or ~/.wmx."""
    from wmx.runs.listing import home_of_run
    if home is not None:
        return wmx_home(home)
    found = home_of_run(run_dir)
    return found if found is not None else wmx_home(None)


def _check_out(out: Path, force: bool) -> None:
    """Refuse a report directory ``out`` that cannot be written, before anything is evaluated.

    Raises:
      UsageError: ``out`` is a file, exists without ``force``, exists and is neither
        empty nor a report or comparison (`report_dir.check_target`), or its
        nearest existing folder is not writable (a read-only filesystem or
        missing permissions).
    """
    from wmx.evaluate.report_dir import check_target
    try:
        check_target(out, force)
    except (ValueError, FileExistsError) as e:
        raise UsageError(str(e)) from None
    from wmx.paths import nearest_existing
    parent = nearest_existing(out.parent)
    if parent is not None and (not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK)):
        raise UsageError(f"--out {out} cannot be written: {parent} is not a writable folder "
                         "(a read-only filesystem, a file or missing permissions); pass --out "
                         "a directory in a writable place")


def _check_video(video: int, episodes: int, logger: str | None) -> tuple[str, ...]:
    """The loggers of ``--logger`` (`parse_loggers`), after the --video checks."""
    from wmx.runs.loggers import parse_loggers
    if video < 0:
        raise UsageError(f"--video must be >= 0 (episodes to render per task), got {video}")
    if video > episodes:
        raise UsageError(f"--video {video} is more than --episodes {episodes}; render at most "
                         "the evaluated episodes")
    names = parse_loggers(logger)
    if len(names) > 1 and not video:
        raise UsageError(f"--logger {logger} logs the evaluation videos: add --video N, or "
                         "omit --logger")
    return names


def _media(recordings, loggers, info, report):
    """``write_report``'s media step: render the videos, then log them."""
    def media(d: Path) -> dict:
        from wmx.evaluate.video import write_videos
        from wmx.evaluate.video_loggers import log_videos
        videos = write_videos(recordings, d)
        extra = {"videos": videos}
        if len(loggers) > 1:
            x = "env_steps" if info.kind == "online" else "updates"
            step = (info.env_steps if info.kind == "online" else info.updates) or 0
            extra["loggers"] = log_videos(loggers, videos, d, run_name=info.name,
                                          run_dir=info.run_dir, x=x, step=step,
                                          config={"run": report["run"],
                                                  "evaluation": report["evaluation"]})
        return extra
    return media


def evaluate_to_report(run_dir: str | Path, *, episodes: int = 10, tasks=None,
                       seeds_from_checkpoint: bool = False, out: str | Path | None = None,
                       home: str | Path | None = None, force: bool = False,
                       env_fn=None, compile_cache: bool = True, video: int = 0,
                       logger: str | None = None) -> Path:
    """Evaluate ``run_dir`` and write its report; returns the path of report.md.

    The Python entry of ``evaluate --run`` (see the module doc); ``env_fn``
    replaces the evaluation envs (tests); ``compile_cache`` False turns off
    the persistent compilation cache in ``<home>/cache/jax``; ``video`` N
    renders the first N episodes of the first seed per task into the report
    (``logger``: "tensorboard", "wandb", comma-separated, also logs them).
    Raises UsageError / RunError (both ValueError) for bad input, and
    NoGLBackend (a ValueError) when ``video`` > 0 and no OpenGL backend
    renders, before anything is written; FileExistsError for an existing
    ``out`` without ``force``.
    """
    from wmx.evaluate.report import build_report, write_report
    from wmx.evaluate.runs import check_renderable, evaluate_run, open_run, select_tasks
    if episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {episodes}")
    loggers = _check_video(video, episodes, logger)
    info = open_run(run_dir)
    chosen = select_tasks(info, tasks)
    out = Path(out).expanduser().resolve() if out is not None else info.run_dir / "report"
    _check_out(out, force)
    backend = None
    if video:
        from wmx.evaluate.gl_backend import choose_gl_backend
        backend = choose_gl_backend()         # before the envs import mujoco
        check_renderable(info, chosen, env_fn)
    home = run_home(home, run_dir)          # the path as given: a link's home counts
    enable_compile_cache(home, compile_cache)
    log.info("evaluating %s run %s at checkpoint %s: tasks %s", info.kind, info.run_dir,
             info.checkpoint.name, list(chosen))
    returns, meta, recordings = evaluate_run(info, chosen, episodes,
                                             seeds_from_checkpoint=seeds_from_checkpoint,
                                             env_fn=env_fn, video=video)
    if video:
        meta = {**meta, "video": {"episodes": video, "seed": info.seeds[0],
                                  "gl_backend": backend}}
        log.info("rendering %s per task with MUJOCO_GL=%s ...", counted(video, "video"),
                 backend)
    report = build_report(info, returns, meta, home)
    media = _media(recordings, loggers, info, report) if video else None
    return write_report(report, out, force, media)


def run_path(ref: str, home: str | None) -> str:
    """``ref`` as a run directory: a run name under ``<home>/runs`` or a path, resolved by
    `wmx.runs.listing.resolve_run` (as ``wmx runs`` takes it); ``ref`` unchanged when it
    is a path that is not a run, so that `open_run` says what is wrong with it. Raises
    UsageError naming both places looked in when neither exists."""
    from wmx.runs.listing import resolve_run
    try:
        return str(resolve_run(ref, wmx_home(home)))
    except FileNotFoundError as e:
        if not Path(ref).expanduser().exists():
            raise UsageError(str(e)) from None
        return ref


def _run(args: argparse.Namespace) -> Path:
    if args.source_share is not None:
        raise UsageError("--source-share applies to --runs only (a comparison's count of "
                         "tasks near their source); give it with --runs")
    episodes = DEFAULT_EPISODES if args.episodes is None else args.episodes
    return evaluate_to_report(args.run, episodes=episodes, tasks=args.tasks,
                              seeds_from_checkpoint=args.seeds_from_checkpoint, out=args.out,
                              home=args.home, force=args.force,
                              compile_cache=not args.no_compile_cache, video=args.video,
                              logger=args.logger)


def _mismatch_error(stale: dict[Path, dict[str, str]], reports: list[dict], episodes: int,
                    args: argparse.Namespace) -> UsageError:
    """The one-line refusal of run reports that are not the evaluation asked for.

    Args:
      stale: run directory -> how its report differs (`compare.report_mismatch`).
      reports: every report that would be reused (the stale ones included).
      episodes: the episode count asked for (--episodes, or its default).
    Returns:
      The UsageError naming each report's differences and the fixes: re-evaluate
      (``--force`` replaces the run's report), or, when every report is of the
      newest checkpoint and of one evaluation, ask for that one.
    """
    def flags(episodes: int, keys: str) -> str:
        return f"--episodes {episodes}" + (" --seeds-from-checkpoint" if keys == "checkpoint"
                                          else "")
    asked = "checkpoint" if args.seeds_from_checkpoint else "fresh"
    what = "; ".join(f"{d}/report has {' and '.join(why.values())}"
                     for d, why in stale.items())
    run = next(iter(stale)) if len(stale) == 1 else "RUN_DIR"
    fix = (f"re-evaluate {'it' if len(stale) == 1 else 'each'} with `evaluate --run {run} "
           f"{flags(episodes, asked)} --force` (replaces its report)")
    made = {(r["evaluation"]["episodes"], r["evaluation"]["keys"]) for r in reports}
    if len(made) == 1 and not any("checkpoint" in why for why in stale.values()):
        fix += f", or compare at the reports' own evaluation: {flags(*made.pop())}"
    return UsageError(f"--runs: {what}; one comparison holds one evaluation per run and "
                      f"task: {fix}")


def _runs(args: argparse.Namespace) -> Path:
    """``evaluate --runs``: every check (runs, reports, shared tasks, --out) before any
    evaluation; then the runs without a report are evaluated and the comparison written."""
    from wmx.checkpoint import newest_intact
    from wmx.evaluate.compare import (NOT_EVALUATED, SOURCE_SHARE, check_share,
                                      check_shared_tasks, label_names, report_mismatch,
                                      write_comparison)
    from wmx.evaluate.report import load_report
    from wmx.evaluate.runs import POLICY_ITEMS, RunError, open_run
    if args.out is None:
        raise UsageError("--runs needs --out DIR (where the comparison is written)")
    if args.tasks is not None:
        raise UsageError("--tasks applies to --run only; evaluate a subset with "
                         "`evaluate --run RUN_DIR --tasks ...` first, then compare")
    if args.video or args.logger is not None:
        raise UsageError("--video and --logger apply to --run only; render a run's videos "
                         "with `evaluate --run RUN_DIR --video N` first, then compare")
    if args.episodes is not None and args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    share = SOURCE_SHARE if args.source_share is None else args.source_share
    try:
        check_share(share)
    except ValueError:
        raise UsageError(f"--source-share must be a number above 0, got "
                         f"{args.source_share}") from None
    resolved = [Path(r).expanduser().resolve() for r in args.runs]
    given = dict(zip(resolved, args.runs))     # a link under <home>/runs names the home
    twice = sorted({str(r) for r in resolved if resolved.count(r) > 1})
    if twice:
        raise UsageError(f"--runs names {', '.join(twice)} more than once; give each run once")
    out = Path(args.out).expanduser().resolve()
    _check_out(out, args.force)
    keys = "checkpoint" if args.seeds_from_checkpoint else "fresh"
    reports = {r: load_report(r / "report") for r in resolved
               if (r / "report" / "report.json").is_file()}
    episodes = args.episodes
    if episodes is None:           # the reports' own count when they agree
        made = {int(rep["evaluation"]["episodes"]) for rep in reports.values()}
        episodes = made.pop() if len(made) == 1 else DEFAULT_EPISODES
    tasks, stale = [], {}          # every check before any evaluation
    for run_dir in resolved:
        if run_dir in reports:
            rep = reports[run_dir]
            found = newest_intact(run_dir, POLICY_ITEMS, log)
            why = report_mismatch(rep, episodes=episodes, keys=keys,
                                  checkpoint_step=int(found[0].name) if found else None)
            if why:
                stale[run_dir] = why
            tasks.append([t["task"] for t in rep["per_task"]])
            continue
        try:
            info = open_run(run_dir)
        except RunError as err:
            raise RunError(f"{err} (it has no report/ to compare either)") from None
        tasks.append(list(info.tasks))
    if stale:
        raise _mismatch_error(stale, list(reports.values()), episodes, args)
    labels = label_names([reports[r]["run"]["name"] if r in reports else r.name
                          for r in resolved])
    check_shared_tasks(dict(zip(labels, tasks)))
    union = list(dict.fromkeys(t for ts in tasks for t in ts))
    for lab, ts in zip(labels, tasks):
        if set(ts) != set(union):
            log.warning("%s has no evaluation of %s: its cells show %r", lab,
                        ", ".join(t for t in union if t not in ts), NOT_EVALUATED)
    for run_dir in resolved:
        if run_dir not in reports:
            log.info("%s has no report: evaluating it first", run_dir)
            evaluate_to_report(given[run_dir], episodes=episodes,
                               seeds_from_checkpoint=args.seeds_from_checkpoint,
                               home=args.home, compile_cache=not args.no_compile_cache)
            reports[run_dir] = load_report(run_dir / "report")
    return write_comparison([reports[r] for r in resolved], out, args.force, share)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``evaluate`` console script; returns the exit status
    (0 success, 2 bad input, with the reason on standard error). From a command line
    (``argv`` None) the process first restarts with huge pages (`wmx.runs.heap`)."""
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)
    configure_logging()
    parser = build_parser()
    try:
        args = parse_with_config(parser, sys.argv[1:] if argv is None else
                                 [str(a) for a in argv])
    except SystemExit as exc:            # --help (0) and argparse usage errors (2)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    try:
        if args.home is not None:
            wmx_home(args.home)               # a file as --home: refused before anything runs
        if args.run is not None:
            args.run = run_path(args.run, args.home)
        else:
            args.runs = [run_path(r, args.home) for r in args.runs]
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
