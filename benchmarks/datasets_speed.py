"""Dataset pipeline speed on this machine: Beam build, in-memory load, readers.

Writes JSON (default benchmarks/results/datasets_speed.json):

- build: episodes/s of the real Beam build (``wmx.pipelines.sources.run_build``,
  DirectRunner) from episode sets written with the real writer, at 1 worker
  (in_memory and multi_processing modes) and 2 workers (multi_processing);
- load: seconds per GB to read every shard into host arrays
  (``load_numpy``) and into device arrays (``load_in_memory``);
- readers: TD-MPC2 slices/s (batch 1024, H=3) from the in-jit in-memory
  sampler (``sample_slices``) and from the streaming Grain pipeline
  (``stream_slices``) at several slices-per-episode and thread/worker settings;
- trainer: the offline trainer's consumption, one batch of 1024 slices per
  update, measured as the update throughput of ``wmx.agents.tdmpc2.update.update``
  (paper preset, obs 24, action 6, batch 1024) at model sizes 5 and 1;
- ratios: reader slices/s / trainer slices/s, all measured in this run
  (target >= 5 so the loader is never the bottleneck).

Every figure is the median of ``--repeats`` runs after a warm-up. The
dataset is synthetic but mt19-shaped: the 19 mt19 tasks with their real dims,
T = 500 (501 rows), ``--episodes-per-task`` random episodes per task.

    python benchmarks/datasets_speed.py [--episodes-per-task 160] [--repeats 3]
        [--out FILE] [--work DIR] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from wmx.schemas import episode as schema  # noqa: E402

H, BATCH = 3, 1024


def _median(xs):
    return float(statistics.median(xs))


def synthetic_episode(rng, T, O, A):
    """A valid random episode of T agent steps (obs-aligned rows)."""
    obs = rng.standard_normal((T + 1, O), dtype=np.float32)
    act = rng.uniform(-1, 1, size=(T + 1, A)).astype(np.float32)
    act[-1] = 0
    rew = rng.uniform(0, 1, size=T + 1).astype(np.float32)
    rew[0] = 0
    first = np.zeros(T + 1, bool); first[0] = True
    last = np.zeros(T + 1, bool); last[-1] = True
    return schema.make_episode(obs, act, rew, first, last, np.zeros(T + 1, bool))


def write_sources(home: Path, episodes_per_task: int, seed: int = 0) -> dict:
    """One episode set per mt19 task, written with the real writer."""
    from wmx.episode_sets.episode_set import write_episode_set
    from wmx.datasets.store import Store
    from wmx.schemas.manifest import Producer
    from wmx.schemas.taskset import mt19
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    for i, task in enumerate(mt19().tasks):
        eps = (synthetic_episode(rng, task.episode_length, task.obs_dim, task.action_dim)
               for _ in range(episodes_per_task))
        write_episode_set(Store(home), task, eps,
                          Producer(run_id=f"bench-{i}", agent="random", config_hash="none",
                                   seed=i, code_version="bench"), versions={"bench": "0"})
    size = sum(f.stat().st_size for f in (home / "episodes").rglob("*") if f.is_file())
    return {"episode_sets": len(mt19()), "episodes": episodes_per_task * len(mt19()),
            "bytes": size, "write_s": time.perf_counter() - t}


def bench_build(home: Path, repeats: int, modes) -> tuple[list[dict], Path]:
    from wmx.pipelines.sources import make_plan, run_build
    from wmx.schemas.taskset import mt19
    out, dest = [], None
    for mode, workers in modes:
        args = [f"--direct_num_workers={workers}", f"--direct_running_mode={mode}"]
        times = []
        for _ in range(repeats):
            plan = make_plan(home, mt19(), num_shards=None)
            n = sum(s.num_episodes for s in plan.sources)
            t = time.perf_counter()
            dest = run_build(plan, args)
            times.append(time.perf_counter() - t)
        med = _median(times)
        out.append({"runner": "DirectRunner", "mode": mode, "workers": workers,
                    "episodes": n, "shards": plan.num_shards, "median_s": med,
                    "times_s": times, "episodes_per_s": n / med})
        print(f"build {mode} x{workers}: {n / med:.1f} episodes/s ({med:.1f} s)", flush=True)
    return out, dest


def bench_load(ds, repeats: int) -> dict:
    from wmx.datasets.readers import load_in_memory, load_numpy
    gb = sum(s.size_bytes for s in ds.manifest.shards) / 1e9
    host, dev = [], []
    for _ in range(repeats):
        t = time.perf_counter(); data = load_numpy(ds); host.append(time.perf_counter() - t)
        del data
        t = time.perf_counter()
        data = load_in_memory(ds)
        jax.block_until_ready(data)
        dev.append(time.perf_counter() - t)
    arr_gb = sum(v.nbytes for v in data.values()) / 1e9
    del data
    r = {"shard_gb": gb, "array_gb": arr_gb,
         "host_median_s": _median(host), "host_s_per_gb": _median(host) / gb,
         "device_median_s": _median(dev), "device_s_per_gb": _median(dev) / gb,
         "host_times_s": host, "device_times_s": dev}
    print(f"load: {r['host_s_per_gb']:.2f} s/GB host, {r['device_s_per_gb']:.2f} s/GB device",
          flush=True)
    return r


def bench_in_memory(ds, repeats: int, calls: int) -> dict:
    from wmx.datasets.readers import load_in_memory
    from wmx.datasets.samplers import sample_slices
    data = load_in_memory(ds)
    fn = jax.jit(sample_slices, static_argnums=(2, 3))
    key = jax.random.PRNGKey(0)
    jax.block_until_ready(fn(data, key, BATCH, H))
    rates = []
    for r in range(repeats):
        keys = jax.random.split(jax.random.PRNGKey(r + 1), calls)
        t = time.perf_counter()
        for k in keys:
            out = fn(data, k, BATCH, H)
        jax.block_until_ready(out)
        rates.append(calls * BATCH / (time.perf_counter() - t))
    print(f"in-memory sampler: {_median(rates):.0f} slices/s", flush=True)
    return {"reader": "in_memory sample_slices (jit)", "batch": BATCH, "H": H,
            "slices_per_s": _median(rates), "runs": rates}


def bench_stream(ds, repeats: int, batches: int, slices_per_episode: int,
                 num_threads: int, num_workers: int) -> dict:
    from wmx.datasets.readers import stream_slices
    rates = []
    for r in range(repeats):
        s = stream_slices(ds, BATCH, H, seed=r, slices_per_episode=slices_per_episode,
                          num_threads=num_threads, num_workers=num_workers)
        for _ in range(3):  # warm-up: pipeline start, prefetch fill, workers
            next(s)
        t = time.perf_counter()
        for _ in range(batches):
            b = next(s)
        rates.append(batches * BATCH / (time.perf_counter() - t))
        assert b["obs"].shape == (H + 1, BATCH, ds.taskset.max_obs_dim)
        del s
    med = _median(rates)
    print(f"stream k={slices_per_episode} threads={num_threads} workers={num_workers}: "
          f"{med:.0f} slices/s", flush=True)
    return {"reader": "stream_slices (Grain)", "batch": BATCH, "H": H,
            "slices_per_episode": slices_per_episode, "num_threads": num_threads,
            "num_workers": num_workers, "slices_per_s": med, "runs": rates}


def bench_trainer(model_size: int, repeats: int) -> dict:
    from wmx.agents.tdmpc2.config import make_config
    from wmx.agents.tdmpc2.update import Batch, draw_update_noise, init_train_state, update
    cfg = make_config("paper", model_size=model_size, obs_dim=24, action_dim=6,
                      batch_size=BATCH)
    state = init_train_state(jax.random.PRNGKey(0), cfg)
    Hc, B = cfg.horizon, cfg.batch_size
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    batch = Batch(obs=jax.random.normal(k[0], (Hc + 1, B, 24)),
                  action=jax.random.uniform(k[1], (Hc, B, 6), minval=-1, maxval=1),
                  reward=jax.random.normal(k[2], (Hc, B)), task=None)
    noise = draw_update_noise(k[3], cfg)
    state, m = update(state, batch, noise, cfg)  # compile
    jax.block_until_ready(m)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        state, m = update(state, batch, noise, cfg)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t)
    med = _median(times)
    print(f"trainer model size {model_size}: {med * 1e3:.0f} ms/update, "
          f"{B / med:.0f} slices/s", flush=True)
    return {"update": "wmx.agents.tdmpc2.update.update", "preset": "paper",
            "model_size": model_size, "batch_size": B, "horizon": Hc,
            "median_ms": med * 1e3, "times_ms": [x * 1e3 for x in times],
            "slices_per_s": B / med}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes-per-task", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                         / "datasets_speed.json"))
    ap.add_argument("--work", default=None, help="scratch dir (default: a temp dir, removed)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.episodes_per_task, args.repeats = 4, 1
    work = Path(args.work or tempfile.mkdtemp(prefix="wmx-dsbench-"))
    home = work / "home"
    t0 = time.perf_counter()
    try:
        src = write_sources(home, args.episodes_per_task)
        print(f"sources: {src['episodes']} episodes, {src['bytes'] / 1e6:.0f} MB", flush=True)
        modes = [("in_memory", 1), ("multi_processing", 1), ("multi_processing", 2)]
        build, dest = bench_build(home, max(1, args.repeats - 1) if not args.quick else 1,
                                  modes)
        from wmx.datasets.readers import open_dataset
        ds = open_dataset(dest, verify=True)
        load = bench_load(ds, args.repeats)
        trainer = [bench_trainer(5, max(3, args.repeats)),
                   bench_trainer(1, max(3, args.repeats))]
        readers = [bench_in_memory(ds, args.repeats, 20 if not args.quick else 2)]
        nb = 20 if not args.quick else 2
        for k, threads, workers in [(1, 8, 0), (4, 8, 0), (1, 8, 2)]:
            readers.append(bench_stream(ds, args.repeats, nb, k, threads, workers))
        ratios = {}
        for r in readers:
            name = ("in_memory" if r["reader"].startswith("in_memory") else
                    f"stream_k{r['slices_per_episode']}_t{r['num_threads']}"
                    f"_w{r['num_workers']}")
            ratios[name] = {f"vs_model_size_{t['model_size']}":
                            r["slices_per_s"] / t["slices_per_s"] for t in trainer}
        result = {
            "benchmark": "datasets_speed", "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "jax": jax.__version__, "backend": jax.default_backend(),
                        "note": "2 shared CPU cores, other jobs running: absolute "
                                "numbers are noisy, ratios are within one run"},
            "dataset": {"kind": "synthetic, mt19-shaped (19 tasks, real dims, T=500)",
                        "episodes": ds.num_episodes, "episodes_per_task": args.episodes_per_task,
                        "shards": len(ds.manifest.shards),
                        "pooled_bytes": sum(s.size_bytes for s in ds.manifest.shards),
                        "source_bytes": src["bytes"], "content_hash": ds.content_hash},
            "repeats": args.repeats, "build": build, "load": load, "trainer": trainer,
            "readers": readers, "ratio_reader_over_trainer": ratios,
            "target_ratio": 5.0, "total_s": time.perf_counter() - t0,
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(ratios, indent=1))
        print("wrote", out)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
