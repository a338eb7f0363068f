"""Fast forms used by the TD-MPC2 hot paths equal the straightforward formulas
(within float32 rounding): the one-exp Mish and its custom derivative."""
import math

import jax
import jax.numpy as jnp
import numpy as np

from wmx.nn.mlp import mish


def _mish64(v):
    return v * math.tanh(math.log1p(math.exp(v))) if v < 700 else v


def _dmish64(v):
    if v > 700:
        return 1.0
    sp = math.log1p(math.exp(v))
    th = math.tanh(sp)
    return th + v * (1 - th * th) / (1 + math.exp(-v)) if v > -700 else 0.0


def test_mish_matches_float64_and_jax_nn_mish():
    x = np.concatenate([np.linspace(-40, 40, 40001, dtype=np.float32),
                        np.asarray([0.0, -0.0, 1e-30, -1e-30, 19.99, 20.0, 20.01, 88.0, 1e4,
                                    -88.0, -1e4], np.float32)])
    got = np.asarray(jax.jit(mish)(jnp.asarray(x)), np.float64)
    ref = np.asarray([_mish64(float(v)) for v in x])
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(got, np.asarray(jax.nn.mish(jnp.asarray(x))), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(np.asarray(mish(jnp.array([1.0, -1]))), [0.8650984, -0.3034015],
                               rtol=1e-6)


def test_mish_derivative_matches_float64():
    x = np.concatenate([np.linspace(-40, 40, 40001, dtype=np.float32),
                        np.asarray([0.0, 20.0, 88.0, 1e4, -1e4], np.float32)])
    g = np.asarray(jax.jit(jax.vmap(jax.grad(mish)))(jnp.asarray(x)), np.float64)
    ref = np.asarray([_dmish64(float(v)) for v in x])
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, ref, rtol=0, atol=5e-7)
    # forward-mode agrees with reverse mode, and with autodiff of jax.nn.mish (4e-6 abs)
    gf = jax.jvp(mish, (jnp.asarray(x),), (jnp.ones_like(jnp.asarray(x)),))[1]
    np.testing.assert_allclose(np.asarray(gf), g, rtol=0, atol=2e-7)
    gj = np.asarray(jax.vmap(jax.grad(jax.nn.mish))(jnp.asarray(x)))
    np.testing.assert_allclose(g, gj, rtol=0, atol=1e-5)
