"""Validation of a pooled dataset: every check, every failure reported with what to do.

`validate_dataset(ref)` returns a ValidationReport; `wmx dataset validate`
exits 0 only when it has no failures. Each failure names its check, where
(a shard file, "manifest" or "dataset"), the problem and the fix (rebuild,
export a source again, remove a file), naming the source episode set that
holds a bad episode when the store has it. Checks (names used in the
report):

- files: manifest (schema, self-consistency, content hash of the listed
  digests), shard_missing, shard_size, shard_digest, read (ArrayRecord file
  unreadable), stray_file (a file the manifest does not list);
- records: decode, shape (fields, dtypes, padded widths, T+1 rows), padding
  (zero beyond the task's dims), rows (is_first only row 0, reward 0 on row
  0, action 0 on the last row, is_last only on the last row, is_terminal),
  finite (no NaN/inf), action_range ([-1, 1]), reward_range (every agent
  step's reward within the task's range from the task registry: DMC [0,
  action repeat], probe-constant = action repeat, probe-action [-repeat,
  repeat]), task_id (within the TaskSet, dims equal the task's);
- the whole: counts (per-task episode counts and shard record counts vs the
  manifest), returns (per-task return statistics recomputed), duplicate (an
  episode stored more than once), registry (TaskSet fields vs the task
  registry: dims, action repeat, discount = γ(T), TD-MPC2 reference scores,
  an mt19 name that must hold exactly mt19's tasks), content_hash (recomputed
  from the decoded episodes, vs the manifest and vs the directory name the
  dataset is resolved by), name (the manifest's name vs the directory).

What cannot be checked from the data and the registry: that the episodes
were produced by the env and agent the producers name (a consistent
forgery of plausible rows passes), and the fields of a task the registry
does not know (reported as a note).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from wmx.schemas import episode as schema
from wmx.sizes import noun_for

FIXES = {
    "manifest": "rebuild the dataset (beam run pipelines/build_mt19.py or build_taskset.py)",
    "shard_missing": "the shard was deleted or moved: rebuild the dataset from its sources",
    "shard_size": "the shard file is damaged: rebuild the dataset from its sources",
    "shard_digest": "the shard file is damaged: rebuild the dataset from its sources",
    "read": "the shard file is damaged: rebuild the dataset from its sources",
    "decode": "the record is damaged: rebuild the dataset from its sources",
    "stray_file": "remove it (a dataset holds exactly its manifest's shards; this is a "
                  "leftover of a copy or a manual edit), or rebuild the dataset",
    "counts": "the manifest was edited or the shards replaced: rebuild the dataset",
    "returns": "the manifest was edited or the shards replaced: rebuild the dataset",
    "registry": "the TaskSet was edited (or built by another wmx): rebuild the dataset with "
                "this wmx from its sources",
    "content_hash": "the dataset was changed after it was built, so its name@hash does not "
                    "name its content: rebuild it from its sources and remove this copy",
    "name": "the dataset was moved or renamed after it was built: rebuild it, or move it back "
            "under datasets/<its manifest's name>/",
    "duplicate": "rebuild the dataset with this wmx (a build pools each episode once per task)",
}
"""The fix of each check when no more specific one is known (record checks name the
source episode set, see `_record_fix`)."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failed check: where (a shard file name, "manifest" or "dataset"),
    which check, a message, and what to do."""
    where: str
    check: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}" + (
            f"\n      fix: {self.fix}" if self.fix else "")


@dataclasses.dataclass
class ValidationReport:
    """Result of validate_dataset: path, episodes decoded, failures, and notes on what
    could not be checked."""
    path: Path
    episodes_checked: int = 0
    failures: list[Failure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def checks(self) -> set[str]:
        """The names of the checks that failed."""
        return {f.check for f in self.failures}

    def add(self, where: str, check: str, message: str, fix: str | None = None) -> None:
        self.failures.append(Failure(where, check, message,
                                     FIXES.get(check, "") if fix is None else fix))

    def format(self) -> str:
        head = (f"{self.path}: {'OK' if self.ok else 'FAILED'} "
                f"({self.episodes_checked} episodes checked, {len(self.failures)} failures)")
        return "\n".join([head] + [f"  {f}" for f in self.failures]
                         + [f"  note: {n}" for n in self.notes])


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


def registry_problems(taskset) -> tuple[list[str], list[str]]:
    """``(problems, notes)`` of a TaskSet against the task registry (wmx.envs.registry).

    For each task the registry knows: obs dim, action dim and action repeat equal
    the registry's, the discount is γ(T) of its T (tdmpc2_spec 2.20), and with the
    TD-MPC2 reference source its reference score is TD-MPC2's published one. A
    TaskSet named ``mt19`` or ``mt19-<8 hex>`` must be exactly ``mt19()`` or the
    subset of its tasks. Notes: tasks the registry does not know (not checked),
    and a T other than the registry's (a shortened run's episodes)."""
    from wmx.envs.registry import TASKS, discount_from_length
    from wmx.schemas.taskset import (MT19_NAME, TDMPC2_FINAL_RETURNS,
                                     TDMPC2_REFERENCE_SOURCE, is_mt19_name, mt19)
    problems, notes = [], []
    for t, score in zip(taskset.tasks, taskset.reference_scores):
        spec = TASKS.get(t.name)
        if spec is None:
            notes.append(f"task {t.name} is not in the task registry: its dims, discount and "
                         "reward range were not checked")
            continue
        for field, want in (("obs_dim", spec.obs_dim), ("action_dim", spec.action_dim),
                            ("action_repeat", spec.action_repeat)):
            if getattr(t, field) != want:
                problems.append(f"task {t.name}: {field} {getattr(t, field)}, the task "
                                f"registry says {want}")
        gamma = discount_from_length(t.episode_length)
        if not math.isclose(t.discount, gamma, rel_tol=1e-9, abs_tol=1e-12):
            problems.append(f"task {t.name}: discount {t.discount}, the registry's "
                            f"γ(T={t.episode_length}) is {gamma}")
        if taskset.reference_source == TDMPC2_REFERENCE_SOURCE:
            want = TDMPC2_FINAL_RETURNS.get(t.name)
            if (want is None) != (score is None) or (
                    want is not None and not math.isclose(score, want, rel_tol=1e-9)):
                problems.append(f"task {t.name}: reference score {score}, TD-MPC2's published "
                                f"final return is {want}")
        if t.episode_length != spec.T:
            notes.append(f"task {t.name}: T = {t.episode_length} agent steps, not the "
                         f"registry's {spec.T} (episodes of a shortened run)")
    if is_mt19_name(taskset.name):
        full = mt19()
        unknown = [n for n in taskset.names if n not in full.names]
        if unknown:
            problems.append(f"TaskSet {taskset.name}: {unknown} are not mt19 tasks")
        else:
            want = full if taskset.name == MT19_NAME else full.subset(taskset.names)
            if want.name != taskset.name:
                problems.append(f"TaskSet {taskset.name}: the mt19 subset of these tasks is "
                                f"named {want.name}" if taskset.name != MT19_NAME else
                                f"TaskSet mt19 must hold the 19 mt19 tasks; it holds "
                                f"{list(taskset.names)}")
            elif want.to_dict() != taskset.to_dict():
                got, exp = taskset.to_dict(), want.to_dict()
                diff = sorted({k for a, b in zip(got["tasks"], exp["tasks"])
                               for k in a if a.get(k) != b.get(k)}
                              | ({"task order"} if taskset.names != want.names else set())
                              | ({"reference_source"} if got["reference_source"]
                                 != exp["reference_source"] else set()))
                problems.append(f"TaskSet {taskset.name} differs from mt19's definition in "
                                f"{diff}")
    return problems, notes


class _Sources:
    """The source episode sets of a dataset found in its store, to name the one holding
    an episode (by digest); loaded on first use."""

    def __init__(self, raw: dict, home: Path | None):
        self.raw, self.home, self._index = raw, home, None

    def index(self) -> dict[str, list[str]]:
        if self._index is None:
            self._index = {}
            from wmx.schemas.manifest import EpisodeSetManifest
            by_hash = {s.get("content_hash"): s.get("task") for s in
                       (self.raw.get("builder") or {}).get("source_sets", [])
                       if isinstance(s, dict)}
            for h in self.raw.get("sources", []):
                task = by_hash.get(h)
                if self.home is None or not task:
                    continue
                try:
                    m = EpisodeSetManifest.load(self.home / "episodes" / task / h)
                except (OSError, ValueError):
                    continue
                for d in m.episode_digests:
                    self._index.setdefault(d, []).append(f"{task}@{h[:10]}")
        return self._index

    def holding(self, digest: str) -> list[str]:
        return self.index().get(digest, [])

    def found(self) -> bool:
        return bool(self.index())


_EPISODE_CHECKS = ("rows", "finite", "action_range", "reward_range")
"""Record checks of the episode itself (not of its padding or task id, which the build adds)."""


def _record_fix(sources: _Sources, digest: str | None, check: str) -> str:
    """The fix of a bad record: for a fault of the episode itself, the source episode set
    that holds it, if the store has it."""
    if digest is None or check not in _EPISODE_CHECKS:
        return FIXES.get(check, "the record was written wrong or changed after the build: "
                                "rebuild the dataset from its sources")
    held = sources.holding(digest)
    if held:
        return (f"its source episode set {', '.join(held)} holds the same bad episode: export "
                "that run's episodes again (or build without the set: --sources), then rebuild "
                "the dataset")
    if sources.found():
        return ("no source episode set holds this episode, so the dataset was changed after "
                "it was built: rebuild it from its sources")
    return ("rebuild the dataset from its sources (they are not in this store, so the one "
            "holding the episode cannot be named)")


def validate_dataset(ref, home=None, max_failures_per_check: int = 20) -> ValidationReport:
    """Run every check on the dataset `ref` (name@hash, name@latest or a path).

    Never raises for bad content: each problem becomes a Failure naming the
    shard and the check (at most `max_failures_per_check` per shard and check,
    then one summary line). A dataset whose content no longer matches the
    hash it is stored under resolves here (and fails content_hash), unlike
    everywhere else. Raises only for a `ref` that does not resolve
    (NameResolutionError / FileNotFoundError)."""
    from array_record.python.array_record_module import ArrayRecordReader
    from wmx.datasets.store import Store
    from wmx.envs.registry import TASKS
    from wmx.schemas.hashing import dataset_content_hash, file_digest, is_sha256_hex
    from wmx.schemas.manifest import DatasetManifest
    from wmx.schemas.taskset import TaskSet

    path = Store(home).resolve_dataset(ref, check_content=False)
    rep = ValidationReport(path=path)
    counts: dict[tuple[str, str], int] = {}

    def add(where, check, msg, fix=None):
        n = counts.get((where, check), 0) + 1
        counts[(where, check)] = n
        if n <= max_failures_per_check:
            rep.add(where, check, msg, fix)
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
    in_store = is_sha256_hex(path.name)
    sources = _Sources(raw, path.parents[2] if in_store and len(path.parents) > 2 else
                       (Store(home).home if home is not None else None))

    listed = {"manifest.json"} | {n for n, _ in shards}
    for p in sorted(path.iterdir()):
        if p.name not in listed:
            add(p.name, "stray_file", f"{'folder' if p.is_dir() else 'file'} not listed in the "
                                      "manifest")
    problems, rep.notes = registry_problems(taskset)
    for prob in problems:
        add("manifest", "registry", prob)

    O, A = taskset.max_obs_dim, taskset.max_action_dim
    digests, rets = [], {t: [] for t in taskset.names}
    where_is: dict[tuple[str, str], list[str]] = {}    # (task, digest): its records
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
            try:
                _, ep = schema.unpad_episode(rec)
                digest = schema.episode_digest(ep)
            except ValueError:
                ep, digest = None, None
            for prob in schema.validate_episode_rows(rec, T=task.episode_length):
                check = _classify(prob)
                add(name, check, f"record {j} (task {task.name}): {prob}",
                    _record_fix(sources, digest, check))
            spec = TASKS.get(task.name)
            if spec is not None:
                lo, hi = spec.agent_step_reward_range()
                tol = 1e-5 * max(1.0, abs(lo), abs(hi))
                r = np.asarray(rec["reward"][1:], np.float64)
                bad = np.flatnonzero(np.isfinite(r) & ((r < lo - tol) | (r > hi + tol)))
                if bad.size:
                    k = int(bad[0])
                    add(name, "reward_range",
                        f"record {j} (task {task.name}): reward {r[k]:.6g} on row {k + 1}"
                        f"{f' (and {bad.size - 1} more rows)' if bad.size > 1 else ''} is "
                        f"outside [{lo:g}, {hi:g}], the reward of one agent step of "
                        f"{task.name} ({spec.reward_range} per simulator step x action repeat "
                        f"{spec.action_repeat})", _record_fix(sources, digest, "reward_range"))
            if ep is None:
                continue
            digests.append(digest)
            where_is.setdefault((task.name, digest), []).append(f"{name} record {j}")
            rets[task.name].append(schema.episode_return(ep))
    for (tname, dg), places in where_is.items():   # one episode in two tasks is two records
        if len(places) > 1:   # the sets of this task that hold it
            held = [h for h in sources.holding(dg) if h.startswith(f"{tname}@")]
            add("dataset", "duplicate",
                f"episode {dg[:16]}... (task {tname}) is stored {len(places)} times: "
                f"{', '.join(places)}",
                FIXES["duplicate"] + (f"; the copies come from source episode "
                                      f"{noun_for(len(held), 'set')} "
                                      f"{', '.join(held)}" if held else ""))
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
    if in_store:
        if raw.get("content_hash") != path.name:
            add("dataset", "content_hash",
                f"it is stored (and named) as {path.parent.name}@{path.name[:16]}..., but its "
                f"manifest's content hash is {str(raw.get('content_hash'))[:16]}...")
        if raw.get("name") != path.parent.name:
            add("dataset", "name", f"it is stored under the name {path.parent.name!r}, but its "
                                   f"manifest names it {raw.get('name')!r}")
    return rep
