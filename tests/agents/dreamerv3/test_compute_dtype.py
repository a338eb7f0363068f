"""DreamerV3's compute dtype (dreamerv3_spec 1.12, deviation D4): the config field and
its "auto" resolution, and a tiny bfloat16 training and policy step that runs, is
finite, keeps parameters, gradients, optimizer and normaliser state, distributions and
losses in float32 and computes matmuls, activations and the RSSM state in bfloat16."""
from __future__ import annotations

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent
from wmx.agents.dreamerv3 import config as config_lib
from wmx.agents.dreamerv3.actor_critic import actor_dist, critic_logits
from wmx.agents.dreamerv3.config import DreamerV3Config, auto_compute_dtype, make_config
from wmx.agents.dreamerv3.loss import draw_train_noise
from wmx.agents.dreamerv3.train import train_step_full
from wmx.envs.registry import get_task

TASK = get_task("probe-action").replace(T=12)          # O = 2, A = 2
BF16, F32 = jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32)


# ---- the config field ------------------------------------------------------------------
def test_auto_resolves_by_backend(monkeypatch):
    assert auto_compute_dtype("cpu") == "float32"
    assert {auto_compute_dtype(b) for b in ("tpu", "gpu", "cuda", "rocm")} == {"bfloat16"}
    raw = DreamerV3Config(obs_dim=3, action_dim=2)
    assert raw.compute_dtype == "auto" and not raw.is_resolved
    monkeypatch.setattr(config_lib.jax, "default_backend", lambda: "cpu")
    assert raw.resolved().compute_dtype == "float32" and raw.dtype == F32
    for preset in ("cpu", "tiny"):
        assert make_config(preset, obs_dim=3, action_dim=2).compute_dtype == "float32"
    assert make_config("paper", obs_dim=3, action_dim=2).compute_dtype == "bfloat16"
    monkeypatch.setattr(config_lib.jax, "default_backend", lambda: "tpu")
    assert raw.resolved().compute_dtype == "bfloat16" and raw.dtype == BF16
    assert make_config("cpu", obs_dim=3, action_dim=2).compute_dtype == "bfloat16"
    assert make_config("cpu", obs_dim=3, action_dim=2,
                       compute_dtype="float32").compute_dtype == "float32"


def test_overrides_and_bad_values():
    c = agent.make_config("cpu", {"compute_dtype": "bfloat16"}, task=TASK)
    assert c.compute_dtype == "bfloat16" and c.is_resolved and c.dtype == BF16
    with pytest.raises(ValueError) as e:
        agent.make_config("tiny", {"compute_dtype": "float16"}, task=TASK)
    msg = str(e.value)
    assert "\n" not in msg and "compute_dtype='float16'" in msg
    assert "float32, bfloat16, auto" in msg
    with pytest.raises(ValueError, match="compute_dtype=16: takes a string"):
        agent.make_config("tiny", {"compute_dtype": 16}, task=TASK)


# ---- a bfloat16 training step -------------------------------------------------------------
def _batch(cfg, key):
    B, L = cfg.batch_size, cfg.seq_length
    k = jax.random.split(key, 5)
    return {"obs": jax.random.normal(k[0], (B, L, cfg.obs_dim)),
            "action": jnp.tanh(jax.random.normal(k[1], (B, L, cfg.action_dim))),
            "reward": jax.random.normal(k[2], (B, L)),
            "is_first": jax.random.uniform(k[3], (B, L)) < 0.1,
            "is_last": jnp.zeros((B, L), bool),
            "is_terminal": jax.random.uniform(k[4], (B, L)) < 0.05}


def _step(state, seq, noise, cfg):
    return train_step_full(state, seq, noise, cfg)


@pytest.fixture(scope="module")
def steps():
    """The same tiny step (params, batch, draws) in bfloat16 and in float32; the state
    after one warm-up update, so that the Adam moments and the optimizer count are
    not zero."""
    out = {}
    for dt in ("bfloat16", "float32"):
        cfg = agent.make_config("tiny", {"compute_dtype": dt}, task=TASK)
        state = jax.jit(agent.init, static_argnums=1)(jax.random.key(0), cfg)
        seq = agent.window_sequence(_batch(cfg, jax.random.key(1)), cfg)
        B, T = seq.reward.shape
        step = jax.jit(_step, static_argnums=3)
        noise0, noise1 = (draw_train_noise(jax.random.key(k), cfg, B, T) for k in (2, 3))
        state = step(state, seq, noise0, cfg)[0]
        res = step(state, seq, noise1, cfg)
        jaxpr = jax.make_jaxpr(_step, static_argnums=3)(state, seq, noise1, cfg)
        out[dt] = {"cfg": cfg, "state": state, "res": res, "jaxpr": jaxpr}
    return out


def _float_dtypes(tree):
    return {jnp.dtype(x.dtype) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.floating)}


def _dots(jaxpr):
    """The input dtypes of every dot_general of a (closed) jaxpr, sub-jaxprs included."""
    found = []

    def walk(jp):
        for eqn in jp.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(tuple(jnp.dtype(v.aval.dtype) for v in eqn.invars))
            for sub in jex.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return found


def test_bf16_step_runs_finite_and_keeps_the_f32_pieces(steps):
    st = steps["bfloat16"]
    cfg = st["cfg"]
    new, metrics, outs, grads, aux = st["res"]
    assert np.isfinite(float(outs.loss)) and aux.losses["vector"].dtype == F32
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree.leaves(grads))
    assert all(np.isfinite(float(metrics[k])) for k in agent.METRIC_KEYS)
    # float32: parameters, gradients, optimizer state, normaliser, slow critic
    for tree in (st["state"], new, grads):
        assert _float_dtypes(tree) == {F32}
    assert jnp.dtype(outs.loss.dtype) == F32
    assert _float_dtypes(aux.losses) == {F32}
    ac = aux.ac
    assert _float_dtypes((ac.ret, ac.value, ac.slowvalue, ac.weight, ac.adv, ac.entropy,
                          ac.logp, ac.retnorm, ac.reward, ac.cont, aux.replay_ret,
                          aux.wm.reward_mean, aux.wm.cont_logit, aux.wm.post_ent)) == {F32}
    # distribution parameters: float32 from bfloat16 features
    pol = actor_dist(new.params["actor"], cfg, aux.imag.feat)
    assert _float_dtypes((pol, critic_logits(new.params["critic"], cfg, aux.imag.feat))) \
        == {F32}
    # bfloat16: activations, the RSSM state and logits, imagined states and actions
    assert _float_dtypes((aux.wm.embed, aux.wm.post, aux.wm.carry.deter, aux.wm.carry.stoch,
                          aux.imag)) == {BF16}
    # the latents given back for the replay: float32, exactly the bfloat16 values
    assert _float_dtypes((outs.deter, outs.stoch, outs.carry)) == {F32}
    np.testing.assert_array_equal(outs.deter, np.asarray(aux.wm.post.deter, np.float32))
    # every matmul of the step (forward and gradient) takes bfloat16 inputs
    dots = _dots(st["jaxpr"])
    assert dots and set(dots) == {(BF16, BF16)}


def test_f32_step_has_no_bf16_and_agrees_with_bf16(steps):
    """float32 stays float32 throughout (no bfloat16 value in its program); the bfloat16
    step computes the same quantities, to bfloat16's precision."""
    f32, b16 = steps["float32"], steps["bfloat16"]
    assert "bf16" not in str(f32["jaxpr"]) and "bf16" in str(b16["jaxpr"])
    assert set(_dots(f32["jaxpr"])) == {(F32, F32)}
    l32 = {k: float(jnp.mean(v)) for k, v in f32["res"][4].losses.items()}
    l16 = {k: float(jnp.mean(v)) for k, v in b16["res"][4].losses.items()}
    for k in ("vector", "reward", "cont", "dyn", "rep", "critic", "replay_critic"):
        assert l16[k] == pytest.approx(l32[k], rel=1e-2, abs=1e-4), k
    assert l16 != l32                      # the dtype reaches the numbers


def test_bf16_policy_step(steps):
    st = steps["bfloat16"]
    cfg, params = st["cfg"], st["state"].params
    n = 5
    obs = jax.random.normal(jax.random.key(7), (n, cfg.obs_dim))
    first = jnp.array([True, False, True, False, True])

    def act(carry, key):
        return agent.policy(params, cfg, carry, obs, first, key, eval_mode=False)

    carry = agent.init_policy(cfg, n)
    (carry, action, entries) = jax.jit(act)(carry, jax.random.key(8))
    carry, action, entries = jax.jit(act)(carry, jax.random.key(9))
    assert _float_dtypes((carry, action, entries)) == {F32}
    assert np.isfinite(np.asarray(action)).all() and np.abs(np.asarray(action)).max() <= 1.0
    deter = np.asarray(carry.deter)        # computed in bfloat16, kept in float32 (exact)
    np.testing.assert_array_equal(deter, deter.astype(jnp.bfloat16).astype(np.float32))
    dots = _dots(jax.make_jaxpr(act)(carry, jax.random.key(9)))
    assert dots and set(dots) == {(BF16, BF16)}
