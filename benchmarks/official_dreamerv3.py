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

- the loop stops when ``--budget-s`` has passed since the driver started (with
  ``--episode-window S``: at the first episode end in the last S seconds before it,
  as a resumed loop restarts its envs and never scores the episodes that were
  running), when the env-step target is reached, or on SIGTERM/SIGINT (``timeout -k``'s
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
`_official_check.check_finite`).

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
import faulthandler
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_BUNDLE = ROOT / ".official-dv3"
OFFICIAL_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"

sys.path.insert(0, str(HERE))   # _official_logs, _official_check, _official_compat
from _official_logs import (CALLS, PROGRESS, RUN_RECORD, convert, fail,  # noqa: E402
                            read_progress, run_record, summarize, write_metrics_csv)

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


# ==== the official run ==================================================================
class _Stop:
    """Why the loop should stop (None while it should go on): budget, target, signal.

    With ``episode_window`` (seconds) the budget stop comes early, at the first episode
    end within that window before the deadline: a resumed official loop restarts its
    envs, so the episodes still running at a stop are never scored, and on DMC (all envs
    end together) a stop just after a group ended loses none.
    """

    def __init__(self, deadline: float | None, episode_window: float = 0.0):
        self.deadline, self.episode_window = deadline, float(episode_window)
        self.reason: str | None = None
        self.last_episode_end: float | None = None

    def episode_ended(self, now: float | None = None) -> None:
        """An env's episode ended (the logger got its score) at ``now`` (monotonic s)."""
        self.last_episode_end = time.monotonic() if now is None else now

    def check(self, now: float | None = None) -> bool:
        """True once the loop must stop: sets ``reason`` to "budget" at the deadline, or
        to "budget, at an episode end" once an episode ended inside the window (the
        window opens at the deadline less ``episode_window``; 0: never before it)."""
        if self.reason is None and self.deadline is not None:
            now = time.monotonic() if now is None else now
            if now >= self.deadline:
                self.reason = "budget"
            elif self.last_episode_end is not None and \
                    self.last_episode_end >= self.deadline - self.episode_window:
                self.reason = "budget, at an episode end"
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
    stop = _Stop(None if args.budget_s is None else t0 + args.budget_s, args.episode_window)
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

        class EpisodeWatch(embodied.Logger):
            """The official logger; an episode's score tells the stop (--episode-window)."""

            def add(self, mapping, prefix=None):
                if prefix == "episode":
                    stop.episode_ended()
                return super().add(mapping, prefix)

        return EpisodeWatch(counter, [
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


# ==== --check-finite (its code: _official_check.py) ======================================
CHECK_VARIANTS = ("loop", "float32", "nodonate")
"""The agents `_official_check.check_finite` builds, in this order: ``loop`` (the run's
config, built as the loop builds it: the official ``make_agent``, its train and report
programs compiled, donation on), ``float32`` (the same with ``jax.compute_dtype`` float32)
and ``nodonate`` (the loop's dtype, built with the jit adapter's donation dropped). The
variants other than ``loop`` skip compiling the train and report programs at build
(`_official_check._skip_train_compile`): the train program compiles at its first call,
when the variant trains."""


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
    p.add_argument("--episode-window", type=float, default=0.0, metavar="S",
                   help="with --budget-s: stop at the first episode end within S seconds "
                   "before the budget (a resumed official loop restarts its envs and never "
                   "scores the episodes running at a stop; on DMC with 16 envs a group of "
                   "episodes ends every ~100 s on a TPU v5e, so e.g. 150); default 0: at "
                   "the budget")
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
    if args.episode_window < 0 or (args.episode_window > 0 and args.budget_s is None):
        fail(f"--episode-window {args.episode_window}: give a non-negative number of seconds, "
             "with --budget-s")
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
        from _official_check import CHECK_LOG, check_finite
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
