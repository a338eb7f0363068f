"""Content hash: logical content only; file digests."""
import hashlib
import json

import pytest

from wmx.schemas.hashing import (content_hash, dataset_content_hash,
                                 episode_set_content_hash, file_digest, short_hash)
from wmx.schemas.taskset import TaskInfo, TaskSet

TASK = TaskInfo("walker-walk", 24, 6, 500, 2, 0.99)
D = [hashlib.sha256(bytes([i])).hexdigest() for i in range(6)]


def test_content_hash_is_sha256_of_the_documented_document():
    doc = {"episode_digests": sorted(D), "kind": "episode_set", "schema_version": 1,
           "subject": TASK.to_dict()}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert episode_set_content_hash(TASK, D) == hashlib.sha256(blob).hexdigest()


def test_independent_of_order_and_sharding():
    h = episode_set_content_hash(TASK, D)
    assert episode_set_content_hash(TASK, list(reversed(D))) == h
    shards = [D[0::3], D[1::3], D[2::3]]  # any partition, concatenated
    assert episode_set_content_hash(TASK, [d for s in shards for d in s]) == h


def test_sensitive_to_content_task_and_kind():
    h = episode_set_content_hash(TASK, D)
    assert episode_set_content_hash(TASK, D[:-1]) != h
    assert episode_set_content_hash(TASK, D + [D[0]]) != h  # duplicates count
    other = TaskInfo("walker-walk", 24, 6, 1000, 2, 0.99)
    assert episode_set_content_hash(other, D) != h
    ts = TaskSet("one", (TASK,), (None,), "")
    assert dataset_content_hash(ts, D) != h
    assert content_hash("pooled_dataset", ts.to_dict(), D) == dataset_content_hash(ts, D)


def test_bad_inputs():
    with pytest.raises(ValueError, match="kind"):
        content_hash("blob", {}, D)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        episode_set_content_hash(TASK, ["abc"])
    assert short_hash(D[0]) == D[0][:10]


def test_file_digest(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 3_000_000)
    assert file_digest(p, chunk_size=4096) == hashlib.sha256(b"x" * 3_000_000).hexdigest()
