"""Parity of the full training step with the reference's training calls (train.npz).

Every call of the fixture is replayed with its recorded draws injected, through
one jitted `train.train_step_full` (compiled once per session):

- ``hot/call0..2`` from the stored state before each call, and ``hot-chain``:
  calls 1 and 2 from wmx's own state after the previous call;
- ``init/call0``: the world-model terms (losses, metrics, gradients, optimizer
  state) and everything else that does not read a two-hot mean;
- ``init_eager/call0``: the actor, critic and replay-critic terms (the jitted
  reference's two-hot mean at zero logits is a fusion artefact, README
  "float32 note"; wmx's symmetric sum is exactly 0, deviation D22, as the
  op-by-op reference).

Compared: every metric the reference returns, every scaled per-element loss and
the total, every gradient (reference names), every parameter after the step
(slow critic, optimizer step, retnorm low/high, updater count included), the
RMS / momentum state and counts, the replay write-back outputs and the carry.
Tolerances: README "Tolerances".
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import parity_tolerance as pt
import pytest

from wmx.agents.dreamerv3.loss import TrainNoise, loss_scales
from wmx.agents.dreamerv3.reference_params import (from_reference_params,
                                                   slow_critic_from_reference,
                                                   to_reference_params)
from wmx.agents.dreamerv3.replay import TrainSequence
from wmx.agents.dreamerv3.train import TrainState, optimizer
from wmx.nn.return_normalizer import ReturnNormState

LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
GRAD_TOL = dict(rtol=1e-3, atol=1e-5)
PARAM_TOL = dict(rtol=0, atol=5e-6)
NU_TOL = dict(rtol=1e-4, atol=0)
MU_TOL = dict(rtol=0, atol=1e-4)
LATENT_TOL = dict(rtol=1e-4, atol=1e-5)
# init/call0: terms that read no two-hot mean of a zero-initialised head
WM_METRICS = ("vector_loss", "reward_loss", "cont_loss", "dyn_loss", "rep_loss",
              "vector_loss_std", "reward_loss_std", "cont_loss_std", "dyn_loss_std",
              "rep_loss_std", "activation/embed", "post_ent", "prior_ent", "data_rew", "act/action",
              "ent/action", "rand/action", "weight", "constats", "opt_grad_steps",
              "opt_param_count", "opt_param_norm", "opt_update_norm")
AC_PARAMS = ("agent/actor/", "agent/critic/")

# the tolerance family of each compared group on a TPU (parity_tolerance, W-D9); the
# parameters after the step and retnorm move by lr-scaled updates: not widened
FAMILY = {"metrics": "dv3.forward", "losses": "dv3.forward", "replay_outs": "dv3.forward",
          "outs_replay": "dv3.forward", "carry": "dv3.forward", "grads": "dv3.backward",
          "opt_nu": "dv3.backward", "opt_mu": "dv3.backward"}

CASES = ["hot-call0", "hot-call1", "hot-call2", "hot-chain1", "hot-chain2", "init-call0"]
WORST: dict[tuple[str, str], float] = {}


# ---- the reference's state as a TrainState ------------------------------------------
def _flat_state(t, run: str, call: int) -> dict:
    """{'state/..', 'opt_state/..'} on entry to {run}/call{call} (after-states are diffs)."""
    pre = f"{run}/call0/before/"
    out = {k[len(pre):]: t[k] for k in t if k.startswith(pre)}
    for i in range(call):
        pre = f"{run}/call{i}/after/"
        out.update({k[len(pre):]: t[k] for k in t if k.startswith(pre)})
    return out


def _after(t, run: str, call: int) -> dict:
    out = _flat_state(t, run, call)
    pre = f"{run}/call{call}/after/"
    out.update({k[len(pre):]: t[k] for k in t if k.startswith(pre)})
    return out


def _sub(d: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in d.items() if k.startswith(prefix)}


def train_state_from_reference(flat: dict, cfg) -> TrainState:
    """A TrainState from the reference's flat state + optimizer state."""
    st = _sub(flat, "state/")
    params = from_reference_params(st, cfg)
    nu = from_reference_params(_sub(flat, "opt_state/rms_nu/"), cfg)
    mu = from_reference_params(_sub(flat, "opt_state/mom_mu/"), cfg)
    agc, rms, mom, warm = optimizer(cfg).init(params)
    opt = (agc, rms._replace(count=jnp.int32(flat["opt_state/rms_count"]), nu=nu),
           mom._replace(count=jnp.int32(flat["opt_state/mom_count"]), mu=mu),
           warm._replace(count=jnp.int32(st["agent/opt/step/value"])))
    norm = ReturnNormState(jnp.float32(st["agent/retnorm/low/value"]),
                           jnp.float32(st["agent/retnorm/high/value"]))
    return TrainState(params, slow_critic_from_reference(st, cfg), opt, norm,
                      jnp.int32(st["agent/updater/updates/value"]))


def sequence_from_batch(t, i: int, classes: int) -> TrainSequence:
    """The replay-context split of batch{i} (index 0 = context; 29eb964 prevact)."""
    b = {k: jnp.asarray(t[f"batch{i}/{k}"]) for k in
         ("vector", "action", "reward", "is_first", "is_last", "is_terminal", "deter", "stoch")}
    return TrainSequence(deter0=b["deter"][:, 0], stoch0=jax.nn.one_hot(b["stoch"][:, 0], classes),
                         prevact=b["action"][:, :-1], obs=b["vector"][:, 1:],
                         action=b["action"][:, 1:], reward=b["reward"][:, 1:],
                         is_first=b["is_first"][:, 1:], is_last=b["is_last"][:, 1:],
                         is_terminal=b["is_terminal"][:, 1:])


def noise_from_draws(t, prefix: str) -> TrainNoise:
    return TrainNoise(*(jnp.asarray(t[f"{prefix}draws/{k}"])
                        for k in ("post_idx", "start_eps", "imag_prior_idx", "imag_eps")))


# ---- the replayed calls ------------------------------------------------------------
@pytest.fixture(scope="module")
def chained(train_fx, ref_cfg, train_step_jit):
    """hot calls 0, 1, 2 each from wmx's own state after the previous call."""
    state = train_state_from_reference(_flat_state(train_fx, "hot", 0), ref_cfg)
    out = []
    for call in range(3):
        res = train_step_jit(state, sequence_from_batch(train_fx, call, ref_cfg.classes),
                             noise_from_draws(train_fx, f"hot/call{call}/"), ref_cfg)
        out.append(res)
        state = res[0]
    return out


@pytest.fixture(scope="module", params=CASES)
def case(request, train_fx, ref_cfg, train_step_jit, chained):
    """(name, run, call, reference prefix, wmx results (state, metrics, outs, grads, aux),
    the reference's state after the call)."""
    name = request.param
    run, call = name.split("-")
    if call.startswith("chain"):
        call = int(call[len("chain"):])
        res = chained[call]
    else:
        call = int(call[len("call"):])
        state = train_state_from_reference(_flat_state(train_fx, run, call), ref_cfg)
        res = train_step_jit(state, sequence_from_batch(train_fx, call, ref_cfg.classes),
                             noise_from_draws(train_fx, f"{run}/call{call}/"), ref_cfg)
    res = jax.tree.map(np.asarray, res)
    return name, run, call, f"{run}/call{call}/", res, _after(train_fx, run, call)


@pytest.fixture(scope="module", autouse=True)
def _report_worst_errors(request):
    """After the module: the largest absolute error per (case, group), printed to the
    terminal (the numbers of the parity report)."""
    yield
    tr = request.config.pluginmanager.getplugin("terminalreporter")
    if tr is not None and WORST:
        tr.write_line("")
        for (name, group), err in sorted(WORST.items()):
            tr.write_line(f"dreamerv3 train parity  {name:16s} {group:12s} max |err| {err:.3g}")


def close(name, group, got, want, tol, err_msg=""):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if group in FAMILY:
        family = FAMILY[group]
        if group == "metrics" and err_msg.startswith(("opt_grad", "opt_update")):
            family = "dv3.backward"          # gradient / update norms
        tol = pt.tol(family, want, **tol)
    np.testing.assert_allclose(got, want, **tol, err_msg=f"{name} {group} {err_msg}")
    if got.size:
        key = (name, group)
        WORST[key] = max(WORST.get(key, 0.0), float(np.nanmax(np.abs(got - want))))


def _is_wm_metric(metric: str) -> bool:
    return any(metric == m or metric.startswith(m + "/") for m in WM_METRICS)


def _is_ac_param(ref_name: str) -> bool:
    return ref_name.startswith(AC_PARAMS)


# ---- tests -----------------------------------------------------------------------
def test_metrics(case, train_fx):
    name, run, _, pre, (_, metrics, _, _, _), _ = case
    ref = _sub({k: train_fx[k] for k in train_fx if k.startswith(pre + "metrics/")},
               pre + "metrics/")
    assert set(ref) <= set(metrics), sorted(set(ref) - set(metrics))
    checked = 0
    for k, want in ref.items():
        if run == "init" and not _is_wm_metric(k):
            continue
        close(name, "metrics", metrics[k], want, LOSS_TOL, k)
        checked += 1
    assert checked >= (60 if run == "init" else len(ref))


def test_losses_and_total(case, train_fx, ref_cfg):
    name, run, _, pre, (_, metrics, outs, _, aux), _ = case
    scales = loss_scales(ref_cfg)
    for k, scale in scales.items():
        if run == "init" and k in ("actor", "critic", "replay_critic"):
            continue
        close(name, "losses", np.asarray(aux.losses[k]) * scale,
              train_fx[f"{pre}losses_scaled/{k}"], LOSS_TOL, k)
    if run != "init":
        close(name, "losses", outs.loss, train_fx[pre + "loss_total"], LOSS_TOL, "total")
        close(name, "losses", metrics["opt_loss"], train_fx[pre + "loss_total"], LOSS_TOL)


def _skip_if_free_bits_flipped(case, train_fx, cfg, chained=None):
    """On a TPU: the free-bits clamp max(KL, free) is a discrete outcome. Where the
    reference's KL sits within the chip's forward tolerance of `free` and wmx's KL is on
    the other side, the dyn/rep gradient of that element is switched on or off: the
    world model's gradients of that call, and the moments of it and of the chained
    calls after it, are not comparable. Skip, naming the element (hot/call1 has one
    3.0e-4 above free). `chained`: the chained calls, for a hot-chain case."""
    if not pt.on_tpu():
        return
    name, run, call, pre, (_, _, _, _, aux), _ = case
    calls = [(pre, aux, name)]
    if chained is not None and name.startswith("hot-chain"):
        calls = [(f"hot/call{i}/", chained[i][4], f"hot-chain{i}") for i in range(call + 1)]
    free = cfg.free_nats
    for pre_i, aux_i, name_i in calls:
        got = np.asarray(aux_i.losses["dyn"], np.float64)
        want = np.asarray(train_fx[pre_i + "losses_scaled/dyn"], np.float64) / \
            loss_scales(cfg)["dyn"]
        flipped = (got > free) != (want > free)
        if not flipped.any():
            continue
        t = pt.tol("dv3.forward", want, rtol=LOSS_TOL["rtol"], atol=LOSS_TOL["atol"])
        margin = np.abs(want[flipped] - free)
        assert np.all(margin <= t["atol"] + t["rtol"] * free), (name_i, margin)
        pytest.skip(f"{name_i}: {int(flipped.sum())} KL element(s) within {margin.max():.2g} "
                    f"of the free-bits threshold (TPU tolerance "
                    f"{t['atol'] + t['rtol'] * free:.2g}) clamped the other way on this TPU: "
                    f"the world-model gradients and moments of {name} differ by design (W-D9)")


def test_gradients(case, train_fx, ref_cfg):
    name, run, _, pre, (_, _, _, grads, _), _ = case
    _skip_if_free_bits_flipped(case, train_fx, ref_cfg)
    got = to_reference_params(grads)
    assert {k[len(pre + "grads/"):] for k in train_fx if k.startswith(pre + "grads/")} \
        == set(got)
    for k, g in got.items():
        if run == "init" and _is_ac_param(k):
            continue
        close(name, "grads", g, train_fx[f"{pre}grads/{k}"], GRAD_TOL, k)


def test_parameters_after(case):
    name, run, _, _, (state, metrics, _, _, _), after = case
    st = _sub(after, "state/")
    got = to_reference_params(state.params, slow_critic=state.slow_critic)
    assert set(got) == {k for k in st if k.startswith(("agent/", )) and not
                        k.startswith(("agent/opt/", "agent/retnorm/", "agent/updater/"))}
    for k, v in got.items():
        close(name, "state_after", v, st[k], PARAM_TOL, k)
    assert int(state.opt_state[3].count) == int(st["agent/opt/step/value"]) \
        == int(metrics["opt_grad_steps"])
    assert int(state.updates) == int(st["agent/updater/updates/value"])
    norm_tol = PARAM_TOL if run == "hot" else dict(rtol=0, atol=0.5)   # init: D22
    close(name, "retnorm", state.retnorm.lo, st["agent/retnorm/low/value"], norm_tol)
    close(name, "retnorm", state.retnorm.hi, st["agent/retnorm/high/value"], norm_tol)


def test_optimizer_state(case, train_fx, ref_cfg, chained):
    name, run, _, pre, (state, _, _, _, _), after = case
    _skip_if_free_bits_flipped(case, train_fx, ref_cfg, chained)
    _, rms, mom, _ = state.opt_state
    assert int(rms.count) == int(after["opt_state/rms_count"])
    assert int(mom.count) == int(after["opt_state/mom_count"])
    nu, mu = to_reference_params(rms.nu), to_reference_params(mom.mu)
    for k in nu:
        if run == "init" and _is_ac_param(k):
            continue
        # init: nu = 1e-3 g^2 from one gradient; elements with g near 0 have no
        # relative precision (atol from the gradient tolerance)
        tol = NU_TOL if run == "hot" else dict(rtol=1e-4, atol=1e-13)
        close(name, "opt_nu", nu[k], after[f"opt_state/rms_nu/{k}"], tol, k)
        if run == "init" and pt.on_tpu():
            # the first LaProp step's momentum is (1 - b1) sign(g): where the reference
            # gradient is within the chip's gradient tolerance of 0 its sign may flip,
            # moving mu by up to 2 (1 - b1); every other element at the mu tolerance (W-D9)
            want = after[f"opt_state/mom_mu/{k}"]
            g = train_fx[f"{pre}grads/{k}"]
            pt.assert_close_allowing_flips(
                mu[k], want, pt.tol("dv3.backward", want, **MU_TOL),
                pt.near_zero(g, pt.tol("dv3.backward", g, **GRAD_TOL)),
                2 * (1 - ref_cfg.beta1), f"{name} opt_mu {k}")
        else:
            close(name, "opt_mu", mu[k], after[f"opt_state/mom_mu/{k}"], MU_TOL, k)


def test_replay_outputs_and_carry(case, train_fx):
    name, _, _, pre, (_, _, outs, _, aux), _ = case
    post = aux.wm.post
    close(name, "replay_outs", post.deter, train_fx[pre + "replay_outs/deter"], LATENT_TOL)
    close(name, "replay_outs", post.stoch, train_fx[pre + "replay_outs/stoch"], LATENT_TOL)
    close(name, "replay_outs", post.logit, train_fx[pre + "replay_outs/logit"], LATENT_TOL)
    close(name, "outs_replay", outs.deter, train_fx[pre + "outs/replay/deter"], LATENT_TOL)
    np.testing.assert_array_equal(np.argmax(outs.stoch, -1), train_fx[pre + "outs/replay/stoch"])
    np.testing.assert_array_equal(np.sort(outs.stoch, -1)[..., -1], 1.0)   # one-hot
    close(name, "carry", outs.carry.deter, train_fx[pre + "carry_out/0/deter"], LATENT_TOL)
    close(name, "carry", outs.carry.stoch, train_fx[pre + "carry_out/0/stoch"], LATENT_TOL)
    close(name, "carry", outs.carry.prevact, train_fx[pre + "carry_out/1/action"], LATENT_TOL)


# ---- init: the actor-critic terms against the op-by-op reference --------------------
def test_init_actor_critic_against_eager(train_fx, ref_cfg, train_step_jit):
    """init/call0's actor, critic and replay-critic terms (and every gradient)
    against init_eager/call0: with the symmetric two-hot mean (D22) wmx's values at
    zero logits are exactly the eager reference's 0."""
    state = train_state_from_reference(_flat_state(train_fx, "init", 0), ref_cfg)
    _, metrics, outs, grads, aux = jax.tree.map(
        np.asarray, train_step_jit(state, sequence_from_batch(train_fx, 0, ref_cfg.classes),
                                   noise_from_draws(train_fx, "init/call0/"), ref_cfg))
    pre, name = "init_eager/call0/", "init_eager-call0"
    for k, scale in loss_scales(ref_cfg).items():
        close(name, "losses", np.asarray(aux.losses[k]) * scale,
              train_fx[f"{pre}losses_scaled/{k}"], LOSS_TOL, k)
    close(name, "losses", outs.loss, train_fx[pre + "loss_total"], LOSS_TOL, "total")
    ref = _sub({k: train_fx[k] for k in train_fx if k.startswith(pre + "metrics/")},
               pre + "metrics/")
    assert len(ref) >= 20
    for k, want in ref.items():
        close(name, "metrics", metrics[k], want, LOSS_TOL, k)
    for k, g in to_reference_params(grads).items():
        close(name, "grads", g, train_fx[f"{pre}grads/{k}"], GRAD_TOL, k)
    np.testing.assert_array_equal(aux.ac.value, 0.0)   # exactly symmetric at zero logits
