"""Comparison of several runs from their reports: per-task scores side by side, aggregates.

Input: the report dicts (`report.load_report`) of the runs, in the order
given. Output directory (written atomically, like a report): compare.md,
compare.json, per_task.csv (one row per task, one score column per run),
aggregates.csv (one row per run, task set and statistic: "common", the tasks
every run scored, when some run lacks one; "own", each run's tasks) and
scores.png (grouped bars).

A comparison is per task: every run must share a task with another run
(`check_shared_tasks`), a task a run did not evaluate shows as "not
evaluated", and a run's report is reused only when it is the evaluation
asked for (`report_mismatch`: episodes, rollout keys, newest checkpoint).
"""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from wmx.evaluate import aggregates as agg
from wmx.evaluate import plots
from wmx.evaluate.report import write_dir_atomically

__all__ = ["label_names", "run_labels", "check_shared_tasks", "report_mismatch",
           "build_comparison", "write_comparison"]

NOT_EVALUATED = "not evaluated"
"""compare.md's cell for a task a run's report does not cover."""


def label_names(names: Sequence[str]) -> list[str]:
    """One label per run directory name: the name, suffixed "#2", "#3", ... on repeats."""
    labels, seen = [], {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def run_labels(reports: Sequence[dict]) -> list[str]:
    """`label_names` of the reports' run names."""
    return label_names([r["run"]["name"] for r in reports])


def check_shared_tasks(tasks: Mapping[str, Sequence[str]]) -> None:
    """Refuse a comparison in which a run shares no task with any other run.

    Args:
      tasks: run label -> the tasks its evaluation covers, in the runs' order.
        With fewer than two runs there is nothing to check.
    Raises:
      ValueError: one line naming the runs that share no task, every run's
        tasks, and the fix.
    """
    if len(tasks) < 2:
        return
    alone = [lab for lab, mine in tasks.items()
             if not any(set(mine) & set(other) for o, other in tasks.items() if o != lab)]
    if not alone:
        return
    what = ("the runs have no task in common" if len(alone) == len(tasks) else
            f"{', '.join(alone)} share{'s' if len(alone) == 1 else ''} no task with the "
            "other runs")
    covers = "; ".join(f"{lab}: {', '.join(ts) or 'none'}" for lab, ts in tasks.items())
    raise ValueError(f"--runs: {what} ({covers}), so there is nothing to compare per task; "
                     "compare runs evaluated on a common task (a report made with --tasks "
                     "covers only those: redo it with `evaluate --run RUN_DIR --force`)")


def report_mismatch(report: dict, *, episodes: int, keys: str,
                    checkpoint_step: int | None) -> dict[str, str]:
    """How a run's existing report differs from the evaluation asked for.

    Args:
      report: the run's report dict (`report.load_report`).
      episodes: eval_mode episodes per task and seed asked for (--episodes).
      keys: rollout keys asked for: "fresh", or "checkpoint"
        (--seeds-from-checkpoint).
      checkpoint_step: the run's newest complete checkpoint; None when it
        has none (the report is then the only evaluation there is).
    Returns:
      What differs ("episodes", "keys", "checkpoint") -> a phrase saying how
      (e.g. "10 episodes, not the 2 asked"); empty when the report can be
      reused as it is.
    """
    ev, run = report["evaluation"], report["run"]
    out = {}
    if int(ev["episodes"]) != int(episodes):
        out["episodes"] = f"{ev['episodes']} episodes, not the {episodes} asked"
    if ev["keys"] != keys:
        out["keys"] = f"{ev['keys']} rollout keys, not the {keys} ones asked"
    if checkpoint_step is not None and int(run["checkpoint_step"]) != int(checkpoint_step):
        out["checkpoint"] = (f"checkpoint {run['checkpoint_step']}, not the run's newest "
                             f"{checkpoint_step}")
    return out


def build_comparison(reports: Sequence[dict]) -> dict[str, Any]:
    """The comparison dict of ``reports`` (report dicts, in the runs' order).

    Returns:
      runs (label, dir, kind, agent, report created, checkpoint step, episodes,
      keys, seeds), tasks (union, in first-seen order), scores[label][task]
      (None where the run lacks the task or its score is not finite),
      missing[label] (the tasks of the union the run did not evaluate),
      aggregates[label] (the run's own "wmx" aggregate rows, over its tasks),
      common_tasks (the tasks every run scored, finite, in the union's order) and
      common_aggregates[label] (aggregate rows over common_tasks: the like-for-like
      figures; empty when every run's own tasks are common_tasks, or none is common).
    Raises:
      ValueError: a run shares no task with the others (`check_shared_tasks`).
    """
    labels = run_labels(reports)
    own = {lab: [t["task"] for t in r["per_task"]] for lab, r in zip(labels, reports)}
    check_shared_tasks(own)
    tasks: list[str] = []
    for lab in labels:
        tasks += [t for t in own[lab] if t not in tasks]
    scores = {lab: {t["task"]: t["score"] for t in r["per_task"]}
              for lab, r in zip(labels, reports)}
    common = [t for t in tasks if all(agg.is_score(scores[lab].get(t)) for lab in labels)]
    partial = bool(common) and any(
        {t for t in own[lab] if agg.is_score(scores[lab][t])} != set(common) for lab in labels)
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "runs": [{"label": lab, "dir": r["run"]["dir"], "kind": r["run"]["kind"],
                  "agent": r["run"].get("agent", "tdmpc2"), "report_created": r["created"],
                  "checkpoint_step": r["run"].get("checkpoint_step"),
                  "episodes": r["evaluation"]["episodes"], "keys": r["evaluation"].get("keys"),
                  "seeds": r["evaluation"]["seeds"]} for lab, r in zip(labels, reports)],
        "tasks": tasks,
        "scores": {lab: {t: scores[lab].get(t) for t in tasks} for lab in labels},
        "missing": {lab: [t for t in tasks if t not in own[lab]] for lab in labels},
        "aggregates": {lab: [a for a in r["aggregates"] if a["who"] == "wmx"]
                       for lab, r in zip(labels, reports)},
        "common_tasks": common,
        "common_aggregates": {lab: [a.to_dict() for a in agg.aggregate_all(
            [scores[lab][t] for t in common])] for lab in labels} if partial else {},
    }


def _markdown(c: dict) -> str:
    labels = [r["label"] for r in c["runs"]]
    lines = ["# Run comparison", "", f"Written {c['created']}. Normalised scores (return / "
             "10) from each run's evaluation report; the runs table gives the checkpoint, "
             "the eval_mode episodes per task and seed, and the rollout keys of each.", "",
             "## Runs", "",
             "| run | agent | kind | checkpoint | episodes x seeds | rollout keys | directory |",
             "|---|---|---|---|---|---|---|"]
    for r in c["runs"]:
        lines.append(f"| {r['label']} | {r.get('agent', '-')} | {r['kind']} | "
                     f"{r.get('checkpoint_step', '-')} | "
                     f"{r['episodes']} x {len(r['seeds'])} | {r.get('keys') or '-'} | "
                     f"`{r['dir']}` |")
    lines += ["", "## Score per task", "", "| task | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels)]
    for t in c["tasks"]:
        cells = [NOT_EVALUATED if t in c["missing"][lab] else
                 "-" if c["scores"][lab][t] is None else f"{c['scores'][lab][t]:.1f}"
                 for lab in labels]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    gaps = [f"{lab} lacks {', '.join(c['missing'][lab])}" for lab in labels
            if c["missing"][lab]]
    if gaps:
        lines += ["", f"Not every run evaluated every task: {'; '.join(gaps)} "
                      f"(\"{NOT_EVALUATED}\"). "
                      + ("The first aggregates below are over the tasks every run scored, "
                         "the second over each run's own tasks." if c["common_aggregates"]
                         else "Each run's aggregates below are over its own tasks.")]
    few = " (resampling fewer than 5 tasks, they say little)."
    if c["common_aggregates"]:
        lines += ["", "## Aggregates over the tasks every run scored", "",
                  f"{len(c['common_tasks'])} task(s): {', '.join(c['common_tasks'])}. "
                  "95% percentile-bootstrap intervals over tasks" +
                  (few if len(c["common_tasks"]) < 5 else "."), ""]
        lines += _aggregate_table(labels, c["common_aggregates"])
    own = min(len(c["tasks"]) - len(c["missing"][lab]) for lab in labels)
    lines += ["", "## Aggregates over each run's tasks", "",
              "95% percentile-bootstrap intervals over tasks" + (few if own < 5 else "."), ""]
    lines += _aggregate_table(labels, c["aggregates"])
    lines += ["", "![scores per task and run](scores.png)", ""]
    return "\n".join(lines)


def _aggregate_table(labels: Sequence[str], aggregates: Mapping[str, list]) -> list[str]:
    lines = ["| run | tasks | mean | median | IQM |", "|---|---|---|---|---|"]
    for lab in labels:
        a = {x["statistic"]: x for x in aggregates[lab]}
        if not a:                   # no finite score: its report has no aggregates
            lines.append(f"| {lab} | 0 | - | - | - |")
            continue
        cells = [f"{a[s]['value']:.1f} [{a[s]['ci_low']:.1f}, {a[s]['ci_high']:.1f}]"
                 for s in ("mean", "median", "iqm")]
        lines.append(f"| {lab} | {a['mean']['n_tasks']} | " + " | ".join(cells) + " |")
    return lines


def _fill(c: dict, d: Path) -> None:
    labels = [r["label"] for r in c["runs"]]
    (d / "compare.json").write_text(json.dumps(c, indent=1, allow_nan=False) + "\n")
    with (d / "per_task.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", *labels])
        for t in c["tasks"]:
            w.writerow([t, *["" if c["scores"][lab][t] is None else c["scores"][lab][t]
                             for lab in labels]])
    with (d / "aggregates.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "tasks", "statistic", "value", "ci_low", "ci_high", "n_tasks"])
        for over, rows in (("common", c["common_aggregates"]), ("own", c["aggregates"])):
            for lab in labels:
                for a in rows.get(lab, []):
                    w.writerow([lab, over, a["statistic"], a["value"], a["ci_low"],
                                a["ci_high"], a["n_tasks"]])
    plots.compare_bars(c["tasks"], labels, c["scores"], d / "scores.png", "runs compared")
    (d / "compare.md").write_text(_markdown(c))


def write_comparison(reports: Sequence[dict], out: Path, force: bool = False) -> Path:
    """Write the comparison of ``reports`` into ``out`` atomically; returns out/compare.md.
    Raises FileExistsError when ``out`` exists and not ``force``."""
    out = Path(out).expanduser().resolve()
    c = build_comparison(reports)
    write_dir_atomically(out, lambda d: _fill(c, d), force)
    return out / "compare.md"
