"""DreamerV3's train-ratio schedule as static arithmetic on the absolute tick.

A tick adds one obs-aligned row per env (n_envs transitions). The reference
(2411f7d embodied/run/train.py + when.Ratio; dreamerv3_spec 6.1-6.2) numbers
transitions t = 1, 2, ... over all envs (env w of tick i is t = i·n + w + 1),
adds each to the replay and then calls the train function, which

- returns early until the replay holds ``batch_size`` items (2411f7d gate;
  an env's stream yields its first item once it holds L = batch_length +
  replay_context rows, then one item per row);
- from the first open call at transition t0 runs ``Ratio(r)(t)`` updates,
  r = train_ratio / (batch_size · batch_length): 1 at t0, then
  floor((t − prev)·r) with prev advanced by repeats / r.

So the cumulative number of updates after transition t is 0 before t0 and
1 + floor((t − t0)·r) from t0 on, which this module evaluates exactly with r
as a fraction (deviation D26: the reference keeps prev in float64, identical
whenever 1/r is exact in float64, as in every reference configuration).
wmx runs a tick's updates after all of its adds (deviation D3), so
``n_updates(i)`` = cumulative(end of tick i) − cumulative(end of tick i − 1):
the same total after every tick as the reference, whose updates interleave
with the adds inside the tick.

There is no random prefill and no exploration phase (2411f7d: expl_until 0,
train_fill 0): the policy acts from the first tick.

Everything works on Python ints and on jnp int arrays (no state: a run split
into chunks or resumed replays the same schedule).

Source: dreamerv3_spec 6.1-6.2; reference_design §6.4; deviations D3, D26.
"""
from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import jax.numpy as jnp

# Action modes returned by `action_mode` (TD-MPC2 uses HELD 0, RANDOM 1, PLAN 2).
RANDOM, POLICY = 1, 2


class Schedule(NamedTuple):
    """Static schedule constants (Python ints).

    ``ratio_num / ratio_den`` is r = train_ratio / (batch_size · batch_length)
    in lowest terms; ``gate`` is t0, the 1-based transition of the first update.
    """

    n_envs: int
    batch_size: int
    window: int        # L = batch_length + replay_context rows per item
    ratio_num: int
    ratio_den: int
    gate: int


def gate_transition(n_envs: int, batch_size: int, window: int) -> int:
    """t0: first transition after which the lockstep replay holds batch_size items.

    After tick i every env holds i + 1 rows and max(0, i + 2 − L) items, so the
    gate opens in tick i* = L − 2 + ceil(B / n), at its env w with
    n·b + w + 1 = B (b = ceil(B / n) − 1 items per env before the tick).
    """
    per_env = -(-batch_size // n_envs)
    tick = window - 2 + per_env
    return tick * n_envs + batch_size - n_envs * (per_env - 1)


def make_schedule(n_envs: int, *, batch_size: int = 16, batch_length: int = 64,
                  replay_context: int = 1, train_ratio: float = 512) -> Schedule:
    """Build the schedule of a run.

    Args:
        n_envs: lockstep envs per seed (the reference's run.num_envs).
        batch_size: B (16); batch_length: T trained steps per item (64);
        replay_context: context rows per item (1); so L = T + 1 = 65.
        train_ratio: replayed steps per env transition (512); r is taken as
            the exact decimal fraction of its ``str`` form over B·T.

    Returns:
        Schedule.

    Raises:
        ValueError: non-positive sizes or ratio, or a fraction too fine for
            int32 arithmetic (numerator · denominator ≥ 2^31).
    """
    if min(n_envs, batch_size, batch_length) < 1 or replay_context < 0 or train_ratio <= 0:
        raise ValueError(
            f"need n_envs, batch_size, batch_length >= 1, replay_context >= 0, "
            f"train_ratio > 0; got {n_envs}, {batch_size}, {batch_length}, "
            f"{replay_context}, {train_ratio}")
    r = Fraction(str(train_ratio)) / (batch_size * batch_length)
    if r.numerator * r.denominator >= 2 ** 31:
        raise ValueError(f"train_ratio {train_ratio} gives r = {r}: too fine for int32")
    window = batch_length + replay_context
    return Schedule(n_envs, batch_size, window, r.numerator, r.denominator,
                    gate_transition(n_envs, batch_size, window))


def _floor_ratio(d, sched: Schedule):
    """floor(d · num / den) for d >= 0 without int32 overflow of d · num."""
    q, rem = d // sched.ratio_den, d % sched.ratio_den
    return q * sched.ratio_num + (rem * sched.ratio_num) // sched.ratio_den


def total_updates(tick, sched: Schedule):
    """Cumulative updates run by the end of tick ``tick``.

    Args:
        tick: absolute, unbatched tick index (int or jnp int array; -1 gives 0).
        sched: the Schedule.

    Returns:
        int or i32[...]: 0 before the gate, else 1 + floor((t − t0)·r) with
        t = (tick + 1)·n_envs, the last transition of the tick.

    Source: dreamerv3_spec 6.1-6.2; deviations D3, D26.
    """
    d = (tick + 1) * sched.n_envs - sched.gate
    if isinstance(tick, int):
        return 0 if d < 0 else 1 + _floor_ratio(d, sched)
    d = jnp.asarray(d, jnp.int32)
    return jnp.where(d < 0, 0, 1 + _floor_ratio(jnp.maximum(d, 0), sched)).astype(jnp.int32)


def n_updates(tick, sched: Schedule):
    """Updates to run after the rows of tick ``tick`` are added.

    Args:
        tick: absolute, unbatched tick index (int or jnp int array).
        sched: the Schedule.

    Returns:
        int or i32[...]: total_updates(tick) − total_updates(tick − 1).

    Source: reference_design §6.4; deviation D3.
    """
    return total_updates(tick, sched) - total_updates(tick - 1, sched)


def first_update_tick(sched: Schedule) -> int:
    """The tick after which the first update runs, the first with `n_updates` > 0
    (64 with 16 envs, B = 16, L = 65): the tick holding transition t0 = gate, the
    smallest i with (i + 1)·n_envs >= t0 (`total_updates` is 1 there, 0 before)."""
    return (sched.gate - 1) // sched.n_envs


def action_mode(tick, sched: Schedule):
    """POLICY on every tick: the reference has no random prefill (spec 6.2)."""
    del sched
    if isinstance(tick, int):
        return POLICY
    return jnp.full(jnp.shape(tick), POLICY, jnp.int32)
