"""TD-MPC2 update: noise seam, state threading, PE clip, EMA, dropout, vmap, errors."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wmx.nn.rbg_bits as rbg
from wmx.agents.tdmpc2.config import make_config
from wmx.agents.tdmpc2.update import (Batch, draw_update_noise, init_train_state, update,
                                      wm_params)

CFG = make_config("tiny", obs_dim=5, action_dim=2, batch_size=8)  # dropout 0.01 (PE default)


def _batch(key, cfg=CFG):
    H, B = cfg.horizon, cfg.batch_size
    k = jax.random.split(key, 3)
    return Batch(obs=jax.random.normal(k[0], (H + 1, B, cfg.obs_dim)),
                 action=jax.random.uniform(k[1], (H, B, cfg.action_dim), minval=-1, maxval=1),
                 reward=3 * jax.random.normal(k[2], (H, B)))


@pytest.fixture(scope="module")
def one_step():
    st = init_train_state(jax.random.key(0), CFG)
    b, n = _batch(jax.random.key(1)), draw_update_noise(jax.random.key(2), CFG)
    new, m = update(st, b, n, CFG)
    return st, b, n, new, m


def test_noise_shapes():
    n = draw_update_noise(jax.random.key(0), CFG)
    H, B, A = CFG.horizon, CFG.batch_size, CFG.action_dim
    assert n.td_target_pi_eps.shape == (H, B, A) and n.pi_loss_pi_eps.shape == (H + 1, B, A)
    for pair in (n.td_target_q_pair, n.pi_loss_q_pair):
        assert pair.dtype == jnp.int32 and set(np.asarray(pair).tolist()) == {0, 1}


def test_update_threads_state(one_step):
    st, _, _, new, m = one_step
    assert set(m) == {"consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss",
                      "grad_norm", "pi_grad_norm", "pi_scale"}
    assert all(np.isfinite(float(v)) for v in m.values())
    np.testing.assert_allclose(m["total_loss"], 20 * m["consistency_loss"]
                               + 0.1 * m["reward_loss"] + 0.1 * m["value_loss"], rtol=1e-5)
    assert int(new.step) == 1 and float(new.scale) >= 1.0
    assert float(new.pi_grad_sq) > 0
    np.testing.assert_allclose(np.sqrt(float(new.pi_grad_sq)),
                               min(float(m["pi_grad_norm"]), 20.0 / (1 + 1e-6 / 20)), rtol=1e-5)
    # target EMA from the post-step online Q (spec 2.15)
    for t0, t1, q1 in zip(jax.tree.leaves(st.params["target_qs"]),
                          jax.tree.leaves(new.params["target_qs"]),
                          jax.tree.leaves(new.params["qs"])):
        np.testing.assert_allclose(t1, 0.99 * t0 + 0.01 * q1, rtol=1e-5, atol=1e-8)
    # at call 0 the (zero) stale policy gradient leaves the clip norm = |g_wm|
    for mod in ("encoder", "dynamics", "reward", "qs", "pi"):
        assert any(np.any(np.asarray(a) != np.asarray(b)) for a, b in zip(
            jax.tree.leaves(st.params[mod]), jax.tree.leaves(new.params[mod]))), mod


def test_update_traced_as_on_a_tpu_is_the_same(one_step, monkeypatch):
    """The update with the TPU's dropout-mask layout ("planar_matmul", forced on the CPU):
    no interleave (u32[..., 4]) in its program, the same results. The masks are the same
    (tests/agents/tdmpc2/test_world_model.py); XLA fuses the changed program's float ops
    a little differently, so values agree to float rounding (the policy loss ~1e-7)."""
    st, b, n, new, m = one_step
    monkeypatch.setattr(rbg, "_auto_layout", lambda: "planar_matmul")
    fn = lambda s, b, n: update.__wrapped__(s, b, n, CFG)  # noqa: E731  (a new trace)
    assert not re.search(r"u32\[[\d,]*,4\] = transpose", str(jax.make_jaxpr(fn)(st, b, n)))
    got_state, got_m = jax.jit(fn)(st, b, n)
    for x, y in zip(jax.tree.leaves((new, m)), jax.tree.leaves((got_state, got_m))):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-5, atol=1e-8)


def test_pe_clip_includes_stale_policy_gradient(one_step):
    st, b, n, new, m = one_step
    st_big = st._replace(pi_grad_sq=jnp.float32(1e6))
    new_big, m_big = update(st_big, b, n, CFG)
    np.testing.assert_allclose(m_big["grad_norm"], np.sqrt(float(m["grad_norm"]) ** 2 + 1e6),
                               rtol=1e-5)
    # clipped harder: the world-model Adam first moments shrink by the clip factor
    c = 20.0 / (float(m_big["grad_norm"]) + 1e-6)
    mu = lambda s: s.wm_opt_state.inner_states["rest"].inner_state[0].mu["dynamics"]  # noqa
    a, bb = jax.tree.leaves(mu(new))[0], jax.tree.leaves(mu(new_big))[0]
    np.testing.assert_allclose(bb, a * c / min(1.0, 20.0 / (float(m["grad_norm"]) + 1e-6)),
                               rtol=1e-4, atol=1e-12)


def test_dropout_keys_matter_only_with_dropout(one_step):
    st, b, n, _, _ = one_step
    q = st.params["qs"]
    warm = {**q, "layer2": {**q["layer2"], "kernel": jax.random.normal(
        jax.random.key(7), q["layer2"]["kernel"].shape)}}
    st = st._replace(params={**st.params, "qs": warm})
    _, m = update(st, b, n, CFG)
    n2 = n._replace(value_dropout_key=jax.random.key(99))
    _, m2 = update(st, b, n2, CFG)
    assert float(m2["value_loss"]) != float(m["value_loss"])
    np.testing.assert_allclose(m2["consistency_loss"], m["consistency_loss"], rtol=1e-6)


def test_vmap_over_seeds_matches_single_runs(one_step):
    _, b, _, _, _ = one_step
    keys = jax.random.split(jax.random.key(5), 2)
    states = jax.vmap(lambda k: init_train_state(k, CFG))(keys)
    noises = jax.vmap(lambda k: draw_update_noise(k, CFG))(keys)
    vnew, vm = jax.vmap(lambda s, nn: update(s, b, nn, CFG))(states, noises)
    for i in range(2):
        s1, m1 = update(init_train_state(keys[i], CFG), b,
                        draw_update_noise(keys[i], CFG), CFG)
        for k in ("total_loss", "value_loss", "pi_loss", "grad_norm"):
            np.testing.assert_allclose(vm[k][i], m1[k], rtol=1e-4, atol=1e-5, err_msg=k)
        # Adam's first step is ~lr * sign(g): tiny reassociation differences in
        # near-zero gradient elements move a parameter by up to ~lr/10.
        np.testing.assert_allclose(vnew.params["pi"]["layer2"]["bias"][i],
                                   s1.params["pi"]["layer2"]["bias"], rtol=0, atol=3e-5)


def test_bad_inputs(one_step):
    st, b, n, _, _ = one_step
    with pytest.raises(ValueError, match="reward"):
        update(st, b._replace(reward=b.reward[..., None]), n, CFG)
    with pytest.raises(ValueError, match="tasks="):
        update(st, b._replace(task=jnp.zeros((CFG.batch_size,), jnp.int32)), n, CFG)
    assert set(wm_params(st.params)) == {"encoder", "dynamics", "reward", "qs"}
