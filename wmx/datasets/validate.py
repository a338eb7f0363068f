"""Validation of a pooled dataset: every check, every failure reported.

`validate_dataset(ref)` returns a ValidationReport; `wmx dataset validate`
exits 0 only when it has no failures. Checks (names used in the report):
manifest (schema, self-consistency, content hash), shard_missing, shard_size,
shard_digest, read (ArrayRecord file unreadable), decode (a record), shape
(fields, dtypes, padded widths, T+1 rows), padding (zero beyond the task's
dims), rows (row invariants: is_first only row 0, reward 0 on row 0, action 0
on the last row, is_last only on the last row, is_terminal), finite (no
NaN/inf), action_range ([-1, 1]), task_id (within the TaskSet, dims equal the
task's), counts (per-task episode counts and shard record counts vs the
manifest), returns (per-task return statistics recomputed vs the manifest),
content_hash (recomputed from the decoded episodes).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from wmx.schemas import episode as schema


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failed check: where (a shard file name, "manifest" or "dataset"),
    which check, and a message."""
    where: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}"


@dataclasses.dataclass
class ValidationReport:
    """Result of validate_dataset: path, episodes decoded, failures."""
    path: Path
    episodes_checked: int = 0
    failures: list[Failure] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def add(self, where: str, check: str, message: str) -> None:
        self.failures.append(Failure(where, check, message))

    def format(self) -> str:
        head = (f"{self.path}: {'OK' if self.ok else 'FAILED'} "
                f"({self.episodes_checked} episodes checked, {len(self.failures)} failures)")
        return "\n".join([head] + [f"  {f}" for f in self.failures])


def _classify(problem: str) -> str:
    if "padding" in problem:
        return "padding"
    if "NaN" in problem or "inf" in problem:
        return "finite"
    if "outside [-1, 1]" in problem:
        return "action_range"
    if "rows, expected T+1" in problem or "dtype" in problem or "rank" in problem:
        return "shape"
    if "do not fit" in problem or "task_id" in problem:
        return "task_id"
    return "rows"


def validate_dataset(ref, home=None, max_failures_per_check: int = 20) -> ValidationReport:
    """Run every check on the dataset `ref` (name@hash, name@latest or a path).

    Never raises for bad content: each problem becomes a Failure naming the
    shard and the check (at most `max_failures_per_check` per shard and check,
    then one summary line). Raises only for a `ref` that does not resolve
    (NameResolutionError / FileNotFoundError)."""
    from array_record.python.array_record_module import ArrayRecordReader
    from wmx.datasets.readers import resolve_path
    from wmx.schemas.hashing import dataset_content_hash, file_digest
    from wmx.schemas.manifest import DatasetManifest
    from wmx.schemas.taskset import TaskSet

    path = resolve_path(ref, home)
    rep = ValidationReport(path=path)
    counts: dict[tuple[str, str], int] = {}

    def add(where, check, msg):
        n = counts.get((where, check), 0) + 1
        counts[(where, check)] = n
        if n <= max_failures_per_check:
            rep.add(where, check, msg)
        elif n == max_failures_per_check + 1:
            rep.add(where, check, "more failures of this check omitted")

    try:
        raw = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        rep.add("manifest", "manifest", f"unreadable manifest.json: {e}")
        return rep
    try:
        DatasetManifest.from_dict(raw)
    except (ValueError, TypeError, KeyError) as e:
        rep.add("manifest", "manifest", str(e))
    try:
        taskset = TaskSet.from_dict(raw["taskset"])
        shards = [(s["name"], s) for s in raw["shards"]
                  if all(k in s for k in ("sha256", "size_bytes", "num_records"))]
        if len(shards) != len(raw["shards"]):
            raise ValueError("a shard entry lacks name/sha256/size_bytes/num_records")
    except (ValueError, TypeError, KeyError) as e:
        rep.add("manifest", "manifest", f"cannot read the TaskSet or shard list: {e}")
        return rep
    O, A = taskset.max_obs_dim, taskset.max_action_dim
    digests, rets = [], {t: [] for t in taskset.names}
    for name, s in shards:
        p = path / name
        if not p.is_file():
            add(name, "shard_missing", "shard file is missing")
            continue
        if p.stat().st_size != s["size_bytes"]:
            add(name, "shard_size", f"size {p.stat().st_size} bytes, manifest says "
                                    f"{s['size_bytes']}")
        if file_digest(p) != s["sha256"]:
            add(name, "shard_digest", "sha256 of the file differs from the manifest")
        try:
            reader = ArrayRecordReader(str(p))
            try:
                blobs = reader.read_all()
            finally:
                reader.close()
        except Exception as e:  # noqa: BLE001 - any reader error is a finding
            add(name, "read", f"ArrayRecord file unreadable: {type(e).__name__}: {e}")
            continue
        if len(blobs) != s["num_records"]:
            add(name, "counts", f"{len(blobs)} records, manifest says {s['num_records']}")
        for j, b in enumerate(blobs):
            try:
                rec = schema.deserialize_episode(b)
            except ValueError as e:
                add(name, "decode", f"record {j}: {e}")
                continue
            if schema.episode_kind(rec) != "pooled_episode":
                add(name, "decode", f"record {j} is not a pooled record")
                continue
            rep.episodes_checked += 1
            tid = int(rec["task_id"])
            if not 0 <= tid < len(taskset):
                add(name, "task_id", f"record {j}: task id {tid} outside the TaskSet's "
                                     f"0..{len(taskset) - 1}")
                continue
            task = taskset.tasks[tid]
            rows = task.episode_length + 1
            if (rec["obs"].shape != (rows, O) or rec["action"].shape != (rows, A)
                    or rec["reward"].shape != (rows,)):
                add(name, "shape", f"record {j}: obs {rec['obs'].shape}, action "
                                   f"{rec['action'].shape}, reward {rec['reward'].shape}; "
                                   f"expected ({rows}, {O}), ({rows}, {A}), ({rows},)")
                continue
            if (int(rec["obs_dim"]), int(rec["action_dim"])) != (task.obs_dim, task.action_dim):
                add(name, "task_id", f"record {j}: dims ({int(rec['obs_dim'])}, "
                                     f"{int(rec['action_dim'])}) are not task {task.name}'s "
                                     f"({task.obs_dim}, {task.action_dim}): wrong task id?")
            for prob in schema.validate_episode_rows(rec, T=task.episode_length):
                add(name, _classify(prob), f"record {j} (task {task.name}): {prob}")
            _, ep = schema.unpad_episode(rec)
            digests.append(schema.episode_digest(ep))
            rets[task.name].append(schema.episode_return(ep))
    per_task = raw.get("per_task", {})
    for t in taskset.names:
        got = rets[t]
        want = per_task.get(t, {})
        if want.get("episodes") != len(got):
            add("dataset", "counts", f"task {t}: {len(got)} episodes in the shards, "
                                     f"manifest says {want.get('episodes')}")
        if got:
            r = np.asarray(got, np.float64)
            for key, val in (("return_mean", r.mean()), ("return_min", r.min()),
                             ("return_max", r.max()), ("return_std", r.std())):
                w = want.get(key)
                if w is None or not np.isclose(val, w, rtol=1e-6, atol=1e-6):
                    add("dataset", "returns", f"task {t}: recomputed {key} {val}, "
                                              f"manifest says {w}")
    if sorted(digests) != sorted(raw.get("episode_digests", [])):
        add("dataset", "content_hash", "the decoded episodes' digests differ from the "
                                       "manifest's episode_digests")
    if rep.episodes_checked and not any(f.check in ("decode", "read", "shard_missing")
                                        for f in rep.failures):
        h = dataset_content_hash(taskset, digests)
        if h != raw.get("content_hash"):
            add("dataset", "content_hash", f"recomputed content hash {h[:16]}... differs "
                                           f"from the manifest's {str(raw.get('content_hash'))[:16]}...")
    return rep
