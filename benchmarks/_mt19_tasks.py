"""The mt19 campaign's settings and what a data root holds of it (`mt19_campaign.py`).

`Campaign`: the runs the campaign trains (tasks in mt30 order, TD-MPC2 preset, seeds,
evaluations, targets per task); `TaskState`: one task as the data root (episode sets,
campaign runs) and the committed record (benchmarks/results/mt19_sources.json) show it.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import _mt19_record as record_lib

AGENT = "tdmpc2"
DEFAULT_TARGET = 100_000
TARGETS = {"acrobot-swingup": 200_000, "cartpole-swingup-sparse": 200_000,
           "fish-swim": 200_000, "hopper-stand": 200_000, "hopper-hop": 200_000}
"""Env steps per seed of the tasks that TD-MPC2's published curves show still far from
their best at 100,000 (returns at 100k / 200k / 300k: acrobot-swingup 179/296/347,
cartpole-swingup-sparse 0/308/795, fish-swim 205/379/604, hopper-stand 28/262/788,
hopper-hop 14/167/260). A run never spans device sessions, and 200,000 env steps fit one
30-minute session only when a run's later calls load their programs from the warm
machine's compilation cache (`plan --cached-compile-s`); `next --device-left-s` starts a
run only when the plan's model says it fits."""
RUN_PREFIX = "mt19-"
RESULTS = Path(__file__).resolve().parent / "results"


# ---- the campaign's settings -----------------------------------------------------------
CHECKPOINT_EVERY = 20
"""Rounds (episodes of every env) between a campaign run's checkpoints. A paper-preset
TD-MPC2 checkpoint of 2 seeds is 139 MiB (the agents' parameters and optimizer state; the
replay is 3.5 MiB on reacher) and took about 1.8 s to write on the TPU v5e machine,
against 2.7 s of training per round of reacher-easy: a checkpoint each round cost the
campaign's first run a fifth to a quarter of each call's wall time. A budget stop always
checkpoints, so only a crash loses rounds."""


@dataclasses.dataclass(frozen=True)
class Campaign:
    """The runs the campaign trains: tasks (mt30 order), preset, seeds, evaluations,
    agent overrides (``--set``), an env-steps override of every target, and the runs'
    checkpoint cadence (chunks between checkpoints; a stop always checkpoints)."""
    tasks: tuple[str, ...]
    preset: str = "paper"
    seeds: tuple[int, ...] = (0, 1)
    eval_every: int = 10_000
    eval_episodes: int = 10
    sets: tuple[str, ...] = ()
    env_steps: int | None = None
    checkpoint_every: int = CHECKPOINT_EVERY
    targets: tuple[tuple[str, int], ...] = ()

    def target(self, task: str) -> int:
        """Env steps per seed of a task's run.

        Args:
            task: a task of the campaign.

        Returns:
            ``--target``'s value for it, else ``--env-steps``, else `TARGETS`', else
            `DEFAULT_TARGET`.
        """
        return dict(self.targets).get(task) or self.env_steps or TARGETS.get(
            task, DEFAULT_TARGET)

    def argv(self, task: str) -> list[str]:
        """train_online's flags of a task's run.

        Args:
            task: a task of the campaign.

        Returns:
            The flags, less ``--name`` and ``--home``.
        """
        out = ["--agent", AGENT, "--task", task, "--preset", self.preset,
               "--seeds", *map(str, self.seeds), "--env-steps", str(self.target(task)),
               "--eval-every", str(self.eval_every), "--eval-episodes", str(self.eval_episodes)]
        for s in self.sets:
            out += ["--set", s]
        if self.checkpoint_every != 1:
            out += ["--checkpoint-every", str(self.checkpoint_every)]
        return out

    def run_config(self, task: str):
        """The config train_online would save for a task's run.

        Args:
            task: a task of the campaign.

        Returns:
            The `wmx.runs.online_config.OnlineRunConfig` that train_online's own parser
            and `config_from_args` make of `argv`.

        Raises:
            ValueError: a flag train_online refuses (e.g. an unknown ``--set`` field).
        """
        from wmx.runs.cli_common import given_flags
        from wmx.train_online import cli as online_cli
        p = online_cli.build_parser()
        argv = self.argv(task)
        args = p.parse_args(argv)
        args.given = given_flags(p, argv)
        return online_cli.config_from_args(args)


def add_campaign_args(p: argparse.ArgumentParser) -> None:
    """Add the flags every subcommand shares (the campaign's tasks, runs and record).

    Args:
        p: a subcommand's parser.
    """
    from wmx.runs.cli_common import at_least, count
    p.add_argument("--tasks", default=None, metavar="T1,T2,...",
                   help="the campaign's tasks in order (default: the 19 mt19 tasks in mt30 "
                        "order)")
    p.add_argument("--preset", default="paper", help="TD-MPC2 preset of the runs")
    p.add_argument("--seeds", type=at_least(0), nargs="+", default=[0, 1],
                   help="seeds of each run, vmapped")
    p.add_argument("--env-steps", type=at_least(1), default=None,
                   help="env steps per seed of every task's run (default: 100,000; 200,000 "
                        "for " + ", ".join(TARGETS) + ")")
    p.add_argument("--target", action="append", default=[], metavar="TASK=N",
                   help="env steps per seed of one task's run (repeatable; wins over "
                        "--env-steps and the table)")
    p.add_argument("--eval-every", type=count, default=10_000, help="env steps between "
                   "evaluations")
    p.add_argument("--eval-episodes", type=at_least(1), default=10,
                   help="eval episodes per seed")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                   help="a TD-MPC2 config field of the runs (train_online's --set)")
    p.add_argument("--checkpoint-every", type=at_least(1), default=CHECKPOINT_EVERY,
                   help="train_online --checkpoint-every: rounds between checkpoints (a "
                        "budget stop always checkpoints; default %(default)s: a checkpoint "
                        "takes about 2 s)")
    p.add_argument("--results", default=str(RESULTS),
                   help=f"folder of {record_lib.FILE} and its plot (default: the committed "
                        "benchmarks/results; give another for a trial)")


def campaign_of(args: argparse.Namespace) -> Campaign:
    """The campaign the flags describe.

    Args:
        args: parsed flags of `add_campaign_args`.

    Returns:
        The `Campaign`.

    Raises:
        ValueError: one line for an unknown or repeated task or a bad ``--target``.
    """
    from wmx.runs.cli_common import count
    from wmx.envs.registry import get_task
    from wmx.schemas.taskset import mt19
    tasks = tuple(mt19().names) if not args.tasks else tuple(
        t.strip() for t in args.tasks.split(",") if t.strip())
    for t in tasks:
        get_task(t)
    if len(set(tasks)) != len(tasks) or not tasks:
        raise ValueError(f"--tasks {args.tasks}: give each task once")
    targets = []
    for item in args.target:
        t, sep, n = item.partition("=")
        try:
            steps = count(n)
        except (argparse.ArgumentTypeError, ValueError):
            steps = 0
        if not sep or t not in tasks or steps < 1:
            raise ValueError(f"--target {item}: write TASK=N with a task of the campaign and "
                             "N env steps per seed, e.g. --target hopper-hop=200000")
        targets.append((t, steps))
    return Campaign(tasks, args.preset, tuple(args.seeds), args.eval_every, args.eval_episodes,
                    tuple(args.set_), args.env_steps, args.checkpoint_every, tuple(targets))


# ---- what is there: store, runs, record ----------------------------------------------------
@dataclasses.dataclass
class TaskState:
    """One task of the campaign as the data root and the record show it: ``groups`` the
    store's episode sets by producer run ({run: [manifest, ...]}), ``runs`` the campaign's
    runs of the task in the home (`wmx.runs.listing.RunInfo`), ``recorded`` its entry in
    mt19_sources.json (None: none)."""
    task: str
    target: int
    groups: dict[str, list[Any]]
    runs: list[Any]
    recorded: dict[str, Any] | None

    def active(self):
        """The campaign run of the task that has not finished (`RunInfo`), or None."""
        from wmx.runs.listing import FINISHED
        return next((r for r in self.runs if r.status != FINISHED), None)

    def finished_run(self):
        """A finished campaign run in the home that reached the target (`RunInfo`), or
        None."""
        from wmx.runs.listing import FINISHED
        return next((r for r in self.runs if r.status == FINISHED and r.done >= self.target),
                    None)

    @property
    def done(self) -> bool:
        """Recorded at (or past) the target, or trained to it in this home."""
        rec = self.recorded is not None and self.recorded["env_steps"] >= self.target
        return rec or self.finished_run() is not None

    def next_text(self) -> str:
        """The task's next piece in words: "-" when done, "resume RUN (done/total env
        steps)", or "new run to N" (with what the record has)."""
        if self.done:
            return "-"
        run = self.active()
        if run is not None:
            return f"resume {run.name} ({run.done:,}/{run.total or 0:,} env steps)"
        have = f" (has {self.recorded['env_steps']:,})" if self.recorded else ""
        return f"new run to {self.target:,}{have}"


def read_state(home: Path, campaign: Campaign, record: dict[str, Any] | None) -> list[TaskState]:
    """What the data root and the record hold of each task.

    Args:
        home: the data root (nothing is written there).
        campaign: the campaign (its tasks and targets).
        record: the loaded mt19_sources.json, or None.

    Returns:
        A `TaskState` per task of the campaign, in its order; a campaign run is a run
        named ``mt19-tdmpc2-<task>-...`` whose config is of that task.
    """
    from wmx.datasets.store import Store
    from wmx.runs.listing import list_runs
    from wmx.schemas.manifest import EpisodeSetManifest
    store = Store(home)
    runs = list_runs(store.home)
    out = []
    for t in campaign.tasks:
        groups: dict[str, list[Any]] = {}
        for e in store.list_episode_sets(t):
            try:
                m = EpisodeSetManifest.load(e.path)
            except ValueError:
                continue                 # `wmx dataset sources` names a damaged one
            groups.setdefault(m.producer.run_id, []).append(m)
        mine = [r for r in runs if r.name.startswith(f"{RUN_PREFIX}{AGENT}-{t}-")
                and r.config.get("task") == t]
        out.append(TaskState(t, campaign.target(t), groups, mine,
                             (record or {}).get("tasks", {}).get(t)))
    return out


def load_record(results: Path) -> dict[str, Any] | None:
    """The campaign's record.

    Args:
        results: the folder of mt19_sources.json (``--results``).

    Returns:
        The record, or None when there is none.

    Raises:
        ValueError: one line for a file that is not a record (`_mt19_record.load`).
    """
    return record_lib.load(Path(results) / record_lib.FILE)
