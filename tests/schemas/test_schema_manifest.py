"""Episode-set and dataset manifests: round trips and validation errors."""
import hashlib
import json

import pytest

from wmx.schemas.hashing import dataset_content_hash, episode_set_content_hash
from wmx.schemas.manifest import (DatasetManifest, EpisodeSetManifest, FileEntry,
                                  ManifestError, Producer, TaskStats, load_manifest,
                                  utc_now_iso)
from wmx.schemas.taskset import TaskInfo, TaskSet

TASK = TaskInfo("walker-walk", 24, 6, 500, 2, 0.99)
TASK2 = TaskInfo("cheetah-run", 17, 6, 500, 2, 0.99)
D = [hashlib.sha256(bytes([i])).hexdigest() for i in range(4)]
SHA = "ab" * 32


def es_manifest(**over):
    kw = dict(task=TASK, env_versions={"mujoco": "3.3.7", "playground": "0.2.0"},
              producer=Producer("run-1", "tdmpc2", "cfg123", 3, "deadbeef"),
              episode_returns=(1.0, 2.5, 3.0, 0.0), episode_digests=tuple(D),
              files=(FileEntry("episodes-00000.array_record", SHA, 100, 3),
                     FileEntry("episodes-00001.array_record", SHA, 40, 1)),
              content_hash=episode_set_content_hash(TASK, D),
              created="2026-01-02T03:04:05.000000+00:00")
    kw.update(over)
    return EpisodeSetManifest(**kw)


def ds_manifest(**over):
    ts = TaskSet("two", (TASK, TASK2), (900.0, None), "test")
    kw = dict(name="two", taskset=ts,
              per_task={"walker-walk": TaskStats.from_returns([1.0, 3.0]),
                        "cheetah-run": TaskStats.from_returns([2.0, 2.0])},
              shards=(FileEntry("shard-00000-of-00001.array_record", SHA, 10, 4),),
              episode_digests=tuple(reversed(D)), sources=(D[1], D[0]),
              builder={"pipeline": "build_mt19", "runner": "DirectRunner"},
              content_hash=dataset_content_hash(ts, D),
              created=utc_now_iso())
    kw.update(over)
    return DatasetManifest(**kw)


def test_episode_set_round_trip(tmp_path):
    m = es_manifest()
    assert EpisodeSetManifest.from_json(m.to_json()) == m
    d = json.loads(m.to_json())
    assert d["kind"] == "episode_set" and d["episode_count"] == 4
    assert d["producer"] == {"run_id": "run-1", "agent": "tdmpc2",
                             "config_hash": "cfg123", "seed": 3,
                             "code_version": "deadbeef"}
    m.write(tmp_path)
    assert EpisodeSetManifest.load(tmp_path) == m and load_manifest(tmp_path) == m


def test_dataset_round_trip_and_normalisation(tmp_path):
    m = ds_manifest()
    assert m.episode_digests == tuple(sorted(D)) and m.sources == tuple(sorted(D[:2]))
    assert list(m.per_task) == ["walker-walk", "cheetah-run"]  # TaskSet order
    assert m.per_task["walker-walk"] == TaskStats(2, 2.0, 1.0, 1.0, 3.0)
    assert DatasetManifest.from_json(m.to_json()) == m
    m.write(tmp_path)
    assert load_manifest(tmp_path) == m


def test_content_hash_mismatch_is_caught():
    with pytest.raises(ManifestError, match="content_hash"):
        es_manifest(content_hash="00" * 32)
    with pytest.raises(ManifestError, match="content_hash"):
        es_manifest(task=TASK2)
    with pytest.raises(ManifestError, match="content_hash"):
        ds_manifest(content_hash=episode_set_content_hash(TASK, D))


@pytest.mark.parametrize("over,needle", [
    (dict(episode_returns=(1.0, 2.0, 3.0)), "4 episode_digests"),
    (dict(episode_returns=(1.0, 2.0, float("nan"), 0.0)), "finite"),
    (dict(files=(FileEntry("episodes-00000.array_record", SHA, 100, 3),)),
     "files hold 3 records"),
    (dict(created="yesterday"), "ISO 8601"),
    (dict(created="2026-01-02T03:04:05"), "UTC offset"),
    (dict(episode_digests=("xyz",) + tuple(D[1:])), "sha256 hex"),
])
def test_episode_set_validation(over, needle):
    with pytest.raises(ManifestError, match=needle):
        es_manifest(**over)


def test_field_validation_errors():
    with pytest.raises(ManifestError, match="producer.seed"):
        Producer("r", "a", "c", "3", "v")
    with pytest.raises(ManifestError, match="producer.agent"):
        Producer("r", "", "c", 3, "v")
    with pytest.raises(ManifestError, match="plain file name"):
        FileEntry("../x", SHA, 1, 1)
    with pytest.raises(ManifestError, match="null with 0 episodes"):
        TaskStats(0, 1.0, None, None, None)
    with pytest.raises(ManifestError, match="per_task covers"):
        ds_manifest(per_task={"walker-walk": TaskStats.from_returns([1, 2, 3, 4])})
    with pytest.raises(ManifestError, match="counts disagree"):
        ds_manifest(per_task={"walker-walk": TaskStats.from_returns([1.0]),
                              "cheetah-run": TaskStats.from_returns([2.0])})


def test_json_errors_name_the_problem(tmp_path):
    d = json.loads(es_manifest().to_json())
    with pytest.raises(ManifestError, match="schema version 2"):
        EpisodeSetManifest.from_dict(dict(d, schema_version=2))
    with pytest.raises(ManifestError, match="kind"):
        EpisodeSetManifest.from_dict(dict(d, kind="pooled_dataset"))
    with pytest.raises(ManifestError, match=r"missing keys \['producer'\]"):
        EpisodeSetManifest.from_dict({k: v for k, v in d.items() if k != "producer"})
    with pytest.raises(ManifestError, match="episode_count"):
        EpisodeSetManifest.from_dict(dict(d, episode_count=5))
    with pytest.raises(ManifestError, match="not valid JSON"):
        EpisodeSetManifest.from_json("{")
    (tmp_path / "manifest.json").write_text(json.dumps(dict(d, content_hash="0" * 64)))
    with pytest.raises(ManifestError, match=str(tmp_path)):
        load_manifest(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_manifest(tmp_path / "nope")
