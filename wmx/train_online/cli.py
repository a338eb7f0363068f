"""`train_online`: train one agent on one MuJoCo Playground task.

Example::

    train_online --agent tdmpc2 --task cartpole-balance --seeds 0 1 \\
        --env-steps 20000 --preset cpu

Seeds run vmapped in one jitted program; the run directory
``<home>/runs/<name>/`` holds config.json, metrics.csv, checkpoints/,
summary.json and, when the run ends, one episode set per seed in the store
(``<home>/episodes/<task>/<hash>/``).

``--init-from RUN_DIR`` fine-tunes a single-task model of the task: the agents
start from the newest checkpoint of RUN_DIR (``train_offline --agent dreamerv3
--tasks TASK``, as TD-MPC2's offline models are multi-task, or another online
run), seed by seed, with an empty replay; --agent and --preset default to the
source run's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from wmx.paths import wmx_home
from wmx.sizes import counted
from wmx.runs.config_file import add_config_argument, with_file_pins
from wmx.runs.loggers import add_logger_argument, open_run_loggers, parse_loggers
from wmx.runs.cli_common import (ArgumentParser, HelpFormatter, add_agent_arguments,
                                 add_cache_argument, agent_overrides, count, create_run_dir,
                                 enable_compile_cache, hold_run_dir, print_counts, resume_config,
                                 run_cli, run_name, warn_if_restarting)

DESCRIPTION = __doc__.split("\n\n")[0]
EVAL_EVERY_HELP = ("env steps between evaluations (each at the first end of a round of "
                   "episodes at or past a multiple, and one at the run's end)")
"""``--eval-every``'s help, shared with the online learning checks (`wmx.train_online.loop`
decides when an evaluation runs)."""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="train_online", description=DESCRIPTION,
        formatter_class=HelpFormatter,
        epilog="Presets (tdmpc2): paper = the TD-MPC2 paper's sizes (model size 5, 512 planner "
               "samples); cpu = smaller widths that learn on a laptop CPU; tiny = tests. "
               "Presets (dreamerv3): paper = the paper's DMC-proprio protocol (12m, 16 envs, "
               "train ratio 512, action repeat 2); cpu = the same with the 1m widths; tiny = "
               "the reference fixtures' sizes (units 10, deter 24, batch 9 x 6), tests. "
               "Flags marked with an agent's name are that agent's; anything else of its "
               "config goes through --set KEY=VALUE. "
               "Env steps count simulator steps (agent steps x action repeat), the papers' x axis.")
    add_agent_arguments(p, "online")
    p.add_argument("--task", help="task in mt30 spelling, e.g. cartpole-balance, walker-walk")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, run vmapped")
    p.add_argument("--env-steps", type=count, default=20_000,
                   help="simulator steps of the run per seed, rounded up to whole rounds "
                        "(each of the --envs lockstep envs plays one episode per round); with "
                        "--resume it may extend an unfinished run whose replay keeps its size")
    p.add_argument("--end-env-steps", type=count, default=None, metavar="N",
                   help="end the run after the round that reaches N env steps per seed, before "
                        "--env-steps, which still sizes its replay: the run is the first part "
                        "of the --env-steps run (exactly so when N is a multiple of "
                        "--eval-every and of a chunk; else it also evaluates, and logs its "
                        "training row, at N, its end). With --resume it ends an unfinished run "
                        "early (N beyond the env steps it has trained)")
    p.add_argument("--envs", "--n-envs", dest="n_envs", type=int, default=None,
                   help="lockstep envs per seed (default: the agent's: tdmpc2 1, T7; "
                        "dreamerv3 the preset's, 16 as the paper)")
    p.add_argument("--batch-size", type=count, default=None,
                   help="batch of one update (default: the preset's)")
    p.add_argument("--eval-every", type=count, default=5_000, help=EVAL_EVERY_HELP)
    p.add_argument("--eval-episodes", type=int, default=10, help="eval_mode episodes per seed")
    p.add_argument("--chunk-episodes", type=int, default=1,
                   help="rounds of episodes per jitted chunk (host work happens between chunks)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="chunks between checkpoints")
    p.add_argument("--chunk-ticks", type=int, default=None, metavar="N",
                   help="run each round on the device in parts of N ticks (agent steps of the "
                        "envs) and checkpoint after each part: a stop loses at most one part. "
                        "Same results as whole rounds. For long rounds on a CPU, e.g. DreamerV3 "
                        "with 16 envs (8 updates per tick): --chunk-ticks 50. Default: whole "
                        "rounds")
    p.add_argument("--episode-length", type=int, default=None,
                   help="override T in agent steps (short smoke runs only)")
    p.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    p.add_argument("--name", default=None, type=run_name,
                   help="run directory name under <home>/runs/")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR exactly from its newest checkpoint, with "
                        "its saved config: another flag is refused unless it equals the saved "
                        "value (--env-steps may extend the run, --chunk-ticks and "
                        "--end-env-steps may change; "
                        "--home, --no-progress, --no-export, --dry-run, --logger are free)")
    p.add_argument("--init-from", metavar="RUN_DIR", default=None,
                   help="start the agents from the newest checkpoint of RUN_DIR (or from a "
                        "checkpoint folder RUN_DIR/checkpoints/STEP): a single-task model of "
                        "--task, trained offline (dreamerv3 --tasks TASK) or online, each seed "
                        "from its own state; the replay starts empty; --agent and --preset "
                        "default to the source's")
    p.add_argument("--dry-run", action="store_true",
                   help="build everything, print the parameter count per module, and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cache_argument(p)
    add_logger_argument(p)
    add_config_argument(p, keys={"checkpoint_every_chunks": "checkpoint_every"},
                        ignored=("resolved_agent_config", "derived"))
    p.add_argument("--no-export", action="store_true", help="do not write episode sets")
    return p


def config_from_args(args: argparse.Namespace):
    from wmx.runs.online_config import OnlineRunConfig
    if not args.task:
        raise ValueError("--task is required (e.g. --task cartpole-balance)")
    init_from = None
    if args.init_from:
        from wmx.runs import init_from as init_lib
        ckpt = init_lib.resolve_source(args.init_from)
        src = json.loads((ckpt.parent.parent / "config.json").read_text())
        for dest in ("agent", "preset"):       # the source's, unless typed
            if dest not in getattr(args, "given", set()) and dest in src:
                setattr(args, dest, src[dest])
        init_from = str(ckpt)
    overrides = agent_overrides(args)
    if args.batch_size is not None:
        overrides = {"batch_size": args.batch_size, **overrides}
    n_envs = args.n_envs
    if n_envs is None:        # the agent's default: its preset's n_envs, else 1
        from wmx.agents.registry import get_agent
        from wmx.envs.registry import get_task
        cfg = get_agent(args.agent, "online").make_config(args.preset, overrides,
                                                          task=get_task(args.task))
        n_envs = int(getattr(cfg, "n_envs", 1))
    # a saved run's config.json (--config): its values of the machine-dependent fields
    return with_file_pins(OnlineRunConfig(
        task=args.task, agent=args.agent, seeds=tuple(args.seeds), env_steps=args.env_steps,
        n_envs=n_envs, preset=args.preset, agent_overrides=overrides,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        chunk_episodes=args.chunk_episodes, checkpoint_every_chunks=args.checkpoint_every,
        episode_length=args.episode_length, init_from=init_from, chunk_ticks=args.chunk_ticks,
        end_env_steps=args.end_env_steps), args)


def check_init_from(rc) -> None:
    """Raise ValueError (one line) unless the run's ``init_from`` checkpoint fits its agent,
    task, config and seeds (`wmx.runs.init_from.check_source`)."""
    if rc.init_from is None:
        return
    from wmx.runs import init_from as init_lib
    init_lib.check_source(init_lib.read_source(Path(rc.init_from)), rc.agent, rc.agent_config,
                          rc.task, rc.seeds)


def _print_counts(rc) -> None:
    print_counts(f"{rc.agent} on {rc.task}: obs_dim {rc.task_spec.obs_dim}, action_dim "
                 f"{rc.task_spec.action_dim}, preset {rc.preset}",
                 rc.agent_module.param_counts(rc.agent_config))


def _plan_notes(rc, resumed: bool = False) -> None:
    """What the run will do that its flags do not show: --env-steps rounded up to whole
    rounds; a run that ends before its first update (TD-MPC2's seed phase and burst, which
    waits for a whole first round: `wmx.agents.tdmpc2.schedule`).

    Args:
        rc: the run's config.
        resumed: the run is continued with --resume, which keeps its seed phase and
            extends --env-steps only while its replay keeps its size (TD-MPC2's is sized
            for the run): the note names --end-env-steps when raising it (up to
            --env-steps) gets past the seed phase, else a new run.
    """
    if rc.total_env_steps != rc.env_steps:
        per_round = rc.total_env_steps // rc.rounds
        print(f"--env-steps {rc.env_steps:,d} rounds up to {rc.total_env_steps:,d} per seed: "
              f"{counted(rc.rounds, 'round')} of {counted(rc.n_envs, 'env')} x one "
              f"{per_round // rc.n_envs:,d}"
              f"-env-step episode")
    if rc.end_env_steps is not None and rc.end_rounds < rc.rounds:
        print(f"--end-env-steps {rc.end_env_steps:,d}: the run ends at "
              f"{rc.end_total_env_steps:,d} env steps per seed ({counted(rc.end_rounds, 'round')}"
              f" of {rc.rounds:,d}; its replay sized for {rc.total_env_steps:,d})")
    sched = rc.agent_module.schedule(rc.agent_config, rc.task_spec.T, rc.n_envs).inner
    burst = getattr(sched, "burst_tick", None)
    if burst is not None and burst >= rc.end_rounds * rc.ticks_per_round:
        flag = "--end-env-steps" if rc.end_env_steps is not None else "--env-steps"
        fix = f"raise {flag} or lower --seed-steps"
        if resumed and rc.end_env_steps is not None and burst < rc.rounds * rc.ticks_per_round:
            fix = f"raise --end-env-steps (at most the run's --env-steps, {rc.env_steps:,d})"
        elif resumed:
            fix = ("start a new run with more --env-steps or fewer --seed-steps (a resumed run "
                   "keeps its seed phase, and --env-steps extends it only while its replay "
                   "keeps its size)")
        print(f"note: the run ends before its first update: its {rc.end_total_agent_steps:,d} "
              f"agent steps are all seed phase ({sched.seed_steps:,d} agent steps of random "
              f"actions, then the updates after the first whole round); {fix}")


def make_export(store, rc, run_dir: Path, extended: bool = False):
    """Per-seed episode-set writers of the run (producer: run, agent, config hash, seed);
    ``extended``: the run's --env-steps was extended on resume."""
    from wmx.episode_sets.episode_set import make_producer
    from wmx.train_online.episode_export import RunEpisodeExport
    return RunEpisodeExport(
        run_dir, rc.seeds, rc.n_envs, rc.task_spec,
        lambda seed: make_producer(run_dir.name, rc.agent, rc.config_hash(), seed), store,
        new_config=extended)


def main(argv: list[str] | None = None) -> int:
    return run_cli("train_online", build_parser(), _main, argv)


RESUME_FIELDS = {"agent": "agent", "preset": "preset", "task": "task", "seeds": "seeds",
                 "env_steps": "env_steps", "n_envs": "n_envs", "eval_every": "eval_every",
                 "eval_episodes": "eval_episodes", "chunk_episodes": "chunk_episodes",
                 "checkpoint_every": "checkpoint_every_chunks",
                 "episode_length": "episode_length", "chunk_ticks": "chunk_ticks",
                 "end_env_steps": "end_env_steps"}
"""train_online flag -> config.json key, compared on --resume (`resume_changes`)."""


def resumed_config(args: argparse.Namespace, run_dir: Path, cfg: dict):
    """The run config of ``--resume`` with the typed flags checked against it.

    Every flag must equal the saved value, except ``--chunk-ticks`` (parts of a
    round give the results of whole rounds; a checkpoint inside a round needs parts
    again), ``--end-env-steps`` (beyond the env steps the run has trained: it ends the
    run there, or later again) and ``--env-steps``, which may extend a run that has not finished when its checkpoints keep their shapes
    (the agent's replay may be sized for the run; the checkpoint item shapes
    of both lengths are compared), so the resumed run replays exactly
    what a run started with the larger value does. Raises ValueError naming
    the flag otherwise."""
    import dataclasses

    from wmx.runs.cli_common import agent_config_of, resume_changes, rewrite_config
    from wmx.runs.online_config import OnlineRunConfig
    rc = OnlineRunConfig.from_json(cfg)
    if "agent" not in args.given:
        args.agent = rc.agent
    over = agent_overrides(args)
    if "batch_size" in args.given:
        over = {"batch_size": args.batch_size, **over}
    changes = resume_changes(args, cfg, RESUME_FIELDS,
                             free=("no_export", "no_compile_cache", "logger"),
                             extendable=("env_steps",),
                             changeable=("chunk_ticks", "end_env_steps"),
                             overrides=over, as_overrides=("batch_size",),
                             config_of=agent_config_of(rc))
    if not changes:
        return rc
    new = dataclasses.replace(rc, **changes)
    if "env_steps" in changes:
        _check_extension(rc, new, run_dir)
    if "end_env_steps" in changes:
        check_end(new, run_dir)
    from wmx.train_online.loop import check_resume_metrics
    check_resume_metrics(rc, run_dir)        # a refused resume leaves its config as it was
    if not args.dry_run:
        hold_run_dir(args, run_dir)          # no other trainer of the run while it changes
        rewrite_config(run_dir, {**cfg, **new.to_json()})
    return new


def check_end(rc, run_dir: Path) -> None:
    """Raise ValueError (one line) unless ``rc.end_env_steps`` can end the run in
    ``run_dir``: it has not finished, and the round it ends with is not over at its newest
    intact checkpoint (a ``--chunk-ticks`` checkpoint may sit inside that round, even on
    its last, held tick)."""
    from wmx.checkpoint import newest_intact
    from wmx.runs.cli_common import run_has_finished
    from wmx.runs.host import env_steps_at_tick
    what = f"--end-env-steps {rc.end_env_steps}"
    if run_has_finished(run_dir):
        raise ValueError(f"{what}: the run has finished (an ended run too: it cannot go on "
                         f"towards its --env-steps {rc.env_steps:,d}); start a new run")
    found = newest_intact(run_dir)
    tick = 0 if found is None else int(found[1].get("next_tick", 0))
    if rc.end_rounds * rc.ticks_per_round <= tick:      # its last round is over already
        done = env_steps_at_tick(tick, rc.task_spec.T, rc.n_envs, rc.task_spec.action_repeat)
        raise ValueError(f"{what} ends at {rc.end_total_env_steps:,d} env steps (whole rounds), "
                         f"but the run has trained {done:,d}: give an end above that, up to its "
                         f"--env-steps {rc.env_steps:,d}")


def _check_extension(old, new, run_dir: Path) -> None:
    import jax

    from wmx.checkpoint import list_checkpoints
    from wmx.envs.playground import cached_env
    from wmx.runs.cli_common import run_has_finished
    from wmx.train_online import program
    ckpts = list_checkpoints(run_dir)
    what = f"--env-steps {new.env_steps} (the run's {old.env_steps})"
    if run_has_finished(run_dir):
        raise ValueError(f"{what}: the run has finished (final evaluation and episode sets "
                         "written), so it cannot be extended exactly; start a new run")
    if ckpts and new.total_env_steps != old.total_env_steps:
        env = cached_env(new.task, new.episode_length)
        shapes = [jax.tree.map(lambda x: (x.shape, x.dtype), program.checkpoint_items(
            jax.eval_shape(lambda rc=rc: program.init_carries(rc, env)))) for rc in (old, new)]
        if shapes[0] != shapes[1]:
            raise ValueError(f"{what}: a longer run has a larger replay (the {new.agent} "
                             "replay is sized for the run), so this run's checkpoint cannot "
                             "continue exactly as the longer run would; start a new run")


def _main(args: argparse.Namespace) -> int:
    from wmx.datasets.store import Store
    from wmx.runs.cli_common import remove_if_unstarted, sweep_stale

    home = wmx_home(args.home)
    parse_loggers(args.logger)           # a bad --logger is an error before anything runs
    from wmx.xla_cpu import dots_choice
    dots_choice()                        # so is a bad WMX_CPU_DOTS
    if args.resume:
        run_dir, cfg, home = resume_config(args.resume, args.home, home, "train_online")
        rc = resumed_config(args, run_dir, cfg)
        hold_run_dir(args, run_dir, primary=not args.dry_run)
        warn_if_restarting(run_dir)
    else:
        rc = config_from_args(args)
        check_init_from(rc)
    if args.dry_run:
        _print_counts(rc)
        _plan_notes(rc, resumed=bool(args.resume))
        if rc.init_from:
            print(f"agents start from {rc.init_from}")
        from wmx.envs.playground import cached_env
        env = cached_env(rc.task, rc.episode_length)
        print(f"env {env}; {counted(rc.end_rounds, 'round')} x {counted(rc.n_envs, 'env')} = "
              f"{rc.end_total_env_steps:,d} env "
              f"steps per seed; seeds {list(rc.seeds)}")
        return 0

    store = Store(home).ensure_layout()
    enable_compile_cache(home, not args.no_compile_cache)
    if not args.resume:
        name = args.name or f"{rc.agent}-{rc.task}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = create_run_dir(store.runs_dir, name, rc.to_json())
        hold_run_dir(args, run_dir)
        _print_counts(rc)
    _plan_notes(rc, resumed=bool(args.resume))   # a resumed (maybe extended) run's too
    print(f"run directory: {run_dir}")
    sweep_stale(store, run_dir)
    args.resume_hint = f"continue with: train_online --resume {run_dir}"

    from wmx.runs.interrupt import exit_status, stop_on_interrupt
    from wmx.train_online.loop import run
    try:
        export = None if args.no_export else make_export(
            store, rc, run_dir, extended=bool(args.resume) and "env_steps" in args.given)
        loggers = open_run_loggers(args, run_dir, resumed=bool(args.resume))
        with stop_on_interrupt("the running chunk", run_dir=run_dir) as stop_request:
            summary = run(rc, run_dir, export, progress=not args.no_progress, loggers=loggers,
                          stop_request=stop_request)
    except BaseException:
        if not args.resume and remove_if_unstarted(run_dir):
            args.resume_hint = "run the same command again"
        raise
    if summary["finished"]:        # a stopped run: the stop line and its resume hint
        print(json.dumps({k: summary[k] for k in ("env_steps", "final_eval", "episode_sets")
                          if k in summary}, indent=1))
        print(f"metrics: {run_dir / 'metrics.csv'}")
    return exit_status("train_online", stop_request, summary["finished"], args.resume_hint)


if __name__ == "__main__":
    sys.exit(main())
