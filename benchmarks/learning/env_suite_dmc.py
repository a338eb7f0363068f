"""The dm_control half of `env_suite_compare.py`, and the physics summary both halves share.

NumPy, MuJoCo and dm_control only (no wmx, no JAX): `env_suite_compare.py --dmc-half` runs
it in a virtual environment of its own, since dm_control wants a newer mujoco than the one
Playground's MJX was installed with. Per mt19 task it measures, on ``dm_control.suite``:
the control and physics timesteps, the episode length, the action bounds, the observation
layout, a summary of the physics settings (`physics_summary`), the returns of the uniform-
random and the zero-action policies under the reference's action repeat, and the
observations of a few states reached by random actions (with their qpos and qvel, so the
Playground half can compute its observation of the same state).
"""
from __future__ import annotations


import numpy as np

DMC_NAMES = {
    "walker-stand": ("walker", "stand"), "walker-walk": ("walker", "walk"),
    "walker-run": ("walker", "run"), "cheetah-run": ("cheetah", "run"),
    "reacher-easy": ("reacher", "easy"), "reacher-hard": ("reacher", "hard"),
    "acrobot-swingup": ("acrobot", "swingup"), "pendulum-swingup": ("pendulum", "swingup"),
    "cartpole-balance": ("cartpole", "balance"),
    "cartpole-balance-sparse": ("cartpole", "balance_sparse"),
    "cartpole-swingup": ("cartpole", "swingup"),
    "cartpole-swingup-sparse": ("cartpole", "swingup_sparse"),
    "cup-catch": ("ball_in_cup", "catch"), "finger-spin": ("finger", "spin"),
    "finger-turn-easy": ("finger", "turn_easy"), "finger-turn-hard": ("finger", "turn_hard"),
    "fish-swim": ("fish", "swim"), "hopper-stand": ("hopper", "stand"),
    "hopper-hop": ("hopper", "hop"),
}
"""mt19 task (mt30 spelling) -> dm_control suite (domain, task)."""

TARGET_TASKS = {"reacher-easy": "geom", "reacher-hard": "geom", "finger-turn-easy": "site",
                "finger-turn-hard": "site", "fish-swim": "geom"}
"""Tasks whose observation depends on a target placed at reset outside qpos, and what the
target is in dm_control's model (a geom or a site named "target" in the world body; a
mocap body "target" in Playground's): the observation check records its world position
with each state, and the Playground half moves its mocap body there."""


def physics_summary(m) -> dict:
    """Physics settings of a raw ``mujoco.MjModel``, comparable across the two halves.

    Args:
        m: the model.

    Returns:
        {timestep (s), integrator, solver, iterations, ls_iterations, disabled_flags,
        nq, nv, nu, nbody, ngeom, nmocap, total_mass (kg), actuator_gear (first column
        per actuator), actuator_ctrlrange, dof_damping, dof_armature}.
    """
    import mujoco
    flags = sorted(n for n in dir(mujoco.mjtDisableBit) if n.startswith("mjDSBL_")
                   and m.opt.disableflags & int(getattr(mujoco.mjtDisableBit, n)))
    return {"timestep": float(m.opt.timestep),
            "integrator": mujoco.mjtIntegrator(m.opt.integrator).name,
            "solver": mujoco.mjtSolver(m.opt.solver).name,
            "iterations": int(m.opt.iterations), "ls_iterations": int(m.opt.ls_iterations),
            "disabled_flags": flags, "nq": int(m.nq), "nv": int(m.nv), "nu": int(m.nu),
            "nbody": int(m.nbody), "ngeom": int(m.ngeom), "nmocap": int(m.nmocap),
            "total_mass": round(float(np.sum(m.body_mass)), 6),
            "actuator_gear": np.round(m.actuator_gear[:, 0], 6).tolist(),
            "actuator_ctrlrange": np.round(m.actuator_ctrlrange, 6).tolist(),
            "dof_damping": np.round(m.dof_damping, 6).tolist(),
            "dof_armature": np.round(m.dof_armature, 6).tolist()}


def dmc_task(task: str, episodes: int, seed: int, T: int, repeat: int,
             n_states: int, n_resets: int = 0) -> tuple[dict, dict]:
    """Everything measured on dm_control's version of one task.

    The policies run as wmx's seed phase runs them: an action U[-1, 1]^A per agent step
    (mapped linearly onto the action spec's bounds), held for ``repeat`` control steps
    with their rewards summed, the repeat stopping at the episode's last step; ``T``
    agent steps per episode from a fresh reset.

    Args:
        task: an mt19 task (`DMC_NAMES`).
        episodes: episodes per policy.
        seed: seeds the env's ``random`` and the actions.
        T: agent steps per episode.
        repeat: control steps per agent step.
        n_states: states for the observation check, each after a reset and a random
            number (0-49) of random agent steps.
        n_resets: resets whose initial qpos and qvel are recorded.

    Returns:
        (meta: versions are the caller's; settings, physics, observation layout, returns
        summary; arrays: ``random_returns``, ``zero_returns`` [episodes] float64,
        ``state_qpos`` [n_states, nq], ``state_qvel`` [n_states, nv], ``state_obs``
        [n_states, obs dim], ``state_target`` [n_states, 3] (the target's world position;
        [0, 3] for a task without one), ``reset_qpos`` [n_resets, nq], ``reset_qvel``
        [n_resets, nv]).
    """
    from dm_control import suite
    domain, name = DMC_NAMES[task]
    env = suite.load(domain, name, task_kwargs={"random": seed})
    phys, spec = env.physics, env.action_spec()
    lo, hi = np.asarray(spec.minimum, np.float64), np.asarray(spec.maximum, np.float64)
    rng = np.random.default_rng(seed)

    def flat(obs) -> np.ndarray:
        return np.concatenate([np.ravel(v) for v in obs.values()]).astype(np.float64)

    def episode(policy) -> float:
        ts, ret = env.reset(), 0.0
        for _ in range(T):
            a = lo + (policy() + 1.0) * 0.5 * (hi - lo)
            for _ in range(repeat):
                ts = env.step(a)
                ret += float(ts.reward or 0.0)
                if ts.last():
                    return ret
        return ret

    random_r = np.array([episode(lambda: rng.uniform(-1, 1, lo.shape)) for _ in range(episodes)])
    zero_r = np.array([episode(lambda: np.zeros(lo.shape)) for _ in range(episodes)])
    qpos, qvel, obs, target = [], [], [], []
    kind = TARGET_TASKS.get(task)
    for _ in range(n_states):
        ts = env.reset()
        for _ in range(int(rng.integers(0, 50))):
            ts = env.step(lo + (rng.uniform(-1, 1, lo.shape) + 1.0) * 0.5 * (hi - lo))
        qpos.append(phys.data.qpos.copy())
        qvel.append(phys.data.qvel.copy())
        obs.append(flat(ts.observation))
        if kind is not None:
            where = phys.named.data.geom_xpos if kind == "geom" else phys.named.data.site_xpos
            target.append(np.array(where["target"], np.float64))
    r_qpos, r_qvel = [], []
    for _ in range(n_resets):
        env.reset()
        r_qpos.append(phys.data.qpos.copy())
        r_qvel.append(phys.data.qvel.copy())
    layout = [[k, int(np.size(v))] for k, v in env.task.get_observation(phys).items()]
    meta = {"suite": f"{domain}/{name}",
            "settings": {"control_dt": float(env.control_timestep()),
                         "sim_dt": float(phys.timestep()), "n_substeps": int(env._n_sub_steps),
                         "episode_control_steps": int(env._step_limit),
                         "T_agent_steps": int(env._step_limit) // repeat,
                         "obs_dim": int(sum(n for _, n in layout)),
                         "action_dim": int(lo.size),
                         "action_low": lo.tolist(), "action_high": hi.tolist()},
            "obs_layout": layout, "physics": physics_summary(phys.model.ptr)}
    arrays = {"random_returns": random_r, "zero_returns": zero_r,
              "state_qpos": np.asarray(qpos), "state_qvel": np.asarray(qvel),
              "state_obs": np.asarray(obs),
              "state_target": np.asarray(target).reshape(len(target), 3),
              "reset_qpos": np.asarray(r_qpos).reshape(n_resets, phys.model.nq),
              "reset_qvel": np.asarray(r_qvel).reshape(n_resets, phys.model.nv)}
    return meta, arrays


def dmc_half(req: dict) -> tuple[dict, dict]:
    """`dmc_task` for every task of the request.

    Args:
        req: {"tasks": [...], "episodes", "seed", "T", "repeat", "n_states", "n_resets"}.

    Returns:
        (meta: {"versions", "tasks": {task: meta}}, arrays: "<task>::<name>" -> array).
    """
    import importlib.metadata as md
    meta = {"versions": {p: md.version(p) for p in ("dm_control", "mujoco", "numpy")},
            "tasks": {}}
    arrays = {}
    for task in req["tasks"]:
        m, a = dmc_task(task, int(req["episodes"]), int(req["seed"]), int(req["T"]),
                        int(req["repeat"]), int(req["n_states"]), int(req.get("n_resets", 0)))
        meta["tasks"][task] = m
        arrays.update({f"{task}::{k}": v for k, v in a.items()})
        r = a["random_returns"]
        print(f"dm_control {task}: random {r.mean():.2f} ± {r.std():.2f} over {r.size}",
              flush=True)
    return meta, arrays
