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
  running; on DMC, whose envs end their episodes at the same step, on that very
  step, so the resumed loop's groups of episodes end where an unstopped loop's
  would), when the env-step target is reached, or on SIGTERM/SIGINT (``timeout -k``'s
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
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # _official_logs, _official_check, _official_compat, ...
# some names below are this script's for tests and `_official_check`, which import them here
from _official_envs import (_make_env_fn, _no_render, env_process_environ,  # noqa: E402,F401
                            exit_text, wait_for_answer)
from _official_logs import fail  # noqa: E402
from _official_outputs import convert_only  # noqa: E402
from _official_settings import (DEFAULT_BUNDLE, LOGS_TAR, METRICS_CSV,  # noqa: E402,F401
                                OFFICIAL_COMMIT, RUN_LOG, SIZES, SUMMARY, WORKER_ENV,
                                _import_official, build_config, check_official,
                                official_task, resolve_settings)
from _official_supervise import ended_line, supervise, tee_process  # noqa: E402,F401
from _official_train import _OnSignal, _say, _Steps, _Stop, drive, train  # noqa: E402,F401


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
