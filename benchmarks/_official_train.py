"""The training mode of `official_dreamerv3.py`: the official online loop, run in the worker.

When the loop stops (`_Stop`, `_Steps`, `_OnSignal`: budget, env-step target, signals) and
`train`, which runs (or continues) the official loop in a logdir, saves, and converts its logs.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from _official_envs import (_ignore_signals, _make_env_fn, env_process_environ,
                            wait_for_answer)
from _official_logs import CALLS, PROGRESS, RUN_RECORD, read_progress
from _official_outputs import finish
from _official_settings import (HERE, OFFICIAL_COMMIT, _import_official, build_config,
                                check_official, resolve_settings)

# ==== the official run ==================================================================
class _Stop:
    """Why the loop should stop (None while it should go on): budget, target, signal.

    With ``episode_window`` (seconds) the budget stop comes early, at the first episode
    end within that window before the deadline: a resumed official loop restarts its
    envs, so the episodes still running at a stop are never scored. On DMC (all envs end
    together) the driver stops at the very step a group ends (`group_ended`, `drive`):
    no episode is lost and the resumed loop's groups end where an unstopped loop's would;
    an episode end the logger reports (`episode_ended`; envs out of step) stops the loop
    at its next check, up to one driver call (10 steps of every env) later.
    """

    def __init__(self, deadline: float | None, episode_window: float = 0.0):
        self.deadline, self.episode_window = deadline, float(episode_window)
        self.reason: str | None = None
        self.last_episode_end: float | None = None

    def episode_ended(self, now: float | None = None) -> None:
        """An env's episode ended (the logger got its score) at ``now`` (monotonic s)."""
        self.last_episode_end = time.monotonic() if now is None else now

    def group_ended(self, now: float | None = None) -> bool:
        """Every env's episode ended at the driver step just taken (DMC's lockstep
        episodes: a group). True when the loop should stop right there, before the envs
        reset: the episode window is open (its last ``episode_window`` seconds before
        the deadline, or the deadline has passed); sets ``reason`` then. A call stopped
        so loses no episode, and its resumed loop's groups end where an unstopped loop's
        would (k × envs × (T + 1) steps)."""
        if self.deadline is None or self.episode_window <= 0:
            return False
        now = time.monotonic() if now is None else now
        if now < self.deadline - self.episode_window:
            return False
        self.reason = self.reason or "budget, at an episode end"
        return True

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


def drive(step_once, steps: int, episodes: int, all_ended, stop: _Stop) -> None:
    """The official ``Driver.__call__``'s loop (steps until ``steps`` env steps or
    ``episodes`` episodes), ended right after a step at which every env's episode ended
    and ``stop.group_ended()`` says to stop (``--episode-window``): the loop then stops
    on the group's boundary instead of up to ``steps`` env steps into the next episodes.

    Args:
        step_once: ``(step, episode) -> (step, episode)``, one step of every env (the
            official ``Driver._step`` with its policy).
        steps, episodes: the call's targets, as the official driver takes them.
        all_ended: ``() -> bool``: whether every env's episode ended at the last step.
        stop: the call's `_Stop`.
    """
    step, episode = 0, 0
    while step < steps or episode < episodes:
        step, episode = step_once(step, episode)
        if all_ended() and stop.group_ended():
            return


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

        def __call__(self, policy, steps=0, episodes=0):
            # the official loop, ended at a group's boundary inside the episode window
            # (after a step whose every env ended: its ``reset`` action is set for all)
            drive(lambda s, e: self._step(policy, s, e), steps, episodes,
                  lambda: bool(self.acts["reset"].all()), stop)

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


