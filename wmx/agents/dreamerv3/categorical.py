"""Categorical latents: 1% unimix, straight-through one-hot samples, KL,
entropy and the free-bits dyn/rep losses (dreamerv3_spec 1.8, 2.14).

Convention (2411f7d): the RSSM's logits are stored AFTER unimix, i.e. as
log(0.99 softmax(raw) + 0.01 / C); every function here takes such logits
f32[..., S, C] and applies no further mixing. `unimix_logits` produces them.
Distributions are factorised over the S latents: KL, entropy and log-probs
are summed over the last two axes.

Randomness enters as an explicit array `noise`, in one of two forms:
- class indices int32[...] (the fixtures inject the reference's `post_idx` /
  `prior_idx` this way), used as they are;
- uniforms f32[...] in [0, 1) (`draw_uniform(key, shape)`, drawn before the
  logits exist), turned into indices by the inverse CDF of softmax(logits)
  (`indices_from_uniform`): one float per categorical, not one per class.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

sg = jax.lax.stop_gradient


def unimix_logits(logits: jnp.ndarray, unimix: float) -> jnp.ndarray:
    """log((1 - unimix) softmax(logits) + unimix / C), f32[..., C]; unimix 0: identity.

    Source: dreamerv3_spec 1.8 (2411f7d RSSM._logit, Dist 'onehot').
    """
    if not unimix:
        return logits
    probs = jax.nn.softmax(logits, axis=-1)
    uniform = jnp.ones_like(probs) / probs.shape[-1]
    return jnp.log((1.0 - unimix) * probs + unimix * uniform)


def draw_uniform(key: jax.Array, shape: tuple[int, ...]) -> jnp.ndarray:
    """Sampling noise f32[shape] ~ U[0, 1), one per categorical (e.g. [B, T, S])."""
    return jax.random.uniform(key, shape, jnp.float32)


def indices_from_uniform(logits: jnp.ndarray, u: jnp.ndarray) -> jnp.ndarray:
    """Inverse-CDF sample int32[...] of Categorical(softmax(logits f32[..., C])) from
    u f32[...] in [0, 1): the number of classes whose cumulative probability is
    <= u (clipped to C - 1 against the cumsum's rounding)."""
    cdf = jnp.cumsum(jax.nn.softmax(sg(logits), axis=-1), axis=-1)
    idx = jnp.sum((cdf <= u[..., None]).astype(jnp.int32), axis=-1)
    return jnp.minimum(idx, logits.shape[-1] - 1)


def sample_indices(logits: jnp.ndarray, noise: jnp.ndarray) -> jnp.ndarray:
    """Class indices int32[...] of logits f32[..., C]: `noise` itself when it is an
    integer array (injected indices), else `indices_from_uniform(logits, noise)`."""
    if jnp.issubdtype(noise.dtype, jnp.integer):
        return noise.astype(jnp.int32)
    return indices_from_uniform(logits, noise)


def onehot_sample(logits: jnp.ndarray, noise: jnp.ndarray) -> jnp.ndarray:
    """Straight-through one-hot sample f32[..., C]: value sg(one_hot(idx)), gradient
    that of p = softmax(logits) (the mixed probs), idx = sample_indices(logits, noise)
    (noise: int32[...] indices or f32[...] uniforms).

    Source: dreamerv3_spec 1.8 (sample = sg(onehot) + p - sg(p)).
    """
    probs = jax.nn.softmax(logits, axis=-1)
    idx = sample_indices(logits, noise)
    onehot = jax.nn.one_hot(idx, logits.shape[-1], dtype=logits.dtype)
    return sg(onehot) + (probs - sg(probs))


def onehot_mode(logits: jnp.ndarray) -> jnp.ndarray:
    """One-hot of argmax(logits), f32[..., C] (no gradient)."""
    return jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=logits.dtype)


def kl(lhs: jnp.ndarray, rhs: jnp.ndarray) -> jnp.ndarray:
    """KL(P||Q) summed over the S latents, f32[...] from logits f32[..., S, C]:
    sum_S sum_C softmax(l_P) (log_softmax(l_P) - log_softmax(l_Q)).

    Source: dreamerv3_spec 1.8.
    """
    logp = jax.nn.log_softmax(lhs, axis=-1)
    logq = jax.nn.log_softmax(rhs, axis=-1)
    per_latent = jnp.sum(jax.nn.softmax(lhs, axis=-1) * (logp - logq), axis=-1)
    return jnp.sum(per_latent, axis=-1)


def entropy(logits: jnp.ndarray) -> jnp.ndarray:
    """Entropy summed over the S latents, f32[...] from logits f32[..., S, C].

    Source: dreamerv3_spec 1.8.
    """
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.sum(jax.nn.softmax(logits, axis=-1) * logp, axis=-1), axis=-1)


class KLTerms(NamedTuple):
    """The world model's KL terms, each f32[...] (summed over latents).

    dyn_kl = KL(sg(post) || prior), rep_kl = KL(post || sg(prior)) (equal
    values, different gradients); dyn / rep = max(kl, free) (free bits).
    """

    dyn: jnp.ndarray
    rep: jnp.ndarray
    dyn_kl: jnp.ndarray
    rep_kl: jnp.ndarray


def kl_terms(post: jnp.ndarray, prior: jnp.ndarray, free: float = 1.0) -> KLTerms:
    """Free-bits dynamics and representation losses from mixed logits f32[..., S, C].

    dyn trains the prior (and, through h_t, everything upstream), rep the
    posterior; the clamp max(kl, free) is per element after summing over the
    latents, so the gradient is zero where KL < free. free 0: no clamp.
    Source: dreamerv3_spec 2.14, Algorithm E.
    """
    dyn_kl = kl(sg(post), prior)
    rep_kl = kl(post, sg(prior))
    if free:
        return KLTerms(jnp.maximum(dyn_kl, free), jnp.maximum(rep_kl, free), dyn_kl, rep_kl)
    return KLTerms(dyn_kl, rep_kl, dyn_kl, rep_kl)
