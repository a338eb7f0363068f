"""`wmx demo`: the whole wmx pipeline at a small default scale (what `make demo` runs).

Stages, each printed as the command a user would type:

  1. train_online    TD-MPC2 on each task (one run per task), exporting the
                     episode sets of every seed into the store;
  2. beam run pipelines/build_mt19.py --tasks ... --sources ...
                     pools those episode sets into one dataset <name>@<hash>;
  3. train_offline   multi-task TD-MPC2 on that dataset, every task evaluated
                     at the end (--agent dreamerv3: multi-task DreamerV3;
                     --agent both: both, each its own run, on the same dataset);
  4. evaluate        the report of the offline run (report.md, per_task.csv,
                     plots) in <run>/report/; with --agent both, the two runs
                     side by side (evaluate --runs) in <home>/reports/.

The default scale shows every part working in about 7 minutes (6.5 measured)
on a 2-core CPU, most of it compiling and evaluating: 3 tasks with different
obs/action dims, 2 episodes (2,000 env steps) per task, random actions for
the first 1,500 (TD-MPC2's seed phase, shortened by the demo's --seed-steps
750; train_online's own is 5,000 env steps) and planning and updates in the
last 500, 1 evaluation episode per task in each stage, a lighter planner (2
MPPI iterations of 128 samples; the cpu preset's are 6 of 256), 300 offline
updates of batch 256 (DreamerV3: --dreamerv3-updates of its preset's 16
windows of 64 + 1 rows). It is far too small to learn the tasks. Scale up by running the stages yourself (README, "The demo,
and scaling it up"): all 19 tasks, the paper preset (model size 5), 1M env
steps and several seeds per task; the build without --tasks; train_offline
with --batch-size 1024 --model-size 5 and many more updates.

Rerunning `wmx demo` with the same flags and --home continues where it
stopped: a stage whose result is in the store is skipped, an interrupted
train_online/train_offline run is continued with --resume. Runs are named
`demo-online-<task>-<hash>` and `demo-offline-<hash>`, the hash covering the
stage's flags, so changed flags start new runs; the dataset stage is skipped
when a dataset pooling exactly the demo's episode sets exists; the evaluate
stage when <run>/report/report.md exists.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from wmx.runs.cli_common import HelpFormatter, at_least
from wmx.runs.interrupt import EXIT_INTERRUPTED, EXIT_TERMINATED

DEFAULT_TASKS = ("cartpole-balance", "pendulum-swingup", "reacher-easy")
"""Cheap mt19 tasks with different dims: (obs, action) = (5, 1), (3, 1), (6, 2)."""

BUILD_JOB = "pipelines/build_mt19.py"

AGENT_CHOICES = ("tdmpc2", "dreamerv3", "both")
DREAMERV3_UPDATES = 100
"""DreamerV3's offline updates in the demo (an update of the cpu preset, 16 windows of
65 rows with 1,024 imagined trajectories, costs far more than TD-MPC2's)."""


def offline_agents(opts: argparse.Namespace) -> tuple[str, ...]:
    """The agents trained offline: --agent, both = ("tdmpc2", "dreamerv3")."""
    agent = getattr(opts, "agent", "tdmpc2") or "tdmpc2"
    return ("tdmpc2", "dreamerv3") if agent == "both" else (agent,)


def add_parser(sub) -> None:
    doc = __doc__.split("\n\n")
    p = sub.add_parser("demo", help="run the whole pipeline at a small default scale",
                       description="\n\n".join(doc[:4]), epilog=doc[4],
                       formatter_class=_Formatter)
    add_arguments(p)
    for a in p._actions:        # `wmx --home X demo` and `wmx demo --home X` both work
        if a.dest == "home":
            a.default = argparse.SUPPRESS
    p.set_defaults(func=run)


class _Formatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


LEAST = {"env_steps": 1, "updates": 1, "batch_size": 1, "eval_episodes": 1, "iterations": 1,
         "num_samples": 1, "dreamerv3_updates": 1, "seed_steps": 0}
"""The smallest value of each count flag (train_online allows 0 seed steps): the parser's
types and `run_pipeline` (called with a Namespace built elsewhere) check the same bounds."""


def _count_at_least(flag: str):
    """argparse type of the count flag ``flag`` (its LEAST key): `at_least` its bound."""
    return at_least(LEAST[flag])


DEMO_SEED_STEPS = 750
"""The demo's seed phase in agent steps: with 2,000 env steps (1,000 agent steps on DMC)
train_online plans and updates in the last 250 (its own default, 2,500, would leave the
whole run random)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    p.add_argument("--tasks", default=",".join(DEFAULT_TASKS),
                   help="comma-separated mt19 tasks (mt30 spelling)")
    p.add_argument("--env-steps", type=_count_at_least("env_steps"), default=2_000,
                   help="train_online env steps per task (1,000 per episode on DMC)")
    p.add_argument("--seed-steps", type=_count_at_least("seed_steps"), default=DEMO_SEED_STEPS,
                   help="train_online random-action agent steps before the first update "
                        "(750 of the 1,000 agent steps of --env-steps 2000: the online stage "
                        "plans and updates in its last 250; train_online's own is "
                        "max(1000, 5T) = 2,500 on DMC)")
    p.add_argument("--agent", choices=AGENT_CHOICES, default="tdmpc2",
                   help="agent(s) trained offline on the pooled dataset (both: side by side, "
                        "one report comparing them); the episodes come from TD-MPC2's online "
                        "runs either way")
    p.add_argument("--updates", type=_count_at_least("updates"), default=300,
                   help="train_offline gradient updates (TD-MPC2)")
    p.add_argument("--batch-size", type=_count_at_least("batch_size"), default=256,
                   help="train_offline batch size (TD-MPC2)")
    p.add_argument("--dreamerv3-updates", type=_count_at_least("dreamerv3_updates"),
                   default=DREAMERV3_UPDATES,
                   help="train_offline gradient updates of DreamerV3 (its preset's batch)")
    p.add_argument("--seeds", type=at_least(0), nargs="+", default=[0],
                   help="seeds of every train_online and train_offline run")
    p.add_argument("--preset", default="cpu", choices=("paper", "cpu", "tiny"),
                   help="TD-MPC2 preset")
    p.add_argument("--iterations", type=_count_at_least("iterations"), default=2,
                   help="MPPI iterations of the planner in every stage (the cpu preset's: 6)")
    p.add_argument("--num-samples", type=_count_at_least("num_samples"), default=128,
                   help="MPPI samples of the planner in every stage (the cpu preset's: 256)")
    p.add_argument("--eval-episodes", type=_count_at_least("eval_episodes"), default=1,
                   help="evaluation episodes per task (and seed) in every stage")
    p.add_argument("--dry-run", action="store_true",
                   help="print the stages and their commands, run nothing")


# ---------------------------------------------------------------------------
# Stage planning (pure: reads the store, runs nothing)

@dataclass
class Stage:
    """One stage: the command as a user types it and whether it has to run.

    status: "run" (start it), "resume" (continue an interrupted run), "done"
    (its result is in the store: skipped). ``result`` is the stage's output
    once known: a run directory, or the dataset ref ``name@hash``. ``find``, for
    a stage whose output is looked up in the store after it ran (the build):
    returns that result, or None when it is not there.
    """

    title: str
    argv: list[str]
    status: str = "run"
    result: str | None = None
    note: str = ""
    find: Callable[[], str | None] | None = None

    @property
    def prog(self) -> str:
        return self.argv[0]

    def command(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)


def _digest(parts: Sequence[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def parse_tasks(text: str) -> tuple[str, ...]:
    """The --tasks list in mt30 order. Raises ValueError for an unknown, duplicated
    or non-mt19 task, or an empty list."""
    from wmx.schemas.taskset import mt19
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("--tasks needs at least one task")
    return mt19().subset(names).names


def _planner_flags(opts: argparse.Namespace) -> list[str]:
    """The planner overrides both trainers take (their runs' configs keep them, so
    evaluate plans the same way)."""
    out = []
    for name in ("iterations", "num_samples"):
        v = getattr(opts, name, None)
        if v is not None:
            out += [f"--{name.replace('_', '-')}", str(v)]
    return out


def _run_status(run_dir: Path) -> str:
    if (run_dir / "summary.json").is_file():
        return "done"
    return "resume" if (run_dir / "config.json").is_file() else "run"


def online_stage(opts: argparse.Namespace, home: Path, task: str) -> Stage:
    seed = [] if opts.seed_steps is None else ["--seed-steps", str(opts.seed_steps)]
    flags = ["--agent", "tdmpc2", "--task", task, "--env-steps", str(opts.env_steps),
             *seed, "--preset", opts.preset, *_planner_flags(opts),
             "--eval-every", str(opts.env_steps), "--eval-episodes", str(opts.eval_episodes),
             "--seeds", *map(str, opts.seeds)]
    name = f"demo-online-{task}-{_digest(flags)}"
    run_dir = home / "runs" / name
    st = Stage(f"train_online {task}", ["train_online", *flags, "--home", str(home),
                                        "--name", name], result=str(run_dir))
    st.status = _run_status(run_dir)
    if st.status == "resume":
        st.argv = ["train_online", "--resume", str(run_dir)]
    return st


def episode_sets(run_dir: Path) -> list[Path]:
    """The episode-set directories a finished train_online run exported (summary.json)."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    sets = summary.get("episode_sets") or {}
    if not sets:
        raise ValueError(f"run {run_dir} exported no episode set (was it run with "
                         "--no-export?)")
    return [Path(p) for _, p in sorted(sets.items(), key=lambda kv: int(kv[0]))]


def find_dataset(home: Path, name: str, set_dirs: Sequence[Path],
                 taskset=None) -> str | None:
    """``name@<hash>`` of a complete dataset named ``name`` in the store that pools
    exactly the episodes of the episode sets ``set_dirs`` over ``taskset`` (a TaskSet;
    None: any), else None. Unreadable manifests in the store are skipped.

    A dataset built from these sets (its manifest's ``sources``) matches first; else one
    holding the same episodes (the manifests' episode digests, duplicates counted once per
    task, as the build pools them):
    a build from another list of sets whose episodes dedupe to the same content keeps the
    dataset already stored, whose manifest names the first build's sources."""
    from wmx.schemas.taskset import TaskSet
    mans = [json.loads((Path(d) / "manifest.json").read_text()) for d in set_dirs]
    want = sorted(m["content_hash"] for m in mans)
    episodes = (sorted(dg for _, dg in {(m["task"]["name"], dg) for m in mans
                                        for dg in m["episode_digests"]})
                if all("episode_digests" in m and "task" in m for m in mans) else None)
    stored = []
    for path in sorted((home / "datasets" / name).glob("*/manifest.json")):
        if path.parent.name.startswith("."):
            continue
        try:
            m = json.loads(path.read_text())
            if taskset is not None and TaskSet.from_dict(m["taskset"]) != taskset:
                continue
            stored.append(m)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    for match in (lambda m: sorted(m.get("sources", [])) == want,
                  lambda m: episodes is not None and
                  sorted(m.get("episode_digests", [])) == episodes):
        for m in stored:
            if match(m):
                return f"{name}@{m['content_hash']}"
    return None


def build_job_path() -> Path:
    """pipelines/build_mt19.py of this checkout (wmx is installed editable)."""
    from wmx.paths import REPO_ROOT
    return REPO_ROOT / BUILD_JOB


def _shown_path(p: Path) -> str:
    try:
        return os.path.relpath(p) if Path(p).resolve().is_relative_to(Path.cwd()) else str(p)
    except ValueError:
        return str(p)


def dataset_stage(opts: argparse.Namespace, home: Path, tasks: Sequence[str],
                  online_runs: Sequence[str] | None) -> Stage:
    """The build of the demo's TaskSet from the online runs' episode sets
    (``online_runs`` None: not known yet, placeholders in the command)."""
    from wmx.schemas.taskset import mt19
    taskset = mt19().subset(tasks)
    name = taskset.name
    if online_runs is None:
        sources, set_dirs = ["<episode sets of the train_online runs>"], None
    else:
        set_dirs = [d for r in online_runs for d in episode_sets(Path(r))]
        sources = [f"{d.parent.name}/{d.name}" for d in set_dirs]
    st = Stage(f"beam build {name}", ["beam", "run", _shown_path(build_job_path()), "--home",
                                      str(home), "--tasks", ",".join(tasks), "--sources",
                                      *sources])
    if set_dirs is not None:
        st.find = lambda: find_dataset(home, name, set_dirs, taskset)
        ref = st.find()
        if ref is not None:
            st.status, st.result = "done", ref
    st.note = name
    return st


def offline_stage(opts: argparse.Namespace, home: Path, dataset: str | None,
                  agent: str = "tdmpc2") -> Stage:
    """train_offline of ``agent`` on ``dataset`` (name@full hash; None: not known yet).

    TD-MPC2: --updates of --batch-size, the demo's planner; run ``demo-offline-<hash>``.
    DreamerV3: --dreamerv3-updates of its preset's batch; run
    ``demo-offline-dreamerv3-<hash>``. Both evaluate every task once, at the end."""
    updates = opts.updates if agent == "tdmpc2" else getattr(opts, "dreamerv3_updates",
                                                              DREAMERV3_UPDATES)
    log_every = next(d for d in range(min(updates, 100), 0, -1) if updates % d == 0)
    ref = dataset or "<dataset>"
    if dataset is not None:
        name_, h = dataset.split("@")
        ref = f"{name_}@{h[:12]}"
    own = (["--batch-size", str(opts.batch_size), "--preset", opts.preset, *_planner_flags(opts)]
           if agent == "tdmpc2" else ["--preset", opts.preset])
    flags = ["--agent", agent, "--dataset", ref, "--updates", str(updates), *own,
             "--log-every", str(log_every), "--eval-every", str(updates),
             "--eval-episodes", str(opts.eval_episodes), "--seeds", *map(str, opts.seeds)]
    prefix = "demo-offline-" if agent == "tdmpc2" else f"demo-offline-{agent}-"
    # the hash covers the dataset: until it is built the name is not known (--dry-run)
    name = f"{prefix}{_digest([dataset, *flags])}" if dataset else f"{prefix}<hash>"
    run_dir = home / "runs" / name
    title = "train_offline" if agent == "tdmpc2" else f"train_offline {agent}"
    st = Stage(title, ["train_offline", *flags, "--home", str(home), "--name", name],
               result=str(run_dir) if dataset else None)
    if dataset is not None:
        st.status = _run_status(run_dir)
        if st.status == "resume":
            st.argv = ["train_offline", "--resume", str(run_dir)]
    return st


def evaluate_stage(opts: argparse.Namespace, home: Path, run_dir: str | None) -> Stage:
    run = run_dir or "<train_offline run>"
    st = Stage("evaluate", ["evaluate", "--run", run, "--episodes", str(opts.eval_episodes),
                            "--home", str(home)],
               result=None if run_dir is None else str(Path(run_dir) / "report"))
    if run_dir is not None:
        rep = Path(run_dir) / "report"
        if (rep / "report.md").is_file():
            st.status = "done"
        elif rep.exists():                 # left incomplete: replace it
            st.argv.append("--force")
    return st


def compare_stage(opts: argparse.Namespace, home: Path, run_dirs: Sequence[str] | None) -> Stage:
    """``evaluate --runs`` of the offline runs side by side, into
    ``<home>/reports/demo-compare-<hash>`` (``run_dirs`` None: not known yet)."""
    runs = list(run_dirs) if run_dirs else ["<train_offline runs>"]
    out = home / "reports" / f"demo-compare-{_digest(runs)}"
    st = Stage("evaluate (compare)", ["evaluate", "--runs", *runs, "--episodes",
                                      str(opts.eval_episodes), "--out", str(out), "--home",
                                      str(home)],
               result=None if run_dirs is None else str(out))
    if run_dirs is not None:
        if (out / "compare.md").is_file():
            st.status = "done"
        elif out.exists():
            st.argv.append("--force")
    return st


# ---------------------------------------------------------------------------
# Running

def _evaluate_main(argv: list[str]) -> int:
    from wmx.evaluate import cli as evaluate_cli      # lazily: heavy imports
    return evaluate_cli.main(argv)


def _online_main(argv: list[str]) -> int:
    from wmx.train_online import cli
    return cli.main(argv)


def _offline_main(argv: list[str]) -> int:
    from wmx.train_offline import cli
    return cli.main(argv)


def _beam_main(argv: list[str]) -> int:
    from wmx.cli import beam
    job = str(build_job_path())   # the shown path may be relative to another cwd
    return beam.main([argv[0], job, *argv[2:]])


RUNNERS: dict[str, Callable[[list[str]], int]] = {
    "train_online": _online_main, "beam": _beam_main, "train_offline": _offline_main,
    "evaluate": _evaluate_main}
"""Program name -> ``main(argv) -> exit status`` (the installed commands' entry points)."""


def _fmt_s(s: float) -> str:
    m, sec = divmod(int(round(s)), 60)
    return f"{m}m{sec:02d}s" if m else f"{s:.1f}s"


class DemoError(RuntimeError):
    """A stage failed; the message names it and its exit status."""


def run_pipeline(opts: argparse.Namespace, home: Path, *,
                 runners: dict[str, Callable[[list[str]], int]] | None = None,
                 out=None) -> dict:
    """Plan and run the stages in order, skipping finished ones.

    ``runners`` maps program names to ``main(argv)`` (tests stub them).
    Returns {"stages": [{title, command, status, seconds, result}],
    "dataset", "offline_run", "report"}. Raises DemoError when a stage
    exits non-zero, ValueError for bad flags.
    """
    runners = {**RUNNERS, **(runners or {})}
    tasks = parse_tasks(opts.tasks)
    agents = offline_agents(opts)
    for flag, least in LEAST.items():
        value = getattr(opts, flag, None)
        if value is not None and value < least:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= {least}, got {value}")
    n_stages = len(tasks) + 2 + len(agents)
    log: list[dict] = []
    t_all = time.perf_counter()

    def say(msg=""):
        print(msg, file=out or sys.stdout, flush=True)

    def execute(i: int, st: Stage) -> None:
        say(f"\n=== stage {i}/{n_stages}: {st.title} ===")
        say(f"$ {st.command()}")
        t0, c0 = time.perf_counter(), time.process_time()
        if st.status == "done":
            say(f"skipped: already done ({st.result})")
        else:
            if st.status == "resume":
                say("continuing the interrupted run")
            rc = runners[st.prog](list(st.argv[1:]))
            if rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
                how = "Ctrl-C" if rc == EXIT_INTERRUPTED else "SIGTERM"
                raise DemoError(f"stage {i}/{n_stages} ({st.title}) was stopped by {how} with "
                                "its checkpoint; rerun `wmx demo` with the same flags to "
                                "continue from this stage")
            if rc:
                raise DemoError(f"stage {i}/{n_stages} ({st.title}) failed with exit status "
                                f"{rc}; fix the cause and rerun `wmx demo` with the same flags "
                                "to continue from this stage")
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        say(f"--- stage {i}/{n_stages} {st.title}: {'skipped' if st.status == 'done' else 'done'}"
            f" in {_fmt_s(dt)} (CPU time {_fmt_s(cpu)}; total {_fmt_s(time.perf_counter() - t_all)})")
        log.append({"title": st.title, "command": st.command(), "status": st.status,
                    "seconds": round(dt, 1), "cpu_seconds": round(cpu, 1), "result": st.result})

    i = 0
    online = []
    for task in tasks:
        i += 1
        st = online_stage(opts, home, task)
        execute(i, st)
        if not (Path(st.result) / "summary.json").is_file():
            raise DemoError(f"train_online {task} ended without finishing its run "
                            f"{st.result}; rerun `wmx demo` to continue it")
        online.append(st.result)

    i += 1
    st = dataset_stage(opts, home, tasks, online)
    execute(i, st)
    if st.status != "done":
        st.result = st.find()
        if st.result is None:
            raise DemoError(f"the build finished but no dataset {st.note} pooling the demo's "
                            f"episode sets is in {home / 'datasets'}")
        log[-1]["result"] = st.result
    dataset = st.result

    offline_runs = []
    for agent in agents:
        i += 1
        st = offline_stage(opts, home, dataset, agent)
        execute(i, st)
        if not (Path(st.result) / "summary.json").is_file():
            raise DemoError(f"train_offline ended without finishing its run {st.result}; "
                            "rerun `wmx demo` to continue it")
        offline_runs.append(st.result)
    offline_run = offline_runs[0]

    i += 1
    if len(offline_runs) == 1:
        st = evaluate_stage(opts, home, offline_run)
        execute(i, st)
        report = Path(offline_run) / "report" / "report.md"
    else:
        st = compare_stage(opts, home, offline_runs)
        execute(i, st)
        report = Path(st.result) / "compare.md"

    total = time.perf_counter() - t_all
    say(f"\n=== wmx demo finished in {_fmt_s(total)} ===")
    say(f"  {'stage':<32s} {'':<8s}{'wall':>9s}{'CPU':>10s}")
    for r in log:
        say(f"  {r['title']:<32s} {'skipped' if r['status'] == 'done' else 'ran':<8s}"
            f"{_fmt_s(r['seconds']):>9s}{_fmt_s(r['cpu_seconds']):>10s}")
    say(f"dataset:        {dataset}")
    for run_dir in offline_runs:
        say(f"offline run:    {run_dir}")
    say(f"report:         {report}")
    for png in sorted(report.parent.glob("*.png")):
        kind = {"scores.png": "bar plot:"}.get(png.name, "plot:")
        say(f"{kind:<16s}{png}")
    for what, cmd in follow_ups(home, dataset):
        say(f"{what:<16s}{cmd}")
    return {"stages": log, "dataset": dataset, "offline_run": offline_run,
            "offline_runs": offline_runs, "report": str(report), "seconds": round(total, 1)}


def follow_ups(home: Path, dataset: str) -> list[tuple[str, str]]:
    """The commands that show what the demo made, each reaching ``home`` as typed: with
    ``--home`` only when the data root is not the one the commands find without it.

    Args:
      home: the demo's data root.
      dataset: the pooled dataset, ``name@hash``.

    Returns:
      [(label, command)]: the runs (``wmx runs ls``) and the dataset (``wmx dataset info``).
    """
    from wmx.paths import home_flag
    from wmx.schemas.hashing import is_sha256_hex, short_hash
    name, _, h = dataset.partition("@")
    ref = f"{name}@{short_hash(h)}" if is_sha256_hex(h) else dataset
    flag = "".join(f" {shlex.quote(a)}" for a in home_flag(home))
    return [("runs:", f"wmx runs ls{flag}"),
            ("dataset info:", f"wmx dataset info {ref}{flag}")]


def plan_text(opts: argparse.Namespace, home: Path) -> str:
    """The stages and their commands as far as they are known now (--dry-run)."""
    tasks = parse_tasks(opts.tasks)
    stages = [online_stage(opts, home, t) for t in tasks]
    finished = all(s.status == "done" for s in stages)
    ds = dataset_stage(opts, home, tasks, [s.result for s in stages] if finished else None)
    offs = [offline_stage(opts, home, ds.result, a) for a in offline_agents(opts)]
    done = all(o.status == "done" for o in offs)
    if len(offs) == 1:
        ev = evaluate_stage(opts, home, offs[0].result if done else None)
    else:
        ev = compare_stage(opts, home, [o.result for o in offs] if done else None)
    lines = []
    for i, st in enumerate([*stages, ds, *offs, ev], 1):
        state = {"run": "to run", "resume": "to continue", "done": "done, skipped"}[st.status]
        lines.append(f"{i}. {st.title} ({state})\n   $ {st.command()}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from wmx.paths import wmx_home
    try:
        home = wmx_home(args.home)            # a file as the data root: one line, exit 2
        if len(set(args.seeds)) != len(args.seeds):
            raise ValueError(f"--seeds {' '.join(map(str, args.seeds))}: give each seed once")
        if args.dry_run:
            print(plan_text(args, home))
            return 0
        run_pipeline(args, home)
    except (ValueError, DemoError) as e:
        print(f"wmx demo: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    return 0
