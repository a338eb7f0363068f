"""Incremental export (EpisodeSetWriter): chunks, restart, resume, finalise."""
import json
import os
import sys

import numpy as np
import pytest

from wmx.episode_sets.episode_set import read_episode_set, write_episode_set
from wmx.episode_sets.staged_writer import STATE_FILENAME, EpisodeSetWriter, split_batch
from wmx.datasets.store import Store
from wmx.schemas.episode import make_episode, serialize_episode
from wmx.schemas.taskset import TaskInfo

T = 5
TASK = TaskInfo("probe-action", 2, 2, T, 1, 0.9)
PRODUCER = dict(run_id="run-1", agent="dreamerv3", config_hash="cfg", seed=0,
                code_version="v1")


def ep(seed):
    r = np.random.default_rng(seed)
    a = r.uniform(-1, 1, (T + 1, 2))
    a[-1] = 0
    rew = r.uniform(0, 1, T + 1)
    rew[0] = 0
    k = np.arange(T + 1)
    return make_episode(r.normal(size=(T + 1, 2)), a, rew, k == 0, k == T,
                        np.zeros(T + 1))


@pytest.fixture
def setup(tmp_path):
    store = Store(tmp_path / "home")
    return store, store.run_path("run-1") / "episodes-seed0"


def test_chunks_then_finalize_equals_one_shot_write(setup, tmp_path):
    store, staging = setup
    w = EpisodeSetWriter(staging, TASK, PRODUCER, versions={})
    assert w.append([ep(0), ep(1)]) == 2
    assert w.append([]) == 0
    assert w.append([ep(2)], start_index=2) == 1
    assert w.num_episodes == 3
    path = w.finalize(store)
    m, it = read_episode_set(path)
    assert [serialize_episode(e) for e in it] == [serialize_episode(ep(i)) for i in range(3)]
    assert m.producer.run_id == "run-1" and m.producer.agent == "dreamerv3"
    one_shot = write_episode_set(Store(tmp_path / "h2"), TASK, [ep(i) for i in range(3)],
                                 PRODUCER, versions={})
    assert one_shot.name == path.name
    assert w.finalize(store) == path  # idempotent
    assert sorted(os.listdir(staging)) == [STATE_FILENAME]  # chunks removed
    with pytest.raises(ValueError, match="finalised"):
        w.append([ep(3)])


def test_restart_in_a_new_process_resumes_from_disk(setup):
    store, staging = setup
    w = EpisodeSetWriter(staging, TASK, PRODUCER, versions={})
    w.append([ep(0), ep(1)])
    del w
    # a crash mid-append leaves a temp file and an unlisted chunk behind
    (staging / ".chunk-000001.array_record.tmp").write_bytes(b"partial")
    (staging / "chunk-000001.array_record").write_bytes(b"unlisted")
    # the resumed run restarts from a checkpoint taken after episode 0
    w2 = EpisodeSetWriter(staging, TASK, dict(PRODUCER, code_version="v2"))
    assert sorted(os.listdir(staging)) == ["chunk-000000.array_record", STATE_FILENAME]
    assert w2.num_episodes == 2
    assert w2.append([ep(1), ep(2), ep(3)], start_index=1) == 2  # ep(1) skipped
    path = w2.finalize(store)
    _, it = read_episode_set(path)
    assert [serialize_episode(e) for e in it] == [serialize_episode(ep(i)) for i in range(4)]
    # finalising again from yet another process returns the same set
    assert EpisodeSetWriter(staging, TASK, PRODUCER).finalize(store) == path


def test_crash_after_storing_before_recording(setup):
    store, staging = setup
    w = EpisodeSetWriter(staging, TASK, PRODUCER, versions={})
    w.append([ep(0)])
    state = json.loads((staging / STATE_FILENAME).read_text())
    path = w.finalize(store, remove_chunks=False)
    (staging / STATE_FILENAME).write_text(json.dumps(state))  # "lost" the record
    w2 = EpisodeSetWriter(staging, TASK, PRODUCER)
    assert w2.finalized_path is None and w2.finalize(store) == path


def test_resume_errors(setup):
    store, staging = setup
    w = EpisodeSetWriter(staging, TASK, PRODUCER, versions={})
    w.append([ep(0), ep(1)])
    with pytest.raises(ValueError, match="gap"):
        w.append([ep(5)], start_index=3)
    with pytest.raises(ValueError, match="does not replay"):
        w.append([ep(9)], start_index=1)
    with pytest.raises(ValueError, match="producer"):
        EpisodeSetWriter(staging, TASK, dict(PRODUCER, seed=1))
    with pytest.raises(ValueError, match="stages the episodes of run 'run-1', but this run is "
                                         "named 'run-2' .*rename the directory back to "
                                         "'run-1', or continue it with --no-export"):
        EpisodeSetWriter(staging, TASK, dict(PRODUCER, run_id="run-2"))   # a renamed run
    with pytest.raises(ValueError, match="task"):
        EpisodeSetWriter(staging, TaskInfo("other", 2, 2, T, 1, 0.9), PRODUCER)
    bad = ep(3)
    bad["is_first"][2] = True
    with pytest.raises(ValueError, match="episode 2 .*is_first"):
        w.append([bad])
    assert w.num_episodes == 2


def test_split_batch():
    eps = [ep(i) for i in range(3)]
    batch = {k: np.stack([e[k] for e in eps]) for k in eps[0]}
    back = split_batch(batch)
    assert [serialize_episode(e) for e in back] == [serialize_episode(e) for e in eps]
    with pytest.raises(ValueError, match="disagree"):
        split_batch(dict(batch, reward=batch["reward"][:2]))


def test_missing_array_record_fails_at_the_writers_start_and_writes_nothing(
        setup, monkeypatch):
    # a None entry in sys.modules makes the import raise ImportError
    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    _, staging = setup
    with pytest.raises(ImportError, match=r"array_record.*--no-export"):
        EpisodeSetWriter(staging, TASK, PRODUCER, versions={})
    assert not staging.exists()
