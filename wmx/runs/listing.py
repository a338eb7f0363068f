"""What a run directory says about its run: kind, status, progress, last evaluation, size.

`wmx runs ls` / `wmx runs info` read only files (config.json, summary.json,
metrics.csv, checkpoints/*/host.json, run.lock); nothing here imports JAX or
an agent. A run is

- **online** (``train_online``: config.json has ``task``) or **offline**
  (``train_offline``: config.json has ``dataset``);
- **finished** when summary.json says so (the trainers write it last, after
  the final evaluation and the episode-set export), else **running** while a
  live process holds its lock (`wmx.runs.owner`), else **not started** when it
  has neither a checkpoint nor a metrics row (written and never trained, e.g. a
  learning check's ``--prepare-only``, or stopped inside its first chunk), else
  **interrupted** (stopped or killed before its end). ``--resume`` continues
  either, from the newest checkpoint or from the start.

Progress is counted on the run's x axis: env steps online (agent steps x
action repeat, the metrics.csv column ``env_steps``), updates offline;
``done`` is the newest metrics.csv row, which for an interrupted run may lie
past its newest checkpoint (a resume drops those rows and redoes them).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from wmx.runs.host import env_steps_at_tick
from wmx.runs.owner import Owner, probe

FINISHED, RUNNING, INTERRUPTED, NOT_STARTED = "finished", "running", "interrupted", "not started"


@dataclass(frozen=True)
class RunInfo:
    """One run directory, read.

    kind: "online" | "offline" | "?" (config.json unreadable); target:
    the task (online) or dataset ``name@hash`` (offline); unit: "env steps" |
    "updates"; done / total: progress on that axis (total from the config,
    None when unknown); last_eval: the trainer's newest evaluation (`LastEval`) or
    None; owner: the live trainer when running; checkpoints: [(step folder name,
    host.json dict)], oldest first; damaged: [(step folder name, what is wrong)] of
    the checkpoints whose host.json cannot be read; size: bytes on disk (files under
    the run, links not followed); link: where the entry leads when it is a symbolic
    link (None for a directory); aliases: the names of the links under
    ``<home>/runs`` that lead to this run (`list_runs` lists a run once).
    """

    name: str
    path: Path
    kind: str
    agent: str
    target: str
    status: str
    unit: str
    done: int
    total: int | None
    last_eval: LastEval | None
    size: int
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    owner: Owner | None = None
    checkpoints: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    error: str = ""
    damaged: list[tuple[str, str]] = field(default_factory=list)
    link: Path | None = None
    aliases: tuple[str, ...] = ()


def runs_dir(home: Path) -> Path:
    """``<home>/runs``: where the trainers create runs."""
    return Path(home) / "runs"


def list_runs(home: Path) -> list[RunInfo]:
    """Every run directory under ``<home>/runs`` (hidden names skipped: temporaries),
    sorted by name, each run once: a symbolic link to a run listed under its own name is
    that run's alias (``aliases``), a link to a run elsewhere is listed under its name
    with its ``link``. A missing ``runs/`` is an empty list."""
    root = runs_dir(home)
    try:
        entries = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except FileNotFoundError:
        return []
    by_target: dict[Path, list[Path]] = {}
    for p in entries:
        by_target.setdefault(p.resolve(), []).append(p)
    out = []
    for same in by_target.values():       # the directory itself first, then links
        same.sort(key=lambda p: (p.is_symlink(), p.name))
        r = read_run(same[0])
        out.append(dataclasses.replace(r, aliases=tuple(p.name for p in same[1:])))
    return sorted(out, key=lambda r: r.name)


def home_of_run(run_dir: str | Path) -> Path | None:
    """``<home>`` of a run directory ``<home>/runs/<name>``: from the path as given (a
    symbolic link ``<home>/runs/linked`` to a run kept elsewhere names its home), else
    from the path it resolves to; None when neither lies in a ``runs`` folder."""
    given = Path(os.path.abspath(Path(run_dir).expanduser()))
    for p in (given, given.resolve()):
        if p.parent.name == "runs":
            return p.parent.parent
    return None


def resolve_run(ref: str, home: Path) -> Path:
    """The run directory of ``ref``: a run name under ``<home>/runs`` or a path, absolute
    (a symbolic link to a run is kept as given, so `home_of_run` still finds its home).

    Raises FileNotFoundError naming both places when neither holds a
    config.json (for a folder under ``<home>/runs`` without one, which `list_runs` lists,
    saying what is wrong with its config.json)."""
    named = runs_dir(home) / ref
    for cand in (named, Path(ref).expanduser()):
        if (cand / "config.json").is_file():
            return Path(os.path.abspath(cand))
    if (named.parent == runs_dir(home) and named.is_dir()
            and not named.name.startswith(".")):                # listed by `wmx runs ls`
        raise FileNotFoundError(
            f"no run {ref!r}: {named} is listed by `wmx runs ls`, but its config.json "
            f"{config_problem(named / 'config.json')} (a start killed before writing it "
            "leaves such a folder): remove the folder, or start the run again")
    where = (f"neither {named} nor {ref} is" if named != Path(ref).expanduser() else
             f"{ref} is not")
    raise FileNotFoundError(f"no run {ref!r}: {where} a run directory (one with config.json); "
                            "list runs with `wmx runs ls`")


def _json(path: Path) -> dict[str, Any] | None:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def disk_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symbolic links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, f)):
                total += st.st_size
    return total


def read_metrics(path: Path) -> list[dict[str, str]]:
    """The complete rows of a metrics.csv (a last line without its newline, as a killed
    writer leaves it, is dropped); [] when missing or unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return []
    text = text[:text.rfind("\n") + 1]
    try:
        return [r for r in csv.DictReader(io.StringIO(text, newline="")) if None not in r]
    except csv.Error:
        return []


def as_int(v: Any) -> int | None:
    """``v`` (a csv cell or JSON value, "120" or "120.0") as an int; None when it is no
    finite number (a damaged file's "inf" too)."""
    try:
        return int(float(v))
    except (TypeError, ValueError, OverflowError):
        return None


def _derived(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config's ``derived`` block; {} when absent or not an object (a damaged file)."""
    d = cfg.get("derived")
    return d if isinstance(d, dict) else {}


def as_float(v: Any) -> float | None:
    """``v`` (a csv cell or JSON value) as a float; None when it is no number."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class LastEval(NamedTuple):
    """The newest evaluation a run's trainer logged (metrics.csv ``kind`` "eval").

    step: its x (env steps online, updates offline); metric: "return" (online) or "score"
    (offline: the mean over tasks); value: the mean over seeds; episodes: eval_mode
    episodes per seed (offline: per task and seed), None when the rows do not say; seeds:
    the seeds averaged.
    """

    step: int
    metric: str
    value: float
    episodes: int | None = None
    seeds: int = 1


def last_eval(rows: list[dict[str, str]], kind: str) -> LastEval | None:
    """The newest evaluation in metrics rows: online the mean ``return`` over seeds, offline
    the mean ``score`` of the task "mean" rows; None before the first."""
    step_col = "env_steps" if kind == "online" else "updates"
    evals = [r for r in rows if r.get("kind") == "eval" and as_int(r.get(step_col)) is not None]
    if not evals:
        return None
    step = max(as_int(r[step_col]) for r in evals)
    at = [r for r in evals if as_int(r[step_col]) == step]
    per_task = [r for r in at if r.get("task") != "mean"]     # online rows have no task
    counts = {as_int(r.get("episodes")) for r in per_task} - {None}
    episodes = counts.pop() if len(counts) == 1 else None
    if kind == "offline":
        at = [r for r in at if r.get("task") == "mean"]
    metric = "return" if kind == "online" else "score"
    vals = [as_float(r.get(metric)) for r in at]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return LastEval(step, metric, sum(vals) / len(vals), episodes, len(vals))


def _online_env_steps(cfg: dict[str, Any], host: dict[str, Any]) -> int | None:
    """Env steps of an online run at a checkpoint's ``next_tick``, inside a round too
    (ticks of a round: T + 1, the last one emits no env step); None when the config
    lacks the numbers."""
    derived, tick, n_envs = _derived(cfg), as_int(host.get("next_tick")), \
        as_int(cfg.get("n_envs"))
    T, repeat = as_int(derived.get("episode_length")), as_int(derived.get("action_repeat"))
    if None in (tick, n_envs, T, repeat):
        return None
    return env_steps_at_tick(tick, T, n_envs, repeat)


def checkpoints(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """[(folder name, host.json)] of the run's complete checkpoints, oldest first (those
    whose host.json cannot be read left out: `damaged_checkpoints`)."""
    return _checkpoint_entries(run_dir)[0]


def damaged_checkpoints(run_dir: Path) -> list[tuple[str, str]]:
    """[(folder name, what is wrong)] of the run's checkpoints with a host.json that is not
    a readable JSON object (evaluate and ``--resume`` use an older one)."""
    return _checkpoint_entries(run_dir)[1]


def _checkpoint_entries(run_dir: Path):
    root = Path(run_dir) / "checkpoints"
    try:
        names = sorted((p.name for p in root.iterdir() if p.name.isdigit()), key=int)
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    out, damaged = [], []
    for n in names:
        if not (root / n / "host.json").is_file():
            continue                                  # not complete: not a checkpoint
        why = config_problem(root / n / "host.json")
        if why is None:
            out.append((n, _json(root / n / "host.json")))
        else:
            damaged.append((n, f"host.json {why}"))
    return out, damaged


def config_problem(path: Path) -> str | None:
    """What is wrong with a JSON file that must hold an object (a run's config.json, a
    checkpoint's host.json): "is missing", "is not valid JSON (<parser's message>)",
    "cannot be read (...)", "is not a JSON object"; None when it reads."""
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return "is missing"
    except ValueError as e:
        return f"is not valid JSON ({e})"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None if isinstance(d, dict) else "is not a JSON object"


def damaged_config_message(run_dir: Path) -> str | None:
    """The one line `evaluate`, ``--resume`` and `wmx runs info` give for a run whose
    config.json does not read, None when it does."""
    why = config_problem(Path(run_dir) / "config.json")
    if why is None:
        return None
    return (f"{Path(run_dir) / 'config.json'} {why}: the run directory is damaged (its "
            "config cannot be rebuilt); put config.json back from a copy, or start a new run")


def read_run(run_dir: Path) -> RunInfo:
    """Read one run directory (never raises for a damaged one: ``kind`` "?" and
    ``error`` say what is wrong; its checkpoints and metrics are read all the same)."""
    run_dir = Path(run_dir)
    cfg = _json(run_dir / "config.json")
    summary = _json(run_dir / "summary.json")
    owner = probe(run_dir)
    if summary is not None and summary.get("finished"):
        status = FINISHED
    elif owner is not None:
        status = RUNNING
    else:
        status = INTERRUPTED
    size = disk_size(run_dir)
    error = ""
    ckpts, damaged = _checkpoint_entries(run_dir)
    link = run_dir.resolve() if run_dir.is_symlink() else None
    if cfg is None:
        error = f"config.json {config_problem(run_dir / 'config.json')}"
        return RunInfo(run_dir.name, run_dir, "?", "?", "?", status, "", 0, None, None, size,
                       summary=summary, owner=owner, checkpoints=ckpts, error=error,
                       damaged=damaged, link=link)
    if "dataset" in cfg:
        kind, unit, step_col, target = "offline", "updates", "updates", str(cfg["dataset"])
        total = as_int(cfg.get("updates"))
    else:
        kind, unit, step_col, target = "online", "env steps", "env_steps", str(cfg.get("task", "?"))
        # the run's own total: --env-steps rounded up to whole rounds (config "derived")
        derived = _derived(cfg)
        total = as_int(derived.get("end_total_env_steps", derived.get("total_env_steps")))
        if total is None:
            total = as_int(cfg.get("env_steps"))
    rows = read_metrics(run_dir / "metrics.csv")
    steps = [s for s in (as_int(r.get(step_col)) for r in rows) if s is not None]
    done = max(steps, default=0)
    if kind == "online" and ckpts:        # a checkpoint inside a round (--chunk-ticks)
        done = max(done, _online_env_steps(cfg, ckpts[-1][1]) or 0)
    if summary is not None and as_int(summary.get(step_col)) is not None:
        done = max(done, as_int(summary[step_col]))
        if status == FINISHED:       # online totals are rounded up to whole rounds
            total = as_int(summary[step_col])
    if status == INTERRUPTED and not rows and not ckpts:
        status = NOT_STARTED
    return RunInfo(run_dir.name, run_dir, kind, str(cfg.get("agent", "?")), target, status,
                   unit, done, total, last_eval(rows, kind), size, config=cfg,
                   summary=summary, owner=owner, checkpoints=ckpts, error=error,
                   damaged=damaged, link=link)




def resume_text(r: RunInfo) -> str | None:
    """How to continue an interrupted or not started run, or None for another status.

    ``train_<kind> --resume RUN``; for a run that a learning check (``benchmarks/``)
    wrote, the command its benchmark.json records as ``resume_command`` (that check's
    ``--resume`` also writes its result; run from the repository root) with the run
    appended, and for an offline check's run ``--report-only`` after it when the run has
    evaluations but no checkpoint (brought back without them: the offline checks refuse
    to train it again from update 0 and write its result instead). A run with progress
    but no checkpoint here (brought back from the machine that trains it) is continued
    where its checkpoints are: the hint says so. The run's path is shell-quoted. None too
    for a config.json that names no agent, task or dataset (``--resume`` could not read it)."""
    if r.status not in (INTERRUPTED, NOT_STARTED) or "?" in (r.kind, r.agent, r.target):
        return None         # no hint for a config.json that does not name agent and task
    path = shlex.quote(str(r.path))
    bench_file = r.path / "benchmark.json"
    if not bench_file.is_file():
        if r.done and not r.checkpoints:
            return (f"train_{r.kind} --resume {path} where its checkpoints are (none here: "
                    "here it would start again from the beginning)")
        return f"train_{r.kind} --resume {path}"
    cmd = (_json(bench_file) or {}).get("resume_command")
    if isinstance(cmd, str) and cmd.strip():
        report_only = (" --report-only" if r.kind == "offline" and not r.checkpoints
                       and r.last_eval else "")
        return f"{cmd.strip()} {path}{report_only}"
    return f"the {r.agent} {r.kind} learning check's --resume {path}"


def name_text(r: RunInfo) -> str:
    """The run's name as `wmx runs ls` shows it: ``linked -> /data/run`` for a symbolic
    link to a run kept elsewhere, ``run (also linked as other)`` for a run that links
    under ``<home>/runs`` lead to as well."""
    text = f"{r.name} -> {r.link}" if r.link is not None else r.name
    if r.aliases:
        text += f" (also linked as {', '.join(r.aliases)})"
    return text


def target_text(r: RunInfo) -> str:
    """The task, or the dataset as ``name@<10 hex>`` (the short form `wmx dataset ls` prints
    and every command resolves; `wmx runs info` shows the full hash)."""
    from wmx.schemas.hashing import is_sha256_hex, short_hash
    name, sep, version = r.target.partition("@")
    return f"{name}@{short_hash(version)}" if sep and is_sha256_hex(version) else r.target


def progress_text(r: RunInfo) -> str:
    """``120/120 env steps``, ``4/6 updates`` (``?`` for an unknown total); an online run
    ended early (``--end-env-steps``) adds ``(ended early; --env-steps N)``, one set to
    end early ``(ends early; --env-steps N)``."""
    if r.kind == "?":
        return "?"
    total = "?" if r.total is None else f"{r.total:,d}"
    full = as_int(_derived(r.config or {}).get("total_env_steps")) if r.kind == "online" \
        and (r.config or {}).get("end_env_steps") is not None else None
    how = "ended early" if r.status == FINISHED else "ends early"
    more = f" ({how}; --env-steps {full:,d})" if full is not None and r.total is not None \
        and full > r.total else ""
    return f"{r.done:,d}/{total} {r.unit}{more}"


def eval_text(r: RunInfo) -> str:
    """``return 151 @ 2,000 (trainer, 1 ep)`` / ``score 13.3 @ 300 (trainer, 1 ep/task)``:
    the trainer's newest evaluation, mean over seeds, with its episodes per seed (and task);
    ``-`` before the first evaluation."""
    if r.last_eval is None:
        return "-"
    e = r.last_eval
    eps = "?" if e.episodes is None else f"{e.episodes:,d}"
    per = "/task" if r.kind == "offline" else ""
    seeds = f"{e.seeds} seeds x " if e.seeds > 1 else ""
    return f"{e.metric} {e.value:.3g} @ {e.step:,d} (trainer, {seeds}{eps} ep{per})"
