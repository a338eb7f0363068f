"""TDMPC2Config: PE defaults, model-size table, derived values, validation."""
import dataclasses

import jax
import pytest

from wmx.agents.tdmpc2.config import (MODEL_SIZES, PRESETS, TDMPC2Config,
                                      discount_from_episode_length, make_config)


def test_paper_defaults_resolve_to_5m_table():
    cfg = TDMPC2Config(obs_dim=24, action_dim=6).resolved()
    assert (cfg.enc_dim, cfg.mlp_dim, cfg.latent_dim, cfg.num_enc_layers, cfg.num_q) == (
        256, 512, 512, 2, 5)
    assert cfg.seed_steps == 2500 and cfg.discount == pytest.approx(0.99, abs=0)
    assert cfg.enc_lr == pytest.approx(9e-5)
    assert (cfg.horizon, cfg.rho, cfg.num_bins, cfg.vmax, cfg.dropout) == (3, 0.5, 101, 10.0, 0.01)
    assert (cfg.consistency_coef, cfg.reward_coef, cfg.value_coef) == (20.0, 0.1, 0.1)
    assert (cfg.pi_eps, cfg.wm_eps, cfg.tau, cfg.entropy_coef) == (1e-5, 1e-8, 0.01, 1e-4)
    assert (cfg.num_samples, cfg.num_elites, cfg.num_pi_trajs, cfg.planning_iterations) == (
        512, 64, 24, 6)


@pytest.mark.parametrize("size,row", sorted(MODEL_SIZES.items()))
def test_model_size_table(size, row):
    cfg = TDMPC2Config(obs_dim=3, action_dim=2, model_size=size).resolved()
    assert (cfg.enc_dim, cfg.mlp_dim, cfg.latent_dim, cfg.num_enc_layers, cfg.num_q) == row


def test_explicit_width_overrides_table_and_resolved_is_idempotent():
    cfg = TDMPC2Config(obs_dim=3, action_dim=2, model_size=19, latent_dim=512)
    r = cfg.resolved()
    assert r.latent_dim == 512 and r.enc_dim == 1024
    assert r.resolved() is r and not cfg.is_resolved and r.is_resolved


def test_iterations_plus_two_for_large_action_dims():
    assert TDMPC2Config(obs_dim=223, action_dim=38).planning_iterations == 8
    assert TDMPC2Config(obs_dim=67, action_dim=21).planning_iterations == 8
    assert TDMPC2Config(obs_dim=24, action_dim=19).planning_iterations == 6


@pytest.mark.parametrize("T,gamma,seed", [(500, 0.99, 2500), (100, 0.95, 1000),
                                          (1000, 0.995, 5000), (50, 0.95, 1000)])
def test_discount_and_seed_steps_from_T(T, gamma, seed):
    assert discount_from_episode_length(T) == pytest.approx(gamma, rel=1e-12)
    cfg = TDMPC2Config(obs_dim=3, action_dim=2, episode_length=T).resolved()
    assert cfg.discount == pytest.approx(gamma, rel=1e-12) and cfg.seed_steps == seed


@pytest.mark.parametrize("field,value", [("obs_dim", 0), ("model_size", 7), ("num_q", 1),
                                         ("num_bins", 100), ("dropout", 1.0), ("rho", 0.0),
                                         ("latent_dim", 12), ("num_elites", 1000),
                                         ("discount", 1.5), ("tau", 0.0), ("num_tasks", 3)])
def test_validation_names_field(field, value):
    kw = dict(obs_dim=3, action_dim=2)
    kw[field] = value
    with pytest.raises(ValueError, match=field if field != "num_tasks" else "task_dim"):
        TDMPC2Config(**kw)


def test_presets_and_make_config():
    assert set(PRESETS) == {"paper", "cpu", "tiny"}
    tiny = make_config("tiny", obs_dim=5, action_dim=2)
    assert (tiny.latent_dim, tiny.mlp_dim, tiny.num_q, tiny.batch_size) == (16, 32, 2, 16)
    cpu = make_config("cpu", obs_dim=5, action_dim=2, batch_size=64)
    assert (cpu.latent_dim, cpu.num_samples, cpu.batch_size) == (64, 256, 64)
    assert make_config("paper", obs_dim=5, action_dim=2).latent_dim == 512
    with pytest.raises(ValueError, match="preset"):
        make_config("huge", obs_dim=5, action_dim=2)
    with pytest.raises(ValueError, match="nonsense"):
        make_config("tiny", obs_dim=5, action_dim=2, nonsense=1)
    with pytest.raises(ValueError, match="obs_dim"):
        make_config("tiny")


def test_config_is_hashable_static_jit_arg():
    cfg = make_config("tiny", obs_dim=5, action_dim=2)
    assert hash(cfg) == hash(dataclasses.replace(cfg))
    f = jax.jit(lambda x, c: x * c.horizon, static_argnums=1)
    assert int(f(2, cfg)) == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.horizon = 5  # type: ignore[misc]
