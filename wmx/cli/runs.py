"""`wmx runs ...`: ls and info of the training runs under ``<home>/runs``."""
from __future__ import annotations

import json
import shlex

from wmx.cli.dataset import add_home
from wmx.cli.table import print_table
from wmx.sizes import counted


def add_parser(sub) -> None:
    """Register `runs` and its subcommands on an argparse subparsers object."""
    p = sub.add_parser("runs", help="list and inspect training runs")
    add_home(p)
    rs = p.add_subparsers(dest="runs_cmd", required=True)
    ls = rs.add_parser("ls", help="list runs: name, agent, task or dataset, status (finished / "
                                  "running / interrupted / not started), progress, last "
                                  "eval, size")
    info = rs.add_parser("info", help="one run: config, lineage, progress, checkpoints, last "
                                      "metrics")
    info.add_argument("run", help="run name under <home>/runs, or a run directory")
    for q in (ls, info):
        add_home(q)
    p.set_defaults(func=run)


def cmd_ls(args) -> int:
    from wmx.paths import looked_in, wmx_home
    from wmx.runs.listing import eval_text, list_runs, name_text, progress_text, target_text
    from wmx.sizes import human_size
    runs = list_runs(wmx_home(args.home))
    if not runs:
        print(f"no runs in {wmx_home(args.home) / 'runs'} ({looked_in(args.home)}); start one "
              "with train_online or train_offline")
        return 0
    rows = [(name_text(r), r.agent, target_text(r), r.status, progress_text(r), eval_text(r),
             human_size(r.size)) for r in runs]
    print_table(("NAME", "AGENT", "TASK/DATASET", "STATUS", "PROGRESS", "LAST EVAL", "SIZE"),
                rows)
    return 0


def _fmt(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return str(int(f)) if f.is_integer() and abs(f) < 1e15 else f"{f:.4g}"


def cmd_info(args) -> int:
    """`wmx runs info RUN`: what read_run finds, or one line (exit 2) for a run whose
    config.json does not read (`wmx.runs.listing.damaged_config_message`)."""
    from wmx.paths import wmx_home
    from wmx.runs.listing import (as_float, as_int, damaged_config_message, eval_text,
                                  progress_text, read_metrics, read_run, resolve_run,
                                  resume_text)
    from wmx.sizes import human_size
    r = read_run(resolve_run(args.run, wmx_home(args.home)))
    damaged = damaged_config_message(r.path)
    if damaged is not None:                 # nothing else is right without the config
        raise ValueError(damaged)
    print(f"{r.name}\n  path: {r.path}" + (f" (a link to {r.link})" if r.link else ""))
    status = r.status
    if r.owner is not None:
        status += f" ({r.owner.describe()})"
    elif (hint := resume_text(r)) is not None:
        status += f" (continue with: {hint})"
    print(f"  {r.kind} run, agent {r.agent}, status {status}")
    print(f"  progress: {progress_text(r)}; last eval: {eval_text(r)}; size {human_size(r.size)}")
    if r.last_eval is not None and r.last_eval.episodes is not None:
        print(f"  last eval: the trainer's own episodes (its rollout keys); on a finished run "
              f"`evaluate --run {shlex.quote(str(r.path))} --seeds-from-checkpoint --episodes "
              f"{r.last_eval.episodes}` repeats it, a plain `evaluate` draws other episodes")
    cfg = r.config
    print("  lineage:")
    if r.kind == "offline":
        print(f"    dataset: {cfg.get('dataset')}")
        if cfg.get("dataset_path"):
            print(f"    dataset path: {cfg['dataset_path']}")
    elif r.kind == "online":
        print(f"    task: {cfg.get('task')}")
        sets = (r.summary or {}).get("episode_sets") or {}
        for seed, path in sets.items():
            print(f"    episode set (seed {seed}): {path}")
        if r.status == "finished" and not sets:
            print("    episode sets: none exported (--no-export)")
    for key in ("code_version", "created", "training_hash"):
        if cfg.get(key):
            print(f"    {key.replace('_', ' ')}: {cfg[key]}")
    print("  config:")
    for k in sorted(cfg):
        if k in ("taskset", "dataset_path", "code_version", "created", "training_hash",
                 "resolved_agent_config"):
            continue
        print(f"    {k}: {json.dumps(cfg[k], sort_keys=True)}")
    if isinstance(cfg.get("resolved_agent_config"), dict):
        print(f"    resolved_agent_config: {len(cfg['resolved_agent_config'])} fields "
              f"(the preset with agent_overrides; in {r.path / 'config.json'})")
    if "taskset" in cfg and isinstance(cfg["taskset"], dict):
        tasks = [str(t.get("name", "?")) if isinstance(t, dict) else "?"
                 for t in cfg["taskset"].get("tasks") or []]
        print(f"    taskset: {cfg['taskset'].get('name')} ({counted(len(tasks), 'task')}: "
              f"{', '.join(tasks)})")
    print(f"  checkpoints ({len(r.checkpoints) + len(r.damaged)}):")
    for name, host in r.checkpoints:
        at = (f"updates {host.get('updates')}" if r.kind == "offline"
              else f"tick {host.get('next_tick')}")
        wall = as_float(host.get("wall_s", 0.0))
        print(f"    {name}: {at}, wall {'?' if wall is None else f'{wall:.1f}'} s"
              f"{', finished' if host.get('finished') else ''}")
    for name, why in r.damaged:
        print(f"    {name}: damaged, its {why} (evaluate and --resume use an older one)")
    rows = read_metrics(r.path / "metrics.csv")
    if rows:
        step_col = "updates" if r.kind == "offline" else "env_steps"
        print(f"  last metrics (metrics.csv, {len(rows)} rows):")
        for kind in ("train", "eval"):
            ks = [x for x in rows if x.get("kind") == kind]
            if not ks:
                continue
            steps = [as_int(x.get(step_col)) for x in ks]
            last = max((v for v in steps if v is not None), default=None)
            for x, v in zip(ks, steps):
                if v != last:
                    continue
                vals = ", ".join(f"{k}={_fmt(v)}" for k, v in x.items()
                                 if v not in ("", None) and k not in ("kind", "seed"))
                print(f"    {kind} seed {x.get('seed')}: {vals}")
    if r.summary is not None and r.summary.get("final_score") is not None:
        score = as_float(r.summary["final_score"])
        print(f"  final score: {'?' if score is None else f'{score:.4g}'}")
    return 0


def run(args) -> int:
    """Dispatch `wmx runs <cmd>`; an unknown run prints the error, exit 2."""
    from wmx.cli.dispatch import dispatch
    return dispatch({"ls": cmd_ls, "info": cmd_info}, args.runs_cmd, args)
