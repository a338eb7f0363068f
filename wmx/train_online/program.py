"""The jitted programs of an online run, for any agent of the protocol.

DESIGN.md §3 principles 1-2: collection, acting, replay and the update
schedule run on device inside ``lax.scan`` over absolute tick indices; seeds
are ``vmap``ped outside; every schedule is static arithmetic on the
unbatched tick (the agent's `schedule`). All randomness of tick i comes from
``fold_in(seed_key, i)``, so a run split into chunks, or resumed from a
checkpoint by a new process, replays exactly what the uninterrupted run does.

One tick (`make_tick_fn`): the schedule's action mode picks held (zeros),
random (uniform in [-1, 1]) or the agent's policy; the row collector emits
one row per env and steps the envs; the agent adds the row (with its policy
entries) to its replay and runs the schedule's updates. The chunk returns
its rows as scan outputs, which the host exports as episodes. The four parts
run under the name scopes "acting", "env_step", "replay_write" and "train_updates"
(`jax.named_scope`: names in the compiled program's op metadata only, which
``benchmarks/profile_step.py`` reads to split a profile by component).
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from wmx.acting import EvalProgram, make_evaluate_fn, policy_step
from wmx.agents.api import HELD, POLICY, RANDOM
from wmx.envs import collector as collector_lib
from wmx.envs.base import Env
from wmx.runs.online_config import OnlineRunConfig
from wmx.xla_cpu import options_key

# fold_in tags that separate the key streams of one tick
_ACT, _ENV, _UPD = 0, 1, 2
_INIT = 0x1A1

assert (HELD, RANDOM, POLICY) == (0, 1, 2)   # the lax.switch branch order below


class OnlineCarry(NamedTuple):
    """Per-seed state of an online run (seeds stacked on a leading axis).

    agent: the agent's training state (`Agent.init`); replay: its replay
    (`Agent.init_replay`); collector: row collector state of the n_envs envs;
    policy: the policy carry of the n_envs envs (`Agent.init_policy`); key:
    u32[2] raw PRNG key of the seed; metrics: the agent's metrics carry
    (`Agent.init_metrics`: the last update's values, or sums since the last
    log); n_updates: i32[] updates applied.
    """

    agent: Any
    replay: Any
    collector: Any
    policy: Any
    key: jax.Array
    metrics: dict
    n_updates: jax.Array


def checkpoint_items(carries: OnlineCarry) -> dict[str, Any]:
    """The checkpoint items of the carries: "agent", "keys", "loop", "replay"."""
    return {"agent": carries.agent, "keys": carries.key, "replay": carries.replay,
            "loop": {"collector": carries.collector, "policy": carries.policy,
                     "metrics": carries.metrics, "n_updates": carries.n_updates}}


def from_checkpoint_items(items: dict[str, Any]) -> OnlineCarry:
    loop = items["loop"]
    return OnlineCarry(items["agent"], items["replay"], loop["collector"], loop["policy"],
                       items["keys"], loop["metrics"], loop["n_updates"])


def init_carry(key: jax.Array, agent: ModuleType, cfg: Any, n_envs: int, env: Env,
               total_agent_steps: int) -> OnlineCarry:
    """Initial state of one seed from its key u32[2]: fresh agent, empty replay, reset envs."""
    k_init, k_env = jax.random.split(jax.random.fold_in(key, _INIT))
    return OnlineCarry(
        agent=agent.init(k_init, cfg),
        replay=agent.init_replay(cfg, n_envs, env.T, total_agent_steps),
        collector=collector_lib.init_collector(env, k_env, n_envs),
        policy=agent.init_policy(cfg, n_envs),
        key=key,
        metrics=agent.init_metrics(cfg),
        n_updates=jnp.zeros((), jnp.int32),
    )


@functools.lru_cache(maxsize=8)
def _init_fn(agent: ModuleType, cfg: Any, n_envs: int, env: Env, total: int):
    return jax.jit(jax.vmap(lambda key: init_carry(key, agent, cfg, n_envs, env, total)))


def init_carries(rc: OnlineRunConfig, env: Env) -> OnlineCarry:
    """Initial states of every seed of the run (one vmapped, jitted init), stacked on axis 0.

    Seed s starts from ``PRNGKey(s)``; the replay is sized for the whole run.
    """
    keys = jnp.stack([jax.random.PRNGKey(s) for s in rc.seeds])
    return _init_fn(rc.agent_module, rc.agent_config, rc.n_envs, env,
                    rc.total_agent_steps)(keys)


def offschedule_dones(carries: OnlineCarry) -> jax.Array:
    """Per seed, env steps where an env ended before its scheduled last row."""
    return carries.collector.n_offschedule_dones


def _entries_like(agent: ModuleType, cfg: Any, n_envs: int, env: Env):
    """Shapes and dtypes of the policy's entries for n_envs envs (jax.eval_shape)."""
    def entries(key):
        params = agent.policy_params(agent.init(key, cfg))
        obs = jnp.zeros((n_envs, env.obs_dim), jnp.float32)
        return policy_step(agent, params, cfg, agent.init_policy(cfg, n_envs), obs,
                           jnp.ones((n_envs,), bool), key, env.action_dim, eval_mode=False)[2]
    return jax.eval_shape(entries, jax.random.PRNGKey(0))


def make_tick_fn(agent: ModuleType, cfg: Any, n_envs: int, env: Env):
    """The per-seed tick ``(carry, tick) -> (carry, row)``: act, collect, add, update."""
    sched = agent.schedule(cfg, env.T, n_envs)
    A = env.action_dim
    entries_like = _entries_like(agent, cfg, n_envs, env)

    def tick_fn(carry: OnlineCarry, tick):
        key = jax.random.fold_in(carry.key, tick)
        k_act = jax.random.fold_in(key, _ACT)
        obs, is_first = collector_lib.policy_view(env, carry.collector, tick)
        params = agent.policy_params(carry.agent)

        def policy(_):
            return policy_step(agent, params, cfg, carry.policy, obs, is_first, k_act, A,
                               eval_mode=False)

        def held(_):
            return (carry.policy, jnp.zeros((n_envs, A), jnp.float32),
                    jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), entries_like))

        def random(_):
            return (carry.policy, jax.random.uniform(k_act, (n_envs, A), jnp.float32, -1.0, 1.0),
                    jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), entries_like))

        with jax.named_scope("acting"):
            pcarry, action, entries = jax.lax.switch(sched.action_mode(tick),
                                                     (held, random, policy), None)
        with jax.named_scope("env_step"):
            collector, row = collector_lib.collect_tick(env, carry.collector, tick, action,
                                                        jax.random.fold_in(key, _ENV))
        with jax.named_scope("replay_write"):
            replay = agent.replay_add(carry.replay, tick, row, entries, cfg)
        with jax.named_scope("train_updates"):
            state, replay, metrics = agent.replay_train(carry.agent, replay, tick,
                                                        jax.random.fold_in(key, _UPD), cfg,
                                                        carry.metrics)
        n = sched.n_updates(tick)
        return OnlineCarry(state, replay, collector, pcarry, carry.key, metrics,
                           carry.n_updates + n), row

    return tick_fn


def make_chunk_fn(rc: OnlineRunConfig, env: Env):
    """Jitted ``chunk(carries, ticks i32[L]) -> (carries, rows)`` for all seeds.

    ``ticks`` are absolute tick indices (unbatched, shared by the seeds);
    carries are stacked on a leading seed axis and donated; rows is the
    chunk's `wmx.envs.collector.Row` with leading axes [S, L, n_envs].
    Cached per (agent, config, n_envs, env, compile options), so runs in one
    process compile once.
    """
    return _chunk_fn(rc.agent_module, rc.agent_config, rc.n_envs, env,
                     options_key(rc.agent_module.compiler_options(rc.agent_config)))


@functools.lru_cache(maxsize=8)
def _chunk_fn(agent: ModuleType, cfg: Any, n_envs: int, env: Env, options: tuple):
    tick_fn = make_tick_fn(agent, cfg, n_envs, env)

    def one_seed(carry, ticks):
        return jax.lax.scan(tick_fn, carry, ticks)

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None)), donate_argnums=0,
                   compiler_options=dict(options))


def make_part_fn(rc: OnlineRunConfig, env: Env):
    """Jitted ``part(carries, ticks i32[L], valid bool[L]) -> (carries, rows)``, L =
    ``rc.chunk_ticks``: `make_chunk_fn` for a part of a round. A tick whose ``valid``
    is False leaves the carries as they are and gives a zero row (the padding of a
    round's last part), so one program of fixed length serves every part. The
    carries after a part are exactly those of the whole-round chunk at that tick
    (all randomness is keyed by the absolute tick).
    """
    return _part_fn(rc.agent_module, rc.agent_config, rc.n_envs, env,
                    options_key(rc.agent_module.compiler_options(rc.agent_config)))


@functools.lru_cache(maxsize=8)
def _part_fn(agent: ModuleType, cfg: Any, n_envs: int, env: Env, options: tuple):
    tick_fn = make_tick_fn(agent, cfg, n_envs, env)

    def masked_tick(carry, xs):
        tick, valid = xs
        return jax.lax.cond(valid, tick_fn, lambda c, _: (c, collector_lib.zero_row(env, n_envs)),
                            carry, tick)

    def one_seed(carry, ticks, valid):
        return jax.lax.scan(masked_tick, carry, (ticks, valid))

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None, None)), donate_argnums=0,
                   compiler_options=dict(options))


def make_eval_fn(rc: OnlineRunConfig, env: Env) -> EvalProgram:
    """``evaluate(agent_states, keys u32[S,2], index i32[]) -> returns f32[S, E]``
    (an `EvalProgram`).

    The shared evaluation rollout (`wmx.acting.make_evaluate_fn`,
    single-task) on the seeds' policy parameters: per seed,
    ``rc.eval_episodes`` eval_mode episodes vmapped from fresh initial
    states (reset key folded with the evaluation index), a fresh policy carry
    per episode (deviation T9). Returns the undiscounted episode returns.
    """
    agent = rc.agent_module
    fn = make_evaluate_fn(agent, rc.agent_config, rc.eval_episodes, env)

    def args(states, keys, index):
        return (jax.vmap(agent.policy_params)(states), keys, None, index)

    return EvalProgram(fn, args)
