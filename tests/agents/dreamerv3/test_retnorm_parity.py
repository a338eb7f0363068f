"""wmx.nn.ReturnNormalizer against components.npz (g) `retnorm/step{i}/*` (29eb964).

Six chained updates (perc 5/95, rate 0.01, limit 1, lo = hi = 0 at init,
update then read). The 95th percentile's interpolation weight is a float32
product q/100·(n−1) whose rounding depends on XLA's fusion, which moves the
EMA by up to about 1.2e-6 relative (measured), inside the README tolerance.
"""
import jax
import numpy as np

from wmx.nn.return_normalizer import ReturnNormalizer

TOL = dict(rtol=1e-5, atol=1e-6)


def test_return_normalizer_matches_reference_moments(components):
    z = components
    rn = ReturnNormalizer()                  # the defaults are the reference's
    for field, key in (("rate", "rate"), ("lo", "perclo"), ("hi", "perchi"), ("limit", "limit")):
        assert np.float32(getattr(rn, field)) == z["retnorm/config/" + key], field

    @jax.jit
    def step(state, x):
        state = rn.update(state, x)
        return state, state.lo, rn.scale(state)

    state = rn.init()
    scales = []
    for i in range(6):
        p = f"retnorm/step{i}/"
        state, offset, scale = step(state, z[p + "in/x"])
        np.testing.assert_allclose(offset, z[p + "out/offset"], **TOL)
        np.testing.assert_allclose(scale, z[p + "out/scale"], **TOL)
        np.testing.assert_allclose(state.lo, z[p + "out/low"], **TOL)
        np.testing.assert_allclose(state.hi, z[p + "out/high"], **TOL)
        scales.append(float(z[p + "out/scale"]))
    # the fixture exercises both sides of the max(1, hi - lo) floor
    assert scales[0] == 1.0 and scales[-1] > 1.0
