"""The tiny TD-MPC2 online run (probe-action, T=20, seeds 0 and 3, with
episode-set export) that tests/train_online, tests/evaluate and
tests/reliability share through conftest.py's session fixture
`tiny_online_run`, so its chunk and evaluation programs (cached per config
and env) compile once per session; `TINY_ONLINE_ARGV` is the same run as
train_online flags. `TINY_OFFLINE_ARGS` and `build_offline_dataset`: the tiny
offline run of tests/train_offline (a real Beam build of the stored
Playground episodes, cartpole-balance + cheetah-run, T=20);
`train_offline_on_stand_ins` trains such a run through the CLI and
`last_offline_checkpoint` reads it back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wmx.datasets.store import Store
from wmx.train_online import cli as online_cli
from wmx.train_online.loop import run
from wmx.runs.online_config import OnlineRunConfig

T = 20   # probe-action's episode length (agent steps)
TINY_RC = OnlineRunConfig(task="probe-action", seeds=(0, 3), env_steps=6 * T, preset="tiny",
                          agent_overrides={"seed_steps": 2 * T}, eval_every=2 * T,
                          eval_episodes=2, chunk_episodes=1)


TINY_ONLINE_ARGV = ["--task", "probe-action", "--seeds", "0", "3", "--env-steps", str(6 * T),
                    "--preset", "tiny", "--seed-steps", str(2 * T), "--eval-every", str(2 * T),
                    "--eval-episodes", "2", "--no-progress"]
"""train_online flags of TINY_RC (same config, so the same compiled programs)."""

TINY_OFFLINE_ARGS = ["--preset", "tiny", "--batch-size", "16", "--updates", "6", "--log-every",
                     "2", "--eval-every", "4", "--checkpoint-every", "2", "--eval-episodes", "2",
                     "--seeds", "0", "1", "--no-progress"]
"""train_offline flags of the tiny offline run (tests/train_offline)."""


def build_offline_dataset(home: Path, name: str = "tst") -> Path:
    """Store the tiny offline run's episode sets (stored real cartpole-balance and
    cheetah-run episodes, T=20) in ``home`` and build dataset ``name`` (2 shards)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent / "pipelines"))
    from episode_fixtures import (playground_info, stored_playground_episodes, taskset_of,
                                  write_set)
    from wmx.pipelines.sources import make_plan, run_build
    infos = [playground_info(t) for t in ("cartpole-balance", "cheetah-run")]
    for i, info in enumerate(infos):
        write_set(home, info, stored_playground_episodes(info.name), seed=i)
    return run_build(make_plan(home, taskset_of(name, infos), num_shards=2))


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


def train_offline_on_stand_ins(argv: list[str]) -> int:
    """train_offline's CLI on ``argv`` with every evaluation env a stand-in of the task's
    dims (tests/stand_in_env.py: no MJX compile), outside any test's monkeypatch (for
    module-scoped fixtures). Returns the CLI's exit code."""
    from stand_in_env import stand_in_env
    from wmx.train_offline import cli, loop
    mp = pytest.MonkeyPatch()
    mp.setattr(loop, "cached_env", stand_in_env)
    try:
        return cli.main(argv)
    finally:
        mp.undo()


def last_offline_checkpoint(run_dir: Path, rc) -> tuple[dict, dict]:
    """(checkpoint items, host state) of the latest checkpoint of offline run ``run_dir``
    with config ``rc`` (an OfflineRunConfig)."""
    import jax
    from wmx.checkpoint import list_checkpoints, restore_checkpoint
    from wmx.train_offline import program
    like = program.checkpoint_items(
        jax.eval_shape(lambda: program.init_carries(rc.agent_module, rc.agent_config, rc.seeds)))
    return restore_checkpoint(list_checkpoints(run_dir)[-1], like)
