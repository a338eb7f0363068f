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
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
# the parts live in their own modules; tests/benchmarks/test_env_compare.py reads them here
from env_compare_common import (REPEAT, TARGET_RADIUS, WRIST_RANGE,  # noqa: F401
                                jacobian_policy, ks_critical, ks_two, ks_uniform,
                                max_abs_over_steps, paired_diff, polar, returns_summary,
                                sample_summary, tolerance)
from env_compare_dmc import _load, _save, dmc_half, run_half
from env_compare_playground import playground_half
from env_compare_report import compare, cpu_decomposition, table


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
    """dm_control's half in this process, or under `python` through .npz files
    (`env_compare_dmc.run_half`)."""
    return run_half(req, python, __file__, dmc_half)


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
