"""The mt19 campaign's settings and what a data root holds of it (`mt19_campaign.py`).

`Campaign`: the runs the campaign trains (tasks in mt30 order, TD-MPC2 preset, seeds,
evaluations, env steps per task: an aim and a floor, or a fixed value); `TaskState`: one
task as the data root (episode sets, campaign runs) and the committed record
(benchmarks/results/mt19_sources.json) show it.

A task's table value (`TARGETS`, else `DEFAULT_TARGET`) is its *aim*: a new run trains to
the aim when it fits the session's device time, else to the largest multiple of
`FIT_STEP` between the task's *floor* (`FLOOR`, or the aim when smaller) and the aim that
fits (`_mt19_next.choose`, `_mt19_plan.simulate`). An explicit ``--target TASK=N`` or
``--env-steps N`` is *fixed*: exactly N, never fitted (floor = aim = N). A task is done
once it has a source of at least its floor.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Collection

import _mt19_record as record_lib

AGENT = "tdmpc2"
DEFAULT_TARGET = 100_000
"""Aim (env steps per seed) of a task not in `TARGETS`."""
FLOOR = 100_000
"""The least env steps per seed a source run of a task may have (a fitted run's lower
bound; a task whose aim is below it has its aim as floor)."""
FIT_STEP = 10_000
"""A fitted run's env steps are a multiple of this (the campaign's evaluation interval)."""
TARGETS = {"acrobot-swingup": 200_000, "cartpole-swingup-sparse": 200_000,
           "fish-swim": 200_000, "hopper-stand": 200_000, "hopper-hop": 200_000}
"""Aims (env steps per seed) of the tasks that TD-MPC2's published curves show still far
from their best at 100,000 (returns at 100k / 200k / 300k: acrobot-swingup 179/296/347,
cartpole-swingup-sparse 0/308/795, fish-swim 205/379/604, hopper-stand 28/262/788,
hopper-hop 14/167/260). A run never spans device sessions, and at the plan model's
default speeds 200,000 env steps do not fit one 30-minute session: such a run is fitted
to the largest multiple of `FIT_STEP` from `FLOOR` up that the plan's model says fits
(`next --device-left-s`: the session's time left; `plan`: a fresh session)."""
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
    agent overrides (``--set``), a fixed env steps of every task (``--env-steps``; None:
    the table's aims), fixed env steps per task (``--target``: (task, N) pairs), and the
    runs' checkpoint cadence (chunks between checkpoints; a stop always checkpoints)."""
    tasks: tuple[str, ...]
    preset: str = "paper"
    seeds: tuple[int, ...] = (0, 1)
    eval_every: int = 10_000
    eval_episodes: int = 10
    sets: tuple[str, ...] = ()
    env_steps: int | None = None
    checkpoint_every: int = CHECKPOINT_EVERY
    targets: tuple[tuple[str, int], ...] = ()

    def aim(self, task: str) -> int:
        """Env steps per seed a task's new run trains to when the device time allows.

        Args:
            task: a task of the campaign.

        Returns:
            ``--target``'s value for it, else ``--env-steps``, else `TARGETS`', else
            `DEFAULT_TARGET`.
        """
        return dict(self.targets).get(task) or self.env_steps or TARGETS.get(
            task, DEFAULT_TARGET)

    def fixed(self, task: str) -> bool:
        """Whether a task's env steps were given (``--target`` or ``--env-steps``): exactly
        that, never fitted to the device time."""
        return task in dict(self.targets) or self.env_steps is not None

    def floor(self, task: str) -> int:
        """The least env steps per seed of a task's source run.

        Args:
            task: a task of the campaign.

        Returns:
            The aim when fixed, else the smaller of the aim and `FLOOR`.
        """
        return self.aim(task) if self.fixed(task) else min(self.aim(task), FLOOR)

    def sizes(self, task: str) -> list[int]:
        """Env steps per seed a new run of a task may train to, largest first.

        Args:
            task: a task of the campaign.

        Returns:
            The aim, then the multiples of `FIT_STEP` below it down to the floor ([aim]
            when fixed or when the floor is the aim).
        """
        aim, floor = self.aim(task), self.floor(task)
        below = aim - 1 - (aim - 1) % FIT_STEP       # the largest multiple under the aim
        return [aim] + list(range(below, floor - 1, -FIT_STEP))

    def allows(self, task: str, env_steps: int) -> bool:
        """Whether a run of ``env_steps`` per seed is one of the task's campaign runs:
        the aim, or (not fixed) between the floor and the aim."""
        return env_steps == self.aim(task) or (
            not self.fixed(task) and self.floor(task) <= env_steps <= self.aim(task))

    def argv(self, task: str, env_steps: int | None = None) -> list[str]:
        """train_online's flags of a task's run.

        Args:
            task: a task of the campaign.
            env_steps: the run's env steps per seed (None: the aim).

        Returns:
            The flags, less ``--name`` and ``--home``.
        """
        n = self.aim(task) if env_steps is None else int(env_steps)
        out = ["--agent", AGENT, "--task", task, "--preset", self.preset,
               "--seeds", *map(str, self.seeds), "--env-steps", str(n),
               "--eval-every", str(self.eval_every), "--eval-episodes", str(self.eval_episodes)]
        for s in self.sets:
            out += ["--set", s]
        if self.checkpoint_every != 1:
            out += ["--checkpoint-every", str(self.checkpoint_every)]
        return out

    def run_config(self, task: str, env_steps: int | None = None):
        """The config train_online would save for a task's run.

        Args:
            task: a task of the campaign.
            env_steps: the run's env steps per seed (None: the aim).

        Returns:
            The `wmx.runs.online_config.OnlineRunConfig` that train_online's own parser
            and `config_from_args` make of `argv`.

        Raises:
            ValueError: a flag train_online refuses (e.g. an unknown ``--set`` field).
        """
        from wmx.runs.cli_common import given_flags
        from wmx.train_online import cli as online_cli
        p = online_cli.build_parser()
        argv = self.argv(task, env_steps)
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
                   help="env steps per seed of every task's run, fixed: exactly this, never "
                        f"fitted (default: the table's aims, {DEFAULT_TARGET:,}; 200,000 for "
                        + ", ".join(TARGETS) + f"; an aim a run cannot reach in the session's "
                        f"device time is fitted down to at least {FLOOR:,}, in multiples of "
                        f"{FIT_STEP:,})")
    p.add_argument("--target", action="append", default=[], metavar="TASK=N",
                   help="env steps per seed of one task's run, fixed: exactly N, never "
                        "fitted (repeatable; wins over --env-steps and the table's aim)")
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
    """One task of the campaign as the data root and the record show it: ``aim`` and
    ``floor`` its env steps per seed (`Campaign.aim`, `Campaign.floor`), ``groups`` the
    store's episode sets by producer run ({run: [manifest, ...]}), ``runs`` the campaign's
    runs of the task in the home (`wmx.runs.listing.RunInfo`), ``recorded`` its entry in
    mt19_sources.json (None: none), ``archived`` whether that entry's bundle is in the
    repository's history here (`_mt19_archive.available`; False without git)."""
    task: str
    aim: int
    floor: int
    groups: dict[str, list[Any]]
    runs: list[Any]
    recorded: dict[str, Any] | None
    archived: bool = False

    def active(self):
        """The campaign run of the task that has not finished (`RunInfo`), or None."""
        from wmx.runs.listing import FINISHED
        return next((r for r in self.runs if r.status != FINISHED), None)

    def finished_run(self):
        """A finished campaign run in the home that reached its own total (fitted or not)
        and that total at least the floor (`RunInfo`), or None."""
        from wmx.runs.listing import FINISHED
        return next((r for r in self.runs if r.status == FINISHED and r.total is not None
                     and r.done >= r.total >= self.floor), None)

    @property
    def missing_sets(self) -> list[str]:
        """Content hashes of the recorded source's episode sets that the store lacks ([]
        when nothing is recorded): a data root that is not the one the record was made
        in (a new machine, another home) lacks them all, and the dataset build needs
        them; ``restore`` puts them back from an archived bundle, else ``next
        --regenerate`` trains them again."""
        if self.recorded is None:
            return []
        have = {m.content_hash for ms in self.groups.values() for m in ms}
        return [e["content_hash"] for e in self.recorded.get("episode_sets", [])
                if e["content_hash"] not in have]

    def regenerated_run(self):
        """A finished campaign run in the home of the recorded source's env steps
        (`RunInfo`; its regeneration, or the recorded run itself), or None (also when
        nothing is recorded)."""
        from wmx.runs.listing import FINISHED
        if self.recorded is None:
            return None
        n = self.recorded["env_steps"]
        return next((r for r in self.runs if r.status == FINISHED and r.total == n
                     and r.done >= n), None)

    @property
    def needs_restore(self) -> bool:
        """The recorded sets missing from the store and their bundle archived here:
        ``mt19_campaign.py restore`` puts them back (no device time)."""
        return self.archived and bool(self.missing_sets)

    @property
    def needs_regeneration(self) -> bool:
        """Done, with no run in progress, the recorded sets missing from the store, not
        archived here (`needs_restore`) and no finished run of the recorded env steps in
        the home: what ``status`` suggests for ``--regenerate``, ``plan`` counts first and
        `next_text` names."""
        return (self.done and self.active() is None and bool(self.missing_sets)
                and not self.archived and self.regenerated_run() is None)

    @property
    def done(self) -> bool:
        """Recorded at (or past) the floor, or a run trained in this home to its total of
        at least the floor."""
        rec = self.recorded is not None and self.recorded["env_steps"] >= self.floor
        return rec or self.finished_run() is not None

    def next_text(self, env_steps: int | None = None) -> str:
        """The task's next piece in words.

        Args:
            env_steps: a new run's env steps per seed as chosen (`_mt19_next.choose`;
                None: not chosen yet, the aim and the floor are named).

        Returns:
            "-" when done (with its recorded sets in the store, or a finished run of them
            in the home), "restore (...)" when done with sets missing but archived,
            "regenerate (...): new run to N" when done with sets missing and not archived,
            "resume RUN (done/total env steps)", or "new run to N" (with
            "(at least FLOOR as device time allows)" when the floor is below the aim and
            the size is not chosen, "(fitted; aim AIM)" when it was chosen below the aim,
            and what the record has).
        """
        run = self.active()
        if self.done and self.needs_restore and run is None:
            return "restore (here: mt19_campaign.py restore)"
        if self.needs_regeneration:
            return (f"regenerate (next --regenerate): new run to "
                    f"{self.recorded['env_steps']:,}, its recorded env steps")
        if self.done and run is None:
            return "-"
        if run is not None:
            return f"resume {run.name} ({run.done:,}/{run.total or 0:,} env steps)"
        have = f" (has {self.recorded['env_steps']:,})" if self.recorded else ""
        if env_steps is None:
            room = (f" (at least {self.floor:,} as device time allows)"
                    if self.floor < self.aim else "")
            return f"new run to {self.aim:,}{room}{have}"
        fit = f" (fitted; aim {self.aim:,})" if env_steps < self.aim else ""
        return f"new run to {env_steps:,}{fit}{have}"


def recorded_config(entry: dict[str, Any]):
    """The train_online config of a recorded source run (its ``command``).

    Args:
        entry: a task's entry of mt19_sources.json.

    Returns:
        The `wmx.runs.online_config.OnlineRunConfig` train_online's parser makes of the
        command.

    Raises:
        ValueError: one line when the command is not a train_online command it accepts
            (train_online's own usage error is in it, not on stderr).
    """
    import contextlib
    import io
    import shlex

    from wmx.runs.cli_common import given_flags
    from wmx.train_online import cli as online_cli
    command = entry.get("command", "")
    try:
        argv = shlex.split(command)
    except ValueError as e:               # e.g. an unbalanced quote
        raise ValueError(f"the recorded command {command!r} is not shell words ({e}); "
                         "restore mt19_sources.json from git") from None
    if argv[:1] != ["train_online"]:
        raise ValueError(f"the recorded command {command!r} is not a "
                         "train_online command; restore mt19_sources.json from git")
    p = online_cli.build_parser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = p.parse_args(argv[1:])
    except SystemExit:
        why = said.getvalue().strip().splitlines()
        raise ValueError(f"train_online refuses the recorded command {command!r}"
                         + (f" ({why[-1]})" if why else "")
                         + "; restore mt19_sources.json from git") from None
    args.given = given_flags(p, argv[1:])
    return online_cli.config_from_args(args)


def regeneration_env_steps(entry: dict[str, Any]) -> int:
    """The env steps per seed a regeneration of a recorded source run is started with: the
    recorded command's ``--env-steps`` (the entry's ``env_steps`` are what the run trained,
    that value rounded up to whole rounds of episodes, which may be more).

    Args:
        entry: a task's entry of mt19_sources.json.

    Returns:
        The env steps per seed (`recorded_config`'s ``env_steps``).

    Raises:
        ValueError: one line when the command is not a train_online command it accepts.
    """
    return recorded_config(entry).env_steps


def regeneration_mismatch(campaign: Campaign, task: str, entry: dict[str, Any]) -> list[str]:
    """What differs between the campaign's run of a task at the recorded run's env steps
    (`regeneration_env_steps`) and the recorded source run (config fields; how the run is
    cut into chunks and checkpoints changes no result and is left out, and so is where an
    ended run ended: the regeneration ends there too, `_mt19_next.train_piece`).

    Args:
        campaign: the campaign (its flags).
        task: a recorded task.
        entry: its entry of mt19_sources.json.

    Returns:
        The config fields that differ, sorted ([]: a regeneration trains the same run).
    """
    import dataclasses as dc
    keep = {"chunk_ticks": None, "checkpoint_every_chunks": 1, "end_env_steps": None}
    rc = recorded_config(entry)
    a = dc.replace(rc, **keep).to_json()
    b = dc.replace(campaign.run_config(task, rc.env_steps), **keep).to_json()
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def read_state(home: Path, campaign: Campaign, record: dict[str, Any] | None,
               archived: Collection[str] = ()) -> list[TaskState]:
    """What the data root and the record hold of each task.

    Args:
        home: the data root (nothing is written there).
        campaign: the campaign (its tasks, aims and floors).
        record: the loaded mt19_sources.json, or None.
        archived: the recorded tasks whose bundle is in the repository's history here
            (`archived_tasks`; none on the device, which has no git).

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
        out.append(TaskState(t, campaign.aim(t), campaign.floor(t), groups, mine,
                             (record or {}).get("tasks", {}).get(t), t in archived))
    return out


def archived_tasks(results: Path, record: dict[str, Any] | None) -> set[str]:
    """The recorded tasks whose archived bundle (an entry's ``archive``) is in the git
    repository that holds the record, every blob of it (`_mt19_archive.available_each`).

    Args:
        results: the folder of mt19_sources.json (``--results``).
        record: the loaded record, or None.

    Returns:
        The tasks (none when the folder is in no git work tree, or git is missing).

    Raises:
        _mt19_archive.ArchiveError: a repository holds the folder but git cannot use it
            (`_mt19_archive.repo_of`).
    """
    import _mt19_archive as archive_lib
    entries = {t: e["archive"] for t, e in (record or {}).get("tasks", {}).items()
               if e.get("archive")}
    repo = archive_lib.repo_of(Path(results)) if entries else None
    if repo is None:
        return set()
    return archive_lib.available_each(repo, entries)


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
