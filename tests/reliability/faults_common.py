"""What the fault-injection test modules (test_faults_*.py) share: valid episodes of two tiny
tasks (`episode`, `CART`, `PROBE`), consistent forgeries of a stored dataset (`forge`: every
digest, count, statistic and the content hash recomputed, so only the semantic checks can
notice), and the readings of a command's output (`_rows` of metrics.csv, `_one_line` of
stderr).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np

from wmx.envs.registry import get_task
from wmx.schemas import episode as schema
from wmx.schemas.hashing import dataset_content_hash, file_digest
from wmx.schemas.manifest import DatasetManifest, FileEntry, TaskStats
from wmx.schemas.taskset import TaskInfo, TaskSet


REPO = Path(__file__).resolve().parents[2]
T = 8
CART = TaskInfo.from_spec(get_task("cartpole-balance").replace(T=T))   # O=5 A=1 repeat 2
PROBE = TaskInfo.from_spec(get_task("probe-action").replace(T=T))      # O=2 A=2 repeat 1
REWARD = {CART.name: (0.0, 2.0), PROBE.name: (-1.0, 1.0)}   # one agent step (registry)


def episode(rng, info: TaskInfo) -> dict:
    """A valid episode of ``info`` with rewards inside the task's range."""
    O, A = info.obs_dim, info.action_dim
    lo, hi = REWARD[info.name]
    act = rng.uniform(-1, 1, size=(T + 1, A)).astype(np.float32)
    act[-1] = 0
    rew = rng.uniform(lo, hi, size=T + 1).astype(np.float32)
    rew[0] = 0
    first = np.zeros(T + 1, bool)
    first[0] = True
    last = np.zeros(T + 1, bool)
    last[-1] = True
    return schema.make_episode(rng.normal(size=(T + 1, O)).astype(np.float32), act, rew, first,
                               last, np.zeros(T + 1, bool))


def _read(path: Path) -> list[bytes]:
    from array_record.python.array_record_module import ArrayRecordReader
    r = ArrayRecordReader(str(path))
    try:
        return r.read_all()
    finally:
        r.close()


def _write(path: Path, blobs) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter
    w = ArrayRecordWriter(str(path), "group_size:1")
    for b in blobs:
        w.write(b)
    w.close()


def forge(ds: Path, home: Path, records=None, taskset=None, name=None,
          keep_dir: bool = False, extra_sources=()) -> Path:
    """A consistent forgery of dataset ``ds`` in ``home``'s store (with ``ds``'s
    source episode sets copied there): ``records(shards)`` edits {shard name: [pooled
    record dicts]} in place, ``taskset(ts)`` returns a new TaskSet; then every shard
    digest, size and count, the episode digests, the per-task statistics and the
    content hash are recomputed, so only the semantic checks can notice. Stored under
    datasets/<name>/<new hash> (``keep_dir``: under the original hash); extra_sources:
    more source episode-set directories to list in the manifest."""
    shutil.copytree(ds.parents[2] / "episodes", home / "episodes", dirs_exist_ok=True)
    raw = json.loads((ds / "manifest.json").read_text())
    for d in extra_sources:
        raw["sources"].append(d.name)
        raw["builder"]["source_sets"].append({"task": d.parent.name, "set_id": d.name,
                                              "content_hash": d.name, "episodes": 1})
    shards = {s["name"]: [schema.deserialize_episode(b) for b in _read(ds / s["name"])]
              for s in raw["shards"]}
    if records is not None:
        records(shards)
    ts = TaskSet.from_dict(raw["taskset"])
    if taskset is not None:
        ts = taskset(ts)
    name = name or raw["name"]
    work = home / "forging"
    work.mkdir(parents=True)
    files, digests, rets = [], [], {t: [] for t in ts.names}
    for sname, recs in shards.items():
        _write(work / sname, [schema.serialize_episode(r) for r in recs])
        files.append(FileEntry(sname, file_digest(work / sname), (work / sname).stat().st_size,
                               len(recs)))
        for r in recs:
            tid, ep = schema.unpad_episode(r)
            digests.append(schema.episode_digest(ep))
            rets[ts.names[tid]].append(schema.episode_return(ep))
    man = DatasetManifest(
        name=name, taskset=ts, per_task={t: TaskStats.from_returns(v) for t, v in rets.items()},
        shards=tuple(files), episode_digests=tuple(digests), sources=tuple(raw["sources"]),
        builder=raw["builder"], content_hash=dataset_content_hash(ts, digests),
        created=raw["created"])
    man.write(work)
    dest = home / "datasets" / name / (ds.name if keep_dir else man.content_hash)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(work, dest)
    return dest


def _first(shards, task_id: int):
    for recs in shards.values():
        for r in recs:
            if int(r["task_id"]) == task_id:
                return r
    raise AssertionError("no record of that task")


def _rows(run_dir: Path, drop=("wall_s",)) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _one_line(err: str) -> list[str]:
    return [ln for ln in err.strip().splitlines() if ln and not ln[:4].isdigit()]
