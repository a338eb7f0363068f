"""BuildPlan: the plain-data description of one pooled-dataset build.

Everything a Beam worker needs travels in this picklable frozen dataclass: the
TaskSet's per-task dims, the source episode sets, the shard count and the
staging/final directories. `make_plan` (wmx.pipelines.sources) fills it from
the store.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class SourceSet:
    """One source episode set: its directory, task, dims and manifest facts.

    returns: per-episode returns recorded in the set's manifest (None when the
    manifest records none); content_hash/set_id: its identity for the lineage;
    skip: indices of its episodes not pooled because an earlier source (or an
    earlier record of this set) holds the same episode (`make_plan`).
    """
    path: str
    task: str
    set_id: str
    content_hash: str
    obs_dim: int
    action_dim: int
    T: int
    num_episodes: int
    returns: tuple[float, ...] | None = None
    skip: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """A pooled build. tasks: TaskSet order (task id = index); obs_dims /
    action_dims / Ts: per task, same order; taskset: the TaskSet as a JSON-able
    dict (goes into the manifest and the content hash); num_shards >= 1;
    duplicates: the episodes found more than once in the sources, each
    {"digest", "task", "kept", "dropped"} (source refs ``<task>/<set id>#<index>``),
    pooled once and listed in the manifest's builder; shared: the episodes held by
    sets of several tasks, each {"digest", "tasks": [refs, one per task]}, pooled
    under each task and listed in the manifest's builder; runner: the runner's name
    ("DirectRunner", "DaskRunner", ...), runner_class: the dotted path of the runner
    class that runs the build (both recorded in the manifest's builder)."""
    name: str
    tasks: tuple[str, ...]
    obs_dims: tuple[int, ...]
    action_dims: tuple[int, ...]
    Ts: tuple[int, ...]
    taskset: Any
    sources: tuple[SourceSet, ...]
    num_shards: int
    staging_dir: str
    datasets_root: str
    code_version: str = "unknown"
    runner: str = "DirectRunner"
    duplicates: tuple = ()
    runner_class: str = ""
    shared: tuple = ()

    @property
    def max_obs_dim(self) -> int:
        return max(self.obs_dims)

    @property
    def max_action_dim(self) -> int:
        return max(self.action_dims)

    def task_id(self, task: str) -> int:
        return self.tasks.index(task)


def shard_index(digest: str, num_shards: int) -> int:
    """Deterministic shard of an episode: int(digest[:8], 16) % num_shards."""
    return int(digest[:8], 16) % num_shards


def shard_name(index: int, num_shards: int) -> str:
    """File name of shard `index` of `num_shards`."""
    return f"shard-{index:05d}-of-{num_shards:05d}.array_record"
