"""The offline check's evaluations of its run: the periodic eval curves and their standard
errors (from the run's metrics.csv) and the final evaluation of its last checkpoint.

`eval_curves` and `eval_stderr` read metrics.csv; `final_evaluation` (``--final-episodes``
episodes per task and seed, the run's ``report/``) and `judged_final` give the final return
that `offline_report.task_result` records.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from check_run import last_logged, read_json

FINAL_EPISODES = 50
"""--final-episodes default: episodes per task and seed of the final evaluation that the
verdict judges (one 10-episode evaluation of a task whose episodes score either ~0 or
~900, as reacher-easy's, has a standard error of ~130)."""


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of an offline run's metrics.csv ([] without one)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def eval_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The per-task evaluation rows (one per task, seed and evaluation point; the
    ``mean`` rows over tasks left out)."""
    return [r for r in rows if r.get("kind") == "eval" and r.get("task") not in ("mean", "")]


def last_updates(run_dir: Path) -> int:
    """The largest update count in an offline run's metrics.csv (0 without one; a row a
    killed process left incomplete is left out, `check_run.last_logged`)."""
    return last_logged(run_dir, "updates")


def eval_curves(run_dir: Path) -> dict[str, dict[int, list[float]]]:
    """{task: {updates: [eval return per seed]}} from an offline run's metrics.csv."""
    out: dict[str, dict[int, list[float]]] = {}
    for r in eval_rows(metrics_rows(run_dir)):
        out.setdefault(r["task"], {}).setdefault(int(r["updates"]), []).append(
            float(r["return"]))
    return {t: dict(sorted(c.items())) for t, c in out.items()}


def combined_stderr(terms: list[float]) -> float:
    """The standard error of a mean over k seeds' means from each seed's squared standard
    error (variance / episodes): sqrt(sum(terms)) / k (the seeds' policies fixed)."""
    return math.sqrt(sum(terms)) / len(terms)


def eval_stderr(run_dir: Path) -> dict[str, dict[int, float]]:
    """{task: {updates: standard error of the seed-mean eval return}} from an offline
    run's metrics.csv: sqrt(sum_i std_i^2 / n_i) / k over its k seeds, std_i and n_i a
    seed's episode std (``return_std``) and episode count; tasks or points without those
    columns are left out."""
    acc: dict[str, dict[int, list[float]]] = {}
    for r in eval_rows(metrics_rows(run_dir)):
        if r.get("return_std") and r.get("episodes"):
            acc.setdefault(r["task"], {}).setdefault(int(r["updates"]), []).append(
                float(r["return_std"]) ** 2 / int(r["episodes"]))
    return {t: {u: combined_stderr(v) for u, v in sorted(c.items())}
            for t, c in acc.items()}


def with_stderr(res: dict, run_dir: Path) -> dict:
    """``res`` with each task's ``offline_eval_stderr`` ({updates: standard error},
    `eval_stderr`, from ``run_dir``'s metrics.csv) and ``offline_final_stderr`` (the final
    evaluation's, else the last periodic point's; None when not recorded)."""
    se = eval_stderr(Path(run_dir))
    for name, t in res["tasks"].items():
        mine = se.get(name, {})
        t["offline_eval_stderr"] = {str(u): v for u, v in mine.items()}
        curve = t.get("offline_eval_return") or {}
        last = max(curve, key=int) if curve else None
        final = t.get("offline_final_evaluation")
        t["offline_final_stderr"] = (final["stderr"] if final else
                                     mine.get(int(last)) if last is not None else None)
    return res


def judged_final(run_dir: Path, home: Path, bench: dict, summary: dict, planned: int
                 ) -> tuple[dict[str, dict] | None, dict]:
    """`final_evaluation` at update ``planned`` (the run's last) of a finished check run
    with its recorded ``final_episodes`` (benchmark.json; FINAL_EPISODES for a run from
    before it was recorded), its note printed; finals None for a run that has not
    finished. A run counts as finished when ``summary`` says so or reached ``planned``
    updates (a run brought back without its summary.json).

    Returns:
        (the per-task finals or None, the result entries ``final_episodes`` and
        ``final_evaluation_note``).
    """
    episodes = int(bench.get("final_episodes", FINAL_EPISODES))
    if summary.get("finished") or (summary.get("updates") or 0) >= planned:
        finals, note = final_evaluation(run_dir, home, episodes, planned)
    else:
        finals, note = None, "the run has not finished: its last periodic evaluation is judged"
    print(f"final return: {note}")
    return finals, {"final_episodes": episodes, "final_evaluation_note": note}


def reusable_report(run_dir: Path, episodes: int, updates: int | None
                    ) -> tuple[dict | None, str]:
    """(report.json, "") of the run's ``report/`` when it is the evaluation asked for:
    this run's (name, agent, seeds), every task it trained, ``episodes`` fresh episodes
    per task and seed, of the checkpoint at ``updates`` (None: any); else (None, why
    not), a missing, damaged or foreign report included."""
    from wmx.evaluate.compare import report_mismatch
    from wmx.evaluate.report import load_report
    from wmx.runs.offline_config import OfflineRunConfig
    out = Path(run_dir) / "report"
    if not (out / "report.json").is_file():
        return None, "no report/"
    try:
        rep = load_report(out)
        rc = OfflineRunConfig.from_json(read_json(Path(run_dir) / "config.json", "report/"))
        why = list(report_mismatch(rep, episodes=episodes, keys="fresh",
                                   checkpoint_step=updates).values())
        run = rep["run"]
        if run["name"] != Path(run_dir).name or run["agent"] != rc.agent:
            why.append(f"the report of {run['agent']} run {run['name']}")
        if [int(x) for x in run["seeds"]] != list(rc.seeds):
            why.append(f"seeds {run['seeds']}, not the run's {list(rc.seeds)}")
        tasks = set(rc.train_task_set.names)
        if set(rep["returns"]) != tasks:
            why.append(f"tasks {sorted(rep['returns'])}, not the run's {sorted(tasks)}")
    except (OSError, ValueError, KeyError, TypeError, SystemExit) as e:
        return None, f"report/report.json unreadable ({e})"
    return (None, "; ".join(why)) if why else (rep, "")


def final_evaluation(run_dir: Path, home: Path, episodes: int, updates: int
                     ) -> tuple[dict[str, dict] | None, str]:
    """The final evaluation the verdict judges: ``episodes`` fresh episodes per task and
    seed of the run's checkpoint at ``updates`` (its last), the run's ``report/``
    (`wmx.evaluate.cli.evaluate_to_report`, ``evaluate --run``). A report/ that already is
    that evaluation (`reusable_report`) is used as it is (e.g. one written where the run
    trained, brought back without checkpoints); otherwise the checkpoint is evaluated here,
    replacing report/ (atomically), unless it is absent or a live process trains the run.

    Returns:
        ({task: {"return": mean over seeds and episodes, "stderr": its standard error as
        evaluation noise, the seeds' policies fixed (each seed's sample std / sqrt(episodes),
        combined as `eval_stderr`; None with a single episode; the spread between training
        seeds is not counted), "episodes", "seeds", "report": report.json's path}} or None,
        a note saying where it came from or why there is none).
    """
    from wmx.checkpoint import list_checkpoints
    from wmx.evaluate.report import load_report
    from wmx.runs.owner import probe
    if episodes <= 0:
        return None, "--final-episodes 0: the last periodic evaluation is judged"
    out = Path(run_dir) / "report"
    rep, why = reusable_report(run_dir, episodes, updates)
    note = f"reused {out / 'report.json'}"
    if rep is None:
        if not any(int(c.name) == updates for c in list_checkpoints(run_dir)):
            return None, (f"no checkpoint at update {updates:,d} to evaluate (report/: {why}):"
                          " the last periodic evaluation is judged")
        owner = probe(run_dir)
        if owner is not None:
            return None, (f"{owner.describe()} trains {run_dir} now: not evaluated, the last "
                          "periodic evaluation is judged")
        from wmx.evaluate.cli import evaluate_to_report
        print(f"final evaluation: {episodes} episodes per task and seed of update "
              f"{updates:,d} (evaluate --run {run_dir} --episodes {episodes})")
        evaluate_to_report(run_dir, episodes=episodes, out=out, home=home, force=True)
        rep = load_report(out)
        note = f"evaluated into {out / 'report.json'}"
    res = {}
    for task, by_seed in rep["returns"].items():
        seeds = [np.asarray(v, dtype=float) for v in by_seed.values()]
        se = (None if min(len(x) for x in seeds) < 2 else
              combined_stderr([x.var(ddof=1) / len(x) for x in seeds]))
        res[task] = {"return": float(np.mean([x.mean() for x in seeds])), "stderr": se,
                     "episodes": episodes, "seeds": len(seeds),
                     "report": str(out / "report.json")}
    return res, note


