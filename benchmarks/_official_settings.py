"""Where the official DreamerV3 code and a run's files are, and the run's settings.

The names of the files a run of `official_dreamerv3.py` writes, the official source's check
and import (`check_official`, `_import_official`), a resumed run's settings
(`resolve_settings`) and the official config built from them (`build_config`).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from _official_logs import CALLS, PROGRESS, RUN_RECORD, fail, run_record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_BUNDLE = ROOT / ".official-dv3"
DRIVER = HERE / "official_dreamerv3.py"
"""The driver script (its training and check-finite modes run it again as a child)."""
OFFICIAL_COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"

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


