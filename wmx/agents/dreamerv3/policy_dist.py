"""The actor's action distributions (dreamerv3_spec 3.12-3.14; 2411f7d Dist
'normal' and 'onehot').

Continuous ("bounded normal", what wmx uses): Normal(tanh(m), s) per action
dim with s = (maxstd - minstd) sigmoid(x + 2) + minstd. Not a tanh-squashed
Gaussian: samples mean + std * eps are unbounded, the log-prob is the plain
Normal log-density (no Jacobian), summed over action dims; entropies too.

Discrete (2411f7d 'onehot'): a one-hot categorical over the action classes
with 1% unimix; log-prob, entropy and the straight-through sample all use the
mixed distribution.

Randomness enters as explicit arrays: standard-normal noise eps f32[..., A]
(`draw_normal_eps`); for the discrete actor class indices int32[...] or
uniforms f32[...] (`categorical.draw_uniform`, inverse-CDF sampling).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3.categorical import onehot_sample, unimix_logits

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class NormalPolicy(NamedTuple):
    """Bounded-normal action distribution: mean f32[..., A] in (-1, 1), std f32[..., A]."""

    mean: jnp.ndarray
    std: jnp.ndarray


def bounded_normal(mean_out: jnp.ndarray, std_out: jnp.ndarray, minstd: float = 0.1,
                   maxstd: float = 1.0) -> NormalPolicy:
    """mean = tanh(mean_out), std = (maxstd - minstd) sigmoid(std_out + 2) + minstd.

    Args: the two output Linears' values f32[..., A]. Returns NormalPolicy.
    Source: dreamerv3_spec 3.13 (2411f7d: tanh/sigmoid after the f32 cast).
    """
    std = (maxstd - minstd) * jax.nn.sigmoid(std_out + 2.0) + minstd
    return NormalPolicy(jnp.tanh(mean_out), std)


def normal_sample(pol: NormalPolicy, eps: jnp.ndarray) -> jnp.ndarray:
    """Action mean + std * eps, f32[..., A] (unclipped; eps ~ N(0, 1) f32[..., A])."""
    return pol.mean + pol.std * eps


def _sum_dims(x: jnp.ndarray, mask: jnp.ndarray | None) -> jnp.ndarray:
    if mask is None:
        return jnp.sum(x, axis=-1)
    return jnp.sum(jnp.where(mask > 0, x, 0.0), axis=-1)


def normal_log_prob(pol: NormalPolicy, action: jnp.ndarray,
                    mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """log N(action; mean, std) summed over action dims, f32[...].

    tfp's form: -0.5 (x/s - m/s)^2 - 0.5 log(2 pi) - log s. ``mask`` f32[..., A]
    (multi-task, W-D8): the sum runs over the dims where it is 1.
    Source: spec 3.11, 3.13; W-D8.
    """
    z = action / pol.std - pol.mean / pol.std
    return _sum_dims(-0.5 * z * z - (_HALF_LOG_2PI + jnp.log(pol.std)), mask)


def normal_entropy(pol: NormalPolicy, mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Entropy of the (unsquashed) Normal summed over action dims (those where
    ``mask`` is 1, multi-task), f32[...]: sum 0.5 + 0.5 log(2 pi) + log s.
    Source: dreamerv3_spec 3.12; W-D8."""
    return _sum_dims(0.5 + _HALF_LOG_2PI + jnp.log(pol.std), mask)


def normal_entropy_bounds(action_dim: int, minstd: float = 0.1,
                          maxstd: float = 1.0) -> tuple[float, float]:
    """(minent, maxent) = action_dim * entropy of N(0, minstd) / N(0, maxstd) (floats;
    the reference's dist.minent / maxent, used by the 'rand' metric)."""
    ent = lambda s: 0.5 + _HALF_LOG_2PI + math.log(s)  # noqa: E731
    return action_dim * ent(minstd), action_dim * ent(maxstd)


def draw_normal_eps(key: jax.Array, shape: tuple[int, ...]) -> jnp.ndarray:
    """Standard-normal policy noise f32[shape] (the fixtures' `eps`)."""
    return jax.random.normal(key, shape, jnp.float32)


# ---- discrete (one-hot with unimix) ------------------------------------------
def onehot_policy_logits(out: jnp.ndarray, unimix: float = 0.01) -> jnp.ndarray:
    """Mixed action logits f32[..., K] from the actor's output f32[..., K] (2411f7d 'onehot')."""
    return unimix_logits(out, unimix)


def onehot_policy_sample(logits: jnp.ndarray, noise: jnp.ndarray) -> jnp.ndarray:
    """Straight-through one-hot action f32[..., K] (noise: class indices int32[...] or
    uniforms f32[...])."""
    return onehot_sample(logits, noise)


def onehot_log_prob(logits: jnp.ndarray, action: jnp.ndarray) -> jnp.ndarray:
    """sum_k action_k log_softmax(logits)_k, f32[...] (action one-hot f32[..., K])."""
    return jnp.sum(action * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def onehot_entropy(logits: jnp.ndarray) -> jnp.ndarray:
    """-sum_k p_k log p_k of the mixed distribution, f32[...]."""
    return -jnp.sum(jax.nn.softmax(logits, -1) * jax.nn.log_softmax(logits, -1), axis=-1)


def onehot_entropy_bounds(classes: int) -> tuple[float, float]:
    """(minent, maxent) = (0, log K) (2411f7d Dist 'onehot')."""
    return 0.0, math.log(classes)
