"""`train_online --init-from RUN_DIR`: an online run whose agents start from another run's
checkpoint (a single-task DreamerV3 trained offline, issue 14), replay empty.

Default run: the source runs are written by hand (their checkpoints hold
initial states made distinct per seed; no training, no step compile): the
loaded states are each seed's own, everything else of the carry is fresh,
the CLI takes the source's agent and preset and stores the checkpoint it
starts from, and every mismatch is a one-line error. The slow test trains a
single-task DreamerV3 offline on the tiny dataset and fine-tunes it online
(stand-in env of the task's dims).
"""
from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from stand_in_env import stand_in_env
from wmx.checkpoint import list_checkpoints, restore_checkpoint, save_checkpoint
from wmx.envs.registry import get_task
from wmx.runs.host import HostState
from wmx.runs.offline_config import OfflineRunConfig
from wmx.runs.online_config import OnlineRunConfig
from wmx.schemas.taskset import TaskInfo, TaskSet
from wmx.train_offline import program as offline_program
from wmx.train_online import cli, loop
from wmx.train_online import program as online_program

TASK = "cartpole-balance"
TASKSET = TaskSet("tst", tuple(TaskInfo.from_spec(get_task(t)) for t in (TASK, "cheetah-run")),
                  (None, None), "none")


@pytest.fixture(autouse=True)
def _no_mjx(monkeypatch):
    """--dry-run builds the task's env: a stand-in of its dims (no MJX)."""
    import wmx.envs.playground
    monkeypatch.setattr(wmx.envs.playground, "cached_env", stand_in_env)


def _offline_source(home, name, agent="dreamerv3", tasks=(TASK,), seeds=(0, 1)):
    """An offline run directory with config.json and one checkpoint (update 2) whose agent
    states are the initial ones plus (seed index + 1) on every float leaf."""
    rc = OfflineRunConfig(dataset="tst@" + "0" * 64, taskset=TASKSET.to_dict(), agent=agent,
                          seeds=seeds, updates=2, preset="tiny", log_every=2, eval_every=2,
                          checkpoint_every=2, eval_episodes=1, train_tasks=tasks)
    run_dir = home / "runs" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(rc.to_json()))
    carries = offline_program.init_carries(rc.agent_module, rc.agent_config, rc.seeds)
    bump = np.arange(1, len(seeds) + 1, dtype=np.float32)
    agent = jax.tree.map(lambda x: x + bump.reshape(-1, *(1,) * (x.ndim - 1)).astype(x.dtype)
                         if np.issubdtype(x.dtype, np.floating) else x, carries.agent)
    save_checkpoint(run_dir, 2, offline_program.checkpoint_items(carries._replace(agent=agent)),
                    HostState(updates=2).to_json())
    return run_dir, rc, agent


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    home = tmp_path_factory.mktemp("init-from")
    run_dir, rc, agent = _offline_source(home, "off-single")
    assert not rc.multitask and rc.agent_config.obs_dim == 5     # the online agent's shapes
    return home, run_dir, rc, agent


def _online_rc(source_ckpt, seeds=(1,)):
    return OnlineRunConfig(task=TASK, agent="dreamerv3", seeds=seeds, env_steps=24, n_envs=2,
                           preset="tiny", eval_every=24, eval_episodes=1, episode_length=6,
                           init_from=str(source_ckpt))


def test_agents_start_from_each_seeds_state_with_an_empty_replay(source):
    _, run_dir, _, agent = source
    ckpt = list_checkpoints(run_dir)[-1]
    rc = _online_rc(ckpt, seeds=(1, 0))
    env = stand_in_env(TASK, 6)
    fresh = online_program.init_carries(rc, env)
    carries = loop.initial_carries(rc, env)
    for path, x in jax.tree_util.tree_leaves_with_path(carries.agent):
        src = np.asarray(_at(agent, path))
        np.testing.assert_array_equal(np.asarray(x), src[[1, 0]],
                                      err_msg=jax.tree_util.keystr(path))
    # everything but the agents is the fresh run's: empty replay, reset envs, keys
    for name in ("replay", "collector", "policy", "key", "metrics", "n_updates"):
        for a, b in zip(jax.tree.leaves(getattr(carries, name)),
                        jax.tree.leaves(getattr(fresh, name))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    assert int(np.asarray(carries.replay.rows).max()) == 0
    # and the loaded states are not the fresh ones (the check can fail)
    assert not np.array_equal(np.asarray(jax.tree.leaves(carries.agent)[0]),
                              np.asarray(jax.tree.leaves(fresh.agent)[0]))
    # without init_from: the fresh carries
    plain = loop.initial_carries(OnlineRunConfig(**{**rc.__dict__, "init_from": None}), env)
    for a, b in zip(jax.tree.leaves(plain.agent), jax.tree.leaves(fresh.agent)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_cli_takes_the_sources_agent_and_preset_and_stores_the_checkpoint(source, capsys):
    home, run_dir, _, _ = source
    argv = ["--task", TASK, "--init-from", str(run_dir), "--seeds", "0", "--env-steps", "24",
            "--home", str(home), "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "dreamerv3 on cartpole-balance" in out and "preset tiny" in out
    assert f"agents start from {list_checkpoints(run_dir)[-1]}" in out
    args = cli.build_parser().parse_args(argv)
    args.given = {"task", "init_from", "seeds", "env_steps", "home", "dry_run"}
    rc = cli.config_from_args(args)
    assert (rc.agent, rc.preset, rc.n_envs) == ("dreamerv3", "tiny", 2)
    assert rc.to_json()["init_from"] == str(list_checkpoints(run_dir)[-1])
    assert "init_from" not in OnlineRunConfig(task=TASK).to_json()   # other runs' hashes kept


@pytest.mark.parametrize("case, expected", [
    ("nothing", "not a run directory"),
    ("other-task", "the source trained on cartpole-balance, this run's task is cheetah-run"),
    ("seed", "seeds [2] are not among the source's seeds [0, 1]"),
    ("preset", "other shapes than this run's config; source fields that differ: "),
    ("agent", "the source trained agent dreamerv3, this run is --agent tdmpc2"),
    ("multitask", "the source is a multi-task dreamerv3 model of 2 tasks (cartpole-balance, "
                  "cheetah-run); fine-tune a single-task model (train_offline --agent "
                  "dreamerv3 --tasks cartpole-balance)"),
    ("tdmpc2-offline", "the source is a multi-task tdmpc2 model of 1 task (cartpole-balance), "
                       "and tdmpc2's offline models are multi-task for any number of tasks; "
                       "--init-from takes a single-task offline run of dreamerv3 (train_offline "
                       "--agent dreamerv3 --tasks cartpole-balance) or an online run of "
                       "cartpole-balance"),
    ("resume", "--init-from does not apply to a resumed run"),
])
def test_mismatches_are_one_line_errors(source, tmp_path, case, expected, capsys):
    home, run_dir, _, _ = source
    base = ["--task", TASK, "--init-from", str(run_dir), "--home", str(home), "--dry-run"]
    argv = {"nothing": ["--task", TASK, "--init-from", str(tmp_path), "--dry-run"],
            "other-task": [*base, "--task", "cheetah-run"],
            "seed": [*base, "--seeds", "0", "2"],
            "preset": [*base, "--preset", "cpu"],
            "agent": [*base, "--agent", "tdmpc2"],
            "multitask": None, "tdmpc2-offline": None,
            "resume": ["--resume", str(run_dir), "--init-from", str(run_dir)]
            }[case]
    if case == "multitask":
        mt_dir, _, _ = _offline_source(tmp_path, "mt", tasks=None)
        argv = ["--task", TASK, "--init-from", str(mt_dir), "--dry-run"]
    if case == "tdmpc2-offline":    # one task, yet TD-MPC2's offline model is multi-task
        td_dir, td_rc, _ = _offline_source(tmp_path, "td", agent="tdmpc2", seeds=(0,))
        assert td_rc.multitask and td_rc.train_task_set.names == (TASK,)
        argv = ["--task", TASK, "--init-from", str(td_dir), "--dry-run"]
    if case == "resume":        # an online run to resume
        online = home / "runs" / "online-resume"
        if not online.exists():
            online.mkdir()
            (online / "config.json").write_text(json.dumps(OnlineRunConfig(
                task=TASK, agent="dreamerv3", preset="tiny").to_json()))
        argv[1] = str(online)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_offline_single_task_dreamerv3_fine_tunes_online(tiny_offline_dataset, tmp_path,
                                                         monkeypatch):
    """train_offline --agent dreamerv3 --tasks cartpole-balance, then train_online
    --init-from it (stand-in env): the first chunk runs no update, so its checkpoint holds
    the offline states; the run then trains on from them."""
    from wmx.train_offline import cli as offline_cli
    from wmx.train_offline import loop as offline_loop
    home, ds = tiny_offline_dataset
    monkeypatch.setattr(offline_loop, "cached_env", stand_in_env)
    monkeypatch.setattr(loop, "cached_env", stand_in_env)
    assert offline_cli.main(["--agent", "dreamerv3", "--dataset", str(ds), "--home", str(home),
                             "--name", "dv3-single", "--tasks", TASK, "--preset", "tiny",
                             "--updates", "2", "--log-every", "2", "--eval-every", "2",
                             "--eval-episodes", "1", "--episode-length", "6", "--seeds", "0",
                             "--no-progress"]) == 0
    off = home / "runs" / "dv3-single"
    off_cfg = json.loads((off / "config.json").read_text())["resolved_agent_config"]
    assert (off_cfg["num_tasks"], off_cfg["obs_dim"], off_cfg["action_dim"]) == (0, 5, 1)
    assert cli.main(["--task", TASK, "--init-from", str(off), "--home", str(home), "--name",
                     "dv3-finetune", "--env-steps", "48", "--episode-length", "6",
                     "--eval-every", "48", "--eval-episodes", "1", "--no-progress",
                     "--no-export"]) == 0
    run = home / "runs" / "dv3-finetune"
    rc = OnlineRunConfig.from_json(json.loads((run / "config.json").read_text()))
    like = online_program.checkpoint_items(
        jax.eval_shape(lambda: online_program.init_carries(rc, stand_in_env(TASK, 6))))
    first, last = list_checkpoints(run)[0], list_checkpoints(run)[-1]
    src = OfflineRunConfig.from_json(json.loads((off / "config.json").read_text()))
    src_like = offline_program.checkpoint_items(jax.eval_shape(
        lambda: offline_program.init_carries(src.agent_module, src.agent_config, src.seeds)))
    (src_items, _) = restore_checkpoint(list_checkpoints(off)[-1], {"agent": src_like["agent"]})
    (a, _), (b, _) = (restore_checkpoint(c, {"agent": like["agent"], "loop": like["loop"]})
                      for c in (first, last))
    assert int(np.asarray(a["loop"]["n_updates"])[0]) == 0 < int(
        np.asarray(b["loop"]["n_updates"])[0])
    for x, y in zip(jax.tree.leaves(a["agent"]), jax.tree.leaves(src_items["agent"])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert any(not np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree.leaves(b["agent"]), jax.tree.leaves(src_items["agent"])))


def _at(tree, path):
    for p in path:
        tree = (tree[p.key] if hasattr(p, "key") else tree[p.idx] if hasattr(p, "idx")
                else getattr(tree, p.name))
    return tree
