"""DreamerV3Config: 2411f7d defaults, size presets, wmx presets, validation."""
from __future__ import annotations

import dataclasses
import json

import jax
import pytest

from wmx.agents.dreamerv3.config import MODEL_SIZES, PRESETS, DreamerV3Config, make_config


def test_paper_defaults():
    c = DreamerV3Config(obs_dim=24, action_dim=6).resolved()
    assert (c.units, c.hidden, c.deter, c.classes, c.stoch, c.blocks) == (256, 256, 2048, 16,
                                                                         32, 8)
    assert c.feat_dim == 2560 and c.stoch_flat == 512
    assert (c.enc_layers, c.dec_layers, c.rew_layers, c.con_layers, c.actor_layers,
            c.critic_layers, c.img_layers, c.obs_layers, c.dyn_layers) == (3, 3, 1, 1, 3, 3,
                                                                           2, 1, 1)
    assert (c.bins, c.twohot_outputs, c.unimix, c.free_nats, c.rms_eps) == (255, 256, 0.01,
                                                                             1.0, 1e-4)
    assert (c.dec_outscale, c.rew_outscale, c.con_outscale, c.actor_outscale,
            c.critic_outscale, c.rssm_outscale, c.mse_tol) == (0.1, 0.0, 1.0, 0.01, 0.0, 1.0,
                                                               1e-8)
    assert (c.rec_scale, c.rew_scale, c.con_scale, c.dyn_scale, c.rep_scale, c.policy_scale,
            c.value_scale, c.repval_scale) == (1, 1, 1, 1, 0.1, 1, 1, 0.3)
    assert (c.imag_horizon, c.return_horizon, c.lam, c.repval_lam, c.actent) == (
        15, 333, 0.95, 0.95, 3e-4)
    assert c.gamma == pytest.approx(0.996996997, abs=1e-9)
    assert c.contdisc and c.imag_discount == 1.0 and c.cont_target_scale == c.gamma
    assert (c.slow_rate, c.slow_every, c.slowreg) == (0.02, 1, 1.0)
    assert (c.retnorm_rate, c.retnorm_limit, c.retnorm_lo, c.retnorm_hi) == (0.01, 1.0, 5, 95)
    assert (c.minstd, c.maxstd) == (0.1, 1.0)
    assert (c.lr, c.eps, c.agc, c.agc_pmin, c.beta1, c.beta2, c.warmup) == (
        4e-5, 1e-20, 0.3, 1e-3, 0.9, 0.999, 1000)
    assert (c.batch_size, c.batch_length, c.replay_context, c.seq_length) == (16, 64, 1, 65)
    assert (c.replay_capacity, c.train_ratio, c.n_envs, c.action_repeat) == (5_000_000, 512,
                                                                              16, 2)
    assert not c.discrete_actions and c.online_queue


def test_defaults_agree_with_the_fixture_config(train_fx):
    """The non-width hyperparameters the reference ran with (its defaults)."""
    r = json.loads(str(train_fx["meta/config_json"]))
    c = DreamerV3Config(obs_dim=5, action_dim=2)
    pairs = {"unimix": "dyn.rssm.unimix", "free_nats": "rssm_loss.free", "lr": "opt.lr",
             "eps": "opt.eps", "agc": "opt.agc", "agc_pmin": "opt.pmin", "beta1": "opt.beta1",
             "beta2": "opt.beta2", "warmup": "opt.warmup", "return_horizon": "horizon",
             "lam": "return_lambda", "repval_lam": "return_lambda_replay",
             "actent": "actent", "slowreg": "slowreg", "slow_rate": "slow_critic_fraction",
             "slow_every": "slow_critic_update", "retnorm_rate": "retnorm.rate",
             "retnorm_limit": "retnorm.limit", "retnorm_lo": "retnorm.perclo",
             "retnorm_hi": "retnorm.perchi", "minstd": "actor.minstd", "maxstd": "actor.maxstd",
             "actor_unimix": "actor.unimix", "rew_outscale": "rewhead.outscale",
             "con_outscale": "conhead.outscale", "actor_outscale": "actor.outscale",
             "critic_outscale": "critic.outscale", "rssm_outscale": "dyn.rssm.outscale",
             "bins": "rewhead.bins", "rep_scale": "loss_scales.rep",
             "dyn_scale": "loss_scales.dyn", "repval_scale": "loss_scales.replay_critic",
             "rec_scale": "loss_scales.dec_mlp", "rew_scale": "loss_scales.reward",
             "con_scale": "loss_scales.cont", "policy_scale": "loss_scales.actor",
             "value_scale": "loss_scales.critic", "contdisc": "contdisc",
             "replay_context": "replay_context", "blocks": "dyn.rssm.blocks"}
    for ours, theirs in pairs.items():
        assert getattr(c, ours) == r[theirs], (ours, theirs)
    assert r["critic.bins"] == c.bins and r["dyn.rssm.cell"] == "blockgru"
    assert r["actor_dist_cont"] == "normal" and r["actor_dist_disc"] == "onehot"


@pytest.mark.parametrize("size,row", list(MODEL_SIZES.items()))
def test_model_size_table(size, row):
    d, deter, hidden, classes = row
    assert deter == 8 * d and hidden == d and classes == d // 16
    c = DreamerV3Config(obs_dim=3, action_dim=2, model_size=size).resolved()
    assert (c.units, c.deter, c.hidden, c.classes) == row
    assert c.feat_dim == 10 * d


def test_explicit_widths_override_and_resolved_is_idempotent():
    c = DreamerV3Config(obs_dim=3, action_dim=2, model_size="50m", classes=8)
    r = c.resolved()
    assert (r.units, r.classes) == (512, 8) and r.resolved() is r
    assert not c.is_resolved and r.is_resolved


@pytest.mark.parametrize("field,value", [
    ("obs_dim", 0), ("model_size", "13m"), ("deter", 100), ("bins", 256), ("unimix", 1.0),
    ("minstd", 2.0), ("replay_context", 2), ("beta2", 1.0), ("lam", 1.5), ("units", 0),
    ("return_horizon", 0.5), ("batch_length", 1)])
def test_validation_names_the_field(field, value):
    kw = {"obs_dim": 3, "action_dim": 2, field: value}
    with pytest.raises(ValueError, match=field):
        DreamerV3Config(**kw)


def test_blocks_must_divide_the_preset_deter():
    with pytest.raises(ValueError, match="blocks"):
        DreamerV3Config(obs_dim=3, action_dim=2, blocks=7)


def test_presets_and_make_config():
    assert set(PRESETS) == {"paper", "cpu", "tiny"}
    paper = make_config("paper", obs_dim=24, action_dim=6)
    assert (paper.units, paper.n_envs, paper.train_ratio, paper.action_repeat) == (256, 16,
                                                                                   512, 2)
    cpu = make_config("cpu", obs_dim=24, action_dim=6)
    assert (cpu.units, cpu.deter, cpu.classes) == (64, 512, 4)
    assert (cpu.batch_size, cpu.batch_length, cpu.imag_horizon, cpu.train_ratio) == (
        paper.batch_size, paper.batch_length, paper.imag_horizon, paper.train_ratio)
    tiny = make_config("tiny", obs_dim=5, action_dim=2)
    assert (tiny.units, tiny.hidden, tiny.deter, tiny.stoch, tiny.classes) == (10, 14, 24, 4, 3)
    with pytest.raises(ValueError, match="preset"):
        make_config("huge", obs_dim=5, action_dim=2)
    with pytest.raises(ValueError, match="nonsense"):
        make_config("tiny", obs_dim=5, action_dim=2, nonsense=1)
    with pytest.raises(ValueError, match="obs_dim"):
        make_config("tiny")


def test_config_is_a_hashable_static_jit_argument():
    cfg = make_config("tiny", obs_dim=5, action_dim=2)
    assert hash(cfg) == hash(dataclasses.replace(cfg))
    f = jax.jit(lambda x, c: x * c.imag_horizon, static_argnums=1)
    assert float(f(2.0, cfg)) == 14.0
