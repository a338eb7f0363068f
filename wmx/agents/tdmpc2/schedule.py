"""Online schedule of TD-MPC2 as static arithmetic on the tick index.

Source: tdmpc2_spec 4.2-4.5 and the reference loop (4.C); reference_design
§4.4; deviation T7 for n_envs > 1. A tick emits one obs-aligned row per env;
with episode length T, tick i has row index k = i mod (T+1) and round
e = i div (T+1). Ticks with k < T step the envs (agent step j = e T + k of
every env); k == T is the held tick that commits the round.

- Seed phase: uniform random actions on every stepping tick up to and
  including the *burst tick*, the first stepping tick after which the run's
  env steps (all envs) exceed S and at least one round is committed.
- Burst: S updates right after the burst tick.
- Then n_envs updates per stepping tick (update-to-data ratio 1), none on
  held ticks. The planner acts on stepping ticks after the burst tick.

For n_envs = 1 this is the reference exactly: S+1 random actions at steps
0..S, S updates after step S (floor(S/T) committed episodes), then one update
per step (tested against a port of the reference loop).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

# Action modes returned by `action_mode`.
HELD, RANDOM, PLAN = 0, 1, 2


class Schedule(NamedTuple):
    """Static schedule constants (Python ints)."""

    episode_length: int   # T, agent steps per episode
    n_envs: int
    seed_steps: int       # S
    burst_tick: int       # absolute tick after which the S burst updates run


def make_schedule(episode_length: int, n_envs: int, seed_steps: int) -> Schedule:
    """Find the burst tick (see module docstring). Raises ValueError on bad sizes."""
    if episode_length < 1 or n_envs < 1 or seed_steps < 0:
        raise ValueError(
            f"need episode_length >= 1, n_envs >= 1, seed_steps >= 0; got "
            f"{episode_length}, {n_envs}, {seed_steps}")
    T = episode_length
    # smallest agent step j (per env) with n_envs*(j+1) > S, at round >= 1
    j = max(seed_steps // n_envs, T)
    e, k = divmod(j, T)
    return Schedule(T, n_envs, seed_steps, e * (T + 1) + k)


def tick_position(tick, episode_length: int):
    """(round e, row k) of a tick; works on ints and jnp int arrays."""
    return tick // (episode_length + 1), tick % (episode_length + 1)


def action_mode(tick, sched: Schedule):
    """HELD on held ticks, RANDOM up to and including the burst tick, else PLAN."""
    _, k = tick_position(tick, sched.episode_length)
    held = k == sched.episode_length
    if isinstance(tick, int):
        return HELD if held else (RANDOM if tick <= sched.burst_tick else PLAN)
    return jnp.where(held, HELD, jnp.where(tick <= sched.burst_tick, RANDOM, PLAN)).astype(jnp.int32)


def n_updates(tick, sched: Schedule):
    """Updates to run after tick ``tick``: S at the burst tick, n_envs per later stepping tick."""
    _, k = tick_position(tick, sched.episode_length)
    stepping = k < sched.episode_length
    if isinstance(tick, int):
        if tick == sched.burst_tick:
            return sched.seed_steps
        return sched.n_envs if (stepping and tick > sched.burst_tick) else 0
    return jnp.where(tick == sched.burst_tick, sched.seed_steps,
                     jnp.where(stepping & (tick > sched.burst_tick), sched.n_envs, 0)
                     ).astype(jnp.int32)


def first_update_tick(sched: Schedule) -> int:
    """The first tick with `n_updates` > 0 (host helper).

    The burst tick when seed_steps S > 0 (its S updates). With S = 0 the burst runs
    none and the first updates (n_envs) follow the next stepping tick: burst_tick + 1,
    or burst_tick + 2 when burst_tick + 1 is the held tick ending its round.

    Args:
        sched: the Schedule.

    Returns:
        int: the absolute tick index.
    """
    if sched.seed_steps > 0:
        return sched.burst_tick
    _, k = tick_position(sched.burst_tick + 1, sched.episode_length)
    return sched.burst_tick + (1 if k < sched.episode_length else 2)


def agent_steps_after(tick: int, sched: Schedule) -> int:
    """Agent steps per env completed after tick ``tick`` (host helper)."""
    e, k = tick_position(tick, sched.episode_length)
    return e * sched.episode_length + min(k + 1, sched.episode_length)
