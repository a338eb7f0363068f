"""Reusable Beam transforms for pooled-dataset builds (DESIGN.md §1, §4).

read episode sets -> check each episode against its set's manifest -> pad to
the TaskSet's max dims + task id -> shard by episode digest (sorted within a
shard) -> ArrayRecord shards written by a DoFn -> counts, statistics, manifest
-> the manifest in the staging directory, which the launching process
(`wmx.pipelines.sources.run_build_result`) renames into the store.
"""
from __future__ import annotations

import json
import os
from typing import Iterable

import apache_beam as beam
import numpy as np

from wmx import failpoints
from wmx.envs.registry import TASKS
from wmx.schemas import episode as schema
from wmx.pipelines.plan import BuildPlan, SourceSet, shard_index, shard_name


class EpisodeCheckError(ValueError):
    """An episode disagrees with its episode set's manifest."""


episode_return = schema.episode_return


def check_episode(ep, src: SourceSet, index: int) -> None:
    """Check one episode against its set's manifest: shapes [T+1, dims], dtypes,
    row invariants (wmx.schemas validate_episode_rows), the reward range of a
    task the registry knows, and the recorded return.
    Raises EpisodeCheckError naming the set, the episode and the failed check."""
    where = f"episode {index} of set {src.path} (task {src.task})"
    rows = src.T + 1
    want = {"obs": (rows, src.obs_dim), "action": (rows, src.action_dim), "reward": (rows,),
            "is_first": (rows,), "is_last": (rows,), "is_terminal": (rows,)}
    for k, shape in want.items():
        if k not in ep:
            raise EpisodeCheckError(f"{where}: field {k!r} missing")
        if tuple(np.shape(ep[k])) != shape:
            raise EpisodeCheckError(f"{where}: {k} has shape {np.shape(ep[k])}, manifest says {shape}")
    problems = schema.validate_episode_rows(ep, T=src.T, obs_dim=src.obs_dim,
                                            action_dim=src.action_dim)
    spec = TASKS.get(src.task)
    if spec is not None and not problems:
        lo, hi = spec.agent_step_reward_range()
        tol = 1e-5 * max(1.0, abs(lo), abs(hi))
        r = np.asarray(ep["reward"][1:], np.float64)
        bad = np.flatnonzero((r < lo - tol) | (r > hi + tol))
        if bad.size:
            problems.append(f"reward {r[bad[0]]:.6g} on row {int(bad[0]) + 1} is outside "
                            f"[{lo:g}, {hi:g}], the reward range of one agent step of "
                            f"{src.task} (task registry)")
    if problems:
        raise EpisodeCheckError(f"{where}: " + "; ".join(problems))
    if src.returns is not None:
        if index >= len(src.returns):
            raise EpisodeCheckError(f"{where}: manifest lists only {len(src.returns)} returns")
        got = episode_return(ep)
        if not np.isclose(got, src.returns[index], rtol=1e-5, atol=1e-4):
            raise EpisodeCheckError(
                f"{where}: return {got} differs from the manifest's {src.returns[index]}")


def read_source(src: SourceSet) -> Iterable[tuple[SourceSet, int, dict]]:
    """Yield (src, index, episode) for every episode of one set, in manifest
    order (files in list order, records in file order; wmx.schemas.manifest
    EpisodeSetManifest). Each file's sha256 and record count are checked
    against the set's manifest first; EpisodeCheckError names the file."""
    from array_record.python.array_record_module import ArrayRecordReader
    from wmx.schemas.hashing import file_digest
    from wmx.schemas.manifest import EpisodeSetManifest
    man = EpisodeSetManifest.load(src.path)
    if man.content_hash != src.content_hash:
        raise EpisodeCheckError(f"episode set {src.path} changed since the build was planned")
    i = 0
    for f in man.files:
        path = os.path.join(src.path, f.name)
        if not os.path.isfile(path) or file_digest(path) != f.sha256:
            raise EpisodeCheckError(f"episode set {src.path}: file {f.name} is missing or "
                                    "its sha256 differs from the set's manifest")
        reader = ArrayRecordReader(path)
        try:
            blobs = reader.read_all()
        finally:
            reader.close()
        if len(blobs) != f.num_records:
            raise EpisodeCheckError(f"episode set {src.path}: file {f.name} holds "
                                    f"{len(blobs)} records, manifest says {f.num_records}")
        skip = set(src.skip)
        for b in blobs:
            if schema.record_digest(b) != man.episode_digests[i]:
                raise EpisodeCheckError(f"episode {i} of set {src.path}: digest differs "
                                        "from the set's manifest")
            if i not in skip:          # a duplicate of an episode pooled from another source
                yield src, i, schema.deserialize_episode(b)
            i += 1
    if i != src.num_episodes:
        raise EpisodeCheckError(
            f"episode set {src.path} holds {i} episodes, its manifest says {src.num_episodes}")


def pad_and_tag(item, plan: BuildPlan) -> tuple[int, tuple[str, bytes, dict]]:
    """Check, pad and encode one episode as a pooled record (wmx.schemas.episode).
    Returns (shard index, (episode digest, record bytes, stats {task,
    return})); the digest is the unpadded episode's, the shard is
    int(digest[:8], 16) % num_shards."""
    src, i, ep = item
    check_episode(ep, src, i)
    tid = plan.task_id(src.task)
    digest = schema.episode_digest(ep)  # of the unpadded episode, as its set lists it
    rec = schema.serialize_episode(
        schema.pad_episode(ep, tid, plan.max_obs_dim, plan.max_action_dim))
    stats = {"task": src.task, "return": episode_return(ep)}
    return shard_index(digest, plan.num_shards), (digest, rec, stats)


def file_sha256(path: str) -> str:
    """sha256 hex of a file's bytes (wmx.schemas.hashing.file_digest)."""
    from wmx.schemas.hashing import file_digest
    return file_digest(path)


SHARD_WRITER_OPTIONS = "group_size:1"
"""ArrayRecordWriter options of pooled shards: one record per chunk, so
readers get random access per episode."""


def write_shard_file(final: str, records: Iterable[bytes]) -> int:
    """Write `records` (in the given order) as one ArrayRecord file: to
    `<final>.tmp`, renamed to `final` once closed. Returns the record count."""
    from array_record.python.array_record_module import ArrayRecordWriter
    tmp = final + ".tmp"
    writer = ArrayRecordWriter(tmp, SHARD_WRITER_OPTIONS)
    n = 0
    try:
        for rec in records:
            writer.write(rec)
            n += 1
    finally:
        writer.close()
    os.replace(tmp, final)
    return n


def writer_id() -> str:
    """`<host>:<pid>` of the process running this code (which worker wrote a shard)."""
    import socket
    return f"{socket.gethostname()}:{os.getpid()}"


class WriteShardFn(beam.DoFn):
    """Write one shard: records sorted by digest, then bytes (an episode that
    several tasks share has one record per task; they differ in the task id),
    `write_shard_file` into the staging dir. Yields the shard's stats {index,
    file, digest, bytes, episodes, digests, tasks, returns, writer}."""

    def __init__(self, plan: BuildPlan):
        self.plan = plan

    def process(self, element):
        index, items = element
        items = sorted((x for x in items if x is not None), key=lambda x: x[:2])
        name = shard_name(index, self.plan.num_shards)
        final = os.path.join(self.plan.staging_dir, name)
        write_shard_file(final, (rec for _, rec, _ in items))
        failpoints.hit("build.shard_written")
        yield {"index": index, "file": name, "digest": file_sha256(final),
               "bytes": os.path.getsize(final), "episodes": len(items),
               "digests": [d for d, _, _ in items],
               "tasks": [s["task"] for _, _, s in items],
               "returns": [s["return"] for _, _, s in items],
               "writer": writer_id()}


def build_manifest(plan: BuildPlan, shards: list[dict], created: str | None = None):
    """The pooled dataset's DatasetManifest (wmx.schemas.manifest) from all
    shards' stats: TaskSet, per-task counts and return statistics, shard
    digests, sorted pooled-record digests, source set content hashes, builder
    (with the plan's duplicates and the episodes several tasks share, when
    there were any)."""
    from wmx.schemas.hashing import dataset_content_hash
    from wmx.schemas.manifest import DatasetManifest, FileEntry, TaskStats, utc_now_iso
    from wmx.schemas.taskset import TaskSet
    shards = sorted(shards, key=lambda s: s["index"])
    digests = sorted(d for s in shards for d in s["digests"])
    tasks = [t for s in shards for t in s["tasks"]]
    rets = [r for s in shards for r in s["returns"]]
    taskset = TaskSet.from_dict(plan.taskset)
    per_task = {t: TaskStats.from_returns([r for r, tt in zip(rets, tasks) if tt == t])
             for t in plan.tasks}
    builder = {"pipeline": "wmx.pipelines.transforms.BuildPooled",
               "code_version": plan.code_version, "num_shards": plan.num_shards,
               "runner": plan.runner, "runner_class": plan.runner_class,
               "source_sets": [{"task": s.task, "set_id": s.set_id,
                                "content_hash": s.content_hash,
                                "episodes": s.num_episodes} for s in plan.sources]}
    if plan.duplicates:
        builder["duplicates"] = [dict(d) for d in plan.duplicates]
    if plan.shared:
        builder["shared"] = [dict(d) for d in plan.shared]
    return DatasetManifest(
        name=plan.name, taskset=taskset, per_task=per_task,
        shards=tuple(FileEntry(name=s["file"], sha256=s["digest"], size_bytes=s["bytes"],
                               num_records=s["episodes"]) for s in shards),
        episode_digests=tuple(digests),
        sources=tuple(sorted(s.content_hash for s in plan.sources)),
        builder=builder, content_hash=dataset_content_hash(taskset, digests),
        created=created or utc_now_iso())


def finalize(shards: list[dict], plan: BuildPlan) -> str:
    """Write manifest.json into the staging dir and `<staging dir>.result` (JSON: path,
    the dataset's place ``<datasets_root>/<name>/<content hash>``; writers: the
    `writer_id`s of the processes that wrote shards) for `run_build_result`, which
    renames the staging dir into place on the launching machine (after the pipeline
    ends, so an interrupted build writes nothing). Returns that path."""
    man = build_manifest(plan, shards)
    man.write(plan.staging_dir)
    failpoints.hit("build.finalize")
    dest = os.path.join(plan.datasets_root, plan.name, man.content_hash)
    with open(plan.staging_dir + ".result", "w") as f:
        json.dump({"path": dest, "writers": sorted({s.get("writer", "?") for s in shards})}, f)
    return dest


class BuildPooled(beam.PTransform):
    """The whole build as one transform over a pipeline root: outputs the final
    dataset path (a single-element PCollection)."""

    def __init__(self, plan: BuildPlan):
        super().__init__()
        self.plan = plan

    def expand(self, pbegin):
        plan = self.plan
        keyed = (pbegin
                 | "Sources" >> beam.Create(list(plan.sources), reshuffle=False)
                 | "Reshuffle sources" >> beam.Reshuffle()
                 | "Read" >> beam.FlatMap(read_source)
                 | "Check+pad+tag" >> beam.Map(pad_and_tag, plan))
        empty = pbegin | "All shards" >> beam.Create([(i, None) for i in range(plan.num_shards)])
        shards = ((keyed, empty)
                  | "Flatten" >> beam.Flatten()
                  | "Group by shard" >> beam.GroupByKey()
                  | "Write shards" >> beam.ParDo(WriteShardFn(plan)))
        # All shard stats meet in one GroupByKey (not CombineGlobally, whose
        # default value is a side input: the DaskRunner would then run the whole
        # build inside the one task that reads it).
        return (shards
                | "Key stats" >> beam.Map(_keyed_by_zero)
                | "All shard stats" >> beam.GroupByKey()
                | "Finalize" >> beam.Map(_finalize_group, plan))


def _keyed_by_zero(x):
    return 0, x


def _finalize_group(keyed, plan):
    return finalize(list(keyed[1]), plan)
