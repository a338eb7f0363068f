"""Reference parity of DreamerV3's components against components.npz
(fixtures/dreamerv3/README.md: 29eb964, float32, op-by-op, perturbed params).

Tolerances are the README's: rtol 1e-5, atol 1e-6; two-hot mean/mode compared
relative to sum_i |p_i b_i| (1e-6 of it). λ-returns, retnorm and opt/* belong
to the optimizer/returns tests.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import parity_tolerance as pt
import pytest

from wmx.agents.dreamerv3 import categorical as cat
from wmx.agents.dreamerv3 import outputs, policy_dist
from wmx.agents.dreamerv3.actor_critic import actor_dist
from wmx.agents.dreamerv3.heads import feat
from wmx.agents.dreamerv3.reference_params import from_reference_params
from wmx.agents.dreamerv3.rssm import (Carry, core, img_step, obs_step, prior_logits,
                                       rssm_loss)
from wmx.nn.symlog import symexp, symlog
from wmx.nn.twohot import TwoHot

RTOL, ATOL = 1e-5, 1e-6


def close(actual, desired, rtol=RTOL, atol=ATOL, family="dv3.components"):
    """assert_allclose at (rtol, atol); on a TPU at `family`'s widened tolerance (W-D9)."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired),
                               **pt.tol(family, desired, rtol=rtol, atol=atol))


@pytest.fixture(scope="module")
def rssm_params(components, ref_cfg):
    ref = {k[len("rssm/params/"):]: components[k] for k in components
           if k.startswith("rssm/params/")}
    return from_reference_params(ref, ref_cfg, modules=("rssm",))["rssm"]


@pytest.fixture(scope="module")
def actor_params(components, ref_cfg):
    ref = {k[len("actor/params/"):]: components[k] for k in components
           if k.startswith("actor/params/")}
    return from_reference_params(ref, ref_cfg, modules=("actor",))["actor"]


def _in(c, group):
    return {k[len(group) + 4:]: jnp.asarray(c[k]) for k in c if k.startswith(f"{group}/in/")}


# ---- RSSM ---------------------------------------------------------------------
def test_gru_core_step(components, ref_cfg, rssm_params):
    x = _in(components, "gru")
    assert np.abs(x["action"]).max() > 1.0  # the max(1, |a|) normaliser is exercised
    out = core(rssm_params, ref_cfg, x["deter"], x["stoch"], x["action"])
    close(out, components["gru/out/deter"])


def test_observe_step_with_resets(components, ref_cfg, rssm_params):
    x = _in(components, "observe")
    assert 0 < int(x["is_first"].sum()) < x["is_first"].size
    out = obs_step(rssm_params, ref_cfg, Carry(x["deter"], x["stoch"], x["action"]),
                   x["embed"], x["is_first"], x["post_idx"])
    close(out.deter, components["observe/out/deter"])
    close(out.stoch, components["observe/out/stoch"])
    close(out.logit, components["observe/out/post_logit"])
    close(prior_logits(rssm_params, ref_cfg, out.deter), components["observe/out/prior_logit"])


def test_imagine_step(components, ref_cfg, rssm_params):
    x = _in(components, "imagine")
    out = img_step(rssm_params, ref_cfg, x["deter"], x["stoch"], x["action"], x["prior_idx"])
    close(out.deter, components["imagine/out/deter"])
    close(out.stoch, components["imagine/out/stoch"])
    close(out.logit, components["imagine/out/prior_logit"])


def test_straight_through_gradient(components):
    x = _in(components, "straight_through")
    f = lambda logit: jnp.sum(x["weight"] * cat.onehot_sample(logit, x["idx"]))  # noqa: E731
    sample = cat.onehot_sample(x["logit"], x["idx"])
    np.testing.assert_array_equal(np.asarray(sample),
                                  np.eye(x["logit"].shape[-1])[np.asarray(x["idx"])])
    close(jax.grad(f)(x["logit"]), components["straight_through/out/grad_logit"])


def test_rssm_loss(components, ref_cfg, rssm_params):
    x = _in(components, "rssm_loss")
    out = rssm_loss(rssm_params, ref_cfg, x["deter"], x["post_logit"])
    close(out.prior_logit, components["rssm_loss/out/prior_logit"])
    close(out.dyn, components["rssm_loss/out/dyn"])
    close(out.rep, components["rssm_loss/out/rep"])


# ---- KL -----------------------------------------------------------------------
def test_unimix_kl_free_bits_entropy(components):
    x = _in(components, "kl")
    mix, free = float(x["unimix"]), float(x["free"])
    post = cat.unimix_logits(x["raw_post_logit"], mix)
    prior = cat.unimix_logits(x["raw_prior_logit"], mix)
    close(post, components["kl/unimix_post_logit"])
    close(prior, components["kl/unimix_prior_logit"])
    terms = cat.kl_terms(post, prior, free)
    for name in ("dyn_kl", "rep_kl", "dyn_loss", "rep_loss"):
        got = getattr(terms, name.replace("_loss", ""))
        close(got, components[f"kl/out/{name}"])
    want = components["kl/out/dyn_kl"]
    assert (want < free).any() and (want > free).any()  # the clamp is exercised both ways
    close(cat.entropy(post), components["kl/out/post_ent"])
    close(cat.entropy(prior), components["kl/out/prior_ent"])


@pytest.mark.parametrize("loss", ["dyn", "rep"])
@pytest.mark.parametrize("wrt", ["post", "prior"])
def test_kl_gradients(components, loss, wrt):
    """Gradients of sum(loss) w.r.t. the (mixed) logits the RSSM stores and
    kl_terms takes: dyn reaches only the prior, rep only the posterior."""
    post = jnp.asarray(components["kl/unimix_post_logit"])
    prior = jnp.asarray(components["kl/unimix_prior_logit"])
    free = float(components["kl/in/free"])
    total = lambda a, b: jnp.sum(getattr(cat.kl_terms(a, b, free), loss))  # noqa: E731
    g = jax.grad(total, argnums=0 if wrt == "post" else 1)(post, prior)
    want = components[f"kl/out/grad_{loss}_loss_wrt_{wrt}_logit"]
    close(g, want)
    if (loss, wrt) in (("dyn", "post"), ("rep", "prior")):
        assert not np.any(want) and not np.any(np.asarray(g))  # the stop-gradient side
    else:
        assert np.any(want) and (np.abs(want).sum(axis=(1, 2)) == 0).any()  # clipped rows


# ---- two-hot --------------------------------------------------------------------
def _rel_to_mass(actual, desired, logits, bins, rel=1e-6):
    """|actual - desired| <= rel * sum_i |p_i b_i| per row (README two-hot rule; on a TPU
    rel is at least 2x the chip's exp error, W-D9)."""
    rel = pt.bound("dv3.twohot_decode", rel)
    p = np.asarray(jax.nn.softmax(jnp.asarray(logits), -1), np.float64)
    mass = np.sum(np.abs(p * np.asarray(bins, np.float64)), -1)
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(desired, np.float64))
    assert np.all(err <= rel * mass), float(np.max(err / np.maximum(mass, 1e-300)))


def test_twohot_bins_within_d22(components):
    """wmx's bins (D22: float32 rounding of float64 constants) against the
    reference's float32-computed ones: within 1.3e-6 relative, exact 0 centre,
    exactly antisymmetric on both sides."""
    ours = np.asarray(outputs.twohot_spec(255).bins_array())
    ref = components["twohot/bins"]
    np.testing.assert_allclose(ours, ref, rtol=1.3e-6, atol=0)
    assert ours[127] == 0.0 and ref[127] == 0.0
    np.testing.assert_array_equal(ours, -ours[::-1])
    np.testing.assert_array_equal(ref, -ref[::-1])


@pytest.fixture(scope="module")
def ref_bins_spec(components):
    """The two-hot spec over the reference's own bins (isolates the formulas)."""
    return TwoHot(tuple(float(b) for b in components["twohot/bins"]))


@pytest.mark.parametrize("which", ["reference_bins", "wmx_bins"])
def test_twohot_encode_loss_gradient(components, ref_bins_spec, which):
    """Same bins: README tolerances. wmx's bins (D22, 1.2e-6 relative apart): the
    interpolation weight of a target moves by up to ~1e-5 near the large bins."""
    spec = ref_bins_spec if which == "reference_bins" else outputs.twohot_spec(255)
    atol = ATOL if which == "reference_bins" else 1e-5
    logits = jnp.asarray(components["twohot/logits"])
    values = jnp.asarray(components["twohot/values"])
    close(spec.encode(values), components["twohot/target"], atol=atol)
    close(outputs.twohot_loss(logits, values, spec), components["twohot/loss"], atol=atol)
    g = jax.grad(lambda lg: jnp.sum(outputs.twohot_loss(lg, values, spec)))(logits)
    close(g, components["twohot/grad_loss_wrt_logits"], atol=atol)


@pytest.mark.parametrize("which", ["reference_bins", "wmx_bins"])
def test_twohot_mean_mode_roundtrip(components, ref_bins_spec, which):
    """Decodes relative to sum_i |p_i b_i|: 1e-6 with the same bins; wmx's bins
    add their 1.22e-6 relative offset (D22), so 2e-6."""
    spec = ref_bins_spec if which == "reference_bins" else outputs.twohot_spec(255)
    rel = 1e-6 if which == "reference_bins" else 2e-6
    bins = components["twohot/bins"]
    logits = jnp.asarray(components["twohot/logits"])
    _rel_to_mass(outputs.twohot_mean(logits, spec), components["twohot/mean"], logits, bins, rel)
    _rel_to_mass(outputs.twohot_mode(logits, spec), components["twohot/mode"], logits, bins, rel)
    np.testing.assert_array_equal(np.asarray(outputs.twohot_mean(logits[:10], spec)), 0.0)
    rt = jnp.asarray(components["twohot/roundtrip_logits"])
    _rel_to_mass(outputs.twohot_mean(rt, spec), components["twohot/roundtrip_mean"], rt, bins, rel)


def test_symlog_symexp(components):
    values = jnp.asarray(components["twohot/values"])
    close(symlog(values), components["twohot/symlog"], family="dv3.symlog")
    close(symexp(symlog(values)), components["twohot/symexp_of_symlog"], family="dv3.symlog")


# ---- actor --------------------------------------------------------------------
def test_bounded_normal_actor(components, ref_cfg, actor_params):
    x = _in(components, "actor")
    pol = actor_dist(actor_params, ref_cfg, feat(x["deter"], x["stoch"]))
    close(pol.mean, components["actor/out/mean"])
    close(pol.std, components["actor/out/std"])
    close(policy_dist.normal_log_prob(pol, x["actions"]), components["actor/out/log_prob"])
    close(policy_dist.normal_entropy(pol), components["actor/out/entropy"])
    sample = policy_dist.normal_sample(pol, x["eps"])
    close(sample, components["actor/out/sample"])
    close(policy_dist.normal_log_prob(pol, sample), components["actor/out/sample_log_prob"])
    minent, maxent = policy_dist.normal_entropy_bounds(ref_cfg.action_dim, ref_cfg.minstd,
                                                       ref_cfg.maxstd)
    close(minent, components["actor/out/minent"])
    close(maxent, components["actor/out/maxent"])
