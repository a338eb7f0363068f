"""DreamerV3 layers as pure functions over explicit parameter dicts
(dreamerv3_spec 1.1-1.5; 2411f7d nets.py Linear / BlockLinear / Norm).

A layer is a dict {"kernel", "bias"[, "norm_scale"]}:

- Linear: kernel f32[I, U], bias f32[U] (zeros); y = x @ W + b.
- BlockLinear (g blocks): kernel f32[g, I/g, U/g], bias f32[U] (zeros);
  output block k depends only on input block k.
- With "norm_scale" f32[U] (ones) the layer is a hidden block
  Linear -> RMSNorm(eps) -> SiLU (spec 1.3: the bias is kept before the norm).

Kernels: outscale * TruncatedNormal(-2, 2) with Var = 1/fan_in
(`wmx.nn.init.dreamer_trunc_normal`, deviation D23 for the constant); fan_in
follows compute_fans, so a BlockLinear gets fan_in = I, the total input width
(spec 1.2). outscale 0 gives a zero kernel. Biases are never scaled.
Everything is float32 (deviation D4: the reference computes in bfloat16).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.nn.init import dreamer_trunc_normal

Layer = dict


# ---- init --------------------------------------------------------------------
def init_linear(key: jax.Array, in_dim: int, out_dim: int, *, outscale: float = 1.0,
                norm: bool = False) -> Layer:
    """Linear params {"kernel" f32[in, out], "bias" f32[out] (0)[, "norm_scale" f32[out] (1)]}.

    Source: dreamerv3_spec 1.1, 1.5 (outscale on the kernel only; D23).
    """
    p = {"kernel": dreamer_trunc_normal(outscale)(key, (in_dim, out_dim), jnp.float32),
         "bias": jnp.zeros((out_dim,), jnp.float32)}
    if norm:
        p["norm_scale"] = jnp.ones((out_dim,), jnp.float32)
    return p


def init_block_linear(key: jax.Array, in_dim: int, out_dim: int, groups: int, *,
                      outscale: float = 1.0, norm: bool = False) -> Layer:
    """BlockLinear params {"kernel" f32[g, in/g, out/g], "bias" f32[out][, "norm_scale"]}.

    fan_in = (in/g) * g = in (compute_fans rank >= 3). Raises ValueError when
    g does not divide in_dim and out_dim.
    Source: dreamerv3_spec 1.2, 1.5.
    """
    if in_dim % groups or out_dim % groups:
        raise ValueError(f"BlockLinear: groups={groups} must divide in_dim={in_dim} "
                         f"and out_dim={out_dim}")
    shape = (groups, in_dim // groups, out_dim // groups)
    p = {"kernel": dreamer_trunc_normal(outscale)(key, shape, jnp.float32),
         "bias": jnp.zeros((out_dim,), jnp.float32)}
    if norm:
        p["norm_scale"] = jnp.ones((out_dim,), jnp.float32)
    return p


def init_mlp(key: jax.Array, in_dim: int, units: int, layers: int) -> dict[str, Layer]:
    """`layers` hidden blocks {"h0".."h{layers-1}"}: in_dim -> units -> ... -> units.

    Source: dreamerv3_spec 1.4 (hidden layers always use outscale 1).
    """
    keys = jax.random.split(key, layers)
    return {f"h{i}": init_linear(keys[i], in_dim if i == 0 else units, units, norm=True)
            for i in range(layers)}


# ---- apply -------------------------------------------------------------------
def rms_norm(x: jnp.ndarray, scale: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """RMSNorm over the last axis: x * (rsqrt(mean(x^2) + eps) * scale), f32[..., F].

    Statistics in float32 (the input is float32, D4); learned scale, no shift.
    Source: dreamerv3_spec 1.3 (2411f7d Norm 'rms').
    """
    mult = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale
    return x * mult


def _post(p: Layer, y: jnp.ndarray, eps: float) -> jnp.ndarray:
    if "norm_scale" in p:
        return jax.nn.silu(rms_norm(y, p["norm_scale"], eps))
    return y


def linear(p: Layer, x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """x f32[..., I] -> f32[..., U]: x @ W + b, then RMSNorm -> SiLU if the layer is normed.

    Source: dreamerv3_spec 1.1, 1.3.
    """
    return _post(p, x @ p["kernel"] + p["bias"], eps)


def block_linear(p: Layer, x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """x f32[..., I] -> f32[..., U] block-diagonally, g = kernel.shape[0] blocks:
    einsum('...ki,kio->...ko', x.reshape(..., g, I/g), W).reshape(..., U) + b,
    then RMSNorm over the full U vector -> SiLU if normed (block_norm False).

    Source: dreamerv3_spec 1.2, 2.4 (2411f7d BlockLinear).
    """
    g, i, o = p["kernel"].shape
    xb = x.reshape(*x.shape[:-1], g, i)
    y = jnp.einsum("...ki,kio->...ko", xb, p["kernel"]).reshape(*x.shape[:-1], g * o)
    return _post(p, y + p["bias"], eps)


def mlp(layers: dict[str, Layer], x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """Apply the hidden blocks "h0", "h1", ... of `layers` in order (other keys,
    e.g. a head's "out", are ignored): f32[..., I] -> f32[..., units].

    Source: dreamerv3_spec 1.4.
    """
    i = 0
    while f"h{i}" in layers:
        x = linear(layers[f"h{i}"], x, eps)
        i += 1
    return x
