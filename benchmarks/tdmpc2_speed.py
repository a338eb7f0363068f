"""TD-MPC2 speed on this machine: update, planning decision, online throughput.

Writes JSON (default benchmarks/results/tdmpc2_speed.json):

- update time (ms) at model sizes 1 and 5, batch 256 (one jitted update,
  parameters and batch already on device);
- planning-decision time (ms) at model sizes 1 and 5 with the paper planner
  (512 samples, 24 policy trajectories, 64 elites, 6 iterations);
- online env steps/s (simulator steps, all seeds) of the jitted training chunk
  for 1 and 4 vmapped seeds (planning and one update per agent step, after
  the seed phase), at the given preset and task;
- peak resident memory of the process (MiB);
- the machine's baseline, measured in the same run: the float32 matmul rate
  of one jitted 1024 x 1024 x 1024 product (GFLOP/s, both cores), and per
  update and planning decision its matmul FLOP count, so each
  time also reads as a multiple of its matmul-rate floor
  (``floor_ms = matmul flops / rate``; the matmul FLOPs, 2·M·N·K per dot
  product, are counted on the program's jaxpr). The floor moves with the machine (shared
  hosts differ from day to day); the multiple does not;
- the machine's ceiling, also in the same run: numpy's BLAS rate for one
  float32 2048 x 2048 x 2048 product (``blas_ceiling``), the CPU model and
  SIMD extensions (``machine``), and per targeted time the matmul rate it
  would need with everything else free (``target_needs_gflop_per_s``).

Update and planning times also carry ``cpu_median_ms``, the median process
CPU time (all threads) of a call: steadier than wall time when other work
shares the machine (compare variants by it there); the targets are wall
times on an idle machine.

Each time is the median of ``--repeats`` runs after compilation; the
reference figures measured on this 2-core CPU with the official PyTorch
implementation are stored beside them, with the ratios.

    python benchmarks/tdmpc2_speed.py [--repeats 7] [--out FILE] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2.config import make_config
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.agents.tdmpc2.update import Batch, draw_update_noise, init_train_state, update

# Official PyTorch TD-MPC2 (5f6fade) on this 2-core CPU, per the online issue (ms).
PYTORCH_MS = {"update": {1: 119.0, 5: 382.0}, "plan": {1: 159.0, 5: 395.0}}
TARGET_MS = {"update": {5: 190.0}, "plan": {5: 200.0}}


def _median_ms(fn, repeats: int) -> tuple[float, list[float], float]:
    """(median wall ms, wall ms list, median process CPU ms) after one warm-up call.

    The CPU time (all threads of this process) is the steadier figure on a
    machine with other work running; on an idle machine wall is the target."""
    fn()  # compile + warm up
    times, cpu = [], []
    for _ in range(repeats):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return statistics.median(times), times, statistics.median(cpu)


def bench_matmul(repeats: int, n: int = 1024) -> dict:
    """Baseline: float32 rate (GFLOP/s) of one jitted n x n x n matmul, median of
    ``3 * repeats`` calls after compilation."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(jnp.matmul)
    med, _, _ = _median_ms(lambda: jax.block_until_ready(f(a, b)), 3 * repeats)
    return {"n": n, "median_ms": med, "gflop_per_s": 2 * n ** 3 / (med * 1e-3) / 1e9}


def bench_blas_ceiling(repeats: int, n: int = 2048) -> dict:
    """The machine's float32 matmul ceiling as a tuned BLAS sees it: numpy's
    (OpenBLAS, all cores) rate for one n x n x n product, median of
    ``3 * repeats`` calls. No program of many mid-sized matmuls and
    element-wise work runs faster than this."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    med, _, _ = _median_ms(lambda: a @ b, 3 * repeats)
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return {"n": n, "library": f"numpy {np.__version__}, {blas.get('name', '?')} "
                               f"{blas.get('version', '')}".strip(),
            "median_ms": med, "gflop_per_s": 2 * n ** 3 / (med * 1e-3) / 1e9}


def cpu_info() -> dict:
    """Model name and the SIMD extensions that set the float32 peak (Linux /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                  if ln.startswith("flags")), [])
    return {"model": model, "avx2": "avx2" in flags, "fma": "fma" in flags,
            "avx512f": "avx512f" in flags}


def _sub_jaxprs(params: dict) -> list:
    """The jaxprs held in an equation's params (directly or in a tuple/list), unwrapped."""
    out = []
    for v in params.values():
        for item in (v if isinstance(v, (tuple, list)) else (v,)):
            if hasattr(item, "eqns") or hasattr(item, "jaxpr"):
                out.append(getattr(item, "jaxpr", item))
    return out


def _jaxpr_matmul_flops(jaxpr) -> float:
    """2·M·N·K summed over the dot_generals of a jaxpr.

    A scan body counts `length` times, a cond its most expensive branch, a
    while loop's body once (its trip count is not static; the benchmarked
    programs have none)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lc, _), (lb, _) = eqn.params["dimension_numbers"]
            lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            k = math.prod(lhs[i] for i in lc)
            batch = math.prod(lhs[i] for i in lb)
            total += 2.0 * math.prod(lhs) * math.prod(rhs) / (batch * k)   # 2·batch·M·N·K
            continue
        counts = [_jaxpr_matmul_flops(j) for j in _sub_jaxprs(eqn.params)]
        if eqn.primitive.name == "cond":
            counts = [max(counts, default=0.0)]
        mult = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        total += mult * sum(counts)
    return total


def program_flops(fn, *args) -> float:
    """Matmul FLOPs (2·M·N·K per dot, batch dims included) of one call of
    ``fn(*args)``, from its jaxpr (XLA's cost analysis counts a scan body once)."""
    return _jaxpr_matmul_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def bench_update(model_size: int, repeats: int, obs_dim=24, action_dim=6) -> dict:
    cfg = make_config("paper", model_size=model_size, obs_dim=obs_dim, action_dim=action_dim)
    state = init_train_state(jax.random.PRNGKey(0), cfg)
    H, B = cfg.horizon, cfg.batch_size
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    batch = Batch(obs=jax.random.normal(k[0], (H + 1, B, obs_dim)),
                  action=jax.random.uniform(k[1], (H, B, action_dim), minval=-1, maxval=1),
                  reward=jax.random.normal(k[2], (H, B)))
    noise = draw_update_noise(k[3], cfg)

    def run():
        nonlocal state
        state, m = update(state, batch, noise, cfg)
        jax.block_until_ready(m["total_loss"])

    flops = program_flops(lambda s, b, n: update(s, b, n, cfg), state, batch, noise)
    med, times, cpu = _median_ms(run, repeats)
    return {"model_size": model_size, "batch_size": B, "median_ms": med, "times_ms": times,
            "cpu_median_ms": cpu, "gflop": flops / 1e9}


def bench_plan(model_size: int, repeats: int, obs_dim=24, action_dim=6) -> dict:
    cfg = make_config("paper", model_size=model_size, obs_dim=obs_dim, action_dim=action_dim)
    params = init_train_state(jax.random.PRNGKey(0), cfg).params
    obs = jax.random.normal(jax.random.PRNGKey(2), (obs_dim,))
    prev = jnp.zeros((cfg.horizon, action_dim))

    @jax.jit
    def decide(params, obs, prev, key):
        noise = draw_plan_noise(key, cfg, False)
        return plan(params, obs, prev, jnp.bool_(False), noise, cfg, eval_mode=False)

    key = [jax.random.PRNGKey(3)]

    def run():
        key[0], sub = jax.random.split(key[0])
        a, m, _ = decide(params, obs, prev, sub)
        jax.block_until_ready(a)

    flops = program_flops(decide, params, obs, prev, key[0])
    med, times, cpu = _median_ms(run, repeats)
    return {"model_size": model_size, "num_samples": cfg.num_samples,
            "iterations": cfg.planning_iterations, "median_ms": med, "times_ms": times,
            "cpu_median_ms": cpu, "gflop": flops / 1e9}


def bench_online(n_seeds: int, task: str, preset: str, repeats: int) -> dict:
    from wmx.envs.playground import cached_env
    from wmx.runs.online_config import OnlineRunConfig
    from wmx.train_online import program
    T = 100
    rc = OnlineRunConfig(task=task, seeds=tuple(range(n_seeds)), env_steps=T * 2 * (3 + repeats),
                         preset=preset, agent_overrides={"seed_steps": T},
                         episode_length=T)
    env = cached_env(rc.task, rc.episode_length)
    carries = program.init_carries(rc, env)
    chunk = program.make_chunk_fn(rc, env)
    ticks_per_round = T + 1
    # rounds 0-2: seed phase, burst, and a first planning round (all chunks
    # have the same length, so one compilation serves the timed rounds too)
    for r in range(3):
        carries, _ = chunk(carries, np.arange(r * ticks_per_round, (r + 1) * ticks_per_round,
                                              dtype=np.int32))
    jax.block_until_ready(carries.n_updates)
    start = 3 * ticks_per_round
    times = []
    for r in range(repeats):
        ticks = np.arange(start, start + ticks_per_round, dtype=np.int32)
        t = time.perf_counter()
        carries, _ = chunk(carries, ticks)
        jax.block_until_ready(carries.n_updates)
        times.append(time.perf_counter() - t)
        start += ticks_per_round
    med = statistics.median(times)
    steps = T * n_seeds * env.action_repeat
    return {"n_seeds": n_seeds, "task": task, "preset": preset, "episode_length": T,
            "env_steps_per_s": steps / med, "round_s_median": med, "round_s": times}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=None,
                   help="JSON to write (default benchmarks/results/tdmpc2_speed.json; "
                        "tdmpc2_speed_no_online.json with --no-online, so a partial run "
                        "never replaces the full record)")
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--preset", default="cpu", help="preset of the online throughput runs")
    p.add_argument("--quick", action="store_true", help="fewer repeats, online 1 seed only")
    p.add_argument("--no-online", action="store_true",
                   help="skip the online throughput runs (update, planning and baseline only)")
    args = p.parse_args()
    reps = 3 if args.quick else args.repeats
    res: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                             "jax": jax.__version__, "backend": jax.default_backend(),
                             **cpu_info()},
                 "repeats": reps, "pytorch_reference_ms": PYTORCH_MS, "target_ms": TARGET_MS}
    res["blas_ceiling"] = bench_blas_ceiling(reps)
    res["matmul_baseline"] = bench_matmul(reps)
    res["update"] = [bench_update(s, reps) for s in (1, 5)]
    res["plan"] = [bench_plan(s, reps) for s in (1, 5)]
    res["matmul_baseline_after"] = bench_matmul(reps)
    rate = statistics.mean([res["matmul_baseline"]["gflop_per_s"],
                            res["matmul_baseline_after"]["gflop_per_s"]])
    for kind in ("update", "plan"):
        for r in res[kind]:
            r["speedup_vs_pytorch"] = PYTORCH_MS[kind][r["model_size"]] / r["median_ms"]
            r["matmul_floor_ms"] = r["gflop"] / rate * 1e3
            r["x_floor"] = r["median_ms"] / r["matmul_floor_ms"]
            target = TARGET_MS[kind].get(r["model_size"])
            if target is not None:   # the matmul rate the target asks for, all else free
                r["target_needs_gflop_per_s"] = r["gflop"] / (target * 1e-3)
    if not args.no_online:
        res["online"] = [
            bench_online(n, args.task, args.preset, max(2, reps // 2))
            for n in ((1,) if args.quick else (1, 4))]
    res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = Path(args.out or ("benchmarks/results/tdmpc2_speed_no_online.json" if args.no_online
                            else "benchmarks/results/tdmpc2_speed.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    for kind in ("update", "plan"):
        for r in res[kind]:
            print(f"{kind:6s} size {r['model_size']}: {r['median_ms']:7.1f} ms "
                  f"(PyTorch {PYTORCH_MS[kind][r['model_size']]:.0f} ms, "
                  f"x{r['speedup_vs_pytorch']:.2f}; {r['gflop']:.1f} GFLOP, "
                  f"{r['x_floor']:.2f} x the matmul floor {r['matmul_floor_ms']:.0f} ms)")
    for r in res.get("online", []):
        print(f"online {r['n_seeds']} seed(s): {r['env_steps_per_s']:.0f} env steps/s")
    print(f"baseline f32 matmul {rate:.0f} GFLOP/s (jax); BLAS ceiling "
          f"{res['blas_ceiling']['gflop_per_s']:.0f} GFLOP/s (numpy, n=2048)")
    for kind in ("update", "plan"):
        for r in res[kind]:
            if "target_needs_gflop_per_s" in r:
                print(f"{kind} target {TARGET_MS[kind][r['model_size']]:.0f} ms needs "
                      f"{r['target_needs_gflop_per_s']:.0f} GFLOP/s of matmuls alone")
    print(f"peak RSS {res['peak_rss_mib']:.0f} MiB -> {out}")


if __name__ == "__main__":
    main()
