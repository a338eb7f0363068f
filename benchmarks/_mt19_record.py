"""benchmarks/results/mt19_sources.json and its plot: the repository's record of the mt19 sources.

The episode sets live in a data root, outside the working tree; the repository records, per
task, which episode sets are the campaign's source (content hashes), the run
that produced them (name relative to the data root), its final returns and eval
curves per seed, the commands that produced it, the chip and the wmx commit, and
where its bundle is kept (``archive``: blobs in the repository's history,
`_mt19_archive`).
`entry_of` builds a task's entry from an ingested run, `check` validates the
file against `SCHEMA`, `plot` draws the 19 panels beside TD-MPC2's published
points (wmx/evaluate/reference).
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from _mt19_archive import OID, entries_ok

SCHEMA = "wmx.mt19_sources/1"
FILE = "mt19_sources.json"
PLOT = "mt19_sources.png"

ENTRY_KEYS = {
    "target_env_steps": int, "floor_env_steps": int, "done": bool, "run": str, "agent": str,
    "preset": str, "seeds": list, "env_steps": int, "episode_sets": list, "final_return": dict,
    "final_return_env_steps": int, "final_return_mean": float, "eval_curve": dict,
    "published_tdmpc2": (dict, type(None)), "command": str, "campaign_commands": list,
    "calls": list, "chip": str, "jax": str, "wmx_commit": str, "run_wall_s": float,
    "ingested": str,
}
"""The keys of a task's entry and their JSON types (`check`). ``target_env_steps``: the
task's aim when ingested; ``floor_env_steps``: the least its source may have (the aim when
the campaign fixed it); ``done``: ``env_steps`` (what the run trained: the aim, or a size
fitted to the device time) is at least the floor."""

SET_KEYS = {"seed": int, "content_hash": str, "episodes": int, "env_steps": int,
            "last10_mean_return": float}
"""The keys of one episode set of an entry."""

REGENERATION_KEYS = {"run": str, "wmx_commit": str, "chip": str, "jax": str, "ingested": str,
                     "identical": bool, "final_return_mean": float, "replaced": (dict, type(None))}
"""The keys of one event of an entry's optional ``regenerations`` list (`regenerated`): a
run that trained the recorded source again at its env steps (``next --regenerate``), whether
its episode sets are the recorded ones (content hashes, seed by seed), and, when they are
not, what the entry named before (``replaced``, `REPLACED_KEYS`; None when identical)."""

REPLACED_KEYS = {"run": str, "wmx_commit": str, "chip": str, "episode_sets": dict,
                 "final_return_mean": float}
"""The keys of a regeneration event's ``replaced``: the run the entry named before, its
commit, chip, episode sets ({seed: content hash}) and final return; and, when that entry
had them, its `ARCHIVED_KEYS`."""

ARCHIVE_KEYS = {"file": str, "blob": str, "sha256": str, "bytes": int}
"""The keys of one file of an entry's optional ``archive`` (`_mt19_archive.archive`): the
bundle file's name, its git blob id, its sha256 (hex) and size in bytes."""

ARCHIVED_KEYS = ("archive", "archive_commit")
"""The optional keys of an entry (and of a ``replaced``) whose bundle is kept in the
repository's history: ``archive``, its files in order (`ARCHIVE_KEYS`), and
``archive_commit``, the commit whose tree holds them (a rebase may change that id; the
blob ids stay)."""


def empty(targets: dict[str, int], default_target: int, regenerate: list[str]) -> dict[str, Any]:
    """A record with no source yet.

    Args:
        targets: env steps per seed of the tasks whose target is not ``default_target``.
        default_target: env steps per seed of the other tasks.
        regenerate: the commands that make the record again.

    Returns:
        The record (`SCHEMA`), ``tasks`` empty.
    """
    return {"schema": SCHEMA, "taskset": "mt19",
            "description": "The mt19 source runs (train_online, TD-MPC2 --preset paper) whose "
                           "episode sets pipelines/build_mt19.py pools: per task the episode "
                           "sets' content hashes, the run (relative to the data root), its "
                           "final returns and eval curves per seed, and how it was produced. "
                           "Written by benchmarks/mt19_campaign.py ingest.",
            "default_target_env_steps": default_target, "targets": dict(targets),
            "regenerate": list(regenerate), "tasks": {}}


def load(path: Path) -> dict[str, Any] | None:
    """Read a record.

    Args:
        path: the record's file.

    Returns:
        The record, or None when there is no file.

    Raises:
        ValueError: one line for a file that is not a record of `SCHEMA` (`check`).
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e}); restore it from git") from None
    problems = check(data)
    if problems:
        raise ValueError(f"{path}: {problems[0]}; restore it from git")
    return data


def write(path: Path, data: dict[str, Any]) -> None:
    """Write a record atomically (a temporary beside it, then a rename).

    Args:
        path: the record's file.
        data: the record.

    Raises:
        ValueError: the record breaks `SCHEMA` (nothing written).
    """
    from wmx.runs.host import write_json_atomic
    problems = check(data)
    if problems:
        raise ValueError(f"refusing to write {path}: {problems[0]}")
    write_json_atomic(Path(path), data)


def _type_ok(v: Any, t) -> bool:
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, t)


def check(data: Any) -> list[str]:
    """Validate a record against `SCHEMA`.

    Args:
        data: the parsed JSON.

    Returns:
        The problems, one line each ([] when it holds): the top-level keys, every entry's
        keys and types (`ENTRY_KEYS`, `SET_KEYS`), one episode set per seed, the eval
        curve with one return per seed at every point, a final return per seed, a floor of
        at most the target, ``done`` agreeing with the env steps and the floor, the
        optional ``regenerations`` events as `regenerated` writes them (`_event_ok`).
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return [f"schema is not {SCHEMA!r}"]
    out = []
    for k, t in (("taskset", str), ("default_target_env_steps", int), ("targets", dict),
                 ("regenerate", list), ("tasks", dict)):
        if not _type_ok(data.get(k), t):
            out.append(f"top-level {k!r} missing or not a {t.__name__}")
    for task, e in (data.get("tasks") or {}).items():
        if not isinstance(e, dict):
            out.append(f"tasks[{task!r}] is not an object")
            continue
        missing = sorted(set(ENTRY_KEYS) - set(e))
        if missing:
            out.append(f"tasks[{task!r}] lacks {missing}")
            continue
        for k, t in ENTRY_KEYS.items():
            if not _typed(e[k], t):
                out.append(f"tasks[{task!r}][{k!r}] has the wrong type")
        seeds = [str(s) for s in e["seeds"]]
        set_seeds = []
        for s in e["episode_sets"]:
            if not _keys_ok(s, SET_KEYS):
                out.append(f"tasks[{task!r}]: an episode set is not {sorted(SET_KEYS)}")
                continue
            set_seeds.append(str(s["seed"]))
            if len(s["content_hash"]) != 64:
                out.append(f"tasks[{task!r}]: content hash {s['content_hash']!r} is not 64 hex")
        if sorted(set_seeds) != sorted(seeds):
            out.append(f"tasks[{task!r}]: episode sets of seeds {set_seeds}, run seeds {seeds}")
        if sorted(e["final_return"]) != sorted(seeds):
            out.append(f"tasks[{task!r}]: final_return is not one value per seed")
        curve = e["eval_curve"]
        xs, rets = curve.get("env_steps"), curve.get("returns")
        if not isinstance(xs, list) or not isinstance(rets, dict) or sorted(rets) != sorted(
                seeds) or any(len(v) != len(xs) for v in rets.values()):
            out.append(f"tasks[{task!r}]: eval_curve is not env_steps + returns per seed of "
                       "the same length")
        if not all(_type_ok(e[k], int) for k in ("env_steps", "target_env_steps",
                                                  "floor_env_steps")):
            continue                              # its types are reported above
        if e["floor_env_steps"] > e["target_env_steps"]:
            out.append(f"tasks[{task!r}]: floor_env_steps is above target_env_steps")
        if e["done"] != (e["env_steps"] >= e["floor_env_steps"]):
            out.append(f"tasks[{task!r}]: done disagrees with env_steps and the floor")
        if any(k in e for k in ARCHIVED_KEYS) and not _archived_ok(e):
            out.append(f"tasks[{task!r}]: archive is not a list of {sorted(ARCHIVE_KEYS)} "
                       "(a plain file name, a git object id, a 64-hex sha256) with an "
                       "archive_commit")
        regens = e.get("regenerations", [])
        if not isinstance(regens, list) or not all(map(_event_ok, regens)):
            out.append(f"tasks[{task!r}]: regenerations is not a list of "
                       f"{sorted(REGENERATION_KEYS)} (replaced: None when identical, else "
                       f"{sorted(REPLACED_KEYS)})")
    return out


def _typed(v: Any, t) -> bool:
    """Whether ``v`` is of the JSON type ``t`` (`_type_ok`), or of one of a tuple's."""
    return any(_type_ok(v, x) for x in (t if isinstance(t, tuple) else (t,)))


def _keys_ok(d: Any, keys: dict[str, Any]) -> bool:
    """Whether ``d`` is an object of exactly ``keys``, each of its JSON type (`_typed`)."""
    return isinstance(d, dict) and set(d) == set(keys) and all(
        _typed(d[k], t) for k, t in keys.items())


def _archived_ok(d: dict[str, Any]) -> bool:
    """Whether ``d`` holds both `ARCHIVED_KEYS` as `_mt19_archive.archive` gives them: files
    of `ARCHIVE_KEYS` (a plain name each, once) and the commit."""
    files, commit = d.get("archive"), d.get("archive_commit")
    return (entries_ok(files) and all(set(f) == set(ARCHIVE_KEYS) for f in files)
            and isinstance(commit, str) and bool(OID.match(commit)))


def _event_ok(r: Any) -> bool:
    """Whether ``r`` is a regeneration event as `regenerated` writes it: `REGENERATION_KEYS`;
    ``replaced`` None when ``identical``, else `REPLACED_KEYS` with a 64-hex content hash
    per seed (and `ARCHIVED_KEYS` when the replaced entry had an archive)."""
    if not _keys_ok(r, REGENERATION_KEYS):
        return False
    rep = r["replaced"]
    if r["identical"]:
        return rep is None
    if not isinstance(rep, dict):
        return False
    has = [k for k in ARCHIVED_KEYS if k in rep]
    plain = {k: v for k, v in rep.items() if k not in ARCHIVED_KEYS}
    return (_keys_ok(plain, REPLACED_KEYS) and (not has or _archived_ok(rep)) and all(
        isinstance(h, str) and len(h) == 64 for h in rep["episode_sets"].values()))


def _hashes(entry: dict[str, Any]) -> dict[str, str]:
    return {str(s["seed"]): s["content_hash"] for s in entry["episode_sets"]}


def regenerated(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A task's entry after a run that trained its recorded source again (same env steps,
    another run), and what happened, in words.

    The same episode sets (every seed's content hash equal) keep the recorded entry, with
    the run added to its ``regenerations``; other sets replace it by the new run's entry
    (the sets the data root now holds), the recorded run kept in the event's
    ``replaced`` (with its ``archive`` and ``archive_commit`` when it had them; the new
    entry gets its own archive from the ingest). A run the entry's regenerations already
    name, as a regeneration or as the run one replaced (the recorded source's bundle
    ingested again), changes nothing.

    Args:
        old: the recorded entry.
        new: the entry of the new run (`entry_of`), of the same env steps.

    Returns:
        (the entry to record, a sentence for the ingest's log).
    """
    prior = list(old.get("regenerations", []))
    if any(r["run"] == new["run"] for r in prior):
        return old, f"{new['run']} is already recorded as a regeneration"
    if any(r["replaced"] is not None and r["replaced"]["run"] == new["run"] for r in prior):
        return old, (f"{new['run']} is already recorded as the run a regeneration replaced; "
                     f"the entry keeps {old['run']}")
    same = _hashes(old) == _hashes(new)
    event = {"run": new["run"], "wmx_commit": new["wmx_commit"], "chip": new["chip"],
             "jax": new["jax"], "ingested": new["ingested"], "identical": same,
             "final_return_mean": new["final_return_mean"], "replaced": None}
    if same:
        return {**old, "regenerations": prior + [event]}, (
            f"{new['run']} trained the recorded source again: the same episode sets (content "
            f"hashes equal seed by seed); the entry keeps {old['run']}")
    event["replaced"] = {"run": old["run"], "wmx_commit": old["wmx_commit"], "chip": old["chip"],
                         "episode_sets": dict(sorted(_hashes(old).items())),
                         "final_return_mean": old["final_return_mean"],
                         **{k: old[k] for k in ARCHIVED_KEYS if k in old}}
    return {**new, "regenerations": prior + [event]}, (
        f"{new['run']} trained the recorded source again with other episode sets (final "
        f"return {new['final_return_mean']:.1f} against {old['final_return_mean']:.1f}); the "
        f"entry now names it, {old['run']} is kept under regenerations")


def eval_rows(metrics_csv: Path) -> dict[str, dict[int, float]]:
    """The eval returns of a run.

    Args:
        metrics_csv: the run's metrics.csv.

    Returns:
        {seed (str): {env steps: mean eval return}} of its rows of kind eval.
    """
    out: dict[str, dict[int, float]] = {}
    with Path(metrics_csv).open(newline="") as f:
        for r in csv.DictReader(f):
            if r.get("kind") == "eval" and r.get("return") not in (None, ""):
                out.setdefault(str(r["seed"]), {})[int(float(r["env_steps"]))] = \
                    float(r["return"])
    return out


def entry_of(home: Path, run: str, record: dict[str, Any], target: int, floor: int,
             ingested: str) -> dict[str, Any]:
    """The task entry of an ingested campaign run.

    Args:
        home: the data root the run and its episode sets are in.
        run: the run's name (``home/runs/<run>``).
        record: the bundle's campaign record (commands, chip, jax, code version, calls).
        target: the task's aim (env steps per seed).
        floor: the least env steps per seed of its source (done when the run trained at
            least that: a run fitted below the aim counts).
        ingested: the ingest time (ISO 8601).

    Returns:
        The entry (`ENTRY_KEYS`): final return per seed = its last evaluation, the eval
        curve per seed, the episode sets with their last-10 mean training return.
    """
    import numpy as np

    from wmx.evaluate.reference_curves import published_return
    from wmx.schemas.manifest import EpisodeSetManifest
    run_dir = Path(home) / "runs" / run
    cfg = json.loads((run_dir / "config.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    seeds = [int(s) for s in cfg["seeds"]]
    curves = eval_rows(run_dir / "metrics.csv")
    xs = sorted({x for c in curves.values() for x in c})
    final_x = max(xs) if xs else 0
    final = {str(s): curves.get(str(s), {}).get(final_x, float("nan")) for s in seeds}
    sets = []
    for seed, path in sorted(summary["episode_sets"].items(), key=lambda kv: int(kv[0])):
        m = EpisodeSetManifest.load(Path(path))
        sets.append({"seed": int(seed), "content_hash": m.content_hash,
                     "episodes": m.episode_count,
                     "env_steps": m.episode_count * m.task.env_steps_per_episode,
                     "last10_mean_return": float(np.mean(m.episode_returns[-10:]))})
    env_steps = int(summary["env_steps"])
    pub = published_return(cfg["task"], final_x) if cfg.get("agent") == "tdmpc2" else None
    return {"target_env_steps": int(target), "floor_env_steps": int(floor),
            "done": env_steps >= floor,
            "run": f"runs/{run}", "agent": cfg["agent"], "preset": cfg["preset"],
            "seeds": seeds, "env_steps": env_steps, "episode_sets": sets,
            "final_return": final, "final_return_env_steps": final_x,
            "final_return_mean": float(np.mean(list(final.values()))),
            "eval_curve": {"env_steps": xs,
                           "returns": {str(s): [curves.get(str(s), {}).get(x, float("nan"))
                                                for x in xs] for s in seeds}},
            "published_tdmpc2": None if pub is None else {"env_steps": final_x, "return": pub},
            "command": record.get("train_online_command", ""),
            "campaign_commands": sorted({c.get("command", "") for c in record.get("calls", [])}),
            "calls": record.get("calls", []), "chip": record.get("chip", "?"),
            "jax": record.get("jax", "?"), "wmx_commit": record.get("code_version", "?"),
            "run_wall_s": float(summary.get("wall_s", 0.0)), "ingested": ingested}


def plot(data: dict[str, Any], tasks: list[str], path: Path) -> Path:
    """Draw the record: one panel per task, the source's eval return per seed over env
    steps (seed mean and range), TD-MPC2's published points up to the larger of the
    target (the aim) and the run's env steps, the title marked with the run's env steps
    when fitted below the aim, "not done" (how far it got of the floor) or "no source
    yet".

    Args:
        data: the record.
        tasks: the panels' tasks in order (any other recorded task follows).
        path: the PNG written (atomically).

    Returns:
        ``path``.
    """
    from wmx.evaluate.plots import learning_curves
    from wmx.evaluate.reference_curves import points_up_to
    names = list(tasks) + sorted(t for t in data["tasks"] if t not in tasks)
    panels = []
    for t in names:
        e = data["tasks"].get(t)
        target = data["targets"].get(t, data["default_target_env_steps"])
        if e is None:
            xs, rets, title, top = [], [], f"{t}: no source yet", target
        else:
            xs = e["eval_curve"]["env_steps"]
            per_seed = [e["eval_curve"]["returns"][str(s)] for s in e["seeds"]]
            rets = [list(v) for v in zip(*per_seed)]
            title = (f"{t}: not done ({e['env_steps']:,}/{e['floor_env_steps']:,})"
                     if not e["done"] else
                     f"{t} ({e['env_steps']:,}; aim {e['target_env_steps']:,})"
                     if e["env_steps"] < e["target_env_steps"] else t)
            top = max(target, e["env_steps"])
        px, py, rng = points_up_to(t, top)
        panels.append({"task": title, "x": [x / 1000 for x in xs], "returns": rets,
                       "published": ([x / 1000 for x in px], py, rng,
                                     "TD-MPC2 paper (published points)")})
    tmp = Path(path).with_name(f".{Path(path).stem}.tmp.png")
    try:
        learning_curves(panels, tmp, "env steps (thousands)", title="mt19 sources: eval "
                        "return per seed (mean, range) beside TD-MPC2's published points")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)          # a failed or interrupted drawing leaves none
    return Path(path)


# ---- how the record is made again -----------------------------------------------------
def device_command(code: str, kind: str = "tpu") -> str:
    """One device call's command. Its budget counts from the Python process's start:
    540 s leaves the first call's setup.sh (installing the wheels, ~15-40 s) and the
    stop's overrun inside the 600 s of a device command.

    Args:
        code: the commit the device's copy of the tree is (WMX_CODE_VERSION).
        kind: the device machine's kind (`_device_kinds.KINDS`): its wheels' setup.sh.

    Returns:
        The command, with H for a folder in the device's /tmp and SECONDS for the
        session's device time left (the device tool's budget_left_s, less ~120 s when the
        call starts a machine).
    """
    from _device_kinds import KINDS
    return (f"{KINDS[kind].setup()} WMX_CODE_VERSION={code} timeout -k 10 575 python "
            "benchmarks/mt19_campaign.py next --home H --out \"$OUT\" --budget-s 540 "
            "--device-left-s SECONDS")


def regenerate_commands() -> list[str]:
    """How the record is made again.

    Returns:
        The commands, in order: the plan, a device call, the ingest, the restore of the
        archived sets into a new data root, a task's run alone, the dataset build.
    """
    return ["python benchmarks/mt19_campaign.py plan",
            "on the device, per call (carry .whl-tpu): " + device_command("<commit>"),
            "here, per call: python benchmarks/mt19_campaign.py ingest DIR",
            "here, on a data root without the recorded sets: python "
            "benchmarks/mt19_campaign.py restore   # the bundles kept in git history",
            "each task's run alone: its 'command' (train_online ...) with --home H",
            "here: python benchmarks/mt19_campaign.py build   # prints the dataset build "
            "(beam run pipelines/build_mt19.py --sources ...) of exactly the recorded "
            "episode sets"]
