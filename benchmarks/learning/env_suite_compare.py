"""Env check over the 19 mt19 tasks: MuJoCo Playground (through wmx) beside dm_control.

wmx trains on Playground's MJX ports of the DeepMind Control tasks (deviation E18); the
published TD-MPC2 and DreamerV3 curves come from ``dm_control.suite``. For each task this
script measures what an agent would notice of the difference:

- settings: control and physics timesteps, physics steps per control step, episode
  length in agent steps (action repeat 2), observation and action sizes, action bounds;
- physics: integrator, solver, iterations, disabled flags, sizes, masses, gears, damping
  (`env_suite_dmc.physics_summary` of each side's MuJoCo model);
- the observation of the same physical state: dm_control's qpos and qvel after a reset and
  some random steps (and its target's world position, for the tasks with a target placed
  outside qpos: `env_suite_dmc.TARGET_TASKS`, Playground's mocap body moved there), set in
  Playground's MJX data (``mjx.forward``) and read through wmx's wrapper;
- the initial state: qpos and qvel over many resets, coordinate by coordinate, by the
  two-sample Kolmogorov-Smirnov statistic against its 0.1% critical value;
- the returns of the uniform-random policy (actions U[-1, 1]^A per agent step, as wmx's
  seed phase) and of the zero action, each env from its own resets: the mean difference
  with its Welch standard error, flagged when it is more than 3 standard errors and more
  than 10 return points (1% of the scale).

The dm_control half runs in another interpreter (``--dmc-python``, a virtual environment
with ``pip install dm_control``): dm_control wants a newer mujoco than the one
Playground's MJX was installed with; the two processes exchange an .npz file. The
reacher-easy check in depth (reset distributions, reward grid, dynamics) is
`env_compare.py`.

    python benchmarks/learning/env_suite_compare.py --dmc-python DMC_VENV/bin/python
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_compare_dmc import _load, _save, run_half  # noqa: E402
from env_suite_dmc import (DMC_NAMES, TARGET_TASKS, dmc_half,  # noqa: E402
                           physics_summary)

REPEAT, T = 2, 500
KS_C = 1.949
"""The two-sample KS statistic's 0.1% critical value is KS_C * sqrt((n + m) / (n m))."""
FLAG_SE, FLAG_POINTS = 3.0, 10.0
"""A return difference is flagged when above FLAG_SE Welch standard errors and above
FLAG_POINTS return points."""
OUT = Path(__file__).resolve().parents[1] / "results" / "env_compare_mt19"


def run_dmc_half(req: dict, python: str | None) -> tuple[dict, dict]:
    """dm_control's half in this process (``python`` None), or under ``python`` through
    .npz files (`env_compare_dmc.run_half`)."""
    return run_half(req, python, __file__, dmc_half)


def playground_task(task: str, episodes: int, seed: int, qpos: np.ndarray | None,
                    qvel: np.ndarray | None, n_resets: int = 0,
                    target: np.ndarray | None = None) -> tuple[dict, dict]:
    """Everything measured on Playground's version of one task through wmx's wrapper.

    Args:
        task: an mt19 task.
        episodes: episodes per policy (the random and the zero policy run as one lockstep
            batch of 2 × episodes envs from key ``PRNGKey(seed)``).
        seed: the PRNG seed.
        qpos, qvel: [S, nq], [S, nv] float64 states whose observation to compute (None:
            none).
        n_resets: resets (keys split from ``PRNGKey(seed + 1)``) whose initial qpos and
            qvel are recorded.
        target: [S, 3] world positions of the task's target with each state (its mocap
            body is moved there; None: a task without one).

    Returns:
        (meta: settings, physics; arrays: ``random_returns``, ``zero_returns`` [episodes]
        float64, ``state_obs`` [S, obs dim] float64 when states were given,
        ``reset_qpos`` [n_resets, nq], ``reset_qvel`` [n_resets, nv]).
    """
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    from wmx.envs.collector import collect_episodes, uniform_actions
    from wmx.envs.playground import make_env
    env = make_env(task, action_repeat=REPEAT)
    pg = env.pg_env
    meta = {"settings": {"control_dt": float(pg.dt), "sim_dt": float(pg.sim_dt),
                         "n_substeps": int(pg.n_substeps),
                         "episode_control_steps": int(pg._config.episode_length),
                         "T_agent_steps": int(env.T), "obs_dim": int(env.obs_dim),
                         "action_dim": int(env.action_dim),
                         "action_low": np.round(env.action_low, 6).tolist(),
                         "action_high": np.round(env.action_high, 6).tolist()},
            "physics": physics_summary(pg.mj_model)}

    def policy(obs, is_first, key):
        del is_first
        a = uniform_actions(key, obs.shape[0], env.action_dim)
        return jnp.where((jnp.arange(obs.shape[0]) < episodes)[:, None], a, 0.0)

    _, stats = collect_episodes(env, policy, jax.random.PRNGKey(seed), n_envs=2 * episodes,
                                n_episodes=1)
    r = np.asarray(stats["returns"], np.float64)
    arrays = {"random_returns": r[:episodes], "zero_returns": r[episodes:]}
    if n_resets:
        s = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(seed + 1),
                                                          n_resets))
        arrays["reset_qpos"] = np.asarray(s.inner.data.qpos, np.float64)
        arrays["reset_qvel"] = np.asarray(s.inner.data.qvel, np.float64)
    if (qpos is not None and len(qpos) and qpos.shape[1] == pg.mj_model.nq
            and qvel.shape[1] == pg.mj_model.nv):
        f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731

        @jax.jit
        def observe(qp, qv, x):
            def one(q, v, x):       # the observation wmx's agent sees (its fixes included)
                s = env.reset(jax.random.PRNGKey(seed))
                d = s.inner.data.replace(qpos=f32(q), qvel=f32(v))
                if target is not None:
                    d = d.replace(mocap_pos=d.mocap_pos.at[0].set(f32(x)))
                return env.with_data(s, mjx.forward(pg.mjx_model, d)).obs
            return jax.vmap(one)(qp, qv, x)
        x = np.zeros((len(qpos), 3)) if target is None else target
        arrays["state_obs"] = np.asarray(observe(qpos, qvel, x), np.float64)
    return meta, arrays


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(mean(a) - mean(b), its Welch standard error; 0 for two constant samples)."""
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size) if min(a.size, b.size) > 1 \
        else float("nan")
    return float(a.mean() - b.mean()), se


def returns_row(pg: np.ndarray, dm: np.ndarray) -> dict:
    """One policy's returns on both sides: means, stds, difference, SE, flagged."""
    diff, se = welch(pg, dm)
    return {"playground": {"mean": float(pg.mean()), "std": float(pg.std()), "n": int(pg.size)},
            "dm_control": {"mean": float(dm.mean()), "std": float(dm.std()), "n": int(dm.size)},
            "difference": diff, "se": se,
            "flagged": bool(abs(diff) > FLAG_POINTS and (se == 0 or abs(diff) > FLAG_SE * se))}


def differs(a: dict, b: dict) -> dict:
    """The keys whose values differ: {key: [playground, dm_control]}."""
    return {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def reset_ks(pg: dict, dm: dict) -> dict | None:
    """The initial states' KS statistics per qpos and qvel coordinate, both sides rounded to
    float32 (a constant that dm_control holds as float64 equals Playground's float32 one),
    None when either side has none or their sizes differ: {"qpos": [...], "qvel": [...],
    "critical", "max", "flagged": ["qpos[i]", ...]}."""
    if "reset_qpos" not in pg or "reset_qpos" not in dm or any(
            pg[k].shape[1:] != dm[k].shape[1:] for k in ("reset_qpos", "reset_qvel")):
        return None
    from env_compare_common import ks_two
    out: dict = {}
    for k in ("qpos", "qvel"):          # in float32, Playground's precision: dm_control's
        a, b = (np.asarray(x[f"reset_{k}"], np.float32) for x in (pg, dm))   # 0.1 is its 0.1
        out[k] = [ks_two(a[:, i], b[:, i]) for i in range(a.shape[1])]
    n, m = len(pg["reset_qpos"]), len(dm["reset_qpos"])
    out["critical"] = KS_C * math.sqrt((n + m) / (n * m))
    out["max"] = max(out["qpos"] + out["qvel"])
    out["flagged"] = [f"{k}[{i}]" for k in ("qpos", "qvel") for i, v in enumerate(out[k])
                      if v > out["critical"]]
    return out


def compare_task(task: str, pg_meta: dict, pg: dict, dm_meta: dict, dm: dict) -> dict:
    """A task's comparison: settings, physics, observation, initial states, returns.

    Args:
        task: the mt19 task.
        pg_meta, pg: Playground's half (`playground_task`: meta, arrays).
        dm_meta, dm: dm_control's half for the task (`env_suite_dmc.dmc_task`: meta, arrays
            without the task prefix).

    Returns:
        {"dm_control_task", "settings" and "physics" (both sides, "differs": {key:
        [Playground, dm_control]}), "dm_control_obs_layout", "observation" (states,
        max_abs_diff of the flat f32 observations; or their shapes when they differ; None
        when not computed, "observation_not_compared" says why), "reset" (`reset_ks`),
        "random_policy" and "zero_action" (`returns_row`: means and stds in return
        points, difference, Welch SE, flagged)}.
    """
    obs = None
    if "state_obs" in pg:
        a, b = pg["state_obs"], dm["state_obs"]
        obs = ({"states": int(len(a)), "max_abs_diff": float(np.abs(a - b).max()),
                "max_abs_value": float(np.abs(b).max())} if a.shape == b.shape else
               {"states": int(len(a)), "shapes": [list(a.shape), list(b.shape)]})
    why_no_obs = None if obs is not None else "qpos or qvel sizes differ"
    return {"dm_control_task": dm_meta["suite"],
            "settings": {"playground": pg_meta["settings"], "dm_control": dm_meta["settings"],
                         "differs": differs(pg_meta["settings"], dm_meta["settings"])},
            "physics": {"playground": pg_meta["physics"], "dm_control": dm_meta["physics"],
                        "differs": differs(pg_meta["physics"], dm_meta["physics"])},
            "dm_control_obs_layout": dm_meta["obs_layout"],
            "observation": obs, "observation_not_compared": why_no_obs,
            "reset": reset_ks(pg, dm),
            "random_policy": returns_row(pg["random_returns"], dm["random_returns"]),
            "zero_action": returns_row(pg["zero_returns"], dm["zero_returns"])}


def markdown(res: dict) -> str:
    """The result as a Markdown table, a row per task."""
    rows = ["| task | physics dt (Playground / dm_control) | other physics settings that "
            "differ | observation of the same state: max abs difference | initial state: "
            "largest KS (0.1% critical) | random policy: Playground / dm_control "
            "(difference ± SE) | zero action: Playground / dm_control |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for t, c in res["tasks"].items():
        s = c["settings"]
        dt = f"{s['playground']['sim_dt']:g} / {s['dm_control']['sim_dt']:g}"
        other = ", ".join(k for k in c["physics"]["differs"] if k != "timestep") or "none"
        o = c["observation"]
        obs = ("not compared: " + c["observation_not_compared"] if o is None else
               f"{o['max_abs_diff']:.2g}" if "max_abs_diff" in o else f"shapes {o['shapes']}")

        def ret(r):
            mark = " **differs**" if r["flagged"] else ""
            return (f"{r['playground']['mean']:.1f} / {r['dm_control']['mean']:.1f} "
                    f"({r['difference']:+.1f} ± {r['se']:.1f}){mark}")
        k = c.get("reset")
        ks = ("not compared" if k is None else f"{k['max']:.3f} ({k['critical']:.3f})"
              + (" **differs**: " + ", ".join(k["flagged"]) if k["flagged"] else ""))
        rows.append(f"| {t} | {dt} | {other} | {obs} | {ks} | {ret(c['random_policy'])} | "
                    f"{ret(c['zero_action'])} |")
    return "\n".join(rows)


def plot(res: dict, path: Path) -> None:
    """Per task, the Playground - dm_control return difference with ±2 SE, both policies."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = list(res["tasks"])
    fig, ax = plt.subplots(figsize=(10, 6))
    for off, pol, colour in ((-0.15, "random_policy", "C0"), (0.15, "zero_action", "C1")):
        d = [res["tasks"][t][pol]["difference"] for t in tasks]
        e = [2 * res["tasks"][t][pol]["se"] for t in tasks]
        ax.errorbar(np.arange(len(tasks)) + off, d, yerr=e, fmt="o", color=colour,
                    label=pol.replace("_", " ") + " (±2 SE)")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(tasks)), tasks, rotation=60, ha="right")
    ax.set_ylabel("episode return, Playground − dm_control")
    ax.set_title("mt19 envs: Playground (wmx) against dm_control, return differences")
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def merged(path: Path, res: dict) -> dict:
    """``res`` with the other tasks of an earlier result at ``path`` kept, when that result
    was measured under the same protocol and versions (each task records its own
    ``code_version``); else ``res`` alone. Tasks in mt19 order.

    Args:
        path: the result JSON written before (may be absent).
        res: this run's result.

    Returns:
        The result to write.
    """
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return res
    if old.get("protocol") != res["protocol"] or old.get("versions") != res["versions"]:
        return res
    tasks = {**old.get("tasks", {}), **res["tasks"]}
    return {**res, "code_version": None,
            "tasks": {t: tasks[t] for t in DMC_NAMES if t in tasks}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--dmc-python", default=None, help="interpreter with dm_control installed "
                   "for the dm_control half (default: this one, in-process)")
    p.add_argument("--tasks", nargs="+", default=list(DMC_NAMES), help="mt19 tasks")
    p.add_argument("--episodes", type=int, default=100, help="dm_control episodes per policy")
    p.add_argument("--pg-episodes", type=int, default=64, help="Playground episodes per policy")
    p.add_argument("--states", type=int, default=8, help="states for the observation check")
    p.add_argument("--resets", type=int, default=1000, help="resets per side for the "
                   "initial-state check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(OUT), help="PREFIX of PREFIX.json and PREFIX.png; "
                   "an earlier PREFIX.json of the same protocol and versions keeps its other "
                   "tasks")
    p.add_argument("--dmc-half", nargs=2, metavar=("REQ", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dmc_half:
        req, _ = _load(args.dmc_half[0])
        _save(args.dmc_half[1], *dmc_half(req))
        return {}
    unknown = [t for t in args.tasks if t not in DMC_NAMES]
    if unknown:
        p.error(f"--tasks {' '.join(unknown)}: not mt19 tasks; give some of "
                + ", ".join(DMC_NAMES))
    for name in ("episodes", "pg_episodes", "states", "resets"):
        if getattr(args, name) < 2:
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give 2 or more")
    from env_compare import dmc_unusable
    if why := dmc_unusable(args.dmc_python):
        p.error(f"--dmc-python {args.dmc_python}: {why}; give an interpreter with dm_control "
                "installed (a venv of its own: pip install dm_control)")
    from wmx.version import code_version, env_versions
    t0 = time.perf_counter()
    req = {"tasks": args.tasks, "episodes": args.episodes, "seed": args.seed, "T": T,
           "repeat": REPEAT, "n_states": args.states, "n_resets": args.resets}
    dm_meta, dm = run_dmc_half(req, args.dmc_python)
    t_dm = time.perf_counter() - t0
    res = {"protocol": {"action_repeat": REPEAT, "T_agent_steps": T, "seed": args.seed,
                        "dm_control_episodes": args.episodes,
                        "playground_episodes": args.pg_episodes, "states": args.states,
                        "resets": args.resets,
                        "flag": f"|difference| > {FLAG_SE:g} SE and > {FLAG_POINTS:g}"},
           "versions": {"playground_side": env_versions(),
                        "dm_control_side": dm_meta["versions"]},
           "code_version": code_version(), "tasks": {}}
    for task in args.tasks:
        t = time.perf_counter()
        qp, qv = dm[f"{task}::state_qpos"], dm[f"{task}::state_qvel"]
        dm_t = {k.split("::", 1)[1]: v for k, v in dm.items() if k.startswith(task + "::")}
        pg_meta, pg = playground_task(task, args.pg_episodes, args.seed, qp, qv, args.resets,
                                      dm[f"{task}::state_target"] if task in TARGET_TASKS
                                      else None)
        res["tasks"][task] = {**compare_task(task, pg_meta, pg, dm_meta["tasks"][task], dm_t),
                              "code_version": res["code_version"]}
        r = res["tasks"][task]["random_policy"]
        print(f"{task}: random {r['playground']['mean']:.1f} / {r['dm_control']['mean']:.1f}; "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    res["wall_s"] = {"dm_control": round(t_dm, 1), "total": round(time.perf_counter() - t0, 1)}
    out = Path(args.out)
    res = merged(out.with_suffix(".json"), res)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.json.tmp")
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, out.with_suffix(".json"))
    plot(res, out.with_suffix(".png"))
    print(markdown(res))
    return res


if __name__ == "__main__":
    main()
