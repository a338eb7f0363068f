"""A probe env that can be rendered, for the video tests: no MJX compile, a real MuJoCo model.

`HingeProbe` has probe-action's dims and rewards (reward = a[0] per agent
step, obs [1, x0]) and a one-hinge MuJoCo model whose angle starts at
2·x0 (x0 ~ U(-1, 1) from the reset key) and turns by 0.3·a[0] per step, so
every episode has its own pictures. `hinge_probe(task, T, repeat)` has the
signature of `evaluate`'s ``env_fn`` and returns one object per arguments,
so compiled rollouts are reused across tests.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from wmx.envs.base import Env, EnvState
from wmx.envs.probes import make_probe_env

XML = """
<mujoco>
  <visual><global offwidth="320" offheight="240"/></visual>
  <worldbody>
    <light pos="0 -1 3" dir="0 .3 -1"/>
    <camera name="front" pos="0 -3 1" xyaxes="1 0 0 0 .3 1"/>
    <geom type="plane" size="3 3 .1" rgba=".3 .35 .4 1"/>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 .8" size=".08" rgba="1 .6 .2 1"/>
    </body>
  </worldbody>
</mujoco>
"""
DT = 0.04     # simulated seconds per agent step: 25 frames per second


class HingeProbe(Env):
    """probe-action (`wmx.envs.probes`) plus a hinge angle (see the module doc)."""

    def __init__(self, task: str, T: int, action_repeat: int):
        self.probe = make_probe_env(task, action_repeat=action_repeat, episode_length=T)
        self.spec = self.probe.spec

    @functools.cached_property
    def mj_model(self):
        import mujoco
        return mujoco.MjModel.from_xml_string(XML)

    @property
    def agent_dt(self) -> float:
        return DT

    def physics(self, state: EnvState) -> dict:
        return {"qpos": state.inner["angle"][None]}

    def reset(self, key) -> EnvState:
        s = self.probe.reset(key)
        return s.replace(inner={"probe": s.inner, "angle": 2.0 * s.inner["x0"]})

    def step(self, state: EnvState, action) -> EnvState:
        s = self.probe.step(state.replace(inner=state.inner["probe"]), action)
        angle = state.inner["angle"] + 0.3 * jnp.clip(action[0], -1.0, 1.0)
        return s.replace(inner={"probe": s.inner, "angle": angle})


@functools.lru_cache(maxsize=None)
def hinge_probe(task: str, T: int, action_repeat: int) -> HingeProbe:
    """The `HingeProbe` of (task, T, action_repeat), one object per arguments."""
    return HingeProbe(task, T, action_repeat)
