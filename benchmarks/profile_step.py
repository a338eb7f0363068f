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
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]   # _machine and the speed benchmarks; this wmx

from _profile_analysis import analyse  # noqa: E402,F401
from _profile_components import COMPONENTS, _scope, component_rules  # noqa: E402,F401
from _profile_program import ONLINE_FIELDS, build_program  # noqa: E402
from _profile_record import (_MEASURED, read_trace, reanalyse,  # noqa: E402,F401
                             record_trace, write_gz, write_record)
from _profile_verdict import PEAK_TFLOPS, add_rates, component_text, peak_rate  # noqa: E402,F401

PROGRAMS = {"dreamerv3": ("train", "policy", "online"), "tdmpc2": ("update", "plan", "online")}
ONLINE_DEFAULTS = {"task": "walker-walk", "preset": "paper"}
"""``--task`` and ``--preset`` of ``--program online`` when not given."""


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
