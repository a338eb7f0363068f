"""Initialisers (shared_blocks B5; tdmpc2_spec 1.13; dreamerv3_spec 1.5).

- `normal_init(0.02)`: TD-MPC2's torch trunc_normal_(std=0.02, a=-2, b=2),
  whose bounds are absolute (+-100 sigma), i.e. effectively N(0, 0.02^2).
  jax truncated_normal(0.02) would truncate at +-0.04 (std 0.0176): wrong.
- `dreamer_trunc_normal(outscale)`: fan-in truncated normal (flax
  variance_scaling, constant 1/0.87962566; deviation D23 vs the literal 1.1368).
- `uniform_init(scale)`: U(-scale, scale) (TD-MPC2 task embedding, 0.02).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

Initializer = jax.nn.initializers.Initializer


def normal_init(std: float = 0.02, outscale: float = 1.0) -> Initializer:
    """W = outscale * N(0, std^2) (TD-MPC2 Linear weights)."""
    return jax.nn.initializers.normal(std * outscale)


def dreamer_trunc_normal(outscale: float = 1.0) -> Initializer:
    """DreamerV3 fan-in truncated normal scaled by `outscale` (D23).

    fan_in: rank 2 (in, out) -> in; rank >= 3 -> shape[-2] * prod(shape[:-2]).
    outscale 0 gives zeros.
    """
    if outscale == 0.0:
        return jax.nn.initializers.zeros
    return jax.nn.initializers.variance_scaling(outscale ** 2, "fan_in", "truncated_normal",
                                                in_axis=-2, out_axis=-1)


def uniform_init(scale: float = 0.02) -> Initializer:
    """U(-scale, scale) (TD-MPC2 task embedding)."""
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -scale, scale)
    return init


zeros_init: Initializer = jax.nn.initializers.zeros
