"""Percentile scale normalisers (B3; T25): RunningScale and ReturnNormalizer pins."""
import jax
import jax.numpy as jnp
import numpy as np

from wmx.nn.percentile import percentile
from wmx.nn.return_normalizer import ReturnNormalizer
from wmx.nn.running_scale import RunningScale


def _run(xs):
    rs, rn = RunningScale(), ReturnNormalizer()
    s, st = rs.init(), rn.init()
    t2, d3 = [], []
    for x in xs:
        s = rs.update(s, x)
        st = rn.update(st, x)
        t2.append(float(s))
        d3.append(float(rn.scale(st)))
    return t2, d3, st


def test_pinned_four_batches():
    xs = [jnp.arange(256, dtype=jnp.float32) * s for s in (0.001, 0.01, 1, 10)]
    np.testing.assert_allclose(percentile(xs[2], jnp.array([95.0]))[0]
                               - percentile(xs[2], jnp.array([5.0]))[0], 229.5, rtol=1e-6)
    t2, d3, st = _run(xs)
    np.testing.assert_allclose(t2, [1.0, 1.01295, 3.2978203, 26.214842], rtol=1e-6)
    np.testing.assert_allclose(d3, [1.0, 1.0, 2.3199697, 25.246771], rtol=1e-6)
    np.testing.assert_allclose([st.lo, st.hi], [1.4025983, 26.649368], rtol=1e-6)


def _scan(ranges):
    rs, rn = RunningScale(), ReturnNormalizer()

    def step(c, r):
        s, st = c
        x = jnp.array([0.0, r])  # p95 - p5 = 0.9 r
        return (rs.update(s, x), rn.update(st, x)), None
    (s, st), _ = jax.lax.scan(step, (rs.init(), rn.init()), jnp.asarray(ranges) / 0.9)
    return float(s), float(rn.scale(st))


def test_constant_and_alternating_ranges():
    t2, d3 = _scan(np.full(100, 50.0, np.float32))
    np.testing.assert_allclose([d3, t2], [31.698427, 32.064415], rtol=1e-5)
    t2, d3 = _scan(np.tile(np.array([0.0, 3.0], np.float32), 1000))
    np.testing.assert_allclose([d3, t2], [1.50753, 2.00502], rtol=1e-5)


def test_no_gradient_through_scale():
    rs = RunningScale()
    g = jax.grad(lambda x: rs.update(rs.init(), x) + rs.normalize(jnp.float32(2.0), x).sum())(
        jnp.arange(10.0))
    np.testing.assert_allclose(g, 0.5)
