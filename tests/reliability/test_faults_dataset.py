"""Fault injection, sections 1 and 2 of issue 15's classes (docs/reliability.md counts them).

1. Dataset faults that keep a dataset self-consistent (every digest, count,
   statistic and the content hash recomputed): validate names the exact check
   and the fix; the build pools a repeated episode once and refuses an
   impossible reward.
2. name@hash bound to content: a dataset or episode set changed in place.

The synthetic dataset (`built`, conftest.py) is built once per module; the forgeries are
`faults_common.forge`'s. The other classes: test_faults_interrupted.py,
test_faults_bad_input.py, test_faults_running.py.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import taskset_of, write_set  # noqa: E402
from faults_common import CART, REPO, _first, _read, _write, episode, forge  # noqa: E402
from tiny_runs import TINY_OFFLINE_ARGS  # noqa: E402

from wmx.cli.beam import main as beam_main  # noqa: E402
from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.store import ArtifactIntegrityError, Store  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.pipelines.sources import BuildInputError, make_plan  # noqa: E402
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.hashing import episode_set_content_hash, file_digest  # noqa: E402
from wmx.schemas.manifest import DatasetManifest, EpisodeSetManifest, FileEntry  # noqa: E402
from wmx.schemas.taskset import TDMPC2_REFERENCE_SOURCE, TaskSet  # noqa: E402
from wmx.train_offline import cli as offline_cli  # noqa: E402


def _duplicate(shards):
    a, b = sorted(shards)
    shards[b].append(shards[a][0])


def _set_reward(task_id: int, value: float):
    def edit(shards):
        _first(shards, task_id)["reward"][3] = np.float32(value)
    return edit


def _task_field(**changes):
    import dataclasses

    def edit(ts: TaskSet) -> TaskSet:
        tasks = tuple(dataclasses.replace(t, **changes) if t.name == CART.name else t
                      for t in ts.tasks)
        return TaskSet(ts.name, tasks, ts.reference_scores, ts.reference_source)
    return edit


def _tdmpc2_scores(ts: TaskSet) -> TaskSet:   # the TD-MPC2 source, a wrong score
    return TaskSet(ts.name, ts.tasks, (5.0, None), TDMPC2_REFERENCE_SOURCE)


def _named_mt19(ts: TaskSet) -> TaskSet:
    return TaskSet("mt19", ts.tasks, ts.reference_scores, ts.reference_source)


# (id, forge kwargs, the one check that must fire, text of the message, text of the fix)
DATASET_FAULTS = [
    ("same-episode-twice", dict(records=_duplicate), "duplicate", "is stored 2 times",
     "pools each episode once"),
    ("reward-1e6-on-a-dmc-row", dict(records=_set_reward(0, 1e6)), "reward_range",
     "outside [0, 2]", "no source episode set holds this episode"),
    ("negative-dmc-reward", dict(records=_set_reward(0, -0.5)), "reward_range",
     "outside [0, 2]", "rebuild"),
    ("probe-reward-above-1", dict(records=_set_reward(1, 1.5)), "reward_range",
     "outside [-1, 1]", "rebuild"),
    ("discount-not-registry", dict(taskset=_task_field(discount=0.99)), "registry",
     "discount 0.99, the registry's γ(T=8) is 0.95", "rebuild the dataset"),
    ("action-repeat-not-registry", dict(taskset=_task_field(action_repeat=4)), "registry",
     "action_repeat 4, the task registry says 2", "rebuild the dataset"),
    ("reference-score-not-tdmpc2", dict(taskset=_tdmpc2_scores), "registry",
     "reference score 5.0, TD-MPC2's published final return is 998.333", "rebuild"),
    ("named-mt19-without-its-tasks", dict(taskset=_named_mt19, name="mt19"), "registry",
     "['probe-action'] are not mt19 tasks", "rebuild"),
]


def test_the_fresh_build_passes_every_check(built):
    _, ds = built
    rep = validate_dataset(ds)
    assert rep.ok, rep.format()
    assert rep.episodes_checked == 6
    assert any("T = 8 agent steps" in n for n in rep.notes)        # shortened episodes noted


@pytest.mark.parametrize("fault", DATASET_FAULTS, ids=[f[0] for f in DATASET_FAULTS])
def test_consistent_dataset_fault_fails_exactly_its_check(built, tmp_path, fault, capsys):
    _, ds = built
    _, kwargs, check, text, fix = fault
    bad = forge(ds, tmp_path, **kwargs)
    rep = validate_dataset(bad)
    assert rep.checks == {check}, rep.format()
    (failure,) = [f for f in rep.failures if f.check == check][:1]
    assert text in failure.message and fix in failure.fix, str(failure)
    assert wmx_main(["dataset", "validate", str(bad)]) == 1
    assert f"[{check}]" in capsys.readouterr().out


def test_stray_file_fails_stray_file(built, tmp_path):
    _, ds = built
    bad = forge(ds, tmp_path)
    (bad / "notes.txt").write_text("left here\n")
    rep = validate_dataset(bad)
    assert rep.checks == {"stray_file"} and rep.failures[0].where == "notes.txt"
    assert "remove it" in rep.failures[0].fix


def test_bad_episode_names_the_source_set_that_holds_it(built, tmp_path):
    """An impossible reward already in a source episode set (an older build let it in):
    validate names that set; the build of today refuses it (next test)."""
    home, ds = built
    rng = np.random.default_rng(7)
    ep = episode(rng, CART)
    ep["reward"][2] = np.float32(50.0)
    work = tmp_path / "h"
    src = write_set(work, CART, [ep], 9)

    def add_it(shards):
        shards[sorted(shards)[0]].append(schema.pad_episode(ep, 0, 5, 2))
    bad = forge(ds, work, records=add_it, extra_sources=[src])
    rep = validate_dataset(bad)
    assert rep.checks == {"reward_range"}
    assert f"{CART.name}@{src.name[:10]}" in rep.failures[0].fix
    assert "export that run's episodes again" in rep.failures[0].fix


def test_build_refuses_a_source_with_an_impossible_reward(tmp_path, capsys, caplog):
    rng = np.random.default_rng(3)
    eps = [episode(rng, CART) for _ in range(2)]
    eps[1]["reward"][3] = np.float32(1e6)
    d = write_set(tmp_path, CART, eps, 0)
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of("one", [CART]).to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: a source episode set failed its check")
    assert "outside [0, 2]" in err[-1] and d.name in err[-1]
    # one line: Beam's own log of the failing step (a traceback) is not printed before it
    assert not [r for r in caplog.records if r.name.startswith("apache_beam")
                and r.levelno >= logging.ERROR]
    assert Store(tmp_path).list_datasets() == []
    assert not list((tmp_path / "datasets" / ".staging").iterdir())


def _build_all(home: Path, name: str, infos) -> tuple[Path, DatasetManifest]:
    """Build every episode set of the store at ``home`` into the TaskSet ``name`` of
    ``infos`` with the real job (exit 0 asserted); the dataset's path and manifest."""
    spec = home / "ts.json"
    spec.write_text(taskset_of(name, list(infos)).to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(home)]) == 0
    (entry,) = Store(home).list_datasets()
    return entry.path, DatasetManifest.load(entry.path)


def _swingup():
    """cartpole-swingup at the fixtures' T: CART's embodiment, so its dims."""
    from wmx.envs.registry import get_task
    from wmx.schemas.taskset import TaskInfo
    return TaskInfo.from_spec(get_task("cartpole-swingup").replace(T=CART.episode_length))


def test_build_pools_an_episode_held_by_two_sets_once(tmp_path, capsys):
    rng = np.random.default_rng(4)
    eps = [episode(rng, CART) for _ in range(5)]
    a = write_set(tmp_path, CART, eps[:3], 0)
    b = write_set(tmp_path, CART, eps[2:], 1)            # eps[2] is in both sets
    path, man = _build_all(tmp_path, "one", [CART])
    out = capsys.readouterr().out
    assert "5 episodes" in out and "1 duplicate episode dropped" in out
    assert man.episode_count == 5
    (dup,) = man.builder["duplicates"]
    digest = schema.episode_digest(eps[2])
    first, second = sorted([a, b], key=lambda d: d.name)
    assert dup["digest"] == digest and dup["kept"].startswith(f"{CART.name}/{first.name}#")
    assert dup["dropped"] == [f"{CART.name}/{second.name}#{0 if second == b else 2}"]
    assert validate_dataset(path).ok
    assert wmx_main(["dataset", "info", f"one@{path.name}", "--home", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "  1 duplicate episode in the sources pooled once (builder.duplicates)"


def test_build_pools_an_episode_two_tasks_share_under_each(tmp_path, capsys):
    """Tasks of one embodiment can record the same episode (reacher-easy and reacher-hard,
    seeded alike, while neither reward fires): it is pooled under each task, listed in the
    manifest's builder.shared, and validation counts it once per task, not as a duplicate."""
    swing = _swingup()
    assert (swing.obs_dim, swing.action_dim) == (CART.obs_dim, CART.action_dim)
    rng = np.random.default_rng(7)
    eps = [episode(rng, CART) for _ in range(4)]
    a = write_set(tmp_path, CART, eps[:3], 0)
    b = write_set(tmp_path, swing, eps[2:], 0)           # eps[2] is in both tasks' sets
    path, man = _build_all(tmp_path, "two", [CART, swing])
    out = capsys.readouterr().out
    assert "5 episodes" in out and "1 episode held by several tasks' sets" in out
    assert {t: s.episodes for t, s in man.per_task.items()} == {CART.name: 3, swing.name: 2}
    assert "duplicates" not in man.builder
    assert man.builder["shared"] == [{"digest": schema.episode_digest(eps[2]),
                                      "tasks": [f"{CART.name}/{a.name}#2",
                                                f"{swing.name}/{b.name}#0"]}]
    assert sorted(man.episode_digests).count(schema.episode_digest(eps[2])) == 2
    assert validate_dataset(path).ok
    assert wmx_main(["dataset", "info", f"two@{path.name}", "--home", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  1 episode held by several tasks' sets, pooled under each (builder.shared): "
        f"{CART.name} and {swing.name}: 1")
    from wmx.cli.demo import find_dataset       # by its episodes, counted once per task
    c = write_set(tmp_path, CART, eps[:1], 1)   # other sources, the same pooled episodes
    assert find_dataset(tmp_path, "two", [a, b, c]) == f"two@{path.name}"


def test_an_episode_repeated_within_two_tasks_is_listed_once_per_task(tmp_path):
    """An episode that two sets of each of two tasks hold: builder.duplicates has one entry
    per task, each naming that task's kept and dropped copies (not one entry under the
    first task listing the other task's copy as dropped from it); builder.shared names it
    once with each task's kept copy; a duplicate that validation finds names only the sets
    of its task."""
    swing = _swingup()
    rng = np.random.default_rng(8)
    eps = [episode(rng, CART) for _ in range(3)]
    a1, a2 = write_set(tmp_path, CART, eps[:2], 0), write_set(tmp_path, CART, eps[1:2], 1)
    b1, b2 = write_set(tmp_path, swing, eps[1:], 0), write_set(tmp_path, swing, eps[1:2], 1)
    path, man = _build_all(tmp_path, "two", [CART, swing])
    assert {t: s.episodes for t, s in man.per_task.items()} == {CART.name: 2, swing.name: 2}
    dg = schema.episode_digest(eps[1])
    ref = {a1: 1, a2: 0, b1: 0, b2: 0}
    want = []
    for info, sets in ((CART, (a1, a2)), (swing, (b1, b2))):
        kept, dropped = (f"{info.name}/{d.name}#{ref[d]}"
                         for d in sorted(sets, key=lambda d: d.name))
        want.append({"digest": dg, "task": info.name, "kept": kept, "dropped": [dropped]})
    assert man.builder["duplicates"] == want
    assert man.builder["shared"] == [{"digest": dg, "tasks": [want[0]["kept"], want[1]["kept"]]}]
    assert validate_dataset(path).ok

    def twice(shards):       # swingup's copy relabelled as cartpole-balance's
        for recs in shards.values():
            for r in recs:
                if int(r["task_id"]) == 1 and schema.episode_digest(
                        schema.unpad_episode(r)[1]) == dg:
                    r["task_id"] = np.asarray(0, np.int32)
                    return
    rep = validate_dataset(forge(path, tmp_path / "forged", records=twice),
                           home=tmp_path / "forged")
    (fail,) = [f for f in rep.failures if f.check == "duplicate"]
    assert CART.name in fail.fix and swing.name not in fail.fix


def test_a_build_with_the_stored_episodes_under_other_tasks_is_refused(tmp_path, capsys):
    """The content hash covers the episodes, not which task holds each: a second build that
    puts the stored dataset's episodes under other tasks of equal dims has its hash. It is
    refused in one line (exit 2) instead of silently handing back the stored assignment,
    and leaves nothing: the stored dataset as it was, no staging."""
    swing = _swingup()
    rng = np.random.default_rng(9)
    e0, e1 = (episode(rng, CART) for _ in range(2))
    first = [write_set(tmp_path, CART, [e0, e1], 0), write_set(tmp_path, swing, [e1], 0)]
    other = [write_set(tmp_path, CART, [e1], 1), write_set(tmp_path, swing, [e0, e1], 1)]
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of("two", [CART, swing]).to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")

    def build(sets):
        return beam_main(["run", job, "--taskset", str(spec), "--home", str(tmp_path),
                          "--sources", *(f"{d.parent.name}/{d.name}" for d in sets)])
    assert build(first) == 0
    (entry,) = Store(tmp_path).list_datasets()
    before = {p.name: file_digest(p) for p in entry.path.iterdir()}
    capsys.readouterr()
    assert build(other) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: the data root holds two@{entry.path.name[:10]} with the same episodes but "
        f"others under task {CART.name} (2 episodes there, 1 in this build)"), err
    assert [e.path for e in Store(tmp_path).list_datasets()] == [entry.path]
    assert {p.name: file_digest(p) for p in entry.path.iterdir()} == before
    assert not list((tmp_path / "datasets" / ".staging").iterdir())
    assert build(first) == 0                               # the same build again: kept


def test_a_shard_orders_one_episode_of_two_tasks_by_its_bytes(tmp_path):
    """Records of one digest (an episode two tasks share) are written in the order of their
    bytes, whatever order the shard's group arrives in: the shard file is the same."""
    from wmx.pipelines.transforms import WriteShardFn
    plan = type("P", (), {"staging_dir": None, "num_shards": 1})()
    items = [("d" * 64, b"task 1", {"task": "b", "return": 1.0}),
             ("d" * 64, b"task 0", {"task": "a", "return": 1.0}),
             ("c" * 64, b"other", {"task": "a", "return": 0.0})]
    files = []
    for k, order in enumerate((items, items[::-1])):
        plan.staging_dir = str(tmp_path / str(k))
        Path(plan.staging_dir).mkdir()
        (stats,) = WriteShardFn(plan).process((0, list(order)))
        assert stats["tasks"] == ["a", "a", "b"]
        files.append(stats["digest"])
    assert files[0] == files[1]


def test_sources_deduped_to_a_stored_dataset_find_it_by_its_episodes(tmp_path):
    """A build whose sources dedupe to the episodes of a stored dataset keeps that
    dataset (its manifest names the first build's sources); the lookup after a build
    (``find_dataset``: wmx demo, the offline checks) finds it by its episodes."""
    from wmx.cli.demo import find_dataset
    rng = np.random.default_rng(6)
    eps = [episode(rng, CART) for _ in range(3)]
    a = write_set(tmp_path, CART, eps, 0)
    b = write_set(tmp_path, CART, eps[1:], 1)             # every episode of b is in a
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of("one", [CART]).to_json())
    build = ["run", str(REPO / "pipelines" / "build_taskset.py"), "--taskset", str(spec),
             "--home", str(tmp_path), "--sources"]
    assert find_dataset(tmp_path, "one", [a]) is None
    assert beam_main([*build, f"{a.parent.name}/{a.name}"]) == 0
    (entry,) = Store(tmp_path).list_datasets()
    ref = f"one@{entry.path.name}"
    assert find_dataset(tmp_path, "one", [a]) == ref
    assert find_dataset(tmp_path, "one", [b]) is None      # two of the three episodes
    assert beam_main([*build, *(f"{d.parent.name}/{d.name}" for d in (a, b))]) == 0
    assert [e.path for e in Store(tmp_path).list_datasets()] == [entry.path]   # kept
    assert DatasetManifest.load(entry.path).sources == (
        EpisodeSetManifest.load(a).content_hash,)
    assert find_dataset(tmp_path, "one", [a, b]) == ref
    assert find_dataset(tmp_path, "one", [b, a]) == ref
    # over the TaskSet asked for: a dataset of the same episodes over another TaskSet of
    # the same name (e.g. other reference scores) is not it; unreadable manifests skipped
    ts = taskset_of("one", [CART])
    other = json.loads((entry.path / "manifest.json").read_text())
    other["taskset"] = dataclasses.replace(ts, reference_scores=(50.0,)).to_dict()
    other["content_hash"] = "0" * 64                         # sorts first
    (entry.path.parent / ("0" * 64)).mkdir()
    (entry.path.parent / ("0" * 64) / "manifest.json").write_text(json.dumps(other))
    (entry.path.parent / "zz").mkdir()
    (entry.path.parent / "zz" / "manifest.json").write_text("{")
    assert find_dataset(tmp_path, "one", [a, b], ts) == ref
    assert find_dataset(tmp_path, "one", [a, b]) == "one@" + "0" * 64    # any TaskSet


# ---- 2. name@hash bound to its content -----------------------------------------------------
def test_dataset_changed_in_place_no_longer_resolves_and_fails_validation(built, tmp_path,
                                                                           capsys):
    _, ds = built

    def halve(shards):
        r = _first(shards, 0)
        r["reward"][1:] = r["reward"][1:] / 2
    bad = forge(ds, tmp_path, records=halve, keep_dir=True)
    ref = f"tst@{ds.name[:10]}"
    with pytest.raises(ArtifactIntegrityError, match="changed after it was written"):
        Store(tmp_path).resolve_dataset(ref)
    assert wmx_main(["dataset", "info", ref, "--home", str(tmp_path)]) == 2
    assert "changed after it was written" in capsys.readouterr().err
    assert offline_cli.main(["--dataset", ref, "--home", str(tmp_path), "--dry-run",
                             *TINY_OFFLINE_ARGS]) == 2
    assert "changed after it was written" in capsys.readouterr().err
    rep = validate_dataset(ref, home=tmp_path)                  # validate still reads it
    assert rep.checks == {"content_hash"} and rep.path == bad
    assert "stored (and named) as tst@" in rep.failures[0].message
    assert wmx_main(["dataset", "ls", "--home", str(tmp_path)]) == 0
    assert "changed after the build" in capsys.readouterr().out


def test_episode_set_changed_in_place_is_refused_by_the_build(tmp_path):
    rng = np.random.default_rng(5)
    d = write_set(tmp_path, CART, [episode(rng, CART) for _ in range(2)], 0)
    man = EpisodeSetManifest.load(d)
    f = d / man.files[0].name
    eps = [schema.deserialize_episode(b) for b in _read(f)]
    eps[0]["reward"][1] = np.float32(0.25)
    blobs = [schema.serialize_episode(e) for e in eps]
    f.unlink()
    _write(f, blobs)
    digests = tuple(schema.record_digest(b) for b in blobs)
    new = EpisodeSetManifest(
        task=man.task, env_versions=man.env_versions, producer=man.producer,
        episode_returns=tuple(schema.episode_return(e) for e in eps), episode_digests=digests,
        files=(FileEntry(f.name, file_digest(f), f.stat().st_size, len(blobs)),),
        content_hash=episode_set_content_hash(man.task, digests), created=man.created)
    (d / "manifest.json").unlink()
    new.write(d)
    with pytest.raises(BuildInputError, match="was changed after it was exported"):
        make_plan(tmp_path, taskset_of("one", [CART]))
    with pytest.raises(ArtifactIntegrityError, match="changed after it was written"):
        Store(tmp_path).resolve_episode_set(f"{CART.name}@{d.name[:10]}")
