"""DreamerV3 parameters: the one-to-one name map onto the reference's state
(train.npz), parameter counts, and the initialisation (dreamerv3_spec 1.5)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3.config import make_config
from wmx.agents.dreamerv3.params import (MODULES, WORLD_MODEL, init_params, param_counts,
                                         param_shapes)
from wmx.agents.dreamerv3.reference_params import (from_reference_params, reference_names,
                                                   slow_critic_from_reference,
                                                   to_reference_params,
                                                   trained_reference_names)


@pytest.fixture(scope="module")
def ref_state(train_fx):
    pre = "init/call0/before/state/"
    return {k[len(pre):]: train_fx[k] for k in train_fx if k.startswith(pre)}


_init = jax.jit(init_params, static_argnums=1)


@pytest.fixture(scope="module")
def init(ref_cfg, tiny_cfg, tiny_params):
    """The "tiny" preset has the fixture's sizes, so its params serve for ref_cfg."""
    assert param_shapes(tiny_cfg) == param_shapes(ref_cfg)
    assert (tiny_cfg.batch_size, tiny_cfg.batch_length, tiny_cfg.imag_horizon) == (
        ref_cfg.batch_size, ref_cfg.batch_length, ref_cfg.imag_horizon)
    return tiny_params


def test_names_and_shapes_map_one_to_one_onto_the_reference(ref_state, ref_cfg, init):
    """Every wmx leaf has one reference name with the same shape, and every trained
    reference parameter (the fixture README's list) is one wmx leaf."""
    names = reference_names(init)
    assert len(set(names.values())) == len(names)  # injective
    trained = trained_reference_names(ref_state)
    assert set(names.values()) == trained
    for (m, l, f), n in names.items():
        assert init[m][l][f].shape == ref_state[n].shape, n
        assert init[m][l][f].dtype == jnp.float32
    slow = {k for k in ref_state if k.startswith("agent/slowcritic/")}
    assert {n.replace("agent/critic/", "agent/slowcritic/") for n in names.values()
            if n.startswith("agent/critic/")} == slow


def test_reference_round_trip(ref_state, ref_cfg):
    params = from_reference_params(ref_state, ref_cfg)
    slow = slow_critic_from_reference(ref_state, ref_cfg)
    back = to_reference_params(params, slow_critic=slow)
    want = trained_reference_names(ref_state) | {k for k in ref_state
                                                 if k.startswith("agent/slowcritic/")}
    assert set(back) == want
    for k, v in back.items():
        np.testing.assert_array_equal(v, ref_state[k])
    assert set(params) == set(MODULES)


def test_from_reference_params_names_missing_and_misshaped_entries(ref_state, ref_cfg):
    missing = {k: v for k, v in ref_state.items() if k != "agent/dyn/dyncore/kernel"}
    with pytest.raises(KeyError, match="agent/dyn/dyncore/kernel"):
        from_reference_params(missing, ref_cfg)
    bad = dict(ref_state)
    bad["agent/actor/h1/bias"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="agent/actor/h1/bias"):
        from_reference_params(bad, ref_cfg)


def test_tiny_count_equals_the_reference_optimizer_count(train_fx, ref_cfg):
    assert param_counts(ref_cfg)["total"] == int(train_fx["init/call0/metrics/opt_param_count"])


def _formula(d, obs, act, g=8, S=32, K=256):
    """Per-layer sums for the presets (d = units = hidden, D = 8d, C = d/16)."""
    D, C = 8 * d, d // 16
    F = D + S * C
    lin = lambda i, o, norm=True: i * o + o + (o if norm else 0)  # noqa: E731
    hid = lambda i, n: lin(i, d) + (n - 1) * lin(d, d)  # noqa: E731
    rssm = (lin(D, d) + lin(S * C, d) + lin(act, d)
            + (D + 3 * g * d) * D // g + 2 * D + 3 * D * D // g + 3 * D
            + lin(D, d) + lin(d, d) + lin(d, S * C, False)
            + lin(D + d, d) + lin(d, S * C, False))
    counts = {"enc": hid(obs, 3), "rssm": rssm, "dec": hid(F, 3) + lin(d, obs, False),
              "rew": hid(F, 1) + lin(d, K, False), "con": hid(F, 1) + lin(d, 1, False),
              "actor": hid(F, 3) + 2 * lin(d, act, False), "critic": hid(F, 3) + lin(d, K, False)}
    counts["total"] = sum(counts.values())
    return counts


@pytest.mark.parametrize("size,d,total", [("1m", 64, 640_997), ("12m", 256, 9_738_533)])
def test_preset_counts(size, d, total):
    """Pinned for a walker-sized task (obs 24, action 6), and equal to the per-layer
    formula. The reference's size names count more inputs (CNN, larger obs)."""
    cfg = make_config("paper", obs_dim=24, action_dim=6, model_size=size)
    counts = param_counts(cfg)
    assert counts == _formula(d, 24, 6)
    assert counts["total"] == total


def test_init_values(init, ref_cfg):
    """Zero biases, unit norm scales, zero reward/critic outputs; kernel std
    outscale / sqrt(fan_in) with fan_in the total input width for block kernels."""
    for m in MODULES:
        for layer, p in init[m].items():
            assert not np.any(np.asarray(p["bias"])), (m, layer)
            if "norm_scale" in p:
                np.testing.assert_array_equal(np.asarray(p["norm_scale"]), 1.0)
    for m in ("rew", "critic"):
        assert not np.any(np.asarray(init[m]["out"]["kernel"]))
    assert init["rew"]["out"]["kernel"].shape[-1] == 256
    cfg = make_config("cpu", obs_dim=24, action_dim=6)
    p = _init(jax.random.key(1), cfg)

    def std_ratio(kernel, fan_in, outscale):
        return float(np.std(np.asarray(kernel)) * np.sqrt(fan_in) / outscale)

    D, d = cfg.deter, cfg.units
    assert std_ratio(p["rssm"]["hid0"]["kernel"], D + 24 * d, 1.0) == pytest.approx(1, abs=0.02)
    assert std_ratio(p["rssm"]["gates"]["kernel"], D, 1.0) == pytest.approx(1, abs=0.02)
    assert std_ratio(p["dec"]["out"]["kernel"], d, 0.1) == pytest.approx(1, abs=0.15)
    assert std_ratio(p["actor"]["mean"]["kernel"], d, 0.01) == pytest.approx(1, abs=0.2)
    assert std_ratio(p["enc"]["h1"]["kernel"], d, 1.0) == pytest.approx(1, abs=0.05)
    assert float(np.max(np.abs(np.asarray(p["enc"]["h1"]["kernel"])))) <= 2.0 * 1.1369 / 8
    assert set(WORLD_MODEL) < set(p)
