"""Playground wrapper: action mapping, action repeat, rollouts on real envs.

The default run compiles cartpole-balance once per fixture (T shortened to 5
agent steps); walker/cheetah checks are `slow`.
"""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from wmx.envs import make_env
from wmx.envs.collector import collect_episodes, uniform_policy
from wmx.envs.playground import PlaygroundEnv, action_bounds
from wmx.envs.registry import TaskSpec, get_task

T_SHORT = 5


def _fake_pg_env(low, high):
    model = types.SimpleNamespace(
        actuator_ctrllimited=np.ones(len(low), np.uint8),
        actuator_ctrlrange=np.stack([low, high], -1), nmocap=0)
    return types.SimpleNamespace(mj_model=model)


def test_action_mapping_non_symmetric_bounds():
    spec = get_task("reacher-easy")            # action_dim 2
    env = PlaygroundEnv(spec, _fake_pg_env([0.0, -2.0], [2.0, 4.0]), T=10)
    # c = (1, 1), h = (1, 3): a_env = c + h * clip(a, -1, 1)  (ref design §5.1)
    for a, want in [([-1, -1], [0, -2]), ([1, 1], [2, 4]), ([0, 0], [1, 1]),
                    ([0.5, -0.5], [1.5, -0.5]), ([3, -7], [2, -2])]:
        np.testing.assert_allclose(env.to_env_action(jnp.array(a, float)),
                                   want, rtol=1e-6)


def test_action_bounds_rejects_unlimited_and_empty():
    bad = _fake_pg_env([-1.0], [1.0]).mj_model
    bad.actuator_ctrllimited = np.zeros(1, np.uint8)
    with pytest.raises(ValueError, match="ctrl-limited"):
        action_bounds(bad)
    with pytest.raises(ValueError, match="empty actuator ctrlrange"):
        action_bounds(_fake_pg_env([1.0], [1.0]).mj_model)


class _FakeData(struct.PyTreeNode):
    qpos: jax.Array
    ctrl: jax.Array
    time: jax.Array


class _FakeState(struct.PyTreeNode):
    data: _FakeData
    obs: dict
    reward: jax.Array
    done: jax.Array


class _FakePlayground:
    """Stands in for a Playground env: dict obs, a weak-typed `time` set by
    reset (like CheetahRun), underlying done once qpos[0] > 10."""

    mj_model = _fake_pg_env([0.0, -2.0], [2.0, 4.0]).mj_model

    def _obs(self, data):
        return {"pos": data.qpos, "time": jnp.reshape(data.time, (1,))}

    def reset(self, key):
        data = _FakeData(qpos=jax.random.uniform(key, (2,)),
                         ctrl=jnp.zeros(2), time=0.0)
        return _FakeState(data, self._obs(data), jnp.zeros(()), jnp.zeros(()))

    def step(self, state, a):
        d = state.data
        data = _FakeData(qpos=d.qpos + a, ctrl=a,
                         time=d.time + jnp.float32(0.01))
        done = (data.qpos[0] > 10).astype(jnp.float32)
        return _FakeState(data, self._obs(data), jnp.sum(a), done)


@pytest.fixture(scope="module")
def fake_env():
    spec = TaskSpec("fake", "Fake", obs_dim=3, action_dim=2, T=4,
                    action_repeat=3, obs_keys=("time", "pos"))
    return PlaygroundEnv(spec, _FakePlayground(), T=4)


def test_wrapper_repeat_mapping_flattening(fake_env):
    env = fake_env
    s0 = env.reset(jax.random.PRNGKey(0))
    x = np.asarray(s0.inner.data.qpos)
    np.testing.assert_allclose(s0.obs, [0.0, *x])          # obs_keys order
    assert float(s0.reward) == 0 and not bool(s0.done) and int(s0.t) == 0
    s1 = env.step(s0, jnp.array([0.5, 0.5]))
    a_env = np.array([1.5, 2.5])                            # c + h*a, c=(1,1), h=(1,3)
    np.testing.assert_allclose(s1.inner.data.ctrl, a_env)
    np.testing.assert_allclose(s1.inner.data.qpos, x + 3 * a_env, rtol=1e-6)
    np.testing.assert_allclose(s1.reward, 3 * a_env.sum(), rtol=1e-6)  # summed
    np.testing.assert_allclose(s1.obs, [0.03, *(x + 3 * a_env)], rtol=1e-6)
    assert int(s1.t) == 1 and not bool(s1.done)


def test_wrapper_done_and_time_limit(fake_env):
    env = fake_env
    s = env.reset(jax.random.PRNGKey(0))
    small = [env.step(s, jnp.array([-1.0, 0.0]))]           # a_env = (0, 1)
    for _ in range(3):
        small.append(env.step(small[-1], jnp.array([-1.0, 0.0])))
    assert [bool(x.done) for x in small] == [False, False, False, True]  # t >= T
    big = env.step(env.step(s, jnp.ones(2)), jnp.ones(2))   # qpos0 > 10 at t=2
    assert bool(big.done) and int(big.t) == 2


def test_wrapper_no_retrace_with_weak_reset_time(fake_env):
    env = fake_env
    raw = jax.jit(env.pg_env.reset)(jax.random.PRNGKey(0))
    assert raw.data.time.weak_type          # the hazard being fixed
    n_traces = []

    def step(s, a):
        n_traces.append(1)
        return env.step(s, a)

    step = jax.jit(step)
    s = jax.jit(env.reset)(jax.random.PRNGKey(0))
    assert not s.inner.data.time.weak_type
    for _ in range(3):
        s = step(s, jnp.zeros(2))
    assert len(n_traces) == 1
    # the collector's lax.cond(reset, step) accepts the two state types
    def still(obs, is_first, key):               # a_env = (0, 1): never done
        return jnp.tile(jnp.array([[-1.0, 0.0]]), (obs.shape[0], 1))

    episodes, stats = collect_episodes(env, still, jax.random.PRNGKey(0), 2, 2)
    assert len(episodes) == 4 and stats["n_offschedule_dones"] == 0
    np.testing.assert_allclose(stats["returns"], 4 * 3 * 1.0)


def test_step_and_reset_traced_once_across_programs():
    """The MJX step and reset are nested jits: a second program holding them (another
    vmap size, as an evaluation beside a training chunk) reuses their jaxprs instead of
    tracing ~10,000 equations again, and computes what the plain functions compute."""
    env = make_env("cartpole-balance", episode_length=T_SHORT)   # fresh: empty caches
    traced = []
    step_impl, reset_impl = env._step, env._reset
    env._step_jit = jax.jit(lambda s, a: (traced.append("step"), step_impl(s, a))[1])
    env._reset_jit = jax.jit(lambda k: (traced.append("reset"), reset_impl(k))[1])

    def rollout(keys):
        s = jax.vmap(env.reset)(keys)
        return jax.vmap(env.step)(s, jnp.full((keys.shape[0], 1), 0.3)).obs

    for n in (2, 3):                                          # two programs
        jax.jit(rollout).lower(jax.random.split(jax.random.PRNGKey(1), n))
    assert sorted(traced) == ["reset", "step"]
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    plain = jax.jit(lambda k: jax.vmap(step_impl)(
        jax.vmap(reset_impl)(k), jnp.full((3, 1), 0.3)).obs)(keys)
    np.testing.assert_array_equal(jax.jit(rollout)(keys), plain)


def test_make_env_argument_errors():
    with pytest.raises(ValueError, match="unknown task"):
        make_env("cartpole-balanse")


@pytest.fixture(scope="module")
def cartpole():
    return make_env("cartpole-balance", episode_length=T_SHORT)


def test_cartpole_spec(cartpole):
    assert (cartpole.obs_dim, cartpole.action_dim) == (5, 1)
    assert (cartpole.T, cartpole.action_repeat) == (T_SHORT, 2)
    np.testing.assert_array_equal(cartpole._centre, [0.0])
    np.testing.assert_array_equal(cartpole._half, [1.0])


@pytest.fixture(scope="module")
def cartpole_run(cartpole):
    return collect_episodes(cartpole, uniform_policy(1), jax.random.PRNGKey(0),
                            2, 2)


def test_cartpole_rows(cartpole, cartpole_run):
    episodes, stats = cartpole_run
    T = cartpole.T
    assert len(episodes) == 4
    for ep in episodes:
        assert ep["obs"].shape == (T + 1, 5)
        assert ep["is_first"].tolist() == [True] + [False] * T
        assert ep["is_last"].tolist() == [False] * T + [True]
        assert ep["reward"][0] == 0 and (ep["reward"][1:] > 0).all()
        assert (ep["reward"][1:] <= 2.0).all()    # ≤ 1 per control step × 2
        assert ep["action"][T, 0] == 0 and (ep["action"][:T] != 0).all()
        assert np.isfinite(ep["obs"]).all()
        # obs change on every stepped row (the env really stepped)
        assert (np.abs(np.diff(ep["obs"], axis=0)).sum(-1) > 0).all()
    starts = np.stack([ep["obs"][0] for ep in episodes])
    assert len({tuple(s) for s in starts.round(7)}) == 4   # fresh resets
    assert stats["n_offschedule_dones"] == 0
    assert stats["env_steps"] == 2 * 2 * T


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cheetah-run", "walker-walk"])
def test_no_retrace_real_env(name):
    env = make_env(name, episode_length=T_SHORT)
    n_traces = []

    def step(s, a):
        n_traces.append(1)
        return env.step(s, a)

    step = jax.jit(step)
    s = jax.jit(env.reset)(jax.random.PRNGKey(0))
    for _ in range(3):
        s = step(s, jnp.zeros(env.action_dim))
    assert len(n_traces) == 1
    # reset and step states have identical types (needed by lax.cond)
    r = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    st = jax.eval_shape(env.step, r, jnp.zeros(env.action_dim))
    assert jax.tree_util.tree_structure(r) == jax.tree_util.tree_structure(st)
    for a, b in zip(jax.tree_util.tree_leaves(r), jax.tree_util.tree_leaves(st)):
        assert (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type)
    episodes, stats = collect_episodes(env, uniform_policy(env.action_dim),
                                       jax.random.PRNGKey(1), 2, 2)
    assert stats["n_offschedule_dones"] == 0 and len(episodes) == 4
    assert all(np.isfinite(ep["obs"]).all() for ep in episodes)


@pytest.mark.slow
def test_reset_and_step_types_match_all_mt19():
    from wmx.envs.registry import MT19_TASKS
    for spec in MT19_TASKS:
        env = make_env(spec.name)
        r = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        st = jax.eval_shape(env.step, r, jnp.zeros(env.action_dim))
        assert (jax.tree_util.tree_structure(r)
                == jax.tree_util.tree_structure(st)), spec.name
        for a, b in zip(jax.tree_util.tree_leaves(r),
                        jax.tree_util.tree_leaves(st)):
            assert (a.shape, a.dtype, a.weak_type) == (
                b.shape, b.dtype, b.weak_type), spec.name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cartpole-balance", "walker-walk"])
def test_action_repeat_sums_rewards_vs_raw_playground(name):
    env = make_env(name, episode_length=T_SHORT)
    pg = env.pg_env

    @jax.jit
    def both(key):
        s0 = env.reset(key)
        a = jnp.full((env.action_dim,), 0.6)
        wrapped = env.step(s0, a)
        clipped = env.step(s0, jnp.full((env.action_dim,), 1.7))
        raw0 = pg.reset(key)
        raw1 = pg.step(raw0, a)
        raw2 = pg.step(raw1, a)
        return s0, wrapped, clipped, raw0, raw1, raw2

    s0, wrapped, clipped, raw0, raw1, raw2 = both(jax.random.PRNGKey(3))
    np.testing.assert_allclose(s0.obs, raw0.obs, rtol=1e-6)
    np.testing.assert_allclose(wrapped.obs, raw2.obs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wrapped.reward, raw1.reward + raw2.reward,
                               rtol=1e-5)
    assert int(wrapped.t) == 1 and not bool(wrapped.done)
    # 1.7 is clipped to the ctrlrange bound 1.0 before reaching the physics
    np.testing.assert_allclose(clipped.inner.data.ctrl, 1.0)
    np.testing.assert_allclose(wrapped.inner.data.ctrl, 0.6, rtol=1e-6)
    assert float(s0.reward) == 0 and s0.obs.dtype == jnp.float32


def test_reset_obs_sees_the_placed_target():
    """E21: reacher's first observation measures the finger-to-target offset to where
    the reset placed the target (dm_control's order), not to its previous position."""
    env = make_env("reacher-easy", episode_length=T_SHORT)
    m = env.mj_model
    target, finger = m.geom("target").id, m.geom("finger").id
    body = m.body("target").mocapid[0]
    s0 = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 4))
    d = s0.inner.data
    target_xy = np.asarray(d.mocap_pos[:, body, :2])
    assert (np.linalg.norm(target_xy, axis=-1) >= 0.05 - 1e-6).all()   # away from 0
    np.testing.assert_allclose(d.geom_xpos[:, target, :2], target_xy, atol=1e-6)
    np.testing.assert_allclose(s0.obs[:, 2:4],
                               target_xy - np.asarray(d.geom_xpos[:, finger, :2]), atol=1e-6)


@pytest.mark.slow
def test_reset_forward_leaves_the_first_step_as_playgrounds():
    """E21 recomputes only the reset's kinematics: the first step equals Playground's."""
    env = make_env("reacher-easy", episode_length=T_SHORT)
    pg = env.pg_env
    a = jnp.array([0.3, -0.5])

    @jax.jit
    @jax.vmap
    def run(key):
        return env.step(env.reset(key), a), pg.step(pg.step(pg.reset(key), a), a)

    s1, raw1 = run(jax.random.split(jax.random.PRNGKey(0), 4))
    np.testing.assert_allclose(s1.obs, raw1.obs, rtol=1e-5, atol=1e-6)


def test_a_playground_env_without_warp_prints_nothing():
    """warp-lang (which playground requires and the Makefile leaves out) is never needed: with
    it hidden, a Playground env loads and traces a reset and a step, Warp is never imported,
    and MJX's
    notices of its absence stay off standard output (wmx.envs.playground.import_mjx_quietly)."""
    import subprocess
    import sys
    import textwrap
    probe = textwrap.dedent("""
        import sys
        class NoWarp:                   # as if warp-lang were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "warp" or name.startswith("warp."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, NoWarp())
        import jax
        from wmx.envs import make_env
        env = make_env("cartpole-balance", episode_length=2)
        s = jax.eval_shape(lambda k: env.step(env.reset(k), jax.numpy.zeros(env.action_dim)),
                           jax.random.PRNGKey(0))            # traced: every op of a step
        print("stepped", s.obs.shape, "warp" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "stepped (5,) False\n"
