"""symlog/symexp (B1) and TwoHot (B2, deviations T24/D22): pinned numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.nn.symlog import symexp, symlog
from wmx.nn.twohot import TwoHot

X = np.array([-1000, -1, -0.5, 0, 0.5, 1, 1000], np.float32)


def test_symlog_values_inverse_oddness_grad_dtype():
    np.testing.assert_allclose(symlog(X), [-6.908755, -0.6931472, -0.4054651, 0, 0.4054651,
                                           0.6931472, 6.908755], rtol=1e-6)
    np.testing.assert_allclose(symexp(symlog(X)), X, rtol=1e-6)
    np.testing.assert_array_equal(symlog(-X), -symlog(X))
    assert float(jax.grad(symlog)(0.0)) == 0.0 and float(jax.grad(symexp)(0.0)) == 0.0
    np.testing.assert_allclose(jax.grad(symlog)(1e-7), 1.0, rtol=1e-6)
    assert symlog(jnp.ones(3, jnp.bfloat16)).dtype == jnp.bfloat16


D3, T2 = TwoHot.dreamerv3(), TwoHot.tdmpc2()


def test_bins():
    b = np.asarray(D3.bins, np.float32)
    assert b.size == 255 and b[127] == 0.0
    np.testing.assert_allclose(b[128], 0.17055759, rtol=1e-6)
    np.testing.assert_allclose(b[0], -4.8516518e8, rtol=1e-6)
    np.testing.assert_array_equal(b, -b[::-1])
    ref = np.sign(x := np.linspace(-20, 20, 255)) * np.expm1(np.abs(x))
    assert np.max(np.abs(b - ref) / np.maximum(1, np.abs(ref))) <= 2e-6
    t = np.asarray(T2.bins, np.float32)
    assert t.size == 101 and t[50] == 0.0
    np.testing.assert_array_equal(t, -t[::-1])
    assert np.max(np.abs(t - np.linspace(-10, 10, 101, dtype=np.float32))) <= 4.8e-7


def _nonzero(w):
    w = np.asarray(w)
    idx = np.nonzero(w)[0]
    return tuple(idx.tolist()), tuple(w[idx].tolist())


@pytest.mark.parametrize("spec,y,idx,wts", [
    ("d3", 1.0, (131, 132), (0.61732966, 0.38267030)),
    ("d3", -3.7, (117, 118), (0.81556690, 0.18443313)),
    ("d3", 0.0, (127,), (1.0,)), ("d3", 1e10, (254,), (1.0,)), ("d3", -1e10, (0,), (1.0,)),
    ("d3", "b130", (130,), (1.0,)),
    ("t2", 1.0, (53, 54), (0.5342636, 0.4657364)),
    ("t2", -3.7, (42, 43), (0.73781204, 0.26218796)),
    ("t2", 0.0, (50,), (1.0,)), ("t2", 1e10, (100,), (1.0,)), ("t2", -1e10, (0,), (1.0,)),
    ("t2", 22025.0, (99, 100), (1.068e-4, 0.99989))])
def test_encode_pinned(spec, y, idx, wts):
    th = D3 if spec == "d3" else T2
    if y == "b130":
        y = th.bins[130]
        np.testing.assert_allclose(y, 0.60390407, rtol=1e-6)
    got_idx, got_w = _nonzero(th.encode(jnp.float32(y)))
    assert got_idx == idx
    # D3 pins were computed on the reference's float32 symexp(linspace) bins; ours are
    # the float32 rounding of the float64 values (D22, <= 1.3e-6 relative): atol 1e-6.
    np.testing.assert_allclose(got_w, wts, rtol=1e-3 if y == 22025.0 else 2e-6,
                               atol=1e-6 if spec == "d3" else (2e-6 if y == 22025.0 else 0))


def test_t2_encode_matches_floor_formula():
    y = np.random.default_rng(0).uniform(-3e4, 3e4, 10_000).astype(np.float32)
    x = np.clip(np.sign(y) * np.log1p(np.abs(y)), -10, 10)
    k = np.clip(np.floor((x + 10) / 0.2), 0, 99).astype(int)
    o = (x + 10) / 0.2 - k
    ref = np.zeros((y.size, 101), np.float32)
    ref[np.arange(y.size), k] = 1 - o
    ref[np.arange(y.size), k + 1] += o
    # T24: within 1.1e-5 of the floor formula given the same symlog; jnp vs numpy log1p
    # differ by an ulp, hence 2e-5.
    np.testing.assert_allclose(jax.jit(T2.encode)(y), ref, atol=2e-5)


def test_loss_and_decode_pinned():
    for th, k, ce_u, ce_l, dec_l in ((D3, 255, 5.5412636, 5.669425, 2.4558884e7),
                                     (T2, 101, 4.6151205, 4.710373, 23.267637)):
        np.testing.assert_allclose(th.loss(jnp.zeros(k), 3.0), ce_u, rtol=1e-6)
        lin = jnp.linspace(-1, 1, k)
        np.testing.assert_allclose(th.loss(lin, 1.0), ce_l, rtol=1e-6)
        np.testing.assert_allclose(th.decode(lin), dec_l, rtol=1e-5)
    assert float(D3.decode(jnp.zeros(255))) == 0.0
    assert float(jax.jit(D3.decode)(jnp.zeros(255))) == 0.0  # symmetric sum under jit (D22)
    assert abs(float(T2.decode(jnp.zeros(101)))) <= 1e-6
    for th in (D3, T2):
        for y in (1.0, -3.7, 123.4):
            np.testing.assert_allclose(th.decode(jnp.log(th.encode(y))), y, rtol=1e-6)


def test_loss_gradients():
    logits = jax.random.normal(jax.random.key(0), (101,))
    g = jax.grad(T2.loss)(logits, 2.5)
    np.testing.assert_allclose(g, jax.nn.softmax(logits) - T2.encode(2.5), atol=1e-6)
    np.testing.assert_allclose(float(g.sum()), 0.0, atol=1e-6)
    assert float(jax.grad(T2.loss, argnums=1)(logits, 2.5)) == 0.0


def test_bad_bins_rejected():
    with pytest.raises(ValueError, match="odd"):
        TwoHot.tdmpc2(num_bins=100)
    with pytest.raises(ValueError, match="antisymmetric"):
        TwoHot((-1.0, 0.0, 2.0), "symlog")
