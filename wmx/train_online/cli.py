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

from wmx.cli.run_dirs import create_run_dir, resume_config, run_cli
from wmx.paths import wmx_home

DESCRIPTION = __doc__.split("\n\n")[0]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train_online", description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Presets: paper = the TD-MPC2 paper's sizes (model size 5, 512 planner "
               "samples); cpu = smaller widths that learn on a laptop CPU; tiny = tests. "
               "Env steps count simulator steps (agent steps x action repeat), the papers' x axis.")
    p.add_argument("--agent", default="tdmpc2", help="agent to train (tdmpc2)")
    p.add_argument("--task", help="task in mt30 spelling, e.g. cartpole-balance, walker-walk")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, run vmapped")
    p.add_argument("--env-steps", type=int, default=20_000,
                   help="simulator steps of the run (rounded up to whole episodes)")
    p.add_argument("--n-envs", type=int, default=1, help="lockstep envs per seed (T7)")
    p.add_argument("--preset", default="cpu", help="paper | cpu | tiny")
    p.add_argument("--model-size", type=int, default=None,
                   help="TD-MPC2 model size 1/5/19/48/317 (fills the widths the preset leaves)")
    for name in ("enc-dim", "mlp-dim", "latent-dim", "num-enc-layers", "num-q", "batch-size",
                 "seed-steps", "num-samples", "num-elites", "num-pi-trajs", "iterations"):
        p.add_argument(f"--{name}", type=int, default=None, help=f"explicit {name} (overrides)")
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
    p.add_argument("--no-export", action="store_true", help="do not write episode sets")
    return p


_WIDTH_FLAGS = ("enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q", "batch_size",
                "seed_steps", "num_samples", "num_elites", "num_pi_trajs", "iterations",
                "model_size")


def config_from_args(args: argparse.Namespace):
    from wmx.train_online.run_config import OnlineRunConfig
    if not args.task:
        raise ValueError("--task is required (e.g. --task cartpole-balance)")
    overrides = {k: getattr(args, k) for k in _WIDTH_FLAGS if getattr(args, k) is not None}
    return OnlineRunConfig(
        task=args.task, agent=args.agent, seeds=tuple(args.seeds), env_steps=args.env_steps,
        n_envs=args.n_envs, preset=args.preset, agent_overrides=overrides,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
        chunk_episodes=args.chunk_episodes, checkpoint_every_chunks=args.checkpoint_every,
        episode_length=args.episode_length)


def _print_counts(rc) -> None:
    from wmx.train_online.loop import param_counts
    counts = param_counts(rc)
    print(f"{rc.agent} on {rc.task}: obs_dim {rc.task_spec.obs_dim}, action_dim "
          f"{rc.task_spec.action_dim}, preset {rc.preset}")
    for k, v in counts.items():
        if k != "total":
            print(f"  {k:<12s} {v:>12,d}")
    print(f"  {'total':<12s} {counts['total']:>12,d}")


def make_export(store, rc, run_dir: Path):
    """Per-seed episode-set writers of the run (producer: run, agent, config hash, seed)."""
    from wmx.collect.episode_set import make_producer
    from wmx.train_online.export import RunEpisodeExport
    return RunEpisodeExport(
        run_dir, rc.seeds, rc.n_envs, rc.task_spec,
        lambda seed: make_producer(run_dir.name, rc.agent, rc.config_hash(), seed), store)


def main(argv: list[str] | None = None) -> int:
    return run_cli("train_online", build_parser(), _main, argv)


def _main(args: argparse.Namespace) -> int:
    from wmx.datasets.store import Store
    from wmx.train_online.run_config import OnlineRunConfig

    home = wmx_home(args.home)
    if args.resume:
        run_dir, cfg, home = resume_config(args.resume, args.home, home, "train_online")
        rc = OnlineRunConfig.from_json(cfg)
    else:
        rc = config_from_args(args)
    if args.dry_run:
        _print_counts(rc)
        from wmx.envs.playground import make_env
        env = make_env(rc.task, episode_length=rc.episode_length)
        print(f"env {env}; {rc.rounds} rounds x {rc.n_envs} envs = {rc.total_env_steps:,d} env "
              f"steps per seed; seeds {list(rc.seeds)}")
        return 0

    store = Store(home).ensure_layout()
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
