"""The offline checks' source runs: finished single-task ``train_online`` runs, their
episode sets and final returns (`offline_check` pools them into the check's dataset).

A source is a run's directory, or ``RUN_DIR@N``: the run as it stood at N env steps
(agent steps x action repeat, metrics.csv's ``env_steps``). Such a source adds, per seed,
the prefix of the run's episode set that its first N env steps collected (a set holds
its seed's episodes in collection order: `wmx.train_online.episode_export`), and its
final return is each seed's eval row at env step N; the run's own sets stay as they are.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np


def split_source(source) -> tuple[str, int | None]:
    """A ``--sources`` entry as (run directory, env steps N or None for the whole run).

    Args:
        source: ``RUN_DIR`` or ``RUN_DIR@N`` (str or Path; an ``@`` in a folder above
            the run's is part of the path).

    Returns:
        (``RUN_DIR``, N) with N > 0, or (``RUN_DIR``, None).

    Raises:
        ValueError (one line): the text after ``@`` is not a whole number > 0.
    """
    text = str(source).rstrip("/")
    head, at, tail = text.rpartition("@")
    if not at or "/" in tail:
        return text, None
    try:
        n = int(tail)
    except ValueError:
        n = None
    if n is None or n <= 0:
        raise ValueError(f"source {text}: the env steps after '@' must be a whole number "
                         f"> 0, got {tail!r}")
    return head, n


def source_entry(home: Path, source) -> str:
    """A ``--sources`` entry as benchmark.json records it: its run's `home_relative` path,
    with its ``@N`` kept (a resume reproduces the source). Raises `split_source`'s
    ValueError."""
    run, n = split_source(source)
    return home_relative(home, run) + ("" if n is None else f"@{n}")


def source_run(source) -> dict:
    """Task, episode sets and final return of one finished train_online run, whole or as
    it stood at N env steps. Reads the run's config.json, summary.json and metrics.csv
    only (a packed home folder has no episode sets).

    Args:
        source: the run's directory, or ``RUN_DIR@N`` (`split_source`).

    Returns:
        {"run_dir": the run's absolute directory, "source": it with ``@N`` when given,
        "task", "episode_length" (the run's --episode-length override or None),
        "env_steps": N, else the run's last env step (None without an env_steps column),
        "final_return_per_seed": {seed: each seed's last eval return, or at N its eval
        return at env step N}, "final_return": their mean, "seeds" and "episode_sets":
        the run's seeds and exported sets in seed order (whole; `source_episode_sets`
        gives what a source pools), "episodes_at": at N, {seed: episodes collected by
        then, its train row's ``episodes``}, else None}.

    Raises:
        SystemExit: no config.json. ValueError (one line): ``@`` not followed by a whole
        number > 0, the run unfinished, no exported sets, no metrics.csv, no eval row; at N: N beyond
        the run's last env step, or no eval row at N (naming the env steps that have).
    """
    run, at = split_source(source)
    run_dir = Path(run).expanduser().resolve()
    where = f"source run {run_dir}" + ("" if at is None else f"@{at}")
    if not (run_dir / "config.json").is_file():
        hint = (f" (read as {run_dir.name}@{at}; a run folder whose name holds '@' must "
                "be renamed)" if at is not None and
                (run_dir.parent / f"{run_dir.name}@{at}").is_dir() else "")
        raise SystemExit(f"source run {run_dir} not found (no config.json){hint}: a home "
                         "folder copied elsewhere needs its source runs' config.json, "
                         "summary.json and metrics.csv under runs/")
    cfg = json.loads((run_dir / "config.json").read_text())
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ValueError(f"source run {run_dir} is not finished (no summary.json); finish it "
                         "with train_online --resume first")
    sets = json.loads(summary_path.read_text()).get("episode_sets") or {}
    if not sets:
        raise ValueError(f"source run {run_dir} exported no episode sets")
    if not (run_dir / "metrics.csv").is_file():
        raise ValueError(f"source run {run_dir} has no metrics.csv; copy the run's "
                         "metrics.csv beside its config.json")
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    evals = [r for r in rows if r["kind"] == "eval"]
    if not evals:
        raise ValueError(f"source run {run_dir} has no eval row in metrics.csv")
    last_step = max((int(r["env_steps"]) for r in rows if r.get("env_steps")), default=None)
    episodes_at = None
    if at is None:
        final = {r["seed"]: float(r["return"]) for r in evals}   # rows in env-step order
    else:
        if last_step is None:
            raise ValueError(f"{where}: its metrics.csv has no env_steps column")
        if at > last_step:
            raise ValueError(f"{where}: beyond the run's last env step {last_step}; give "
                             f"0 < N <= {last_step}")
        final = {r["seed"]: float(r["return"]) for r in evals if int(r["env_steps"]) == at}
        if set(final) != {r["seed"] for r in evals}:
            points = sorted({int(r["env_steps"]) for r in evals})
            raise ValueError(f"{where}: no eval row at env step {at} for every seed; its eval "
                             f"rows are at env steps {', '.join(map(str, points))}: give one "
                             "of them after '@'")
        episodes_at = {r["seed"]: int(r["episodes"]) for r in rows
                       if r["kind"] == "train" and r.get("episodes")
                       and int(r["env_steps"]) == at}
    seeds = sorted(sets, key=int)
    return {"run_dir": str(run_dir), "source": str(run_dir) + ("" if at is None else f"@{at}"),
            "task": cfg["task"], "episode_length": cfg.get("episode_length"),
            "env_steps": last_step if at is None else at,
            "final_return_per_seed": final,
            "final_return": float(np.mean(list(final.values()))),
            "seeds": seeds, "episode_sets": [sets[k] for k in seeds],
            "episodes_at": episodes_at}


def source_episode_sets(run: dict, home: Path) -> list[str]:
    """The episode sets a source (a `source_run`) adds to the check's dataset.

    A whole run adds its exported sets, as ``home``'s store holds them (the build reads
    them there; summary.json's paths are where the run wrote them, perhaps another
    home). ``RUN_DIR@N`` adds, per seed, the prefix of its
    set holding the episodes collected by env step N, written into ``home``'s store
    (`wmx.episode_sets.episode_set.write_prefix_set`; content-addressed, so writing it
    again is a no-op), from the run's set there: an episode is T x action repeat env
    steps (the set's task info), so the prefix is its first N // (T x action repeat)
    episodes, checked against the run's train row at N (its ``episodes``) when there
    is one.

    Args:
        run: a `source_run` result.
        home: the check's home folder (its ``episodes/`` holds the run's sets).

    Returns:
        The sets' directories, in the run's seed order.

    Raises:
        ValueError (one line): a set of the run is not in ``home``'s store, N is not a
        whole number of episodes, or the episode count disagrees with the train row.
    """
    from wmx.datasets.store import Store
    from wmx.episode_sets.episode_set import write_prefix_set
    from wmx.schemas.manifest import EpisodeSetManifest
    store, n, out = Store(home), run["env_steps"], []
    for seed, path in zip(run["seeds"], run["episode_sets"]):
        own = store.episode_set_path(Path(path).parent.name, Path(path).name)
        if not (own / "manifest.json").is_file():
            raise ValueError(f"source {run['source']}: its seed {seed}'s episode set "
                             f"{own.parent.name}/{own.name[:10]}.. is not in "
                             f"{store.episodes_dir}")
        if run["episodes_at"] is None:
            out.append(str(own))
            continue
        task = EpisodeSetManifest.load(own).task
        per = task.env_steps_per_episode
        count, have = n // per, run["episodes_at"].get(seed)
        if n % per or (have is not None and have != count):
            raise ValueError(f"source {run['source']}: env step {n} is not the end of an "
                             f"episode of {per} env steps ({task.episode_length} agent steps "
                             f"x action repeat {task.action_repeat}; seed {seed}'s train row "
                             f"counts {have} episodes)")
        out.append(str(write_prefix_set(store, own, count)))
    return out


def pooled_sources(runs: list[dict], home: Path | None = None) -> dict[str, dict]:
    """Per task (mt30 order): the sources (``runs``: `source_run` results), their episode
    sets (with ``home``: what each adds to the dataset, `source_episode_sets`, writing
    a ``RUN_DIR@N`` source's prefix sets; without: the runs' exported sets, for a check
    that builds nothing), env steps, and the source final return (mean over every seed
    of the task's sources)."""
    from wmx.envs.registry import task_names
    out: dict[str, dict] = {}
    for r in runs:
        t = out.setdefault(r["task"], {"runs": [], "episode_sets": [], "env_steps": [],
                                       "per_seed": []})
        t["runs"].append(r["source"])
        t["episode_sets"] += (r["episode_sets"] if home is None else
                              source_episode_sets(r, home))
        t["env_steps"].append(r["env_steps"])
        t["per_seed"] += list(r["final_return_per_seed"].values())
    order = task_names()
    return {k: {**v, "final_return": float(np.mean(v["per_seed"]))}
            for k, v in sorted(out.items(), key=lambda kv: order.index(kv[0]))}


def home_relative(home: Path, run_dir) -> str:
    """A source run's path as benchmark.json records it: relative to ``home`` when inside
    it (so a home folder copied to another machine resumes there), else absolute."""
    path = Path(run_dir).expanduser().resolve()
    try:
        return str(path.relative_to(Path(home).resolve()))
    except ValueError:
        return str(path)
