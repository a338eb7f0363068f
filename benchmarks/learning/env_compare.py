"""Env check: reacher-easy as the agents see it, MuJoCo Playground (through wmx) beside dm_control.

wmx trains on Playground's port of reacher-easy (`wmx.envs.playground.make_env`: MJX with
impl="jax", actions mapped onto the ctrlrange, action repeat 2 summing rewards, T = 500
agent steps); the published DreamerV3 curves come from `dm_control.suite.load("reacher",
"easy")` behind the reference's action-repeat wrapper (repeat 2, rewards summed, the
repeat stops at the episode's last step). This script measures what differs between the
two as an agent sees them:

- static: physics and control timestep, substeps, episode length in agent steps, action
  bounds, integrator, solver, disabled flags, actuator gear, damping, masses, joint ranges,
  target and finger sizes (the reward radius);
- observation layout, and the observation of the same physical state (same qpos, qvel and
  target set in both);
- the target's sampling distribution (radius and angle over many resets; Kolmogorov-Smirnov
  against the uniform laws of the source and between the envs) and the arm's initial state;
- the reward on identical states over a grid of finger-to-target distances, against a
  transcription of `dm_control.utils.rewards.tolerance`, and per agent step with the repeat;
- returns of the Jacobian-transpose controller of `scripted_reacher.py` and of the
  uniform-random policy over full episodes: each env from its own resets, and dm_control
  also from Playground's start states with the same action sequences (paired);
- dynamics: from identical states, the same actions for N agent steps, the largest
  qpos/qvel difference; CPU MuJoCo on Playground's model, once at Playground's settings
  and once at dm_control's, splits the difference into MJX-vs-MuJoCo and settings.

dm_control needs a newer mujoco than the one Playground's MJX was installed with, so the
dm_control half can run in another interpreter (`--dmc-python`, a virtual environment
with only `pip install dm_control`): this file, run there with `--dmc-half REQ OUT`, imports
nothing but NumPy, MuJoCo and dm_control, and the two processes exchange .npz files. The
recorded run used dm_control 1.0.52 on mujoco 4.0.1 in such a venv, wmx's venv for the
Playground half (versions in the JSON).

    python benchmarks/learning/env_compare.py --dmc-python DMC_VENV/bin/python
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPEAT = 2
"""Control steps per agent step in both envs (wmx's TaskSpec; the reference's DMC repeat)."""
WRIST_RANGE = np.radians([-160.0, 160.0])
"""The wrist joint's range in both XMLs (rad)."""
TARGET_RADIUS = (0.05, 0.20)
"""dm_control's Reacher.initialize_episode: target radius ~ U[.05, .20], angle ~ U[0, 2π)."""


# ---- pure parts (no simulator) ------------------------------------------------------

def tolerance(x, bounds=(0.0, 0.0), margin=0.0, sigmoid="gaussian", value_at_margin=0.1):
    """NumPy transcription of dm_control.utils.rewards.tolerance (gaussian and linear).

    1 inside the inclusive bounds; outside, 0 when margin == 0, else the sigmoid of the
    distance to the nearest bound in units of margin (value_at_margin at one margin).
    """
    lower, upper = bounds
    x = np.asarray(x, np.float64)
    inside = (lower <= x) & (x <= upper)
    if margin == 0:
        return np.where(inside, 1.0, 0.0)
    d = np.where(x < lower, lower - x, x - upper) / margin
    if sigmoid == "gaussian":
        out = np.exp(-0.5 * (d * np.sqrt(-2 * np.log(value_at_margin))) ** 2)
    elif sigmoid == "linear":
        s = d * (1 - value_at_margin)
        out = np.where(np.abs(s) < 1, 1 - s, 0.0)
    else:
        raise ValueError(f"sigmoid {sigmoid!r} not transcribed")
    return np.where(inside, 1.0, out)


def jacobian_policy(obs, kp, kd, xp=np):
    """scripted_reacher.py's controller over an array module xp (numpy or jax.numpy).

    obs [..., 6] = (qpos 2, finger-to-target 2, qvel 2) -> clip(Kp·Jᵀ·d − Kd·q̇, −1, 1).
    """
    l1 = l2 = 0.12
    q1, q2, d, qvel = obs[..., 0], obs[..., 1], obs[..., 2:4], obs[..., 4:6]
    s1, c1, s12, c12 = xp.sin(q1), xp.cos(q1), xp.sin(q1 + q2), xp.cos(q1 + q2)
    jt_d0 = (-l1 * s1 - l2 * s12) * d[..., 0] + (l1 * c1 + l2 * c12) * d[..., 1]
    jt_d1 = (-l2 * s12) * d[..., 0] + (l2 * c12) * d[..., 1]
    return xp.clip(kp * xp.stack([jt_d0, jt_d1], -1) - kd * qvel, -1.0, 1.0)


def polar(xy):
    """Target xy [..., 2] -> (radius, angle in [0, 2π)) as dm_control parameterises it:
    x = r·sin(angle), y = r·cos(angle)."""
    xy = np.asarray(xy, np.float64)
    return np.hypot(xy[..., 0], xy[..., 1]), np.mod(np.arctan2(xy[..., 0], xy[..., 1]), 2 * np.pi)


def ks_uniform(x, lo, hi) -> float:
    """Kolmogorov-Smirnov statistic of the sample x against U[lo, hi]."""
    u = np.sort((np.asarray(x, np.float64) - lo) / (hi - lo))
    n = u.size
    i = np.arange(1, n + 1)
    return float(max((i / n - u).max(), (u - (i - 1) / n).max()))


def ks_two(a, b) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(np.ravel(a)), np.sort(np.ravel(b))
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / a.size
                        - np.searchsorted(b, grid, "right") / b.size).max())


def ks_critical(n: int, m: int | None = None, c: float = 1.628) -> float:
    """The KS statistic's 1% critical value (c = 1.628), one-sample or two-sample."""
    return float(c * np.sqrt(1 / n if m is None else (n + m) / (n * m)))


def sample_summary(x, lo=None, hi=None) -> dict:
    """mean, std, min, max of x and, with bounds, its KS statistic against U[lo, hi]."""
    x = np.asarray(x, np.float64)
    out = {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
           "max": float(x.max())}
    if lo is not None:
        out["ks_vs_uniform"] = ks_uniform(x, lo, hi)
    return out


def returns_summary(r) -> dict:
    """mean ± standard error, median, min, max of episode returns."""
    r = np.asarray(r, np.float64)
    return {"mean": float(r.mean()), "sem": float(r.std(ddof=1) / np.sqrt(r.size)),
            "median": float(np.median(r)), "min": float(r.min()), "max": float(r.max()),
            "n": int(r.size)}


def paired_diff(a, b) -> dict:
    """Mean and standard error of a − b over paired episodes, and how many differ."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return {"mean": float(d.mean()), "sem": float(d.std(ddof=1) / np.sqrt(d.size)),
            "n_differ": int((np.abs(d) > 1e-9).sum()), "n": int(d.size)}


def max_abs_over_steps(a, b, steps) -> dict:
    """{step: max |a − b|} over states and coordinates after agent steps `steps` (1-based);
    a, b: [states, N, dims]."""
    err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(axis=(0, 2))
    return {str(s): float(err[s - 1]) for s in steps if s <= err.size}


# ---- either half: a MuJoCo model's summary and CPU rollouts -------------------------

def model_summary(m) -> dict:
    """Physics settings and parameters of a raw mujoco.MjModel of the reacher."""
    import mujoco
    gid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n)  # noqa: E731
    bid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n)  # noqa: E731
    flags = sorted(n for n in dir(mujoco.mjtDisableBit) if n.startswith("mjDSBL_")
                   and m.opt.disableflags & int(getattr(mujoco.mjtDisableBit, n)))
    bodies = ("arm", "hand", "finger")
    return {
        "timestep": float(m.opt.timestep),
        "integrator": mujoco.mjtIntegrator(m.opt.integrator).name,
        "solver": mujoco.mjtSolver(m.opt.solver).name,
        "iterations": int(m.opt.iterations), "ls_iterations": int(m.opt.ls_iterations),
        "disabled_flags": flags, "gravity": m.opt.gravity.tolist(),
        "nq": int(m.nq), "nv": int(m.nv), "nu": int(m.nu), "nmocap": int(m.nmocap),
        "actuator_gear": m.actuator_gear[:, 0].tolist(),
        "actuator_ctrlrange": m.actuator_ctrlrange.tolist(),
        "dof_damping": m.dof_damping.tolist(), "dof_armature": m.dof_armature.tolist(),
        "dof_frictionloss": m.dof_frictionloss.tolist(),
        "jnt_limited": m.jnt_limited.astype(int).tolist(),
        "jnt_range_deg": np.degrees(m.jnt_range).round(6).tolist(),
        "body_mass": {b: float(m.body_mass[bid(b)]) for b in bodies},
        "body_inertia": {b: m.body_inertia[bid(b)].tolist() for b in bodies},
        "link_x": [float(m.body_pos[bid("hand"), 0]), float(m.body_pos[bid("finger"), 0])],
        "target_size": float(m.geom_size[gid("target"), 0]),
        "finger_size": float(m.geom_size[gid("finger"), 0]),
        "reward_radius": float(m.geom_size[gid("target"), 0] + m.geom_size[gid("finger"), 0]),
    }


def cpu_rollout(m, qpos, qvel, actions, n_sub: int) -> tuple[np.ndarray, np.ndarray]:
    """CPU MuJoCo: from each state, each action held for REPEAT × n_sub steps of m.

    qpos, qvel: [K, 2]; actions: [K, N, 2] in ctrl units. Returns qpos, qvel [K, N, 2]
    after every agent step.
    """
    import mujoco
    d = mujoco.MjData(m)
    K, N = actions.shape[:2]
    qp, qv = np.zeros((K, N, m.nq)), np.zeros((K, N, m.nv))
    for k in range(K):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = qpos[k], qvel[k]
        mujoco.mj_forward(m, d)
        for n in range(N):
            d.ctrl[:] = actions[k, n]
            for _ in range(REPEAT * n_sub):
                mujoco.mj_step(m, d)
            qp[k, n], qv[k, n] = d.qpos, d.qvel
    return qp, qv


def _tolerance_line(fn) -> str:
    return next(ln.strip() for ln in inspect.getsource(fn).splitlines() if "tolerance(" in ln)


# ---- the dm_control half (NumPy, MuJoCo, dm_control only) ---------------------------

def dmc_half(req: dict) -> tuple[dict, dict]:
    """Everything measured on dm_control's reacher-easy, for the request's states and
    actions. Returns (json-able meta, arrays)."""
    import importlib.metadata as md
    from dm_control import suite
    from dm_control.suite import reacher
    seed = int(req["seed"])
    env = suite.load("reacher", "easy", task_kwargs={"random": seed})
    phys = env.physics
    env.reset()
    spec = env.action_spec()
    meta = {"versions": {p: md.version(p) for p in ("dm_control", "mujoco")},
            "model": model_summary(phys.model.ptr),
            "agent": {"control_dt": float(env.control_timestep()),
                      "sim_dt": float(phys.timestep()), "n_substeps": int(env._n_sub_steps),
                      "episode_control_steps": int(env._step_limit),
                      "T_agent_steps": int(env._step_limit) // REPEAT,
                      "action_low": spec.minimum.tolist(), "action_high": spec.maximum.tolist(),
                      "obs_layout": [[k, int(np.size(v))] for k, v in
                                     env.task.get_observation(phys).items()]},
            "reward_source": _tolerance_line(reacher.Reacher.get_reward)}
    arr = {}

    def obs_vec():
        return np.concatenate([np.ravel(v) for v in env.task.get_observation(phys).values()])

    def set_state(qpos, qvel, target):
        with phys.reset_context():
            phys.data.qpos[:], phys.data.qvel[:] = qpos, qvel
            phys.named.model.geom_pos["target", :2] = target

    def finger_xy():
        return phys.named.data.geom_xpos["finger", :2].copy()

    # resets: initial state and target distribution; the reset observation's consistency
    R = int(req["n_resets"])
    arr["reset_qpos"], arr["reset_qvel"] = np.zeros((R, 2)), np.zeros((R, 2))
    arr["reset_target"], arr["reset_obs_err"] = np.zeros((R, 2)), np.zeros(R)
    arr["reset_finger"] = np.zeros((R, 2))
    for i in range(R):
        ts = env.reset()
        arr["reset_qpos"][i], arr["reset_qvel"][i] = phys.data.qpos, phys.data.qvel
        tgt = phys.named.data.geom_xpos["target", :2]
        arr["reset_target"][i], arr["reset_finger"][i] = tgt, finger_xy()
        arr["reset_obs_err"][i] = np.abs(ts.observation["to_target"] - (tgt - finger_xy())).max()
    # the observation of given states
    S = req["state_qpos"].shape[0]
    arr["state_obs"], arr["state_reward"] = np.zeros((S, 6)), np.zeros(S)
    for i in range(S):
        set_state(req["state_qpos"][i], req["state_qvel"][i], req["state_target"][i])
        arr["state_obs"][i], arr["state_reward"][i] = obs_vec(), env.task.get_reward(phys)
    # reward grid: target at distance d from the finger
    G = req["grid_dist"].size
    arr["grid_reward"], arr["grid_dist_measured"] = np.zeros(G), np.zeros(G)
    for i in range(G):
        set_state(req["grid_qpos"][i], np.zeros(2), np.zeros(2))
        a = req["grid_angle"][i]
        tgt = finger_xy() + req["grid_dist"][i] * np.array([np.cos(a), np.sin(a)])
        set_state(req["grid_qpos"][i], np.zeros(2), tgt)
        arr["grid_reward"][i] = env.task.get_reward(phys)
        arr["grid_dist_measured"][i] = phys.finger_to_target_dist()
    # dynamics from given states
    K, N = req["dyn_actions"].shape[:2]
    arr["dyn_qpos"], arr["dyn_qvel"] = np.zeros((K, N, 2)), np.zeros((K, N, 2))
    for k in range(K):
        env.reset()
        set_state(req["dyn_qpos"][k], req["dyn_qvel"][k], req["dyn_target"][k])
        for n in range(N):
            for _ in range(REPEAT):
                env.step(req["dyn_actions"][k, n])
            arr["dyn_qpos"][k, n], arr["dyn_qvel"][k, n] = phys.data.qpos, phys.data.qvel
    meta["dyn_cpu_model"] = "dm_control's own"

    # episodes: scripted and random, from own resets and from Playground's start states
    def episode(policy, actions, start=None):
        ts = env.reset()
        if start is not None:
            set_state(*start)
        obs, ret, rewards = obs_vec(), 0.0, []
        for t in range(int(env._step_limit) // REPEAT):
            a = (jacobian_policy(obs, req["kp"], req["kd"]) if policy == "scripted"
                 else actions[t])
            r = 0.0
            for _ in range(REPEAT):            # the reference's ActionRepeat: sum, stop at last
                ts = env.step(a)
                r += ts.reward
                if ts.last():
                    break
            obs, ret = obs_vec(), ret + r
            rewards.append(r)
            if ts.last():
                break
        return ret, len(rewards), np.unique(rewards)

    E = req["episode_actions"].shape[0]
    step_rewards = set()
    for policy in ("scripted", "random"):
        for src in ("own", "paired"):
            rets, lens = np.zeros(E), np.zeros(E, int)
            for e in range(E):
                start = None if src == "own" else (
                    req["start_qpos"][e], req["start_qvel"][e], req["start_target"][e])
                rets[e], lens[e], u = episode(policy, req["episode_actions"][e], start)
                step_rewards |= set(u.tolist())
            arr[f"ret_{policy}_{src}"], arr[f"len_{policy}_{src}"] = rets, lens
    meta["agent_step_rewards_seen"] = sorted(step_rewards)
    return meta, arr


def _save(path, meta, arr):
    np.savez(path, __meta__=np.array(json.dumps(meta)), **arr)


def _load(path) -> tuple[dict, dict]:
    with np.load(path) as z:
        return json.loads(str(z["__meta__"])), {k: z[k] for k in z.files if k != "__meta__"}


# ---- the Playground half (wmx's wrapper) --------------------------------------------

def playground_half(req: dict) -> tuple[dict, dict]:
    """Everything measured on Playground's reacher-easy through `wmx.envs.playground`."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    from wmx.envs.base import stable_dtypes
    from wmx.envs.playground import make_env
    from wmx.version import env_versions
    env = make_env("reacher-easy", action_repeat=REPEAT)
    pg = env.pg_env
    mid, fid, tid = pg._target_mocap_body_id, pg._finger_geom_id, pg._target_geom_id
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    meta = {"versions": env_versions(), "model": model_summary(pg.mj_model),
            "agent": {"control_dt": float(pg.dt), "sim_dt": float(pg.sim_dt),
                      "n_substeps": int(pg.n_substeps),
                      "episode_control_steps": int(pg._config.episode_length),
                      "T_agent_steps": int(env.T), "action_repeat": int(env.action_repeat),
                      "agent_dt": float(env.agent_dt),
                      "action_low": (env._centre - env._half).tolist(),
                      "action_high": (env._centre + env._half).tolist(),
                      "obs_layout": [["qpos", 2], ["finger_to_target", 2], ["qvel", 2]],
                      "obs_dim": int(env.obs_dim)},
            "reward_source": _tolerance_line(type(pg)._get_reward)}

    def set_state(key, qpos, qvel, target):
        s = env.reset(key)
        d = s.inner.data
        d = d.replace(qpos=f32(qpos), qvel=f32(qvel),
                      mocap_pos=d.mocap_pos.at[mid, :2].set(f32(target)))
        d = mjx.forward(pg.mjx_model, d)
        obs = pg._get_obs(d, s.inner.info)
        return s.replace(obs=env._flat_obs(obs),
                         inner=stable_dtypes(s.inner.replace(data=d, obs=obs)))

    def reward_of(s):
        return pg._get_reward(s.inner.data, None, {}, {})

    key = jax.random.PRNGKey(int(req["seed"]))
    k_reset, k_set, k_ep = jax.random.split(key, 3)
    arr = {}

    @jax.jit
    def resets(keys):
        s = jax.vmap(env.reset)(keys)
        raw = jax.vmap(pg.reset)(keys)      # Playground's own reset, before wmx's forward (E21)
        d = s.inner.data
        truth = d.geom_xpos[:, tid, :2] - d.geom_xpos[:, fid, :2]
        return (d.qpos, d.qvel, d.mocap_pos[:, mid, :2], jnp.abs(s.obs[:, 2:4] - truth).max(-1),
                jnp.abs(raw.obs[:, 2:4] - truth).max(-1), d.geom_xpos[:, tid, :2],
                d.geom_xpos[:, fid, :2])

    out = resets(jax.random.split(k_reset, int(req["n_resets"])))
    for name, x in zip(("reset_qpos", "reset_qvel", "reset_target", "reset_obs_err",
                        "reset_obs_err_unwrapped", "reset_target_geom", "reset_finger"), out):
        arr[name] = np.asarray(x, np.float64)

    @jax.jit
    def states(qpos, qvel, target):
        s = jax.vmap(set_state, (None, 0, 0, 0))(k_set, qpos, qvel, target)
        return s.obs, jax.vmap(reward_of)(s)

    arr["state_obs"], arr["state_reward"] = map(np.asarray, states(
        req["state_qpos"], req["state_qvel"], req["state_target"]))

    @jax.jit
    def grid(qpos, dist, angle):
        def one(q, r, a):
            s = set_state(k_set, q, jnp.zeros(2), jnp.zeros(2))
            finger = s.inner.data.geom_xpos[fid, :2]
            s = set_state(k_set, q, jnp.zeros(2),
                          finger + r * jnp.stack([jnp.cos(a), jnp.sin(a)]))
            return reward_of(s), pg._finger_to_target_dist(s.inner.data)
        return jax.vmap(one)(qpos, f32(dist), f32(angle))

    arr["grid_reward"], arr["grid_dist_measured"] = map(np.asarray, grid(
        req["grid_qpos"], req["grid_dist"], req["grid_angle"]))

    @jax.jit
    def dynamics(qpos, qvel, target, actions):
        def one(q, v, t, acts):
            def step(s, a):
                s = env.step(s, a)
                return s, (s.inner.data.qpos, s.inner.data.qvel)
            return jax.lax.scan(step, set_state(k_set, q, v, t), acts)[1]
        return jax.vmap(one)(qpos, qvel, target, f32(actions))

    arr["dyn_qpos"], arr["dyn_qvel"] = map(np.asarray, dynamics(
        req["dyn_qpos"], req["dyn_qvel"], req["dyn_target"], req["dyn_actions"]))

    @jax.jit
    def episodes(keys, scripted, actions):
        def one(k, is_scripted, acts):
            s0 = env.reset(k)
            def step(s, a_random):
                a = jnp.where(is_scripted, jacobian_policy(s.obs, req["kp"], req["kd"], jnp),
                              a_random)
                s = env.step(s, a)
                return s, s.reward
            _, rewards = jax.lax.scan(step, s0, acts)
            d = s0.inner.data
            return rewards, d.qpos, d.qvel, d.mocap_pos[mid, :2]
        return jax.vmap(one)(keys, scripted, f32(actions))

    E = req["episode_actions"].shape[0]
    keys = jax.random.split(k_ep, E)
    rewards, q0, v0, t0 = map(np.asarray, episodes(
        jnp.concatenate([keys, keys]), jnp.arange(2 * E) < E,
        np.concatenate([req["episode_actions"]] * 2)))
    arr["ret_scripted_own"], arr["ret_random_own"] = rewards[:E].sum(1), rewards[E:].sum(1)
    arr["start_qpos"], arr["start_qvel"], arr["start_target"] = q0[:E], v0[:E], t0[:E]
    meta["agent_step_rewards_seen"] = np.unique(rewards).tolist()
    return meta, arr


def dmc_unusable(python: str | None) -> str | None:
    """Why dm_control's half cannot run under ``python`` (None: this interpreter), checked
    before the Playground half so a bad interpreter costs seconds; None when it can."""
    probe = "import numpy, dm_control.suite"
    if python is None:
        try:
            exec(probe)
        except Exception as e:            # noqa: BLE001 - any import failure says the same
            return f"this interpreter cannot import dm_control ({type(e).__name__}: {e})"
        return None
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        return "no such interpreter"
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                       env={**os.environ, "MUJOCO_GL": "disable"})
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status " + str(r.returncode)])[-1]
        return f"it cannot import dm_control ({last})"
    return None


def run_dmc_half(req: dict, python: str | None) -> tuple[dict, dict]:
    """dm_control's half in this process, or under `python` through .npz files."""
    if python is None:
        return dmc_half(req)
    with tempfile.TemporaryDirectory() as tmp:
        rq, rs = Path(tmp) / "request.npz", Path(tmp) / "result.npz"
        _save(rq, {k: v for k, v in req.items() if not isinstance(v, np.ndarray)},
              {k: v for k, v in req.items() if isinstance(v, np.ndarray)})
        subprocess.run([python, __file__, "--dmc-half", str(rq), str(rs)], check=True,
                       env={**os.environ, "MUJOCO_GL": "disable"})
        return _load(rs)


def build_request(args) -> dict:
    """The states, grid, action sequences both halves are run on (NumPy, seeded)."""
    rng = np.random.default_rng(args.seed)

    def arm(n):
        return np.stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(*WRIST_RANGE, n)], -1)

    def target(n):
        r, a = rng.uniform(*TARGET_RADIUS, n), rng.uniform(0, 2 * np.pi, n)
        return r[:, None] * np.stack([np.sin(a), np.cos(a)], -1)

    S, K, rep = args.states, args.dyn_states, 4
    dist = np.repeat(np.sort(np.concatenate([np.linspace(0, 0.15, 61), [0.0595, 0.0605]])), rep)
    return {"seed": args.seed, "kp": args.kp, "kd": args.kd, "n_resets": args.resets,
            "state_qpos": arm(S), "state_qvel": rng.uniform(-3, 3, (S, 2)),
            "state_target": target(S),
            "grid_dist": dist, "grid_qpos": arm(dist.size),
            "grid_angle": rng.uniform(0, 2 * np.pi, dist.size),
            "dyn_qpos": arm(K), "dyn_qvel": rng.uniform(-3, 3, (K, 2)), "dyn_target": target(K),
            "dyn_actions": rng.uniform(-1, 1, (K, args.dyn_steps, 2)),
            "episode_actions": rng.uniform(-1, 1, (args.episodes, args.T, 2))}


# ---- comparison -----------------------------------------------------------------------

def cpu_decomposition(req, pg_arr, dm_arr, dm_model: dict) -> dict:
    """CPU MuJoCo on Playground's model at Playground's settings, at them with dm_control's
    solver iterations, and at dm_control's settings: MJX vs MuJoCo, the solver iterations'
    own effect (the wrist limit is the only constraint), the settings' whole effect, and
    what is left against dm_control."""
    import copy

    import mujoco

    from wmx.envs.playground import make_env
    m_pg = make_env("reacher-easy").mj_model
    m_it, m_dm = copy.deepcopy(m_pg), copy.deepcopy(m_pg)
    for m in (m_it, m_dm):
        m.opt.iterations, m.opt.ls_iterations = dm_model["iterations"], dm_model["ls_iterations"]
    m_dm.opt.timestep = dm_model["timestep"]
    m_dm.opt.disableflags = sum(int(getattr(mujoco.mjtDisableBit, f))
                                for f in dm_model["disabled_flags"])
    args = (req["dyn_qpos"], req["dyn_qvel"], req["dyn_actions"])
    n_pg = int(round(0.02 / m_pg.opt.timestep))
    a_q, a_v = cpu_rollout(m_pg, *args, n_sub=n_pg)
    i_q, i_v = cpu_rollout(m_it, *args, n_sub=n_pg)
    b_q, b_v = cpu_rollout(m_dm, *args, n_sub=1)
    steps = (1, 5, 10, req["dyn_actions"].shape[1])
    pair = lambda q1, v1, q2, v2: {"qpos": max_abs_over_steps(q1, q2, steps),  # noqa: E731
                                   "qvel": max_abs_over_steps(v1, v2, steps)}
    return {
        "mjx_vs_cpu_at_playground_settings": pair(pg_arr["dyn_qpos"], pg_arr["dyn_qvel"], a_q, a_v),
        "cpu_playground_settings_vs_dm_solver_iterations": pair(a_q, a_v, i_q, i_v),
        "cpu_playground_settings_vs_cpu_dm_settings": pair(a_q, a_v, b_q, b_v),
        "cpu_dm_settings_vs_dm_control": pair(b_q, b_v, dm_arr["dyn_qpos"], dm_arr["dyn_qvel"]),
        "dm_settings_applied": {k: dm_model[k] for k in
                                ("timestep", "iterations", "ls_iterations", "disabled_flags")},
    }


def wrist_limit_split(req, pg_arr, dm_arr, deg: float = 155.0) -> dict:
    """Largest |qvel| difference (MJX vs dm_control, whole rollout) over the rollouts whose
    wrist comes within 160 − deg degrees of its limit in either env, and over the others."""
    wrist = np.abs(np.concatenate([req["dyn_qpos"][:, None, 1], pg_arr["dyn_qpos"][..., 1],
                                   dm_arr["dyn_qpos"][..., 1]], 1)).max(1)
    near = wrist > np.radians(deg)
    err = np.abs(pg_arr["dyn_qvel"] - dm_arr["dyn_qvel"]).max(axis=(1, 2))
    return {"threshold_deg": deg, "n_near_limit": int(near.sum()),
            "qvel_max_abs_diff_near_limit": float(err[near].max()) if near.any() else None,
            "qvel_max_abs_diff_others": float(err[~near].max()) if (~near).any() else None,
            "qvel_max_abs_in_rollouts": {"playground": float(np.abs(pg_arr["dyn_qvel"]).max()),
                                         "dm_control": float(np.abs(dm_arr["dyn_qvel"]).max())},
            "qvel_mean_abs_in_rollouts": {"playground": float(np.abs(pg_arr["dyn_qvel"]).mean()),
                                          "dm_control": float(np.abs(dm_arr["dyn_qvel"]).mean())}}


def compare(req, pg_meta, pg, dm_meta, dm, decomposition) -> dict:
    """The JSON record: both sides' values and the differences."""
    n = int(req["n_resets"])
    static_diff = sorted(k for k in pg_meta["model"] if pg_meta["model"][k] != dm_meta["model"][k])
    agent_diff = sorted(k for k in dm_meta["agent"] if k in pg_meta["agent"]
                        and pg_meta["agent"][k] != dm_meta["agent"][k])
    dist = req["grid_dist"]
    radius = pg_meta["model"]["reward_radius"]

    def start_dist(a):
        return np.linalg.norm(a["reset_target"] - a["reset_finger"], axis=-1)

    def init(a):
        r, ang = polar(a["reset_target"])
        return {"start_finger_target_dist": sample_summary(start_dist(a)),
                "p_start_within_reward_radius": float((start_dist(a) <= radius).mean()),
                "target_radius": sample_summary(r, *TARGET_RADIUS),
                "target_angle": sample_summary(ang, 0, 2 * np.pi),
                "shoulder": sample_summary(a["reset_qpos"][:, 0], -np.pi, np.pi),
                "wrist": sample_summary(a["reset_qpos"][:, 1], *WRIST_RANGE),
                "qvel_max_abs": float(np.abs(a["reset_qvel"]).max()),
                "reset_obs_to_target_err_max": float(a["reset_obs_err"].max())}

    def grid(a):
        r = a["grid_reward"]
        return {"reward": r.tolist(),
                "mismatch_vs_tolerance_transcription": int(
                    (r != tolerance(a["grid_dist_measured"], (0, radius))).sum()),
                "largest_dist_paid": float(dist[r > 0].max()),
                "smallest_dist_unpaid": float(dist[r == 0].min()),
                "dist_measured_err_max": float(np.abs(a["grid_dist_measured"] - dist).max())}

    returns = {}
    for policy in ("scripted", "random"):
        returns[policy] = {
            "playground_own_resets": returns_summary(pg[f"ret_{policy}_own"]),
            "dm_control_own_resets": returns_summary(dm[f"ret_{policy}_own"]),
            "dm_control_from_playground_starts": returns_summary(dm[f"ret_{policy}_paired"]),
            "paired_playground_minus_dm_control": paired_diff(pg[f"ret_{policy}_own"],
                                                              dm[f"ret_{policy}_paired"]),
            "playground_returns": pg[f"ret_{policy}_own"].tolist(),
            "dm_control_returns_paired": dm[f"ret_{policy}_paired"].tolist(),
            "dm_control_returns_own": dm[f"ret_{policy}_own"].tolist(),
            "zero_return_episodes": {
                "playground": int((pg[f"ret_{policy}_own"] == 0).sum()),
                "dm_control_own": int((dm[f"ret_{policy}_own"] == 0).sum()),
                "dm_control_paired": int((dm[f"ret_{policy}_paired"] == 0).sum())},
            "dm_control_episode_agent_steps": sorted(set(dm[f"len_{policy}_own"].tolist())),
        }
    steps = (1, 2, 5, 10, 25, req["dyn_actions"].shape[1])
    return {
        "static": {"playground": pg_meta["model"], "dm_control": dm_meta["model"],
                   "differ": static_diff},
        "agent_interface": {"playground": pg_meta["agent"], "dm_control": dm_meta["agent"],
                            "differ": agent_diff},
        "observation": {
            "same_state_obs_max_abs_diff": float(np.abs(pg["state_obs"] - dm["state_obs"]).max()),
            "same_state_obs_max_abs_diff_per_dim":
                np.abs(pg["state_obs"] - dm["state_obs"]).max(0).tolist(),
            "same_state_reward_mismatch": int((pg["state_reward"] != dm["state_reward"]).sum()),
            "n_states": int(pg["state_obs"].shape[0]),
            "playground_reset_obs_err_without_wmx_forward":
                float(pg["reset_obs_err_unwrapped"].max())},
        "initial_state": {
            "n_resets": n, "ks_critical_1pct_one_sample": ks_critical(n),
            "ks_critical_1pct_two_sample": ks_critical(n, n),
            "playground": init(pg), "dm_control": init(dm),
            "ks_two_sample": {
                "target_radius": ks_two(polar(pg["reset_target"])[0], polar(dm["reset_target"])[0]),
                "target_angle": ks_two(polar(pg["reset_target"])[1], polar(dm["reset_target"])[1]),
                "shoulder": ks_two(pg["reset_qpos"][:, 0], dm["reset_qpos"][:, 0]),
                "wrist": ks_two(pg["reset_qpos"][:, 1], dm["reset_qpos"][:, 1]),
                "start_finger_target_dist": ks_two(start_dist(pg), start_dist(dm))},
            "playground_mocap_vs_target_geom_max_abs":
                float(np.abs(pg["reset_target"] - pg["reset_target_geom"]).max())},
        "reward": {
            "source_line": {"playground": pg_meta["reward_source"],
                            "dm_control": dm_meta["reward_source"]},
            "reward_radius": {"playground": radius,
                              "dm_control": dm_meta["model"]["reward_radius"]},
            "grid_dist": dist.tolist(),
            "playground": grid(pg), "dm_control": grid(dm),
            "grid_mismatch_between_envs": int((pg["grid_reward"] != dm["grid_reward"]).sum()),
            "grid_dists_where_envs_differ": sorted(set(
                dist[pg["grid_reward"] != dm["grid_reward"]].tolist())),
            "agent_step_rewards_seen": {"playground": pg_meta["agent_step_rewards_seen"],
                                        "dm_control": dm_meta["agent_step_rewards_seen"]}},
        "returns": returns,
        "dynamics": {
            "n_states": int(req["dyn_actions"].shape[0]),
            "agent_steps": int(req["dyn_actions"].shape[1]),
            "qpos_max_abs_diff": max_abs_over_steps(pg["dyn_qpos"], dm["dyn_qpos"], steps),
            "qvel_max_abs_diff": max_abs_over_steps(pg["dyn_qvel"], dm["dyn_qvel"], steps),
            "qpos_rms_diff_last": float(np.sqrt(
                ((pg["dyn_qpos"] - dm["dyn_qpos"])[:, -1] ** 2).mean())),
            "wrist_limit_split": wrist_limit_split(req, pg, dm),
            "decomposition_cpu_mujoco": decomposition},
    }


def table(res: dict) -> list[tuple[str, str, str]]:
    """(quantity, Playground via wmx, dm_control) rows for stdout."""
    s, a = res["static"], res["agent_interface"]
    P, D = s["playground"], s["dm_control"]
    pa, da = a["playground"], a["dm_control"]
    i, rw, ret, dy = res["initial_state"], res["reward"], res["returns"], res["dynamics"]
    fmt = lambda r: f"{r['mean']:.1f} ± {r['sem']:.1f}"  # noqa: E731
    rows = [
        ("physics timestep (s) x substeps", f"{P['timestep']} x {pa['n_substeps']}",
         f"{D['timestep']} x {da['n_substeps']}"),
        ("control dt / agent dt (s)", f"{pa['control_dt']} / {pa['agent_dt']}",
         f"{da['control_dt']} / {da['control_dt'] * REPEAT}"),
        ("episode: control / agent steps", f"{pa['episode_control_steps']} / {pa['T_agent_steps']}",
         f"{da['episode_control_steps']} / {da['T_agent_steps']}"),
        ("action bounds", f"{pa['action_low']}..{pa['action_high']}",
         f"{da['action_low']}..{da['action_high']}"),
        ("integrator, solver iters/ls",
         f"{P['integrator']}, {P['iterations']}/{P['ls_iterations']}",
         f"{D['integrator']}, {D['iterations']}/{D['ls_iterations']}"),
        ("disabled flags", ",".join(f[7:] for f in P["disabled_flags"]),
         ",".join(f[7:] for f in D["disabled_flags"])),
        ("gear, damping", f"{P['actuator_gear']}, {P['dof_damping']}",
         f"{D['actuator_gear']}, {D['dof_damping']}"),
        ("arm/hand/finger mass", str([round(v, 5) for v in P["body_mass"].values()]),
         str([round(v, 5) for v in D["body_mass"].values()])),
        ("target size / reward radius", f"{P['target_size']} / {P['reward_radius']}",
         f"{D['target_size']} / {D['reward_radius']}"),
        ("obs layout", " ".join(f"{k}:{n}" for k, n in pa["obs_layout"]),
         " ".join(f"{k}:{n}" for k, n in da["obs_layout"])),
        ("same state: max |obs diff|", f"{res['observation']['same_state_obs_max_abs_diff']:.2e}",
         f"{res['observation']['n_states']} states"),
        ("reward on grid: paid up to / unpaid from",
         f"{rw['playground']['largest_dist_paid']} / {rw['playground']['smallest_dist_unpaid']}",
         f"{rw['dm_control']['largest_dist_paid']} / {rw['dm_control']['smallest_dist_unpaid']}"),
        ("reward grid mismatches (envs; vs tolerance)",
         f"{rw['grid_mismatch_between_envs']}; "
         f"{rw['playground']['mismatch_vs_tolerance_transcription']}",
         f"{rw['dm_control']['mismatch_vs_tolerance_transcription']}"),
        ("agent-step rewards seen", str(rw["agent_step_rewards_seen"]["playground"]),
         str(rw["agent_step_rewards_seen"]["dm_control"])),
    ]
    crit = i["ks_critical_1pct_two_sample"]
    for q in ("target_radius", "target_angle", "shoulder", "wrist"):
        p, d = i["playground"][q], i["dm_control"][q]
        rows.append((f"{q}: mean [min,max] KS-U (2-sample KS)",
                     f"{p['mean']:.3f} [{p['min']:.3f},{p['max']:.3f}] {p['ks_vs_uniform']:.3f}",
                     f"{d['mean']:.3f} [{d['min']:.3f},{d['max']:.3f}] {d['ks_vs_uniform']:.3f}"
                     f" ({i['ks_two_sample'][q]:.3f}; 1% crit {crit:.3f})"))
    rows.append(("start dist finger-target: mean; P(paid) (2-sample KS)",
                 f"{i['playground']['start_finger_target_dist']['mean']:.3f}; "
                 f"{i['playground']['p_start_within_reward_radius']:.3f}",
                 f"{i['dm_control']['start_finger_target_dist']['mean']:.3f}; "
                 f"{i['dm_control']['p_start_within_reward_radius']:.3f} "
                 f"({i['ks_two_sample']['start_finger_target_dist']:.3f})"))
    rows.append(("initial max |qvel|", str(i["playground"]["qvel_max_abs"]),
                 str(i["dm_control"]["qvel_max_abs"])))
    for pol in ("scripted", "random"):
        r = ret[pol]
        pd = r["paired_playground_minus_dm_control"]
        rows.append((f"{pol} return, own resets", fmt(r["playground_own_resets"]),
                     fmt(r["dm_control_own_resets"])))
        rows.append((f"{pol} return, same starts+actions", fmt(r["playground_own_resets"]),
                     f"{fmt(r['dm_control_from_playground_starts'])} (paired diff "
                     f"{pd['mean']:.1f} ± {pd['sem']:.1f})"))
    for k in ("1", "5", str(dy["agent_steps"])):
        rows.append((f"dynamics max |dqpos| / |dqvel| after {k} agent steps",
                     f"{dy['qpos_max_abs_diff'][k]:.2e} / {dy['qvel_max_abs_diff'][k]:.2e}", ""))
    wl = dy["wrist_limit_split"]
    rows.append((f"  max |dqvel|: wrist near limit ({wl['n_near_limit']}) / others",
                 f"{wl['qvel_max_abs_diff_near_limit']:.2f} / {wl['qvel_max_abs_diff_others']:.2f}",
                 f"max |qvel| {wl['qvel_max_abs_in_rollouts']['dm_control']:.1f}"))
    dec = dy["decomposition_cpu_mujoco"]
    for name, v in dec.items():
        if name.endswith("applied"):
            continue
        last = max(v["qpos"], key=int)
        rows.append((f"  {name} (after 1 / {last})",
                     f"qpos {v['qpos']['1']:.1e} / {v['qpos'][last]:.1e}",
                     f"qvel {v['qvel']['1']:.1e} / {v['qvel'][last]:.1e}"))
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dmc-python", default=None,
                   help="interpreter with dm_control installed for the dm_control half "
                        "(default: this one, in-process)")
    p.add_argument("--episodes", type=int, default=128, help="episodes per policy per env")
    p.add_argument("--resets", type=int, default=2000, help="resets sampled per env")
    p.add_argument("--states", type=int, default=64, help="states for the observation check")
    p.add_argument("--dyn-states", type=int, default=32)
    p.add_argument("--dyn-steps", type=int, default=50, help="agent steps per dynamics rollout")
    p.add_argument("--kp", type=float, default=60.0)
    p.add_argument("--kd", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--T", type=int, default=500, help=argparse.SUPPRESS)
    p.add_argument("--out", default="benchmarks/results/env_compare_reacher-easy.json")
    p.add_argument("--dmc-half", nargs=2, metavar=("REQ", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("episodes", "resets", "states", "dyn_states", "dyn_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give a count of 1 or more")
    if args.dmc_half is None and (why := dmc_unusable(args.dmc_python)):
        given = f"--dmc-python {args.dmc_python}" if args.dmc_python else "--dmc-python not given"
        p.error(f"{given}: {why}; give an interpreter with dm_control "
                "installed (dm_control 1.0.52 needs mujoco >= 4.0.1: a venv of its own)")
    if args.dmc_half:
        meta, arr = _load(args.dmc_half[0])
        _save(args.dmc_half[1], *dmc_half({**meta, **arr}))
        return {}
    t0 = time.perf_counter()
    req = build_request(args)
    pg_meta, pg = playground_half(req)
    if pg_meta["agent"]["T_agent_steps"] != args.T:
        raise RuntimeError(f"wmx's reacher-easy has T={pg_meta['agent']['T_agent_steps']}")
    t_pg = time.perf_counter() - t0
    req.update(start_qpos=pg["start_qpos"], start_qvel=pg["start_qvel"],
               start_target=pg["start_target"])
    dm_meta, dm = run_dmc_half(req, args.dmc_python)
    t_dm = time.perf_counter() - t0 - t_pg
    dec = cpu_decomposition(req, pg, dm, dm_meta["model"])
    res = {"task": "reacher-easy", "action_repeat": REPEAT,
           "versions": {"playground_side": pg_meta["versions"],
                        "dm_control_side": dm_meta["versions"]},
           "settings": {k: v for k, v in vars(args).items()
                        if k not in ("dmc_half", "dmc_python", "out")},
           **compare(req, pg_meta, pg, dm_meta, dm, dec),
           "wall_s": {"playground": round(t_pg, 1), "dm_control": round(t_dm, 1),
                      "total": round(time.perf_counter() - t0, 1)}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    rows = [("quantity", "Playground (wmx)", "dm_control")] + table(res)
    w = [max(len(r[j]) for r in rows) for j in range(3)]
    for r in rows:
        print(" | ".join(c.ljust(w[j]) for j, c in enumerate(r)))
    print(json.dumps(res["wall_s"]))
    return res


if __name__ == "__main__":
    main()
