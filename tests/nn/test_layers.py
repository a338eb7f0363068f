"""MLP/LayerNorm (B4), initialisers (B5), SimNorm (B7), ensemble (B9), EMA (B10),
tanh-Gaussian (B12): pinned numbers and properties."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from wmx.nn.ema import ema_update
from wmx.nn.ensemble import random_pair, reduce_pair
from wmx.nn.init import dreamer_trunc_normal, normal_init
from wmx.nn.mlp import NormedMLP, layer_norm, mish, normed_mlp_apply, normed_mlp_init
from wmx.nn.simnorm import simnorm
from wmx.nn.tanh_gaussian import (HALF_LOG_2PI, bound_log_std, gaussian_residual,
                                  pe_log_prob, squash, squash_logdet)
from wmx.xla_cpu import NATIVE_ROW_REDUCTIONS, XLA_DOTS


def test_norm_and_activation_values():
    x = jnp.array([1.0, 2, 3, 4])
    np.testing.assert_allclose(layer_norm(x, 1.0, 0.0, 1e-5),
                               [-1.3416355, -0.44721183, 0.44721183, 1.3416355], rtol=1e-6)
    ln = NormedMLP(hidden=(), norm="layer", norm_eps=1e-5)  # no layers: identity
    assert ln.apply({}, x).shape == (4,)
    rms = NormedMLP(hidden=(4,), norm="rms", norm_eps=1e-4, act=lambda v: v,
                    kernel_init=lambda k, s, d=jnp.float32: jnp.eye(4))
    np.testing.assert_allclose(rms.apply(rms.init(jax.random.key(0), x), x),
                               [0.36514595, 0.7302919, 1.0954379, 1.4605838], rtol=1e-6)
    lay = NormedMLP(hidden=(4,), norm="layer", norm_eps=1e-5, act=lambda v: v,
                    kernel_init=lambda k, s, d=jnp.float32: jnp.eye(4))
    np.testing.assert_allclose(lay.apply(lay.init(jax.random.key(0), x), x),
                               [-1.3416355, -0.44721183, 0.44721183, 1.3416355], rtol=1e-6)
    np.testing.assert_allclose(jax.nn.silu(jnp.array([1.0, -1])), [0.7310586, -0.2689414], rtol=1e-6)
    np.testing.assert_allclose(jax.nn.mish(jnp.array([1.0, -1])), [0.8650984, -0.3034015], rtol=1e-6)
    # biased variance, not E[x^2] - E[x]^2: accurate at mean 1000
    big = jnp.array([1000.0, 1001, 1002, 1003])
    np.testing.assert_allclose(layer_norm(big, 1.0, 0.0), layer_norm(x, 1.0, 0.0), atol=1e-4)


def test_dropout_before_norm_and_deterministic_path():
    p = normed_mlp_init(jax.random.key(0), [16, 64, 64, 8], last_normed=False)
    x = jax.random.normal(jax.random.key(1), (32, 16))
    # first hidden layer output with dropout, before the activation: LN rows are normalised
    # (a lone normed layer: Linear -> Dropout -> LN, no activation)
    h = normed_mlp_apply({"layer0": p["layer0"]}, x, dropout_rate=0.5,
                         dropout_key=jax.random.key(2))
    np.testing.assert_allclose(h.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(h.var(-1), 1.0, rtol=5e-3)  # var / (var + 1e-5)
    a = normed_mlp_apply(p, x, dropout_rate=0.5, dropout_key=None)
    b = normed_mlp_apply(p, x)
    np.testing.assert_array_equal(a, b)
    c = normed_mlp_apply(p, x, dropout_rate=0.5, dropout_key=jax.random.key(3))
    assert not np.allclose(a, c)


def _layers_by_hand(p, x, keep=None, rate=0.0):
    """Literal per-layer MLP on x with its leading axes kept (no flattening to rows)."""
    n = len(p)
    h = x
    for i in range(n):
        q = p[f"layer{i}"]
        h = h @ q["kernel"] + q["bias"]
        if i == 0 and keep is not None:
            h = jnp.where(keep, h / (1.0 - rate), 0.0)
        if "ln_scale" in q:
            h = layer_norm(h, q["ln_scale"], q["ln_bias"])
            if i < n - 1:
                h = mish(h)
    return h


def test_rows_flattening_keeps_values_masks_and_draws():
    """normed_mlp_apply runs on rows x.reshape(-1, in): the same function of any leading
    shape (the same values up to the dots' float order), the keep-mask from a dropout key
    is `jax.random.bernoulli` at h0's shape, and a mask may broadcast over leading axes."""
    p = normed_mlp_init(jax.random.key(0), [6, 32, 32, 5], last_normed=False)
    x = jax.random.normal(jax.random.key(1), (3, 4, 6))
    want = _layers_by_hand(p, x)
    got = normed_mlp_apply(p, x)
    assert got.shape == (3, 4, 5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(normed_mlp_apply(p, x[0, 0]), want[0, 0], rtol=1e-6, atol=1e-7)
    assert normed_mlp_apply(p, jnp.zeros((0, 7, 6))).shape == (0, 7, 5)
    key = jax.random.key(2)
    keep = jax.random.bernoulli(key, 0.75, (3, 4, 32))
    want_d = _layers_by_hand(p, x, keep, 0.25)
    np.testing.assert_allclose(normed_mlp_apply(p, x, dropout_rate=0.25, dropout_key=key),
                               want_d, rtol=1e-6, atol=1e-7)
    # a mask broadcast over leading axes (shared by rows) is applied as given
    np.testing.assert_allclose(
        normed_mlp_apply(p, x, dropout_rate=0.25, dropout_mask=keep[0]),
        _layers_by_hand(p, x, keep[0], 0.25), rtol=1e-6, atol=1e-7)


def test_parameter_gradients_sum_rows_as_dots():
    """TD-MPC2's CPU programs keep reductions native (`NATIVE_ROW_REDUCTIONS`, no
    reduce-window rewrite) and sum the bias and LayerNorm gradients over rows as dots
    (`wmx.nn.affine`): in the compiled gradient no reduction has a layer's width as
    its output (a column sum), and the row sums of LayerNorm are there."""
    p = normed_mlp_init(jax.random.key(0), [10, 48, 48, 7], last_normed=False)
    x = jax.random.normal(jax.random.key(1), (3, 256, 10))

    def loss(p):
        return jnp.sum(normed_mlp_apply(p, x) ** 2)

    hlo = jax.jit(jax.grad(loss), compiler_options={**XLA_DOTS, **NATIVE_ROW_REDUCTIONS}
                  ).lower(p).compile().as_text()
    assert "reduce-window(" not in hlo
    # every reduce's output shape and reduced dimensions
    reduces = re.findall(
        r"= f32\[([\d,]*)\]\{[\d,]*\} reduce\([^\n]*?dimensions=\{([\d,]*)\}", hlo)
    assert ("768", "1") in reduces, reduces      # LayerNorm statistics over a row
    over_rows = [(out, dims) for out, dims in reduces if out and "0" in dims.split(",")]
    assert not over_rows, over_rows              # no sum over the rows (axis 0) but the loss's


def test_param_count_normed_linear():
    p = normed_mlp_init(jax.random.key(0), [5, 7, 3], last_normed=True)
    assert sum(v.size for v in jax.tree.leaves(p)) == (5 * 7 + 3 * 7) + (7 * 3 + 3 * 3)


def test_initialisers():
    k = jax.random.key(0)
    w = dreamer_trunc_normal()(k, (256, 512))
    np.testing.assert_allclose(float(w.std()), 0.0625, rtol=0.02)
    blk = dreamer_trunc_normal()(k, (8, 1024, 256))
    np.testing.assert_allclose(float(blk.std()), 0.011048, rtol=0.02)
    n = normal_init(0.02)(k, (512, 512))
    np.testing.assert_allclose(float(n.std()), 0.02, rtol=0.01)
    assert float(jnp.abs(n).max()) > 0.04
    assert not np.any(np.asarray(dreamer_trunc_normal(0.0)(k, (3, 3))))


def test_simnorm_pinned():
    y = simnorm(jnp.arange(16.0) / 4, 8)
    ref = [0.04445499, 0.05708134, 0.07329389, 0.09411121, 0.12084118, 0.15516315,
           0.19923344, 0.2558208]
    np.testing.assert_allclose(y[:8], ref, rtol=1e-6)
    np.testing.assert_allclose(y[8:], ref, rtol=1e-6)
    np.testing.assert_allclose(y.reshape(2, 8).sum(-1), 1.0, rtol=1e-6)
    shift = jnp.repeat(jnp.array([3.0, -7.0]), 8)
    np.testing.assert_allclose(simnorm(jnp.arange(16.0) / 4 + shift), y, rtol=1e-5)
    with pytest.raises(ValueError, match="divisible"):
        simnorm(jnp.ones(10))


def test_random_pair_and_reduce():
    for i in range(20):
        p = np.asarray(random_pair(jax.random.key(i), 5))
        assert p.shape == (2,) and p[0] != p[1] and 0 <= p.min() and p.max() < 5
        assert set(np.asarray(random_pair(jax.random.key(i), 2)).tolist()) == {0, 1}
    q = jnp.array([[1.0, 5.0], [3.0, 2.0]])
    np.testing.assert_array_equal(reduce_pair(q, "min"), [1.0, 2.0])
    np.testing.assert_array_equal(reduce_pair(q, "avg"), [2.0, 3.5])
    with pytest.raises(ValueError):
        random_pair(jax.random.key(0), 1)
    with pytest.raises(ValueError):
        reduce_pair(q, "max")


def test_ema():
    t = {"w": jnp.zeros(3), "ln": {"scale": jnp.zeros(2)}}
    o = jax.tree.map(jnp.ones_like, t)
    np.testing.assert_allclose(ema_update(t, o, 0.01)["ln"]["scale"], 0.01)
    np.testing.assert_allclose(ema_update(t, o, 0.02)["w"], 0.02)
    g = jax.grad(lambda tt: ema_update(jax.lax.stop_gradient(tt), o, 0.01)["w"].sum())(t)
    assert not np.any(np.asarray(g["w"]))


def test_tanh_gaussian_pinned():
    np.testing.assert_allclose(bound_log_std(jnp.array([0.0, 1e9, -1e9])), [-4.0, 2.0, -10.0])
    eps, mu, raw = jnp.array([0.5, -1.0]), jnp.array([0.1, -0.2]), jnp.array([0.0, 1.0])
    ls = bound_log_std(raw)
    np.testing.assert_allclose(ls, [-4.0, 0.5695648], rtol=1e-6)
    u = mu + eps * jnp.exp(ls)
    np.testing.assert_allclose(u, [0.10915782, -1.9674977], rtol=1e-6)
    a = squash(u)
    np.testing.assert_allclose(a, [0.10872632, -0.9616578], rtol=1e-6)
    lp_g = gaussian_residual(eps, ls) - 2 * HALF_LOG_2PI
    np.testing.assert_allclose(lp_g, [0.967558], rtol=1e-6)
    np.testing.assert_allclose(squash_logdet(a), [-2.5992928], rtol=1e-6)
    np.testing.assert_allclose(lp_g - squash_logdet(a), [3.5668507], rtol=1e-6)
    np.testing.assert_allclose(pe_log_prob(eps, ls, a, 2.0), [6.372286], rtol=1e-6)


def test_squash_accuracy_and_gradient():
    x = jnp.linspace(-30, 30, 600001, dtype=jnp.float32)
    ref = np.tanh(np.asarray(x, np.float64))
    got = np.asarray(jax.jit(squash)(x))
    ref32 = ref.astype(np.float32)
    near = np.abs(ref) > 0.5
    ulps = np.abs(got - ref32)[near] / np.spacing(np.abs(ref32[near]))
    assert ulps.max() <= 1.0  # within 1 ulp of the correctly rounded tanh
    g = jax.jit(jax.grad(lambda v: squash(v).sum()))(x)
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_allclose(g, 1 - ref ** 2, atol=2e-7)
