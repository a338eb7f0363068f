"""Synthetic mt80-shaped pooled datasets of any size, for scale tests of the readers.

`write_synthetic_dataset(home, rows=10_000_000)` writes a real pooled dataset
(same records, shards, manifest, TaskSet and content hash as a Beam build of
the same episodes, DESIGN.md §4) of random but valid episodes, streaming:
the episodes are a pure function of (seed, episode index), so a first pass
computes each episode's digest (its shard and its place in the shard's digest
order) and a second pass regenerates and writes them shard by shard. Memory
holds the episode digests (which the manifest lists anyway, ~0.2 KB per
episode) and one episode at a time, never the rows.

The TaskSet (`mt80_like_taskset`): 80 tasks like TD-MPC2's mt80, 30 DMC-like
(the 19 mt19 (obs, action) dims, cycled) and 50 Meta-World-like (obs 39,
action 4), every one with the same episode length T (the readers need one T
per dataset). Records are padded to obs 39 and action 6. Episode i belongs to
task i mod num_tasks.

    wmx dataset synth --rows 10000000 [--name mt80-synth] [--seed 0]

Source: issue 17 part 3 (datasets larger than memory); the row layout is
DESIGN.md §4 "Episode rows".
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

from wmx.schemas import episode as schema
from wmx.schemas.taskset import TaskInfo, TaskSet

MT19_DIMS = ((24, 6), (24, 6), (24, 6), (17, 6), (6, 2), (6, 2), (6, 1), (3, 1), (5, 1),
             (5, 1), (5, 1), (5, 1), (8, 2), (9, 2), (12, 2), (12, 2), (24, 5), (15, 4),
             (15, 4))
"""(obs dim, action dim) of the 19 mt19 tasks in mt30 order (wmx.schemas.taskset.mt19;
a test checks the copy)."""

METAWORLD_DIMS = (39, 4)
"""(obs dim, action dim) of a Meta-World task in TD-MPC2's mt80."""

SYNTH_SOURCE = "synthetic (wmx.datasets.synth): random episodes, no reference scores"

SYNTH_SUFFIX = "-synth"
"""Every synthetic dataset's name ends so: it never takes a real build's name@latest."""

SHARD_OVERHEAD = 128 * 1024
"""Bytes a shard file may take beyond its records (ArrayRecord writes 64 KiB blocks)."""

MANIFEST_BYTES_PER_EPISODE = 300
"""The manifest's bytes per episode (digest, task, return)."""


class SynthError(ValueError):
    """A synthetic dataset cannot be written as asked."""


def mt80_like_taskset(num_tasks: int = 80, episode_length: int = 500,
                      name: str = "mt80-synth") -> TaskSet:
    """TaskSet of `num_tasks` synthetic tasks `synth-00`, ...: the first
    round(num_tasks * 30 / 80) DMC-like (MT19_DIMS cycled), the rest
    Meta-World-like (METAWORLD_DIMS); T = `episode_length`, action repeat 2,
    discount 0.99, no reference scores. Raises ValueError for num_tasks < 1."""
    if num_tasks < 1:
        raise SynthError(f"--tasks must be >= 1, got {num_tasks}")
    n_dmc = max(1, round(num_tasks * 30 / 80)) if num_tasks > 1 else 1
    tasks = []
    width = max(2, len(str(num_tasks - 1)))
    for i in range(num_tasks):
        o, a = MT19_DIMS[i % len(MT19_DIMS)] if i < n_dmc else METAWORLD_DIMS
        tasks.append(TaskInfo(f"synth-{i:0{width}d}", o, a, episode_length, 2, 0.99))
    return TaskSet(name=name, tasks=tuple(tasks), reference_scores=(None,) * num_tasks,
                   reference_source=SYNTH_SOURCE)


def synthetic_episode(seed: int, index: int, task: TaskInfo) -> dict:
    """Episode `index` of a synthetic dataset: obs-aligned rows (T+1), obs
    f32[T+1, O] standard normal, action f32[T+1, A] uniform in [-1, 1] (0 on
    the last row), reward f32[T+1] uniform in [0, 1) (0 on row 0), is_first
    on row 0, is_last on the last row, no terminal. A pure function of
    (seed, index, task)."""
    T, O, A = task.episode_length, task.obs_dim, task.action_dim
    rng = np.random.default_rng([int(seed), int(index)])
    obs = rng.standard_normal((T + 1, O), dtype=np.float32)
    act = rng.uniform(-1, 1, size=(T + 1, A)).astype(np.float32)
    act[-1] = 0
    rew = rng.random(T + 1, dtype=np.float32)
    rew[0] = 0
    first = np.zeros(T + 1, bool)
    first[0] = True
    last = np.zeros(T + 1, bool)
    last[-1] = True
    return schema.make_episode(obs, act, rew, first, last, np.zeros(T + 1, bool))


def record_bytes(taskset: TaskSet) -> int:
    """Bytes of one padded record's arrays (headers excluded)."""
    rows = taskset.tasks[0].episode_length + 1
    return rows * (4 * (taskset.max_obs_dim + taskset.max_action_dim + 1) + 3) + 12


def estimated_bytes(taskset: TaskSet, episodes: int, num_shards: int) -> int:
    """Disk space a synthetic dataset needs, at most (its records are not compressed).

    Args:
      taskset: the dataset's TaskSet (`mt80_like_taskset`).
      episodes: episode count.
      num_shards: shard files.

    Returns:
      Bytes: records plus 2%, SHARD_OVERHEAD per shard, the manifest.
    """
    return int(episodes * (record_bytes(taskset) * 1.02 + MANIFEST_BYTES_PER_EPISODE)
               + num_shards * SHARD_OVERHEAD)


def synthetic_name(name: str) -> str:
    """Check the name of a synthetic dataset.

    Args:
      name: the `--name`, e.g. "mt80-synth".

    Returns:
      ``name`` unchanged.

    Raises:
      SynthError: not a valid dataset name (`check_dataset_name`), a name of the real
        mt19 builds (`is_mt19_name`), or not ending in SYNTH_SUFFIX.
    """
    from wmx.datasets.names import check_dataset_name
    from wmx.schemas.taskset import is_mt19_name
    try:
        check_dataset_name(name)
    except ValueError as e:
        raise SynthError(f"--name: {e}") from None
    if is_mt19_name(name):
        raise SynthError(f"--name {name}: mt19 and mt19-* are the names of real mt19 builds; "
                         f"name a synthetic dataset e.g. mt80{SYNTH_SUFFIX}")
    if not name.endswith(SYNTH_SUFFIX):
        raise SynthError(f"--name {name}: a synthetic dataset's name ends in {SYNTH_SUFFIX!r}, "
                         f"so it never replaces a real dataset's {name}@latest; use "
                         f"--name {name}{SYNTH_SUFFIX}")
    return name


@dataclasses.dataclass(frozen=True)
class SynthResult:
    """A written synthetic dataset: path, content hash, episodes, rows (all
    records' rows), shard bytes on disk, seconds (digest pass, write pass)."""
    path: Path
    content_hash: str
    episodes: int
    rows: int
    bytes: int
    digest_s: float
    write_s: float


def write_synthetic_dataset(home, rows: int, name: str = "mt80-synth", num_tasks: int = 80,
                            episode_length: int = 500, seed: int = 0,
                            num_shards: int | None = None,
                            progress: Callable[[str], None] | None = None) -> SynthResult:
    """Write a synthetic pooled dataset of ceil(rows / (T+1)) episodes into
    `<home>/datasets/<name>/<content hash>` (module docstring).

    Shards: `num_shards` (default ceil(episodes / 512), as the Beam build),
    episode -> shard by digest, digest order within a shard, written with the
    build's writer (wmx.pipelines.transforms.write_shard_file); manifest by
    the build's `build_manifest` (builder: this module, seed, rows). Written
    into `<home>/datasets/.staging/` (a name owned by this process, so a later stage
    sweeps it if this one is killed; `wmx.temporaries`) and renamed at the end; on any
    failure the staging directory is removed. An existing dataset with the same
    content hash is kept and returned.

    Raises SynthError (nothing written) for rows < T+1, num_shards < 1, a bad name
    (`synthetic_name`), or when the estimated size (`estimated_bytes`) exceeds
    the free disk space."""
    from wmx import temporaries
    from wmx.datasets.store import Store
    from wmx.paths import nearest_existing, wmx_home
    from wmx.pipelines.plan import BuildPlan, shard_index, shard_name
    from wmx.pipelines.sources import code_version
    from wmx.pipelines.transforms import build_manifest, file_sha256, write_shard_file
    from wmx.sizes import human_size
    say = progress or (lambda msg: None)
    synthetic_name(name)
    ts = mt80_like_taskset(num_tasks, episode_length, name)
    rows_per_ep = episode_length + 1
    if rows < rows_per_ep:
        raise SynthError(f"--rows {rows} is less than one episode ({rows_per_ep} rows); "
                         f"give at least {rows_per_ep}")
    n = math.ceil(rows / rows_per_ep)
    if num_shards is None:
        num_shards = max(1, math.ceil(n / 512))
    if num_shards < 1:
        raise SynthError(f"--num-shards must be >= 1, got {num_shards}")
    root = Path(wmx_home(home)) / "datasets"
    need = estimated_bytes(ts, n, num_shards)
    free = shutil.disk_usage(nearest_existing(root) or root).free
    if need > 0.95 * free:
        raise SynthError(f"{n} episodes need about {human_size(need)}, only "
                         f"{human_size(free)} are free under {root}; give fewer --rows "
                         "or another --home")
    root.mkdir(parents=True, exist_ok=True)
    Store(home).sweep_temporaries()       # what killed builds and synths left behind
    staging = root / ".staging" / temporaries.owned_name(name, prefix="")
    plan = BuildPlan(
        name=name, tasks=ts.names, obs_dims=tuple(t.obs_dim for t in ts.tasks),
        action_dims=tuple(t.action_dim for t in ts.tasks),
        Ts=tuple(t.episode_length for t in ts.tasks), taskset=ts.to_dict(), sources=(),
        num_shards=num_shards, staging_dir=str(staging), datasets_root=str(root),
        code_version=code_version(), runner="none")
    O, A = ts.max_obs_dim, ts.max_action_dim

    def task_of(i):
        return i % num_tasks, ts.tasks[i % num_tasks]

    t0 = time.perf_counter()
    # pass 1: digest, shard and return of every episode (64 hex + 2 numbers each)
    members: list[list[tuple[str, int, float]]] = [[] for _ in range(num_shards)]
    for i in range(n):
        ep = synthetic_episode(seed, i, task_of(i)[1])
        d = schema.episode_digest(ep)
        members[shard_index(d, num_shards)].append((d, i, schema.episode_return(ep)))
        if (i + 1) % 2000 == 0:
            say(f"digests: {i + 1}/{n} episodes")
    t1 = time.perf_counter()
    staging.mkdir(parents=True)
    try:
        shards = []
        for k, items in enumerate(members):
            items.sort()
            fname = shard_name(k, num_shards)
            path = staging / fname

            def records(items=items):
                for d, i, _ in items:
                    tid, task = task_of(i)
                    ep = synthetic_episode(seed, i, task)
                    if schema.episode_digest(ep) != d:  # the generator must be pure
                        raise SynthError(f"episode {i} changed between passes")
                    yield schema.serialize_episode(schema.pad_episode(ep, tid, O, A))
            write_shard_file(str(path), records())
            shards.append({"index": k, "file": fname, "digest": file_sha256(str(path)),
                           "bytes": path.stat().st_size, "episodes": len(items),
                           "digests": [d for d, _, _ in items],
                           "tasks": [task_of(i)[1].name for _, i, _ in items],
                           "returns": [r for _, _, r in items]})
            members[k] = []
            say(f"shard {k + 1}/{num_shards} written")
        man = build_manifest(plan, shards)
        man = dataclasses.replace(man, builder={
            "pipeline": "wmx.datasets.synth.write_synthetic_dataset",
            "code_version": plan.code_version, "num_shards": num_shards, "runner": "none",
            "seed": int(seed), "rows_requested": int(rows), "source_sets": []})
        man.write(str(staging))
        dest = root / name / man.content_hash
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(staging)
        else:
            os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    t2 = time.perf_counter()
    size = sum(s["bytes"] for s in shards)
    return SynthResult(dest, man.content_hash, n, n * rows_per_ep, size, t1 - t0, t2 - t1)
