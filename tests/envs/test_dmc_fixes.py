"""wmx.envs.dmc_fixes: the walker's torso height (E22), the pendulum's orientation order and
start angle (E23), the cup's random start (E24), the fish's start height (E25), each as
dm_control's; the tasks without a
fix get none. The observation fixes are checked as functions of the MJX data; the resets on
the real envs (small programs: pendulum, cup)."""
import types

import jax
import jax.numpy as jnp
import numpy as np

from wmx.envs import dmc_fixes
from wmx.envs.playground import _load_playground, make_env
from wmx.envs.registry import get_task


def _pg(task):
    return _load_playground(get_task(task).playground_name)


def test_only_walker_pendulum_cup_and_fish_have_fixes():
    from wmx.envs.registry import MT19
    fixed = {t.name for t in MT19 if dmc_fixes.fix_for(t.name, _pg(t.name)) is not None}
    assert fixed == {"walker-stand", "walker-walk", "walker-run", "pendulum-swingup",
                     "cup-catch", "fish-swim"}


def test_the_walker_sees_its_torso_height_in_entry_14():
    pg = _pg("walker-walk")
    fix = dmc_fixes.fix_for("walker-walk", pg)
    assert fix.reset is None
    torso = pg.mj_model.body("torso").id
    xpos = np.zeros((pg.mj_model.nbody, 3), np.float32)
    xpos[torso, 2] = 1.234
    o = jnp.arange(24, dtype=jnp.float32)
    got = np.asarray(fix.obs(types.SimpleNamespace(xpos=jnp.asarray(xpos)), o))
    want = np.arange(24, dtype=np.float32)
    want[14] = 1.234                  # after 7 bodies' (xx, xz); velocities untouched
    np.testing.assert_array_equal(got, want)


def test_the_pendulum_orientation_is_zz_then_xz():
    fix = dmc_fixes.fix_for("pendulum-swingup", _pg("pendulum-swingup"))
    got = fix.obs(None, jnp.array([0.1, 0.9, -2.0], jnp.float32))   # Playground: (xz, zz, w)
    np.testing.assert_array_equal(np.asarray(got), np.array([0.9, 0.1, -2.0], np.float32))


def test_the_pendulum_starts_on_both_sides_and_observes_cos_sin():
    env = make_env("pendulum-swingup")
    s = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 512))
    q = np.asarray(s.inner.data.qpos)[:, 0]
    assert q.min() < -3.0 and q.max() > 3.0 and 0.4 < (q < 0).mean() < 0.6
    o = np.asarray(s.obs)
    np.testing.assert_allclose(o[:, 0], np.cos(q), atol=1e-6)      # zz
    np.testing.assert_allclose(o[:, 1], np.sin(q), atol=1e-6)      # xz
    again = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 512))
    np.testing.assert_array_equal(np.asarray(again.obs), o)          # a function of the key


def test_the_cup_starts_where_dm_control_places_the_ball_and_touches_nothing():
    import mujoco
    env = make_env("cup-catch")
    m = env.pg_env.mj_model
    s = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 256))
    q = np.asarray(s.inner.data.qpos, np.float64)
    ix, iz = (m.jnt_qposadr[m.joint(n).id] for n in ("ball_x", "ball_z"))
    assert (q[:, ix] >= -0.2).all() and (q[:, ix] <= 0.2).all() and q[:, ix].std() > 0.09
    assert (q[:, iz] >= 0.2).all() and (q[:, iz] <= 0.5).all() and q[:, iz].std() > 0.07
    d = mujoco.MjData(m)
    for row in q[:64]:                                  # as MuJoCo C counts contacts
        d.qpos[:] = row
        d.qvel[:] = 0
        mujoco.mj_forward(m, d)
        assert d.ncon == 0
    np.testing.assert_allclose(np.asarray(s.obs)[:, :4], q, atol=1e-6)   # obs: qpos, qvel


def test_cup_penetrating_counts_contacts_as_mujoco_c():
    """64 placements in dm_control's ranges, about 1 in 6 touching: the jittable predicate
    and MuJoCo C's ``ncon > 0`` agree on each."""
    import mujoco
    from mujoco import mjx
    env = make_env("cup-catch")
    m = env.pg_env.mj_model
    d0 = env.reset(jax.random.PRNGKey(0)).inner.data
    rng = np.random.default_rng(1)
    qpos = np.zeros((64, m.nq))
    qpos[:, m.jnt_qposadr[m.joint("ball_x").id]] = rng.uniform(-0.2, 0.2, 64)
    qpos[:, m.jnt_qposadr[m.joint("ball_z").id]] = rng.uniform(0.2, 0.5, 64)

    @jax.jit
    def touching(q):
        def one(row):
            d = mjx.forward(env.pg_env.mjx_model, d0.replace(qpos=row,
                                                             qvel=jnp.zeros_like(d0.qvel)))
            return dmc_fixes.cup_penetrating(d, m)
        return jax.vmap(one)(q)
    got = np.asarray(touching(jnp.asarray(qpos, jnp.float32)))
    c = mujoco.MjData(m)
    want = []
    for row in qpos:
        c.qpos[:] = row
        mujoco.mj_forward(m, c)
        want.append(c.ncon > 0)
    assert 3 <= sum(want) <= 30 and got.tolist() == want


def test_the_fish_starts_at_its_default_height_with_a_random_orientation():
    env = make_env("fish-swim")
    s = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 64))
    q = np.asarray(s.inner.data.qpos)
    np.testing.assert_allclose(q[:, :3], np.tile([0.0, 0.0, 0.1], (64, 1)), atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(q[:, 3:7], axis=1), 1.0, atol=1e-5)
    assert q[:, 3:7].std(0).min() > 0.2                 # orientations drawn, not fixed


def test_the_fish_sees_its_joint_angles_then_upright():
    fix = dmc_fixes.fix_for("fish-swim", _pg("fish-swim"))
    o = jnp.arange(24, dtype=jnp.float32)          # Playground: upright, 7 angles, ...
    got = np.asarray(fix.obs(None, o))
    np.testing.assert_array_equal(got, np.r_[np.arange(1, 8), 0, np.arange(8, 24)])


def test_with_data_observes_a_set_state_as_the_agent_does():
    """`PlaygroundEnv.with_data`: a pendulum placed at angle q is observed (cos q, sin q, w)
    with E23's order, as its reset is; the action bounds are the actuator's ctrlrange."""
    from mujoco import mjx
    env = make_env("pendulum-swingup")
    s = env.reset(jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(env.with_data(s, s.inner.data).obs),
                                  np.asarray(s.obs))           # the reset's own state
    d = s.inner.data.replace(qpos=jnp.array([2.0], jnp.float32),
                             qvel=jnp.array([-0.5], jnp.float32))
    got = env.with_data(s, mjx.forward(env.pg_env.mjx_model, d))
    np.testing.assert_allclose(np.asarray(got.obs), [np.cos(2.0), np.sin(2.0), -0.5],
                               atol=1e-6)
    assert int(got.t) == 0 and float(got.reward) == 0.0
    lo, hi = env.pg_env.mj_model.actuator_ctrlrange.T
    np.testing.assert_array_equal(env.action_low, lo.astype(np.float32))
    np.testing.assert_array_equal(env.action_high, hi.astype(np.float32))
