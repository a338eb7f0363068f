"""The evaluation report of one run: per-task scores, aggregates, lineage, figures.

`build_report` turns evaluated returns into a JSON-able dict; `write_report`
renders it into a directory (report.md, report.json, per_task.csv,
aggregates.csv, scores.png, learning_curves.png) built in a hidden temporary
sibling and renamed into place, so a report directory is always complete.

Per task: the mean return over seeds and episodes (and its std over all
episodes), the normalised score (return / 10), the seeds' range, the source
agents' final return (offline runs, `wmx.evaluate.lineage`) and the run's
agent's published return (its own paper's curve) at a published point within
tolerance of the matching env steps (`reference_curves.published_point`;
online runs: the run's own env steps; offline runs: the mean env steps of the
task's sources), never interpolated: without such a point the row says where
the nearest points are. The ratio of the mean return to the source agents'
final return (`source_ratio`; offline runs whose task has a positive source
return). The uniform-random policy's return (`random_policy.random_return`, the
committed mt19 table; None for another task or another T or action repeat) and
whether the sources learned the task (`random_policy.source_learned`: source return
>= random return + LEARNED_MARGIN; None when either is unknown). Aggregates over
tasks: `wmx.evaluate.aggregates`.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from wmx.agents.registry import get_agent
from wmx.datasets.store import Store
from wmx.evaluate import aggregates as agg
from wmx.evaluate import lineage as lin
from wmx.evaluate import plots
from wmx.evaluate.report_dir import (is_replaceable, recover_dir,  # noqa: F401 (re-exported)
                                     write_dir_atomically)
from wmx.evaluate.random_policy import LEARNED_MARGIN, random_return, source_learned
from wmx.evaluate.reference_curves import (AGENT_LABELS, points_up_to, published_point,
                                            reference_source)
from wmx.evaluate.runs import RunInfo
from wmx.sizes import counted

log = logging.getLogger("wmx.evaluate")

REPORT_SCHEMA = "wmx-evaluation-report/1"
FILES = ("report.md", "report.json", "per_task.csv", "aggregates.csv", "scores.png",
         "learning_curves.png")
PER_TASK_COLUMNS = ("task", "seeds", "episodes", "return_mean", "return_std", "score",
                    "score_min", "score_max", "source_return", "source_score",
                    "source_env_steps", "source_basis", "n_sources", "ratio",
                    "random_return", "source_learned", "published_return", "published_score",
                    "published_env_steps", "published_note")
AGGREGATE_COLUMNS = ("who", "statistic", "value", "ci_low", "ci_high", "n_tasks")

__all__ = ["REPORT_SCHEMA", "FILES", "build_report", "write_report", "load_report",
           "write_dir_atomically", "recover_dir", "run_lineage", "source_ratio",
           "is_replaceable"]


def _f(x) -> float | None:
    return None if x is None else float(x)


def source_ratio(ret: float | None, source_return: float | None) -> float | None:
    """An offline run's return as a fraction of its task's source agents' final return.

    Args:
      ret: the run's mean return on the task (`return_mean`).
      source_return: the mean final return of the task's sources (`source_return`;
        None for an online run, or a task whose sources are unknown).
    Returns:
      ``ret / source_return``; None when either is None or not finite, or when
      ``source_return`` is not positive: a fraction of a zero or negative return
      says nothing about how much of the source's skill was kept.
    """
    if ret is None or source_return is None:
        return None
    if not (math.isfinite(ret) and math.isfinite(source_return)) or source_return <= 0:
        return None
    return float(ret) / float(source_return)


# ---- lineage ------------------------------------------------------------------------------
def run_lineage(info: RunInfo, home: Path) -> dict[str, Any]:
    """Lineage block of a run: run dir, checkpoint, code versions, dataset and its sources
    (offline) or the run's exported episode sets (online). JSON-able."""
    from wmx.version import code_version
    store = Store(home)
    out: dict[str, Any] = {
        "run_dir": str(info.run_dir), "kind": info.kind, "checkpoint": str(info.checkpoint),
        "checkpoint_step": info.step, "env_steps": info.env_steps, "updates": info.updates,
        "home": str(store.home), "evaluator_code_version": code_version(),
        "dataset": None, "dataset_path": None, "sources": [], "episode_sets": []}
    run_cv = info.config.get("code_version")
    if info.kind == "offline":
        manifest, path, sources = lin.dataset_sources(store, info.rc.dataset)
        out.update(dataset=info.rc.dataset, dataset_path=None if path is None else str(path),
                   dataset_found=manifest is not None,
                   sources=[s.to_dict() for s in sources])
    else:
        out["episode_sets"] = _exported_sets(info)
        versions = sorted({s["code_version"] for s in out["episode_sets"]})
        if run_cv is None and versions:
            run_cv = ", ".join(versions)
            out["code_version_basis"] = "the producer of the run's exported episode sets"
    if run_cv is not None:
        out.setdefault("code_version_basis", "the run's config.json")
    else:
        out["code_version_basis"] = "unknown for the run; the evaluator's checkout is given"
    out["code_version"] = run_cv or out["evaluator_code_version"]
    return out


def _exported_sets(info: RunInfo) -> list[dict[str, Any]]:
    """The episode sets an online run exported (summary.json), with their manifests' ids."""
    from wmx.schemas.manifest import EpisodeSetManifest
    summary = info.run_dir / "summary.json"
    if not summary.is_file():
        return []
    sets = json.loads(summary.read_text()).get("episode_sets") or {}
    out = []
    for seed, path in sorted(sets.items(), key=lambda kv: int(kv[0])):
        try:
            m = EpisodeSetManifest.load(path)
        except (OSError, ValueError):
            out.append({"content_hash": "?", "task": "?", "seed": int(seed), "path": path,
                        "run_id": info.name, "code_version": "?", "episodes": None})
            continue
        out.append({"content_hash": m.content_hash, "task": m.task.name,
                    "seed": m.producer.seed, "run_id": m.producer.run_id, "path": str(path),
                    "code_version": m.producer.code_version, "episodes": m.episode_count})
    return out


def trainer_evaluation(info: RunInfo) -> dict[str, Any] | None:
    """The trainer's own evaluation at the run's checkpoint, read from its metrics.csv.

    Args:
      info: the opened run (`wmx.evaluate.runs.open_run`).

    Returns:
      {"step": the checkpoint's env steps (online) or updates (offline), "episodes":
      eval_mode episodes per seed (and task), "seeds": seeds, "return": task -> mean
      return over seeds, "score": the mean over tasks of return / 10}; None when the
      metrics have no evaluation at the checkpoint's step (an interrupted run's newest
      checkpoint can lie past its last evaluation).
    """
    from wmx.runs.listing import read_metrics
    col, step = (("env_steps", info.env_steps) if info.kind == "online"
                 else ("updates", info.updates))
    if step is None:
        return None
    rows = [r for r in read_metrics(info.run_dir / "metrics.csv")
            if r.get("kind") == "eval" and r.get("task") != "mean" and _f(r.get(col)) == step]
    try:
        per: dict[str, list[float]] = {}
        for r in rows:
            per.setdefault(r.get("task") or info.tasks[0], []).append(float(r["return"]))
        episodes = {int(float(r["episodes"])) for r in rows}
    except (KeyError, TypeError, ValueError):
        return None
    if not per or len(episodes) != 1:
        return None
    means = {t: float(np.mean(v)) for t, v in per.items()}
    return {"step": int(step), "episodes": episodes.pop(), "seeds": len(next(iter(per.values()))),
            "return": means,
            "score": float(np.mean([agg.normalised_score(v) for v in means.values()]))}


# ---- per task and aggregates ---------------------------------------------------------------
def _published(task: str, env_steps: int | None, agent: str) -> dict[str, Any]:
    """published_return / _score / _env_steps (the point's) / _note of one task."""
    out = {"published_return": None, "published_score": None, "published_env_steps": None,
           "published_note": None}
    if env_steps is None:
        return out
    p = published_point(task, env_steps, agent) if agent in AGENT_LABELS else None
    if p is None:
        out["published_note"] = f"no published {AGENT_LABELS.get(agent, agent)} curve"
    elif p.value is None:
        near = " and ".join(f"{x:,d}" for x in (p.below, p.above) if x is not None)
        out["published_note"] = (f"no published point near {env_steps:,d} env steps "
                                 f"(nearest: {near})")
    else:
        out.update(published_return=p.value, published_score=agg.normalised_score(p.value),
                   published_env_steps=p.env_steps)
    return out


def _task_row(task: str, rets: np.ndarray, sources: list[dict], env_steps: int | None,
              agent: str = "tdmpc2", protocol: Mapping[str, Any] | None = None
              ) -> dict[str, Any]:
    r = np.asarray(rets, np.float64)
    seed_means = r.mean(axis=1)
    row: dict[str, Any] = {
        "task": task, "seeds": int(r.shape[0]), "episodes": int(r.shape[1]),
        "return_mean": float(r.mean()), "return_std": float(r.std()),
        "seed_returns": [float(x) for x in seed_means],
        "score": agg.normalised_score(float(r.mean())),
        "score_min": agg.normalised_score(float(seed_means.min())),
        "score_max": agg.normalised_score(float(seed_means.max())),
        "source_return": None, "source_score": None, "source_env_steps": None,
        "source_basis": None, "n_sources": 0, "ratio": None}
    known = [s for s in sources if s["task"] == task and s["final_return"] is not None]
    if known:
        bases = sorted({s["basis"] for s in known})
        ret = float(np.mean([s["final_return"] for s in known]))
        steps = [s["env_steps"] for s in known if s["env_steps"] is not None]
        row.update(source_return=ret, source_score=agg.normalised_score(ret),
                   source_env_steps=int(round(np.mean(steps))) if steps else None,
                   source_basis=bases[0] if len(bases) == 1 else "mixed",
                   n_sources=len(known))
        env_steps = row["source_env_steps"]
    row["ratio"] = source_ratio(row["return_mean"], row["source_return"])
    protocol = protocol or {}
    row["random_return"] = random_return(task, protocol.get("episode_length"),
                                         protocol.get("action_repeat"))
    row["source_learned"] = source_learned(row["source_return"], row["random_return"])
    row.update(_published(task, env_steps, agent))
    return row


def _aggregates(per_task: list[dict]) -> list[dict[str, Any]]:
    out = []
    for who, key in (("wmx", "score"), ("source", "source_score"),
                     ("published", "published_score")):
        vals = [r[key] for r in per_task if agg.is_score(r[key])]
        if not vals:
            continue
        out += [{"who": who, **a.to_dict()} for a in agg.aggregate_all(vals)]
    return out


def build_report(info: RunInfo, returns: Mapping[str, np.ndarray], meta: Mapping[str, Any],
                 home: Path) -> dict[str, Any]:
    """The report dict of evaluated ``returns`` (task -> f32[S, E]) of run ``info``.

    meta: `runs.evaluate_run`'s meta; home: the store holding the run's
    dataset and episode sets. Keys: schema, created, run, evaluation,
    lineage, per_task (rows of PER_TASK_COLUMNS plus seed_returns),
    aggregates (rows of AGGREGATE_COLUMNS), returns (task -> seed -> episode
    returns), references.
    """
    lineage = run_lineage(info, home)
    env_steps = info.env_steps if info.kind == "online" else None
    per_task = [_task_row(t, np.asarray(r), lineage["sources"], env_steps, info.rc.agent,
                          meta.get("tasks", {}).get(t))
                for t, r in returns.items()]
    return {
        "schema": REPORT_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": {"dir": str(info.run_dir), "name": info.name, "kind": info.kind,
                "agent": info.rc.agent, "seeds": list(info.seeds),
                "checkpoint": str(info.checkpoint), "checkpoint_step": info.step,
                "env_steps": info.env_steps, "updates": info.updates,
                "tasks": list(info.tasks)},
        "evaluation": {**dict(meta), "seeds": list(info.seeds),
                       "protocol": f"{get_agent(info.rc.agent).EVAL_PROTOCOL}; fresh "
                                   "initial states, undiscounted returns",
                       "trainer": trainer_evaluation(info)},
        "lineage": lineage,
        "per_task": per_task,
        "aggregates": _aggregates(per_task),
        "returns": {t: {str(s): [float(x) for x in np.asarray(r)[i]]
                        for i, s in enumerate(info.seeds)} for t, r in returns.items()},
        "references": {"published": (reference_source(info.rc.agent)
                                     if info.rc.agent in AGENT_LABELS else None),
                       "score": "return / 10 (DMC, on [0, 100]; tdmpc2_spec 4.20)",
                       "aggregates": f"percentile bootstrap over tasks, "
                                     f"{agg.BOOTSTRAP_RESAMPLES} resamples, seed "
                                     f"{agg.BOOTSTRAP_SEED}, 95%"},
    }


def _fmt(x, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _yes_no(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def _write_csv(path: Path, columns, rows) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in columns})


def _curve_panels(report: dict) -> tuple[list[dict], str]:
    """Learning-curve panels from the run's metrics.csv eval rows (empty when absent)."""
    run = report["run"]
    path = Path(run["dir"]) / "metrics.csv"
    rows = []
    if path.is_file():
        with path.open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("kind") == "eval"
                    and r.get("return") not in (None, "")]
    online = run["kind"] == "online"
    xcol, xlabel = ("env_steps", "env steps") if online else ("updates", "updates")
    panels = []
    for t in report["per_task"]:
        task = t["task"]
        mine = [r for r in rows if online or r.get("task") == task]
        by_x: dict[int, list[float]] = {}
        for r in mine:
            by_x.setdefault(int(float(r[xcol])), []).append(float(r["return"]))
        xs = sorted(by_x)
        panel: dict[str, Any] = {"task": task, "x": xs, "returns": [by_x[x] for x in xs]}
        agent = run.get("agent", "tdmpc2")
        label = AGENT_LABELS.get(agent, agent)
        if online and xs and agent in AGENT_LABELS:
            px, py, prange = points_up_to(task, max(xs), agent)
            panel["published"] = (px, py, prange, f"{label} published points")
        if not online:
            panel["hlines"] = [("source agents (final)", t["source_return"]),
                               (f"{label} published at source steps", t["published_return"])]
        panels.append(panel)
    return panels, xlabel


KEYS_TEXT = {
    "fresh": "the evaluate command's own draw of initial states and policy noise, not the "
             "trainer's; `--seeds-from-checkpoint` repeats the trainer's last evaluation",
    "checkpoint": "the trainer's keys at its last evaluation; with the run's episode count "
                  "these are the trainer's episodes again"}
"""What each rollout-key mode of `evaluate` draws (report.md's first paragraph)."""


def _trainer_markdown(trainer: dict | None) -> list[str]:
    """The paragraph on the trainer's own evaluation at the checkpoint (none: [])."""
    if not trainer:
        return []
    rets = ", ".join(f"{t} {v:.1f}" for t, v in trainer["return"].items())
    n = trainer["episodes"]
    return [f"The trainer's own evaluation at this checkpoint (metrics.csv): "
            f"{counted(n, 'episode')} per seed and task, mean return {rets}; mean score "
            f"{trainer['score']:.1f}. The same rollout and protocol as above, other episodes "
            "unless the keys are the checkpoint's: with few episodes the two differ by the "
            "spread of single episodes (the ± below).", ""]


def _markdown(report: dict) -> str:
    run, ev, lin_ = report["run"], report["evaluation"], report["lineage"]
    where = (f"env steps {run['env_steps']:,d}" if run["kind"] == "online"
             else f"{run['updates']:,d} updates")
    lines = [f"# Evaluation report: {run['name']}", "",
             f"{run['kind'].capitalize()} {run['agent']} run `{run['dir']}`, checkpoint "
             f"{run['checkpoint_step']} ({where}); "
             f"{counted(int(ev['episodes']), 'eval_mode episode')} x "
             f"{counted(len(ev['seeds']), 'seed')} {ev['seeds']} "
             "per task from fresh initial states "
             f"(rollout keys: {ev['keys']}, index {ev['eval_index']}: {KEYS_TEXT[ev['keys']]}). "
             f"Written {report['created']}." + (f" Protocol: {ev['protocol']}."
                                                if ev.get("protocol") else ""), "",
             *_trainer_markdown(ev.get("trainer")),
             "## Per task", "",
             "Return: mean over seeds and episodes (std over all episodes). Score = return / "
             "10. Seed range: the lowest and highest seed-mean score. Published: " +
             AGENT_LABELS.get(run["agent"], run["agent"]) + "'s released mean return at "
             "a published point within 2% (at least 1,000 env steps) of the matching env "
             "steps (" + ("the run's own" if run["kind"] == "online" else
                          "the sources' mean: an offline run takes no env step of its own, so "
                          "it is set beside the published agent at the env steps its source "
                          "runs had taken") +
             "); never interpolated between points." + (
                 " Ratio: return / the source agents' final return (- where the source "
                 "return is unknown or not positive). Learned: whether the source final "
                 f"return is at least {LEARNED_MARGIN:g} above the uniform-random policy's "
                 "(random; - where either is unknown)." if run["kind"] == "offline"
                 else ""),
             "",
             "| task | return | score | seed range | source final (score) | ratio | random "
             "| learned | basis | published (score) | at env steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["per_task"]:
        src = "-" if r["source_return"] is None else \
            f"{r['source_return']:.1f} ({r['source_score']:.1f})"
        pub = (r.get("published_note") or "-") if r["published_return"] is None else \
            f"{r['published_return']:.1f} ({r['published_score']:.1f})"
        steps = "-" if r["published_env_steps"] is None else f"{r['published_env_steps']:,d}"
        lines.append(f"| {r['task']} | {r['return_mean']:.1f} ± {r['return_std']:.1f} | "
                     f"{r['score']:.1f} | {r['score_min']:.1f}-{r['score_max']:.1f} | {src} | "
                     f"{_fmt(r['ratio'], 2)} | {_fmt(r.get('random_return'))} | "
                     f"{_yes_no(r.get('source_learned'))} | {r['source_basis'] or '-'} | "
                     f"{pub} | {steps} |")
    lines += ["", "## Aggregates over tasks", "",
              "Normalised score; [95% percentile-bootstrap interval over tasks, "
              f"{agg.BOOTSTRAP_RESAMPLES} resamples, seed {agg.BOOTSTRAP_SEED}]. IQM = mean "
              "of the middle 50% of the task scores." + (
                  " The interval resamples tasks: over so few it says little (one task: "
                  "none at all)." if len(report["per_task"]) < 5 else ""), "",
              "| | tasks | mean | median | IQM |", "|---|---|---|---|---|"]
    for who in ("wmx", "source", "published"):
        a = {x["statistic"]: x for x in report["aggregates"] if x["who"] == who}
        if a:
            cells = [f"{a[s]['value']:.1f} [{a[s]['ci_low']:.1f}, {a[s]['ci_high']:.1f}]"
                     for s in ("mean", "median", "iqm")]
            lines.append(f"| {who} | {a['mean']['n_tasks']} | " + " | ".join(cells) + " |")
    lines += ["", "![scores per task](scores.png)", "",
              "![learning curves](learning_curves.png)", ""]
    lines += _videos_markdown(report)
    lines += ["## Lineage", "",
              f"- run directory: `{lin_['run_dir']}`",
              f"- checkpoint: `{lin_['checkpoint']}` (step {lin_['checkpoint_step']})",
              f"- code version: {lin_['code_version']} ({lin_['code_version_basis']}); "
              f"evaluator: {lin_['evaluator_code_version']}"]
    if run["kind"] == "offline":
        if lin_.get("dataset_found"):
            lines.append(f"- dataset: {lin_['dataset']} (`{lin_['dataset_path']}`)")
        else:
            lines.append(f"- dataset: {lin_['dataset']} (not in the store {lin_['home']}: "
                         "sources unknown)")
        lines += ["", "Source episode sets (final return: " + "; ".join(
            f"`{k}` = {v}" for k, v in lin.BASIS_TEXT.items()) + "):", "",
            "| episode set | task | seed | run id | agent | episodes | final return "
            "| env steps | basis |", "|---|---|---|---|---|---|---|---|---|"]
        for s in lin_["sources"]:
            lines.append(f"| {s['content_hash'][:12]} | {s['task']} | {s['seed']} | "
                         f"{s['run_id']} | {s['agent']} | {s['episodes']} | "
                         f"{_fmt(s['final_return'])} | {s['env_steps'] or '-'} | "
                         f"{s['basis']} |")
    elif lin_["episode_sets"]:
        lines += ["", "Episode sets exported by the run:", "",
                  "| episode set | task | seed | episodes |", "|---|---|---|---|"]
        for s in lin_["episode_sets"]:
            lines.append(f"| {s['content_hash'][:12]} | {s['task']} | {s['seed']} | "
                         f"{s['episodes']} |")
    lines += ["", f"Published curves: {report['references']['published']}.",
              "Files: report.json (everything above, with every episode return), "
              "per_task.csv, aggregates.csv.", ""]
    return "\n".join(lines)


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float replaced by None (strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _videos_markdown(report: dict) -> list[str]:
    videos = report.get("videos") or []
    if not videos:
        return []
    v0 = videos[0]
    lines = ["## Videos", "",
             f"The first "
             f"{counted(report['evaluation']['video']['episodes'], 'evaluation episode')} of "
             f"seed {v0['seed']} per task, rendered from camera `{v0['camera']}` at "
             f"{v0['width']} x {v0['height']} pixels (one frame per agent step, from the reset "
             "state on).", "",
             "| task | seed | episode | return | frames | fps | video |",
             "|---|---|---|---|---|---|---|"]
    for v in videos:
        lines.append(f"| {v['task']} | {v['seed']} | {v['episode']} | {v['return']:.1f} | "
                     f"{v['frames']} | {v['fps']:g} | [{v['path']}]({v['path']}) |")
    logged = report.get("loggers") or {}
    if "tensorboard" in logged:
        lines += ["", f"TensorBoard (animated GIFs, half size): `tensorboard --logdir "
                      f"{logged['tensorboard']}` in this directory."]
    if "wandb" in logged:
        wb = logged["wandb"]
        lines += ["", f"W&B: run `{wb['id']}` of project `{wb['project']}` ({wb['mode']}"
                      + (f"; upload with `wandb sync {wb['dir']}`" if wb["mode"] == "offline"
                         else "") + ")."]
    return lines + [""]


def _fill(report: dict, d: Path) -> None:
    (d / "report.json").write_text(json.dumps(_finite(report), indent=1, allow_nan=False)
                                   + "\n")
    _write_csv(d / "per_task.csv", PER_TASK_COLUMNS, report["per_task"])
    _write_csv(d / "aggregates.csv", AGGREGATE_COLUMNS, report["aggregates"])
    title = f"{report['run']['name']} ({report['run']['kind']})"
    plots.score_bars(report["per_task"], d / "scores.png", title)
    panels, xlabel = _curve_panels(report)
    plots.learning_curves(panels, d / "learning_curves.png", xlabel, title)
    (d / "report.md").write_text(_markdown(report))


def write_report(report: dict, out: Path, force: bool = False,
                 media: Callable[[Path], dict[str, Any]] | None = None) -> Path:
    """Write ``report`` into directory ``out`` atomically (see `write_dir_atomically`).

    Files: FILES, and what ``media`` writes: ``media(tmp_dir)`` runs first in
    the temporary directory (videos, logger files) and returns report keys
    ("videos": `video.write_videos` entries, "loggers") merged into the
    report before report.json and report.md are written; a failure in it
    leaves no report, like any other. Returns the path of ``out/report.md``.
    Raises FileExistsError when ``out`` exists and not ``force``.
    """
    out = Path(out).expanduser().resolve()

    def fill(d: Path) -> None:
        _fill({**report, **media(d)} if media is not None else report, d)

    write_dir_atomically(out, fill, force)
    return out / "report.md"


def load_report(out: Path) -> dict:
    """report.json of a report directory; FileNotFoundError when absent, ValueError (one
    line naming the file and the fix) when it is not valid JSON, not a report of this
    schema, or lacks what a comparison reads (run, evaluation, per_task rows with their
    task, aggregates)."""
    p = Path(out) / "report.json"
    fix = (f"re-evaluate the run with `evaluate --run {Path(out).parent} --force` "
           "(replaces its report)")
    try:
        d = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p} is not valid JSON ({str(e).splitlines()[0]}): the report is "
                         f"damaged; {fix}") from None
    if not isinstance(d, dict) or d.get("schema") != REPORT_SCHEMA:
        raise ValueError(f"{p} is not a wmx evaluation report ({REPORT_SCHEMA}); {fix}")
    rows = d.get("per_task")
    if not (isinstance(d.get("run"), dict) and isinstance(d.get("evaluation"), dict)
            and isinstance(d.get("aggregates"), list) and isinstance(rows, list)
            and all(isinstance(r, dict) and isinstance(r.get("task"), str) for r in rows)):
        raise ValueError(f"{p} lacks the run, evaluation, per_task or aggregates a report "
                         f"holds: the report is damaged; {fix}")
    return d
