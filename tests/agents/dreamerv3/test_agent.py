"""DreamerV3's protocol adapter beyond the agent-neutral contract
(tests/agents/test_contract.py): its config rules, parameter counts, the
acting / replay action convention (clipped to the env, unclipped in the
carry and the replay), the two window paths of `update`, and the online
replay_train loop run for real (sampling, updates, latent write-back).
"""
from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent
from wmx.agents.dreamerv3 import replay as replay_lib
from wmx.agents.dreamerv3.loss import draw_train_noise
from wmx.agents.dreamerv3.schedule import first_update_tick
from wmx.agents.dreamerv3.train import train_step
from wmx.envs.collector import Row
from wmx.envs.registry import get_task
from wmx.schemas.taskset import TaskInfo, TaskSet

TASK = get_task("probe-action").replace(T=12)          # O = 2, A = 2 (the contract's task)


@pytest.fixture(scope="module")
def cfg():
    return agent.make_config("tiny", {}, task=TASK)


@pytest.fixture(scope="module")
def state(cfg):
    """agent.init as the contract test calls it (jit's cache can serve both)."""
    return jax.jit(agent.init, static_argnums=1)(jax.random.PRNGKey(0), cfg)


def test_make_config_task_model_size_and_taskset():
    walker = get_task("walker-walk")
    c = agent.make_config("paper", {}, task=walker)
    assert (c.obs_dim, c.action_dim, c.model_size, c.units, c.deter) == (24, 6, "12m", 256, 2048)
    # model_size replaces the preset's explicit widths; explicit widths still win
    c = agent.make_config("tiny", {"model_size": "1m"}, task=walker)
    assert (c.units, c.deter, c.hidden, c.classes, c.batch_size) == (64, 512, 64, 4, 9)
    c = agent.make_config("tiny", {"model_size": "1m", "units": 32}, task=walker)
    assert (c.units, c.deter) == (32, 512)
    with pytest.raises(ValueError, match="model_size"):
        agent.make_config("paper", {"model_size": "13m"}, task=walker)
    ts = TaskSet("two", tuple(TaskInfo.from_spec(get_task(t)) for t in ("walker-walk",
                                                                         "cheetah-run")),
                 (None, None), "none")
    mc = agent.make_config("paper", {}, taskset=ts)             # multi-task (W-D8)
    assert (mc.num_tasks, mc.obs_dim, mc.action_dim) == (2, 24, 6) and agent.MULTITASK
    assert agent.task_context(c, ts) is None                     # c is single-task
    with pytest.raises(ValueError, match="num_tasks is set by make_config"):
        agent.make_config("paper", {"num_tasks": 2}, task=walker)


def test_param_counts_walker_walk():
    """The dry-run counts (slow critic not counted), pinned: walker-walk, 12m and 1m."""
    walker = get_task("walker-walk")
    big = agent.param_counts(agent.make_config("paper", {}, task=walker))
    small = agent.param_counts(agent.make_config("paper", {"model_size": "1m"}, task=walker))
    assert big["total"] == sum(v for k, v in big.items() if k != "total") == 9_738_533
    assert small["total"] == 640_997
    assert (big["rssm"], small["rssm"]) == (5_783_040, 364_416)


def test_policy_clips_the_env_action_and_keeps_the_raw_sample(cfg, state):
    n = 64
    obs = jax.random.normal(jax.random.key(1), (n, cfg.obs_dim))

    @jax.jit
    def both(carry, first, key):   # one program for both modes
        return (agent.policy(state.params, cfg, carry, obs, first, key, eval_mode=False),
                agent.policy(state.params, cfg, carry, obs, first, key, eval_mode=True))

    (carry, action, entries), (_, action_eval, _) = both(
        agent.init_policy(cfg, n), jnp.ones((n,), bool), jax.random.key(2))
    raw = np.asarray(entries["action"])
    assert np.abs(raw).max() > 1.0                      # std ~0.89: some samples leave [-1, 1]
    np.testing.assert_array_equal(action, np.clip(raw, -1, 1))
    np.testing.assert_array_equal(carry.prevact, raw)   # the carry keeps the raw sample (7.1)
    np.testing.assert_array_equal(carry.deter, entries["deter"])
    np.testing.assert_array_equal(np.sort(entries["stoch"], -1)[..., -1], 1.0)
    np.testing.assert_array_equal(np.asarray(entries["stoch"]).sum(-1), 1.0)
    # eval mode samples too (spec 7.3): the same key gives the same action
    np.testing.assert_array_equal(action, action_eval)


def _row(n_envs, cfg, last, value=0.5):
    return Row(obs=jnp.full((n_envs, cfg.obs_dim), value),
               action=jnp.zeros((n_envs, cfg.action_dim)), reward=jnp.ones((n_envs,)),
               is_first=jnp.zeros((n_envs,), bool), is_last=jnp.full((n_envs,), last),
               is_terminal=jnp.zeros((n_envs,), bool))


def _entries(key, n_envs, cfg):
    k1, k2, k3 = jax.random.split(key, 3)
    stoch = jax.nn.one_hot(jax.random.randint(k2, (n_envs, cfg.stoch), 0, cfg.classes),
                           cfg.classes)
    return {"deter": jax.random.normal(k1, (n_envs, cfg.deter)), "stoch": stoch,
            "action": 2.0 * jax.random.normal(k3, (n_envs, cfg.action_dim))}


def test_replay_add_stores_the_raw_action_zero_on_is_last(cfg):
    replay = agent.init_replay(cfg, 2, TASK.T, 4 * TASK.T * 2)
    e = _entries(jax.random.key(0), 2, cfg)
    replay = agent.replay_add(replay, 0, _row(2, cfg, False), e, cfg)
    replay = agent.replay_add(replay, 1, _row(2, cfg, True), e, cfg)
    np.testing.assert_array_equal(replay.action[:, 0], e["action"])   # unclipped (7.4)
    np.testing.assert_array_equal(replay.action[:, 1], 0.0)           # driver zeroes (7.2)
    np.testing.assert_array_equal(replay.deter[:, 0], e["deter"])
    np.testing.assert_array_equal(replay.stoch[:, 0], np.asarray(e["stoch"], bool))
    assert int(replay.rows) == 2


def _windows(cfg, latents: bool):
    rng = np.random.default_rng(0)
    B, L = cfg.batch_size, cfg.seq_length
    first = np.zeros((B, L), bool)
    first[:, 0] = True
    first[0, 3] = True
    out = {"obs": rng.normal(size=(B, L, cfg.obs_dim)).astype(np.float32),
           "action": rng.uniform(-1, 1, (B, L, cfg.action_dim)).astype(np.float32),
           "reward": rng.normal(size=(B, L)).astype(np.float32), "is_first": first,
           "is_last": np.roll(first, -1, 1) & ~np.eye(1, L, L - 1, dtype=bool),
           "is_terminal": np.zeros((B, L), bool)}
    if latents:
        out["deter"] = rng.normal(size=(B, L, cfg.deter)).astype(np.float32)
        idx = rng.integers(0, cfg.classes, (B, L, cfg.stoch))
        out["stoch"] = np.eye(cfg.classes, dtype=np.float32)[idx]
    return {k: jnp.asarray(v) for k, v in out.items()}


def test_window_sequence_context_and_zero_state_paths(cfg):
    with_latents = _windows(cfg, True)
    seq = agent.window_sequence(with_latents, cfg)
    ctx = replay_lib.replay_context(replay_lib.Rows(*(with_latents[k] for k in
                                                      replay_lib.Rows._fields)))
    for a, b in zip(seq, ctx):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(seq.deter0, with_latents["deter"][:, 0])
    np.testing.assert_array_equal(seq.prevact, with_latents["action"][:, :-1])   # 29eb964
    # no stored latents: zero carry, the context row dropped, first trained row is_first
    zero = agent.window_sequence(_windows(cfg, False), cfg)
    assert zero.obs.shape[1] == cfg.batch_length == seq.obs.shape[1]
    np.testing.assert_array_equal(zero.deter0, 0.0)
    np.testing.assert_array_equal(zero.stoch0, 0.0)
    np.testing.assert_array_equal(zero.prevact[:, 0], 0.0)
    np.testing.assert_array_equal(zero.prevact[:, 1:], with_latents["action"][:, 1:-1])
    assert bool(zero.is_first[:, 0].all()) and not bool(seq.is_first[1:, 0].any())
    np.testing.assert_array_equal(zero.obs, with_latents["obs"][:, 1:])
    np.testing.assert_array_equal(zero.is_first[0, 2], True)   # the mid-window start kept


def test_discrete_actions_trace(cfg):
    """The discrete-actor path of the step (one-hot policy with unimix) has the right
    shapes and a scalar loss (traced, not compiled)."""
    dcfg = agent.make_config("tiny", {"discrete_actions": True}, task=TASK.replace(action_dim=3))
    state = jax.eval_shape(lambda k: agent.init(k, dcfg), jax.random.key(0))
    seq = agent.window_sequence(_windows(dcfg, True), dcfg)
    B, T = seq.reward.shape
    noise = jax.eval_shape(lambda k: draw_train_noise(k, dcfg, B, T), jax.random.key(0))
    assert noise.start.shape == (B * T,) and noise.imag_policy.shape == (B * T, dcfg.imag_horizon)
    new, metrics, outs = jax.eval_shape(lambda s, q, z: train_step(s, q, z, dcfg), state, seq,
                                        noise)
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert metrics["act/action/dist"].shape == (B * T * (dcfg.imag_horizon + 1) * 3,)
    assert outs.deter.shape == (B, T, dcfg.deter)


def _online_ticks(cfg, state, ticks, n_envs=2):
    """Run ticks 0..ticks-1 of replay_add + replay_train (jitted once) on synthetic rows
    with known policy entries. Returns (state, replay, metrics, updates per tick,
    the entries' deter f32[n_envs, ticks, D])."""
    T = TASK.T
    sched = agent.schedule(cfg, T, n_envs)
    replay = agent.init_replay(cfg, n_envs, T, 4 * T * n_envs)
    metrics = agent.init_metrics(cfg)

    def entries(tick):
        return _entries(jax.random.fold_in(jax.random.key(9), tick), n_envs, cfg)

    @jax.jit
    def tick_fn(state, replay, metrics, tick):
        f = jnp.asarray(tick, jnp.float32)
        row = Row(obs=jnp.sin(f + jnp.arange(n_envs * cfg.obs_dim, dtype=jnp.float32)
                              ).reshape(n_envs, -1),
                  action=jnp.zeros((n_envs, cfg.action_dim)),
                  reward=jnp.cos(f + jnp.arange(n_envs, dtype=jnp.float32)),
                  is_first=jnp.full((n_envs,), tick % (T + 1) == 0),
                  is_last=jnp.full((n_envs,), tick % (T + 1) == T),
                  is_terminal=jnp.zeros((n_envs,), bool))
        replay = agent.replay_add(replay, tick, row, entries(tick), cfg)
        return agent.replay_train(state, replay, tick, jax.random.key(5), cfg, metrics)

    counts = []
    for tick in range(ticks):
        state, replay, metrics = tick_fn(state, replay, metrics, jnp.int32(tick))
        counts.append(sched.n_updates(tick))
    fresh = np.stack([np.asarray(entries(t)["deter"]) for t in range(ticks)], 1)
    return state, replay, metrics, counts, fresh


def test_replay_train_loop_with_a_stub_step(cfg, state, monkeypatch):
    """The online loop's glue, cheaply (the step replaced by a stub that writes the
    update index into the latents): the schedule's update count per tick, the online
    queue popped first, each window's rows 1..L-1 written back, never row 0."""
    L = cfg.seq_length

    def stub_step(state, seq, noise, c):
        B, T = seq.reward.shape
        j = state.updates.astype(jnp.float32)
        deter = jnp.broadcast_to(100.0 + j, (B, T, c.deter))
        stoch = jnp.broadcast_to(jax.nn.one_hot(jnp.zeros((), jnp.int32), c.classes),
                                 (B, T, c.stoch, c.classes))
        metrics = {k: j for k in agent.METRIC_KEYS}
        outs = SimpleNamespace(deter=deter, stoch=stoch)
        # context carry and trained rows: the stored latents of row 0 and rows 1..L-1
        assert seq.deter0.shape == (B, c.deter) and T == L - 1
        return state._replace(updates=state.updates + 1), metrics, outs

    monkeypatch.setattr(agent, "train_step", stub_step)
    ticks = first_update_tick(agent.schedule(cfg, TASK.T, 2).inner) + 4
    state, replay, metrics, counts, fresh = _online_ticks(cfg, state, ticks)
    total = sum(counts)
    assert counts[:ticks - 4] == [0] * (ticks - 4) and total >= 4
    assert int(state.updates) == total
    # the metrics carry sums every update's values (update j reports j) and counts them
    assert float(metrics["opt_loss"]) == sum(range(total))
    assert float(metrics["updates"]) == total
    assert agent.read_metrics(jax.device_get(metrics))["opt_loss"] == (total - 1) / 2
    assert agent.read_metrics(jax.device_get(agent.init_metrics(cfg)))["opt_loss"] == ""
    assert int(replay.popped) == 2                             # both envs' first online item
    deter = np.asarray(replay.deter)[:, :ticks, 0]
    written = deter >= 100.0
    np.testing.assert_array_equal(deter[~written], fresh[..., 0][~written])
    assert not written[:, 0].any()                             # row 0: context only
    assert written[:, 1:L].all()                               # the popped items' rows
    # the first update popped the online items (start 1): rows 1..L-1 got update 0's
    # latents unless a later window covered them
    assert set(np.unique(deter[written])) <= {100.0 + j for j in range(total)}


@pytest.mark.slow
def test_replay_train_online_loop(cfg, state):
    """The same loop with the real training step (compiles the full update)."""
    ticks = first_update_tick(agent.schedule(cfg, TASK.T, 2).inner) + 3
    state, replay, metrics, counts, fresh = _online_ticks(cfg, state, ticks)
    assert sum(counts) >= 3 and int(state.updates) == sum(counts)
    assert int(state.opt_state[3].count) == sum(counts)
    assert int(replay.popped) > 0
    assert all(np.isfinite(float(v)) for v in metrics.values())
    assert float(metrics["opt_grad_norm"]) > 0
    changed = ~np.isclose(np.asarray(replay.deter)[:, :ticks], fresh).all(-1)
    assert changed.any() and not changed[:, 0].any()
