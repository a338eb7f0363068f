"""Comparison of several runs from their reports: per-task scores side by side, aggregates.

Input: the report dicts (`report.load_report`) of the runs, in the order
given. Output directory (written atomically, like a report): compare.md,
compare.json, per_task.csv (one row per task, one score column per run),
aggregates.csv (one row per run and statistic) and scores.png (grouped bars).
"""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any, Sequence

from wmx.evaluate import plots
from wmx.evaluate.report import write_dir_atomically

__all__ = ["run_labels", "build_comparison", "write_comparison"]


def run_labels(reports: Sequence[dict]) -> list[str]:
    """One label per report: the run's directory name, suffixed "#2", "#3", ... on repeats."""
    labels, seen = [], {}
    for r in reports:
        name = r["run"]["name"]
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def build_comparison(reports: Sequence[dict]) -> dict[str, Any]:
    """The comparison dict: runs (label, dir, kind, report created), tasks (union, in
    first-seen order), scores[label][task] (None where the run lacks the task) and
    aggregates[label] (the run's own "wmx" aggregate rows)."""
    labels = run_labels(reports)
    tasks: list[str] = []
    for r in reports:
        tasks += [t["task"] for t in r["per_task"] if t["task"] not in tasks]
    scores = {lab: {t["task"]: t["score"] for t in r["per_task"]}
              for lab, r in zip(labels, reports)}
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "runs": [{"label": lab, "dir": r["run"]["dir"], "kind": r["run"]["kind"],
                  "report_created": r["created"], "episodes": r["evaluation"]["episodes"],
                  "seeds": r["evaluation"]["seeds"]} for lab, r in zip(labels, reports)],
        "tasks": tasks,
        "scores": {lab: {t: scores[lab].get(t) for t in tasks} for lab in labels},
        "aggregates": {lab: [a for a in r["aggregates"] if a["who"] == "wmx"]
                       for lab, r in zip(labels, reports)},
    }


def _markdown(c: dict) -> str:
    labels = [r["label"] for r in c["runs"]]
    lines = ["# Run comparison", "", f"Written {c['created']}. Normalised scores (return / "
             "10) from each run's evaluation report.", "", "## Runs", "",
             "| run | kind | episodes x seeds | directory |", "|---|---|---|---|"]
    for r in c["runs"]:
        lines.append(f"| {r['label']} | {r['kind']} | {r['episodes']} x {len(r['seeds'])} | "
                     f"`{r['dir']}` |")
    lines += ["", "## Score per task", "", "| task | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels)]
    for t in c["tasks"]:
        cells = ["-" if c["scores"][lab][t] is None else f"{c['scores'][lab][t]:.1f}"
                 for lab in labels]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    lines += ["", "## Aggregates over each run's tasks", "",
              "95% percentile-bootstrap intervals over tasks.", "",
              "| run | tasks | mean | median | IQM |", "|---|---|---|---|---|"]
    for lab in labels:
        a = {x["statistic"]: x for x in c["aggregates"][lab]}
        cells = [f"{a[s]['value']:.1f} [{a[s]['ci_low']:.1f}, {a[s]['ci_high']:.1f}]"
                 for s in ("mean", "median", "iqm")]
        lines.append(f"| {lab} | {a['mean']['n_tasks']} | " + " | ".join(cells) + " |")
    lines += ["", "![scores per task and run](scores.png)", ""]
    return "\n".join(lines)


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
        w.writerow(["run", "statistic", "value", "ci_low", "ci_high", "n_tasks"])
        for lab in labels:
            for a in c["aggregates"][lab]:
                w.writerow([lab, a["statistic"], a["value"], a["ci_low"], a["ci_high"],
                            a["n_tasks"]])
    plots.compare_bars(c["tasks"], labels, c["scores"], d / "scores.png", "runs compared")
    (d / "compare.md").write_text(_markdown(c))


def write_comparison(reports: Sequence[dict], out: Path, force: bool = False) -> Path:
    """Write the comparison of ``reports`` into ``out`` atomically; returns out/compare.md.
    Raises FileExistsError when ``out`` exists and not ``force``."""
    out = Path(out).expanduser().resolve()
    c = build_comparison(reports)
    write_dir_atomically(out, lambda d: _fill(c, d), force)
    return out / "compare.md"
