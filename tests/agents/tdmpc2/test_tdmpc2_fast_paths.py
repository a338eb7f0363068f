"""The optimised TD-MPC2 planner paths equal the straightforward formulas
(within float32 rounding): the joint dynamics/reward first layer, the first
layer split into shared-row and per-row matmuls, and the policy-prior
columns' rollout computed once per decision instead of once per iteration."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.tdmpc2 import planner as pl
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import make_config
from wmx.nn.ensemble import reduce_pair

TOL = dict(rtol=2e-5, atol=2e-5)


def _warm(params, key):
    """Random (non-zero) reward and Q heads, so values are not all zero."""
    k1, k2 = jax.random.split(key)
    p = jax.tree.map(lambda x: x, params)
    p["reward"]["layer2"]["kernel"] = 0.3 * jax.random.normal(
        k1, p["reward"]["layer2"]["kernel"].shape)
    p["qs"]["layer2"]["kernel"] = 0.3 * jax.random.normal(k2, p["qs"]["layer2"]["kernel"].shape)
    return p


@pytest.fixture(scope="module", params=["single", "multi"])
def setup(request):
    over = dict(num_tasks=3, task_dim=8) if request.param == "multi" else {}
    cfg = make_config("tiny", obs_dim=5, action_dim=3, num_q=4, dropout=0.0, **over)
    params = _warm(wm.init_params(jax.random.key(0), cfg), jax.random.key(1))
    e = (jax.random.normal(jax.random.key(2), (cfg.task_dim,)) * 0.3
         if cfg.num_tasks else None)
    mask = jnp.array([1.0, 1.0, 0.0]) if cfg.num_tasks else None
    return cfg, params, e, mask


def test_joint_first_layer_equals_separate_heads(setup):
    cfg, params, e, _ = setup
    n = 11
    z = wm.encode(params, jax.random.normal(jax.random.key(3), (n, cfg.obs_dim)), cfg,
                  e=None if e is None else jnp.broadcast_to(e, (n, e.shape[0])))
    a = jax.random.uniform(jax.random.key(4), (n, cfg.action_dim), minval=-1, maxval=1)
    l0 = wm.dyn_rew_layer0(params, cfg)
    x = wm._cat(z, e, a)
    kernel = jnp.concatenate([l0.kernel_z, l0.kernel_e, l0.kernel_a], 0)
    with jax.default_matmul_precision("highest"):
        z_next, r = wm.dyn_rew_from_layer0(params, x @ kernel + l0.bias, cfg)
        want_z, want_r = wm.next_latent(params, z, a, cfg, e=e), wm.reward_logits(params, z, a, cfg, e=e)
        # split form: shared rows (e, bias, and here one z for all rows) applied once
        split = (a @ l0.kernel_a + pl._shared_rows(l0, e)) + z[0] @ l0.kernel_z  # step-0 form
        z1, r1 = wm.dyn_rew_from_layer0(params, split, cfg)
        want_z1 = wm.next_latent(params, jnp.broadcast_to(z[0], z.shape), a, cfg, e=e)
        want_r1 = wm.reward_logits(params, jnp.broadcast_to(z[0], z.shape), a, cfg, e=e)
    np.testing.assert_allclose(z_next, want_z, **TOL)
    np.testing.assert_allclose(r, want_r, **TOL)
    np.testing.assert_allclose(z1, want_z1, **TOL)
    np.testing.assert_allclose(r1, want_r1, **TOL)


def _reference_value(params, z, actions, eps, pair, cfg, mask, e):
    """trajectory_value written out with the separate world-model functions."""
    H, N = actions.shape[:2]
    th = wm.twohot(cfg)
    disc = [np.float32(d) for d in pl.discount_powers(cfg.discount, H)]
    _z = jnp.broadcast_to(z, (N, z.shape[-1]))
    G = 0.0
    for t in range(H):
        G = G + th.decode(wm.reward_logits(params, _z, actions[t], cfg, e=e)) * disc[t]
        _z = wm.next_latent(params, _z, actions[t], cfg, e=e)
    a_H = wm.pi_forward(params, _z, eps, cfg, e=e, mask=mask).action
    q = wm.q_pair_values(params["qs"], pair, _z, a_H, cfg, e=e)
    return G + disc[H] * reduce_pair(q, "avg"), G


def _reference_pi_actions(params, z, pi_eps, cfg, mask, e):
    H, P = pi_eps.shape[:2]
    _z = jnp.broadcast_to(z, (P, z.shape[-1]))
    acts = []
    for t in range(H):
        a = wm.pi_forward(params, _z, pi_eps[t], cfg, e=e, mask=mask).action
        acts.append(a)
        _z = wm.next_latent(params, _z, a, cfg, e=e)
    return jnp.stack(acts)


def test_policy_rollout_cache_equals_recomputation(setup):
    """Each side runs as one jitted program (the reference's Python loop traced once):
    run op by op, each of its many small operations compiled on its own, the test took
    about 6 times as long."""
    cfg, params, e, mask = setup
    H, P, N, A = cfg.horizon, cfg.num_pi_trajs, cfg.num_samples, cfg.action_dim
    ks = jax.random.split(jax.random.key(5), 5)
    z = wm.encode(params, jax.random.normal(ks[0], (cfg.obs_dim,)), cfg, e=e)
    pi_eps = jax.random.normal(ks[1], (H, P, A))

    def jit(f):
        return jax.jit(lambda *a: f(params, *a))
    with jax.default_matmul_precision("highest"):
        roll = jit(lambda p, z, x: pl.policy_rollout(p, z, x, cfg, mask, e))(z, pi_eps)
        np.testing.assert_allclose(roll.actions, jit(
            lambda p, z, x: _reference_pi_actions(p, z, x, cfg, mask, e))(z, pi_eps), **TOL)
        np.testing.assert_array_equal(jit(
            lambda p, z, x: pl.policy_trajectories(p, z, x, cfg, mask, e))(z, pi_eps),
            roll.actions)
        mean = jnp.zeros((H, A))
        std = jnp.full((H, A), cfg.max_std)
        cand = pl.sample_candidates(roll.actions, mean, std,
                                    jax.random.normal(ks[2], (H, N - P, A)), mask)
        eps = jax.random.normal(ks[3], (N, A))
        pair = jnp.array([2, 0], jnp.int32)
        want_v, want_g = jit(lambda p, *a: _reference_value(p, *a, cfg, mask, e))(
            z, cand, eps, pair)
        for cache in (None, roll):
            v, g = jit(lambda p, *a: pl.trajectory_value(p, *a, None, cfg, mask, e,
                                                         pi_rollout=cache))(z, cand, eps, pair)
            np.testing.assert_allclose(g, want_g, **TOL)
            np.testing.assert_allclose(v, want_v, **TOL)


def test_plan_iteration_with_cache_equals_without(setup):
    cfg, params, e, mask = setup
    noise = pl.draw_plan_noise(jax.random.key(7), cfg)
    z = wm.encode(params, jax.random.normal(jax.random.key(8), (cfg.obs_dim,)), cfg, e=e)
    with jax.default_matmul_precision("highest"):
        roll = pl.policy_rollout(params, z, noise.pi_traj_eps, cfg, mask, e)
        mean, std = pl.init_mean_std(jnp.zeros((cfg.horizon, cfg.action_dim)), True, cfg)
        it = pl.iteration_noise(noise, 0)
        _, _, a = pl.plan_iteration(params, z, roll.actions, mean, std, it, cfg,
                                    action_mask=mask, task_emb=e)
        _, _, b = pl.plan_iteration(params, z, roll.actions, mean, std, it, cfg,
                                    action_mask=mask, task_emb=e, pi_rollout=roll,
                                    layer0=wm.dyn_rew_layer0(params, cfg))
    np.testing.assert_allclose(b.value_raw, a.value_raw, **TOL)
    np.testing.assert_allclose(b.reward_sum, a.reward_sum, **TOL)
    np.testing.assert_array_equal(b.candidates, a.candidates)


def test_q_pair_split_first_layer_equals_concatenated(setup):
    cfg, params, e, _ = setup
    import dataclasses
    cfg = dataclasses.replace(cfg, dropout=0.2)  # same masks on both paths
    ks = jax.random.split(jax.random.key(11), 3)
    z = jax.nn.softmax(jax.random.normal(ks[0], (4, 6, cfg.latent_dim)), -1)
    a = jax.random.uniform(ks[1], (4, 6, cfg.action_dim), minval=-1, maxval=1)
    ee = None if e is None else jnp.broadcast_to(e, (6, e.shape[0]))
    pair = jnp.array([3, 1], jnp.int32)

    def f(a, split):
        v = wm.q_pair_values(params["qs"], pair, z, a, cfg, dropout_key=ks[2], e=ee,
                             split_input=split)
        return jnp.sum(v * jnp.arange(v.size, dtype=v.dtype).reshape(v.shape) / v.size), v

    vg = jax.jit(jax.value_and_grad(f, has_aux=True), static_argnums=1)   # not op by op
    with jax.default_matmul_precision("highest"):
        (_, v0), g0 = vg(a, False)
        (_, v1), g1 = vg(a, True)
    np.testing.assert_allclose(v1, v0, **TOL)
    np.testing.assert_allclose(g1, g0, rtol=1e-4, atol=1e-5)
