"""What both halves of `env_compare.py` use: the envs' shared constants, the pure arithmetic
(the reward tolerance, the scripted policy, the statistics; no simulator), a MuJoCo model's
summary and CPU rollouts. NumPy and MuJoCo only: the dm_control half runs it in a venv
without wmx.
"""
from __future__ import annotations

import inspect

import numpy as np

REPEAT = 2
"""Control steps per agent step in both envs (wmx's TaskSpec; the reference's DMC repeat)."""
WRIST_RANGE = np.radians([-160.0, 160.0])
"""The wrist joint's range in both XMLs (rad)."""
TARGET_RADIUS = (0.05, 0.20)
"""dm_control's Reacher.initialize_episode: target radius ~ U[.05, .20], angle ~ U[0, 2π)."""


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


