"""A task's dims and episode length without MJX, for trainer tests that must not compile
Playground (an MJX compile per task costs minutes of CPU): `StandInEnv`, and
`stand_in_env(task, T=None, action_repeat=None)`, cached per arguments with the
signature of `wmx.envs.playground.cached_env` (tests monkeypatch the trainers'
``cached_env`` with it), so one object per task keeps the compiled programs cached."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.envs.base import Env, EnvState
from wmx.envs.registry import get_task


class StandInEnv(Env):
    """A task's dims and T without MJX: obs_{t+1} = 0.9 obs_t + (action padded to O) / 2,
    reward = 1 - mean(a^2) (in [0, 1]); the action must have the task's action_dim."""

    def __init__(self, name: str, T: int | None = None, action_repeat: int | None = None):
        spec = get_task(name)
        self.spec = spec.replace(T=T or spec.T, action_repeat=action_repeat or spec.action_repeat)

    def reset(self, key):
        obs = jax.random.normal(key, (self.obs_dim,), jnp.float32)
        return EnvState(obs=obs, reward=jnp.zeros((), jnp.float32), done=jnp.zeros((), bool),
                        t=jnp.zeros((), jnp.int32), inner={})

    def step(self, state, action):
        assert action.shape == (self.action_dim,)
        a = jnp.clip(action, -1, 1)
        pad = jnp.zeros((self.obs_dim,), jnp.float32).at[:self.action_dim].set(a)
        t = state.t + 1
        return EnvState(obs=0.9 * state.obs + 0.5 * pad, reward=1.0 - jnp.mean(a ** 2),
                        done=t >= self.T, t=t, inner={})


_ENVS: dict = {}


def stand_in_env(task: str, T: int | None = None, action_repeat: int | None = None) -> Env:
    """The `StandInEnv` of (task, T, action_repeat), one object per arguments."""
    key = (task, T, action_repeat)
    if key not in _ENVS:
        _ENVS[key] = StandInEnv(task, T, action_repeat)
    return _ENVS[key]
