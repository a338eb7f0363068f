"""EMA target / slow network (shared_blocks B10; tdmpc2_spec 2.15; deviation T25)."""
from __future__ import annotations

import optax


def ema_update(target, online, rate: float):
    """rate * online + (1 - rate) * target over every leaf (norm scales included).

    TD-MPC2 target Q: rate = tau = 0.01; DreamerV3 slow critic: 0.02. The
    reference's lerp_ (target + rate*(online - target)) equals this up to f32
    rounding (T25). Pure: returns a new tree.
    """
    return optax.incremental_update(online, target, rate)
