"""Run the official DreamerV3 (danijar/dreamerv3) online on a DMC task, beside wmx.

The official code is not part of wmx: it comes from the bundle that
``tools/official_dreamerv3_bundle.py`` prepares (``.official-dv3/``, ignored by
git: the source at 29eb964 in ``src/``, the wheels of its dependencies and a
``setup.sh`` that installs them into the lent TPU machine's temporary folder).
The source is run as published; on JAX 0.10.2 it needs one adapter
(`_official_compat`: ``jax.jit`` took shardings positionally in JAX 0.4.28)
and tensorflow-probability's nightly build (its 0.25.0 release no longer
imports on this JAX); the bundle tool's docstring says why no later commit
serves better.

Training (the default mode) runs the official agent's own online loop,
``embodied.run.train`` of the ``train`` script, with the official
``make_agent``, ``make_replay`` and ``make_env`` of ``dreamerv3/main.py``, at
the paper protocol for DMC proprio: the ``dmc_proprio`` config (the
``size12m`` model, train ratio 512, action repeat 2, 16 envs, bfloat16
compute), the ``--size`` preset on top, then the flags given. Around that
loop the driver only adds what short, killable calls need:

- the loop stops when ``--budget-s`` has passed since the driver started,
  when the env-step target is reached, or on SIGTERM/SIGINT (``timeout -k``'s
  first signal; the env processes ignore it), and then saves a checkpoint
  (also every ``--save-every`` seconds, synchronously, so the resume point's
  counters are exact); the next call with the same ``--logdir`` continues
  from it (the official ``Checkpoint.load_or_save``: agent, replay, step);
- the logger is the official one without its TensorBoard output (that needs
  tensorflow) and with one more output, ``wmx_progress.jsonl`` (env steps,
  training steps and this run's wall time at every log write and save);
- without ``--render`` the ``log_image`` observation (never seen by the agent
  nor stored in its replay: only its video logs use it) is black: the TPU
  machine has no OpenGL, and rendering it costs time on the CPU;
- ``run.usage.nvsmi`` is off (no GPU) and ``replay.save_wait`` on (a saved
  checkpoint's replay chunks are on disk when the save returns);
- XLA's persistent compilation cache in ``<logdir>/jax_cache`` (a second call
  on a warm machine loads the programs instead of compiling them);
- the official env processes (``run.driver_parallel``, on as in the config:
  the official code spawns one per env) start with ``JAX_PLATFORMS=cpu``: they
  import JAX with the official packages but never use it, and on the TPU
  machine a second process that opened the chip would die (libtpu's lockfile);
  a wait for an env whose process died ends with an error instead of blocking
  (``--set run.driver_parallel=False`` steps the envs in the training process
  instead: no env processes at all);
- the call trains in a child process (this script again) and records its whole
  output, the official code's, the env processes' and any runtime's, in
  ``official_run.log`` (appended, in the logdir and in ``--out``), with a
  header and how the child ended: a crash or a kill leaves its message there,
  not only in a terminal's tail. An error in the loop prints its traceback,
  stops the envs, converts the logs so far and ends the call with status 1; a
  child that died without converting has its logs converted by the parent.
  Python's stacks of all threads are written there on a fatal signal, and
  30 s after the budget ran out (or a stop signal came, without a budget) and
  repeatedly after that while the call has not ended (a stuck stop shows where
  it is stuck: keep ``--budget-s`` 40 s or more under an outer ``timeout``);
- ``--out DIR`` gets metrics.csv, the summary, ``official_logs.tar.gz`` (the
  official jsonl logs, config.yaml and the driver's records) and
  ``official_run.log``: four files, as the device brings back eight at most.

Units. The official step counter counts policy steps of all envs (its reset
steps included, one per episode and env); its logs multiply it by the action
repeat. ``--env-steps`` and every ``env_steps`` written here are that logged
number (simulator steps, as wmx counts env steps; the official count is
1/500 higher on 1000-step DMC episodes because of the reset steps).

After the loop (and with ``--convert-only LOGDIR`` alone) the official
``scores.jsonl`` becomes ``<logdir>/metrics.csv`` in the columns of wmx's
online runs (`wmx.train_online.loop.BASE_COLUMNS`): one ``train`` row per
group of training episodes that ended together (the envs' episodes end at
the same policy step on DMC), ``return`` their mean, ``env_steps`` the
counter at the last of them, ``updates`` and ``wall_s`` interpolated from
``wmx_progress.jsonl``; score lines that a killed call wrote past the
checkpoint its successor resumed from are dropped. ``official_summary.json``
holds the commit, the config, the env steps reached, the rates of this call
and of the whole run, and the wall time.

``--time-train N`` instead times the official training step alone (and the
policy step), in this process, with `dreamerv3_reference_driver.Reference`
(``jax.jit(nj.pure(agent.train))`` on a synthetic batch of 16 × 65 rows, the
wmx speed benchmark's program) at the chosen size and compute dtype, the
task's observation and action sizes; one JSON object on stdout and in
``--out``.

``--check-finite N`` instead diagnoses non-finite policy outputs (the official
``jaxagent.py`` assertion ``isfinite.all()``): it builds the official agent as the
loop does and writes, into ``--out``, ``official_check_finite.json`` (rewritten after
every step, so a killed call keeps what it found) and ``official_check_finite.log``
(the whole output): the initialisers' random and special functions alone on the
device; every parameter's finiteness (and whether the policy's copies equal the
parameters); N policy calls on the task's envs, per output key; where a call is not
finite, the same call on fresh parameter buffers, on the CPU, at the highest matmul
precision and under ``jax_debug_nans`` (which names the first primitive that made a
NaN); two official train calls and N policy calls after them; then the same for a
float32-compute agent and for an agent built without buffer donation (see
`check_finite`).

On the TPU machine (one process may open the chip: run the modes one after
another, never together; LOGDIR in the machine's temporary folder, which lasts
while the machine stays warm, so the next call continues the run only then):

    source .official-dv3/setup.sh; timeout -k 20 540 python benchmarks/official_dreamerv3.py \\
        --task reacher-easy --seed 0 --logdir LOGDIR --budget-s 500 --out $OUT
    python benchmarks/official_dreamerv3.py --time-train 20 --out $OUT
    timeout -k 20 300 python benchmarks/official_dreamerv3.py --check-finite 4 --out $OUT

Source: danijar/dreamerv3 29eb964 (dreamerv3/main.py, embodied/run/train.py,
embodied/core/checkpoint.py, embodied/core/logger.py, configs.yaml).
"""
from __future__ import annotations

import argparse
import csv
import faulthandler
import io
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_BUNDLE = ROOT / ".official-dv3"
OFFICIAL_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"

BASE_COLUMNS = ("seed", "kind", "agent_steps", "env_steps", "episodes", "return",
                "return_std", "updates", "wall_s")
"""wmx's online metrics.csv columns (`wmx.train_online.loop.BASE_COLUMNS`; a test keeps
them equal: this script runs where wmx's own dependencies are not installed)."""

RUN_RECORD = "wmx_run.json"
PROGRESS = "wmx_progress.jsonl"
CALLS = "wmx_calls.jsonl"
LOGS_TAR = "official_logs.tar.gz"
LOG_FILES = ("scores.jsonl", "metrics.jsonl", PROGRESS, CALLS, RUN_RECORD, "config.yaml")
SUMMARY = "official_summary.json"
METRICS_CSV = "metrics.csv"
RUN_LOG = "official_run.log"
"""The whole output of each training call (its stdout and stderr, the official code's, the
env processes' and any runtime's), appended in the logdir and, with --out, there too."""
WORKER_ENV = "WMX_OFFICIAL_DV3_WORKER"
"""Set in the process that trains (`supervise` starts it); without it a training call
starts that process and records its output (`tee_process`)."""
SIZES = ("12m", "1m", "25m", "50m", "100m", "200m", "400m", "debug")
RUN_FIELDS = ("task", "seed", "size", "compute_dtype", "envs", "train_ratio", "sets")
"""Settings of a run that a resumed call must not change (``--env-steps``, ``--budget-s``,
``--platform`` and the save/log periods may change)."""


def fail(message: str) -> None:
    """Print ``message`` (one line naming the problem and the fix) and exit with status 2."""
    print(f"official_dreamerv3.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def official_task(task: str) -> str:
    """The official task name of a wmx DMC task name.

    Args:
      task: ``reacher-easy`` (wmx), ``reacher_easy`` or ``dmc_reacher_easy`` (official).
    Returns:
      ``dmc_<domain>_<task>``; ball-in-cup becomes the official ``cup`` domain.
    """
    if task.startswith("dmc_"):
        return task
    name = task.replace("-", "_")
    if name.startswith("ball_in_cup_"):
        name = "cup_" + name[len("ball_in_cup_"):]
    return "dmc_" + name


# ==== log conversion (no official code needed) ========================================
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


# ==== the official run ==================================================================
class _Stop:
    """Why the loop should stop (None while it should go on): budget, target, signal."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.reason: str | None = None

    def check(self) -> bool:
        """True once the loop must stop (sets ``reason`` to "budget" at the deadline)."""
        if self.reason is None and self.deadline is not None \
                and time.monotonic() >= self.deadline:
            self.reason = "budget"
        return self.reason is not None


class _Steps:
    """The loop's ``args.steps``: ``step < steps`` holds while the counter is under the
    target and nothing asked the loop to stop (``Counter.__lt__`` compares ``int(step) <
    steps``, which Python answers with this object's ``__gt__``)."""

    def __init__(self, target: int, stop: _Stop):
        self.target, self.stop = int(target), stop

    def __gt__(self, value) -> bool:
        if int(value) >= self.target:
            self.stop.reason = self.stop.reason or "target"
            return False
        return not self.stop.check()

    def __int__(self) -> int:
        return self.target


class _Args:
    """The official ``args`` with ``steps`` replaced by a `_Steps`."""

    def __init__(self, args, steps: _Steps):
        self._args, self.steps = args, steps

    def __getattr__(self, name):
        return getattr(self._args, name)


def _ignore_signals() -> None:
    """In the official env processes: ignore SIGTERM and SIGINT (``timeout`` signals the
    whole process group; the main process stops the loop and then the envs)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _no_render() -> None:
    """Make dm_control's ``Physics.render`` return black frames (no OpenGL needed)."""
    import numpy as np
    from dm_control.mujoco import engine

    def render(self, height=240, width=320, *args, **kwargs):
        return np.zeros((height, width, 3), np.uint8)

    engine.Physics.render = render


def _make_env_fn(official_make_env, render: bool):
    """``official_make_env`` (config, index) with the black-frame patch applied first in
    the process that builds the env (`_no_render`) unless ``render``."""
    def make_env(config, index, **kw):
        if not render:
            os.environ.setdefault("MUJOCO_GL", "off")
            _no_render()
        return official_make_env(config, index, **kw)
    return make_env


ENV_PROCESS_ENVIRON = {"JAX_PLATFORMS": "cpu", "MUJOCO_GL": "off"}
"""The environment the official env processes start with (`env_process_environ`): JAX,
which they import with the official packages but never use, kept on the CPU (on the TPU
machine one process at a time may open the chip: a second one dies with a libtpu lockfile
error); MUJOCO_GL off unless set (no OpenGL there)."""


class env_process_environ:
    """Context: ``os.environ`` as the official env processes need it while they start (the
    official driver spawns them; a spawned process copies the environment at its start),
    restored on exit. ``JAX_PLATFORMS`` is set to "cpu" whatever its value (this process's
    JAX read it when imported: changing it now changes nothing here); ``MUJOCO_GL`` only
    when unset."""

    def __enter__(self):
        self._saved = {k: os.environ.get(k) for k in ENV_PROCESS_ENVIRON}
        os.environ["JAX_PLATFORMS"] = ENV_PROCESS_ENVIRON["JAX_PLATFORMS"]
        os.environ.setdefault("MUJOCO_GL", ENV_PROCESS_ENVIRON["MUJOCO_GL"])
        return self

    def __exit__(self, *exc):
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def exit_text(code: int | None) -> str:
    """How a process ended, in words, from its exit status (negative: the signal that ended
    it, as Python's subprocess and multiprocessing report it; 128 + N: a shell's report of
    signal N)."""
    if code is None:
        return "has not ended"
    sig = -code if code < 0 else (code - 128 if 128 < code < 160 else None)
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was ended by {name} (status {code})"
    return f"exited with status {code}"


def wait_for_answer(pipe, proc, index: int, poll_s: float = 1.0) -> None:
    """Wait until ``pipe`` holds an answer of env process ``index``; raise RuntimeError when
    the process ended without one (the official driver's ``pipe.recv`` would block for
    ever: this process keeps the other end of the pipe open).

    Args:
      pipe: the driver's end of the env's pipe (``poll(timeout)``).
      proc: the env's official ``StoppableProcess`` (``running``, ``exitcode``, ``name``).
      index: the env's index (for the message).
      poll_s: how often to look at the process.
    """
    while not pipe.poll(poll_s):
        if not proc.running:
            if pipe.poll(0):   # it answered just before it ended
                return
            how = exit_text(proc.exitcode)
            raise RuntimeError(f"env process {index} ({proc.name}) {how} without answering "
                               "the driver; its own output, above in the log, says why")


def check_official(src: Path) -> Path:
    """The official source folder; exits (2) with one line when it is not one.

    Args:
      src: a danijar/dreamerv3 tree (the bundle's ``src/``, or a checkout).
    Returns:
      The resolved path.
    """
    src = Path(src).expanduser().resolve()
    for need in ("dreamerv3/main.py", "dreamerv3/agent.py", "dreamerv3/configs.yaml",
                 "embodied/run/train.py"):
        if not (src / need).is_file():
            fail(f"--official {src}: no {need} there; prepare the bundle with "
                 "`python tools/official_dreamerv3_bundle.py` (or pass a danijar/dreamerv3 "
                 "checkout at 29eb964)")
    return src


def _import_official(src: Path):
    """Import the official packages from ``src`` after installing the JAX adapters
    (`_official_compat`); exits (2) naming a missing dependency.

    Args:
      src: the official source tree (`check_official`).
    Returns:
      (``embodied``, ``dreamerv3.agent``, ``dreamerv3.main``) modules.
    """
    sys.path.insert(0, str(src))
    sys.path.insert(0, str(HERE))
    import _official_compat
    _official_compat.apply()
    try:
        import embodied
        from dreamerv3 import agent as agt
        from dreamerv3 import main as official_main
    except ImportError as e:
        fail(f"the official code could not import {e.name!r} ({e}); on the TPU machine "
             "`source .official-dv3/setup.sh` first, elsewhere install the bundle's wheels "
             "(.official-dv3/wheels) under a folder on PYTHONPATH")
    return embodied, agt, official_main


FLAG_NAMES = {"task": "--task", "seed": "--seed", "size": "--size",
              "compute_dtype": "--compute-dtype", "envs": "--envs",
              "train_ratio": "--train-ratio", "sets": "--set"}


def resolve_settings(args, logdir: Path) -> tuple[dict, dict | None]:
    """The run's settings: a resumed run's saved ones, else the flags' (None: the
    config's value, resolved later by `build_config`); exits (2) when a flag given to a
    resumed run conflicts with its saved value.

    Args:
      args: the parsed flags.
      logdir: the run's logdir (wmx_run.json when this driver started it).
    Returns:
      ({"task", "seed", "size", "compute_dtype", "envs", "train_ratio", "sets"}, the
      saved record or None for a new run).
    """
    given = {"task": official_task(args.task) if args.task else None, "seed": args.seed,
             "size": args.size, "compute_dtype": args.compute_dtype, "envs": args.envs,
             "train_ratio": args.train_ratio, "sets": list(args.set) if args.set else None}
    saved = run_record(logdir)
    if saved is None:
        out = dict(given)
        out["task"] = out["task"] or official_task("reacher-easy")
        out["seed"] = 0 if out["seed"] is None else out["seed"]
        out["size"] = out["size"] or "12m"
        out["sets"] = out["sets"] or []
        return out, None
    out = {}
    for k in RUN_FIELDS:
        new, old = given[k], saved.get(k)
        if new is not None and (float(new) != float(old) if k == "train_ratio" else new != old):
            fail(f"{FLAG_NAMES[k]} {new}: the run in {logdir} has {old!r}; drop the flag to "
                 "continue it, or start a new run in another --logdir")
        out[k] = old
    return out, saved


def build_config(embodied, agt, settings: dict, logdir: Path, platform: str,
                 env_steps: int | None, save_every: float, log_every: float):
    """The official config of the run: defaults, dmc_proprio, the size preset, then the
    run's settings and the driver's own keys.

    Args:
      embodied, agt: the official ``embodied`` and ``dreamerv3.agent`` modules.
      settings: `resolve_settings`'s dict.
      logdir: the run's logdir.
      platform: JAX platform for the official ``jax.platform`` ("cpu", "tpu", "gpu").
      env_steps: the env-step target (None: the config's ``run.steps``).
      save_every, log_every: checkpoint and log periods (s).
    Returns:
      (config, target of the official step counter).
    """
    configs = agt.Agent.configs
    config = embodied.Config(configs["defaults"]).update(configs["dmc_proprio"])
    size = settings["size"]
    if size == "1m":
        from dreamerv3_reference_driver import SIZE_1M
        config = config.update(SIZE_1M)
    elif size == "debug":
        config = config.update(configs["debug"])
    else:
        config = config.update(configs[f"size{size}"])
    upd = {"task": settings["task"], "seed": settings["seed"], "logdir": str(logdir),
           "jax.platform": platform, "run.save_every": save_every,
           "run.log_every": log_every, "run.usage.nvsmi": False, "replay.save_wait": True}
    for key, flag in (("jax.compute_dtype", "compute_dtype"), ("run.num_envs", "envs"),
                      ("run.train_ratio", "train_ratio")):
        if settings[flag] is not None:
            upd[key] = settings[flag]
    config = config.update(upd)
    if settings["sets"]:
        argv = []
        for item in settings["sets"]:
            key, _, value = item.partition("=")
            argv += [f"--{key}", value]
        try:
            config = embodied.Flags(config).parse(argv)
        except (KeyError, ValueError, TypeError) as e:
            fail(f"--set {' '.join(settings['sets'])}: {e}; name official config keys "
                 "(dreamerv3/configs.yaml), e.g. --set run.driver_parallel=False")
    repeat = config.env.dmc.repeat
    target = config.run.steps if env_steps is None else math.ceil(env_steps / repeat)
    config = config.update({"run.steps": int(target),
                            "replay_length": config.replay_length or config.batch_length,
                            "replay_length_eval": (config.replay_length_eval
                                                   or config.batch_length_eval)})
    return config, int(target)


def _report_error(what: str, error: BaseException) -> None:
    """Print ``error``'s traceback to stderr (the run log), naming ``what`` raised it."""
    print(f"[official_dreamerv3] {what} raised {type(error).__name__}: {error}",
          file=sys.stderr, flush=True)
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    sys.stderr.flush()


def _say(text: str) -> None:
    """Write one line to stderr without Python's buffered streams (safe in a signal
    handler: a print there can land inside another print and raise)."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


STOP_GRACE_S = 30.0
"""After the loop was asked to stop (budget, signal), seconds until the stacks of all
threads are written to the log, and repeatedly after that while the process lives
(`faulthandler`: shows where a stop that never ends is stuck; a stop takes the loop's
current iteration, a save and the conversion: seconds)."""


class _OnSignal:
    """The worker's SIGTERM/SIGINT handler: the first asks the loop to stop (it then saves);
    a second one restores the default action, so a third ends the process. The same signal
    again within ``window_s`` counts once: the process group's copy and the supervisor's
    forwarded copy of one signal arrive together."""

    def __init__(self, stop: _Stop, window_s: float = 2.0):
        self.stop, self.window_s = stop, window_s
        self.n, self.last = 0, None

    def __call__(self, signum, frame=None) -> None:
        now = time.monotonic()
        if self.last is not None and self.last[0] == signum and now - self.last[1] < self.window_s:
            return
        self.last = (signum, now)
        self.n += 1
        name = signal.Signals(signum).name
        self.stop.reason = self.stop.reason or f"signal {name}"
        _say(f"[official_dreamerv3] {name}: stopping after the loop's current iteration, "
             "then saving")
        if self.n == 1:
            if self.stop.deadline is None or time.monotonic() >= self.stop.deadline:
                faulthandler.dump_traceback_later(STOP_GRACE_S, repeat=True)
            # else the budget's watchdog (armed at the start) fires first
        else:
            signal.signal(signum, signal.SIG_DFL)


def _append_jsonl(path: Path, obj: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(obj) + "\n")


def train(args) -> None:
    """The training mode: run (or continue) the official loop in ``args.logdir``, save,
    convert the logs and write the summary (see the module docstring).

    Args:
      args: the parsed flags (`parse`).
    Returns:
      Nothing: the process ends (``os._exit``: the official loop's threads are not waited
      for) once everything is written, with status 0, or 1 after an error in the loop, its
      final save or the env processes (its traceback printed, the logs so far converted).
    """
    t0 = time.monotonic()
    stop = _Stop(None if args.budget_s is None else t0 + args.budget_s)
    on_signal = _OnSignal(stop)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # a crash (SIGSEGV, SIGABRT from a runtime's fatal error) prints every thread's Python
    # stack; a call still running STOP_GRACE_S after its budget prints them too, repeatedly
    faulthandler.enable(all_threads=True)
    if args.budget_s is not None:
        faulthandler.dump_traceback_later(args.budget_s + STOP_GRACE_S, repeat=True)

    logdir = Path(args.logdir).expanduser().resolve()
    settings, saved = resolve_settings(args, logdir)
    src = check_official(args.official)
    sys.path.insert(0, str(HERE))
    embodied, agt, official_main = _import_official(src)
    import jax
    if args.compile_cache != "off":
        cache = Path(args.compile_cache) if args.compile_cache else logdir / "jax_cache"
        cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache))
    platform = args.platform or jax.default_backend()
    config, target = build_config(embodied, agt, settings, logdir, platform,
                                  args.env_steps, args.save_every, args.log_every)
    repeat = int(config.env.dmc.repeat)
    # the settings as resolved by the config (a resumed run's are these already)
    settings.update(envs=int(config.run.num_envs), train_ratio=float(config.run.train_ratio),
                    compute_dtype=str(config.jax.compute_dtype))
    record = {**settings, "official_task": settings["task"],
              "official_commit": OFFICIAL_COMMIT, "action_repeat": repeat,
              "batch_size": int(config.batch_size), "batch_length": int(config.batch_length),
              "platform": platform}
    logdir.mkdir(parents=True, exist_ok=True)
    if saved is None:
        (logdir / RUN_RECORD).write_text(json.dumps(record, indent=1))
    config.save(embodied.Path(logdir) / "config.yaml")
    progress_path = logdir / PROGRESS

    state = {"wall0": 0.0, "train0": 0, "step0": 0, "trains": 0, "first_train": None,
             "checkpoint": None, "driver": None, "last_save_step": None}
    counter = embodied.Counter()

    def now_wall() -> float:
        return state["wall0"] + (time.monotonic() - t0)

    def progress(event: str) -> None:
        _append_jsonl(progress_path, {"event": event, "step": int(counter) * repeat,
                                      "train_steps": state["train0"] + state["trains"],
                                      "wall_s": round(now_wall(), 3), "time": time.time()})

    class Checkpoint(embodied.Checkpoint):
        """The official checkpoint, saving synchronously, recording each save and resume."""

        def __init__(self, filename=None, parallel=True):
            super().__init__(filename, parallel)   # its load() needs the parallel mode
            state["checkpoint"] = self

        def save(self, filename=None, keys=None):
            super().save(filename, keys)
            if self._parallel:
                self._promise.result()             # written (or raised) before going on
            state["last_save_step"] = int(counter)
            progress("save")

        def load(self, filename=None, keys=None):
            super().load(filename, keys)
            prior, _ = read_progress(logdir)
            step = int(counter) * repeat
            saves = [p for p in prior if p["event"] == "save" and p["step"] == step]
            if saves:   # the run's wall time counts every call from its start
                state["wall0"], state["train0"] = saves[-1]["wall_s"], saves[-1]["train_steps"]
            state["step0"] = int(counter)
            state["last_save_step"] = int(counter)
            scores = logdir / "scores.jsonl"
            _append_jsonl(progress_path, {
                "event": "resume", "step": step, "train_steps": state["train0"],
                "scores_offset": scores.stat().st_size if scores.is_file() else 0,
                "progress_offset": progress_path.stat().st_size, "time": time.time()})

    class Driver(embodied.Driver):
        """The official env driver, kept so that its env processes can be stopped; its
        env processes start with JAX kept off the accelerator (`env_process_environ`),
        and a wait for an env's answer ends with an error when that env's process has
        died (`wait_for_answer`) instead of blocking for ever."""

        def __init__(self, *a, **kw):
            with env_process_environ():
                super().__init__(*a, **kw)
            state["driver"] = self

        def _receive(self, pipe):
            if self.parallel:
                index = self.pipes.index(pipe)
                try:
                    wait_for_answer(pipe, self.procs[index], index)
                except RuntimeError:
                    print("Terminating workers due to an exception.", flush=True)
                    [proc.kill() for proc in self.procs]
                    raise
            return super()._receive(pipe)

    def make_agent(config):
        agent = official_main.make_agent(config)
        inner = agent.train

        def counted_train(*a, **kw):
            out = inner(*a, **kw)
            state["trains"] += 1
            if state["first_train"] is None:
                state["first_train"] = (time.monotonic(), int(counter), state["trains"])
            return out
        agent.train = counted_train
        return agent

    def make_logger(config):
        def progress_output(summaries):
            progress("log")
        multiplier = config.env.get(config.task.split("_")[0], {}).get("repeat", 1)
        return embodied.Logger(counter, [
            embodied.logger.TerminalOutput(config.filter, "Agent"),
            embodied.logger.JSONLOutput(logdir, "metrics.jsonl"),
            embodied.logger.JSONLOutput(logdir, "scores.jsonl", "episode/score"),
            progress_output], multiplier)

    embodied.Checkpoint = Checkpoint
    embodied.Driver = Driver
    embodied.distr.Process.initializers.append(_ignore_signals)
    timer_on = bool(config.run.timer)
    embodied.distr.Process.initializers.append(
        lambda: setattr(embodied.timer.global_timer, "enabled", timer_on))
    embodied.timer.global_timer.enabled = timer_on
    run_args = embodied.Config(
        **config.run, logdir=config.logdir, batch_size=config.batch_size,
        batch_length=config.batch_length, batch_length_eval=config.batch_length_eval,
        replay_length=config.replay_length, replay_length_eval=config.replay_length_eval,
        replay_context=config.replay_context)
    from functools import partial as bind
    make_env = _make_env_fn(official_main.make_env, args.render)
    official_main.make_env = make_env     # make_agent builds one env for the spaces
    print(f"[official_dreamerv3] {settings['task']} seed {settings['seed']} size "
          f"{settings['size']} {config.jax.compute_dtype} on {platform}: {config.run.num_envs} "
          f"envs, train ratio {config.run.train_ratio}, until env step {target * repeat} "
          f"or {args.budget_s} s; logdir {logdir}", flush=True)
    error = None
    try:
        embodied.run.train(
            bind(make_agent, config), bind(official_main.make_replay, config, "replay"),
            bind(make_env, config), bind(make_logger, config),
            _Args(run_args, _Steps(target, stop)))
    except BaseException as e:   # noqa: BLE001 - reported below, after the envs stop
        error = e
        _report_error("the official training loop", e)
    try:
        ckpt = state["checkpoint"]
        if error is None and ckpt is not None and state["last_save_step"] != int(counter):
            ckpt.save()
    except BaseException as e:   # noqa: BLE001
        error = error or e
        _report_error("the final checkpoint save", e)
    if state["driver"] is not None:
        try:
            state["driver"].close()
        except BaseException as e:   # noqa: BLE001 - an env process that had failed
            error = error or e
            _report_error("stopping the env processes", e)
    t_end = time.monotonic()
    call = {"stop": "error" if error is not None else (stop.reason or "target"),
            "wall_s": round(t_end - t0, 2),
            "env_steps_start": state["step0"] * repeat, "env_steps_end": int(counter) * repeat,
            "train_steps_this_call": state["trains"], "platform": platform,
            "jax": jax.__version__, "devices": [str(d) for d in jax.devices()][:4]}
    if error is not None:
        call["error"] = f"{type(error).__name__}: {error}"[:2000]
    call["env_steps_per_s"] = (call["env_steps_end"] - call["env_steps_start"]) / call["wall_s"]
    call["train_steps_per_s"] = state["trains"] / call["wall_s"]
    if state["first_train"] is not None:
        t1, s1, n1 = state["first_train"]
        dt = t_end - t1
        if dt > 0:
            call["after_first_train"] = {
                "s": round(dt, 2), "env_steps_per_s": (int(counter) - s1) * repeat / dt,
                "train_steps_per_s": (state["trains"] - n1) / dt}
        call["until_first_train_s"] = round(t1 - t0, 2)
    status = 1 if error is not None else 0
    try:
        _append_jsonl(logdir / CALLS, call)
        finish(logdir, record, call, args.out)
    except BaseException as e:   # noqa: BLE001
        _report_error("writing the logs", e)
        status = 1
    if error is not None:
        print(f"[official_dreamerv3] FAILED: {call['error'].splitlines()[0]} (the traceback "
              "is above; the logs so far are converted)", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # the official loop leaves non-daemon threads (replay workers, prefetch) and the logger's
    # executors behind; everything is written, so leave without waiting for them
    os._exit(status)


def tee_process(cmd: list[str], env: dict, logs: list[Path], echo=None,
                drain_s: float = 10.0, what: str = "the training process") -> int:
    """Run ``cmd`` with its stdout and stderr together copied, as they come, to ``echo`` and
    appended to every file of ``logs``; SIGTERM and SIGINT sent to this process are passed
    on to it. A header (time, command, the environment that matters) and a footer (how it
    ended, `ended_line`) are written to the logs.

    Args:
      cmd: the command (its first item the program).
      env: its environment.
      logs: files to append to (their folders must exist).
      echo: a binary stream for the copy (default this process's stdout); write errors on
        it are ignored.
      drain_s: after the process ended, how long to keep reading what the processes it left
        (which hold the pipe) still write.
      what: the process, in the footer's words (the mode's: "the training process", "the
        check-finite process").
    Returns:
      Its exit status (negative: the signal that ended it).
    """
    echo = echo if echo is not None else sys.stdout.buffer
    files = [open(path, "ab", buffering=0) for path in logs]

    def write(data: bytes, to_echo: bool = True) -> None:
        if to_echo:
            try:
                echo.write(data)
                echo.flush()
            except (OSError, ValueError):
                pass
        for f in files:
            try:
                f.write(data)
            except (OSError, ValueError):   # ValueError: closed (a reader left behind)
                pass

    keep = ("JAX_PLATFORMS", "MUJOCO_GL", "PYTHONPATH", "XLA_FLAGS", "TPU_VISIBLE_CHIPS")
    write(("==== " + time.strftime("%Y-%m-%d %H:%M:%S %Z") + ": " + " ".join(cmd) + "\n"
           + "".join(f"==== {k}={env[k]}\n" for k in keep if k in env)).encode(), False)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}

    def pump() -> None:
        fd = proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        status = proc.wait()
        reader.join(drain_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    write(ended_line(what, status).encode(), status != 0)
    for f in files:
        f.close()
    return status


def ended_line(what: str, status: int | None) -> str:
    """`tee_process`'s footer: the time and how process ``what`` ended (`exit_text`)."""
    return f"==== {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {what} {exit_text(status)}\n"


def supervise(args, argv: list[str]) -> int:
    """The training mode's outer process: check the flags, then train in a child process
    (this script again, with `WORKER_ENV` set) whose whole output goes to the terminal and
    to `RUN_LOG` in the logdir and in --out (`tee_process`), so that a failure's message
    is kept even when the child dies in a runtime's fatal error or is killed. When the child
    ended without writing its summary (killed, crashed), the logs it left are converted
    here (metrics.csv, summary and the logs' tar into --out).

    Args:
      args: the parsed flags.
      argv: the command line's arguments, passed on unchanged.
    Returns:
      The child's exit status, as a shell reports it (128 + N for signal N).
    """
    logdir = Path(args.logdir).expanduser().resolve()
    resolve_settings(args, logdir)     # a wrong flag fails here, in one line
    check_official(args.official)
    logdir.mkdir(parents=True, exist_ok=True)
    logs = [logdir / RUN_LOG]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        logs.append(Path(args.out) / RUN_LOG)
    env = {**os.environ, WORKER_ENV: "1", "PYTHONUNBUFFERED": "1"}
    started = time.time()
    status = tee_process([sys.executable, "-u", str(Path(__file__).resolve()), *argv], env,
                         logs)
    summary = logdir / SUMMARY
    wrote = summary.is_file() and summary.stat().st_mtime >= started - 1   # coarse clocks
    record = run_record(logdir)
    if status != 0 and not wrote and record is not None:
        print("[official_dreamerv3] converting the logs the training process left",
              flush=True)
        try:
            finish(logdir, record, None, args.out)
        except Exception as e:   # noqa: BLE001 - the run's own failure matters more
            _report_error("converting the logs", e)
    return 128 - status if status < 0 else status


def finish(logdir: Path, record: dict, call: dict | None, out: str | None) -> dict:
    """Write metrics.csv and official_summary.json into ``logdir`` (and copy them, with the
    official logs, to ``out`` when given); return the summary.

    Args:
      logdir: the run's logdir.
      record: its settings (wmx_run.json, or the flags' for a plain official logdir).
      call: this call's figures (None for --convert-only).
      out: a folder to copy metrics.csv and the summary to, with the official logs and
        the driver's records in one `LOGS_TAR` (three files; four with a training call's
        `RUN_LOG`: the device brings back 8 at most), or None.
    Returns:
      The summary dict.
    """
    rows = convert(logdir, record.get("seed", 0), record.get("envs") or 16,
                   record.get("action_repeat", 2))
    write_metrics_csv(logdir / METRICS_CSV, rows)
    summary = summarize(logdir, record, call)
    (logdir / SUMMARY).write_text(json.dumps(summary, indent=1))
    if out:
        dest = Path(out)
        dest.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_CSV, SUMMARY):
            (dest / name).write_bytes((logdir / name).read_bytes())
        with tarfile.open(dest / LOGS_TAR, "w:gz") as tar:
            for name in LOG_FILES:
                if (logdir / name).is_file():
                    tar.add(logdir / name, arcname=name)
    last = summary["last_return"]
    print(f"[official_dreamerv3] {logdir}: env steps {summary['env_steps']}, train steps "
          f"{summary['train_steps']}, wall {summary['wall_s']} s, episodes "
          f"{summary['episodes']}, last return "
          f"{'-' if last is None else f'{last:.1f}'}; wrote {METRICS_CSV} and {SUMMARY}",
          flush=True)
    return summary


def convert_only(args) -> None:
    """The --convert-only mode: metrics.csv and the summary of a finished (or stopped) run.

    Args:
      args: the parsed flags; ``--seed`` and ``--envs`` replace the run's recorded values
        (needed for a logdir that this driver did not write: default seed 0, 16 envs).
    """
    logdir = Path(args.convert_only).expanduser()
    if not (logdir / "scores.jsonl").is_file() and not (logdir / PROGRESS).is_file():
        fail(f"--convert-only {logdir}: no scores.jsonl there; pass the logdir of an "
             "official DreamerV3 run")
    record = run_record(logdir) or {}
    record = {"seed": 0, "envs": 16, "action_repeat": 2, **record}
    if args.seed is not None:
        record["seed"] = args.seed
    if args.envs is not None:
        record["envs"] = args.envs
    finish(logdir, record, None, args.out)


def time_train(args) -> None:
    """The --time-train mode: the official training and policy steps, timed in this process
    (`dreamerv3_reference_driver.Reference`), as one JSON object (stdout, and --out).

    Args:
      args: the parsed flags: ``--time-train`` calls per item, ``--size``, ``--compute-dtype``,
        ``--platform``, ``--task`` (for its observation and action sizes), ``--envs``
        (the policy step's batch, default 16).
    """
    import numpy as np
    src = check_official(args.official)
    sys.path.insert(0, str(HERE))
    embodied, agt, official_main = _import_official(src)
    import jax
    from dreamerv3_reference_driver import Reference
    platform = args.platform or jax.default_backend()
    size = args.size or "12m"
    if size not in ("12m", "1m", "debug"):
        fail(f"--size {size}: --time-train knows 12m, 1m and debug")
    dtype = args.compute_dtype or "bfloat16"
    task = official_task(args.task or "reacher-easy")
    config = embodied.Config(agt.Agent.configs["defaults"]).update(
        agt.Agent.configs["dmc_proprio"]).update({"task": task})
    os.environ.setdefault("MUJOCO_GL", "off")
    _no_render()
    env = official_main.make_env(config, 0)
    skip = ("reward", "is_first", "is_last", "is_terminal")
    obs_dim = sum(int(np.prod(s.shape)) for k, s in env.obs_space.items()
                  if k not in skip and not k.startswith("log_"))
    action_dim = int(np.prod(env.act_space["action"].shape))
    env.close()
    n_envs = args.envs or 16
    ref = Reference(src)
    info = ref.setup(size, obs_dim, action_dim, 16, 64, n_envs, seed=args.seed or 0,
                     platform=platform, compute_dtype=dtype)
    result = {"official_commit": OFFICIAL_COMMIT, "task": task, "size": size,
              "compute_dtype": dtype, "platform": platform, "obs_dim": obs_dim,
              "action_dim": action_dim, "batch": [16, 65], "n_envs": n_envs,
              "devices": [str(d) for d in jax.devices()][:4], **info,
              "train": ref.time("train", args.time_train),
              "policy": ref.time("policy", max(args.time_train, 10))}
    for item in ("train", "policy"):
        result[f"{item}_ms_median"] = statistics.median(result[item]["wall_ms"])
    text = json.dumps(result, indent=1, default=str)
    print(text, flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"official_train_step_{size}_{platform}.json").write_text(text)



# ==== --check-finite: where a policy output stops being finite ===========================
CHECK_JSON = "official_check_finite.json"
CHECK_LOG = "official_check_finite.log"
CHECK_VARIANTS = ("loop", "float32", "nodonate")
"""The agents `check_finite` builds, in this order: ``loop`` (the run's config, built as
the loop builds it: the official ``make_agent``, its train and report programs compiled,
donation on), ``float32`` (the same with ``jax.compute_dtype`` float32) and ``nodonate``
(the loop's dtype, built with the jit adapter's donation dropped). The variants other than
``loop`` skip compiling the train and report programs at build (`_skip_train_compile`):
the train program compiles at its first call, when the variant trains."""


class _Uncompiled:
    """Stands in for a lowered program whose ``compile()`` should return the jit itself
    (compiled at its first call, if ever)."""

    def __init__(self, fn):
        self.fn = fn

    def compile(self):
        return self.fn


def _skip_train_compile(jaxagent) -> None:
    """Make the official JAXAgent's constructor run what its ``_lower_train`` and
    ``_lower_report`` execute (``init_train``, ``init_report``) but not lower or compile
    the train and report programs (a train call then compiles at its first call)."""
    def lower_train(self):
        self.init_train(self.config.batch_size)
        self._train = _Uncompiled(self._train)

    def lower_report(self):
        self.init_report(self.config.batch_size)
        self._report = _Uncompiled(self._report)

    jaxagent.JAXAgent._lower_train = lower_train
    jaxagent.JAXAgent._lower_report = lower_report


def _to_float_np(value):
    """``value`` (an array of any backend) as a numpy array, bfloat16 as float32."""
    import numpy as np
    a = np.asarray(value)
    if a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    return a


def param_report(params: dict, limit: int = 12) -> dict:
    """Finiteness of every floating parameter of ``params`` (name -> array).

    Returns:
      (an entry that is a tree of arrays counts each leaf, named ``name[path]``)
      {"params", "values", "nonfinite_params", "nonfinite_values", "nan_values",
      "inf_values", "first": [{"name", "nonfinite", "nan", "size", "dtype", "shape"}] (at
      most ``limit``, in name order), "by_module": {module: non-finite values},
      "by_kind": {last name part (kernel, bias, scale, ...): [non-finite, all values]}, "absmax":
      the largest finite magnitude, "absmax_name"}.
    """
    import jax
    import numpy as np
    host = jax.device_get(params)
    leaves = []
    for name in sorted(host):   # an entry may be a tree of arrays (optimizer states)
        for path, leaf in jax.tree_util.tree_leaves_with_path(host[name]):
            leaves.append((name + jax.tree_util.keystr(path), leaf))
    out = {"params": 0, "values": 0, "nonfinite_params": 0, "nonfinite_values": 0,
           "nan_values": 0, "inf_values": 0, "first": [], "by_module": {}, "by_kind": {},
           "absmax": 0.0, "absmax_name": None}
    for name, leaf in leaves:
        a = _to_float_np(leaf)
        if not np.issubdtype(a.dtype, np.floating):
            continue
        out["params"] += 1
        out["values"] += int(a.size)
        finite = np.isfinite(a)
        bad = int(a.size - finite.sum())
        kind = out["by_kind"].setdefault(name.split("[")[0].split("/")[-1], [0, 0])
        kind[0] += bad
        kind[1] += int(a.size)
        if finite.any():
            m = float(np.abs(a[finite]).max())
            if m > out["absmax"]:
                out["absmax"], out["absmax_name"] = m, name
        if not bad:
            continue
        nan = int(np.isnan(a).sum())
        out["nonfinite_params"] += 1
        out["nonfinite_values"] += bad
        out["nan_values"] += nan
        out["inf_values"] += bad - nan
        module = "/".join(name.split("/")[:2])
        out["by_module"][module] = out["by_module"].get(module, 0) + bad
        if len(out["first"]) < limit:
            out["first"].append({"name": name, "nonfinite": bad, "nan": nan,
                                 "size": int(a.size), "dtype": str(np.asarray(leaf).dtype),
                                 "shape": list(a.shape)})
    return out


def primitive_report(seed: int = 0) -> dict:
    """The random and special functions the official initialisers use, jitted on JAX's
    default device at a 12m kernel's shape, each: {"nonfinite", "min", "max"} (the
    ``Initializer("normal")`` chain: ``truncated_normal(-2, 2)`` from an ``nj.seed()``-style
    split key, and its parts ``uniform``, ``erf_inv``, ``nextafter``; ``normal``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    shape = (1024, 256)

    def fns(key):
        key = jax.random.split(key, 16)[1]
        u = jax.random.uniform(key, shape, jnp.float32, -0.9545, 0.9545)
        return {"truncated_normal": jax.random.truncated_normal(key, -2, 2, shape),
                "uniform": u, "erf_inv": jax.lax.erf_inv(u),
                "nextafter": jax.lax.nextafter(jnp.full(shape, -2.0, jnp.float32),
                                               jnp.full(shape, jnp.inf, jnp.float32)),
                "normal": jax.random.normal(key, shape, jnp.float32),
                "bf16_matmul": (u.astype(jnp.bfloat16) @ u.T.astype(jnp.bfloat16))}
    key = jax.device_put(np.array([seed, 0], np.uint32))
    with jax.transfer_guard("allow"):
        host = jax.device_get(jax.jit(fns)(key))
    out = {}
    for name, v in host.items():
        a = _to_float_np(v)
        out[name] = {"nonfinite": int(a.size - np.isfinite(a).sum()),
                     "min": float(np.nanmin(a)) if np.isfinite(a).any() else None,
                     "max": float(np.nanmax(a)) if np.isfinite(a).any() else None}
    out["device"] = str(jax.devices()[0])
    return out


def _copies_differ(params: dict, policy_params: dict) -> dict:
    """How far the policy's copies of the parameters are from the parameters themselves
    (they are ``.copy()`` of them before any training): {"compared", "differ": names of
    those not bitwise equal (at most 12), "n_differ"}."""
    import jax
    import numpy as np
    keys = sorted(policy_params)
    a = jax.device_get({k: params[k] for k in keys})
    b = jax.device_get(dict(policy_params))
    differ = [k for k in keys if not np.array_equal(np.asarray(a[k]), np.asarray(b[k]),
                                                    equal_nan=True)]
    return {"compared": len(keys), "n_differ": len(differ), "differ": differ[:12]}


def finite_report(finite: dict) -> dict:
    """The official policy's ``finite`` output (key -> (isfinite per env, min, max)) as
    {key: {"finite_envs", "envs", "min", "max"}} (min and max over the envs, NaN as
    null)."""
    import numpy as np
    out = {}
    for key, (isfinite, lo, hi) in sorted(finite.items()):
        isfinite, lo, hi = (np.asarray(x) for x in (isfinite, lo, hi))
        lo = np.asarray(lo, np.float64)
        hi = np.asarray(hi, np.float64)
        out[key] = {"finite_envs": int(isfinite.sum()), "envs": int(isfinite.size),
                    "min": None if np.isnan(lo).all() else float(np.nanmin(lo)),
                    "max": None if np.isnan(hi).all() else float(np.nanmax(hi))}
    return out


def bad_keys(report: dict) -> list[str]:
    """The keys of a `finite_report` with a non-finite env."""
    return [k for k, v in report.items() if v["finite_envs"] < v["envs"]]


def _official_frames(tb, src: Path, limit: int = 8) -> list[str]:
    """The last ``limit`` frames of a traceback that lie in the official source, as
    "file:line function: code"."""
    src = str(Path(src).resolve())
    frames = [f for f in traceback.extract_tb(tb) if str(Path(f.filename).resolve())
              .startswith(src)]
    return [f"{Path(f.filename).resolve().relative_to(src)}:{f.lineno} {f.name}: "
            f"{(f.line or '').strip()}" for f in frames[-limit:]]


class _CheckLog:
    """The check's JSON result, rewritten whole after every step (a killed call keeps what
    it found), and its one-line progress messages (stdout)."""

    def __init__(self, out: Path | None, result: dict):
        self.out, self.result, self.t0 = out, result, time.monotonic()
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        print(f"[check-finite {time.monotonic() - self.t0:7.1f} s] {text}", flush=True)

    def save(self) -> None:
        self.result["elapsed_s"] = round(time.monotonic() - self.t0, 2)
        text = json.dumps(self.result, indent=1, default=str)
        if self.out is not None:
            tmp = self.out / (CHECK_JSON + ".tmp")
            tmp.write_text(text)
            tmp.replace(self.out / CHECK_JSON)


def _policy_call(agent, obs: dict, carry, mode: str = "train", params=None):
    """One official policy call (``JAXAgent.policy``'s steps, its parameter swap included)
    without its finiteness assertions.

    Returns:
      (acts, outs without "finite", carry, finite) as host arrays (carry: the official
      per-env list).
    """
    import jax
    from dreamerv3.jaxagent import fetch_async
    obs = agent._filter_data(obs)
    with agent.policy_lock:
        carry = agent._stack(carry)
        obs, carry = jax.device_put((obs, carry), agent.policy_sharded)
        seed = agent._next_seeds(agent.policy_sharded)
        acts, outs, carry = agent._policy(
            agent.policy_params if params is None else params, obs, carry, seed, mode)
        if agent.pending_sync and params is None:
            old = agent.policy_params
            agent.policy_params = agent.pending_sync
            jax.tree.map(lambda x: x.delete(), old)
            agent.pending_sync = None
    carry = agent._split(carry)
    acts, outs = agent._take_outs(fetch_async((acts, outs)))
    finite = outs.pop("finite", {})
    return acts, outs, carry, finite


class _Envs:
    """The run's official envs stepped in this process as the official driver steps them
    (reset actions first; each next action the policy's, NaN as 0; reset where an episode
    ended)."""

    def __init__(self, make_env, n: int):
        import numpy as np
        self.np = np
        self.envs = [make_env(i) for i in range(n)]
        self.act_space = self.envs[0].act_space
        self.reset()

    def reset(self) -> None:
        np = self.np
        n = len(self.envs)
        self.acts = {k: np.zeros((n,) + v.shape, v.dtype) for k, v in self.act_space.items()}
        self.acts["reset"] = np.ones(n, bool)

    def step(self) -> dict:
        np = self.np
        acts = [{k: v[i] for k, v in self.acts.items()} for i in range(len(self.envs))]
        obs = [env.step(a) for env, a in zip(self.envs, acts)]
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}

    def act(self, acts: dict, obs: dict) -> None:
        np = self.np
        new = {}
        for k, v in acts.items():
            v = np.asarray(v)
            if np.issubdtype(v.dtype, np.floating):
                v = np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
            if v.ndim:   # the official driver's mask: no action where an episode ended
                mask = ~obs["is_last"].reshape((-1,) + (1,) * (v.ndim - 1))
                v = v * mask.astype(v.dtype)
            new[k] = v
        new["reset"] = obs["is_last"].copy()
        self.acts = new

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:   # noqa: BLE001
                pass


def _pure_train(agent):
    """The official train step as a pure function ``fn(params, data, carry, seed) ->
    params`` (``nj.pure`` of the agent's ``train``, as ``JAXAgent._transform`` wraps it)."""
    from dreamerv3 import ninjax as nj
    pure = nj.pure(agent.agent.train)

    def fn(params, data, carry, seed):
        return pure(params, data, carry, seed=seed)[0]
    return fn


def _train_inputs(first: dict) -> tuple:
    """(params, data without its seed, carry, seed) of the first train call."""
    data = dict(first["data"])
    seed = data.pop("seed")
    return first["params"], data, first["carry"], seed


def _source_lines(text: str, src: Path, limit: int) -> list[str]:
    """The words of ``text`` that name a file of the official source (``src``)."""
    root = str(Path(src).resolve())
    lines = []
    for part in text.split():
        if root in part or "dreamerv3/" in part or "embodied/" in part:
            lines.append(part.replace(root + "/", ""))
    return lines[:limit]


def train_nan_report(fn, first: dict, src: Path, limit: int = 6) -> dict:
    """Where a train step first makes a NaN, by ``jax.experimental.checkify``'s NaN checks:
    every primitive of the jitted step, the backward pass included, is instrumented, and
    the first whose output is NaN is reported with the user frame that made it.

    Args:
      fn: the pure train step, ``fn(params, data, carry, seed) -> params``
        (`_pure_train`).
      first: the first train call's ``params``, ``data`` (with its ``seed``), ``carry``.
      src: the official source folder, to pick its lines out of the message.

    Returns:
      ``nan_at`` (checkify's message; None when the checked step stays finite),
      ``official_lines``, ``compile_and_run_s`` and the parameters' finiteness after
      the checked step.
    """
    import jax
    from jax.experimental import checkify
    checked = jax.jit(checkify.checkify(fn, errors=checkify.nan_checks))
    with jax.transfer_guard("allow"):
        t = time.monotonic()
        err, params = checked(*_train_inputs(first))
        jax.block_until_ready(params)
        wall = time.monotonic() - t
        message = err.get()
        after = param_report(jax.device_get(params))
    return {"nan_at": message[:3000] if message else None,
            "official_lines": _source_lines(message or "", src, limit),
            "compile_and_run_s": round(wall, 2),
            "params_after": {k: after[k] for k in ("nonfinite_values", "first")}}


def train_debug_nans_report(fn, first: dict, src: Path) -> dict:
    """The first train call again (``fn`` jitted, same inputs) under ``jax_debug_nans``:
    when the compiled step returns a NaN, JAX reruns it op by op and raises at the first
    primitive whose output is NaN, backward pass included; the official frames of that
    traceback say which line made it. Much cheaper to build than `train_nan_report` (no
    instrumented program), slower to run. Same arguments as `train_nan_report`.

    Returns:
      ``raised`` ("FloatingPointError" with its ``message`` and ``official_frames``, or
      None with the parameters' finiteness after the step)."""
    import jax
    step = jax.jit(fn)
    try:
        with jax.debug_nans(True), jax.transfer_guard("allow"):
            params = jax.device_get(step(*_train_inputs(first)))
    except FloatingPointError as e:
        return {"raised": "FloatingPointError", "message": str(e)[:3000],
                "official_frames": _official_frames(e.__traceback__, src, limit=12)}
    after = param_report(params)
    return {"raised": None, "params_after": {k: after[k] for k in ("nonfinite_values",)}}


def train_highest_report(fn, first: dict) -> dict:
    """The first train call again (``fn`` jitted, same inputs) with every float32 matmul
    at full precision (``jax.default_matmul_precision("highest")``; on a TPU the default
    is one bfloat16 pass): whether the parameters after it are finite."""
    import jax
    with jax.default_matmul_precision("highest"), jax.transfer_guard("allow"):
        params = jax.device_get(jax.jit(fn)(*_train_inputs(first)))
    after = param_report(params)
    return {"params_after": {k: after[k] for k in ("nonfinite_values", "first")}}


def _probe(log: _CheckLog, entry: dict, name: str, fn) -> None:
    """Run one probe ``fn()`` (returns a dict), store its result (or its error) as
    ``entry[name]`` with its wall time, save the JSON."""
    t = time.monotonic()
    log.say(f"{name} ...")
    try:
        value = fn()
    except Exception as e:   # noqa: BLE001 - a probe's failure is a finding
        value = {"error": f"{type(e).__name__}: {e}"[:3000]}
        traceback.print_exc()
    value["wall_s"] = round(time.monotonic() - t, 2)
    entry[name] = value
    log.say(f"{name}: {json.dumps(value, default=str)[:600]}")
    log.save()


def check_finite(args) -> None:
    """The --check-finite mode: build the official agent as the training loop does, then
    report where its outputs stop being finite (JSON `CHECK_JSON` in --out, rewritten
    after every step; progress on stdout, which the supervising process copies to
    `CHECK_LOG`). First ``primitives`` (`primitive_report`: the initialisers' random and
    special functions alone on the default device); then for each agent of
    ``--check-variants`` (`CHECK_VARIANTS`):

    - ``build``: its wall time; ``params`` and ``policy_params``: `param_report` of the
      parameters and of the policy's copies, and whether the copies equal them;
    - ``policy``: ``--check-finite`` N official policy calls on the run's envs (stepped in
      this process as the official driver steps them: reset first, then the policy's
      actions), the `finite_report` of each call's official ``finite`` output (inputs,
      embed, latents, actions: per key the envs where it is finite, min, max) and the
      actions' finiteness;
    - where a call was not finite, on the first such call's inputs: ``fresh_buffers``
      (the same program on a host round trip of the policy parameters), ``cpu_policy``
      (the same policy function jitted on the CPU with the same parameters, inputs and
      seed), ``matmul_highest`` (retraced under ``jax.default_matmul_precision("highest")``)
      and ``debug_nans`` (the call again under ``jax_debug_nans``: JAX reruns it op by op
      and names the first primitive that made a NaN, or says only the compiled program
      does);
    - ``train`` (``--check-train-steps`` K > 0; the ``loop`` variant, and ``nodonate`` and
      ``float32`` only where the loop variant's training left something non-finite or
      did not run):
      K official train calls on the official dummy batch, the parameters' finiteness
      after them, the metrics' finiteness (on the all-zero dummy batch four are NaN by
      construction, means over no positive rewards or terminations: ``rewstats/pos_*``,
      ``constats/neg_*``), and then ``policy_after_train``: N more policy calls with the
      trained parameters (the official swap, after its first call). Where a train call
      left a parameter non-finite, on the first call's inputs: ``train_debug_nans`` or
      ``train_nans`` (``--check-train-probe`` debug_nans or checkify: the first primitive
      that made a NaN) and
      ``train_highest`` (the same step with full-precision float32 matmuls).

    Args:
      args: the parsed flags (task, seed, size, envs, platform, compute dtype of the
        ``loop`` variant, ``--set``, ``--out``, ``--check-*``).
    """
    import numpy as np
    src = check_official(args.official)
    sys.path.insert(0, str(HERE))
    embodied, agt, official_main = _import_official(src)
    import _official_compat
    import jax
    from dreamerv3 import jaxagent
    from dreamerv3 import ninjax as nj
    out = Path(args.out) if args.out else None
    variants = [v.strip() for v in args.check_variants.split(",") if v.strip()]
    for v in variants:
        if v not in CHECK_VARIANTS:
            fail(f"--check-variants {args.check_variants}: {v!r} is not one of "
                 f"{', '.join(CHECK_VARIANTS)}")
    platform = args.platform or jax.default_backend()
    cache = None
    if args.compile_cache and args.compile_cache != "off":
        cache = Path(args.compile_cache)
        cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache))
    logdir = Path(args.logdir).expanduser().resolve() if args.logdir else \
        Path(tempfile.mkdtemp(prefix="dv3check_"))
    settings, _ = resolve_settings(args, logdir)
    result = {"official_commit": OFFICIAL_COMMIT, "mode": "check-finite",
              "argv": sys.argv[1:], "platform": platform, "jax": jax.__version__,
              "devices": [str(d) for d in jax.devices()][:4],
              "adapters": list(_official_compat.APPLIED), "settings": settings,
              "calls": args.check_finite, "variants": {}, "summary": {}}
    try:
        import jaxlib
        result["jaxlib"] = jaxlib.__version__
    except ImportError:
        pass
    log = _CheckLog(out, result)
    log.save()
    _probe(log, result, "primitives", primitive_report)
    os.environ.setdefault("MUJOCO_GL", "off")
    make_env_official = _make_env_fn(official_main.make_env, args.render)
    official_main.make_env = make_env_official
    envs = None
    original_lower = (jaxagent.JAXAgent._lower_train, jaxagent.JAXAgent._lower_report)
    loop_train_bad = None   # after the loop variant trained: anything non-finite?
    for index, variant in enumerate(variants):
        entry = result["variants"].setdefault(variant, {})
        vset = dict(settings)
        if variant == "float32":
            vset["compute_dtype"] = "float32"
        config, _ = build_config(embodied, agt, vset, logdir / variant, platform, None,
                                 args.save_every, args.log_every)
        entry["compute_dtype"] = str(config.jax.compute_dtype)
        # nodonate and float32 train only where the loop variant's training left something
        # non-finite (or did not run): donation and the compute dtype act in training too
        train_steps = args.check_train_steps if variant == "loop" or (
            variant in ("nodonate", "float32") and loop_train_bad is not False) else 0
        entry["donation"] = variant != "nodonate"
        entry["train_and_report_compiled_at_build"] = variant == "loop"
        _official_compat.set_donation(variant != "nodonate")
        jaxagent.JAXAgent._lower_train, jaxagent.JAXAgent._lower_report = original_lower
        if variant != "loop":
            _skip_train_compile(jaxagent)
        t = time.monotonic()
        log.say(f"{variant}: building the official agent ({entry['compute_dtype']}, "
                f"donation {'on' if entry['donation'] else 'off'})")
        try:
            agent = official_main.make_agent(config)
        except Exception as e:   # noqa: BLE001
            entry["build"] = {"error": f"{type(e).__name__}: {e}"[:3000]}
            traceback.print_exc()
            log.save()
            continue
        entry["build"] = {"wall_s": round(time.monotonic() - t, 2)}
        log.say(f"{variant}: built in {entry['build']['wall_s']} s")
        _probe(log, entry, "params", lambda: param_report(agent.params))
        _probe(log, entry, "policy_params", lambda: {
            **param_report(agent.policy_params),
            "copies": _copies_differ(agent.params, agent.policy_params)})
        if envs is None:
            envs = _Envs(lambda i: make_env_official(config, i), int(config.run.num_envs))
        else:
            envs.reset()

        first_bad = {}

        def run_policy(n: int, label: str) -> dict:
            carry = agent.init_policy(int(config.run.num_envs))
            calls, bad_calls = [], []
            for i in range(n):
                obs = envs.step()
                inputs = (obs, carry)
                acts, outs, carry, finite = _policy_call(agent, obs, carry)
                rep = finite_report(finite)
                keys = bad_keys(rep)
                act_ok = {k: bool(np.isfinite(np.asarray(v, np.float64)).all())
                          for k, v in acts.items()}
                calls.append({"call": i, "bad_keys": keys, "acts_finite": act_ok,
                              "finite": rep if (i == 0 or keys) and len(calls) < 4 else None})
                if keys:
                    bad_calls.append(i)
                    if "inputs" not in first_bad:
                        first_bad["inputs"] = inputs
                        first_bad["label"] = f"{label} call {i}"
                envs.act(acts, obs)
            return {"calls": n, "nonfinite_calls": bad_calls, "per_call": calls}

        _probe(log, entry, "policy", lambda: run_policy(args.check_finite, "policy"))
        if "inputs" in first_bad:
            obs0, carry0 = first_bad["inputs"]
            entry["probes_on"] = first_bad["label"]

            def fresh():
                fresh_params = jax.device_put(jax.device_get(agent.policy_params),
                                              agent.policy_mirrored)
                _, _, _, finite = _policy_call(agent, obs0, carry0, params=fresh_params)
                return {"bad_keys": bad_keys(finite_report(finite))}

            def on_cpu():
                cpu = jax.devices("cpu")[0]
                pure = nj.pure(agent.agent.policy)

                def fn(params, obs, carry, seed):
                    return pure(params, obs, carry, "train", seed=seed)[1]
                with jax.transfer_guard("allow"):
                    params = jax.device_put(jax.device_get(agent.policy_params), cpu)
                    obs = jax.device_put(agent._filter_data(obs0), cpu)
                    carry = jax.device_put(jax.device_get(agent._stack(carry0)), cpu)
                    seed = jax.device_put(agent._next_seeds(agent.policy_sharded), cpu)
                    _, outs, _ = jax.jit(fn)(params, obs, carry, seed)
                    finite = jax.device_get(outs["finite"])
                return {"device": str(cpu), "bad_keys": bad_keys(finite_report(finite))}

            def highest():
                with jax.default_matmul_precision("highest"):
                    _, _, _, finite = _policy_call(agent, obs0, carry0,
                                                   params=agent.policy_params)
                return {"bad_keys": bad_keys(finite_report(finite))}

            def debug_nans():
                try:
                    with jax.debug_nans(True), jax.transfer_guard("allow"):
                        _, _, _, finite = _policy_call(agent, obs0, carry0,
                                                       params=agent.policy_params)
                except FloatingPointError as e:
                    return {"raised": "FloatingPointError", "message": str(e)[:3000],
                            "official_frames": _official_frames(e.__traceback__, src)}
                return {"raised": None, "bad_keys": bad_keys(finite_report(finite))}

            _probe(log, entry, "fresh_buffers", fresh)
            if platform != "cpu":
                _probe(log, entry, "cpu_policy", on_cpu)
            _probe(log, entry, "matmul_highest", highest)
            _probe(log, entry, "debug_nans", debug_nans)

        if train_steps > 0:
            def train():
                B, T = config.batch_size, config.batch_length
                data = agent._dummy_batch(agent.spaces, (B, T))
                carry = agent.init_train(B)
                mets_bad, steps = [], []
                for i in range(train_steps):
                    batch = {**jax.device_put(data, agent.train_sharded),
                             "seed": agent._next_seeds(agent.train_sharded)}
                    if i == 0:   # the first call's inputs, for train_nans
                        with jax.transfer_guard("allow"):
                            first_train.update(params=jax.device_get(agent.params),
                                               data=jax.device_get(batch),
                                               carry=jax.device_get(carry))
                    t1 = time.monotonic()
                    _, carry, mets = agent.train(batch, carry)
                    jax.block_until_ready(agent.params)
                    steps.append(round(time.monotonic() - t1, 3))
                    for k, v in mets.items():
                        a = np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" \
                            else None
                        if a is not None and not np.isfinite(a).all():
                            mets_bad.append(k)
                return {"steps": train_steps, "step_s": steps,
                        "nonfinite_metrics": sorted(set(mets_bad))[:20],
                        "params_after": param_report(agent.params)}
            first_train = {}
            _probe(log, entry, "train", train)
            bad = entry["train"].get("params_after", {}).get("nonfinite_values")
            if first_train and (bad or args.check_train_probe == "checkify"):
                if args.check_train_probe == "checkify":
                    _probe(log, entry, "train_nans",
                           lambda: train_nan_report(_pure_train(agent), first_train, src))
                elif args.check_train_probe == "debug_nans":
                    _probe(log, entry, "train_debug_nans",
                           lambda: train_debug_nans_report(_pure_train(agent), first_train,
                                                           src))
            if first_train and bad:
                _probe(log, entry, "train_highest",
                       lambda: train_highest_report(_pure_train(agent), first_train))
            if "error" not in entry["train"]:
                envs.reset()
                first_bad.clear()
                _probe(log, entry, "policy_after_train",
                       lambda: run_policy(args.check_finite, "after train"))
        if variant == "loop" and "train" in entry:
            loop_train_bad = bool(entry["train"].get("error")
                                  or entry["train"].get("params_after", {})
                                  .get("nonfinite_values")
                                  or entry.get("policy_after_train", {})
                                  .get("nonfinite_calls", True))
        nonfinite = {
            "params": entry.get("params", {}).get("nonfinite_values"),
            "policy_params": entry.get("policy_params", {}).get("nonfinite_values"),
            "policy_calls": entry.get("policy", {}).get("nonfinite_calls"),
            "first_bad_keys": next((c["bad_keys"] for c in entry.get("policy", {})
                                    .get("per_call", []) if c["bad_keys"]), []),
        }
        for probe in ("fresh_buffers", "cpu_policy", "matmul_highest", "debug_nans"):
            if probe in entry:   # the output keys still non-finite, or what went wrong
                p = entry[probe]
                nonfinite[probe] = p.get("error") or p.get("message") or p.get("bad_keys")
        if "train" in entry:
            p = entry["train"]
            nonfinite["train"] = p.get("error") or {
                "params_after": p["params_after"]["nonfinite_values"],
                "metrics": p["nonfinite_metrics"]}
        if "policy_after_train" in entry:
            p = entry["policy_after_train"]
            nonfinite["policy_after_train"] = p.get("error") or p["nonfinite_calls"]
        result["summary"][variant] = nonfinite
        log.say(f"{variant}: {json.dumps(nonfinite, default=str)[:800]}")
        log.save()
        del agent
        import gc
        gc.collect()
    if envs is not None:
        envs.close()
    _official_compat.set_donation(True)
    log.say("done")
    log.save()


def parse(argv=None):
    """The command line (see --help).

    Args:
      argv: the arguments (default sys.argv[1:]).
    Returns:
      The argparse namespace; exits (2) with one line on a contradiction.
    """
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Without --official the bundle's source (.official-dv3/src, from "
               "tools/official_dreamerv3_bundle.py) is used. Run --help anywhere: the "
               "official code is imported only to train or time.")
    p.add_argument("--official", default=str(DEFAULT_BUNDLE / "src"),
                   help="the official source tree (default: the bundle's src/)")
    p.add_argument("--task", help="DMC task, wmx's name (reacher-easy) or the official one "
                   "(dmc_reacher_easy); default reacher-easy")
    p.add_argument("--seed", type=int, help="the official config's seed (default 0)")
    p.add_argument("--logdir", help="the run's folder; a second call continues the run there")
    p.add_argument("--env-steps", type=int, help="stop at this many env steps (the official "
                   "counter × action repeat; default the dmc_proprio run.steps × repeat)")
    p.add_argument("--budget-s", type=float, help="stop the loop once this many seconds have "
                   "passed since the driver started (then it saves: allow ~10-30 s more "
                   "before an external limit)")
    p.add_argument("--size", choices=SIZES, help="the model size preset (default 12m, the "
                   "paper's for DMC; 1m: the reference's later size1m widths; debug: the "
                   "official debug block, tiny)")
    p.add_argument("--compute-dtype", choices=("bfloat16", "float32", "float16"),
                   help="jax.compute_dtype (default the config's, bfloat16)")
    p.add_argument("--envs", type=int, help="run.num_envs (default the config's: 16)")
    p.add_argument("--train-ratio", type=float, help="run.train_ratio (default the "
                   "config's: 512)")
    p.add_argument("--platform", choices=("cpu", "tpu", "gpu"),
                   help="jax.platform (default JAX's default backend)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="another official config override, e.g. run.driver_parallel=False "
                   "(repeatable; part of the run's settings)")
    p.add_argument("--save-every", type=float, default=120.0,
                   help="checkpoint period in seconds (run.save_every; default 120)")
    p.add_argument("--log-every", type=float, default=120.0,
                   help="log period in seconds (run.log_every; default 120, the official)")
    p.add_argument("--render", action="store_true", help="render the log_image observation "
                   "(needs OpenGL; default: black frames)")
    p.add_argument("--compile-cache", help="XLA compilation cache folder (default "
                   "<logdir>/jax_cache; 'off' for none)")
    p.add_argument("--out", help="also write metrics.csv, the summary, official_logs.tar.gz "
                   "(the official logs and the driver's records) and, when training, "
                   f"{RUN_LOG} (the call's whole output) here (e.g. $OUT on the device)")
    p.add_argument("--convert-only", metavar="LOGDIR", help="only convert LOGDIR's official "
                   "logs to metrics.csv and official_summary.json (no official code needed)")
    p.add_argument("--time-train", type=int, metavar="N", help="only time N official "
                   "training steps (and policy steps) at --size (12m, 1m, or debug) and "
                   "--compute-dtype (default bfloat16), in this process")
    p.add_argument("--check-finite", type=int, metavar="N", help="only diagnose non-finite "
                   "outputs: build the official agent as the loop does and report the "
                   "parameters' finiteness and N policy calls' (per output key), for each "
                   "of --check-variants; JSON and log in --out")
    p.add_argument("--check-variants", default=",".join(CHECK_VARIANTS),
                   help="agents --check-finite builds, in order (default "
                   f"{','.join(CHECK_VARIANTS)}; float32: jax.compute_dtype float32, "
                   "nodonate: the jit adapter drops donation)")
    p.add_argument("--check-train-probe", choices=("debug_nans", "checkify", "none"),
                   default="debug_nans",
                   help="--check-finite: where a train step that left NaN parameters made "
                        "its first NaN: debug_nans (default; JAX reruns the step op by op), "
                        "checkify (an instrumented program, run on a finite step too as the "
                        "control; its build is slow), none")
    p.add_argument("--check-train-steps", type=int, default=2, metavar="K",
                   help="--check-finite: official train calls (dummy batch) in the loop "
                   "variant (and in nodonate where the loop's left something non-finite), "
                   "then N policy calls again (default 2; 0: none)")
    args = p.parse_args(argv)
    modes = [m for m in ("convert_only", "time_train", "check_finite")
             if getattr(args, m) is not None]
    if len(modes) > 1:
        fail("--convert-only, --time-train and --check-finite are separate modes; give one")
    if not modes and not args.logdir:
        fail("--logdir is required to train (or give --convert-only LOGDIR / --time-train N "
             "/ --check-finite N)")
    if args.check_finite is not None and args.check_finite < 1:
        fail(f"--check-finite {args.check_finite}: give at least one policy call")
    if args.check_train_steps < 0:
        fail(f"--check-train-steps {args.check_train_steps}: give 0 or more")
    if args.budget_s is not None and args.budget_s <= 0:
        fail(f"--budget-s {args.budget_s}: give a positive number of seconds")
    if args.time_train is not None and args.time_train < 1:
        fail(f"--time-train {args.time_train}: give at least one call")
    for item in args.set or ():
        if "=" not in item:
            fail(f"--set {item}: write KEY=VALUE, e.g. --set run.driver_parallel=False")
    return args


def main(argv=None) -> None:
    """Entry point: parse the flags and run the chosen mode.

    Args:
      argv: the arguments (default sys.argv[1:]).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.convert_only is not None:
        convert_only(args)
    elif args.time_train is not None:
        time_train(args)
    elif args.check_finite is not None:
        if os.environ.get(WORKER_ENV) == "1" or not args.out:
            check_finite(args)
        else:   # the whole output (the official code's, any runtime's) into --out too
            Path(args.out).mkdir(parents=True, exist_ok=True)
            env = {**os.environ, WORKER_ENV: "1", "PYTHONUNBUFFERED": "1"}
            status = tee_process([sys.executable, "-u", str(Path(__file__).resolve()), *argv],
                                 env, [Path(args.out) / CHECK_LOG],
                                 what="the check-finite process")
            raise SystemExit(128 - status if status < 0 else status)
    elif os.environ.get(WORKER_ENV) == "1":
        train(args)
    else:
        raise SystemExit(supervise(args, argv))


if __name__ == "__main__":
    main()
