"""`train_offline`: train an agent (TD-MPC2, DreamerV3) on a pooled dataset, without an env.

Examples::

    train_offline --agent tdmpc2 --dataset mt19@3fa2c1d0 --updates 100000 \\
        --batch-size 1024 --preset cpu --eval-every 10000 --seeds 0 1
    train_offline --agent dreamerv3 --dataset mt19@3fa2c1d0 --tasks cartpole-balance \\
        --updates 20000 --preset cpu --eval-every 5000

Seeds run vmapped in one jitted update scan; the dataset (validated first) is
read into device memory when it fits, else streamed (``--stream`` forces it).
The model trains on every task of the dataset's TaskSet, or on ``--tasks``:
several tasks make one multi-task model over their zero-padded widths; one
task makes TD-MPC2's multi-task model of one task and DreamerV3's single-task
agent at the task's own widths (the online agent's shapes: ``evaluate --run``
and ``train_online --init-from`` take its checkpoints).
The run directory ``<home>/runs/<name>/`` holds config.json (dataset
name@hash, TaskSet, code version), metrics.csv, checkpoints/ and
summary.json. Every ``--eval-every`` updates each of the run's tasks (or
``--eval-tasks``) is evaluated on its real Playground env: ``--eval-episodes``
eval_mode episodes per task and seed from fresh initial states.

``--devices N`` (default: every device) shards each update's batch over N
devices, parameters replicated; ``--coordinator``, ``--num-processes`` and
``--process-id`` join several hosts first (docs/datasets.md, "Data-parallel
offline training").
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from wmx.paths import wmx_home
from wmx.runs.config_file import add_config_argument, with_file_pins
from wmx.runs.loggers import add_logger_argument, open_run_loggers, parse_loggers
from wmx.runs.cli_common import (ArgumentParser, HelpFormatter, add_agent_arguments,
                                 add_cache_argument, agent_overrides, count, create_run_dir,
                                 enable_compile_cache, hold_run_dir, print_counts, resume_config,
                                 run_cli, run_name, warn_if_restarting)
from wmx.sizes import counted

DESCRIPTION = __doc__.split("\n\n")[0]


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="train_offline", description=DESCRIPTION,
        formatter_class=HelpFormatter,
        epilog="Presets: paper = the TD-MPC2 paper's sizes (model size 5; --model-size 1/5/"
               "19/48/317 picks another); cpu = smaller widths for a laptop CPU; tiny = tests. "
               "TD-MPC2's paper offline batch is 1024 slices (spec 4.19), its default here; on "
               "a laptop CPU one update at batch 1024 takes seconds, use --batch-size 256 for "
               "quick runs. DreamerV3's presets: paper = 12m, cpu = 1m, tiny = tests (the "
               "reference fixtures' sizes); its batch is its preset's (paper and cpu: 16 "
               "windows of 64 + 1 rows, tiny: 9 of 6 + 1). "
               "Updates count gradient steps (the offline x axis). Flags marked "
               "with an agent's name are that agent's; anything else of its config goes "
               "through --set KEY=VALUE.")
    add_agent_arguments(p, "offline")
    p.add_argument("--dataset", help="pooled dataset: name@hash (8+ hex digits), name@latest "
                                     "or a dataset directory")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, run vmapped")
    p.add_argument("--batch-size", type=count, default=None,
                   help="items per update (default: the agent's: tdmpc2 1024 slices, spec 4.19; "
                        "dreamerv3 the preset's windows)")
    p.add_argument("--updates", type=count, default=100_000, help="gradient updates of the run; "
                   "with --resume it may extend a run that has not finished")
    p.add_argument("--log-every", type=count, default=None,
                   help="updates per jitted chunk and per metrics row (default: the "
                        "largest divisor of --eval-every and --checkpoint-every up to 1000)")
    p.add_argument("--eval-every", type=count, default=50_000,
                   help="updates between evaluations (a multiple of --log-every)")
    p.add_argument("--checkpoint-every", type=count, default=None,
                   help="updates between checkpoints (default: --eval-every)")
    p.add_argument("--eval-episodes", type=int, default=10,
                   help="eval_mode episodes per task and seed (spec 4.20)")
    p.add_argument("--tasks", nargs="+", default=None,
                   help="train (and evaluate) on these tasks of the dataset's TaskSet (default: "
                        "all); one task: a single-task model where the agent has one (dreamerv3)")
    p.add_argument("--eval-tasks", nargs="+", default=None,
                   help="evaluate only these of the run's tasks (default: all of them)")
    p.add_argument("--episode-length", type=int, default=None,
                   help="override T of the evaluation episodes (short smoke runs only)")
    p.add_argument("--stream", action="store_true",
                   help="stream the dataset with Grain even when it fits in memory")
    p.add_argument("--skip-validation", action="store_true",
                   help="do not run wmx.datasets.validate on the dataset first")
    p.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    p.add_argument("--name", default=None, type=run_name,
                   help="run directory name under <home>/runs/")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR exactly from its newest checkpoint, with "
                        "its saved config: another flag is refused unless it equals the saved "
                        "value (--updates may extend the run; --home, --no-progress, "
                        "--skip-validation, --dry-run, --logger are free)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the dataset and config, print the parameter counts, and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--devices", type=int, default=None,
                   help="devices to shard each update's batch over, parameters replicated "
                        "(default: all; 1 = the single-device program); the batch must divide "
                        "evenly, and the updates equal one device's up to float32 rounding")
    p.add_argument("--coordinator", metavar="ADDRESS", default=None,
                   help="several hosts: host:port of process 0 (jax.distributed.initialize; "
                        "with --num-processes and --process-id; untested beyond one host)")
    p.add_argument("--num-processes", type=int, default=None, help="several hosts: processes")
    p.add_argument("--process-id", type=int, default=None,
                   help="several hosts: this process's index, 0 .. --num-processes - 1")
    add_cache_argument(p)
    add_logger_argument(p)
    # a saved config.json: "tasks" are the evaluated tasks, "train_tasks" the trained
    # ones; stream_chunk has no flag (always its default)
    add_config_argument(p, ignored=("resolved_agent_config", "taskset", "code_version",
                                    "dataset_path", "training_hash", "created",
                                    "stream_chunk"),
                        saved_keys={"tasks": "eval_tasks", "train_tasks": "tasks"})
    return p


def start_devices(args: argparse.Namespace) -> int:
    """Join the hosts of ``--coordinator`` (`jax.distributed.initialize`, before any JAX
    computation) and return the run's device count: ``--devices``, default all devices
    (of every process). Raises ValueError for a partial set of host flags or a count
    outside 1 .. the devices there are."""
    import jax
    hosts = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in hosts):
        if any(v is None for v in hosts):
            raise ValueError("--coordinator, --num-processes and --process-id go together "
                             "(one process per host, each with its --process-id)")
        if not (args.name or args.resume):
            raise ValueError("--num-processes: give every process the same --name (the run "
                             "directory, on a file system they share)")
        jax.distributed.initialize(coordinator_address=args.coordinator,
                                   num_processes=args.num_processes, process_id=args.process_id)
    n = jax.device_count() if args.devices is None else args.devices
    if not 1 <= n <= jax.device_count():
        raise ValueError(f"--devices {n}: {counted(jax.device_count(), 'device')} available")
    return n


def create_or_join_run_dir(runs_dir: Path, name: str, meta: dict) -> Path:
    """`create_run_dir`; past one process, process 0 creates it and the others wait for it."""
    import jax
    if jax.process_count() == 1:
        return create_run_dir(runs_dir, name, meta)
    from jax.experimental import multihost_utils
    if (runs_dir / name).exists():       # every process sees it: none waits for process 0
        return create_run_dir(runs_dir, name, meta)          # raises FileExistsError
    if jax.process_index() == 0:
        create_run_dir(runs_dir, name, meta)
    multihost_utils.sync_global_devices(f"train_offline run directory {name}")
    return runs_dir / name


def process_run_dir(run_dir: Path) -> Path:
    """Where this process trains: ``run_dir``, or past one process for process i > 0
    ``run_dir/processes/<i>/`` (its own metrics.csv and summary.json, a copy of
    config.json, ``checkpoints`` a link to the run's, which process 0 writes)."""
    import shutil

    import jax
    if jax.process_count() == 1 or jax.process_index() == 0:
        return run_dir
    own = run_dir / "processes" / str(jax.process_index())
    own.mkdir(parents=True, exist_ok=True)
    shutil.copy(run_dir / "config.json", own / "config.json")
    if not (own / "checkpoints").is_symlink():
        (own / "checkpoints").symlink_to(Path("..") / ".." / "checkpoints")
    return own


def _primary() -> bool:
    """Whether this process holds the run lock: process 0 (the only one that checkpoints)."""
    import jax
    return jax.process_index() == 0


def resolve_and_validate(ref: str, home: Path, skip_validation: bool = False):
    """Open dataset ``ref`` and (unless skipped) validate it.

    Returns the PooledDataset. Raises NameResolutionError / FileNotFoundError
    for a ref that does not resolve, ValueError naming every failed check for
    a dataset that fails validation (wmx.datasets.validate).
    """
    from wmx.datasets.readers import open_dataset
    from wmx.datasets.validate import validate_dataset
    ds = open_dataset(ref, home=home)
    if not skip_validation:
        rep = validate_dataset(ds.path)
        if not rep.ok:
            raise ValueError(f"dataset {ref} failed validation; fix or rebuild it (or pass "
                             f"--skip-validation):\n{rep.format()}")
    return ds


def default_log_every(eval_every: int, checkpoint_every: int, most: int = 1_000) -> int:
    """The largest divisor of both periods up to ``most`` (chunks must end where
    evaluations and checkpoints fall): 1000 for the defaults, 300 for
    ``--eval-every 300``. Non-positive periods give 1 (the config refuses them)."""
    import math
    g = math.gcd(max(eval_every, 1), max(checkpoint_every, 1))
    return next(d for d in range(min(g, most), 0, -1) if g % d == 0)


def config_from_args(args: argparse.Namespace, ds):
    """OfflineRunConfig for the opened dataset ``ds`` and the flags."""
    from wmx.train_offline.loop import dataset_nbytes, memory_budget
    from wmx.runs.offline_config import OfflineRunConfig
    overrides = agent_overrides(args)
    stream = bool(args.stream)
    if not stream and dataset_nbytes(ds) > memory_budget():
        logging.getLogger("wmx.train_offline").info(
            "dataset %s (%.1f GB) exceeds the in-memory budget: streaming", ds.name,
            dataset_nbytes(ds) / 1e9)
        stream = True
    checkpoint_every = (args.eval_every if args.checkpoint_every is None
                        else args.checkpoint_every)      # 0 is refused by the config, not unset
    log_every = (default_log_every(args.eval_every, checkpoint_every) if args.log_every is None
                 else args.log_every)
    from wmx.agents.registry import get_entry
    batch = args.batch_size
    if batch is None:
        batch = get_entry(args.agent, "offline").offline_batch_size
    # a saved run's config.json (--config): its values of the machine-dependent fields
    return with_file_pins(OfflineRunConfig(
        dataset=f"{ds.name}@{ds.content_hash}", taskset=ds.taskset.to_dict(), agent=args.agent,
        seeds=tuple(args.seeds), updates=args.updates, batch_size=batch,
        preset=args.preset, agent_overrides=overrides, log_every=log_every,
        eval_every=args.eval_every, checkpoint_every=checkpoint_every,
        eval_episodes=args.eval_episodes,
        tasks=None if args.eval_tasks is None else tuple(args.eval_tasks),
        train_tasks=None if args.tasks is None else tuple(args.tasks),
        episode_length=args.episode_length, stream=stream,
        devices=getattr(args, "devices", None) or 1), args)


def _print_counts(rc) -> None:
    ts, cfg = rc.train_task_set, rc.agent_config
    model = (f"multi-task on {counted(len(ts), 'task')}, obs_dim {cfg.obs_dim}, action_dim "
             f"{cfg.action_dim} (padded)" if rc.multitask else
             f"single-task on {ts.names[0]}, obs_dim {cfg.obs_dim}, action_dim {cfg.action_dim}")
    print_counts(f"{rc.agent} {model}, from {rc.dataset_name}@{rc.dataset_hash[:12]}: preset "
                 f"{rc.preset}, batch {rc.batch} on {counted(rc.devices, 'device')}, feed "
                 f"{'stream' if rc.stream else 'in-memory'}",
                 rc.agent_module.param_counts(cfg))


def main(argv: list[str] | None = None) -> int:
    return run_cli("train_offline", build_parser(), _main, argv)


RESUME_FIELDS = {"agent": "agent", "preset": "preset", "seeds": "seeds", "updates": "updates",
                 "batch_size": "batch_size", "log_every": "log_every",
                 "eval_every": "eval_every", "checkpoint_every": "checkpoint_every",
                 "eval_episodes": "eval_episodes", "tasks": "train_tasks",
                 "eval_tasks": "tasks",
                 "episode_length": "episode_length", "stream": "stream"}
"""train_offline flag -> config.json key, compared on --resume (`resume_changes`)."""


def resumed_config(args: argparse.Namespace, run_dir: Path, cfg: dict, home: Path):
    """The run config of ``--resume`` with the typed flags checked against it.

    Every flag must equal the saved value, except ``--updates``, which may extend
    a run that has not finished (nothing before the old end depends on the
    run's length, so the resumed run replays a run started with the larger
    value); ``--dataset`` must name the run's dataset. Raises ValueError naming
    the flag otherwise."""
    import dataclasses

    from wmx.runs.cli_common import (agent_config_of, resume_changes, rewrite_config,
                                     run_has_finished)
    from wmx.runs.offline_config import OfflineRunConfig
    rc = OfflineRunConfig.from_json(cfg)
    if args.dataset:
        from wmx.datasets.readers import open_dataset
        ds = open_dataset(args.dataset, home=home)
        if ds.content_hash != rc.dataset_hash:
            raise ValueError(f"--dataset {args.dataset} is {ds.name}@{ds.content_hash[:12]}"
                             f", but the run {run_dir} trains on {rc.dataset}")
    if "agent" not in args.given:
        args.agent = rc.agent
    changes = resume_changes(args, cfg, RESUME_FIELDS,
                             free=("dataset", "skip_validation", "devices", "coordinator",
                                   "num_processes", "process_id", "no_compile_cache", "logger"),
                             extendable=("updates",), overrides=agent_overrides(args),
                             config_of=agent_config_of(rc))
    if not changes:
        return rc
    if run_has_finished(run_dir):
        raise ValueError(f"--updates {changes['updates']} (the run's {rc.updates}): the run has "
                         "finished (final evaluation written), so it cannot be extended "
                         "exactly; start a new run")
    new = dataclasses.replace(rc, **changes)
    from wmx.train_offline.loop import check_resume_metrics
    check_resume_metrics(rc, run_dir)        # a refused resume leaves its config as it was
    if not args.dry_run:
        hold_run_dir(args, run_dir, primary=_primary())   # no other trainer while it changes
        rewrite_config(run_dir, {**cfg, **changes})
    return new


def _main(args: argparse.Namespace) -> int:
    from wmx.datasets.store import Store
    from wmx.runs.cli_common import remove_if_unstarted, sweep_stale

    home = wmx_home(args.home)
    parse_loggers(args.logger)           # a bad --logger is an error before anything runs
    from wmx.xla_cpu import dots_choice
    dots_choice()                        # so is a bad WMX_CPU_DOTS
    args.devices = start_devices(args)
    if args.resume:
        run_dir, cfg, home = resume_config(args.resume, args.home, home, "train_offline")
        rc = resumed_config(args, run_dir, cfg, home)
        hold_run_dir(args, run_dir, primary=not args.dry_run and _primary())
        warn_if_restarting(run_dir)
    else:
        if not args.dataset:
            raise ValueError("--dataset is required (e.g. --dataset mt19@3fa2c1d0); list the "
                             "store's datasets with `wmx dataset ls`")
        from wmx.datasets.readers import open_dataset
        ds = open_dataset(args.dataset, home=home)
        rc = config_from_args(args, ds)          # flag errors first: validation reads it all
        ds = resolve_and_validate(args.dataset, home, args.skip_validation)
    if rc.devices != args.devices:     # a resumed run may continue on another device count
        logging.getLogger("wmx.train_offline").info(
            "run created on %s continues on %d", counted(rc.devices, "device"), args.devices)
        rc = dataclasses.replace(rc, devices=args.devices)
    if args.dry_run:
        _print_counts(rc)
        every = (f"every {rc.eval_every:,d} updates and at the end" if rc.eval_every < rc.updates
                 else "at the end")
        print(f"{rc.updates:,d} updates x batch {rc.batch}; evaluating {list(rc.eval_tasks)} "
              f"{every} ({counted(rc.eval_episodes, 'episode')} per task and seed); seeds "
              f"{list(rc.seeds)}")
        return 0

    enable_compile_cache(home, not args.no_compile_cache)
    store = Store(home).ensure_layout()
    if not args.resume:
        from wmx.version import code_version
        name = args.name or f"{rc.agent}-{rc.dataset_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        meta = {**rc.to_json(), "code_version": code_version(), "dataset_path": str(ds.path),
                "training_hash": rc.training_hash(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        run_dir = create_or_join_run_dir(store.runs_dir, name, meta)
        hold_run_dir(args, run_dir, primary=_primary())
        _print_counts(rc)
    print(f"run directory: {run_dir}")
    sweep_stale(store, run_dir)
    args.resume_hint = f"continue with: train_offline --resume {run_dir}"

    from wmx.runs.interrupt import exit_status, stop_on_interrupt
    from wmx.train_offline.loop import run
    run_dir = process_run_dir(run_dir)
    try:
        loggers = open_run_loggers(args, run_dir, resumed=bool(args.resume),
                                   primary=_primary())
        import jax
        with stop_on_interrupt("the running chunk", enabled=jax.process_count() == 1,
                               run_dir=run_dir) as stop_request:
            summary = run(rc, run_dir, home=home, progress=not args.no_progress,
                          loggers=loggers, stop_request=stop_request)
    except BaseException:
        if not args.resume and remove_if_unstarted(run_dir):
            args.resume_hint = "run the same command again"
        raise
    if summary["finished"]:        # a stopped run: the stop line and its resume hint
        print(json.dumps({k: summary[k] for k in ("updates", "final_eval", "final_score")},
                         indent=1))
        print(f"metrics: {run_dir / 'metrics.csv'}")
    return exit_status("train_offline", stop_request, summary["finished"], args.resume_hint)


if __name__ == "__main__":
    sys.exit(main())
