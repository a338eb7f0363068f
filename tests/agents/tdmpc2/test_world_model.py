"""TD-MPC2 world model: parameter counts (spec 1.24), init (1.13), forward pieces."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wmx.nn.rbg_bits as rbg
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import TDMPC2Config, make_config
from wmx.paths import shared_dir


def _shapes_params(cfg):
    return jax.eval_shape(lambda: wm.init_params(jax.random.key(0), cfg))


def test_param_counts_walker_5m():
    cfg = TDMPC2Config(obs_dim=24, action_dim=6)
    c = wm.param_count(_shapes_params(cfg))
    assert c == {"encoder": 139_520, "dynamics": 794_112, "reward": 582_245, "pi": 533_516,
                 "qs": 2_911_225, "total": 4_960_618}


def test_param_counts_dog_5m():
    cfg = TDMPC2Config(obs_dim=223, action_dim=38)
    assert wm.param_count(_shapes_params(cfg))["total"] == 5_159_082


def test_param_counts_mt_reference_without_embedding():
    # spec 1.24 MT reference: S=39, task_dim=96, A=6 -> total 5,389,930 incl. 7,680 embedding.
    cfg = TDMPC2Config(obs_dim=39, action_dim=6, num_tasks=80, task_dim=96)
    c = wm.param_count(_shapes_params(cfg))
    assert (c["encoder"], c["dynamics"], c["reward"], c["pi"], c["qs"]) == (
        167_936, 843_264, 631_397, 582_668, 3_156_985)
    assert c["task_emb"] == 80 * 96 and c["total"] == 5_389_930  # embedding counted (1.24)


@pytest.fixture(scope="module")
def cpu_params():
    cfg = make_config("cpu", obs_dim=24, action_dim=6, num_q=5)
    return cfg, jax.jit(wm.init_params, static_argnums=1)(jax.random.key(3), cfg)


def test_init_statistics(cpu_params):
    cfg, p = cpu_params
    w = np.asarray(p["dynamics"]["layer0"]["kernel"])
    assert abs(w.std() - 0.02) < 0.001 and abs(w.mean()) < 0.001
    assert np.abs(w).max() > 0.04  # normal(0.02), not truncated at +-2 sigma
    for mod in ("encoder", "dynamics", "reward", "pi", "qs"):
        for layer in p[mod].values():
            assert not np.any(np.asarray(layer["bias"]))
            if "ln_scale" in layer:
                assert np.all(np.asarray(layer["ln_scale"]) == 1)
                assert not np.any(np.asarray(layer["ln_bias"]))
    assert not np.any(np.asarray(p["reward"]["layer2"]["kernel"]))
    assert not np.any(np.asarray(p["qs"]["layer2"]["kernel"]))
    assert np.any(np.asarray(p["pi"]["layer2"]["kernel"]))
    k0 = np.asarray(p["qs"]["layer0"]["kernel"])
    assert k0.shape == (5, 64 + 6, 256)
    for i in range(5):
        for j in range(i):
            assert not np.allclose(k0[i], k0[j])
    for a, b in zip(jax.tree.leaves(p["qs"]), jax.tree.leaves(p["target_qs"])):
        np.testing.assert_array_equal(a, b)


def test_forward_shapes_simnorm_and_zero_heads(cpu_params):
    cfg, p = cpu_params
    obs = jax.random.normal(jax.random.key(1), (3, 7, 24))
    a = jax.random.uniform(jax.random.key(2), (3, 7, 6), minval=-1, maxval=1)
    z = wm.encode(p, obs, cfg)
    assert z.shape == (3, 7, 64)
    np.testing.assert_allclose(z.reshape(3, 7, 8, 8).sum(-1), 1.0, rtol=1e-5)
    z2 = wm.next_latent(p, z, a, cfg)
    np.testing.assert_allclose(z2.reshape(3, 7, 8, 8).sum(-1), 1.0, rtol=1e-5)
    r = wm.reward_logits(p, z, a, cfg)
    q = wm.q_logits(p["qs"], z, a, cfg)
    assert r.shape == (3, 7, 101) and q.shape == (5, 3, 7, 101)
    assert np.all(np.asarray(wm.twohot(cfg).decode(q)) == 0.0)
    pair = jnp.array([3, 1])
    v = wm.q_pair_values(p["qs"], pair, z, a, cfg)
    assert v.shape == (2, 3, 7)


def test_q_dropout_masks_differ_per_member(cpu_params):
    cfg, p = cpu_params
    # identical members: any difference between members comes from the masks
    same = jax.tree.map(lambda x: jnp.broadcast_to(x[:1], x.shape), p["qs"])
    same["layer2"]["kernel"] = jnp.ones_like(same["layer2"]["kernel"]) * 0.01
    z = jnp.ones((4, 64)) / 8
    a = jnp.zeros((4, 6))
    det = wm.q_logits(same, z, a, cfg)
    np.testing.assert_allclose(det[0], det[1], rtol=1e-6)
    drop = wm.q_logits(same, z, a, cfg, dropout_key=jax.random.key(0))
    assert not np.allclose(drop[0], drop[1])
    # pair helper reuses member k's key
    pv = wm.q_pair_values(same, jnp.array([2, 4]), z, a, cfg, dropout_key=jax.random.key(0))
    full = wm.twohot(cfg).decode(drop)
    np.testing.assert_allclose(pv, full[jnp.array([2, 4])], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mlp_dim", [256, 512])
def test_q_dropout_masks_shared_loop_equals_one_loop_per_member(mlp_dim):
    """The members' masks of one pass, drawn in one shared Philox loop, equal each
    member's own `q_dropout_mask` and jax.random.bernoulli on each member's rbg key."""
    cfg = make_config("paper", model_size=1, obs_dim=5, action_dim=2, mlp_dim=mlp_dim)
    key = jax.random.key(3)
    members = [0, 1, 3]
    got = np.asarray(wm.q_dropout_masks(key, members, (7, 3), cfg))
    assert got.shape == (3, 7, 3, mlp_dim)
    for i, m in enumerate(members):
        seed = jax.random.bits(jax.random.fold_in(key, m), (4,), jnp.uint32)
        want = jax.random.bernoulli(jax.random.wrap_key_data(seed, impl="rbg"),
                                    1.0 - cfg.dropout, (7, 3, mlp_dim))
        np.testing.assert_array_equal(got[i], np.asarray(want))
        np.testing.assert_array_equal(np.asarray(wm.q_dropout_mask(key, m, (7, 3), cfg)),
                                      got[i])
    assert 0.95 < got.mean() < 1.0       # keep probability 1 - 0.01
    with pytest.raises(ValueError, match="at least one Q member"):
        wm.q_dropout_masks(key, [], (7, 3), cfg)


def test_q_dropout_masks_in_the_tpu_layout_are_the_same(monkeypatch):
    """The masks of a program traced as on a TPU ("auto" taken as "planar_matmul", forced
    here) equal the CPU's, jitted and vmapped over seeds as the trainers draw them, with
    no interleave (u32[..., 4]) in that program."""
    cfg = make_config("paper", obs_dim=5, action_dim=2)           # mlp_dim 512, 5 Qs
    keys = jax.random.split(jax.random.key(5), 3)
    draw = lambda k: wm.q_dropout_masks(k, [0, 1, 2, 3, 4], (3, 16), cfg)  # noqa: E731
    interleave = re.compile(r"u32\[[\d,]*,4\] = transpose")
    want = jax.jit(jax.vmap(draw))(keys)
    monkeypatch.setattr(rbg, "_auto_layout", lambda: "planar_matmul")
    got = jax.jit(jax.vmap(lambda k: draw(k)))(keys)              # a new trace
    assert got.shape == (3, 5, 3, 16, 512)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert not interleave.search(str(jax.make_jaxpr(jax.vmap(draw))(keys)))
    monkeypatch.setattr(rbg, "_auto_layout", lambda: "interleave")
    assert interleave.search(str(jax.make_jaxpr(jax.vmap(draw))(keys)))


def test_pi_forward_pe_worked_example():
    # shared_blocks B12 T2 worked example through the head's last layer.
    cfg = TDMPC2Config(obs_dim=3, action_dim=2, latent_dim=8, mlp_dim=4, enc_dim=4)
    p = wm.init_params(jax.random.key(0), cfg)
    # make the pi output exactly [mu, raw] = [0.1, -0.2, 0, 1] for any input
    p["pi"]["layer2"]["kernel"] = jnp.zeros_like(p["pi"]["layer2"]["kernel"])
    p["pi"]["layer2"]["bias"] = jnp.array([0.1, -0.2, 0.0, 1.0])
    out = wm.pi_forward(p, jnp.ones((8,)) / 8, jnp.array([0.5, -1.0]), cfg)
    np.testing.assert_allclose(out.log_std, [-4.0, 0.5695648], rtol=1e-6)
    np.testing.assert_allclose(out.action, [0.10872632, -0.9616578], rtol=1e-6)
    np.testing.assert_allclose(out.mean, np.tanh([0.1, -0.2]), rtol=1e-6)
    np.testing.assert_allclose(out.log_pi, [6.372286], rtol=1e-6)
    # a full mask reproduces the unmasked output; a partial mask zeroes invalid dims
    full = wm.pi_forward(p, jnp.ones((8,)) / 8, jnp.array([0.5, -1.0]), cfg,
                         mask=jnp.ones(2))
    np.testing.assert_allclose(full.log_pi, out.log_pi, rtol=1e-6)
    half = wm.pi_forward(p, jnp.ones((8,)) / 8, jnp.array([0.5, -1.0]), cfg,
                         mask=jnp.array([1.0, 0.0]))
    assert half.action[1] == 0.0 and half.mean[1] == 0.0 and half.log_std[1] == 0.0
    # n = 1: 1 * ((-0.125 + 4) - 0.9189385) - squash(dim 0) - log(1 + 1e-6)
    expect = (3.875 - 0.9189385175704956) - np.log(1 - 0.10872632 ** 2 + 1e-6) - np.log(1 + 1e-6)
    np.testing.assert_allclose(half.log_pi, [expect], rtol=1e-6)


def test_task_embedding_concatenation_order():
    cfg = TDMPC2Config(obs_dim=3, action_dim=2, latent_dim=8, mlp_dim=4, enc_dim=4,
                       num_tasks=2, task_dim=5)
    p = wm.init_params(jax.random.key(0), cfg)
    assert p["encoder"]["layer0"]["kernel"].shape == (3 + 5, 4)
    assert p["dynamics"]["layer0"]["kernel"].shape == (8 + 5 + 2, 4)
    assert p["pi"]["layer0"]["kernel"].shape == (8 + 5, 4)
    e = jax.random.normal(jax.random.key(1), (6, 5))
    z = wm.encode(p, jnp.ones((4, 6, 3)), cfg, e=e)  # e broadcast over the time axis
    assert z.shape == (4, 6, 8)
    # [z, e, a]: the rows of the first kernel that read e are rows L..L+task_dim
    p2 = jax.tree.map(lambda x: x, p)
    k = p2["dynamics"]["layer0"]["kernel"]
    p2["dynamics"]["layer0"]["kernel"] = k.at[8:13].set(0.0)
    z1 = wm.next_latent(p2, z[0], jnp.zeros((6, 2)), cfg, e=e)
    z0 = wm.next_latent(p2, z[0], jnp.zeros((6, 2)), cfg, e=jnp.zeros((6, 5)))
    np.testing.assert_allclose(z1, z0, rtol=1e-6)


def test_reference_state_dict_roundtrip_and_forward():
    d = np.load(shared_dir() / "fixtures/tdmpc2/update_q5.npz")
    sd = {k[len("call0/params/"):]: d[k] for k in d.files if k.startswith("call0/params/")}
    cfg = TDMPC2Config(obs_dim=7, action_dim=3, enc_dim=11, mlp_dim=13, latent_dim=16,
                       num_enc_layers=2, num_q=5, dropout=0.0)
    p = wm.from_reference_state_dict(sd, cfg)
    back = wm.to_reference_state_dict(p)
    assert set(back) == set(sd)
    for k in sd:
        np.testing.assert_array_equal(back[k], sd[k])
    with jax.default_matmul_precision("highest"):
        nz = wm.encode(p, jnp.asarray(d["call0/batch/obs"][1:]), cfg)
        pi = wm.pi_forward(p, nz, jnp.asarray(d["call0/draws/00_td_target_pi_eps"]), cfg)
    np.testing.assert_allclose(nz, d["call0/inter/update/next_z"], atol=2e-5)
    np.testing.assert_allclose(pi.action, d["call0/inter/td_target/pi_action"], atol=2e-5)
    np.testing.assert_allclose(pi.mean, d["call0/inter/td_target/pi_mu"], atol=2e-5)
    np.testing.assert_allclose(pi.log_std, d["call0/inter/td_target/pi_log_std"], atol=2e-5)
    np.testing.assert_allclose(pi.log_pi, d["call0/inter/td_target/pi_log_prob"], atol=2e-5)
    bad = dict(sd)
    bad["_pi.2.weight"] = np.zeros((5, 13), np.float32)
    with pytest.raises(ValueError, match="pi"):
        wm.from_reference_state_dict(bad, cfg)
