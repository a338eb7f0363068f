"""Smoke run of train_online on a real Playground task (short episodes, tiny preset)."""
import csv
import json

import numpy as np

from wmx.episode_sets.episode_set import read_episode_set
from wmx.train_online import cli


def test_cartpole_smoke_run_exports_episode_set(tmp_path):
    home = tmp_path / "home"
    argv = ["--task", "cartpole-balance", "--preset", "tiny", "--seeds", "0",
            "--env-steps", "180", "--episode-length", "30", "--seed-steps", "30",
            "--eval-every", "180", "--eval-episodes", "2", "--chunk-episodes", "3",
            "--home", str(home), "--name", "smoke", "--no-progress"]
    assert cli.main(argv) == 0
    run_dir = home / "runs" / "smoke"
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["derived"]["total_env_steps"] == 180 and cfg["derived"]["action_repeat"] == 2
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(evals) == 1 and int(evals[0]["env_steps"]) == 180
    assert 0 <= float(evals[0]["return"]) <= 30 * 2          # cartpole reward <= 1 per sim step
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest, episodes = read_episode_set(summary["episode_sets"]["0"])
    eps = list(episodes)
    assert len(eps) == 3 and manifest.task.name == "cartpole-balance"
    for e in eps:
        assert e["obs"].shape == (31, 5) and np.isfinite(e["obs"]).all()
        assert e["reward"][0] == 0 and (e["reward"][1:] >= 0).all()
    # different initial states every episode (fresh resets on the held tick)
    assert not np.allclose(eps[0]["obs"][0], eps[1]["obs"][0])
