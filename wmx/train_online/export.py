"""Export of every completed episode of an online run as episode sets.

After each chunk the host copies the rounds completed in the chunk out of
the device ring and appends them, per seed, to a
``wmx.collect.export.EpisodeSetWriter`` staged in ``<run>/staging/seed_<s>/``
(on disk, so a run resumed by a new process carries on; episodes that a
resumed run re-collects are checked bit-identical and skipped). When the run
ends, ``finalize`` stores one episode set per seed (DESIGN.md §4) and
returns their paths.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from wmx.agents.tdmpc2 import buffer as buffer_lib
from wmx.collect.export import EpisodeSetWriter
from wmx.datasets.store import Store


def rows_to_episode(obs: np.ndarray, action: np.ndarray, reward: np.ndarray) -> dict:
    """One episode (DESIGN.md §4 layout) from its T+1 stored rows.

    ``obs f32[T+1,O]``, ``action f32[T+1,A]``, ``reward f32[T+1]``; the flags
    follow from the fixed-length layout (no terminations on these tasks).
    """
    n = obs.shape[0]
    first = np.zeros(n, bool)
    first[0] = True
    last = np.zeros(n, bool)
    last[-1] = True
    return {"obs": np.ascontiguousarray(obs, np.float32),
            "action": np.ascontiguousarray(action, np.float32),
            "reward": np.ascontiguousarray(reward, np.float32), "is_first": first,
            "is_last": last, "is_terminal": np.zeros(n, bool)}


class RunEpisodeExport:
    """Per-seed episode-set writers of a run.

    run_dir: the run folder; seeds: the run's seeds (order of the carries'
    leading axis); n_envs: envs per seed; task: the registry TaskSpec;
    producer_fn(seed) -> producer dict; store: where the sets are stored.
    """

    def __init__(self, run_dir: Path, seeds: tuple[int, ...], n_envs: int, task: Any,
                 producer_fn, store: Store):
        self.seeds = tuple(seeds)
        self.n_envs = n_envs
        self.store = store
        self.writers = {s: EpisodeSetWriter(Path(run_dir) / "staging" / f"seed_{s}", task,
                                            producer_fn(s)) for s in self.seeds}

    def add_rounds(self, buf: buffer_lib.EpisodeBuffer, first: int, end: int) -> list[list[float]]:
        """Append rounds ``first..end-1`` of every seed; return their returns per seed.

        ``buf`` is the seed-stacked device ring. Raises RuntimeError when the
        rounds no longer fit in the ring (they would have been overwritten).
        """
        if end <= first:
            return [[] for _ in self.seeds]
        obs, act, rew = (np.asarray(x) for x in jax.device_get((buf.obs, buf.action, buf.reward)))
        rounds = obs.shape[1] // self.n_envs
        if end - first > rounds - 1:
            raise RuntimeError(
                f"a chunk of {end - first} rounds does not fit in the ring of {rounds - 1} "
                "sampleable rounds; lower --chunk-episodes or raise the buffer size")
        slots = [sl for e in range(first, end)
                 for sl in buffer_lib.round_slots(rounds, self.n_envs, e)]
        returns = []
        for i, s in enumerate(self.seeds):
            eps = [rows_to_episode(obs[i, sl], act[i, sl], rew[i, sl]) for sl in slots]
            self.writers[s].append(eps, start_index=first * self.n_envs)
            returns.append([float(np.sum(e["reward"], dtype=np.float64)) for e in eps])
        return returns

    def finalize(self) -> dict[str, str]:
        """Store one episode set per seed (idempotent); returns {seed: path}."""
        return {str(s): str(w.finalize(self.store)) for s, w in self.writers.items()}
