"""Multi-task planner parity with the official TD-MPC2 (fixtures/tdmpc2_mt/planner_mt.npz).

Eight consecutive `act(obs, t0, eval_mode, task)` decisions of the 3-task
agent (tasks 2, 2, 0, 0, 1, 1, 0, 1; eval_mode on in decisions 1 and 4;
decisions 0-6 at 32 samples / 4 policy trajectories / 8 elites / 3
iterations, decision 7 at the defaults 512 / 24 / 64 / 6), every recorded draw
injected through `planner.noise_from_reference`. wmx plans with
`multitask.plan_task_with_stats`, the statistics twin of the trainers'
`plan_task` (same task hooks: renormed embedding row, action mask, float32
discount). All decisions run free, with the stored mean carried by the test
and checked against `prev_mean_before` (one buffer shared by all tasks:
decision 6 warm-starts task 0 from task 1's mean, as the recording does).

Checked at the README's tolerances: z, the policy trajectories, the MPPI
start, every iteration's candidates (derived for decision 7), values,
elites as a set (decision 0 iteration 0 has an exact tie that torch lists
in another order), score, mean, std and terminal_discount (exactly), the
final pick, the action and the stored mean; masked dims exactly 0.

Registered difference T15: the reference's act() writes the renormed row
back into the parameter table; wmx's `plan_task` renorms the looked-up row
without persisting it. `test_embedding_t15` shows this is the only
difference: wmx's table never changes, renorm(its row) equals the recorded
row, and the recorded table differs from the initial one only in rows that
act() looked up with norm > 1.

Runtime: two compiled planner programs (the two sizes; t0, eval_mode and the
task id are traced). Source: fixtures/tdmpc2_mt/README.md; tdmpc2_spec 3.9,
3.12, 1.22.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import parity_tolerance as pt
from parity_helpers import (TOL, ElitesFlipped, check_decision, close, decision_cfg,
                            decision_draws, elite_flip, load_fixture, mt_fixture_setup,
                            planner_params)

from wmx import xla_cpu
from wmx.agents.tdmpc2 import multitask as mt
from wmx.agents.tdmpc2 import planner as pl

ND = 8
EMB_ATOL = 1e-6
# TD-MPC2's trainers' options on the CPU (XLA's dots, native row reductions): the multi-task
# evaluation plans with them
TRAINERS_CPU = xla_cpu.training_options(True, native_row_reductions=True,
                                        choice="xla", backend="cpu")


def _run(options=None):
    """(file, base cfg, TaskContext, params, [(cfg, prev_mean_in, action, new_prev, info)])."""
    plan = mt.plan_task_with_stats
    if options is not None:
        plan = jax.jit(plan.__wrapped__, static_argnames=("cfg",), compiler_options=options)
    f = load_fixture("tdmpc2_mt", "planner_mt.npz")
    base, tasks = mt_fixture_setup(f)
    params = planner_params(f, base)
    prev = jnp.zeros((base.horizon, base.action_dim), jnp.float32)
    out = []
    with jax.default_matmul_precision("highest"):
        for d in range(ND):
            cfg = decision_cfg(f, base, d)
            eval_mode = bool(f[f"decision{d}/cfg/eval_mode"])
            noise = pl.noise_from_reference(decision_draws(f, d), cfg, eval_mode)
            action, new_prev, info = plan(
                params, jnp.asarray(f[f"decision{d}/obs"]), prev,
                jnp.asarray(bool(f[f"decision{d}/cfg/t0"])), noise, cfg, tasks,
                jnp.int32(f[f"decision{d}/task"]), eval_mode=jnp.asarray(eval_mode))
            out.append((cfg, prev, action, new_prev, info))
            prev = new_prev
    return f, base, tasks, params, out


@pytest.fixture(scope="module")
def run():
    return _run()


@pytest.fixture(scope="module")
def run_trainers():
    if jax.default_backend() != "cpu":
        pytest.skip("TD-MPC2's CPU compile options")
    return _run(TRAINERS_CPU)


def test_setup_matches_recording(run):
    f, base, tasks, _, out = run
    np.testing.assert_array_equal(np.asarray(tasks.discounts), f["meta/discount"])
    np.testing.assert_array_equal(np.asarray(tasks.action_masks), f["meta/action_masks"])
    assert [o[0].planning_iterations for o in out] == [3] * 7 + [6]   # padded A = 3 < 20


@pytest.mark.parametrize("d", range(ND))
def test_decision_with_the_trainers_options(run_trainers, d):
    f, _, _, _, out = run_trainers
    cfg, prev_in, action, new_prev, info = out[d]
    check_decision(f, d, cfg, action, new_prev, info, f"decision {d} (trainers' options)")


@pytest.mark.parametrize("d", range(ND))
def test_decision(run, d):
    f, _, tasks, _, out = run
    cfg, prev_in, action, new_prev, info = out[d]
    msg = f"decision {d}"
    if pt.on_tpu():
        # a TPU may take a top-k boundary between tied values the other way (T34): the
        # decisions after such a flip start from a mean that is not comparable
        for e in range(d):
            why = elite_flip(f, e, out[e][0], out[e][4])
            if why:
                pytest.skip(f"{msg} starts from decision {e}'s mean: {why}")
    if f"decision{d}/prev_mean_before" in f:
        close(prev_in, f[f"decision{d}/prev_mean_before"], msg + " prev", TOL)
    try:
        check_decision(f, d, cfg, action, new_prev, info, msg)
    except ElitesFlipped as e:
        if not pt.on_tpu():
            raise
        pytest.skip(f"compared up to the flip; {e}")
    # gamma_task^H as a float32 product, exactly (README semantics 3)
    for i in range(cfg.planning_iterations):
        assert np.float32(info["terminal_discount"]) == \
            f[f"decision{d}/iter{i}/terminal_discount"][0], msg
    # masking (README semantics 6): masked dims exactly 0 in the policy
    # trajectories, candidates, mean, std (below min_std) and the action
    invalid = np.asarray(tasks.action_masks)[int(f[f"decision{d}/task"])] == 0
    it = info["iters"]
    for name, x in (("pi_actions", info["pi_actions"]), ("candidates", it.candidates),
                    ("mean", it.mean), ("std", it.std), ("action", action)):
        assert np.all(np.asarray(x)[..., invalid] == 0), f"{msg} {name}"
    if f"decision{d}/iter0/candidates" not in f:
        # decision 7: candidates derived from the recorded start / previous mean and std
        mask = 1.0 - invalid.astype(np.float32)
        P = cfg.num_pi_trajs
        draws = decision_draws(f, d)
        for i in range(cfg.planning_iterations):
            src = (f"decision{d}/out/init_" if i == 0 else f"decision{d}/iter{i - 1}/")
            m, s = f[src + "mean"], f[src + "std"]
            gauss = np.clip(m[:, None] + s[:, None] * draws[f"plan_iter{i}_candidate_noise"],
                            -1, 1)
            want = np.concatenate([f[f"decision{d}/out/pi_actions"], gauss], 1) * mask
            close(it.candidates[i], want, f"{msg} iter {i} candidates (derived)", TOL)
            assert want.shape[1] == cfg.num_samples and P == 24


def test_embedding_t15(run):
    """T15: the row each decision plans with is renorm(row), as the recorded
    table's; only the write-back differs."""
    f, _, _, params, _ = run
    table0 = f["params/_task_emb.weight"]
    np.testing.assert_array_equal(np.asarray(params["task_emb"]), table0)   # wmx never writes
    renorm = jax.jit(mt.eval_task_embedding)
    seen: set[int] = set()
    for d in range(ND):
        task = int(f[f"decision{d}/task"])
        seen.add(task)
        rec = f[f"decision{d}/out/task_emb_weight"]
        # the looked-up row: renorm(wmx's row) = the recorded row
        np.testing.assert_allclose(np.asarray(renorm(params, jnp.int32(task))), rec[task],
                                   rtol=0, atol=EMB_ATOL, err_msg=f"decision {d}")
        # the recorded table = wmx's table with the looked-up rows of norm > 1 renormed
        for r in range(rec.shape[0]):
            if r in seen and np.linalg.norm(table0[r]) > 1:
                np.testing.assert_allclose(np.asarray(renorm(params, jnp.int32(r))), rec[r],
                                           rtol=0, atol=EMB_ATOL)
                assert not np.array_equal(rec[r], table0[r])
            else:
                np.testing.assert_array_equal(rec[r], table0[r])
    assert seen == {0, 1, 2}
    # rows 1 and 2 (norms 1.5, 1.25) are renormed by act() in the recording
    assert np.linalg.norm(table0[1]) > 1 and np.linalg.norm(table0[2]) > 1
