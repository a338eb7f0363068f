"""The agent protocol's contract, for every agent of the registry.

`wmx.agents.api.Agent`: each registered agent builds its presets, inits a
state, acts with the right shapes (and resets its carry where is_first),
trains one update on a batch of its own `batch_spec`, counts its parameters,
round-trips its state through a checkpoint, and runs its online pieces
(schedule, replay) inside jit. A new agent joins by adding one registry entry.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents import api
from wmx.agents.registry import AGENTS, agent_names, get_agent
from wmx.checkpoint import list_checkpoints, restore_checkpoint, save_checkpoint
from wmx.datasets.samplers import sample
from wmx.envs.collector import Row
from wmx.envs.registry import get_task
from wmx.schemas.taskset import TaskInfo, TaskSet

TASK = get_task("probe-action").replace(T=12)          # O = 2, A = 2
N = 3                                                   # envs acted on together


def _taskset():
    infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=12))
                  for t in ("probe-action", "probe-constant"))
    return TaskSet("contract", infos, (None,) * len(infos), "none")


@pytest.fixture(scope="module", params=agent_names())
def agent(request):
    return get_agent(request.param)


@pytest.fixture(scope="module")
def cfg(agent):
    return agent.make_config("tiny", {}, task=TASK)


@pytest.fixture(scope="module")
def state(agent, cfg):
    return jax.jit(agent.init, static_argnums=1)(jax.random.PRNGKey(0), cfg)


def test_module_implements_the_protocol(agent):
    assert isinstance(agent, api.Agent)
    assert agent.NAME in AGENTS and AGENTS[agent.NAME].module == agent.__name__
    assert {"paper", "cpu", "tiny"} <= set(agent.PRESETS)
    assert len(agent.METRIC_KEYS) == len(set(agent.METRIC_KEYS)) > 0


def test_presets_give_frozen_hashable_configs(agent):
    for preset in agent.PRESETS:
        c = agent.make_config(preset, {}, task=TASK)
        hash(c)
        assert dataclasses.is_dataclass(c)
        with pytest.raises(dataclasses.FrozenInstanceError):
            c.obs_dim = 99
        assert (c.obs_dim, c.action_dim) == (TASK.obs_dim, TASK.action_dim)
    with pytest.raises(ValueError, match="preset"):
        agent.make_config("no-such-preset", {}, task=TASK)
    with pytest.raises(ValueError, match="no_such_field"):
        agent.make_config("tiny", {"no_such_field": 1}, task=TASK)
    if agent.MULTITASK:
        ts = _taskset()
        mc = agent.make_config("tiny", {}, taskset=ts)
        assert (mc.obs_dim, mc.action_dim) == (ts.max_obs_dim, ts.max_action_dim)
        assert agent.task_context(mc, ts) is not None
    assert agent.task_context(agent.make_config("tiny", {}, task=TASK), None) is None


def test_param_counts_sum_to_total(agent, cfg):
    counts = agent.param_counts(cfg)
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total") > 0


def test_policy_shapes_bounds_and_reset_on_is_first(agent, cfg, state):
    params = agent.policy_params(state)
    carry = agent.init_policy(cfg, N)
    obs = jax.random.normal(jax.random.PRNGKey(1), (N, cfg.obs_dim))
    step = jax.jit(lambda c, f, k: agent.policy(params, cfg, c, obs, f, k, eval_mode=False))
    key = jax.random.PRNGKey(2)
    c1, a1, e1 = step(carry, jnp.ones((N,), bool), key)
    assert a1.shape == (N, cfg.action_dim) and a1.dtype == jnp.float32
    assert bool(jnp.all(jnp.abs(a1) <= 1.0))
    for leaf in jax.tree.leaves(e1):
        assert leaf.shape[0] == N
    for leaf in jax.tree.leaves(c1):
        assert leaf.shape[0] == N
    # is_first resets the carry: a garbage carry gives the same action as a fresh one
    garbage = jax.tree.map(lambda x: x + 0.37, carry)
    _, a2, _ = step(garbage, jnp.ones((N,), bool), key)
    np.testing.assert_array_equal(np.asarray(a1), np.asarray(a2))
    # and without is_first the carry is used
    _, a3, _ = step(garbage, jnp.zeros((N,), bool), key)
    assert not np.array_equal(np.asarray(a1), np.asarray(a3))


def _dataset(cfg, n_eps=4, rows=TASK.T + 1):
    rng = np.random.default_rng(0)
    first = np.zeros((n_eps, rows), bool)
    first[:, 0] = True
    last = np.zeros((n_eps, rows), bool)
    last[:, -1] = True
    return {"obs": jnp.asarray(rng.normal(size=(n_eps, rows, cfg.obs_dim)), jnp.float32),
            "action": jnp.asarray(rng.uniform(-1, 1, (n_eps, rows, cfg.action_dim)),
                                  jnp.float32),
            "reward": jnp.asarray(rng.uniform(size=(n_eps, rows)), jnp.float32),
            "is_first": jnp.asarray(first), "is_last": jnp.asarray(last),
            "is_terminal": jnp.zeros((n_eps, rows), bool),
            "task": jnp.zeros((n_eps,), jnp.int32)}


def test_one_update_on_its_batch_spec_traces(agent, cfg, state):
    """The update on a batch of the agent's own spec, traced (not compiled: every
    agent's update runs, compiled, in its parity tests and in the trainers' tests)."""
    spec = agent.batch_spec(cfg)
    assert isinstance(spec, api.BatchSpec) and spec.kind in ("slices", "windows")
    batch = sample(_dataset(cfg), jax.random.PRNGKey(3), spec)
    new, metrics, outs = jax.eval_shape(lambda s, b, k: agent.update(s, b, k, cfg),
                                        state, batch, jax.random.PRNGKey(4))
    assert {k: (v.shape, v.dtype) for k, v in metrics.items()} == {
        k: ((), jnp.float32) for k in agent.METRIC_KEYS}
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert all(a.shape == b.shape and a.dtype == b.dtype
               for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state)))


@pytest.mark.slow
def test_one_update_on_its_batch_spec_runs(agent, cfg, state):
    spec = agent.batch_spec(cfg)
    batch = sample(_dataset(cfg), jax.random.PRNGKey(3), spec)
    new, metrics, outs = jax.jit(agent.update, static_argnums=3)(state, batch,
                                                                  jax.random.PRNGKey(4), cfg)
    assert set(metrics) == set(agent.METRIC_KEYS)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    # the update writes the state (parameters, or only optimizer / normaliser state
    # where an agent's first step is a warmup no-op, as DreamerV3's lr ramp from 0)
    assert any(not np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(new)))


def test_state_checkpoint_round_trip(agent, cfg, state, tmp_path):
    save_checkpoint(tmp_path, 1, {"agent": state}, {})
    like = jax.eval_shape(lambda: agent.init(jax.random.PRNGKey(0), cfg))
    items, _ = restore_checkpoint(list_checkpoints(tmp_path)[-1], {"agent": like})
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(items["agent"])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_online_schedule_replay_and_train_in_jit(agent, cfg, state):
    T, n_envs = TASK.T, 2
    sched = agent.schedule(cfg, T, n_envs)
    ticks = list(range(0, 6 * (T + 1)))
    modes = [sched.action_mode(t) for t in ticks]
    counts = [sched.n_updates(t) for t in ticks]
    assert set(modes) <= {api.HELD, api.RANDOM, api.POLICY} and min(counts) >= 0
    on_device = jax.jit(jax.vmap(lambda t: (sched.action_mode(t), sched.n_updates(t))))
    dm, dn = on_device(jnp.asarray(ticks, jnp.int32))
    assert np.asarray(dm).tolist() == modes and np.asarray(dn).tolist() == counts
    replay = agent.init_replay(cfg, n_envs, T, 6 * T * n_envs)
    metrics = agent.init_metrics(cfg)
    assert set(agent.read_metrics(jax.device_get(metrics))) == set(agent.METRIC_KEYS)
    entries = jax.tree.map(
        lambda s: jnp.zeros(s.shape, s.dtype),
        jax.eval_shape(lambda st: agent.policy(agent.policy_params(st), cfg,
                                               agent.init_policy(cfg, n_envs),
                                               jnp.zeros((n_envs, cfg.obs_dim)),
                                               jnp.ones((n_envs,), bool), jax.random.PRNGKey(0),
                                               eval_mode=False)[2], state))

    def tick_fn(state, replay, tick):
        row = Row(obs=jnp.full((n_envs, cfg.obs_dim), 0.5), action=jnp.zeros((n_envs,
                                                                              cfg.action_dim)),
                  reward=jnp.ones((n_envs,)), is_first=jnp.full((n_envs,), tick % (T + 1) == 0),
                  is_last=jnp.full((n_envs,), tick % (T + 1) == T),
                  is_terminal=jnp.zeros((n_envs,), bool))
        replay = agent.replay_add(replay, tick, row, entries, cfg)
        return agent.replay_train(state, replay, tick, jax.random.PRNGKey(5), cfg, metrics)

    # traced, not compiled: shapes and structure of one online tick
    s, r, m = jax.eval_shape(tick_fn, state, replay, jnp.int32(T))
    assert jax.tree.structure(r) == jax.tree.structure(replay)
    assert jax.tree.structure(s) == jax.tree.structure(state)
    assert {k: v.shape for k, v in m.items()} == {k: () for k in metrics}
