"""The log conversion of benchmarks/official_dreamerv3.py (no official code needed).

The official run's ``scores.jsonl`` and the driver's progress records (``wmx_progress.jsonl``)
become wmx's online ``metrics.csv`` rows (`convert`, `write_metrics_csv`) and the run's
summary (`summarize`); score and progress lines that a killed call wrote past the checkpoint
its successor resumed from are dropped. `official_dreamerv3.py` imports these (training and
``--convert-only``); they need only the standard library. `fail` and the log files' names
live here too, as the driver and this module both use them.
"""
from __future__ import annotations

import csv
import io
import json
import statistics
import sys
from pathlib import Path


BASE_COLUMNS = ("seed", "kind", "agent_steps", "env_steps", "episodes", "return",
                "return_std", "updates", "wall_s")
"""wmx's online metrics.csv columns (`wmx.train_online.loop.BASE_COLUMNS`; a test keeps
them equal: this script runs where wmx's own dependencies are not installed)."""

RUN_RECORD = "wmx_run.json"
PROGRESS = "wmx_progress.jsonl"
CALLS = "wmx_calls.jsonl"


def fail(message: str) -> None:
    """Print ``message`` (one line naming the problem and the fix) and exit with status 2."""
    print(f"official_dreamerv3.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(byte offset, object) of every complete JSON line of ``path`` ([] when missing);
    a last line without its newline (a killed writer) and unreadable lines are skipped."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    out, at = [], 0
    for line in data.split(b"\n")[:-1]:
        try:
            out.append((at, json.loads(line)))
        except ValueError:
            pass
        at += len(line) + 1
    return out


def _trim_to_resumes(lines: list[tuple[int, dict]], resumes: list[tuple[int, int]]
                     ) -> list[dict]:
    """The objects of ``lines`` that the run kept: a line written before a resume (byte
    offset below the resume's) at a step past the checkpoint it resumed from belongs to
    training the run lost (the call was killed after its last save), and is dropped.

    Args:
      lines: (byte offset, object with "step") pairs in file order.
      resumes: (byte offset of the file when the call resumed, step it resumed from).
    Returns:
      The kept objects, in file order.
    """
    keep = []
    for at, obj in lines:
        step = obj.get("step")
        if step is None:
            continue
        if any(at < off and step > rstep for off, rstep in resumes):
            continue
        keep.append(obj)
    return keep


def read_progress(logdir: Path) -> tuple[list[dict], list[dict]]:
    """The driver's progress records of a run: (kept records, resume records).

    Returns ([{"event", "step", "train_steps", "wall_s", ...}] without the ones a later
    resume made void (as `_trim_to_resumes`), [{"event": "resume", "step",
    "scores_offset", "progress_offset", ...}]).
    """
    lines = _read_jsonl(Path(logdir) / PROGRESS)
    resumes = [obj for _, obj in lines if obj.get("event") == "resume"]
    cuts = [(r["progress_offset"], r["step"]) for r in resumes]
    kept = _trim_to_resumes([(at, o) for at, o in lines if o.get("event") != "resume"], cuts)
    return kept, resumes


def _interp(x: float, xs: list[float], ys: list[float]) -> float | None:
    """Piecewise-linear y at x through the sorted points (xs, ys), held flat past the ends;
    None when there are no points."""
    if not xs:
        return None
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def group_episodes(scores: list[tuple[int, float]], n_envs: int, repeat: int
                   ) -> list[list[tuple[int, float]]]:
    """Training episodes grouped as wmx logs them: the episodes that ended together.

    Args:
      scores: (logged step, score) of every episode, in the order they ended.
      n_envs: the run's envs; a group holds at most this many episodes.
      repeat: the action repeat (the logged step grows by it per env transition).
    Returns:
      Groups of (step, score), each the episodes that ended within one policy step of
      all envs (steps at most ``n_envs * repeat`` after the group's first).
    """
    groups: list[list[tuple[int, float]]] = []
    for step, score in sorted(scores, key=lambda s: s[0]):
        if groups and len(groups[-1]) < n_envs and step - groups[-1][0][0] <= n_envs * repeat:
            groups[-1].append((step, score))
        else:
            groups.append([(step, score)])
    return groups


def convert(logdir: Path, seed: int, n_envs: int, repeat: int) -> list[dict]:
    """Rows of wmx's metrics.csv (`BASE_COLUMNS`, kind "train") from an official logdir.

    Args:
      logdir: holds the official ``scores.jsonl`` and, from this driver, ``wmx_progress.jsonl``.
      seed: the run's seed (its ``seed`` column).
      n_envs: the run's envs (`group_episodes`).
      repeat: the action repeat (``agent_steps`` = ``env_steps`` / repeat).
    Returns:
      One dict per group of episodes; ``updates`` and ``wall_s`` are "" without progress
      records.
    """
    logdir = Path(logdir)
    progress, resumes = read_progress(logdir)
    cuts = [(r["scores_offset"], r["step"]) for r in resumes]
    lines = _read_jsonl(logdir / "scores.jsonl")
    kept = _trim_to_resumes(lines, cuts)
    scores = [(int(o["step"]), float(o["episode/score"])) for o in kept if "episode/score" in o]
    pts = sorted(((p["step"], p) for p in progress), key=lambda sp: sp[0])
    xs = [float(s) for s, _ in pts]
    rows, episodes = [], 0
    for group in group_episodes(scores, n_envs, repeat):
        rets = [s for _, s in group]
        step = group[-1][0]
        episodes += len(group)
        upd = _interp(step, xs, [float(p["train_steps"]) for _, p in pts])
        wall = _interp(step, xs, [float(p["wall_s"]) for _, p in pts])
        rows.append({"seed": seed, "kind": "train", "agent_steps": step // repeat,
                     "env_steps": step, "episodes": episodes,
                     "return": statistics.fmean(rets), "return_std": statistics.pstdev(rets),
                     "updates": "" if upd is None else int(round(upd)),
                     "wall_s": "" if wall is None else round(wall, 2)})
    return rows


def write_metrics_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` to ``path`` as wmx's metrics.csv (`BASE_COLUMNS`), replacing it whole.

    Args:
      path: the file to write (through a temporary and a rename).
      rows: dicts keyed by `BASE_COLUMNS` (missing keys are written empty).
    """
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, BASE_COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in BASE_COLUMNS})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buf.getvalue())
    tmp.replace(path)


def run_record(logdir: Path) -> dict | None:
    """The driver's settings of the run in ``logdir``.

    Args:
      logdir: an official logdir.
    Returns:
      Its wmx_run.json as a dict, None when absent (exits (2) when it is not JSON).
    """
    path = Path(logdir) / RUN_RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        fail(f"{path} is not JSON; remove it (the run's settings then come from the flags)")


def summarize(logdir: Path, record: dict, call: dict | None = None) -> dict:
    """The run's summary (written as official_summary.json).

    Args:
      logdir: the run's logdir (progress records, scores).
      record: its wmx_run.json settings.
      call: this call's figures (wall time, steps, rates), when one trained.
    Returns:
      {"official_commit", "config", "env_steps", "train_steps", "wall_s",
      "env_steps_per_s", "train_steps_per_s" (over the run's wall time), "episodes",
      "last_return", "calls" (one entry per training call), "this_call"}.
    """
    progress, _ = read_progress(logdir)
    last = max(progress, key=lambda p: (p["wall_s"], p["step"])) if progress else {}
    calls_path = Path(logdir) / CALLS
    calls = [o for _, o in _read_jsonl(calls_path)]
    rows = convert(logdir, record.get("seed", 0), record.get("envs") or 16,
                   record.get("action_repeat", 2))
    wall = last.get("wall_s")
    out = {"official_commit": record.get("official_commit"),
           "config": {k: record.get(k) for k in (
               "task", "official_task", "seed", "size", "compute_dtype", "envs",
               "train_ratio", "action_repeat", "batch_size", "batch_length", "platform",
               "sets")},
           "env_steps": last.get("step"), "train_steps": last.get("train_steps"),
           "wall_s": wall,
           "env_steps_per_s": (last["step"] / wall) if wall else None,
           "train_steps_per_s": (last["train_steps"] / wall) if wall else None,
           "episodes": rows[-1]["episodes"] if rows else 0,
           "last_return": rows[-1]["return"] if rows else None,
           "calls": calls}
    if call is not None:
        out["this_call"] = call
    return out
