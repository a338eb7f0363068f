"""The offline checks' source runs: finished single-task ``train_online`` runs, their
episode sets and final returns (`offline_check` pools them into the check's dataset)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np


def source_run(run_dir: Path) -> dict:
    """Task, episode sets and final return of one finished train_online run.

    Raises ValueError when the run is unfinished, exported nothing or has no eval row.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    if not (run_dir / "config.json").is_file():
        raise SystemExit(f"source run {run_dir} not found (no config.json): a home folder "
                         "copied elsewhere needs its source runs' config.json, summary.json "
                         "and metrics.csv under runs/")
    cfg = json.loads((run_dir / "config.json").read_text())
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ValueError(f"source run {run_dir} is not finished (no summary.json); finish it "
                         "with train_online --resume first")
    sets = json.loads(summary_path.read_text()).get("episode_sets") or {}
    if not sets:
        raise ValueError(f"source run {run_dir} exported no episode sets")
    last: dict[str, float] = {}
    with (run_dir / "metrics.csv").open() as f:
        for r in csv.DictReader(f):
            if r["kind"] == "eval":
                last[r["seed"]] = float(r["return"])       # rows are in env-step order
    if not last:
        raise ValueError(f"source run {run_dir} has no eval row in metrics.csv")
    return {"run_dir": str(run_dir), "task": cfg["task"],
            "episode_length": cfg.get("episode_length"),
            "final_return_per_seed": last,
            "final_return": float(np.mean(list(last.values()))),
            "episode_sets": [sets[k] for k in sorted(sets, key=int)]}


def pooled_sources(runs: list[dict]) -> dict[str, dict]:
    """Per task (mt30 order): the runs, their episode sets and the source final return
    (mean over every seed of the task's runs)."""
    from wmx.envs.registry import task_names
    out: dict[str, dict] = {}
    for r in runs:
        t = out.setdefault(r["task"], {"runs": [], "episode_sets": [], "per_seed": []})
        t["runs"].append(r["run_dir"])
        t["episode_sets"] += r["episode_sets"]
        t["per_seed"] += list(r["final_return_per_seed"].values())
    order = task_names()
    return {k: {**v, "final_return": float(np.mean(v["per_seed"]))}
            for k, v in sorted(out.items(), key=lambda kv: order.index(kv[0]))}


def home_relative(home: Path, run_dir) -> str:
    """A source run's path as benchmark.json records it: relative to ``home`` when inside
    it (so a home folder copied to another machine resumes there), else absolute."""
    path = Path(run_dir).expanduser().resolve()
    try:
        return str(path.relative_to(Path(home).resolve()))
    except ValueError:
        return str(path)
