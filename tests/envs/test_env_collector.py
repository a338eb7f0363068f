"""Row collector (static reset mode) and probe envs; all on the cheap probes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.envs import make_env
from wmx.envs.collector import (collect_episodes, collect_tick, init_collector,
                                make_rollout, policy_view, rows_to_episodes,
                                uniform_policy, zero_row)
from wmx.envs.probes import make_probe_env

N_ENVS, N_EPS = 3, 3


@pytest.fixture(scope="module")
def action_env():
    return make_env("probe-action", episode_length=6)


@pytest.fixture(scope="module")
def action_run(action_env):
    return collect_episodes(action_env, uniform_policy(action_env.action_dim),
                            jax.random.PRNGKey(1), N_ENVS, N_EPS)


def test_rows_per_episode_and_invariants(action_env, action_run):
    episodes, stats = action_run
    T = action_env.T
    assert len(episodes) == N_ENVS * N_EPS
    first = np.zeros(T + 1, bool)
    first[0] = True
    for ep in episodes:
        assert ep["obs"].shape == (T + 1, 2) and ep["obs"].dtype == np.float32
        assert ep["action"].shape == (T + 1, 2)
        assert ep["reward"].shape == (T + 1,)
        np.testing.assert_array_equal(ep["is_first"], first)
        np.testing.assert_array_equal(ep["is_last"], first[::-1])
        assert not ep["is_terminal"].any()
        assert ep["reward"][0] == 0.0
        np.testing.assert_array_equal(ep["action"][T], 0.0)
        assert np.abs(ep["action"][:T]).max() <= 1.0
        assert (ep["action"][:T] != 0).all()
        # probe-action: the reward entering row k+1 is a_k[0] (spec §8 probe)
        np.testing.assert_allclose(ep["reward"][1:], ep["action"][:T, 0],
                                   rtol=1e-6)
    assert stats["env_steps"] == N_ENVS * N_EPS * T
    assert stats["rows"] == N_ENVS * N_EPS * (T + 1)
    assert stats["n_offschedule_dones"] == 0
    np.testing.assert_allclose(
        stats["returns"], [ep["reward"].sum() for ep in episodes], rtol=1e-6)


def test_consecutive_episodes_start_fresh(action_run):
    episodes, _ = action_run
    x0 = np.array([ep["obs"][0, 1] for ep in episodes])
    assert len(np.unique(x0)) == len(x0)   # fresh reset per env per episode
    for ep in episodes:                    # the probe holds x0 in an episode
        np.testing.assert_array_equal(ep["obs"][:, 1], ep["obs"][0, 1])


def test_held_tick_does_not_step_and_resets(action_env):
    env, T = action_env, action_env.T
    state = init_collector(env, jax.random.PRNGKey(0), 2)
    acts = jnp.ones((2, env.action_dim))
    step = jax.jit(lambda s, i, k: collect_tick(env, s, i, acts, k))
    for i in range(T):
        state, row = step(state, i, jax.random.PRNGKey(i))
    assert int(state.env_state.t[0]) == T and bool(state.env_state.done.all())
    before = int(state.env_steps)
    state, row = step(state, T, jax.random.PRNGKey(99))   # held tick
    assert bool(row.is_last.all()) and float(jnp.abs(row.action).sum()) == 0
    assert int(state.env_steps) == before            # not stepped
    np.testing.assert_array_equal(state.env_state.t, 0)  # fresh reset
    np.testing.assert_array_equal(state.env_state.reward, 0)
    np.testing.assert_allclose(state.last_return, T * 1.0)  # a[0] = 1 each step
    assert int(state.n_episodes) == 1
    obs, is_first = policy_view(env, state, T + 1)
    assert bool(is_first.all()) and obs.shape == (2, 2)
    assert not bool(policy_view(env, state, T + 2)[1].any())


def test_no_retrace_across_ticks(action_env):
    env = action_env
    n_traces = []

    def tick_fn(state, tick, key):
        n_traces.append(1)
        obs, is_first = policy_view(env, state, tick)
        actions = jnp.tanh(obs[:, :1]) * jnp.ones((1, env.action_dim))
        return collect_tick(env, state, tick, actions, key)

    tick_fn = jax.jit(tick_fn)
    state = init_collector(env, jax.random.PRNGKey(0), 2)
    for i in range(2 * (env.T + 1) + 1):     # crosses two held ticks
        state, _ = tick_fn(state, jnp.int32(i), jax.random.PRNGKey(i))
    assert len(n_traces) == 1


def test_offschedule_dones_are_counted():
    env = make_probe_env("probe-constant", episode_length=8, done_at=5)
    _, stats = collect_episodes(env, uniform_policy(1), jax.random.PRNGKey(0),
                                2, 2)
    # done reported after steps 5, 6, 7 (t < T = 8), per env per episode
    assert stats["n_offschedule_dones"] == 3 * 2 * 2
    ok = make_probe_env("probe-constant", episode_length=8)
    _, stats = collect_episodes(ok, uniform_policy(1), jax.random.PRNGKey(0),
                                2, 2)
    assert stats["n_offschedule_dones"] == 0


def test_probe_constant_rewards_and_repeat():
    env = make_probe_env("probe-constant", action_repeat=3, episode_length=4)
    episodes, stats = collect_episodes(env, uniform_policy(1),
                                       jax.random.PRNGKey(0), 1, 1)
    np.testing.assert_array_equal(episodes[0]["reward"], [0, 3, 3, 3, 3])
    assert stats["returns"][0] == 12.0


def test_probe_action_clips_agent_action():
    env = make_env("probe-action")
    s = env.reset(jax.random.PRNGKey(0))
    assert float(env.step(s, jnp.array([1.7, 0.0])).reward) == 1.0
    assert float(env.step(s, jnp.array([-0.25, 5.0])).reward) == -0.25
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(s, jnp.zeros(3))


def test_vmap_over_seeds_equals_separate_runs(action_env):
    env = action_env
    n_ticks = 2 * (env.T + 1)
    rollout = make_rollout(env, uniform_policy(env.action_dim), 2, n_ticks)
    keys = jax.random.split(jax.random.PRNGKey(7), 3)
    v_state, v_rows = jax.jit(jax.vmap(rollout))(keys)
    for s in range(3):
        state, rows = rollout(keys[s])
        for a, b in zip(jax.tree_util.tree_leaves((state, rows)),
                        jax.tree_util.tree_leaves((v_state, v_rows))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[s],
                                       rtol=1e-6)


def test_zero_row_is_the_shape_of_a_collected_row(action_env):
    env = action_env
    state = init_collector(env, jax.random.PRNGKey(0), 4)
    _, row = jax.eval_shape(lambda s: collect_tick(env, s, 1, jnp.zeros((4, 2)),
                                                   jax.random.PRNGKey(0)), state)
    zero = zero_row(env, 4)
    assert jax.tree.structure(zero) == jax.tree.structure(row)
    for z, r in zip(jax.tree.leaves(zero), jax.tree.leaves(row)):
        assert (z.shape, z.dtype) == (r.shape, r.dtype)
        assert not np.asarray(z).any()


def test_bad_inputs_raise(action_env):
    env = action_env
    state = init_collector(env, jax.random.PRNGKey(0), 2)
    with pytest.raises(ValueError, match="n_envs, action_dim"):
        collect_tick(env, state, 0, jnp.zeros((3, 2)), jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="n_envs must be >= 1"):
        init_collector(env, jax.random.PRNGKey(0), 0)
    _, rows = make_rollout(env, uniform_policy(2), 1, env.T)(
        jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="whole number of episodes"):
        rows_to_episodes(rows, env.T)
