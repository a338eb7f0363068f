"""Pooled-dataset record: one padded episode with its task id, canonically encoded.

Layout (DESIGN.md §4 "Pooled dataset"): `b"WMXP"`, a little-endian u32 header
length, a JSON header (sorted keys, no spaces) and the raw little-endian C-order
bytes of each field in `FIELDS` order. The same padded episode always encodes to
the same bytes. Fields (T+1 rows, O = TaskSet max obs dim, A = max action dim):
obs f32[T+1, O] (zero beyond the task's obs dim), action f32[T+1, A] (zero
beyond the task's action dim), reward f32[T+1], is_first / is_last /
is_terminal bool[T+1]. The header holds the task name and id, the task's own
obs/action dims and the digest of the unpadded source episode.
"""
from __future__ import annotations

import json
import struct
from typing import Any, Mapping

import numpy as np

POOLED_RECORD_VERSION = 1
MAGIC = b"WMXP"
FIELDS: tuple[tuple[str, str], ...] = (
    ("obs", "<f4"), ("action", "<f4"), ("reward", "<f4"),
    ("is_first", "|b1"), ("is_last", "|b1"), ("is_terminal", "|b1"))
EPISODE_KEYS = tuple(name for name, _ in FIELDS)


def pad_episode(ep: Mapping[str, np.ndarray], max_obs_dim: int,
                max_action_dim: int) -> dict[str, np.ndarray]:
    """Zero-pad an episode's obs to `max_obs_dim` and actions to `max_action_dim`.

    ep: obs f32[T+1, o], action f32[T+1, a], reward f32[T+1], is_* bool[T+1]
    (docs/architecture.md "Episode rows"). Returns new arrays with obs
    f32[T+1, max_obs_dim], action f32[T+1, max_action_dim] (padding at the end,
    exactly 0.0). Raises ValueError if o > max_obs_dim or a > max_action_dim.
    """
    obs = np.asarray(ep["obs"], np.float32)
    act = np.asarray(ep["action"], np.float32)
    if obs.ndim != 2 or act.ndim != 2:
        raise ValueError(f"obs and action must be 2-D [T+1, dim]; got {obs.shape}, {act.shape}")
    if obs.shape[1] > max_obs_dim or act.shape[1] > max_action_dim:
        raise ValueError(
            f"episode dims obs={obs.shape[1]} action={act.shape[1]} exceed the TaskSet's "
            f"max obs dim {max_obs_dim} / max action dim {max_action_dim}")
    out = {k: np.asarray(ep[k]) for k in EPISODE_KEYS}
    out["obs"] = np.pad(obs, ((0, 0), (0, max_obs_dim - obs.shape[1])))
    out["action"] = np.pad(act, ((0, 0), (0, max_action_dim - act.shape[1])))
    return out


def unpad_episode(rec: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Inverse of `pad_episode` for a decoded record: slice obs/action to the task's dims."""
    out = {k: rec[k] for k in EPISODE_KEYS}
    out["obs"] = rec["obs"][:, :rec["obs_dim"]]
    out["action"] = rec["action"][:, :rec["action_dim"]]
    return out


def encode_pooled(ep: Mapping[str, np.ndarray], *, task: str, task_id: int,
                  obs_dim: int, action_dim: int, source_digest: str) -> bytes:
    """Canonical bytes of one padded episode (see module docstring).

    `ep` must already be padded; arrays are cast to the field dtypes. Raises
    ValueError if a field is missing or the row counts disagree.
    """
    missing = [k for k in EPISODE_KEYS if k not in ep]
    if missing:
        raise ValueError(f"episode is missing fields {missing}")
    arrays = [np.ascontiguousarray(np.asarray(ep[k]).astype(dt, copy=False))
              for k, dt in FIELDS]
    rows = {a.shape[0] for a in arrays}
    if len(rows) != 1:
        raise ValueError(f"fields disagree on the row count: {[a.shape for a in arrays]}")
    header = {
        "version": POOLED_RECORD_VERSION, "task": task, "task_id": int(task_id),
        "obs_dim": int(obs_dim), "action_dim": int(action_dim),
        "source_digest": source_digest,
        "fields": [[k, dt, list(a.shape)] for (k, dt), a in zip(FIELDS, arrays)],
    }
    hb = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(hb)), hb] + [a.tobytes() for a in arrays])


def decode_pooled(data: bytes) -> dict[str, Any]:
    """Decode `encode_pooled` bytes. Returns the header keys (task, task_id,
    obs_dim, action_dim, source_digest, version) plus the padded field arrays
    (read-only numpy views). Raises ValueError on a bad magic, a bad header, or
    a byte count that does not match the header's shapes."""
    if len(data) < 8 or data[:4] != MAGIC:
        raise ValueError("not a pooled wmx record (bad magic bytes)")
    (hlen,) = struct.unpack("<I", data[4:8])
    try:
        header = json.loads(data[8:8 + hlen])
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"pooled record header is not valid JSON: {e}") from None
    if not isinstance(header, dict) or "fields" not in header:
        raise ValueError("pooled record header lacks 'fields'")
    off = 8 + hlen
    out: dict[str, Any] = {k: v for k, v in header.items() if k != "fields"}
    for name, dt, shape in header["fields"]:
        n = int(np.prod(shape)) * np.dtype(dt).itemsize
        if off + n > len(data):
            raise ValueError(f"pooled record truncated in field {name!r}")
        out[name] = np.frombuffer(data, dtype=dt, count=int(np.prod(shape)),
                                  offset=off).reshape(shape)
        off += n
    if off != len(data):
        raise ValueError(f"pooled record has {len(data) - off} trailing bytes")
    return out
