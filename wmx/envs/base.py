"""The jittable env interface shared by the Playground wrapper and the probes.

An `Env` holds only static data (its TaskSpec, dims, bounds) and exposes two
pure functions, `reset(key) -> EnvState` and `step(state, action) -> EnvState`,
that can be jitted, scanned and vmapped. Source: reference_design §5.1;
docs/architecture.md (wmx.envs).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from wmx.envs.registry import TaskSpec

__all__ = ["EnvState", "Env", "stable_dtypes", "check_action"]


@struct.dataclass
class EnvState:
    """State of one env (add leading axes with vmap for several).

    obs: f32[O] observation after the last step (or the reset obs).
    reward: f32[] reward of the last agent step, summed over the action repeat
      (0 after reset).
    done: bool[] the underlying env reported done during the last agent step,
      or the time limit t >= T was reached (the time limit is not terminal:
      tdmpc2_spec 4.12).
    t: i32[] agent steps taken since the last reset.
    inner: the backend's own state (Playground `State`, or the probe's arrays),
      with weak types removed so jit/scan do not retrace.
    """

    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    t: jax.Array
    inner: Any


def stable_dtypes(tree: Any) -> Any:
    """Every leaf as a jnp array with a strong (non-weak) dtype.

    Playground resets put Python floats in the state (e.g. CheetahRun's
    `data.replace(time=0.0)`), which become weak-typed and differ from the
    stepped state's strong float32, so a jitted step retraces once and a
    lax.cond/scan over reset and step states sees two types. Casting every leaf
    to its own dtype with `lax.convert_element_type` drops the weak flag.
    """
    def fix(x):
        x = jnp.asarray(x)
        return jax.lax.convert_element_type(x, x.dtype)
    return jax.tree_util.tree_map(fix, tree)


def check_action(action: jax.Array, action_dim: int, name: str) -> jax.Array:
    """`action` as f32[action_dim]; ValueError (at trace time) on a bad shape."""
    action = jnp.asarray(action, jnp.float32)
    if action.shape != (action_dim,):
        raise ValueError(
            f"env {name!r}: action must have shape ({action_dim},) (one "
            f"unbatched env; vmap for several), got {action.shape}")
    return action


class Env:
    """Jittable env interface (static attributes + pure reset/step).

    Attributes: spec (TaskSpec with the effective T and action_repeat),
    name, obs_dim, action_dim, T (agent steps per episode), action_repeat.
    Subclasses implement `reset(key u32[2] or typed key) -> EnvState` and
    `step(state, action f32[A] in [-1, 1]) -> EnvState`; an env that can be
    rendered also sets ``mj_model`` and implements ``agent_dt`` and
    ``physics``. Instances hash by identity, so they can be closed over or
    passed as a static jit argument.
    """

    spec: TaskSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def obs_dim(self) -> int:
        return self.spec.obs_dim

    @property
    def action_dim(self) -> int:
        return self.spec.action_dim

    @property
    def T(self) -> int:  # noqa: N802 - the spec's symbol
        return self.spec.T

    @property
    def action_repeat(self) -> int:
        return self.spec.action_repeat

    def reset(self, key: jax.Array) -> EnvState:
        raise NotImplementedError

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        raise NotImplementedError

    # ---- rendering (host side; envs without a MuJoCo model keep the defaults) ----
    mj_model: Any = None
    """The host ``mujoco.MjModel`` a frame is rendered with; None: the env cannot be
    rendered (probes)."""

    @property
    def agent_dt(self) -> float | None:
        """Simulated seconds per agent step (control dt x action repeat); None without a
        simulator."""
        return None

    def physics(self, state: EnvState) -> dict[str, jax.Array]:
        """What places the bodies of one env's state for rendering (jittable).

        Returns {"qpos": f32[nq]}, plus "mocap_pos" f32[nmocap, 3] and "mocap_quat"
        f32[nmocap, 4] when the model has mocap bodies. Raises NotImplementedError
        for an env without a MuJoCo model (``mj_model`` None).
        """
        raise NotImplementedError(f"env {self.name!r} has no MuJoCo model to render")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, obs_dim={self.obs_dim}, "
                f"action_dim={self.action_dim}, T={self.T}, "
                f"action_repeat={self.action_repeat})")
