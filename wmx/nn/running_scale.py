"""TD-MPC2 RunningScale (tdmpc2_spec 2.13; shared_blocks B3; deviation T25)."""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax

from wmx.nn.percentile import percentile


@dataclass(frozen=True)
class RunningScale:
    """S <- (1 - rate) S + rate * max(floor, P_hi(x) - P_lo(x)), init 1.

    Clamp before the EMA (TD-MPC2, unlike DreamerV3's ReturnNormalizer),
    update before dividing. The state is one f32 scalar. At PE it is not
    checkpointed by the reference (wmx keeps it in the train state).
    """

    rate: float = 0.01
    lo: float = 5.0
    hi: float = 95.0
    floor: float = 1.0
    init_value: float = 1.0

    def init(self) -> jnp.ndarray:
        """f32[] initial scale (1.0)."""
        return jnp.asarray(self.init_value, jnp.float32)

    def update(self, value: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
        """New scale f32[] from the old one and a batch x (any shape, no gradient)."""
        p = percentile(x, jnp.asarray([self.lo, self.hi]))
        target = jnp.maximum(p[1] - p[0], self.floor)
        return jax.lax.stop_gradient(optax.incremental_update(target, value, self.rate))

    @staticmethod
    def normalize(value: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
        """x / S (S stop-gradiented)."""
        return x / jax.lax.stop_gradient(value)
