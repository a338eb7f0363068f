"""Distributions and heads: the properties the parity fixtures do not pin
(symlog-MSE tolerance, soft-label Bernoulli, unimix floors, the discrete
actor, zero-initialised two-hot heads)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import categorical as cat
from wmx.agents.dreamerv3 import outputs, policy_dist
from wmx.agents.dreamerv3.actor_critic import (actor_dist, actor_sample, critic_value,
                                               draw_policy_noise)
from wmx.agents.dreamerv3.config import make_config
from wmx.agents.dreamerv3.heads import (continue_logit, decode, encode, feat,
                                        reward_logits)
from wmx.agents.dreamerv3.params import init_params, param_shapes
from wmx.agents.dreamerv3.reference_params import reference_names
from wmx.nn.symlog import symlog


def test_symlog_mse_has_no_half_sums_features_and_zeroes_below_tol():
    target = jnp.array([[1.0, -2.0, 3.0]])
    pred = symlog(target) + jnp.array([[0.5, 5e-5, -0.25]])
    loss = outputs.symlog_mse_loss(pred, target, tol=1e-8)
    np.testing.assert_allclose(loss, [0.25 + 2.5e-9 + 0.0625], rtol=1e-6)
    tiny = symlog(target) + 5e-5  # squared error 2.5e-9 < 1e-8: zeroed (2411f7d)
    assert float(outputs.symlog_mse_loss(tiny, target, tol=1e-8)[0]) == 0.0
    assert float(outputs.symlog_mse_loss(tiny, target, tol=0.0)[0]) > 0.0
    g = jax.grad(lambda y: jnp.sum(outputs.symlog_mse_loss(pred, y)))(target)
    assert not np.any(np.asarray(g))  # the target is data
    np.testing.assert_allclose(outputs.symlog_mse_mode(symlog(target)), target, rtol=1e-6)


def test_binary_loss_soft_labels_and_gradient():
    logit = jnp.array([-3.0, 0.0, 2.0, 40.0])
    c = jnp.array([0.997, 0.5, 0.0, 0.997])
    want = -(c * jax.nn.log_sigmoid(logit) + (1 - c) * jax.nn.log_sigmoid(-logit))
    np.testing.assert_allclose(outputs.binary_loss(logit, c), want, rtol=1e-6, atol=1e-7)
    g = jax.grad(lambda lg: jnp.sum(outputs.binary_loss(lg, c)))(logit)
    np.testing.assert_allclose(g, jax.nn.sigmoid(logit) - c, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(outputs.binary_prob(logit), jax.nn.sigmoid(logit))


def test_unimix_floor_and_straight_through_value():
    raw = jnp.array([[30.0, -30.0, 0.0, 1.0]])
    mixed = cat.unimix_logits(raw, 0.01)
    p = np.asarray(jax.nn.softmax(mixed))
    assert p.min() >= 0.01 / 4 * (1 - 1e-6) and abs(p.sum() - 1) < 1e-6
    np.testing.assert_array_equal(cat.unimix_logits(raw, 0.0), raw)
    s = cat.onehot_sample(mixed, jnp.array([2]))
    np.testing.assert_array_equal(s, [[0.0, 0.0, 1.0, 0.0]])
    np.testing.assert_array_equal(cat.onehot_mode(mixed), [[1.0, 0.0, 0.0, 0.0]])


def test_bounded_normal_at_init_and_entropy_bounds():
    pol = policy_dist.bounded_normal(jnp.zeros(3), jnp.zeros(3))
    np.testing.assert_allclose(pol.std, 0.9 * jax.nn.sigmoid(2.0) + 0.1, rtol=1e-6)
    np.testing.assert_allclose(pol.std, 0.8927, atol=1e-4)
    lo, hi = policy_dist.normal_entropy_bounds(3)
    assert lo == pytest.approx(3 * (0.5 + 0.5 * math.log(2 * math.pi) + math.log(0.1)))
    assert hi == pytest.approx(3 * (0.5 + 0.5 * math.log(2 * math.pi)))
    big = policy_dist.bounded_normal(jnp.full(3, 50.0), jnp.full(3, 50.0))
    np.testing.assert_allclose(policy_dist.normal_entropy(big), hi, rtol=1e-6)


def test_discrete_actor_one_hot_with_unimix():
    cfg = make_config("tiny", obs_dim=5, action_dim=4, discrete_actions=True)
    params = jax.jit(init_params, static_argnums=1)(jax.random.key(0), cfg)
    assert set(params["actor"]) == {"h0", "h1", "h2", "logits"}
    names = reference_names(param_shapes(cfg))
    assert names[("actor", "logits", "kernel")] == "agent/actor/action/out/kernel"
    x = feat(jnp.ones((2, cfg.deter)), jax.nn.one_hot(jnp.zeros((2, cfg.stoch), int),
                                                      cfg.classes))
    logits = actor_dist(params["actor"], cfg, x)
    p = np.asarray(jax.nn.softmax(logits))
    assert p.shape == (2, 4) and p.min() >= 0.01 / 4 * (1 - 1e-6)
    a = actor_sample(params["actor"], cfg, x, jnp.array([3, 1]))
    np.testing.assert_array_equal(a, [[0, 0, 0, 1], [0, 1, 0, 0]])
    u = draw_policy_noise(jax.random.key(1), cfg, (2,))
    assert u.shape == (2,)
    b = actor_sample(params["actor"], cfg, x, jnp.array([0.0, 0.999]))
    np.testing.assert_array_equal(b, [[1, 0, 0, 0], [0, 0, 0, 1]])
    lp = policy_dist.onehot_log_prob(logits, a)
    np.testing.assert_allclose(lp, np.log(p[[0, 1], [3, 1]]), rtol=1e-5)
    ent = policy_dist.onehot_entropy(logits)
    assert np.all(np.asarray(ent) <= policy_dist.onehot_entropy_bounds(4)[1] + 1e-6)


def test_heads_shapes_and_zero_initialised_two_hot_outputs(tiny_cfg, tiny_params):
    cfg, params = tiny_cfg, tiny_params

    @jax.jit
    def heads(params, obs, deter, stoch):
        x = feat(deter, stoch)
        return (encode(params["enc"], cfg, obs), decode(params["dec"], cfg, deter, stoch),
                reward_logits(params["rew"], cfg, x), continue_logit(params["con"], cfg, x),
                outputs.twohot_mean(reward_logits(params["rew"], cfg, x)),
                critic_value(params["critic"], cfg, x))

    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)
    deter = jnp.asarray(rng.normal(size=(2, 3, cfg.deter)), jnp.float32)
    stoch = jax.nn.one_hot(jnp.asarray(rng.integers(0, 3, (2, 3, cfg.stoch))), 3)
    emb, rec, rlog, clog, rew, val = heads(params, obs, deter, stoch)
    assert emb.shape == (2, 3, cfg.units) and rec.shape == (2, 3, 5)
    assert rlog.shape == (2, 3, 255) and clog.shape == (2, 3)
    np.testing.assert_array_equal(rlog, 0.0)
    np.testing.assert_array_equal(rew, 0.0)  # exactly 0 under jit (D22)
    np.testing.assert_array_equal(val, 0.0)
