"""TD-MPC2 tanh-Gaussian policy pieces (tdmpc2_spec 1.8-1.9, 2.12; shared_blocks B12).

Paper-era (PE, 5f6fade) log-probability:
log_pi = n * (sum_d(-eps^2/2 - log_std) - ln(2 pi)/2) - sum_d log(relu(1 - tanh(u)^2) + 1e-6)
with n the number of valid action dims (the Gaussian part, constant included,
is scaled by n; the tanh term is not, and keeps its gradient).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)  # 0.9189385175704956


def bound_log_std(raw: jnp.ndarray, log_std_min: float = -10.0,
                  log_std_max: float = 2.0) -> jnp.ndarray:
    """log_std = min + (max - min)/2 * (tanh(raw) + 1), in (min, max); raw 0 -> -4."""
    return log_std_min + 0.5 * (log_std_max - log_std_min) * (jnp.tanh(raw) + 1.0)


def gaussian_residual(eps: jnp.ndarray, log_std: jnp.ndarray) -> jnp.ndarray:
    """sum_d(-eps^2/2 - log_std), keepdims: f32[..., 1]."""
    return jnp.sum(-0.5 * eps ** 2 - log_std, axis=-1, keepdims=True)


def squash_logdet(action: jnp.ndarray, eps: float = 1e-6) -> jnp.ndarray:
    """sum_d log(relu(1 - action^2) + eps), action = tanh(u): f32[..., 1].

    TD-MPC2's form (not the exact stable log-det): flat at saturation. action^2
    is rounded to float32 before the subtraction, as torch computes it: jitted
    XLA (CPU) would otherwise contract ``1 - a*a`` into one fused multiply-add
    (1 - a^2 unrounded), which near saturation (1 - a^2 ~ 3e-4) moves log_pi by
    ~1e-4 (7.4e-5 on fixtures/tdmpc2_mt update call 0); ``min(a*a, 1)`` (= a*a
    since |a| <= 1) between the product and the subtraction prevents it.
    Source: tdmpc2_spec 1.9; fixtures/tdmpc2_mt/README.md "Tolerances".
    """
    sq = jnp.minimum(action * action, 1.0)
    return jnp.sum(jnp.log(jax.nn.relu(1.0 - sq) + eps), axis=-1, keepdims=True)


def pe_log_prob(eps: jnp.ndarray, log_std: jnp.ndarray, action: jnp.ndarray,
                n: jnp.ndarray | float) -> jnp.ndarray:
    """PE log_pi f32[..., 1] = n * (residual - ln(2pi)/2) - squash_logdet(action)."""
    return n * (gaussian_residual(eps, log_std) - HALF_LOG_2PI) - squash_logdet(action)


def squash(u: jnp.ndarray) -> jnp.ndarray:
    """tanh(u) within 1 ulp of the correctly rounded value where |tanh(u)| > 0.46.

    XLA's CPU tanh is up to 5 ulp off near +-1, where the squash correction
    log(1 - tanh(u)^2 + 1e-6) amplifies one ulp of tanh into ~1e-3 of log_pi;
    torch's tanh (the reference) is within 1 ulp. For |u| > 0.5 this uses
    sign(u) (1 - 2 / (exp(2|u|) + 1)) (|u| clamped at 20, where tanh is 1 in
    float32, so the gradient stays finite); below, jnp.tanh(u), so the gradient
    at u = 0 is tanh's (1; sign(u) would make it 0). Gradient: that of the formula.
    """
    au = jnp.abs(u)
    big = 1.0 - 2.0 / (jnp.exp(2.0 * jnp.minimum(au, 20.0)) + 1.0)
    return jnp.where(au > 0.5, jnp.sign(u) * big, jnp.tanh(u))
