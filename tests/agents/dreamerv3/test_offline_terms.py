"""DreamerV3's offline terms against model exploitation (wmx extensions, deviations W-D10
and W-D11; `wmx.agents.dreamerv3.offline`): off by default and then absent from the
training step; each term's sign and scale on a hand-made case; what each trains; the
config fields through validation, config.json, the run hashes and ``--resume``.

One jitted training step (`train.train_step_full`, tiny preset, float32) per config:
off, behaviour cloning on, the ensemble trained without and with its penalty.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent, offline
from wmx.agents.dreamerv3.ac_loss import imagination_loss, imagine, retnorm
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.loss import TERMS, draw_train_noise, loss_terms, sequence_carry
from wmx.agents.dreamerv3.params import MODULES, modules
from wmx.agents.dreamerv3.train import TrainState, optimizer, train_step_full
from wmx.agents.dreamerv3.wm_loss import world_model_loss
from wmx.envs.registry import get_task

TASK = get_task("probe-action").replace(T=12)        # O = 2, A = 2
OFFLINE_FIELDS = ("offline_bc_weight", "offline_ensemble", "offline_penalty_weight")
BC, K, LAM = 0.7, 3, 2.0


def _cfg(**over) -> DreamerV3Config:
    return agent.make_config("tiny", {"compute_dtype": "float32", "warmup": 0, **over},
                             task=TASK)


def _batch(cfg, key=jax.random.key(1)):
    """A window batch [B, batch_length + 1]: random obs, actions in [-1, 1] (0 on the
    episode's last row, as the dataset stores it), rewards; one episode end."""
    B, L = cfg.batch_size, cfg.seq_length
    k = jax.random.split(key, 3)
    is_last = jnp.zeros((B, L), bool).at[:, 4].set(True)
    is_first = jnp.zeros((B, L), bool).at[:, 5].set(True)
    action = jax.random.uniform(k[1], (B, L, cfg.action_dim), minval=-1, maxval=1)
    return {"obs": jax.random.normal(k[0], (B, L, cfg.obs_dim)),
            "action": jnp.where(is_last[..., None], 0.0, action),
            "reward": jax.random.uniform(k[2], (B, L)), "is_first": is_first,
            "is_last": is_last, "is_terminal": jnp.zeros((B, L), bool)}


def _with_ensemble(state: TrainState, cfg) -> TrainState:
    """``state`` (a config without the ensemble) with fresh ensemble heads added: the same
    parameters for every other module, zero optimizer state for the heads."""
    fresh = agent.init(jax.random.key(7), cfg)
    params = {**state.params, "rew_ens": fresh.params["rew_ens"]}
    return TrainState(params, state.slow_critic, optimizer(cfg).init(params),
                      state.retnorm, state.updates)


@pytest.fixture(scope="module")
def runs():
    """{name: (cfg, state before, (state, metrics, outs, grads, aux) after one step)} for
    off / bc / ens (penalty 0) / pen, all from the same parameters and draws."""
    step = jax.jit(train_step_full, static_argnums=3)
    cfgs = {"off": _cfg(), "bc": _cfg(offline_bc_weight=BC), "ens": _cfg(offline_ensemble=K),
            "pen": _cfg(offline_ensemble=K, offline_penalty_weight=LAM)}
    state = agent.init(jax.random.key(0), cfgs["off"])
    out = {}
    for name, c in cfgs.items():
        st = _with_ensemble(state, c) if c.offline_ensemble else state
        seq = agent.window_sequence(_batch(c), c)
        noise = draw_train_noise(jax.random.key(3), c, c.batch_size, c.batch_length)
        with jax.default_matmul_precision("highest"):
            out[name] = (c, st, seq, step(st, seq, noise, c))
    return out


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b), strict=True))


# ---- off: the reference's step ---------------------------------------------------------
def test_off_by_default_and_absent_from_the_step():
    """The fields default to 0; at 0 (given or not) the config, the parameters, the loss
    terms and the step's program are the reference's (the parity tests run that program)."""
    base = DreamerV3Config(obs_dim=2, action_dim=2)
    assert (base.offline_bc_weight, base.offline_ensemble, base.offline_penalty_weight) == \
        (0.0, 0, 0.0)
    assert not base.offline_bc and not base.offline_penalty
    off = _cfg()
    zeros = _cfg(offline_bc_weight=0.0, offline_ensemble=0, offline_penalty_weight=0.0)
    assert zeros == off and hash(zeros) == hash(off)
    assert modules(off) == MODULES and loss_terms(off) == TERMS
    state = agent.init(jax.random.key(0), off)
    assert set(state.params) == set(MODULES)
    seq = agent.window_sequence(_batch(off), off)
    noise = draw_train_noise(jax.random.key(3), off, off.batch_size, off.batch_length)

    def jaxpr(c):
        return str(jax.make_jaxpr(lambda st, sq, nz: train_step_full(st, sq, nz, c))(
            state, seq, noise))
    text = jaxpr(off)
    assert text == jaxpr(zeros)
    # the ensemble's parameters enter the program only when the ensemble exists
    assert "rew_ens" not in str(jax.tree_util.tree_structure(state))


def test_step_metrics_name_the_terms_only_when_on(runs):
    names = {k: {m for m in r[3][1] if "offline" in m} for k, r in runs.items()}
    assert names["off"] == set()
    assert names["bc"] == {"offline_bc_loss", "offline_bc_loss_std"}
    assert names["ens"] == {"offline_ensemble_loss", "offline_ensemble_loss_std"}
    assert names["pen"] == names["ens"] | {f"offline_penalty/{s}" for s in
                                           ("mean", "std", "mag", "min", "max", "dist")}
    assert not set().union(*names.values()) & set(agent.METRIC_KEYS)  # metrics.csv unchanged


# ---- W-D10: behaviour cloning ----------------------------------------------------------
def _actor_with_outputs(cfg, mean_out, std_out):
    """Actor params whose outputs are constants: zero output kernels, biases mean_out and
    std_out f32[A], so π(· | x) = N(tanh(mean_out), (maxstd − minstd) σ(std_out + 2) +
    minstd) at every x."""
    p = agent.init(jax.random.key(2), cfg).params["actor"]
    for name, bias in (("mean", mean_out), ("std", std_out)):
        p[name] = {"kernel": jnp.zeros_like(p[name]["kernel"]),
                   "bias": jnp.asarray(bias, jnp.float32)}
    return p


def test_bc_nll_is_the_hand_computed_negative_log_likelihood():
    cfg = _cfg(offline_bc_weight=1.0)
    mean_out, std_out = np.array([0.3, -1.2]), np.array([-1.0, 0.5])
    actor = _actor_with_outputs(cfg, mean_out, std_out)
    m = np.tanh(mean_out)
    s = (cfg.maxstd - cfg.minstd) / (1 + np.exp(-(std_out + 2))) + cfg.minstd
    a = np.array([[0.9, -0.5], [-0.2, 0.1], [0.0, 0.0]], np.float32)
    x = jax.random.normal(jax.random.key(4), (3, cfg.feat_dim))
    per_dim = 0.5 * ((a - m) / s) ** 2 + np.log(s) + 0.5 * math.log(2 * math.pi)
    got = offline.bc_nll(actor, cfg, x, jnp.asarray(a), jnp.array([1.0, 1.0, 0.0]))
    np.testing.assert_allclose(np.asarray(got), [*per_dim[:2].sum(1), 0.0], rtol=1e-6)
    # multi-task: only the task's action dims count (W-D8); a padded dim changes nothing
    mask = jnp.array([[1.0, 0.0]] * 3)
    got = offline.bc_nll(actor, cfg, x, jnp.asarray(a), jnp.ones(3), mask)
    np.testing.assert_allclose(np.asarray(got), per_dim[:, 0], rtol=1e-6)
    moved = offline.bc_nll(actor, cfg, x, jnp.asarray(a).at[:, 1].set(0.77), jnp.ones(3), mask)
    np.testing.assert_array_equal(np.asarray(moved), np.asarray(got))


def test_bc_gradient_pulls_the_mean_to_the_data_action():
    """d(−log π)/d(mean bias) = −(a − m)/s² · (1 − m²): descending it moves the policy's
    mean toward the dataset's action, in proportion to the distance."""
    cfg = _cfg(offline_bc_weight=1.0)
    mean_out, std_out = np.array([0.3, -1.2]), np.array([-1.0, 0.5])
    actor = _actor_with_outputs(cfg, mean_out, std_out)
    a = jnp.array([[0.9, -0.5]])
    x = jnp.zeros((1, cfg.feat_dim))
    g = jax.grad(lambda p: offline.bc_nll(p, cfg, x, a, jnp.ones(1)).sum())(actor)
    m = np.tanh(mean_out)
    s = (cfg.maxstd - cfg.minstd) / (1 + np.exp(-(std_out + 2))) + cfg.minstd
    want = -(np.asarray(a[0]) - m) / s ** 2 * (1 - m ** 2)
    np.testing.assert_allclose(np.asarray(g["mean"]["bias"]), want, rtol=1e-5)
    assert np.all(np.sign(np.asarray(g["mean"]["bias"])) == -np.sign(np.asarray(a[0]) - m))
    # the features are stop-gradiented: the term trains the actor, not the world model
    gx = jax.grad(lambda x: offline.bc_nll(actor, cfg, x, a, jnp.ones(1)).sum())(x + 1.0)
    np.testing.assert_array_equal(np.asarray(gx), 0.0)


def test_bc_in_the_step(runs):
    """The step's loss gains exactly offline_bc_weight · mean(bc_nll) of the starts and the
    dataset's actions (is_last rows masked); only the actor's gradient changes, by the
    gradient of that term; weight 0 is the off step, whose BC gradient is zero."""
    c_off, st, seq, (_, m_off, _, g_off, aux_off) = runs["off"]
    c, _, seq_bc, (_, m_bc, _, g_bc, aux) = runs["bc"]
    B, T = seq.reward.shape
    bc = aux.losses["offline_bc"]
    assert bc.shape == (B, T)
    np.testing.assert_array_equal(np.asarray(bc)[np.asarray(seq.is_last)], 0.0)
    want = offline.bc_nll(st.params["actor"], c, aux.imag.feat[:, 0],
                          seq.action.reshape(B * T, -1),
                          1.0 - seq.is_last.reshape(-1).astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(bc).reshape(-1), np.asarray(want), rtol=1e-6)
    np.testing.assert_allclose(float(m_bc["opt_loss"]),
                               float(m_off["opt_loss"]) + BC * float(jnp.mean(bc)), rtol=1e-5)
    for mod in MODULES:
        if mod != "actor":
            assert _same(g_bc[mod], g_off[mod]), mod

    def bc_mean(p):
        return jnp.mean(offline.bc_nll(p, c, aux.imag.feat[:, 0], seq.action.reshape(B * T, -1),
                                       1.0 - seq.is_last.reshape(-1).astype(jnp.float32)))
    g_term = jax.grad(bc_mean)(st.params["actor"])
    for got, base, term in zip(_leaves(g_bc["actor"]), _leaves(g_off["actor"]),
                               _leaves(g_term)):
        np.testing.assert_allclose(got, base + BC * term, rtol=1e-4,
                                   atol=1e-6 * np.abs(term).max())
    assert any(np.abs(t).max() > 0 for t in _leaves(g_term))
    g_zero = jax.grad(lambda p: 0.0 * bc_mean(p))(st.params["actor"])
    assert all(np.all(x == 0) for x in _leaves(g_zero))


def test_bc_multitask_ignores_padded_action_dims():
    """Multi-task (W-D8): the BC term sums over each row's task's action dims, so a padded
    action dimension of the data changes neither the term nor any gradient of the step."""
    from wmx.schemas.taskset import TaskInfo, TaskSet
    infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=20))
                  for t in ("cartpole-balance", "cheetah-run"))       # action dims 1, 6
    ts = TaskSet("mt", infos, (None, None), "none")
    cfg = agent.make_config("tiny", {"compute_dtype": "float32", "offline_bc_weight": BC},
                            taskset=ts)
    tasks = agent.task_context(cfg, ts)
    B, L = cfg.batch_size, cfg.seq_length
    batch = _batch(cfg)
    batch["task"] = jnp.repeat(jnp.arange(B) % 2, L).reshape(B, L)
    padded = (batch["task"] == 0)[..., None] & (jnp.arange(cfg.action_dim) >= 1)
    moved = {**batch, "action": jnp.where(padded, 0.77, batch["action"])}
    state = agent.init(jax.random.key(0), cfg)
    noise = draw_train_noise(jax.random.key(3), cfg, B, cfg.batch_length)
    step = jax.jit(lambda b: train_step_full(state, agent.window_sequence(b, cfg), noise, cfg,
                                             tasks))
    _, _, _, g, aux = step(batch)
    _, _, _, g_moved, aux_moved = step(moved)
    assert float(jnp.abs(moved["action"] - batch["action"]).max()) > 0.5
    np.testing.assert_array_equal(np.asarray(aux.losses["offline_bc"]),
                                  np.asarray(aux_moved.losses["offline_bc"]))
    assert _same(g, g_moved)


# ---- W-D11: ensemble disagreement --------------------------------------------------------
def test_penalty_is_weight_times_the_heads_std():
    r = jnp.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])      # K = 4 heads
    np.testing.assert_allclose(np.asarray(offline.disagreement_penalty(r, 2.0)),
                               [2.0 * math.sqrt(1.25), 0.0], rtol=1e-6)
    assert float(offline.disagreement_penalty(r, 0.0).sum()) == 0.0


def test_penalty_lowers_the_imagined_rewards_hand_made():
    """Heads with constant predictions r_k (zero kernels, biases chosen): every imagined
    reward r̂_1..r̂_H is lowered by exactly λ std_k r_k, the start's data reward is not."""
    c_off, c_pen = _cfg(offline_ensemble=K), _cfg(offline_ensemble=K, offline_penalty_weight=LAM)
    state = agent.init(jax.random.key(0), c_pen)
    ens = dict(state.params["rew_ens"])
    for k in range(K):
        head = dict(ens[f"e{k}"])
        bias = jnp.zeros_like(head["out"]["bias"]).at[130 + 10 * k].set(6.0)
        head["out"] = {"kernel": jnp.zeros_like(head["out"]["kernel"]), "bias": bias}
        ens[f"e{k}"] = head
    params = {**state.params, "rew_ens": ens}
    x = jax.random.normal(jax.random.key(5), (4, c_pen.feat_dim))
    r_k = np.asarray(offline.ensemble_rewards(ens, c_pen, x))           # [K, 4]
    assert np.ptp(r_k, axis=1).max() < 1e-6 and np.ptp(r_k[:, 0]) > 0.1   # constant, distinct
    want = LAM * np.std(r_k[:, 0])
    B, T = c_pen.batch_size, c_pen.batch_length
    seq = agent.window_sequence(_batch(c_pen), c_pen)
    noise = draw_train_noise(jax.random.key(3), c_pen, B, T)

    @jax.jit                                  # one program, not op by op (faster)
    def losses(params, seq, noise):
        wm = world_model_loss(params, c_pen, sequence_carry(seq), seq.obs, seq.action,
                              seq.reward, seq.is_first, seq.is_terminal, noise.post)
        imag = imagine(params, c_pen, wm.post, noise.start, noise.imag_prior, noise.imag_policy)
        r0, cont0 = seq.reward.reshape(-1), jnp.ones(B * T)
        return [imagination_loss(params, state.slow_critic, c, imag, r0, cont0,
                                 retnorm(c).init()) for c in (c_off, c_pen)]
    off, pen = losses(params, seq, noise)
    assert off.penalty is None
    np.testing.assert_allclose(np.asarray(pen.penalty), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(off.reward[:, 1:] - pen.reward[:, 1:]), want,
                               rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(pen.reward[:, 0]), np.asarray(off.reward[:, 0]))
    assert float(jnp.mean(pen.ret)) < float(jnp.mean(off.ret))


def test_the_ensemble_fits_the_rewards_without_training_the_world_model(runs):
    """Trained without its penalty, the ensemble changes nothing else: every other module's
    gradient is the off step's, bit for bit; its heads get their own two-hot gradients."""
    _, _, _, (_, _, _, g_off, _) = runs["off"]
    c, _, seq, (new, m, _, g_ens, aux) = runs["ens"]
    assert set(g_ens) == set(MODULES) | {"rew_ens"}
    for mod in MODULES:
        assert _same(g_ens[mod], g_off[mod]), mod
    assert aux.losses["offline_ensemble"].shape == seq.reward.shape
    outs = [np.abs(np.asarray(g_ens["rew_ens"][f"e{k}"]["out"]["kernel"])).max()
            for k in range(K)]
    assert min(outs) > 0
    # the heads' first-step gradients differ (their hidden layers were drawn apart)
    assert not np.array_equal(np.asarray(g_ens["rew_ens"]["e0"]["out"]["kernel"]),
                              np.asarray(g_ens["rew_ens"]["e1"]["out"]["kernel"]))
    assert "offline_penalty/mean" not in m


def test_the_penalty_acts_through_the_returns(runs):
    """With λ > 0 the penalty enters the returns only: the world model's own losses are
    those of λ = 0; the actor's and critics' gradients move."""
    _, _, _, (_, _, _, g_ens, aux_ens) = runs["ens"]
    _, _, _, (_, m, _, g_pen, aux_pen) = runs["pen"]
    for term in ("vector", "reward", "cont", "dyn", "rep", "offline_ensemble"):
        np.testing.assert_array_equal(np.asarray(aux_pen.losses[term]),
                                      np.asarray(aux_ens.losses[term]), err_msg=term)
    np.testing.assert_allclose(np.asarray(aux_ens.ac.reward[:, 1:] - aux_pen.ac.reward[:, 1:]),
                               np.asarray(aux_pen.ac.penalty), rtol=1e-5, atol=1e-7)
    assert float(m["offline_penalty/mean"]) >= 0.0


# ---- config fields ---------------------------------------------------------------------
@pytest.mark.parametrize("over,field,fix", [
    ({"offline_bc_weight": -0.1}, "offline_bc_weight", "must be >= 0"),
    ({"offline_ensemble": 1}, "offline_ensemble", "0 (off) or 2 to 64"),
    ({"offline_ensemble": -2}, "offline_ensemble", "0 (off) or 2 to 64"),
    ({"offline_ensemble": 65}, "offline_ensemble", "0 (off) or 2 to 64"),
    ({"offline_penalty_weight": -1.0, "offline_ensemble": 3}, "offline_penalty_weight",
     "must be >= 0"),
    ({"offline_penalty_weight": 1.0}, "offline_ensemble", "set offline_ensemble >= 2"),
])
def test_bad_values_are_one_line_naming_the_field_and_the_fix(over, field, fix):
    with pytest.raises(ValueError) as info:
        agent.make_config("tiny", over, task=TASK)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and field in msg and fix in msg, msg


@pytest.mark.parametrize("over,takes", [({"offline_ensemble": 2.5}, "an integer"),
                                        ({"offline_bc_weight": "high"}, "a finite number"),
                                        ({"offline_penalty_weight": True}, "a finite number")])
def test_values_of_the_wrong_type_are_refused(over, takes):
    with pytest.raises(ValueError, match=f"{next(iter(over))}=.*takes {takes}"):
        agent.make_config("tiny", over, task=TASK)


def _offline_rc(**over):
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.schemas.taskset import TaskInfo, TaskSet
    infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=12))
                  for t in ("probe-action", "probe-constant"))
    ts = TaskSet("off", infos, (None,) * 2, "none")
    return OfflineRunConfig(dataset="off@" + "a" * 64, taskset=ts.to_dict(), agent="dreamerv3",
                            preset="tiny", agent_overrides={"compute_dtype": "float32", **over})


ON = {"offline_bc_weight": 0.3, "offline_ensemble": 4, "offline_penalty_weight": 1.5}


def test_fields_round_trip_through_config_json_and_set_the_hash():
    rc = _offline_rc(**ON)
    saved = json.loads(json.dumps(rc.to_json()))
    assert {k: saved["resolved_agent_config"][k] for k in OFFLINE_FIELDS} == ON
    back = type(rc).from_json(saved)
    assert back == rc and back.training_hash() == rc.training_hash()
    cfg = back.agent_config
    assert (cfg.offline_bc_weight, cfg.offline_ensemble, cfg.offline_penalty_weight) == (
        0.3, 4, 1.5)
    base = _offline_rc()
    assert rc.training_hash() != base.training_hash()
    for k, v in ON.items():                        # each field is its own training
        one = _offline_rc(**{k: v, **({"offline_ensemble": 4} if k != "offline_ensemble"
                                      else {})})
        assert one.training_hash() not in (base.training_hash(), rc.training_hash())
    # explicit zeros are the default run (the same hash)
    assert _offline_rc(**dict.fromkeys(OFFLINE_FIELDS, 0)).training_hash() == \
        base.training_hash()


def test_runs_saved_before_the_fields_read_them_as_off_and_keep_their_hash():
    rc = _offline_rc()
    old = json.loads(json.dumps(rc.to_json()))
    for k in OFFLINE_FIELDS:
        del old["resolved_agent_config"][k]
    loaded = type(rc).from_json(old)
    assert loaded == rc and loaded.training_hash() == rc.training_hash()
    keep = {k: old[k] for k in ("dataset", "taskset", "agent", "seeds", "stream",
                                "stream_chunk", "resolved_agent_config")}
    for k in ("compute_dtype", "scan_weight_grads"):     # at their pinned values: left out
        del keep["resolved_agent_config"][k]
    assert rc.training_hash() == hashlib.sha256(
        json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def test_resume_keeps_the_fields_as_saved():
    from wmx.runs.cli_common import resume_changes
    args = argparse.Namespace(given=set())
    on = _offline_rc(**ON).to_json()
    resume_changes(args, on, {}, overrides=dict(ON))                      # as saved
    with pytest.raises(ValueError) as info:
        resume_changes(args, on, {}, overrides={"offline_bc_weight": 0.5})
    msg = str(info.value)
    assert len(msg.splitlines()) == 1
    assert "offline_bc_weight=0.5 conflicts with the run's saved offline_bc_weight=0.3" in msg
    old = _offline_rc().to_json()
    for k in OFFLINE_FIELDS:                        # a run saved before the fields
        del old["resolved_agent_config"][k]
    resume_changes(args, old, {}, overrides={"offline_bc_weight": 0.0})  # what it used
    with pytest.raises(ValueError, match=r"offline_ensemble=4 conflicts with the run's saved "
                                         r"offline_ensemble=0 \(the preset's\)"):
        resume_changes(args, old, {}, overrides={"offline_ensemble": 4})


def test_set_on_the_command_line(capsys, tmp_path):
    from wmx.train_online import cli as online
    base = ["--agent", "dreamerv3", "--task", "probe-action", "--preset", "tiny",
            "--home", str(tmp_path), "--dry-run"]
    assert online.main([*base, "--set", "offline_bc_weight=0.3"]) == 0
    capsys.readouterr()
    assert online.main([*base, "--set", "offline_bc_weight=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "offline_bc_weight=-1" in err and ">= 0" in err


def test_an_invalid_value_on_resume_is_invalid_not_a_conflict(capsys, tmp_path):
    """``--resume RUN --set offline_bc_weight=abc`` (both trainers): the message a new run
    gives for the value, before any comparison with the saved config; nothing written."""
    from wmx.runs.online_config import OnlineRunConfig
    from wmx.train_offline import cli as offline
    from wmx.train_online import cli as online
    runs = {}
    for name, rc in (("off", _offline_rc(**ON)),
                     ("on", OnlineRunConfig(task="probe-action", agent="dreamerv3",
                                            preset="tiny", agent_overrides={
                                                "compute_dtype": "float32", **ON}))):
        runs[name] = tmp_path / name
        runs[name].mkdir()
        (runs[name] / "config.json").write_text(json.dumps(rc.to_json()))
    new = ["--agent", "dreamerv3", "--task", "probe-action", "--preset", "tiny", "--dry-run"]
    for value in ("abc", "-1"):
        capsys.readouterr()
        assert online.main([*new, "--home", str(tmp_path / "home"),
                            "--set", f"offline_bc_weight={value}"]) == 2
        said = capsys.readouterr().err.strip().split("error: ", 1)[1]
        assert "offline_bc_weight" in said and "conflict" not in said
        for main, run in ((offline.main, runs["off"]), (online.main, runs["on"])):
            before = sorted(tmp_path.rglob("*"))
            assert main(["--resume", str(run), "--home", str(tmp_path / "home"),
                         "--set", f"offline_bc_weight={value}"]) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and err.endswith("error: " + said), err
            assert sorted(tmp_path.rglob("*")) == before
    from wmx.runs.cli_common import agent_config_of, resume_changes
    rc = _offline_rc(**ON)
    with pytest.raises(ValueError, match="takes a finite number"):     # the helper alone
        resume_changes(argparse.Namespace(given=set()), rc.to_json(), {},
                       overrides={"offline_bc_weight": "abc"}, config_of=agent_config_of(rc))
    with pytest.raises(ValueError, match="no field 'offline_bc_weigth'; did you mean"):
        resume_changes(argparse.Namespace(given=set()), rc.to_json(), {},   # unknown: as was
                       overrides={"offline_bc_weigth": 1.0}, config_of=agent_config_of(rc))


def test_the_ensemble_is_a_module_of_its_own():
    c = _cfg(offline_ensemble=K)
    assert modules(c) == (*MODULES, "rew_ens")
    counts = agent.param_counts(c)
    assert counts["rew_ens"] == K * counts["rew"]
    off = agent.init(jax.random.key(0), _cfg())
    on = agent.init(jax.random.key(0), c)
    assert jax.tree.structure(on.params["rew_ens"]["e0"]) == jax.tree.structure(off.params["rew"])
    assert dataclasses.replace(c, offline_ensemble=0) == _cfg()
