"""What a speed benchmark records about the machine it runs on, shared by the
speed benchmarks (`tdmpc2_speed.py`, `dreamerv3_speed.py` and its workers).

- `cpu_info`: CPU model and the SIMD extensions that set the float32 peak;
- `bench_blas_ceiling`: numpy's BLAS rate on one large float32 product (the
  fastest matmul rate any library reaches here);
- `bench_matmul`: the baseline, one jitted float32 matmul in XLA (GFLOP/s);
- `program_flops`: matmul FLOPs (2·M·N·K per dot) of a program, from its jaxpr,
  so a time also reads as a multiple of its matmul floor;
- `time_calls`: wall and process-CPU time of each of repeated calls;
  `median_ms`: their medians after a warm-up;
- `machine_busy`, `LoadProbe`: how much CPU other processes take (cores), so a
  block timed on a busy machine says so;
- `peak_rss_mib`: the process's peak resident memory; `device_memory`: the
  accelerator's bytes in use and peak bytes in use (None on the CPU);
- `seed_count`: the argparse type of a number of vmapped seeds (1 to `MAX_SEEDS`).

Needs only jax and numpy (any version from jax 0.4.28 on): the reference
DreamerV3 driver imports it from its own virtual environment.
"""
from __future__ import annotations

import math
import os
import resource
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


# ---- timing -------------------------------------------------------------------------
def time_calls(fn, repeats: int) -> dict:
    """Wall and process-CPU milliseconds of ``repeats`` calls of ``fn`` (which must
    block until its result is ready): {"wall_ms": [...], "cpu_ms": [...]}."""
    wall, cpu = [], []
    for _ in range(repeats):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return {"wall_ms": wall, "cpu_ms": cpu}


def median_ms(fn, repeats: int, warmup: int = 1) -> tuple[float, list[float], float]:
    """(median wall ms, wall ms list, median process CPU ms) of ``fn()`` after
    ``warmup`` untimed calls (the first compiles); the calls are `time_calls`'.

    The CPU time (all threads of this process) is the steadier figure on a
    machine with other work running; on an idle machine wall is the target."""
    for _ in range(warmup):
        fn()
    t = time_calls(fn, repeats)
    return statistics.median(t["wall_ms"]), t["wall_ms"], statistics.median(t["cpu_ms"])


# ---- the machine's matmul ceiling ---------------------------------------------------
def bench_matmul(repeats: int, n: int = 1024) -> dict:
    """Baseline: float32 rate (GFLOP/s) of one jitted n x n x n matmul, median of
    ``3 * repeats`` calls after compilation."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(jnp.matmul)
    med, _, _ = median_ms(lambda: jax.block_until_ready(f(a, b)), 3 * repeats)
    return {"n": n, "median_ms": med, "gflop_per_s": 2 * n ** 3 / (med * 1e-3) / 1e9}


def bench_blas_ceiling(repeats: int, n: int = 2048) -> dict:
    """The machine's float32 matmul ceiling as a tuned BLAS sees it: numpy's
    (OpenBLAS, all cores) rate for one n x n x n product, median of
    ``3 * repeats`` calls. No program of many mid-sized matmuls and
    element-wise work runs faster than this."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    med, _, _ = median_ms(lambda: a @ b, 3 * repeats)
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return {"n": n, "library": f"numpy {np.__version__}, {blas.get('name', '?')} "
                               f"{blas.get('version', '')}".strip(),
            "median_ms": med, "gflop_per_s": 2 * n ** 3 / (med * 1e-3) / 1e9}


SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_info() -> dict:
    """Model name and the SIMD extensions that set the float32 peak (Linux
    /proc/cpuinfo; {} elsewhere): ``simd`` lists those of `SIMD_FLAGS` present."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("model name")), "?")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                      if ln.startswith("flags")), []))
    return {"model": model, "simd": [f for f in SIMD_FLAGS if f in flags],
            "avx2": "avx2" in flags, "fma": "fma" in flags, "avx512f": "avx512f" in flags}


def allocator_info() -> dict:
    """The C allocator's settings that change XLA's per-call page faults (docs/performance.md
    "Huge pages"): ``glibc_tunables`` (the environment's ``GLIBC_TUNABLES``, inherited by
    every worker of a benchmark) and ``transparent_hugepage`` (the kernel's THP mode, e.g.
    "madvise"; None where unreadable). For the orchestrators only: it imports wmx, which
    the official drivers' environments do not have."""
    from wmx.runs.heap import thp_mode
    return {"glibc_tunables": os.environ.get("GLIBC_TUNABLES"), "transparent_hugepage": thp_mode()}


# ---- matmul FLOPs of a program -----------------------------------------------------
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
    ``fn(*args)``, from its jaxpr (XLA's cost analysis counts a scan body once).

    Dead code is removed first (`pe.dce_jaxpr`, recursively into jit, scan and
    cond): a trace can hold work whose results nothing uses (the official
    DreamerV3's ninjax traces its modules once more to create their state),
    which XLA never runs."""
    from jax._src.interpreters import partial_eval as pe
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    jaxpr, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    return _jaxpr_matmul_flops(jaxpr)


def compiled_memory(compiled) -> dict:
    """XLA's buffer assignment of a compiled program (MiB): arguments, outputs,
    temporaries, and their sum less the aliased (donated) bytes; {} where the
    backend does not report it."""
    try:
        m = compiled.memory_analysis()
    except Exception:   # noqa: BLE001 - backends without the analysis
        return {}
    if m is None or not (m.argument_size_in_bytes or m.output_size_in_bytes):
        return {}   # not reported (jax 0.4.28's CPU client gives zeros)
    mib = 1024.0 ** 2
    arg, out, tmp = (m.argument_size_in_bytes, m.output_size_in_bytes, m.temp_size_in_bytes)
    alias = getattr(m, "alias_size_in_bytes", 0)
    return {"argument_mib": arg / mib, "output_mib": out / mib, "temp_mib": tmp / mib,
            "total_mib": (arg + out + tmp - alias) / mib}


# ---- memory and load ----------------------------------------------------------------
def peak_rss_mib() -> float:
    """This process's peak resident set size (MiB, Linux ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def device_memory() -> dict | None:
    """The first device's memory now: {"bytes_in_use", "peak_bytes_in_use", "bytes_limit"}
    (bytes; a key the backend does not report is None), or None where the backend has
    no memory statistics (XLA's CPU backend). ``peak_bytes_in_use`` is the process's
    peak since it opened the device (JAX has no reset).

    Returns:
      The three figures, or None.
    """
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend reports
        return None
    if not stats:
        return None
    return {k: stats.get(k) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")}


def _busy_and_total_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot (/proc/stat, first line)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)   # idle + iowait
    return sum(f[:8]) - idle, sum(f[:8])


def _proc_jiffies(pid: int) -> int:
    """utime + stime clock ticks of one process (all its threads); 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    f = stat.rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


class LoadProbe:
    """CPU taken by processes other than ``pids`` between `start` and `stop`.

    ``foreign_cores`` = (busy CPU time of the whole machine − CPU time of
    ``pids``) / wall time: 0 on an idle machine, up to the core count when
    other work saturates it. Unlike the load average it does not count this
    benchmark's own recent work (the 1-minute load average still holds ~2 a
    minute after a 2-thread block ends). A VM's steal time counts as foreign.
    Linux only (/proc); None elsewhere. Use `start`/`stop`, or ``with
    LoadProbe(pids) as p:`` and then ``p.result``.
    """

    def __init__(self, pids: list[int]):
        self.pids = list(pids)

    def start(self) -> "LoadProbe":
        self.loadavg = [round(x, 2) for x in os.getloadavg()]
        self.t0 = time.perf_counter()
        try:
            self.busy0, _ = _busy_and_total_jiffies()
        except OSError:
            self.busy0 = None
        self.own0 = sum(_proc_jiffies(p) for p in self.pids)
        return self

    def stop(self) -> dict:
        """{"loadavg": [1, 5, 15 min] at start, "foreign_cores": float | None, "s": wall}."""
        dt = time.perf_counter() - self.t0
        foreign = None
        if self.busy0 is not None and dt > 0:
            busy1, _ = _busy_and_total_jiffies()
            own = sum(_proc_jiffies(p) for p in self.pids) - self.own0
            hz = os.sysconf("SC_CLK_TCK")
            foreign = max(0.0, (busy1 - self.busy0 - own) / hz / dt)
        return {"loadavg": self.loadavg, "foreign_cores": foreign, "s": dt}

    def __enter__(self) -> "LoadProbe":
        return self.start()

    def __exit__(self, *exc) -> None:
        """As a context manager: `stop`'s record in ``self.result``."""
        self.result = self.stop()


def machine_busy(pids: list[int], seconds: float = 1.0) -> dict:
    """`LoadProbe` over ``seconds`` of sleep: the load of other work right now."""
    probe = LoadProbe(pids).start()
    time.sleep(seconds)
    return probe.stop()


# ---- command lines ------------------------------------------------------------------
MAX_SEEDS = 64
"""The most seeds a speed benchmark vmaps in one program (``--online-seeds``)."""


def seed_count(text: str) -> int:
    """argparse type of a number of vmapped seeds: an integer in [1, `MAX_SEEDS`].

    Raises:
      argparse.ArgumentTypeError: anything else (argparse prints it as one line and exits
        with status 2).
    """
    import argparse
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or not 1 <= n <= MAX_SEEDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a seed count: give an integer from 1 to {MAX_SEEDS}")
    return n
