"""A tiny synthetic store for the evaluate tests: episode sets, a pooled-dataset manifest
and a fake source run, without Beam or an env.

`make_store(home, infos, seeds)` writes one episode set per task (synthetic
episodes, producer run id ``src-<seed>``, with increasing returns so "the last
10" differ from the mean) and a dataset manifest listing them as sources. The
dataset's shard entry is a placeholder (no shard file): the evaluator reads
only the manifest's TaskSet and sources.
"""
from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import synthetic_episode, taskset_of  # noqa: E402

from wmx.episode_sets.episode_set import write_episode_set  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.envs.registry import get_task  # noqa: E402
from wmx.schemas.hashing import dataset_content_hash  # noqa: E402
from wmx.schemas.manifest import (DatasetManifest, EpisodeSetManifest, FileEntry,  # noqa: E402
                                  Producer, TaskStats, utc_now_iso)
from wmx.schemas.taskset import TaskInfo  # noqa: E402

N_EPISODES = 12
ONLINE_COLUMNS = ("seed", "kind", "agent_steps", "env_steps", "episodes", "return",
                  "return_std", "updates", "wall_s")


def task_info(name: str, T: int) -> TaskInfo:
    """TaskInfo of a registry task with T agent steps."""
    return dataclasses.replace(TaskInfo.from_spec(get_task(name)), episode_length=T)


def _episodes(info: TaskInfo, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(N_EPISODES):
        ep = synthetic_episode(rng, info.episode_length, info.obs_dim, info.action_dim)
        ep["reward"][1:] = np.float32(i / N_EPISODES)     # return grows with the episode index
        eps.append(ep)
    return eps


def write_source_set(home: Path, info: TaskInfo, seed: int) -> EpisodeSetManifest:
    """One stored episode set of ``info`` produced by run ``src-<seed>``, seed ``seed``."""
    producer = Producer(run_id=f"src-{seed}", agent="tdmpc2", config_hash="cfg", seed=seed,
                        code_version="abc1234")
    path = write_episode_set(Store(home), info, _episodes(info, seed), producer,
                             versions={"test": "0"})
    return EpisodeSetManifest.load(path)


def write_dataset(home: Path, name: str, sets: list[EpisodeSetManifest]) -> DatasetManifest:
    """A pooled-dataset manifest over ``sets`` (TaskSet in the sets' order) in the store."""
    infos = []
    for m in sets:
        if m.task not in infos:
            infos.append(m.task)
    ts = taskset_of(name, infos)
    digests = sorted(d for m in sets for d in m.episode_digests)
    per_task = {t.name: TaskStats.from_returns([r for m in sets if m.task.name == t.name
                                                for r in m.episode_returns]) for t in infos}
    manifest = DatasetManifest(
        name=name, taskset=ts, per_task=per_task,
        shards=(FileEntry("shard-00000-of-00001.array_record", "0" * 64, 0, len(digests)),),
        episode_digests=tuple(digests), sources=tuple(m.content_hash for m in sets),
        builder={"test": True}, content_hash=dataset_content_hash(ts, digests),
        created=utc_now_iso())
    path = Store(home).dataset_path(name, manifest.content_hash)
    path.mkdir(parents=True)
    manifest.write(path)
    return manifest


def write_source_run(home: Path, run_id: str, rows: list[dict]) -> Path:
    """A fake online source run: runs/<run_id>/metrics.csv with ``rows`` (online columns)."""
    run_dir = Store(home).run_path(run_id)
    run_dir.mkdir(parents=True)
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ONLINE_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in ONLINE_COLUMNS})
    return run_dir
