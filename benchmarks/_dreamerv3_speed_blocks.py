"""`dreamerv3_speed.py`'s timing: timed blocks with the load rule (a loaded block is
repeated), the medians and official / wmx ratios over rounds, the items' names, and the
online throughput at each preset and seed count (the ``online`` record).
"""
from __future__ import annotations

import statistics

from _worker import Worker

TARGET_RATIO = 2.0


class Blocks:
    """Timed blocks with the load rule of `dreamerv3_speed`'s docstring (Method)."""

    def __init__(self, pids, threshold: float, retries: int):
        self.pids, self.threshold, self.retries = pids, threshold, retries

    def _over(self, probe: dict) -> bool:
        f = probe["foreign_cores"]
        return f is not None and f > self.threshold

    def run(self, worker: Worker, item: str, calls: int) -> dict:
        """One block of ``calls`` timed calls; repeated while loaded (≤ retries times)."""
        from _machine import LoadProbe, machine_busy
        attempts = []
        for _ in range(1 + self.retries):
            before = machine_busy(self.pids(), 1.0)
            probe = LoadProbe(self.pids()).start()
            res = worker.call("time", item=item, repeats=calls)
            during = probe.stop()
            attempts.append({
                "median_ms": statistics.median(res["wall_ms"]),
                "cpu_median_ms": statistics.median(res["cpu_ms"]),
                "wall_ms": res["wall_ms"], "cpu_ms": res["cpu_ms"],
                "loadavg_before": before["loadavg"],
                "foreign_cores_before": before["foreign_cores"],
                "foreign_cores_during": during["foreign_cores"],
                "loaded": self._over(before) or self._over(during)})
            if not attempts[-1]["loaded"]:
                break
        return {**attempts[-1], "attempts": len(attempts), "earlier_attempts": attempts[:-1]}


def _summary(wmx_blocks: list[dict], ref_blocks: list[dict] | None) -> dict:
    """Medians over rounds of the block medians, and the official / wmx ratios."""
    def side(blocks):
        return {"median_ms": statistics.median(b["median_ms"] for b in blocks),
                "cpu_median_ms": statistics.median(b["cpu_median_ms"] for b in blocks),
                "loaded_blocks": sum(b["loaded"] for b in blocks), "blocks": blocks}
    out = {"wmx": side(wmx_blocks)}
    loaded = any(b["loaded"] for b in wmx_blocks)
    if ref_blocks:
        out["official"] = side(ref_blocks)
        loaded |= any(b["loaded"] for b in ref_blocks)
        per_round = [r["median_ms"] / w["median_ms"] for w, r in zip(wmx_blocks, ref_blocks)]
        clean = [x for x, w, r in zip(per_round, wmx_blocks, ref_blocks)
                 if not (w["loaded"] or r["loaded"])]
        out["ratio"] = out["official"]["median_ms"] / out["wmx"]["median_ms"]
        out["ratio_cpu"] = out["official"]["cpu_median_ms"] / out["wmx"]["cpu_median_ms"]
        out["ratio_rounds"] = per_round
        out["ratio_rounds_median"] = statistics.median(per_round)
        out["ratio_clean_rounds_median"] = statistics.median(clean) if clean else None
        out["meets_target"] = out["ratio"] >= TARGET_RATIO
    out["loaded"] = loaded
    return out


def _item_name(kind: str, size: str, seeds: int) -> str:
    """The record's name of an item: ``train_12m``, or ``train_12m_seeds5`` vmapped."""
    return f"{kind}_{size}" + (f"_seeds{seeds}" if seeds > 1 else "")


def run_online(start, stop, blocks: "Blocks", presets: list[str], seed_counts: list[int],
               task: str, n_envs: int, ticks: int, rounds: int, compute_dtype: str,
               seed: int = 0) -> list[dict]:
    """Time wmx's online program at each preset and seed count (the ``online`` record).

    One worker per preset (``start(preset)`` -> `_worker.Worker`, all started before the
    first seed count; ``stop(worker)`` after the last), so a run with one preset holds one
    process on the device. For each seed count in turn (``seed_counts``, rising), every
    preset's worker builds its program with that many seeds vmapped
    (`WmxWorker.setup_online`, replacing the previous count's), then ``rounds`` rounds
    time one chunk per preset each (``blocks.run``, presets interleaved). A worker that
    fails raises (`_worker.WorkerError`) and is left to the caller to close.

    Returns:
      One `_online_entry` per seed count and preset, seed counts outer.
    """
    workers = {preset: start(preset) for preset in presets}
    entries = []
    for n in seed_counts:
        for preset, w in workers.items():   # compiled concurrently, one per preset
            w.send("setup_online", task=task, preset=preset, n_envs=n_envs, ticks=ticks,
                   compute_dtype=compute_dtype, seed=seed, n_seeds=n)
        infos = {preset: w.recv() for preset, w in workers.items()}
        chunks: dict = {preset: [] for preset in workers}
        for rnd in range(rounds):
            for preset, w in workers.items():
                b = blocks.run(w, "online", 1)
                b["round"] = rnd
                chunks[preset].append(b)
                print(f"round {rnd} online {preset}, {n} seed(s): "
                      f"{b['median_ms'] / 1e3:.1f} s per chunk"
                      f"{' (loaded)' if b['loaded'] else ''}", flush=True)
        entries += [_online_entry(preset, task, n_envs, ticks, infos[preset], chunks[preset])
                    for preset in workers]
    for w in workers.values():
        stop(w)
    return entries


def _online_entry(preset: str, task: str, n_envs: int, ticks: int, info: dict,
                  blocks: list[dict]) -> dict:
    """One ``online`` record: the worker's `WmxWorker.setup_online` facts (``info``) and
    the timed chunks (``blocks``, one call each, ``median_ms`` the chunk's wall time).

    Adds "chunk_s_median" (s), "env_steps_per_s" (simulator steps per second of all seeds
    together), "env_steps_per_s_per_seed", "updates_per_s" (training steps per second,
    each updating every seed), "loaded" (any block loaded) and "blocks".
    """
    med_s = statistics.median(b["median_ms"] for b in blocks) / 1e3
    per_seed = info["env_steps_per_chunk"] / med_s
    return {"preset": preset, "task": task, "n_envs": n_envs, "ticks_per_chunk": ticks,
            **info, "chunk_s_median": med_s, "env_steps_per_s": per_seed * info["n_seeds"],
            "env_steps_per_s_per_seed": per_seed,
            "updates_per_s": info["updates_per_chunk"] / med_s,
            "loaded": any(b["loaded"] for b in blocks), "blocks": blocks}


def _online_line(o: dict) -> str:
    """The summary line of one `_online_entry`."""
    return (f"online {o['preset']:6s} {o['task']}, {o['n_seeds']} seed(s): "
            f"{o['env_steps_per_s_per_seed']:.1f} env steps/s per seed, "
            f"{o['env_steps_per_s']:.1f} in total ({o['updates_per_s']:.2f} training steps/s)"
            f"{'  [LOADED]' if o['loaded'] else ''}")
