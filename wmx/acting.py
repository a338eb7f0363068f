"""Acting and evaluation for any agent of the protocol (`wmx.agents.api.Agent`).

Below both trainers and the `evaluate` command, above the agents: it knows
envs and the protocol, no agent's internals. `policy_step` adapts one env
batch to an agent (zero-pads observations to the config's width, cuts the
action back to the env's width); `make_evaluate_fn` is the one evaluation
rollout every stage uses.

Evaluation protocol (tdmpc2_spec 4.20-4.21, deviations T9, T16; DreamerV3
spec 7.4): per seed, E episodes vmapped, each from a fresh reset, T = env.T
agent steps, acting in eval_mode from a fresh policy carry with is_first on
each episode's first step. The return is the undiscounted sum of the env's
rewards (each the sum over the action repeat).

Keys: the rollout key of one seed is ``fold_in(fold_in(key, EVAL_TAG),
index)``, then ``fold_in(., task_id)`` for a multi-task model; its first
split draws the E resets, the second the policy key of step t (folded with
t). So the same (key, index, task) always replays the same episodes.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from wmx.envs.base import Env
from wmx.xla_cpu import options_key

EVAL_TAG = 0x5EED
"""fold_in tag of the evaluation key stream (the trainers' key streams use others)."""

__all__ = ["EVAL_TAG", "pad_to", "policy_step", "rollout_key", "make_evaluate_fn", "EvalProgram"]


def pad_to(x: jax.Array, width: int) -> jax.Array:
    """Zero-pad f32[..., S] at the end to f32[..., width] (no-op when S == width).

    Source: tdmpc2_spec 1.23, DESIGN.md §4 (padded multi-task widths).
    Raises ValueError when S > width.
    """
    s = x.shape[-1]
    if s > width:
        raise ValueError(f"observation has {s} dims, more than the model's width {width}")
    if s == width:
        return x
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, width - s)])


def policy_step(agent: ModuleType, params: Any, cfg: Any, carry: Any, obs: jax.Array,
                is_first: jax.Array, key: jax.Array, action_dim: int, *, eval_mode: bool,
                tasks: Any = None, task_id: Any = None) -> tuple[Any, jax.Array, dict]:
    """`agent.policy` on one env batch.

    obs f32[n, S] (S <= cfg.obs_dim, padded here); is_first bool[n]; key: one
    key for the n envs; action_dim: the env's A (<= cfg.action_dim).
    Returns (carry, env action f32[n, action_dim], entries).
    """
    carry, action, entries = agent.policy(params, cfg, carry, pad_to(obs, cfg.obs_dim),
                                          is_first, key, eval_mode=eval_mode, tasks=tasks,
                                          task_id=task_id)
    return carry, action[:, :action_dim], entries


def rollout_key(key: jax.Array, index: Any, task_id: int | None = None) -> jax.Array:
    """The rollout key u32[2] of one seed for evaluation ``index`` (and task ``task_id``).

    key: the seed's raw PRNG key u32[2]; index: i32[] (the trainer's
    evaluation counter); task_id: the TaskSet id of a multi-task model, None
    for a single-task one.
    """
    key = jax.random.fold_in(jax.random.fold_in(key, EVAL_TAG), index)
    return key if task_id is None else jax.random.fold_in(key, task_id)


def make_evaluate_fn(agent: ModuleType, cfg: Any, episodes: int, env: Env,
                     task_id: int | None = None, record: int = 0) -> Callable[..., Any]:
    """Jitted ``evaluate(params, keys u32[S,2], tasks, index i32[]) -> returns f32[S, E]``.

    params: seed-stacked policy parameters (`agent.policy_params` of each
    seed's state, leading axis S); keys: the seeds' raw keys; tasks: the
    agent's `task_context` for a multi-task config (task_id its TaskSet id),
    None otherwise; index: the evaluation index folded into the key
    (`rollout_key`). Returns undiscounted episode returns, float32, in the
    env's reward units.

    record: with R > 0 the program also returns the physics of the first R
    episodes of each seed, ``(returns, physics)`` with physics[name]
    f32[S, R, T+1, ...] (`Env.physics`: row 0 the reset state, row t the state
    after agent step t), for rendering on the host. Recording adds outputs
    only; the episodes and returns are those of ``record=0``.

    Compiled with the agent's `compiler_options` (the trainers' dot path, so an
    evaluation computes the policy as the training chunk does). Cached per (agent,
    config, episodes, env, task id, record, compile options): env instances
    hash by identity, so pass the same env object to reuse the compiled
    program. Raises ValueError for episodes < 1, a task id that does not fit
    the config, env dims that do not fit the config (multi-task: within the
    padded widths; single-task: equal), or record outside [0, episodes] or
    > 0 for an env without a MuJoCo model.
    """
    episodes, record = int(episodes), int(record)
    if episodes < 1:
        raise ValueError(f"evaluation needs at least 1 episode, got {episodes}")
    if not 0 <= record <= episodes:
        raise ValueError(f"record must be in [0, {episodes}] (the episodes), got {record}")
    if record and env.mj_model is None:
        raise ValueError(f"env {env.name} has no MuJoCo model: its episodes cannot be recorded")
    num_tasks = int(getattr(cfg, "num_tasks", 0) or 0)
    multitask = num_tasks > 0
    if multitask != (task_id is not None):
        raise ValueError(
            f"task_id {task_id!r} does not fit a {'multi' if multitask else 'single'}-task "
            "config: give the TaskSet id for a multi-task model, None for a single-task one")
    if multitask:
        if env.obs_dim > cfg.obs_dim or env.action_dim > cfg.action_dim:
            raise ValueError(f"env {env.name} (obs {env.obs_dim}, action {env.action_dim}) does "
                             f"not fit the padded widths ({cfg.obs_dim}, {cfg.action_dim})")
        if not 0 <= int(task_id) < num_tasks:
            raise ValueError(f"task_id {task_id} outside the config's {num_tasks} tasks")
        task_id = int(task_id)
    elif (env.obs_dim, env.action_dim) != (cfg.obs_dim, cfg.action_dim):
        raise ValueError(f"env {env.name} (obs {env.obs_dim}, action {env.action_dim}) does not "
                         f"match the config ({cfg.obs_dim}, {cfg.action_dim})")
    return _evaluate_fn(agent, cfg, episodes, env, task_id, record,
                        options_key(agent.compiler_options(cfg)))


class EvalProgram(NamedTuple):
    """A trainer's evaluation: ``jitted(*args(...))`` -> returns f32[S, E].

    jitted: the rollout of `make_evaluate_fn`; args: the trainer's own arguments (the
    seeds' agent states, keys, ...) -> the rollout's (policy parameters, keys, tasks,
    index). Split so that a trainer can compile the rollout ahead of its first evaluation
    (`wmx.compile_ahead`): ``ahead.call(key, p.jitted, *p.args(...))``.
    """

    jitted: Any
    args: Callable[..., tuple]


@functools.lru_cache(maxsize=64)
def _evaluate_fn(agent: ModuleType, cfg: Any, E: int, env: Env, task_id: int | None,
                 record: int, options: tuple):
    A = env.action_dim

    def physics(states):      # {name: [record, ...]} of the first `record` envs
        first = jax.tree_util.tree_map(lambda x: x[:record], states)
        return jax.vmap(env.physics)(first)

    def one_seed(params, key, tasks, index):
        k_reset, k_act = jax.random.split(rollout_key(key, index, task_id))
        states = jax.vmap(env.reset)(jax.random.split(k_reset, E))
        carry = agent.init_policy(cfg, E)

        def step(c, t):
            states, carry, ret = c
            is_first = jnp.full((E,), t == 0)
            carry, action, _ = policy_step(agent, params, cfg, carry, states.obs, is_first,
                                           jax.random.fold_in(k_act, t), A, eval_mode=True,
                                           tasks=tasks, task_id=task_id)
            states = jax.vmap(env.step)(states, action)
            return (states, carry, ret + states.reward), (physics(states) if record else None)

        (_, _, ret), traj = jax.lax.scan(step, (states, carry, jnp.zeros((E,), jnp.float32)),
                                         jnp.arange(env.T))
        if not record:
            return ret
        traj = jax.tree_util.tree_map(       # [T+1, R, ...] -> [R, T+1, ...]
            lambda x0, xs: jnp.moveaxis(jnp.concatenate([x0[None], xs]), 0, 1),
            physics(states), traj)
        return ret, traj

    return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)),
                   compiler_options=dict(options))
