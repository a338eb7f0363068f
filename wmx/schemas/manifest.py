"""Manifests of episode sets and pooled datasets (DESIGN.md §1, §4).

Both are frozen dataclasses written as ``manifest.json`` (indented, sorted
keys) next to the data. Construction validates everything that can be checked
without the data: schema version, counts, digest formats, and that
``content_hash`` equals the hash recomputed from the listed episode digests.
Lineage: an episode set names its producer (run id, agent, config hash, seed,
code version); a dataset names the content hashes of its source episode sets.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from wmx.schemas.episode import SCHEMA_VERSION
from wmx.schemas.hashing import (dataset_content_hash, episode_set_content_hash,
                                 is_sha256_hex)
from wmx.schemas.taskset import TaskInfo, TaskSet, _check_keys

MANIFEST_FILENAME = "manifest.json"


class ManifestError(ValueError):
    """A manifest is malformed or inconsistent with itself."""


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601 with microseconds and a "+00:00" offset."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def parse_created(value: str) -> _dt.datetime:
    """Parse a manifest ``created`` time (ISO 8601 with a UTC offset);
    raises ManifestError otherwise."""
    try:
        t = _dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ManifestError(f"created {value!r} is not an ISO 8601 time") from None
    if t.tzinfo is None:
        raise ManifestError(f"created {value!r} needs a UTC offset (+00:00)")
    return t


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ManifestError(msg)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One data file: name (relative to the manifest's directory), sha256 of
    its bytes, size in bytes, number of records."""
    name: str
    sha256: str
    size_bytes: int
    num_records: int

    def __post_init__(self):
        _require(isinstance(self.name, str) and self.name and "/" not in self.name
                 and not self.name.startswith("."),
                 f"file name {self.name!r} must be a plain file name")
        _require(is_sha256_hex(self.sha256),
                 f"file {self.name}: sha256 {self.sha256!r} is not 64 hex chars")
        for f in ("size_bytes", "num_records"):
            v = getattr(self, f)
            _require(_is_int(v) and v >= 0, f"file {self.name}: {f} must be an "
                     f"int >= 0, got {v!r}")
            object.__setattr__(self, f, int(v))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileEntry":
        _check_keys_m(d, [f.name for f in dataclasses.fields(cls)], "file entry")
        return cls(**dict(d))


@dataclasses.dataclass(frozen=True)
class Producer:
    """What produced an episode set: run id, agent ("tdmpc2", "dreamerv3",
    "random", ...), config hash, seed (int), code version (git commit, else
    the package version)."""
    run_id: str
    agent: str
    config_hash: str
    seed: int
    code_version: str

    def __post_init__(self):
        for f in ("run_id", "agent", "config_hash", "code_version"):
            v = getattr(self, f)
            _require(isinstance(v, str) and v != "",
                     f"producer.{f} must be a non-empty string, got {v!r}")
        _require(_is_int(self.seed), f"producer.seed must be an int, got "
                 f"{self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Producer":
        _check_keys_m(d, [f.name for f in dataclasses.fields(cls)], "producer")
        return cls(**dict(d))


@dataclasses.dataclass(frozen=True)
class TaskStats:
    """Per-task statistics of a pooled dataset: episode count and undiscounted
    return mean / std (population) / min / max (None when no episodes)."""
    episodes: int
    return_mean: float | None
    return_std: float | None
    return_min: float | None
    return_max: float | None

    def __post_init__(self):
        _require(_is_int(self.episodes) and self.episodes >= 0,
                 f"task stats: episodes must be an int >= 0, got {self.episodes!r}")
        object.__setattr__(self, "episodes", int(self.episodes))
        stats = ("return_mean", "return_std", "return_min", "return_max")
        for f in stats:
            v = getattr(self, f)
            if self.episodes == 0:
                _require(v is None, f"task stats: {f} must be null with 0 episodes")
            else:
                _require(isinstance(v, (int, float)) and math.isfinite(v),
                         f"task stats: {f} must be a finite number, got {v!r}")
                object.__setattr__(self, f, float(v))

    @classmethod
    def from_returns(cls, returns: Iterable[float]) -> "TaskStats":
        """Statistics of a list of episode returns (float64 arithmetic)."""
        r = np.asarray(list(returns), dtype=np.float64)
        if r.size == 0:
            return cls(0, None, None, None, None)
        return cls(int(r.size), float(r.mean()), float(r.std()), float(r.min()),
                   float(r.max()))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TaskStats":
        _check_keys_m(d, [f.name for f in dataclasses.fields(cls)], "task stats")
        return cls(**dict(d))


def _check_keys_m(d: Any, expected: Iterable[str], what: str) -> None:
    try:
        _check_keys(d, expected, what)
    except ValueError as e:
        raise ManifestError(str(e)) from None


def _as_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return {f.name: _as_dict(getattr(obj, f.name))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_as_dict(x) for x in obj]
    if isinstance(obj, Mapping):
        return {k: _as_dict(v) for k, v in obj.items()}
    return obj


class _ManifestIO:
    """Shared JSON helpers; subclasses define KIND, to_dict and from_dict."""
    KIND = ""

    def to_json(self) -> str:
        """manifest.json text: indented, sorted keys, trailing newline."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True,
                          allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str):
        """Parse and validate manifest JSON text; ManifestError on problems."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{cls.KIND} manifest is not valid JSON: {e}") from e
        return cls.from_dict(d)

    def write(self, directory: str | os.PathLike) -> Path:
        """Write ``<directory>/manifest.json`` (fsynced) and return its path.
        Call it inside ``atomic_dir`` so a reader never sees a partial file."""
        path = Path(directory) / MANIFEST_FILENAME
        with open(path, "w", encoding="ascii") as f:
            f.write(self.to_json())
            f.flush()
            os.fsync(f.fileno())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike):
        """Read a manifest from a file or from ``<dir>/manifest.json``.
        FileNotFoundError if absent, ManifestError if invalid (the message
        names the file)."""
        p = Path(path)
        if p.is_dir():
            p = p / MANIFEST_FILENAME
        if not p.is_file():
            raise FileNotFoundError(f"no {cls.KIND} manifest at {p}")
        try:
            return cls.from_json(p.read_text(encoding="ascii"))
        except ManifestError as e:
            raise ManifestError(f"{p}: {e}") from None


def _check_header(d: Any, kind: str) -> None:
    _require(isinstance(d, Mapping), f"{kind} manifest must be a JSON object")
    _require(d.get("kind") == kind,
             f"manifest kind is {d.get('kind')!r}, expected {kind!r}")
    v = d.get("schema_version")
    _require(v == SCHEMA_VERSION,
             f"{kind} manifest has schema version {v!r}; this wmx reads version "
             f"{SCHEMA_VERSION}: rebuild it with this version of wmx")


def _check_digests(digests: tuple, what: str) -> None:
    bad = [i for i, d in enumerate(digests) if not is_sha256_hex(d)]
    _require(not bad, f"{what}: entries {bad[:5]} are not 64-char sha256 hex")


@dataclasses.dataclass(frozen=True)
class EpisodeSetManifest(_ManifestIO):
    """manifest.json of an episode set (one task, one producer).

    episode_returns[i] and episode_digests[i] describe record i in file order
    (files in list order, records in file order). env_versions: e.g.
    {"mujoco": "3.3.7", "playground": "0.2.0"}. content_hash: see
    wmx.schemas.hashing (checked on construction). created: ISO 8601 UTC.
    Raises ManifestError on any inconsistency.
    """
    KIND = "episode_set"
    task: TaskInfo
    env_versions: Mapping[str, str]
    producer: Producer
    episode_returns: tuple[float, ...]
    episode_digests: tuple[str, ...]
    files: tuple[FileEntry, ...]
    content_hash: str
    created: str
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        _require(self.schema_version == SCHEMA_VERSION,
                 f"schema_version {self.schema_version} != {SCHEMA_VERSION}")
        _require(isinstance(self.task, TaskInfo), "task must be a TaskInfo")
        _require(isinstance(self.producer, Producer), "producer must be a Producer")
        _require(isinstance(self.env_versions, Mapping) and all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in self.env_versions.items()),
            "env_versions must map names to version strings")
        object.__setattr__(self, "env_versions", dict(sorted(self.env_versions.items())))
        rets = tuple(self.episode_returns)
        _require(all(isinstance(r, (int, float)) and math.isfinite(r) for r in rets),
                 "episode_returns must be finite numbers")
        object.__setattr__(self, "episode_returns", tuple(float(r) for r in rets))
        digests = tuple(self.episode_digests)
        object.__setattr__(self, "episode_digests", digests)
        object.__setattr__(self, "files", tuple(self.files))
        _check_digests(digests, "episode_digests")
        _require(len(rets) == len(digests),
                 f"{len(rets)} episode_returns but {len(digests)} episode_digests")
        n_rec = sum(f.num_records for f in self.files)
        _require(n_rec == len(digests),
                 f"files hold {n_rec} records but {len(digests)} episodes are listed")
        names = [f.name for f in self.files]
        _require(len(set(names)) == len(names), f"duplicate file names {names}")
        parse_created(self.created)
        expected = episode_set_content_hash(self.task, digests)
        _require(self.content_hash == expected,
                 f"content_hash {self.content_hash!r} does not match the listed "
                 f"episodes and task (expected {expected}); the manifest was "
                 "edited or corrupted")

    @property
    def episode_count(self) -> int:
        return len(self.episode_digests)

    def to_dict(self) -> dict:
        """JSON-able dict, with ``kind`` and ``episode_count`` added."""
        return {"kind": self.KIND, "schema_version": self.schema_version,
                "task": self.task.to_dict(), "env_versions": dict(self.env_versions),
                "producer": _as_dict(self.producer),
                "episode_count": self.episode_count,
                "episode_returns": list(self.episode_returns),
                "episode_digests": list(self.episode_digests),
                "files": [_as_dict(f) for f in self.files],
                "content_hash": self.content_hash, "created": self.created}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EpisodeSetManifest":
        """Validate and build; ManifestError names the problem."""
        _check_header(d, cls.KIND)
        _check_keys_m(d, ["kind", "schema_version", "task", "env_versions",
                          "producer", "episode_count", "episode_returns",
                          "episode_digests", "files", "content_hash", "created"],
                      "episode_set manifest")
        for key in ("episode_returns", "episode_digests", "files"):
            _require(isinstance(d[key], list), f"{key} must be a list")
        _require(d["episode_count"] == len(d["episode_digests"]),
                 f"episode_count {d['episode_count']} != "
                 f"{len(d['episode_digests'])} listed digests")
        try:
            task = TaskInfo.from_dict(d["task"])
        except ValueError as e:
            raise ManifestError(f"task: {e}") from None
        return cls(task=task, env_versions=d["env_versions"],
                   producer=Producer.from_dict(d["producer"]),
                   episode_returns=tuple(d["episode_returns"]),
                   episode_digests=tuple(d["episode_digests"]),
                   files=tuple(FileEntry.from_dict(f) for f in d["files"]),
                   content_hash=d["content_hash"], created=d["created"],
                   schema_version=d["schema_version"])


@dataclasses.dataclass(frozen=True)
class DatasetManifest(_ManifestIO):
    """manifest.json of a pooled dataset.

    name: dataset name (the TaskSet name for a full build, "mt19");
    taskset: the TaskSet (task ids, padding widths, reference scores);
    per_task: {task name: TaskStats} for every task of the TaskSet;
    shards: shard files; episode_digests: ``episode_digest`` of every
    episode before padding (the digests its source manifests list), sorted; sources: content hashes of the source episode sets, sorted;
    builder: JSON-able description of the build (pipeline, runner, code
    version, options). content_hash: wmx.schemas.hashing (checked).
    Raises ManifestError on any inconsistency.
    """
    KIND = "pooled_dataset"
    name: str
    taskset: TaskSet
    per_task: Mapping[str, TaskStats]
    shards: tuple[FileEntry, ...]
    episode_digests: tuple[str, ...]
    sources: tuple[str, ...]
    builder: Mapping[str, Any]
    content_hash: str
    created: str
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        _require(self.schema_version == SCHEMA_VERSION,
                 f"schema_version {self.schema_version} != {SCHEMA_VERSION}")
        _require(isinstance(self.name, str) and self.name and "@" not in self.name
                 and "/" not in self.name,
                 f"dataset name {self.name!r} must be non-empty, without '@' or '/'")
        _require(isinstance(self.taskset, TaskSet), "taskset must be a TaskSet")
        stats = dict(self.per_task)
        _require(set(stats) == set(self.taskset.names),
                 f"per_task covers {sorted(stats)}, expected exactly the "
                 f"TaskSet's tasks {list(self.taskset.names)}")
        object.__setattr__(self, "per_task",
                           {n: stats[n] for n in self.taskset.names})
        digests = tuple(sorted(self.episode_digests))
        _check_digests(digests, "episode_digests")
        object.__setattr__(self, "episode_digests", digests)
        sources = tuple(sorted(self.sources))
        _check_digests(sources, "sources")
        object.__setattr__(self, "sources", sources)
        object.__setattr__(self, "shards", tuple(self.shards))
        names = [f.name for f in self.shards]
        _require(len(set(names)) == len(names), f"duplicate shard names {names}")
        n_stats = sum(s.episodes for s in stats.values())
        n_rec = sum(f.num_records for f in self.shards)
        _require(n_stats == len(digests) == n_rec,
                 f"episode counts disagree: per_task {n_stats}, digests "
                 f"{len(digests)}, shard records {n_rec}")
        _require(isinstance(self.builder, Mapping), "builder must be a JSON object")
        try:
            json.dumps(self.builder, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ManifestError(f"builder is not JSON-able: {e}") from None
        parse_created(self.created)
        expected = dataset_content_hash(self.taskset, digests)
        _require(self.content_hash == expected,
                 f"content_hash {self.content_hash!r} does not match the listed "
                 f"episodes and TaskSet (expected {expected}); the manifest was "
                 "edited or corrupted")

    @property
    def episode_count(self) -> int:
        return len(self.episode_digests)

    def to_dict(self) -> dict:
        """JSON-able dict, with ``kind`` and ``episode_count`` added."""
        return {"kind": self.KIND, "schema_version": self.schema_version,
                "name": self.name, "taskset": self.taskset.to_dict(),
                "per_task": {k: _as_dict(v) for k, v in self.per_task.items()},
                "shards": [_as_dict(f) for f in self.shards],
                "episode_count": self.episode_count,
                "episode_digests": list(self.episode_digests),
                "sources": list(self.sources), "builder": dict(self.builder),
                "content_hash": self.content_hash, "created": self.created}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DatasetManifest":
        """Validate and build; ManifestError names the problem."""
        _check_header(d, cls.KIND)
        _check_keys_m(d, ["kind", "schema_version", "name", "taskset",
                          "per_task", "shards", "episode_count",
                          "episode_digests", "sources", "builder",
                          "content_hash", "created"], "dataset manifest")
        for key in ("shards", "episode_digests", "sources"):
            _require(isinstance(d[key], list), f"{key} must be a list")
        _require(isinstance(d["per_task"], Mapping), "per_task must be an object")
        _require(d["episode_count"] == len(d["episode_digests"]),
                 f"episode_count {d['episode_count']} != "
                 f"{len(d['episode_digests'])} listed digests")
        try:
            taskset = TaskSet.from_dict(d["taskset"])
        except ValueError as e:
            raise ManifestError(f"taskset: {e}") from None
        return cls(name=d["name"], taskset=taskset,
                   per_task={k: TaskStats.from_dict(v)
                               for k, v in d["per_task"].items()},
                   shards=tuple(FileEntry.from_dict(f) for f in d["shards"]),
                   episode_digests=tuple(d["episode_digests"]),
                   sources=tuple(d["sources"]), builder=d["builder"],
                   content_hash=d["content_hash"], created=d["created"],
                   schema_version=d["schema_version"])


def load_manifest(path: str | os.PathLike) -> EpisodeSetManifest | DatasetManifest:
    """Load either kind of manifest, dispatching on its ``kind`` field."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_FILENAME
    if not p.is_file():
        raise FileNotFoundError(f"no manifest at {p}")
    try:
        d = json.loads(p.read_text(encoding="ascii"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{p}: not valid JSON: {e}") from None
    kinds = {c.KIND: c for c in (EpisodeSetManifest, DatasetManifest)}
    kind = d.get("kind") if isinstance(d, Mapping) else None
    if kind not in kinds:
        raise ManifestError(f"{p}: manifest kind {kind!r} unknown; expected one "
                            f"of {sorted(kinds)}")
    try:
        return kinds[kind].from_dict(d)
    except ManifestError as e:
        raise ManifestError(f"{p}: {e}") from None
