"""LaProp with per-tensor adaptive gradient clipping, DreamerV3's optimizer.

One optax chain, in the reference's order (dreamerv3_spec 4.3, Algorithm I):

1. ``clip_by_agc(0.3, pmin=1e-3)``: per tensor, g / max(1, |g| / (0.3 max(pmin, |p|)))
   with both norms over the whole flattened tensor and p the current
   (pre-update) parameters (4.4);
2. ``optax.scale_by_rms(0.999, eps=1e-20, eps_in_sqrt=False, bias_correction=True)``:
   nu <- b2 nu + (1 - b2) g^2, u = g / (sqrt(nu / (1 - b2^t)) + eps) (4.5);
3. ``scale_by_debiased_momentum(0.9)``: mu <- b1 mu + (1 - b1) u,
   out = mu / (1 - b1^t), with its own step count (4.6);
4. weight decay off (4.8: wd = 0, not built);
5. ``scale_by_warmup_lr(lr, 1000)``: u * (-lr) * clip(k / warmup, 0, 1), k the
   update count read before its increment, so the first update is exactly
   zero (4.7; the 29eb964 form, scale(-lr) then the warmup factor).

float32 caveat (spec 4.5): the increment (1 - b2) g^2 underflows to zero for
|g| below about 3.4e-18, so a tensor whose first gradients are that small keeps
nu = 0 and takes a step of g / 1e-20 (hundreds of learning rates). The
reference does exactly this in float32 and so does this chain: the same
operations in the same order, no guard.

The chain is one optimizer over every trained module (world model, actor,
critic). ``opt_metrics`` gives the reference's ``opt_*`` training metrics.

Source: dreamerv3_spec 4.3-4.8, Algorithm I; fixtures components.npz (h).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class MomentumState(NamedTuple):
    """State of ``scale_by_debiased_momentum``: count i32[], mu (params' tree, f32)."""

    count: jax.Array
    mu: optax.Updates


class WarmupState(NamedTuple):
    """State of ``scale_by_warmup_lr``: count i32[] (the reference's ``opt/step``)."""

    count: jax.Array


def clip_by_agc(clip: float = 0.3, pmin: float = 1e-3) -> optax.GradientTransformation:
    """Per-tensor adaptive gradient clipping (stateless; needs ``params``).

    For every leaf: u = ||vec(g)||_2, n = ||vec(p)||_2,
    g <- g * 1 / max(1, u / (clip * max(pmin, n))). Not NFNet's unit-wise AGC:
    one norm per tensor, 3-D block kernels included.

    Raises:
        ValueError: from ``update`` when ``params`` is None.

    Source: dreamerv3_spec 4.4.
    """
    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("clip_by_agc needs the current params")

        def one(g, p):
            unorm = jnp.linalg.norm(g.ravel(), 2)
            pnorm = jnp.linalg.norm(p.ravel(), 2)
            upper = clip * jnp.maximum(pmin, pnorm)
            return g * (1 / jnp.maximum(1.0, unorm / upper))

        return jax.tree.map(one, updates, params), state

    return optax.GradientTransformation(init_fn, update_fn)


def scale_by_debiased_momentum(beta: float = 0.9) -> optax.GradientTransformation:
    """EMA momentum with bias correction and its own step count (LaProp's step 2).

    mu <- beta mu + (1 - beta) u; returns mu / (1 - beta^t), t counted from 1.
    optax.trace has neither the (1 - beta) factor nor the correction.

    Source: dreamerv3_spec 4.6.
    """
    def init_fn(params):
        mu = jax.tree.map(lambda p: jnp.zeros_like(p, jnp.float32), params)
        return MomentumState(jnp.zeros([], jnp.int32), mu)

    def update_fn(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        return optax.tree.bias_correction(mu, beta, count), MomentumState(count, mu)

    return optax.GradientTransformation(init_fn, update_fn)


def warmup_factor(count, warmup: int) -> jax.Array:
    """f32[] clip(k / warmup, 0, 1) for the update count k (1 when warmup <= 0)."""
    if warmup <= 0:
        return jnp.ones([], jnp.float32)
    return jnp.clip(jnp.asarray(count).astype(jnp.float32) / warmup, 0, 1)


def scale_by_warmup_lr(lr: float, warmup: int = 1000) -> optax.GradientTransformation:
    """u * (-lr) * clip(k / warmup, 0, 1), k = updates so far (read before increment).

    lr_k = lr k / warmup for k < warmup, then lr: the first update is exactly
    zero (its sign that of -u) while the moments still accumulate. Written
    out rather than optax.linear_schedule, whose lr - lr (1 - k / warmup)
    loses about 1e-4 relative at small k in float32.

    Source: dreamerv3_spec 4.7 (29eb964: scale(-lr), then the warmup factor).
    """
    def init_fn(params):
        del params
        return WarmupState(jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        scale = warmup_factor(state.count, warmup)
        out = jax.tree.map(lambda u: u * -lr * scale, updates)
        return out, WarmupState(optax.safe_increment(state.count))

    return optax.GradientTransformation(init_fn, update_fn)


def laprop(lr: float = 4e-5, *, agc: float = 0.3, pmin: float = 1e-3,
           beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-20,
           warmup: int = 1000) -> optax.GradientTransformation:
    """DreamerV3's optimizer: AGC -> RMS -> momentum -> -lr with linear warmup.

    Args:
        lr: learning rate after warmup (4e-5).
        agc: AGC clip ratio (0.3); pmin: AGC parameter-norm floor (1e-3).
        beta1: momentum decay (0.9); beta2: RMS decay (0.999, the code; the
            paper's text says 0.99, spec open question 2).
        eps: added after the square root (1e-20).
        warmup: updates of linear warmup from 0 (1000; <= 0 disables it).

    Returns:
        An optax.GradientTransformation whose ``update(grads, state, params)``
        requires ``params`` (AGC). State: (EmptyState,
        ScaleByRmsWithCountState(count, nu), MomentumState(count, mu),
        WarmupState(count)), all f32 / i32[].

    Source: dreamerv3_spec 4.3-4.8, Algorithm I.
    """
    return optax.chain(
        clip_by_agc(agc, pmin),
        optax.scale_by_rms(beta2, eps=eps, eps_in_sqrt=False, bias_correction=True),
        scale_by_debiased_momentum(beta1),
        scale_by_warmup_lr(lr, warmup),
    )


def opt_metrics(loss, grads, updates, new_params, opt_state) -> dict:
    """The reference optimizer's training metrics (names as it logs them).

    Args:
        loss: f32[] total loss of the step.
        grads: raw gradients (before AGC).
        updates: the applied updates (new_params - params).
        new_params: parameters after the update.
        opt_state: the ``laprop`` state after the update.

    Returns:
        dict of f32[] ``opt_loss``, ``opt_grad_norm``, ``opt_update_norm``,
        ``opt_param_norm`` (global L2 norms; params after the update) and i32[]
        ``opt_grad_steps`` (updates so far, after this one), ``opt_param_count``.

    Source: 29eb964 dreamerv3/jaxutils.py Optimizer metrics (fixture
    components.npz ``opt/*/metrics``).
    """
    warm = opt_state[-1]
    count = sum(int(jnp.size(x)) for x in jax.tree.leaves(new_params))
    return {
        "opt_loss": jnp.asarray(loss, jnp.float32),
        "opt_grad_norm": optax.global_norm(grads),
        "opt_update_norm": optax.global_norm(updates),
        "opt_param_norm": optax.global_norm(new_params),
        "opt_grad_steps": warm.count,
        "opt_param_count": jnp.asarray(count, jnp.int32),
    }
