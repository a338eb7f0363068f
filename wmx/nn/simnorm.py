"""SimNorm: softmax over groups of the last axis (tdmpc2_spec 1.3; shared_blocks B7)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def grouped_softmax(x: jnp.ndarray, group: int) -> jnp.ndarray:
    """softmax(x.reshape(..., D/group, group), -1).reshape(..., D).

    Raises ValueError when the last axis D is not divisible by `group`.
    """
    d = x.shape[-1]
    if d % group:
        raise ValueError(f"last axis {d} is not divisible by the group size {group}")
    y = jax.nn.softmax(x.reshape(*x.shape[:-1], d // group, group), axis=-1)
    return y.reshape(x.shape)


def simnorm(x: jnp.ndarray, group: int = 8) -> jnp.ndarray:
    """TD-MPC2 SimNorm (temperature 1, no sampling): f32[..., D] -> f32[..., D].

    Each group of `group` consecutive entries becomes a probability vector.
    Used after the LayerNorm of the encoder's and the dynamics' last layer.
    """
    return grouped_softmax(x, group)
