"""Content hashes and file digests (DESIGN.md §4 "Content hash").

The content hash of an episode set or a pooled dataset is the sha256 of a
canonical JSON document (sorted keys, no spaces, ASCII)::

    {"episode_digests": [sorted per-episode sha256 hex digests],
     "kind": "episode_set" | "pooled_dataset",
     "schema_version": SCHEMA_VERSION,
     "subject": <TaskInfo dict for an episode set, TaskSet dict for a dataset>}

It depends on the logical content only, never on the file bytes, the number
of files or shards, the episode order or the runner that wrote them. In both
cases the digests are those of the unpadded "episode" records
(``episode_digest``), so a pooled dataset's hash follows from its source
episode sets' manifests and its TaskSet (the padding and the task ids are a
function of the TaskSet). File bytes get their own digests
(``file_digest``) for integrity checks. Short names use the first
``SHORT_HASH_LEN`` = 10 hex digits.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Iterable, Mapping

from wmx.schemas.episode import SCHEMA_VERSION

SHORT_HASH_LEN = 10
HASH_KINDS = ("episode_set", "pooled_dataset")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def is_sha256_hex(value: Any) -> bool:
    """True for a 64-character lowercase hex string."""
    return isinstance(value, str) and bool(_HEX64.match(value))


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, ASCII, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False).encode("ascii")


def content_hash(kind: str, subject: Mapping[str, Any],
                 episode_digests: Iterable[str],
                 schema_version: int = SCHEMA_VERSION) -> str:
    """sha256 hex of the canonical content document (module docstring).

    kind: "episode_set" or "pooled_dataset"; subject: the TaskInfo dict (episode set)
    or TaskSet dict (dataset); episode_digests: per-record sha256 hex digests
    in any order (duplicates kept: two identical episodes count twice).
    Raises ValueError on an unknown kind or a digest that is not sha256 hex.
    """
    if kind not in HASH_KINDS:
        raise ValueError(f"content hash kind {kind!r} unknown; use one of {HASH_KINDS}")
    digests = sorted(episode_digests)
    bad = [d for d in digests if not is_sha256_hex(d)]
    if bad:
        raise ValueError(f"episode digests must be 64 lowercase hex chars; "
                         f"bad: {bad[:3]}")
    doc = {"episode_digests": digests, "kind": kind,
           "schema_version": int(schema_version), "subject": dict(subject)}
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def episode_set_content_hash(task: Any, episode_digests: Iterable[str]) -> str:
    """Content hash of an episode set of ``task`` (TaskInfo or its dict)."""
    subject = task.to_dict() if hasattr(task, "to_dict") else dict(task)
    return content_hash("episode_set", subject, episode_digests)


def dataset_content_hash(taskset: Any, episode_digests: Iterable[str]) -> str:
    """Content hash of a pooled dataset over ``taskset`` (TaskSet or its dict)
    and the digests of its episodes before padding (``episode_digest`` of the
    source episodes, as listed in the source episode-set manifests)."""
    subject = taskset.to_dict() if hasattr(taskset, "to_dict") else dict(taskset)
    return content_hash("pooled_dataset", subject, episode_digests)


def short_hash(h: str) -> str:
    """First SHORT_HASH_LEN hex digits of a content hash (for names, logs)."""
    if not is_sha256_hex(h):
        raise ValueError(f"{h!r} is not a sha256 hex digest")
    return h[:SHORT_HASH_LEN]


def file_digest(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """sha256 hex of a file's bytes, read in ``chunk_size`` blocks.

    Raises FileNotFoundError if the file is missing."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_size)
            if not block:
                break
            h.update(block)
    return h.hexdigest()
