"""train_offline on a pooled dataset built (real Beam build) from stored real Playground
episodes: training + per-task evaluation, exact resume, bad input.

The dataset pools cartpole-balance (O=5, A=1) and cheetah-run (O=17, A=6)
episodes of T=20 (tests/pipelines/data, see episode_fixtures). One tiny
configuration is used throughout, so the update chunk compiles once for the
module. In the default run the evaluation envs are stand-ins with the
tasks' dims (an MJX compile per task costs minutes of CPU); the `slow` test
evaluates on the real Playground tasks through the unpatched CLI, and the
streaming feed's exact resume (one more compile) is slow too.
"""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import (playground_info, stored_playground_episodes,  # noqa: E402
                              taskset_of, write_set)

from wmx.checkpoint import list_checkpoints, restore_checkpoint  # noqa: E402
from wmx.envs.base import Env, EnvState  # noqa: E402
from wmx.envs.registry import get_task  # noqa: E402
from wmx.pipelines.sources import make_plan, run_build  # noqa: E402
from wmx.train_offline import cli, loop, program  # noqa: E402
from wmx.runs.offline_config import OfflineRunConfig  # noqa: E402

T = 20
TASKS = ("cartpole-balance", "cheetah-run")
ARGS = ["--preset", "tiny", "--batch-size", "16", "--updates", "6", "--log-every", "2",
        "--eval-every", "4", "--checkpoint-every", "2", "--eval-episodes", "2",
        "--seeds", "0", "1", "--no-progress"]


class StandInEnv(Env):
    """A task's dims and T without MJX: obs_{t+1} = 0.9 obs_t + (action padded to O) / 2,
    reward = 1 - mean(a^2) (in [0, 1]); the action must have the task's action_dim."""

    def __init__(self, name: str, T: int, action_repeat: int):
        self.spec = get_task(name).replace(T=T, action_repeat=action_repeat)

    def reset(self, key):
        obs = jax.random.normal(key, (self.obs_dim,), jnp.float32)
        return EnvState(obs=obs, reward=jnp.zeros((), jnp.float32), done=jnp.zeros((), bool),
                        t=jnp.zeros((), jnp.int32), inner={})

    def step(self, state, action):
        assert action.shape == (self.action_dim,)
        a = jnp.clip(action, -1, 1)
        pad = jnp.zeros((self.obs_dim,), jnp.float32).at[:self.action_dim].set(a)
        t = state.t + 1
        return EnvState(obs=0.9 * state.obs + 0.5 * pad, reward=1.0 - jnp.mean(a ** 2),
                        done=t >= self.T, t=t, inner={})


_ENVS: dict = {}


def stand_in_env(task, T, action_repeat):
    key = (task, T, action_repeat)
    if key not in _ENVS:
        _ENVS[key] = StandInEnv(task, T, action_repeat)
    return _ENVS[key]


@pytest.fixture(autouse=True)
def _stand_in_envs(request, monkeypatch):
    if request.node.name != "test_real_playground_evaluation":
        monkeypatch.setattr(loop, "cached_env", stand_in_env)


def _metrics(run_dir, drop=("wall_s",)):
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _tree(run_dir, rc):
    like = program.checkpoint_items(
        jax.eval_shape(lambda: program.init_carries(rc.agent_module, rc.agent_config, rc.seeds)))
    return restore_checkpoint(list_checkpoints(run_dir)[-1], like)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Home with dataset "tst" (both tasks, 6 + 6 episodes) and "one" (cartpole only)."""
    home = tmp_path_factory.mktemp("home")
    infos = [playground_info(t) for t in TASKS]
    for i, info in enumerate(infos):
        write_set(home, info, stored_playground_episodes(info.name), seed=i)
    tst = run_build(make_plan(home, taskset_of("tst", infos), num_shards=2))
    one = run_build(make_plan(home, taskset_of("one", infos[:1]), num_shards=1))
    return home, tst, one


@pytest.fixture(scope="module")
def full_run(store):
    home, tst, _ = store
    mp = pytest.MonkeyPatch()
    mp.setattr(loop, "cached_env", stand_in_env)
    try:
        assert cli.main(["--dataset", f"tst@{tst.name[:8]}", "--home", str(home),
                         "--name", "full", *ARGS]) == 0
    finally:
        mp.undo()
    return home / "runs" / "full"


def test_run_trains_and_evaluates_every_task(store, full_run):
    _, tst, _ = store
    cfg = json.loads((full_run / "config.json").read_text())
    assert cfg["dataset"] == f"tst@{tst.name}" and len(tst.name) == 64
    assert cfg["code_version"] and [t["name"] for t in cfg["taskset"]["tasks"]] == list(TASKS)
    ac = cfg["resolved_agent_config"]
    assert (ac["num_tasks"], ac["obs_dim"], ac["action_dim"], ac["batch_size"]) == (2, 17, 6, 16)
    rows = _metrics(full_run)
    train = [r for r in rows if r["kind"] == "train"]
    assert [int(r["updates"]) for r in train] == [2, 2, 4, 4, 6, 6]
    assert all(np.isfinite(float(r["total_loss"])) for r in train)
    evals = [r for r in rows if r["kind"] == "eval" and r["task"] != "mean"]
    # evaluations after 4 updates and at the end (6), every task, every seed
    assert [(int(r["updates"]), r["task"], r["seed"]) for r in evals] == [
        (u, t, s) for u in (4, 6) for t in TASKS for s in ("0", "1")]
    for r in evals:
        ret = float(r["return"])
        assert 0 <= ret <= T and float(r["score"]) == pytest.approx(ret / 10)
    means = [r for r in rows if r["task"] == "mean"]
    assert float(means[-1]["score"]) == pytest.approx(
        np.mean([float(r["score"]) for r in evals[-4:] if r["seed"] == means[-1]["seed"]]))
    summary = json.loads((full_run / "summary.json").read_text())
    assert summary["finished"] and summary["updates"] == 6
    assert set(summary["final_eval"]) == set(TASKS)
    assert all(len(v) == 2 for per in summary["final_eval_episodes"].values()
               for v in per.values())


def test_dataset_is_an_argument_not_a_constant(store, full_run):
    """The jitted chunk takes the dataset as an unbatched parameter (DESIGN.md §5)."""
    home, _, _ = store
    rc = OfflineRunConfig.from_json(json.loads((full_run / "config.json").read_text()))
    ds = loop.open_run_dataset(rc, home)
    from wmx.datasets.readers import load_numpy
    agent, cfg = rc.agent_module, rc.agent_config
    data = program.device_dataset(load_numpy(ds), agent.batch_spec(cfg))
    carries = program.init_carries(agent, cfg, rc.seeds)
    text = program.make_chunk_fn(agent, cfg).lower(
        carries, data, agent.task_context(cfg, rc.task_set),
        np.arange(2, dtype=np.int32)).as_text()
    n = ds.num_episodes
    sig = text[text.index("func.func public @main"):].split("\n")[0]
    assert f"tensor<{n}x{T + 1}x17xf32>" in sig                 # obs is a parameter
    assert f"tensor<2x{n}x{T + 1}x17xf32>" not in text          # not copied per seed
    assert not any("constant" in line and f"tensor<{n}x{T + 1}x17xf32>" in line
                   for line in text.splitlines())          # not closed over


def test_split_run_equals_uninterrupted(store, full_run):
    home, _, _ = store
    split = home / "runs" / "split"
    split.mkdir()
    shutil.copy(full_run / "config.json", split / "config.json")
    rc = OfflineRunConfig.from_json(json.loads((split / "config.json").read_text()))
    s = loop.run(rc, split, home=home, progress=False, stop_after_chunks=2)
    assert not s["finished"] and s["updates"] == 4
    assert cli.main(["--resume", str(split)]) == 0          # with the progress bar
    assert _metrics(split) == _metrics(full_run)
    (a, ha), (b, hb) = _tree(split, rc), _tree(full_run, rc)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha["last_eval"] == hb["last_eval"] and ha["eval_index"] == hb["eval_index"] == 2


def test_deadline_stops_after_a_whole_chunk_and_checkpoints(store, full_run):
    """``deadline``: stop after the chunk that ends past it, evaluating there (off the
    schedule) and with a checkpoint even between checkpoint periods; the continued
    run's rows equal the uninterrupted run's, the stop's evaluation rows aside."""
    import time
    home, _, _ = store
    cfg = json.loads((full_run / "config.json").read_text())
    cfg["checkpoint_every"] = 4                      # the stop at 2 is off-period
    rc = OfflineRunConfig.from_json(cfg)
    dl = home / "runs" / "deadline"
    dl.mkdir()
    (dl / "config.json").write_text(json.dumps(cfg))
    s = loop.run(rc, dl, home=home, progress=False, deadline=time.monotonic() - 1)
    assert not s["finished"] and s["updates"] == 2
    assert [int(p.name) for p in list_checkpoints(dl)] == [2]
    stop_eval = [r for r in _metrics(dl) if r["kind"] == "eval"]
    assert {(r["updates"], r["task"]) for r in stop_eval} == {("2", t) for t in [*TASKS, "mean"]}
    assert set(s["final_eval"]) == set(TASKS)
    assert cli.main(["--resume", str(dl), "--no-progress"]) == 0
    rows = [r for r in _metrics(dl) if not (r["kind"] == "eval" and r["updates"] == "2")]
    assert rows == _metrics(full_run)


@pytest.mark.slow
def test_streaming_split_run_equals_uninterrupted(store):
    """--stream: per-seed Grain streams, iterator states checkpointed with the dataset hash
    (one more compile, ~45 s of CPU: slow)."""
    home, tst, _ = store
    base = ["--dataset", f"tst@{tst.name[:8]}", "--home", str(home), "--stream",
            "--skip-validation", *ARGS[:ARGS.index("--updates")], "--updates", "4",
            "--log-every", "2", "--eval-every", "4", "--checkpoint-every", "2",
            "--eval-episodes", "2", "--seeds", "0", "1", "--no-progress"]
    assert cli.main(base + ["--name", "sfull"]) == 0
    sfull = home / "runs" / "sfull"
    rc = OfflineRunConfig.from_json(json.loads((sfull / "config.json").read_text()))
    assert rc.stream
    ssplit = home / "runs" / "ssplit"
    ssplit.mkdir()
    shutil.copy(sfull / "config.json", ssplit / "config.json")
    loop.run(rc, ssplit, home=home, progress=False, stop_after_chunks=1)
    h = json.loads((list_checkpoints(ssplit)[-1] / "host.json").read_text())
    assert [s["dataset"] for s in h["streams"]] == [tst.name] * 2
    assert cli.main(["--resume", str(ssplit), "--no-progress"]) == 0
    assert _metrics(ssplit) == _metrics(sfull)


# ---- bad input: a clear error, nothing written -------------------------------------------
def _listing(home):
    return sorted(str(p.relative_to(home)) for p in Path(home).rglob("*"))


def test_unresolvable_dataset_is_an_error(store, tmp_path, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@0123456789", "--home", str(home), *ARGS]) == 2
    assert "0123456789" in capsys.readouterr().err
    assert cli.main(["--dataset", "nope@latest", "--home", str(tmp_path / "empty"), *ARGS]) == 2
    assert "nope" in capsys.readouterr().err
    assert _listing(home) == before and not (tmp_path / "empty" / "runs").exists()


def test_failing_validation_is_an_error(store, tmp_path, capsys):
    _, tst, _ = store
    home = tmp_path / "bad"
    dest = home / "datasets" / "tst" / tst.name
    shutil.copytree(tst, dest)
    shard = sorted(dest.glob("shard-*"))[0]
    raw = bytearray(shard.read_bytes())
    raw[-40] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "failed validation" in err and "shard_digest" in err and shard.name in err
    assert not (home / "runs").exists()


def test_unknown_task_is_an_error(store, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--tasks", "walker-run",
                     *ARGS]) == 2
    err = capsys.readouterr().err
    assert "walker-run" in err and "cartpole-balance" in err and "cheetah-run" in err
    assert _listing(home) == before


@pytest.mark.parametrize("change", ["config", "taskset"])
def test_checkpoint_of_another_run_is_refused(store, full_run, change, capsys):
    home, _, one = store
    cfg = json.loads((full_run / "config.json").read_text())
    if change == "config":
        cfg["batch_size"] = 8
    else:
        from wmx.datasets.readers import open_dataset
        ds = open_dataset(one)
        cfg["dataset"], cfg["taskset"] = f"one@{ds.content_hash}", ds.taskset.to_dict()
    other = home / "runs" / f"other-{change}"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(full_run / "checkpoints", other / "checkpoints")
    before = _listing(other)
    assert cli.main(["--resume", str(other), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "checkpoint" in err
    assert _listing(other) == before


def test_resume_with_another_dataset_is_refused(store, full_run, capsys):
    home, _, one = store
    before = _listing(full_run)
    assert cli.main(["--resume", str(full_run), "--dataset", "one@latest"]) == 2
    assert "trains on tst@" in capsys.readouterr().err
    assert _listing(full_run) == before


def test_dry_run_prints_counts_and_writes_nothing(store, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--dry-run", *ARGS]) == 0
    out = capsys.readouterr().out
    assert "task_emb" in out and "total" in out and "2 tasks" in out
    assert "192" in out   # task_emb: 2 tasks x task_dim 96
    assert _listing(home) == before


@pytest.mark.slow
def test_real_playground_evaluation(store):
    """Unpatched CLI: evaluation on the real Playground tasks (one MJX compile each)."""
    home, tst, _ = store
    assert cli.main(["--dataset", f"tst@{tst.name[:8]}", "--home", str(home), "--name", "real",
                     *ARGS[:ARGS.index("--updates")], "--updates", "2", "--log-every", "2",
                     "--eval-every", "2", "--eval-episodes", "2", "--seeds", "0",
                     "--no-progress"]) == 0
    summary = json.loads((home / "runs" / "real" / "summary.json").read_text())
    rets = summary["final_eval_episodes"]
    assert set(rets) == set(TASKS)
    # DMC rewards are in [0, 1] per simulator step; T=20 agent steps at action repeat 2
    for task in TASKS:
        assert all(0 <= r <= 2 * T for r in rets[task]["0"])
    # an upright cartpole earns ~1 per step: well above zero even for an untrained model
    assert min(rets["cartpole-balance"]["0"]) > 10
