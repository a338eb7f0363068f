"""Export of every completed episode of an online run as episode sets.

The online chunk returns the rows it collected (scan outputs, leading axes
[seeds, ticks, n_envs]); after each chunk the host splits them into episodes
(`wmx.envs.collector.rows_to_episodes`) and appends them, per seed, to a
`wmx.episode_sets.staged_writer.EpisodeSetWriter` staged in
``<run>/staging/seed_<s>/`` (on disk, so a run resumed by a new process
carries on; episodes that a resumed run re-collects are checked bit-identical
and skipped). When the run ends, ``finalize`` stores one episode set per seed
(DESIGN.md §4) and returns their paths. Nothing of the agent's replay is read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wmx.datasets.store import Store
from wmx.envs.collector import Row, rows_to_episodes
from wmx.episode_sets.staged_writer import EpisodeSetWriter


def episodes_per_seed(rows: Row, episode_length: int) -> list[list[dict]]:
    """Per seed, the episodes of a chunk's rows [S, L, n_envs, ...] (L a multiple of
    T+1, starting at an episode's first row), episode-major then env."""
    host = Row(**{f: np.asarray(getattr(rows, f)) for f in
                  ("obs", "action", "reward", "is_first", "is_last", "is_terminal")})
    n_seeds = host.reward.shape[0]
    return [rows_to_episodes(Row(**{f: getattr(host, f)[i] for f in
                                    ("obs", "action", "reward", "is_first", "is_last",
                                     "is_terminal")}), episode_length)
            for i in range(n_seeds)]


def episode_returns(episodes: list[dict]) -> list[float]:
    """Undiscounted returns (float64 sums of the rewards) of episodes."""
    return [float(np.sum(e["reward"], dtype=np.float64)) for e in episodes]


class RunEpisodeExport:
    """Per-seed episode-set writers of a run.

    run_dir: the run folder; seeds: the run's seeds (order of the carries'
    leading axis); n_envs: envs per seed; task: the registry TaskSpec;
    producer_fn(seed) -> producer dict; store: where the sets are stored;
    new_config: the run was extended on resume (EpisodeSetWriter).
    """

    def __init__(self, run_dir: Path, seeds: tuple[int, ...], n_envs: int, task: Any,
                 producer_fn, store: Store, new_config: bool = False):
        self.seeds = tuple(seeds)
        self.n_envs = n_envs
        self.store = store
        self.writers = {s: EpisodeSetWriter(Path(run_dir) / "staging" / f"seed_{s}", task,
                                            producer_fn(s), new_config=new_config)
                        for s in self.seeds}

    def add_episodes(self, episodes: list[list[dict]], first_round: int) -> None:
        """Append, per seed, the episodes of rounds ``first_round..`` (from
        `episodes_per_seed`; round r holds episodes r*n_envs .. r*n_envs+n_envs-1)."""
        for s, eps in zip(self.seeds, episodes):
            if eps:
                self.writers[s].append(eps, start_index=first_round * self.n_envs)

    def finalize(self) -> dict[str, str]:
        """Store one episode set per seed (idempotent); returns {seed: path}."""
        return {str(s): str(w.finalize(self.store)) for s, w in self.writers.items()}
