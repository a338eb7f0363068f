"""Forward parity of the networks on the reference's training calls (train.npz):
encoder, replay-context carry, observe scan, decoder / reward / continue / KL
loss terms, and the policy-driven imagination with every draw injected.

Forward values only (the losses' assembly, gradients and the update are the
training-step tests'). Tolerances: the README's for a training call (losses
rtol 1e-4 / atol 1e-5); latents at atol 1e-5.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import parity_tolerance as pt
import pytest

from wmx.agents.dreamerv3 import outputs
from wmx.agents.dreamerv3.actor_critic import actor_dist, actor_sample, critic_value
from wmx.agents.dreamerv3.heads import (continue_logit, decode, encode, feat,
                                        reward_logits)
from wmx.agents.dreamerv3.reference_params import (from_reference_params,
                                                   slow_critic_from_reference)
from wmx.agents.dreamerv3.rssm import context_carry, imagine_with_policy, observe, rssm_loss

CALLS = [("init", 0), ("hot", 0), ("hot", 1)]


def _state(t, run, call):
    """The reference state on entry to {run}/call{call} (after-states are diffs)."""
    pre = f"{run}/call0/before/state/"
    state = {k[len(pre):]: t[k] for k in t if k.startswith(pre)}
    for i in range(call):
        pre = f"{run}/call{i}/after/state/"
        state.update({k[len(pre):]: t[k] for k in t if k.startswith(pre)})
    return state


@functools.partial(jax.jit, static_argnums=0)
def _forward(cfg, params, slow, batch, draws):
    vec, act = batch["vector"], batch["action"]
    first, term, rew = batch["is_first"], batch["is_terminal"], batch["reward"]
    embed = encode(params["enc"], cfg, vec[:, 1:])
    carry = context_carry(cfg, batch["deter"][:, 0], batch["stoch"][:, 0], act[:, 0])
    carry_out, post = observe(params["rssm"], cfg, carry, embed, act[:, 1:], first[:, 1:],
                              draws["post_idx"])
    x = feat(post.deter, post.stoch)
    kl = rssm_loss(params["rssm"], cfg, post.deter, post.logit)
    losses = {
        "vector": outputs.symlog_mse_loss(decode(params["dec"], cfg, post.deter, post.stoch),
                                          vec[:, 1:], cfg.mse_tol) * cfg.rec_scale,
        "reward": outputs.twohot_loss(reward_logits(params["rew"], cfg, x), rew[:, 1:])
        * cfg.rew_scale,
        "cont": outputs.binary_loss(continue_logit(params["con"], cfg, x),
                                    (1.0 - term[:, 1:]) * cfg.cont_target_scale) * cfg.con_scale,
        "dyn": kl.dyn * cfg.dyn_scale,
        "rep": kl.rep * cfg.rep_scale,
    }
    # imagination from every posterior state, batch-major
    n = post.deter.shape[0] * post.deter.shape[1]
    d0 = post.deter.reshape(n, -1)
    s0 = post.stoch.reshape(n, *post.stoch.shape[2:])
    a0 = actor_sample(params["actor"], cfg, feat(d0, s0), draws["start_eps"])
    policy = lambda d, s, e: actor_sample(params["actor"], cfg, feat(d, s), e)  # noqa: E731
    imag, acts = imagine_with_policy(params["rssm"], cfg, d0, s0, a0, policy,
                                     draws["imag_prior_idx"], draws["imag_eps"])
    allx = jnp.concatenate([feat(d0, s0)[:, None], feat(imag.deter, imag.stoch)], 1)
    pol = actor_dist(params["actor"], cfg, allx)
    rew_hat = outputs.twohot_mean(reward_logits(params["rew"], cfg, allx))
    con_hat = outputs.binary_prob(continue_logit(params["con"], cfg, allx))
    return {
        "embed": embed, "deter": post.deter, "stoch": post.stoch, "logit": post.logit,
        "carry_deter": carry_out.deter, "carry_stoch": carry_out.stoch,
        "carry_action": carry_out.prevact, "losses": losses, "start_action": a0,
        "imag_deter": imag.deter, "imag_stoch": imag.stoch, "imag_logit": imag.logit,
        "imag_action": acts, "actor_mean": pol.mean, "actor_std": pol.std,
        "reward": jnp.concatenate([rew[:, 1:].reshape(n, 1), rew_hat[:, 1:]], 1),
        "cont": jnp.concatenate([(1.0 - term[:, 1:]).reshape(n, 1), con_hat[:, 1:]], 1),
        "value": critic_value(params["critic"], cfg, allx),
        "slowvalue": critic_value(slow, cfg, allx),
    }


@pytest.fixture(scope="module", params=CALLS, ids=lambda c: f"{c[0]}-call{c[1]}")
def fwd(request, train_fx, ref_cfg):
    run, call = request.param
    state = _state(train_fx, run, call)
    params = from_reference_params(state, ref_cfg)
    slow = slow_critic_from_reference(state, ref_cfg)
    b = {k: jnp.asarray(train_fx[f"batch{call}/{k}"]) for k in
         ("vector", "action", "is_first", "is_terminal", "reward", "deter", "stoch")}
    b = {k: (v.astype(jnp.float32) if v.dtype == bool else v) for k, v in b.items()}
    pre = f"{run}/call{call}/"
    draws = {k: jnp.asarray(train_fx[pre + "draws/" + k])
             for k in ("post_idx", "start_eps", "imag_prior_idx", "imag_eps")}
    out = jax.tree.map(np.asarray, _forward(ref_cfg, params, slow, b, draws))
    return run, {k[len(pre):]: train_fx[k] for k in train_fx if k.startswith(pre)}, out


def close(a, b, rtol=1e-4, atol=1e-5):
    """assert_allclose at (rtol, atol); on a TPU at the forward family's tolerance (W-D9)."""
    np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                               **pt.tol("dv3.forward", b, rtol=rtol, atol=atol))


def test_encoder_and_observe(fwd):
    _, ref, out = fwd
    close(out["embed"], ref["embed"])
    close(out["deter"], ref["replay_outs/deter"])
    close(out["stoch"], ref["replay_outs/stoch"])
    close(out["logit"], ref["replay_outs/logit"])
    np.testing.assert_array_equal(out["stoch"].argmax(-1), ref["outs/replay/stoch"])
    close(out["carry_deter"], ref["carry_out/0/deter"])
    close(out["carry_stoch"], ref["carry_out/0/stoch"])
    close(out["carry_action"], ref["carry_out/1/action"])


@pytest.mark.parametrize("name", ["vector", "reward", "cont", "dyn", "rep"])
def test_world_model_loss_terms(fwd, name):
    _, ref, out = fwd
    close(out["losses"][name], ref[f"losses_scaled/{name}"])


def test_imagination_with_injected_draws(fwd):
    run, ref, out = fwd
    close(out["start_action"], ref["imag/start_action_recomputed"])
    close(out["imag_deter"], ref["imag/deter"])
    close(out["imag_stoch"], ref["imag/stoch"])
    close(out["imag_logit"], ref["imag/logit"])
    close(out["imag_action"], ref["imag/action"])
    close(out["actor_mean"], ref["imag/actor_mean"])
    close(out["actor_std"], ref["imag/actor_std"])
    close(out["cont"], ref["imag/cont"])
    if run == "hot":  # init: the reference's jitted two-hot mean is not 0 at zero logits (D22)
        for k in ("reward", "value", "slowvalue"):
            close(out[k], ref[f"imag/{k}"])
