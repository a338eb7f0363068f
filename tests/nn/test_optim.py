"""Optimisers (B17): TD-MPC2 grouped Adam with one global clip, torch clip form."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmx.nn.optim import clipped_adam, global_norm, grouped_adam, torch_clip_coef


def _labels(t):
    return {k: jax.tree.map(lambda _: "encoder" if k == "encoder" else "rest", v)
            for k, v in t.items()}


def test_t2_grouped_adam_pinned():
    params = {"encoder": jnp.zeros(()), "dynamics": jnp.zeros(())}
    grads = {"encoder": jnp.float32(30.0), "dynamics": jnp.float32(40.0)}
    tx = grouped_adam(3e-4, _labels, {"encoder": 0.3, "rest": 1.0}, eps=1e-8, clip_norm=20.0)
    upd, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(upd["encoder"], -8.99994e-5, rtol=1e-5)
    np.testing.assert_allclose(upd["dynamics"], -2.99998e-4, rtol=1e-5)
    # the clip is global (12, 16), not per group: equal to Adam on the clipped grads
    clipped = {"encoder": jnp.float32(12.0), "dynamics": jnp.float32(16.0)}
    ref = grouped_adam(3e-4, _labels, {"encoder": 0.3, "rest": 1.0}, clip_norm=None)
    r, _ = ref.update(clipped, ref.init(params), params)
    np.testing.assert_allclose(upd["encoder"], r["encoder"], rtol=1e-6)
    # Adam first moment sees the clipped gradient: m = 0.1 * 12
    _, st = tx.update(grads, tx.init(params), params)
    mu = st[1].inner_states["encoder"].inner_state[0].mu["encoder"]
    np.testing.assert_allclose(mu, 1.2, rtol=1e-6)


def test_torch_clip_coef_and_policy_adam():
    np.testing.assert_allclose(torch_clip_coef(jnp.float32(50.0), 20.0), 20 / (50 + 1e-6))
    assert float(torch_clip_coef(jnp.float32(5.0), 20.0)) == 1.0
    g = {"w": jnp.array([30.0, 40.0])}
    assert float(global_norm(g)) == 50.0
    tx = clipped_adam(3e-4, eps=1e-5, clip_norm=20.0)
    p = {"w": jnp.zeros(2)}
    upd, _ = tx.update(g, tx.init(p), p)
    ref = optax.adam(3e-4, eps=1e-5)
    r, _ = ref.update({"w": g["w"] * 0.4}, ref.init(p), p)
    np.testing.assert_allclose(upd["w"], r["w"], rtol=1e-6)
