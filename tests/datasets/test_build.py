"""Beam build of pooled datasets: determinism, round trip, atomicity, bad input.

Uses real episode sets from two Playground tasks of different dims
(cartpole-balance O=5 A=1, cheetah-run O=17 A=6; random actions, T shortened)
plus a synthetic wide task (O=24, A=6).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import (playground_episodes, synthetic_episode,  # noqa: E402
                              taskset_of, write_set)

from wmx.datasets.readers import load_numpy, open_dataset  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.pipelines.sources import BuildInputError, make_plan, run_build  # noqa: E402
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

T = 10
# Real Playground rollouts compile two MJX envs (~1-2 min of CPU): slow marker.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with 2 cartpole-balance sets, 1 cheetah-run set, 1 synthetic set."""
    home = tmp_path_factory.mktemp("home")
    infos = [TaskInfo("cartpole-balance", 5, 1, T, 2, 0.9),
             TaskInfo("cheetah-run", 17, 6, T, 2, 0.9),
             TaskInfo("synthetic-wide", 24, 6, T, 2, 0.9)]
    cart = playground_episodes("cartpole-balance", 5, T, 0)  # one compile per task
    rng = np.random.default_rng(3)
    eps = {"cartpole-balance": [cart[:3], cart[3:]],
           "cheetah-run": [playground_episodes("cheetah-run", 3, T, 2)],
           "synthetic-wide": [[synthetic_episode(rng, T, 24, 6) for _ in range(4)]]}
    for i, info in enumerate(infos):
        for j, e in enumerate(eps[info.name]):
            write_set(home, info, e, seed=10 * i + j)
    return home, taskset_of("tst", infos), eps


def _build(home, ts, **kw):
    return run_build(make_plan(home, ts, **kw))


@pytest.fixture(scope="module")
def built(store, tmp_path_factory):
    home, ts, eps = store
    d3 = _build(home, ts, num_shards=3)
    home2 = tmp_path_factory.mktemp("home2")
    shutil.copytree(home / "episodes", home2 / "episodes")
    d3b = _build(home2, ts, num_shards=3)
    home3 = tmp_path_factory.mktemp("home3")
    shutil.copytree(home / "episodes", home3 / "episodes")
    d1 = _build(home3, ts, num_shards=1)
    return d3, d3b, d1


def test_same_sources_same_hash_and_identical_shards(built):
    d3, d3b, _ = built
    assert d3.name == d3b.name
    files = sorted(p.name for p in d3.glob("shard-*"))
    assert len(files) == 3
    for f in files:
        assert (d3 / f).read_bytes() == (d3b / f).read_bytes()


def test_shard_count_does_not_change_content_hash(built):
    d3, _, d1 = built
    assert d1.name == d3.name
    assert len(list(d1.glob("shard-*"))) == 1


def test_round_trip_every_episode_bit_identical_with_task_id(store, built):
    home, ts, eps = store
    ds = open_dataset(built[0], verify=True)
    data = load_numpy(ds)
    got = {}
    for k in range(data["obs"].shape[0]):
        o, a = int(data["obs_dim"][k]), int(data["action_dim"][k])
        ep = {"obs": data["obs"][k, :, :o], "action": data["action"][k, :, :a],
              **{f: data[f][k] for f in ("reward", "is_first", "is_last", "is_terminal")}}
        ep = {f: np.ascontiguousarray(v) for f, v in ep.items()}
        got[schema.episode_digest(ep)] = (int(data["task"][k]), ep)
        assert np.all(data["obs"][k, :, o:] == 0) and np.all(data["action"][k, :, a:] == 0)
    n = 0
    for task, sets in eps.items():
        for s in sets:
            for ep in s:
                n += 1
                tid, back = got[schema.episode_digest(ep)]
                assert tid == ts.task_id(task)
                for f in schema.EPISODE_KEYS:
                    assert back[f].tobytes() == ep[f].tobytes()
    assert n == len(got) == ds.num_episodes == 12
    assert ds.manifest.per_task["cartpole-balance"].episodes == 5


def test_sources_option_selects_sets(store, tmp_path):
    home, ts, _ = store
    sets = Store(home).list_episode_sets()
    pick = [f"{e.name}/{e.content_hash}" for e in sets if e.name != "cartpole-balance"]
    pick.append(next(e.content_hash[:12] for e in sets if e.name == "cartpole-balance"))
    plan = make_plan(home, ts, sources=pick)
    assert len(plan.sources) == 3


@pytest.mark.parametrize("case", ["missing_task", "unknown_source", "ambiguous_source"])
def test_bad_input_clear_error_writes_nothing(store, case):
    home, ts, _ = store
    before = sorted(p.name for p in (home / "datasets").glob("*/*"))
    if case == "missing_task":
        ts2 = taskset_of("tst2", list(ts.tasks) + [TaskInfo("walker-walk", 24, 6, T, 2, .9)])
        with pytest.raises(BuildInputError, match="walker-walk"):
            make_plan(home, ts2)
    elif case == "unknown_source":
        with pytest.raises(BuildInputError, match="names no episode set"):
            make_plan(home, ts, sources=["deadbeefdeadbeef"])
    else:
        with pytest.raises(BuildInputError, match="ambiguous"):
            make_plan(home, ts, sources=["cartpole-balance"])  # a task with 2 sets
    assert sorted(p.name for p in (home / "datasets").glob("*/*")) == before


def test_sets_of_one_task_with_different_obs_dims(tmp_path):
    a5 = TaskInfo("task-a", 5, 1, T, 2, 0.9)
    a6 = TaskInfo("task-a", 6, 1, T, 2, 0.9)
    rng = np.random.default_rng(0)
    write_set(tmp_path, a5, [synthetic_episode(rng, T, 5, 1)], 0)
    write_set(tmp_path, a6, [synthetic_episode(rng, T, 6, 1)], 1)
    with pytest.raises(BuildInputError, match="disagree on"):
        make_plan(tmp_path, taskset_of("x", [a5]))
    assert not (tmp_path / "datasets").exists() or not list((tmp_path / "datasets").glob("*/*"))


def test_unknown_task_name_in_mt19_subset():
    from wmx.schemas.taskset import mt19
    with pytest.raises(ValueError, match="not-a-task"):
        mt19().subset(["walker-walk", "not-a-task"])


def test_failed_build_leaves_nothing_and_rerun_succeeds(tmp_path):
    info = TaskInfo("task-a", 5, 1, T, 2, 0.9)
    rng = np.random.default_rng(1)
    d = write_set(tmp_path, info, [synthetic_episode(rng, T, 5, 1) for _ in range(3)], 0)
    ts = taskset_of("x", [info])
    plan = make_plan(tmp_path, ts, num_shards=2)
    shard = next(d.glob("*.array_record"))
    good = shard.read_bytes()
    shard.write_bytes(good[: len(good) // 2])  # the source breaks mid-build
    with pytest.raises(Exception, match="sha256"):
        run_build(plan)
    assert Store(tmp_path).list_datasets() == []
    assert not list((tmp_path / "datasets" / ".staging").iterdir())
    shard.write_bytes(good)
    out = run_build(make_plan(tmp_path, ts, num_shards=2))
    assert [e.path for e in Store(tmp_path).list_datasets()] == [out]


def test_killed_build_leaves_no_dataset(tmp_path):
    """A staging dir left by a killed process is invisible to the store, and a rerun succeeds."""
    info = TaskInfo("task-a", 5, 1, T, 2, 0.9)
    write_set(tmp_path, info, [synthetic_episode(np.random.default_rng(2), T, 5, 1)], 0)
    ts = taskset_of("x", [info])
    plan = make_plan(tmp_path, ts)
    Path(plan.staging_dir).mkdir(parents=True)
    (Path(plan.staging_dir) / "shard-00000-of-00001.array_record.tmp").write_bytes(b"partial")
    assert Store(tmp_path).list_datasets() == []
    out = run_build(make_plan(tmp_path, ts))
    assert open_dataset(out, verify=True).num_episodes == 1
