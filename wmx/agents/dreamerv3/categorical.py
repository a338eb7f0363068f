"""Categorical latents: 1% unimix, straight-through one-hot samples, KL,
entropy and the free-bits dyn/rep losses (dreamerv3_spec 1.8, 2.14).

Convention (2411f7d): the RSSM's logits are stored AFTER unimix, i.e. as
log(0.99 softmax(raw) + 0.01 / C); every function here takes such logits
f32[..., S, C] and applies no further mixing. `unimix_logits` produces them.
Distributions are factorised over the S latents: KL, entropy and log-probs
are summed over the last two axes.

Randomness enters as explicit class indices int32[..., S] (the fixtures'
`post_idx` / `prior_idx`); `draw_indices(key, logits)` makes them.
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


def onehot_sample(logits: jnp.ndarray, idx: jnp.ndarray) -> jnp.ndarray:
    """Straight-through one-hot sample f32[..., C] of class indices idx int32[...]:
    value sg(one_hot(idx)), gradient that of p = softmax(logits) (the mixed probs).

    Source: dreamerv3_spec 1.8 (sample = sg(onehot) + p - sg(p)).
    """
    probs = jax.nn.softmax(logits, axis=-1)
    onehot = jax.nn.one_hot(idx, logits.shape[-1], dtype=logits.dtype)
    return sg(onehot) + (probs - sg(probs))


def draw_indices(key: jax.Array, logits: jnp.ndarray) -> jnp.ndarray:
    """Class indices int32[...] ~ Categorical(softmax(logits f32[..., C])).

    The draw behind `onehot_sample`; the fixtures inject it instead.
    """
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


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
