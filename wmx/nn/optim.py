"""Optimiser builders (shared_blocks B17; tdmpc2_spec 2.9-2.10, 2.14).

TD-MPC2: world model = one global-norm clip over all groups, THEN Adam per
group (encoder lr x 0.3), eps 1e-8; policy = clip 20 then Adam(3e-4, eps 1e-5).
Clip coefficient in torch's form min(1, max_norm / (norm + 1e-6)).
"""
from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import optax


def global_norm(tree) -> jnp.ndarray:
    """L2 norm over every leaf of a tree, f32[]."""
    return optax.global_norm(tree)


def torch_clip_coef(norm: jnp.ndarray, max_norm: float) -> jnp.ndarray:
    """min(1, max_norm / (norm + 1e-6)), torch.nn.utils.clip_grad_norm_'s factor."""
    return jnp.minimum(1.0, max_norm / (norm + 1e-6))


def clip_by_global_norm_torch(max_norm: float) -> optax.GradientTransformation:
    """Scale all updates by `torch_clip_coef(global_norm, max_norm)` (stateless)."""
    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        del params
        c = torch_clip_coef(global_norm(updates), max_norm)
        return jax.tree.map(lambda g: g * c, updates), state

    return optax.GradientTransformation(init_fn, update_fn)


def grouped_adam(lr: float, label_fn: Callable, lr_scales: Mapping[str, float],
                 *, eps: float = 1e-8, b1: float = 0.9, b2: float = 0.999,
                 clip_norm: float | None = 20.0) -> optax.GradientTransformation:
    """[global clip (torch form)] then multi_transform({group: adam(lr * scale)}).

    `label_fn(params) -> tree of group names`; every name must be a key of
    `lr_scales` (use 1.0 for the plain-lr groups). One global norm over all
    groups (never per group). `clip_norm=None` leaves clipping to the caller
    (TD-MPC2 PE folds the stale policy gradient into the norm, spec 2.10).
    """
    groups = {g: optax.adam(lr * s, b1=b1, b2=b2, eps=eps) for g, s in lr_scales.items()}
    tx = optax.multi_transform(groups, label_fn)
    if clip_norm is None:
        return tx
    return optax.chain(clip_by_global_norm_torch(clip_norm), tx)


def clipped_adam(lr: float, *, eps: float = 1e-5, b1: float = 0.9, b2: float = 0.999,
                 clip_norm: float | None = 20.0) -> optax.GradientTransformation:
    """[global clip (torch form)] then adam(lr, eps) (TD-MPC2 policy optimiser)."""
    tx = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    if clip_norm is None:
        return tx
    return optax.chain(clip_by_global_norm_torch(clip_norm), tx)
