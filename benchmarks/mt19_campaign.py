"""mt19_campaign: train the mt19 sources (TD-MPC2 --preset paper) call by call on a device.

Every mt19 task gets one ordinary ``train_online`` run (TD-MPC2, ``--preset
paper``, seeds 0 and 1 vmapped, an evaluation every 10,000 env steps) of at
least 100,000 env steps (`_mt19_tasks.FLOOR`); the run exports every episode as
an episode set per seed, as every run does. A run's replay and checkpoints stay
on the machine it trains on, so it must finish within one device session (calls
of at most 10 minutes, /tmp kept only while the machine is warm); what must be
kept comes back as a bundle per finished run (`_mt19_bundle`). A task's table
value is its aim: 100,000 env steps, 200,000 for the tasks TD-MPC2's published
curves show learning later (`TARGETS`); a run whose aim does not fit the
session's device time trains to the largest multiple of 10,000 from the floor up
that the plan's model says fits. ``--target TASK=N`` and ``--env-steps N`` fix a
task's env steps at exactly N, never fitted.

    python benchmarks/mt19_campaign.py status [--home H]    # per task: sets, runs, done, next
    python benchmarks/mt19_campaign.py plan                 # device minutes and sessions
    python benchmarks/mt19_campaign.py next --home H --out DIR --budget-s 540   # on the device
        (status prints the whole device command)
    python benchmarks/mt19_campaign.py ingest DIR... [--home H]                  # here
    python benchmarks/mt19_campaign.py restore [--home H]   # here, on a new data root
    python benchmarks/mt19_campaign.py build [--home H]     # the dataset build of the record
    python benchmarks/mt19_campaign.py table                # the record as markdown tables

``next`` (on the device machine, one call at a time) resumes the campaign run in
progress in H, or starts the next task not done (in mt30 order: done means
benchmarks/results/mt19_sources.json records it at its floor or more, or H holds
its finished run of at least the floor; with ``--device-left-s``, at the largest
of its sizes the plan's model says fits the session, and only then), and trains
it until ``--budget-s`` seconds after the command started (``--call-start``,
else the process), less ``--reserve-s`` for the chunk in flight, the final
evaluation and the packing. It stops the run the way SIGTERM stops
``train_online``: after the running chunk, with its checkpoint and no extra
evaluation, so the next call resumes it exactly (the metrics of a run split over
calls are those of an uninterrupted one). A finished run is packed into DIR as
``<task>.tar.gz`` (cut into parts of under 16 MiB when larger) and, with time
left, the next task starts. DIR also gets ``mt19_call.json``: what the call did,
where it stopped and what comes next. Call again within the machine's warm
period (`_device_kinds`: 100 s on the TPU, 30 s on the H200) with the same command
to continue; the device has no git, so start the command with
``WMX_CODE_VERSION=<commit>`` (``status`` prints it), which the episode sets' producers
record.

``ingest`` (here) verifies the bundles (content hashes, file and record
digests), moves their episode sets into the store and their runs into
``<home>/runs/`` (all or nothing), and records them in
benchmarks/results/mt19_sources.json and mt19_sources.png.

A data root is not kept from one machine to the next, so ``ingest`` also keeps each
recorded task's bundle in the repository's git history (`_mt19_archive`; not with
``--no-archive``, nor when the results folder is in no git work tree): two commits on the
current branch, the first adding ``mt19-archive/<file>``, the second taking it out of the
working tree again, and the task's entry names the blobs (``archive``) and the first
commit (``archive_commit``). ``restore`` (here) puts the recorded sets a data root lacks
back from those blobs, verified as ``ingest`` verifies, without changing the record; a
task whose bundle is not archived is trained again (``next --regenerate``).
"""
from __future__ import annotations

import time

_T0 = time.monotonic()      # a call's budget counts from the process's start

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "learning")]

import _mt19_record as record_lib  # noqa: E402
from _mt19_ingest import cmd_ingest, cmd_restore  # noqa: E402
from _mt19_next import CALL_FILE, MAX_BUDGET_S, cmd_next  # noqa: E402,F401
from _mt19_plan import (CACHED_COMPILE_S, COMPILE_S, SPS_DEFAULT, STARTUP_S,  # noqa: E402
                        cmd_plan)
from _device_kinds import DEFAULT as DEFAULT_DEVICE, KINDS  # noqa: E402
from _mt19_record import device_command  # noqa: E402
from _mt19_tasks import (Campaign, add_campaign_args, archived_tasks,  # noqa: E402
                         campaign_of, load_record, read_state)


# ---- status ------------------------------------------------------------------------------
def _group_cells(ms: list[Any]) -> tuple[str, str, str, str, str]:
    """Table cells of one producer's episode sets (manifests): hashes, seeds, env steps,
    episodes, mean of the last 10 training returns per set."""
    ms = sorted(ms, key=lambda m: m.producer.seed)
    steps = {m.episode_count * m.task.env_steps_per_episode for m in ms}
    eps = {m.episode_count for m in ms}
    last = "/".join(f"{sum(m.episode_returns[-10:]) / max(1, len(m.episode_returns[-10:])):.1f}"
                    for m in ms)
    return (",".join(m.content_hash[:10] for m in ms), " ".join(str(m.producer.seed) for m in ms),
            "/".join(f"{s:,}" for s in sorted(steps)), "/".join(str(e) for e in sorted(eps)),
            last)


def cmd_status(args, campaign: Campaign) -> int:
    """Print the campaign per task and what comes next; writes nothing.

    Args:
        args: the parsed flags (``home``, ``results`` and the campaign's).
        campaign: the campaign.

    Returns:
        0.
    """
    from wmx.cli.table import print_table
    from wmx.datasets.store import Store
    from wmx.version import code_version
    from wmx.sizes import counted, noun_for
    home = Store(args.home).home
    record = load_record(Path(args.results))
    states = read_state(home, campaign, record, archived_tasks(Path(args.results), record))
    rows = []
    for s in states:
        rec = s.recorded
        src = "-" if rec is None else f"{rec['env_steps']:,} / {rec['final_return_mean']:.1f}"
        state = ("done; archived" if s.done and s.needs_restore else
                 "done; sets missing" if s.done and s.missing_sets else "done" if s.done
                 else "short" if rec else "todo")
        run = s.active() or s.finished_run()
        run_cell = "-" if run is None else f"{run.status} {run.done:,}/{run.total or 0:,}"
        aim = f"{s.aim:,}" + (f" ({s.floor:,})" if s.floor < s.aim else "")
        head = [s.task, aim, state, src, run_cell]
        if not s.groups:
            rows.append(head + ["-"] * 6 + [s.next_text()])
        for i, (producer, ms) in enumerate(sorted(s.groups.items())):
            lead = head if i == 0 else [""] * len(head)
            hashes, seeds, steps, eps, last = _group_cells(ms)
            rows.append(lead + [hashes, producer, seeds, steps, eps, last,
                                s.next_text() if i == 0 else ""])
    print(f"mt19 campaign: data root {home}; record {Path(args.results) / record_lib.FILE}")
    print_table(("TASK", "AIM (FLOOR)", "STATE", "RECORDED (ENV STEPS / FINAL EVAL)",
                 "RUN IN HOME", "SETS", "PRODUCER RUN", "SEEDS", "ENV STEPS", "EPISODES",
                 "LAST-10 MEAN", "NEXT"), rows)
    todo = [s for s in states if not s.done]
    lost = [s.task for s in states if s.needs_regeneration]
    kept = [s.task for s in states if s.needs_restore]
    print(f"{len(states) - len(todo)}/{len(states)} tasks done")
    if not todo and not lost and not kept and all(s.recorded is not None for s in states):
        tasks = (f" --tasks {shlex.quote(args.tasks)}"
                 if "tasks" in getattr(args, "given", set()) else "")
        print(f"every task recorded, its sets here: the dataset's build command: python "
              f"benchmarks/mt19_campaign.py build{_place_text(args)}{tasks}")
    have = [s.task for s in states if s.recorded is not None and not s.missing_sets]
    if have and (lost or kept):
        print(f"a dataset of the recorded tasks whose sets are here: python "
              f"benchmarks/mt19_campaign.py build{_place_text(args)} --tasks {','.join(have)}")
    if kept:
        print(f"first, here: python benchmarks/mt19_campaign.py restore{_place_text(args)}"
              f"{_flags_text(args)}   # {counted(len(kept), 'task')} "
              f"{noun_for(len(kept), 'has', 'have')} their recorded sets archived "
              f"in git history, not in this data root ({', '.join(kept)})")
    if lost:
        print(f"episode sets missing: {len(lost)} done task(s) have their recorded sets not in "
              f"this data root ({', '.join(lost)}); the dataset build needs every task's "
              "sets: `next --regenerate` trains them again on the device, first, and ingest "
              "compares the new sets' content hashes with the recorded ones")
    if todo or lost:
        fits = _fresh_session_firsts(args, campaign, home, set(lost))
        s = next((x for x in todo if x.active() is not None), None) or next(
            (x for x in todo if x.task == fits[1]), todo[0] if todo else None)
        kind = KINDS[args.device]
        if lost and (fits[0] is not None or s is None):
            again = fits[0] or lost[0]
            print(f"next piece: {again}: trained again (with --regenerate, below, as plan "
                  "counts it first)" + (f"; without it, {s.task}: {s.next_text()}"
                                         if s is not None else ""))
        elif lost:                      # no run to train again fits: next takes a todo task
            print(f"next piece: {s.task}: {s.next_text()} (with --regenerate too: "
                  f"{', '.join(lost)} to train again fit no fresh {kind.session_s / 60:g}-"
                  f"minute session of the {kind.label} at the plan's speeds)")
        elif s is not None:
            print(f"next piece: {s.task}: {s.next_text()}")
        if fits == (None, None):
            print(f"note: at the plan's speeds no task left fits one "
                  f"{kind.session_s / 60:g}-minute session of the {kind.label} "
                  f"(plan --device {args.device})")
        cv = code_version()
        print(f"device command on the {kind.label} machine (carry {kind.wheels}, made here by "
              f"`{kind.made_by}`; H a folder in the device's /tmp; again within "
              f"{kind.warm_s:g} s while a run is in progress; SECONDS: the device tool's "
              "budget_left_s, less ~120 s when the call starts a machine):")
        print(f"  {device_command(cv, kind.name)}{_flags_text(args)}")
        if lost:
            print("  to train the missing sets again first, add: --regenerate "
                  + ",".join(lost))
        if cv.endswith("-dirty"):
            print("note: the checkout has uncommitted changes; commit before the device calls, "
                  "so that the episode sets name a commit")
    return 0


def _fresh_session_firsts(args, campaign: Campaign, home: Path,
                          lost: set[str]) -> tuple[str | None, str | None]:
    """What a fresh session of the ``--device`` kind trains first, at the plan's default
    model (`_mt19_plan.campaign_timeline`): (the first regeneration whose run fits one
    session, the first task not done whose run fits); None where none fits."""
    from _mt19_plan import campaign_timeline, first_fitting
    model = build_parser().parse_args(["plan", "--device", args.device])
    model.results = args.results
    _, todo, at, _ = campaign_timeline(model, campaign, home)
    return (first_fitting(todo, at, lost) if lost else None,
            first_fitting(todo, at, {t for t, _ in todo} - lost))


def _place_text(args) -> str:
    """``--home`` and ``--results`` as typed (``given``), for the commands printed here."""
    return "".join(f" --{d} {shlex.quote(str(getattr(args, d)))}" for d in ("home", "results")
                   if d in getattr(args, "given", set()))


def _flags_text(args) -> str:
    """The campaign flags typed (``given``) as text, for the commands printed."""
    out = ""
    for dest in ("tasks", "preset", "seeds", "env_steps", "target", "eval_every",
                 "eval_episodes", "set_", "checkpoint_every"):
        if dest in getattr(args, "given", set()):
            v = getattr(args, dest)
            flag = "--set" if dest == "set_" else "--" + dest.replace("_", "-")
            if dest in ("set_", "target"):
                out += "".join(f" {flag} {shlex.quote(x)}" for x in v)
            elif isinstance(v, list):
                out += f" {flag} " + " ".join(map(str, v))
            else:
                out += f" {flag} {shlex.quote(str(v))}"
    return out


# ---- build -------------------------------------------------------------------------------
BUILD_FLAGS = {"tasks", "home", "results"}
"""The flags ``build`` reads; the campaign's run flags it shares with the other
subcommands' parsers are refused (they change nothing here)."""


def build_command(args, campaign: Campaign) -> dict[str, Any]:
    """The dataset build that pools exactly the recorded episode sets.

    A data root may hold other sets of the same tasks (a run's sets truncated for an
    offline check, ``run@N``; an earlier run of the task): ``build_mt19.py`` without
    ``--sources`` pools every set of each task, and the dataset's content hash then names
    other data than the record's. This names each recorded set (``<task>/<hash12>``) and,
    when not every mt19 task is recorded, the recorded ones (``--tasks``: a subset is its
    own TaskSet, ``mt19-<8 hex>``).

    Args:
        args: the parsed flags (``home``, ``results``, ``tasks``).
        campaign: the campaign (its tasks, in order).

    Returns:
        {"words": the command's words, "name": the dataset's TaskSet name (None for tasks
        outside mt19), "episodes": the
        recorded sets' episodes, "others": the content hashes of the recorded tasks' other
        sets in the store, which it leaves out, "not_recorded": the campaign's tasks with
        no record, left out}.

    Raises:
        ValueError: a run flag given, nothing recorded, or a recorded set missing from the
            data root (one line naming restore, --regenerate or --tasks).
    """
    from wmx.datasets.store import Store
    from wmx.envs.registry import MT19
    from wmx.schemas.taskset import mt19
    extra = sorted(getattr(args, "given", set()) - BUILD_FLAGS)
    if extra:
        raise ValueError(f"{', '.join('--' + d.rstrip('_').replace('_', '-') for d in extra)}: "
                         "build reads the record, not the campaign's run settings; give only "
                         "--tasks, --home, --results")
    home = Store(args.home).home
    record = load_record(Path(args.results))
    every = read_state(home, campaign, record, archived_tasks(Path(args.results), record))
    states = [s for s in every if s.recorded is not None]
    if not states:
        raise ValueError(f"no task recorded in {Path(args.results) / record_lib.FILE}; "
                         "ingest the device calls' bundles first")
    lost = [s.task for s in states if s.missing_sets]
    if lost:
        kept = [s.task for s in states if s.task in lost and s.needs_restore]
        again = [t for t in lost if t not in kept]
        fix = " and ".join(
            ([f"restore {', '.join(kept)} (python benchmarks/mt19_campaign.py restore"
              f"{_place_text(args)})"] if kept else [])
            + ([f"train {', '.join(again)} again on the device (next --regenerate "
                f"{','.join(again)})"] if again else []))
        have = [s.task for s in states if s.task not in lost]
        raise ValueError(f"the recorded episode sets of {', '.join(lost)} are not in {home}: "
                         f"{fix}" + (f"; or build the tasks whose sets are here: --tasks "
                                     f"{','.join(have)}" if have else ""))
    words = ["beam", "run", "pipelines/build_mt19.py"]
    if "home" in getattr(args, "given", set()):
        words += ["--home", str(args.home)]
    names = [s.task for s in states]
    name: str | None = mt19().name
    if set(names) != {t.name for t in MT19}:
        words += ["--tasks", ",".join(names)]
        try:
            name = mt19().subset(names).name
        except ValueError:              # a task outside mt19 (tests' probe tasks): unnamed
            name = None
    words += ["--sources"] + [f"{s.task}/{e['content_hash'][:12]}" for s in states
                              for e in s.recorded["episode_sets"]]
    recorded = {e["content_hash"] for s in states for e in s.recorded["episode_sets"]}
    return {"words": words, "name": name,
            "episodes": sum(int(e["episodes"]) for s in states
                            for e in s.recorded["episode_sets"]),
            "others": sorted(m.content_hash for s in states for ms in s.groups.values()
                             for m in ms if m.content_hash not in recorded),
            "not_recorded": [s.task for s in every if s.recorded is None]}


def cmd_build(args, campaign: Campaign) -> int:
    """Print `build_command` (and what it leaves out); writes nothing.

    Returns:
        0; bad input is a ValueError (one line, exit 2).
    """
    from wmx.sizes import counted, noun_for
    b = build_command(args, campaign)
    tasks = len(campaign.tasks) - len(b["not_recorded"])
    notes = []
    if b["others"]:
        notes.append(f"{counted(len(b['others']), 'other set')} of these tasks in the data "
                     "root left out: " + ", ".join(h[:12] for h in b["others"]))
    if b["not_recorded"]:
        notes.append(f"not recorded, left out: {', '.join(b['not_recorded'])}")
    print(f"# {b['name'] + ': ' if b['name'] else ''}the {counted(tasks, 'recorded task')} "
          f"({counted(b['episodes'], 'episode')}), pooling exactly "
          f"{noun_for(tasks, 'its', 'their')} recorded episode sets"
          + (f" ({'; '.join(notes)})" if notes else ""))
    print(" ".join(shlex.quote(w) for w in b["words"]))
    return 0


# ---- table -------------------------------------------------------------------------------
def cmd_table(args, campaign: Campaign) -> int:
    """Print the record's sources and speed tables (`_mt19_tables.markdown`).

    Returns:
        0; a missing record is a ValueError (one line, exit 2).
    """
    from _mt19_tables import markdown
    data = load_record(Path(args.results))
    if data is None:
        raise ValueError(f"no record at {Path(args.results) / record_lib.FILE}; "
                         "ingest a bundle first")
    print(markdown(data, campaign.tasks), end="")
    return 0


# ---- command line ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The command line: status, plan, next, ingest, restore, build, table (each parser in
    ``p.subcommands``)."""
    from wmx.runs.cli_common import ArgumentParser, HelpFormatter
    p = ArgumentParser(prog="mt19_campaign.py", description=__doc__.split("\n\n")[0],
                       formatter_class=HelpFormatter,
                       epilog="Workflow: plan; per device session: next (repeated while the "
                              "machine is warm: 100 s on the TPU, 30 s on the H200, while a "
                              "run is in progress), then ingest DIR here and commit "
                              "benchmarks/results/mt19_sources.json and its plot; on a new "
                              "data root, restore first.")
    sub = p.add_subparsers(dest="cmd", required=True,
                           metavar="{status,plan,next,ingest,restore,build,table}")
    st = sub.add_parser("status", help="per task: episode sets, runs, record, done, next",
                        formatter_class=HelpFormatter,
                        description="Per mt19 task: the episode sets in the store (hashes, "
                                    "producer run, seeds, env steps, episodes, mean of the last "
                                    "10 training returns), the campaign run in the home, the "
                                    "recorded source, done or not, and the next piece to run.")
    pl = sub.add_parser("plan", help="device minutes per task and sessions",
                        formatter_class=HelpFormatter,
                        description="The campaign's device time: per task the training minutes "
                                    "at --sps env steps/s per seed, the calls, the device "
                                    "minutes with their start-up and compile, the estimated "
                                    "bundle size, and the sessions it takes (--device's: "
                                    + ", ".join(f"{k.session_s / 60:g} min on the {k.label}"
                                                for k in KINDS.values()) + "; done "
                                    "tasks are left out; a task whose aim does not fit one "
                                    "session is planned at the largest multiple of 10,000 "
                                    "from its floor up that does, shown as AIM -> N).")
    nx = sub.add_parser("next", help="on the device: train the next piece, pack what finished",
                        formatter_class=HelpFormatter,
                        description="On the device machine: resume the campaign run in "
                                    "progress in --home or start the next task not done, train "
                                    "it until --budget-s (from the process's start) less "
                                    "--reserve-s, pack a finished run's bundle into --out, and "
                                    "write --out/mt19_call.json (what was done, what comes next).")
    ing = sub.add_parser("ingest", help="here: bundles -> store, record and plot",
                         formatter_class=HelpFormatter,
                         description="Verify bundles (<task>.tar.gz or its parts, or folders "
                                     "holding them), move their episode sets and runs into the "
                                     "store (all or nothing), and record them in "
                                     "mt19_sources.json and mt19_sources.png.")
    rs = sub.add_parser("restore", help="here: archived bundles -> store (the record unchanged)",
                        formatter_class=HelpFormatter,
                        description="Put the recorded episode sets that the data root lacks "
                                    "back from the bundles ingest kept in git history (the "
                                    "tasks of --tasks, default every recorded one), verified "
                                    "as ingest verifies them, all or nothing; the record is "
                                    "not changed. A task with no archive here is named with "
                                    "next --regenerate.")
    bd = sub.add_parser("build", help="the dataset build command of the recorded sets",
                        formatter_class=HelpFormatter,
                        description="Print the beam command that builds the dataset from "
                                    "exactly the recorded episode sets (--sources per set; "
                                    "--tasks when not all 19 are recorded): a data root may "
                                    "hold other sets of the same tasks, which a build without "
                                    "--sources would pool too.")
    tb = sub.add_parser("table", help="the record's sources and speed tables, as markdown",
                        formatter_class=HelpFormatter,
                        description="Print the record's two tables for docs/validation.md: "
                                    "per recorded task the final evaluation per seed, their "
                                    "mean, TD-MPC2's published point and the episode sets; "
                                    "and the speed on the chip from every call's timing.")
    p.subcommands = {"status": st, "plan": pl, "next": nx, "ingest": ing, "restore": rs,
                     "build": bd, "table": tb}
    for q in (st, pl, nx, ing, rs, bd, tb):
        add_campaign_args(q)
    for q in (st, pl, ing, rs, bd):
        q.add_argument("--home", default=None, help="data root (default $WMX_HOME or ~/.wmx)")
    for q in (st, pl, nx):
        q.add_argument("--device", choices=sorted(KINDS),
                       default=None if q is nx else DEFAULT_DEVICE,
                       help="the device machine's kind: its wheels in the device command "
                            "(status), its session's device time (the --session-s "
                            "default: " + ", ".join(f"{k.name} {k.session_s:g} s"
                                                    for k in KINDS.values()) + ")"
                            + ("; default: this machine's, by JAX's backend (the TPU's on "
                               "the CPU); on an accelerator, only its own" if q is nx
                               else f"; default {DEFAULT_DEVICE}"))
    nx.add_argument("--home", required=True, help="data root of the runs on the device "
                    "machine (a folder in its /tmp: kept while the machine is warm)")
    nx.add_argument("--out", required=True, help="folder whose files come back ($OUT)")
    nx.add_argument("--budget-s", type=float, required=True,
                    help="seconds this call may take from its start (--call-start, else "
                         f"this process's start; at most {MAX_BUDGET_S})")
    nx.add_argument("--call-start", type=float, default=None, metavar="UNIX_TIME",
                    help="when the device command started ($(date +%%s) before setup.sh): "
                         "--budget-s counts from it (default: from this process's start)")
    nx.add_argument("--task", default=None, help="train this task (default: the run in "
                    "progress, else the next task not done)")
    nx.add_argument("--device-left-s", type=float, default=None,
                    help="device time the session has left (the device tool's budget_left_s): "
                         "a new run starts only at a size `plan`'s model says fits: its aim, "
                         "else the largest multiple of 10,000 down to its floor (a fixed "
                         "--target or --env-steps: that or nothing)")
    nx.add_argument("--regenerate", default=None, metavar="T1,T2,...",
                    help="train these recorded tasks again, first, each at its recorded env "
                         "steps with the recorded run's settings, until the home holds a "
                         "finished run of each: a data root that lost their episode sets "
                         "(status: 'sets missing') needs them for the dataset build; ingest "
                         "compares the new sets' content hashes with the recorded ones")
    nx.add_argument("--progress", action="store_true", help="the trainer's progress bar")
    ing.add_argument("dirs", nargs="*", metavar="DIR",
                     help="folders (or files) holding the bundles a device call brought back "
                          "(none: write the record's plot again, and the record when absent)")
    ing.add_argument("--no-archive", action="store_true",
                     help="do not keep the bundles in git history (default: kept, through two "
                          "commits on the current branch, when the results folder is in a git "
                          "work tree; the record then names them, for restore)")
    for q in (pl, nx):
        q.add_argument("--reserve-s", type=float, default=45.0,
                       help="seconds kept after a budget stop for the chunk in flight, an "
                            "evaluation due, the final evaluation and export, and packing")
        q.add_argument("--min-start-s", type=float, default=150.0,
                       help="start or resume a run only with at least this many seconds "
                            "left before the stop (its compile included); 0: always (a run "
                            "past its stop time trains one chunk, and a new run starts "
                            "however little time is left unless --device-left-s says it "
                            "does not fit)")
        q.add_argument("--sps", type=float, default=None,
                       help="env steps per second per seed, evaluations included, of every "
                            "task (default: per domain, the speed of its newest recorded "
                            "run on the --device kind's chip, else on any chip, else "
                            "_mt19_plan.SPS_BY_DOMAIN, else the speed its "
                            "physics cost predicts (benchmarks/mt19_physics.py), else "
                            f"{SPS_DEFAULT:g}; the model of plan and of next's "
                            "--device-left-s)")
        q.add_argument("--compile-s", type=float, default=COMPILE_S,
                       help="seconds of compilation in a run's first call")
        q.add_argument("--cached-compile-s", type=float, default=CACHED_COMPILE_S,
                       help="seconds of compilation in a run's later calls (the warm "
                            "machine's persistent compilation cache)")
        q.add_argument("--startup-s", type=float, default=STARTUP_S,
                       help="seconds from a call's start to its compiling (imports, the "
                            "run's env, agent and checkpoint)")
        q.add_argument("--finish-s", type=float, default=30.0,
                       help="seconds a run's end takes: final evaluation, export, packing")
        q.add_argument("--gap-s", type=float, default=20.0,
                       help="device seconds between two calls (the machine is held)")
        q.add_argument("--session-s", type=float, default=None,
                       help="device seconds of a session (default: the --device kind's)")
        q.add_argument("--machine-start-s", type=float, default=120.0,
                       help="device seconds the machine's start takes in a session")
    pl.add_argument("--budget-s", type=float, default=540.0, help="seconds of one call")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand.

    Args:
        argv: the arguments (None: the command line; ``next``'s budget then counts from
            the process's start, else from this call's).

    Returns:
        The exit status: 0; 2 after one line on stderr for bad input (nothing written) or
        an OS error (a full disk, a permission: ingest or restore run again completes what
        it stopped); 143 when a signal stopped ``next``'s run.
    """
    from_cli = argv is None
    if from_cli and sys.argv[1:2] == ["next"]:
        from wmx.runs.heap import restart_with_huge_pages
        restart_with_huge_pages()       # as the trainers' command lines (WMX_HUGE_PAGES=0: not)
    t0 = _T0 if from_cli else time.monotonic()
    argv = list(sys.argv[1:] if from_cli else argv)
    p = build_parser()
    args = p.parse_args(argv)
    from wmx.runs.cli_common import given_flags
    args.given = given_flags(p.subcommands[args.cmd], argv[argv.index(args.cmd) + 1:])
    try:
        campaign = campaign_of(args)
        if args.cmd == "status":
            return cmd_status(args, campaign)
        if args.cmd == "plan":
            return cmd_plan(args, campaign)
        if args.cmd == "next":
            from wmx.runs.cli_common import configure_logging
            configure_logging()
            if args.call_start is not None:
                ago = time.time() - args.call_start
                if not 0 <= ago < MAX_BUDGET_S:
                    raise ValueError(f"--call-start {args.call_start:.0f} is {ago:.0f} s ago; "
                                     "give the command's start, $(date +%s) at its beginning")
                t0 = time.monotonic() - ago
            return cmd_next(args, campaign, argv, t0)
        if args.cmd == "restore":
            return cmd_restore(args, campaign)
        if args.cmd == "table":
            return cmd_table(args, campaign)
        if args.cmd == "build":
            return cmd_build(args, campaign)
        return cmd_ingest(args, campaign)
    except (ValueError, OSError) as e:      # bad input; a full disk, a permission
        print(f"mt19_campaign.py {args.cmd}: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
