"""LaProp + AGC against components.npz (h) `opt/{default,short_warmup}/*` (29eb964).

Five chained steps per variant on a toy module (scalar, vec, mat, ten, a tiny
tensor where pmin is active, a zero tensor); each step starts from the
reference's `before` parameters and is compared with its update, parameters
after, RMS / momentum state, counters and metrics (README tolerance).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import parity_tolerance as pt
import pytest

from wmx.agents.dreamerv3 import optim

LEAVES = ("scalar", "vec", "mat", "ten", "tiny", "zero")
TOL = dict(rtol=1e-5, atol=1e-6)


def _tree(z, prefix):
    return {k: jnp.asarray(z[prefix + k]) for k in LEAVES}


@pytest.mark.parametrize("variant", ["default", "short_warmup"])
def test_laprop_matches_reference_optimizer(components, variant):
    z = components
    root = f"opt/{variant}/"
    tx = optim.laprop(float(z[root + "config/lr"]), warmup=int(z[root + "config/warmup"]))

    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        new = optax.apply_updates(params, updates)
        loss = sum(jnp.sum(params[k] * grads[k]) for k in LEAVES)
        return updates, new, state, optim.opt_metrics(loss, grads, updates, new, state)

    params = _tree(z, root + "init/")
    state = tx.init(params)
    worst = scale = 0.0
    for i in range(5):
        p = f"{root}step{i}/"
        for k in LEAVES:
            np.testing.assert_array_equal(params[k], z[p + "before/" + k])
        updates, new, state, metrics = step(params, state, _tree(z, p + "grad/"))
        rms, mom, warm = state[1], state[2], state[3]
        for k in LEAVES:
            for got, want in ((updates[k], z[p + "update/" + k]), (new[k], z[p + "after/" + k]),
                              (rms.nu[k], z[p + "state/rms_nu/" + k]),
                              (mom.mu[k], z[p + "state/mom_mu/" + k])):
                np.testing.assert_allclose(got, want, **pt.tol("dv3.laprop", want, **TOL),
                                           err_msg=f"{p}{k}")
                worst = max(worst, float(np.max(np.abs(np.asarray(got) - want))))
                scale = max(scale, float(np.max(np.abs(want))))
        assert int(rms.count) == z[p + "state/rms_count"] == i + 1
        assert int(mom.count) == z[p + "state/mom_count"]
        assert int(warm.count) == z[p + "state/step"]
        for name, got in metrics.items():
            want = z[p + "metrics/" + name]
            np.testing.assert_allclose(got, want, **pt.tol("dv3.laprop", want, **TOL), err_msg=name)
            assert np.asarray(got).dtype == z[p + "metrics/" + name].dtype, name
        params = _tree(z, p + "after/")   # the reference's parameters: no drift
    # float32 ulps (XLA's vectorised division), not 1e-6; a TPU: its pow's log (W-D9)
    assert worst < pt.bound("dv3.laprop", 1e-7, scale)


def test_first_update_is_exactly_zero_but_moments_accumulate():
    tx = optim.laprop(1.0, warmup=10)
    params = {"w": jnp.ones((3,))}
    grads = {"w": jnp.array([1.0, -2.0, 0.5])}
    updates, state = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(updates["w"], 0.0)
    assert np.all(np.asarray(state[1].nu["w"]) > 0) and np.all(np.asarray(state[2].mu["w"]) != 0)
    updates, _ = tx.update(grads, state, params)      # k = 1: lr / 10
    want = -0.1 * np.sign(grads["w"])
    np.testing.assert_allclose(updates["w"], want, **pt.tol("dv3.laprop", want, rtol=1e-5))


def test_agc_is_per_tensor_over_the_flattened_tensor():
    clip = optim.clip_by_agc(0.3, 1e-3)
    params = {"a": jnp.full((2, 2, 2), 0.5), "b": jnp.zeros((4,))}   # |a| = sqrt(2)
    grads = {"a": jnp.full((2, 2, 2), 1.0), "b": jnp.full((4,), 1.0)}
    out, _ = clip.update(grads, clip.init(params), params)
    # a: |g| = sqrt(8) > 0.3 sqrt(2): scaled to norm 0.3 sqrt(2); b: pmin gives 3e-4
    np.testing.assert_allclose(optax.global_norm(out["a"]), 0.3 * np.sqrt(2.0), rtol=1e-6)
    np.testing.assert_allclose(optax.global_norm(out["b"]), 3e-4, rtol=1e-6)
    small = {"a": grads["a"] * 1e-3, "b": grads["b"] * 1e-5}
    out, _ = clip.update(small, clip.init(params), params)
    np.testing.assert_array_equal(out["a"], small["a"])
    np.testing.assert_array_equal(out["b"], small["b"])
    with pytest.raises(ValueError):
        clip.update(grads, clip.init(params), None)


def test_float32_underflow_of_the_rms_increment_is_reproduced():
    # spec 4.5: (1 - b2) g^2 underflows for g ~ 2e-18, nu stays 0 and the step is
    # g / eps = 200 learning rates, as the reference does in float32.
    tx = optim.laprop(1e-2, warmup=0)
    params = {"w": jnp.ones((2,))}
    grads = {"w": jnp.array([2e-18, 1e-3], jnp.float32)}
    updates, state = jax.jit(tx.update)(grads, tx.init(params), params)
    assert float(state[1].nu["w"][0]) == 0.0
    want = np.array([-2.0, -1e-2])
    np.testing.assert_allclose(updates["w"], want, **pt.tol("dv3.laprop", want, rtol=1e-5))
