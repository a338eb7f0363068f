"""Measure the uniform-random policy's return per task: wmx's committed floor table.

Runs `wmx.evaluate.random_policy.random_policy_return` (actions U[-1, 1]^A every agent
step through wmx's env wrapper, impl="jax", fresh resets, key PRNGKey(seed)) on each
task and writes ``wmx/evaluate/reference/random_returns.json``, which
`wmx.evaluate.random_policy.random_returns` reads (the learned-source rule of
``evaluate`` and of the offline checks). The file is rewritten after every task; tasks
not measured keep their entries, and ``_source.wmx_commits`` says which commit
measured which task, and ``xla_flags`` the ``XLA_FLAGS`` it ran with (the walker tasks'
chaotic random-action episodes change with the compiled program: docs/validation.md
"The floor"). About 0.5-2 CPU-minutes a task, mostly compiling:

    python benchmarks/random_returns.py                            # all 19 mt19 tasks
    python benchmarks/random_returns.py --tasks reacher-easy walker-stand
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from wmx.envs.registry import MT19
    from wmx.evaluate.random_policy import RANDOM_EPISODES, RANDOM_RETURNS_PATH
    from wmx.runs.cli_common import HelpFormatter
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--tasks", nargs="+", default=[t.name for t in MT19], metavar="TASK",
                   help="tasks to measure (default: the 19 mt19 tasks)")
    p.add_argument("--episodes", type=int, default=RANDOM_EPISODES,
                   help="episodes per task (lockstep envs, one episode each)")
    p.add_argument("--seed", type=int, default=0,
                   help="PRNG seed of the resets and actions (default 0)")
    p.add_argument("--out", type=Path, default=None,
                   help="the table to write, its other tasks' entries kept (default: "
                        "wmx/evaluate/reference/random_returns.json)")
    args = p.parse_args(argv)
    args.out = args.out or RANDOM_RETURNS_PATH
    from wmx.envs.registry import TASKS
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown tasks {unknown}; known: {sorted(TASKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from _machine import cpu_info
    from wmx.evaluate.random_policy import random_policy_return
    from wmx.version import code_version, env_versions, device_label
    table = json.loads(args.out.read_text()) if args.out.is_file() else {}
    src = table.get("_source", {})
    if src and (src.get("episodes"), src.get("seed")) != (args.episodes, args.seed):
        raise SystemExit(f"{args.out} holds {src.get('episodes')} episodes, seed "
                         f"{src.get('seed')}; give --out another file for "
                         f"{args.episodes} episodes, seed {args.seed}")
    commit = code_version()
    for task in args.tasks:
        t0, c0 = time.perf_counter(), time.process_time()
        r = random_policy_return(task, episodes=args.episodes, seed=args.seed)
        table[task] = {"mean": round(r["mean"], 4), "std": round(r["std"], 4),
                       "episodes": r["episodes"]}
        commits = {c: [t for t in ts if t != task]
                   for c, ts in src.get("wmx_commits", {}).items()}
        commits.setdefault(commit, []).append(task)
        src = {"command": "python benchmarks/random_returns.py "
                          f"--episodes {args.episodes} --seed {args.seed}  # every mt19 task",
               "episodes": args.episodes, "seed": args.seed,
               "env": "wmx.envs.playground.cached_env(task) (MuJoCo Playground, impl=jax; "
                      "the task's T and action repeat)",
               "policy": "wmx.envs.collector.uniform_policy: U[-1, 1]^A every agent step",
               "versions": env_versions(),
               "device": device_label(),
               "cpu": {k: v for k, v in cpu_info().items() if k in ("model", "simd")},
               "xla_flags": os.environ.get("XLA_FLAGS", ""),
               "wmx_commits": {c: ts for c, ts in commits.items() if ts}}
        out = {"_source": src,
               "_units": "undiscounted episode return, the env's reward units (env steps = "
                         "agent steps x action repeat)",
               "_notes": "Uniform-random policy return per task: mean and population std "
                         "over the episodes, from fresh resets. Read by "
                         "wmx.evaluate.random_policy.random_returns; a source learned a task "
                         "when its final return >= mean + LEARNED_MARGIN.",
               **{k: v for k, v in sorted(table.items()) if not k.startswith("_")}}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"{task}: {r['mean']:.2f} ± {r['std']:.2f} over {r['episodes']} episodes "
              f"({time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
