"""Episode rows and their canonical, versioned serialisation (DESIGN.md §4).

An episode is a dict of numpy arrays with obs-aligned rows
(spec/reference_design.md §5.2): row k holds obs_k, the reward received on
entering obs_k (0 on the reset row), the action chosen at obs_k (0 on the last
row) and the flags. A fixed-length episode of T agent steps has T+1 rows.

Two record kinds share one binary format:

- ``"episode"`` (one task, unpadded; the records of an episode set):
  ``obs f32[T+1, O]``, ``action f32[T+1, A]``, ``reward f32[T+1]``,
  ``is_first bool[T+1]``, ``is_last bool[T+1]``, ``is_terminal bool[T+1]``.
- ``"pooled_episode"`` (the records of a pooled dataset): the same keys with
  ``obs`` zero-padded at the end to the TaskSet's max obs dim and ``action``
  zero on the invalid dims, plus the int32 scalars ``task_id`` (index in the
  TaskSet), ``obs_dim`` and ``action_dim`` (the valid dims).

Canonical bytes (schema version 1), all integers little-endian::

    b"WMXEPISO"                      8 bytes magic
    uint32 schema version            4 bytes
    uint32 header length H           4 bytes
    header                           H bytes, canonical JSON (utf-8, sorted
                                     object keys, no spaces):
                                     {"fields": [{"dtype", "name", "shape"}...],
                                      "kind": "episode" | "pooled_episode"}
    data                             each field's raw C-order little-endian
                                     bytes, in header order (the fixed key
                                     order above), no padding

dtype strings are numpy's: ``"<f4"``, ``"|b1"``, ``"<i4"``. Floats are stored
bit for bit (a -0.0 stays -0.0), so a round trip is bit-identical and equal
arrays with equal bits give equal bytes whatever the dict's insertion order.
"""
from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, Mapping

import numpy as np

SCHEMA_VERSION = 1
"""Version of the episode record format and of the manifests that list them."""

MAGIC = b"WMXEPISO"

EPISODE_KEYS = ("obs", "action", "reward", "is_first", "is_last", "is_terminal")
"""Keys of an ``"episode"`` record, in canonical order."""

POOLED_KEYS = EPISODE_KEYS + ("task_id", "obs_dim", "action_dim")
"""Keys of a ``"pooled_episode"`` record, in canonical order."""

_DTYPES = {
    "obs": np.dtype("<f4"), "action": np.dtype("<f4"), "reward": np.dtype("<f4"),
    "is_first": np.dtype("|b1"), "is_last": np.dtype("|b1"),
    "is_terminal": np.dtype("|b1"),
    "task_id": np.dtype("<i4"), "obs_dim": np.dtype("<i4"),
    "action_dim": np.dtype("<i4"),
}
_NDIM = {"obs": 2, "action": 2, "reward": 1, "is_first": 1, "is_last": 1,
         "is_terminal": 1, "task_id": 0, "obs_dim": 0, "action_dim": 0}
_KINDS = {"episode": EPISODE_KEYS, "pooled_episode": POOLED_KEYS}
_PREFIX = struct.Struct("<8sII")

Episode = dict  # dict[str, np.ndarray] with EPISODE_KEYS or POOLED_KEYS


class EpisodeFormatError(ValueError):
    """An episode or an episode record does not match the schema."""


def episode_kind(ep: Mapping[str, Any]) -> str:
    """``"episode"`` or ``"pooled_episode"`` from the key set of ``ep``.

    Raises EpisodeFormatError naming the missing or unexpected keys.
    """
    keys = set(ep.keys())
    for kind, expected in _KINDS.items():
        if keys == set(expected):
            return kind
    base = set(EPISODE_KEYS)
    missing = sorted(base - keys)
    extra = sorted(keys - set(POOLED_KEYS))
    pooled_part = keys & {"task_id", "obs_dim", "action_dim"}
    if pooled_part and not missing and not extra:
        missing = sorted({"task_id", "obs_dim", "action_dim"} - keys)
    raise EpisodeFormatError(
        f"episode keys {sorted(keys)} match neither schema: missing {missing}, "
        f"unexpected {extra}; an episode has exactly {list(EPISODE_KEYS)} "
        f"(a pooled record adds task_id, obs_dim, action_dim)")


def make_episode(obs, action, reward, is_first, is_last, is_terminal) -> Episode:
    """Build an episode dict, casting each array to its schema dtype.

    Inputs: array-likes (numpy or jax) shaped obs [T+1, O], action [T+1, A],
    reward/is_first/is_last/is_terminal [T+1]. Casting is explicit here;
    ``serialize_episode`` itself never casts. Raises EpisodeFormatError on
    inconsistent shapes.
    """
    ep = {
        "obs": np.ascontiguousarray(obs, dtype=np.float32),
        "action": np.ascontiguousarray(action, dtype=np.float32),
        "reward": np.ascontiguousarray(reward, dtype=np.float32),
        "is_first": np.ascontiguousarray(is_first, dtype=bool),
        "is_last": np.ascontiguousarray(is_last, dtype=bool),
        "is_terminal": np.ascontiguousarray(is_terminal, dtype=bool),
    }
    _check_fields(ep, "episode")
    return ep


def _check_fields(ep: Mapping[str, Any], kind: str) -> None:
    """Exact dtypes, ranks and a common row count; raises EpisodeFormatError."""
    rows = None
    for key in _KINDS[kind]:
        arr = ep[key]
        if not isinstance(arr, np.ndarray):
            raise EpisodeFormatError(
                f"episode[{key!r}] is a {type(arr).__name__}, not a numpy array; "
                "convert with np.asarray or build the episode with make_episode")
        if (arr.dtype.kind, arr.dtype.itemsize) != (
                _DTYPES[key].kind, _DTYPES[key].itemsize):
            raise EpisodeFormatError(
                f"episode[{key!r}] has dtype {arr.dtype}, expected "
                f"{_DTYPES[key]} ({_DTYPES[key].name}); cast explicitly "
                "(make_episode does it for the episode keys)")
        if arr.ndim != _NDIM[key]:
            raise EpisodeFormatError(
                f"episode[{key!r}] has shape {arr.shape}, expected rank "
                f"{_NDIM[key]}")
        if arr.ndim:
            if rows is None:
                rows = arr.shape[0]
            elif arr.shape[0] != rows:
                raise EpisodeFormatError(
                    f"episode[{key!r}] has {arr.shape[0]} rows, expected {rows} "
                    "like obs; every per-row field has T+1 rows")
    if rows is not None and rows < 2:
        raise EpisodeFormatError(
            f"episode has {rows} rows; an episode has T+1 >= 2 rows")


def serialize_episode(ep: Mapping[str, Any]) -> bytes:
    """Canonical bytes of an episode or pooled record (format in module doc).

    Same arrays (same bits) -> same bytes, independent of dict order. dtypes
    must already be the schema's (float32 / bool / int32, see make_episode):
    nothing is cast silently. Raises EpisodeFormatError on wrong keys, dtypes,
    ranks or row counts. Source: DESIGN.md §4 "Episode record".
    """
    kind = episode_kind(ep)
    _check_fields(ep, kind)
    fields, chunks = [], []
    for key in _KINDS[kind]:
        arr = np.asarray(ep[key], dtype=_DTYPES[key], order="C")
        fields.append({"dtype": _DTYPES[key].str, "name": key,
                       "shape": [int(d) for d in arr.shape]})
        chunks.append(arr.tobytes(order="C"))
    header = json.dumps({"fields": fields, "kind": kind}, sort_keys=True,
                        separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return b"".join([_PREFIX.pack(MAGIC, SCHEMA_VERSION, len(header)), header]
                    + chunks)


def deserialize_episode(data: bytes) -> Episode:
    """Inverse of serialize_episode; returns fresh writable numpy arrays.

    Checks the magic, the schema version (only SCHEMA_VERSION is read), the
    field names and order, dtypes, ranks, row counts, bool bytes in {0, 1} and
    the total length. Raises EpisodeFormatError naming what is wrong.
    """
    data = bytes(data)
    if len(data) < _PREFIX.size:
        raise EpisodeFormatError(
            f"record of {len(data)} bytes is too short to be a wmx episode")
    magic, version, hlen = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise EpisodeFormatError(
            f"record does not start with the wmx episode magic {MAGIC!r} "
            f"(got {magic!r}); it is not a wmx episode record")
    if version != SCHEMA_VERSION:
        raise EpisodeFormatError(
            f"episode record has schema version {version}; this wmx reads "
            f"version {SCHEMA_VERSION}: rebuild the data with this version or "
            "use a matching wmx")
    start = _PREFIX.size
    try:
        header = json.loads(data[start:start + hlen].decode("ascii"))
        kind = header["kind"]
        fields = header["fields"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise EpisodeFormatError(f"episode record header is unreadable: {e}") from e
    if kind not in _KINDS:
        raise EpisodeFormatError(
            f"episode record kind {kind!r} is unknown; known: {sorted(_KINDS)}")
    names = [f.get("name") for f in fields]
    if names != list(_KINDS[kind]):
        raise EpisodeFormatError(
            f"{kind} record fields {names}, expected {list(_KINDS[kind])}")
    offset = start + hlen
    ep = {}
    for f in fields:
        key = f["name"]
        if f.get("dtype") != _DTYPES[key].str:
            raise EpisodeFormatError(
                f"record field {key!r} has dtype {f.get('dtype')!r}, expected "
                f"{_DTYPES[key].str!r}")
        shape = tuple(int(d) for d in f.get("shape", ()))
        if len(shape) != _NDIM[key] or any(d < 0 for d in shape):
            raise EpisodeFormatError(
                f"record field {key!r} has shape {list(shape)}, expected rank "
                f"{_NDIM[key]}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * _DTYPES[key].itemsize
        if offset + nbytes > len(data):
            raise EpisodeFormatError(
                f"record is truncated: field {key!r} needs {nbytes} bytes at "
                f"offset {offset}, record has {len(data)}")
        raw = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=offset)
        if _DTYPES[key].kind == "b" and raw.size and raw.max() > 1:
            raise EpisodeFormatError(
                f"record field {key!r} holds bool bytes other than 0/1")
        arr = raw.view(_DTYPES[key]).reshape(shape).copy()
        ep[key] = arr.astype(_DTYPES[key].newbyteorder("="), copy=False)
        offset += nbytes
    if offset != len(data):
        raise EpisodeFormatError(
            f"record has {len(data) - offset} trailing bytes after its fields")
    _check_fields(ep, kind)
    return ep


def episode_digest(ep: Mapping[str, Any]) -> str:
    """sha256 hex digest (64 chars) of ``serialize_episode(ep)``."""
    return hashlib.sha256(serialize_episode(ep)).hexdigest()


def record_digest(record: bytes) -> str:
    """sha256 hex digest of already serialised record bytes."""
    return hashlib.sha256(record).hexdigest()


def episode_return(ep: Mapping[str, Any]) -> float:
    """Undiscounted return: sum of the reward rows (row 0 is 0), as a float.

    Summed in float64 so the value does not depend on summation order.
    """
    return float(np.sum(np.asarray(ep["reward"], dtype=np.float64)))


def episode_length(ep: Mapping[str, Any]) -> int:
    """T, the number of agent steps (rows - 1)."""
    return int(np.shape(ep["obs"])[0]) - 1


def pad_episode(ep: Mapping[str, Any], task_id: int, max_obs_dim: int,
                max_action_dim: int) -> Episode:
    """Pooled record of an episode: obs zero-padded at the end to
    ``max_obs_dim``, action zero on dims >= A up to ``max_action_dim``, plus
    ``task_id``, ``obs_dim``, ``action_dim`` int32 scalars. DESIGN.md §4
    "Pooled dataset". Raises ValueError if the episode is wider than the max.
    """
    _check_fields(ep, episode_kind(ep))
    if episode_kind(ep) != "episode":
        raise EpisodeFormatError("pad_episode takes an unpadded episode")
    rows, obs_dim = ep["obs"].shape
    action_dim = ep["action"].shape[1]
    if obs_dim > max_obs_dim or action_dim > max_action_dim:
        raise ValueError(
            f"episode dims (obs {obs_dim}, action {action_dim}) exceed the "
            f"TaskSet max (obs {max_obs_dim}, action {max_action_dim})")
    if task_id < 0:
        raise ValueError(f"task_id must be >= 0, got {task_id}")
    obs = np.zeros((rows, max_obs_dim), np.float32)
    obs[:, :obs_dim] = ep["obs"]
    action = np.zeros((rows, max_action_dim), np.float32)
    action[:, :action_dim] = ep["action"]
    out = {k: np.array(ep[k]) for k in ("reward", "is_first", "is_last",
                                         "is_terminal")}
    out.update(obs=obs, action=action, task_id=np.int32(task_id).reshape(()),
               obs_dim=np.int32(obs_dim).reshape(()),
               action_dim=np.int32(action_dim).reshape(()))
    return {k: np.asarray(out[k]) for k in POOLED_KEYS}


def unpad_episode(pooled: Mapping[str, Any]) -> tuple[int, Episode]:
    """Inverse of pad_episode: ``(task_id, episode)`` with the valid dims only.

    Raises EpisodeFormatError if ``pooled`` is not a pooled record.
    """
    if episode_kind(pooled) != "pooled_episode":
        raise EpisodeFormatError("unpad_episode takes a pooled record")
    o, a = int(pooled["obs_dim"]), int(pooled["action_dim"])
    ep = {k: np.array(pooled[k]) for k in EPISODE_KEYS}
    ep["obs"] = np.ascontiguousarray(ep["obs"][:, :o])
    ep["action"] = np.ascontiguousarray(ep["action"][:, :a])
    return int(pooled["task_id"]), ep


def validate_episode_rows(ep: Mapping[str, Any], T: int | None = None,
                          obs_dim: int | None = None,
                          action_dim: int | None = None) -> list[str]:
    """Problems with an episode's row invariants; ``[]`` when it is valid.

    Checks (DESIGN.md §4, reference_design §5.2): keys/dtypes/shapes; T+1 rows
    (when ``T`` is given); obs/action widths (when given; for a pooled record
    against its valid dims); is_first on row 0 only; reward 0 on row 0; action
    0 on the last row; is_last on the last row only; is_terminal only on the
    last row; no NaN/inf in obs, action, reward; actions within [-1, 1]; for
    pooled records, zeros in the padding and dims within the padded width.
    Never raises for bad content; returns readable strings.
    """
    try:
        kind = episode_kind(ep)
        _check_fields(ep, kind)
    except EpisodeFormatError as e:
        return [str(e)]
    problems = []
    obs, action, reward = ep["obs"], ep["action"], ep["reward"]
    n = obs.shape[0]
    if T is not None and n != T + 1:
        problems.append(f"episode has {n} rows, expected T+1 = {T + 1}")
    valid_o, valid_a = obs.shape[1], action.shape[1]
    if kind == "pooled_episode":
        valid_o, valid_a = int(ep["obs_dim"]), int(ep["action_dim"])
        if not 0 < valid_o <= obs.shape[1] or not 0 < valid_a <= action.shape[1]:
            problems.append(
                f"pooled dims obs_dim={valid_o}, action_dim={valid_a} do not fit "
                f"the padded widths {obs.shape[1]}, {action.shape[1]}")
        else:
            if np.any(obs[:, valid_o:] != 0):
                problems.append("obs padding beyond obs_dim is not zero")
            if np.any(action[:, valid_a:] != 0):
                problems.append("action padding beyond action_dim is not zero")
        if int(ep["task_id"]) < 0:
            problems.append(f"task_id {int(ep['task_id'])} is negative")
    if obs_dim is not None and valid_o != obs_dim:
        problems.append(f"obs dim {valid_o}, expected {obs_dim}")
    if action_dim is not None and valid_a != action_dim:
        problems.append(f"action dim {valid_a}, expected {action_dim}")
    first, last, term = ep["is_first"], ep["is_last"], ep["is_terminal"]
    if not first[0]:
        problems.append("is_first is False on row 0")
    if np.any(first[1:]):
        problems.append(f"is_first set on rows {np.flatnonzero(first[1:]) + 1} "
                        "(only row 0 may be first)")
    if not last[-1]:
        problems.append("is_last is False on the last row")
    if np.any(last[:-1]):
        problems.append(f"is_last set on rows {np.flatnonzero(last[:-1])} "
                        "(only the last row may be last)")
    if np.any(term[:-1]):
        problems.append(f"is_terminal set on rows {np.flatnonzero(term[:-1])} "
                        "(only the last row may be terminal)")
    for key, arr in (("obs", obs), ("action", action), ("reward", reward)):
        if not np.all(np.isfinite(arr)):
            problems.append(f"{key} holds NaN or inf")
    if reward[0] != 0:
        problems.append(f"reward on row 0 is {reward[0]}, expected 0 (reset row)")
    if np.any(action[-1] != 0):
        problems.append("action on the last row is not 0")
    finite = action[np.isfinite(action)]
    if finite.size and (finite.min() < -1 or finite.max() > 1):
        problems.append(f"actions outside [-1, 1] (min {finite.min()}, "
                        f"max {finite.max()})")
    return problems
