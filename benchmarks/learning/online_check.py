"""The online learning check of any agent: does it learn a real Playground task on this machine?

Runs ``train_online`` (the agent's ``cpu`` preset by default) and records the
mean eval return and the training-episode return of every logged point, beside
the agent's published points (wmx/evaluate/reference/: TD-MPC2's eval curve,
DreamerV3's training-episode returns). Writes ``<out>/<agent>_online_<task>.json``
and a plot; ``docs/validation.md`` records the results. The entry points are
``tdmpc2_online.py`` and ``dreamerv3_online.py`` (each sets its agent's defaults);
``--budget-min`` stops after the first chunk past the budget (evaluated there
at a round's end; with ``--chunk-ticks`` a stop inside a round checkpoints
without evaluating), ``--resume RUN_DIR`` continues, ``--resume RUN_DIR
--report-only`` writes the result as far as the run got without training. The
check holds the run's lock while it trains (`wmx.runs.owner.hold_run`), as
``train_online`` does, so ``wmx runs`` shows it running and a second trainer of
the run fails at once.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from check_run import (parse, portable, read_json, record_resume_command, trained_where,
                       training, training_call)

from wmx.datasets.store import Store
from wmx.evaluate.plots import learning_curves
from wmx.evaluate.reference_curves import AGENT_LABELS, points_up_to, published_return
from wmx.paths import wmx_home
from wmx.train_online import cli as online_cli
from wmx.train_online.loop import run
from wmx.runs.online_config import OnlineRunConfig


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a run's metrics.csv (one read serves every curve and the wall time)."""
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def eval_curve(rows: list[dict[str, str]], kind: str = "eval") -> dict[int, list[float]]:
    """{env_steps: [mean return per seed]} of the ``kind`` rows ("eval": eval episodes;
    "train": the training episodes completed in each chunk) of `read_rows`'s rows."""
    out: dict[int, list[float]] = {}
    for r in rows:
        if r["kind"] == kind and r["return"] not in ("", None):
            out.setdefault(int(r["env_steps"]), []).append(float(r["return"]))
    return dict(sorted(out.items()))


def run_wall_s(rows: list[dict[str, str]]) -> float | None:
    """The run's own time in seconds (the largest ``wall_s`` of `read_rows`'s rows: training
    and evaluation over all its sessions), None before its first logged round."""
    walls = [float(r["wall_s"]) for r in rows if r.get("wall_s")]
    return max(walls) if walls else None


def plot(task: str, curve: dict[int, list[float]], path: Path, threshold: float | None,
         agent: str = "tdmpc2", train: dict[int, list[float]] | None = None) -> None:
    """The run's eval curve (seed mean, seed range), its training-episode returns when
    given, the agent's published points as markers (their seed range as error bars;
    never a line between points) and the threshold (`wmx.evaluate.plots.learning_curves`)."""
    xs = list(curve)
    top = max(xs + list(train or {}) + [0])
    px, py, rng = points_up_to(task, top, agent)
    panel = {"task": task, "x": xs, "returns": list(curve.values()),
             "published": (px, py, rng, f"{AGENT_LABELS[agent]} paper (published points)"),
             "hlines": [] if threshold is None else [(f"threshold {threshold:g}", threshold)]}
    if train:
        panel["train"] = (list(train), list(train.values()))
    learning_curves([panel], path, "env steps")


RESUME_FIELDS = {"task": "task", "seeds": "seeds", "env_steps": "env_steps", "preset": "preset",
                 "envs": "n_envs", "eval_every": "eval_every", "eval_episodes": "eval_episodes",
                 "chunk_ticks": "chunk_ticks", "checkpoint_every": "checkpoint_every_chunks"}
"""The check's run flags -> config.json keys, compared on --resume (`resumed`)."""


def resumed(args, run_dir: Path, agent: str):
    """(run config, {config key: new value}) of ``--resume run_dir``: a train_online run
    of ``agent`` that no live process trains, every run flag typed equal to the run's
    saved value (`wmx.runs.cli_common.resume_changes`; ``--chunk-ticks`` may change: parts
    of a round give the results of whole rounds. ``--checkpoint-every`` may not, as in
    train_online: the cadence is part of the run's config hash, which its episode sets'
    producer records). Raises SystemExit naming the problem."""
    from wmx.runs.cli_common import agent_config_of, parse_set, resume_changes
    from wmx.runs.owner import probe
    path = run_dir / "config.json"
    cfg = read_json(path, "--resume") if path.is_file() else {}
    if "task" not in cfg:
        raise SystemExit(f"--resume {run_dir}: not a train_online run (no config.json with "
                         "a task)")
    if cfg.get("agent", "tdmpc2") != agent:
        raise SystemExit(f"--resume {run_dir}: a {cfg.get('agent')} run; resume it with "
                         f"benchmarks/learning/{cfg.get('agent')}_online.py")
    owner = None if args.report_only else probe(run_dir)
    if owner is not None:
        raise SystemExit(f"--resume {run_dir}: {owner.describe()} trains it now; wait for it "
                         "to stop (or stop it) and resume then")
    if "home" in args.given and wmx_home(args.home).resolve() != run_dir.parent.parent:
        raise SystemExit(f"--resume: --home {args.home} is not the run's home folder "
                         f"{run_dir.parent.parent}; drop --home (a run trains where it lies)")
    try:
        rc = OnlineRunConfig.from_json(cfg)
        changes = resume_changes(
            args, cfg, RESUME_FIELDS, changeable=("chunk_ticks",),
            free=("threshold", "threshold_on", "budget_min", "report_only", "out", "home"),
            overrides=parse_set(args.set_) if "set_" in args.given else None,
            new_run="start a new check run (without --resume)", config_of=agent_config_of(rc))
        return (dataclasses.replace(rc, **changes) if changes else rc), changes
    except ValueError as e:                     # a conflict, or e.g. --chunk-ticks 0
        raise SystemExit(str(e) if str(e).startswith("--") else f"--resume: {e}") from None


JUDGING = ("threshold", "threshold_on")
"""The flags that judge a run, not train it: kept in its benchmark.json, so a resumed
call judges as the call that started it unless it is given them again."""


def judging(run_dir: Path, args) -> None:
    """Keep the judging flags with the run: those typed now are written to its
    benchmark.json (atomically), those not typed are read from it when it holds them
    (``args`` is updated in place)."""
    from wmx.runs.cli_common import replace_json
    path = run_dir / "benchmark.json"
    bench = read_json(path, "--resume") if path.is_file() else {}
    typed = {k: getattr(args, k) for k in JUDGING if k in args.given}
    for k in JUDGING:
        if k not in typed and k in bench:
            setattr(args, k, bench[k])
    if any(bench.get(k, object()) != v for k, v in typed.items()):
        replace_json(path, {**bench, **typed}, sort_keys=False)


def main(agent: str, defaults: dict, argv=None) -> dict:
    """Parse the flags (``defaults`` replaces the argparse defaults), run, write the
    result JSON and plot; returns the result dict."""
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)       # from a command line: as the trainers' own
    from wmx.runs.cli_common import HelpFormatter
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--task", default="cartpole-balance", help="task in mt30 spelling")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds, run vmapped")
    p.add_argument("--env-steps", type=int, default=20_000,
                   help="simulator steps of the run (train_online's --env-steps)")
    p.add_argument("--preset", default="cpu", help="the agent's preset: paper | cpu | tiny")
    p.add_argument("--envs", type=int, default=None,
                   help="lockstep envs per seed (default: the agent's preset's)")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                   help="agent config fields (train_online's --set)")
    p.add_argument("--eval-every", type=int, default=2_000, help=online_cli.EVAL_EVERY_HELP)
    p.add_argument("--eval-episodes", type=int, default=10, help="eval episodes per seed")
    p.add_argument("--threshold", type=float, default=None,
                   help="the criterion: the mean return (over seeds) to reach within the run "
                        "(kept with the run: a --resume without it judges by it)")
    p.add_argument("--threshold-on", choices=("eval", "train"), default="eval",
                   help="which return the threshold applies to (kept with the run, as "
                        "--threshold)")
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop after this many minutes (whole chunks); record as far as reached")
    p.add_argument("--chunk-ticks", type=int, default=None,
                   help="train_online --chunk-ticks: device parts of a round, a checkpoint after "
                        "each (a budget stop or a killed process then loses at most one part)")
    p.add_argument("--checkpoint-every", type=int, default=1,
                   help="train_online --checkpoint-every: chunks between checkpoints (a budget "
                        "stop and the end always checkpoint). A paper-preset checkpoint is "
                        "large (DreamerV3 12m, 2 seeds: 1.06 GiB with its replay; TD-MPC2 "
                        "size 5: 139 MiB) and takes seconds to write: on an accelerator give "
                        "10 or more. Fixed for the run (--resume keeps it)")
    p.add_argument("--home", default=None, help="data root of the run (default: wmx's home)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue an earlier (budget-stopped) learning run with its saved "
                        "config: run flags typed with it must equal it (--chunk-ticks may "
                        "change)")
    p.add_argument("--report-only", action="store_true",
                   help="with --resume: no training; write the result JSON and plot of the "
                        "run as far as it got (e.g. a criterion judged before the run's end)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[2] /
                                        "benchmarks" / "results"),
                   help="folder of the result JSON and plot (default benchmarks/results, the "
                        "committed results: a run replaces their files of the same name, so "
                        "give another folder for a trial run)")
    p.set_defaults(**defaults)
    args = parse(p, argv)
    if args.report_only and not args.resume:
        p.error("--report-only needs --resume RUN_DIR (the run to report on)")

    changes = {}
    if args.resume:
        run_dir = Path(args.resume).resolve()
        rc, changes = resumed(args, run_dir, agent)
        if args.report_only and changes:                  # it would not be recorded
            p.error(f"--chunk-ticks {args.chunk_ticks} with --report-only: nothing is trained "
                    "here (--chunk-ticks with --resume alone changes the run's parts)")
        store = Store(run_dir.parent.parent)
    else:
        from wmx.runs.cli_common import parse_set
        over = parse_set(args.set_)
        rc = OnlineRunConfig(task=args.task, agent=agent, seeds=tuple(args.seeds),
                             env_steps=args.env_steps, preset=args.preset,
                             agent_overrides=over, eval_every=args.eval_every,
                             eval_episodes=args.eval_episodes, n_envs=args.envs or 1,
                             chunk_ticks=args.chunk_ticks,
                             checkpoint_every_chunks=args.checkpoint_every)
        if args.envs is None:
            rc = dataclasses.replace(rc, n_envs=int(getattr(rc.agent_module.make_config(
                args.preset, over, task=rc.task_spec), "n_envs", 1)))
        store = Store(wmx_home(args.home)).ensure_layout()
        run_dir = store.runs_dir / f"learning-{agent}-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(json.dumps(rc.to_json(), indent=1))
        record_resume_command(run_dir, agent, "online")
    judging(run_dir, args)
    task = rc.task
    t0 = time.perf_counter()
    if args.report_only:
        summary = {"finished": (run_dir / "summary.json").exists()}
    else:
        export = online_cli.make_export(store, rc, run_dir)
        deadline = None if args.budget_min is None else time.monotonic() + 60 * args.budget_min
        with training_call(run_dir, "env_steps") as span:
            with training(run_dir, changes) as stop_request:   # changes: --chunk-ticks
                record_resume_command(run_dir, agent, "online")  # a run from before it was kept
                summary = run(rc, run_dir, export, progress=True, deadline=deadline,
                              stop_request=stop_request)
            span["to"] = int(summary["env_steps"])
    wall = time.perf_counter() - t0
    rows = read_rows(run_dir)
    curve, train = eval_curve(rows), eval_curve(rows, "train")
    final_x = max(curve) if curve else 0
    version, device, _ = trained_where(run_dir)
    final = float(np.mean(curve[final_x])) if curve else float("nan")
    judged = curve if args.threshold_on == "eval" else train
    best = max((float(np.mean(v)) for v in judged.values()), default=float("nan"))
    res = {"agent": agent, "task": task, "seeds": list(rc.seeds), "preset": rc.preset,
           "n_envs": rc.n_envs, "agent_overrides": rc.agent_overrides,
           "env_steps_planned": rc.total_env_steps,
           "env_steps_reached": max([*curve, *train], default=0),
           "code_version": version, "device": device,
           "finished": summary["finished"], "wall_s": wall,
           "run_wall_s": run_wall_s(rows),
           "eval_curve": {str(k): v for k, v in curve.items()},
           "train_curve": {str(k): v for k, v in train.items()},
           "final_mean_eval_return": final,
           f"published_{agent}_at_same_env_steps": published_return(task, final_x, agent),
           "threshold": args.threshold, "threshold_on": args.threshold_on,
           "best_mean_return_judged": best,
           "passed": None if args.threshold is None else bool(best >= args.threshold),
           "run_dir": str(run_dir)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{agent}_online_{task}.json").write_text(
        json.dumps(portable(res, run_dir), indent=1))   # paths relative to the data root
    plot(task, curve, out / f"{agent}_online_{task}.png", args.threshold, agent,
         train=train)
    print(json.dumps({k: res[k] for k in ("agent", "task", "env_steps_reached",
                                          "final_mean_eval_return", "best_mean_return_judged",
                                          "passed", "wall_s")}, indent=1))
    return res
