"""A trained run as the evaluator sees it: its config, newest checkpoint, envs and rollouts.

Online runs (`train_online`: one task, config.json with ``task``) and offline
runs (`train_offline`: a TaskSet, config.json with ``dataset`` and
``taskset``) are opened with their run configs (`wmx.runs`), and only the
checkpoint items evaluation needs are restored: "agent" (the agents'
training states, template `Agent.init` through ``jax.eval_shape``) and
"keys"; never the replay. The evaluation envs come from the one env cache
(`wmx.envs.playground.cached_env`, shared with the trainers in a process),
and the episodes from the shared rollout (`wmx.acting`).

Rollout keys. Default ("fresh"): seed s uses ``fold_in(PRNGKey(s),
EVALUATE_TAG)`` with evaluation index 0, a stream the trainers never use.
``seeds_from_checkpoint``: the checkpoint's own seed keys and the index of
its last evaluation (``eval_index - 1``), so on a finished run, with the
run's episode count, the rollout repeats the trainer's final evaluation
exactly.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmx.acting import make_evaluate_fn
from wmx.checkpoint import newest_intact, restore_checkpoint
from wmx.envs.base import Env
from wmx.evaluate.video import Recording

log = logging.getLogger("wmx.evaluate")

POLICY_ITEMS = ("agent", "keys")
"""The checkpoint items evaluation restores (`restore_policy`)."""

EVALUATE_TAG = 0xE7A1
"""fold_in tag of the evaluate command's own rollout keys (see the module doc)."""

EnvFn = Callable[[str, int, int], Env]
"""``env_fn(task, T agent steps, action_repeat) -> Env`` (a test seam)."""

__all__ = ["RunError", "RunInfo", "EVALUATE_TAG", "open_run", "select_tasks", "eval_env",
           "restore_policy", "check_renderable", "evaluate_run"]


class RunError(ValueError):
    """A run directory cannot be evaluated; the message names the problem and the fix."""


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """An opened run directory.

    kind: "online" or "offline"; config: config.json as written; rc: the
    trainer's run config; checkpoint: the newest complete checkpoint folder;
    step: its number (online: absolute tick; offline: updates); host: its
    host.json counters; tasks: the run's tasks in TaskSet order (offline: the
    tasks it trained on; online: its one task); seeds: the run's seeds.
    """
    run_dir: Path
    kind: str
    config: dict
    rc: Any
    checkpoint: Path
    step: int
    host: dict
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def env_steps(self) -> int | None:
        """Online: simulator steps per seed at the checkpoint (agent steps x repeat)."""
        if self.kind != "online":
            return None
        spec = self.rc.task_spec
        rounds = int(self.host.get("next_tick", self.step)) // (spec.T + 1)
        return rounds * spec.T * self.rc.n_envs * spec.action_repeat

    @property
    def updates(self) -> int | None:
        """Offline: gradient updates at the checkpoint; online: None (not a host counter)."""
        if self.kind != "offline":   # host.json's field stays 0 online (counted per seed)
            return None
        return int(self.host["updates"]) if "updates" in self.host else None

    def task_protocol(self, task: str) -> tuple[int, int]:
        """(T agent steps, action repeat) of ``task``'s evaluation episodes in this run."""
        if self.kind == "online":
            spec = self.rc.task_spec
            return spec.T, spec.action_repeat
        info = self.rc.task_set.task(task)
        return self.rc.episode_length or info.episode_length, info.action_repeat


def open_run(run_dir: str | Path) -> RunInfo:
    """Open ``run_dir`` (a train_online or train_offline run) at its newest intact
    checkpoint (`wmx.checkpoint.newest_intact` for the items evaluation reads: a damaged
    newer one is one WARNING line naming the damaged file and the checkpoint used).

    Raises RunError when the directory does not exist, has no config.json,
    its config is neither kind, or it has no complete checkpoint, and
    CheckpointDamagedError (a ValueError) when no checkpoint is intact.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    if not run_dir.is_dir():
        raise RunError(f"run directory {run_dir} does not exist; pass a run directory "
                       "written by train_online or train_offline (<home>/runs/<name>)")
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise RunError(f"{run_dir} has no config.json: not a run directory; pass one written "
                       "by train_online or train_offline (<home>/runs/<name>)")
    from wmx.runs.listing import damaged_config_message
    damaged = damaged_config_message(run_dir)
    if damaged is not None:
        raise RunError(damaged)
    config = json.loads(cfg_path.read_text())
    try:
        if "dataset" in config and "taskset" in config:
            from wmx.runs.offline_config import OfflineRunConfig
            kind, rc = "offline", OfflineRunConfig.from_json(config)
            tasks = rc.train_task_set.names
        elif "task" in config:
            from wmx.runs.online_config import OnlineRunConfig
            kind, rc = "online", OnlineRunConfig.from_json(config)
            tasks = (rc.task,)
        else:
            raise RunError(f"{cfg_path} is neither a train_online nor a train_offline config")
    except (TypeError, KeyError) as err:
        raise RunError(f"{cfg_path} is not a config this version of wmx reads ({err}); "
                       "the run directory is damaged or from another version") from None
    found = newest_intact(run_dir, POLICY_ITEMS, log)   # a damaged newer one: said
    if found is None:
        raise RunError(f"run {run_dir} has no checkpoint yet (checkpoints/ is empty or "
                       "missing); let the run reach its first checkpoint, or continue it "
                       f"with `train_{kind} --resume {run_dir}`")
    ckpt, host = found
    return RunInfo(run_dir, kind, config, rc, ckpt, int(ckpt.name), host, tasks,
                   tuple(rc.seeds))


def select_tasks(info: RunInfo, tasks: Sequence[str] | None) -> tuple[str, ...]:
    """The tasks to evaluate, in the run's order: all of the run's (None) or the subset ``tasks``.

    Raises RunError for an empty or duplicated list, a name the registry does
    not know, or a task that is not the run's (listing the run's tasks).
    """
    if tasks is None:
        return info.tasks
    tasks = list(tasks)
    if not tasks:
        raise RunError("--tasks needs at least one task (omit it to evaluate every task)")
    dup = sorted({t for t in tasks if tasks.count(t) > 1})
    if dup:
        raise RunError(f"--tasks lists {dup} more than once")
    from wmx.envs.registry import get_task
    for t in tasks:
        try:
            get_task(t)
        except ValueError as err:
            raise RunError(f"--tasks {t!r}: {err}") from None
    foreign = [t for t in tasks if t not in info.tasks]
    if foreign:
        what = "its TaskSet" if info.kind == "offline" else "its task"
        raise RunError(f"--tasks {foreign} not in run {info.name} ({info.kind}); {what}: "
                       f"{list(info.tasks)}; pick from those or omit --tasks")
    return tuple(t for t in info.tasks if t in tasks)


def eval_env(info: RunInfo, task: str, env_fn: EnvFn | None = None) -> Env:
    """The evaluation env of ``task`` with the run's T and action repeat.

    Default: the trainers' cached Playground/probe env (the same object the
    trainer evaluates with in this process, so compiled rollouts are reused).
    """
    T, repeat = info.task_protocol(task)
    if env_fn is not None:
        return env_fn(task, T, repeat)
    from wmx.envs.playground import cached_env
    if info.kind == "online":     # the trainer's own cache key: same env object
        return cached_env(info.rc.task, info.rc.episode_length)
    return cached_env(task, T, repeat)


def restore_policy(info: RunInfo) -> tuple[Any, jax.Array]:
    """(policy params, keys u32[S,2]) of every seed from the run's newest checkpoint.

    Restores only the "agent" and "keys" items (templates from `Agent.init`
    through ``jax.eval_shape``, seeds stacked), placed on the first device as
    the trainers place them, and keeps `Agent.policy_params` of each seed.
    Raises ValueError when the checkpoint does not match the run's config.
    """
    agent, cfg = info.rc.agent_module, info.rc.agent_config
    seeds = len(info.seeds)
    like = jax.eval_shape(lambda: {
        "agent": jax.vmap(lambda k: agent.init(k, cfg))(jnp.zeros((seeds, 2), jnp.uint32)),
        "keys": jnp.zeros((seeds, 2), jnp.uint32)})
    items, _ = restore_checkpoint(info.checkpoint, like, verify=False)   # open_run did
    params = jax.vmap(agent.policy_params)(items["agent"])
    return jax.device_put((params, items["keys"]), jax.devices()[0])


def _keys(info: RunInfo, ckpt_keys: jax.Array, seeds_from_checkpoint: bool):
    if seeds_from_checkpoint:
        return ckpt_keys, max(int(info.host.get("eval_index", 0)) - 1, 0)
    keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), EVALUATE_TAG)
                      for s in info.seeds])
    return jax.device_put(keys, jax.devices()[0]), 0


def check_renderable(info: RunInfo, tasks: Sequence[str], env_fn: EnvFn | None = None) -> None:
    """Raise RunError when an env of ``tasks`` has no MuJoCo model (a probe) to render."""
    flat = [t for t in tasks if eval_env(info, t, env_fn).mj_model is None]
    if flat:
        raise RunError(f"--video: {', '.join(flat)} cannot be rendered (no MuJoCo model: a "
                       "probe env); omit --video, or pick Playground tasks with --tasks")


def evaluate_run(info: RunInfo, tasks: Sequence[str], episodes: int, *,
                 seeds_from_checkpoint: bool = False, env_fn: EnvFn | None = None,
                 video: int = 0) -> tuple[dict[str, np.ndarray], dict[str, Any], list[Recording]]:
    """Evaluate the run's newest checkpoint on ``tasks``.

    Returns (returns, meta, recordings): returns[task] is float32
    [n_seeds, episodes] of undiscounted episode returns (seeds in the run's
    order); meta holds the key mode ("fresh" or "checkpoint"), the
    evaluation index, and per task the wall seconds and (T, action repeat);
    recordings: with ``video`` N > 0, per task the physics of the first N
    episodes of the run's first seed (`video.Recording`, to render on the
    host), else empty. Recording does not change the episodes or returns.
    Logs one line per task. Raises ValueError for episodes < 1, video
    outside [0, episodes], a checkpoint that does not match, or (video) an
    env without a MuJoCo model.
    """
    if int(episodes) < 1:
        raise RunError(f"--episodes must be >= 1, got {episodes}")
    if not 0 <= int(video) <= int(episodes):
        raise RunError(f"--video must be in [0, --episodes={episodes}], got {video}")
    params, ckpt_keys = restore_policy(info)
    keys, index = _keys(info, ckpt_keys, seeds_from_checkpoint)
    agent, cfg = info.rc.agent_module, info.rc.agent_config
    tasks_ctx = (agent.task_context(cfg, info.rc.train_task_set) if info.kind == "offline"
                 else None)
    out, per_task, recordings = {}, {}, []
    for n, task in enumerate(tasks, 1):
        env = eval_env(info, task, env_fn)
        task_id = info.rc.model_task_id(task) if info.kind == "offline" else None
        log.info("evaluating %s (%d/%d): %d seeds x %d episodes of T=%d ...", task, n,
                 len(tasks), len(info.seeds), episodes, env.T)
        t0 = time.perf_counter()
        fn = make_evaluate_fn(agent, cfg, int(episodes), env, task_id, record=int(video))
        result = fn(params, keys, tasks_ctx, index)
        if video:
            result, physics = result           # every seed's, on the device
            result, physics = jax.device_get(  # only the first seed's physics leaves it
                (result, jax.tree_util.tree_map(lambda x: x[0], physics)))
            recordings.append(Recording(
                task=task, seed=info.seeds[0], mj_model=env.mj_model, fps=1.0 / env.agent_dt,
                physics={k: np.asarray(v) for k, v in physics.items()},
                returns=np.asarray(result[0, :video], np.float32)))
        else:
            result = jax.device_get(result)
        rets = np.asarray(result, np.float32)
        wall = time.perf_counter() - t0
        out[task] = rets
        per_task[task] = {"wall_s": round(wall, 2), "episode_length": env.T,
                          "action_repeat": env.action_repeat}
        log.info("%s: return %.1f +- %.1f (seeds %s) in %.1f s", task, float(rets.mean()),
                 float(rets.std()), "/".join(f"{x:.1f}" for x in rets.mean(axis=1)), wall)
    meta = {"keys": "checkpoint" if seeds_from_checkpoint else "fresh", "eval_index": index,
            "episodes": int(episodes), "tasks": per_task}
    return out, meta, recordings
