"""DreamerV3 speed on this machine, wmx beside the official code, in one run.

Writes JSON (default benchmarks/results/dreamerv3_speed.json):

- ``items``: per model size (1m, 12m; walker-walk dims, obs 24, action 6)
  - ``train_<size>``: one training step on a batch of 16 windows of 65 rows
    (64 trained steps + 1 replay-context row with stored latents; ms);
    wmx: jitted ``wmx.agents.dreamerv3.agent.update`` (the online path's
    step: replay context, world model, imagination of 16·64 starts × 15
    steps, actor-critic, LaProp); official: ``jax.jit(nj.pure(agent.train))``
    of danijar/dreamerv3 29eb964 (`dreamerv3_reference_driver.py`);
  - ``policy_<size>``: one policy step for 16 envs (filter step + sampled
    action; ms); wmx: jitted ``agent.policy`` with the agent's compile options (as
    its training chunk and evaluation rollout compile it); official: the JAXAgent's
    jitted policy program;
  - with ``--seeds N``, wmx only: ``train_<size>_seeds<N>`` and
    ``policy_<size>_seeds<N>``, the same steps vmapped over N seeds' states
    (each seed its own state, policy carry and key), as the trainers run seeds
    in one program; ``per_seed_ms`` = median / N;
  each with the median over rounds of the per-block medians (wall and
  process-CPU ms), the matmul FLOPs of the program (``gflop``, counted on
  its jaxpr) and its multiple of the matmul floor at the run's baseline
  rate, XLA's buffer sizes where the backend reports them, the compile
  time, and ``ratio`` = official / wmx (the target is ≥ 2);
- ``online``: env steps/s (simulator steps, 16 envs, action repeat 2) of
  the jitted `train_online` chunk at the paper protocol (``paper`` preset:
  12m, 16 envs, train ratio 512, so 8 updates per tick after the replay
  holds a batch) and at the ``cpu`` preset (1m), on a real Playground task
  (walker-walk, T = 500): the program of a real run, timed on chunks of
  ``--online-ticks`` ticks in the steady state (after the first update);
  with ``--online-seeds N [N ...]`` (default 1) each preset at each N, the
  seeds 0 .. N-1 vmapped in one program as the trainer runs them; per entry
  ``n_seeds``, ``env_steps_per_s`` (all seeds together),
  ``env_steps_per_s_per_seed`` and ``updates_per_s`` (training steps, each
  updating every seed);
- ``memory``: peak resident memory (MiB) of every worker process (one per
  implementation and size, one per online preset), and the device's memory
  statistics where the backend has them (the XLA CPU backend has none); per
  wmx item, ``device_memory``: bytes in use before its first call and the
  process's peak after it (items are called first in the order policy, train,
  seed counts rising, so a peak includes what earlier items hold);
- ``machine``: CPU model and SIMD flags, core count, versions, numpy's BLAS
  rate on a 2048³ float32 product (``blas_ceiling``) and XLA's on a 1024³
  one before and after the timed blocks (``matmul_baseline*``).

Precision: ``--compute-dtype`` (``protocol.compute_dtype``) is what both sides
compute in: wmx's ``compute_dtype`` (every timed program, the online ones too)
and the official config's ``jax.compute_dtype``, so the comparison is like for
like. Default: float32 when JAX's default backend is the CPU (where the
official timings of issue 13 were made), bfloat16 on an accelerator (the
reference's own setting, dreamerv3_spec 1.12).

Method. Every implementation and size runs in its own worker process
(`_worker.py`; the official code needs its own, older JAX), compiled once
and kept alive. The orchestrator alternates timed blocks between the two
implementations (round r: wmx then official for even r, official then wmx
for odd r), ``--calls`` timed calls per block after compilation and a
warm-up call, over ``--rounds`` rounds (≥ 3). Per block it records the
load: the load average before it, and the CPU that other processes take
(``foreign_cores``, /proc: machine busy time minus this benchmark's
processes, per second of wall time) over 1 s before the block and during
it. A block where either exceeds ``--load-threshold`` cores is marked
``loaded`` and repeated (up to ``--load-retries`` times); the round keeps
its last attempt. An item whose kept blocks include a loaded one is marked
``loaded: true``: its figures are not idle-machine figures. The ratio is
given two ways: of the two medians, and the median of the per-round
ratios (each from two adjacent blocks, steadier when the machine's speed
drifts).

The orchestrator never opens the device (the matmul baseline runs in a wmx
worker): a TPU takes one process at a time, so on a TPU a run may start one
worker at a time only (one size, at most one online preset, no official code;
refused otherwise). The seed counts of ``--online-seeds`` run one after
another in their preset's one worker, each replacing the previous count's
program, so they never add a process.

Official code: pass a checkout of danijar/dreamerv3 at 29eb964 with
``--reference-dir`` and the python of its virtual environment with
``--reference-python`` (how to prepare both: `dreamerv3_reference_driver.py`
and docs/performance.md). Without ``--reference-dir`` only wmx is timed.

    python benchmarks/dreamerv3_speed.py --reference-dir ~/ref/dreamerv3 \\
        [--reference-python ~/refenv/dreamerv3/bin/python] [--rounds 5] [--quick]

Source: issue 13 (DreamerV3 speed benchmark); docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]   # _worker/_machine, and this checkout's wmx
from _dreamerv3_speed_blocks import (TARGET_RATIO, Blocks, _item_name,  # noqa: E402,I001,F401
                                     _online_line, _summary, run_online)
from _dreamerv3_speed_programs import (ACTION_DIM, BATCH_LENGTH, BATCH_SIZE,  # noqa: E402,F401
                                       N_ENVS, OBS_DIM, ONLINE_TICKS, online_program,
                                       wmx_inputs, wmx_programs)
from _dreamerv3_speed_worker import WmxWorker, worker_main  # noqa: E402,F401
from _worker import Worker  # noqa: E402

ANCHOR_MS = {"1m": 780.0, "12m": 5300.0}
"""Official DreamerV3 (JAX) float32 training step on an idle 2-core CPU of this
kind, per issue 13 (ms); the in-run measurement supersedes it."""
DEFAULT_REFERENCE_PYTHON = os.path.expanduser("~/refenv/dreamerv3/bin/python")
QUICK_CACHE = str(Path(os.environ.get("TMPDIR", "/tmp")) / "wmx_dreamerv3_speed_cache")
"""--quick's default compile cache (compilation is never timed; the official
training step alone compiles for ~6-7 CPU minutes per size with jax 0.4.28)."""


# ==== orchestrator ===================================================================
def _check_reference(ref_dir: str, ref_python: str) -> dict:
    """The checkout's provenance, or SystemExit with a one-line message (bad
    --reference-dir or --reference-python)."""
    import hashlib
    from dreamerv3_reference_driver import check_reference_dir
    root = check_reference_dir(ref_dir)
    py = Path(ref_python)
    if not (py.is_file() and os.access(py, os.X_OK)):
        raise SystemExit(f"--reference-python {ref_python}: not an executable python (make the "
                         f"reference's venv first; see dreamerv3_reference_driver.py)")
    agent_py = (root / "dreamerv3" / "agent.py").read_text()
    fix_29eb964 = "prevact = {k: data[k][:, K - 1] for k in self.act_space}" in agent_py
    if not fix_29eb964:
        print(f"warning: {root} lacks the 29eb964 replay-context fix; the benchmark expects "
              f"danijar/dreamerv3 at 29eb964", file=sys.stderr)
    return {"dir": str(root), "python": str(py),
            "agent_py_sha256": hashlib.sha256(agent_py.encode()).hexdigest(),
            "has_29eb964_fix": fix_29eb964}


def _one_process_on_a_tpu(p: argparse.ArgumentParser, backend: str, args) -> None:
    """Refuse (exit 2) a run that would hold two workers at once on a TPU: a second process
    that opens the chip fails ("libtpu multi-process lockfile")."""
    if backend != "tpu":
        return
    many = [what for what, n in (("--sizes", len(args.sizes)),
                                 ("--online-presets", len(args.online_presets)),
                                 ("--reference-dir", 2 if args.reference_dir else 1)) if n > 1]
    if many:
        p.error(f"{', '.join(many)}: on a TPU one process at a time can hold the chip and this "
                "run would start several workers at once; time one size, at most one online "
                "preset and no --reference-dir per run")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser,
                                                       argparse.Namespace]:
    """The command line (``argv``; None: ``sys.argv[1:]``) and its parser (for later
    refusals, `_one_process_on_a_tpu`), with the derived defaults filled in: ``--quick``'s
    settings, ``online_presets`` (default paper and cpu; none with ``--quick``) and
    ``online_seeds`` (sorted distinct seed counts of the online runs; default [1]).

    Raises:
      SystemExit: status 2 with a one-line message for a bad value (fewer than 3 rounds,
        a seed count or online seed count outside 1 to `_machine.MAX_SEEDS`,
        ``--online-seeds`` without an online preset to run).
    """
    from _machine import MAX_SEEDS, seed_count
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", default=None,
                   help="danijar/dreamerv3 checkout at 29eb964 (omit: wmx only)")
    p.add_argument("--reference-python", default=DEFAULT_REFERENCE_PYTHON,
                   help="python of the reference's venv (jax 0.4.28 and the fixtures' pins)")
    p.add_argument("--sizes", nargs="+", default=["1m", "12m"], choices=["1m", "12m"])
    p.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="what wmx (compute_dtype) and the official code (jax.compute_dtype) "
                        "compute in (default float32, the parity fixtures' and the CPU's; "
                        "bfloat16 is the reference's own setting on accelerators). Given "
                        "explicitly: this process never opens the device to pick one")
    p.add_argument("--seeds", type=seed_count, nargs="+", default=[1], metavar="N",
                   help="also time wmx's steps vmapped over N seeds' states, as the trainers "
                        "run seeds (items train_<size>_seeds<N>, policy_<size>_seeds<N>); "
                        "1, the unbatched steps, is always timed")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 3)")
    p.add_argument("--train-calls", type=int, default=3, help="timed training steps per block")
    p.add_argument("--policy-calls", type=int, default=30, help="timed policy steps per block")
    p.add_argument("--task", default="walker-walk", help="Playground task of the online runs")
    p.add_argument("--online-presets", nargs="*", default=None,
                   help="presets of the online throughput runs (default: paper and cpu; "
                        "none with --quick; an empty list skips them)")
    p.add_argument("--online-seeds", type=seed_count, nargs="+", default=None, metavar="N",
                   help="time each online preset with N seeds vmapped in one program, for each "
                        f"N given (1 to {MAX_SEEDS}; default 1), one seed count after another "
                        "in the preset's one worker")
    p.add_argument("--online-ticks", type=int, default=ONLINE_TICKS,
                   help="ticks per timed online chunk (16 envs each; 8 updates per tick)")
    p.add_argument("--online-rounds", type=int, default=3)
    p.add_argument("--load-threshold", type=float, default=0.25,
                   help="cores of other work above which a block is marked loaded")
    p.add_argument("--load-retries", type=int, default=2,
                   help="repeats of a loaded block before its round keeps it marked")
    p.add_argument("--compile-cache", default=None,
                   help="persistent JAX compilation cache of the workers, a subdirectory per "
                        "side (the recorded compile times then measure cache loads; timed "
                        "figures are unaffected). Default: none, or QUICK_CACHE with --quick; "
                        "'' turns it off")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds, 1 training step and 5 policy steps per block, no load "
                        "retries, no online runs unless --online-presets names them (then 2 "
                        "ticks x 3 rounds), the compile cache on by default; ~3 min for 1m "
                        "and 12m on 2 cores once the cache is warm (a cold run compiles the "
                        "official training step for ~6-7 CPU minutes per size)")
    p.add_argument("--logs", default="/tmp/dreamerv3_speed_logs", help="worker logs (stderr)")
    p.add_argument("--out", default="benchmarks/results/dreamerv3_speed.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return p, args
    if args.quick:
        args.rounds, args.train_calls, args.policy_calls = 3, 1, 5
        args.online_ticks, args.load_retries = 2, 0
        if args.online_presets is None:
            args.online_presets = []
        if args.compile_cache is None:
            args.compile_cache = QUICK_CACHE
    elif args.online_presets is None:
        args.online_presets = ["paper", "cpu"]
    if args.rounds < 3:
        p.error(f"--rounds {args.rounds}: the benchmark needs at least 3 rounds")
    if args.online_seeds and not args.online_presets:
        p.error("--online-seeds: no online preset runs (--online-presets names them; "
                "--quick runs none by default)")
    args.online_seeds = sorted(set(args.online_seeds or [1]))   # the peak only grows
    return p, args


def main() -> None:
    # as wmx's command lines run: huge pages for malloc's mapped memory (docs/performance.md
    # "Huge pages"; WMX_HUGE_PAGES=0 to time without); the official side inherits the same
    from wmx.runs.heap import restart_with_huge_pages
    from wmx.version import code_version
    restart_with_huge_pages()
    p, args = parse_args()
    if args.worker:
        return worker_main()
    seed_counts = sorted({1, *args.seeds})
    reference = (_check_reference(args.reference_dir, args.reference_python)
                 if args.reference_dir else None)

    import jax     # its version only: this process never opens the device (the workers do)
    from _machine import allocator_info, bench_blas_ceiling, cpu_info, machine_busy
    dtype = args.compute_dtype
    t_start = time.time()
    env: dict = {}
    if args.compile_cache:
        env.update({"JAX_COMPILATION_CACHE_DIR": args.compile_cache,
                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    workers: list[Worker] = []

    def pids():
        return [os.getpid()] + [w.pid for w in workers if w.proc.poll() is None]

    def start(name, argv, cache_sub):
        e = dict(env)
        if args.compile_cache:
            e["JAX_COMPILATION_CACHE_DIR"] = str(Path(args.compile_cache) / cache_sub)
        w = Worker(name, argv, Path(args.logs) / f"{name}.log", env=e)
        workers.append(w)
        return w

    def stop(w):   # its peak memory, then closed
        res["memory"][w.name] = w.call("stats")
        w.close()
        workers.remove(w)

    res: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), **cpu_info(),
                    **allocator_info(), "jax": jax.__version__},
        "protocol": {"obs_dim": OBS_DIM, "action_dim": ACTION_DIM, "batch_size": BATCH_SIZE,
                     "batch_length": BATCH_LENGTH, "replay_context": 1, "n_envs": N_ENVS,
                     "compute_dtype": dtype,
                     "rounds": args.rounds, "train_calls": args.train_calls,
                     "policy_calls": args.policy_calls, "seeds": seed_counts,
                     "online_presets": args.online_presets, "online_seeds": args.online_seeds,
                     "load_threshold": args.load_threshold,
                     "load_retries": args.load_retries, "quick": args.quick,
                     "compile_cache": args.compile_cache or None},
        "wmx_commit": code_version(), "reference": reference,
        "anchor_official_idle_ms": ANCHOR_MS, "target_ratio": TARGET_RATIO,
        "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    blocks = Blocks(pids, args.load_threshold, args.load_retries)
    try:
        res["machine"]["load_at_start"] = machine_busy(pids(), 2.0)
        res["blas_ceiling"] = bench_blas_ceiling(3)

        # ---- workers: one per implementation and size, compiled concurrently ----
        setup_args = dict(obs_dim=OBS_DIM, action_dim=ACTION_DIM, batch_size=BATCH_SIZE,
                          batch_length=BATCH_LENGTH, n_envs=N_ENVS, compute_dtype=dtype)
        pairs = {}
        for size in args.sizes:
            w = start(f"wmx_{size}", [sys.executable, str(Path(__file__).resolve()), "--worker"],
                      "wmx")
            if not pairs:    # the first worker names the device before any other starts
                res["machine"].update(w.call("backend"))
                _one_process_on_a_tpu(p, res["machine"]["backend"], args)
            r = None
            if reference:
                r = start(f"official_{size}", [reference["python"],
                                               str(HERE / "dreamerv3_reference_driver.py"),
                                               "--reference-dir", reference["dir"]], "official")
            pairs[size] = (w, r)
        setups = {}
        t = time.perf_counter()
        for size, (w, r) in pairs.items():
            for x in (w, r):
                if x:
                    x.send("setup", size=size, **setup_args,
                           **({"seeds": seed_counts} if x is w else {}))
        for size, (w, r) in pairs.items():
            setups[size] = {"wmx": w.recv(), "official": r.recv() if r else None}
        res["setup_wall_s"] = time.perf_counter() - t
        print(f"workers ready after {res['setup_wall_s']:.0f} s (compiled concurrently)",
              flush=True)

        # the XLA matmul baseline, on the device the items run on (a wmx worker's)
        res["matmul_baseline"] = pairs[args.sizes[0]][0].call("matmul", repeats=3)

        # ---- interleaved rounds ----
        calls = {"train": args.train_calls, "policy": args.policy_calls}
        # (kind, seeds, the worker's item name); the official code runs one seed
        items = [(kind, n, kind if n == 1 else f"{kind}_seeds{n}")
                 for n in seed_counts for kind in calls]
        raw = {(size, *it): ([], []) for size in args.sizes for it in items}
        for rnd in range(args.rounds):
            for size, (w, r) in pairs.items():
                for kind, n, item in items:
                    order = [(0, w), (1, r)] if rnd % 2 == 0 else [(1, r), (0, w)]
                    for side, worker in order:
                        if worker is None or (side == 1 and n > 1):
                            continue
                        b = blocks.run(worker, item, calls[kind])
                        b["round"] = rnd
                        raw[(size, kind, n, item)][side].append(b)
                        print(f"round {rnd} {_item_name(kind, size, n)} {worker.name}: "
                              f"{b['median_ms']:.1f} ms{' (loaded)' if b['loaded'] else ''}",
                              flush=True)
        res["matmul_baseline_after"] = pairs[args.sizes[0]][0].call("matmul", repeats=3)
        rate = statistics.mean([res["matmul_baseline"]["gflop_per_s"],
                                res["matmul_baseline_after"]["gflop_per_s"]])
        res["items"], res["memory"] = {}, {}
        for (size, kind, n, item), (wb, rb) in raw.items():
            s = _summary(wb, rb or None)
            s["wmx"].update(seeds=n, per_seed_ms=s["wmx"]["median_ms"] / n,
                            device_memory=setups[size]["wmx"]["device_memory"].get(item))
            for side in ("wmx", "official"):
                info = setups[size][side]
                if side in s and info:
                    s[side].update(gflop=info["gflop"][item], compile_s=info["compile_s"][item],
                                   xla_buffers=info["memory"][item])
                    floor = info["gflop"][item] / rate * 1e3
                    s[side].update(matmul_floor_ms=floor, x_floor=s[side]["median_ms"] / floor)
            if item == "train":
                s["anchor_official_idle_ms"] = ANCHOR_MS[size]
            res["items"][_item_name(kind, size, n)] = s
        res["models"] = {size: {side: {k: v for k, v in (info or {}).items()
                                       if k in ("params", "widths", "versions",
                                                "compiler_options", "compute_dtype")}
                                for side, info in setups[size].items()}
                         for size in args.sizes}
        for w in list(workers):
            stop(w)

        # ---- online throughput (wmx only): one worker per preset, seed counts in turn ----
        res["online"] = run_online(
            lambda preset: start(f"wmx_online_{preset}",
                                 [sys.executable, str(Path(__file__).resolve()), "--worker"],
                                 "wmx"),
            stop, blocks, args.online_presets, args.online_seeds, task=args.task,
            n_envs=N_ENVS, ticks=args.online_ticks, rounds=args.online_rounds,
            compute_dtype=dtype)
    finally:
        for w in workers:
            w.close()
    res["machine"]["load_at_end"] = machine_busy(pids(), 2.0)
    res["wall_s"] = time.time() - t_start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    _print_summary(res, out)


def _print_summary(res: dict, out: Path) -> None:
    for name, s in res["items"].items():
        line = f"{name:12s} wmx {s['wmx']['median_ms']:9.1f} ms"
        if "official" in s:
            line += (f"  official {s['official']['median_ms']:9.1f} ms  ratio "
                     f"{s['ratio']:.2f} (per round {s['ratio_rounds_median']:.2f})")
        print(line + ("  [LOADED]" if s["loaded"] else ""))
    for o in res.get("online", []):
        print(_online_line(o))
    for name, m in res["memory"].items():
        print(f"peak RSS {name}: {m['peak_rss_mib']:.0f} MiB")
    print(f"-> {out} ({res['wall_s'] / 60:.1f} min)")


if __name__ == "__main__":
    main()
