"""Where the time of one benchmarked step goes: a profile of K calls of one program, read
back with JAX's own profiler API, and what bounds it.

The programs are the speed benchmarks' own, built by their code: DreamerV3's training step
(``train``: one ``agent.update`` on a synthetic batch of 16 windows of 64 + 1 rows) and
policy step (``policy``: 16 envs), from `dreamerv3_speed.wmx_inputs` and
`dreamerv3_speed.wmx_programs`; TD-MPC2's update (``update``: batch 256) and planning
decision (``plan``), from `tdmpc2_speed.wmx_update` and `tdmpc2_speed.wmx_plan`. With
``--seeds N`` the program is vmapped over N seeds, as the trainers run seeds.

``online`` (both agents) is one chunk of wmx's jitted ``train_online`` loop after the seed
phase, built and warmed up by the online throughput benchmarks' code
(`tdmpc2_speed.online_program`, `dreamerv3_speed.online_program`, `_online.start_online`):
a real run at ``--task`` (default walker-walk) and ``--preset`` (default paper) with
``--seeds`` seeds vmapped in the chunk. TD-MPC2: one call is one round of T + 1 ticks
(planning, an env step and one update per tick; T = ``--episode-length``, default 100, and
T seed steps, as tdmpc2_speed.py's online runs); DreamerV3: one call is
`dreamerv3_speed.ONLINE_TICKS` (4) ticks of the preset's envs (16 at paper and cpu;
8 updates per tick at paper), after the first update, at the task's episode length unless
``--episode-length`` says, computing in ``--compute-dtype``. Each call runs the next chunk
on the carries the last one left (the chunk donates them; the run is sized for the calls
made). The preset sets the model: the record's ``size`` is the preset's, and ``--size``, if
given, must be that one (a preset with widths of its own, such as tiny, has none).
``--task``, ``--preset`` and ``--episode-length`` belong to ``online`` only. Per-call
figures are per chunk; the record adds ``task``, ``preset``, ``episode_length``,
``n_envs``, ``ticks_per_call``, ``env_steps_per_call`` (simulator steps, all envs and
seeds), ``updates_per_call`` and ``warmup_chunks`` (`ONLINE_FIELDS`; None for the other
programs), and ``gflop`` is None (the chunk's updates run in a loop whose trip count the
schedule sets per tick: the jaxpr count cannot multiply it), so are the TFLOP/s figures.

Method: build and compile the program, call it ``--warmup`` times, time ``--calls`` calls
(wall, untraced), then record ``--calls`` more under ``jax.profiler.trace`` (the Python
tracer off) and read the trace back with ``jax.profiler.ProfileData``: no TensorBoard or
xprof needed. The op events are taken from the device plane (``/device:TPU:0``,
``/device:GPU:0``; its "XLA Ops" line where it has one); a backend without a device plane
(the CPU) has its XLA ops as host events (XLA:CPU thunks on ``/host:CPU``) and the record
says so. Each op's self time (its time less that of ops nested in it, such as a while
loop's body) is summed by op name, and each op is put in one category
(`_profile_analysis.CATEGORIES`) from the compiled program's optimized HLO (a fusion
holding a dot or convolution is "matmul/convolution"), else from the trace's
``hlo_category`` stat, else from its name (each op row says which: ``how``).

Writes into ``--out`` (created; nothing else is written outside it):

- ``profile_<agent>_<program>_<platform>.json``: the configuration; ``wall_ms_median``
  (untraced calls) and ``traced_wall_ms_median``; ``busy_ms_per_call`` (the union of the
  op intervals per call: device busy time), ``busy_share_of_wall`` and, with a device
  plane, ``idle_share_of_wall``; ``trace`` (where the ops came from, the planes, the
  device's per-module times); ``categories`` (ms per call, share of the summed op self
  time, op count); ``classified_by`` (share of that time classified from the HLO, the
  trace stat, the name); ``components`` (the same for the parts of the program: the
  planner, the env step, the update's world model, Q ensemble, policy, optimizer...;
  each op in the first whose rule in `COMPONENTS` matches its JAX name stack, the
  ``op_name`` of its HLO metadata, else "other"; the ms split the busy time, so they sum
  to ``busy_ms_per_call``), ``component_rules`` (those rules) and
  ``components_named_share`` (share of op time with a name stack); ``top_ops``
  (``--top`` ops by time, with share, category, ``how``, component and ``op_name``;
  ``rest`` holds the others, so the shares sum to 1); ``gflop`` (the program's
  matmul FLOPs per call, 2·M·N·K per dot, `_machine.program_flops`), ``tflop_s`` (gflop /
  busy time) and ``matmul_tflop_s`` (gflop / time in matmul ops); ``peak`` (the chip's
  bfloat16 peak where the device kind is known, `PEAK_TFLOPS`, or ``--peak-tflops`` gives
  it; else null); and ``verdict``, one paragraph: where the time goes, by category and by
  component (for ``online`` per tick), and what bounds it (for ``online`` also the time
  per tick and the env steps/s of the untraced calls);
- ``profile_<agent>_<program>_<platform>.xplane.pb.gz``: the trace itself, gzipped (open
  it with xprof or TensorBoard's profile plugin after gunzip, or
  ``jax.profiler.ProfileData.from_serialized_xspace``); left out, with a note in the JSON,
  when larger than ``--max-file-mib``;
- ``profile_<agent>_<program>_<platform>.hlo.txt.gz``: the compiled program's optimized
  HLO, where the op names of ``top_ops`` are defined.

The analysis reads the trace and the HLO from memory, so every aggregate (categories,
components, top ops) is in the JSON even when the files are left out. The trace and the
HLO are written before the analysis; if the analysis fails, the JSON holds the
measurements and ``analysis_error``, and ``--reanalyse JSON`` redoes it later from those
files on any machine (no device needed). The raw trace folder is removed once read
(``--keep-trace`` keeps it, under ``--out``). Files are written atomically: a failed run
leaves no half-written file.

    python benchmarks/profile_step.py --out DIR                  # DreamerV3 1m train, CPU
    python benchmarks/profile_step.py --agent dreamerv3 --program train --size 12m \\
        --seeds 5 --compute-dtype bfloat16 --calls 5 --out DIR
    python benchmarks/profile_step.py --agent tdmpc2 --program update --size 5 \\
        --seeds 5 --calls 5 --out DIR
    python benchmarks/profile_step.py --agent tdmpc2 --program online --size 5 \\
        --seeds 5 --task walker-walk --preset paper --calls 3 --out DIR
    python benchmarks/profile_step.py --agent dreamerv3 --program online --size 12m \\
        --seeds 5 --task walker-walk --preset paper --compute-dtype bfloat16 --calls 3 \\
        --out DIR
    python benchmarks/profile_step.py --reanalyse DIR/profile_tdmpc2_update_tpu.json

The defaults (DreamerV3 1m training step, 1 seed, 5 calls) run in about a minute on a
2-core CPU, most of it compilation; an online chunk compiles for minutes there even at the
tiny preset (``--task probe-action --preset tiny --episode-length 4`` is the smallest).
docs/performance.md ("On accelerators") has the TPU commands.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]   # _machine and the speed benchmarks; this wmx

from _profile_analysis import analyse  # noqa: E402

PROGRAMS = {"dreamerv3": ("train", "policy", "online"), "tdmpc2": ("update", "plan", "online")}
ONLINE_DEFAULTS = {"task": "walker-walk", "preset": "paper"}
"""``--task`` and ``--preset`` of ``--program online`` when not given."""
PEAK_TFLOPS = {"TPU v5 lite": 197.0}
"""Dense bfloat16 peak (TFLOP/s) by ``device_kind``: TPU v5e (the figure docs/performance.md
judges the TPU goals by). Other kinds: ``--peak-tflops``."""


def _scope(*names: str) -> str:
    """A regex finding any of the name scopes ``names`` as a whole element of a name stack:
    ``.../acting/...``, or wrapped by a transform (``jvp(world_model)``, ``vmap(mppi)``)."""
    return r"(?:^|[/(])(?:" + "|".join(names) + r")(?:[/)]|$)"


def _within(outer: str, group: str, rules: tuple) -> tuple:
    """``rules`` under the name scope ``outer``, their labels prefixed ``group: ``."""
    return tuple((f"{group}: {label}", _scope(outer) + ".*" + rx) for label, rx in rules)


_TDMPC2_PLAN = (("noise draws", _scope("noise")),
                ("encoder + policy prior", _scope("pi_prior")),
                ("candidate values", _scope("candidate_values")),
                ("MPPI update", _scope("mppi")))
_TDMPC2_UPDATE = (("batch sampling, noise", _scope("sample_batch", "noise")),
                  ("Q ensemble", _scope("q_ensemble")),
                  ("TD target", _scope("td_target")),
                  ("world model", _scope("world_model")),
                  ("policy", _scope("pi_loss")),
                  ("optimizer", _scope("optimizer_step")))
_DREAMERV3_TRAIN = (("batch sampling, noise", _scope("sample_batch", "noise")),
                    ("world model", _scope("world_model")),
                    ("imagination", _scope("imagination")),
                    ("actor", _scope("actor")),
                    ("critic", _scope("critic", "replay_critic")),
                    ("returns", _scope("actor_critic")),
                    ("offline terms", _scope("offline")),
                    ("optimizer", _scope("optimizer_step")),
                    ("metrics", _scope("metrics")))
COMPONENTS = {
    ("tdmpc2", "update"): _TDMPC2_UPDATE,
    ("tdmpc2", "plan"): _TDMPC2_PLAN,
    ("tdmpc2", "online"): (*_within("acting", "plan", _TDMPC2_PLAN),
                           ("plan: rest", _scope("acting")),
                           ("env step (MJX)", _scope("env_step")),
                           ("replay write", _scope("replay_write")),
                           *_within("train_updates", "update", _TDMPC2_UPDATE),
                           ("update: rest", _scope("train_updates"))),
    ("dreamerv3", "train"): _DREAMERV3_TRAIN,
    ("dreamerv3", "policy"): (("noise draws", _scope("noise")), ("encoder", _scope("encoder")),
                              ("RSSM step", _scope("rssm")), ("actor", _scope("actor"))),
    ("dreamerv3", "online"): (("policy", _scope("acting")),
                              ("env step (MJX)", _scope("env_step")),
                              ("replay write", _scope("replay_write")),
                              *_within("train_updates", "update", _DREAMERV3_TRAIN),
                              ("update: rest", _scope("train_updates")))}
"""The components of each (agent, program): ``(label, regex)`` rules, in order; an op
belongs to the first whose regex is found (``re.search``) in its JAX name stack (the
``op_name`` of its HLO metadata, `_profile_analysis.op_name`), else to "other".

The regexes find the name scopes (`jax.named_scope`) wmx's code runs its parts under: the
online tick's "acting", "env_step", "replay_write" and "train_updates"
(`wmx.train_online.program`); TD-MPC2's planner ("noise", "pi_prior",
"candidate_values", "mppi") and update ("noise", "td_target", "world_model", "pi_loss",
"optimizer_step", and "q_ensemble" around each pass of the Q ensemble inside the losses,
which so count as "Q ensemble"); DreamerV3's training step ("noise", "world_model",
"imagination", "actor_critic" with "actor" and "critic" inside, "replay_critic",
"offline", "optimizer_step", "metrics"; its "returns" are the rest of "actor_critic":
the reward and continue heads on the imagined states, the λ-returns, their normaliser)
and policy ("noise", "encoder", "rssm", "actor"); "sample_batch" in both agents'
replay. A label "group: part" is a part of group (the verdict sums the group). A
scope's name must be no Python function's: JAX lowers some functions (the PRNG's) once
per program, and the ops of that body keep the name of the Python frame of its first
trace in their name stacks wherever it is inlined, after the call site's own (correct)
scopes."""


def component_rules(agent: str, program: str) -> tuple:
    """The `COMPONENTS` rules of ``agent``'s ``program`` (none: every op "other")."""
    return COMPONENTS.get((agent, program), ())


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``profile_step.py: error: ...`` and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


# ---- arguments ----------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: a bad value exits 2 with a one-line message."""
    p = _Parser(prog="profile_step.py", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Writes profile_<agent>_<program>_<platform>.{json,xplane.pb.gz,"
                       "hlo.txt.gz} into --out. Examples:\n" + __doc__.split("\n\n")[-2]
                       + "\nThe script's docstring has the details.")
    p.add_argument("--agent", choices=sorted(PROGRAMS), default="dreamerv3")
    p.add_argument("--program", default=None,
                   help="dreamerv3: train (default), policy or online; tdmpc2: update "
                        "(default), plan or online (one chunk of the online training loop)")
    p.add_argument("--size", default=None,
                   help="model size: dreamerv3 1m (default), 12m (the paper's), ...; "
                        "tdmpc2 1 (default), 5 (the paper's), ...; online: the preset's size "
                        "(given, it must be that one)")
    p.add_argument("--task", default=None,
                   help="online only: the Playground task (default walker-walk)")
    p.add_argument("--preset", default=None,
                   help="online only: the agent's preset (default paper), which sets the model")
    p.add_argument("--episode-length", type=int, default=None, metavar="T",
                   help="online only: T in agent steps (default: TD-MPC2 100, as "
                        "tdmpc2_speed.py's online runs; DreamerV3 the task's own)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="seeds vmapped in one call, as the trainers run them (default 1: the "
                        "unbatched program)")
    p.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="DreamerV3's compute_dtype (default float32, as dreamerv3_speed.py; "
                        "bfloat16 is the paper preset's). TD-MPC2 computes in float32")
    p.add_argument("--scan-weight-grads", choices=["auto", "inside", "outside"],
                   default="auto",
                   help="DreamerV3's scan_weight_grads: the observe scan's kernel gradients "
                        "summed in the loop (inside) or after it (outside); default auto, "
                        "the trainers' choice for the backend")
    p.add_argument("--calls", type=int, default=5, metavar="K",
                   help="calls timed untraced, then K more recorded in the trace (default 5)")
    p.add_argument("--warmup", type=int, default=2, metavar="W",
                   help="untimed calls after compilation (default 2; the first call of a "
                        "TD-MPC2 program compiles it; online: W calls after the "
                        "benchmark's own warm-up chunks)")
    p.add_argument("--top", type=int, default=25, metavar="N",
                   help="ops listed in top_ops (default 25)")
    p.add_argument("--peak-tflops", type=float, default=None, metavar="TFLOPS",
                   help="the device's peak TFLOP/s for the verdict (default: known for the "
                        "TPU v5e, none elsewhere)")
    p.add_argument("--max-file-mib", type=float, default=10.0, metavar="MIB",
                   help="largest gzipped trace or HLO file written (default 10 MiB)")
    p.add_argument("--keep-trace", action="store_true",
                   help="keep the raw trace folder (under --out) after reading it")
    p.add_argument("--out", metavar="DIR", help="folder for the results (created; required)")
    p.add_argument("--reanalyse", metavar="JSON", default=None,
                   help="instead of a run: redo the analysis of a record written earlier "
                        "(on any machine) from the trace and HLO files beside it, and "
                        "rewrite it; --top and --peak-tflops apply")
    args = p.parse_args(argv)
    check_args(p, args)
    return args


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill the agent's defaults and refuse bad combinations (``p.error``: exit 2)."""
    for name in ("seeds", "calls", "warmup", "top"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: must be at least 1")
    for name in ("max_file_mib", "peak_tflops"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} {value}: must be positive")
    if args.reanalyse:
        if not Path(args.reanalyse).is_file():
            p.error(f"--reanalyse {args.reanalyse}: no such file")
        return
    if not args.out:
        p.error("the following arguments are required: --out")
    programs = PROGRAMS[args.agent]
    args.program = args.program or programs[0]
    if args.program not in programs:
        p.error(f"--program {args.program}: {args.agent} has {', '.join(programs[:-1])} and "
                f"{programs[-1]}")
    online = args.program == "online"
    for name in ("task", "preset", "episode_length"):
        if getattr(args, name) is not None and not online:
            flag = "--" + name.replace("_", "-")
            p.error(f"{flag} {getattr(args, name)}: only for --program online (add "
                    f"--program online, or drop {flag})")
    if args.agent == "dreamerv3":
        from wmx.agents.dreamerv3.config import MODEL_SIZES, PRESETS
        default_size = "1m"
    else:
        from wmx.agents.tdmpc2.config import MODEL_SIZES, PRESETS
        default_size = "1"
        if args.compute_dtype != "float32":
            p.error(f"--compute-dtype {args.compute_dtype}: TD-MPC2 computes in float32 "
                    "(its config has no compute dtype)")
        if args.scan_weight_grads != "auto":
            p.error(f"--scan-weight-grads {args.scan_weight_grads}: a DreamerV3 setting "
                    "(drop it for --agent tdmpc2)")
        if args.size is not None and args.size.isdigit():
            args.size = int(args.size)
    if args.size is not None and args.size not in MODEL_SIZES:
        p.error(f"--size {args.size}: {args.agent} sizes are "
                f"{', '.join(map(str, MODEL_SIZES))}")
    if online:
        _check_online(p, args, PRESETS)
    else:
        args.size = args.size or default_size
        if args.agent == "tdmpc2":
            args.size = int(args.size)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        p.error(f"--out {args.out}: exists and is not a folder")


def _check_online(p: argparse.ArgumentParser, args: argparse.Namespace,
                  presets: dict) -> None:
    """``--program online``: fill ``--task`` and ``--preset`` (`ONLINE_DEFAULTS`) and set
    ``args.size`` to the preset's model size (None for a preset of its own widths); refuse
    (``p.error``: exit 2) an unknown task or preset, an episode length under 4, or a
    ``--size`` other than the preset's: the preset sets the model."""
    from wmx.envs.registry import get_task
    args.task = args.task or ONLINE_DEFAULTS["task"]
    args.preset = args.preset or ONLINE_DEFAULTS["preset"]
    if args.preset not in presets:
        p.error(f"--preset {args.preset}: {args.agent} presets are {', '.join(presets)}")
    try:
        get_task(args.task)
    except ValueError as e:
        p.error(f"--task {args.task}: {str(e).split(';')[0]} (wmx.envs.registry lists the "
                "tasks)")
    if args.episode_length is not None and args.episode_length < 4:
        p.error(f"--episode-length {args.episode_length}: must be at least 4")
    size = presets[args.preset].get("model_size")
    if args.size is not None and args.size != size:
        p.error(f"--size {args.size}: --preset {args.preset} runs size {size} (drop --size, "
                "or pick the preset of that size)" if size is not None else
                f"--size {args.size}: --preset {args.preset} has widths of its own, no "
                "named size (drop --size)")
    args.size = size


# ---- the program --------------------------------------------------------------------
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


def peak_rate(device_kind: str, given: float | None) -> dict | None:
    """The peak the verdict compares with: {"tflop_s", "what"}, or None when unknown (the
    CPU, a device kind not in `PEAK_TFLOPS`, without ``--peak-tflops``)."""
    if given is not None:
        return {"tflop_s": given, "what": "peak given by --peak-tflops"}
    if device_kind in PEAK_TFLOPS:
        return {"tflop_s": PEAK_TFLOPS[device_kind],
                "what": f"{device_kind} dense bfloat16 peak"}
    return None


_BOUNDS = {
    "matmul/convolution": "matmul arithmetic",
    "elementwise/reduction": ("elementwise and reduction fusions: memory traffic and per-op "
                              "overhead, not matmul arithmetic"),
    "copy/transpose": "data movement: copies and transposes between ops",
    "while-loop/control": "loop control: while-loop bookkeeping between small per-iteration ops",
    "collective/infeed/outfeed": "transfers: collectives and host transfers",
    "other": "ops outside the named categories (sorts, custom calls; see top_ops)"}
"""What bounds a call whose device is busy, by the category with the largest share."""


def component_text(rec: dict) -> str:
    """The verdict's sentence on the components (" By component, per tick: plan 6.1 ms
    (41%: ...); ..."; "" without rules): each group (the label before ": ") with its
    ms per tick (online) or per call and its share, and its parts of 1% or more."""
    comps = rec.get("components") or {}
    if set(comps) <= {"other"}:
        return ""
    ticks = rec.get("ticks_per_call") or 1
    groups: dict = {}
    for label, c in comps.items():
        group, _, part = label.partition(": ")
        g = groups.setdefault(group, {"ms": 0.0, "share": 0.0, "parts": []})
        g["ms"] += c["ms_per_call"] / ticks
        g["share"] += c["share"]
        if part and c["share"] >= 0.01:
            g["parts"].append(f"{part} {c['share']:.0%}")
    items = [f"{name} {g['ms']:.3g} ms ({g['share']:.0%}" + (
        ": " + ", ".join(g["parts"]) if g["parts"] else "") + ")"
        for name, g in groups.items() if g["share"] >= 0.005]
    text = f" By component, per {'tick' if ticks > 1 else 'call'}: " + "; ".join(items) + "."
    named = rec.get("components_named_share", 1.0)
    if named < 0.9:
        text += f" Only {named:.0%} of the op time has a name stack in the HLO (the rest " \
                "is other)."
    return text


def verdict(rec: dict) -> str:
    """One paragraph: where the time goes and what bounds it (inferred from the shares and
    rates; not a roofline)."""
    if not rec["op_events"]:
        return (f"The trace has no XLA op events ({rec['trace']['source']}); nothing to "
                "attribute: the timings above are wall clock only.")
    where = "device" if rec["trace"]["device_plane"] else "XLA:CPU op"
    cats = sorted(rec["categories"].items(), key=lambda kv: -kv[1]["share"])
    first, c = cats[0]
    parts = [f"{c['share']:.0%} of {where} time in {first} ops"]
    parts += [f"{v['share']:.0%} in {k}" for k, v in cats[1:3] if v["share"] >= 0.05]
    text = "; ".join(parts) + "."
    text += component_text(rec)
    mm, peak = rec.get("matmul_tflop_s"), rec.get("peak")
    if mm:
        text += f" Matmul ops run at {mm:.2f} TFLOP/s"
        if peak:
            text += f" ({mm / peak['tflop_s']:.0%} of the {peak['tflop_s']:.3g} TFLOP/s " \
                    f"{peak['what']})"
        text += f"; the whole call at {rec['tflop_s']:.2f} TFLOP/s of busy time."
    idle = rec.get("idle_share_of_wall")
    ticks = rec.get("ticks_per_call")
    if ticks:
        text += (f" A call is {ticks} ticks of the online loop: "
                 f"{rec['wall_ms_median'] / ticks:.3g} ms wall and {rec['busy_ms_per_call'] / ticks:.3g} ms busy per tick, "
                 f"{rec['env_steps_per_call'] / rec['wall_ms_median'] * 1e3:.0f} env steps/s "
                 "(all seeds).")
    text += f" Ops busy {rec['busy_ms_per_call']:.3g} ms of the {rec['wall_ms_median']:.3g} " \
            f"ms wall time per call" + (f" (the device idle {idle:.0%})." if idle is not None
                                        else ".")
    if not rec["trace"]["device_plane"]:
        text += " No device plane on this backend: the op times are XLA:CPU's thunks on the " \
                "host (they may run in parallel), and the rest of the wall time shares its " \
                "cores, so no device idle time is given."
    by_name = rec["classified_by"]["name"]
    if by_name >= 0.1:
        text += f" {by_name:.0%} of the op time was classified by op name alone (no HLO " \
                "match): those categories are guesses."
    if idle is not None and idle > 0.25:
        bound = ("the host side: the device waits for dispatch, transfers or Python for "
                 f"{idle:.0%} of each call")
    else:
        bound = _BOUNDS[first]
        if first == "matmul/convolution" and peak and mm and mm / peak["tflop_s"] < 0.5:
            bound += (", at under half the peak (likely products too small or narrow to "
                      "fill the matrix units, or waiting on memory)")
    return text + f" Bounded by {bound}."


# ---- files --------------------------------------------------------------------------
def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, renamed in place."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_gz(path: Path, data: bytes, max_mib: float) -> str | None:
    """Gzip ``data`` to ``path`` (atomically) unless larger than ``max_mib``; returns the
    file's name, or None when left out."""
    packed = gzip.compress(data, compresslevel=6, mtime=0)
    if len(packed) > max_mib * 2 ** 20:
        return None
    write_atomic(path, packed)
    return path.name


def record_trace(call, calls: int, trace_dir: Path) -> list[float]:
    """Run ``call`` ``calls`` times under ``jax.profiler.trace`` (Python tracer off);
    returns the traced calls' wall ms."""
    import jax
    from _machine import time_calls
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(str(trace_dir), profiler_options=options):
        wall = time_calls(call, calls)["wall_ms"]
    return wall


def read_trace(trace_dir: Path) -> bytes:
    """The serialized XSpace of the one trace ``jax.profiler.trace`` wrote."""
    files = sorted(trace_dir.rglob("*.xplane.pb"))
    if not files:
        raise RuntimeError(f"jax.profiler.trace wrote no .xplane.pb under {trace_dir}")
    return files[-1].read_bytes()


def add_rates(rec: dict, gflop: float | None, peak: dict | None) -> dict:
    """Add to ``rec`` (`analyse`'s fields and "wall_ms_median") the program's ``gflop`` per
    call, the rates (TFLOP/s of busy time, of matmul time; None when ``gflop`` is None),
    the busy and idle shares of the
    wall time (idle: only with a device plane; on the CPU the ops and the dispatch share
    the cores), ``peak`` and the verdict. Returns ``rec``."""
    busy_s = rec["busy_ms_per_call"] / 1e3
    mm_s = rec["categories"]["matmul/convolution"]["ms_per_call"] / 1e3
    rec["gflop"] = gflop
    rec["tflop_s"] = gflop / 1e3 / busy_s if busy_s and gflop is not None else None
    rec["matmul_tflop_s"] = gflop / 1e3 / mm_s if mm_s and gflop is not None else None
    rec["busy_share_of_wall"] = rec["busy_ms_per_call"] / rec["wall_ms_median"]
    rec["idle_share_of_wall"] = (max(0.0, 1 - rec["busy_share_of_wall"])
                                 if rec["trace"]["device_plane"] else None)
    rec["peak"] = peak
    rec["verdict"] = verdict(rec)
    return rec


# ---- main ---------------------------------------------------------------------------
def profile(args: argparse.Namespace) -> dict:
    """Build, time and trace the program; write the trace and the HLO, then the analysed
    record (`write_record`); return the record."""
    import jax
    from _machine import time_calls
    from wmx.version import code_version
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the name stacks the components read: with one frame per location
    # (JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS=0, as the tests set) the HLO's op_name
    # metadata loses the scopes of the calls around an op
    jax.config.update("jax_include_full_tracebacks_in_locations", True)
    platform = jax.default_backend()
    device_kind = jax.devices()[0].device_kind
    stem = f"profile_{args.agent}_{args.program}_{platform}"
    prog = build_program(args)
    wall = time_calls(prog.call, args.calls)["wall_ms"]
    trace_dir = out / f"{stem}_trace"
    shutil.rmtree(trace_dir, ignore_errors=True)
    traced = record_trace(prog.call, args.calls, trace_dir)
    raw = read_trace(trace_dir)
    rec = {
        "agent": args.agent, "program": args.program, "size": args.size,
        **{k: prog.facts.get(k) for k in ONLINE_FIELDS},
        "seeds": args.seeds, "compute_dtype": args.compute_dtype,
        "scan_weight_grads": args.scan_weight_grads if args.agent == "dreamerv3" else None,
        "calls": args.calls,
        "warmup": args.warmup, "platform": platform, "device_kind": device_kind,
        "jax": jax.__version__, "wmx_commit": code_version(),
        "command": " ".join(["profile_step.py", *sys.argv[1:]]),
        "compile_s": prog.compile_s, "gflop": prog.gflop,
        "wall_ms_median": statistics.median(wall), "wall_ms": wall,
        "traced_wall_ms_median": statistics.median(traced), "traced_wall_ms": traced,
        "files": {}, "notes": list(prog.notes)}
    # the trace and the HLO first: a failed analysis can be redone from them (--reanalyse)
    for kind, suffix, blob in (("trace", "xplane.pb.gz", raw),
                               ("hlo", "hlo.txt.gz", (prog.hlo or "").encode())):
        rec["files"][kind] = (write_gz(out / f"{stem}.{suffix}", blob, args.max_file_mib)
                              if blob else None)
        if rec["files"][kind] is None:
            rec["notes"].append(f"{kind}: not written (" + (
                f"over --max-file-mib {args.max_file_mib} gzipped" if blob
                else "no HLO text from this backend") + ")")
    rec = write_record(out / f"{stem}.json", rec, raw, prog.hlo, args)
    if not args.keep_trace:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return rec


def write_record(path: Path, rec: dict, raw: bytes, hlo: str | None,
                 args: argparse.Namespace) -> dict:
    """Analyse the serialized trace ``raw`` into ``rec`` (`analyse`, `add_rates`) and write
    it to ``path`` (atomically). A failed analysis is written too, with its error, and
    then raised. Returns the record with ``_path``."""
    import jax
    base = {k: v for k, v in rec.items() if k in _MEASURED}
    try:
        data = jax.profiler.ProfileData.from_serialized_xspace(raw)
        rules = component_rules(base["agent"], base["program"])
        rec = add_rates({**base, **analyse(data, hlo, base["calls"], args.top, rules),
                         "component_rules": [list(r) for r in rules]},
                        base["gflop"], peak_rate(base["device_kind"], args.peak_tflops))
    except Exception as e:
        rec = {**base, "analysis_error": f"{type(e).__name__}: {e}",
               "verdict": "The trace analysis failed; the trace and the HLO are in files "
                          "(redo it with --reanalyse after a fix)."}
        write_atomic(path, (json.dumps(rec, indent=1) + "\n").encode())
        raise
    write_atomic(path, (json.dumps(rec, indent=1) + "\n").encode())
    return {**rec, "_path": str(path)}


_MEASURED = ("agent", "program", "size", *ONLINE_FIELDS, "seeds", "compute_dtype",
             "scan_weight_grads", "calls", "warmup",
             "platform", "device_kind", "jax", "wmx_commit", "command", "compile_s", "gflop",
             "wall_ms_median", "wall_ms", "traced_wall_ms_median", "traced_wall_ms", "files",
             "notes")
"""The fields of a record that the run measured; the rest come from the trace."""


def reanalyse(path: Path, args: argparse.Namespace) -> dict:
    """Redo the analysis of a record written earlier (on any machine, no device needed)
    from its gzipped trace and HLO beside it, and rewrite the record."""
    rec = json.loads(path.read_text())
    files = rec.get("files") or {}
    if not files.get("trace"):
        raise SystemExit(f"profile_step.py: error: {path}: its trace was not written "
                         f"({'; '.join(rec.get('notes') or [])})")
    raw = gzip.decompress((path.parent / files["trace"]).read_bytes())
    hlo = (gzip.decompress((path.parent / files["hlo"]).read_bytes()).decode()
           if files.get("hlo") else None)
    return write_record(path, rec, raw, hlo, args)


def print_summary(rec: dict) -> None:
    print(f"{rec['agent']} {rec['program']} size {rec['size']}, {rec['seeds']} seed(s), "
          f"{rec['compute_dtype']} on {rec['device_kind']}: wall {rec['wall_ms_median']:.3g} "
          f"ms per call (traced {rec['traced_wall_ms_median']:.3g}), busy "
          f"{rec['busy_ms_per_call']:.3g} ms; "
          + (f"{rec['gflop']:.3g} GFLOP of matmuls" if rec["gflop"] is not None
             else "matmul FLOPs not counted"))
    if rec.get("ticks_per_call"):
        print(f"online {rec['preset']} {rec['task']}: {rec['ticks_per_call']} ticks, "
              f"{rec['env_steps_per_call']} env steps (all seeds), {rec['updates_per_call']:g} "
              "training steps per call")
    print(f"ops from: {rec['trace']['source']}")
    for name, c in sorted(rec["categories"].items(), key=lambda kv: -kv[1]["share"]):
        print(f"  {c['share']:6.1%} {c['ms_per_call']:9.3f} ms  {name} ({c['ops']} ops)")
    if set(rec.get("components") or {}) > {"other"}:
        ticks = rec.get("ticks_per_call")
        print("components" + (" (ms per call, per tick):" if ticks else " (ms per call):"))
        for name, c in rec["components"].items():
            per_tick = f" {c['ms_per_call'] / ticks:8.3f}" if ticks else ""
            print(f"  {c['share']:6.1%} {c['ms_per_call']:9.3f}{per_tick} ms  {name} "
                  f"({c['ops']} ops)")
    for r in rec["top_ops"][:10]:
        print(f"  {r['share']:6.1%} {r['ms_per_call']:9.3f} ms  {r['name']} [{r['category']}; "
              f"{r.get('component', 'other')}]")
    print(rec["verdict"])
    print(f"-> {rec['_path']}")


def main(argv: list[str] | None = None) -> None:
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)     # as the speed benchmarks run (docs/performance.md)
    args = parse_args(argv)
    if args.reanalyse:
        print_summary(reanalyse(Path(args.reanalyse), args))
    else:
        print_summary(profile(args))


if __name__ == "__main__":
    main()
