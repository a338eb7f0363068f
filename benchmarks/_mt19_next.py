"""`mt19_campaign.py next`, on the device machine: train the campaign's next piece within one
call's budget and pack what finished.

`choose` picks the piece and its run's env steps per seed: a run in progress keeps its own;
a new run takes its task's aim, or with ``--device-left-s`` the largest of its sizes
(`Campaign.sizes`) that the plan's model says fits the session's device time left;
``--regenerate`` trains recorded tasks again at their recorded env steps, first (a data root
that lost their episode sets needs them for the dataset build).

The run is train_online's own (`train_piece`); a finished run's bundle goes into the call's
output folder (`pack_finished`, `_mt19_bundle.pack`) with ``mt19_call.json``, the call's
account: what it trained, how fast, what it packed, and what comes next.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import _mt19_bundle as bundle_lib
from _compile_meter import CompileMeter
from _mt19_plan import (GZIP_RATIO, Clock, bundle_mib, fresh_fit, load_physics, measured_sps,
                        model_speeds, sps_of, task_cost)
from _mt19_tasks import (AGENT, FIT_STEP, RUN_PREFIX, Campaign, TaskState, load_record,
                         read_state, recorded_config, regeneration_env_steps,
                         regeneration_mismatch)

MAX_BUDGET_S = 570
"""Longest --budget-s: a device command runs at most 600 s; 30 s stay for the wrapper."""
OUT_FILES, OUT_BYTES = 8, 64 * 2 ** 20
"""What one device call can bring back: files, bytes in all."""
CALL_FILE = "mt19_call.json"
CODE = re.compile(r"^[0-9a-f]{40}(-dirty)?$")


def _redact(argv: list[str]) -> str:
    """The campaign command as run, with the machine's folders as H and DIR."""
    out, skip = [], None
    for a in argv:
        if skip:
            out.append(skip)
            skip = None
            continue
        key, eq, _ = a.partition("=")
        if key in ("--home", "--out", "--results"):
            ph = {"--home": "H", "--out": "DIR", "--results": "RESULTS"}[key]
            if eq:
                out.append(f"{key}={ph}")
            else:
                out.append(a)
                skip = ph
            continue
        out.append(a)
    return "python benchmarks/mt19_campaign.py " + " ".join(shlex.quote(x) for x in out)


def _chip() -> tuple[str, str]:
    import jax

    from wmx.version import device_label
    return device_label(), jax.__version__


def _kind(device: str | None, backend: str | None = None):
    """The device machine's kind (`_device_kinds`) that a call's session and warm period are
    those of.

    Args:
        device: ``--device`` (None: by JAX's backend, the TPU's on the CPU, a rehearsal, or
            another backend).
        backend: JAX's backend (None: ``jax.default_backend()``).

    Returns:
        The kind.

    Raises:
        ValueError: ``device`` names another kind than the accelerator JAX runs on.
    """
    from _device_kinds import DEFAULT, KINDS, kind_of_backend
    if backend is None:
        import jax
        backend = jax.default_backend()
    here = kind_of_backend(backend)
    if device is None:
        return here or KINDS[DEFAULT]
    if here is not None and here.name != device:
        raise ValueError(f"--device {device}, but JAX runs on {backend} here (the "
                         f"{here.label} machine): give --device {here.name} or none "
                         "(--session-s sets another session length)")
    return KINDS[device]


def choose(states: list[TaskState], campaign: Campaign, task: str | None,
           device_left_s: float | None, elapsed_s: float,
           args, regenerate: tuple[str, ...] = ()) -> tuple[TaskState | None, int, str]:
    """The task to train next and its run's env steps per seed.

    A new run trains to the task's aim when that fits the session's device time left (in
    the plan's model, `run_cost` from this call's elapsed time), else to the largest
    multiple of `_mt19_tasks.FIT_STEP` from the task's floor up that fits (a fixed
    target has one size: `Campaign.sizes`); a task none of whose sizes fit is skipped,
    and so is one that would train shorter here than in a fresh session (``session_s``
    from ``machine_start_s``: `plan`'s size), so that a part-used session goes to the
    tasks that fit it whole and a fitted task gets the most a session allows.

    Args:
        states: the tasks (`read_state`).
        campaign: the campaign.
        task: ``--task`` (None: any).
        device_left_s: the session's device seconds left (None: not checked: the aim).
        elapsed_s: seconds of this call so far.
        args: the plan model's flags (`run_cost`).
        regenerate: ``--regenerate``'s recorded tasks, in order: each is trained again at
            its recorded run's env steps (fixed: `_mt19_tasks.regeneration_env_steps`)
            until the home holds a finished run of them (`TaskState.regenerated_run`),
            before the tasks not done.

    Returns:
        (state, env steps, why): ``task`` unless it is done or no size of its new run
        fits; else the task whose campaign run is in progress (env steps: the run's own
        total); else the first task of ``regenerate`` not regenerated yet whose run fits;
        else the first task not done with a size that fits (a regeneration that does not
        fit the time left leaves it to a later one, or to a task not done, that does).
        (None, 0, why) when there is none.
    """
    def need(s: TaskState, n: int) -> float:
        return task_cost(s.task, n, Clock(elapsed_s, 0.0), args)[0]

    def size(s: TaskState) -> int | None:
        for n in campaign.sizes(s.task):
            if device_left_s is None or need(s, n) <= device_left_s:
                return n
        return None

    def fresh_size(s: TaskState) -> int | None:
        """The size `plan` gives the task: the largest that fits a fresh session."""
        steps, *_, fits = fresh_fit(s.task, campaign.sizes(s.task), args)
        return steps if fits else None

    def running(s: TaskState) -> int:
        run = s.active()
        return int(run.total) if run.total is not None else s.aim

    def minutes(x: float) -> str:
        return f"{x / 60:.1f}" if x < float("inf") else "more calls than the budget allows"

    if task is not None:
        s = next(x for x in states if x.task == task)
        if s.active() is not None:
            return s, running(s), "--task; its run is in progress"
        if s.done:
            return None, 0, (f"{task} is done (recorded or trained to at least {s.floor:,} "
                             "env steps)")
        n = size(s)
        if n is None:
            return None, 0, (f"--task {task}: no run of it fits the {device_left_s / 60:.1f} "
                             f"device minutes left (its floor of {s.floor:,} env steps needs "
                             f"{minutes(need(s, s.floor))}); end the session")
        return s, n, "--task"
    active = [s for s in states if s.active() is not None]
    if active:
        return active[0], running(active[0]), "its run is in progress"
    by_task = {x.task: x for x in states}
    refused = None
    for t in regenerate:
        s = by_task[t]
        if s.regenerated_run() is not None:
            continue
        n = regeneration_env_steps(s.recorded)      # its --env-steps (the replay's size)
        trains = int(s.recorded["env_steps"])         # what it trains (an ended run: less)
        if device_left_s is not None and need(s, trains) > device_left_s:
            refused = refused or (f"--regenerate {t}: its run of {trains:,} env steps needs "
                                  f"{minutes(need(s, trains))} device minutes, "
                                  f"{device_left_s / 60:.1f} are left")
            continue                    # a later one, or a task not done, may fit
        return s, n, "--regenerate: the recorded source trained again"
    todo = [s for s in states if not s.done]
    s, n, why = _first_todo(todo, size, fresh_size, need, minutes, device_left_s)
    if s is None and refused is not None:
        why = f"{refused}; " + (why if todo else "end the session")
    return s, n, why


def _remaining_cost(task: str, env_steps: int, elapsed_s: float, args) -> tuple[float, float]:
    """(device seconds, speed) of ``env_steps`` more of a run in progress in the plan's
    model, each call compiling as a resumed one (``cached_compile_s``)."""
    resumed = argparse.Namespace(**{**vars(args), "compile_s": args.cached_compile_s})
    return task_cost(task, env_steps, Clock(elapsed_s, 0.0), resumed)[0], sps_of(task, args)


def finish_check(s: TaskState, elapsed_s: float, device_left_s: float | None, args,
                 may_end: bool = True) -> tuple[str | None, int | None]:
    """Whether the task's run in progress can still finish in the session, in the plan's
    model at the speeds now known (``args.measured_sps``: the run's own calls on this
    machine among them, `session_sps`), and where to end it when it cannot.

    A run never spans sessions, so one that cannot finish would be lost with the machine.
    Such a run is ended early instead (train_online's ``end_env_steps``: exactly the
    first part of the run) at the largest multiple of `_mt19_tasks.FIT_STEP`, from the
    task's floor up and beyond what it has trained, whose rest fits the time left.

    Args:
        s: the task (its run in progress: `TaskState.active`).
        elapsed_s: seconds of this call so far.
        device_left_s: the session's device seconds left (None: not checked).
        args: the plan model's flags.
        may_end: whether the run may end early (not a regeneration, which trains the
            recorded env steps exactly).

    Returns:
        (one line saying it, the env steps per seed to end the run at), (line, None) when
        no end fits (or ``may_end`` is False), (None, None) when it fits, nothing is in
        progress or ``device_left_s`` is None.
    """
    run = s.active()
    if device_left_s is None or run is None or run.total is None:
        return None, None
    total, done = int(run.total), int(run.done)
    need, sps = _remaining_cost(s.task, max(0, total - done), elapsed_s, args)
    if need <= device_left_s:
        return None, None
    head = (f"{s.task}: its run {run.path.name} has {max(0, total - done):,} of {total:,} env "
            f"steps left, about {need / 60:.1f} device minutes at {sps:g} env steps/s per "
            f"seed, and {device_left_s / 60:.1f} are left")
    first = max(s.floor, (done // FIT_STEP + 1) * FIT_STEP)
    ends = range(first, total, FIT_STEP)
    fit = [e for e in ends if may_end
           and _remaining_cost(s.task, e - done, elapsed_s, args)[0] <= device_left_s]
    if fit:
        return (f"{head}: ended early at {fit[-1]:,} env steps (train_online "
                f"--end-env-steps: the first {fit[-1]:,} of the run exactly)"), fit[-1]
    return (f"{head}: it will not finish in this session (a run never spans sessions"
            + ("" if may_end else "; a regeneration trains its recorded env steps") +
            "); to give the time to a task that fits, move the run out of H/runs and call "
            "again"), None


def end_early(run_dir: Path, env_steps: int) -> None:
    """End the unfinished run in ``run_dir`` at ``env_steps`` per seed: its config.json
    gets ``end_env_steps`` (`wmx.train_online.cli.check_end` first: beyond what it has
    trained; replaced atomically)."""
    from wmx.runs.cli_common import rewrite_config
    from wmx.runs.online_config import OnlineRunConfig
    from wmx.train_online.cli import check_end
    cfg = json.loads((run_dir / "config.json").read_text())
    new = dataclasses.replace(OnlineRunConfig.from_json(cfg), end_env_steps=env_steps)
    check_end(new, run_dir)
    rewrite_config(run_dir, {**cfg, **new.to_json()})


def _first_todo(todo: list[TaskState], size, fresh_size, need, minutes,
                device_left_s: float | None) -> tuple[TaskState | None, int, str]:
    """`choose`'s last step: the first task not done with a size that fits, leaving one
    that would train shorter here than in a fresh session (None, 0, why when none)."""
    if not todo:
        return None, 0, "every task of the campaign is done"
    deferred = []
    for s in todo:
        n = size(s)
        if n is None:
            continue
        best = fresh_size(s)
        if device_left_s is not None and best is not None and n < best:
            deferred.append((s.task, n, best))     # a fresh session trains it longer
            continue
        return s, n, "the next task not done"
    if deferred:
        t, n, best = deferred[0]
        return None, 0, (f"no task left fits the {device_left_s / 60:.1f} device minutes left "
                         f"at its best size: {t} would train to {n:,} env steps now, "
                         f"{best:,} in a fresh session; end the session")
    least = min(need(s, s.floor) for s in todo)
    return None, 0, (f"no task left fits the {device_left_s / 60:.1f} device minutes left (the "
                     f"shortest floor needs {minutes(least)}); end the session")


def _calls_path(home: Path, run: str) -> Path:
    return Path(home) / "campaign" / f"{run}.calls.json"


def session_sps(record: dict[str, Any] | None, home: Path, eval_every: int,
                seeds: int, backends: tuple[str, ...] | None = None) -> dict[str, float]:
    """The plan's speeds for ``next``: `measured_sps` of the record's runs and of the runs
    whose calls this data root holds (``<home>/campaign/<run>.calls.json``: this machine's
    session, so a second task of a domain first trained in it is planned at the speed just
    measured), the slower of the two per domain.

    Args:
        record: the campaign's record (None: none).
        home: the data root of the runs.
        eval_every: the campaign's env steps between evaluations.
        seeds: the campaign's seeds per run (record runs of another count are left out).
        backends: this machine's kind's platforms: a record run on such a chip first
            (`measured_sps`; None: any chip alike).

    Returns:
        {domain: env steps/s per seed}.
    """
    here: dict[str, Any] = {"tasks": {}}
    for f in sorted((Path(home) / "campaign").glob("*.calls.json")):
        pieces = [c for c in _read_list(f) if isinstance(c, dict)
                  and isinstance(c.get("task"), str)]
        if pieces:
            here["tasks"][f"{pieces[0]['task']} {f.name}"] = {"calls": pieces,
                                                             "eval_every": eval_every}
    out = measured_sps(record, seeds, backends)
    for dom, v in measured_sps(here).items():
        out[dom] = min(out.get(dom, v), v)
    return out


def _read_list(path: Path) -> list:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def piece_timing(run_dir: Path, rc, env_steps_from: int, wall_s: float,
                 startup_s: float) -> dict[str, Any]:
    """What a piece's rounds say about the speed, for the plan's flags.

    Args:
        run_dir: the run.
        rc: its `OnlineRunConfig`.
        env_steps_from: env steps of the run when the piece started.
        wall_s: the piece's seconds.
        startup_s: seconds from the call's start to the piece's.

    Returns:
        {"startup_s", "piece_wall_s", "rounds", "evals_s"} and, with two rounds or more,
        the first round's seconds (compilation included), the median round's, the env
        steps/s per seed of the median round and the compilation estimate (first minus
        median round). ``evals_s``: the seconds of each evaluation in the piece (from the
        row before it to its row: the first one of a process compiles the evaluation).
        Wall times are the run's own clock (metrics.csv ``wall_s``).
    """
    import statistics

    from wmx.runs.listing import read_metrics
    seed0 = [r for r in read_metrics(run_dir / "metrics.csv")
             if r.get("seed") == str(rc.seeds[0]) and r.get("wall_s")]
    rows = [r for r in seed0 if r.get("kind") == "train"]
    walls = [(int(r["env_steps"]), float(r["wall_s"])) for r in rows]
    before = [w for x, w in walls if x <= env_steps_from]
    mine = [w for x, w in walls if x > env_steps_from]
    evals = [float(b["wall_s"]) - float(a["wall_s"]) for a, b in zip(seed0, seed0[1:])
             if b.get("kind") == "eval" and int(b["env_steps"]) > env_steps_from]
    out: dict[str, Any] = {"startup_s": round(startup_s, 1), "piece_wall_s": round(wall_s, 1),
                           "rounds": len(mine), "evals_s": [round(e, 1) for e in evals]}
    if len(mine) >= 2:
        diffs = [b - a for a, b in zip(([before[-1]] if before else [0.0]) + mine, mine)]
        med = statistics.median(diffs[1:])
        per_round = rc.total_env_steps / rc.rounds
        out.update({"first_round_s": round(diffs[0], 1), "median_round_s": round(med, 2),
                    "env_steps_per_s_per_seed": round(per_round / med, 1) if med > 0 else None,
                    "compile_s_estimate": round(diffs[0] - med, 1)})
    return out


def train_piece(store, campaign: Campaign, s: TaskState, env_steps: int, stop_at: float,
                argv: list[str], progress: bool, t0: float,
                regenerate: bool = False) -> dict[str, Any]:
    """Start the task's run (or resume its run in progress) and train it until it ends
    or ``stop_at`` (a ``time.monotonic()`` value) passes; returns the piece's record.

    The run is train_online's own: its config from train_online's parser, its
    directory ``<home>/runs/mt19-tdmpc2-<task>-<time>`` with config.json, its episode
    export (`wmx.train_online.cli.make_export`), trained by `wmx.train_online.loop.run`
    under the run's lock with Ctrl-C/SIGTERM handling (the learning checks'
    `check_run.training`). At ``stop_at`` a timer sets the stop request a first
    SIGTERM sets: the run stops after its running chunk with a checkpoint.

    Args:
        store: the data root's `wmx.datasets.store.Store`.
        campaign: the campaign (the run's flags).
        s: the task.
        env_steps: a new run's env steps per seed (`choose`); a run in progress keeps its
            own (its ``--env-steps``), which must be one the campaign allows the task
            (`Campaign.allows`), or, for a regeneration, train the recorded env steps.
        stop_at: when to stop, a ``time.monotonic()`` value (past: after one chunk).
        argv: the campaign command's arguments (recorded, folders redacted).
        progress: show the trainer's progress bar.
        t0: the call's start (``time.monotonic()``).
        regenerate: the piece trains a recorded source again (``--regenerate``; recorded
            in the piece). A resumed run of a recorded task at its recorded env steps (of
            at least its floor) is one whether or not the call names it (a done task's run
            starts only so).

    Returns:
        The piece: task, run, new or resume, regenerate, env steps from and to, the run's total,
        the task's aim and whether the total was fitted below it, finished, seconds, why
        it stopped, the command, `piece_timing`. Also appended to
        ``<home>/campaign/<run>.calls.json`` (the run's calls, packed with it).

    Raises:
        ValueError: the run in progress has other settings than the campaign's (its
            env steps: not one the campaign allows the task).
    """
    from check_run import training
    from wmx.runs.cli_common import create_run_dir, sweep_stale, warn_if_restarting
    from wmx.runs.listing import read_run
    from wmx.runs.online_config import OnlineRunConfig
    from wmx.train_online import cli as online_cli
    from wmx.train_online.loop import run

    active = s.active()
    if active is not None:
        run_dir = active.path
        saved = OnlineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
        own = saved.env_steps            # its --env-steps; whole rounds: total_env_steps
        again = (s.recorded is not None                                # --regenerate's
                 and s.floor <= saved.end_total_env_steps == s.recorded["env_steps"])
        regenerate = regenerate or again
        rc = campaign.run_config(s.task, own if again or campaign.allows(s.task, own) else None)
        if dataclasses.replace(saved, chunk_ticks=None, end_env_steps=None) != \
                dataclasses.replace(rc, chunk_ticks=None, end_env_steps=None):
            a, b = saved.to_json(), rc.to_json()
            diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            raise ValueError(f"{run_dir} is a campaign run of {s.task} with other settings "
                             f"({', '.join(diff)}); call next with its settings, or move it "
                             "aside to start the task again")
        rc = dataclasses.replace(rc, end_env_steps=saved.end_env_steps)   # ended early
        warn_if_restarting(run_dir)
        action = "resume"
    else:
        rc = campaign.run_config(s.task, env_steps)
        if regenerate:                  # a recorded run ended early ends there again
            rc = dataclasses.replace(rc, end_env_steps=recorded_config(
                s.recorded).end_env_steps)
        name = f"{RUN_PREFIX}{AGENT}-{s.task}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = create_run_dir(store.runs_dir, name, rc.to_json())
        action = "new"
    sweep_stale(store, run_dir)
    before = read_run(run_dir).done if action == "resume" else 0
    started, t = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.monotonic()
    print(f"mt19_campaign next: {action} {run_dir.name}: {s.task}, {before:,} of "
          f"{rc.end_total_env_steps:,} env steps; stopping by {max(0.0, stop_at - t):.0f} s from now",
          flush=True)
    export = online_cli.make_export(store, rc, run_dir)
    with training(run_dir, {}) as stop, CompileMeter() as meter:
        timer = threading.Timer(max(0.0, stop_at - time.monotonic()), stop.set)
        timer.daemon = True
        if stop_at <= time.monotonic():
            stop.set()                  # past the stop already: one chunk (--min-start-s 0)
        else:
            timer.start()
        try:
            summary = run(rc, run_dir, export, progress=progress, stop_request=stop)
        finally:
            timer.cancel()
        signum = getattr(stop, "signum", None)
    piece = {"task": s.task, "run": run_dir.name, "action": action, "regenerate": regenerate,
             "started": started,
             "env_steps_from": before, "env_steps_to": int(summary["env_steps"]),
             "total_env_steps": rc.end_total_env_steps, "aim_env_steps": s.aim,
             "fitted": rc.end_total_env_steps < s.aim, "finished": bool(summary["finished"]),
             "wall_s": round(time.monotonic() - t, 1),
             "stop": None if summary["finished"] else ("signal" if signum else "budget"),
             "signal": bool(signum), "command": _redact(argv)}
    piece["timing"] = piece_timing(run_dir, rc, before, piece["wall_s"], t - t0)
    piece["timing"]["compile"] = meter.summary()
    path = _calls_path(store.home, run_dir.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    from wmx.runs.host import write_json_atomic
    write_json_atomic(path, _read_list(path) + [piece])
    return piece


def pack_finished(store, campaign: Campaign, states: list[TaskState], out: Path,
                  chip: str, jax_version: str, code: str) -> list[dict[str, Any]]:
    """Pack every finished campaign run in the home that has no bundle yet (a marker
    ``<home>/campaign/<run>.packed.json`` says it has).

    Args:
        store: the data root's `wmx.datasets.store.Store`.
        campaign: the campaign.
        states: its tasks (`read_state`).
        out: the folder the bundles go to.
        chip, jax_version, code: recorded in each bundle's campaign record.

    Returns:
        [{"task", "run", "files": [{"name", "bytes", "sha256"}]}] of what was packed.
    """
    from wmx.runs.host import write_json_atomic
    from wmx.runs.listing import FINISHED
    from wmx.schemas.hashing import file_digest
    done = []
    for s in states:
        for r in s.runs:
            marker = store.home / "campaign" / f"{r.name}.packed.json"
            if r.status != FINISHED or marker.is_file():
                continue
            record = {"task": s.task, "run": r.name, "agent": AGENT,
                      "preset": r.config.get("preset"), "seeds": r.config.get("seeds"),
                      "target_env_steps": int(r.config.get("env_steps", 0)),
                      "train_online_command": "train_online " + " ".join(
                          shlex.quote(a) for a in _argv_of_config(r.config))
                      + f" --name {r.name}",
                      "chip": chip, "jax": jax_version, "code_version": code,
                      "calls": _read_list(_calls_path(store.home, r.name)),
                      "packed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            files = bundle_lib.pack(store.home, r.path, record, out, s.task)
            item = {"task": s.task, "run": r.name,
                    "files": [{"name": f.name, "bytes": f.stat().st_size,
                               "sha256": file_digest(f)} for f in files]}
            marker.parent.mkdir(parents=True, exist_ok=True)    # a home filled by ingest
            write_json_atomic(marker, item)
            done.append(item)
            print(f"mt19_campaign next: packed {r.name} into "
                  + ", ".join(f"{f['name']} ({f['bytes'] / 2 ** 20:.2f} MiB)"
                              for f in item["files"]), flush=True)
    return done


def _argv_of_config(cfg: dict[str, Any]) -> list[str]:
    """train_online's flags of a run.

    Args:
        cfg: the run's config.json (its own settings, not the campaign's current ones).

    Returns:
        The flags that make that config, less ``--name`` and ``--home``.
    """
    out = ["--agent", cfg["agent"], "--task", cfg["task"], "--preset", cfg["preset"],
           "--seeds", *map(str, cfg["seeds"]), "--env-steps", str(cfg["env_steps"]),
           "--eval-every", str(cfg["eval_every"]), "--eval-episodes", str(cfg["eval_episodes"])]
    for k, v in sorted((cfg.get("agent_overrides") or {}).items()):
        out += ["--set", f"{k}={json.dumps(v) if not isinstance(v, str) else v}"]
    if cfg.get("checkpoint_every_chunks", 1) != 1:
        out += ["--checkpoint-every", str(cfg["checkpoint_every_chunks"])]
    if cfg.get("end_env_steps") is not None:      # ended early (`finish_check`)
        out += ["--end-env-steps", str(cfg["end_env_steps"])]
    return out


def _out_room(out: Path) -> tuple[int, int]:
    files = [p for p in out.iterdir() if p.is_file()] if out.is_dir() else []
    return OUT_FILES - 1 - len(files), OUT_BYTES - sum(p.stat().st_size for p in files)


def regenerate_tasks(text: str | None, campaign: Campaign,
                     record: dict[str, Any] | None) -> tuple[str, ...]:
    """``--regenerate``'s tasks, checked.

    Args:
        text: the flag's value, tasks separated by commas (None: none).
        campaign: the campaign.
        record: the loaded mt19_sources.json (None: none).

    Returns:
        The tasks in the order given, each once.

    Raises:
        ValueError: one line for a task that is not the campaign's, has no source recorded
            at its floor (the campaign's, `Campaign.floor`: under flags of a higher floor
            the task is not done and next trains it anew), or whose recorded run the
            campaign's flags would not train again (`_mt19_tasks.regeneration_mismatch`).
    """
    if text is None:
        return ()
    tasks = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    recorded = (record or {}).get("tasks", {})
    for t in tasks:
        if t not in campaign.tasks:
            raise ValueError(f"--regenerate {t}: not a task of the campaign (--tasks)")
        e = recorded.get(t)
        if e is None or e["env_steps"] < campaign.floor(t):
            got = "none" if e is None else f"{e['env_steps']:,}"
            raise ValueError(f"--regenerate {t}: no source of it is recorded at its floor "
                             f"({campaign.floor(t):,} env steps; recorded: {got}); next "
                             "trains it without --regenerate")
        diff = regeneration_mismatch(campaign, t, e)
        if diff:
            raise ValueError(f"--regenerate {t}: the campaign's run differs from the recorded "
                             f"one in {', '.join(diff)}; give the recorded run's flags "
                             f"(its command: {e['command']})")
    if not tasks:
        raise ValueError("--regenerate: name the recorded tasks, e.g. --regenerate "
                         "reacher-easy,walker-stand")
    return tasks


def cmd_next(args, campaign: Campaign, argv: list[str], t0: float) -> int:
    """Train the next pieces within the call's budget and pack what finished.

    Args:
        args: the parsed flags of ``next``.
        campaign: the campaign.
        argv: the command's arguments (recorded, folders redacted).
        t0: the call's start (``time.monotonic()``).

    Returns:
        0, or 143 when a signal stopped the run. ``<out>/mt19_call.json`` says what was
        trained, packed and comes next; it is written after every piece and every packing,
        so a call killed in a later piece keeps the account of the earlier ones.

    Raises:
        ValueError: bad input (one line; nothing written): the budget, ``--task``, no
            code version, a run in progress with other settings.
    """
    from wmx.datasets.store import Store
    from wmx.runs.cli_common import enable_compile_cache
    from wmx.runs.host import write_json_atomic
    from wmx.version import code_version
    if not 0 < args.budget_s <= MAX_BUDGET_S:
        raise ValueError(f"--budget-s {args.budget_s:g}: give more than 0 and at most "
                         f"{MAX_BUDGET_S} s (a device command runs at most 600 s; the wrapper "
                         "needs the rest)")
    if not 0 <= args.reserve_s < args.budget_s:
        raise ValueError(f"--reserve-s {args.reserve_s:g}: give 0 up to --budget-s")
    if args.task is not None and args.task not in campaign.tasks:
        raise ValueError(f"--task {args.task}: not a task of the campaign (--tasks); its tasks: "
                         + ", ".join(campaign.tasks))
    record = load_record(Path(args.results))
    regenerate = regenerate_tasks(args.regenerate, campaign, record)
    if regenerate and args.task is not None:
        raise ValueError("--task and --regenerate: give one (--regenerate trains recorded "
                         "tasks again, --task one task not done)")
    code = code_version()
    if not CODE.match(code):
        raise ValueError(f"the code version here is {code!r}, not a full 40-hex commit (no "
                         "git checkout, or WMX_CODE_VERSION abbreviated): start the command "
                         "with WMX_CODE_VERSION=<the full commit of the tree sent> "
                         "(mt19_campaign.py status prints the command) so the episode sets "
                         "name their code")
    store = Store(args.home).ensure_layout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    enable_compile_cache(store.home)
    chip, jax_version = _chip()
    kind = _kind(args.device)           # a fresh session's device time, the warm period
    args.device = kind.name
    stop_at = t0 + args.budget_s - args.reserve_s
    call: dict[str, Any] = {"schema": "wmx.mt19_call/1", "command": _redact(argv),
                            "chip": chip, "jax": jax_version, "code_version": code,
                            "budget_s": args.budget_s, "pieces": [], "bundles": []}
    status = 0
    physics = load_physics(Path(args.results))       # the plan's prices: read once a call

    def save() -> None:
        """Write the account so far: a call killed later (the device's limit, a second
        SIGTERM during a compile) keeps what its finished pieces and bundles did."""
        call["wall_s"] = round(time.monotonic() - t0, 1)
        write_json_atomic(out / CALL_FILE, call)

    try:
        while True:
            states = read_state(store.home, campaign, record)
            call["bundles"] += pack_finished(store, campaign, states, out, chip, jax_version,
                                             code)
            save()
            states = read_state(store.home, campaign, record)
            args.measured_sps = session_sps(record, store.home, campaign.eval_every,
                                            len(campaign.seeds), kind.backends)
            args.prior_sps = model_speeds(args.measured_sps, physics)
            s, n, why = choose(states, campaign, args.task, args.device_left_s,
                               time.monotonic() - t0, args, regenerate)
            warning, end = (None, None) if s is None else finish_check(
                s, time.monotonic() - t0, args.device_left_s, args,
                may_end=s.task not in regenerate and s.recorded is None)
            if end is not None:
                end_early(s.active().path, end)
            if warning is not None and warning not in call.get("warnings", []):
                call.setdefault("warnings", []).append(warning)
                print(f"mt19_campaign next: warning: {warning}", flush=True)
            if s is None:
                call["next"] = {"what": why}
                break
            left = stop_at - time.monotonic()
            files_left, bytes_left = _out_room(out)
            est_mib = bundle_mib(s.task, n, len(campaign.seeds), GZIP_RATIO)
            short = args.min_start_s > 0 and left < args.min_start_s
            if short or files_left < 1 + math.ceil(
                    est_mib * 2 ** 20 / bundle_lib.PART_BYTES) or bytes_left < est_mib * 2 ** 20:
                reason = (f"{left:.0f} s left, --min-start-s {args.min_start_s:g}"
                          if short else "no room left in DIR for its bundle")
                call["next"] = {"task": s.task, "what": s.next_text(n), "env_steps": n,
                                "fitted": n < s.aim, "how": f"call again ({reason})"}
                break
            piece = train_piece(store, campaign, s, n, stop_at, argv, args.progress, t0,
                                regenerate=s.task in regenerate)
            call["pieces"].append(piece)
            save()
            if piece["signal"]:              # SIGTERM or Ctrl-C: this call goes no further
                status = 143
            if not piece["finished"]:
                call["next"] = {"task": s.task, "run": piece["run"],
                                "what": f"resume {piece['run']} at {piece['env_steps_to']:,} of "
                                        f"{piece['total_env_steps']:,} env steps",
                                "env_steps": piece["total_env_steps"],
                                "fitted": piece["fitted"],
                                "how": f"call again within {kind.warm_s:g} s (while the "
                                       "machine is warm) with the same command"}
                break
            if args.task is not None or piece["signal"]:
                states = read_state(store.home, campaign, record)
                call["bundles"] += pack_finished(store, campaign, states, out, chip, jax_version,
                                                 code)
                call["next"] = {"what": f"{s.task} finished" + (
                    " (--task)" if args.task is not None else "; stopped by a signal")}
                break
    except BaseException as e:          # the call's account says how it ended
        call["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        raise
    finally:
        save()
    nxt = call.get("next", {})
    print(f"mt19_campaign next: {len(call['pieces'])} piece(s), {len(call['bundles'])} "
          f"bundle(s) in {call['wall_s']:.0f} s; next: {nxt.get('what', '?')}"
          + (f"; {nxt['how']}" if nxt.get("how") else ""), flush=True)
    return status
