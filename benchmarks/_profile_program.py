"""`profile_step`'s program: the benchmarked program of the command line, built, compiled
and warmed up by the speed benchmarks' own code (`dreamerv3_speed`, `tdmpc2_speed`,
`_online`), with its FLOPs, optimized HLO and, for the online chunk, the record's fields.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Program:
    """One compiled program: ``call()`` runs it once and blocks until its results are
    ready; ``gflop``: its matmul FLOPs per call / 1e9 (None: not counted, see
    ``notes``); ``hlo``: its optimized HLO text (None if the backend gives none);
    ``compile_s``: compilation (and, for TD-MPC2 and the online chunk, the first call's)
    seconds; ``facts``: fields the record adds (`ONLINE_FIELDS` for ``online``);
    ``notes``: lines for the record's notes."""
    call: Callable[[], None]
    gflop: float | None
    hlo: str | None
    compile_s: float
    facts: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


ONLINE_FIELDS = ("task", "preset", "episode_length", "n_envs", "ticks_per_call",
                 "env_steps_per_call", "updates_per_call", "warmup_chunks")
"""The record's fields of the online chunk (None for the other programs): the run's task,
preset, T (agent steps) and envs per seed; per call its ticks, its simulator steps (all
envs and seeds), its training steps (the median over the timed and traced calls, each
step updating every seed); the benchmark's warm-up chunks before the profile's own
``--warmup`` calls."""


def build_program(args: argparse.Namespace) -> Program:
    """The benchmarked program of ``args``, compiled and warmed up (``args.warmup`` calls;
    for ``online`` after the benchmark's own warm-up chunks)."""
    if args.program == "online":
        prog = build_online(args)
        warmup = args.warmup
    elif args.agent == "dreamerv3":
        import dreamerv3_speed as dv
        from wmx.agents.dreamerv3 import agent as dv3
        cfg, batch, obs, first = dv.wmx_inputs(args.size, compute_dtype=args.compute_dtype,
                                               scan_weight_grads=args.scan_weight_grads)
        args.scan_weight_grads = cfg.scan_weight_grads          # resolved for the record
        out = dv.wmx_programs(args.seeds, cfg, batch, obs, first, 0,
                              dv3.compiler_options(cfg), kinds=(args.program,))
        (name,) = out["items"]
        prog = Program(out["items"][name], out["gflop"][name],
                       _hlo_text(out["compiled"][name]), out["compile_s"][name])
        warmup = args.warmup
    else:
        import tdmpc2_speed as ts
        make = ts.wmx_update if args.program == "update" else ts.wmx_plan
        call, flops = make(args.size, seeds=args.seeds)
        t = time.perf_counter()
        call()                                   # compiles
        compile_s = time.perf_counter() - t
        prog = Program(call, flops / 1e9, _hlo_text(call.lower().compile()), compile_s)
        warmup = args.warmup - 1
    for _ in range(warmup):
        prog.call()
    return prog


def build_online(args: argparse.Namespace) -> Program:
    """The online chunk of ``args`` (``--program online``), built and warmed up by the speed
    benchmark's code: TD-MPC2's `tdmpc2_speed.online_program` (one call: one round of
    T + 1 ticks, T = ``--episode-length`` or 100, ``seed_steps`` T, one env per seed),
    DreamerV3's `dreamerv3_speed.online_program` (one call: `dreamerv3_speed.ONLINE_TICKS`
    ticks of the preset's envs per seed, computing in ``--compute-dtype``). Each call runs
    the next chunk on the carries the last one left. The run is sized for the calls the
    profile makes. ``gflop`` is None: the chunk's updates run in a loop whose trip count
    the schedule sets per tick, which the jaxpr count (a while loop's body once) cannot
    multiply."""
    chunks = args.warmup + 2 * args.calls
    if args.agent == "tdmpc2":
        import tdmpc2_speed as ts
        T = args.episode_length or ts.ONLINE_EPISODE_LENGTH
        run = ts.online_program(args.seeds, args.task, args.preset, chunks, episode_length=T)
    else:
        import dreamerv3_speed as dv
        from wmx.agents.dreamerv3.config import PRESETS
        run = dv.online_program(args.task, args.preset,
                                n_envs=PRESETS[args.preset].get("n_envs", dv.N_ENVS),
                                n_seeds=args.seeds, compute_dtype=args.compute_dtype,
                                scan_weight_grads=args.scan_weight_grads,
                                episode_length=args.episode_length, chunks=chunks)
        args.scan_weight_grads = run.rc.agent_config.scan_weight_grads   # resolved
    first = run.next_tick + args.warmup * run.ticks        # the first timed call's tick
    updates = [sum(int(run.schedule.n_updates(t)) for t in range(t0, t0 + run.ticks))
               for t0 in range(first, first + 2 * args.calls * run.ticks, run.ticks)]
    facts = {"task": args.task, "preset": args.preset, "episode_length": run.rc.task_spec.T,
             "n_envs": run.rc.n_envs, "ticks_per_call": run.ticks,
             "env_steps_per_call": run.env_steps_per_call,
             "updates_per_call": statistics.median(updates),
             "warmup_chunks": run.warmup_chunks}
    note = ("gflop: not counted for the online chunk (its updates run in a loop of a "
            "per-tick trip count; the jaxpr count takes a loop body once); the train/update "
            "and policy/plan profiles give the rates")
    return Program(run, None, _hlo_text(run.lower().compile()), run.compile_s, facts, [note])


def _hlo_text(compiled) -> str | None:
    try:
        return compiled.as_text()
    except Exception:  # noqa: BLE001 - a backend without the text
        return None
