"""Learning check: does DreamerV3 learn from a fixed dataset, beside TD-MPC2 on the same data?

Pools the full training histories (every exported episode set) of finished
single-task ``train_online`` runs (the TD-MPC2 offline check's sources, or
DreamerV3 online runs) into one dataset with the Beam build, exactly as
``tdmpc2_offline.py`` does (both use `offline_check`; the same sources give
the same dataset hash), trains multi-task DreamerV3 on it with
``train_offline``'s loop (deviations W-D5, W-D8), evaluates every task on its
real Playground env, and compares with each source agent's final return.
With ``--tdmpc2-run`` (the TD-MPC2 offline check's run on the same dataset)
its curves go beside DreamerV3's in the JSON and the plot, and ``evaluate
--runs`` writes the side-by-side report.
Writes ``benchmarks/results/dreamerv3_offline.json`` and ``.png``;
``docs/validation.md`` records the results.

Acceptance (issue 14): for every task whose source agent learned it, the
offline DreamerV3 model's final evaluation return reaches at least half of
the source's final return. The final evaluation is ``--final-episodes`` (default
50) fresh episodes per task and seed of the finished run's last checkpoint (its
``report/``): with sampled actions reacher-easy's episodes score either ~0 or
~900, so one 10-episode periodic evaluation is too noisy to judge. A source learned its task when its final return
is at least ``--learned-margin`` (default 100: a normalised score of 10)
above the task's uniform-random policy return (`wmx.evaluate.random_policy`: the
committed table's, or measured by the check at another T; cartpole-balance pays ~330 for random
actions, so a fixed bar would count a source at random level as learned). A
source agent's final return is the mean over its seeds of the last eval row of
each seed in its metrics.csv. A source ``RUN_DIR@N`` is the run as it stood at N env
steps: the episodes collected by then, its eval row at N (`offline_sources`).

    python benchmarks/learning/dreamerv3_offline.py --home H \\
        --sources H/runs/<cartpole run> H/runs/<pendulum run> H/runs/<reacher run> \\
        --updates 20000 --preset cpu --eval-every 5000 --budget-min 60 \\
        --tdmpc2-run H/runs/offline-check-<time>
    python benchmarks/learning/dreamerv3_offline.py --resume H/runs/dv3-offline-check-<time>

To train on another machine (a GPU): ``--prepare-only`` pools the dataset and
writes the run directory here (Beam runs here); copy the home folder (or, with
``--pack DIR``, the folder holding only what training needs), train there with ``--resume``, and bring the run directory back for ``--resume RUN
--report-only [--tdmpc2-run ...]``, which writes the result from its metrics.csv.

``--set KEY=VALUE`` gives the model other settings, recorded in the result's
``agent_overrides`` beside the verdict (``passed``): among them the offline terms
against model exploitation, off by default (wmx extensions; deviations W-D10,
W-D11): ``--set offline_bc_weight=0.3`` (behaviour cloning of the dataset's actions
at the imagination starts), ``--set offline_ensemble=5 --set
offline_penalty_weight=1`` (imagined rewards lowered by a reward ensemble's
disagreement).

Nothing here runs in the test suite (a check takes hours of CPU).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_run import parse  # noqa: E402
from offline_check import (RATIO, eval_curves, final_evaluation,  # noqa: E402
                           home_relative, judged_final, model_text, parser, prepared_only,
                           reaches_ratio, reusable_report, run_config, run_fields,
                           start_or_resume, task_result, train, with_stderr, write_results)

from wmx.evaluate.random_policy import LEARNED_MARGIN, random_return  # noqa: E402

RESULT_NAME = "dreamerv3_offline"


def accelerator_note(run_dir: Path, backend: str | None = None) -> str | None:
    """A note for a run prepared on a CPU (``backend``, default JAX's) whose config left
    fields "auto" that an accelerator resolves otherwise
    (`wmx.agents.dreamerv3.config.backend_choices`): the run keeps the CPU's values
    wherever it trains (`wmx.runs.pins`), so a run packed for an accelerator is prepared
    with the accelerator's, given by ``--set``. None when there is nothing to say."""
    import jax

    from wmx.agents.dreamerv3.config import backend_choices
    if (backend or jax.default_backend()) != "cpu":
        return None
    cfg = json.loads((run_dir / "config.json").read_text())
    over = cfg.get("agent_overrides") or {}
    here = backend_choices(cfg["preset"], over, "cpu")
    there = {k: v for k, v in backend_choices(cfg["preset"], over, "tpu").items()
             if here.get(k) != v}
    if not there:
        return None
    fixed = ", ".join(f"{k}={here[k]}" for k in there)
    sets = " ".join(f"--set {k}={v}" for k, v in there.items())
    return (f"note: this CPU fixed {fixed} for the run, and the run keeps that wherever it "
            f"trains; to train it on an accelerator as a run made there would, prepare it "
            f"with {sets}")


def judge(tasks: dict[str, dict], curves: dict[str, dict[int, list[float]]],
          learned_margin: float = LEARNED_MARGIN, finals: dict[str, dict] | None = None
          ) -> dict:
    """Per task: source final return, the random policy's return (``t["random"]``, the
    check's measurement, else the committed table's, `random_policy.random_return`),
    whether the source learned it (final >= random + learned_margin),
    the offline eval curve (mean over seeds), final (the task's entry of ``finals``, the
    `final_evaluation`, when given; else the last periodic evaluation) and best offline
    return, ratio final / source, pass (final >= RATIO x source; None, not counted, for a
    task the source did not learn). Overall pass: every learned task passes, and at
    least one was learned. Raises SystemExit (one line) for a task with no random
    return either way."""
    per = {}
    for name, t in tasks.items():
        r = task_result(t, curves.get(name, {}), (finals or {}).get(name))
        if r["random_policy_return"] is None:
            r["random_policy_return"] = random_return(name)
        if r["random_policy_return"] is None:
            raise SystemExit(f"{name}: no uniform-random return, so whether its source "
                             "learned it is unknown; measure it with `python "
                             f"benchmarks/random_returns.py --tasks {name}` and commit "
                             "wmx/evaluate/reference/random_returns.json")
        floor = r["random_policy_return"] + learned_margin
        learned = t["final_return"] >= floor
        per[name] = {**r, "learned_floor": floor, "source_learned": learned,
                     "pass": reaches_ratio(r) if learned else None}
    learned = [p for p in per.values() if p["source_learned"]]
    return {"tasks": per, "tasks_learned_by_source": len(learned),
            "tasks_passing": sum(p["pass"] is True for p in learned),
            "learned_margin": learned_margin,
            "passed": bool(learned) and all(p["pass"] for p in learned)}


def tdmpc2_run_config(run_dir: Path) -> dict:
    """The config.json of ``run_dir`` once checked to be a TD-MPC2 offline run (its
    dataset not compared: `tdmpc2_beside`). Raises SystemExit (one line): no config.json,
    not an offline run (no dataset) or another agent's."""
    if not (Path(run_dir) / "config.json").is_file():
        raise SystemExit(f"--tdmpc2-run {run_dir}: no such offline run (no config.json)")
    cfg = json.loads((Path(run_dir) / "config.json").read_text())
    if "dataset" not in cfg or cfg.get("agent", "tdmpc2") != "tdmpc2":
        raise SystemExit(f"--tdmpc2-run {run_dir} is agent {cfg.get('agent')} on "
                         f"{cfg.get('dataset')}; give the TD-MPC2 offline check's run "
                         "(tdmpc2_offline.py)")
    return cfg


def tdmpc2_beside(run_dir: Path | None, dataset: str) -> dict | None:
    """The TD-MPC2 offline run's per-task eval curves (mean over seeds) when it trained on
    ``dataset``; None without a run. Raises SystemExit when it trained on another dataset
    (the comparison needs identical data), or `tdmpc2_run_config`'s refusals."""
    if run_dir is None:
        return None
    cfg = tdmpc2_run_config(run_dir)
    if cfg.get("dataset") != dataset:
        raise SystemExit(f"--tdmpc2-run {run_dir} is agent {cfg.get('agent')} on "
                         f"{cfg.get('dataset')}; the check needs TD-MPC2 on {dataset}")
    return {"run_dir": str(run_dir),
            "eval_return": {t: {str(u): float(np.mean(v)) for u, v in c.items()}
                            for t, c in eval_curves(Path(run_dir)).items()}}


def compare_report(home: Path, runs: list[str], out: Path, episodes: int) -> str | None:
    """``evaluate --runs TDMPC2_RUN DREAMERV3_RUN --out OUT`` at ``episodes`` per task and
    seed. Each run's report/ is first made that evaluation of its newest checkpoint
    (`final_evaluation`: reused when it is, else evaluated); a run without checkpoints (the
    TD-MPC2 run of a packed home) must have one already. Returns the report path, or None
    (with the reason printed) when a run's report/ cannot be that evaluation or evaluate
    failed."""
    from wmx.checkpoint import list_checkpoints
    from wmx.evaluate import cli as evaluate_cli
    for r in map(Path, runs):
        ckpts = list_checkpoints(r)
        got, why = (final_evaluation(r, home, episodes, int(ckpts[-1].name)) if ckpts else
                    reusable_report(r, episodes, None))
        if got is None:
            print(f"no comparison report: {r} has no {episodes}-episode evaluation of its "
                  f"newest checkpoint ({why})")
            return None
    argv = ["--runs", *runs, "--episodes", str(episodes), "--out", str(out), "--home",
            str(home), "--force"]
    print("$ evaluate " + " ".join(argv))
    return str(out / "compare.md") if evaluate_cli.main(argv) == 0 else None


def main(argv=None) -> int:
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)       # from a command line: as the trainers' own
    p = parser(__doc__, batch_size=None, log_every=500,
               batch_help="windows per update (default: the preset's; paper and cpu: 16 "
                          "windows of 65 rows, tiny: 9 of 7)")
    p.add_argument("--tdmpc2-run", default=None, metavar="RUN_DIR",
                   help="the TD-MPC2 offline run on the same dataset, shown beside (with "
                        "--resume: replaces the recorded one; 'none' clears it)")
    p.add_argument("--learned-margin", type=float, default=LEARNED_MARGIN,
                   help="source final return above the task's uniform-random policy "
                        "return from which the task counts as learned")
    args = parse(p, argv)

    out = Path(args.out)
    if args.tdmpc2_run and args.tdmpc2_run.lower() != "none" and not args.resume:
        tdmpc2_run_config(Path(args.tdmpc2_run).expanduser().resolve())   # before any write

    def tdmpc2_entry(home: Path, dataset: str) -> dict:
        """benchmark.json's "tdmpc2_run" (home-relative), checked to be TD-MPC2 on the
        dataset before it is recorded; {} on a resume that does not name one."""
        given = args.tdmpc2_run
        if given is None:
            return {} if args.resume else {"tdmpc2_run": None}
        if given.lower() == "none":
            return {"tdmpc2_run": None}
        rel = home_relative(home, given)
        tdmpc2_beside(home / rel, dataset)          # SystemExit: missing, another dataset
        return {"tdmpc2_run": rel}

    run_dir, home, bench, tasks = start_or_resume(
        p, args, "dreamerv3", "dv3-offline-check",
        {"learned_margin": args.learned_margin, "final_episodes": args.final_episodes},
        check=tdmpc2_entry)
    if prepared_only(args, run_dir, bench):
        note = accelerator_note(run_dir)
        if note:
            print(note)
        return 0
    rc = run_config(run_dir, args)
    beside = tdmpc2_beside(bench.get("tdmpc2_run") and home / bench["tdmpc2_run"],
                           rc.dataset)
    print(f"offline run {run_dir}: {rc.updates:,d} updates x batch {rc.batch} windows, "
          f"{model_text(rc)}, tasks {list(rc.task_set.names)}, seeds {list(rc.seeds)}")
    summary, wall = train(rc, run_dir, home, args.budget_min, args.report_only)
    finals, final_fields = judged_final(run_dir, home, bench, summary, rc.updates)
    res = judge(tasks, eval_curves(run_dir), bench.get("learned_margin", LEARNED_MARGIN),
                finals)
    report = None
    if beside is not None and summary["finished"] and not args.report_only:
        episodes = final_fields["final_episodes"] or rc.eval_episodes
        report = compare_report(home, [beside["run_dir"], str(run_dir)],
                                out / f"{RESULT_NAME}_report", episodes)
    with_stderr(res, run_dir)
    res.update({**run_fields(rc, run_dir, summary, wall), "batch_size": rc.batch,
                "tdmpc2": beside, "comparison_report": report,
                **final_fields,
                "criterion": f"on every task the source learned (final return >= the "
                             f"random policy's + {res['learned_margin']:g}), offline final "
                             f"eval return >= {RATIO:g} x source final return"})
    write_results(res, out, RESULT_NAME, label="offline DreamerV3",
                  no_verdict="not learned by the source",
                  title=f"offline DreamerV3 vs source agents: {res['tasks_passing']}/"
                        f"{res['tasks_learned_by_source']} learned tasks at >= {RATIO:g}x",
                  columns={"source": "source_final_return",
                           "random": "random_policy_return", "learned": "source_learned",
                           "offline": "offline_final_return",
                           "offline_se": "offline_final_stderr",
                           "last_periodic": "offline_last_eval_return", "ratio": "ratio",
                           "pass": "pass"},
                  tally=f"{res['tasks_passing']}/{res['tasks_learned_by_source']} learned tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
