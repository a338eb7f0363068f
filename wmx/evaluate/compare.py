"""Comparison of several runs from their reports: per-task scores side by side, aggregates.

Input: the report dicts (`report.load_report`) of the runs, in the order
given. Output directory (written atomically, like a report): compare.md,
compare.json, per_task.csv (one row per task: one score column per run, the
sources' final return, one ratio column per run), aggregates.csv (one row per
run, task set and statistic: "common", the tasks every run scored, when some
run lacks one; "own", each run's tasks) and scores.png (grouped bars).

Ratio: a run's return over the source agents' final return of the task
(`report.source_ratio`, from each report's ``return_mean`` and
``source_return``); per run, how many of the tasks with a ratio whose source learned
(`run_learned`: source final return >= the uniform-random policy's + LEARNED_MARGIN)
reach SOURCE_SHARE of the source, or ``evaluate --runs --source-share``'s share
(`ratio_summary`); the others are listed as left out.

A comparison is per task: every run must share a task with another run
(`check_shared_tasks`), a task a run did not evaluate shows as "not
evaluated", and a run's report is reused only when it is the evaluation
asked for (`report_mismatch`: episodes, rollout keys, newest checkpoint).
"""
from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from wmx.evaluate import aggregates as agg
from wmx.evaluate import plots
from wmx.evaluate.random_policy import LEARNED_MARGIN, random_return, source_learned
from wmx.evaluate.report import source_ratio, write_dir_atomically
from wmx.sizes import counted

__all__ = ["SOURCE_SHARE", "label_names", "run_labels", "check_shared_tasks",
           "report_mismatch", "ratio_summary", "run_learned", "build_comparison",
           "write_comparison"]

NOT_EVALUATED = "not evaluated"
"""compare.md's cell for a task a run's report does not cover."""
SOURCE_SHARE = 0.8
"""The fraction of a source's final return that the multi-task offline criterion asks of
an offline run on a task (its ``ratio`` at least this)."""


FIXED_COLUMNS = ("task", "source_return")
"""per_task.csv's columns beside the runs' labels and their "<label>_ratio" columns."""


def label_names(names: Sequence[str]) -> list[str]:
    """One distinct label per run directory name: the name, suffixed "#2", "#3", ... on
    repeats, skipping a suffixed label that another run's name already is (runs named
    "a", "a" and "a#2" get "a", "a#3", "a#2"). A label is never one of per_task.csv's
    `FIXED_COLUMNS` nor another run's "<name>_ratio" column (runs named "task", "a" and
    "a_ratio" get "task#2", "a", "a_ratio#2"), so the csv's columns stay distinct."""
    taken = set(names)
    blocked = set(FIXED_COLUMNS) | {f"{n}_ratio" for n in names}
    labels, used = [], set()
    for name in names:
        label, k = name, 1
        while label in used or label in blocked or (label != name and label in taken):
            k += 1
            label = f"{name}#{k}"
        used.add(label)
        labels.append(label)
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
        out["episodes"] = f"{counted(int(ev['episodes']), 'episode')}, not the {episodes} asked"
    if ev["keys"] != keys:
        out["keys"] = f"{ev['keys']} rollout keys, not the {keys} ones asked"
    if checkpoint_step is not None and int(run["checkpoint_step"]) != int(checkpoint_step):
        out["checkpoint"] = (f"checkpoint {run['checkpoint_step']}, not the run's newest "
                             f"{checkpoint_step}")
    return out


def check_share(share: float) -> None:
    """Raise ValueError (one line) unless ``share``, the ratio a task must reach, is a
    finite number above 0 (nan would count every task as reached, 0 or less every task
    with a ratio)."""
    if not (math.isfinite(share) and share > 0):
        raise ValueError(f"the share a task must reach must be a finite number above 0 (a "
                         f"fraction of its source's final return, e.g. {SOURCE_SHARE}), got "
                         f"{share!r}")


def ratio_summary(ratios: Mapping[str, float | None],
                  learned: Mapping[str, bool | None],
                  share: float = SOURCE_SHARE) -> dict[str, Any]:
    """How many of a run's tasks whose source learned reach ``share`` of its return.

    Args:
      ratios: task -> the run's ratio on it (`report.source_ratio`; None where the
        task has none: it is not counted).
      learned: task -> whether the task's source learned it
        (`random_policy.source_learned`; None where unknown); only the tasks with True
        are counted.
      share: the ratio a task must reach (default SOURCE_SHARE; ``evaluate --runs
        --source-share``).
    Returns:
      {"at_least": share, "over": what is counted, "reached": the counted tasks
      with a ratio >= share (int), "total": the counted tasks (int), "share":
      reached / total (None when total is 0), "below": the counted tasks under
      share, "not_learned": the tasks with a ratio left out because their
      source did not learn them, "learned_unknown": those left out because it is
      unknown whether it did}.
    Raises:
      ValueError: ``share`` is not a finite number above 0 (`check_share`).
    """
    check_share(share)
    rated = {t: r for t, r in ratios.items() if r is not None}
    counted = {t: r for t, r in rated.items() if learned.get(t) is True}
    below = [t for t, r in counted.items() if r < share]
    reached = len(counted) - len(below)
    return {"at_least": share,
            "over": f"tasks with a ratio whose source learned (source final return >= "
                    f"the uniform-random policy's + {LEARNED_MARGIN:g})",
            "reached": reached, "total": len(counted),
            "share": reached / len(counted) if counted else None, "below": below,
            "not_learned": [t for t in rated if learned.get(t) is False],
            "learned_unknown": [t for t in rated if learned.get(t) is None]}


def run_learned(report: dict) -> dict[str, bool | None]:
    """Per task of a report, whether its sources learned it: the row's
    ``source_learned``, or, in a report written before that column, the rule
    (`random_policy.source_learned`) applied to the row's source return and the committed
    random return at the report's T and action repeat."""
    protocol = report.get("evaluation", {}).get("tasks", {})
    out = {}
    for row in report["per_task"]:
        if "source_learned" in row:
            out[row["task"]] = row["source_learned"]
            continue
        p = protocol.get(row["task"], {})
        out[row["task"]] = source_learned(row.get("source_return"), random_return(
            row["task"], p.get("episode_length"), p.get("action_repeat")))
    return out


def _source_returns(reports: Sequence[dict], tasks: Sequence[str]
                    ) -> tuple[dict[str, float | None], list[str]]:
    """Per task, the sources' final return the runs' reports give (None where no report
    gives one, or where they differ: runs trained on different datasets), and the tasks
    on which they differ."""
    out, differ = {}, []
    for t in tasks:
        got = [row["source_return"] for r in reports for row in r["per_task"]
               if row["task"] == t and row.get("source_return") is not None]
        same = bool(got) and all(math.isclose(v, got[0], rel_tol=1e-9) for v in got)
        out[t] = got[0] if same else None
        if got and not same:
            differ.append(t)
    return out, differ


def build_comparison(reports: Sequence[dict], share: float = SOURCE_SHARE) -> dict[str, Any]:
    """The comparison dict of ``reports`` (report dicts, in the runs' order); ``share``: the
    ratio `ratio_summary` counts tasks at.

    Returns:
      runs (label, dir, kind, agent, report created, checkpoint step, episodes,
      keys, seeds), tasks (union, in first-seen order), scores[label][task]
      (None where the run lacks the task or its score is not finite),
      missing[label] (the tasks of the union the run did not evaluate),
      aggregates[label] (the run's own "wmx" aggregate rows, over its tasks),
      common_tasks (the tasks every run scored, finite, in the union's order) and
      common_aggregates[label] (aggregate rows over common_tasks: the like-for-like
      figures; empty when every run's own tasks are common_tasks, or none is common),
      source_return[task] (the sources' final return, None where unknown or where the
      runs' reports differ on it), source_differs (the tasks where they differ),
      ratios[label][task] (the run's return over its own report's source return,
      `report.source_ratio`; None where it has none), learned[label][task]
      (`run_learned`; None where unknown), source_share (``share``) and
      ratio_summary[label] (`ratio_summary` of the run's ratios at ``share``, over the
      tasks its sources learned).
    Raises:
      ValueError: a run shares no task with the others (`check_shared_tasks`), or
        ``share`` is not a finite number above 0 (`check_share`).
    """
    labels = run_labels(reports)
    own = {lab: [t["task"] for t in r["per_task"]] for lab, r in zip(labels, reports)}
    check_shared_tasks(own)
    tasks: list[str] = []
    for lab in labels:
        tasks += [t for t in own[lab] if t not in tasks]
    scores = {lab: {t["task"]: t["score"] if agg.is_score(t["score"]) else None
                    for t in r["per_task"]} for lab, r in zip(labels, reports)}
    common = [t for t in tasks if all(agg.is_score(scores[lab].get(t)) for lab in labels)]
    partial = bool(common) and any(
        {t for t in own[lab] if agg.is_score(scores[lab][t])} != set(common) for lab in labels)
    source, differ = _source_returns(reports, tasks)
    ratios = {lab: {t["task"]: source_ratio(t.get("return_mean"), t.get("source_return"))
                    for t in r["per_task"]} for lab, r in zip(labels, reports)}
    ratios = {lab: {t: ratios[lab].get(t) for t in tasks} for lab in labels}
    learned = {lab: run_learned(r) for lab, r in zip(labels, reports)}
    learned = {lab: {t: learned[lab].get(t) for t in tasks} for lab in labels}
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
        "source_return": source,
        "source_differs": differ,
        "ratios": ratios,
        "learned": learned,
        "source_share": share,
        "ratio_summary": {lab: ratio_summary(ratios[lab], learned[lab], share)
                          for lab in labels},
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
    lines += _ratio_markdown(c, labels)
    few = " (resampling fewer than 5 tasks, they say little)."
    if c["common_aggregates"]:
        lines += ["", "## Aggregates over the tasks every run scored", "",
                  f"{counted(len(c['common_tasks']), 'task')}: {', '.join(c['common_tasks'])}. "
                  "95% percentile-bootstrap intervals over tasks" +
                  (few if len(c["common_tasks"]) < 5 else "."), ""]
        lines += _aggregate_table(labels, c["common_aggregates"])
    own = min(len(c["tasks"]) - len(c["missing"][lab]) for lab in labels)
    lines += ["", "## Aggregates over each run's tasks", "",
              "95% percentile-bootstrap intervals over tasks" + (few if own < 5 else "."), ""]
    lines += _aggregate_table(labels, c["aggregates"])
    lines += ["", "![scores per task and run](scores.png)", ""]
    return "\n".join(lines)


def _ratio_markdown(c: dict, labels: Sequence[str]) -> list[str]:
    """compare.md's section on the runs' returns over the sources' (none: [])."""
    if not any(v is not None for lab in labels for v in c["ratios"][lab].values()):
        return []
    lines = ["", "## Return over the source's final return", "",
             "Ratio: each run's mean return over the final return of the task's source "
             "agents (its report's, through the dataset's lineage); - where the source return "
             "is unknown or not positive." + (
                 f" The runs' sources differ on {', '.join(c['source_differs'])} (other "
                 "datasets): there the source column is empty and each ratio is over its "
                 "run's own sources." if c["source_differs"] else ""), "",
             "| task | source final | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for t in c["tasks"]:
        src = c["source_return"][t]
        cells = [NOT_EVALUATED if t in c["missing"][lab] else
                 "-" if c["ratios"][lab][t] is None else f"{c['ratios'][lab][t]:.2f}"
                 for lab in labels]
        lines.append(f"| {t} | {'-' if src is None else f'{src:.1f}'} | "
                     + " | ".join(cells) + " |")
    lines += ["", f"Tasks at >= {c['source_share']:.15g} x the source's final return, of the "
                  "tasks with a ratio whose source learned (its final return at least "
                  f"{LEARNED_MARGIN:g} above the uniform-random policy's, the reports' "
                  "`source_learned`); the others are left out and listed:", ""]
    for lab in labels:
        s = c["ratio_summary"][lab]
        out = "".join(f"; left out, {why}: {', '.join(s[k])}" for k, why in (
            ("not_learned", "not learned"), ("learned_unknown", "learned unknown"))
            if s.get(k))
        if not s["total"]:
            lines.append(f"- {lab}: no task with a ratio whose source learned{out}")
            continue
        below = f"; below: {', '.join(s['below'])}" if s["below"] else ""
        lines.append(f"- {lab}: {s['reached']} of {s['total']} ({100 * s['share']:.0f}%)"
                     f"{below}{out}")
    return lines


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
        w.writerow(["task", *labels, "source_return", *[f"{lab}_ratio" for lab in labels]])
        for t in c["tasks"]:
            w.writerow([t, *["" if c["scores"][lab][t] is None else c["scores"][lab][t]
                             for lab in labels],
                        "" if c["source_return"][t] is None else c["source_return"][t],
                        *["" if c["ratios"][lab][t] is None else c["ratios"][lab][t]
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


def write_comparison(reports: Sequence[dict], out: Path, force: bool = False,
                     share: float = SOURCE_SHARE) -> Path:
    """Write the comparison of ``reports`` into ``out`` atomically (tasks counted at
    ``share`` of their source); returns out/compare.md. Raises FileExistsError when
    ``out`` exists and not ``force``."""
    out = Path(out).expanduser().resolve()
    c = build_comparison(reports, share)
    write_dir_atomically(out, lambda d: _fill(c, d), force)
    return out / "compare.md"
