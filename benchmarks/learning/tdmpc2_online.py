"""Learning check: does online TD-MPC2 learn real Playground tasks on this CPU?

Runs ``train_online`` (cpu preset by default) and compares the mean eval
return with the published TD-MPC2 curve at the same env steps
(../shared/reference/tdmpc2_dmc_curves.json, copied into
wmx/evaluate/reference/). Writes JSON and a plot; ``docs/validation.md``
records the results.

Acceptance (online issue): cartpole-balance reaches a mean eval return of at
least 800 within 20,000 env steps (2 seeds, cpu preset); pendulum-swingup is
recorded as far as a 30-minute budget allows.

    python benchmarks/learning/tdmpc2_online.py --task cartpole-balance --env-steps 20000
    python benchmarks/learning/tdmpc2_online.py --task pendulum-swingup --env-steps 60000 \\
        --budget-min 30
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from wmx.datasets.store import Store
from wmx.evaluate.plots import learning_curves
from wmx.evaluate.reference_curves import AGENT_LABELS, points_up_to, published_return
from wmx.paths import wmx_home
from wmx.train_online import cli as online_cli
from wmx.train_online.loop import run
from wmx.runs.online_config import OnlineRunConfig


def eval_curve(run_dir: Path) -> dict[int, list[float]]:
    """{env_steps: [mean eval return per seed]} from a run's metrics.csv."""
    out: dict[int, list[float]] = {}
    with (run_dir / "metrics.csv").open() as f:
        for r in csv.DictReader(f):
            if r["kind"] == "eval":
                out.setdefault(int(r["env_steps"]), []).append(float(r["return"]))
    return dict(sorted(out.items()))


def plot(task: str, curve: dict[int, list[float]], path: Path, threshold: float | None,
         agent: str = "tdmpc2") -> None:
    """The run's eval curve (seed mean, seed range) with the agent's published points as
    markers (their seed range as error bars; never a line between points) and the
    threshold (`wmx.evaluate.plots.learning_curves`)."""
    xs = list(curve)
    px, py, rng = points_up_to(task, max(xs + [0]), agent)
    panel = {"task": task, "x": xs, "returns": list(curve.values()),
             "published": (px, py, rng, f"{AGENT_LABELS[agent]} paper (published points)"),
             "hlines": [] if threshold is None else [(f"threshold {threshold:g}", threshold)]}
    learning_curves([panel], path, "env steps")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--env-steps", type=int, default=20_000)
    p.add_argument("--preset", default="cpu")
    p.add_argument("--eval-every", type=int, default=2_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop after this many minutes (whole chunks); record as far as reached")
    p.add_argument("--home", default=None)
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue an earlier (budget-stopped) learning run")
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args()

    if args.resume:
        run_dir = Path(args.resume).resolve()
        rc = OnlineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
        store = Store(run_dir.parent.parent)
    else:
        rc = OnlineRunConfig(task=args.task, seeds=tuple(args.seeds), env_steps=args.env_steps,
                             preset=args.preset, eval_every=args.eval_every,
                             eval_episodes=args.eval_episodes)
        store = Store(wmx_home(args.home)).ensure_layout()
        run_dir = store.runs_dir / f"learning-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(json.dumps(rc.to_json(), indent=1))
    args.task = rc.task
    export = online_cli.make_export(store, rc, run_dir)
    t0 = time.perf_counter()
    deadline = None if args.budget_min is None else time.monotonic() + 60 * args.budget_min
    summary = run(rc, run_dir, export, progress=True, deadline=deadline)
    wall = time.perf_counter() - t0
    curve = eval_curve(run_dir)
    final_x = max(curve) if curve else 0
    final = float(np.mean(curve[final_x])) if curve else float("nan")
    ref = published_return(args.task, final_x)
    res = {"task": args.task, "seeds": list(rc.seeds), "preset": rc.preset,
           "env_steps_planned": rc.total_env_steps, "env_steps_reached": final_x,
           "finished": summary["finished"], "wall_s": wall,
           "eval_curve": {str(k): v for k, v in curve.items()},
           "final_mean_eval_return": final,
           "published_tdmpc2_at_same_env_steps": ref, "threshold": args.threshold,
           "passed": None if args.threshold is None else bool(final >= args.threshold),
           "run_dir": str(run_dir)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"tdmpc2_online_{args.task}.json").write_text(json.dumps(res, indent=1))
    plot(args.task, curve, out / f"tdmpc2_online_{args.task}.png", args.threshold)
    print(json.dumps({k: res[k] for k in ("task", "env_steps_reached", "final_mean_eval_return",
                                          "published_tdmpc2_at_same_env_steps", "passed",
                                          "wall_s")}, indent=1))


if __name__ == "__main__":
    main()
