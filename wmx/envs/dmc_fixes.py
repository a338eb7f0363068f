"""Where Playground's DMC ports show an agent something other than dm_control does, and
wmx's corrections (deviations E22-E25; E21's reset kinematics are `PlaygroundEnv`'s).

Measured by `benchmarks/learning/env_suite_compare.py` (the 19 mt19 tasks, the same
physical state observed by both, random and zero-action returns; docs/validation.md):

- walker-*: Playground's observation entry "height" (index 14, after the 7 bodies' 2
  orientation components) is the torso's zz orientation component, a copy of entry 0; the
  agent never sees how high the torso is, which the stand reward pays for. dm_control's
  is ``xpos['torso', 'z']``. wmx writes the torso's height there (E22).
- pendulum-swingup: Playground's pole orientation is (xz, zz), dm_control's (zz, xz); and
  Playground starts the pole at an angle in [0, pi), dm_control in [-pi, pi), so the
  agent never starts on one side. wmx swaps the orientation back and draws the angle in
  [-pi, pi) (E23).
- cup-catch: Playground's reset starts every episode at the model's default state (the
  ball at rest below the cup); dm_control places the ball uniformly at ball_x in
  [-0.2, 0.2], ball_z in [0.2, 0.5] m, drawing again while it touches anything. wmx draws
  `CUP_CANDIDATES` placements and keeps the first without contact (E24).
- fish-swim: Playground's reset builds qpos from zeros, so the fish starts at height 0;
  dm_control keeps the root's default position (height 0.1 m, the model's qpos0) and
  draws only the orientation and the fin angles. And Playground's observation puts
  `upright` first, dm_control's after the 7 joint angles. wmx puts the root back at
  qpos0's position and `upright` after the joint angles (E25).

Every fix is a pure function of the MJX data and the key, jittable; a task without one
gets None.

Source: dm_control's suite (``walker.py``, ``pendulum.py``, ``ball_in_cup.py``,
``fish.py``: the envs behind the published curves); deviations E22-E25.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

__all__ = ["DmcFix", "fix_for", "CUP_CANDIDATES", "CUP_BALL_X", "CUP_BALL_Z",
           "cup_penetrating"]

CUP_CANDIDATES = 32
"""Ball placements drawn per cup-catch reset; the first without contact is kept (dm_control
draws until one is). 16.5% of 400 draws touched the cup, so all 32 do with probability
about 1e-25; then the last is kept."""
CUP_BALL_X = (-0.2, 0.2)
CUP_BALL_Z = (0.2, 0.5)
"""dm_control's ranges of the ball's slide joints at reset (m), ``ball_in_cup.py``."""


@dataclasses.dataclass(frozen=True)
class DmcFix:
    """A task's corrections: ``obs(data, obs) -> obs`` (f32[O] -> f32[O]) rebuilds the
    observation of an MJX data as dm_control's; ``reset(key, data) -> data`` sets the
    initial qpos dm_control's reset draws, its kinematics left to the caller
    (`PlaygroundEnv` runs ``mjx.forward`` once after it). None: nothing to do."""
    obs: Callable[[Any, jax.Array], jax.Array] | None = None
    reset: Callable[[jax.Array, Any], Any] | None = None


def _walker(pg_env) -> DmcFix:
    torso = pg_env.mj_model.body("torso").id
    height = 2 * (pg_env.mj_model.nbody - 1)        # after the bodies' xx, xz components

    def obs(data, o):
        return o.at[height].set(data.xpos[torso, 2].astype(o.dtype))
    return DmcFix(obs=obs)


def _pendulum(pg_env) -> DmcFix:
    m = pg_env.mj_model
    hinge = int(m.jnt_qposadr[m.joint("hinge").id])

    def obs(data, o):
        return jnp.concatenate([o[1:2], o[0:1], o[2:]])

    def reset(key, data):
        angle = jax.random.uniform(jax.random.fold_in(key, 0x9E4D), (), minval=-jnp.pi,
                                   maxval=jnp.pi)
        return data.replace(qpos=data.qpos.at[hinge].set(angle.astype(data.qpos.dtype)))
    return DmcFix(obs=obs, reset=reset)


def cup_penetrating(data, mj_model) -> jax.Array:
    """Whether any geom pair of an MJX data is in contact, as MuJoCo C counts one
    (``ncon > 0``: a pair closer than the larger of its geoms' margins).

    Args:
        data: forwarded MJX data (its contact candidates).
        mj_model: the host model (geom margins).

    Returns:
        bool[].
    """
    import numpy as np
    c = data._impl.contact if hasattr(data, "_impl") else data.contact
    margin = jnp.asarray(np.asarray(mj_model.geom_margin, np.float32))
    m = jnp.maximum(margin[c.geom[:, 0]], margin[c.geom[:, 1]])
    return jnp.any(c.dist < m)


def _cup(pg_env) -> DmcFix:
    from mujoco import mjx
    m = pg_env.mj_model
    ix, iz = (int(m.jnt_qposadr[m.joint(n).id]) for n in ("ball_x", "ball_z"))

    def reset(key, data):
        kx, kz = jax.random.split(jax.random.fold_in(key, 0x0C0B), 2)
        xs = jax.random.uniform(kx, (CUP_CANDIDATES,), minval=CUP_BALL_X[0],
                                maxval=CUP_BALL_X[1])
        zs = jax.random.uniform(kz, (CUP_CANDIDATES,), minval=CUP_BALL_Z[0],
                                maxval=CUP_BALL_Z[1])

        def place(x, z):            # forwarded here: the contact test needs the kinematics
            qpos = data.qpos.at[ix].set(x).at[iz].set(z)
            d = mjx.forward(pg_env.mjx_model, data.replace(qpos=qpos))
            return d, cup_penetrating(d, m)
        ds, pen = jax.vmap(place)(xs, zs)
        i = jnp.where(jnp.all(pen), CUP_CANDIDATES - 1, jnp.argmin(pen))
        return jax.tree.map(lambda a: a[i], ds)
    return DmcFix(reset=reset)


def _fish(pg_env) -> DmcFix:
    import numpy as np
    m = pg_env.mj_model
    root = int(m.jnt_qposadr[m.joint("root").id])
    home = jnp.asarray(np.asarray(m.qpos0[root:root + 3], np.float32))

    def reset(key, data):
        del key
        return data.replace(qpos=data.qpos.at[root:root + 3].set(home.astype(data.qpos.dtype)))

    def obs(data, o):               # (upright, joint angles 7, ...) -> (joint angles, upright, ...)
        return jnp.concatenate([o[1:8], o[0:1], o[8:]])
    return DmcFix(obs=obs, reset=reset)


_FIXES = {"walker": _walker, "pendulum": _pendulum, "cup": _cup, "fish": _fish}
"""Domain (the task name before its first dash) -> the builder of its `DmcFix`."""


def fix_for(task: str, pg_env) -> DmcFix | None:
    """The corrections of a task's Playground env.

    Args:
        task: a wmx task name (e.g. "walker-run").
        pg_env: its Playground env (model, ids).

    Returns:
        The `DmcFix`, or None when the port shows what dm_control shows.
    """
    build = _FIXES.get(task.split("-")[0])
    return None if build is None else build(pg_env)
