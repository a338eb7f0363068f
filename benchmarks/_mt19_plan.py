"""The mt19 campaign's device-time model (`mt19_campaign.py plan`, and `next --device-left-s`).

A simulated timeline of device calls within sessions: each call starts up, compiles the
run it trains, trains until its budget less a reserve, and the next call follows after a
gap; a run never spans sessions (its replay and checkpoints stay on the machine), so a
task whose aim does not fit one session is planned at a fitted size (`simulate`). Also
the estimated size of a run's bundle.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, NamedTuple

import _mt19_bundle as bundle_lib
import mt19_physics as physics_lib
from _device_kinds import DEFAULT as DEFAULT_DEVICE, KINDS
from _mt19_tasks import FIT_STEP, Campaign, archived_tasks, load_record, read_state

SPS_BY_DOMAIN = {"reacher": 302.0, "walker": 170.0, "cheetah": 305.0}
"""Env steps per second per seed of TD-MPC2 --preset paper, 2 seeds vmapped, on a TPU v5e
after the seed phase, evaluations included (one of 10 episodes every 10,000 env steps).
reacher: the campaign's reacher-hard run (wmx 3db42a7): 10,000 env steps per 33.1 s of the
run's clock, 24.8 s training (403.2 per s) and 8.3 s evaluating. walker: the campaign's
walker-walk run (wmx edc129d): 46.8 s training (213.7 per s) and 11.8 s evaluating.
cheetah: the campaign's cheetah-run run (wmx 3236489): 24.2 s training (414.1 per s) and
8.8 s evaluating. `mt19_campaign.py table` prints every recorded run's speed."""
SPS_DEFAULT = 160.0
"""A domain neither measured nor priced from its physics (`prior_sps`): about the slowest
measured."""
PRIOR_MARGIN = 0.85
"""`prior_sps` prices a domain at this share of the speed its physics cost predicts: the
fit's three domains leave it within 4% of their measured speeds, and a learned policy
can make more contacts than the random actions the cost was measured with; a run priced
too fast may not finish in its session and is lost, one priced too slow only waits."""
COMPILE_S = 120.0
"""Seconds of a run's first call spent compiling: the time its first training row takes
beyond a round (the training chunk and the seed phase's program), 118 s on walker-walk
(wmx edc129d) and 106.5 s on reacher-hard (wmx 3db42a7). The evaluation's program
compiles meanwhile in the background (`wmx.compile_ahead`): reacher-hard's first
evaluation took 8.3 s, as every later one."""
CACHED_COMPILE_S = 60.0
"""Seconds of a run's later calls spent tracing and loading its programs from the
persistent compilation cache on the warm machine: the first row's time beyond a round in
the resumed call, 57 s on walker-walk (4 cache hits, 25 s loading) and 62.3 s on
reacher-hard (4 hits, 17 s loading; ``timing.compile`` of mt19_call.json)."""
STARTUP_S = 40.0
"""Seconds from a call's start to its compiling: the wheels' check and imports (11 s) and
the run's set-up outside its clock (env, agent, restoring the checkpoint and replay; about
30 s, what the first run's calls spent outside its clock less ~1.8 s per checkpoint)."""


def _positive(x: Any) -> bool:
    """Whether ``x`` is a finite number above 0 (not a bool)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x) and x > 0
    except OverflowError:               # an int beyond any float
        return False


def _eval_every(entry: dict[str, Any]) -> int:
    """An entry's ``eval_every``, else the last ``--eval-every`` of its run's command (as
    argparse reads it), else 10,000, the campaign's; a value that is not a positive whole
    number counts as absent."""
    if _positive(entry.get("eval_every")) and int(entry["eval_every"]) == entry["eval_every"]:
        return int(entry["eval_every"])
    found = re.findall(r"--eval-every(?:=|\s+)(\d+)(?![\w.])", str(entry.get("command", "")))
    return int(found[-1]) if found and int(found[-1]) > 0 else 10_000


def run_sps(entry: dict[str, Any]) -> float | None:
    """A run's env steps per second per seed, evaluations included, from its calls'
    ``timing``: a round (``env_steps_per_s_per_seed`` x ``median_round_s`` env steps per
    seed, 1,000 when not recorded) at the median of the calls' median rounds, plus the
    mean of every evaluation it timed (each call's first included: it may compile, and
    `COMPILE_S` counts only the first training row) once per ``--eval-every``.

    Args:
        entry: a record entry, or any {"calls": [{"timing"}], "eval_every" or "command"}.

    Returns:
        The speed, or None when no call timed a round and an evaluation (a call of another
        shape, or with a value that is not a finite positive number, is left out whole,
        never trusted).
    """
    calls = entry.get("calls") if isinstance(entry, dict) else None
    timed = [c["timing"] for c in (calls if isinstance(calls, list) else [])
             if isinstance(c, dict) and isinstance(c.get("timing"), dict)]
    rounds, evals = [], []
    for t in timed:
        med, ev = t.get("median_round_s"), t.get("evals_s")
        if not (_positive(med) and isinstance(ev, list) and all(map(_positive, ev))):
            continue                    # a call with any odd value is not trusted at all
        sps = t.get("env_steps_per_s_per_seed")
        rounds.append((med, sps * med if _positive(sps) else 1000.0))
        evals += ev
    if not rounds or not evals:         # an evaluation's share unknown: not measured
        return None
    med, per_round = sorted(rounds)[(len(rounds) - 1) // 2]
    per_step = med / per_round + statistics.fmean(evals) / _eval_every(entry)
    return round(1.0 / per_step, 1)


def measured_sps(record: dict[str, Any] | None, seeds: int | None = None,
                 backends: tuple[str, ...] | None = None) -> dict[str, float]:
    """Env steps per second per seed, evaluations included, per domain: `run_sps` of the
    domain's newest recorded run (its ``ingested`` time; the code a domain's older runs
    ran may have been slower or faster), among runs of ``seeds`` seeds; with ``backends``,
    the newest run on such a chip (its ``chip``, ``"<platform>: <kind>"``), else the newest
    on any.

    Args:
        record: the campaign's record (None: none), or any {"tasks": {name: entry}} whose
            names start with the task's domain.
        seeds: count only runs of this many seeds (None: any).
        backends: the platforms of the chip planned for (`_device_kinds.DeviceKind.backends`;
            None: any chip alike).

    Returns:
        {domain: env steps/s per seed}; a domain with no measured run is absent.
    """
    tasks = (record or {}).get("tasks") if isinstance(record, dict) else None
    newest: dict[str, tuple[tuple[bool, str], float]] = {}
    for task, e in (tasks if isinstance(tasks, dict) else {}).items():
        if not isinstance(e, dict) or (seeds is not None and isinstance(e.get("seeds"), list)
                                       and len(e["seeds"]) != seeds):
            continue
        v = run_sps(e)
        platform = str(e.get("chip") or "").split(":")[0].strip()
        rank = (backends is not None and platform in backends, str(e.get("ingested") or ""))
        dom = str(task).split("-")[0]
        if v is not None and (dom not in newest or rank >= newest[dom][0]):
            newest[dom] = (rank, v)
    return {d: v for d, (_, v) in newest.items()}


class Physics(NamedTuple):
    """The physics costs of ``benchmarks/mt19_physics.py``'s file (`load_physics`):
    ``costs`` {task: ms per agent step of the lanes together}, ``steps`` {task: MJX steps
    per agent step}."""
    costs: dict[str, float]
    steps: dict[str, int]


def load_physics(results: Path) -> Physics:
    """Each task's physics cost, from ``results/mt19_physics.FILE``, read once.

    Returns:
        `Physics`; both empty when the file is absent, is not JSON or not a
        ``mt19_physics.SCHEMA`` file; a cost that is not a finite positive number, or a
        step count that is not a positive whole number, is left out.
    """
    try:
        data = json.loads((Path(results) / physics_lib.FILE).read_text())
    except (OSError, ValueError):
        return Physics({}, {})
    tasks = data.get("tasks") if isinstance(data, dict) and data.get(
        "schema") == physics_lib.SCHEMA else None
    entries = {str(t): e for t, e in (tasks if isinstance(tasks, dict) else {}).items()
               if isinstance(e, dict)}
    return Physics(
        {t: float(e["ms_per_agent_step"]) for t, e in entries.items()
         if _positive(e.get("ms_per_agent_step"))},
        {t: int(e["mjx_steps_per_agent_step"]) for t, e in entries.items()
         if _positive(e.get("mjx_steps_per_agent_step"))
         and int(e["mjx_steps_per_agent_step"]) == e["mjx_steps_per_agent_step"]})


def prior_sps(known: dict[str, float], physics: dict[str, float],
              mjx_steps: dict[str, int] | None = None) -> dict[str, float]:
    """Speeds for the domains not measured yet, from their physics cost.

    A run's device seconds per env step are taken as a + b x (its domain's physics cost),
    the agent's part and the physics' (on the chip the env step is a chain of small ops,
    latency-bound like a 2-lane step on a CPU), fitted by least squares over the domains
    of ``known`` that have a cost; a domain's cost is its slowest task's. Each other
    domain with a cost is priced at `PRIOR_MARGIN` of the fit's speed, and never beyond
    what the chip was seen to do: at most the fastest known domain's speed, and at most
    the slowest's when it takes more MJX steps per agent step than every known domain
    (each MJX step has a floor of dependent ops on the chip that a cheap step's CPU time
    does not show: fish's 40 against walker's 20).

    Args:
        known: {domain: env steps/s per seed, evaluations included} (`measured_sps`, the
            `SPS_BY_DOMAIN` fallback under it).
        physics: {task: ms per agent step} (`Physics.costs`).
        mjx_steps: {task: MJX steps per agent step} (`Physics.steps`; None: none).

    Returns:
        {domain: env steps/s per seed} for the domains with a cost that ``known`` lacks
        (one priced below 1 is left out); {} when fewer than two known domains with
        distinct costs have one, or the fit does not give both parts positive.
    """
    cost: dict[str, float] = {}
    for task, ms in physics.items():
        dom = task.split("-")[0]
        cost[dom] = max(ms, cost.get(dom, 0.0))
    steps: dict[str, int] = {}
    for task, n in (mjx_steps or {}).items():
        dom = task.split("-")[0]
        steps[dom] = max(n, steps.get(dom, 0))
    pts = [(cost[d], 1.0 / v) for d, v in known.items() if d in cost and _positive(v)]
    if len({x for x, _ in pts}) < 2:
        return {}
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    b = (sum((x - mx) * (y - my) for x, y in pts)
         / sum((x - mx) ** 2 for x, _ in pts))
    a = my - b * mx
    if not (a > 0 and b > 0):
        return {}
    most_steps = max((steps[d] for d in known if d in steps), default=None)
    fastest, slowest = max(known.values()), min(known.values())
    out = {}
    for d, c in sorted(cost.items()):
        if d in known:
            continue
        cap = slowest if most_steps is not None and steps.get(d, 0) > most_steps else fastest
        price = round(min(cap, PRIOR_MARGIN / (a + b * c)), 1)
        if price >= 1.0:                # a cost so large it rounds to nothing: no price
            out[d] = price
    return out


def sps_for(task: str, override: float | None,
            measured: dict[str, float] | None = None,
            prior: dict[str, float] | None = None) -> float:
    """Env steps per second per seed of a task's run in the plan's model.

    Args:
        task: an mt19 task (its domain is the part before the first dash).
        override: ``--sps`` (None: measured).
        measured: `measured_sps` of the record (None: none).
        prior: `prior_sps` (None: none).

    Returns:
        ``override``, else the record's measured speed of the task's domain, else
        `SPS_BY_DOMAIN`'s, else the speed its physics cost predicts, else `SPS_DEFAULT`.
    """
    if override is not None:
        return override
    dom = task.split("-")[0]
    if measured and dom in measured:
        return measured[dom]
    if dom in SPS_BY_DOMAIN:
        return SPS_BY_DOMAIN[dom]
    return (prior or {}).get(dom, SPS_DEFAULT)


def model_speeds(measured: dict[str, float], physics: Physics) -> dict[str, float]:
    """`prior_sps` for the plan's model: calibrated on ``measured`` over `SPS_BY_DOMAIN`,
    with ``physics`` (`load_physics`)."""
    return prior_sps({**SPS_BY_DOMAIN, **measured}, physics.costs, physics.steps)


GZIP_RATIO = 0.91
"""Bundle bytes per byte of `bundle_mib`'s row count: measured on 100 real walker-walk
episodes (obs 24, action 6; T = 500, action repeat 2) of a train_online run stored as one
episode set: 59.1 bytes per env step per seed in the set (ArrayRecord), 58.1 in its
tar.gz (gzip -6 gains 1.7%), against 64.0 counted."""


@dataclasses.dataclass
class Clock:
    """Where a simulated campaign stands: seconds into the open device call (None: no call
    open) and device seconds used in the session (machine start included)."""
    call_t: float | None
    session_used: float


def session_seconds(args) -> float:
    """A session's device seconds in the model: ``--session-s``, else the ``--device``
    kind's (`_device_kinds`; the TPU's when no kind is given)."""
    if getattr(args, "session_s", None) is not None:
        return float(args.session_s)
    return KINDS[getattr(args, "device", None) or DEFAULT_DEVICE].session_s


def run_cost(train_s: float, clock: Clock, args) -> tuple[float, int, Clock]:
    """Device seconds and calls a run of ``train_s`` training seconds takes from ``clock``.

    A call is opened with ``startup_s``; each call a run trains in compiles first
    (``compile_s`` in the run's first call, ``cached_compile_s`` in its later ones: the
    compilation cache of the warm machine); a call trains until ``budget_s`` less
    ``reserve_s``, spends ``reserve_s`` on the stop and ``gap_s`` until the next call;
    a run's last call spends ``finish_s`` (final evaluation, export, packing) and stays
    open for the next run when ``min_start_s`` of training time is left.

    Args:
        train_s: the run's training seconds (env steps per seed / ``sps``).
        clock: where the timeline stands (not changed).
        args: the model's flags (``budget_s``, ``reserve_s``, ``min_start_s``,
            ``startup_s``, ``compile_s``, ``cached_compile_s``, ``finish_s``, ``gap_s``).

    Returns:
        (device seconds, calls the run trains in, the clock after it); the seconds are
        infinite when a call leaves no time to train (its start-up and compilation take
        the budget less the reserve).
    """
    dev, calls, c, first = 0.0, 0, dataclasses.replace(clock), True
    while True:
        fresh = False
        if c.call_t is None or args.budget_s - args.reserve_s - c.call_t < args.min_start_s:
            if c.call_t is not None:
                dev += args.gap_s
            c.call_t = args.startup_s
            dev += args.startup_s
            fresh = True
        calls += 1
        comp = args.compile_s if first else args.cached_compile_s
        first = False
        c.call_t += comp
        dev += comp
        avail = max(0.0, args.budget_s - args.reserve_s - c.call_t)
        if avail <= 0 and fresh and train_s > 0:
            return math.inf, calls, dataclasses.replace(c, session_used=math.inf)
        if train_s <= avail:
            c.call_t += train_s + args.finish_s
            dev += train_s + args.finish_s
            break
        train_s -= avail
        dev += avail + args.reserve_s + args.gap_s      # the stop, then the wait for the next
        c.call_t = None
    c.session_used += dev
    return dev, calls, c


def task_cost(task: str, steps: int, clock: Clock, args) -> tuple[float, int, Clock]:
    """`run_cost` of a task's run of ``steps`` env steps per seed at its speed
    (`sps_for`: ``args.sps``, else ``args.measured_sps``, the record's, else
    ``args.prior_sps``, from the physics costs)."""
    return run_cost(steps / sps_of(task, args), clock, args)


def sps_of(task: str, args) -> float:
    """`sps_for` with the flags' ``sps``, ``measured_sps`` and ``prior_sps`` (absent:
    none)."""
    return sps_for(task, args.sps, getattr(args, "measured_sps", None),
                   getattr(args, "prior_sps", None))


def fresh_fit(task: str, sizes: list[int], args) -> tuple[int, float, int, Clock, bool]:
    """A task's run in a fresh session: the largest of ``sizes`` (env steps per seed,
    largest first) whose run fits `session_seconds` from ``args.machine_start_s``.

    Returns:
        (env steps, device s, calls, the clock after it, fits); when no size fits, the
        last (the floor) with fits False.
    """
    for steps in sizes:
        dev, calls, after = task_cost(task, steps, Clock(None, args.machine_start_s), args)
        if after.session_used <= session_seconds(args):
            return steps, dev, calls, after, True
    return steps, dev, calls, after, False


def simulate(targets: list[tuple[str, list[int]]], args) -> tuple[
        list[tuple[int, float, int, float, int, bool]], int]:
    """The campaign's timeline as ``next`` fills it: each run within one session (its
    replay stays on the machine); the session open takes the first task, in order, whose
    run at its fresh-session size fits the time it has left (a task that does not fit
    waits for a later session, as ``next`` leaves it), and a new session opens with the
    first task waiting when none fits.

    A task's size is the one a fresh session gives it (`fresh_fit`: its first size, the
    aim, else the largest of its other sizes that fits, `Campaign.sizes`: multiples of
    `_mt19_tasks.FIT_STEP` down to the floor); when none fits, its last size (the floor),
    marked as not fitting.

    Args:
        targets: [(task, env steps per seed its run may train to, largest first)] in
            order.
        args: the model's flags (`run_cost`'s, ``sps`` (None: `sps_for`'s table),
            ``session_s`` or ``device``: `session_seconds`; ``machine_start_s``).

    Returns:
        ([(env steps per seed planned, training s, calls, device s, session number, fits
        one session)] per task in ``targets``' order, [device s each session uses, machine
        start included] in session order: its length is the sessions' count).
    """
    rows: dict[int, tuple[int, float, int, float, int, bool]] = {}
    fresh = [fresh_fit(task, sizes, args) for task, sizes in targets]   # once per task
    waiting = list(range(len(targets)))
    clock, used = Clock(None, float("inf")), []
    while waiting:
        placed = None
        for i in waiting:
            steps = fresh[i][0]
            dev, calls, after = task_cost(targets[i][0], steps, clock, args)
            if after.session_used <= session_seconds(args):
                placed = (i, steps, dev, calls, after, True)
                break
        if placed is None:              # nothing fits the session open: a new one
            used.append(0.0)
            i = waiting[0]
            placed = (i, *fresh[i])
        i, steps, dev, calls, after, fits = placed
        rows[i] = (steps, steps / sps_of(targets[i][0], args), calls, dev, len(used), fits)
        clock = after
        used[-1] = after.session_used
        waiting.remove(i)
    return [rows[i] for i in range(len(targets))], used


def bundle_mib(task: str, target: int, seeds: int, ratio: float) -> float:
    """Estimate the size of a task run's bundle.

    Args:
        task: the task (its T, action repeat, obs and action dims).
        target: env steps per seed.
        seeds: seeds of the run.
        ratio: bundle bytes per counted byte (`GZIP_RATIO`).

    Returns:
        MiB: its episode sets counted as T+1 rows of float32 obs, action and reward and
        three bool flags per episode plus a ~0.4 KiB header, times ``ratio``.
    """
    from wmx.envs.registry import get_task
    spec = get_task(task)
    episodes = math.ceil(target / (spec.T * spec.action_repeat))
    per_ep = (spec.T + 1) * (4 * (spec.obs_dim + spec.action_dim + 1) + 3) + 400
    return seeds * episodes * per_ep * ratio / 2 ** 20


def campaign_timeline(args, campaign: Campaign, home: Path) -> tuple[
        list[str], list[tuple[str, list[int]]], dict[str, tuple], int]:
    """The plan's timeline of what is left: the regenerations (tasks done whose recorded
    sets ``home`` lacks, unarchived) first, then the tasks not done, as ``next`` fills the
    sessions (`simulate`).

    Args:
        args: the model's flags (`run_cost`'s, ``sps``, ``device``, ``session_s``,
            ``machine_start_s``, ``results``); ``measured_sps`` and ``prior_sps`` are set
            on it (the record's, on the ``device`` kind's chip first).
        campaign: the campaign.
        home: the data root.

    Returns:
        (the regenerations, [(task, sizes)] in the order simulated, {task: `simulate`'s
        row}, [device s each session uses] (`simulate`'s)).
    """
    record = load_record(Path(args.results))
    args.measured_sps = measured_sps(record, len(campaign.seeds), KINDS[args.device].backends)
    args.prior_sps = model_speeds(args.measured_sps, load_physics(Path(args.results)))
    states = {s.task: s for s in read_state(home, campaign, record,
                                            archived_tasks(Path(args.results), record))}
    regen = [t for t in campaign.tasks if states[t].needs_regeneration]
    todo = [(t, [states[t].recorded["env_steps"]]) for t in regen] + [
        (t, campaign.sizes(t)) for t in campaign.tasks if not states[t].done]
    timeline, used = simulate(todo, args)
    return regen, todo, dict(zip([t for t, _ in todo], timeline)), used


def first_fitting(todo: list[tuple[str, list[int]]], at: dict[str, tuple],
                  tasks: set[str] | None = None) -> str | None:
    """The task a fresh session's first call trains (`next` in a fresh session): the first
    of ``todo`` (of ``tasks`` when given) whose run fits one session; None when none does."""
    return next((t for t, _ in todo if (tasks is None or t in tasks) and at[t][5]), None)


def cmd_plan(args, campaign: Campaign) -> int:
    """Print the campaign's device time per task and the sessions it takes (tasks done
    are left out of the timeline, except those whose recorded episode sets the data root
    lacks and the repository has not archived: they come first, at their recorded env
    steps, marked "(regenerate)"; a task
    whose aim does not fit one session is planned at its fitted env steps, shown as
    "AIM -> N"); writes nothing.

    Args:
        args: the parsed flags (the model's, ``home``, ``results``).
        campaign: the campaign.

    Returns:
        0.
    """
    from wmx.cli.table import print_table
    from wmx.datasets.store import Store
    room = args.budget_s - args.reserve_s - args.startup_s - max(args.compile_s,
                                                                  args.cached_compile_s)
    if room <= 0:
        raise ValueError(f"--budget-s {args.budget_s:g} leaves no time to train after "
                         f"--reserve-s, --startup-s and --compile-s ({room:g} s); give a "
                         "longer budget")
    regen, todo, at, used = campaign_timeline(args, campaign, Store(args.home).home)
    sessions = len(used)
    speeds = {**SPS_BY_DOMAIN, **args.measured_sps, **args.prior_sps}
    rows, total, fitted, misfits = [], 0.0, 0, []
    for t in campaign.tasks:
        aim = campaign.aim(t)
        steps = at[t][0] if t in at else aim
        size = bundle_mib(t, steps, len(campaign.seeds), GZIP_RATIO)
        parts = math.ceil(size * 2 ** 20 / bundle_lib.PART_BYTES)
        mib = f"{size:.1f}" + (f" ({parts} parts)" if parts > 1 else "")
        if t not in at:
            rows.append((t, f"{aim:,}", "-", "-", "-", mib, "done"))
            continue
        steps, train, calls, dev, session, fits = at[t]
        total += dev
        fitted += steps < aim
        if not fits:
            misfits.append(t)
        rows.append((t + (" (regenerate)" if t in regen else ""),
                     f"{aim:,}" + (f" -> {steps:,}" if steps < aim else ""),
                     f"{train / 60:.1f}", calls, f"{dev / 60:.1f}", mib,
                     str(session) if fits else f"{session}: DOES NOT FIT ONE SESSION"))
    print(f"mt19 campaign plan: TD-MPC2 --preset {campaign.preset}, seeds "
          f"{' '.join(map(str, campaign.seeds))}, "
          + (f"{args.sps:g}" if args.sps is not None else "; ".join(
              f"{d} {v:g}" + (" (measured)" if d in args.measured_sps else
                              " (its physics)" if d in args.prior_sps else "")
              for d, v in speeds.items()) + f"; other {SPS_DEFAULT:g}")
          + " env steps/s per seed, evaluations included. Calls of "
          f"{args.budget_s:g} s: {args.startup_s:g} s start-up, {args.compile_s:g} s compile "
          f"({args.cached_compile_s:g} s in a run's later calls), {args.reserve_s:g} s reserve "
          f"at a stop, {args.finish_s:g} s to finish a run, {args.gap_s:g} s between calls. "
          f"Sessions of {session_seconds(args) / 60:g} device min ({KINDS[args.device].label}) "
          f"with {args.machine_start_s:g} s "
          "machine start; a run never spans sessions (its replay stays on the machine): "
          "a task whose aim does not fit one is planned at the largest multiple of "
          f"{FIT_STEP:,} from its floor up that fits (AIM -> N; a fixed --target or "
          "--env-steps is never fitted). DEVICE MIN counts a run's calls from its start to "
          "its end.")
    print_table(("TASK", "ENV STEPS/SEED", "TRAIN MIN", "CALLS", "DEVICE MIN", "BUNDLE MIB",
                 "SESSION"), rows)
    print(f"to do: {len(todo)} task(s), {fitted} fitted below their aim, {total / 60:.0f} "
          f"device minutes in {sessions} session(s)"
          + (f"; {len(regen)} of them done tasks whose recorded episode sets this data root "
             "lacks, trained again first (next --regenerate " + ",".join(regen) + ")"
             if regen else ""))
    if used:
        print("device minutes each session leaves for other runs: " + ", ".join(
            f"{n}: {max(session_seconds(args) - u, 0.0) / 60:.1f}"
            for n, u in enumerate(used, 1)))
    if misfits:
        print(f"{len(misfits)} of them do not fit one {session_seconds(args) / 60:g}-minute "
              f"session at these speeds, not even at their floor ({', '.join(misfits)}): "
              "next leaves each for a session with the time (a longer session, or a faster "
              "chip's measured speed)")
    return 0
