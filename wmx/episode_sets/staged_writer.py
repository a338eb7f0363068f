"""Incremental episode-set export for a training run (DESIGN.md §1).

``EpisodeSetWriter`` stages one seed's completed episodes chunk by chunk in a
directory of the run (``runs/<id>/...``) and turns them into one episode set
in the store at the end. The staging state lives on disk, so a run restored
from a checkpoint by a new process reopens the same directory and carries on:

    staging/state.json                 committed chunks: file name, sha256,
                                       per-episode digests and returns, and the
                                       finalised set (path, content hash)
    staging/chunk-000000.array_record  one ArrayRecord file per append call

A chunk is written to a temporary name, fsynced and renamed, and only then
listed in state.json (itself replaced atomically); files not listed are left
over from an interrupted append and are deleted on reopen. ``append`` takes
the absolute index of its first episode, so a resumed run that re-collects
episodes already exported skips them (after checking they are bit-identical)
instead of storing duplicates. ``finalize`` is idempotent.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from wmx.episode_sets.episode_set import (READER_OPTIONS, WRITER_OPTIONS,
                                     _as_producer, check_episode, env_versions,
                                     write_records)
from wmx.datasets.store import Store
from wmx.schemas.episode import (Episode, episode_return, record_digest,
                                 serialize_episode)
from wmx.schemas.hashing import file_digest
from wmx.schemas.manifest import Producer
from wmx.schemas.taskset import TaskInfo

STATE_FILENAME = "state.json"
STATE_VERSION = 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="ascii") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def split_batch(batch: Mapping[str, Any]) -> list[Episode]:
    """Episodes from stacked arrays: each value has a leading episode axis
    (obs [N, T+1, O], action [N, T+1, A], reward/flags [N, T+1]); returns N
    episode dicts of numpy arrays (dtypes kept). Raises ValueError when the
    leading sizes disagree."""
    import numpy as np
    arrays = {k: np.asarray(v) for k, v in batch.items()}
    sizes = {k: v.shape[0] if v.ndim else None for k, v in arrays.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"batch fields disagree on the episode axis: {sizes}")
    n = next(iter(sizes.values()))
    return [{k: np.ascontiguousarray(v[i]) for k, v in arrays.items()}
            for i in range(n)]


def require_array_record() -> None:
    """Raise a one-line ImportError naming the fix when ArrayRecord cannot be imported
    (the writer imports it lazily, at its first chunk: a run would learn of a missing
    package only after its first round)."""
    try:
        import array_record.python.array_record_module  # noqa: F401
    except ImportError as e:
        raise ImportError(f"episode export needs the array_record package ({e}): install "
                          "wmx's dependencies (pip install -r requirements-lock.txt), or "
                          "train with --no-export (no episode sets)") from None


class EpisodeSetWriter:
    """Append-then-finalise writer of one seed's episode set.

    EpisodeSetWriter(staging_dir, task, producer, versions=None): opens (or
    creates) the staging directory. task: TaskInfo or a registry TaskSpec;
    producer: Producer or dict; versions: env versions (default
    env_versions()). Reopening a directory written for another task or
    producer raises ValueError (a resumed run must be the same run and seed);
    ``new_config``: the run was extended on resume, so its config hash changed
    (the length is part of it): the new producer is recorded instead. Without the
    array_record package it raises ImportError (`require_array_record`) before
    anything is written.
    """

    def __init__(self, staging_dir: str | os.PathLike, task: Any,
                 producer: Producer | Mapping[str, Any],
                 versions: Mapping[str, str] | None = None, *, new_config: bool = False):
        require_array_record()     # at the run's start, not at its first round's end
        self.dir = Path(staging_dir)
        self.task = TaskInfo.from_spec(task)
        self.producer = _as_producer(producer)
        self.dir.mkdir(parents=True, exist_ok=True)
        state_path = self.dir / STATE_FILENAME
        if state_path.is_file():
            self._state = json.loads(state_path.read_text(encoding="ascii"))
            self._check_reopen(new_config)
        else:
            self._state = {"version": STATE_VERSION, "task": self.task.to_dict(),
                           "producer": _producer_dict(self.producer),
                           "env_versions": dict(versions if versions is not None
                                                else env_versions()),
                           "chunks": [], "finalized": None}
            _write_json_atomic(state_path, self._state)
        self._remove_strays()

    # ---- state ---------------------------------------------------------------
    def _check_reopen(self, new_config: bool = False) -> None:
        s = self._state
        if s.get("version") != STATE_VERSION:
            raise ValueError(f"{self.dir}: staging state version {s.get('version')}"
                             f", this wmx writes {STATE_VERSION}")
        if s["task"] != self.task.to_dict():
            raise ValueError(f"{self.dir} stages episodes of task {s['task']}, not "
                             f"{self.task.to_dict()}; use another directory")
        mine = _producer_dict(self.producer)
        theirs = dict(s["producer"])
        # the code version may change between a run and its resumption
        mine.pop("code_version"), theirs.pop("code_version", None)
        if new_config and theirs.get("config_hash") != mine["config_hash"]:
            theirs["config_hash"] = mine["config_hash"]     # an extended run: its new hash
            self._state = dict(s, producer=_producer_dict(self.producer))
            _write_json_atomic(self.dir / STATE_FILENAME, self._state)
        if {k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k)} \
                == {"run_id"}:
            raise ValueError(f"{self.dir} stages the episodes of run {theirs['run_id']!r}, "
                             f"but this run is named {mine['run_id']!r} (its directory was "
                             f"renamed or copied): rename the directory back to "
                             f"{theirs['run_id']!r}, or continue it with --no-export (no "
                             "episode sets)")
        if theirs != mine:
            raise ValueError(f"{self.dir} stages episodes of producer {theirs}, "
                             f"not {mine}; a resumed run must be the same run id, "
                             "agent, config hash and seed")
        for c in s["chunks"]:
            p = self.dir / c["file"]
            if s["finalized"] is None and (
                    not p.is_file() or p.stat().st_size != c["size_bytes"]):
                raise ValueError(f"{p}: committed chunk is missing or truncated "
                                 "(size differs from state.json)")

    def _remove_strays(self) -> None:
        listed = {c["file"] for c in self._state["chunks"]} | {STATE_FILENAME}
        for p in self.dir.iterdir():
            if p.is_file() and p.name not in listed:
                p.unlink()

    @property
    def num_episodes(self) -> int:
        """Episodes committed so far (all chunks)."""
        return sum(len(c["digests"]) for c in self._state["chunks"])

    @property
    def digests(self) -> list[str]:
        """Digests of the committed episodes, in order."""
        return [d for c in self._state["chunks"] for d in c["digests"]]

    @property
    def finalized_path(self) -> Path | None:
        """The stored set's directory once finalised, else None."""
        f = self._state["finalized"]
        return None if f is None else Path(f["path"])

    # ---- append --------------------------------------------------------------
    def append(self, episodes: Iterable[Mapping[str, Any]],
               start_index: int | None = None) -> int:
        """Commit a chunk of completed episodes; returns how many were new.

        start_index: absolute index (in this seed's episode history) of the
        first episode; None appends after the committed ones. Episodes below
        num_episodes are checked against the committed digests and skipped
        (ValueError if they differ: the resumed run did not replay the
        original). A start_index above num_episodes (a gap) raises ValueError.
        Every episode is checked against the task's row invariants.
        """
        if self._state["finalized"] is not None:
            raise ValueError(f"{self.dir} is finalised; no more episodes can be "
                             "appended")
        n_have = self.num_episodes
        start = n_have if start_index is None else int(start_index)
        if start < 0 or start > n_have:
            raise ValueError(f"start_index {start} leaves a gap or is negative: "
                             f"{n_have} episodes are committed, so the next chunk "
                             f"starts at {n_have} at the latest")
        have = self.digests
        records, digests, returns = [], [], []
        for j, ep in enumerate(episodes):
            idx = start + j
            ep = check_episode(ep, self.task, idx)
            rec = serialize_episode(ep)
            dig = record_digest(rec)
            if idx < n_have:
                if dig != have[idx]:
                    raise ValueError(
                        f"episode {idx} differs from the one already exported; "
                        "the resumed run does not replay the original one")
                continue
            records.append(rec)
            digests.append(dig)
            returns.append(episode_return(ep))
        if not records:
            return 0
        self._write_chunk(records, digests, returns)
        return len(records)

    def _write_chunk(self, records, digests, returns) -> None:
        from array_record.python.array_record_module import ArrayRecordWriter
        name = f"chunk-{len(self._state['chunks']):06d}.array_record"
        final = self.dir / name
        tmp = self.dir / f".{name}.tmp"
        w = ArrayRecordWriter(str(tmp), WRITER_OPTIONS)
        for r in records:
            w.write(r)
        w.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        chunk = {"file": name, "sha256": file_digest(final),
                 "size_bytes": final.stat().st_size, "digests": digests,
                 "returns": returns}
        state = dict(self._state, chunks=self._state["chunks"] + [chunk])
        _write_json_atomic(self.dir / STATE_FILENAME, state)
        self._state = state

    # ---- finalize -------------------------------------------------------------
    def _records(self):
        from array_record.python.array_record_module import ArrayRecordReader
        for c in self._state["chunks"]:
            p = self.dir / c["file"]
            if file_digest(p) != c["sha256"]:
                raise ValueError(f"{p}: sha256 differs from state.json; the "
                                 "staged chunk is corrupted")
            r = ArrayRecordReader(str(p), READER_OPTIONS)
            try:
                recs = r.read_all()
            finally:
                r.close()
            if len(recs) != len(c["digests"]):
                raise ValueError(f"{p} holds {len(recs)} records, state.json "
                                 f"lists {len(c['digests'])}")
            for rec, dig, ret in zip(recs, c["digests"], c["returns"]):
                if record_digest(rec) != dig:
                    raise ValueError(f"{p}: a record's digest differs from "
                                     "state.json")
                yield rec, dig, ret

    def finalize(self, store: Store, remove_chunks: bool = True) -> Path:
        """Store every committed episode as one episode set and return its
        directory (episodes/<task>/<content hash>). Idempotent: a second call,
        or a call after a crash between storing and recording, returns the
        same path. With ``remove_chunks`` the staged chunk files are deleted
        once the set is stored (state.json keeps the digests)."""
        f = self._state["finalized"]
        if f is not None:
            path = Path(f["path"])
            if not (path / "manifest.json").is_file():
                raise FileNotFoundError(
                    f"{path}: the episode set finalised from {self.dir} is gone "
                    "from the store")
            return path
        path = write_records(store, self.task, self._records(), self.producer,
                             self._state["env_versions"])
        state = dict(self._state, finalized={"path": str(path),
                                             "content_hash": path.name})
        _write_json_atomic(self.dir / STATE_FILENAME, state)
        self._state = state
        if remove_chunks:
            for c in state["chunks"]:
                (self.dir / c["file"]).unlink(missing_ok=True)
        return path


def _producer_dict(p: Producer) -> dict:
    return {"run_id": p.run_id, "agent": p.agent, "config_hash": p.config_hash,
            "seed": p.seed, "code_version": p.code_version}
