"""Env check: what does a scripted controller score on wmx's reacher-easy?

A Jacobian-transpose controller (torque = Kp·Jᵀ·(target − finger) − Kd·q̇,
clipped to [−1, 1]; the arm's two links are 0.12 long, from Playground's
reacher.xml) runs full episodes through `wmx.envs.playground` (its action
mapping, action repeat 2 and time limit: T = 500 agent steps), from fresh
randomised initial states. Returns of several hundred mean the task rewards
reaching the target through wmx's wrapper as dm_control's does (the DreamerV3
and TD-MPC2 checks' published curves reach ~630 at 50,000 and ~940 at 100,000
env steps). Observation layout: qpos (shoulder, wrist), finger-to-target (x, y),
qvel. Writes ``<out>/scripted_reacher-easy.json``; docs/validation.md records it.

    python benchmarks/learning/scripted_reacher.py --episodes 16
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from wmx.envs.playground import cached_env

LINKS = (0.12, 0.12)
"""Shoulder-to-wrist and wrist-to-finger lengths of Playground's reacher.xml (m)."""


def jacobian_policy(obs: jax.Array, kp: float, kd: float) -> jax.Array:
    """f32[6] observation -> f32[2] action in [−1, 1] (Kp·Jᵀ·d − Kd·q̇)."""
    (l1, l2), (q1, q2), d, qvel = LINKS, (obs[0], obs[1]), obs[2:4], obs[4:6]
    s1, c1, s12, c12 = jnp.sin(q1), jnp.cos(q1), jnp.sin(q1 + q2), jnp.cos(q1 + q2)
    jac = jnp.array([[-l1 * s1 - l2 * s12, -l2 * s12], [l1 * c1 + l2 * c12, l2 * c12]])
    return jnp.clip(kp * jac.T @ d - kd * qvel, -1.0, 1.0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--kp", type=float, default=60.0)
    p.add_argument("--kd", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args(argv)
    env = cached_env("reacher-easy")

    def episode(key):
        def step(s, _):
            s = env.step(s, jacobian_policy(s.obs, args.kp, args.kd))
            return s, s.reward
        _, rewards = jax.lax.scan(step, env.reset(key), None, length=env.T)
        return rewards.sum()

    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.episodes)
    returns = np.asarray(jax.jit(jax.vmap(episode))(keys), np.float64)
    res = {"task": "reacher-easy", "controller": "jacobian-transpose", "kp": args.kp,
           "kd": args.kd, "seed": args.seed, "T": env.T, "action_repeat": env.action_repeat,
           "returns": returns.round(1).tolist(), "mean": float(returns.mean()),
           "median": float(np.median(returns)), "max": float(returns.max()),
           "wall_s": round(time.perf_counter() - t0, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scripted_reacher-easy.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("mean", "median", "max", "wall_s")}))
    return res


if __name__ == "__main__":
    main()
