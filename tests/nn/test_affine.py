"""wmx.nn.affine: Linear and LayerNorm affine with column sums as dots."""
import re

import jax
import jax.numpy as jnp
import numpy as np

from wmx.nn.affine import column_sum, linear, scale_shift
from wmx.xla_cpu import NATIVE_ROW_REDUCTIONS, XLA_DOTS

OPTIONS = {**XLA_DOTS, **NATIVE_ROW_REDUCTIONS}


def _inputs():
    k = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(k[0], (3, 40, 6))
    w = jax.random.normal(k[1], (6, 5))
    b = jax.random.normal(k[2], (5,))
    g = jax.random.normal(k[3], (3, 40, 5))
    return x, w, b, g


def test_forward_is_the_plain_expression_bit_for_bit():
    x, w, b, _ = _inputs()
    np.testing.assert_array_equal(jax.jit(linear)(x, w, b),
                                  jax.jit(lambda *a: a[0] @ a[1] + a[2])(x, w, b))
    xh = x[..., :5]
    np.testing.assert_array_equal(jax.jit(scale_shift)(xh, b, -b),
                                  jax.jit(lambda *a: a[0] * a[1] + a[2])(xh, b, -b))


def test_gradients_equal_autodiff_of_the_plain_expressions():
    x, w, b, g = _inputs()
    xh = x[..., :5]
    cases = [(linear, lambda x, w, b: x @ w + b, (x, w, b)),
             (scale_shift, lambda x, s, c: x * s + c, (xh, b, -b))]
    for fn, plain, args in cases:
        got = jax.vjp(fn, *args)[1](g)
        want = jax.vjp(plain, *args)[1](g)
        for a, b_ in zip(got, want):
            np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-5)
        # under one and two levels of vmap (the Q ensemble; the seeds)
        stack = lambda t: jnp.stack([t, 2.0 * t])  # noqa: E731
        for depth in (1, 2):
            sargs, sg = tuple(map(stack, args)), stack(g)
            vfn, vplain = fn, plain
            if depth == 2:
                sargs, sg = tuple(map(stack, sargs)), stack(sg)
            for _ in range(depth):
                vfn, vplain = jax.vmap(vfn), jax.vmap(vplain)
            got = jax.vjp(vfn, *sargs)[1](sg)
            want = jax.vjp(vplain, *sargs)[1](sg)
            for a, b_ in zip(got, want):
                np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-4)



def test_ensemble_pattern_subsets_zero_rows_and_dtypes():
    """The Q ensemble's pattern (input shared, parameters batched by vmap), gradients
    w.r.t. a subset of the arguments, zero rows, and cotangents in the inputs' dtypes."""
    x, w, b, _ = _inputs()
    ws, bs = jnp.stack([w, -w, 2 * w]), jnp.stack([b, b, -b])

    def loss(fn, x, ws, bs):
        return jnp.sum(jnp.tanh(jax.vmap(fn, in_axes=(None, 0, 0))(x, ws, bs)))

    plain = lambda x, w, b: x @ w + b  # noqa: E731
    for argnums in ((0, 1, 2), (1, 2), (0,)):
        got = jax.grad(loss, argnums=tuple(a + 1 for a in argnums))(linear, x, ws, bs)
        want = jax.grad(loss, argnums=tuple(a + 1 for a in argnums))(plain, x, ws, bs)
        for a, b_ in zip(got, want):
            np.testing.assert_allclose(a, b_, rtol=1e-5, atol=1e-5)
    gx, gw, gb = jax.grad(lambda *a: jnp.sum(linear(*a)), argnums=(0, 1, 2))(
        jnp.zeros((0, 6)), w, b)
    assert gx.shape == (0, 6) and not gw.any() and not gb.any()
    xb = x.astype(jnp.bfloat16)
    grads = jax.grad(lambda *a: jnp.sum(linear(*a).astype(jnp.float32)), argnums=(0, 1, 2))(
        xb, w.astype(jnp.bfloat16), b)
    assert [g.dtype for g in grads] == [jnp.bfloat16, jnp.bfloat16, jnp.float32]

def test_column_sum_of_a_nan_row_spoils_only_its_own_columns():
    g = jnp.arange(12.0).reshape(4, 3).at[1, 0].set(jnp.nan)
    got = np.asarray(column_sum(g))
    assert np.isnan(got[0]) and np.array_equal(got[1:], [22.0, 26.0])


def test_vmapped_column_sum_is_one_batched_dot_without_a_transpose():
    """Under vmap the ones vector carries the batch axis, so XLA's CPU backend forms
    a batched matrix-vector product instead of transposing the gradient first
    (docs/performance.md, "Native row sums")."""
    g = jax.random.normal(jax.random.key(1), (5, 768, 64))
    hlo = jax.jit(jax.vmap(column_sum), compiler_options=OPTIONS).lower(g).compile().as_text()
    ops = re.findall(r" (dot|reduce|reduce-window|copy|transpose)\(", hlo)
    assert ops == ["dot"], ops
    np.testing.assert_allclose(jax.vmap(column_sum)(g), g.sum(1), rtol=1e-5, atol=1e-4)
