"""`dreamerv3_speed.py`'s wmx worker (``dreamerv3_speed.py --worker``, served by
`_worker.serve`): the timed programs of one size (`_dreamerv3_speed_programs`), or one
online program, kept compiled in their own process; it alone opens the device.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from _dreamerv3_speed_programs import online_program, wmx_inputs, wmx_programs
from _worker import serve


class WmxWorker:
    """wmx's DreamerV3 at one size: jitted update and policy (handlers of `_worker.serve`),
    or one online program (`setup_online`)."""

    def __init__(self):
        self.items = {}

    def setup(self, size: str, obs_dim: int, action_dim: int, batch_size: int,
              batch_length: int, n_envs: int, seed: int = 0,
              compute_dtype: str = "float32", seeds: tuple = ()) -> dict:
        """Build state and inputs (`wmx_inputs`), compile update and policy (one compile
        each, `wmx_programs`) of the paper config at ``size`` computing in
        ``compute_dtype``, and for every count N > 1 in ``seeds`` the pair vmapped over N
        seeds (compiled in threads beside this pair: their ``compile_s`` are wall times
        under that load).

        Returns {"compile_s", "gflop", "memory", "params", "widths", "versions",
        "compute_dtype"}, the reference driver's keys, and "device_memory"
        (`_machine.device_memory` before and after each item's first call, by item;
        None on the CPU).
        """
        import jax
        import numpy as np
        from wmx.agents.dreamerv3 import agent as dv3
        cfg, batch, obs_v, first = wmx_inputs(size, obs_dim, action_dim, batch_size,
                                              batch_length, n_envs, seed, compute_dtype)
        # the trainers' compile options (`wmx.xla_cpu`: XLA's dots on the CPU)
        self.compiler_options = dv3.compiler_options(cfg)
        # the vmapped pairs (--seeds) compile meanwhile in threads (XLA's compiler releases
        # the GIL); their first calls come after this pair's, one after another
        pool = ThreadPoolExecutor(max_workers=max(1, len(set(seeds) - {1})))
        vmapped = [pool.submit(wmx_programs, n, cfg, batch, obs_v, first, seed,
                               self.compiler_options)
                   for n in sorted(set(seeds) - {1})]
        one = wmx_programs(1, cfg, batch, obs_v, first, seed, self.compiler_options)
        compile_s, gflop, memory = one["compile_s"], one["gflop"], one["memory"]
        self.items = dict(one["items"])
        device_mem = {}
        for item in ("policy", "train"):   # warm-up call; the device's peak only grows
            device_mem[item] = _first_call_memory(self.items[item])
        for future in vmapped:
            more = future.result()
            compile_s.update(more["compile_s"])
            gflop.update(more["gflop"])
            memory.update(more["memory"])
            self.items.update(more["items"])
            for item in more["items"]:     # policy, then train
                device_mem[item] = _first_call_memory(self.items[item])
        pool.shutdown()
        counts = dv3.param_counts(cfg)
        return {"compile_s": compile_s, "gflop": gflop, "memory": memory,
                "device_memory": device_mem,
                "params": int(counts["total"]), "compiler_options": self.compiler_options,
                "widths": {"deter": cfg.deter, "hidden": cfg.hidden, "classes": cfg.classes,
                           "units": cfg.units}, "compute_dtype": cfg.compute_dtype,
                "versions": {"jax": jax.__version__, "numpy": np.__version__,
                             "python": sys.version.split()[0]}}

    def time(self, item: str, repeats: int) -> dict:
        """`_machine.time_calls` of one item ("train" or "policy")."""
        from _machine import time_calls
        return time_calls(self.items[item], repeats)

    def setup_online(self, task: str, preset: str, n_envs: int, ticks: int, seed: int = 0,
                     compute_dtype: str = "float32", n_seeds: int = 1) -> dict:
        """Build the online program of a real run and run it past its first update
        (`online_program`), replacing the program an earlier call built (its state is
        dropped first, so the device holds one program's state at a time); the item
        "online" runs its next chunk.

        Returns:
          {"compile_s", "warmup_chunks", "updates_per_chunk" (training steps per chunk,
          each updating every seed), "env_steps_per_chunk" (per seed), "episode_length",
          "action_repeat", "first_update_tick", "model_size", "train_ratio",
          "compute_dtype", "n_seeds", "seeds", "device_memory" (`_machine.device_memory`
          after the warm-up; None on the CPU)}.

        Raises:
          ValueError: an unknown task or preset, or a seed outside [0, 2**32)
            (`OnlineRunConfig`).
        """
        from _machine import device_memory
        self.items = {}                       # the earlier program's state
        run = online_program(task, preset, n_envs, ticks, seed, compute_dtype, n_seeds)
        self.items = {"online": run}
        cfg = run.rc.agent_config
        return {"compile_s": run.compile_s, "warmup_chunks": run.warmup_chunks,
                "updates_per_chunk": run.updates_next_call(),
                "env_steps_per_chunk": run.env_steps_per_call // n_seeds,
                "episode_length": run.rc.task_spec.T, "action_repeat": run.env.action_repeat,
                "first_update_tick": run.first_update_tick, "model_size": cfg.model_size,
                "train_ratio": cfg.train_ratio, "compute_dtype": cfg.compute_dtype,
                "n_seeds": n_seeds, "seeds": list(run.rc.seeds),
                "device_memory": device_memory()}

    def stats(self) -> dict:
        """{"peak_rss_mib", "device_memory": the device's memory_stats() or None}."""
        import jax
        from _machine import peak_rss_mib
        try:
            mem = jax.devices()[0].memory_stats()
        except Exception:  # noqa: BLE001 - not every backend reports
            mem = None
        return {"peak_rss_mib": peak_rss_mib(), "device_memory": mem}


def _first_call_memory(fn) -> dict | None:
    """Call ``fn`` once (its warm-up) and return the device's memory before and after
    (`_machine.device_memory`; the peak is the process's so far, so it includes what the
    items set up earlier hold), or None on the CPU."""
    from _machine import device_memory
    before = device_memory()
    fn()
    after = device_memory()
    if after is None:
        return None
    return {"bytes_in_use_before": (before or {}).get("bytes_in_use"),
            "peak_bytes_in_use": after.get("peak_bytes_in_use"),
            "bytes_limit": after.get("bytes_limit")}


def _backend() -> dict:
    """{"backend", "device_kind"}: the platform this worker's JAX runs on."""
    import jax
    return {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind}


def _matmul(repeats: int) -> dict:
    """`_machine.bench_matmul` in the worker, on its device: the orchestrator never opens
    the device (a TPU takes one process at a time)."""
    from _machine import bench_matmul
    return bench_matmul(repeats)


def worker_main() -> None:
    w = WmxWorker()
    serve({"setup": w.setup, "time": w.time, "setup_online": w.setup_online,
           "stats": w.stats, "backend": _backend, "matmul": _matmul})
