"""The tiny TD-MPC2 online run (probe-action, T=20, seeds 0 and 3, with
episode-set export) that tests/train_online and tests/evaluate share through
conftest.py's session fixture `tiny_online_run`, so its chunk and evaluation
programs (cached per config and env) compile once per session."""
from __future__ import annotations

import json
from pathlib import Path

from wmx.datasets.store import Store
from wmx.train_online import cli as online_cli
from wmx.train_online.loop import run
from wmx.runs.online_config import OnlineRunConfig

T = 20   # probe-action's episode length (agent steps)
TINY_RC = OnlineRunConfig(task="probe-action", seeds=(0, 3), env_steps=6 * T, preset="tiny",
                          agent_overrides={"seed_steps": 2 * T}, eval_every=2 * T,
                          eval_episodes=2, chunk_episodes=1)


def train_tiny(home: Path, name: str) -> tuple[Store, Path, dict]:
    """Train `TINY_RC` to the end in home/runs/<name> with config.json and episode-set
    export, as the CLI would. Returns (store, run_dir, summary)."""
    store = Store(home).ensure_layout()
    run_dir = store.runs_dir / name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    summary = run(TINY_RC, run_dir, online_cli.make_export(store, TINY_RC, run_dir),
                  progress=False)
    return store, run_dir, summary
