"""`train_offline --agent dreamerv3` end to end on the tiny offline dataset (issue 14):
the multi-task DreamerV3 model (deviation W-D8) on windows of the pooled
cartpole-balance + cheetah-run episodes (T=20), through the CLI, with the run
directory, metrics, evaluation and checkpoints of TD-MPC2's offline runs, and a
run split in two processes' worth of calls equal to the uninterrupted one.

One tiny configuration: the update chunk compiles once for the module, the
evaluation program once (one evaluated task on a stand-in env of its dims, no
MJX compile; tests/stand_in_env.py).
"""
from __future__ import annotations

import csv
import json
import shutil

import jax
import numpy as np
import pytest

from stand_in_env import stand_in_env
from tiny_runs import last_offline_checkpoint, train_offline_on_stand_ins
from wmx.checkpoint import list_checkpoints
from wmx.runs.offline_config import OfflineRunConfig
from wmx.train_offline import cli, loop

ARGS = ["--agent", "dreamerv3", "--preset", "tiny", "--updates", "4", "--log-every", "2",
        "--eval-every", "4", "--checkpoint-every", "2", "--eval-episodes", "1",
        "--eval-tasks", "cartpole-balance", "--episode-length", "6", "--seeds", "0", "1",
        "--no-progress"]


@pytest.fixture(autouse=True)
def _stand_in_envs(monkeypatch):
    monkeypatch.setattr(loop, "cached_env", stand_in_env)


def _metrics(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def full_run(tiny_offline_dataset):
    home, ds = tiny_offline_dataset
    assert train_offline_on_stand_ins(["--dataset", str(ds), "--home", str(home), "--name",
                                       "dv3-full", *ARGS]) == 0
    return home, home / "runs" / "dv3-full"


def test_dreamerv3_trains_offline_and_evaluates(full_run):
    _, run_dir = full_run
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["agent"] == "dreamerv3" and cfg["train_tasks"] is None
    ac = cfg["resolved_agent_config"]
    # one multi-task model over the padded widths, the preset's batch of windows
    assert (ac["num_tasks"], ac["obs_dim"], ac["action_dim"], ac["batch_size"]) == (2, 17, 6, 9)
    rows = _metrics(run_dir)
    train = [r for r in rows if r["kind"] == "train"]
    assert [(int(r["updates"]), r["seed"]) for r in train] == [
        (u, s) for u in (2, 4) for s in ("0", "1")]
    for r in train:
        for k in ("opt_loss", "vector_loss", "reward_loss", "actor_loss", "critic_loss"):
            assert np.isfinite(float(r[k])), k
        assert float(r["opt_grad_norm"]) > 0
    assert train[0]["opt_loss"] != train[1]["opt_loss"]       # the seeds differ
    evals = [r for r in rows if r["kind"] == "eval" and r["task"] != "mean"]
    assert [(int(r["updates"]), r["task"], r["seed"]) for r in evals] == [
        (4, "cartpole-balance", s) for s in ("0", "1")]
    for r in evals:                     # stand-in reward in [0, 1] per step, 6 steps
        assert 0 <= float(r["return"]) <= 6
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["updates"] == 4
    assert [int(p.name) for p in list_checkpoints(run_dir)] == [2, 4]


def test_dreamerv3_split_run_equals_uninterrupted(full_run):
    home, run_dir = full_run
    split = home / "runs" / "dv3-split"
    split.mkdir()
    shutil.copy(run_dir / "config.json", split / "config.json")
    rc = OfflineRunConfig.from_json(json.loads((split / "config.json").read_text()))
    s = loop.run(rc, split, home=home, progress=False, stop_after_chunks=1)
    assert not s["finished"] and s["updates"] == 2
    assert cli.main(["--resume", str(split), "--no-progress"]) == 0
    assert _metrics(split) == _metrics(run_dir)
    (a, ha), (b, hb) = last_offline_checkpoint(split, rc), last_offline_checkpoint(run_dir, rc)
    leaves = jax.tree.leaves(a)
    assert len(leaves) == len(jax.tree.leaves(b))
    for x, y in zip(leaves, jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(np.asarray(a["loop"]["n_updates"])[0]) == 4
    assert ha["last_eval"] == hb["last_eval"]


@pytest.mark.slow
def test_dreamerv3_streaming_single_task_split_run_equals_uninterrupted(tiny_offline_dataset):
    """--stream with --tasks cheetah-run (the single-task model at the task's widths, the
    streamed records of that task only): a split run equals the uninterrupted one (another
    compile of the update: slow)."""
    home, ds = tiny_offline_dataset
    base = ["--dataset", str(ds), "--home", str(home), "--stream", "--skip-validation",
            "--tasks", "cheetah-run", *ARGS[:ARGS.index("--eval-tasks")],
            "--episode-length", "6", "--seeds", "0", "1", "--no-progress"]
    assert cli.main([*base, "--name", "dv3-sfull"]) == 0
    sfull = home / "runs" / "dv3-sfull"
    rc = OfflineRunConfig.from_json(json.loads((sfull / "config.json").read_text()))
    assert rc.stream and not rc.multitask and rc.agent_config.obs_dim == 17
    ssplit = home / "runs" / "dv3-ssplit"
    ssplit.mkdir()
    shutil.copy(sfull / "config.json", ssplit / "config.json")
    loop.run(rc, ssplit, home=home, progress=False, stop_after_chunks=1)
    assert cli.main(["--resume", str(ssplit), "--no-progress"]) == 0
    assert _metrics(ssplit) == _metrics(sfull)
    evals = [r for r in _metrics(sfull) if r["kind"] == "eval" and r["task"] != "mean"]
    assert {r["task"] for r in evals} == {"cheetah-run"}
