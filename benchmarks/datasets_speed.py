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

`--scale` measures instead the streaming readers on synthetic mt80-shaped
datasets larger than memory would like (``wmx dataset synth``; default 1M and
10M rows): peak RSS of the reader process against RSS_BOUND_MB, time to the
first batch, slices/s cold (page cache evicted) and warm, and the ratio to
the trainer's consumption at the datasets' dims (obs 39, action 6). JSON:
benchmarks/results/datasets_speed_scale.json.

    python benchmarks/datasets_speed.py --scale [--scale-rows 1000000 10000000]
        [--repeats 3] [--scale-batches 30] [--work DIR (kept)]
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
    import jax
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
    import jax
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


def bench_trainer(model_size: int, repeats: int, obs_dim: int = 24,
                  action_dim: int = 6) -> dict:
    """Offline trainer consumption: one TD-MPC2 `update` (paper preset, batch
    1024) on an obs_dim/action_dim task; median ms per update and slices/s."""
    import jax
    from wmx.agents.tdmpc2.config import make_config
    from wmx.agents.tdmpc2.update import Batch, draw_update_noise, init_train_state, update
    cfg = make_config("paper", model_size=model_size, obs_dim=obs_dim,
                      action_dim=action_dim, batch_size=BATCH)
    state = init_train_state(jax.random.PRNGKey(0), cfg)
    Hc, B = cfg.horizon, cfg.batch_size
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    batch = Batch(obs=jax.random.normal(k[0], (Hc + 1, B, obs_dim)),
                  action=jax.random.uniform(k[1], (Hc, B, action_dim), minval=-1, maxval=1),
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
            "obs_dim": obs_dim, "action_dim": action_dim,
            "median_ms": med * 1e3, "times_ms": [x * 1e3 for x in times],
            "slices_per_s": B / med}

# --------------------------------------------------------------------- scale
#
# `--scale`: the streaming readers on synthetic mt80-shaped datasets of
# several sizes (wmx.datasets.synth; default 1M and 10M rows). Each reader
# runs in a fresh process (`--probe`, no JAX imported) so its peak RSS is the
# reader's alone; the dataset's pages are evicted from the page cache
# (posix_fadvise DONTNEED on its shard files) before the first, "cold", run.

RSS_BOUND_MB = 1536
"""Bound on a streaming reader process's peak RSS (MB), whatever the dataset
size; `--scale` records each probe's peak against it."""

SCALE_READERS = (
    {"reader": "slices", "batch": BATCH, "H": H, "slices_per_episode": 1,
     "num_threads": 8, "num_workers": 0},
    {"reader": "slices", "batch": BATCH, "H": H, "slices_per_episode": 4,
     "num_threads": 8, "num_workers": 0},
    {"reader": "windows", "batch": 16, "length": 65, "slices_per_episode": 1,
     "num_threads": 8, "num_workers": 0},
)
"""Reader settings measured by `--scale`: TD-MPC2 slices (batch 1024, H=3) at
the default setting and at 4 slices per episode read; DreamerV3 windows
(batch 16, 65 rows)."""


def machine_facts() -> dict:
    """CPU model (/proc/cpuinfo), core count, memory, load average, platform."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import psutil
    return {"cpu_model": model, "cpus": os.cpu_count(), "platform": platform.platform(),
            "memory_gb": round(psutil.virtual_memory().total / 2 ** 30, 1),
            "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def evict_page_cache(ds_path: Path) -> None:
    """Drop the dataset's shard files from the page cache (posix_fadvise
    DONTNEED; only these files' clean pages, nothing else on the machine)."""
    for f in Path(ds_path).glob("shard-*"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def stream_probe(spec: dict) -> dict:
    """One streaming-reader measurement, meant for a fresh process.

    spec: path, reader ("slices" | "windows"), batch, H or length,
    slices_per_episode, num_threads, num_workers, seed, warmup, batches.
    Returns (seconds, MB): import_s; open_s (open_dataset without shard
    verification); first_batch_s (from before open_dataset to the first
    batch: the start-up time); items_per_s (slices or windows per second over
    `batches` batches after `warmup`); rss_after_import_mb; rss_max_mb
    (largest RSS sampled after each batch); peak_rss_mb (ru_maxrss of the
    process, or a larger sampled RSS: the kernel updates ru_maxrss lazily, up
    to a few hundred KB behind)."""
    import resource
    import psutil
    proc = psutil.Process()
    t = time.perf_counter()
    import grain  # noqa: F401 - imported here so that first_batch_s excludes it
    from array_record.python import array_record_module  # noqa: F401
    from wmx.datasets.readers import open_dataset, stream_slices, stream_windows
    import_s = time.perf_counter() - t
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    ds = open_dataset(spec["path"])
    open_s = time.perf_counter() - t0
    kw = dict(slices_per_episode=spec["slices_per_episode"],
              num_threads=spec["num_threads"], num_workers=spec["num_workers"])
    if spec["reader"] == "slices":
        s = stream_slices(ds, spec["batch"], spec["H"], seed=spec["seed"], **kw)
        shape = (spec["H"] + 1, spec["batch"], ds.taskset.max_obs_dim)
    else:
        s = stream_windows(ds, spec["batch"], seed=spec["seed"], length=spec["length"], **kw)
        shape = (spec["batch"], spec["length"], ds.taskset.max_obs_dim)
    b = next(s)
    first = time.perf_counter() - t0
    assert b["obs"].shape == shape, (b["obs"].shape, shape)
    for _ in range(spec["warmup"]):
        next(s)
    rss_max = proc.memory_info().rss
    t = time.perf_counter()
    for _ in range(spec["batches"]):
        b = next(s)
        rss_max = max(rss_max, proc.memory_info().rss)
    dt = time.perf_counter() - t
    mb = 2 ** 20
    return {"import_s": import_s, "open_s": open_s, "first_batch_s": first,
            "items_per_s": spec["batches"] * spec["batch"] / dt,
            "rss_after_import_mb": rss0 / mb, "rss_max_mb": rss_max / mb,
            "peak_rss_mb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                               rss0, rss_max) / mb}


def run_probe(spec: dict) -> dict:
    """stream_probe(spec) in a fresh Python process; its JSON result."""
    import subprocess
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe",
                        json.dumps(spec)], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"probe {spec} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_scale(path: Path, repeats: int, batches: int) -> list[dict]:
    """Every SCALE_READERS setting on the dataset at `path`: one cold run
    (pages evicted first), then `repeats` warm runs, each in a new process.
    The warm-up (2 x threads + 4 batches) drains what the prefetch threads
    made while the first batch was awaited, so the timed batches measure the
    steady production rate."""
    out = []
    for cfg in SCALE_READERS:
        n = batches if cfg["reader"] == "slices" else batches * 8
        spec = dict(cfg, path=str(path), seed=0, warmup=2 * cfg["num_threads"] + 4,
                    batches=n)
        evict_page_cache(path)
        cold = run_probe(spec)
        warm = [run_probe(dict(spec, seed=r + 1)) for r in range(repeats)]
        med = {k: _median([w[k] for w in warm]) for k in warm[0]}
        peak = max([cold["peak_rss_mb"]] + [w["peak_rss_mb"] for w in warm])
        r = dict(cfg, batches=n, cold=cold, warm_runs=warm, warm_median=med,
                 peak_rss_mb=peak, rss_bound_mb=RSS_BOUND_MB,
                 within_rss_bound=peak <= RSS_BOUND_MB)
        out.append(r)
        unit = "slices" if cfg["reader"] == "slices" else "windows"
        print(f"  {cfg['reader']} k={cfg['slices_per_episode']}: {med['items_per_s']:.0f} "
              f"{unit}/s warm ({cold['items_per_s']:.0f} cold), first batch "
              f"{med['first_batch_s']:.2f} s warm / {cold['first_batch_s']:.2f} s cold, "
              f"peak RSS {peak:.0f} MB", flush=True)
    return out


def main_scale(args) -> int:
    """`--scale`: synthetic datasets of each `--scale-rows`, the readers on
    each, the trainer's consumption at the datasets' dims, JSON to --scale-out.
    The datasets are removed at the end unless --work is given."""
    from wmx.datasets.synth import mt80_like_taskset, write_synthetic_dataset
    work = Path(args.work or tempfile.mkdtemp(prefix="wmx-dsscale-"))
    t0 = time.perf_counter()
    machine_start = machine_facts()
    sizes = []
    try:
        for rows in args.scale_rows:
            home = work / f"rows-{rows}"
            r = write_synthetic_dataset(home, rows, seed=0)
            print(f"synthetic {rows} rows: {r.episodes} episodes, {r.bytes / 1e9:.2f} GB, "
                  f"written in {r.digest_s + r.write_s:.0f} s", flush=True)
            from wmx.datasets.readers import open_dataset
            man = open_dataset(r.path).manifest
            sizes.append({"rows_requested": rows, "rows": r.rows, "episodes": r.episodes,
                          "shards": len(man.shards), "shard_bytes": r.bytes,
                          "content_hash": r.content_hash,
                          "write_s": {"digest_pass": r.digest_s, "write_pass": r.write_s},
                          "readers": bench_scale(r.path, args.repeats, args.scale_batches)})
            if args.work is None:
                shutil.rmtree(home, ignore_errors=True)
        ts = mt80_like_taskset()
        trainer = [bench_trainer(m, max(3, args.repeats) if not args.quick else 1,
                                 ts.max_obs_dim, ts.max_action_dim)
                   for m in ((5, 1) if not args.quick else (1,))]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    import jax
    ratios = {}
    for sz in sizes:
        for r in sz["readers"]:
            if r["reader"] != "slices":
                continue
            name = f"rows_{sz['rows_requested']}_k{r['slices_per_episode']}"
            ratios[name] = {f"vs_model_size_{t['model_size']}":
                            r["warm_median"]["items_per_s"] / t["slices_per_s"]
                            for t in trainer}
            ratios[name].update({f"cold_vs_model_size_{t['model_size']}":
                                 r["cold"]["items_per_s"] / t["slices_per_s"]
                                 for t in trainer})
    result = {
        "benchmark": "datasets_speed --scale", "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": dict(machine_start, loadavg_end=[round(x, 2) for x in os.getloadavg()],
                        jax=jax.__version__, backend=jax.default_backend(),
                        note="shared CPU, other jobs running: absolute numbers are noisy, "
                             "ratios are within one run"),
        "dataset": {"kind": "synthetic mt80-shaped (wmx dataset synth): 80 tasks, obs "
                            "padded to 39, actions to 6, T=500", "seed": 0},
        "repeats": args.repeats, "rss_bound_mb": RSS_BOUND_MB, "sizes": sizes,
        "trainer": trainer, "ratio_reader_over_trainer": ratios, "target_ratio": 5.0,
        "total_s": time.perf_counter() - t0,
    }
    out = Path(args.scale_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(ratios, indent=1))
    print("wrote", out)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes-per-task", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"
                                         / "datasets_speed.json"))
    ap.add_argument("--work", default=None, help="scratch dir (default: a temp dir, removed)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run "
                    "(with --scale: the model-size-1 trainer only, once)")
    ap.add_argument("--scale", action="store_true",
                    help="instead: streaming readers on synthetic mt80-shaped datasets of "
                         "--scale-rows rows (peak RSS, start-up, throughput vs the trainer)")
    ap.add_argument("--scale-rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--scale-batches", type=int, default=30,
                    help="timed slice batches per probe (windows: 8x as many)")
    ap.add_argument("--scale-out", default=str(Path(__file__).resolve().parent / "results"
                                               / "datasets_speed_scale.json"))
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe is not None:
        print(json.dumps(stream_probe(json.loads(args.probe))))
        return 0
    if args.scale:
        return main_scale(args)
    import jax
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
