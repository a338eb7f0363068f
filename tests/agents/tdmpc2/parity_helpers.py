"""Helpers shared by the TD-MPC2 parity tests (fixtures/tdmpc2 and fixtures/tdmpc2_mt).

Loading a recording, rebuilding the reference's `TrainState` on entry to an
update call, injecting the recorded draws, and the README tolerances of the
update and planner comparisons. The single-task files (update_q5,
update_q2_warm, planner_small*) and the multi-task files (update_mt,
planner_mt) share the key layout, so both test families use these.

On a TPU each tolerance is widened by its `parity_tolerance` family and the discrete
outcomes the chip's rounding can flip (an Adam step's sign on a near-zero gradient, a
top-k boundary or order between tied values) have their own rules (docs/deviations.md
T34); on the CPU every tolerance is the README's.

Source: fixtures/tdmpc2/README.md, fixtures/tdmpc2_mt/README.md ("Tolerances").
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import parity_tolerance as pt
import pytest

from wmx.agents.tdmpc2 import multitask as mt
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import TDMPC2Config, discount_from_episode_length
from wmx.agents.tdmpc2.update import Batch, TrainState, UpdateNoise, init_train_state
from wmx.paths import shared_dir
from wmx.schemas.taskset import TaskInfo, TaskSet

# planner tolerances (both READMEs)
TOL = dict(atol=1e-4, rtol=0)          # score / mean / std / action / prev_mean / pi_actions
VTOL = dict(atol=1e-5, rtol=5e-5)      # planner values
ZTOL = dict(atol=2e-5, rtol=0)         # latents


def load_fixture(subdir: str, name: str, skip_missing: bool = False) -> dict[str, np.ndarray]:
    """Every array of fixtures/<subdir>/<name> as a dict (the npz read once).

    Raises FileNotFoundError when the file is missing, or skips the test
    when `skip_missing`.
    """
    path = shared_dir() / "fixtures" / subdir / name
    if skip_missing and not path.exists():
        pytest.skip(f"fixture {path} not found")
    f = np.load(path)
    return {k: f[k] for k in f.files}


def sub_dict(data: dict, prefix: str) -> dict:
    """The entries under `prefix`, with the prefix removed from their keys."""
    return {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}


def mt_fixture_setup(data) -> tuple[TDMPC2Config, mt.TaskContext]:
    """(config, TaskContext) of a fixtures/tdmpc2_mt file, built the way the
    offline trainer builds them: a TaskSet of the recorded tasks (dims, T,
    discount = the spec 2.20 heuristic of T), `multitask_config(taskset,
    "paper", ...)` with the file's widths (task_dim 8, set explicitly: T14)
    and `make_task_context(taskset)`."""
    c = lambda k: data[f"meta/cfg/{k}"].item()  # noqa: E731
    ts = TaskSet(
        name=str(c("task")),
        tasks=tuple(TaskInfo(str(n), int(o), int(a), int(T), 1,
                             discount_from_episode_length(int(T)))
                    for n, o, a, T in zip(data["meta/cfg/tasks"], data["meta/cfg/obs_shapes"],
                                          data["meta/cfg/action_dims"],
                                          data["meta/cfg/episode_lengths"])),
        reference_scores=(None,) * len(data["meta/cfg/tasks"]), reference_source="fixture")
    cfg = mt.multitask_config(
        ts, "paper", task_dim=c("task_dim"), enc_dim=c("enc_dim"), mlp_dim=c("mlp_dim"),
        latent_dim=c("latent_dim"), num_enc_layers=c("num_enc_layers"), num_q=c("num_q"),
        dropout=float(c("dropout")), horizon=c("horizon"), batch_size=c("batch_size"),
        iterations=c("iterations"), num_samples=c("num_samples"),
        num_elites=c("num_elites"), num_pi_trajs=c("num_pi_trajs"))
    return cfg, mt.make_task_context(ts)


# ---- update ---------------------------------------------------------------------------
def moment_tree(data, call, which, cfg):
    """Adam moments after `call` as a params-shaped tree (target = online layout)."""
    pre = f"call{call}/optim_after/"
    sd = {k[len(pre):-len("/" + which)]: v for k, v in data.items()
          if k.startswith(pre) and k.endswith("/" + which)}
    sd.update({k.replace("_Qs.", "_target_Qs."): v for k, v in sd.items() if k.startswith("_Qs.")})
    return wm.from_reference_state_dict(sd, cfg)


def with_moments(state: TrainState, mu, nu, count) -> TrainState:
    """`state` with both Adams' moments and counts replaced (mu/nu: params-shaped)."""
    inner = dict(state.wm_opt_state.inner_states)
    for g, masked in inner.items():
        adam = masked.inner_state[0]
        pick = lambda tree, ref: {k: (ref[k] if (k == "encoder") == (g == "encoder") else v)  # noqa
                                  for k, v in tree.items()}
        adam = adam._replace(count=jnp.asarray(count, jnp.int32), mu=pick(adam.mu, mu),
                             nu=pick(adam.nu, nu))
        inner[g] = masked._replace(inner_state=(adam,) + tuple(masked.inner_state[1:]))
    wm_state = state.wm_opt_state._replace(inner_states=inner)
    pi_adam = state.pi_opt_state[0]._replace(count=jnp.asarray(count, jnp.int32),
                                             mu=mu["pi"], nu=nu["pi"])
    return state._replace(wm_opt_state=wm_state,
                          pi_opt_state=(pi_adam,) + tuple(state.pi_opt_state[1:]))


def stale_pi_grad_sq(data, k) -> float:
    """Squared norm (float64) of the stale `_pi.*` gradient in call k's world-model clip."""
    stale = [v for n, v in sub_dict(data, f"call{k}/grads_wm_preclip/").items()
             if n.startswith("_pi.")]
    return sum(float(np.sum(np.square(v, dtype=np.float64))) for v in stale)


@functools.cache
def _init_template():
    """`init_train_state`, on the CPU compiled at XLA's optimisation level 0 with its older
    fusion emitters (about a second for a parity config instead of 7 s at the default
    level): `file_state` replaces every value it draws (the parameters, the running scale,
    the stale gradient norm), and what it keeps (the Adam states' zeros, step 0) is exact
    at any level."""
    if jax.default_backend() != "cpu":
        return init_train_state
    return jax.jit(init_train_state.__wrapped__, static_argnames=("cfg",),
                   compiler_options={"xla_backend_optimization_level": 0,
                                     "xla_cpu_use_fusion_emitters": False})


def file_state(data, k, cfg) -> TrainState:
    """The reference's state on entry to call k."""
    st = _init_template()(jax.random.key(0), cfg)
    st = st._replace(params=wm.from_reference_state_dict(sub_dict(data, f"call{k}/params/"), cfg),
                     scale=jnp.asarray(data[f"call{k}/scale_before"]))
    st = st._replace(pi_grad_sq=jnp.asarray(stale_pi_grad_sq(data, k), jnp.float32))
    if k > 0:
        st = with_moments(st, moment_tree(data, k - 1, "exp_avg", cfg),
                          moment_tree(data, k - 1, "exp_avg_sq", cfg), k)
    return st


def update_inputs(data, k, with_task: bool = False) -> tuple[Batch, UpdateNoise]:
    """(Batch, UpdateNoise) of call k: the recorded batch (task ids i32[B] when
    `with_task`) and draws; dropout keys are unused (the fixtures use dropout 0)."""
    b = Batch(obs=jnp.asarray(data[f"call{k}/batch/obs"]),
              action=jnp.asarray(data[f"call{k}/batch/action"]),
              reward=jnp.asarray(data[f"call{k}/batch/reward"][..., 0]),
              task=(jnp.asarray(data[f"call{k}/batch/task"], jnp.int32) if with_task else None))
    dr = f"call{k}/draws/"
    key = jax.random.key(0)
    n = UpdateNoise(td_target_pi_eps=jnp.asarray(data[dr + "00_td_target_pi_eps"]),
                    td_target_q_pair=jnp.asarray(data[dr + "01_td_target_q_pair"], jnp.int32),
                    pi_loss_pi_eps=jnp.asarray(data[dr + "02_pi_loss_pi_eps"]),
                    pi_loss_q_pair=jnp.asarray(data[dr + "03_pi_loss_q_pair"], jnp.int32),
                    td_target_dropout_key=key, value_dropout_key=key, pi_loss_dropout_key=key)
    return b, n


def close_rel_max(got, ref, name, frac=1e-3, family="tdmpc2.grad"):
    """|got - ref| <= frac * max|ref| elementwise (the README's per-tensor tolerance; on a
    TPU frac is at least `family`'s c * eps)."""
    ref = np.asarray(ref)
    tol = pt.bound(family, frac) * max(float(np.max(np.abs(ref))), 1e-30)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=0, atol=tol, err_msg=name)


def ref_names(subtree):
    """Reference names -> arrays for a partial params-shaped tree."""
    return wm.to_reference_state_dict({"encoder": {}, "dynamics": {}, "reward": {}, "pi": {},
                                       **subtree})


def check_update_call(data, k, cfg, state, new_state, metrics, aux, ncalls, chained=False,
                      log_prob_atol_factor=1.0):
    """README tolerances. Chained calls start from wmx's own post-update state,
    which differs from the file's by float32 rounding that Adam's first steps
    amplify where a gradient element is ~eps (the zero-initialised heads):
    there gradients/moments get 2e-2 x max|ref|, params atol 1e-4 (one step
    moves an element by <= lr = 3e-4) and intermediates atol 2e-4; losses and
    norms stay at the README's tolerances. `log_prob_atol_factor` scales the
    intermediates' atol for pi_log_prob only (1 for the single-task files).
    Returns the number of parameter elements whose Adam step a TPU took with the
    other sign (`param_flips`; always 0 on the CPU)."""
    c = f"call{k}/"
    inter_atol = 2e-4 if chained else 2e-5
    grad_frac = 2e-2 if chained else 1e-3
    param_atol = 1e-4 if chained else 2e-5
    fam = "tdmpc2.update_chained" if chained else "tdmpc2.update"
    gfam = "tdmpc2.grad_chained" if chained else "tdmpc2.grad"

    def allclose(got, ref, err_msg="", rtol=0, atol=0):
        np.testing.assert_allclose(got, ref, **pt.tol(fam, ref, rtol=rtol, atol=atol),
                                   err_msg=err_msg)

    # losses and the out/ dict
    for name in ("consistency_loss", "reward_loss", "value_loss", "total_loss"):
        allclose(metrics[name], data[c + "out/" + name], rtol=1e-5, err_msg=name)
    allclose(metrics["pi_loss"], data[c + "out/pi_loss"], rtol=0, atol=1e-5)
    for name in ("grad_norm", "pi_grad_norm"):
        allclose(metrics[name], data[c + "out/" + name], rtol=1e-4, err_msg=name)
    allclose(metrics["pi_scale"], data[c + "out/pi_scale"], rtol=1e-6)
    allclose(new_state.scale, data[c + "scale_after"], rtol=1e-6)
    # intermediates
    # decoded values (symexp of the two-hot expectation) also get rtol 2e-5: the
    # symmetric sum (T24) differs from the naive one by <= 4.8e-6 in symlog space,
    # i.e. relative in raw space (|Q| ~ 100 in the warm file); log-probs (|log_pi|
    # ~ 55 there) get rtol 2e-6 (a few float32 ulps).
    rtols = {"q1": 2e-5, "q2": 2e-5, "q_avg": 2e-5, "qs_scaled": 2e-5, "td_targets": 2e-5,
             "pi_log_prob": 2e-6}
    atols = {"pi_log_prob": inter_atol * log_prob_atol_factor}
    it = lambda got, key: allclose(  # noqa: E731
        np.asarray(got), data[c + "inter/" + key],
        rtol=rtols.get(key.split("/")[-1], 0),
        atol=atols.get(key.split("/")[-1], inter_atol), err_msg=key)
    it(aux["next_z"], "update/next_z")
    it(aux["zs"], "update/zs")
    it(aux["q_logits"], "update/qs")
    it(aux["reward_logits"], "update/reward_preds")
    it(aux["td_target"][..., None], "update/td_targets")
    it(aux["td_target"][..., None], "td_target/td_targets")
    it(aux["td_q_pair"][0][..., None], "td_target/q1")
    it(aux["td_q_pair"][1][..., None], "td_target/q2")
    for src, tag in ((aux["td_pi"], "td_target"), (aux["pi"], "update_pi")):
        it(src.mean, f"{tag}/pi_mu")
        it(src.action, f"{tag}/pi_action")
        it(src.log_pi, f"{tag}/pi_log_prob")
        it(src.log_std, f"{tag}/pi_log_std")
    it(aux["pi_q_pair"][0][..., None], "update_pi/q1")
    it(aux["pi_q_pair"][1][..., None], "update_pi/q2")
    it(aux["pi_q_avg"][..., None], "update_pi/q_avg")
    it(aux["pi_q_scaled"][..., None], "update_pi/qs_scaled")
    # stale policy gradient folded into the clip (PE, spec 2.10)
    ref_sq = stale_pi_grad_sq(data, k)
    np.testing.assert_allclose(float(state.pi_grad_sq), ref_sq,
                               **pt.tol(gfam, ref_sq, rtol=1e-4, atol=1e-12))
    # gradients per tensor
    gw = wm.to_reference_state_dict({**aux["grads_wm"], "pi": aux["grads_pi"]})
    for name, ref in sub_dict(data, c + "grads_wm_preclip/").items():
        if not name.startswith("_pi."):
            close_rel_max(gw[name], ref, "grad " + name, grad_frac, gfam)
    for name, ref in sub_dict(data, c + "grads_pi_preclip/").items():
        close_rel_max(gw[name], ref, "pi grad " + name, grad_frac, gfam)
    # Adam moments after the call
    for g, masked in new_state.wm_opt_state.inner_states.items():
        adam = masked.inner_state[0]
        assert int(adam.count) == k + 1
        mods = [m for m in adam.mu if (m == "encoder") == (g == "encoder")]
        for which, tree in (("exp_avg", adam.mu), ("exp_avg_sq", adam.nu)):
            for name, v in ref_names({m: tree[m] for m in mods}).items():
                close_rel_max(v, data[f"{c}optim_after/{name}/{which}"], f"{which} {name}",
                              grad_frac, gfam)
    pi_adam = new_state.pi_opt_state[0]
    for which, tree in (("exp_avg", pi_adam.mu), ("exp_avg_sq", pi_adam.nu)):
        for name, v in ref_names({"pi": tree}).items():
            close_rel_max(v, data[f"{c}optim_after/{name}/{which}"], f"{which} {name}",
                          grad_frac, gfam)
    # params after the call (incl. the EMA target)
    if pt.on_tpu():
        return param_flips(data, k, cfg, new_state, ncalls, chained)
    after = f"call{k + 1}/params/" if k + 1 < ncalls else "final/params/"
    got = wm.to_reference_state_dict(new_state.params)
    for name, ref in sub_dict(data, after).items():
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=param_atol,
                                   err_msg="param " + name)
    return 0


def param_flips(data, k, cfg, new_state, ncalls, chained=False) -> int:
    """On a TPU: the parameters after call k at the README's atol except the elements
    whose Adam step the chip took with the other sign (`adam_flippable`), which may
    differ by up to 2 lr (T34). Returns how many such elements moved: a chained call
    after one starts from a state that differs there by design."""
    param_atol = 1e-4 if chained else 2e-5
    grad_frac = 2e-2 if chained else 1e-3
    gfam = "tdmpc2.grad_chained" if chained else "tdmpc2.grad"
    after = f"call{k + 1}/params/" if k + 1 < ncalls else "final/params/"
    got = wm.to_reference_state_dict(new_state.params)
    n = 0
    for name, ref in sub_dict(data, after).items():
        n += pt.assert_close_allowing_flips(
            got[name], ref, {"rtol": 0, "atol": param_atol},
            adam_flippable(data, k, name, grad_frac, gfam), 2 * cfg.lr, "param " + name)
    return n


def adam_flippable(data, k, name, frac, family):
    """On a TPU: the elements of parameter `name` whose Adam step in call k the chip
    may take with the other sign: the recorded gradient is within the gradient
    tolerance (`frac` x max|g|, at least `family`'s) of 0, where Adam's first steps
    move an element by ~lr whatever the gradient's size (the target Q ensemble follows
    its online twin)."""
    key = name.replace("_target_Qs.", "_Qs.")
    src = "grads_pi_preclip/" if key.startswith("_pi.") else "grads_wm_preclip/"
    g = np.asarray(data[f"call{k}/{src}{key}"], np.float64)
    return np.abs(g) <= pt.bound(family, frac) * max(float(np.max(np.abs(g))), 1e-30)


# ---- planner --------------------------------------------------------------------------
def close(got, want, msg, tol):
    """assert_allclose with one of TOL / VTOL / ZTOL (on a TPU widened by its family)."""
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), err_msg=msg,
                               **pt.tol(_family(tol), want, **tol))


def _family(tol) -> str:
    """The parity_tolerance family of TOL, VTOL or ZTOL."""
    if tol is VTOL:
        return "tdmpc2.planner_values"
    if tol is ZTOL:
        return "tdmpc2.latent"
    assert tol is TOL, tol
    return "tdmpc2.planner_actions"


class ElitesFlipped(Exception):
    """On a TPU: an iteration's elite set differs from the recording only by candidates
    whose recorded value ties the k-th elite value within twice the chip's value
    tolerance. The top-k boundary is then the chip's rounding, and the rest of the
    decision (mean, std, the next iterations, the pick) is not comparable."""


def decision_cfg(f, base: TDMPC2Config, d: int) -> TDMPC2Config:
    """`base` with decision d's planner sizes (`decisionD/cfg/`)."""
    g = lambda k: int(f[f"decision{d}/cfg/{k}"])  # noqa: E731
    return dataclasses.replace(base, num_samples=g("num_samples"),
                               num_pi_trajs=g("num_pi_trajs"), num_elites=g("num_elites"),
                               iterations=g("iterations"))


def decision_draws(f, d) -> dict:
    """Decision d's draws keyed by their label without the "NN_" prefix."""
    pre = f"decision{d}/draws/"
    return {k[len(pre):].split("_", 1)[1]: v for k, v in f.items() if k.startswith(pre)}


def planner_params(f, cfg):
    """Params from `params/` (the planner files omit the target ensemble: copied from Q)."""
    sd = sub_dict(f, "params/")
    sd.update({k.replace("_Qs.", "_target_Qs."): v for k, v in sd.items()
               if k.startswith("_Qs.")})
    return wm.from_reference_state_dict(sd, cfg)


def check_iteration(f, d, i, st, msg, check_elites=True):
    """One MPPI iteration's statistics against `decisionD/iterI/` (elites as a set)."""
    p = f"decision{d}/iter{i}/"
    if p + "candidates" in f:
        close(st.candidates, f[p + "candidates"], msg + " candidates", TOL)
    close(st.value_raw, f[p + "value_raw"][:, 0], msg + " value_raw", VTOL)
    close(st.value, f[p + "value"][:, 0], msg + " value", VTOL)
    close(st.reward_sum, f[p + "reward_sum"][:, 0], msg + " reward_sum", VTOL)
    ref_idx = f[p + "elite_idxs"]
    if check_elites:
        if pt.on_tpu():
            _raise_if_tied_elites_flipped(f[p + "value"][:, 0], st.elite_idxs, ref_idx, msg)
        assert set(np.asarray(st.elite_idxs).tolist()) == set(ref_idx.tolist()), msg + " elites"
        # same set; compare per-elite statistics keyed by candidate index
        order = {int(c): j for j, c in enumerate(np.asarray(st.elite_idxs))}
        perm = [order[int(c)] for c in ref_idx]
        close(np.asarray(st.score)[perm], f[p + "score"][:, 0], msg + " score", TOL)
        close(np.asarray(st.elite_value)[perm], f[p + "elite_value"][:, 0], msg + " eV", VTOL)
    else:
        close(st.score, f[p + "score"][:, 0], msg + " score", TOL)
    close(st.mean, f[p + "mean"], msg + " mean", TOL)
    close(st.std, f[p + "std"], msg + " std", TOL)


def check_decision(f, d, cfg, action, new_prev, info, msg):
    """A free-running decision's outputs (`plan_with_stats` info) against `decisionD/`:
    z, policy trajectories, MPPI start, every iteration (`check_iteration`), the
    final pick (same last-iteration elite order, so the index is comparable),
    the action and the stored mean."""
    o = f"decision{d}/out/"
    close(info["z"], f[o + "z"][0], msg + " z", ZTOL)
    close(info["pi_actions"], f[o + "pi_actions"], msg + " pi_actions", TOL)
    close(info["init_mean"], f[o + "init_mean"], msg + " init_mean", TOL)
    close(info["init_std"], f[o + "init_std"], msg + " init_std", TOL)
    for i in range(cfg.planning_iterations):
        st = jax.tree_util.tree_map(lambda x: x[i], info["iters"])
        check_iteration(f, d, i, st, f"{msg} iter {i}")
    # final pick: identical elite order is needed for the index to be comparable
    last = cfg.planning_iterations - 1
    got_order = np.asarray(info["iters"].elite_idxs[last])
    ref_order = f[f"decision{d}/iter{last}/elite_idxs"]
    if pt.on_tpu() and not np.array_equal(got_order, ref_order):
        # the chip may order elites whose values tie within its value tolerance either
        # way: then compare the final scores per candidate and the candidate picked
        v_ref = f[f"decision{d}/iter{last}/value"][:, 0]
        vt = pt.tol("tdmpc2.planner_values", v_ref, **VTOL)
        moved = got_order != ref_order
        tie = 2 * (vt["atol"] + vt["rtol"] * np.abs(v_ref[ref_order[moved]]))
        gap = np.abs(v_ref[got_order[moved]] - v_ref[ref_order[moved]])
        assert np.all(gap <= tie), (msg, "elite order", gap, tie)
        pos = {int(cand): j for j, cand in enumerate(got_order)}
        perm = [pos[int(cand)] for cand in ref_order]
        close(np.asarray(info["final_score"])[perm], f[o + "final_score"], msg + " final_score",
              TOL)
        assert int(got_order[int(info["elite_choice_index"])]) == \
            int(ref_order[int(f[o + "elite_choice_index"])]), msg + " picked candidate"
    else:
        np.testing.assert_array_equal(got_order, ref_order, err_msg=msg)
        close(info["final_score"], f[o + "final_score"], msg + " final_score", TOL)
        assert int(info["elite_choice_index"]) == int(f[o + "elite_choice_index"]), msg
    close(info["selected_sequence"], f[o + "selected_sequence"], msg + " selected", TOL)
    close(info["final_std"], f[o + "final_std"], msg + " final_std", TOL)
    close(action, f[o + "action"], msg + " action", TOL)
    close(new_prev, f[o + "prev_mean"], msg + " prev_mean", TOL)


def _raise_if_tied_elites_flipped(v_ref, got_idx, ref_idx, msg):
    """On a TPU: raise ElitesFlipped when the elite sets differ only at the top-k
    boundary between values tied within twice the chip's value tolerance (any other
    difference is left to the caller's set assertion)."""
    got, ref = set(np.asarray(got_idx).tolist()), set(np.asarray(ref_idx).tolist())
    if got == ref:
        return
    v_ref = np.asarray(v_ref, np.float64)
    kth = float(np.min(v_ref[np.asarray(ref_idx)]))
    swapped = sorted(got ^ ref)
    vt = pt.tol("tdmpc2.planner_values", v_ref, **VTOL)
    if np.all(pt.ties(v_ref, swapped, kth, vt)):
        gaps = np.abs(v_ref[swapped] - kth)
        raise ElitesFlipped(
            f"{msg}: elite set differs by candidates {swapped} whose recorded values are "
            f"within {gaps.max():.3g} of the k-th elite value {kth:.6g} (chip value tolerance "
            f"atol {vt['atol']:.2g} + rtol {vt['rtol']:.2g})")


def elite_flip(f, d, cfg, info) -> str | None:
    """On a TPU: the message of the first iteration of decision d whose elite set flipped
    at a tie (see ElitesFlipped), or None."""
    for i in range(cfg.planning_iterations):
        st = jax.tree_util.tree_map(lambda x: x[i], info["iters"])  # noqa: B023
        p = f"decision{d}/iter{i}/"
        try:
            _raise_if_tied_elites_flipped(f[p + "value"][:, 0], st.elite_idxs,
                                          f[p + "elite_idxs"], f"decision {d} iter {i}")
        except ElitesFlipped as e:
            return str(e)
    return None
