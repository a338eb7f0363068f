"""Learning check: does offline multi-task TD-MPC2 learn from the online agents' data?

Pools the full training histories (every exported episode set) of finished
single-task ``train_online`` runs into one dataset (the Beam build,
``pipelines/build_mt19.py --tasks ... --sources ...``), trains multi-task
TD-MPC2 on it with ``train_offline``'s loop, evaluates every task on its
real Playground env, and compares with each source agent's final return
(`offline_check` holds what this shares with ``dreamerv3_offline.py``).
Writes ``benchmarks/results/tdmpc2_offline.json`` and ``.png``;
``docs/validation.md`` records the results.

Acceptance (multi-task issue): on a dataset pooled from the full training
histories of single-task runs on at least 3 tasks, the offline model's
final evaluation return reaches at least half of the source agent's final
return on at least 2 of 3 tasks. The offline final return is that of the
final evaluation (``--final-episodes`` episodes per task and seed of the
finished run's last checkpoint, its ``report/``). A source agent's final return is the mean
over its seeds of the last eval row of each seed in its metrics.csv. A source
``RUN_DIR@N`` is the run as it stood at N env steps: the episodes collected by then,
its eval row at N (`offline_sources`).

    python benchmarks/learning/tdmpc2_offline.py --home H \\
        --sources H/runs/<cartpole run> H/runs/<pendulum run> H/runs/<reacher run> \\
        --updates 20000 --batch-size 256 --preset cpu --eval-every 5000 --budget-min 60
    python benchmarks/learning/tdmpc2_offline.py --resume H/runs/offline-check-<time>
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_run import parse  # noqa: E402
from offline_check import (RATIO, eval_curves, judged_final, model_text,  # noqa: E402
                           parser, prepared_only, reaches_ratio, run_config, run_fields,
                           start_or_resume, task_result, train, with_stderr, write_results)

RESULT_NAME = "tdmpc2_offline"


def judge(tasks: dict[str, dict], curves: dict[str, dict[int, list[float]]],
          min_pass: int = 2, finals: dict[str, dict] | None = None) -> dict:
    """Per task: source final return, offline eval curve (mean over seeds), final (the
    task's entry of ``finals``, the `final_evaluation`, when given; else the last periodic
    evaluation) and best offline return, ratio final / source, pass (final >= RATIO x
    source; None, not counted, when the source return is <= 0: an agent that earned
    nothing sets no bar); overall pass: at least ``min_pass`` tasks pass and at least 3
    were checked."""
    per = {}
    for name, t in tasks.items():
        r = task_result(t, curves.get(name, {}), (finals or {}).get(name))
        per[name] = {**r, "pass": None if t["final_return"] <= 0 else reaches_ratio(r)}
    n_pass = sum(p["pass"] is True for p in per.values())
    return {"tasks": per, "tasks_passing": n_pass, "tasks_checked": len(per),
            "min_tasks_passing": min_pass,
            "passed": bool(len(per) >= 3 and n_pass >= min_pass)}


def main(argv=None) -> int:
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)       # from a command line: as the trainers' own
    p = parser(__doc__, batch_size=256, log_every=1_000,
               batch_help="slices per update (the paper's offline batch is 1024, spec 4.19; "
                          "256 keeps a CPU run short)")
    p.add_argument("--min-pass", type=int, default=2, help="tasks that must pass")
    args = parse(p, argv)

    out = Path(args.out)
    run_dir, home, bench, tasks = start_or_resume(p, args, "tdmpc2", "offline-check",
                                                  {"min_pass": args.min_pass,
                                                   "final_episodes": args.final_episodes})
    if prepared_only(args, run_dir, bench):
        return 0
    rc = run_config(run_dir, args)
    print(f"offline run {run_dir}: {rc.updates:,d} updates x batch {rc.batch}, "
          f"{model_text(rc)}, tasks {list(rc.task_set.names)}, seeds {list(rc.seeds)}")
    summary, wall = train(rc, run_dir, home, args.budget_min, args.report_only)
    min_pass = bench.get("min_pass", 2)
    finals, final_fields = judged_final(run_dir, home, bench, summary, rc.updates)
    res = judge(tasks, eval_curves(run_dir), min_pass, finals)
    with_stderr(res, run_dir)
    res.update({**run_fields(rc, run_dir, summary, wall), "batch_size": rc.batch,
                **final_fields,
                "criterion": f"offline final eval return >= {RATIO:g} x source final return "
                             f"on >= {min_pass} tasks (of >= 3)"})
    write_results(res, out, RESULT_NAME, label="offline TD-MPC2",
                  no_verdict="source earned nothing",
                  title=f"offline multi-task TD-MPC2 vs source agents: "
                        f"{res['tasks_passing']}/{res['tasks_checked']} tasks at >= {RATIO:g}x",
                  columns={"source": "source_final_return", "offline": "offline_final_return",
                           "offline_se": "offline_final_stderr",
                           "last_periodic": "offline_last_eval_return", "ratio": "ratio",
                           "pass": "pass"},
                  tally=f"{res['tasks_passing']}/{res['tasks_checked']} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
