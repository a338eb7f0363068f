"""The dm_control half of `env_compare.py`: everything measured on dm_control's reacher-easy,
and the .npz files the two processes exchange (`_save`, `_load`, `run_half`; also
`env_suite_compare.py`'s). NumPy, MuJoCo and
dm_control only: `env_compare.py --dmc-half` runs it in a venv without wmx.
"""
from __future__ import annotations

import json

import numpy as np
from env_compare_common import REPEAT, _tolerance_line, jacobian_policy, model_summary

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


def run_half(req: dict, python: str | None, script: str, half) -> tuple[dict, dict]:
    """A dm_control half: ``half(req)`` in this process (``python`` None), else ``script
    --dmc-half REQ OUT`` under ``python`` (a venv with dm_control), the request and the
    result exchanged as .npz files (`_save`, `_load`: the request's arrays as arrays, the
    rest as JSON) in a temporary folder removed after.

    Args:
        req: the request (JSON values and NumPy arrays).
        python: the interpreter, or None.
        script: the check's file, which answers ``--dmc-half REQ OUT``.
        half: the half's function, for the in-process case.

    Returns:
        (meta, arrays) of the half.

    Raises:
        subprocess.CalledProcessError: the other interpreter failed.
    """
    import os
    import subprocess
    import tempfile
    from pathlib import Path
    if python is None:
        return half(req)
    with tempfile.TemporaryDirectory() as tmp:
        rq, rs = Path(tmp) / "request.npz", Path(tmp) / "result.npz"
        _save(rq, {k: v for k, v in req.items() if not isinstance(v, np.ndarray)},
              {k: v for k, v in req.items() if isinstance(v, np.ndarray)})
        subprocess.run([python, script, "--dmc-half", str(rq), str(rs)], check=True,
                       env={**os.environ, "MUJOCO_GL": "disable"})
        return _load(rs)


