"""Fault injection, one section per class of issue 15 (docs/reliability.md counts them).

1. Dataset faults that keep a dataset self-consistent (every digest, count,
   statistic and the content hash recomputed): validate names the exact check
   and the fix; the build pools a repeated episode once and refuses an
   impossible reward.
2. name@hash bound to content: a dataset or episode set changed in place.
3. Interrupted runs: metrics rows, stale temporaries, reports moved aside.
4. Bad input: one line, exit 2, nothing written (`BAD_INPUTS`).
5. Expected failures while running (home, disk, memory): one line, exit 1,
   nothing a rerun trips over.
6. Non-finite values stop a run, naming where, keeping the last checkpoint.

Every case is fast: the synthetic dataset is built once per module, and the
training cases reuse the session's tiny runs (their programs are compiled
once per session, tests/tiny_runs.py). The kill test is test_kill.py (slow).
"""
from __future__ import annotations

import csv
import dataclasses
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import taskset_of, write_set  # noqa: E402
from tiny_runs import T as TINY_T, TINY_OFFLINE_ARGS, TINY_ONLINE_ARGV, TINY_RC  # noqa: E402

from wmx import temporaries  # noqa: E402
from wmx.cli.beam import main as beam_main  # noqa: E402
from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.store import ArtifactIntegrityError, Store  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.envs.registry import get_task  # noqa: E402
from wmx.evaluate import cli as evaluate_cli  # noqa: E402
from wmx.pipelines.sources import BuildInputError, make_plan, run_build  # noqa: E402
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.hashing import dataset_content_hash, episode_set_content_hash, file_digest  # noqa: E402,E501
from wmx.schemas.manifest import (DatasetManifest, EpisodeSetManifest, FileEntry,  # noqa: E402
                                  TaskStats)
from wmx.schemas.taskset import TDMPC2_REFERENCE_SOURCE, TaskInfo, TaskSet  # noqa: E402
from wmx.train_offline import cli as offline_cli  # noqa: E402
from wmx.train_online import cli as online_cli  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
T = 8
CART = TaskInfo.from_spec(get_task("cartpole-balance").replace(T=T))   # O=5 A=1 repeat 2
PROBE = TaskInfo.from_spec(get_task("probe-action").replace(T=T))      # O=2 A=2 repeat 1
REWARD = {CART.name: (0.0, 2.0), PROBE.name: (-1.0, 1.0)}   # one agent step (registry)


def episode(rng, info: TaskInfo) -> dict:
    """A valid episode of ``info`` with rewards inside the task's range."""
    O, A = info.obs_dim, info.action_dim
    lo, hi = REWARD[info.name]
    act = rng.uniform(-1, 1, size=(T + 1, A)).astype(np.float32)
    act[-1] = 0
    rew = rng.uniform(lo, hi, size=T + 1).astype(np.float32)
    rew[0] = 0
    first = np.zeros(T + 1, bool)
    first[0] = True
    last = np.zeros(T + 1, bool)
    last[-1] = True
    return schema.make_episode(rng.normal(size=(T + 1, O)).astype(np.float32), act, rew, first,
                               last, np.zeros(T + 1, bool))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, dataset dir): 3 cartpole-balance + 3 probe-action episodes, 2 shards."""
    home = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(0)
    write_set(home, CART, [episode(rng, CART) for _ in range(3)], 0)
    write_set(home, PROBE, [episode(rng, PROBE) for _ in range(3)], 1)
    return home, run_build(make_plan(home, taskset_of("tst", [CART, PROBE]), num_shards=2))


def _read(path: Path) -> list[bytes]:
    from array_record.python.array_record_module import ArrayRecordReader
    r = ArrayRecordReader(str(path))
    try:
        return r.read_all()
    finally:
        r.close()


def _write(path: Path, blobs) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter
    w = ArrayRecordWriter(str(path), "group_size:1")
    for b in blobs:
        w.write(b)
    w.close()


def forge(ds: Path, home: Path, records=None, taskset=None, name=None,
          keep_dir: bool = False, extra_sources=()) -> Path:
    """A consistent forgery of dataset ``ds`` in ``home``'s store (with ``ds``'s
    source episode sets copied there): ``records(shards)`` edits {shard name: [pooled
    record dicts]} in place, ``taskset(ts)`` returns a new TaskSet; then every shard
    digest, size and count, the episode digests, the per-task statistics and the
    content hash are recomputed, so only the semantic checks can notice. Stored under
    datasets/<name>/<new hash> (``keep_dir``: under the original hash); extra_sources:
    more source episode-set directories to list in the manifest."""
    shutil.copytree(ds.parents[2] / "episodes", home / "episodes", dirs_exist_ok=True)
    raw = json.loads((ds / "manifest.json").read_text())
    for d in extra_sources:
        raw["sources"].append(d.name)
        raw["builder"]["source_sets"].append({"task": d.parent.name, "set_id": d.name,
                                              "content_hash": d.name, "episodes": 1})
    shards = {s["name"]: [schema.deserialize_episode(b) for b in _read(ds / s["name"])]
              for s in raw["shards"]}
    if records is not None:
        records(shards)
    ts = TaskSet.from_dict(raw["taskset"])
    if taskset is not None:
        ts = taskset(ts)
    name = name or raw["name"]
    work = home / "forging"
    work.mkdir(parents=True)
    files, digests, rets = [], [], {t: [] for t in ts.names}
    for sname, recs in shards.items():
        _write(work / sname, [schema.serialize_episode(r) for r in recs])
        files.append(FileEntry(sname, file_digest(work / sname), (work / sname).stat().st_size,
                               len(recs)))
        for r in recs:
            tid, ep = schema.unpad_episode(r)
            digests.append(schema.episode_digest(ep))
            rets[ts.names[tid]].append(schema.episode_return(ep))
    man = DatasetManifest(
        name=name, taskset=ts, per_task={t: TaskStats.from_returns(v) for t, v in rets.items()},
        shards=tuple(files), episode_digests=tuple(digests), sources=tuple(raw["sources"]),
        builder=raw["builder"], content_hash=dataset_content_hash(ts, digests),
        created=raw["created"])
    man.write(work)
    dest = home / "datasets" / name / (ds.name if keep_dir else man.content_hash)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(work, dest)
    return dest


def _first(shards, task_id: int):
    for recs in shards.values():
        for r in recs:
            if int(r["task_id"]) == task_id:
                return r
    raise AssertionError("no record of that task")


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


def test_build_pools_an_episode_held_by_two_sets_once(tmp_path, capsys):
    rng = np.random.default_rng(4)
    eps = [episode(rng, CART) for _ in range(5)]
    a = write_set(tmp_path, CART, eps[:3], 0)
    b = write_set(tmp_path, CART, eps[2:], 1)            # eps[2] is in both sets
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of("one", [CART]).to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5 episodes" in out and "1 duplicate episodes dropped" in out
    (entry,) = Store(tmp_path).list_datasets()
    man = DatasetManifest.load(entry.path)
    assert man.episode_count == 5
    (dup,) = man.builder["duplicates"]
    digest = schema.episode_digest(eps[2])
    first, second = sorted([a, b], key=lambda d: d.name)
    assert dup["digest"] == digest and dup["kept"].startswith(f"{CART.name}/{first.name}#")
    assert dup["dropped"] == [f"{CART.name}/{second.name}#{0 if second == b else 2}"]
    assert validate_dataset(entry.path).ok


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


# ---- 3. interrupted runs --------------------------------------------------------------------
class Killed(BaseException):
    """Stands in for SIGKILL in-process (test_kill.py sends the real one)."""


def _rows(run_dir: Path, drop=("wall_s",)) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def test_online_run_stopped_before_its_first_checkpoint_writes_no_row_twice(
        tiny_online_run, tmp_path, monkeypatch):
    from wmx.train_online import loop
    _, _, full_dir, _ = tiny_online_run

    def killed(*a, **k):
        raise Killed()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    with monkeypatch.context() as m:
        m.setattr(loop, "save_checkpoint", killed)
        with pytest.raises(Killed):
            loop.run(TINY_RC, run_dir, None, progress=False)
    assert len(_rows(run_dir)) == 2                  # the first chunk's rows, no checkpoint
    assert loop.run(TINY_RC, run_dir, None, progress=False)["finished"]
    assert _rows(run_dir) == _rows(full_dir)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _owned(parent: Path, hint: str, pid: int, prefix=temporaries.TMP, host=None, suffix="",
           folder=True) -> Path:
    host = host or temporaries._host()
    p = parent / f"{prefix}{hint}~{host}~{pid}~0123abcd{suffix}"
    p.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        p.mkdir()
        (p / "partial").write_text("x")
    else:
        p.write_text("x")
    return p


def test_stale_temporaries_of_dead_processes_are_swept_live_ones_kept(tmp_path):
    from wmx.evaluate.report import write_dir_atomically
    from wmx.runs.cli_common import sweep_stale
    store = Store(tmp_path).ensure_layout()
    run_dir = store.runs_dir / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    dead, live = _dead_pid(), os.getpid()
    stale = [_owned(store.runs_dir, "r2", dead),
             _owned(store.episodes_dir / "cartpole-balance", "episode-set", dead),
             _owned(store.datasets_dir / ".staging", "tst", dead, prefix=""),
             _owned(store.datasets_dir / ".staging", "tst", dead, prefix="", suffix=".result",
                    folder=False),
             _owned(store.datasets_dir / "tst", "x", dead),
             _owned(run_dir / "checkpoints", "000000000042", dead),
             _owned(run_dir, "metrics.csv", dead, folder=False),
             _owned(run_dir, "report", dead)]
    kept = [_owned(store.runs_dir, "r3", live),
            _owned(run_dir / "checkpoints", "000000000063", dead, host="another-host"),
            run_dir / "checkpoints" / ".tmp-000000000084-123"]     # an old name: no owner
    kept[-1].mkdir()
    assert Store(tmp_path).list_datasets() == [] and Store(tmp_path).list_episode_sets() == []
    sweep_stale(store, run_dir)                         # what each stage does when it starts
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
    write_dir_atomically(run_dir / "report", lambda d: (d / "report.md").write_text("r"))
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "report"]


def test_report_moved_aside_by_a_killed_evaluate_is_put_back(tmp_path):
    from wmx.evaluate.report import write_dir_atomically
    old = _owned(tmp_path, "report", _dead_pid(), prefix=temporaries.OLD)
    (old / "report.md").write_text("the old report")
    with pytest.raises(FileExistsError, match="--force"):
        write_dir_atomically(tmp_path / "report", lambda d: None)
    assert (tmp_path / "report" / "report.md").read_text() == "the old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_evaluate_force_with_out_naming_a_file_is_refused(tiny_online_run, tmp_path, capsys):
    _, _, run_dir, _ = tiny_online_run
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    assert evaluate_cli.main(["--run", str(run_dir), "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file, not a report directory" in err[0]
    assert out.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt"]


def test_metrics_row_cut_by_a_kill_is_dropped_on_resume(tmp_path):
    from wmx.metrics_csv import MetricsCSV
    path = tmp_path / "metrics.csv"
    m = MetricsCSV(path, ("seed", "kind", "updates", "loss"), "updates")
    m.append([{"seed": 0, "kind": "train", "updates": 2, "loss": 0.5}])
    with path.open("a") as f:
        f.write("0,train,4,0.2")                        # killed mid-row: no newline
    MetricsCSV(path, ("seed", "kind", "updates", "loss"), "updates", keep_until=10)
    assert path.read_text().splitlines() == ["seed,kind,updates,loss", "0,train,2,0.5"]


# ---- 4. bad input: one line, exit 2, nothing written ----------------------------------------
def _one_line(err: str) -> list[str]:
    return [ln for ln in err.strip().splitlines() if ln and not ln[:4].isdigit()]


@pytest.fixture(scope="module")
def offline_run(tiny_offline_dataset, tmp_path_factory):
    """An offline run directory (config.json only) on the tiny offline dataset."""
    from wmx.datasets.readers import open_dataset
    from wmx.runs.offline_config import OfflineRunConfig
    home, ds_dir = tiny_offline_dataset
    ds = open_dataset(ds_dir)
    rc = OfflineRunConfig(dataset=f"{ds.name}@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                          seeds=(0, 1), updates=6, batch_size=16, preset="tiny", log_every=2,
                          eval_every=4, checkpoint_every=2, eval_episodes=2)
    run_dir = tmp_path_factory.mktemp("offline-runs") / "runs" / "off"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(rc.to_json(), indent=1, sort_keys=True))
    return home, run_dir


ONLINE, OFFLINE, BEAM, WMX, EVALUATE = "train_online", "train_offline", "beam", "wmx", "evaluate"
BAD_INPUTS = [
    # (id, command, argv with {run} {offrun} {home} {file} {ts} {job} {tst}, expected text)
    ("resume-other-task", ONLINE, "--resume {run} --task probe-constant",
     "--task probe-constant conflicts with the run's saved task probe-action"),
    ("resume-other-seeds", ONLINE, "--resume {run} --seeds 0 1",
     "--seeds 0 1 conflicts with the run's saved seeds 0 3"),
    ("resume-fewer-env-steps", ONLINE, "--resume {run} --env-steps 60", "may only grow"),
    ("resume-extend-finished", ONLINE, "--resume {run} --env-steps 240", "has finished"),
    ("resume-other-batch", ONLINE, "--resume {run} --batch-size 8",
     "batch_size=8 conflicts with the run's saved batch_size=16 (the preset's)"),
    ("resume-other-set", ONLINE, "--resume {run} --set horizon=5", "horizon=5 conflicts"),
    ("resume-set-null", ONLINE, "--resume {run} --set discount=null",   # null is a change too
     "discount=None conflicts with the run's saved discount=0.95 (the preset's)"),
    ("resume-set-invalid", ONLINE, "--resume {run} --set horizon=null",  # as a new run says
     "TDMPC2Config field horizon=None: takes an integer (e.g. --set horizon=5)"),
    ("resume-set-typo", ONLINE, "--resume {run} --set horizn=3",
     "the run's agent config has no field 'horizn'; did you mean 'horizon'"),
    ("resume-name", ONLINE, "--resume {run} --name other", "--name does not apply"),
    ("seed-2**32", ONLINE, "--task probe-action --seeds 4294967296 --home {home}",
     "seeds must be integers in [0, 2**32)"),
    ("seed-negative", ONLINE, "--task probe-action --seeds -1 --home {home}",
     "seeds must be integers in [0, 2**32)"),
    ("home-is-a-file", ONLINE, "--task probe-action --preset tiny --home {file}",
     "is a file, not a directory"),
    ("offline-seed-2**32", OFFLINE, "--dataset {tst} --home {dshome} --seeds 4294967296 "
     "--dry-run", "seeds must be integers in [0, 2**32)"),
    ("offline-resume-fewer-updates", OFFLINE, "--resume {offrun} --updates 2", "may only grow"),
    ("offline-resume-other-batch", OFFLINE, "--resume {offrun} --batch-size 8",
     "--batch-size 8 conflicts with the run's saved batch_size 16"),
    ("offline-resume-set-invalid", OFFLINE, "--resume {offrun} --set horizon=abc",
     "TDMPC2Config field horizon='abc': takes an integer (e.g. --set horizon=5)"),
    ("offline-resume-other-tasks", OFFLINE, "--resume {offrun} --tasks cartpole-balance",
     "--tasks cartpole-balance conflicts with the run's saved train_tasks None"),
    ("beam-unknown-option", BEAM, "run {job} --taskset {ts} --home {dshome} --no_such_option=1",
     "unknown option(s) --no_such_option=1"),
    ("beam-unknown-runner", BEAM, "run {job} --taskset {ts} --home {dshome} "
     "--runner=NoSuchRunner", "unknown runner 'NoSuchRunner'"),
    ("dataset-info-home-file", WMX, "dataset info tst@latest --home {file}",
     "is a file, not a directory"),
    ("evaluate-out-file", EVALUATE, "--run {run} --out {file} --force",
     "is a file, not a report directory"),
]


def _main(cmd):
    return {ONLINE: online_cli.main, OFFLINE: offline_cli.main, BEAM: beam_main,
            WMX: wmx_main, EVALUATE: evaluate_cli.main}[cmd]


def _listing(*roots: Path) -> list[str]:
    return sorted(str(p) for r in roots for p in Path(r).rglob("*"))


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_nothing_written(case, tiny_online_run, offline_run,
                                                     tiny_offline_dataset, tmp_path, capsys):
    _, cmd, argv, text = case
    _, _, run_dir, _ = tiny_online_run
    dshome, offrun = offline_run
    (tmp_path / "afile").write_text("not a directory")
    ts = tmp_path / "ts.json"
    ts.write_text(json.dumps(json.loads((tiny_offline_dataset[1] / "manifest.json")
                                        .read_text())["taskset"]))
    subs = {"run": run_dir, "offrun": offrun, "home": tmp_path / "home",
            "file": tmp_path / "afile", "ts": ts, "dshome": dshome,
            "job": REPO / "pipelines" / "build_taskset.py", "tst": "tst@latest"}
    args = [a.format(**{k: str(v) for k, v in subs.items()}) for a in argv.split()]
    roots = (tmp_path, run_dir, offrun, dshome)
    before = _listing(*roots)
    capsys.readouterr()
    assert _main(cmd)(args) == 2
    lines = _one_line(capsys.readouterr().err)
    assert len(lines) == 1 and "error:" in lines[0] and text in lines[0], lines
    assert _listing(*roots) == before


HOME_FILE_COMMANDS = [
    # (id, command, argv with {home} for the data root and {x} for a path that does not exist)
    ("train_online", ONLINE, "--task probe-action --preset tiny --home {home}"),
    ("train_offline", OFFLINE, "--dataset tst@latest --preset tiny --home {home}"),
    ("evaluate-run", EVALUATE, "--run {x} --home {home}"),
    ("evaluate-runs", EVALUATE, "--runs {x} {x}2 --out {x}3 --home {home}"),
    ("runs-ls", WMX, "runs ls --home {home}"),
    ("runs-info", WMX, "runs info some-run --home {home}"),
    ("dataset-ls", WMX, "dataset ls --home {home}"),
    ("dataset-synth", WMX, "dataset synth --rows 100 --episode-length 8 --home {home}"),
    ("demo", WMX, "demo --dry-run --home {home}"),
    ("beam", BEAM, "run " + str(REPO / "pipelines" / "build_mt19.py") + " --home {home}"),
]


@pytest.mark.parametrize("below", [False, True], ids=["file", "below-a-file"])
@pytest.mark.parametrize("case", HOME_FILE_COMMANDS, ids=[c[0] for c in HOME_FILE_COMMANDS])
def test_home_that_is_a_file_is_one_line_before_anything(case, below, tmp_path, capsys):
    """--home FILE (or FILE/sub): every CLI says at once that FILE is a file, exit 2,
    nothing created (wmx.paths.wmx_home)."""
    _, cmd, argv = case
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    home = afile / "sub" if below else afile
    subs = {"home": str(home), "x": str(tmp_path / "nothing")}
    before = _listing(tmp_path)
    capsys.readouterr()
    assert _main(cmd)([a.format(**subs) for a in argv.split()]) == 2
    lines = _one_line(capsys.readouterr().err)
    assert len(lines) == 1 and f"{afile} is a file, not a directory" in lines[0], lines
    assert _listing(tmp_path) == before and afile.read_text() == "not a directory"


def test_wmx_home_from_the_environment_that_is_a_file(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("WMX_HOME", str(tmp_path / "afile"))
    assert wmx_main(["runs", "ls"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: WMX_HOME={tmp_path / 'afile'}: ") and "\n" not in err
    assert "is a file, not a directory" in err


def test_wmx_accepts_home_before_or_after_the_subcommand(built, capsys):
    home, ds = built
    for argv in (["dataset", "ls", "--home", str(home)], ["dataset", "--home", str(home), "ls"],
                 ["--home", str(home), "dataset", "ls"]):
        assert wmx_main(argv) == 0
        assert ds.name[:10] in capsys.readouterr().out


def test_offline_defaults_fit_each_other_and_resume_may_extend(offline_run, capsys):
    dshome, offrun = offline_run
    assert offline_cli.main(["--dataset", "tst@latest", "--home", str(dshome), "--updates",
                             "300", "--eval-every", "300", "--preset", "tiny",
                             "--batch-size", "16", "--dry-run"]) == 0
    assert "at the end (" in capsys.readouterr().out         # --eval-every = --updates
    before = (offrun / "config.json").read_text()
    assert offline_cli.main(["--resume", str(offrun), "--updates", "8", "--batch-size", "16",
                             "--dry-run"]) == 0                     # extend, same batch: fine
    assert "8 updates" in capsys.readouterr().out
    assert (offrun / "config.json").read_text() == before          # a dry run changes nothing


def test_extending_a_run_whose_replay_would_grow_is_refused(tmp_path, capsys):
    """TD-MPC2's replay holds the whole run when it is shorter than buffer_size, so a
    longer run has another replay: --env-steps cannot extend it exactly (the positive
    case, with a replay that keeps its size, is test_resume_extend.py, slow)."""
    from wmx.train_online import loop
    run_dir = tmp_path / "runs" / "part"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    assert not loop.run(TINY_RC, run_dir, None, progress=False, stop_after_chunks=1)["finished"]
    before = _listing(run_dir)
    capsys.readouterr()
    assert online_cli.main(["--resume", str(run_dir), "--env-steps", str(12 * TINY_T)]) == 2
    (line,) = _one_line(capsys.readouterr().err)
    assert "a longer run has a larger replay" in line and "start a new run" in line
    assert _listing(run_dir) == before


def test_counts_may_be_written_1e3(capsys):
    assert online_cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "1e3",
                            "--batch-size", "1_000", "--dry-run"]) == 0
    assert "1,000 env steps per seed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:                 # argparse's usage error
        online_cli.main(["--task", "probe-action", "--batch-size", "0.5", "--dry-run"])
    assert e.value.code == 2 and "'0.5' is not a whole number" in capsys.readouterr().err


# ---- 5. expected failures while running: one line, exit 1 ----------------------------------
def test_read_only_home_is_one_line(tmp_path, monkeypatch, capsys):
    import pathlib
    home = tmp_path / "ro"
    real = pathlib.Path.mkdir

    def mkdir(self, *a, **k):
        if str(self).startswith(str(home)):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)
    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    assert online_cli.main([*TINY_ONLINE_ARGV, "--home", str(home)]) == 2
    (line,) = _one_line(capsys.readouterr().err)
    assert "cannot write to the data root" in line and "Read-only file system" in line


def _no_temporaries(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.startswith((".tmp-", ".old-"))]


def test_full_disk_at_the_first_checkpoint_leaves_nothing(tmp_path, monkeypatch, capsys):
    import collections
    import wmx.checkpoint as ck
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 0))
    assert online_cli.main([*TINY_ONLINE_ARGV, "--home", str(tmp_path), "--name", "r"]) == 1
    (line,) = _one_line(capsys.readouterr().err)
    assert line.startswith("train_online: error: no space left on the device writing")
    assert "run the same command again" in line
    assert not (tmp_path / "runs" / "r").exists() and _no_temporaries(tmp_path)


def test_full_disk_later_keeps_the_run_to_resume(tmp_path, monkeypatch, capsys):
    import wmx.checkpoint as ck
    real, calls = ck.save_checkpoint, []

    def save(run_dir, step, *a, **k):
        calls.append(step)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(run_dir))
        return real(run_dir, step, *a, **k)
    from wmx.train_online import loop
    monkeypatch.setattr(loop, "save_checkpoint", save)
    assert online_cli.main([*TINY_ONLINE_ARGV, "--home", str(tmp_path), "--name", "r"]) == 1
    (line,) = _one_line(capsys.readouterr().err)
    run_dir = tmp_path / "runs" / "r"
    assert "no space left" in line and f"train_online --resume {run_dir}" in line
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"{TINY_T + 1:012d}"]
    assert _no_temporaries(tmp_path)


def test_out_of_memory_is_one_line_and_leaves_no_run(tmp_path, monkeypatch, capsys):
    import jax
    from wmx.train_online import loop

    def chunk_fn(*a, **k):
        def oom(*a, **k):
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory allocating 96000000000 bytes.")
        return oom
    monkeypatch.setattr(loop.program, "make_chunk_fn", chunk_fn)
    assert online_cli.main([*TINY_ONLINE_ARGV, "--home", str(tmp_path), "--name", "r"]) == 1
    (line,) = _one_line(capsys.readouterr().err)
    assert "out of memory" in line and "lower --batch-size" in line
    assert not (tmp_path / "runs" / "r").exists()


# ---- 6. non-finite values stop the run ------------------------------------------------------
def test_nan_in_the_parameters_stops_the_online_run_keeping_the_last_checkpoint(
        tmp_path, monkeypatch):
    import jax
    import jax.numpy as jnp
    from wmx.checkpoint import list_checkpoints
    from wmx.runs.finite import NonFiniteError
    from wmx.train_online import loop
    real = loop.program.make_chunk_fn

    def poisoned(rc, env):
        fn, calls = real(rc, env), []

        def chunk(carries, ticks):
            carries, rows = fn(carries, ticks)
            calls.append(1)
            if len(calls) == 3:                  # the third chunk diverges
                leaves, tree = jax.tree_util.tree_flatten(carries.agent)
                leaves[0] = leaves[0] * jnp.nan
                carries = carries._replace(agent=jax.tree_util.tree_unflatten(tree, leaves))
            return carries, rows
        return chunk
    monkeypatch.setattr(loop.program, "make_chunk_fn", poisoned)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    with pytest.raises(NonFiniteError) as e:
        loop.run(TINY_RC, run_dir, None, progress=False)
    msg = str(e.value)
    assert f"env steps {2 * TINY_T:,d}..{3 * TINY_T:,d}" in msg and "state " in msg
    assert "seeds [0, 3]" in msg
    ckpts = list_checkpoints(run_dir)
    assert [int(p.name) for p in ckpts] == [TINY_T + 1, 2 * (TINY_T + 1)]
    assert f"last good checkpoint, {ckpts[-1]}, is kept" in msg
    assert max(int(r["agent_steps"]) for r in _rows(run_dir)) == 2 * TINY_T


def test_nan_in_a_batch_stops_the_offline_run_naming_the_updates_and_terms(
        tiny_offline_dataset, tmp_path, capsys):
    _, ds = tiny_offline_dataset

    def nan_obs(shards):                         # every cartpole-balance row: half the batch
        for recs in shards.values():
            for r in recs:
                if int(r["task_id"]) == 0:
                    r["obs"][:, 0] = np.nan
    forge(ds, tmp_path, records=nan_obs)
    assert offline_cli.main(["--dataset", "tst@latest", "--home", str(tmp_path), "--name", "nan",
                             "--skip-validation", *TINY_OFFLINE_ARGS]) == 1
    (line,) = _one_line(capsys.readouterr().err)
    assert line.startswith("train_offline: error: non-finite values in updates 0..2: metric ")
    assert "no checkpoint was saved before it" in line and "wmx dataset validate" in line
    assert not (tmp_path / "runs" / "nan").exists()
