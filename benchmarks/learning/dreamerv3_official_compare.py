"""DreamerV3 online beside the official agent: wmx's training-episode curves, the official
code's on the same chip, and the published points, judged by the issue's criterion.

Inputs are metrics.csv files in wmx's online columns (`wmx.train_online.loop.BASE_COLUMNS`;
the official runs' are converted by ``benchmarks/official_dreamerv3.py``): their ``train``
rows, one per seed and group of training episodes that ended together (16 episodes of
1,000 env steps per seed with 16 envs, so a point every 16,000 env steps).

Points are matched by env steps rounded to ``--match`` (default 1,000, one episode): wmx
logs its groups at 16,000, 32,000, ...; the official counter also counts the envs'
reset steps, so its groups end at 16,032, 32,064, ... A published point at X summarises
the training episodes that ended in (X - 10,000, X] (the published curve's 10,000-step
bins; `wmx.evaluate.reference_curves`), so a logged point at x is read against the
published point at ceil(x / 10,000) · 10,000.

Criterion (the judged wmx arm, ``--judge``; every arm's readings are in the JSON):

- ``within_official``: at every point where all of wmx's seeds and all official seeds
  logged a group (a mean over some of the seeds is not read, nor drawn), up to
  ``--until`` env steps, wmx's seed mean lies inside the official seeds' range;
- ``threshold``: wmx's seed mean reaches ``--threshold`` at a logged point at or below
  ``--by`` env steps;
- ``within_published``: at every published point wmx's logged points reach (their bins),
  wmx's seed mean lies inside the published seeds' range. Reported, and in ``passed``
  only with ``--judge-published``: the published curve is the 2023 agent's (its
  provenance note), not the official code that runs beside wmx.

Writes ``<out>.json`` (every arm's curves per seed, the official summaries' chip, commit
and rates, the readings and ``passed``), ``<out>.png`` and, given official run folders
or an earlier record, ``<out>_official_metrics.csv`` (their train rows, from which the
JSON can be made again):

    python benchmarks/learning/dreamerv3_official_compare.py --task reacher-easy \\
        --official OUT0 OUT1 --wmx "bfloat16=RUN_DIR" \\
        --out benchmarks/results/dreamerv3_online_reacher-easy_official_tpu

An official argument is a folder from ``official_dreamerv3.py --out`` (metrics.csv and
official_summary.json), a metrics.csv, or an earlier comparison's ``<out>.json`` (its
official runs' chip, commit, calls and rates, with the rows of its
``<out>_official_metrics.csv``: a new wmx arm beside official runs whose folders are
gone). A wmx arm is ``LABEL=PATH`` with PATH a run folder (metrics.csv; its commit is
its training calls' in benchmark.json, else config.json's) or a metrics.csv, and
``LABEL=PATH@COMMIT`` names the commit of a bare csv. Runs given under one label are
pooled into one arm (seeds run as separate programs, e.g. ``--wmx bf16=RUN_S234 --wmx
bf16=RUN_S01``: a seed's random keys are its own, so its run is a draw from the same
distribution in any program, though not to the digit: on an accelerator the program it is
vmapped in changes its rounding); they must hold different seeds.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from check_run import trained_where

from wmx.evaluate.reference_curves import points_up_to, reference_source

MIN_RATE_S = 60.0
"""An official call's training rate counts only when it trained this many seconds after
its first training step (a shorter call's rate is mostly its start)."""
PUBLISHED_BIN = 10_000
"""Env steps of one published bin: the point at X holds the episodes that ended in (X - bin, X]."""

Curve = dict[int, dict[int, float]]
"""{matched env steps: {seed: training-episode return (the group's mean)}}."""


def read_train_rows(path: Path) -> list[dict[str, str]]:
    """The ``train`` rows of a metrics.csv (any seeds). Raises SystemExit naming a file
    that is missing or has no such rows."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such metrics.csv; give a run folder or its metrics.csv")
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("kind") == "train"
                and r.get("return") not in ("", None)]
    if not rows:
        raise SystemExit(f"{path}: no train rows (kind=train with a return); is it an online "
                         "run's metrics.csv?")
    return rows


def train_curve(rows: list[dict[str, str]], match: int = 1000) -> Curve:
    """{env steps rounded to ``match``: {seed: return}} of train rows. Raises ValueError
    when one seed has two rows at the same rounded point."""
    out: Curve = {}
    for r in rows:
        x = int(round(int(r["env_steps"]) / match) * match)
        seed = int(r["seed"])
        if seed in out.setdefault(x, {}):
            raise ValueError(f"seed {seed} has two train rows near env step {x} (rounded to "
                             f"{match}); give a smaller --match")
        out[x][seed] = float(r["return"])
    return dict(sorted(out.items()))


def complete(c: Curve) -> Curve:
    """The points of ``c`` where every seed of the curve logged (a seed mean over fewer
    would mix seed sets: an arm pooled from a run cut short, whose later points hold only
    the other run's seeds). The JSON keeps every point; readings and plot use these."""
    n = max((len(v) for v in c.values()), default=0)
    return {x: seeds for x, seeds in c.items() if len(seeds) == n}


def published_bin(x: int, bin_steps: int = PUBLISHED_BIN) -> int:
    """The published point whose bin (X - bin, X] holds a logged point at env step x."""
    return int(math.ceil(x / bin_steps) * bin_steps)


def published_ranges(task: str) -> dict[int, tuple[float, float, float]]:
    """{env steps: (mean, seed min, seed max)} of DreamerV3's published points of ``task``
    ({} when none is published or no seeds are: `reference_curves.points_up_to`)."""
    xs, ys, rng = points_up_to(task, math.inf, "dreamerv3")
    return {} if rng is None else {int(x): (y, lo, hi) for x, y, (lo, hi) in zip(xs, ys, rng)}


def judge(arm: Curve, official: Curve, published: dict[int, tuple[float, float, float]],
          until: int, threshold: float, by: int) -> dict:
    """The criterion's readings of one wmx arm (module docstring).

    Only the points where all the arm's seeds, and all the official seeds, logged are read
    (`complete`).

    Returns {"within_official": {"points": [...], "ok"}, "threshold": {"best", "at",
    "ok"}, "within_published": {"points": [...], "ok"}}; an ``ok`` is None when it has no
    point to judge.
    """
    official = complete(official)
    means = {x: float(np.mean(list(seeds.values()))) for x, seeds in complete(arm).items()}
    pts = []
    for x, mean in means.items():
        off = official.get(x)
        if x > until or off is None:
            continue
        lo, hi = min(off.values()), max(off.values())
        pts.append({"env_steps": x, "mean": mean, "official_min": lo,
                    "official_max": hi, "ok": lo <= mean <= hi})
    best = max(((m, x) for x, m in means.items() if x <= by), default=(None, None))
    pub = []
    for x, mean in means.items():
        p = published.get(published_bin(x))
        if p is not None:
            pub.append({"env_steps": x, "published_at": published_bin(x), "mean": mean,
                        "published_mean": p[0], "published_min": p[1],
                        "published_max": p[2], "ok": p[1] <= mean <= p[2]})
    return {"within_official": {"points": pts,
                                "ok": all(p["ok"] for p in pts) if pts else None},
            "threshold": {"value": threshold, "by": by, "best": best[0], "at": best[1],
                          "ok": None if best[0] is None else best[0] >= threshold},
            "within_published": {"points": pub,
                                 "ok": all(p["ok"] for p in pub) if pub else None}}


def verdict(reading: dict, judge_published: bool = False) -> bool | None:
    """``passed`` of the judged arm's reading: None when a judged part has no point."""
    parts = [reading["within_official"]["ok"], reading["threshold"]["ok"]]
    if judge_published:
        parts.append(reading["within_published"]["ok"])
    if any(p is None for p in parts):
        return None
    return all(parts)


def parse_arm(text: str) -> tuple[str, Path, str | None]:
    """(label, path, commit) of ``LABEL=PATH[@COMMIT]``. Raises SystemExit on bad form."""
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise SystemExit(f"--wmx {text!r}: write LABEL=PATH (a run folder or a metrics.csv), "
                         "e.g. --wmx bfloat16=runs/<run>")
    path, _, commit = rest.partition("@")
    return label, Path(path), commit or None


def wmx_arm(path: Path, commit: str | None) -> tuple[list[dict[str, str]], str | None]:
    """(train rows, commit) of a wmx run folder or metrics.csv."""
    if path.is_dir():
        if commit is None:
            commit = trained_where(path)[0]
        path = path / "metrics.csv"
    return read_train_rows(path), commit


def pooled_arm(label: str, parts: list[tuple[Path, str | None]]
               ) -> tuple[list[dict[str, str]], str | None]:
    """(train rows, commit) of one arm from its runs (`wmx_arm` each): the rows of all,
    the commit the runs share, or their distinct commits joined by "+" in the runs'
    order. Raises SystemExit when two runs hold the same seed."""
    rows, commits, where = [], [], {}
    for path, commit in parts:
        r, c = wmx_arm(path, commit)
        seeds = {int(x["seed"]) for x in r}
        twice = sorted(seeds & set(where))
        if twice:
            raise SystemExit(f"--wmx {label}: seed(s) {twice} in both {where[twice[0]]} and "
                             f"{path}; runs pooled under one label must hold different seeds")
        where.update({sd: path for sd in seeds})
        rows += r
        if c not in commits:
            commits.append(c)
    known = [c for c in commits if c]
    return rows, ("+".join(known) if known else None)


def _short(commit: str) -> str:
    """A commit (or "+"-joined commits) in 7-character form."""
    return "+".join(c[:7] for c in commit.split("+"))


def record_runs(p: Path) -> tuple[list[dict], Path]:
    """(its official runs, the csv of its official rows) of an earlier comparison's
    ``<out>.json``. Raises SystemExit naming a record that is unreadable, has no official
    runs (one made of metrics.csv files keeps no rows) or lacks that csv."""
    try:
        record = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{p}: unreadable ({type(e).__name__}: {e}); give an <out>.json of "
                         "this script, a run folder or a metrics.csv") from None
    official = record.get("official") if isinstance(record, dict) else None
    runs = official.get("runs") if isinstance(official, dict) else None
    if not isinstance(runs, list):
        raise SystemExit(f"{p}: not a comparison record (no official.runs); give an "
                         "<out>.json of this script, a run folder or a metrics.csv")
    if not runs:
        raise SystemExit(f"{p}: a comparison record with no official runs (made of "
                         "metrics.csv files, whose rows it does not keep); give those "
                         "metrics.csv files")
    csv_path = p.with_name(p.stem + "_official_metrics.csv")
    if not csv_path.is_file():
        raise SystemExit(f"{p}: {csv_path.name} (its official rows) is missing beside it; "
                         "give the official run folders it was made from")
    return runs, csv_path


def official_runs(paths: list[Path]) -> tuple[list[dict[str, str]], list[dict], list[dict]]:
    """(train rows of all seeds, the raw official summaries found, the runs kept by earlier
    comparisons) of --official arguments: run folders, metrics.csv files, or an earlier
    comparison's ``<out>.json`` (`record_runs`: its runs, in `summary_of`'s form, and the
    rows of the ``<out>_official_metrics.csv`` beside it)."""
    rows, summaries, kept = [], [], []
    for p in paths:
        if p.suffix == ".json" and not p.is_dir():
            runs, p = record_runs(p)
            kept += runs
        elif p.is_dir():
            s = p / "official_summary.json"
            if s.is_file():
                summaries.append(json.loads(s.read_text()))
            p = p / "metrics.csv"
        rows += read_train_rows(p)
    return rows, summaries, kept


def summary_of(s: dict) -> dict:
    """The parts of an official summary the JSON keeps: config, steps, calls, and the
    median training rate (env steps/s after the first training step) of the calls that
    trained longer than `MIN_RATE_S`."""
    calls = s.get("calls") or []
    rates = [c["after_first_train"]["env_steps_per_s"] for c in calls
             if c.get("after_first_train") and c["after_first_train"]["s"] > MIN_RATE_S]
    return {"config": s.get("config"), "official_commit": s.get("official_commit"),
            "env_steps": s.get("env_steps"), "train_steps": s.get("train_steps"),
            "wall_s": s.get("wall_s"),
            "env_steps_per_s_training": (float(np.median(rates)) if rates else None),
            "devices": sorted({d for c in calls for d in c.get("devices", [])}),
            "jax": sorted({c["jax"] for c in calls if c.get("jax")}),
            "calls": [{k: c.get(k) for k in ("stop", "wall_s", "env_steps_start",
                                              "env_steps_end", "until_first_train_s")}
                      for c in calls]}


def plot(task: str, arms: dict[str, Curve], official: Curve,
         published: dict[int, tuple[float, float, float]], path: Path,
         official_label: str = "official DreamerV3") -> None:
    """Seed mean (line) and range (band) of each wmx arm (labelled by its key) and of the
    official agent at the points where all their seeds logged (`complete`), and the
    ``published`` points given (markers, their seeds' range as error bars)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot(1, 1, 1)
    colours = ["#1f77b4", "#17becf", "#2ca02c", "#9467bd"]
    series = [(k, v, colours[i % len(colours)]) for i, (k, v) in enumerate(arms.items())]
    series.append((official_label, official, "#d62728"))
    for label, c, colour in series:
        c = complete(c)
        if not c:
            continue
        xs = np.array(list(c), float)
        vals = [np.array(list(s.values()), float) for s in c.values()]
        n = max(len(v) for v in vals)
        ax.plot(xs, [v.mean() for v in vals], "o-", ms=3, color=colour,
                label=f"{label} ({n} seeds: mean, range)")
        ax.fill_between(xs, [v.min() for v in vals], [v.max() for v in vals], color=colour,
                        alpha=0.15)
    pub = list(published.items())
    if pub:
        px = [x for x, _ in pub]
        py = [p[0] for _, p in pub]
        yerr = np.array([[p[0] - p[1] for _, p in pub], [p[2] - p[0] for _, p in pub]])
        ax.errorbar(px, py, yerr=yerr, fmt="s", ms=4, capsize=2, color="#7f7f7f",
                    label="published (5 seeds: mean, range)")
    ax.set_title(f"DreamerV3 online, {task}: training episodes", fontsize=10)
    ax.set_xlabel("env steps", fontsize=9)
    ax.set_ylabel("episode return", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              frameon=False)             # below the axes: the curves fill the whole box
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def json_curve(c: Curve) -> dict[str, dict[str, float]]:
    """A `Curve` with string keys, as JSON holds it: {env steps: {seed: return}}."""
    return {str(x): {str(k): v for k, v in seeds.items()} for x, seeds in c.items()}


def write_official_csv(rows: list[dict[str, str]], path: Path) -> None:
    """The official train rows (all seeds, their columns) as one csv."""
    cols = list(rows[0])
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="reacher-easy", help="the DMC task (default reacher-easy)")
    p.add_argument("--official", nargs="+", type=Path, required=True,
                   help="official runs: folders of official_dreamerv3.py --out, metrics.csv "
                        "files, or an earlier comparison's <out>.json (its runs, and the "
                        "rows of its <out>_official_metrics.csv)")
    p.add_argument("--wmx", action="append", required=True, metavar="LABEL=PATH[@COMMIT]",
                   help="a wmx arm (repeatable): a run folder or metrics.csv; runs "
                        "under one label are pooled (different seeds)")
    p.add_argument("--judge", help="the label of the arm judged (default: the first --wmx)")
    p.add_argument("--until", type=int, default=64_000,
                   help="env steps up to which wmx must be inside the official range")
    p.add_argument("--threshold", type=float, default=300.0,
                   help="return wmx's mean must reach by --by (default 300)")
    p.add_argument("--by", type=int, default=50_000, help="env steps of --threshold")
    p.add_argument("--match", type=int, default=1000,
                   help="env steps points are rounded to before matching (default 1,000)")
    p.add_argument("--judge-published", action="store_true",
                   help="make the published range part of passed (default: reported only)")
    p.add_argument("--chip", help="the accelerator the runs trained on, for the record "
                   "(default: the official summaries' devices)")
    p.add_argument("--out", type=Path, required=True,
                   help="prefix of the outputs: <out>.json, <out>.png, <out>_official_metrics.csv")
    a = p.parse_args(argv)
    arms_in = [parse_arm(t) for t in a.wmx]
    labels = list(dict.fromkeys(lab for lab, _, _ in arms_in))     # in first-given order
    judged = a.judge or labels[0]
    if judged not in labels:
        raise SystemExit(f"--judge {judged}: not a --wmx label; give one of {labels}")
    off_rows, summaries, kept = official_runs(a.official)
    try:
        official = train_curve(off_rows, a.match)
        arms, commits = {}, {}
        for lab in labels:
            rows, commits[lab] = pooled_arm(lab, [(path, commit) for other, path, commit
                                                  in arms_in if other == lab])
            arms[lab] = train_curve(rows, a.match)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    published = published_ranges(a.task)
    readings = {lab: judge(c, official, published, a.until, a.threshold, a.by)
                for lab, c in arms.items()}
    official_reading = judge(official, official, published, a.until, a.threshold, a.by)
    runs = [summary_of(s) for s in summaries] + kept
    top = max([*official, *(x for c in arms.values() for x in c)])
    shown = {x: v for x, v in published.items() if x <= published_bin(top)}
    result = {
        "task": a.task, "chip": a.chip or sorted({d for r in runs for d in r["devices"]}),
        "criterion": {"until": a.until, "threshold": a.threshold, "by": a.by,
                      "match": a.match, "judge_published": a.judge_published,
                      "published_bin": PUBLISHED_BIN},
        "judged": judged,
        "wmx": {lab: {"commit": commits[lab],
                      "curve": json_curve(arms[lab]),
                      "reading": readings[lab]} for lab in labels},
        "official": {"curve": json_curve(official),
                     "threshold": official_reading["threshold"],
                     "within_published": official_reading["within_published"],
                     "runs": runs},
        "published": {"source": reference_source("dreamerv3"),
                      "points": {str(x): list(v) for x, v in shown.items()}},
        "passed": verdict(readings[judged], a.judge_published),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if runs:
        write_official_csv(off_rows, a.out.with_name(a.out.name + "_official_metrics.csv"))
    dtypes = sorted({(r["config"] or {}).get("compute_dtype") or "" for r in runs} - {""})
    official_label = " ".join(["official DreamerV3"] + sorted(
        {(r["official_commit"] or "")[:7] for r in runs} - {""}) + dtypes)
    plot(a.task, {" ".join(["wmx", lab] + ([_short(commits[lab])] if commits[lab] else [])): c
                  for lab, c in arms.items()},
         official, shown, a.out.with_name(a.out.name + ".png"), official_label)
    tmp = a.out.with_name(a.out.name + ".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(a.out.with_name(a.out.name + ".json"))
    r = readings[judged]
    print(f"[compare] {a.task}: wmx {judged} inside the official range at "
          f"{sum(p['ok'] for p in r['within_official']['points'])}/"
          f"{len(r['within_official']['points'])} points; best mean by {a.by}: "
          f"{r['threshold']['best']}; passed {result['passed']}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
