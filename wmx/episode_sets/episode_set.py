"""Episode sets on disk: write, open, read, verify (DESIGN.md §1, §4).

An episode set is a directory ``episodes/<task>/<content hash>/`` holding
ArrayRecord files ``episodes-00000.array_record``, ... (one record = one
canonically serialised episode, wmx.schemas.episode; written with
``group_size:1`` so every record is randomly accessible) and
``manifest.json`` (wmx.schemas.manifest.EpisodeSetManifest). Sets are
content-addressed: writing a set whose content is already stored returns the
stored directory (its manifest names the first producer).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from wmx import failpoints
from wmx.datasets.store import Store, commit_dir, make_staging_dir
from wmx.version import code_version, env_versions
from wmx.schemas.episode import (Episode, deserialize_episode, episode_return,
                                 record_digest, serialize_episode,
                                 validate_episode_rows)
from wmx.schemas.hashing import episode_set_content_hash, file_digest
from wmx.schemas.manifest import (EpisodeSetManifest, FileEntry, Producer,
                                  utc_now_iso)
from wmx.schemas.taskset import TaskInfo

WRITER_OPTIONS = "group_size:1"
"""ArrayRecord writer options: one record per chunk, so random access reads
one episode without decoding its neighbours."""
READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
DEFAULT_RECORDS_PER_FILE = 1000


class EpisodeSetIntegrityError(ValueError):
    """An episode set's files disagree with its manifest."""


def file_name(index: int) -> str:
    """Name of the index-th ArrayRecord file of an episode set."""
    return f"episodes-{index:05d}.array_record"


def make_producer(run_id: str, agent: str, config_hash: str, seed: int,
                  code: str | None = None) -> Producer:
    """Producer record for a manifest; ``code`` defaults to code_version()."""
    return Producer(run_id=run_id, agent=agent, config_hash=config_hash,
                    seed=int(seed), code_version=code or code_version())


def _as_producer(producer: Producer | Mapping[str, Any]) -> Producer:
    if isinstance(producer, Producer):
        return producer
    d = dict(producer)
    d.setdefault("code_version", code_version())
    return Producer.from_dict(d)


def _as_numpy_episode(ep: Mapping[str, Any]) -> Episode:
    # np.asarray keeps the dtype (jax f32 -> numpy f32); serialize_episode
    # then refuses wrong dtypes instead of casting silently.
    return {k: np.asarray(v) for k, v in ep.items()}


def check_episode(ep: Mapping[str, Any], task: TaskInfo, index: int) -> Episode:
    """Numpy copy of ``ep`` after checking its rows against ``task``
    (validate_episode_rows with T, obs and action dims). Raises ValueError
    naming the episode index and every problem."""
    ep = _as_numpy_episode(ep)
    problems = validate_episode_rows(ep, T=task.episode_length, obs_dim=task.obs_dim,
                                     action_dim=task.action_dim)
    if problems:
        raise ValueError(f"episode {index} of task {task.name} breaks the row "
                         "invariants: " + "; ".join(problems))
    return ep


def write_records(store: Store, task: TaskInfo,
                  records: Iterable[tuple[bytes, str, float]],
                  producer: Producer, versions: Mapping[str, str] | None = None,
                  records_per_file: int = DEFAULT_RECORDS_PER_FILE,
                  created: str | None = None) -> Path:
    """Store already serialised records ``(bytes, sha256 hex, return)`` as an
    episode set of ``task`` and return its directory. The set is staged in a
    hidden directory under episodes/<task>/ and renamed to
    episodes/<task>/<content hash> when complete; if that directory exists
    the staging copy is dropped and the existing path returned.
    """
    from array_record.python.array_record_module import ArrayRecordWriter

    if records_per_file < 1:
        raise ValueError(f"records_per_file must be >= 1, got {records_per_file}")
    staging = make_staging_dir(store.episodes_dir / task.name, "episode-set")
    try:
        digests, returns, files = [], [], []
        writer, n_in_file = None, 0

        def close_file():
            writer.close()
            path = staging / file_name(len(files))
            files.append(FileEntry(name=path.name, sha256=file_digest(path),
                                   size_bytes=path.stat().st_size,
                                   num_records=n_in_file))

        for rec, digest, ret in records:
            if writer is None:
                writer = ArrayRecordWriter(str(staging / file_name(len(files))),
                                           WRITER_OPTIONS)
                n_in_file = 0
            writer.write(rec)
            n_in_file += 1
            digests.append(digest)
            returns.append(float(ret))
            if n_in_file == records_per_file:
                close_file()
                writer = None
        if writer is not None:
            close_file()
        manifest = EpisodeSetManifest(
            task=task, env_versions=dict(versions if versions is not None
                                         else env_versions()),
            producer=producer, episode_returns=tuple(returns),
            episode_digests=tuple(digests), files=tuple(files),
            content_hash=episode_set_content_hash(task, digests),
            created=created or utc_now_iso())
        manifest.write(staging)
        final = store.episode_set_path(task.name, manifest.content_hash)
        if (final / "manifest.json").is_file():
            shutil.rmtree(staging, ignore_errors=True)
            return final
        failpoints.hit("episode_set.staged")
        return commit_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_episode_set(store: Store, task: Any, episodes: Iterable[Mapping[str, Any]],
                      producer: Producer | Mapping[str, Any], *,
                      versions: Mapping[str, str] | None = None,
                      records_per_file: int = DEFAULT_RECORDS_PER_FILE,
                      created: str | None = None) -> Path:
    """Write ``episodes`` as one episode set of ``task`` into ``store``.

    task: TaskInfo or anything TaskInfo.from_spec accepts (a registry
    TaskSpec). episodes: iterable of episode dicts (numpy or jax arrays with
    the schema dtypes: obs f32[T+1, O], action f32[T+1, A], reward f32[T+1],
    is_first/is_last/is_terminal bool[T+1]); streamed, in the order given.
    producer: Producer or dict (run_id, agent, config_hash, seed[,
    code_version]). versions: env versions (default env_versions()).
    Returns the set's directory episodes/<task>/<content hash>. Raises
    ValueError on an episode breaking the row invariants (nothing is stored).
    """
    task = TaskInfo.from_spec(task)
    producer = _as_producer(producer)

    def records():
        for i, ep in enumerate(episodes):
            ep = check_episode(ep, task, i)
            rec = serialize_episode(ep)
            yield rec, record_digest(rec), episode_return(ep)

    return write_records(store, task, records(), producer, versions,
                         records_per_file, created)


def write_prefix_set(store: Store, path: str | os.PathLike, count: int) -> Path:
    """Store the first ``count`` episodes of the set at ``path`` as a set of their own.

    Args:
        store: where the prefix set is written (the set at ``path`` is only read).
        path: a stored episode set's directory; its episodes are in the order they were
            written (an online run's: collection order).
        count: episodes kept, 1 <= count <= the set's episode count.

    Returns:
        The prefix set's directory ``episodes/<task>/<content hash>``: same task, producer
        and env versions as the set at ``path``, its first ``count`` episode digests.
        Content-addressed: writing it again returns the same directory; ``count`` equal
        to the set's size gives the set's own hash.

    Raises:
        ValueError: ``count`` out of range. EpisodeSetIntegrityError: a record read
        differs from the manifest.
    """
    with EpisodeSetReader(path) as reader:
        m = reader.manifest
        if not 1 <= count <= len(reader):
            raise ValueError(f"{path}: a prefix of {count} episodes of a set of "
                             f"{len(reader)}")
        return write_episode_set(store, m.task, (reader[i] for i in range(count)),
                                 m.producer, versions=m.env_versions)


class EpisodeSetReader:
    """Random access to the episodes of a stored set.

    ``len(reader)``, ``reader[i]`` (episode i in manifest order, a fresh
    numpy episode dict), ``iter(reader)``, ``reader.record(i)`` (raw bytes).
    With ``verify`` every record read is checked against the manifest's
    digest (EpisodeSetIntegrityError on a mismatch). Close with ``close()``
    or use it as a context manager.
    """

    def __init__(self, path: str | os.PathLike, verify: bool = True):
        self.path = Path(path)
        self.manifest = EpisodeSetManifest.load(self.path)
        self.verify = verify
        self._starts = np.cumsum([0] + [f.num_records for f in self.manifest.files])
        self._readers: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.manifest.episode_count

    def _reader(self, file_index: int):
        from array_record.python.array_record_module import ArrayRecordReader
        if file_index not in self._readers:
            entry = self.manifest.files[file_index]
            p = self.path / entry.name
            if not p.is_file():
                raise EpisodeSetIntegrityError(f"{p} is missing")
            r = ArrayRecordReader(str(p), READER_OPTIONS)
            if r.num_records() != entry.num_records:
                r.close()
                raise EpisodeSetIntegrityError(
                    f"{p} holds {r.num_records()} records, manifest says "
                    f"{entry.num_records}")
            self._readers[file_index] = r
        return self._readers[file_index]

    def record(self, index: int) -> bytes:
        """Raw canonical bytes of episode ``index`` (0 <= index < len)."""
        if not 0 <= index < len(self):
            raise IndexError(f"episode {index} out of range [0, {len(self)})")
        f = int(np.searchsorted(self._starts, index, side="right")) - 1
        rec = self._reader(f).read([int(index - self._starts[f])])[0]
        if self.verify and record_digest(rec) != self.manifest.episode_digests[index]:
            raise EpisodeSetIntegrityError(
                f"episode {index} of {self.path}: record digest differs from the "
                "manifest; the file is corrupted")
        return rec

    def __getitem__(self, index: int) -> Episode:
        return deserialize_episode(self.record(index))

    def __iter__(self) -> Iterator[Episode]:
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __enter__(self) -> "EpisodeSetReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def verify_episode_set(path: str | os.PathLike) -> list[str]:
    """Problems with a set's files (missing, size or sha256 differing from the
    manifest), one string per bad file; [] when all match."""
    path = Path(path)
    manifest = EpisodeSetManifest.load(path)
    problems = []
    for f in manifest.files:
        p = path / f.name
        if not p.is_file():
            problems.append(f"{f.name}: missing")
        elif p.stat().st_size != f.size_bytes:
            problems.append(f"{f.name}: {p.stat().st_size} bytes, manifest says "
                            f"{f.size_bytes}")
        elif file_digest(p) != f.sha256:
            problems.append(f"{f.name}: sha256 differs from the manifest")
    return problems


def read_episode_set(path_or_ref: str | os.PathLike, *, store: Store | None = None,
                     verify: bool = True
                     ) -> tuple[EpisodeSetManifest, Iterator[Episode]]:
    """``(manifest, iterator over the episodes in manifest order)``.

    path_or_ref: a set directory, or ``<task>@<hex>`` / ``<task>@latest``
    resolved in ``store`` (default Store()). With ``verify`` the file digests
    are checked first and every record's digest as it is read; raises
    EpisodeSetIntegrityError on a mismatch, FileNotFoundError /
    NameResolutionError when the set is not found.
    """
    store = store or Store()
    path = store.resolve_episode_set(path_or_ref)
    if verify:
        problems = verify_episode_set(path)
        if problems:
            raise EpisodeSetIntegrityError(f"{path}: " + "; ".join(problems))
    reader = EpisodeSetReader(path, verify=verify)

    def episodes():
        with reader:
            yield from reader

    return reader.manifest, episodes()
