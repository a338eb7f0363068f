"""Linear layer and LayerNorm affine whose parameter gradients are dots (shared_blocks B4).

Forward values are exactly `x @ kernel + bias` and `xhat * scale + bias`; only the
backward pass differs from autodiff's, and only in float summation order: the
gradients of bias, LayerNorm scale and LayerNorm bias are sums over every row,
written as `1 @ g` (a matrix-vector product at full float32 precision) instead of a
reduction. With XLA's CPU tree-reduction rewrite turned off for TD-MPC2's programs
(row sums, such as LayerNorm's statistics, then fuse with their producers and run
faster), a column sum as a reduction is 5-9x slower than before, while as a dot it is
as fast as the rewritten one (docs/performance.md, "Native row sums").

Reverse mode only (custom VJPs: `jax.jvp`, `jax.jacfwd` and `jax.linearize` raise);
scale and bias must have the parameter's own shape f32[F] (not a broadcast scalar).
Errors are JAX's own: a TypeError when the shapes do not broadcast or multiply.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def column_sum(g: jnp.ndarray) -> jnp.ndarray:
    """Sum over every axis but the last, as a dot: [..., F] -> [F], in g's dtype
    (accumulated in float32, at full precision on every backend).

    The ones vector is derived from g (a select XLA folds to the constant 1) so that
    under `jax.vmap` (the Q ensemble, the seeds) it carries g's batch axes: XLA then
    forms one batched matrix-vector product, where a shared ones vector would make
    it transpose g first (a copy of the whole gradient per sum).
    """
    rows = g.reshape(-1, g.shape[-1])
    first = rows[:, 0]
    ones = jnp.where(first == first, 1.0, 1.0).astype(rows.dtype)
    total = jnp.dot(ones, rows, precision=jax.lax.Precision.HIGHEST,
                    preferred_element_type=jnp.float32)
    return total.astype(g.dtype)


@jax.custom_vjp
def linear(x: jnp.ndarray, kernel: jnp.ndarray, bias: jnp.ndarray) -> jnp.ndarray:
    """x [..., in] @ kernel [in, out] + bias [out] -> [..., out] (float32 in wmx).

    Gradients: x g kernel^T, kernel x^T g over all rows, bias `column_sum(g)`, each
    in its input's dtype.
    """
    return x @ kernel + bias


def _linear_fwd(x, kernel, bias):
    return linear(x, kernel, bias), (x, kernel, bias)


def _linear_bwd(res, g):
    x, kernel, bias = res
    rows, g_rows = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    return ((g @ kernel.T).astype(x.dtype), (rows.T @ g_rows).astype(kernel.dtype),
            column_sum(g_rows).astype(bias.dtype))


linear.defvjp(_linear_fwd, _linear_bwd)


@jax.custom_vjp
def scale_shift(xhat: jnp.ndarray, scale: jnp.ndarray, bias: jnp.ndarray) -> jnp.ndarray:
    """LayerNorm's affine xhat [..., F] * scale [F] + bias [F] -> [..., F].

    Gradients: xhat g * scale, scale `column_sum(g * xhat)`, bias `column_sum(g)`,
    each in its input's dtype.
    """
    return xhat * scale + bias


def _scale_shift_fwd(xhat, scale, bias):
    return scale_shift(xhat, scale, bias), (xhat, scale, bias)


def _scale_shift_bwd(res, g):
    xhat, scale, bias = res
    return ((g * scale).astype(xhat.dtype), column_sum(g * xhat).astype(scale.dtype),
            column_sum(g).astype(bias.dtype))


scale_shift.defvjp(_scale_shift_fwd, _scale_shift_bwd)
