"""Smoke runs of train_online on a real Playground task, both agents (tiny presets,
30-step episodes), in one data root: each run exports its episode set, DreamerV3's
run split in two equals the uninterrupted run, the two agents' episode sets pool
into one dataset, and `evaluate` compares the two runs.

Every program compiles once for the module: the split run, the evaluations (2
episodes, the runs' own count) and the comparison reuse the runs' compiled
chunks and rollouts (same configs, same cached env object).
"""
import csv
import json
import shutil

import jax
import numpy as np
import pytest

from wmx.checkpoint import list_checkpoints, restore_checkpoint
from wmx.episode_sets.episode_set import read_episode_set
from wmx.runs.online_config import OnlineRunConfig
from wmx.train_online import cli, program
from wmx.train_online.loop import run

T = 30
COMMON = ["--task", "cartpole-balance", "--preset", "tiny", "--episode-length", str(T),
          "--eval-episodes", "2", "--no-progress"]


def _rows(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def tdmpc2_run(home):
    assert cli.main([*COMMON, "--seeds", "0", "--env-steps", "180", "--seed-steps", "30",
                     "--eval-every", "180", "--chunk-episodes", "3", "--home", str(home),
                     "--name", "tdmpc2"]) == 0
    return home / "runs" / "tdmpc2"


@pytest.fixture(scope="module")
def dreamerv3_run(home):
    # 2 envs x 2 seeds x 3 episodes of 30 steps; train ratio 16 (tiny batch 9 x 6):
    # about 0.6 updates per tick once the replay holds a batch
    assert cli.main([*COMMON, "--agent", "dreamerv3", "--seeds", "0", "1", "--envs", "2",
                     "--env-steps", "360", "--set", "train_ratio=16", "--eval-every", "360",
                     "--home", str(home), "--name", "dreamerv3"]) == 0
    return home / "runs" / "dreamerv3"


def test_cartpole_smoke_run_exports_episode_set(tdmpc2_run):
    run_dir = tdmpc2_run
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["derived"]["total_env_steps"] == 180 and cfg["derived"]["action_repeat"] == 2
    evals = [r for r in _rows(run_dir) if r["kind"] == "eval"]
    assert len(evals) == 1 and int(evals[0]["env_steps"]) == 180
    assert 0 <= float(evals[0]["return"]) <= T * 2          # cartpole reward <= 1 per sim step
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest, episodes = read_episode_set(summary["episode_sets"]["0"])
    eps = list(episodes)
    assert len(eps) == 3 and manifest.task.name == "cartpole-balance"
    for e in eps:
        assert e["obs"].shape == (T + 1, 5) and np.isfinite(e["obs"]).all()
        assert e["reward"][0] == 0 and (e["reward"][1:] >= 0).all()
    # different initial states every episode (fresh resets on the held tick)
    assert not np.allclose(eps[0]["obs"][0], eps[1]["obs"][0])


def test_dreamerv3_smoke_run_trains_evaluates_and_exports(dreamerv3_run):
    cfg = json.loads((dreamerv3_run / "config.json").read_text())
    assert cfg["agent"] == "dreamerv3" and cfg["n_envs"] == 2
    assert cfg["resolved_agent_config"]["n_envs"] == 2       # one number of envs
    rows = _rows(dreamerv3_run)
    train = [r for r in rows if r["kind"] == "train"]
    assert [int(r["episodes"]) for r in train[::2]] == [2, 4, 6]
    # the loss columns are means over each chunk's updates (finite once updates ran)
    assert int(train[-1]["updates"]) > int(train[1]["updates"]) > 0
    for r in train[2:]:
        assert np.isfinite(float(r["opt_loss"])) and float(r["dyn_loss"]) >= 0
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(evals) == 2 and all(0 <= float(r["return"]) <= 2 * T for r in evals)
    summary = json.loads((dreamerv3_run / "summary.json").read_text())
    assert set(summary["episode_sets"]) == {"0", "1"}
    manifest, episodes = read_episode_set(summary["episode_sets"]["1"])
    eps = list(episodes)
    assert manifest.producer.agent == "dreamerv3" and len(eps) == 6
    for e in eps:
        assert e["obs"].shape == (T + 1, 5) and e["action"].shape == (T + 1, 1)
        assert np.all(np.abs(e["action"]) <= 1) and not e["action"][-1].any()


def test_dreamerv3_split_run_equals_uninterrupted(dreamerv3_run, tmp_path):
    rc = OnlineRunConfig.from_json(json.loads((dreamerv3_run / "config.json").read_text()))
    split = tmp_path / "split"
    split.mkdir()
    shutil.copy(dreamerv3_run / "config.json", split / "config.json")
    assert not run(rc, split, None, progress=False, stop_after_chunks=1)["finished"]
    assert run(rc, split, None, progress=False)["finished"]       # a fresh restore
    _assert_same_run(rc, dreamerv3_run, split)


def _assert_same_run(rc, a_dir, b_dir):
    """Equal metrics.csv rows (wall time aside) and equal final checkpoints: parameters,
    optimizer, replay with its latents, loop carries."""
    drop = ("wall_s",)
    a = [{k: v for k, v in r.items() if k not in drop} for r in _rows(a_dir)]
    b = [{k: v for k, v in r.items() if k not in drop} for r in _rows(b_dir)]
    assert a == b
    from wmx.envs.playground import cached_env
    like = program.checkpoint_items(jax.eval_shape(
        lambda: program.init_carries(rc, cached_env(rc.task, rc.episode_length))))
    (x, _), (y, _) = (restore_checkpoint(list_checkpoints(d)[-1], like) for d in (a_dir, b_dir))
    for name in ("agent", "replay", "loop"):
        for u, v in zip(jax.tree.leaves(x[name]), jax.tree.leaves(y[name])):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=name)


@pytest.mark.slow   # its own program (the parts' masked chunk): ~1-2 min more on 2 cores
def test_dreamerv3_run_in_parts_resumed_inside_a_round_equals_whole_rounds(dreamerv3_run,
                                                                           tmp_path):
    """--chunk-ticks 13: rounds of 31 ticks in parts of 13, 13 and 5 (padded); stopped
    after 4 parts (inside round 1) and resumed: the metrics (DreamerV3's means since
    the last row), parameters, optimizer state, replay with its latents and loop
    carries equal the whole-round run's."""
    import dataclasses
    rc = OnlineRunConfig.from_json(json.loads((dreamerv3_run / "config.json").read_text()))
    rc = dataclasses.replace(rc, chunk_ticks=13)
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "config.json").write_text(json.dumps(rc.to_json()))
    assert not run(rc, parts, None, progress=False, stop_after_chunks=4)["finished"]
    assert int(list_checkpoints(parts)[-1].name) == 31 + 13
    assert run(rc, parts, None, progress=False)["finished"]
    _assert_same_run(rc, dreamerv3_run, parts)


def test_both_agents_episodes_pool_into_one_dataset(home, tdmpc2_run, dreamerv3_run):
    from wmx.cli import beam
    from wmx.datasets.readers import open_dataset
    from wmx.paths import REPO_ROOT
    sets = [p for r in (tdmpc2_run, dreamerv3_run)
            for p in json.loads((r / "summary.json").read_text())["episode_sets"].values()]
    manifests = [read_episode_set(p)[0] for p in sets]
    assert {m.producer.agent for m in manifests} == {"tdmpc2", "dreamerv3"}
    from wmx.envs.registry import get_task
    from wmx.schemas.taskset import TaskInfo, TaskSet
    ts = TaskSet("cartpole30", (TaskInfo.from_spec(get_task("cartpole-balance").replace(T=T)),),
                 (None,), "none")
    (home / "cartpole30.json").write_text(ts.to_json())
    assert beam.main(["run", str(REPO_ROOT / "pipelines/build_taskset.py"), f"--home={home}",
                      f"--taskset={home / 'cartpole30.json'}", "--sources", *sets]) == 0
    (ds_dir,) = [p for p in (home / "datasets").glob("*/*") if not p.name.startswith(".")]
    ds = open_dataset(ds_dir)
    assert ds.num_episodes == 3 + 2 * 6
    assert set(ds.manifest.sources) == {m.content_hash for m in manifests}


def test_evaluate_compares_the_two_agents(home, tdmpc2_run, dreamerv3_run, capsys):
    from wmx.evaluate import cli as evaluate_cli
    for r in (tdmpc2_run, dreamerv3_run):
        assert evaluate_cli.main(["--run", r, "--episodes", 2]) == 0
    rep = json.loads((dreamerv3_run / "report" / "report.json").read_text())
    (row,) = rep["per_task"]
    assert rep["run"]["agent"] == "dreamerv3" and row["published_return"] is None
    assert row["published_note"] == "no published point near 360 env steps (nearest: 10,000)"
    out = home / "compare"
    assert evaluate_cli.main(["--runs", tdmpc2_run, dreamerv3_run, "--out", out]) == 0
    md = (out / "compare.md").read_text()
    assert "tdmpc2" in md and "dreamerv3" in md
