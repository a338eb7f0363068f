"""Q-ensemble random-pair helpers (shared_blocks B9; tdmpc2_spec 1.11, 3.14)."""
from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp


def random_pair(key: jax.Array, num: int) -> jax.Array:
    """Two distinct member indices, i32[2] = permutation(key, num)[:2].

    Same distribution as the reference's randperm(Nq)[:2] /
    np.random.choice(Nq, 2, replace=False). One pair per call, shared by the
    whole batch and horizon. Raises ValueError when num < 2.
    """
    if num < 2:
        raise ValueError(f"random_pair needs an ensemble of >= 2 members, got {num}")
    return jax.random.permutation(key, num)[:2].astype(jnp.int32)


def reduce_pair(q: jnp.ndarray, how: Literal["min", "avg"]) -> jnp.ndarray:
    """Reduce decoded scalars f32[2, ...] -> f32[...] by min or mean.

    TD-MPC2 reduces decoded values, never logits. "avg" is (q0 + q1) / 2 as in
    the reference's Qs.sum(0) / 2.
    """
    if q.shape[0] != 2:
        raise ValueError(f"reduce_pair expects a leading axis of 2, got shape {q.shape}")
    if how == "min":
        return jnp.minimum(q[0], q[1])
    if how == "avg":
        return (q[0] + q[1]) / 2
    raise ValueError(f"how must be 'min' or 'avg', got {how!r}")
