"""TD-MPC2 multi-task mechanisms (tdmpc2_spec 1.22-1.24, 2.3, 2.18, 2.20, 3.9, 3.12).

Compiled programs: one multi-task update, one single-task update, the
multi-task and single-task planners and a tiny policy-loss gradient. CPU
float32 matmuls are exact f32 already, so no matmul-precision context (it
would be a second jit cache entry, i.e. another compile).

The tests that train (`mt_run` and what uses it) are `slow`: in the default
run the recorded reference covers the same mechanisms more strictly
(test_update_mt_parity.py and test_planner_mt_parity.py: both renorm
look-ups and the Adam step on the renormed table, per-task discounts, masks
and the n-valid entropy, no policy gradient to the embedding, masked planner
dims exactly 0). What only this module checks, the multi-task code with a
neutral embedding and no padding equalling the single-task code, runs with
`pytest -m slow`.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from wmx.agents.tdmpc2 import multitask as mt
from wmx.agents.tdmpc2 import planner as pl
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import TDMPC2Config, make_config
from wmx.agents.tdmpc2.update import (Batch, TrainState, draw_update_noise, init_train_state,
                                      pi_optimizer, policy_loss, update_with_aux, wm_optimizer,
                                      wm_params)
from wmx.nn.running_scale import RunningScale
from wmx.schemas.taskset import TaskInfo, TaskSet

# obs dims 5/3/4/5, action dims 3/1/2/3, T 500/100/1000/500 -> gamma .99/.95/.995/.99
TASKSET = TaskSet(
    name="toy4",
    tasks=(TaskInfo("a", 5, 3, 500, 2, 0.99), TaskInfo("b", 3, 1, 100, 2, 0.95),
           TaskInfo("c", 4, 2, 1000, 2, 0.995), TaskInfo("d", 5, 3, 500, 2, 0.99)),
    reference_scores=(None,) * 4, reference_source="test")
CFG = mt.multitask_config(TASKSET, "tiny", task_dim=4, batch_size=8)
TASKS = mt.make_task_context(TASKSET)
CFG_ST = make_config("tiny", obs_dim=5, action_dim=3, batch_size=8)
H, B, S, A, D, L = CFG.horizon, CFG.batch_size, 5, 3, 4, CFG.latent_dim
BATCH_TASKS = np.array([0, 1, 2, 0, 1, 2, 0, 1], np.int32)  # task 3 absent
NORMS = np.array([3.0, 1.5, 0.5, 2.0], np.float32)
_upd = update_with_aux  # jitted, cfg static


def _batch(key, task):
    k = jax.random.split(key, 3)
    obs_dims = np.array([t.obs_dim for t in TASKSET.tasks])[task]
    obs = jax.random.normal(k[0], (H + 1, B, S)) * (np.arange(S)[None] < obs_dims[:, None])
    act = jax.random.uniform(k[1], (H, B, A), minval=-1, maxval=1) * TASKS.action_masks[task]
    return Batch(obs=obs, action=act, reward=3 * jax.random.normal(k[2], (H, B)),
                 task=jnp.asarray(task))


def _warm_q(params, key):
    """Random final Q/target-Q kernels, so Q values (and the discount) matter."""
    out = dict(params)
    for i, name in enumerate(("qs", "target_qs")):
        q = params[name]
        k = jax.random.normal(jax.random.fold_in(key, i), q["layer2"]["kernel"].shape)
        out[name] = {**q, "layer2": {**q["layer2"], "kernel": 0.3 * k}}
    return out


def _renorm_np(rows):
    n = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.where(n > 1, rows * (np.float32(1) / (n + np.float32(1e-7))), rows)


@pytest.fixture(scope="module")
def mt_run():
    st = init_train_state(jax.random.key(0), CFG)
    u = np.asarray(jax.random.normal(jax.random.key(5), (4, D)))
    table = (u / np.linalg.norm(u, axis=-1, keepdims=True) * NORMS[:, None]).astype(np.float32)
    params = _warm_q({**st.params, "task_emb": jnp.asarray(table)}, jax.random.key(6))
    st = st._replace(params=params)
    b = _batch(jax.random.key(1), BATCH_TASKS)
    n = draw_update_noise(jax.random.key(2), CFG)
    new, m, aux = _upd(st, b, n, CFG, TASKS)
    return st, b, n, new, m, aux


# ---- structure ------------------------------------------------------------------------
def test_param_count_mt_reference():
    cfg = TDMPC2Config(obs_dim=39, action_dim=6, num_tasks=80, task_dim=96)
    shapes = jax.eval_shape(lambda: wm.init_params(jax.random.key(0), cfg))
    assert wm.param_count(shapes) == {
        "encoder": 167_936, "dynamics": 843_264, "reward": 631_397, "pi": 582_668,
        "qs": 3_156_985, "task_emb": 7_680, "total": 5_389_930}


def test_task_context_config_and_init():
    np.testing.assert_array_equal(TASKS.action_masks, [[1, 1, 1], [1, 0, 0], [1, 1, 0],
                                                       [1, 1, 1]])
    assert TASKS.discounts.dtype == jnp.float32 and TASKS.action_dims.dtype == jnp.int32
    np.testing.assert_array_equal(TASKS.discounts, np.float32([0.99, 0.95, 0.995, 0.99]))
    heur = mt.make_task_context(TASKSET, discount="heuristic")
    np.testing.assert_array_equal(heur.discounts, TASKS.discounts)
    assert (CFG.num_tasks, CFG.task_dim, CFG.obs_dim, CFG.action_dim) == (4, 4, 5, 3)
    paper = mt.multitask_config(TASKSET)
    assert (paper.task_dim, paper.batch_size, paper.latent_dim) == (96, 1024, 512)
    # padded-A iteration rule: +2 iterations read the padded width (spec 3.1)
    wide = TaskSet("w", (TaskInfo("x", 3, 21, 500, 2, .99), TaskInfo("y", 3, 1, 500, 2, .99)),
                   (None, None), "test")
    assert mt.multitask_config(wide).planning_iterations == 8
    with pytest.raises(ValueError, match="discount"):
        mt.make_task_context(TASKSET, discount="nope")
    emb = np.asarray(wm.init_task_embedding(jax.random.key(0), CFG))
    assert emb.shape == (4, 4) and np.abs(emb).max() <= 0.02
    assert np.abs(emb).max() > 0.01 and abs(emb.mean()) < 0.01
    np.testing.assert_array_equal(mt.pad_obs(jnp.ones((2, 3)), 5), [[1, 1, 1, 0, 0]] * 2)


def test_renorm_rows_binds_only_above_one_and_only_for_looked_up_rows():
    table = np.array([[3.0, 4.0], [0.6, 0.0], [0.0, 2.0], [1.0, 0.0]], np.float32)
    out = np.asarray(mt.renorm_rows(jnp.asarray(table), jnp.array([0, 1, 1, 3])))
    np.testing.assert_allclose(out[0], table[0] / (5.0 + 1e-7), rtol=1e-6)
    np.testing.assert_array_equal(out[1], table[1])   # norm < 1
    np.testing.assert_array_equal(out[2], table[2])   # norm 2, not looked up
    np.testing.assert_array_equal(out[3], table[3])   # norm exactly 1: not > 1
    e = mt.eval_task_embedding({"task_emb": jnp.asarray(table)}, jnp.int32(2))
    np.testing.assert_allclose(e, table[2] / (2.0 + 1e-7), rtol=1e-6)


# ---- the update -----------------------------------------------------------------------
@pytest.mark.slow
def test_renorm_written_back_at_both_lookups(mt_run):
    st, b, n, new, m, aux = mt_run
    t0 = np.asarray(st.params["task_emb"])
    look1 = np.asarray(aux["task_emb_lookup1"])
    # look-up 1 (before the TD target): rows 0, 1 (norm 3, 1.5) renormed, 2 (0.5) and
    # the absent row 3 (norm 2) untouched
    np.testing.assert_allclose(look1[:2], _renorm_np(t0[:2]), rtol=1e-6)
    np.testing.assert_array_equal(look1[2:], t0[2:])
    # the world-model Adam (full lr, inside the global clip) moves the renormed table
    g = np.asarray(aux["grads_wm"]["task_emb"])
    assert np.all(g[3] == 0) and np.all(np.abs(g[:3]).sum(-1) > 0)
    sq = sum(float(jnp.sum(x ** 2)) for x in jax.tree.leaves(aux["grads_wm"]))
    np.testing.assert_allclose(float(m["grad_norm"]) ** 2, sq, rtol=1e-5)  # pi_grad_sq = 0
    gc = g * min(1.0, 20.0 / (float(m["grad_norm"]) + 1e-6))
    after = np.asarray(aux["task_emb_after_step"])
    np.testing.assert_allclose(after, look1 - CFG.lr * gc / (np.abs(gc) + 1e-8),
                               rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(after[3], t0[3])  # absent: no grad, zero moments
    # look-up 2 (policy loss, after the step): renorm again where the step pushed a
    # row above 1; nothing else (no policy gradient) changes the table
    post = np.linalg.norm(after, axis=-1)
    assert np.any(post[:3] > 1) and np.any(post[:3] <= 1)
    final = np.asarray(new.params["task_emb"])
    np.testing.assert_allclose(final[:3], _renorm_np(after[:3]), rtol=1e-6)
    assert np.all(np.linalg.norm(final[:3], axis=-1) <= 1)
    np.testing.assert_array_equal(final[3], t0[3])
    assert np.linalg.norm(final[3]) > 1.9            # absent rows are never renormed


@pytest.mark.slow
def test_per_task_discount_in_td_target(mt_run):
    _, b, _, _, _, aux = mt_run
    gam = np.float32([0.99, 0.95, 0.995])[BATCH_TASKS]
    np.testing.assert_array_equal(aux["td_discount"], gam)
    qmin = np.min(np.asarray(aux["td_q_pair"]), axis=0)
    assert np.abs(qmin).max() > 0.05
    want = np.asarray(b.reward) + gam[None, :] * qmin
    np.testing.assert_allclose(aux["td_target"], want, rtol=1e-6, atol=1e-6)
    other = np.asarray(b.reward) + np.float32(0.99) * qmin
    assert np.abs(np.asarray(aux["td_target"]) - other).max() > 1e-3


@pytest.mark.parametrize("which,eps_name", [("td_pi", "td_target_pi_eps"),
                                            ("pi", "pi_loss_pi_eps")])
@pytest.mark.slow
def test_policy_masks_and_entropy_scaled_by_valid_dims(mt_run, which, eps_name):
    _, _, noise, _, _, aux = mt_run
    out = aux[which]
    mask = np.asarray(TASKS.action_masks)[BATCH_TASKS]                     # [B,A]
    for x in (out.action, out.mean, out.log_std):
        assert np.all(np.asarray(x)[..., mask == 0] == 0)                   # exactly 0
    eps = np.asarray(getattr(noise, eps_name)) * mask
    a = np.asarray(out.action, np.float64)
    n_valid = mask.sum(-1)[:, None]
    gauss = np.sum(-0.5 * eps ** 2 - np.asarray(out.log_std), -1, keepdims=True)
    want = n_valid * (gauss - 0.9189385175704956) - np.sum(
        np.log(np.maximum(1 - a ** 2, 0) + 1e-6), -1, keepdims=True)
    np.testing.assert_allclose(out.log_pi, want, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_policy_loss_gives_no_gradient_to_the_embedding(mt_run):
    st, b, noise, new, _, aux = mt_run
    e = new.params["task_emb"][b.task]
    mask = TASKS.action_masks[b.task]

    @jax.jit
    def grads(e):
        def f(pi_params, e):
            return policy_loss(pi_params, st.params, aux["zs"], new.params["qs"], st.scale,
                               noise.pi_loss_pi_eps, noise.pi_loss_q_pair,
                               noise.pi_loss_dropout_key, CFG, e=e, mask=mask)[0]
        return jax.grad(f, argnums=(0, 1))(st.params["pi"], e)

    g_pi, g_e = grads(e)
    assert np.all(np.asarray(g_e) == 0)
    assert float(optax.global_norm(g_pi)) > 0


# ---- equivalence with the single-task code -------------------------------------------
def _rows(cfg):
    return {"encoder": cfg.obs_dim, "dynamics": L, "reward": L, "pi": L, "qs": L,
            "target_qs": L}


def _neutral_mt_and_st(params):
    """MT params whose embedding contributes exactly 0 (task 0's row and the kernel
    rows reading e are 0), and the single-task params obtained by slicing them."""
    mtp, stp = dict(params), {}
    mtp["task_emb"] = params["task_emb"].at[0].set(0.0)
    for mod, r0 in _rows(CFG).items():
        k = params[mod]["layer0"]["kernel"]
        ax = k.ndim - 2
        k0 = k.at[..., r0:r0 + D, :].set(0.0)
        mtp[mod] = {**params[mod], "layer0": {**params[mod]["layer0"], "kernel": k0}}
        keep = np.r_[0:r0, r0 + D:k.shape[ax]]
        stp[mod] = {**params[mod], "layer0": {**params[mod]["layer0"],
                                              "kernel": jnp.take(k0, keep, axis=ax)}}
    return mtp, stp


def _slice_st(params):
    return _neutral_mt_and_st(params)[1]


def _state(params, cfg):
    return TrainState(params=params, wm_opt_state=wm_optimizer(cfg).init(wm_params(params)),
                      pi_opt_state=pi_optimizer(cfg).init(params["pi"]),
                      scale=RunningScale(rate=cfg.tau).init(),
                      pi_grad_sq=jnp.zeros((), jnp.float32), step=jnp.zeros((), jnp.int32))


@pytest.mark.slow
def test_single_task_no_padding_equals_single_task_update(mt_run):
    st, _, noise, _, _, _ = mt_run
    mtp, stp = _neutral_mt_and_st(st.params)
    b = _batch(jax.random.key(11), np.zeros(B, np.int32))        # task 0: full dims
    new_mt, m_mt, aux_mt = _upd(_state(mtp, CFG), b, noise, CFG, TASKS)
    new_st, m_st, aux_st = _upd(_state(stp, CFG_ST), b._replace(task=None), noise, CFG_ST)
    for k in m_st:
        np.testing.assert_allclose(m_mt[k], m_st[k], rtol=2e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose(aux_mt["td_target"], aux_st["td_target"], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(new_mt.params["task_emb"][0]) == 0)   # zero grad, zero step
    got = _slice_st(new_mt.params)
    for mod in ("encoder", "dynamics", "reward", "pi", "qs", "target_qs"):
        for x, y in zip(jax.tree.leaves(got[mod]), jax.tree.leaves(new_st.params[mod])):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6, err_msg=mod)


# ---- planning -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plan_params(mt_run):
    return _neutral_mt_and_st(mt_run[3].params)


@pytest.mark.slow
@pytest.mark.parametrize("eval_mode", [True, False])
def test_planner_action_masked_dims_exactly_zero(plan_params, eval_mode):
    mtp, _ = plan_params
    noise = pl.draw_plan_noise(jax.random.key(3), CFG, eval_mode=eval_mode)
    obs = mt.pad_obs(jnp.array([0.3, -1.2, 0.7]), CFG.obs_dim)
    prev = jnp.full((H, A), 0.5) * TASKS.action_masks[1]
    for t0 in (True, False):
        a, mean, _ = mt.plan_task(mtp, obs, prev, jnp.bool_(t0), noise, CFG, TASKS,
                                  jnp.int32(1), eval_mode=eval_mode)
        a, mean = np.asarray(a), np.asarray(mean)
        assert np.all(a[1:] == 0) and np.all(mean[:, 1:] == 0) and a[0] != 0
        assert -1 <= a[0] <= 1


@pytest.mark.slow
def test_single_task_no_padding_equals_single_task_plan(plan_params):
    mtp, stp = plan_params
    noise = pl.draw_plan_noise(jax.random.key(4), CFG, eval_mode=False)
    obs = jax.random.normal(jax.random.key(8), (S,))
    prev = jax.random.uniform(jax.random.key(9), (H, A), minval=-1, maxval=1)
    a_mt, m_mt, i_mt = mt.plan_task(mtp, obs, prev, jnp.bool_(False), noise, CFG, TASKS,
                                    jnp.int32(0), eval_mode=False)
    st_plan = jax.jit(lambda p, o, pm, t0, nz: pl.plan(p, o, pm, t0, nz, CFG_ST,
                                                       eval_mode=False))
    a_st, m_st, i_st = st_plan(stp, obs, prev, jnp.bool_(False), noise)
    assert int(i_mt["elite_index"]) == int(i_st["elite_index"])
    np.testing.assert_allclose(a_mt, a_st, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m_mt, m_st, rtol=1e-5, atol=1e-6)


def test_discount_powers_f32_are_float32_products():
    g = np.float32(0.99)
    p = [np.float32(x) for x in pl.discount_powers_f32(jnp.float32(0.99), 3)]
    assert p == [np.float32(1), g, g * g, (g * g) * g]


@pytest.mark.slow
def test_bad_multitask_inputs(mt_run):
    st, b, n, _, _, _ = mt_run
    with pytest.raises(ValueError, match="Batch.task"):
        _upd(st, b._replace(task=None), n, CFG, TASKS)
    with pytest.raises(ValueError, match="int"):
        _upd(st, b._replace(task=b.task[:3]), n, CFG, TASKS)
    with pytest.raises(ValueError, match="action_masks"):
        _upd(st, b, n, CFG, TASKS._replace(action_masks=TASKS.action_masks[:, :2]))
    noise = pl.draw_plan_noise(jax.random.key(3), CFG, eval_mode=True)
    with pytest.raises(ValueError, match="pad_obs"):
        mt.plan_task(st.params, jnp.ones(3), jnp.zeros((H, A)), jnp.bool_(True), noise, CFG,
                     TASKS, jnp.int32(1), eval_mode=True)
    with pytest.raises(ValueError, match="padded width"):
        mt.pad_obs(jnp.ones(6), 5)
