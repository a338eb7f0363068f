"""The evaluation rollout of TD-MPC2: eval_mode MPPI episodes from fresh initial states.

One jitted program per (agent config, episode count, env, task id), used by
both trainers (`wmx.train_online.program.make_eval_fn`,
`wmx.train_offline.program.make_eval_fn`) and by the `evaluate` command.

Protocol (tdmpc2_spec 4.20-4.21, deviation T16): per seed, ``E`` episodes
vmapped, each from a fresh reset, T = env.T agent steps, acting with the
planner in eval_mode (no final exploration noise; the rest of MPPI stays
stochastic, spec 3.20), t0 at each episode's first step, each episode with
its own warm-start carry (deviation T9). The return is the undiscounted sum
of the env's rewards (each the sum over the action repeat). A multi-task
model plans with `multitask.plan_task` on the zero-padded observation and
the env takes the first ``env.action_dim`` action dims (masked dims are
exactly 0).

Keys: the rollout key of one seed is ``fold_in(fold_in(key, EVAL_TAG),
index)``, then ``fold_in(., task_id)`` for a multi-task model; its first
split draws the E resets, the second the planner noise of step t (folded with
t). So the same (key, index, task) always replays the same episodes.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.multitask import TaskContext, pad_obs, plan_task
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.envs.base import Env

EVAL_TAG = 0x5EED
"""fold_in tag of the evaluation key stream (the trainers' key streams use others)."""

__all__ = ["EVAL_TAG", "rollout_key", "make_rollout_fn"]


def rollout_key(key: jax.Array, index: Any, task_id: int | None = None) -> jax.Array:
    """The rollout key u32[2] of one seed for evaluation ``index`` (and task ``task_id``).

    key: the seed's raw PRNG key u32[2]; index: i32[] (the trainer's
    evaluation counter); task_id: the TaskSet id of a multi-task model, None
    for a single-task one.
    """
    key = jax.random.fold_in(jax.random.fold_in(key, EVAL_TAG), index)
    return key if task_id is None else jax.random.fold_in(key, task_id)


def make_rollout_fn(cfg: TDMPC2Config, episodes: int, env: Env, task_id: int | None = None
                    ) -> Callable[..., jax.Array]:
    """Jitted ``rollout(params, keys u32[S,2], tasks, index i32[]) -> returns f32[S, E]``.

    params: a seed-stacked parameter tree (leading axis S, as in the
    trainers' carries); keys: the seeds' raw keys; tasks: the TaskSet's
    `TaskContext` for a multi-task model (``cfg.num_tasks > 0``, task_id
    its id in the TaskSet), None for a single-task one; index: the
    evaluation index folded into the key (`rollout_key`). Returns the
    undiscounted episode returns, float32, in the env's reward units (sum
    over the T agent steps of the repeated-action rewards).

    Cached per (resolved config, episodes, env, task id): env instances hash
    by identity, so pass the same env object to reuse the compiled program.
    Raises ValueError for episodes < 1, a task id given to a single-task
    config or missing for a multi-task one, or env dims that do not fit the
    config (multi-task: the padded widths; single-task: equal).
    """
    cfg = cfg.resolved()
    episodes = int(episodes)
    if episodes < 1:
        raise ValueError(f"evaluation needs at least 1 episode, got {episodes}")
    multitask = cfg.num_tasks > 0
    if multitask != (task_id is not None):
        raise ValueError(
            f"task_id {task_id!r} does not fit a {'multi' if multitask else 'single'}-task "
            "config: give the TaskSet id for a multi-task model, None for a single-task one")
    if multitask:
        if env.obs_dim > cfg.obs_dim or env.action_dim > cfg.action_dim:
            raise ValueError(f"env {env.name} (obs {env.obs_dim}, action {env.action_dim}) does "
                             f"not fit the padded widths ({cfg.obs_dim}, {cfg.action_dim})")
        if not 0 <= int(task_id) < cfg.num_tasks:
            raise ValueError(f"task_id {task_id} outside the config's {cfg.num_tasks} tasks")
        task_id = int(task_id)
    elif (env.obs_dim, env.action_dim) != (cfg.obs_dim, cfg.action_dim):
        raise ValueError(f"env {env.name} (obs {env.obs_dim}, action {env.action_dim}) does not "
                         f"match the config ({cfg.obs_dim}, {cfg.action_dim})")
    return _rollout_fn(cfg, episodes, env, task_id)


@functools.lru_cache(maxsize=64)
def _rollout_fn(cfg: TDMPC2Config, E: int, env: Env, task_id: int | None):
    A = env.action_dim
    A_plan = cfg.action_dim

    def act(params, obs, prev, t0, noise, tasks):
        if task_id is None:
            return jax.vmap(lambda o, pm, f, nz: plan(params, o, pm, f, nz, cfg,
                                                      eval_mode=True))(obs, prev, t0, noise)
        obs = pad_obs(obs, cfg.obs_dim)
        return jax.vmap(lambda o, pm, f, nz: plan_task(params, o, pm, f, nz, cfg, tasks, task_id,
                                                       eval_mode=True))(obs, prev, t0, noise)

    def one_seed(params, key, tasks: TaskContext | None, index):
        k_reset, k_act = jax.random.split(rollout_key(key, index, task_id))
        states = jax.vmap(env.reset)(jax.random.split(k_reset, E))
        prev = jnp.zeros((E, cfg.horizon, A_plan), jnp.float32)

        def step(c, t):
            states, prev, ret = c
            keys = jax.random.split(jax.random.fold_in(k_act, t), E)
            noise = jax.vmap(lambda k: draw_plan_noise(k, cfg, True))(keys)
            t0 = jnp.full((E,), t == 0)
            action, prev, _ = act(params, states.obs, prev, t0, noise, tasks)
            states = jax.vmap(env.step)(states, action[:, :A])
            return (states, prev, ret + states.reward), None

        (_, _, ret), _ = jax.lax.scan(step, (states, prev, jnp.zeros((E,), jnp.float32)),
                                      jnp.arange(env.T))
        return ret

    return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)))
