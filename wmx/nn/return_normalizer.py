"""DreamerV3 return normaliser "retnorm" (dreamerv3_spec 3.8; shared_blocks B3)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from wmx.nn.percentile import percentile


class ReturnNormState(NamedTuple):
    """EMAs of the lo and hi percentiles, f32[] each (init 0, no debias)."""

    lo: jnp.ndarray
    hi: jnp.ndarray


@dataclass(frozen=True)
class ReturnNormalizer:
    """lo/hi EMAs at `rate`, init 0; scale = max(limit, hi - lo) read after
    the update (clamp after the EMA, unlike TD-MPC2's RunningScale).
    """

    rate: float = 0.01
    lo: float = 5.0
    hi: float = 95.0
    limit: float = 1.0

    def init(self) -> ReturnNormState:
        z = jnp.zeros((), jnp.float32)
        return ReturnNormState(z, z)

    def update(self, state: ReturnNormState, x: jnp.ndarray) -> ReturnNormState:
        """Fold the percentiles of batch x (all elements, no gradient) into the EMAs."""
        p = percentile(x, jnp.asarray([self.lo, self.hi]))
        new = ReturnNormState(optax.incremental_update(p[0], state.lo, self.rate),
                              optax.incremental_update(p[1], state.hi, self.rate))
        return jax.tree.map(jax.lax.stop_gradient, new)

    def scale(self, state: ReturnNormState) -> jnp.ndarray:
        """f32[] max(limit, hi - lo)."""
        return jnp.maximum(self.limit, state.hi - state.lo)
