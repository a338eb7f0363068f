"""TD-MPC2 speed, side by side with the official implementation on the same machine.

Every speed goal is a ratio against the official TD-MPC2 (PyTorch) measured
in the same run (issue 16): absolute times from another machine cannot be
judged. With ``--reference-dir`` the benchmark starts the official code in
its own Python environment (`benchmarks/tdmpc2_reference_driver.py`, a
child process) and times, interleaved in rounds (wmx block, official block,
wmx block, ...):

- one update at model sizes 1 and 5, batch 256 (wmx: one jitted `update`,
  parameters and batch on device; official: `agent.update(buffer)` with a
  stand-in buffer returning one fixed batch);
- one planning decision at model sizes 1 and 5 (512 samples, 24 policy
  trajectories, 64 elites, 6 iterations; official: `agent.act(obs)`).

With ``--seeds N [N ...]`` wmx's programs are also timed vmapped over N
seeds, each seed with its own state, batch and draws, as the trainers run
seeds in one program (``seeds`` and ``wmx_per_seed_ms`` in the record; the
official code runs one seed).

Each block is ``--calls`` calls; compilation and warm-up are excluded. Per
quantity it records both medians (the median over rounds of each block's
median), the ratio official / wmx (> 1: wmx is faster), the median of the
per-round ratios, and the target ratio. Before each block the load average
is read, and during it the CPU time taken by processes other than the two
benchmark processes (``foreign_cores``, from /proc); a block with
``foreign_cores`` above ``--max-foreign`` is marked ``loaded`` and repeated
(at most ``--retries`` times; the last attempt is kept, with every attempt in
the record). ``idle`` in the JSON is true only when no kept block is loaded:
only such a record can judge the targets.

Also recorded: the CPU model and SIMD extensions, torch's and jax's versions
and threads, the in-run matmul ceiling (float32 2048^3 products: jitted XLA,
torch, numpy's BLAS; before and after the timed rounds), per wmx program its
matmul FLOPs (2·M·N·K per dot, counted on the jaxpr) and the floor they put
at the XLA rate of this run, the online env steps/s of wmx's jitted training
chunk (``online``: per seed and all seeds together, with N seeds vmapped for each N of
``--online-seeds``, default 1 and 4; the chunk at ``--preset``, default ``cpu``), the
peak resident memory, and per wmx program
the device's memory (``device_memory``: bytes in use before it was built and
the process's peak after its first calls; None on the CPU, whose backend
keeps no statistics).

Without ``--reference-dir`` only wmx is timed (no ratios).

The machine facts, the load probe, FLOP counting and timing come from
`_machine.py` and `_worker.py`, shared with `dreamerv3_speed.py`; the
TD-MPC2 driver keeps its own JSON-lines protocol (arguments and results at
the top level of each line; `_worker.Worker` nests them).

Getting and preparing the official checkout (commit e9f5932, the spec's HEAD)
and its environment (never wmx's):

    git clone https://github.com/nicklashansen/tdmpc2 ~/ref/tdmpc2
    git -C ~/ref/tdmpc2 checkout e9f5932
    # or from a bare mirror:
    #   mkdir -p ~/ref/tdmpc2 && git --git-dir=MIRROR archive e9f5932 | tar -x -C ~/ref/tdmpc2
    python3.11 -m venv ~/refenv/tdmpc2
    ~/refenv/tdmpc2/bin/pip install torch==2.13.0 tensordict==0.8.3 omegaconf hydra-core

The checkout is not edited: the driver copies its ``tdmpc2/`` folder to a
temporary directory and applies the CPU patch there (``'cuda:0'`` ->
``'cpu'`` in ``tdmpc2.py``, the agent device and the multi-task discount
tensor, and in ``common/scale.py``, the RunningScale buffers;
``capturable=True`` -> ``capturable=False`` for the two Adams, whose
capturable mode asserts a CUDA device in eager torch and does not change the
math). torch.compile is off (``--reference-compile``): the config's
``compile: true`` fails on the CPU with torch 2.13 (inductor:
BackendCompilerFailed in the update), and eager is what runs.

    python benchmarks/tdmpc2_speed.py --reference-dir ~/ref/tdmpc2 \\
        [--reference-python ~/refenv/tdmpc2/bin/python] [--rounds 5] [--calls 5]
    python benchmarks/tdmpc2_speed.py --quick ...   # 3 rounds of 3 calls, no repeats, online 1 seed
    python benchmarks/tdmpc2_speed.py --preset paper --online-seeds 1 2 5 ...  # online, paper

Writes benchmarks/results/tdmpc2_speed.json (``--out``; a run without the
online throughput writes tdmpc2_speed_no_online.json unless ``--out`` says).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2 import agent as tdmpc2_agent
from wmx.agents.tdmpc2.config import make_config
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.agents.tdmpc2.update import Batch, draw_update_noise, init_train_state, update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import (MAX_SEEDS, LoadProbe, allocator_info, cpu_info,  # noqa: E402
                      device_memory, median_ms, peak_rss_mib, program_flops, seed_count,
                      time_calls)

# official time / wmx time asked for (issue 16), per quantity and model size
TARGET_RATIO = {"update": {1: 1.5, 5: 2.0}, "plan": {1: 2.0, 5: 2.0}}
DEFAULT_REF_PYTHON = os.path.expanduser("~/refenv/tdmpc2/bin/python")


# ---- in-run matmul ceiling ------------------------------------------------------------
def matmul_ceiling(repeats: int, driver: "Reference | None", n: int = 2048) -> dict:
    """float32 n^3 matmul rates (GFLOP/s): jitted XLA (the rate the wmx floor
    uses), numpy's BLAS, and torch's (in the reference process)."""
    gf = lambda ms: 2 * n ** 3 / (ms * 1e-3) / 1e9  # noqa: E731
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(jnp.matmul)
    out = {"n": n, "xla_gflop_per_s": gf(median_ms(lambda: f(a, b).block_until_ready(),
                                                   repeats)[0])}
    an, bn = np.asarray(a), np.asarray(b)
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    out["numpy_gflop_per_s"] = gf(median_ms(lambda: an @ bn, repeats)[0])
    out["numpy_blas"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    if driver is not None:
        out["torch_gflop_per_s"] = driver.call("matmul", n=n, repeats=repeats)["gflop_per_s"]
    return out


# ---- the wmx programs -------------------------------------------------------------------
def wmx_update(model_size: int, obs_dim: int = 24, action_dim: int = 6, seeds: int = 1):
    """(call, matmul FLOPs) of one wmx update at batch 256, compiled with the trainers'
    options (`Agent.compiler_options`: XLA's own dots unless ``WMX_CPU_DOTS`` says
    otherwise); the state is fed back. ``seeds`` > 1: one call updates that many seeds'
    states, each with its own batch and draws, vmapped as the trainers run seeds.
    ``call.lower()``: the jitted update lowered on its current arguments (``.compile()``
    of it after a call is jit's cached program)."""
    cfg = make_config("paper", model_size=model_size, obs_dim=obs_dim, action_dim=action_dim)
    fn = lambda s, b, n: update(s, b, n, cfg)  # noqa: E731
    H, B = cfg.horizon, cfg.batch_size
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    lead = (seeds,) if seeds > 1 else ()
    if seeds > 1:
        fn = jax.vmap(fn)
        state = [jax.jit(jax.vmap(lambda key: init_train_state(key, cfg)))(
            jax.random.split(jax.random.PRNGKey(0), seeds))]
        noise = jax.vmap(lambda key: draw_update_noise(key, cfg))(jax.random.split(k[3], seeds))
    else:
        state = [init_train_state(jax.random.PRNGKey(0), cfg)]
        noise = draw_update_noise(k[3], cfg)
    step = jax.jit(fn, compiler_options=tdmpc2_agent.compiler_options(cfg))
    batch = Batch(obs=jax.random.normal(k[0], (*lead, H + 1, B, obs_dim)),
                  action=jax.random.uniform(k[1], (*lead, H, B, action_dim), minval=-1,
                                            maxval=1),
                  reward=jax.random.normal(k[2], (*lead, H, B)))

    def call():
        state[0], m = step(state[0], batch, noise)
        jax.block_until_ready(m["total_loss"])

    call.lower = lambda: step.lower(state[0], batch, noise)
    flops = program_flops(fn, state[0], batch, noise)
    return call, flops


def wmx_plan(model_size: int, obs_dim: int = 24, action_dim: int = 6, seeds: int = 1):
    """(call, matmul FLOPs) of one wmx planning decision (t0 False, fresh draws per call),
    compiled with the trainers' options (the online chunk plans inside its program).
    ``seeds`` > 1: one call decides for that many seeds (their own parameters,
    observation and draws), vmapped as the trainers run seeds. ``call.lower()``: the jitted
    decision lowered on its arguments (as `wmx_update`'s)."""
    cfg = make_config("paper", model_size=model_size, obs_dim=obs_dim, action_dim=action_dim)
    lead = (seeds,) if seeds > 1 else ()
    if seeds > 1:
        params = jax.jit(jax.vmap(lambda key: init_train_state(key, cfg).params))(
            jax.random.split(jax.random.PRNGKey(0), seeds))
    else:
        params = init_train_state(jax.random.PRNGKey(0), cfg).params
    obs = jax.random.normal(jax.random.PRNGKey(2), (*lead, obs_dim))
    prev = jnp.zeros((*lead, cfg.horizon, action_dim))

    def decide_fn(params, obs, prev, key):
        noise = draw_plan_noise(key, cfg, False)
        return plan(params, obs, prev, jnp.bool_(False), noise, cfg, eval_mode=False)

    fn = jax.vmap(decide_fn) if seeds > 1 else decide_fn
    decide = jax.jit(fn, compiler_options=tdmpc2_agent.compiler_options(cfg))

    key = [jax.random.PRNGKey(3)]

    def keys(k):
        return jax.random.split(k, seeds) if seeds > 1 else k

    def call():
        key[0], sub = jax.random.split(key[0])
        jax.block_until_ready(decide(params, obs, prev, keys(sub))[0])

    call.lower = lambda: decide.lower(params, obs, prev, keys(key[0]))
    return call, program_flops(fn, params, obs, prev, keys(key[0]))


# ---- the official implementation, in its own process -----------------------------------
class Reference:
    """`tdmpc2_reference_driver.py` under the reference's Python, one JSON line per call."""

    def __init__(self, python: str, reference_dir: str, compile_mode: str, threads: int):
        driver = Path(__file__).resolve().parent / "tdmpc2_reference_driver.py"
        cmd = [python, str(driver), "--reference-dir", reference_dir,
               "--compile", compile_mode, "--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.pid = self.proc.pid

    def call(self, cmd: str, **kw) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"reference driver exited (code {self.proc.wait()}); "
                               "its stderr is above")
        res = json.loads(line)
        if not res.pop("ok"):
            raise RuntimeError(f"reference driver, {cmd}: {res['error']}")
        return res

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)


def _seeds_label(n: int) -> str:
    return f", {n} seeds vmapped" if n > 1 else ""


def _memory_record(before: dict | None, after: dict | None) -> dict | None:
    """A program's device memory (bytes): in use before it was built, and the process's
    peak once it was compiled and called twice, which includes what earlier programs left
    resident (``bytes_in_use_before``) and is an earlier program's peak when that was
    higher. None where the backend has no memory statistics (the CPU)."""
    if after is None:
        return None
    return {"bytes_in_use_before": (before or {}).get("bytes_in_use"),
            "peak_bytes_in_use": after.get("peak_bytes_in_use"),
            "bytes_limit": after.get("bytes_limit")}


def run_block(side: str, fn, n: int, pids: list[int], max_foreign: float,
              retries: int) -> dict:
    """Time one block of n calls; repeat it (up to `retries` times) while other
    processes take more than `max_foreign` cores. Returns the kept attempt with
    its median, `loaded` flag and the earlier attempts' load records."""
    attempts = []
    for _ in range(retries + 1):
        with LoadProbe(pids) as probe:
            r = fn(n)
        r.update(probe.result, side=side, median_ms=statistics.median(r["wall_ms"]),
                 cpu_median_ms=statistics.median(r["cpu_ms"]),
                 loaded=(probe.result["foreign_cores"] or 0.0) > max_foreign)
        attempts.append(r)
        if not r["loaded"]:
            break
    kept = attempts[-1]
    kept["discarded"] = [{k: a[k] for k in ("loadavg", "foreign_cores", "median_ms")}
                         for a in attempts[:-1]]
    return kept


def summarise(blocks: list[dict], ref_blocks: list[dict] | None, target: float | None) -> dict:
    med = lambda bs, key="median_ms": statistics.median(b[key] for b in bs)  # noqa: E731
    out = {"wmx_median_ms": med(blocks), "wmx_cpu_median_ms": med(blocks, "cpu_median_ms"),
           "wmx_blocks": blocks}
    if ref_blocks:
        out.update(official_median_ms=med(ref_blocks),
                   official_cpu_median_ms=med(ref_blocks, "cpu_median_ms"),
                   official_blocks=ref_blocks)
        out["ratio"] = out["official_median_ms"] / out["wmx_median_ms"]
        out["ratio_per_round_median"] = statistics.median(
            r["median_ms"] / w["median_ms"] for w, r in zip(blocks, ref_blocks))
        out["loaded_blocks"] = sum(b["loaded"] for b in blocks + ref_blocks)
        if target is not None:
            out["target_ratio"] = target
            out["met"] = out["ratio"] >= target
    return out

ONLINE_EPISODE_LENGTH = 100
"""T (agent steps) of the online throughput runs' episodes: one chunk is a round of T + 1
ticks."""


def bench_online(n_seeds: int, task: str, preset: str, repeats: int,
                 episode_length: int = ONLINE_EPISODE_LENGTH) -> dict:
    """Env steps/s of wmx's jitted online training chunk (`wmx.train_online.program`) with
    ``n_seeds`` seeds vmapped (seeds 0 .. n_seeds - 1, as ``train_online --seeds`` runs
    them), after the seed phase.

    The program: `online_program` (`_online.start_online`): one chunk is one round of
    T + 1 ticks (planning and one update per agent step); the warm-up rounds 0-2 (seed
    phase, burst, a first planning round; the first compiles) are not timed, then
    ``repeats`` rounds are.

    Returns:
      {"n_seeds", "task", "preset", "episode_length", "env_steps_per_s" (simulator steps
      per second, all seeds together), "env_steps_per_s_per_seed", "round_s_median" and
      "round_s" (s per timed round), "device_memory" (`_machine.device_memory` after the
      timed rounds; None on the CPU)}.

    Raises:
      ValueError: an unknown task or preset, or T < 4 (`OnlineRunConfig`).
    """
    run = online_program(n_seeds, task, preset, repeats, episode_length)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    steps = run.env_steps_per_call
    return {"n_seeds": n_seeds, "task": task, "preset": preset,
            "episode_length": episode_length, "env_steps_per_s": steps / med,
            "env_steps_per_s_per_seed": steps / med / n_seeds, "round_s_median": med,
            "round_s": times, "device_memory": device_memory()}


def online_program(n_seeds: int, task: str, preset: str, chunks: int,
                   episode_length: int = ONLINE_EPISODE_LENGTH):
    """The online program `bench_online` times, warmed up (`_online.start_online`).

    The run: ``OnlineRunConfig(task, seeds 0 .. n_seeds - 1, preset)`` at episodes of
    ``episode_length`` (T) agent steps and T seed steps, sized for the warm-up and
    ``chunks`` more chunks; one call is one round of T + 1 ticks.

    Returns:
      `_online.OnlineChunk`: calling it runs the next round on the carries the last left.

    Raises:
      ValueError: an unknown task or preset, or T < 4 (`OnlineRunConfig`).
    """
    from _online import start_online
    return start_online(task, "tdmpc2", preset, n_seeds=n_seeds,
                        episode_length=episode_length,
                        agent_overrides={"seed_steps": episode_length}, chunks=chunks)


def online_line(r: dict) -> str:
    """The summary line of one `bench_online` record."""
    return (f"online {r['preset']} {r['task']}, {r['n_seeds']} seed(s): "
            f"{r['env_steps_per_s_per_seed']:.1f} env steps/s per seed, "
            f"{r['env_steps_per_s']:.1f} in total")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``; None: ``sys.argv[1:]``), with the derived defaults
    filled in: ``online_seeds`` the sorted distinct seed counts of the online throughput
    runs (default 1 and 4, with ``--quick`` 1; [] with ``--no-online``).

    Raises:
      SystemExit: status 2 with a one-line message for a bad value (a seed count outside
        1 to `_machine.MAX_SEEDS`, ``--online-seeds`` with ``--no-online``).
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", default=None,
                   help="root of a nicklashansen/tdmpc2 checkout at e9f5932 (see above)")
    p.add_argument("--reference-python", default=DEFAULT_REF_PYTHON,
                   help=f"Python of the reference's environment (default {DEFAULT_REF_PYTHON})")
    p.add_argument("--reference-compile", choices=("off", "on", "config"), default="off",
                   help="torch.compile in the reference (off: eager; 'on'/'config' fail on "
                        "the CPU with torch 2.13, see above)")
    p.add_argument("--reference-threads", type=int, default=0,
                   help="torch threads (0: torch's default, one per core)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 3 to judge)")
    p.add_argument("--calls", type=int, default=5, help="calls per block")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 5])
    p.add_argument("--kinds", nargs="+", default=["update", "plan"], choices=("update", "plan"))
    p.add_argument("--seeds", type=seed_count, nargs="+", default=[1], metavar="N",
                   help="also time each program vmapped over N seeds (each seed its own state, "
                        "batch and draws, as the trainers run seeds; wmx only); 1, the "
                        "unbatched program, is always timed")
    p.add_argument("--max-foreign", type=float, default=0.15,
                   help="cores other processes may take during a block before it is "
                        "marked loaded and repeated")
    p.add_argument("--retries", type=int, default=None,
                   help="repeats of a loaded block (default 3; 0 with --quick)")
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--preset", default="cpu", help="preset of the online throughput runs")
    p.add_argument("--online-seeds", type=seed_count, nargs="+", default=None, metavar="N",
                   help="time the online training chunk with N seeds vmapped, for each N "
                        f"given (1 to {MAX_SEEDS}; default 1 and 4, with --quick 1)")
    p.add_argument("--quick", action="store_true",
                   help="3 rounds of 3 calls, loaded blocks marked but not repeated, online "
                        "1 seed only unless --online-seeds says")
    p.add_argument("--no-online", action="store_true", help="skip the online throughput runs")
    p.add_argument("--out", default=None,
                   help="JSON to write (default benchmarks/results/tdmpc2_speed.json; "
                        "tdmpc2_speed_no_online.json with --no-online)")
    args = p.parse_args(argv)
    if args.no_online and args.online_seeds:
        p.error("--online-seeds with --no-online: give one of them")
    if args.no_online:
        args.online_seeds = []
    elif args.online_seeds is None:
        args.online_seeds = [1] if args.quick else [1, 4]
    args.online_seeds = sorted(set(args.online_seeds))   # the device's peak only grows
    return args


def main() -> None:
    # as wmx's command lines run: huge pages for malloc's mapped memory (docs/performance.md
    # "Huge pages"; WMX_HUGE_PAGES=0 to time without); the official side inherits the same
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages()
    args = parse_args()
    seed_counts = sorted({1, *args.seeds})
    rounds, calls = (3, 3) if args.quick else (args.rounds, args.calls)
    if args.retries is None:
        args.retries = 0 if args.quick else 3
    t_start = time.perf_counter()
    res: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                             "python": platform.python_version(), "jax": jax.__version__,
                             "backend": jax.default_backend(), **cpu_info(), **allocator_info(),
                             "loadavg_start": [round(x, 2) for x in os.getloadavg()]},
                 "rounds": rounds, "calls_per_block": calls, "max_foreign": args.max_foreign,
                 "target_ratio": TARGET_RATIO,
                 # the update's and the decision's compile options (the trainers';
                 # `wmx.xla_cpu`)
                 "wmx_update_compiler_options": tdmpc2_agent.compiler_options(None),
                 "wmx_plan_compiler_options": tdmpc2_agent.compiler_options(None),
                 "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    ref = None
    if args.reference_dir:
        ref = Reference(args.reference_python, args.reference_dir, args.reference_compile,
                        args.reference_threads)
        res["reference"] = ref.call("info")
        res["reference"]["setup"] = [ref.call("setup", model_size=s) for s in args.sizes]
    pids = [os.getpid()] + ([ref.pid] if ref else [])
    wmx_fns, flops, memory = {}, {}, {}
    for kind in args.kinds:
        for s in args.sizes:
            for n in seed_counts:     # the device's peak only grows: smaller programs first
                before = device_memory()
                fn, fl = (wmx_update if kind == "update" else wmx_plan)(s, seeds=n)
                fn()                                       # compile + warm up
                fn()
                wmx_fns[kind, s, n], flops[kind, s, n] = fn, fl
                memory[kind, s, n] = _memory_record(before, device_memory())
    res["ceiling_before"] = matmul_ceiling(3 * calls, ref)
    blocks: dict = {key: ([], []) for key in wmx_fns}
    for r in range(rounds):
        for (kind, s, seeds), fn in wmx_fns.items():
            key = kind, s, seeds
            blocks[key][0].append(run_block(
                "wmx", lambda n, fn=fn: time_calls(fn, n), calls, pids, args.max_foreign,
                args.retries))
            if ref and seeds == 1:        # the official code runs one seed
                blocks[key][1].append(run_block(
                    "official", lambda n, k=kind, s=s: ref.call("time", kind=k, model_size=s,
                                                                n=n),
                    calls, pids, args.max_foreign, args.retries))
            print(f"round {r + 1}/{rounds} {kind} {s}{_seeds_label(seeds)}: wmx "
                  f"{blocks[key][0][-1]['median_ms']:.1f} ms"
                  + (f", official {blocks[key][1][-1]['median_ms']:.1f} ms"
                     if blocks[key][1] else "")
                  + f" (foreign {blocks[key][0][-1]['foreign_cores']:.2f} cores)",
                  flush=True)
    res["ceiling_after"] = matmul_ceiling(3 * calls, ref)
    rate = statistics.mean([res["ceiling_before"]["xla_gflop_per_s"],
                            res["ceiling_after"]["xla_gflop_per_s"]])
    for kind in args.kinds:
        res[kind] = []
        for s in args.sizes:
            for n in seed_counts:
                w, o = blocks[kind, s, n]
                q = {"model_size": s, "seeds": n,
                     **summarise(w, o, TARGET_RATIO[kind].get(s) if o else None)}
                q["wmx_per_seed_ms"] = q["wmx_median_ms"] / n
                q["gflop"] = flops[kind, s, n] / 1e9
                q["matmul_floor_ms"] = q["gflop"] / rate * 1e3
                q["wmx_x_floor"] = q["wmx_median_ms"] / q["matmul_floor_ms"]
                q["device_memory"] = memory[kind, s, n]
                res[kind].append(q)
    kept = [b for w, o in blocks.values() for b in w + o]
    res["idle"] = not any(b["loaded"] for b in kept)
    res["loaded_blocks"] = sum(b["loaded"] for b in kept)
    if ref:
        ref.close()
    if args.online_seeds:
        res["online"] = []
        for n in args.online_seeds:            # each printed as it comes (a cut run keeps it)
            res["online"].append(bench_online(n, args.task, args.preset, max(2, calls // 2)))
            print(online_line(res["online"][-1]), flush=True)
    res["peak_rss_mib"] = peak_rss_mib()
    res["duration_s"] = time.perf_counter() - t_start
    out = Path(args.out or ("benchmarks/results/tdmpc2_speed_no_online.json" if args.no_online
                            else "benchmarks/results/tdmpc2_speed.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    m = res["machine"]
    print(f"\n{m.get('model', '?')}, {m['cpus']} CPUs, SIMD {' '.join(m.get('simd', []))}; "
          f"{'IDLE' if res['idle'] else 'LOADED: ' + str(res['loaded_blocks']) + ' blocks'}")
    for kind in args.kinds:
        for q in res[kind]:
            line = (f"{kind:6s} size {q['model_size']}{_seeds_label(q['seeds'])}: wmx "
                    f"{q['wmx_median_ms']:7.1f} ms "
                    f"({q['wmx_x_floor']:.2f} x its matmul floor {q['matmul_floor_ms']:.0f} ms)")
            if "ratio" in q:
                line += (f", official {q['official_median_ms']:7.1f} ms, ratio "
                         f"{q['ratio']:.2f} (per round {q['ratio_per_round_median']:.2f}; "
                         f"target {q['target_ratio']:.1f}: "
                         f"{'met' if q['met'] else 'NOT met'})")
            print(line)
    for r in res.get("online", []):
        print(online_line(r))
    c0, c1 = res["ceiling_before"], res["ceiling_after"]
    print("matmul ceiling (GFLOP/s, 2048^3, before/after): XLA "
          f"{c0['xla_gflop_per_s']:.0f}/{c1['xla_gflop_per_s']:.0f}, numpy "
          f"{c0['numpy_gflop_per_s']:.0f}/{c1['numpy_gflop_per_s']:.0f}"
          + (f", torch {c0['torch_gflop_per_s']:.0f}/{c1['torch_gflop_per_s']:.0f}"
             if "torch_gflop_per_s" in c0 else ""))
    print(f"peak RSS {res['peak_rss_mib']:.0f} MiB; {res['duration_s'] / 60:.1f} min -> {out}")


if __name__ == "__main__":
    main()
