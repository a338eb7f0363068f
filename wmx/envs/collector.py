"""Row collector in static reset mode (reference_design §5.2; DESIGN.md §4).

n_envs envs run in lockstep, one obs-aligned row per env per tick. The tick
index i is the absolute, unbatched scan index and the row index is
k = i mod (T+1):

* row k holds obs_k, the reward received on entering obs_k (0 on row 0), the
  action chosen at obs_k (0 on row T), is_first = (k == 0), is_last = (k == T),
  is_terminal = False (DMC time limits are not terminal, tdmpc2_spec 4.12);
* on k < T the envs step with the chosen actions;
* on k == T (the held tick) the envs are not stepped: a fresh env.reset with
  a fresh key per env gives the next row 0 (a freshly randomised initial state
  every episode, deviation E20). The choice is a lax.cond on the unbatched
  tick, so it stays a real branch under vmap over seeds.

An env that reports done before row T is an off-schedule done: it is counted
in `CollectorState.n_offschedule_dones` (an error for fixed-length tasks) and
the episode still runs to row T.

Usage per tick (inside lax.scan over ticks, optionally vmapped over seeds):
    obs, is_first = policy_view(env, state, tick)
    actions = <planner or uniform random actions>(obs, is_first)
    state, row = collect_tick(env, state, tick, actions, key)
"""
from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from wmx.envs.base import Env, EnvState

__all__ = [
    "CollectorState", "Row", "zero_row", "init_collector", "policy_view", "collect_tick",
    "uniform_actions", "uniform_policy", "make_rollout", "rows_to_episodes",
    "collect_episodes", "PolicyFn",
]

# policy_fn(obs f32[n, O], is_first bool[n], key) -> actions f32[n, A]
PolicyFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


@struct.dataclass
class Row:
    """One obs-aligned row per env (leading axis n_envs; a scan adds ticks).

    obs f32[n, O]; action f32[n, A] (raw agent action in [-1, 1], 0 on row T);
    reward f32[n] (received on entering obs, 0 on row 0); is_first, is_last,
    is_terminal bool[n]. Source: reference_design §5.2.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    is_first: jax.Array
    is_last: jax.Array
    is_terminal: jax.Array


@struct.dataclass
class CollectorState:
    """Carry of the row collector for n_envs lockstep envs.

    env_state: EnvState with leading axis [n]; its obs/reward are the current
      row's obs and entering reward.
    episode_return f32[n]: return of the current episode up to the last
      emitted row.
    last_return f32[n]: return of the last completed episode (0 before one).
    n_episodes i32[]: episodes completed per env (lockstep).
    env_steps i32[]: agent steps taken, summed over envs (reference_design §2:
      the TD-MPC2 clock; ×action_repeat for env frames).
    rows i32[]: rows emitted, summed over envs.
    n_offschedule_dones i32[]: (env, step) pairs where the env reported done
      before row T; must stay 0 on fixed-length tasks.
    """

    env_state: EnvState
    episode_return: jax.Array
    last_return: jax.Array
    n_episodes: jax.Array
    env_steps: jax.Array
    rows: jax.Array
    n_offschedule_dones: jax.Array


def init_collector(env: Env, key: jax.Array, n_envs: int) -> CollectorState:
    """Reset n_envs envs (one key each, split from `key`); the next tick
    should be a multiple of T+1 (row 0). Raises ValueError if n_envs < 1."""
    if int(n_envs) < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    env_state = jax.vmap(env.reset)(jax.random.split(key, int(n_envs)))
    zeros = jnp.zeros((int(n_envs),), jnp.float32)
    zero = jnp.zeros((), jnp.int32)
    return CollectorState(env_state=env_state, episode_return=zeros,
                          last_return=zeros, n_episodes=zero, env_steps=zero,
                          rows=zero, n_offschedule_dones=zero)


def zero_row(env: Env, n_envs: int) -> Row:
    """An all-zero `Row` of n_envs envs, the shapes and dtypes `collect_tick` emits
    (obs f32[n, O], action f32[n, A], reward f32[n], flags bool[n]): the row of a
    padded tick, and the template of stored rows, without tracing a tick."""
    n = int(n_envs)
    flag = jnp.zeros((n,), jnp.bool_)
    return Row(obs=jnp.zeros((n, env.obs_dim), jnp.float32),
               action=jnp.zeros((n, env.action_dim), jnp.float32),
               reward=jnp.zeros((n,), jnp.float32), is_first=flag, is_last=flag,
               is_terminal=flag)


def _row_index(env: Env, tick: jax.Array) -> jax.Array:
    return jnp.asarray(tick, jnp.int32) % (env.T + 1)


def policy_view(env: Env, state: CollectorState, tick: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
    """What the policy acts on at `tick`: (obs f32[n, O], is_first bool[n]).

    The action chosen for this tick's row is ignored on the held tick
    (k == T), where the row's action is 0.
    """
    obs = state.env_state.obs
    is_first = jnp.broadcast_to(_row_index(env, tick) == 0, obs.shape[:1])
    return obs, is_first


def collect_tick(env: Env, state: CollectorState, tick: jax.Array,
                 actions: jax.Array, key: jax.Array
                 ) -> tuple[CollectorState, Row]:
    """Emit this tick's row and advance the envs (reference_design §5.2).

    tick: i32[] absolute, unbatched tick index (do not vmap it); k = tick mod
      (T+1). actions: f32[n, A] raw agent actions in [-1, 1] chosen at the
      current obs (stored as given, zeroed on row T). key: used only on the
      held tick k == T, split into one fresh reset key per env.
    Returns (new state, Row with leading axis n). Raises ValueError at trace
    time if actions is not f32[n, A].
    """
    n = state.episode_return.shape[0]
    actions = jnp.asarray(actions, jnp.float32)
    if actions.shape != (n, env.action_dim):
        raise ValueError(
            f"actions must have shape (n_envs, action_dim) = "
            f"({n}, {env.action_dim}), got {actions.shape}")
    k = _row_index(env, tick)
    first = k == 0
    last = k == env.T
    es = state.env_state
    reward = jnp.where(first, 0.0, es.reward).astype(jnp.float32)
    row = Row(obs=es.obs,
              action=jnp.where(last, 0.0, actions).astype(jnp.float32),
              reward=reward,
              is_first=jnp.broadcast_to(first, (n,)),
              is_last=jnp.broadcast_to(last, (n,)),
              is_terminal=jnp.zeros((n,), jnp.bool_))

    def held(es):
        new = jax.vmap(env.reset)(jax.random.split(key, n))
        return new, jnp.zeros((), jnp.int32)

    def stepped(es):
        new = jax.vmap(env.step)(es, actions)
        off = new.done & (k + 1 < env.T)
        return new, off.sum().astype(jnp.int32)

    new_es, n_off = jax.lax.cond(last, held, stepped, es)
    episode_return = jnp.where(first, 0.0, state.episode_return) + reward
    new_state = CollectorState(
        env_state=new_es,
        episode_return=episode_return,
        last_return=jnp.where(last, episode_return, state.last_return),
        n_episodes=state.n_episodes + last.astype(jnp.int32),
        env_steps=state.env_steps + jnp.where(last, 0, n).astype(jnp.int32),
        rows=state.rows + jnp.int32(n),
        n_offschedule_dones=state.n_offschedule_dones + n_off)
    return new_state, row


def uniform_actions(key: jax.Array, n_envs: int, action_dim: int) -> jax.Array:
    """f32[n_envs, action_dim] ~ U[-1, 1] (the seeding-phase policy,
    tdmpc2_spec 4.3)."""
    return jax.random.uniform(key, (n_envs, action_dim), jnp.float32, -1., 1.)


def uniform_policy(action_dim: int) -> PolicyFn:
    """A PolicyFn that ignores obs and draws uniform actions in [-1, 1]."""
    def policy(obs, is_first, key):
        del is_first
        return uniform_actions(key, obs.shape[0], action_dim)
    return policy


@functools.lru_cache(maxsize=32)
def make_rollout(env: Env, policy_fn: PolicyFn, n_envs: int, n_ticks: int
                 ) -> Callable[[jax.Array], tuple[CollectorState, Row]]:
    """A jitted `rollout(key) -> (final CollectorState, Row[n_ticks, n_envs])`.

    Resets n_envs envs, then scans ticks 0..n_ticks-1 with
    policy_fn(obs, is_first, key) choosing the actions. Pure in `key`, so it
    can be vmapped over seeds. Cached per (env, policy_fn, n_envs, n_ticks),
    so repeated calls compile once.
    """
    if int(n_ticks) < 1:
        raise ValueError(f"n_ticks must be >= 1, got {n_ticks}")

    def rollout(key):
        k_init, k_loop = jax.random.split(key)
        state = init_collector(env, k_init, n_envs)

        def body(state, xs):
            tick, k = xs
            k_act, k_reset = jax.random.split(k)
            obs, is_first = policy_view(env, state, tick)
            actions = policy_fn(obs, is_first, k_act)
            return collect_tick(env, state, tick, actions, k_reset)

        ticks = jnp.arange(int(n_ticks), dtype=jnp.int32)
        return jax.lax.scan(body, state,
                            (ticks, jax.random.split(k_loop, int(n_ticks))))

    return jax.jit(rollout)


def rows_to_episodes(rows: Row, T: int) -> list[dict[str, np.ndarray]]:
    """Split rows [n_ticks, n_envs, ...] (starting at row 0) into episodes.

    Returns n_ticks // (T+1) · n_envs episode dicts, episode-major then env,
    each in the layout of docs/architecture.md "Episode rows": obs f32[T+1, O],
    action f32[T+1, A], reward f32[T+1], is_first/is_last/is_terminal
    bool[T+1]. Raises ValueError if n_ticks is not a multiple of T+1 or the
    rows do not start at an episode's first row.
    """
    arrays = {f: np.asarray(getattr(rows, f)) for f in
              ("obs", "action", "reward", "is_first", "is_last", "is_terminal")}
    n_ticks = arrays["reward"].shape[0]
    if n_ticks % (T + 1):
        raise ValueError(
            f"{n_ticks} ticks are not a whole number of episodes of T+1 = "
            f"{T + 1} rows; collect a multiple of T+1 ticks")
    if n_ticks and not arrays["is_first"][0].all():
        raise ValueError("rows must start at an episode's first row (tick "
                         "index a multiple of T+1)")
    n_ep = n_ticks // (T + 1)
    episodes = []
    for e in range(n_ep):
        sl = slice(e * (T + 1), (e + 1) * (T + 1))
        for j in range(arrays["reward"].shape[1]):
            ep = {f: np.ascontiguousarray(a[sl, j]) for f, a in arrays.items()}
            for f in ("obs", "action", "reward"):
                ep[f] = ep[f].astype(np.float32)
            for f in ("is_first", "is_last", "is_terminal"):
                ep[f] = ep[f].astype(np.bool_)
            episodes.append(ep)
    return episodes


def collect_episodes(env: Env, policy_fn: PolicyFn, key: jax.Array,
                     n_envs: int, n_episodes: int
                     ) -> tuple[list[dict[str, np.ndarray]], dict]:
    """Run n_episodes lockstep episodes on n_envs envs (a jitted scan).

    Returns (episodes, stats): n_episodes·n_envs episode dicts (episode-major,
    then env; layout of `rows_to_episodes`) and stats {"returns" f32[n_ep·n],
    "env_steps", "rows", "n_offschedule_dones"} (ints). For tests and small
    collections; agents drive `collect_tick` in their own scans.
    """
    if int(n_episodes) < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    rollout = make_rollout(env, policy_fn, int(n_envs),
                           int(n_episodes) * (env.T + 1))
    state, rows = rollout(key)
    episodes = rows_to_episodes(rows, env.T)
    stats = {
        "returns": np.array([ep["reward"].sum() for ep in episodes],
                            np.float32),
        "env_steps": int(state.env_steps),
        "rows": int(state.rows),
        "n_offschedule_dones": int(state.n_offschedule_dones),
    }
    return episodes, stats
