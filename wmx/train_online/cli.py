"""`train_online`: train one agent on one MuJoCo Playground task.

Example::

    train_online --agent tdmpc2 --task cartpole-balance --seeds 0 1 \\
        --env-steps 20000 --preset cpu

Seeds run vmapped in one jitted program; the run directory
``<home>/runs/<name>/`` holds config.json, metrics.csv, checkpoints/,
summary.json and, when the run ends, one episode set per seed in the store
(``<home>/episodes/<task>/<hash>/``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from wmx.paths import wmx_home
from wmx.runs.cli_common import (add_agent_arguments, add_cache_argument, agent_overrides,
                                 create_run_dir, enable_compile_cache, print_counts,
                                 resume_config, run_cli)

DESCRIPTION = __doc__.split("\n\n")[0]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train_online", description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Presets (tdmpc2): paper = the TD-MPC2 paper's sizes (model size 5, 512 planner "
               "samples); cpu = smaller widths that learn on a laptop CPU; tiny = tests. "
               "Flags marked with an agent's name are that agent's; anything else of its "
               "config goes through --set KEY=VALUE. "
               "Env steps count simulator steps (agent steps x action repeat), the papers' x axis.")
    add_agent_arguments(p, "online")
    p.add_argument("--task", help="task in mt30 spelling, e.g. cartpole-balance, walker-walk")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, run vmapped")
    p.add_argument("--env-steps", type=int, default=20_000,
                   help="simulator steps of the run (rounded up to whole episodes)")
    p.add_argument("--envs", "--n-envs", dest="n_envs", type=int, default=None,
                   help="lockstep envs per seed (default: the agent's: tdmpc2 1, T7; "
                        "dreamerv3 the preset's, 16 as the paper)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="batch of one update (default: the preset's)")
    p.add_argument("--eval-every", type=int, default=5_000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=10, help="eval_mode episodes per seed")
    p.add_argument("--chunk-episodes", type=int, default=1,
                   help="rounds of episodes per jitted chunk (host work happens between chunks)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="chunks between checkpoints")
    p.add_argument("--episode-length", type=int, default=None,
                   help="override T in agent steps (short smoke runs only)")
    p.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    p.add_argument("--name", default=None, help="run directory name under <home>/runs/")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR exactly from its newest checkpoint")
    p.add_argument("--dry-run", action="store_true",
                   help="build everything, print the parameter count per module, and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cache_argument(p)
    p.add_argument("--no-export", action="store_true", help="do not write episode sets")
    return p


def config_from_args(args: argparse.Namespace):
    from wmx.runs.online_config import OnlineRunConfig
    if not args.task:
        raise ValueError("--task is required (e.g. --task cartpole-balance)")
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
    return OnlineRunConfig(
        task=args.task, agent=args.agent, seeds=tuple(args.seeds), env_steps=args.env_steps,
        n_envs=n_envs, preset=args.preset, agent_overrides=overrides,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        chunk_episodes=args.chunk_episodes, checkpoint_every_chunks=args.checkpoint_every,
        episode_length=args.episode_length)


def _print_counts(rc) -> None:
    print_counts(f"{rc.agent} on {rc.task}: obs_dim {rc.task_spec.obs_dim}, action_dim "
                 f"{rc.task_spec.action_dim}, preset {rc.preset}",
                 rc.agent_module.param_counts(rc.agent_config))


def make_export(store, rc, run_dir: Path):
    """Per-seed episode-set writers of the run (producer: run, agent, config hash, seed)."""
    from wmx.episode_sets.episode_set import make_producer
    from wmx.train_online.episode_export import RunEpisodeExport
    return RunEpisodeExport(
        run_dir, rc.seeds, rc.n_envs, rc.task_spec,
        lambda seed: make_producer(run_dir.name, rc.agent, rc.config_hash(), seed), store)


def main(argv: list[str] | None = None) -> int:
    return run_cli("train_online", build_parser(), _main, argv)


def _main(args: argparse.Namespace) -> int:
    from wmx.datasets.store import Store
    from wmx.runs.online_config import OnlineRunConfig

    home = wmx_home(args.home)
    if args.resume:
        run_dir, cfg, home = resume_config(args.resume, args.home, home, "train_online")
        rc = OnlineRunConfig.from_json(cfg)
    else:
        rc = config_from_args(args)
    if args.dry_run:
        _print_counts(rc)
        from wmx.envs.playground import cached_env
        env = cached_env(rc.task, rc.episode_length)
        print(f"env {env}; {rc.rounds} rounds x {rc.n_envs} envs = {rc.total_env_steps:,d} env "
              f"steps per seed; seeds {list(rc.seeds)}")
        return 0

    store = Store(home).ensure_layout()
    enable_compile_cache(home, not args.no_compile_cache)
    if not args.resume:
        name = args.name or f"{rc.agent}-{rc.task}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_dir = create_run_dir(store.runs_dir, name, rc.to_json())
        _print_counts(rc)
    print(f"run directory: {run_dir}")

    from wmx.train_online.loop import run
    export = None if args.no_export else make_export(store, rc, run_dir)
    summary = run(rc, run_dir, export, progress=not args.no_progress)
    print(json.dumps({k: summary[k] for k in ("env_steps", "final_eval", "episode_sets")
                      if k in summary}, indent=1))
    print(f"metrics: {run_dir / 'metrics.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
