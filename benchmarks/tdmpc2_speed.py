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
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2.config import make_config
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.agents.tdmpc2.update import Batch, draw_update_noise, init_train_state, update

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import (bench_blas_ceiling, bench_matmul, cpu_info,  # noqa: E402,F401
                      median_ms, program_flops)

# Official PyTorch TD-MPC2 (5f6fade) on this 2-core CPU, per the online issue (ms).
PYTORCH_MS = {"update": {1: 119.0, 5: 382.0}, "plan": {1: 159.0, 5: 395.0}}
TARGET_MS = {"update": {5: 190.0}, "plan": {5: 200.0}}


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
    med, times, cpu = median_ms(run, repeats)
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
    med, times, cpu = median_ms(run, repeats)
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
