"""Multi-task DreamerV3 (a wmx extension, deviation W-D8): configs and task tables of a
TaskSet, and the masks: a padded observation or action dimension changes nothing
(perturbing it leaves every loss and every gradient of a training step unchanged),
while a valid one does. One jitted multi-task step (`train.train_step_full`) per
module, on the tiny preset."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent
from wmx.agents.dreamerv3.loss import TERMS, draw_train_noise
from wmx.agents.dreamerv3.multitask import task_embedding
from wmx.agents.dreamerv3.train import train_step_full
from wmx.envs.registry import get_task
from wmx.schemas.taskset import TaskInfo, TaskSet

TASKS = ("cartpole-balance", "cheetah-run")       # (obs, action) = (5, 1), (17, 6)


@pytest.fixture(scope="module")
def taskset():
    infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=20)) for t in TASKS)
    return TaskSet("mt", infos, (None, None), "none")


@pytest.fixture(scope="module")
def cfg(taskset):
    return agent.make_config("tiny", {}, taskset=taskset)


@pytest.fixture(scope="module")
def step():
    fn = jax.jit(train_step_full, static_argnums=3)

    def run(*args):    # the module's one program, always at the same matmul precision
        with jax.default_matmul_precision("highest"):
            return fn(*args)
    return run


def test_config_and_task_context(taskset, cfg):
    assert (cfg.num_tasks, cfg.obs_dim, cfg.action_dim, cfg.task_dim) == (2, 17, 6, 96)
    counts = agent.param_counts(cfg)
    assert counts["task_emb"] == 2 * 96
    ctx = agent.task_context(cfg, taskset)
    np.testing.assert_array_equal(np.asarray(ctx.obs_masks).sum(1), [5, 17])
    np.testing.assert_array_equal(np.asarray(ctx.action_masks), [[1, 0, 0, 0, 0, 0], [1] * 6])
    np.testing.assert_allclose(np.asarray(ctx.discounts), [t.discount for t in taskset.tasks],
                               rtol=1e-7)
    assert all(abs(t.discount - (1 - 1 / 333)) > 1e-3 for t in taskset.tasks)  # tells them apart
    hor = agent.task_context(agent.make_config("tiny", {"task_discount": "horizon"},
                                               taskset=taskset), taskset)
    np.testing.assert_allclose(np.asarray(hor.discounts), [1 - 1 / 333] * 2, rtol=1e-7)
    # a one-task TaskSet is the online agent's single-task config of that task
    one = agent.make_config("tiny", {}, taskset=taskset.subset([TASKS[0]]))
    assert one == agent.make_config("tiny", {}, task=get_task(TASKS[0]))
    assert one.num_tasks == 0 and agent.task_context(one, taskset.subset([TASKS[0]])) is None
    with pytest.raises(ValueError, match="discrete_actions"):
        agent.make_config("tiny", {"discrete_actions": True}, taskset=taskset)
    with pytest.raises(ValueError, match="exactly one of task"):
        agent.make_config("tiny", {}, task=get_task(TASKS[0]), taskset=taskset)


def test_task_embedding_has_norm_at_most_one():
    table = jnp.asarray([[3.0, 4.0], [0.3, 0.4]])
    e = np.asarray(task_embedding(table, jnp.asarray([0, 1, 0])))
    np.testing.assert_allclose(e, [[0.6, 0.8], [0.3, 0.4], [0.6, 0.8]], rtol=1e-6)


def _batch(cfg, key):
    """Windows of both tasks (rows 0..4 task 0, 5..8 task 1), zero on the padded dims,
    plus the masks of the padded obs / action entries."""
    B, L, O, A = cfg.batch_size, cfg.seq_length, cfg.obs_dim, cfg.action_dim
    task = np.repeat((np.arange(B) >= 5).astype(np.int32)[:, None], L, 1)
    obs_dim = np.where(task[:, :1] == 0, 5, 17)[..., None]
    act_dim = np.where(task[:, :1] == 0, 1, 6)[..., None]
    pad_o = np.broadcast_to(np.arange(O) >= obs_dim, (B, L, O))
    pad_a = np.broadcast_to(np.arange(A) >= act_dim, (B, L, A))
    k = jax.random.split(key, 3)
    obs = np.where(pad_o, 0.0, np.asarray(jax.random.normal(k[0], (B, L, O))))
    act = np.where(pad_a, 0.0, np.asarray(jax.random.uniform(k[1], (B, L, A), minval=-1)))
    first = np.zeros((B, L), bool)
    first[:, 0] = True
    batch = {"obs": obs.astype(np.float32), "action": act.astype(np.float32),
             "reward": np.asarray(jax.random.uniform(k[2], (B, L))), "is_first": first,
             "is_last": np.zeros((B, L), bool), "is_terminal": np.zeros((B, L), bool),
             "task": task}
    return batch, pad_o, pad_a


def test_padded_dims_change_no_loss_and_no_gradient(taskset, cfg, step):
    ctx = agent.task_context(cfg, taskset)
    state = jax.jit(agent.init, static_argnums=1)(jax.random.PRNGKey(0), cfg)
    batch, pad_o, pad_a = _batch(cfg, jax.random.PRNGKey(1))
    B, T = cfg.batch_size, cfg.batch_length
    noise = draw_train_noise(jax.random.PRNGKey(2), cfg, B, T)

    def run(b):
        seq = agent.window_sequence({k: jnp.asarray(v) for k, v in b.items()}, cfg)
        new, metrics, _, grads, aux = step(state, seq, noise, cfg, ctx)
        return new, metrics, grads, aux

    new0, m0, g0, aux0 = run(batch)
    rng = np.random.default_rng(3)
    noisy = dict(batch)
    noisy["obs"] = np.where(pad_o, rng.normal(size=pad_o.shape) * 5, batch["obs"]).astype(np.float32)
    noisy["action"] = np.where(pad_a, rng.uniform(-3, 3, pad_a.shape), batch["action"]
                               ).astype(np.float32)
    assert not np.array_equal(noisy["obs"], batch["obs"])
    assert not np.array_equal(noisy["action"], batch["action"])
    new1, m1, g1, aux1 = run(noisy)
    for k in TERMS:                                    # every loss, every element
        np.testing.assert_array_equal(np.asarray(aux0.losses[k]), np.asarray(aux1.losses[k]),
                                      err_msg=k)
    for path, a in jax.tree_util.tree_leaves_with_path(g0):   # every gradient
        b = g1
        for p in path:
            b = b[p.key]
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b),
                                      err_msg=jax.tree_util.keystr(path))
    for a, b in zip(jax.tree.leaves(new0), jax.tree.leaves(new1)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a valid dimension does change them (the check can fail)
    valid = dict(batch)
    valid["obs"] = batch["obs"].copy()
    valid["obs"][:, :, 0] += 1.0
    _, _, g2, aux2 = run(valid)
    assert not np.array_equal(np.asarray(aux0.losses["vector"]), np.asarray(aux2.losses["vector"]))
    assert not np.array_equal(np.asarray(g0["enc"]["h0"]["kernel"]),
                              np.asarray(g2["enc"]["h0"]["kernel"]))
    # the task embedding is trained (by the world-model losses), each task's own row
    emb = np.asarray(g0["task_emb"])
    assert np.all(np.abs(emb).sum(1) > 0)
