"""MuJoCo Playground DMC tasks behind the jittable `Env` interface.

`make_env(name)` loads the Playground env with the pure-JAX MJX backend
(impl="jax"; Warp is far slower on CPU, and warp-lang need not be installed:
`import_mjx_quietly`), maps agent actions from [-1, 1] to the
actuator ctrlrange, repeats each action `action_repeat` control steps summing
the rewards, flattens the observation to f32[O] and tracks the time limit.
Sources: reference_design §5.1 (action bounds, action repeat), §2 (T from the
env's episode_length // action_repeat), tdmpc2_spec 4.11-4.13 (DMC protocol),
deviations E18 (MJX ports), E19 (the repeat continues after a termination),
E21 (reset observations of the tasks with mocap targets recomputed), E22-E25 (the
walker's torso height, the pendulum's orientation order and start, the cup's random start
and the fish's start height, as dm_control's: `wmx.envs.dmc_fixes`).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from wmx.envs.base import Env, EnvState, check_action, stable_dtypes
from wmx.envs.registry import TaskSpec, get_task
from wmx.version import env_versions

__all__ = ["PlaygroundEnv", "make_env", "cached_env", "action_bounds", "Env", "EnvState"]


def action_bounds(mj_model) -> tuple[np.ndarray, np.ndarray]:
    """Centre c and half-range h (f32[A]) of the actuators' ctrlrange.

    a_env = c + h · clip(a, −1, 1) (reference_design §5.1). Raises ValueError
    if an actuator is not ctrl-limited (no finite bounds to map onto) or has
    an empty range.
    """
    limited = np.asarray(mj_model.actuator_ctrllimited).astype(bool)
    ranges = np.asarray(mj_model.actuator_ctrlrange, dtype=np.float64)
    if not limited.all():
        raise ValueError(
            "every actuator must be ctrl-limited to map [-1, 1] actions onto "
            f"its bounds; unlimited actuators: {np.flatnonzero(~limited)}")
    low, high = ranges[:, 0], ranges[:, 1]
    if not (high > low).all():
        raise ValueError(f"empty actuator ctrlrange: low={low}, high={high}")
    return (((high + low) / 2).astype(np.float32),
            ((high - low) / 2).astype(np.float32))


class PlaygroundEnv(Env):
    """A Playground DMC env with action mapping, action repeat and time limit.

    reset(key) -> EnvState with obs f32[O], reward 0, done False, t 0.
    step(state, action f32[A]) -> EnvState: a_env = c + h·clip(action, −1, 1);
    `action_repeat` Playground steps with a_env (lax.fori_loop); reward = sum
    of the per-step rewards; done = any underlying done (NaN physics on DMC)
    or t+1 >= T. The repeat does not stop at an underlying done (E19; DMC
    never terminates). The state's dtypes are made strong so repeated
    jit/scan calls do not retrace (CheetahRun's reset sets a weak `time`).
    """

    def __init__(self, spec: TaskSpec, pg_env, T: int):
        self.pg_env = pg_env
        self.spec = spec.replace(T=int(T))
        c, h = action_bounds(pg_env.mj_model)
        if c.shape != (spec.action_dim,):
            raise RuntimeError(
                f"{spec.name}: Playground env has {c.shape[0]} actuators, the "
                f"registry pins action_dim={spec.action_dim}; the installed "
                f"playground version differs from the one probed ({env_versions()})")
        self._centre = c
        self._half = h
        # Playground's reset of the tasks with a mocap target (reacher, finger-turn,
        # fish, swimmer) moves the target after its mjx.forward: E21
        from wmx.envs.dmc_fixes import fix_for
        self._fix = fix_for(spec.name, pg_env) if spec.kind == "playground" else None
        # ... and a start drawn as dm_control's (E23-E25) needs its kinematics: one forward
        self._forward_after_reset = bool(pg_env.mj_model.nmocap) or (
            self._fix is not None and self._fix.reset is not None)
        # One jaxpr of the MJX reset and step per env and argument types, shared by every
        # program that holds them (a training chunk, its evaluation): each is ~10,000
        # equations, and tracing and batching them again was a third of a call's tracing.
        # XLA inlines the nested call; its fusion choices may differ from the plain step's,
        # so a chaotic rollout (walker under random actions) can end elsewhere, while the
        # bits tests hold within each build of the program.
        self._reset_jit = jax.jit(self._reset)
        self._step_jit = jax.jit(self._step)

    def _flat_obs(self, obs) -> jax.Array:
        if isinstance(obs, dict):
            if tuple(self.spec.obs_keys) == ():
                raise ValueError(
                    f"{self.name}: Playground returned a dict observation "
                    f"with keys {sorted(obs)} but the TaskSpec has no obs_keys")
            parts = [jnp.ravel(jnp.asarray(obs[k], jnp.float32))
                     for k in self.spec.obs_keys]
            return jnp.concatenate(parts)
        return jnp.ravel(jnp.asarray(obs, jnp.float32))

    @property
    def action_low(self) -> np.ndarray:
        """f32[A] env-unit action of agent action −1 per actuator (its ctrlrange's low end)."""
        return self._centre - self._half

    @property
    def action_high(self) -> np.ndarray:
        """f32[A] env-unit action of agent action +1 per actuator (its ctrlrange's high end)."""
        return self._centre + self._half

    @property
    def mj_model(self):
        """The Playground env's host ``mujoco.MjModel`` (rendering)."""
        return self.pg_env.mj_model

    @property
    def agent_dt(self) -> float:
        """Simulated seconds per agent step: the env's control dt x action repeat."""
        return float(self.pg_env.dt) * self.action_repeat

    def physics(self, state: EnvState) -> dict[str, jax.Array]:
        """qpos f32[nq] (and mocap_pos / mocap_quat when the model has mocap bodies) of
        the MJX data inside ``state``: what a renderer needs to place the bodies."""
        data = state.inner.data
        out = {"qpos": data.qpos}
        if self.mj_model.nmocap:
            out.update(mocap_pos=data.mocap_pos, mocap_quat=data.mocap_quat)
        return out

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """f32[A] agent action in [-1, 1] -> env units c + h·clip(a, −1, 1)."""
        a = check_action(action, self.action_dim, self.name)
        return self._centre + self._half * jnp.clip(a, -1.0, 1.0)

    def reset(self, key: jax.Array) -> EnvState:
        """Fresh randomised initial state from `key` (spec 4.11; E20).

        A nested jit of `_reset`: traced once per argument type and process.
        """
        return self._reset_jit(key)

    def _reset(self, key: jax.Array) -> EnvState:
        """The reset `reset` runs.

        For a model with mocap bodies the kinematics are recomputed after
        Playground's reset and the observation rebuilt from them, so the first
        observation sees the target where the episode placed it, as
        dm_control's does (E21); a task whose port starts elsewhere than
        dm_control's draws its start as dm_control does first (pendulum, cup-catch,
        fish: E23-E25), then the one forward; the observation is dm_control's
        (walker, pendulum, fish: E22, E23, E25).
        """
        inner = self.pg_env.reset(key)
        data = inner.data
        if self._fix is not None and self._fix.reset is not None:
            data = self._fix.reset(key, data)
        if self._forward_after_reset:
            from mujoco import mjx      # not at import: MUJOCO_GL is chosen first (evaluate)
            data = mjx.forward(self.pg_env.mjx_model, data)
            inner = inner.replace(data=data, obs=self.pg_env._get_obs(data, inner.info))
        inner = stable_dtypes(self._fixed_obs(inner))
        return EnvState(obs=self._flat_obs(inner.obs),
                        reward=jnp.zeros((), jnp.float32),
                        done=jnp.zeros((), jnp.bool_),
                        t=jnp.zeros((), jnp.int32), inner=inner)

    def with_data(self, state: EnvState, data) -> EnvState:
        """``state`` holding the MJX ``data`` instead, observed as the agent sees it.

        The env checks set a physical state (qpos, qvel, a target's mocap position) and
        read the observation wmx's agent gets of it (`benchmarks/learning/env_compare*.py`).

        Args:
            state: an `EnvState` of this env (its Playground ``info`` is kept).
            data: MJX data with its kinematics computed (``mjx.forward`` run on it).

        Returns:
            The state with ``inner.data`` = ``data``, ``inner.obs`` Playground's observation
            of it with wmx's observation fixes (E22, E23, E25), ``obs`` f32[O] the agent's;
            reward, done and t unchanged.
        """
        inner = state.inner.replace(data=data, obs=self.pg_env._get_obs(data, state.inner.info))
        inner = stable_dtypes(self._fixed_obs(inner))
        return state.replace(obs=self._flat_obs(inner.obs), inner=inner)

    def _fixed_obs(self, inner):
        """``inner`` with its observation as dm_control's (`wmx.envs.dmc_fixes`; E22, E23,
        E25); unchanged for a task without an observation fix."""
        if self._fix is None or self._fix.obs is None:
            return inner
        return inner.replace(obs=self._fix.obs(inner.data, jnp.asarray(inner.obs)))

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        """One agent step = `action_repeat` Playground steps (rewards summed).

        A nested jit of `_step`: traced once per argument type and process.
        """
        return self._step_jit(state, action)

    def _step(self, state: EnvState, action: jax.Array) -> EnvState:
        """The step `step` runs."""
        a_env = self.to_env_action(action)

        def body(_, carry):
            inner, reward, done = carry
            inner = stable_dtypes(self.pg_env.step(inner, a_env))
            reward = reward + jnp.asarray(inner.reward, jnp.float32)
            done = done | (jnp.asarray(inner.done) > 0)
            return inner, reward, done

        init = (state.inner, jnp.zeros((), jnp.float32),
                jnp.zeros((), jnp.bool_))
        inner, reward, done = jax.lax.fori_loop(
            0, self.action_repeat, body, init)
        inner = self._fixed_obs(inner)
        t = state.t + 1
        return EnvState(obs=self._flat_obs(inner.obs), reward=reward,
                        done=done | (t >= self.T), t=t, inner=inner)


WARP_NOTICES = ("Failed to import warp:", "Failed to import mujoco_warp:")
"""The lines MJX prints on standard output when its optional Warp backend is not installed."""


def import_mjx_quietly() -> None:
    """Import ``mujoco.mjx`` once, without the two `WARP_NOTICES` lines MJX prints on
    standard output when warp-lang is not installed (the Makefile leaves it out: wmx runs
    MJX with impl="jax" and never imports Warp; a command's standard output stays its own,
    e.g. `evaluate`'s one line). Any other output of the import is printed as usual.
    """
    import contextlib
    import io
    import sys
    if "mujoco.mjx" in sys.modules:
        return
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        import mujoco.mjx  # noqa: F401
    rest = [ln for ln in buf.getvalue().splitlines() if not ln.startswith(WARP_NOTICES)]
    if rest:
        print("\n".join(rest))


def _load_playground(playground_name: str):
    import_mjx_quietly()
    from mujoco_playground import registry as pg_registry
    return pg_registry.dm_control_suite.load(
        playground_name, config_overrides={"impl": "jax"})


def make_env(name: str, action_repeat: int | None = None,
             episode_length: int | None = None) -> Env:
    """Build the jittable Env for a registered task (mt19 or probe).

    name: mt30 spelling ("cartpole-balance") or a probe name ("probe-action").
    action_repeat: control steps per agent step; None -> the TaskSpec's (2 on
      DMC, 1 for probes).
    episode_length: override of T in agent steps (for short test runs); None ->
      Playground episode_length // action_repeat (reference_design §2), i.e.
      T = 500 on DMC at repeat 2.
    Raises ValueError for an unknown task, a non-positive repeat/length, or an
    episode_length not divisible by action_repeat; RuntimeError if the
    installed Playground env's dims differ from the pinned TaskSpec.
    """
    spec = get_task(name)
    if spec.kind == "probe":
        from wmx.envs.probes import make_probe_env
        return make_probe_env(name, action_repeat=action_repeat,
                              episode_length=episode_length)
    ar = spec.action_repeat if action_repeat is None else int(action_repeat)
    if ar < 1:
        raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
    pg_env = _load_playground(spec.playground_name)
    sim_len = int(pg_env._config.episode_length)
    if sim_len % ar:
        raise ValueError(
            f"{name}: Playground episode_length {sim_len} is not divisible by "
            f"action_repeat {ar}; choose a divisor")
    T = sim_len // ar
    if episode_length is not None:
        if int(episode_length) < 1:
            raise ValueError(
                f"episode_length must be >= 1 agent step, got {episode_length}")
        T = int(episode_length)
    env = PlaygroundEnv(spec.replace(action_repeat=ar), pg_env, T)
    obs_shape = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape
    if obs_shape != (spec.obs_dim,):
        raise RuntimeError(
            f"{name}: Playground observation has shape {obs_shape}, the "
            f"registry pins obs_dim={spec.obs_dim}; the installed playground "
            f"differs from the one probed ({env_versions()})")
    return env


@functools.lru_cache(maxsize=32)
def cached_env(name: str, episode_length: int | None = None,
               action_repeat: int | None = None) -> Env:
    """`make_env` once per process and (name, T, repeat).

    Compiled rollouts and training chunks are cached per env object, so every
    stage of one process (trainer, evaluation, tests) asking for the same
    task gets the same object and reuses their programs.
    """
    return make_env(name, action_repeat=action_repeat, episode_length=episode_length)
