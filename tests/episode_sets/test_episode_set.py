"""Episode sets: write/read round trip, layout, dedup, integrity checks."""
import json
import os

import numpy as np
import pytest

from wmx.episode_sets.episode_set import (EpisodeSetIntegrityError, EpisodeSetReader,
                                     read_episode_set, verify_episode_set,
                                     write_episode_set, write_prefix_set)
from wmx.datasets.store import Store
from wmx.schemas.episode import episode_digest, make_episode, serialize_episode
from wmx.schemas.hashing import episode_set_content_hash, file_digest
from wmx.schemas.manifest import EpisodeSetManifest
from wmx.schemas.taskset import TaskInfo

T = 6
TASK = TaskInfo("probe-action", 2, 2, T, 1, 0.9)
PRODUCER = dict(run_id="run-7", agent="tdmpc2", config_hash="cfg", seed=1,
                code_version="abc123")


def ep(seed, T=T):
    r = np.random.default_rng(seed)
    a = r.uniform(-1, 1, (T + 1, 2))
    a[-1] = 0
    rew = r.uniform(0, 1, T + 1)
    rew[0] = 0
    k = np.arange(T + 1)
    return make_episode(r.normal(size=(T + 1, 2)), a, rew, k == 0, k == T,
                        np.zeros(T + 1))


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "home")


def test_round_trip_and_manifest(store):
    eps = [ep(i) for i in range(7)]
    path = write_episode_set(store, TASK, eps, PRODUCER, records_per_file=3,
                             versions={"mujoco": "x"})
    m, it = read_episode_set(path)
    back = list(it)
    assert len(back) == 7
    for a, b in zip(eps, back):
        assert serialize_episode(a) == serialize_episode(b)
    digests = [episode_digest(e) for e in eps]
    assert list(m.episode_digests) == digests
    assert m.content_hash == episode_set_content_hash(TASK, digests)
    assert path == store.episodes_dir / "probe-action" / m.content_hash
    assert m.episode_returns == tuple(float(np.sum(e["reward"], dtype=np.float64))
                                      for e in eps)
    assert m.producer.seed == 1 and m.producer.code_version == "abc123"
    assert m.env_versions == {"mujoco": "x"} and m.task == TASK
    assert sorted(os.listdir(path)) == ["episodes-00000.array_record",
                                        "episodes-00001.array_record",
                                        "episodes-00002.array_record", "manifest.json"]
    assert [f.num_records for f in m.files] == [3, 3, 1]
    assert all(f.sha256 == file_digest(path / f.name) for f in m.files)
    assert os.listdir(path.parent) == [path.name]  # no staging left behind
    # random access, by name too
    with EpisodeSetReader(path) as r:
        assert len(r) == 7 and serialize_episode(r[4]) == serialize_episode(eps[4])
    assert store.resolve_episode_set(f"probe-action@{m.content_hash[:8]}") == path


def test_content_hash_independent_of_files_and_deterministic_bytes(store, tmp_path):
    eps = [ep(i) for i in range(5)]
    p1 = write_episode_set(store, TASK, eps, PRODUCER, records_per_file=2,
                           created="2026-01-01T00:00:00+00:00", versions={})
    other = Store(tmp_path / "other")
    p2 = write_episode_set(other, TASK, eps[::-1], PRODUCER, records_per_file=10,
                           created="2026-01-01T00:00:00+00:00", versions={})
    assert p1.name == p2.name  # same logical content, other order and file split
    p3 = write_episode_set(Store(tmp_path / "third"), TASK, eps, PRODUCER,
                           records_per_file=2, created="2026-01-01T00:00:00+00:00",
                           versions={})
    for f in os.listdir(p1):  # same inputs -> byte-identical files
        assert (p1 / f).read_bytes() == (p3 / f).read_bytes()


def test_same_content_again_returns_the_stored_set(store):
    eps = [ep(i) for i in range(3)]
    p1 = write_episode_set(store, TASK, eps, PRODUCER)
    p2 = write_episode_set(store, TASK, eps, dict(PRODUCER, run_id="run-8"))
    assert p1 == p2 and EpisodeSetManifest.load(p2).producer.run_id == "run-7"
    assert len(store.list_episode_sets()) == 1


def test_a_prefix_set_holds_the_first_episodes_of_its_set(store, tmp_path):
    eps = [ep(i) for i in range(5)]
    full = write_episode_set(store, TASK, eps, PRODUCER, records_per_file=2,
                             versions={"mujoco": "x"})
    other = Store(tmp_path / "other")                  # read from one store, written to another
    p = write_prefix_set(other, full, 3)
    m, whole = EpisodeSetManifest.load(p), EpisodeSetManifest.load(full)
    assert p == other.episodes_dir / "probe-action" / m.content_hash
    assert m.episode_digests == whole.episode_digests[:3]
    assert m.episode_returns == whole.episode_returns[:3]
    assert (m.task, m.producer, m.env_versions) == (TASK, whole.producer, {"mujoco": "x"})
    assert write_prefix_set(other, full, 3) == p                  # content-addressed
    assert len(other.list_episode_sets()) == 1
    assert write_prefix_set(store, full, 5) == full               # the whole set is itself
    for bad in (0, 6):
        with pytest.raises(ValueError, match=f"a prefix of {bad} episodes of a set of 5"):
            write_prefix_set(store, full, bad)


def test_bad_episode_stores_nothing(store):
    bad = ep(2)
    bad["action"][3, 0] = 2.0
    with pytest.raises(ValueError, match=r"episode 2 .*outside \[-1, 1\]"):
        write_episode_set(store, TASK, [ep(0), ep(1), bad], PRODUCER)
    with pytest.raises(ValueError, match="expected T\\+1 = 7"):
        write_episode_set(store, TASK, [ep(0, T=5)], PRODUCER)
    assert os.listdir(store.episodes_dir / "probe-action") == []


def test_corruption_is_detected(store):
    path = write_episode_set(store, TASK, [ep(i) for i in range(3)], PRODUCER)
    f = path / "episodes-00000.array_record"
    data = bytearray(f.read_bytes())
    os.chmod(f, 0o644)
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    assert verify_episode_set(path) == ["episodes-00000.array_record: sha256 differs "
                                        "from the manifest"]
    with pytest.raises(EpisodeSetIntegrityError, match="sha256"):
        read_episode_set(path)
    m = json.loads((path / "manifest.json").read_text())
    m["episode_returns"][0] += 1
    (path / "manifest.json").write_text(json.dumps(m))  # returns are not hashed...
    assert EpisodeSetManifest.load(path).episode_returns[0] == m["episode_returns"][0]
    m["episode_digests"][0] = "0" * 64  # ...digests are
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="content_hash"):
        EpisodeSetManifest.load(path)


def test_round_trip_against_the_collector_rows(store):
    """Episodes straight from the row collector (probe env) survive the set."""
    jax = pytest.importorskip("jax")
    from wmx.envs.collector import collect_episodes, uniform_policy
    from wmx.envs.probes import make_probe_env
    env = make_probe_env("probe-action", episode_length=T)
    eps, stats = collect_episodes(env, uniform_policy(env.action_dim),
                                  jax.random.PRNGKey(0), n_envs=2, n_episodes=2)
    path = write_episode_set(store, env.spec, eps, PRODUCER)  # a registry TaskSpec
    m, it = read_episode_set(path)
    back = list(it)
    assert len(back) == 4 == m.episode_count
    for a, b in zip(eps, back):
        for k in a:
            assert np.asarray(a[k]).tobytes() == b[k].tobytes(), k
    np.testing.assert_allclose(m.episode_returns, stats["returns"], rtol=1e-6)
