"""Synthetic fixed-length, non-terminating probe envs (reference_design §8).

Same `Env` interface as the Playground wrapper, so agents and the row
collector can be checked in seconds:

* "probe-constant": reward 1 on every agent step, whatever the action. With
  time-limit bootstrapping (the time limit is not terminal, tdmpc2_spec 4.12)
  the value of every state is Σ_t γ^t = 1/(1−γ).
* "probe-action": reward = clip(a[0], −1, 1) per agent step; the optimal
  action has a[0] = +1 (value 1/(1−γ) under it).

Observation f32[2] = [1, x0], x0 ~ U(−1, 1) drawn at reset and held for the
episode (so consecutive episodes start from different states; the value does
not depend on it). T = 20, action repeat 1 (registry.PROBE_TASKS).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.envs.base import Env, EnvState, check_action
from wmx.envs.registry import TaskSpec, get_task

__all__ = ["ProbeEnv", "make_probe_env"]

_KINDS = {"probe-constant": "constant", "probe-action": "action"}


class ProbeEnv(Env):
    """A probe env; see the module docstring for the two reward rules.

    done_at: if set, the env reports done once t >= done_at (< T), i.e. an
      off-schedule end; only for testing the collector's error counting.
    reset(key) -> EnvState(obs f32[2], reward 0, done False, t 0,
      inner={"x0": f32[]}); step(state, action f32[A]) -> EnvState with the
      per-step reward summed over the action repeat and done = t >= T (or
      t >= done_at).
    """

    def __init__(self, spec: TaskSpec, done_at: int | None = None):
        if spec.name not in _KINDS:
            raise ValueError(
                f"unknown probe {spec.name!r}; probes: {', '.join(_KINDS)}")
        if done_at is not None and not 1 <= done_at:
            raise ValueError(f"done_at must be >= 1 agent step, got {done_at}")
        self.spec = spec
        self.kind = _KINDS[spec.name]
        self.done_at = done_at

    def _obs(self, x0: jax.Array) -> jax.Array:
        return jnp.stack([jnp.ones((), jnp.float32), x0]).astype(jnp.float32)

    def reset(self, key: jax.Array) -> EnvState:
        x0 = jax.random.uniform(key, (), jnp.float32, -1.0, 1.0)
        return EnvState(obs=self._obs(x0), reward=jnp.zeros((), jnp.float32),
                        done=jnp.zeros((), jnp.bool_),
                        t=jnp.zeros((), jnp.int32), inner={"x0": x0})

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        a = jnp.clip(check_action(action, self.action_dim, self.name), -1., 1.)
        per_step = jnp.ones((), jnp.float32) if self.kind == "constant" else a[0]
        reward = per_step * jnp.float32(self.action_repeat)
        t = state.t + 1
        done = t >= self.T
        if self.done_at is not None:
            done = done | (t >= self.done_at)
        return EnvState(obs=state.obs, reward=reward, done=done, t=t,
                        inner=state.inner)


def make_probe_env(name: str, action_repeat: int | None = None,
                   episode_length: int | None = None,
                   done_at: int | None = None) -> ProbeEnv:
    """Build a registered probe env ("probe-constant" or "probe-action").

    action_repeat / episode_length override the TaskSpec's (1 and 20);
    done_at makes the env end early (tests only). Raises ValueError for an
    unknown name or non-positive values.
    """
    spec = get_task(name)
    if spec.kind != "probe":
        raise ValueError(f"{name!r} is not a probe task; use make_env")
    changes = {}
    if action_repeat is not None:
        changes["action_repeat"] = int(action_repeat)
    if episode_length is not None:
        changes["T"] = int(episode_length)
    return ProbeEnv(spec.replace(**changes), done_at=done_at)
