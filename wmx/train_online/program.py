"""The jitted programs of an online TD-MPC2 run: one chunk of ticks, and evaluation.

DESIGN.md §3 principles 1-2: collection, planning, replay sampling and the
update schedule run on device inside ``lax.scan`` over absolute tick
indices; seeds are ``vmap``ped outside; every schedule is static arithmetic
on the unbatched tick (wmx.agents.tdmpc2.schedule). All randomness of tick i
comes from ``fold_in(seed_key, i)``, so a run split into chunks, or resumed
from a checkpoint by a new process, replays exactly what the uninterrupted
run does.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.tdmpc2 import buffer as buffer_lib
from wmx.agents.tdmpc2 import schedule as sched_lib
from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.agents.tdmpc2.update import (Batch, TrainState, draw_update_noise, init_train_state,
                                      update)
from wmx.envs import collector as collector_lib
from wmx.envs.base import Env
from wmx.evaluate.rollout import make_rollout_fn
from wmx.train_online.run_config import OnlineRunConfig

# fold_in tags that separate the key streams of one tick
_ACT, _ENV, _UPD = 0, 1, 2


class OnlineCarry(NamedTuple):
    """Per-seed state of an online run (seeds stacked on a leading axis).

    train: update state (params, optimisers, RunningScale, ...);
    buffer: episode ring (wmx.agents.tdmpc2.buffer); collector: row collector
    state of the n_envs envs; prev_mean f32[n_envs, H, A]: planner warm start
    per env; key: u32[2] raw PRNG key of the seed; metrics: the last update's
    metrics (f32 scalars); n_updates: i32[] updates applied so far.
    """

    train: TrainState
    buffer: buffer_lib.EpisodeBuffer
    collector: Any
    prev_mean: jax.Array
    key: jax.Array
    metrics: dict
    n_updates: jax.Array


METRIC_KEYS = ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss",
               "grad_norm", "pi_grad_norm", "pi_scale")


def init_carry(key: jax.Array, cfg: TDMPC2Config, rounds: int, n_envs: int,
               env: Env) -> OnlineCarry:
    """Initial state of one seed from its key u32[2]: fresh parameters, empty ring, reset envs."""
    k_init, k_env = jax.random.split(jax.random.fold_in(key, 0x1A1))
    return OnlineCarry(
        train=init_train_state(k_init, cfg),
        buffer=buffer_lib.init_buffer(rounds, n_envs, env.T, env.obs_dim, env.action_dim),
        collector=collector_lib.init_collector(env, k_env, n_envs),
        prev_mean=jnp.zeros((n_envs, cfg.horizon, env.action_dim), jnp.float32),
        key=key,
        metrics={k: jnp.zeros((), jnp.float32) for k in METRIC_KEYS},
        n_updates=jnp.zeros((), jnp.int32),
    )


@functools.lru_cache(maxsize=8)
def _init_fn(cfg: TDMPC2Config, rounds: int, n_envs: int, env: Env):
    return jax.jit(jax.vmap(lambda key: init_carry(key, cfg, rounds, n_envs, env)))


def init_carries(rc: OnlineRunConfig, env: Env) -> OnlineCarry:
    """Initial states of every seed of the run (one vmapped, jitted init), stacked on axis 0.

    Seed s starts from ``PRNGKey(s)``; the ring holds the whole run
    (capacity rule T26).
    """
    cfg = rc.agent_config
    rounds = buffer_lib.num_rounds(cfg.buffer_size, rc.total_agent_steps, env.T, rc.n_envs)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in rc.seeds])
    return _init_fn(cfg, rounds, rc.n_envs, env)(keys)


def _act(env: Env, carry: OnlineCarry, tick, mode, key, cfg: TDMPC2Config, n_envs: int):
    """Actions f32[n, A] and the new prev_mean for this tick's mode."""
    action_dim = env.action_dim
    obs, is_first = collector_lib.policy_view(env, carry.collector, tick)

    def held(_):
        return jnp.zeros((n_envs, action_dim), jnp.float32), carry.prev_mean

    def random(_):
        a = jax.random.uniform(key, (n_envs, action_dim), jnp.float32, -1.0, 1.0)
        return a, carry.prev_mean

    def planned(_):
        keys = jax.random.split(key, n_envs)
        noise = jax.vmap(lambda k: draw_plan_noise(k, cfg, False))(keys)
        act, mean, _ = jax.vmap(
            lambda o, pm, t0, nz: plan(carry.train.params, o, pm, t0, nz, cfg, eval_mode=False)
        )(obs, carry.prev_mean, is_first, noise)
        return act, mean

    return jax.lax.switch(mode, (held, random, planned), None)


def _updates(train: TrainState, buf, episode, n, key, cfg: TDMPC2Config, n_envs: int,
             metrics: dict):
    """Run ``n`` updates (unbatched count) on slices of the committed rounds."""

    def body(j, c):
        train, _ = c
        k_sample, k_noise = jax.random.split(jax.random.fold_in(key, j))
        sb = buffer_lib.sample(buf, k_sample, cfg.batch_size, cfg.horizon, n_envs, episode)
        batch = Batch(obs=sb.obs, action=sb.action, reward=sb.reward)
        train, m = update(train, batch, draw_update_noise(k_noise, cfg), cfg)
        return train, {k: jnp.asarray(m[k], jnp.float32) for k in METRIC_KEYS}

    return jax.lax.fori_loop(0, n, body, (train, metrics))


def offschedule_dones(carries: OnlineCarry) -> jax.Array:
    """Per seed, env steps where an env ended before its scheduled last row."""
    return carries.collector.n_offschedule_dones


def make_tick_fn(cfg: TDMPC2Config, n_envs: int, env: Env):
    """The per-seed tick: act, collect one row per env, write it, update."""
    sched = sched_lib.make_schedule(env.T, n_envs, cfg.seed_steps)
    T = env.T

    def tick_fn(carry: OnlineCarry, tick):
        key = jax.random.fold_in(carry.key, tick)
        mode = sched_lib.action_mode(tick, sched)
        action, prev_mean = _act(env, carry, tick, mode, jax.random.fold_in(key, _ACT), cfg,
                                 n_envs)
        collector, row = collector_lib.collect_tick(env, carry.collector, tick, action,
                                                    jax.random.fold_in(key, _ENV))
        episode, k = sched_lib.tick_position(tick, T)
        buf = buffer_lib.write_rows(carry.buffer, episode, k, row.obs, row.action, row.reward)
        n = sched_lib.n_updates(tick, sched)
        train, metrics = _updates(carry.train, buf, episode, n, jax.random.fold_in(key, _UPD),
                                  cfg, n_envs, carry.metrics)
        return OnlineCarry(train, buf, collector, prev_mean, carry.key, metrics,
                           carry.n_updates + n), None

    return tick_fn


def make_chunk_fn(rc: OnlineRunConfig, env: Env):
    """Jitted ``chunk(carries, ticks i32[L]) -> carries`` for all seeds.

    ``ticks`` are absolute tick indices (unbatched, shared by the seeds);
    carries are stacked on a leading seed axis and donated. Cached per
    (agent config, n_envs, env), so runs in one process compile once.
    """
    return _chunk_fn(rc.agent_config, rc.n_envs, env)


@functools.lru_cache(maxsize=8)
def _chunk_fn(cfg: TDMPC2Config, n_envs: int, env: Env):
    tick_fn = make_tick_fn(cfg, n_envs, env)

    def one_seed(carry, ticks):
        carry, _ = jax.lax.scan(tick_fn, carry, ticks)
        return carry

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None)), donate_argnums=0)


def make_eval_fn(rc: OnlineRunConfig, env: Env):
    """Jitted ``evaluate(params, keys u32[S,2], index i32[]) -> returns f32[S, E]``.

    The shared evaluation rollout (`wmx.evaluate.rollout.make_rollout_fn`,
    single-task): per seed, ``rc.eval_episodes`` eval_mode episodes vmapped
    from fresh initial states (reset key folded with the evaluation index),
    t0 at each episode's first step, its own warm start (deviation T9).
    Returns the undiscounted episode returns. Cached per (config, episodes,
    env).
    """
    fn = make_rollout_fn(rc.agent_config, rc.eval_episodes, env)
    return functools.partial(_single_task, fn)


def _single_task(fn, params, keys, index):
    return fn(params, keys, None, index)
