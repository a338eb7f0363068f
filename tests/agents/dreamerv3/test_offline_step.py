"""DreamerV3 trained from a dataset runs the online agent's training step: one code path,
two feeds (issue 14).

The offline trainer calls ``agent.update`` on dataset windows of batch_length + 1
rows without stored latents: the spec 5.11 zero-state start on the rows after
the context row (deviation W-D5). The online agent with replay_context 0 (a
reference option, spec 5.11) trains through ``agent.replay_train`` on windows of
batch_length rows of its replay with that same start. Fed the same trained rows
and the same draws, the two must give bit-identical states and metrics; the
context row of the dataset window is unused (it is junk here).

Default run: both feeds with `train.train_step` replaced by a recorder (cheap
programs): the online loop and the offline update hand it bit-identical
sequences and draws, and the step traces to the same program under either
config (replay_context plays no part in it). The slow test runs the real step
through both feeds (two compiles of the full update) and compares the states.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent
from wmx.agents.dreamerv3 import replay as replay_lib
from wmx.agents.dreamerv3.schedule import first_update_tick
from wmx.agents.dreamerv3.train import train_step
from wmx.envs.registry import get_task

TASK = get_task("probe-action").replace(T=12)        # O = 2, A = 2
N_ENVS = 2


def _rows(tick: int, cfg) -> replay_lib.Rows:
    """Row ``tick`` of both envs: varied obs, actions, rewards and latents; episodes of
    T + 1 rows (is_first / is_last at their ends)."""
    key = jax.random.fold_in(jax.random.key(11), tick)
    k = jax.random.split(key, 5)
    T = TASK.T
    stoch = jax.nn.one_hot(jax.random.randint(k[3], (N_ENVS, cfg.stoch), 0, cfg.classes),
                           cfg.classes)
    return replay_lib.Rows(
        obs=jax.random.normal(k[0], (N_ENVS, cfg.obs_dim)),
        action=jnp.where(tick % (T + 1) == T, 0.0,
                         jax.random.uniform(k[1], (N_ENVS, cfg.action_dim), minval=-1.5,
                                            maxval=1.5)),
        reward=jax.random.normal(k[2], (N_ENVS,)),
        is_first=jnp.full((N_ENVS,), tick % (T + 1) == 0),
        is_last=jnp.full((N_ENVS,), tick % (T + 1) == T),
        is_terminal=jnp.zeros((N_ENVS,), bool),
        deter=jax.random.normal(k[4], (N_ENVS, cfg.deter)), stoch=stoch)


@pytest.fixture(scope="module")
def setup():
    """(offline config: tiny, replay_context 1; online config: the same with replay_context
    0; the tick; its update count n; the replay after the tick's rows; the initial state)."""
    off_cfg = agent.make_config("tiny", {}, task=TASK)
    on_cfg = dataclasses.replace(off_cfg, replay_context=0)       # spec 5.11 option
    assert off_cfg.replay_context == 1 and on_cfg.seq_length == off_cfg.batch_length
    assert agent.batch_spec(off_cfg).length == off_cfg.batch_length + 1
    sched = agent.schedule(on_cfg, TASK.T, N_ENVS)
    tick = first_update_tick(sched.inner) + 3
    n = int(sched.n_updates(tick))
    assert n >= 1
    replay = agent.init_replay(on_cfg, N_ENVS, TASK.T, 4 * TASK.T * N_ENVS)
    add = jax.jit(replay_lib.add)
    for t in range(tick + 1):
        replay = add(replay, _rows(t, on_cfg))
    state = jax.jit(agent.init, static_argnums=1)(jax.random.key(0), off_cfg)
    return SimpleNamespace(off=off_cfg, on=on_cfg, tick=tick, n=n, replay=replay, state=state,
                           key=jax.random.key(5))


def _offline_windows(s):
    """The online loop's windows (its sampler, its keys) as the offline feed gives them:
    batch_length + 1 rows, a junk context row in front, the dataset annotation (is_first on
    the context row only), no latents. Returns [(window dict, noise key)] per update."""
    out, rp = [], s.replay
    B, L = s.on.batch_size, s.on.seq_length
    for j in range(s.n):
        k_sample, k_noise = jax.random.split(jax.random.fold_in(s.key, j))
        rp, rows, _ = replay_lib.sample(rp, k_sample, B, L)
        junk = jax.tree.map(lambda x: jnp.full_like(x[:, :1], 7), rows)
        window = {f: jnp.concatenate([getattr(junk, f), getattr(rows, f)], 1)
                  for f in ("obs", "action", "reward", "is_first", "is_last", "is_terminal")}
        window["is_first"] = window["is_first"].at[:, 1].set(False)
        out.append((window, k_noise))
    return out


def test_offline_update_feeds_the_online_training_step(setup, monkeypatch):
    """Both feeds call the one `train_step` with identical sequences and draws."""
    s = setup
    calls = []

    def recorder(state, seq, noise, c, tasks=None):
        assert tasks is None
        jax.debug.callback(lambda q, z: calls.append((q, z)), seq, noise, ordered=True)
        B, T = seq.reward.shape
        outs = SimpleNamespace(deter=jnp.zeros((B, T, c.deter)),
                               stoch=jnp.zeros((B, T, c.stoch, c.classes)))
        return state, {k: jnp.zeros(()) for k in agent.METRIC_KEYS}, outs

    monkeypatch.setattr(agent, "train_step", recorder)
    _, _, metrics = jax.jit(agent.replay_train, static_argnums=4)(
        s.state, s.replay, jnp.int32(s.tick), s.key, s.on, agent.init_metrics(s.on))
    assert float(metrics["updates"]) == s.n
    online, calls[:] = list(calls), []
    update = jax.jit(agent.update, static_argnums=3)
    for window, k_noise in _offline_windows(s):
        update(s.state, window, k_noise, s.off)
    jax.effects_barrier()
    offline = list(calls)
    assert len(online) == len(offline) == s.n
    for (q_on, z_on), (q_off, z_off) in zip(online, offline):
        assert q_off.obs.shape == (s.off.batch_size, s.off.batch_length, s.off.obs_dim)
        for name, a, b in [*zip(q_on._fields, q_on, q_off), *zip(z_on._fields, z_on, z_off)]:
            if a is None:
                assert b is None, name
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
        assert bool(np.all(np.asarray(q_off.is_first)[:, 0]))          # zero-state start
        np.testing.assert_array_equal(np.asarray(q_off.deter0), 0.0)
    # the step is one program under either config: replay_context plays no part in it
    q, z = offline[0]

    def jaxpr(c):
        return str(jax.make_jaxpr(lambda st, sq, nz: train_step(st, sq, nz, c))(s.state, q, z))
    assert jaxpr(s.on) == jaxpr(s.off)


@pytest.mark.slow
def test_offline_update_is_the_online_training_step(setup):
    """The real step through both feeds (two compiles of the full update): bit-identical
    states and metrics after the tick's updates."""
    s = setup
    online, _, metrics = jax.jit(agent.replay_train, static_argnums=4)(
        s.state, s.replay, jnp.int32(s.tick), s.key, s.on, agent.init_metrics(s.on))
    update = jax.jit(agent.update, static_argnums=3)
    state, sums = s.state, {k: np.float32(0) for k in agent.METRIC_KEYS}
    for window, k_noise in _offline_windows(s):
        state, m, outs = update(state, window, k_noise, s.off)
        assert outs["deter"].shape == (s.off.batch_size, s.off.batch_length, s.off.deter)
        sums = {k: sums[k] + np.float32(m[k]) for k in agent.METRIC_KEYS}
    for path, a in jax.tree_util.tree_leaves_with_path(online):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(_at(state, path)),
                                      err_msg=jax.tree_util.keystr(path))
    for k in agent.METRIC_KEYS:
        np.testing.assert_allclose(sums[k], float(metrics[k]), rtol=1e-6, err_msg=k)
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), s.state.params, online.params)
    assert any(jax.tree.leaves(moved))                   # the comparison can fail


def _at(tree, path):
    for p in path:
        tree = (tree[p.key] if hasattr(p, "key") else tree[p.idx] if hasattr(p, "idx")
                else getattr(tree, p.name))
    return tree
