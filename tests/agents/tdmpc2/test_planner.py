"""Unit tests of the TD-MPC2 MPPI planner (shared_blocks B13, tdmpc2_spec §3)."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.tdmpc2 import planner as pl
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import make_config


# ---------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------

def test_mppi_update_b13_pinned():
    # B13 test 1-4: H=2, E=3, A=1.
    ev = jnp.array([1.0, 2.0, 4.0])
    ea = jnp.array([[0.0, 0.5, 1.0], [-1.0, 0.0, 0.2]])[:, :, None]
    score, mu, sigma = pl.mppi_update(ev, ea)
    np.testing.assert_allclose(score, [0.14024438, 0.2312239, 0.6285317], rtol=1e-6)
    np.testing.assert_allclose(mu[:, 0], [0.74414366, -0.01453803], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(sigma[:, 0], [0.3641262, 0.4064164], rtol=1e-5)


def test_mppi_update_clamps_and_masks():
    ev = jnp.array([0.0, 0.0])
    ea = jnp.array([[[0.3, 0.3], [0.3, -0.9]]])  # H=1, E=2, A=2: dim 0 identical
    _, mu, sigma = pl.mppi_update(ev, ea, min_std=0.05, max_std=2.0)
    assert float(sigma[0, 0]) == pytest.approx(0.05)  # zero spread clamped to min_std
    np.testing.assert_allclose(sigma[0, 1], 0.6, rtol=1e-5)
    _, mu, sigma = pl.mppi_update(ev, ea, action_mask=jnp.array([1.0, 0.0]))
    assert float(mu[0, 1]) == 0.0 and float(sigma[0, 1]) == 0.0  # masked after the clamp
    # a large temperature concentrates the score on the best elite
    score, _, _ = pl.mppi_update(jnp.array([0.0, 1.0]), ea, temperature=100.0)
    assert float(score[1]) > 0.999


def test_pick_elite_matches_numpy_legacy_choice():
    gen = np.random.default_rng(0)
    pick = jax.jit(jax.vmap(pl.pick_elite))
    for e in (1, 3, 8, 64):
        ps, us, want = [], [], []
        for case in range(100):
            p = gen.random(e) ** 3
            if case % 5 == 0:
                p[gen.random(e) < 0.5] = 0.0
                p[0] += 1e-3
            p32 = (p / p.sum()).astype(np.float32)
            seed = 1000 * e + case
            us.append(np.random.RandomState(seed).random_sample())
            want.append(np.random.RandomState(seed).choice(np.arange(e), p=p32))
            ps.append(p32)
        got = pick(jnp.asarray(np.stack(ps)), jnp.asarray(np.array(us, np.float32)))
        np.testing.assert_array_equal(np.asarray(got), np.array(want), err_msg=f"E={e}")


def test_pick_elite_edges():
    s = jnp.array([0.25, 0.25, 0.5, 0.0])
    assert int(pl.pick_elite(s, 0.0)) == 0
    assert int(pl.pick_elite(s, 0.25)) == 1  # side='right': u on a step goes up
    assert int(pl.pick_elite(s, 0.9999999)) == 2  # never a zero-probability trailing elite
    assert int(pl.pick_elite(jnp.array([1.0]), 0.7)) == 0


def test_discount_powers_are_float64_products():
    d = pl.discount_powers(0.99, 3)
    assert d == [1.0, 0.99, 0.99 * 0.99, 0.99 * 0.99 * 0.99]
    assert np.float32(d[3]) == np.float32(0.970299)


CFG = make_config("tiny", obs_dim=5, action_dim=2, dropout=0.0)
T, F = jnp.array(True), jnp.array(False)


def test_init_mean_std_warm_start():
    H, A = CFG.horizon, CFG.action_dim
    prev = jnp.arange(1, H * A + 1, dtype=jnp.float32).reshape(H, A)
    mean, std = pl.init_mean_std(prev, jnp.array(False), CFG)
    np.testing.assert_array_equal(mean[:-1], prev[1:])
    np.testing.assert_array_equal(mean[-1], 0.0)
    np.testing.assert_array_equal(std, CFG.max_std)
    mean, std = pl.init_mean_std(prev, jnp.array(True), CFG)
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_array_equal(std, CFG.max_std)
    # traced, per env
    t0s = jnp.array([True, False])
    means, _ = jax.jit(jax.vmap(lambda p, t: pl.init_mean_std(p, t, CFG)))(
        jnp.stack([prev, prev]), t0s)
    np.testing.assert_array_equal(means[0], 0.0)
    np.testing.assert_array_equal(means[1, :-1], prev[1:])


def test_sample_candidates_clip_and_pi_columns():
    gen = np.random.default_rng(0)
    H, P, N, A = 3, 4, 16, 2
    pi = jnp.asarray(gen.uniform(-1, 1, (H, P, A)), jnp.float32)
    noise = jnp.asarray(3.0 * gen.standard_normal((H, N - P, A)), jnp.float32)
    mean = jnp.full((H, A), 0.5)
    std = jnp.full((H, A), 2.0)
    cand = pl.sample_candidates(pi, mean, std, noise)
    assert cand.shape == (H, N, A)
    np.testing.assert_array_equal(cand[:, :P], pi)
    assert float(jnp.max(jnp.abs(cand))) <= 1.0
    np.testing.assert_allclose(cand[:, P:], jnp.clip(mean[:, None] + std[:, None] * noise, -1, 1))
    masked = pl.sample_candidates(pi, mean, std, noise, jnp.array([1.0, 0.0]))
    np.testing.assert_array_equal(masked[..., 1], 0.0)


def test_mppi_mean_converges_to_optimum():
    # B13 test 9: with V = -||a - a*||^2 the mean converges toward a*.
    H, N, E, A = 3, 256, 32, 2
    target = jnp.array([[0.3, -0.6], [0.1, 0.8], [-0.5, 0.0]])
    mean, std = jnp.zeros((H, A)), jnp.full((H, A), 2.0)
    key = jax.random.key(3)
    pi = jnp.zeros((H, 0, A))
    for _ in range(12):
        key, sub = jax.random.split(key)
        cand = pl.sample_candidates(pi, mean, std, jax.random.normal(sub, (H, N, A)))
        v = -jnp.sum((cand - target[:, None]) ** 2, axis=(0, 2))
        _, ev, ea = pl.select_elites(v, cand, E)
        _, mean, std = pl.mppi_update(ev, ea, temperature=5.0)
    np.testing.assert_allclose(mean, target, atol=0.05)


def test_select_elites_ties_lower_index_first():
    v = jnp.zeros((10,))
    idx, ev, ea = pl.select_elites(v, jnp.arange(10.0)[None, :, None], 4)
    np.testing.assert_array_equal(idx, [0, 1, 2, 3])
    v = jnp.array([0.0, 3.0, 1.0, 3.0, 2.0])
    idx, ev, _ = pl.select_elites(v, jnp.zeros((1, 5, 1)), 3)
    np.testing.assert_array_equal(idx, [1, 3, 4])
    np.testing.assert_array_equal(ev, [3.0, 3.0, 2.0])


def test_draw_plan_noise_shapes():
    # shapes only (no compile): iterations + 2 when action_dim >= 20
    cfg = make_config("tiny", obs_dim=5, action_dim=21, num_q=5)
    n = jax.eval_shape(lambda k: pl.draw_plan_noise(k, cfg), jax.random.key(0))
    H, P, N, A, I = cfg.horizon, cfg.num_pi_trajs, cfg.num_samples, 21, cfg.iterations + 2
    assert n.pi_traj_eps.shape == (H, P, A)
    assert n.candidate_noise.shape == (I, H, N - P, A)
    assert n.terminal_pi_eps.shape == (I, N, A)
    assert n.q_pair.shape == (I, 2) and n.q_pair.dtype == jnp.int32
    assert n.elite_uniform.shape == () and n.explore_noise.shape == (A,)
    assert n.q_dropout_keys.shape[0] == I


def test_draw_plan_noise_values():
    cfg = dataclasses.replace(CFG, num_q=5, iterations=40)
    n = _DRAW(jax.random.key(0), cfg)
    pair = np.asarray(n.q_pair)
    assert (pair[:, 0] != pair[:, 1]).all() and ((pair >= 0) & (pair < 5)).all()
    assert len({tuple(p) for p in pair}) > 10  # a fresh pair per iteration
    assert 0.0 <= float(n.elite_uniform) < 1.0
    assert abs(float(jnp.std(n.candidate_noise)) - 1.0) < 0.1


# ---------------------------------------------------------------------------
# whole decisions on a small random world model
# ---------------------------------------------------------------------------

def _random_params(cfg, seed=0):
    """Init params with every leaf perturbed (non-zero reward/Q heads, untied values)."""
    params = jax.jit(wm.init_params, static_argnums=1)(jax.random.key(seed), cfg)
    gen = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda x: x + jnp.asarray(0.3 * gen.standard_normal(x.shape), x.dtype), params)


# one compile for every whole-decision test (eval_mode is traced)
_RUN = jax.jit(pl.plan_with_stats, static_argnames=("cfg",))
_PLAN = jax.jit(pl.plan, static_argnames=("cfg",))
_DRAW = jax.jit(pl.draw_plan_noise, static_argnames=("cfg", "eval_mode"))


@pytest.fixture(scope="module")
def setup():
    cfg = CFG
    params = _random_params(cfg)
    obs = jax.random.normal(jax.random.key(7), (cfg.obs_dim,))
    prev = 0.5 * jax.random.normal(jax.random.key(8), (cfg.horizon, cfg.action_dim))
    noise = _DRAW(jax.random.key(9), cfg)
    return cfg, params, obs, prev, noise, _RUN


def test_plan_structure(setup):
    cfg, params, obs, prev, noise, run = setup
    P = cfg.num_pi_trajs
    action, new_prev, info = run(params, obs, prev, jnp.array(False), noise, cfg=cfg,
                                 eval_mode=F)
    it = info["iters"]
    # pi columns: fixed across iterations, equal to the prior trajectories
    for i in range(cfg.planning_iterations):
        np.testing.assert_array_equal(it.candidates[i, :, :P], info["pi_actions"])
    assert float(jnp.max(jnp.abs(it.candidates))) <= 1.0
    # warm start: shifted mean, last row 0, std reset
    np.testing.assert_array_equal(info["init_mean"][:-1], prev[1:])
    np.testing.assert_array_equal(info["init_mean"][-1], 0.0)
    np.testing.assert_array_equal(info["init_std"], cfg.max_std)
    # first iteration's Gaussian columns use the warm-start mean and max_std
    np.testing.assert_allclose(
        it.candidates[0, :, P:],
        jnp.clip(info["init_mean"][:, None] + cfg.max_std * noise.candidate_noise[0], -1, 1))
    # later iterations use the previous iteration's mean/std
    np.testing.assert_allclose(
        it.candidates[1, :, P:],
        jnp.clip(it.mean[0][:, None] + it.std[0][:, None] * noise.candidate_noise[1], -1, 1),
        rtol=1e-6, atol=1e-7)
    # stored warm start = last mean (not the executed action)
    np.testing.assert_array_equal(new_prev, it.mean[-1])
    assert bool(jnp.all(it.std >= cfg.min_std - 1e-7)) and bool(jnp.all(it.std <= cfg.max_std))
    # final pick
    k = int(info["elite_choice_index"])
    assert k == int(pl.pick_elite(it.score[-1], noise.elite_uniform))
    np.testing.assert_array_equal(info["selected_sequence"],
                                  it.candidates[-1][:, int(it.elite_idxs[-1, k])])
    want = jnp.clip(info["selected_sequence"][0] + it.std[-1][0] * noise.explore_noise, -1, 1)
    np.testing.assert_allclose(action, want, rtol=1e-6)
    # values are not all tied (the random model really is scored)
    assert float(jnp.std(it.value[0])) > 0


def test_plan_t0_and_eval_mode(setup):
    cfg, params, obs, prev, noise, run = setup
    a_tr, m_tr, i_tr = run(params, obs, prev, jnp.array(True), noise, cfg=cfg, eval_mode=F)
    np.testing.assert_array_equal(i_tr["init_mean"], 0.0)
    a_ev, m_ev, i_ev = run(params, obs, prev, jnp.array(True), noise, cfg=cfg, eval_mode=T)
    # eval_mode removes only the final noise: everything else identical
    np.testing.assert_array_equal(m_tr, m_ev)
    np.testing.assert_array_equal(i_tr["selected_sequence"], i_ev["selected_sequence"])
    np.testing.assert_array_equal(a_ev, jnp.clip(i_ev["selected_sequence"][0], -1, 1))
    assert not np.allclose(a_tr, a_ev)


def test_plan_matches_plan_with_stats(setup):
    cfg, params, obs, prev, noise, run = setup
    a1, m1, i1 = run(params, obs, prev, jnp.array(False), noise, cfg=cfg, eval_mode=F)
    a2, m2, i2 = _PLAN(params, obs, prev, jnp.array(False), noise, cfg=cfg, eval_mode=F)
    np.testing.assert_allclose(a1, a2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m1, m2, rtol=1e-6, atol=1e-7)
    assert int(i2["elite_index"]) == int(i1["elite_choice_index"])


def test_plan_vmap_equals_loop(setup):
    cfg, params, _, _, _, _ = setup
    n_env = 2
    obs = jax.random.normal(jax.random.key(11), (n_env, cfg.obs_dim))
    prev = jax.random.normal(jax.random.key(12), (n_env, cfg.horizon, cfg.action_dim))
    t0 = jnp.array([True, False])
    noises = jax.jit(jax.vmap(lambda k: pl.draw_plan_noise(k, cfg)))(
        jax.random.split(jax.random.key(13), n_env))
    a_v, m_v, _ = jax.jit(jax.vmap(lambda o, p, t, n: pl.plan(params, o, p, t, n, cfg,
                                                                 eval_mode=False)))(
        obs, prev, t0, noises)
    for e in range(n_env):
        n_e = jax.tree_util.tree_map(lambda x: x[e], noises)
        a, m, _ = _PLAN(params, obs[e], prev[e], t0[e], n_e, cfg=cfg, eval_mode=F)
        np.testing.assert_allclose(a_v[e], a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m_v[e], m, rtol=1e-5, atol=1e-6)


def test_plan_q_dropout_uses_keys(setup):
    _, params, obs, prev, n1, _ = setup
    cfg = dataclasses.replace(CFG, dropout=0.5)
    n2 = n1._replace(q_dropout_keys=jax.random.split(jax.random.key(99), cfg.planning_iterations))
    _, _, i1 = _RUN(params, obs, prev, jnp.array(True), n1, cfg=cfg, eval_mode=T)
    _, _, i2 = _RUN(params, obs, prev, jnp.array(True), n2, cfg=cfg, eval_mode=T)
    v1, v2 = i1["iters"].value[0], i2["iters"].value[0]
    assert not np.allclose(v1, v2)  # PE: dropout active in the planner's Q pass
    np.testing.assert_array_equal(i1["iters"].reward_sum[0], i2["iters"].reward_sum[0])


def test_plan_rejects_bad_shapes(setup):
    cfg, params, obs, prev, noise, _ = setup
    with pytest.raises(ValueError, match="prev_mean"):
        pl.plan(params, obs, prev[:-1], jnp.array(False), noise, cfg, eval_mode=False)
    with pytest.raises(ValueError, match="obs"):
        pl.plan(params, obs[None], prev, jnp.array(False), noise, cfg, eval_mode=False)
    bad = noise._replace(candidate_noise=noise.candidate_noise[:, :, 1:])
    with pytest.raises(ValueError, match="candidate_noise"):
        pl.plan(params, obs, prev, jnp.array(False), bad, cfg, eval_mode=False)


def test_plan_action_mask(setup):
    # spec 3.9: masked dims are exactly 0 in pi actions, candidates, mean, std and the action
    cfg, params, obs, prev, noise, run = setup
    mask = jnp.array([1.0, 0.0])
    a, m, info = run(params, obs, prev * mask, jnp.array(False), noise, cfg=cfg, eval_mode=F,
                     action_mask=mask)
    it = info["iters"]
    np.testing.assert_array_equal(info["pi_actions"][..., 1], 0.0)
    np.testing.assert_array_equal(it.candidates[..., 1], 0.0)
    np.testing.assert_array_equal(it.mean[..., 1], 0.0)
    np.testing.assert_array_equal(it.std[..., 1], 0.0)
    assert float(a[1]) == 0.0 and float(m[-1, 1]) == 0.0
    assert bool(jnp.all(it.std[..., 0] >= cfg.min_std - 1e-7))
