"""Grain readers of pooled datasets (DESIGN.md §5).

- `open_dataset(name)`: resolve `name@hash` / `name@latest` / a path, check the
  manifest, optionally verify every shard digest.
- `load_in_memory(ds)`: read all shards in parallel into device-resident arrays
  for exact uniform in-jit sampling (`wmx.datasets.samplers`).
- `stream_slices(ds, ...)` / `stream_windows(ds, ...)`: seeded, deterministic,
  checkpointable Grain pipelines for datasets larger than memory, over every
  episode or a subset (``episodes``: global record indices, e.g. one task's,
  `wmx.datasets.task_view.record_indices`).
"""
from __future__ import annotations

import dataclasses
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from wmx.schemas import episode as schema

MANIFEST = "manifest.json"
_FIELDS = ("obs", "action", "reward", "is_first", "is_last", "is_terminal")


class DatasetIntegrityError(ValueError):
    """A pooled dataset's files disagree with its manifest."""


@dataclasses.dataclass(frozen=True)
class PooledDataset:
    """An opened pooled dataset: its directory and its DatasetManifest
    (wmx.schemas.manifest)."""
    path: Path
    manifest: Any

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def content_hash(self) -> str:
        return self.manifest.content_hash

    @property
    def taskset(self):
        return self.manifest.taskset

    @property
    def shard_paths(self) -> list[Path]:
        return [self.path / s.name for s in self.manifest.shards]

    @property
    def num_episodes(self) -> int:
        return self.manifest.episode_count

    @property
    def rows(self) -> int:
        """T+1 (all tasks of a pooled dataset share T)."""
        Ts = {t.episode_length for t in self.taskset.tasks}
        if len(Ts) != 1:
            raise ValueError(f"dataset {self.path} mixes episode lengths {sorted(Ts)}")
        return Ts.pop() + 1


def resolve_path(name_or_path: str | Path, home=None) -> Path:
    """Directory of a dataset named `name@<hex prefix>` (8+ digits), `name@latest`
    or a directory path (wmx.datasets.store.resolve_dataset). Raises
    NameResolutionError (ValueError) for an unknown/ambiguous name,
    FileNotFoundError for a path without a manifest."""
    from wmx.datasets.store import resolve_dataset
    return Path(resolve_dataset(name_or_path, home=home))


def open_dataset(name_or_path, home=None, verify: bool = False) -> PooledDataset:
    """Open a pooled dataset. Checks the manifest's keys and shard list; with
    `verify`, recomputes every shard's sha256 and raises DatasetIntegrityError
    naming each shard whose digest or size differs (or that is missing)."""
    from wmx.schemas.manifest import DatasetManifest
    path = resolve_path(name_or_path, home)
    try:
        man = DatasetManifest.load(path)
    except ValueError as e:
        raise DatasetIntegrityError(f"{path}: bad dataset manifest: {e}") from None
    ds = PooledDataset(path=path, manifest=man)
    if verify:
        bad = verify_shards(ds)
        if bad:
            raise DatasetIntegrityError("; ".join(bad))
    return ds


def verify_shards(ds: PooledDataset, num_threads: int = 8) -> list[str]:
    """Problems with the shard files (missing, size or sha256 differing from the
    manifest), one string per bad shard naming it; [] when all match."""
    from wmx.pipelines.transforms import file_sha256

    def one(s):
        p = ds.path / s.name
        if not p.is_file():
            return f"shard {s.name}: missing"
        if p.stat().st_size != s.size_bytes:
            return f"shard {s.name}: size {p.stat().st_size} != manifest {s.size_bytes}"
        if file_sha256(str(p)) != s.sha256:
            return f"shard {s.name}: sha256 differs from the manifest digest"
        return None
    with ThreadPoolExecutor(num_threads) as ex:
        return [r for r in ex.map(one, ds.manifest.shards) if r]


def read_shard(path) -> list[dict]:
    """All pooled records of one shard, deserialised (fresh numpy arrays)."""
    from array_record.python.array_record_module import ArrayRecordReader
    r = ArrayRecordReader(str(path))
    try:
        return [schema.deserialize_episode(b) for b in r.read_all()]
    finally:
        r.close()


def load_numpy(ds: PooledDataset, num_threads: int = 8) -> dict[str, np.ndarray]:
    """All episodes as host arrays, in shard order then digest order:
    obs f32[N, T+1, O], action f32[N, T+1, A], reward f32[N, T+1],
    is_first/is_last/is_terminal bool[N, T+1], task i32[N], obs_dim i32[N],
    action_dim i32[N]. Shards are read in parallel threads. Raises
    DatasetIntegrityError if the episode count differs from the manifest."""
    counts = [s.num_records for s in ds.manifest.shards]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    n = int(offsets[-1])
    rows, O, A = ds.rows, ds.taskset.max_obs_dim, ds.taskset.max_action_dim
    out = {"obs": np.zeros((n, rows, O), np.float32),
           "action": np.zeros((n, rows, A), np.float32),
           "reward": np.zeros((n, rows), np.float32),
           "is_first": np.zeros((n, rows), bool), "is_last": np.zeros((n, rows), bool),
           "is_terminal": np.zeros((n, rows), bool),
           "task": np.zeros((n,), np.int32), "obs_dim": np.zeros((n,), np.int32),
           "action_dim": np.zeros((n,), np.int32)}

    def fill(i):
        recs = read_shard(ds.shard_paths[i])
        if len(recs) != counts[i]:
            raise DatasetIntegrityError(
                f"shard {ds.shard_paths[i].name}: {len(recs)} records, manifest says {counts[i]}")
        for j, r in enumerate(recs):
            k = offsets[i] + j
            for f in _FIELDS:
                out[f][k] = r[f]
            out["task"][k], out["obs_dim"][k], out["action_dim"][k] = (
                r["task_id"], r["obs_dim"], r["action_dim"])
    with ThreadPoolExecutor(num_threads) as ex:
        list(ex.map(fill, range(len(counts))))
    if n != ds.num_episodes:
        raise DatasetIntegrityError(f"{n} episodes in shards, manifest says {ds.num_episodes}")
    return out


def record_task_ids(ds: PooledDataset, chunk: int = 256) -> np.ndarray:
    """i32[N]: the task id of every record, in global order (shard order, then record
    order: `load_numpy`'s and the streaming reader's). Reads every record once,
    ``chunk`` at a time, keeping only the id. Raises DatasetIntegrityError when a
    shard's record count differs from the manifest."""
    from array_record.python.array_record_module import ArrayRecordReader
    layout = _RecordLayout()
    out = []
    for shard, path in zip(ds.manifest.shards, ds.shard_paths):
        if not shard.num_records:
            continue
        r = ArrayRecordReader(str(path))
        try:
            n = r.num_records()
            if n != shard.num_records:
                raise DatasetIntegrityError(f"shard {path.name}: {n} records, manifest says "
                                            f"{shard.num_records}")
            for a in range(0, n, chunk):
                for rec in r.read(list(range(a, min(a + chunk, n)))):
                    layout.views(rec)           # checks the record, caches its layout
                    off = layout.layout_of(rec)[1]["task_id"][2]
                    out.append(int.from_bytes(rec[off:off + 4], "little", signed=True))
        finally:
            r.close()
    return np.asarray(out, np.int32)


def load_in_memory(ds: PooledDataset, num_threads: int = 8, device=None) -> dict[str, Any]:
    """Device-resident dataset for `wmx.datasets.samplers.sample_slices` /
    `sample_windows`: the arrays of `load_numpy` put on `device` (default: the
    first JAX device). Pass the result into jitted functions as an argument."""
    import jax
    host = load_numpy(ds, num_threads)
    return jax.device_put(host, device)


# ---------------------------------------------------------------- streaming


class _RecordLayout:
    """Zero-copy views of pooled records (wmx.schemas.episode format, version
    SCHEMA_VERSION). The JSON header of each distinct record shape is parsed
    once and cached; each record then costs a few np.frombuffer calls. Checks
    the magic, version, kind and total length (EpisodeFormatError); the full
    content checks are `validate_dataset`'s and the shard digests
    `open_dataset(verify=True)`'s."""

    def __init__(self):
        self._cache: dict[bytes, tuple[int, dict]] = {}

    def views(self, record: bytes) -> dict:
        if len(record) < _PREFIX.size:
            return schema.deserialize_episode(record)  # raises the precise error
        magic, version, hlen = _PREFIX.unpack_from(record, 0)
        if magic != schema.MAGIC or version != schema.SCHEMA_VERSION:
            return schema.deserialize_episode(record)  # raises the precise error
        head = bytes(record[_PREFIX.size:_PREFIX.size + hlen])
        layout = self._cache.get(head)
        if layout is None:
            layout = self._parse(head, _PREFIX.size + hlen)
            self._cache[head] = layout
        total, fields = layout
        if len(record) != total:
            raise schema.EpisodeFormatError(
                f"pooled record has {len(record)} bytes, its header describes {total}")
        return {k: np.frombuffer(record, dtype=dt, count=n, offset=off).reshape(shape)
                for k, (dt, n, off, shape) in fields.items()}

    def layout_of(self, record: bytes) -> tuple[int, dict]:
        """(total bytes, {field: (dtype, count, offset, shape)}) of a record
        whose header `views` has already parsed."""
        hlen = _PREFIX.unpack_from(record, 0)[2]
        return self._cache[bytes(record[_PREFIX.size:_PREFIX.size + hlen])]

    @staticmethod
    def _parse(head: bytes, offset: int) -> tuple[int, dict]:
        import json
        h = json.loads(head.decode("ascii"))
        if h.get("kind") != "pooled_episode" or \
                [f["name"] for f in h["fields"]] != list(schema.POOLED_KEYS):
            raise schema.EpisodeFormatError(
                f"record kind {h.get('kind')!r} is not a pooled record; stream from a "
                "pooled dataset built by pipelines/build_mt19.py")
        fields = {}
        for f in h["fields"]:
            dt = np.dtype(f["dtype"])
            shape = tuple(int(d) for d in f["shape"])
            n = int(np.prod(shape, dtype=np.int64))
            fields[f["name"]] = (dt, n, offset, shape)
            offset += n * dt.itemsize
        return offset, fields


_PREFIX = struct.Struct("<8sII")
_SLICE_FIELDS = ("obs", "action", "reward")


class _CropBatch:
    """Grain map over (batch index, list of pooled record bytes): k crops of
    `length` consecutive rows from each record, starts uniform in
    0..T+1-length (tdmpc2_spec 4.8 within-episode distribution).

    The starts come from ``np.random.default_rng([seed, batch index])``, so a
    batch depends only on the seed and its position in the shuffled episode
    order (deterministic, and a restored iterator state
    replays it). A crop of rows is a contiguous byte range of each field, so a
    batch costs a few byte slices per record and one ``np.frombuffer`` per
    field. Each record's header must equal the dataset's (same TaskSet
    shapes) and its length must match (EpisodeFormatError otherwise); full
    content checks are `validate_dataset`'s, shard digests
    `open_dataset(verify=True)`'s. Returns fields shaped [n, k, length, ...]
    and task i32[n, k]."""

    def __init__(self, length: int, k: int, seed: int, fields: tuple[str, ...] = _FIELDS):
        self.length, self.k, self.seed, self.fields = length, k, int(seed), tuple(fields)
        self._layout = _RecordLayout()

    def __call__(self, batch_index: int, recs) -> dict:
        r0 = recs[0]
        views = self._layout.views(r0)  # checks magic/version/kind/length of the first
        total, layout = self._layout.layout_of(r0)
        head = bytes(r0[:total - sum(n * dt.itemsize for dt, n, _, _ in layout.values())])
        rows = views["obs"].shape[0]
        if self.length > rows:
            raise ValueError(f"crop of {self.length} rows exceeds the episode's {rows} rows")
        n, k, L = len(recs), self.k, self.length
        starts = np.random.default_rng([self.seed, int(batch_index)]).integers(
            0, rows - L + 1, size=(n, k))
        hl = len(head)
        tid_off = layout["task_id"][2]
        tasks = np.empty((n,), np.int32)
        parts = {f: [] for f in self.fields}
        for j, rec in enumerate(recs):
            if len(rec) != total or rec[:hl] != head:
                self._layout.views(rec)  # raises the precise error for a foreign record
                raise schema.EpisodeFormatError(
                    "a pooled record's header differs from the dataset's first record's "
                    "(records of one dataset share one padded shape)")
            tasks[j] = int.from_bytes(rec[tid_off:tid_off + 4], "little", signed=True)
            mv = memoryview(rec)
            for f in self.fields:
                dt, _, off, shape = layout[f]
                row_bytes = dt.itemsize * (shape[1] if len(shape) > 1 else 1)
                for s in starts[j]:
                    a = off + int(s) * row_bytes
                    parts[f].append(mv[a:a + L * row_bytes])
        out = {}
        for f in self.fields:
            dt, _, _, shape = layout[f]
            arr = np.frombuffer(b"".join(parts[f]), dtype=dt).reshape((n, k, L) + shape[1:])
            out[f] = arr.astype(dt.newbyteorder("="), copy=False)
        out["task"] = np.repeat(tasks[:, None], k, axis=1)
        return out


def _to_slices(batch: dict) -> dict:
    """[b, k, H+1, ...] crops -> TD-MPC2 slice batch obs [H+1,B,O], action
    [H,B,A] (rows s..s+H-1), reward [H,B] (rows s+1..s+H), task [B]."""
    def flat(x):
        return x.reshape((-1,) + x.shape[2:])
    obs, act, rew = flat(batch["obs"]), flat(batch["action"]), flat(batch["reward"])
    return {"obs": np.ascontiguousarray(obs.transpose(1, 0, 2)),
            "action": np.ascontiguousarray(act[:, :-1].transpose(1, 0, 2)),
            "reward": np.ascontiguousarray(rew[:, 1:].T),
            "task": flat(batch["task"])}


def _to_windows(batch: dict) -> dict:
    from wmx.datasets.samplers import annotate_windows
    out = {k: v.reshape((-1,) + v.shape[2:]) for k, v in batch.items()}
    out["task"] = np.repeat(out["task"][:, None], out["obs"].shape[1], axis=1)
    return annotate_windows(out)


class DatasetStream:
    """Iterator over batches from a Grain pipeline, bound to one dataset.

    `get_state()` -> {"dataset": content hash, "iterator": Grain state};
    `set_state(state)` raises ValueError when the state belongs to another
    dataset (another content hash)."""

    def __init__(self, ds: PooledDataset, iter_ds):
        self.dataset = ds
        self._it = iter(iter_ds)

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        return next(self._it)

    def get_state(self) -> dict:
        return {"dataset": self.dataset.content_hash, "iterator": self._it.get_state()}

    def set_state(self, state: dict) -> None:
        if state.get("dataset") != self.dataset.content_hash:
            raise ValueError(
                f"iterator state belongs to dataset {state.get('dataset')}, not "
                f"{self.dataset.name}@{self.dataset.content_hash}; restore it with the "
                "dataset it was saved from")
        self._it.set_state(state["iterator"])


class _Subset:
    """A random-access source of some records of another (``indices``: their global
    indices, in order), with its batched read."""

    def __init__(self, src, indices):
        self._src, self._idx = src, np.asarray(indices, np.int64)

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, i):
        return self._src[int(self._idx[i])]

    def _getitems(self, indices):
        return self._src._getitems([int(self._idx[i]) for i in indices])


def _stream(ds, length, batch, seed, slices_per_episode, num_threads, num_workers, post,
            fields=_FIELDS, episodes=None):
    import grain
    from grain.python import ArrayRecordDataSource
    if batch % slices_per_episode:
        raise ValueError(f"batch {batch} must be a multiple of slices_per_episode "
                         f"{slices_per_episode}")
    src = ArrayRecordDataSource([str(ds.path / s.name) for s in ds.manifest.shards
                                 if s.num_records])
    if episodes is not None:
        src = _Subset(src, episodes)
    # Batches are formed on the MapDataset, so each batch's records are fetched
    # with one batched ArrayRecord read; threads prefetch whole batches.
    mds = (grain.MapDataset.source(src).seed(seed).shuffle().repeat(None)
           .batch(batch // slices_per_episode, batch_fn=list)
           .map_with_index(_CropBatch(length, slices_per_episode, seed, fields)).map(post))
    ids = mds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads,
                                                prefetch_buffer_size=2 * max(1, num_threads)))
    if num_workers > 0:
        from absl import flags
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        ids = ids.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return DatasetStream(ds, ids)


def stream_slices(ds: PooledDataset, batch: int, H: int, seed: int,
                  slices_per_episode: int = 1, num_threads: int = 8,
                  num_workers: int = 0, episodes=None) -> DatasetStream:
    """Streaming TD-MPC2 slices (H+1 rows) for datasets larger than memory.

    Episodes are shuffled (reshuffled every epoch, seeded) and each yields
    `slices_per_episode` crops with starts uniform in 0..T-H; batches as in
    `sample_slices`: obs f32[H+1,B,O], action f32[H,B,A], reward f32[H,B],
    task i32[B] (numpy). With slices_per_episode=1 the batch draws episodes
    without replacement within an epoch (vs the in-memory sampler's with
    replacement; deviation DS-S1). Deterministic for a seed; checkpointable.
    episodes: global record indices to draw from (default: every episode)."""
    return _stream(ds, H + 1, batch, seed, slices_per_episode, num_threads,
                   num_workers, _to_slices, _SLICE_FIELDS, episodes)


def stream_windows(ds: PooledDataset, batch: int, seed: int, length: int = 65,
                   slices_per_episode: int = 1, num_threads: int = 8,
                   num_workers: int = 0, episodes=None) -> DatasetStream:
    """Streaming DreamerV3 windows of `length` rows within episodes
    (dreamerv3_spec 5.1-5.3 annotation), batch-major: obs f32[B, L, O], action
    f32[B, L, A], reward f32[B, L], is_* bool[B, L], task i32[B, L].
    episodes: global record indices to draw from (default: every episode)."""
    return _stream(ds, length, batch, seed, slices_per_episode, num_threads,
                   num_workers, _to_windows, _FIELDS, episodes)


def stream(ds: PooledDataset, spec, seed: int, num_threads: int = 8,
           num_workers: int = 0, episodes=None) -> DatasetStream:
    """The streaming feed of an agent's `wmx.agents.api.BatchSpec` (the counterpart of
    `wmx.datasets.samplers.sample`): `stream_slices` or `stream_windows`, over every
    episode or the global record indices ``episodes``.

    Raises ValueError for windows that cross episode ends (in memory only: a
    stream crops within episodes) and for specs the samplers refuse.
    """
    from wmx.datasets.samplers import check_spec
    check_spec(spec)
    if spec.kind == "slices":
        return stream_slices(ds, spec.batch, spec.length - 1, seed=seed,
                             num_threads=num_threads, num_workers=num_workers,
                             episodes=episodes)
    if spec.cross_episodes:
        raise ValueError("windows that cross episode ends are sampled in memory only; this "
                         "dataset does not fit in memory, so train with a spec whose windows "
                         "stay inside episodes (cross_episodes=False)")
    return stream_windows(ds, spec.batch, seed=seed, length=spec.length,
                          num_threads=num_threads, num_workers=num_workers,
                          episodes=episodes)
