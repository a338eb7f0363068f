"""Measure each mt19 task's physics cost: wmx's env step alone, lanes vmapped, on this machine.

The mt19 campaign's plan (`_mt19_plan`) prices a task from its domain's recorded speed on
the device. A domain not trained yet has no such speed; its physics cost, measured here
on any machine, places it against the domains that have one (`_mt19_plan.prior_sps`).
Per task: `wmx.envs.playground.make_env`'s env (impl "jax", the task's action repeat),
``--lanes`` envs vmapped (the campaign's 2 seeds), a jitted ``lax.scan`` of ``--steps``
agent steps of uniform-random actions in [-1, 1]; the median over ``--rounds`` calls after
the compiling one, in ms per agent step of all lanes together. Also recorded: the MJX
steps per agent step (Playground's substeps x the action repeat), the compile time and
the lanes and steps, and the machine (backend, CPU model, load average, jax, wmx
commit). About 15 s a task on 2 cores, mostly compiling:

    python benchmarks/mt19_physics.py                       # all 19 tasks
    python benchmarks/mt19_physics.py --tasks fish-swim hopper-hop

Writes ``--out`` (default ``benchmarks/results/mt19_physics_cpu.json``) after every task;
tasks not measured keep their entries. Random actions are not a learned policy's: a
policy that makes more contacts (a hopper that hops) steps slower, so the plan keeps a
margin (`_mt19_plan.PRIOR_MARGIN`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

SCHEMA = "wmx.mt19_physics/1"
FILE = "mt19_physics_cpu.json"
"""The results folder's file the campaign's plan reads (`_mt19_plan.load_physics`)."""
DEFAULT_OUT = REPO / "benchmarks" / "results" / FILE


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from wmx.envs.registry import MT19
    from wmx.runs.cli_common import ArgumentParser, HelpFormatter
    p = ArgumentParser(prog="mt19_physics.py", description=__doc__.split("\n\n")[0],
                       formatter_class=HelpFormatter)
    p.add_argument("--tasks", nargs="+", default=[t.name for t in MT19],
                   choices=[t.name for t in MT19], metavar="TASK",
                   help="mt19 tasks to measure (default: all 19)")
    p.add_argument("--lanes", type=int, default=2,
                   help="envs vmapped, as the campaign's seeds are")
    p.add_argument("--steps", type=int, default=50, help="agent steps per timed call")
    p.add_argument("--rounds", type=int, default=7, help="timed calls after the compiling one")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="the JSON the tasks are merged into (default: the committed file "
                        "that mt19_campaign.py plan prices from)")
    args = p.parse_args(argv)
    for flag in ("lanes", "steps", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} {getattr(args, flag)}: give 1 or more")
    return args


def measure(task: str, lanes: int, steps: int, rounds: int) -> dict:
    """One task's physics cost (the module docstring's protocol).

    Returns:
        {"ms_per_agent_step": median ms per agent step of all lanes, "rounds_ms": each
        timed call's, "mjx_steps_per_agent_step": int, "compile_s": the first call's s}.
    """
    import jax
    import numpy as np
    from wmx.envs.playground import make_env
    env = make_env(task)
    reset = jax.jit(jax.vmap(env.reset))
    step = jax.vmap(env.step)

    @jax.jit
    def roll(state, key):
        def body(s, k):
            a = jax.random.uniform(k, (lanes, env.action_dim), minval=-1.0, maxval=1.0)
            return step(s, a), None
        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    state = reset(jax.random.split(jax.random.PRNGKey(0), lanes))
    t0 = time.perf_counter()
    state = jax.block_until_ready(roll(state, jax.random.PRNGKey(1)))
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        state = jax.block_until_ready(roll(state, jax.random.PRNGKey(2 + i)))
        times.append(1000.0 * (time.perf_counter() - t0) / steps)
    if not np.isfinite(np.asarray(jax.tree.leaves(state)[0], dtype=float)).all():
        raise RuntimeError(f"{task}: the physics state is not finite after random actions")
    return {"ms_per_agent_step": round(statistics.median(times), 4),
            "rounds_ms": [round(t, 4) for t in times],
            "mjx_steps_per_agent_step": int(env.pg_env.n_substeps * env.action_repeat),
            "compile_s": round(compile_s, 1)}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import jax
    from _machine import cpu_info
    from wmx.runs.host import write_json_atomic
    from wmx.version import code_version

    def refuse(why: str) -> int:
        print(f"mt19_physics: error: {args.out}: {why}; give another --out", file=sys.stderr)
        return 2
    if not args.out.parent.is_dir():
        return refuse(f"no folder {args.out.parent}")
    try:
        data = json.loads(args.out.read_text()) if args.out.exists() else {}
    except (OSError, ValueError) as e:
        return refuse(f"unreadable ({e})")
    if not isinstance(data, dict) or (data and (data.get("schema") != SCHEMA or not isinstance(
            data.get("tasks"), dict))):
        return refuse(f"not a {SCHEMA} file (an object with its tasks)")
    data["schema"] = SCHEMA
    data.setdefault("tasks", {})
    machine = {"backend": jax.default_backend(), "cpu": cpu_info().get("model", "?"),
               "jax": jax.__version__}
    for task in args.tasks:
        entry = measure(task, args.lanes, args.steps, args.rounds)
        entry.update(lanes=args.lanes, steps=args.steps, **machine, wmx=code_version(),
                     load_avg_1min=round(os.getloadavg()[0], 2))
        data["tasks"][task] = entry
        write_json_atomic(args.out, data)
        print(f"{task:24s} {entry['ms_per_agent_step']:8.3f} ms per agent step "
              f"({entry['mjx_steps_per_agent_step']} MJX steps), compiled in "
              f"{entry['compile_s']:.0f} s", flush=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
