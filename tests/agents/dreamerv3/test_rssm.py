"""RSSM behaviour beyond the single-step parity: the scans equal their steps,
is_first resets, gradient reach, and the imagination's stop-gradient."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from wmx.agents.dreamerv3.actor_critic import actor_sample
from wmx.agents.dreamerv3.categorical import draw_uniform, indices_from_uniform, sample_indices
from wmx.agents.dreamerv3.config import make_config
from wmx.agents.dreamerv3.heads import feat
from wmx.agents.dreamerv3.policy_dist import draw_normal_eps
from wmx.agents.dreamerv3.rssm import (Carry, context_carry, draw_latent_noise, imagine,
                                       imagine_with_policy, img_step, initial_carry, obs_step,
                                       observe, rssm_loss)

obs_step = jax.jit(obs_step, static_argnums=1)
img_step = jax.jit(img_step, static_argnums=1)
observe = jax.jit(observe, static_argnums=1)
imagine = jax.jit(imagine, static_argnums=1)

B, T, H = 3, 5, 4


@pytest.fixture(scope="module")
def setup(tiny_cfg, tiny_params):
    cfg, params = tiny_cfg, tiny_params
    # hot params: random biases and norm scales so no term is trivially zero
    flat, unravel = ravel_pytree(params)
    rng = np.random.default_rng(0)
    params = unravel(flat + 0.3 * jnp.asarray(rng.normal(size=flat.shape), jnp.float32))
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    embed = f32(rng.normal(size=(B, T, cfg.units)))
    action = f32(1.5 * rng.normal(size=(B, T, cfg.action_dim)))
    is_first = jnp.zeros((B, T), bool).at[1, 2].set(True).at[2, 0].set(True)
    post_idx = jnp.asarray(rng.integers(0, cfg.classes, (B, T, cfg.stoch)), jnp.int32)
    carry = Carry(f32(rng.normal(size=(B, cfg.deter))),
                  f32(np.eye(cfg.classes)[rng.integers(0, cfg.classes, (B, cfg.stoch))]),
                  f32(rng.normal(size=(B, cfg.action_dim))))
    return cfg, params, carry, embed, action, is_first, post_idx


def test_observe_scan_equals_its_steps(setup):
    cfg, params, carry, embed, action, is_first, post_idx = setup
    out_carry, feats = observe(params["rssm"], cfg, carry, embed, action, is_first, post_idx)
    deter, stoch, prevact = carry
    for t in range(T):
        f = obs_step(params["rssm"], cfg, Carry(deter, stoch, prevact), embed[:, t],
                     is_first[:, t], post_idx[:, t])
        np.testing.assert_allclose(feats.deter[:, t], f.deter, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(feats.logit[:, t], f.logit, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(feats.stoch[:, t], f.stoch)
        deter, stoch, prevact = f.deter, f.stoch, action[:, t]
    np.testing.assert_array_equal(out_carry.prevact, action[:, -1])
    np.testing.assert_allclose(out_carry.deter, feats.deter[:, -1], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(feats.stoch.argmax(-1), post_idx)


def test_is_first_forgets_the_carry(setup):
    cfg, params, carry, embed, action, _, post_idx = setup
    first = jnp.ones((B,), bool)
    a = obs_step(params["rssm"], cfg, carry, embed[:, 0], first, post_idx[:, 0])
    b = obs_step(params["rssm"], cfg, initial_carry(cfg, (B,)), embed[:, 0], first,
                 post_idx[:, 0])
    np.testing.assert_array_equal(a.deter, b.deter)
    c = obs_step(params["rssm"], cfg, carry, embed[:, 0], ~first, post_idx[:, 0])
    assert not np.allclose(a.deter, c.deter)


def test_bptt_reaches_back_until_a_reset(setup):
    """d deter_t / d embed_0 is non-zero through the scan, and zero past an is_first."""
    cfg, params, carry, embed, action, is_first, post_idx = setup

    def last_deter(e0):
        e = embed.at[:, 0].set(e0)
        return observe(params["rssm"], cfg, carry, e, action, is_first, post_idx)[1].deter[:, 3]

    g = jax.jit(jax.jacrev(lambda e0: jnp.sum(last_deter(e0), -1)))(embed[:, 0])  # [B, B, units]
    per_row = np.abs(np.asarray(jnp.einsum("bbu->bu", g))).sum(-1)
    assert per_row[0] > 0 and per_row[1] == 0 and per_row[2] > 0  # row 1 resets at t = 2


def test_imagine_equals_its_steps_and_starts_from_the_given_state(setup):
    cfg, params, carry, _, action, _, _ = setup
    rng = np.random.default_rng(3)
    acts = jnp.asarray(rng.normal(size=(B, H, cfg.action_dim)), jnp.float32)
    idx = jnp.asarray(rng.integers(0, cfg.classes, (B, H, cfg.stoch)), jnp.int32)
    out = imagine(params["rssm"], cfg, carry.deter, carry.stoch, acts, idx)
    deter, stoch = carry.deter, carry.stoch
    for h in range(H):
        f = img_step(params["rssm"], cfg, deter, stoch, acts[:, h], idx[:, h])
        np.testing.assert_allclose(out.deter[:, h], f.deter, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out.logit[:, h], f.logit, rtol=1e-6, atol=1e-6)
        deter, stoch = f.deter, f.stoch
    assert out.deter.shape == (B, H, cfg.deter)


def test_imagine_with_policy_matches_open_loop_and_carries_no_gradient(setup):
    cfg, params, carry, _, _, _, _ = setup
    noise = draw_normal_eps(jax.random.key(4), (B, H + 1, cfg.action_dim))
    eps = noise[:, 1:]
    idx = jnp.asarray(np.random.default_rng(4).integers(0, cfg.classes, (B, H, cfg.stoch)),
                      jnp.int32)
    a0 = actor_sample(params["actor"], cfg, feat(carry.deter, carry.stoch), noise[:, 0])

    def run(p):
        policy = lambda d, s, e: actor_sample(p["actor"], cfg, feat(d, s), e)  # noqa: E731
        return imagine_with_policy(p["rssm"], cfg, carry.deter, carry.stoch, a0, policy,
                                   idx, eps)

    feats, acts = jax.jit(run)(params)
    open_loop = jnp.concatenate([a0[:, None], acts[:, :-1]], 1)
    ref = imagine(params["rssm"], cfg, carry.deter, carry.stoch, open_loop, idx)
    np.testing.assert_allclose(feats.deter, ref.deter, rtol=1e-6, atol=1e-6)
    pol = lambda f: actor_sample(params["actor"], cfg, feat(f.deter, f.stoch), eps)  # noqa
    np.testing.assert_allclose(acts, pol(feats), rtol=1e-6, atol=1e-6)
    def total(p):
        f, a = run(p)
        return jnp.sum(f.deter) + jnp.sum(f.stoch) + jnp.sum(a)

    g = jax.jit(jax.grad(total))(params)
    assert all(not np.any(np.asarray(x)) for x in jax.tree.leaves(g))


def test_rssm_loss_prior_from_deter_and_free_bits(setup):
    cfg, params, carry, embed, action, is_first, post_idx = setup
    _, feats = observe(params["rssm"], cfg, carry, embed, action, is_first, post_idx)
    out = rssm_loss(params["rssm"], cfg, feats.deter, feats.logit)
    assert out.dyn.shape == (B, T) and out.prior_logit.shape == feats.logit.shape
    np.testing.assert_array_equal(out.dyn, np.maximum(out.kl.dyn_kl, cfg.free_nats))
    np.testing.assert_allclose(out.rep / out.dyn, 1.0, rtol=1e-6)
    assert np.all(np.asarray(out.prior_ent) > 0) and np.all(np.asarray(out.post_ent) > 0)


def test_carries_and_draws():
    cfg = make_config("tiny", obs_dim=5, action_dim=2)
    c0 = initial_carry(cfg, (2, 3))
    assert c0.deter.shape == (2, 3, 24) and c0.stoch.shape == (2, 3, 4, 3)
    assert c0.prevact.shape == (2, 3, 2) and not any(np.any(x) for x in c0)
    ctx = context_carry(cfg, jnp.ones((2, 24)), jnp.array([[0, 1, 2, 1], [2, 2, 0, 0]]),
                        jnp.ones((2, 2)))
    np.testing.assert_array_equal(ctx.stoch.argmax(-1), [[0, 1, 2, 1], [2, 2, 0, 0]])
    np.testing.assert_array_equal(ctx.stoch.sum(-1), 1.0)
    noise = draw_latent_noise(jax.random.key(0), cfg, (2, 3))
    assert noise.shape == (2, 3, cfg.stoch) and noise.dtype == jnp.float32


def test_uniform_noise_samples_the_categorical():
    """Inverse-CDF sampling: frequencies match softmax(logits); the edges are exact."""
    logits = jnp.log(jnp.array([0.7, 0.2, 0.1]))
    u = draw_uniform(jax.random.key(0), (20000,))
    idx = sample_indices(jnp.broadcast_to(logits, (20000, 3)), u)
    assert idx.dtype == jnp.int32
    np.testing.assert_allclose(np.bincount(np.asarray(idx), minlength=3) / 20000,
                               [0.7, 0.2, 0.1], atol=0.015)
    edges = indices_from_uniform(jnp.broadcast_to(logits, (4, 3)),
                                 jnp.array([0.0, 0.69, 0.91, 0.9999999]))
    np.testing.assert_array_equal(edges, [0, 0, 2, 2])
    given = jnp.array([2, 0, 1, 1], jnp.int32)
    np.testing.assert_array_equal(sample_indices(jnp.zeros((4, 3)), given), given)


def test_observe_with_uniform_noise_samples_from_its_posterior(setup):
    cfg, params, carry, embed, action, is_first, _ = setup
    u = draw_latent_noise(jax.random.key(5), cfg, (B, T))
    _, feats = observe(params["rssm"], cfg, carry, embed, action, is_first, u)
    want = indices_from_uniform(feats.logit, u)
    np.testing.assert_array_equal(feats.stoch.argmax(-1), want)
