"""`wmx demo`: the main job at a small default scale (what `make demo` runs).

Today: TD-MPC2 online on a real MuJoCo Playground task (cartpole-balance,
cpu preset), exporting its episode set into the store.
"""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run the main job at a small default scale",
                       description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--env-steps", type=int, default=10_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--preset", default="cpu")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time
    from wmx.train_online import cli as online_cli
    argv = ["--agent", "tdmpc2", "--task", args.task, "--env-steps", str(args.env_steps),
            "--preset", args.preset, "--eval-every", "5000", "--eval-episodes", "5",
            "--name", f"demo-{args.task}-{time.strftime('%Y%m%d-%H%M%S')}",
            "--seeds", *map(str, args.seeds)]
    if args.home:
        argv += ["--home", args.home]
    print("wmx demo: train_online " + " ".join(argv))
    return online_cli.main(argv)
